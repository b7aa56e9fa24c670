//! `kiln hedge`: the what-if from recorded runs against targets whose slow requests are
//! known by construction: every 25th request 60 ms slower (independent of time: a second
//! copy is fast), and a whole-server stall every 3 s (a second copy waits as long).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{json_with_exit, kiln};
use kiln_targets::{Behavior, TargetServer};
use serde_json::Value;

/// `kiln run` at 200 requests/s for 10 s into `out`; its findings.
fn record(target: &TargetServer, out: &Path) -> Value {
    let url = target.url("/");
    let run = kiln(&[
        "run",
        &url,
        "--rate",
        "200",
        "-c",
        "128",
        "-d",
        "10s",
        "--json",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    json_with_exit(&run, 0);
    serde_json::from_str(&std::fs::read_to_string(out.join("findings.json")).unwrap()).unwrap()
}

fn hedge(out: &Path, args: &[&str]) -> Value {
    let mut all = vec!["hedge", out.to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    json_with_exit(&kiln(&all), 0)
}

#[test]
fn random_slow_requests_are_cut_by_a_hedge_as_the_formula_says() {
    let _turn = common::group("hedge");
    let tmp = tempfile::tempdir().unwrap();
    let target = TargetServer::start(Behavior {
        service_time: Duration::from_millis(1),
        slow_every: Some((25, Duration::from_millis(60))),
        ..Default::default()
    })
    .unwrap();
    let dir = tmp.path().join("random");
    let findings = record(&target, &dir);
    // a delay far above a fast answer, even on a busy machine (whose scheduling delays
    // reach a few ms), and far below a slow one
    let report = hedge(&dir, &["--at", "20ms", "--at", "p99"]);
    let at_20ms = &report["options"][0];
    let p = &at_20ms["prediction"];
    // by construction: 4% of requests take 61 ms or more, the rest about 1 ms
    let extra = p["extra_requests"].as_f64().unwrap();
    assert!((0.035..0.06).contains(&extra), "{report:#}");
    assert!(
        p["before"]["p99_us"].as_u64().unwrap() >= 60_000,
        "{report:#}"
    );
    // a request stays slow only when both copies are (0.04^2 = 0.16%): p99 is the delay plus
    // a fast answer, p99.9 still a slow one
    let after_p99 = p["after"]["p99_us"].as_u64().unwrap();
    assert!((20_000..35_000).contains(&after_p99), "{report:#}");
    assert!(
        p["after"]["p99_9_us"].as_u64().unwrap() >= 60_000,
        "{report:#}"
    );
    assert_eq!(at_20ms["holds"], true, "{report:#}");
    assert_eq!(at_20ms["spread"]["independent"], true, "{report:#}");
    // at p99 the delay is a slow request's own time: little left to cut, 1% more requests
    let at_p99 = &report["options"][1];
    assert_eq!(at_p99["at"], "p99");
    assert!(at_p99["prediction"]["extra_requests"].as_f64().unwrap() <= 0.011);
    // the heavy-tail finding carries the same what-if at p95
    let tail = findings["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "latency.tail-heavy")
        .unwrap_or_else(|| panic!("no heavy tail: {findings:#}"));
    let evidence = tail["evidence"].to_string();
    assert!(evidence.contains("a hedge at p95"), "{tail:#}");
    assert!(tail["fix"]
        .as_str()
        .unwrap()
        .contains("hedge idempotent reads"));
    // the text form: the table and the sentence
    let text = kiln(&["hedge", dir.to_str().unwrap(), "--at", "20ms"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("hedged at 20.0ms"), "{text}");
    assert!(
        text.contains("a hedge at 20.0ms would take p99 from"),
        "{text}"
    );

    // a record cut off mid-line (a run killed while writing) still weighs what it holds
    let seconds = dir.join("load-seconds.jsonl");
    let whole = std::fs::read(&seconds).unwrap();
    std::fs::write(&seconds, &whole[..whole.len() / 2]).unwrap();
    let cut = hedge(&dir, &["--at", "20ms"]);
    let responses = cut["responses"].as_u64().unwrap();
    assert!(
        responses > 0 && responses < report["responses"].as_u64().unwrap(),
        "{cut:#}"
    );
}

#[test]
fn slow_requests_from_a_shared_stall_are_not_sent_to_hedging() {
    let _turn = common::group("hedge");
    let tmp = tempfile::tempdir().unwrap();
    let target = common::stalling_target();
    let dir = tmp.path().join("stalls");
    record(&target, &dir);
    // a delay far above a busy machine's scheduling delays (which, counted as slow, would
    // dilute the stalls' bunches), far below the stall
    let report = hedge(&dir, &["--at", "50ms"]);
    let option = &report["options"][0];
    // the formula alone would promise a cut; the spread says it cannot happen
    assert_eq!(option["holds"], false, "{report:#}");
    assert_eq!(option["spread"]["independent"], false, "{report:#}");
    assert!(option["spread"]["bunched_share"].as_f64().unwrap() > 0.4);
    let text = kiln(&["hedge", dir.to_str().unwrap(), "--at", "50ms"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("hedging will not help"), "{text}");
}

#[test]
fn bad_delays_and_missing_runs_are_clear_errors() {
    let _turn = common::group("hedge");
    let tmp = tempfile::tempdir().unwrap();
    let out = kiln(&["hedge", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the run"));
    for bad in ["p100", "5", "fast"] {
        let out = kiln(&["hedge", tmp.path().to_str().unwrap(), "--at", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is not a hedge delay"), "{bad}: {err}");
    }
    let out = kiln(&["hedge", tmp.path().to_str().unwrap(), "--fanout", "0"]);
    assert_eq!(out.status.code(), Some(2));
}
