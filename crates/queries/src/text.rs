//! The analysis as terminal text, from its `queries.json` record: `kiln queries`, the run
//! summary and `kiln report` print the same.

use std::fmt::Write as _;

use kiln_record::schema::queries::{Coverage, QueriesRecord};
use kiln_record::text::safe_text;

/// A median or percentile: whole numbers without ".0".
fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// What came in and what of it the analysis could use.
fn coverage_text(out: &mut String, c: &Coverage) {
    let db = c.db_spans;
    let pct = |n: u64| {
        if db == 0 {
            0.0
        } else {
            100.0 * n as f64 / db as f64
        }
    };
    let _ = writeln!(
        out,
        "Spans      {} read, {db} DB calls: {} with query text ({:.0}%), {} with a stack or caller frame ({:.0}%), {} with recorded values",
        c.spans,
        c.db_with_text,
        pct(c.db_with_text),
        c.db_with_caller,
        pct(c.db_with_caller),
        c.db_with_params
    );
    if c.rejected_spans + c.rejected_lines + c.lossy_lines + c.spans_dropped_attributes > 0 {
        let _ = writeln!(
            out,
            "Problems   {} spans and {} lines/requests rejected, {} lines with invalid UTF-8 replaced, {} spans with dropped attributes",
            c.rejected_spans, c.rejected_lines, c.lossy_lines, c.spans_dropped_attributes
        );
        for p in c.problems.iter().take(3) {
            let _ = writeln!(out, "           {}", safe_text(p));
        }
    }
}

/// The terminal report of a `queries.json` record, with the `top` findings and routes.
pub fn report_text(record: &QueriesRecord, top: usize) -> String {
    let a = &record.analysis;
    let c = &a.coverage;
    let mut out = String::new();
    coverage_text(&mut out, c);
    let with_stack = a.calls_with_stack;
    if with_stack > 0 {
        let app = a.calls_with_app_frame;
        let _ = writeln!(
            out,
            "           {app} of {with_stack} stacks ({:.0}%) hold an application frame{}",
            100.0 * app as f64 / with_stack as f64,
            if app < with_stack {
                "; for the others kiln names the nearest frame (say which code is yours: --app-package PREFIX)"
            } else {
                ""
            }
        );
    }
    if a.requests_outside_window > 0 {
        let _ = writeln!(
            out,
            "Left out   {} requests ({} DB calls) that began outside the measured load (queued before kiln listened, or in the warm-up)",
            a.requests_outside_window, a.calls_outside_window
        );
    }
    let once = &a.counted_once;
    if once.duplicate_spans + once.nested_db_spans > 0 {
        let _ = writeln!(
            out,
            "Counted once {} spans received twice (the same trace and span id: an SDK set up twice, e.g. a post_fork hook beside opentelemetry-instrument); {} DB spans around a DB span of the same statement (two instrumentations of one call, e.g. SQLAlchemy's over psycopg2's: the inner one counted)",
            once.duplicate_spans, once.nested_db_spans
        );
    }
    if a.requests_without_server_span > 0 && a.requests_with_server_span.unwrap_or(0) > 0 {
        let _ = writeln!(
            out,
            "Partial    {} traces arrived without their server span (lost by the exporter, or cut at the end of the window): their DB calls are counted; a loop in them joins the same loop's finding ({} joined), never one of its own ({} left out)",
            a.requests_without_server_span, a.orphan_findings_joined, a.orphan_findings_left_out
        );
    }
    if a.db_calls > 0 && a.requests_with_server_span == Some(0) {
        out += "Unjudged   no server span arrived: a request's DB calls cannot be told from another's, so loops across a request cannot be seen.\n           Instrument the web framework: its server spans (Python: the framework's opentelemetry-instrumentation package beside opentelemetry-instrument; Django's instruments Django 2.0 or later only).\n";
    }
    if c.db_spans > 0 && c.db_with_caller == 0 {
        out += "           no DB span carries a stack: call sites are unknown and N+1s are grouped by parent span.\n           Python: pip install ./agents/python (kiln-otel-stacks); Java: the span-stacktrace extension with min.duration=0 (README)\n";
    }
    let _ = writeln!(
        out,
        "Requests   {} ({} matched), {} routes, {} DB calls{}",
        a.requests_total,
        a.requests_matched,
        a.routes.len(),
        a.db_calls,
        match a.ignored_calls {
            0 => String::new(),
            k => format!(" ({k} left out of the findings by --ignore-*)"),
        }
    );
    if a.findings.is_empty() && a.db_calls > 0 && a.requests_with_server_span == Some(0) {
        out += "Findings   none that could be seen without request spans (above)\n";
    } else if a.findings.is_empty() {
        out += "Findings   none\n";
    } else {
        let _ = writeln!(out, "Findings ({})", a.findings.len());
    }
    for f in a.findings.iter().take(top) {
        let e = &f.example;
        let _ = writeln!(
            out,
            "  {:<6} {}  {}  [{}]\n         {}\n         in {} request(s), calls median {} max {}, {:.1} ms in all\n         {}",
            e.severity.as_str().to_uppercase(),
            e.kind.title(),
            safe_text(&e.route),
            safe_text(&e.id),
            safe_text(&e.evidence),
            f.requests,
            num(f.calls_median),
            f.calls_max,
            f.time_total_ns as f64 / 1e6,
            safe_text(&e.shape),
        );
        for frame in e.site.iter().rev().take(4) {
            let _ = writeln!(out, "         at {}", safe_text(&frame.label()));
        }
        let _ = writeln!(out, "         fix: {}", safe_text(&e.fix));
    }
    if a.findings.len() > top {
        let _ = writeln!(
            out,
            "  ... {} more in queries.json and the HTML report",
            a.findings.len() - top
        );
    }
    if !a.routes.is_empty() {
        let _ = writeln!(
            out,
            "{:<40} {:>8} {:>10} {:>6} {:>6} {:>10} {:>8}",
            "Route", "requests", "calls p50", "p95", "max", "DB ms p50", "p95"
        );
        for r in a.routes.iter().take(top) {
            let _ = writeln!(
                out,
                "{:<40} {:>8} {:>10} {:>6} {:>6} {:>10.1} {:>8.1}",
                safe_text(&r.route),
                r.requests,
                num(r.calls_median),
                num(r.calls_p95),
                r.calls_max,
                r.db_time_median_ms,
                r.db_time_p95_ms
            );
        }
    }
    if a.worst_requests.len() > 1 {
        out += "Most DB calls (--request ID for one request's trie)\n";
        for w in a.worst_requests.iter().take(3) {
            let _ = writeln!(
                out,
                "  {:>6} calls ({} housekeeping) {:>8.1} ms  {}  {}",
                w.db_calls,
                w.housekeeping_calls,
                w.db_time_ns as f64 / 1e6,
                safe_text(&w.route),
                safe_text(&w.id)
            );
        }
    }
    let heaviest = &record.trie.heaviest;
    if !heaviest.is_empty() {
        out += "DB stack trie (calls, share, DB time; paths under 5% left out)\n";
        for line in heaviest.lines() {
            out += &safe_text(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1_demo_record() -> QueriesRecord {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../record/tests/fixtures/v1-demo-planted/queries.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// A record written before server spans were counted does not count as one where none
    /// arrived: its finding is shown, not "no server span arrived".
    #[test]
    fn a_record_from_before_server_spans_were_counted_is_not_unjudged() {
        let mut record = v1_demo_record();
        assert_eq!(record.analysis.requests_with_server_span, None);
        let text = report_text(&record, 5);
        assert!(!text.contains("Unjudged"), "{text}");
        assert!(text.contains("Findings (1)"), "{text}");
        record.analysis.requests_with_server_span = Some(0);
        record.analysis.findings.clear();
        let text = report_text(&record, 5);
        assert!(text.contains("Unjudged   no server span arrived"), "{text}");
        assert!(
            text.contains("Findings   none that could be seen"),
            "{text}"
        );
    }
}
