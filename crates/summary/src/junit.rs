//! `--junit FILE`: the run's verdicts as JUnit XML, the format every CI server reads. One
//! test case per threshold, one per request name with checks, and one for the run itself
//! (an interrupted run is an error, as a crashed test is).
//!
//! Written by hand: a dozen elements with escaped text need no XML library.

use std::fmt::Write as _;

use kiln_record::PhaseSummary;

use crate::thresholds::ThresholdResult;

/// Escapes text for XML attributes and content; characters XML 1.0 cannot hold at all
/// (most control characters) become U+FFFD.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

struct Case {
    class: &'static str,
    name: String,
    /// (kind, message): `failure` or `error`.
    outcome: Option<(&'static str, String)>,
}

/// The JUnit document for a run.
pub fn render(
    run_name: &str,
    status: &str,
    status_reason: Option<&str>,
    thresholds: &[ThresholdResult],
    total: Option<&PhaseSummary>,
    seconds: f64,
) -> String {
    let mut cases = vec![Case {
        class: "kiln.run",
        name: "run completes".into(),
        outcome: (status != "complete").then(|| {
            (
                "error",
                format!(
                    "the run is {status}{}",
                    status_reason.map(|r| format!(": {r}")).unwrap_or_default()
                ),
            )
        }),
    }];
    for t in thresholds {
        cases.push(Case {
            class: "kiln.thresholds",
            name: t.threshold.clone(),
            outcome: (!t.ok).then(|| ("failure", format!("measured {}", t.actual_text))),
        });
    }
    if let Some(total) = total {
        for (name, n) in &total.totals.names {
            if n.checks == 0 && n.extractions_failed == 0 {
                continue;
            }
            // checks and extractions apart: a failed extraction is no check that ran
            let mut said = Vec::new();
            if n.checks_failed > 0 {
                said.push(format!("{} of {} checks failed", n.checks_failed, n.checks));
            }
            for (why, k) in &n.not_sent {
                said.push(format!("{k} not sent: {why}"));
            }
            if n.extractions_failed > 0 {
                said.push(format!(
                    "{} of {} responses had nothing to extract",
                    n.extractions_failed, n.requests
                ));
            }
            cases.push(Case {
                class: "kiln.checks",
                name: name.clone(),
                outcome: (!said.is_empty()).then(|| ("failure", said.join("; "))),
            });
        }
    }
    let failures = cases
        .iter()
        .filter(|c| matches!(c.outcome, Some(("failure", _))))
        .count();
    let errors = cases
        .iter()
        .filter(|c| matches!(c.outcome, Some(("error", _))))
        .count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"kiln\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds:.3}\">",
        cases.len()
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds:.3}\">",
        escape(run_name),
        cases.len()
    );
    for c in &cases {
        let head = format!(
            "    <testcase classname=\"{}\" name=\"{}\"",
            c.class,
            escape(&c.name)
        );
        match &c.outcome {
            None => {
                let _ = writeln!(x, "{head}/>");
            }
            Some((kind, message)) => {
                let _ = writeln!(
                    x,
                    "{head}>\n      <{kind} message=\"{}\">{}</{kind}>\n    </testcase>",
                    escape(message),
                    escape(message)
                );
            }
        }
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_extraction_is_said_apart_from_the_checks() {
        let mut s = kiln_record::SecondRecord::default();
        s.names.insert(
            "login".into(),
            kiln_record::NameSecond {
                requests: 537,
                checks: 537,
                checks_failed: 107,
                extractions_failed: 107,
                ..Default::default()
            },
        );
        s.names.insert(
            "token only".into(),
            kiln_record::NameSecond {
                requests: 5,
                extractions_failed: 5,
                ..Default::default()
            },
        );
        let mut total = PhaseSummary::new("run");
        total.add_second(&s);
        let xml = render("plan", "complete", None, &[], Some(&total), 1.0);
        assert!(
            xml.contains(
                "message=\"107 of 537 checks failed; 107 of 537 responses had nothing to extract\""
            ),
            "{xml}"
        );
        assert!(
            xml.contains("message=\"5 of 5 responses had nothing to extract\""),
            "{xml}"
        );
    }

    #[test]
    fn cases_for_the_run_thresholds_and_checks_with_hostile_text_escaped() {
        let mut s = kiln_record::SecondRecord::default();
        s.names.insert(
            "GET /a?<x>&y=\"1\"\u{1}".into(),
            kiln_record::NameSecond {
                requests: 3,
                checks: 3,
                checks_failed: 1,
                ..Default::default()
            },
        );
        s.names.insert(
            "no checks".into(),
            kiln_record::NameSecond {
                requests: 3,
                ..Default::default()
            },
        );
        let mut total = PhaseSummary::new("run");
        total.add_second(&s);
        let thresholds = [
            ThresholdResult {
                threshold: "p99<1ms".into(),
                ok: false,
                actual: 2000.0,
                actual_text: "2.00ms".into(),
            },
            ThresholdResult {
                threshold: "failed<1%".into(),
                ok: true,
                actual: 0.0,
                actual_text: "0.00%".into(),
            },
        ];
        let xml = render(
            "shop <plan>",
            "interrupted",
            Some("Ctrl-C"),
            &thresholds,
            Some(&total),
            1.5,
        );
        let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
        let suite = doc
            .descendants()
            .find(|n| n.has_tag_name("testsuite"))
            .unwrap();
        assert_eq!(suite.attribute("name"), Some("shop <plan>"));
        assert_eq!(suite.attribute("tests"), Some("4"));
        assert_eq!(suite.attribute("failures"), Some("2"));
        assert_eq!(suite.attribute("errors"), Some("1"));
        let names: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .map(|n| n.attribute("name").unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "run completes",
                "p99<1ms",
                "failed<1%",
                "GET /a?<x>&y=\"1\"\u{FFFD}"
            ]
        );
        let error = doc.descendants().find(|n| n.has_tag_name("error")).unwrap();
        assert_eq!(
            error.attribute("message"),
            Some("the run is interrupted: Ctrl-C")
        );
    }
}
