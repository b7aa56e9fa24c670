//! A plan run's figures per request name: JMeter's aggregate report (label, samples,
//! error %, median, 90/95/99% lines, max, throughput), with kiln's checks beside it.

use std::fmt::Write as _;

use kiln_record::{NameSecond, PhaseSummary};
use serde_json::{json, Value};

use kiln_record::text::{safe_text, us};

/// Labels longer than this are cut in the table (the JSON keeps them whole).
const LABEL_WIDTH: usize = 36;

fn error_ratio(n: &NameSecond) -> f64 {
    if n.requests == 0 {
        0.0
    } else {
        n.failed as f64 / n.requests as f64
    }
}

fn cut(label: &str) -> String {
    let text = safe_text(label);
    if text.chars().count() <= LABEL_WIDTH {
        return text;
    }
    let mut short: String = text.chars().take(LABEL_WIDTH - 1).collect();
    short.push('…');
    short
}

/// One row of the aggregate table: a request name's figures (latencies in µs, None without
/// responses), or the total's.
#[derive(Clone, Debug, PartialEq)]
pub struct NameRow {
    pub label: String,
    pub samples: u64,
    pub error_pct: f64,
    /// Median, 90%, 95% and 99% lines, and the maximum.
    pub lines_us: Option<[u64; 5]>,
    pub throughput: f64,
    pub checks: u64,
    pub checks_failed: u64,
    pub extractions_failed: u64,
}

impl NameRow {
    fn of(label: &str, n: &NameSecond, secs: f64) -> Self {
        let h = &n.latency;
        Self {
            label: label.to_string(),
            samples: n.requests,
            error_pct: error_ratio(n) * 100.0,
            lines_us: (!h.is_empty()).then(|| {
                [
                    h.quantile_us(0.5),
                    h.quantile_us(0.9),
                    h.quantile_us(0.95),
                    h.quantile_us(0.99),
                    h.max_us(),
                ]
            }),
            throughput: if secs > 0.0 {
                n.requests as f64 / secs
            } else {
                0.0
            },
            checks: n.checks,
            checks_failed: n.checks_failed,
            extractions_failed: n.extractions_failed,
        }
    }
}

/// Each name's row in the record's order, then the TOTAL row (none for a run without names).
pub fn rows(total: &PhaseSummary) -> Vec<NameRow> {
    let t = &total.totals;
    if t.names.is_empty() {
        return Vec::new();
    }
    let secs = total.duration_secs();
    let mut all = NameSecond::default();
    let mut rows: Vec<NameRow> = t
        .names
        .iter()
        .map(|(name, n)| {
            all.merge(n);
            NameRow::of(name, n, secs)
        })
        .collect();
    rows.push(NameRow::of("TOTAL", &all, secs));
    rows
}

/// The aggregate table, or nothing for a run without names.
pub fn to_text(total: &PhaseSummary) -> String {
    let t = &total.totals;
    let mut out = String::new();
    if t.names.is_empty() && t.iterations == 0 {
        return out;
    }
    let secs = total.duration_secs();
    let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let _ = writeln!(
        out,
        "Iterations {} ({:.1}/s); checks {} run, {} failed ({:.2}%)",
        t.iterations,
        per_s(t.iterations),
        t.checks,
        t.checks_failed,
        if t.checks == 0 {
            0.0
        } else {
            t.checks_failed as f64 / t.checks as f64 * 100.0
        }
    );
    let _ = writeln!(
        out,
        "\n{:<LABEL_WIDTH$} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>7}",
        "Label",
        "# Samples",
        "Error %",
        "Median",
        "90% Line",
        "95% Line",
        "99% Line",
        "Max",
        "Throughput",
        "Checks✗"
    );
    for r in rows(total) {
        out += &row(&r);
    }
    for (name, n) in &t.names {
        if !n.not_sent.is_empty() {
            let why: Vec<String> = (n.not_sent.iter())
                .map(|(why, k)| format!("{k}: {}", safe_text(why)))
                .collect();
            let _ = writeln!(
                out,
                "  {} not sent {} times ({})",
                safe_text(name),
                n.not_sent.values().fold(0u64, |a, k| a.saturating_add(*k)),
                why.join("; ")
            );
        }
        if n.failed > 0 {
            let statuses: Vec<String> = n
                .status
                .iter()
                .map(|(c, k)| format!("{c}: {k}"))
                .chain(n.errors.iter().map(|(e, k)| format!("{}: {k}", e.label())))
                .collect();
            let extractions = if n.extractions_failed > 0 {
                format!("; nothing to extract in {}", n.extractions_failed)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {} failed {} of {} ({}{extractions})",
                safe_text(name),
                n.failed,
                n.requests,
                statuses.join(", ")
            );
        }
    }
    out
}

fn row(r: &NameRow) -> String {
    let cell = |i: usize| r.lines_us.map_or("-".to_string(), |l| us(l[i]));
    format!(
        "{:<LABEL_WIDTH$} {:>9} {:>7.2}% {:>9} {:>9} {:>9} {:>9} {:>9} {:>8.1}/s {:>7}\n",
        cut(&r.label),
        r.samples,
        r.error_pct,
        cell(0),
        cell(1),
        cell(2),
        cell(3),
        cell(4),
        r.throughput,
        r.checks_failed
    )
}

/// Per name for `--json`: counts, error ratio, latency statistics, throughput, statuses.
pub fn to_json(total: &PhaseSummary) -> Value {
    let secs = total.duration_secs();
    let names: serde_json::Map<String, Value> = total
        .totals
        .names
        .iter()
        .map(|(name, n)| {
            (
                name.clone(),
                json!({
                    "requests": n.requests,
                    "failed": n.failed,
                    "error_ratio": error_ratio(n),
                    "checks": n.checks,
                    "checks_failed": n.checks_failed,
                    "extractions_failed": n.extractions_failed,
                    "throughput_rps": if secs > 0.0 { n.requests as f64 / secs } else { 0.0 },
                    "status": n.status.iter().map(|(c, k)| (c.to_string(), json!(k))).collect::<serde_json::Map<_, _>>(),
                    "errors": n.errors,
                    "body_bytes": n.body_bytes,
                    "latency": n.latency.stats(),
                }),
            )
        })
        .collect();
    json!(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_record::SecondRecord;

    #[test]
    fn the_table_counts_each_name_and_their_total() {
        let mut s = SecondRecord {
            iterations: 4,
            checks: 8,
            checks_failed: 2,
            ..Default::default()
        };
        for (name, requests, failed) in [("login", 4u64, 0u64), ("GET /orders/{{id}}", 4, 2)] {
            let mut n = NameSecond {
                requests,
                failed,
                ..Default::default()
            };
            n.status.insert(200, requests - failed);
            if failed > 0 {
                n.status.insert(401, failed);
            }
            for ms in 1..=requests {
                n.latency.record_us(ms * 1000);
            }
            s.names.insert(name.into(), n);
        }
        let mut p = PhaseSummary::new("run");
        p.add_second(&s);
        let text = to_text(&p);
        assert!(text.contains("Iterations 4"), "{text}");
        assert!(text.contains("checks 8 run, 2 failed (25.00%)"), "{text}");
        let total = text.lines().find(|l| l.starts_with("TOTAL")).unwrap();
        assert!(
            total.contains("        8 ") && total.contains("25.00%"),
            "{total}"
        );
        assert!(
            text.contains("GET /orders/{{id}} failed 2 of 4 (200: 2, 401: 2)"),
            "{text}"
        );
        let j = to_json(&p);
        assert_eq!(j["login"]["requests"], 4);
        assert_eq!(j["GET /orders/{{id}}"]["error_ratio"], 0.5);
    }

    #[test]
    fn a_run_without_names_shows_nothing() {
        assert_eq!(to_text(&PhaseSummary::new("run")), "");
    }
}
