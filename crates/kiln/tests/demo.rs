//! `kiln demo`, the README's first command: the closed model hides the target's pauses, the
//! open model shows them as the analytic distribution says, and the profile finds the
//! target's hot function.

mod common;

use common::kiln;
use serde_json::Value;

#[test]
fn the_demo_shows_the_pause_the_closed_model_hides_and_the_hot_function() {
    let dir = tempfile::tempdir().unwrap();
    let out = kiln(&[
        "demo",
        "--seconds",
        "3",
        "--json",
        "--runs-dir",
        dir.path().to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(runs.len(), 2, "{stderr}");
    let p99_ms = |run: &Value| run["total"]["latency"]["p99_us"].as_f64().unwrap() / 1000.0;
    // 2 ms answers, a 100 ms pause every second: at a steady rate p99 is 92 ms by
    // construction; back-to-back connections see each pause once per connection.
    assert!(
        p99_ms(&runs[0]) < 30.0,
        "closed p99 {} ms",
        p99_ms(&runs[0])
    );
    assert!(
        (75.0..110.0).contains(&p99_ms(&runs[1])),
        "open p99 {} ms",
        p99_ms(&runs[1])
    );
    assert!(runs[0]["profile"].is_null());
    let profile = &runs[1]["profile"];
    let top: Vec<&str> = profile["summary"]["top_self"]
        .as_array()
        .unwrap_or_else(|| panic!("no profile: {stderr}"))
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        top.iter()
            .take(3)
            .any(|n| n.contains("burn_cpu_for_request")),
        "the target's hot function is not among the top 3: {top:?}"
    );
    assert!(
        stderr.contains("The same target: the closed model reports p99"),
        "{stderr}"
    );
}
