//! The terminal table, in benchstat's spirit: each figure for BASE and NEW, the change, its
//! interval and the verdict; `~` when the interval does not leave the noise band.

use std::fmt::Write as _;

use kiln_record::text::{safe_text, us_f};

use crate::{Comparison, Row, SideSummary, Verdict};

pub fn to_text(c: &Comparison) -> String {
    let mut out = String::new();
    let side = |label: &str, s: &SideSummary| {
        format!(
            "{label:<5} {}  ({} {}, {} s, {} requests{})\n",
            safe_text(&s.dir),
            s.repeats,
            if s.repeats == 1 { "run" } else { "runs" },
            s.seconds,
            s.requests,
            if s.status == "complete" {
                String::new()
            } else {
                format!(", {}", s.status)
            }
        )
    };
    out.push_str(&side("BASE", &c.base));
    out.push_str(&side("NEW", &c.new));
    for line in &c.hygiene {
        let _ = writeln!(out, "  {}", safe_text(line));
    }
    let _ = writeln!(
        out,
        "\n{:<24} {:>11} {:>11} {:>9}  {:<20} verdict",
        "",
        "BASE",
        "NEW",
        "change",
        format!("{:.0}% interval", c.confidence * 100.0),
    );
    let mut notes: Vec<String> = Vec::new();
    for row in c.rows.iter().chain(&c.resources) {
        let mut verdict = row.verdict.as_str().to_string();
        if let Some(p) = row.p_value {
            let _ = write!(
                verdict,
                "  (p={p:.3} n={}+{})",
                c.base.repeats, c.new.repeats
            );
        }
        if let Some(note) = &row.note {
            let mark = match notes.iter().position(|n| n == note) {
                Some(i) => i + 1,
                None => {
                    notes.push(note.clone());
                    notes.len()
                }
            };
            let _ = write!(verdict, " {}", superscript(mark));
        }
        let _ = writeln!(out, "{}", row_line(row, verdict.trim_end()));
    }
    let f = &c.findings;
    if !(f.fixed.is_empty() && f.new.is_empty() && f.unchanged.is_empty() && f.host.is_empty()) {
        let _ = writeln!(
            out,
            "\nFindings: {} fixed, {} new, {} unchanged",
            f.fixed.len(),
            f.new.len(),
            f.unchanged.len()
        );
        // what changed in full; what stayed, its first few (the JSON has them all)
        for (label, list, most) in [
            ("fixed", &f.fixed, usize::MAX),
            ("new", &f.new, usize::MAX),
            ("unchanged", &f.unchanged, 5),
            ("not judged in NEW", &f.not_judged_in_new, 5),
            // a busy host, kiln starved: neither run's target made them
            ("host", &f.host, 5),
        ] {
            for item in list.iter().take(most) {
                let _ = writeln!(
                    out,
                    "  {label:<9} {:<6} {}  [{}]",
                    item.severity,
                    safe_text(&item.title),
                    item.rule
                );
            }
            if list.len() > most {
                let _ = writeln!(
                    out,
                    "  {label:<9} ... and {} more (--json lists them)",
                    list.len() - most
                );
            }
        }
    }
    if !c.profile.is_empty() {
        let per_request = c.cpu_ms_per_request().is_some();
        out.push_str(if per_request {
            "\nProfile: the functions that moved most, self share of the samples and CPU per request\n"
        } else {
            "\nProfile: self share of the CPU samples that moved most\n"
        });
        for p in &c.profile {
            let ms = c
                .function_ms_per_request(p)
                .map_or(String::new(), |(b, n)| format!("  {b:>8.3} -> {n:>8.3} ms"));
            let _ = writeln!(
                out,
                "  {:>6.1}% -> {:>6.1}%{ms}  {}",
                p.before_pct,
                p.after_pct,
                safe_text(&p.name)
            );
        }
    }
    if !c.db_routes.is_empty() {
        out.push_str("\nDB calls per request (median), by route\n");
        let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        for r in c.db_routes.iter().take(20) {
            let _ = writeln!(
                out,
                "  {:>6} -> {:<6} {}",
                show(r.base_calls_per_request),
                show(r.new_calls_per_request),
                safe_text(&r.route)
            );
        }
    }
    let improved = c.count(Verdict::Improved);
    let regressed = c.count(Verdict::Regressed);
    let _ = writeln!(
        out,
        "\n{improved} improved, {regressed} regressed, the rest within noise or not judged \
         ({} resamples, seed {}; the {} intervals hold together at {:.0}%)",
        c.resamples,
        c.seed,
        c.figures_judged,
        c.confidence * 100.0
    );
    for (i, note) in notes.iter().enumerate() {
        let _ = writeln!(out, "{} {}", superscript(i + 1), safe_text(note));
    }
    for w in &c.warnings {
        let _ = writeln!(out, "note: {}", safe_text(w));
    }
    out
}

/// One figure's line of the table: BASE, NEW, the change and its interval, then `verdict`.
pub fn row_line(row: &Row, verdict: &str) -> String {
    let interval = row.interval.map_or("-".to_string(), |[lo, hi]| {
        format!("[{}, {}]", change_text(row, lo), change_text(row, hi))
    });
    format!(
        "{:<24} {:>11} {:>11} {:>9}  {:<20} {verdict}",
        row.metric,
        value_text(row, row.base),
        value_text(row, row.new),
        change_text(row, row.change),
        interval,
    )
}

fn value_text(row: &Row, v: f64) -> String {
    match row.unit.as_str() {
        "us" => us_f(v),
        "req/s" => format!("{v:.1}/s"),
        "%" => format!("{v:.2}%"),
        "ms" => format!("{v:.3} ms"),
        unit => format!("{v:.3} {unit}"),
    }
}

fn change_text(row: &Row, v: f64) -> String {
    if !v.is_finite() {
        return "new".into();
    }
    if row.relative {
        format!("{:+.1}%", v * 100.0)
    } else {
        format!("{v:+.2}pt")
    }
}

fn superscript(n: usize) -> String {
    const DIGITS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    n.to_string()
        .chars()
        .map(|c| DIGITS[c.to_digit(10).unwrap_or(0) as usize])
        .collect()
}
