//! The DB-call analysis' findings (N+1, redundant, slow, housekeeping...) in the same ranking
//! as the others, read from `queries.json`.

use kiln_queries::analyze::FindingKind;
use kiln_record::text::safe_text;
use serde_json::{json, Value};

use super::{Draft, Rule};
use crate::{RunRecord, Severity, Verdict};

pub const DB_CALLS: Rule = Rule {
    id: "db.calls",
    judge: db_calls,
};

/// Why each kind of DB finding happens, in words for someone new to it.
fn cause_of(kind: Option<FindingKind>) -> &'static str {
    match kind {
        Some(FindingKind::NPlusOne) => {
            "code loops over rows and runs one query per row (often an ORM loading \
                         a relation lazily)"
        }
        Some(FindingKind::NPlusOneWrite) => {
            "code loops over rows and writes each one with its own statement"
        }
        Some(FindingKind::Redundant) => {
            "the same statement with the same values runs several times in one \
                        request"
        }
        Some(FindingKind::ChunkyBatch) => {
            "rows are sent in many small batches instead of a few large ones"
        }
        Some(FindingKind::Slow) => {
            "one statement takes long: a missing index, a large scan or a lock wait"
        }
        Some(FindingKind::Housekeeping) => {
            "the driver or pool sends session statements (SET, transaction \
                           control) around the real work"
        }
        None => "the DB calls of a request follow a costly pattern",
    }
}

fn severity_of(v: &Value) -> Severity {
    match v.as_str() {
        Some("high") => Severity::High,
        Some("medium") => Severity::Medium,
        _ => Severity::Low,
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
    let analysis = &queries["analysis"];
    let Some(findings) = analysis["findings"].as_array() else {
        return Verdict::Unjudged("queries.json holds no findings list".into());
    };
    let matched = analysis["requests_matched"].as_u64().unwrap_or(0);
    let found = findings
        .iter()
        .map(|f| {
            let text = |k: &str| safe_text(f[k].as_str().unwrap_or(""));
            let kind = serde_json::from_value::<FindingKind>(f["kind"].clone()).ok();
            let kind_name = f["kind"].as_str().unwrap_or("unknown");
            let requests = f["requests"].as_u64().unwrap_or(0);
            let share = if matched > 0 {
                requests as f64 / matched as f64
            } else {
                0.0
            };
            let title = format!(
                "{} in {}: {}",
                kind.map_or("DB calls", FindingKind::title),
                text("route"),
                text("summary")
            );
            let mut evidence = vec![text("evidence")];
            evidence.push(format!(
                "in {requests} of {matched} requests; {} calls per request (median), {} at most",
                f["calls_median"], f["calls_max"]
            ));
            Draft {
                rule: &format!("db.{}", kind_name.replace('_', "-")),
                key: f["id"].as_str().unwrap_or(""),
                severity: severity_of(&f["severity"]),
                title,
                evidence,
                window: run.window(),
                cause: cause_of(kind).into(),
                fix: text("fix"),
                impact: (share, "requests"),
                data: json!({"finding": f}),
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
        run.queries = Some(json!({"analysis": {"requests_matched": 200, "findings": []}}));
        assert!(matches!(db_calls(&run), Verdict::Found(f) if f.is_empty()));
        run.queries = Some(json!({"analysis": {"requests_matched": 200, "findings": [{
            "id": "a1b2c3", "kind": "n_plus_one", "severity": "high", "route": "GET /owners",
            "summary": "SELECT … FROM pets WHERE owner_id = ?", "requests": 150,
            "calls_median": 10.0, "calls_max": 12, "evidence": "10 calls from OwnerController.list",
            "fix": "load the rows in one query"}]}}));
        let Verdict::Found(found) = db_calls(&run) else {
            panic!()
        };
        let f = &found[0];
        assert_eq!(
            (f.rule.as_str(), f.severity),
            ("db.n-plus-one", Severity::High)
        );
        assert_eq!(
            f.title,
            "N+1 queries in GET /owners: SELECT … FROM pets WHERE owner_id = ?"
        );
        assert!((f.impact.share - 0.75).abs() < 1e-9);
        assert_eq!(f.id, crate::finding_id("db.n-plus-one", "a1b2c3"));
    }
}
