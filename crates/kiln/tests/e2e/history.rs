//! `kiln history` over runs whose change is known by construction: kiln's own test target,
//! answering at once for 12 runs and 2 ms later from the 13th on, loaded at a fixed rate.

use std::path::Path;
use std::time::Duration;

use kiln_targets::{Behavior, TargetServer};
use serde_json::Value;

use crate::common::{self, json_with_exit, kiln};

/// `runs` runs at 200/s against a target on `port` that sleeps `service` on each request.
fn runs(dir: &Path, port: u16, first: usize, runs: usize, service: Duration) {
    let behavior = Behavior {
        service_time: service,
        ..Behavior::default()
    };
    let server = TargetServer::start_on(&format!("127.0.0.1:{port}"), behavior).unwrap();
    for i in first..first + runs {
        let out = dir.join(format!("run-{i:02}"));
        let url = server.url("/");
        let args = [
            "run",
            &url,
            "--rate",
            "200",
            "-d",
            "1s",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ];
        let run = kiln(&args);
        assert_eq!(run.status.code(), Some(0), "{run:?}");
    }
}

fn changes<'a>(series: &'a Value, metric: &str) -> &'a Vec<Value> {
    series["changes"][metric]
        .as_array()
        .unwrap_or_else(|| panic!("{series:#}"))
}

#[test]
fn twenty_runs_with_a_slower_target_from_the_13th_have_one_change_there_in_latency_only() {
    let _turn = common::group("history");
    let tmp = tempfile::tempdir().unwrap();
    let port = crate::common::apps::free_port();
    runs(tmp.path(), port, 1, 12, Duration::ZERO);
    runs(tmp.path(), port, 13, 8, Duration::from_millis(2));
    let history = json_with_exit(
        &kiln(&["history", tmp.path().to_str().unwrap(), "--json"]),
        0,
    );
    let series = &history["series"].as_array().unwrap()[..];
    assert_eq!(series.len(), 1, "{history:#}");
    let s = &series[0];
    assert_eq!(s["runs"].as_array().unwrap().len(), 20);
    let p50 = changes(s, "p50_ms");
    let figures: Vec<String> = (s["runs"].as_array().unwrap().iter())
        .map(|r| {
            format!(
                "{} p50 {} noise {}",
                r["id"], r["figures"]["p50_ms"], r["host_noise_ms"]
            )
        })
        .collect();
    assert_eq!(p50.len(), 1, "{p50:#?}\n{figures:#?}");
    assert!(
        p50[0]["dir"].as_str().unwrap().ends_with("run-13"),
        "{:#}",
        p50[0]
    );
    // the new level is the old one and 2 ms, within the change's interval
    let (low, high) = (
        p50[0]["change_low"].as_f64().unwrap(),
        p50[0]["change_high"].as_f64().unwrap(),
    );
    assert!(low < 2.3 && high > 1.8, "{:#}", p50[0]);
    assert!(p50[0]["p_value"].as_f64().unwrap() <= 0.01);
    // the rate was the same throughout, and nothing failed
    assert!(changes(s, "throughput").is_empty(), "{s:#}");
    assert!(changes(s, "failed_pct").is_empty(), "{s:#}");
    // a CI gate: --fail-on-change exits 99, and the text names the run
    let gate = kiln(&["history", tmp.path().to_str().unwrap(), "--fail-on-change"]);
    assert_eq!(gate.status.code(), Some(99));
    let text = String::from_utf8_lossy(&gate.stdout);
    assert!(text.contains("p50_ms      from run 13"), "{text}");
    assert!(text.contains("throughput  none"), "{text}");

    // runs with no change: none, however the machine's neighbours move the figures
    let steady = tempfile::tempdir().unwrap();
    runs(
        steady.path(),
        crate::common::apps::free_port(),
        1,
        12,
        Duration::ZERO,
    );
    let history = json_with_exit(
        &kiln(&["history", steady.path().to_str().unwrap(), "--json"]),
        0,
    );
    let s = &history["series"][0];
    for metric in ["p50_ms", "p99_ms", "throughput", "failed_pct"] {
        assert!(changes(s, metric).is_empty(), "{metric}: {s:#}");
    }
    let bad = kiln(&[
        "history",
        steady.path().to_str().unwrap(),
        "--metric",
        "p42",
    ]);
    assert_eq!(bad.status.code(), Some(1));
}
