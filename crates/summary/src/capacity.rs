//! What `kiln capacity` (and `kiln report` of a capacity directory) shows of a search: its
//! steps as a table, the capacity with its interval and what broke past it, the knee, and
//! the findings at the step past the edge. Built from `capacity.json` alone.

use kiln_record::schema::capacity::{
    CapacityRecord, CapacityStep, SearchMode, SearchStatus, StepKind,
};
use kiln_record::text::safe_text;

/// A rate as shown: three figures, whole above 100.
pub fn rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

/// One step's line of the table.
pub fn step_line(s: &CapacityStep) -> String {
    let offered = match (s.kind, s.offered_rate, s.connections) {
        (_, Some(r), _) => rate(r),
        (_, None, Some(c)) => format!("c={c}"),
        _ => "-".into(),
    };
    let kind = match s.kind {
        StepKind::Probe => "probe",
        StepKind::Alone => "alone",
        StepKind::Search => "",
        StepKind::Confirm => "again",
        StepKind::Repeat => "repeat",
        StepKind::Sweep => "level",
    };
    let cpu = s
        .target_cores
        .map_or("-".to_string(), |c| format!("{c:.2}"));
    let verdict = if s.kind == StepKind::Alone {
        "one at a time".to_string()
    } else if s.kind == StepKind::Probe {
        "closed model".to_string()
    } else if s.kept {
        "kept".to_string()
    } else {
        let broke: Vec<String> = s
            .broken
            .iter()
            .map(|b| format!("{} ({})", safe_text(&b.slo), safe_text(&b.actual)))
            .collect();
        format!(
            "broke {}{}",
            broke.join(", "),
            if s.ended_early.is_some() {
                ", ended early"
            } else {
                ""
            }
        )
    };
    let notes = [
        (s.starved && s.believed, "kiln starved"),
        (!s.believed, "kiln starved: run again"),
        (s.few_requests, "few requests"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect::<Vec<_>>()
    .join(", ");
    format!(
        "{:>3} {:<6} {:>8} {:>10.1} {:>9} {:>9} {:>7.2}% {:>6}  {verdict}{}",
        s.n,
        kind,
        offered,
        s.throughput,
        ms(s.p50_ms),
        ms(s.p99_ms),
        s.failed_ratio * 100.0,
        cpu,
        if notes.is_empty() {
            String::new()
        } else {
            format!(" [{notes}]")
        }
    )
}

/// The table's head.
pub const STEPS_HEAD: &str =
    "  # step    offered answered/s       p50       p99  failed    cpu  verdict";

/// The whole search as text.
pub fn text(record: &CapacityRecord, dir: &str) -> String {
    let mut out = String::new();
    let line = |out: &mut String, l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(
        &mut out,
        format!(
            "Capacity search of {} keeping {}",
            safe_text(&record.target),
            safe_text(&record.slos.join(", "))
        ),
    );
    line(&mut out, STEPS_HEAD.to_string());
    for s in &record.steps {
        line(&mut out, step_line(s));
    }
    let sweep = record.mode == SearchMode::Connections;
    let best_kept = record
        .steps
        .iter()
        .filter(|s| s.kept && s.connections.is_some())
        .max_by(|a, b| a.throughput.total_cmp(&b.throughput));
    let edge = match (record.max_rate, record.first_broken_rate) {
        _ if sweep => match best_kept {
            Some(s) => format!(
                "{} req/s answered within the SLOs at most, with {} connections",
                rate(s.throughput),
                s.connections.unwrap_or(0)
            ),
            None => "no level of the sweep kept the SLOs".to_string(),
        },
        (Some(lo), Some(hi)) => format!(
            "{} req/s: every SLO kept at {} req/s, {} broke at {} req/s",
            rate(lo),
            rate(lo),
            broken_text(record),
            rate(hi)
        ),
        (Some(lo), None) => format!(
            "above {} req/s: every step kept the SLOs{}",
            rate(lo),
            if record.status == SearchStatus::AboveMaxRate {
                " up to --max-rate"
            } else {
                ""
            }
        ),
        (None, Some(hi)) => format!(
            "below {} req/s: no rate tried kept the SLOs ({} broke there)",
            rate(hi),
            broken_text(record)
        ),
        (None, None) => "not found: no step of the search ran".to_string(),
    };
    line(&mut out, format!("Capacity   {edge}"));
    let status = match record.status {
        SearchStatus::Complete => None,
        SearchStatus::BudgetSpent => Some(format!(
            "the budget ran out after {:.0} s: the capacity is within the interval above, \
             not to the {:.0}% asked",
            record.elapsed_s,
            record.precision * 100.0
        )),
        SearchStatus::Interrupted => Some("interrupted: the steps so far are above".into()),
        SearchStatus::Failed => Some(format!(
            "failed: {}",
            safe_text(
                record
                    .status_reason
                    .as_deref()
                    .unwrap_or("a step could not run")
            )
        )),
        SearchStatus::Running => Some("still running (or its writer was stopped)".into()),
        SearchStatus::AboveMaxRate | SearchStatus::NothingKept => None,
    };
    if let Some(status) = status {
        line(&mut out, format!("Search     {status}"));
    }
    line(
        &mut out,
        format!(
            "Searched   {} steps, {} requests in {:.0} s",
            record.steps.len(),
            record.requests_total,
            record.elapsed_s
        ),
    );
    if let Some(f) = &record.usl {
        let peak = match (f.peak_concurrency, f.peak_throughput) {
            (Some(n), Some(x)) => format!("; peak about {n:.0} at once, {}/s", rate(x)),
            _ => "; no peak (no coherency cost)".to_string(),
        };
        line(
            &mut out,
            format!(
                "Scaling    USL over {} levels: λ={}/s, σ={:.3} (contention), κ={:.5} \
                 (coherency), R²={:.2}{peak}",
                f.points,
                rate(f.lambda),
                f.sigma,
                f.kappa,
                f.r_squared
            ),
        );
    }
    if let Some(k) = &record.knee {
        line(&mut out, format!("Knee       {}", safe_text(&k.text)));
        line(&mut out, format!("Try        {}", safe_text(&k.fix)));
    }
    if let Some(edge) = record.edge_step().filter(|s| !s.findings.is_empty()) {
        line(
            &mut out,
            format!(
                "Findings at {} req/s ({}):",
                rate(edge.offered_rate.unwrap_or(0.0)),
                safe_text(&edge.dir)
            ),
        );
        for f in &edge.findings {
            line(
                &mut out,
                format!(
                    "  {:<6} {}: {}",
                    f.severity.as_str().to_uppercase(),
                    safe_text(&f.rule),
                    safe_text(&f.title)
                ),
            );
        }
    }
    line(&mut out, format!("Record     {}", safe_text(dir)));
    out
}

fn broken_text(record: &CapacityRecord) -> String {
    let broke: Vec<String> = record
        .broken_by
        .iter()
        .map(|b| format!("{} ({})", safe_text(&b.slo), safe_text(&b.actual)))
        .collect();
    if broke.is_empty() {
        "an SLO".into()
    } else {
        broke.join(", ")
    }
}
