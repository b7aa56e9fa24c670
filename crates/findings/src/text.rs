//! The findings as the terminal shows them: ranked, each with its evidence, cause and fix,
//! then one line for each rule that could not judge.

use std::fmt::Write as _;

use kiln_record::text::safe_text;

use crate::{About, Report, Severity};

/// How the rules that could not judge are said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnjudgedLines {
    /// A line each, with its reason (`kiln findings`).
    Listed,
    /// Those that lack a part a flag would have recorded on one line, counted by flag (a
    /// run's summary: 20 lines of "not judged" buried its findings); the others a line each.
    Folded,
}

/// The flag a rule's reason asks for, from its closing hint: "... (run with --watch-port PORT
/// or --watch-pid PID)" or "(add --profile)".
fn wanted_flag(reason: &str) -> Option<&str> {
    let open = reason.rfind('(')?;
    let inside = reason[open + 1..].strip_suffix(')')?;
    let hint = inside
        .strip_prefix("run with ")
        .or_else(|| inside.strip_prefix("add "))
        .unwrap_or(inside);
    // "--runtime deep, with py-spy installed", "--otlp-listen and point ...": the flag alone
    let flag = [",", ";", " and "]
        .iter()
        .filter_map(|end| hint.find(end))
        .min()
        .map_or(hint, |end| &hint[..end]);
    flag.starts_with("--").then_some(flag)
}

/// The findings section of a run's summary. Outside text in a finding (frames, statements,
/// addresses) was made safe when the finding was built; it is made safe again here, since a
/// findings.json may come from anywhere.
pub fn to_text(report: &Report, unjudged: UnjudgedLines) -> String {
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
            "{:>3}. {:<6}  {about}{}  [{}]",
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
    let mut wanting: Vec<(&str, Vec<&str>)> = Vec::new();
    for u in &report.unjudged {
        match (unjudged, wanted_flag(&u.reason)) {
            (UnjudgedLines::Folded, Some(flag)) => {
                match wanting.iter_mut().find(|(f, _)| *f == flag) {
                    Some((_, rules)) => rules.push(&u.rule),
                    None => wanting.push((flag, vec![&u.rule])),
                }
            }
            _ => {
                let _ = writeln!(
                    out,
                    "  not judged  {}: {}",
                    safe_text(&u.rule),
                    safe_text(&u.reason)
                );
            }
        }
    }
    if !wanting.is_empty() {
        wanting.sort_by_key(|(_, rules)| std::cmp::Reverse(rules.len()));
        let n: usize = wanting.iter().map(|(_, rules)| rules.len()).sum();
        let each: Vec<String> = wanting
            .iter()
            .map(|(flag, rules)| format!("{} {}", safe_text(flag), rules.len()))
            .collect();
        let _ = writeln!(
            out,
            "  not judged  {n} rules for what the run did not record; would judge them: {} (kiln findings RUN lists each)",
            each.join(", ")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Unjudged;

    fn unjudged(rule: &str, reason: &str) -> Unjudged {
        Unjudged {
            rule: rule.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn rules_that_want_a_flag_are_folded_into_one_line_counted_by_flag() {
        let report = Report {
            unjudged: vec![
                unjudged(
                    "a.one",
                    "no process was watched (run with --watch-port PORT or --watch-pid PID)",
                ),
                unjudged(
                    "a.two",
                    "no process was watched (run with --watch-port PORT or --watch-pid PID)",
                ),
                unjudged("b.one", "the run was not profiled (add --profile)"),
                unjudged(
                    "c.one",
                    "no py-spy dumps were taken (run with --runtime deep, with py-spy installed)",
                ),
                unjudged(
                    "c.two",
                    "no thread dumps were taken (run with --runtime deep)",
                ),
                unjudged(
                    "c.three",
                    "no JFR recording was read (run with --runtime deep; a JDK with its jfr tool)",
                ),
                unjudged("d.one", "too few requests or CPU samples to divide"),
            ],
            ..Report::default()
        };
        let folded = to_text(&report, UnjudgedLines::Folded);
        let lines: Vec<&str> = folded
            .lines()
            .filter(|l| l.contains("not judged"))
            .collect();
        assert_eq!(lines.len(), 2, "{folded}");
        assert!(lines[0].contains("d.one: too few requests"), "{folded}");
        assert!(
            lines[1].contains("6 rules")
                && lines[1].contains(
                    "--runtime deep 3, --watch-port PORT or --watch-pid PID 2, --profile 1"
                ),
            "{folded}"
        );
        let listed = to_text(&report, UnjudgedLines::Listed);
        assert_eq!(
            listed.lines().filter(|l| l.contains("not judged")).count(),
            7,
            "{listed}"
        );
    }
}
