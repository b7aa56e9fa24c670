//! k6-style pass/fail thresholds: `--threshold 'p99<250ms' --threshold 'failed<1%'`.
//! Evaluated on the measured results (warm-up excluded); any failure exits with 99, as k6
//! does, so CI can gate on latency. Stored in the plan so `kiln report` re-checks them.

use std::fmt;

use kiln_load::plan::parse_duration;
use kiln_record::PhaseSummary;

/// What a threshold measures.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Metric {
    /// Latency quantile (0..=1).
    Quantile(f64),
    Max,
    Min,
    Mean,
    /// Share of requests that failed (no response, or status >= 400), 0..=1.
    FailedRatio,
    /// Completed requests per second.
    Throughput,
    /// Open model: arrivals never sent.
    Unsent,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

/// One parsed threshold, e.g. `p99<250ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    pub text: String,
    metric: Metric,
    op: Op,
    /// In the metric's unit: microseconds, a ratio, requests/s or a count.
    limit: f64,
}

/// A threshold checked against results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThresholdResult {
    pub threshold: String,
    pub ok: bool,
    /// The measured value in the metric's unit (us for latencies).
    pub actual: f64,
    pub actual_text: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("bad threshold '{text}': {why} (e.g. 'p99<250ms', 'p(99.9)<1s', 'max<2s', 'failed<1%', 'rate>=1000')")]
pub struct ThresholdError {
    text: String,
    why: String,
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn parse_metric(name: &str) -> Option<Metric> {
    let name = name.trim().to_ascii_lowercase();
    let quantile = |pct: &str| {
        pct.parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
            .map(|p| Metric::Quantile(p / 100.0))
    };
    match name.as_str() {
        "max" => Some(Metric::Max),
        "min" => Some(Metric::Min),
        "mean" | "avg" => Some(Metric::Mean),
        "med" | "median" => Some(Metric::Quantile(0.5)),
        "failed" | "errors" | "error_rate" | "http_req_failed" => Some(Metric::FailedRatio),
        "rate" | "rps" | "throughput" => Some(Metric::Throughput),
        "unsent" => Some(Metric::Unsent),
        _ => {
            if let Some(inner) = name.strip_prefix("p(").and_then(|r| r.strip_suffix(')')) {
                quantile(inner)
            } else {
                name.strip_prefix('p').and_then(quantile)
            }
        }
    }
}

impl Threshold {
    pub fn parse(text: &str) -> Result<Self, ThresholdError> {
        let err = |why: &str| ThresholdError {
            text: text.to_string(),
            why: why.to_string(),
        };
        let (at, op, len) = [("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)]
            .iter()
            .find_map(|(sym, op)| text.find(sym).map(|i| (i, *op, sym.len())))
            .ok_or_else(|| err("no comparison (<, <=, >, >=)"))?;
        let metric = parse_metric(&text[..at]).ok_or_else(|| err("unknown metric"))?;
        let value = text[at + len..].trim();
        let limit = match metric {
            Metric::Quantile(_) | Metric::Max | Metric::Min | Metric::Mean => {
                // A bare number is milliseconds, as in k6.
                match value.parse::<f64>() {
                    Ok(ms) if ms.is_finite() && ms >= 0.0 => ms * 1000.0,
                    _ => parse_duration(value)
                        .map_err(|_| err("the limit is not a duration"))?
                        .as_micros() as f64,
                }
            }
            Metric::FailedRatio => match value.strip_suffix('%') {
                Some(pct) => {
                    pct.trim()
                        .parse::<f64>()
                        .map_err(|_| err("the limit is not a percentage"))?
                        / 100.0
                }
                None => value
                    .parse::<f64>()
                    .map_err(|_| err("the limit is not a ratio"))?,
            },
            Metric::Throughput | Metric::Unsent => value
                .parse::<f64>()
                .map_err(|_| err("the limit is not a number"))?,
        };
        if !limit.is_finite() || limit < 0.0 {
            return Err(err("the limit must be a non-negative number"));
        }
        Ok(Self {
            text: text.trim().to_string(),
            metric,
            op,
            limit,
        })
    }

    pub fn check(&self, results: &PhaseSummary) -> ThresholdResult {
        let h = &results.totals.latency;
        let actual = match self.metric {
            Metric::Quantile(q) => h.quantile_us(q) as f64,
            Metric::Max => h.max_us() as f64,
            Metric::Min => h.min_us() as f64,
            Metric::Mean => h.mean_us(),
            Metric::FailedRatio => results.failed_ratio(),
            Metric::Throughput => results.throughput(),
            Metric::Unsent => results.unsent() as f64,
        };
        let ok = match self.op {
            Op::Lt => actual < self.limit,
            Op::Le => actual <= self.limit,
            Op::Gt => actual > self.limit,
            Op::Ge => actual >= self.limit,
        };
        let actual_text = match self.metric {
            Metric::FailedRatio => format!("{:.2}%", actual * 100.0),
            Metric::Throughput => format!("{actual:.1}/s"),
            Metric::Unsent => format!("{actual}"),
            _ => crate::format::us_f(actual),
        };
        ThresholdResult {
            threshold: self.text.clone(),
            ok,
            actual,
            actual_text,
        }
    }
}

/// Checks every threshold stored in a plan record against the results.
pub fn check_all(plan: &serde_json::Value, results: &PhaseSummary) -> Vec<ThresholdResult> {
    plan["thresholds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str())
        .filter_map(|t| Threshold::parse(t).ok())
        .map(|t| t.check(results))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_record::SecondRecord;

    fn results() -> PhaseSummary {
        let mut s = SecondRecord {
            requests: 100,
            ..Default::default()
        };
        s.status.insert(200, 98);
        s.status.insert(503, 2);
        for us in 1..=100u64 {
            s.latency.record_us(us * 1_000);
        }
        let mut p = PhaseSummary::new("run");
        p.add_second(&s);
        p
    }

    #[test]
    fn thresholds_parse_in_k6_and_short_forms() {
        assert_eq!(Threshold::parse("p99<250ms").unwrap().limit, 250_000.0);
        assert_eq!(Threshold::parse("p(99.9) < 1s").unwrap().limit, 1_000_000.0);
        assert_eq!(Threshold::parse("p95<200").unwrap().limit, 200_000.0);
        assert_eq!(Threshold::parse("failed<1%").unwrap().limit, 0.01);
        assert_eq!(Threshold::parse("rate>=1000").unwrap().op, Op::Ge);
        for bad in [
            "p99",
            "p101<1s",
            "latency<1s",
            "failed<lots",
            "max<-1",
            "p99<soon",
        ] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn thresholds_pass_and_fail_on_known_results() {
        let r = results();
        let check = |t: &str| Threshold::parse(t).unwrap().check(&r).ok;
        assert!(check("p50<=51ms"));
        assert!(!check("p99<90ms"));
        assert!(check("p99<101ms"));
        assert!(check("failed<3%"));
        assert!(!check("failed<2%"));
        assert!(check("max<=101ms"));
        assert!(!check("rate>1000"));
    }

    proptest::proptest! {
        #[test]
        fn no_text_panics_the_threshold_parser(text in ".{0,40}") {
            let _ = Threshold::parse(&text);
        }
    }
}
