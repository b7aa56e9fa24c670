//! `--export`: a run's metrics in a real Prometheus while it lasts, equal to kiln's own
//! record; a receiver that is down or never answers costs the run nothing.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::prometheus::{Collector, Prometheus};
use crate::common::{self, json_with_exit, kiln};

/// A target that answers in 1 ms but stalls 100 ms each second: a p99 near 90 ms that
/// a histogram must place right.
fn stalling_each_second() -> kiln_targets::TargetServer {
    kiln_targets::TargetServer::start(kiln_targets::Behavior {
        service_time: Duration::from_millis(1),
        stall: Some(kiln_targets::Stall {
            every: Duration::from_secs(1),
            length: Duration::from_millis(100),
        }),
        ..Default::default()
    })
    .expect("the target starts")
}

/// `kiln run URL --rate R -d D` with each of `flags` (the exports among them) into `out`, as
/// JSON: its output.
fn exported_run(url: &str, out: &Path, rate: &str, secs: &str, flags: &[&str]) -> Output {
    let out = out.to_str().unwrap();
    let mut args = vec![
        "run", url, "--rate", rate, "-d", secs, "--out", out, "--json",
    ];
    args.extend(flags);
    kiln(&args)
}

fn exports_json(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("exports.json")).expect("exports.json");
    serde_json::from_str(&text).unwrap()
}

/// The issue's "done when": 20 s at 500/s exported to Prometheus directly (remote write) and
/// through an OpenTelemetry Collector (OTLP) at once leave, on each path, a counter that sums
/// to kiln's count and grows each second, and a histogram whose p99 is kiln's.
#[test]
fn a_run_in_prometheus_and_through_the_collector_counts_what_kiln_counted_each_second_and_its_p99_is_kilns(
) {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(tmp.path());
    let collector = Collector::start(tmp.path(), &prometheus);
    let target = stalling_each_second();
    let out = tmp.path().join("exported-run");
    let direct = format!("prometheus={}", prometheus.write_url());
    let otlp = format!("otlp={}", collector.url());
    let flags = ["--export", &direct, "--export", &otlp];
    let run = json_with_exit(
        &exported_run(&target.url("/"), &out, "500", "20s", &flags),
        0,
    );
    let total = &run["total"];
    let requests = total["requests"].as_u64().unwrap();
    assert!(requests > 9_000, "{total:#}");
    let kiln_p99 = total["latency"]["p99_us"].as_f64().unwrap() / 1e6;
    assert!(kiln_p99 > 0.05, "the stalls make the tail: {total:#}");
    let kiln_mean = total["latency"]["mean_us"].as_f64().unwrap() / 1e6;
    // the direct path's series have no `instance`; the Collector's take it from the
    // resource's service.instance.id, the run
    for (path, selector) in [
        ("remote write", r#"run="exported-run",instance="""#),
        ("OTLP", r#"run="exported-run",instance="exported-run""#),
    ] {
        let of_run = format!("{{{selector}}}");
        let counted = prometheus.number(&format!("sum(kiln_requests_total{of_run})"));
        assert_eq!(counted as u64, requests, "{path}: {total:#}");
        // ... arrived every second: its raw samples a second apart, each one higher
        let range = format!(r#"kiln_requests_total{{{selector},status="200"}}[10m]"#);
        let samples = prometheus.query(&range);
        let values = samples[0]["values"].as_array().unwrap();
        let points: Vec<(f64, f64)> = (values.iter())
            .map(|v| {
                (
                    v[0].as_f64().unwrap(),
                    v[1].as_str().unwrap().parse().unwrap(),
                )
            })
            .collect();
        assert!(points.len() >= 20, "{path}: {points:?}");
        for pair in points.windows(2) {
            let gap = pair[1].0 - pair[0].0;
            assert!((0.9..=1.1).contains(&gap), "{path}: {pair:?}");
            assert!(pair[1].1 > pair[0].1, "{path}: {pair:?}");
        }
        // the histogram holds every request; its p99 and mean are kiln's within its
        // buckets' width (0.27%; the issue asks 15%)
        let duration = format!("kiln_request_duration_seconds{of_run}");
        let count = prometheus.number(&format!("histogram_count({duration})"));
        assert_eq!(count as u64, requests, "{path}");
        let p99 = prometheus.number(&format!("histogram_quantile(0.99, {duration})"));
        let off = (p99 - kiln_p99).abs() / kiln_p99;
        assert!(off < 0.01, "{path}: Prometheus {p99} s, kiln {kiln_p99} s");
        let sum = prometheus.number(&format!("histogram_sum({duration})"));
        let mean = sum / count;
        assert!(
            (mean - kiln_mean).abs() / kiln_mean < 0.01,
            "{path}: {mean} vs {kiln_mean}"
        );
        let sent = &prometheus.query(&format!("kiln_requests_sent_total{of_run}"))[0];
        assert_eq!(sent["metric"]["job"], "kiln", "{path}: {sent}");
        assert_eq!(sent["metric"]["phase"], "run", "{path}: {sent}");
    }
    // the direct path's first sample is the zero a second before the first second
    let first = prometheus
        .query(r#"kiln_requests_total{run="exported-run",instance="",status="200"}[10m]"#);
    assert_eq!(first[0]["values"][0][1], "0");
    // the account: every second reached both
    let accounts = exports_json(&out)["exports"].as_array().unwrap().clone();
    assert_eq!(accounts.len(), 2);
    for account in &accounts {
        assert_eq!(account["seconds_dropped"], 0, "{account:#}");
        assert!(
            account["seconds_sent"].as_u64().unwrap() >= 21,
            "{account:#}"
        );
    }
    assert_eq!(accounts[0]["url"], prometheus.write_url());
    assert_eq!(accounts[1]["kind"], "otlp");
}

/// Classic buckets for a receiver without native histograms: the counts are exact at each
/// bound, so the p99 Prometheus interpolates lies in the bucket that holds kiln's.
#[test]
fn classic_buckets_count_every_request_and_bracket_kilns_p99() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(tmp.path());
    let target = stalling_each_second();
    let out = tmp.path().join("classic-run");
    let export = format!("prometheus={},classic", prometheus.write_url());
    let output = exported_run(&target.url("/"), &out, "200", "5s", &["--export", &export]);
    let run = json_with_exit(&output, 0);
    let total = &run["total"];
    let requests = total["requests"].as_u64().unwrap();
    let of_run = r#"run="classic-run""#;
    let count = prometheus.number(&format!("kiln_request_duration_seconds_count{{{of_run}}}"));
    assert_eq!(count as u64, requests);
    let inf = prometheus.number(&format!(
        r#"kiln_request_duration_seconds_bucket{{{of_run},le="+Inf"}}"#
    ));
    assert_eq!(inf as u64, requests);
    let buckets = prometheus.query(&format!("kiln_request_duration_seconds_bucket{{{of_run}}}"));
    let mut bounds: Vec<(f64, f64)> = buckets
        .iter()
        .filter_map(|b| {
            let le: f64 = b["metric"]["le"].as_str()?.parse().ok()?;
            let n: f64 = b["value"][1].as_str()?.parse().ok()?;
            Some((le, n))
        })
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    // cumulative: never falling
    assert!(bounds.windows(2).all(|w| w[0].1 <= w[1].1), "{bounds:?}");
    let kiln_p99 = total["latency"]["p99_us"].as_f64().unwrap() / 1e6;
    let above = bounds.iter().position(|(le, _)| *le >= kiln_p99).unwrap();
    let (lower, upper) = (bounds[above.saturating_sub(1)].0, bounds[above].0);
    let p99 = prometheus.number(&format!(
        "histogram_quantile(0.99, sum by (le) (kiln_request_duration_seconds_bucket{{{of_run}}}))"
    ));
    assert!(
        lower * 0.999 <= p99 && p99 <= upper * 1.001,
        "Prometheus {p99} s outside ({lower}, {upper}] holding kiln's {kiln_p99} s"
    );
}

/// A receiver that refuses connections and one that accepts and never answers: the run
/// sends its schedule as without them, ends within a few seconds of its duration, and says
/// what did not arrive.
#[test]
fn a_receiver_down_or_silent_costs_the_run_nothing_and_is_said() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior::default()).unwrap();
    // nothing listens on a port just freed; a listener that never accepts past its backlog
    let down = common::apps::free_port();
    let (_silent, silent_addr) = kiln_targets::idle_listener(64);
    for (name, url) in [
        // with a password, which is sent and never recorded
        (
            "down",
            format!("http://kiln:s3cret@127.0.0.1:{down}/api/v1/write"),
        ),
        ("silent", format!("http://{silent_addr}/api/v1/write")),
    ] {
        let out = tmp.path().join(name);
        let started = Instant::now();
        let export = format!("prometheus={url}");
        let output = exported_run(&target.url("/"), &out, "200", "3s", &["--export", &export]);
        let took = started.elapsed();
        let run = json_with_exit(&output, 0);
        let total = &run["total"];
        // every arrival of the schedule sent, none left unsent
        assert_eq!(total["sent"], 600, "{name}: {total:#}");
        assert_eq!(total["unsent"], 0, "{name}: {total:#}");
        // the end waits 3 s at most for the receiver
        assert!(took < Duration::from_secs(12), "{name}: {took:?}");
        let account = &exports_json(&out)["exports"][0];
        assert_eq!(account["seconds_sent"], 0, "{name}: {account:#}");
        assert!(
            account["seconds_dropped"].as_u64().unwrap() >= 3,
            "{name}: {account:#}"
        );
        assert!(account["last_error"].is_string(), "{name}: {account:#}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("seconds did not reach it"),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn a_bad_export_is_refused_before_the_run_with_its_form() {
    let _turn = common::beside();
    for (bad, says) in [
        ("http://127.0.0.1:9/api/v1/write", "prometheus=URL"),
        ("influxdb=http://127.0.0.1:9/", "prometheus=URL"),
        ("prometheus=grpc://127.0.0.1:9/x.Y/Z", "http:// or https://"),
        (
            "prometheus=http://no-such-host.invalid/api/v1/write",
            "no-such-host.invalid",
        ),
    ] {
        let out = kiln(&["run", "http://127.0.0.1:9/", "-d", "1s", "--export", bad]);
        assert!(!out.status.success(), "{bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{bad}: {stderr}");
        assert!(stderr.lines().count() <= 2, "{bad}: {stderr}");
    }
}

/// The target's figures as the sampler recorded them, and the shipped Grafana dashboard:
/// every one of its queries answers from what a run exported.
#[test]
fn the_targets_figures_are_the_samplers_and_every_dashboard_query_answers() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(tmp.path());
    // every 40th request's connection reset: failures for the failures panel
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior {
        service_time: Duration::from_millis(1),
        reset_every: Some(40),
        ..Default::default()
    })
    .unwrap();
    let out = tmp.path().join("dashboard-run");
    let pid = std::process::id().to_string();
    let export = format!("prometheus={}", prometheus.write_url());
    let flags = ["--watch-pid", &pid, "--export", &export];
    let run = json_with_exit(
        &exported_run(&target.url("/"), &out, "200", "5s", &flags),
        0,
    );
    assert!(
        run["total"]["errors"]["reset"].as_u64().unwrap() > 0,
        "{:#}",
        run["total"]
    );

    // the sampler's seconds as recorded, added up as a counter
    let text = std::fs::read_to_string(out.join("resources.jsonl")).unwrap();
    let seconds: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let processes: Vec<&Value> = seconds
        .iter()
        .map(|s| &s["process"])
        .filter(|p| p.is_object())
        .collect();
    assert!(processes.len() >= 4, "{text}");
    let user_s: f64 = (seconds.iter())
        .filter(|s| s["process"].is_object())
        .map(|s| {
            s["process"]["cpu_user_pct"].as_f64().unwrap() / 100.0
                * s["interval_s"].as_f64().unwrap()
        })
        .sum();
    let of_run = r#"run="dashboard-run""#;
    let exported = prometheus.number(&format!(
        r#"kiln_target_cpu_seconds_total{{{of_run},mode="user"}}"#
    ));
    assert!(
        (exported - user_s).abs() < 1e-6 + user_s * 1e-9,
        "{exported} vs {user_s}"
    );
    let rss = prometheus.number(&format!("kiln_target_resident_memory_bytes{{{of_run}}}"));
    let last_rss = processes.last().unwrap()["rss_kib"].as_f64().unwrap() * 1024.0;
    assert_eq!(rss, last_rss);

    // the dashboard's queries at the run's last second, its variables as Grafana fills them
    let last = prometheus.query(&format!("timestamp(kiln_requests_sent_total{{{of_run}}})"));
    let at: f64 = last[0]["value"][1].as_str().unwrap().parse().unwrap();
    let dashboard = common::apps::workspace().join("docs/dashboards/grafana-kiln.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard).unwrap()).unwrap();
    let mut asked = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let filled = expr
                .replace("$run", "dashboard-run")
                .replace("$__rate_interval", "10s");
            let result = prometheus.query_at(&filled, Some(at));
            assert!(
                !result.is_empty(),
                "{}: {filled} answered nothing",
                panel["title"]
            );
            asked += 1;
        }
    }
    assert!(asked >= 12, "{asked}");
    // the run variable lists the runs
    let runs = prometheus.query("count by (run) (kiln_requests_total)");
    assert_eq!(runs[0]["metric"]["run"], "dashboard-run");
}

/// Shards export apart, each with its shard label; added in Prometheus they are the merged
/// record: its count, and its p99 from the summed histograms.
#[test]
fn shards_export_apart_and_their_sum_in_prometheus_is_the_merged_record() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(tmp.path());
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior {
        service_time: Duration::from_millis(2),
        ..Default::default()
    })
    .unwrap();
    let export = format!("prometheus={}", prometheus.write_url());
    let mut dirs = Vec::new();
    for i in 0..2 {
        let out = tmp.path().join(format!("shard-{i}"));
        let shard = format!("{i}/2");
        let flags = ["--shard", &shard, "--export", &export];
        json_with_exit(
            &exported_run(&target.url("/"), &out, "200", "2s", &flags),
            0,
        );
        dirs.push(out.display().to_string());
    }
    let merged_dir = tmp.path().join("merged");
    let mut args = vec!["merge", &dirs[0], &dirs[1], "--out"];
    let merged_path = merged_dir.display().to_string();
    args.extend([merged_path.as_str(), "--json"]);
    let merged = json_with_exit(&kiln(&args), 0);
    let total = &merged["total"];
    let requests = total["requests"].as_u64().unwrap();
    assert!(requests >= 390, "{total:#}");
    let shards = r#"run=~"shard-.""#;
    let shard_labels = prometheus.query(&format!(
        "count by (shard) (kiln_requests_sent_total{{{shards}}})"
    ));
    let mut labels: Vec<String> = (shard_labels.iter())
        .map(|r| r["metric"]["shard"].as_str().unwrap().to_string())
        .collect();
    labels.sort();
    assert_eq!(labels, ["0/2", "1/2"]);
    let counted = prometheus.number(&format!("sum(kiln_requests_total{{{shards}}})"));
    assert_eq!(counted as u64, requests);
    let histograms = format!("sum(kiln_request_duration_seconds{{{shards}}})");
    let count = prometheus.number(&format!("histogram_count({histograms})"));
    assert_eq!(count as u64, requests);
    let p99 = prometheus.number(&format!("histogram_quantile(0.99, {histograms})"));
    let merged_p99 = total["latency"]["p99_us"].as_f64().unwrap() / 1e6;
    assert!(
        (p99 - merged_p99).abs() / merged_p99 < 0.01,
        "{p99} vs {merged_p99}"
    );
}
