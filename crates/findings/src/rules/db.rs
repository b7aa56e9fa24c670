//! The DB-call analysis' findings (N+1, redundant, slow, housekeeping...) in the same ranking
//! as the others, read from `queries.json`.

use kiln_record::schema::queries::FindingKind;
use kiln_record::text::safe_text;
use serde_json::json;

use super::{Draft, Rule};
use crate::{RunRecord, Severity, Verdict};

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
            let (mut evidence, mut severity) = (evidence, e.severity);
            let (mut cause, mut fix) = (cause_of(e.kind).to_string(), safe_text(&e.fix));
            // a slow call that ended when the host had no CPU to spare may have waited for
            // one (the database on this host, or the target): that is the cause to fix
            // first, and the statement is only a suspect (a saturated host made four HIGH
            // "add an index" findings of 523-738 ms whose statements PostgreSQL logged at
            // under 439 ms)
            let starved = starved_ends(&f.ends_unix_ms, run);
            if e.kind == FindingKind::Slow && starved > 0 && 2 * starved >= f.ends_unix_ms.len() {
                severity = Severity::Low;
                evidence.push(format!(
                    "{starved} of its {} slow calls ended in seconds when the host's CPU was \
                     saturated (under {:.0}% idle) or kiln itself waited for a CPU",
                    f.ends_unix_ms.len(),
                    super::cpu::HOST_IDLE_BELOW
                ));
                cause = format!(
                    "the host had no CPU to spare when these calls ran: the database (or the \
                     target) may have waited for a CPU, not for the statement. Otherwise: {cause}"
                );
                fix = format!(
                    "see the host's CPU findings first, and run again on a quieter host; if the \
                     calls stay slow there: {fix}"
                );
            }
            Draft {
                rule: &format!("db.{}", e.kind.name().replace('_', "-")),
                key: &e.id,
                severity,
                title,
                evidence,
                window: run.window(),
                cause,
                fix,
                impact,
                data: json!({ "finding": f }),
            }
            .finish()
        })
        .collect();
    Verdict::Found(found)
}

/// How many of these moments (Unix ms) fall in a second when the host's CPU was saturated
/// (whoever used it) or kiln's probe found kiln starved.
fn starved_ends(ends_unix_ms: &[u64], run: &RunRecord) -> usize {
    let within = |t: u64, end_ms: u64, interval_s: f64| {
        let from = end_ms.saturating_sub((interval_s.max(0.0) * 1000.0) as u64);
        from < t && t <= end_ms
    };
    let host_busy = |t: u64| {
        run.resources.iter().any(|s| {
            within(t, s.unix_ms, s.interval_s)
                && s.host_cpu
                    .is_some_and(|c| c.idle + c.iowait < super::cpu::HOST_IDLE_BELOW)
        })
    };
    let kiln_starved =
        |t: u64| (run.noise.iter()).any(|n| n.starved() && within(t, n.unix_ms, n.interval_s));
    (ends_unix_ms.iter())
        .filter(|&&t| host_busy(t) || kiln_starved(t))
        .count()
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

    /// A slow call is HIGH on a host with CPU to spare; ended in seconds when the host had
    /// none, it is LOW and says the host may be the cause.
    #[test]
    fn a_slow_call_in_seconds_without_a_spare_cpu_points_at_the_host() {
        let judge = |idle: f64| {
            let mut run = load_run(&vec![Second::ok(100); 10]);
            run.resources = (run.seconds.iter())
                .map(|load| kiln_sample::ResourceSecond {
                    unix_ms: load.unix_ms,
                    interval_s: 1.0,
                    host_cpu: Some(kiln_sample::CpuSplit {
                        idle,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect();
            let ends: Vec<u64> = [2, 5, 7].map(|i| run.seconds[i].unix_ms - 300).into();
            run.queries = Some(
                serde_json::from_value(json!({"analysis": {"requests_matched": 100,
                    "findings": [{"id": "s1", "kind": "slow", "severity": "high",
                    "route": "GET /report", "request": "r1", "fingerprint": "f",
                    "shape": "SELECT … FROM orders", "calls": 1, "distinct_values": 1,
                    "time_ns": 620_000_000, "share_of_db_time": 1.0, "site": [],
                    "structural": false, "parallel": false, "time_total_ns": 1_860_000_000,
                    "summary": "SELECT orders", "requests": 3, "calls_median": 1.0,
                    "calls_max": 1, "evidence": "one call took 620.0 ms", "fix": "EXPLAIN it",
                    "ends_unix_ms": ends}]}}))
                .unwrap(),
            );
            let Verdict::Found(found) = db_calls(&run) else {
                panic!()
            };
            found.into_iter().next().unwrap()
        };
        let quiet = judge(60.0);
        assert_eq!(quiet.severity, Severity::High);
        assert_eq!(quiet.fix, "EXPLAIN it");
        let busy = judge(3.0);
        assert_eq!(busy.severity, Severity::Low, "{busy:#?}");
        assert!(
            busy.evidence.iter().any(|e| e.starts_with(
                "3 of its 3 slow calls ended in seconds when the host's CPU was saturated"
            )),
            "{:?}",
            busy.evidence
        );
        assert!(busy.fix.ends_with("EXPLAIN it"), "{}", busy.fix);
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
