//! The findings as the terminal shows them: ranked, each with its evidence, cause and fix,
//! then one line for each rule that could not judge.

use std::fmt::Write as _;

use kiln_record::text::safe_text;

use crate::{About, Report, Severity};

/// The findings section of a run's summary. Outside text in a finding (frames, statements,
/// addresses) was made safe when the finding was built; it is made safe again here, since a
/// findings.json may come from anywhere.
pub fn to_text(report: &Report) -> String {
    let mut out = String::new();
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    if report.findings.is_empty() {
        out += "Findings   none";
    } else {
        let _ = write!(
            out,
            "Findings   {} ({} high, {} medium, {} low), most costly first",
            report.findings.len(),
            count(Severity::High),
            count(Severity::Medium),
            count(Severity::Low)
        );
    }
    let _ = writeln!(
        out,
        "; {} rules judged, {} could not",
        report.judged.len(),
        report.unjudged.len()
    );
    for (i, f) in report.findings.iter().enumerate() {
        // whose evidence, when it is not the target's
        let about = match f.about {
            About::Target => "",
            About::Host => "(the host) ",
            About::Kiln => "(kiln itself) ",
        };
        let _ = writeln!(
            out,
            "{:>3}. {:<6} {about}{}  [{}]",
            i + 1,
            f.severity.as_str().to_uppercase(),
            safe_text(&f.title),
            safe_text(&f.id)
        );
        for e in &f.evidence {
            let _ = writeln!(out, "            {}", safe_text(e));
        }
        let _ = writeln!(out, "       cause  {}", safe_text(&f.cause));
        let _ = writeln!(out, "       fix    {}", safe_text(&f.fix));
    }
    for u in &report.unjudged {
        let _ = writeln!(
            out,
            "  not judged  {}: {}",
            safe_text(&u.rule),
            safe_text(&u.reason)
        );
    }
    for p in &report.read_problems {
        let _ = writeln!(out, "  unreadable  {}", safe_text(p));
    }
    out
}

/// The run's symptoms and the findings that explain them, in a few lines: what the summary
/// and the report open with.
pub fn symptoms_text(s: &crate::symptoms::Symptoms) -> String {
    use kiln_record::text::us;
    let mut out = format!(
        "Symptoms   p99 {} (p50 {}) at {:.1}/s",
        us(s.p99_us),
        us(s.p50_us),
        s.throughput
    );
    if let Some(asked) = s.asked_per_s {
        let _ = write!(out, " of {asked:.1}/s asked");
    }
    if let Some(cpu) = s.cpu_ms_per_request {
        let _ = write!(out, "; the target's CPU {cpu:.2} ms per request");
    }
    out += "\n";
    if s.above_p99 > 0 {
        if s.p99_explained.is_empty() {
            let _ = writeln!(
                out,
                "  p99      the {} requests slower than p99 lie in no finding's seconds",
                s.above_p99
            );
        } else {
            let explained: Vec<String> = s
                .p99_explained
                .iter()
                .map(|e| {
                    format!(
                        "{:.0}% in the seconds of {} [{}]",
                        100.0 * e.share,
                        safe_text(&e.title),
                        safe_text(&e.rule)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  p99      of the {} requests slower than p99: {}",
                s.above_p99,
                explained.join("; ")
            );
        }
    }
    if !s.cpu_explained.is_empty() {
        let shares: Vec<String> = s
            .cpu_explained
            .iter()
            .map(|e| format!("{:.0}% {}", 100.0 * e.share, safe_text(&e.rule)))
            .collect();
        let _ = writeln!(
            out,
            "  CPU      of the target's CPU per request: {}",
            shares.join(", ")
        );
    }
    out
}
