//! The what-if as `kiln hedge` prints it: one column per delay beside the recorded latency.

use serde::Serialize;

use crate::{Independence, Prediction};

/// The what-if at one delay.
#[derive(Clone, Debug, Serialize)]
pub struct HedgeOption {
    /// The delay as the user gave it (`p95`, `5ms`).
    pub at: String,
    pub prediction: Prediction,
    /// How the requests slower than the delay spread over the run's seconds (absent with too
    /// few seconds or slow requests to judge).
    pub spread: Option<Independence>,
    /// The prediction holds: the slow requests came independently (or could not be judged).
    pub holds: bool,
}

/// What hedging would do to one recorded run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub version: u32,
    pub responses: u64,
    pub seconds: usize,
    pub fanout: u32,
    pub options: Vec<HedgeOption>,
    /// The run was itself hedged (`kiln run --hedge`): what it measured. The what-if is then
    /// computed from its first copies' own latency, so the two can be held side by side.
    pub hedged_run: Option<crate::Measured>,
}

impl Report {
    pub fn new(responses: u64, seconds: usize, fanout: u32) -> Self {
        Self {
            version: 1,
            responses,
            seconds,
            fanout,
            options: Vec::new(),
            hedged_run: None,
        }
    }

    pub fn add(&mut self, at: String, prediction: Prediction, spread: Option<Independence>) {
        let holds = spread.as_ref().is_none_or(|s| s.independent);
        self.options.push(HedgeOption {
            at,
            prediction,
            spread,
            holds,
        });
    }
}

/// The report as a table and a sentence per delay.
pub fn to_text(report: &Report) -> String {
    use std::fmt::Write;
    let us = kiln_record::text::us;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Hedged requests, what-if: {} responses over {} s{}",
        report.responses,
        report.seconds,
        if report.fanout > 1 {
            format!(", each request waiting for {} sub-requests", report.fanout)
        } else {
            String::new()
        }
    );
    let Some(first) = report.options.first() else {
        return out;
    };
    let mut head: Vec<String> = report
        .options
        .iter()
        .map(|o| format!("hedged at {}", o.at))
        .collect();
    let measured = report.hedged_run.as_ref();
    if let Some(m) = measured {
        head.push(format!("measured at {}", m.delay));
    }
    let width = head.iter().map(String::len).max().unwrap_or(0).max(10);
    let recorded = if measured.is_some() {
        "first copies"
    } else {
        "recorded"
    };
    let _ = write!(out, "  {:<15}{:>12}", "", recorded);
    for h in &head {
        let _ = write!(out, "  {h:>width$}");
    }
    out.push('\n');
    for (i, (label, before)) in first.prediction.before.labelled().iter().enumerate() {
        let _ = write!(out, "  {label:<15}{:>12}", us(*before));
        for o in &report.options {
            let _ = write!(out, "  {:>width$}", us(o.prediction.after.labelled()[i].1));
        }
        if let Some(m) = measured {
            let _ = write!(out, "  {:>width$}", us(m.hedged.labelled()[i].1));
        }
        out.push('\n');
    }
    let _ = write!(out, "  {:<15}{:>12}", "extra requests", "");
    let extras = report.options.iter().map(|o| o.prediction.extra_requests);
    for extra in extras.chain(measured.map(|m| m.extra_share)) {
        let extra = format!("{:.1}%", 100.0 * extra);
        let _ = write!(out, "  {extra:>width$}");
    }
    out.push_str("\n\n");
    if let Some(m) = measured {
        let _ = writeln!(
            out,
            "  This run was hedged at {} (kiln run --hedge): the what-if is from its first copies' own latency, beside what the hedged requests measured.",
            m.delay
        );
    }
    for o in &report.options {
        let sentence = o.prediction.sentence(&o.at);
        if o.holds {
            let _ = writeln!(out, "  {sentence}");
        } else {
            let _ = writeln!(out, "  were the slow requests independent, {sentence}");
        }
        match &o.spread {
            Some(spread) => {
                let _ = writeln!(out, "    {}", spread.sentence());
            }
            None => {
                let _ = writeln!(
                    out,
                    "    too few seconds or slow requests to tell whether they came independently"
                );
            }
        }
    }
    out.push_str(
        "\nThe what-if assumes the copies' latencies are independent (a second copy to another \
         replica, or slow requests that are random) and that the extra requests do not slow \
         the server; the loser is cancelled.\n",
    );
    out
}
