//! `kiln demo`, the README's first command: the closed model hides the target's pauses, the
//! open model shows them as the analytic distribution says, the profile finds the target's
//! hot function, and the DB-call analysis of its traces finds its N+1.

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
    // the target's traces: one request in ten makes 1 + 8 DB calls, 8 from the loop
    assert!(runs[0]["queries"].is_null());
    let q = &runs[1]["queries"]["analysis"];
    let findings = q["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no DB analysis: {stderr}"));
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(f["kind"], "n_plus_one");
    assert_eq!(f["calls"], 8);
    assert_eq!(f["distinct_values"], 8);
    let leaf = f["site"].as_array().unwrap().last().unwrap();
    assert_eq!(
        format!("{}:{}", leaf["file"].as_str().unwrap(), leaf["line"]),
        kiln_targets::traced::loop_site()
    );
    let sent = runs[1]["total"]["requests"].as_u64().unwrap();
    let traced = f["requests"].as_u64().unwrap();
    assert!(
        traced.abs_diff(sent / 10) <= 1,
        "{traced} traced of {sent} sent"
    );
    assert_eq!(q["coverage"]["db_spans"].as_u64(), Some(traced * 9));
    assert!(
        stderr.contains("The same target: the closed model reports p99"),
        "{stderr}"
    );
    // the closing lines start with the two runs' pages, which exist
    let closing = &stderr[stderr
        .rfind("Report: ")
        .map_or(0, |last| stderr[..last].rfind("Report: ").unwrap_or(last))..];
    let pages: Vec<&str> = closing
        .lines()
        .filter_map(|l| l.strip_prefix("Report: "))
        .collect();
    assert_eq!(pages.len(), 2, "{stderr}");
    for page in &pages {
        assert!(page.ends_with("report.html"), "{page}");
        assert!(std::path::Path::new(page).exists(), "{page}");
    }
    // the traced run's page shows its DB calls: the route and the DB stack trie's treemap,
    // rebuilt from the record's collapsed exports
    let dom = common::dump_dom(std::path::Path::new(pages[1]));
    let route = f["example"]["route"].as_str().unwrap_or("GET /orders/{id}");
    assert!(dom.contains(&format!("<td>{route}</td>")), "{dom}");
    assert!(dom.matches("class=\"cell\"").count() >= 3, "{dom}");
    assert!(
        closing
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("The same target"),
        "{closing}"
    );
}
