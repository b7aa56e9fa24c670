//! The `kiln` binary as users run it: exit codes, one-line errors, the run directory, JSON,
//! `kiln report` rebuilding the same numbers, Ctrl-C and dead targets leaving usable records.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kiln_targets::{Behavior, TargetServer};

use crate::common;
use common::{json_of, json_with_exit, kiln, manifest};

#[test]
fn bad_input_gets_one_clear_line_and_a_nonzero_exit() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let url = target.url("/");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "127.0.0.1:8080/x"], "malformed URL"),
        (
            vec!["run", "gopher://127.0.0.1/"],
            "not http, https, grpc or grpcs",
        ),
        (vec!["run", "http://127.0.0.1:1/"], "cannot connect"),
        (
            vec!["run", &url, "-c", "0"],
            "--connections is out of range",
        ),
        (vec!["run", &url, "-t", "0"], "--threads is out of range"),
        (vec!["run", &url, "--rate", "0"], "--rate is out of range"),
        (vec!["run", &url, "--stages", "10s"], "bad stages"),
        (vec!["run", &url, "-H", "NoColon"], "bad header"),
        (
            vec!["run", &url, "-b", "@/no/such/body.json"],
            "cannot read the body file",
        ),
        (
            vec!["run", &url, "--repeat", "0"],
            "--repeat is out of range",
        ),
        (vec!["report", "/no/such/run"], "cannot read the run"),
        (
            vec!["run", "https://127.0.0.1:1/", "--io", "uring"],
            "TLS connections run on epoll only",
        ),
    ];
    // An OS error is said once, not once per layer of context.
    let missing = kiln(&["report", "/no/such/run"]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(stderr.matches("os error 2").count(), 1, "{stderr}");
    for (args, expected) in cases {
        let out = kiln(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: expected '{expected}' in: {stderr}"
        );
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: more than one line: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // A flag's value that does not read is bad usage (exit 2), said in one line like the
    // errors above, for every flag of every command: each is checked as the flags are parsed.
    for (args, expected) in [
        (
            vec!["run", &url, "-d", "soon"],
            "--duration \"soon\": bad duration",
        ),
        (
            vec!["run", &url, "-c", "many"],
            "--connections \"many\": invalid digit",
        ),
        (
            vec!["run", &url, "--hedge", "p95", "--hedge-cap", "200%"],
            "not a share of the requests",
        ),
        (vec!["run", &url, "--warmup", "auto:2s"], "shorter than"),
        (vec!["watch", "--interval", "often"], "bad duration"),
    ] {
        let out = kiln(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
    // a 300-digit rate is said in a few characters, not printed back in full
    let huge = format!("1{}", "0".repeat(299));
    let out = kiln(&["run", &url, "--rate", &huge]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--rate is out of range: 1.000e299 ("),
        "{stderr}"
    );
    let unknown_flag = kiln(&["run", &url, "--bogus"]);
    assert_eq!(unknown_flag.status.code(), Some(2));
    assert_eq!(target.answered(), 0, "bad input must not send load");
}

/// A listener whose accept queue is full answers no SYN: the first connection's wait ends
/// with the run's `-d` (it waited the whole --connect-timeout before), and the run that never
/// connected is recorded as failed, with why, and still reports.
#[test]
fn a_run_that_never_connected_ends_within_its_duration_and_is_recorded() {
    let _turn = common::beside();
    let (_listener, addr) = kiln_targets::idle_listener(0);
    // fill the queue: connections the kernel completes until it completes no more
    let mut queued = Vec::new();
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(c) => queued.push(c),
            Err(_) => break,
        }
    }
    assert!(
        queued.len() < 8,
        "the idle listener took {} connections",
        queued.len()
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let started = Instant::now();
    let out = kiln(&[
        "run",
        &format!("http://{addr}/"),
        "-d",
        "2s",
        "--connect-timeout",
        "10s",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        took < Duration::from_secs(5),
        "a 2 s run took {took:?}: {stderr}"
    );
    assert!(stderr.contains("cannot connect"), "{stderr}");
    assert!(stderr.contains("accept queue may be full"), "{stderr}");
    assert!(stderr.contains("recorded as failed in"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let run = manifest(&dir);
    assert_eq!(run["status"], "failed", "{run:#}");
    assert!(
        run["status_reason"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{run:#}"
    );
    // every reader takes it: the report says it failed and why
    let report = kiln(&["report", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("cannot connect"),
        "{text}\n{}",
        String::from_utf8_lossy(&report.stderr)
    );
    drop(queued);
}

#[test]
fn a_closed_run_reports_what_the_target_counted_and_report_rebuilds_it() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior {
        service_time: Duration::from_millis(1),
        ..Default::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln(&[
        "run",
        &target.url("/"),
        "-c",
        "4",
        "-d",
        "2s",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let run = json_with_exit(&out, 0);
    assert_eq!(run["status"], "complete");
    assert_eq!(run["total"]["requests"].as_u64(), Some(target.answered()));
    assert_eq!(
        run["total"]["status"]["200"].as_u64(),
        Some(target.answered())
    );
    assert_eq!(manifest(&dir)["status"], "complete");
    assert_eq!(manifest(&dir)["parts"][0]["path"], "load-seconds.jsonl");

    let report = kiln(&["report", dir.to_str().unwrap(), "--json"]);
    assert_eq!(report.status.code(), Some(0));
    let rebuilt = json_of(&report);
    assert_eq!(
        rebuilt["total"], run["total"],
        "kiln report must rebuild every number"
    );
    assert_eq!(rebuilt["phases"], run["phases"]);

    let text = kiln(&["report", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    for needle in [
        "p99.99",
        "Histogram",
        "Status     200:",
        "requests per CPU-second",
        "(complete)",
    ] {
        assert!(text.contains(needle), "missing '{needle}' in:\n{text}");
    }
}

/// `--io uring` runs on io_uring and says so (the Workload line, the record); where io_uring
/// is refused (here by a seccomp filter, as a container's profile does) the run says why and
/// counts the same on epoll.
#[test]
fn io_uring_is_said_where_it_runs_and_its_refusal_where_it_is_refused() {
    use std::os::unix::process::CommandExt;
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for refused in [false, true] {
        let dir = tmp.path().join(format!("refused-{refused}"));
        let answered_before = target.answered();
        let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
        command.args([
            "run",
            &target.url("/"),
            "-c",
            "4",
            "-d",
            "1s",
            "--io",
            "uring",
        ]);
        command
            .args(["--out", dir.to_str().unwrap()])
            .stdin(Stdio::null());
        if refused {
            // SAFETY: prctl only, in the child between fork and exec.
            unsafe { command.pre_exec(kiln_targets::refuse_io_uring) };
        }
        let out = command.output().expect("kiln runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        let workload = stdout.lines().find(|l| l.starts_with("Workload")).unwrap();
        let plan = &manifest(&dir)["plan"];
        if refused {
            assert!(
                workload.ends_with(
                    ", epoll (io_uring is unavailable: Operation not permitted (os error 1), \
                     refused by a seccomp profile or kernel.io_uring_disabled)"
                ),
                "{workload}"
            );
            assert!(stderr.contains("the epoll path runs"), "{stderr}");
            assert!(plan.get("io").is_none(), "{plan}");
            assert!(plan["io_uring_refused"].is_string(), "{plan}");
        } else {
            assert!(workload.ends_with(", io_uring"), "{workload}");
            assert_eq!(plan["io"], "uring", "{plan}");
        }
        // every answer the target wrote is counted, on either path
        let report = json_of(&kiln(&["report", dir.to_str().unwrap(), "--json"]));
        let requests = report["total"]["requests"].as_u64().unwrap();
        assert_eq!(requests, target.answered() - answered_before);
        assert!(requests > 100, "{requests}");
    }
}

#[test]
fn jmeter_lines_give_one_summary_per_measured_run_and_no_empty_window() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln(&[
        "run",
        &target.url("/"),
        "--out",
        dir.to_str().unwrap(),
        "--rate",
        "100",
        "-d",
        "3s",
        "--warmup",
        "1s",
        "--interval",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The warm-up ends with its own line, not a `summary =` a log parser would take for the
    // results; the last `summary =` is the measured run's, all of it.
    let (warmup, run) = stderr.split_once("kiln: run started").expect("two phases");
    assert!(!warmup.contains("summary ="), "{stderr}");
    assert!(warmup.contains("kiln: warmup ended:"), "{stderr}");
    let last = run.lines().rfind(|l| l.starts_with("summary =")).unwrap();
    assert!(last.starts_with("summary =    300 in 00:00:03"), "{stderr}");
    assert!(!stderr.contains(" in 00:00:00 "), "{stderr}");
}

#[test]
fn warmup_and_repeats_are_reported_apart_and_merged_exactly() {
    // alone: every one of 200 requests in each 1 s repeat must be answered within the
    // half-second grace, and a fresh-clone run failed it beside three other tests
    let _turn = common::alone();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln(&[
        "run",
        &target.url("/"),
        "--rate",
        "200",
        "-d",
        "1s",
        "--warmup",
        "1s",
        "--repeat",
        "3",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let run = json_with_exit(&out, 0);
    let phases = run["phases"].as_array().unwrap();
    let names: Vec<&str> = phases
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["warmup", "run-1", "run-2", "run-3"]);
    assert_eq!(phases[0]["measured"], false);
    for p in &phases[1..] {
        assert_eq!(p["scheduled"], 200);
        assert_eq!(p["requests"], 200);
    }
    assert_eq!(run["total"]["requests"], 600, "the warm-up is left out");
    assert_eq!(target.answered(), 800, "warm-up plus three runs");
    let throughput = &run["across_runs"]["throughput_rps"];
    assert!(
        (throughput["mean"].as_f64().unwrap() - 200.0).abs() < 10.0,
        "{throughput}"
    );
    assert!(throughput["stdev"].as_f64().unwrap() < 10.0);
}

/// Starts `kiln run URL --rate RATE -d 60s --out DIR` plus `extra`, in the background.
fn spawn_long_run(url: &str, rate: &str, dir: &Path, extra: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run",
            url,
            "--rate",
            rate,
            "-d",
            "60s",
            extra,
            "--out",
            dir.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn ctrl_c_leaves_an_interrupted_record_that_still_reports() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let child = spawn_long_run(&target.url("/"), "300", &dir, "--json");
    std::thread::sleep(Duration::from_millis(2500));
    let started = Instant::now();
    send_signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let run = json_with_exit(&out, 130);
    assert_eq!(run["status"], "interrupted");
    assert!(run["status_reason"].as_str().unwrap().contains("Ctrl-C"));
    assert_eq!(manifest(&dir)["status"], "interrupted");
    let report = json_of(&kiln(&["report", dir.to_str().unwrap(), "--json"]));
    let requests = report["total"]["requests"].as_u64().unwrap();
    // every answer kiln read is counted; one the target wrote as Ctrl-C cut the run is a
    // request still in flight, counted as abandoned (a CI run saw 661 of 662)
    let abandoned = report["total"]["abandoned"].as_u64().unwrap();
    let answered = target.answered();
    assert!(
        requests <= answered && answered <= requests + abandoned,
        "{requests} counted, {abandoned} abandoned, {answered} answered"
    );
    assert!(requests >= 500, "{requests}");
}

#[test]
fn a_killed_run_is_read_as_interrupted_and_keeps_its_finished_seconds() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let child = spawn_long_run(&target.url("/"), "100", &dir, "-q");
    std::thread::sleep(Duration::from_millis(3500));
    send_signal(child.id(), "KILL");
    let _ = child.wait_with_output();
    assert_eq!(manifest(&dir)["status"], "running");
    let report = json_of(&kiln(&["report", dir.to_str().unwrap(), "--json"]));
    assert_eq!(report["status"], "interrupted");
    let requests = report["total"]["requests"].as_u64().unwrap();
    // Three whole seconds at 100/s were written before the kill.
    assert!((250..=400).contains(&requests), "{requests}");
}

#[test]
fn a_target_that_dies_mid_run_ends_it_as_interrupted_with_exit_3() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior {
        hang_after: Some(100),
        ..Default::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln(&[
        "run",
        &target.url("/"),
        "-c",
        "2",
        "-d",
        "60s",
        "--timeout",
        "1s",
        "--dead-after",
        "2s",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let run = json_with_exit(&out, 3);
    assert_eq!(run["status"], "interrupted");
    assert!(run["status_reason"]
        .as_str()
        .unwrap()
        .contains("stopped answering"));
    assert_eq!(
        run["total"]["status"]["200"].as_u64(),
        Some(target.answered())
    );
}

#[test]
fn https_with_a_self_signed_certificate_needs_insecure() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior {
        tls: true,
        ..Default::default()
    })
    .unwrap();
    let url = target.url("/");
    let refused = kiln(&["run", &url, "-d", "1s"]);
    assert_eq!(refused.status.code(), Some(1));
    // The handshake's own reason and the flag that helps, not "TLS" alone.
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("TLS: invalid peer certificate"), "{stderr}");
    assert!(
        stderr.contains("-k accepts a self-signed certificate"),
        "{stderr}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln(&[
        "run",
        &url,
        "-k",
        "-c",
        "2",
        "-d",
        "1s",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let run = json_with_exit(&out, 0);
    assert_eq!(run["total"]["requests"].as_u64(), Some(target.answered()));
    assert!(target.answered() > 50);
    assert_eq!(run["total"]["failed"], 0);
}

#[test]
fn post_bodies_from_a_file_and_headers_reach_the_target() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let body = tmp.path().join("body.json");
    std::fs::write(&body, br#"{"items": [1, 2, 3]}"#).unwrap();
    let arg = format!("@{}", body.display());
    let out = kiln(&[
        "run",
        &target.url("/api/items"),
        "-m",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-b",
        &arg,
        "-c",
        "2",
        "-d",
        "1s",
        "--json",
        "--out",
        tmp.path().join("r").to_str().unwrap(),
    ]);
    let run = json_with_exit(&out, 0);
    assert_eq!(run["plan"]["method"], "POST");
    assert_eq!(run["plan"]["body_bytes"], 20);
    assert_eq!(run["total"]["requests"].as_u64(), Some(target.answered()));
}

#[test]
fn thresholds_gate_the_exit_code_like_k6_and_report_rechecks_them() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior {
        service_time: Duration::from_millis(5),
        ..Default::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let url = target.url("/");
    let run_with = |name: &str, thresholds: &[&str]| {
        let dir = tmp.path().join(name);
        let out_dir = dir.to_str().unwrap().to_string();
        let mut args = vec!["run", url.as_str(), "--rate", "100", "-d", "1s", "--json"];
        for t in thresholds {
            args.extend(["--threshold", t]);
        }
        args.extend(["--out", out_dir.as_str()]);
        let out = kiln(&args);
        (out.status.code(), json_of(&out), dir)
    };
    let (code, run, _) = run_with("pass", &["p99<500ms", "failed<1%", "min>=5ms"]);
    assert_eq!(code, Some(0), "{}", run["thresholds"]);
    assert!(run["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["ok"] == true));

    let (code, run, dir) = run_with("fail", &["p50<1ms", "p99<500ms"]);
    assert_eq!(code, Some(99));
    let results = run["thresholds"].as_array().unwrap();
    assert_eq!(results[0]["ok"], false);
    assert!(results[0]["actual"].as_f64().unwrap() >= 5_000.0);
    assert_eq!(results[1]["ok"], true);
    let reported = kiln(&["report", dir.to_str().unwrap(), "--json"]);
    // Read again, a failed threshold fails again (it exited 0 before).
    let report = json_with_exit(&reported, 99);
    assert_eq!(report["thresholds"], run["thresholds"]);

    let bad = kiln(&["run", &url, "--threshold", "p99<soon"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad threshold"));
}

/// `--arrivals poisson`: about rate x duration requests (Poisson spread), the seed recorded,
/// and the same seed sends the same number.
#[test]
fn poisson_arrivals_send_about_the_rate_and_repeat_with_their_seed() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let url = target.url("/");
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let out = tmp.path().join(name);
        let v = json_with_exit(
            &kiln(&[
                "run",
                &url,
                "--rate",
                "300",
                "-d",
                "2s",
                "--arrivals",
                "poisson",
                "--seed",
                "99",
                "--json",
                "--quiet",
                "--out",
                out.to_str().unwrap(),
            ]),
            0,
        );
        (
            v["total"]["requests"].as_u64().unwrap() + v["total"]["unsent"].as_u64().unwrap_or(0),
            v,
        )
    };
    let (sent, v) = run("a");
    // 600 expected, standard deviation sqrt(600) = 24.5
    assert!((sent as f64 - 600.0).abs() < 4.0 * 24.5, "{sent}");
    assert_eq!(
        v["plan"]["workload"]["arrivals"],
        serde_json::json!({"kind": "poisson", "seed": 99})
    );
    let (again, _) = run("b");
    assert_eq!(again, sent, "the same seed schedules the same arrivals");
}

/// `latency.hlog`: the per-second histograms as an HdrHistogram interval log that merges back
/// to exactly the run's latency figures (read here with hdrhistogram's own log reader, and
/// with the Java HistogramLogProcessor). The warm-up's seconds are tagged apart: read whole
/// under `latency` they were counted in (3800 requests where kiln said 3200).
#[test]
fn the_latency_log_merges_back_to_the_summary() {
    let _turn = common::beside();
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let target = TargetServer::start(Behavior {
        service_time: Duration::from_millis(1),
        ..Default::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let v = json_with_exit(
        &kiln(&[
            "run",
            &target.url("/"),
            "--rate",
            "200",
            "-d",
            "2s",
            "--warmup",
            "1s",
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    let log = std::fs::read(out.join("latency.hlog")).unwrap();
    let mut merged: Option<hdrhistogram::Histogram<u64>> = None;
    let (mut latency_lines, mut service_lines, mut warmup_lines) = (0, 0, 0);
    for entry in IntervalLogIterator::new(&log) {
        let LogEntry::Interval(h) = entry.expect("a valid interval log") else {
            continue;
        };
        let decoded: hdrhistogram::Histogram<u64> = Deserializer::new()
            .deserialize(&mut std::io::Cursor::new(
                base64::Engine::decode(
                    &base64::engine::general_purpose::STANDARD,
                    h.encoded_histogram(),
                )
                .unwrap(),
            ))
            .unwrap();
        match h.tag().map(|t| t.as_str()) {
            Some("latency") => {
                latency_lines += 1;
                match &mut merged {
                    Some(m) => m.add(&decoded).unwrap(),
                    None => merged = Some(decoded),
                }
            }
            Some("service") => service_lines += 1,
            Some("warmup-latency" | "warmup-service") => warmup_lines += 1,
            other => panic!("unexpected tag {other:?}"),
        }
    }
    let merged = merged.expect("latency lines");
    assert!(
        latency_lines >= 2 && service_lines == latency_lines && warmup_lines >= 2,
        "{latency_lines} / {service_lines} / {warmup_lines}"
    );
    let lat = &v["total"]["latency"];
    assert_eq!(merged.len(), lat["count"].as_u64().unwrap(), "{lat}");
    assert_eq!(merged.max(), lat["max_us"].as_u64().unwrap());
    assert_eq!(
        merged.value_at_quantile(0.99),
        lat["p99_us"].as_u64().unwrap()
    );
    let figures = |lat: &serde_json::Value| {
        let n = |k: &str| lat[k].as_u64().unwrap();
        (n("count"), n("max_us"), n("p50_us"))
    };
    assert_eq!(
        common::apps::hlog_processor(&out.join("latency.hlog")),
        figures(lat)
    );
    let m = manifest(&out);
    assert!(m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["kind"] == "latency-hlog"));
}

/// A run that cannot start (here a name that does not resolve) still leaves CI a JUnit file
/// that says why: none was written, and a CI job had nothing to show.
#[test]
fn a_run_that_cannot_start_writes_a_junit_file_that_says_why() {
    let _turn = common::beside();
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let out = kiln(&[
        "run",
        "http://kiln-no-such-host.invalid:8080/",
        "-d",
        "1s",
        "--quiet",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let error = doc
        .descendants()
        .find(|n| n.has_tag_name("error"))
        .unwrap_or_else(|| panic!("{xml}"));
    let message = error.attribute("message").unwrap();
    assert!(
        message.starts_with(
            "the run is unable to start: cannot resolve host 'kiln-no-such-host.invalid'"
        ),
        "{xml}"
    );
}

/// `kiln run` on a terminal of `columns`, in tmux: what the pane shows once it ended, lines
/// joined where tmux wrapped them (`-J`), with the escape codes of colour kept (`-e`). With
/// `stalled`, the tmux server is stopped that long as kiln starts: a terminal that answers
/// late, as one on a busy host does.
fn run_in_tmux(columns: u32, args: &[&str], stalled: Option<Duration>) -> String {
    // a server of its own per session: sessions of one shared server raced its exit
    let session = format!("kiln-e2e-{}-{columns}", std::process::id());
    // The pane is read once it shows this line, which the shell prints after kiln exits: tmux
    // reads the terminal's output on its own time, and on a busy machine a pane captured as
    // soon as kiln had exited still lacked kiln's last lines.
    const ENDED: &str = "kiln-in-tmux-ended";
    let command = format!(
        "{} {}; echo {ENDED} $?; sleep 60",
        env!("CARGO_BIN_EXE_kiln"),
        args.join(" "),
    );
    let tmux = |a: &[&str]| {
        Command::new("tmux")
            .args(["-L", &session])
            .args(a)
            .output()
            .expect("tmux runs")
    };
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        &columns.to_string(),
        "-y",
        "50",
        "-e",
        "TERM=xterm-256color",
        "-e",
        "NO_COLOR=",
        &command,
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    if let Some(stalled) = stalled {
        let server = tmux(&["display-message", "-p", "#{pid}"]);
        let server = String::from_utf8_lossy(&server.stdout).trim().to_string();
        let signal = |name: &str| {
            let sent = Command::new("kill").args([name, &server]).status();
            assert!(sent.is_ok_and(|s| s.success()), "kill {name} {server}");
        };
        signal("-STOP");
        std::thread::sleep(stalled);
        signal("-CONT");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let pane = loop {
        let pane = tmux(&["capture-pane", "-p", "-J", "-e", "-S", "-", "-t", &session]);
        let pane = String::from_utf8_lossy(&pane.stdout).into_owned();
        if let Some(at) = pane.find(ENDED) {
            break pane[..at].to_string();
        }
        assert!(
            Instant::now() < deadline,
            "kiln did not end in tmux:\n{pane}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    tmux(&["kill-server"]);
    pane
}

/// The text of a pane without its escape codes.
fn without_escapes(pane: &str) -> String {
    let mut out = String::new();
    let mut chars = pane.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ ... final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Under 100 columns the progress line broke into a line per redraw and the latency table
/// wrapped mid-number ("18.\n8ms"); FAIL looked like everything else. A terminal of 80
/// columns or more now gets the live view, redrawn in place; a narrower one the progress line.
#[test]
fn the_summary_and_the_live_view_fit_the_terminal_and_fail_is_in_colour() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for columns in [60, 80, 200] {
        // at 80, the terminal answers where its cursor is 3 s late (crossterm gives up after
        // 2 s): the view still shows
        let stalled = (columns == 80).then_some(Duration::from_secs(3));
        let dir = tmp.path().join(format!("r{columns}"));
        let url = target.url("/");
        let out = dir.to_str().unwrap();
        let pane = run_in_tmux(
            columns,
            &[
                "run",
                &url,
                "-d",
                "3s",
                "-c",
                "4",
                "--threshold",
                "'p99<1us'",
                "--out",
                out,
            ],
            stalled,
        );
        let text = without_escapes(&pane);
        for line in text.lines() {
            assert!(
                line.chars().count() <= columns as usize,
                "a line wider than {columns} columns (wrapped by the terminal):\n{line}\nin\n{text}"
            );
        }
        // the live view (80 columns or more) or the progress line (fewer) is redrawn in
        // place: one of it however many seconds
        let (live, progress) = (
            text.lines()
                .filter(|l| l.starts_with("kiln · run "))
                .count(),
            text.lines().filter(|l| l.starts_with("[run]")).count(),
        );
        if columns >= 80 {
            assert_eq!((live, progress), (1, 0), "{text}");
            assert!(
                text.contains("latency so far") && text.contains("so far"),
                "{text}"
            );
        } else {
            assert_eq!((live, progress), (0, 1), "{text}");
        }
        assert!(
            text.contains("p99.99") && text.contains("Threshold"),
            "{text}"
        );
        assert!(
            pane.contains("\x1b[1m\x1b[31mFAIL") || pane.contains("\x1b[1;31mFAIL"),
            "FAIL is not in colour:\n{pane:?}"
        );
    }
    // piped: no colour, the lines as written
    let piped = kiln(&["report", tmp.path().join("r80").to_str().unwrap()]);
    let piped = String::from_utf8_lossy(&piped.stdout);
    assert!(!piped.contains('\x1b'), "{piped}");
    assert!(piped.lines().any(|l| l.len() > 100), "{piped}");
}

/// `-d 2s` against a server whose accept queue is full ran until `--timeout` (a 3 s run took
/// 11 s, its rate taken over all of it). It ends at the deadline and says what it cut.
#[test]
fn a_run_ends_at_its_deadline_and_says_what_was_still_waiting() {
    let _turn = common::beside();
    let (_listener, addr) = kiln_targets::idle_listener(0);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let started = Instant::now();
    let out = kiln(&[
        "run",
        &format!("http://{addr}/"),
        "-d",
        "2s",
        "-c",
        "4",
        "--timeout",
        "20s",
        "--connect-timeout",
        "20s",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // the deadline, the half second for requests in flight, and kiln's own start and finish
    assert!(
        took < Duration::from_secs(5),
        "a 2 s run took {took:?}\n{stdout}"
    );
    let cut = stdout
        .lines()
        .find(|l| l.starts_with("Cut off "))
        .unwrap_or_else(|| panic!("nothing said of the cut requests:\n{stdout}"));
    assert!(cut.contains("were still connecting"), "{cut}");
    // no response: no symptoms to speak of (it said "p99 0us (p50 0us) at 0.0/s")
    assert!(!stdout.contains("Symptoms"), "{stdout}");
    let report = json_of(&kiln(&["report", dir.to_str().unwrap(), "--json"]));
    let end = &report["phases"][0];
    let cut_count =
        end["abandoned"].as_u64().unwrap_or(0) + end["abandoned_connecting"].as_u64().unwrap_or(0);
    assert_eq!(cut_count, 4, "{report:#}");
}
