//! What `kiln run --hedge` did: second copies sent and won, the extra load, and the run's
//! latency with hedging beside its first copies' own latency.

use kiln_record::schema::plan::PlanRecord;
use kiln_record::{HedgeSecond, SecondRecord};
use serde::Serialize;

use crate::Quantiles;

/// A hedged run's figures, from its merged seconds.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    pub version: u32,
    /// The delay as asked (`p95`, `20.0ms`) and the one in force at the end, in µs.
    pub delay: String,
    pub delay_us_at_end: u64,
    /// The budget: second copies per first copy at most.
    pub cap: f64,
    pub first_copies: u64,
    pub hedges: u64,
    pub won: u64,
    /// Second copies per first copy.
    pub extra_share: f64,
    /// Requests due a second copy that got none: the budget had no token, or hedging was
    /// paused because copies were failing.
    pub over_budget: u64,
    pub paused: u64,
    /// Copies cut because the other copy answered while they were out.
    pub cut: u64,
    /// The requests' latency (the first answer, from the scheduled time of the first copy).
    pub hedged: Quantiles,
    /// The first copies' own latency over the same run: what it was without the hedges.
    pub first_copy: Quantiles,
    pub targets: Vec<MeasuredTarget>,
}

/// One target's share.
#[derive(Clone, Debug, Serialize)]
pub struct MeasuredTarget {
    pub url: String,
    pub first_copies: u64,
    pub hedges: u64,
    pub won: u64,
}

/// The hedged figures of a phase's merged seconds, with the plan as `run.json` records it
/// (`plan.hedge`: delay, cap, replicas); `None` for a run without hedging.
pub fn measured(totals: &SecondRecord, plan: &PlanRecord) -> Option<Measured> {
    let h: &HedgeSecond = totals.hedge.as_ref()?;
    let load = plan.load();
    let hedge = load.and_then(|p| p.hedge.as_ref());
    let mut urls = vec![load.map_or("the URL".to_string(), |p| p.url.clone())];
    urls.extend(hedge.into_iter().flat_map(|h| h.replicas.iter().cloned()));
    let targets = h
        .targets
        .iter()
        .enumerate()
        .map(|(i, t)| MeasuredTarget {
            url: urls
                .get(i)
                .cloned()
                .unwrap_or_else(|| format!("target {}", i + 1)),
            first_copies: t.first,
            hedges: t.hedges,
            won: t.won,
        })
        .collect();
    Some(Measured {
        version: 1,
        delay: hedge.map_or("?".to_string(), |h| h.delay.clone()),
        delay_us_at_end: h.delay_us,
        cap: hedge.map_or(0.0, |h| h.cap),
        first_copies: h.first_sent(),
        hedges: h.sent,
        won: h.won,
        extra_share: h.extra_share(),
        over_budget: h.over_budget,
        paused: h.paused,
        cut: h.cut,
        hedged: Quantiles::of(&totals.latency),
        first_copy: Quantiles::of(&h.first_copy),
        targets,
    })
}

/// The summary's section: counts, then hedged latency beside first copies alone.
pub fn measured_text(m: &Measured) -> String {
    use std::fmt::Write;
    let us = kiln_record::text::us;
    let pct = |part: u64, whole: u64| match whole {
        0 => "0%".to_string(),
        w => format!("{:.1}%", 100.0 * part as f64 / w as f64),
    };
    let mut out = String::new();
    let delay = if m.delay.starts_with('p') && m.delay_us_at_end > 0 {
        format!("{} ({} at the end)", m.delay, us(m.delay_us_at_end))
    } else {
        m.delay.clone()
    };
    let _ = writeln!(
        out,
        "Hedging    at {delay}: {} second copies for {} requests ({} extra load, cap {:.1}%), {} answered first ({})",
        m.hedges,
        m.first_copies,
        pct(m.hedges, m.first_copies),
        100.0 * m.cap,
        m.won,
        pct(m.won, m.hedges),
    );
    if m.cut > 0 {
        let _ = writeln!(
            out,
            "           {} copies cut when the other copy answered (their connections closed; a first copy cut has no latency of its own below)",
            m.cut
        );
    }
    if m.over_budget > 0 || m.paused > 0 {
        let _ = writeln!(
            out,
            "           not hedged: {} over the budget, {} while copies were failing (hedging paused)",
            m.over_budget, m.paused
        );
    }
    let _ = writeln!(
        out,
        "           {:<12}{:>10}{:>14}",
        "", "hedged", "first copies"
    );
    for ((label, hedged), (_, first)) in m.hedged.labelled().iter().zip(m.first_copy.labelled()) {
        let _ = writeln!(
            out,
            "           {label:<12}{:>10}{:>14}",
            us(*hedged),
            us(first)
        );
    }
    if m.targets.len() > 1 {
        for t in &m.targets {
            let _ = writeln!(
                out,
                "           {}: {} first copies, {} second copies, {} won",
                kiln_record::text::safe_text(&t.url),
                t.first_copies,
                t.hedges,
                t.won
            );
        }
    }
    let _ = writeln!(
        out,
        "           latency counts from each request's first copy (its scheduled time in the open model); the losing copy is read to its end and discarded (its connection kept), so the first copies' own latency is known"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_record::TargetHedge;

    #[test]
    fn figures_come_from_the_seconds_and_urls_from_the_plan() {
        let mut totals = SecondRecord::default();
        totals.latency.record_n_us(1_000, 990);
        totals.latency.record_n_us(21_000, 10);
        let mut h = HedgeSecond {
            sent: 50,
            won: 45,
            delay_us: 20_000,
            targets: vec![
                TargetHedge {
                    first: 500,
                    hedges: 20,
                    won: 18,
                },
                TargetHedge {
                    first: 500,
                    hedges: 30,
                    won: 27,
                },
            ],
            ..Default::default()
        };
        h.first_copy.record_n_us(1_000, 950);
        h.first_copy.record_n_us(61_000, 50);
        totals.hedge = Some(h);
        let workload = kiln_record::schema::plan::Model::Closed {
            connections: 1,
            think_time: std::time::Duration::ZERO,
            ramp_up: std::time::Duration::ZERO,
            stages: Vec::new(),
        };
        let mut load =
            kiln_record::schema::plan::LoadPlanRecord::new("http://a/", workload, 1.0, 1);
        load.hedge = Some(kiln_record::schema::plan::HedgePlanRecord {
            delay: "20.0ms".into(),
            cap: 0.1,
            replicas: vec!["http://b/\u{1b}[31m".into()],
        });
        let plan = PlanRecord::from(load);
        let m = measured(&totals, &plan).unwrap();
        assert_eq!((m.first_copies, m.hedges, m.won), (1000, 50, 45));
        assert!((m.extra_share - 0.05).abs() < 1e-12);
        assert!(m.first_copy.p99_us >= 60_000 && m.hedged.p99_us < 22_000);
        let text = measured_text(&m);
        assert!(text.contains("50 second copies for 1000 requests (5.0% extra load, cap 10.0%), 45 answered first (90.0%)"), "{text}");
        assert!(
            text.contains("http://a/: 500 first copies, 20 second copies, 18 won"),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}'),
            "a URL's control characters stay text: {text}"
        );
        assert!(measured(&SecondRecord::default(), &plan).is_none());
    }
}
