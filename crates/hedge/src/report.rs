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
}

impl Report {
    pub fn new(responses: u64, seconds: usize, fanout: u32) -> Self {
        Self {
            version: 1,
            responses,
            seconds,
            fanout,
            options: Vec::new(),
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
    let head: Vec<String> = report
        .options
        .iter()
        .map(|o| format!("hedged at {}", o.at))
        .collect();
    let width = head.iter().map(String::len).max().unwrap_or(0).max(10);
    let _ = write!(out, "  {:<15}{:>10}", "", "recorded");
    for h in &head {
        let _ = write!(out, "  {h:>width$}");
    }
    out.push('\n');
    for (i, (label, before)) in first.prediction.before.labelled().iter().enumerate() {
        let _ = write!(out, "  {label:<15}{:>10}", us(*before));
        for o in &report.options {
            let _ = write!(out, "  {:>width$}", us(o.prediction.after.labelled()[i].1));
        }
        out.push('\n');
    }
    let _ = write!(out, "  {:<15}{:>10}", "extra requests", "");
    for o in &report.options {
        let extra = format!("{:.1}%", 100.0 * o.prediction.extra_requests);
        let _ = write!(out, "  {extra:>width$}");
    }
    out.push_str("\n\n");
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
