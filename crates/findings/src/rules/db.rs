//! The DB-call analysis' findings (N+1, redundant, slow, housekeeping...) in the same ranking
//! as the others, read from `queries.json`.

use kiln_record::schema::queries::FindingKind;
use kiln_record::text::safe_text;
use serde_json::json;

use super::{Draft, Rule};
use crate::{RunRecord, Verdict};

pub const DB_CALLS: Rule = Rule {
    id: "db.calls",
    judge: db_calls,
};

/// Why each kind of DB finding happens, in words for someone new to it.
fn cause_of(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::NPlusOne => {
            "code loops over rows and runs one query per row (often an ORM loading \
                         a relation lazily)"
        }
        FindingKind::NPlusOneWrite => {
            "code loops over rows and writes each one with its own statement"
        }
        FindingKind::Redundant => {
            "the same statement with the same values runs several times in one \
                        request"
        }
        FindingKind::ChunkyBatch => {
            "rows are sent in many small batches instead of a few large ones"
        }
        FindingKind::Slow => {
            "one statement takes long: a missing index, a large scan or a lock wait"
        }
        FindingKind::Housekeeping => {
            "the driver or pool sends session statements (SET, transaction \
                           control) around the real work"
        }
    }
}

fn db_calls(run: &RunRecord) -> Verdict {
    let Some(queries) = &run.queries else {
        return Verdict::Unjudged(
            "no traces were received (run with --otlp-listen and point the application's \
             OTLP exporter at it)"
                .into(),
        );
    };
    let analysis = &queries.analysis;
    let matched = analysis.requests_matched;
    let found = analysis
        .findings
        .iter()
        .map(|f| {
            let e = &f.example;
            let share = if matched > 0 {
                f.requests as f64 / matched as f64
            } else {
                0.0
            };
            // ranked by what the loop cost in the run: its share of the requests' time (two
            // loops in 99% of requests were ranked by id, a 974 ms one above a 3,778 ms one);
            // by the share of requests in records from before the time was kept
            let impact = match analysis.request_time_ns {
                Some(total) if total > 0 => (f.time_total_ns as f64 / total as f64, "request time"),
                _ => (share, "requests"),
            };
            let title = format!(
                "{} in {}: {}",
                e.kind.title(),
                safe_text(&e.route),
                safe_text(&e.summary)
            );
            let evidence = vec![
                safe_text(&e.evidence),
                format!(
                    "in {} of {matched} requests; {} calls per request (median), {} at most",
                    f.requests, f.calls_median, f.calls_max
                ),
            ];
            Draft {
                rule: &format!("db.{}", e.kind.name().replace('_', "-")),
                key: &e.id,
                severity: e.severity,
                title,
                evidence,
                window: run.window(),
                cause: cause_of(e.kind).into(),
                fix: safe_text(&e.fix),
                impact,
                data: json!({ "finding": f }),
            }
            .finish()
        })
        .collect();
    Verdict::Found(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};

    #[test]
    fn db_findings_join_with_their_severity_and_share_of_requests() {
        let mut run = load_run(&vec![Second::ok(100); 5]);
        assert!(matches!(db_calls(&run), Verdict::Unjudged(r) if r.contains("--otlp-listen")));
        let queries = |v| Some(serde_json::from_value(v).unwrap());
        run.queries = queries(json!({"analysis": {"requests_matched": 200, "findings": []}}));
        assert!(matches!(db_calls(&run), Verdict::Found(f) if f.is_empty()));
        run.queries = queries(json!({"analysis": {"requests_matched": 200, "findings": [{
            "id": "a1b2c3", "kind": "n_plus_one", "severity": "high", "route": "GET /owners",
            "request": "r1", "fingerprint": "f1", "shape": "SELECT … FROM pets WHERE owner_id = ?",
            "calls": 10, "distinct_values": 10, "time_ns": 5_000_000, "share_of_db_time": 0.9,
            "site": [], "structural": false, "parallel": false, "time_total_ns": 750_000_000,
            "summary": "SELECT … FROM pets WHERE owner_id = ?", "requests": 150,
            "calls_median": 10.0, "calls_max": 12, "evidence": "10 calls from OwnerController.list",
            "fix": "load the rows in one query"}]}}));
        let Verdict::Found(found) = db_calls(&run) else {
            panic!()
        };
        let f = &found[0];
        assert_eq!(
            (f.rule.as_str(), f.severity),
            ("db.n-plus-one", crate::Severity::High)
        );
        assert_eq!(
            f.title,
            "N+1 queries in GET /owners: SELECT … FROM pets WHERE owner_id = ?"
        );
        assert!((f.impact.share - 0.75).abs() < 1e-9);
        assert_eq!(f.id, crate::finding_id("db.n-plus-one", "a1b2c3"));
    }

    /// Two loops in every request rank by what they cost in the run, not by their ids.
    #[test]
    fn loops_in_as_many_requests_rank_by_their_time_in_the_run() {
        let mut run = load_run(&vec![Second::ok(100); 5]);
        let finding = |id: &str, time_total_ns: u64| {
            json!({"id": id, "kind": "n_plus_one", "severity": "high", "route": "GET /feed",
                "request": "r1", "fingerprint": id, "shape": "SELECT … WHERE id = ?",
                "calls": 10, "distinct_values": 10, "time_ns": 5_000_000,
                "share_of_db_time": 0.5, "site": [], "structural": false, "parallel": false,
                "time_total_ns": time_total_ns, "summary": "SELECT", "requests": 198,
                "calls_median": 10.0, "calls_max": 10, "evidence": "", "fix": ""})
        };
        run.queries = Some(
            serde_json::from_value(json!({"analysis": {
                "requests_matched": 200, "request_time_ns": 10_000_000_000u64,
                "findings": [finding("aaa", 974_000_000), finding("bbb", 3_778_000_000)]}}))
            .unwrap(),
        );
        let Verdict::Found(mut found) = db_calls(&run) else {
            panic!()
        };
        crate::rank(&mut found);
        let order: Vec<&str> = found
            .iter()
            .map(|f| f.data["finding"]["id"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["bbb", "aaa"]);
        assert!((found[0].impact.share - 0.3778).abs() < 1e-9);
        assert_eq!(found[0].impact.of, "request time");
    }
}
