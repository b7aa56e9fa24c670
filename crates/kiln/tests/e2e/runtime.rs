//! `kiln run --watch-port` on a JVM: the runtime is named, its GC pauses, safepoints and
//! threads are in the summary and its JSON (the figures themselves are checked against the
//! JVM's own logs in kiln-runtime's tests), and `kiln report` shows the same from the record.
//! A native target is named as such, with what kiln could not read.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::apps::{free_port, javac, wait_port, workspace, Killed};
use common::{finding, json_with_exit, kiln};

#[test]
fn a_jvm_target_shows_its_gc_safepoints_and_threads() {
    let _turn = common::group("runtime");
    let tmp = tempfile::tempdir().unwrap();
    let classes = gc_pattern_classes(tmp.path());
    let gc_log = tmp.path().join("gc.log");
    let log = format!("-Xlog:gc:file={}", gc_log.display());
    let (_jvm, port) = gc_pattern(&classes, &["-Xmx64m", "-Xmn8m", &log], &["400", "60"]);
    let out_dir = tmp.path().join("run");
    let json = kiln_run_watched(port, &out_dir, &["-c", "2", "-d", "3s"]);
    let runtime = &json["runtime"];
    assert_eq!(runtime["runtime"], "jvm", "{runtime}");
    assert!(
        runtime["version"].as_str().unwrap().contains("OpenJDK"),
        "{runtime}"
    );
    let jvm_figures = &runtime["jvm"];
    let pauses = jvm_figures["gc_pauses"].as_u64().unwrap();
    // A full collection every 400 ms and young ones from the allocation rate: over 3 s,
    // at least the full ones.
    assert!(pauses >= 6, "{jvm_figures}");
    let full = jvm_figures["by_collector"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "G1 full collection pauses")
        .unwrap();
    assert!(full["pauses"].as_u64().unwrap() >= 6, "{jvm_figures}");
    // every pause is a safepoint; one at each edge of the window may have been counted on
    // the other side of it (the two counters move at different moments of a pause)
    assert!(
        jvm_figures["safepoints"].as_u64().unwrap() + 2 >= pauses,
        "{jvm_figures}"
    );
    assert!(jvm_figures["threads_live_max"].as_u64().unwrap() >= 5);
    let log_pauses = std::fs::read_to_string(&gc_log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(" Pause "))
        .count() as u64;
    assert!(
        pauses <= log_pauses,
        "kiln {pauses}, the whole GC log {log_pauses}"
    );

    // The same from the record.
    let report = kiln(&["report", out_dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("Runtime    JVM OpenJDK"), "{text}");
    assert!(text.contains(&format!("GC: {pauses} pauses")), "{text}");
    // a full collection every 400 ms keeps the GC threads busy enough to be named
    assert!(text.contains("threads' CPU (% of a core): "), "{text}");
    let roles = json["runtime"]["cpu_by_thread_role"].as_array().unwrap();
    assert!(
        roles
            .iter()
            .any(|r| r["role"] == "gc" && r["cpu_pct"].as_f64().unwrap() > 0.0),
        "{roles:?}"
    );
    let again = json_with_exit(&kiln(&["report", out_dir.to_str().unwrap(), "--json"]), 0);
    assert_eq!(again["runtime"], json["runtime"]);
}

#[test]
fn a_native_target_is_named_with_what_kiln_cannot_read() {
    let _turn = common::group("runtime");
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("run");
    let url = target.url("/");
    let pid = std::process::id().to_string();
    let json = json_with_exit(
        &kiln(&[
            "run",
            &url,
            "-c",
            "1",
            "-d",
            "1s",
            "--watch-pid",
            &pid,
            "--json",
            "--quiet",
            "--out",
            out_dir.to_str().unwrap(),
        ]),
        0,
    );
    let runtime = &json["runtime"];
    assert_eq!(runtime["runtime"], "native", "{runtime}");
    assert!(runtime["jvm"].is_null());
    assert!(
        runtime["not_read"][0]
            .as_str()
            .unwrap()
            .contains("no managed runtime"),
        "{runtime}"
    );
}

/// tests/apps/java_logs/AsyncLogShop (real log4j2 and LMAX disruptor from Maven Central) with
/// a ring buffer of 128 slots and a log destination slower than the requests: the default
/// policy makes request threads wait to enqueue, `Discard` drops the events instead.
fn async_log_shop(classes: &std::path::Path, classpath: &str, discard: bool) -> (Killed, u16) {
    let port = free_port();
    let app = workspace().join("tests/apps/java_logs");
    let mut java = Command::new("java");
    java.arg("-Dsun.net.httpserver.nodelay=true")
        .arg("-Dlog4j2.contextSelector=org.apache.logging.log4j.core.async.AsyncLoggerContextSelector")
        .arg("-Dlog4j2.asyncLoggerRingBufferSize=128")
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            app.join("log4j2-async.xml").display()
        ));
    if discard {
        java.arg("-Dlog4j2.asyncQueueFullPolicy=Discard");
    }
    let mut child = java
        .arg("-cp")
        .arg(format!("{}:{classpath}", classes.display()))
        .args(["AsyncLogShop", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("java starts");
    wait_port(port, &mut child, "AsyncLogShop");
    (Killed(child), port)
}

fn run_deep(port: u16, out: &std::path::Path) -> serde_json::Value {
    kiln_run_watched(
        port,
        out,
        &["-c", "8", "--warmup", "1s", "-d", "5s", "--runtime", "deep"],
    )
}

const RING_FULL: &str = "log4j2 async logger ring buffer full";

#[test]
fn request_threads_blocked_behind_a_full_log4j2_ring_buffer_are_named_and_discard_has_none() {
    let _turn = common::group("runtime");
    common::apps::fetch("java-agent.sh");
    let jar = |group: &str, name: &str, version: &str| common::apps::m2_jar(group, name, version);
    let classpath = [
        jar("org.apache.logging.log4j", "log4j-api", "2.24.3"),
        jar("org.apache.logging.log4j", "log4j-core", "2.24.3"),
        jar("com.lmax", "disruptor", "3.4.4"),
    ]
    .join(":");
    let tmp = tempfile::tempdir().unwrap();
    let classes = tmp.path().join("classes");
    javac(
        &[workspace().join("tests/apps/java_logs/AsyncLogShop.java")],
        Some(&classpath),
        &classes,
    );

    let (app, port) = async_log_shop(&classes, &classpath, false);
    let full = run_deep(port, &tmp.path().join("full"));
    drop(app);
    let threads = &full["runtime"]["threads"];
    assert!(threads["dumps"].as_u64().unwrap() >= 2, "{threads:#}");
    let site = threads["contended"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signature"] == RING_FULL)
        .unwrap_or_else(|| panic!("the ring buffer's signature is named: {threads:#}"));
    assert!(
        site["waiting_at"]
            .as_str()
            .unwrap()
            .ends_with("AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull"),
        "{site:#}"
    );
    assert!(site["waiters_max"].as_u64().unwrap() >= 2, "{site:#}");
    // the holder waits in the disruptor for a free slot
    assert!(
        site["holder_frames"]
            .to_string()
            .contains("com.lmax.disruptor.MultiProducerSequencer.next"),
        "{site:#}"
    );
    assert!(site["holder"].as_str().unwrap().starts_with("request-"));
    assert!(threads["blocked_max"].as_u64().unwrap() >= 2);
    // what the dumps cost is measured, from the JVM's own safepoint time
    assert!(
        threads["safepoint_ms_max"].as_f64().is_some(),
        "{threads:#}"
    );
    let text = String::from_utf8_lossy(
        &kiln(&["report", tmp.path().join("full").to_str().unwrap()]).stdout,
    )
    .to_string();
    assert!(text.contains(&format!("[{RING_FULL}]")), "{text}");
    let blocked = finding(&full, "runtime.blocked-threads")
        .unwrap_or_else(|| panic!("{:#}", full["findings"]));
    assert!(
        blocked["title"].as_str().unwrap().contains(RING_FULL),
        "{blocked:#}"
    );
    assert!(
        blocked["fix"]
            .as_str()
            .unwrap()
            .contains("asyncQueueFullPolicy=Discard"),
        "{blocked:#}"
    );

    let (app, port) = async_log_shop(&classes, &classpath, true);
    let discard = run_deep(port, &tmp.path().join("discard"));
    drop(app);
    let threads = &discard["runtime"]["threads"];
    assert!(threads["dumps"].as_u64().unwrap() >= 2, "{threads:#}");
    assert!(
        !threads["contended"].to_string().contains("log4j"),
        "with Discard nobody waits to log: {threads:#}"
    );
    assert!(
        finding(&discard, "runtime.blocked-threads")
            .is_none_or(|f| !f["title"].as_str().unwrap().contains("log")),
        "{:#}",
        discard["findings"]
    );
    assert!(
        discard["findings"]["judged"]
            .to_string()
            .contains("runtime.blocked-threads"),
        "{:#}",
        discard["findings"]
    );
}

/// GcPattern with 60 MB alive and System.gc() every 100 ms: full collections stop it a large
/// share of the time (the finding, with the collector and the fix); the same JVM with
/// -XX:+DisableExplicitGC has only short young pauses and no finding.
#[test]
fn gc_pauses_from_explicit_full_collections_are_found_and_disable_explicit_gc_clears_them() {
    let _turn = common::group("runtime");
    let tmp = tempfile::tempdir().unwrap();
    let classes = gc_pattern_classes(tmp.path());
    let run = |fixed: bool| {
        let flags: &[&str] = if fixed {
            &["-Xmx256m", "-Xmn32m", "-XX:+DisableExplicitGC"]
        } else {
            &["-Xmx256m", "-Xmn32m"]
        };
        let (_jvm, port) = gc_pattern(&classes, flags, &["100", "60", "60"]);
        let out = tmp.path().join(if fixed { "fixed" } else { "planted" });
        kiln_run_watched(port, &out, &["-c", "2", "--warmup", "1s", "-d", "5s"])
    };
    let planted = run(false);
    let gc = finding(&planted, "runtime.gc-pauses")
        .unwrap_or_else(|| panic!("{:#}", planted["runtime"]));
    let share = gc["data"]["gc_pause_share"].as_f64().unwrap();
    assert_eq!(
        share,
        planted["runtime"]["jvm"]["gc_pause_share"]
            .as_f64()
            .unwrap()
    );
    assert!(share >= 0.05, "{gc:#}");
    assert!(
        gc["evidence"][1]
            .as_str()
            .unwrap()
            .starts_with("G1 full collection pauses"),
        "the collector that paused most comes first: {gc:#}"
    );
    assert!(gc["fix"]
        .as_str()
        .unwrap()
        .contains("-XX:+DisableExplicitGC"));

    let fixed = run(true);
    assert!(
        finding(&fixed, "runtime.gc-pauses").is_none(),
        "{:#}",
        fixed["runtime"]
    );
    assert!(
        fixed["findings"]["judged"]
            .to_string()
            .contains("runtime.gc-pauses"),
        "{:#}",
        fixed["findings"]
    );
}

/// `--warmup auto` on a JVM (tests/apps/java_logs/LogShop, real log4j2): the warm-up ends
/// before its cap, once the JIT has gone quiet, and the record bears the reason out: the JIT
/// was busy at first and its last seconds before the end were quiet, as recorded second by
/// second from the JVM's own counters. The same service measured cold is found still warming
/// up (runtime.jit-warmup); warmed up by `auto`, it is not.
#[test]
fn warmup_auto_ends_when_the_jit_has_gone_quiet_and_a_cold_run_is_found_warming_up() {
    let _turn = common::group("runtime");
    let tmp = tempfile::tempdir().unwrap();
    let shop = common::apps::LogShop::compile(tmp.path());
    // a fresh JVM per run, and kiln run against it with `warmup`
    let run = |warmup: &str, out: &std::path::Path| {
        let (_app, port) = shop.start("fixed", "log4j2-plain.xml");
        kiln_run_watched(port, out, &["-c", "2", "--warmup", warmup, "-d", "6s"])
    };
    // measured cold: the JIT compiles through the measured seconds
    let cold = run("0s", &tmp.path().join("cold"));
    let jit =
        finding(&cold, "runtime.jit-warmup").unwrap_or_else(|| panic!("{:#}", cold["runtime"]));
    assert!(jit["fix"].as_str().unwrap().contains("--warmup auto"));
    // the compiler threads' CPU, from the sampler's per-thread counters, is the second witness
    assert!(
        jit["evidence"].to_string().contains("the compiler threads"),
        "{jit:#}"
    );
    let roles = cold["runtime"]["cpu_by_thread_role"].as_array().unwrap();
    let pct = |role: &str| {
        roles
            .iter()
            .find(|r| r["role"] == role)
            .map_or(0.0, |r| r["cpu_pct"].as_f64().unwrap())
    };
    assert!(pct("compiler") > 1.0, "{roles:?}");
    assert!(pct("application") > 1.0, "{roles:?}");
    // the roles share out the process's CPU as the kernel counted it, thread by thread
    let process = cold["resources"]["process"]["cpu_mean_pct"]
        .as_f64()
        .unwrap();
    let sum: f64 = roles.iter().map(|r| r["cpu_pct"].as_f64().unwrap()).sum();
    assert!(
        (sum - process).abs() <= 0.1 * process + 2.0,
        "roles {sum:.1}% of a core, process {process:.1}%: {roles:?}"
    );

    let out = tmp.path().join("run");
    // a cap the JIT's quiet comes well before on a quiet VM (the whole test held its turn
    // 36 s), and still before on one whose hypervisor takes its CPUs (at 20-40% steal it
    // went quiet only at about 40 s, and the warm-up ended at a 45 s cap)
    let json = run("auto:60s", &out);
    assert!(
        finding(&json, "runtime.jit-warmup").is_none(),
        "warmed up: {:#}",
        json["runtime"]
    );
    let warmup = &json["phases"][0];
    assert_eq!(warmup["measured"], false);
    // the measured run went on over the warm-up's connections: new ones would deoptimise
    // the JVM's connection code and set its JIT compiling again in the measured seconds
    let measured = &json["phases"][1];
    assert_eq!(measured["connections_kept"], 2, "{measured:#}");
    assert_eq!(measured["connections_opened"], 0, "{measured:#}");
    let why = warmup["ended_because"].as_str().unwrap();
    assert!(why.contains("the JIT compiled at most"), "{why}");
    // the second witness: the compiler threads' CPU from the kernel's per-thread counters
    assert!(why.contains("compiler threads used at most"), "{why}");
    let took = warmup["duration_s"].as_f64().unwrap();
    assert!(
        (5.0..59.0).contains(&took),
        "settled before the cap: {took} s, {why}"
    );

    // the record: the load's first measured second, and the JIT second by second
    let read = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(out.join(name))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let measured_from = read("load-seconds.jsonl")
        .iter()
        .find(|l| l["second"]["phase"] == "run")
        .map(|l| l["second"]["unix_ms"].as_u64().unwrap() - 1000)
        .unwrap();
    let jit: Vec<f64> = read("runtime-seconds.jsonl")
        .iter()
        .filter(|s| s["unix_ms"].as_u64().unwrap() <= measured_from)
        .map(|s| s["jvm"]["jit_ms"].as_f64().unwrap())
        .collect();
    let busiest = jit.iter().copied().fold(0.0, f64::max);
    assert!(busiest >= 200.0, "the JIT was busy at first: {jit:?}");
    // the five seconds before the end were quiet (of the last six: a second may tick between
    // the warm-up's end and the measured run's start)
    let last = &jit[jit.len().saturating_sub(6)..];
    let quiet = last
        .iter()
        .filter(|ms| **ms <= (busiest * 0.1).max(20.0))
        .count();
    assert!(quiet >= 5, "quiet before the end: {jit:?}");
}

#[test]
fn warmup_auto_without_a_jvm_goes_by_throughput_and_a_bad_cap_is_refused() {
    let _turn = common::group("runtime");
    // 10 ms a request over 4 connections: throughput set by the target's sleep, not by CPU
    // a busy machine shares out unevenly (one connection to an instant target swung from 1
    // to 36,000 responses a second on a loaded CI host and never settled)
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior {
        service_time: std::time::Duration::from_millis(10),
        ..Default::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let url = target.url("/");
    let out = tmp.path().join("run");
    let json = json_with_exit(
        &kiln(&[
            "run",
            &url,
            "-c",
            "4",
            "--warmup",
            "auto:20s",
            "-d",
            "1s",
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    let why = json["phases"][0]["ended_because"].as_str().unwrap();
    assert!(why.contains("no JIT figures"), "{why}");
    let took = json["phases"][0]["duration_s"].as_f64().unwrap();
    assert!((4.5..19.0).contains(&took), "{took} s: {why}");
    for (bad, says) in [
        ("auto:2s", "shorter than"),
        ("auto30s", "auto:DURATION"),
        ("soon", "bad duration"),
    ] {
        let run = kiln(&["run", &url, "--warmup", bad, "-d", "1s"]);
        let err = String::from_utf8_lossy(&run.stderr);
        // bad usage, said in one line
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }

    // the same from a plan file's `warmup: auto:20s`
    let plan = |warmup: &str| {
        let file = tmp
            .path()
            .join(format!("plan-{}.yaml", warmup.replace(':', "-")));
        std::fs::write(
            &file,
            format!(
                "scenarios:\n  - name: home\n    steps:\n      - url: {url}\n\
                 load:\n  vus: 4\n  duration: 1s\n  warmup: {warmup}\n"
            ),
        )
        .unwrap();
        file
    };
    let file = plan("auto:20s");
    let out = tmp.path().join("plan-run");
    let json = json_with_exit(
        &kiln(&[
            "run",
            file.to_str().unwrap(),
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    let why = json["phases"][0]["ended_because"].as_str().unwrap();
    assert!(why.contains("no JIT figures"), "{why}");
    let file = plan("auto:2s");
    let run = kiln(&["run", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("shorter than"), "{err}");
}

/// `kiln watch --runtime deep` on a JVM without load: the runtime's lines in the summary, the
/// runtime's part in the watch's directory, a thread dump in its seconds.
#[test]
fn kiln_watch_reads_the_runtime_too() {
    let _turn = common::group("runtime");
    let tmp = tempfile::tempdir().unwrap();
    let classes = gc_pattern_classes(tmp.path());
    let (jvm, _) = gc_pattern(&classes, &["-Xmx64m", "-Xmn8m"], &["500", "60"]);
    let out = tmp.path().join("watch");
    let pid = jvm.0.id().to_string();
    let watch = kiln(&[
        "watch",
        "--pid",
        &pid,
        "-d",
        "3s",
        "--runtime",
        "deep",
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&watch.stdout);
    assert_eq!(watch.status.code(), Some(0), "{text}");
    assert!(text.contains("Runtime    JVM OpenJDK"), "{text}");
    assert!(text.contains("G1 full collection pauses"), "{text}");
    assert!(text.contains("threads (1 dump, mean)"), "{text}");
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("runtime.json")).unwrap()).unwrap();
    assert_eq!(info["runtime"], "jvm");
    let seconds = std::fs::read_to_string(out.join("runtime-seconds.jsonl")).unwrap();
    assert_eq!(seconds.lines().count(), 3, "{seconds}");
    assert!(seconds.contains("\"thread_dump\""), "{seconds}");
}

/// LogShop planted builds exactly 20 exceptions a request (one per item priced): with
/// `--runtime deep`, the throwables JFR counted are 20 times the responses kiln counted over
/// the same span (within 5%), and the finding fires; fixed, it throws none and the finding
/// does not.
#[test]
fn exceptions_per_second_are_k_times_the_throughput() {
    let _turn = common::group("runtime");
    let tmp = tempfile::tempdir().unwrap();
    let shop = common::apps::LogShop::compile(tmp.path());
    // JFR stamps its once-a-second reading when its periodic thread sets out, and reads the
    // count when it gets there: on a machine with a busy neighbour that can be a few hundred
    // ms later (a CI-like run beside bursts of load: 6.5% over 4 s). The planted run is long
    // enough that such a lag at either end stays inside the 5%.
    let run = |mode: &str, seconds: &str| {
        let (_app, port) = shop.start(mode, "log4j2-plain.xml");
        let out = tmp.path().join(mode);
        kiln_run_watched(
            port,
            &out,
            &[
                "-c",
                "2",
                "--warmup",
                "2s",
                "-d",
                seconds,
                "--runtime",
                "deep",
            ],
        )
    };
    let planted = run("planted", "12s");
    let rate = planted["runtime"]["exceptions_per_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{:#}", planted["runtime"]));
    // Over the span of JFR's readings inside the measured load (it reads once a second at
    // its own phase): the throwables it counted against 20 times the responses kiln counted
    // in the same span (each second's share by its overlap).
    let dir = tmp.path().join("planted");
    let read = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join(name))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let seconds: Vec<(f64, f64)> = read("load-seconds.jsonl")
        .iter()
        .filter(|l| l["second"]["phase"] == "run")
        .map(|l| {
            let s = &l["second"];
            (
                s["unix_ms"].as_f64().unwrap(),
                s["requests"].as_f64().unwrap(),
            )
        })
        .collect();
    let (from, to) = (seconds[0].0 - 1000.0, seconds.last().unwrap().0);
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runtime.json")).unwrap()).unwrap();
    let readings: Vec<(f64, f64)> = info["throwable_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["unix_ms"].as_f64().unwrap(),
                c["throwables"].as_f64().unwrap(),
            )
        })
        .filter(|(t, _)| *t >= from && *t <= to)
        .collect();
    let ((t1, n1), (t2, n2)) = (readings[0], *readings.last().unwrap());
    assert!(
        (rate - (n2 - n1) / ((t2 - t1) / 1000.0)).abs() < 1.0,
        "kiln's rate is the readings' {rate}"
    );
    let responses: f64 = seconds
        .iter()
        .map(|(end, n)| {
            let overlap = (end.min(t2) - (end - 1000.0).max(t1)).max(0.0);
            n * overlap / 1000.0
        })
        .sum();
    let ratio = (n2 - n1) / (20.0 * responses);
    assert!(
        (0.95..=1.05).contains(&ratio),
        "{} throwables for {responses:.0} responses in {:.1} s: {ratio:.3} of 20 a request",
        n2 - n1,
        (t2 - t1) / 1000.0
    );
    let found = finding(&planted, "runtime.exceptions")
        .unwrap_or_else(|| panic!("{:#}", planted["findings"]));
    assert!(
        found["evidence"].to_string().contains("per request"),
        "{found:#}"
    );

    let fixed = run("fixed", "5s");
    let rate = fixed["runtime"]["exceptions_per_s"].as_f64().unwrap();
    assert!(rate < 50.0, "the fixed shop throws none: {rate}");
    assert!(finding(&fixed, "runtime.exceptions").is_none());
}

/// `kiln run http://127.0.0.1:PORT/ ARGS --watch-port PORT --json --quiet --out OUT`, exit 0,
/// its JSON.
fn kiln_run_watched(port: u16, out: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{port}/");
    let port = port.to_string();
    let mut all = vec!["run", url.as_str()];
    all.extend_from_slice(args);
    let out = out.to_str().unwrap();
    all.extend_from_slice(&["--watch-port", &port, "--json", "--quiet", "--out", out]);
    json_with_exit(&kiln(&all), 0)
}

/// tests/apps/java_gc/GcPattern compiled into `dir`.
fn gc_pattern_classes(dir: &std::path::Path) -> std::path::PathBuf {
    let classes = dir.join("classes");
    javac(
        &[workspace().join("tests/apps/java_gc/GcPattern.java")],
        None,
        &classes,
    );
    classes
}

/// GcPattern on G1 with these JVM flags, `PERIOD_MS SECONDS [LIVE_MB]` (its port put in
/// between), serving HTTP on its own port.
fn gc_pattern(classes: &std::path::Path, flags: &[&str], args: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let port_text = port.to_string();
    let mut program = vec!["GcPattern", args[0], args[1], &port_text];
    program.extend_from_slice(&args[2..]);
    let mut jvm = Killed(
        Command::new("java")
            .arg("-XX:+UseG1GC")
            .args(flags)
            .arg("-cp")
            .arg(classes)
            .args(&program)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(port, &mut jvm.0, "the GC pattern JVM");
    (jvm, port)
}

/// A Python process whose threads are known: three spinning in `spin_forever` (one of them
/// holds the GIL at any moment) beside one asleep, or only sleepers (nobody holds it).
/// `kiln watch --runtime deep` reads them with py-spy.
#[test]
fn python_threads_and_the_gil_holder_come_from_py_spy() {
    let _turn = common::group("runtime");
    const SCRIPT: &str = "
import sys, threading, time
def spin_forever():
    x = 0
    while True:
        x += 1
def nap():
    while True:
        time.sleep(0.05)
work = spin_forever if sys.argv[1] == 'spin' else nap
for i in range(3):
    threading.Thread(target=work, name=f'worker-{i}', daemon=True).start()
threading.Thread(target=nap, name='sleeper', daemon=True).start()
print('ready', flush=True)
time.sleep(120)
";
    let python = common::apps::python();
    let py_spy = common::apps::workspace().join("target/pyenv/bin/py-spy");
    let tmp = tempfile::tempdir().unwrap();
    let watch = |mode: &str| {
        let mut child = std::process::Command::new(&python)
            .args(["-c", SCRIPT, mode])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        assert_eq!(ready.trim(), "ready");
        let out = tmp.path().join(mode);
        let pid = child.id().to_string();
        let run = common::kiln_with_env(
            &[
                "watch",
                "--pid",
                &pid,
                "-d",
                "9s",
                "--runtime",
                "deep",
                "--out",
                out.to_str().unwrap(),
            ],
            &[("KILN_PY_SPY", py_spy.to_str().unwrap())],
        );
        let _ = child.kill();
        let _ = child.wait();
        let text = String::from_utf8_lossy(&run.stdout).to_string();
        assert_eq!(run.status.code(), Some(0), "{text}");
        // the findings of the watch's record, as `kiln findings` reads any record
        let findings = serde_json::json!({
            "findings": json_with_exit(&kiln(&["findings", out.to_str().unwrap(), "--json"]), 0)
        });
        let dumps: Vec<serde_json::Value> =
            std::fs::read_to_string(out.join("runtime-seconds.jsonl"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["python"].clone())
                .collect();
        (text, dumps, findings)
    };

    let (text, dumps, findings) = watch("spin");
    assert!(text.contains("Runtime    Python"), "{text}");
    assert!(dumps.len() >= 3, "{dumps:?}");
    for d in &dumps {
        // main, three workers and the sleeper
        assert_eq!(d["threads"], 5, "{d}");
    }
    // one spinner holds the GIL whenever py-spy looks (it may catch the handover)
    let held: Vec<&serde_json::Value> = dumps.iter().filter_map(|d| d.get("gil_holder")).collect();
    assert!(held.len() + 1 >= dumps.len(), "{dumps:?}");
    for h in &held {
        assert!(
            h["frame"].as_str().unwrap().starts_with("spin_forever ("),
            "{h}"
        );
        assert!(h["name"].as_str().unwrap().starts_with("worker-"), "{h}");
    }
    assert!(
        text.contains("GIL holder at spin_forever (<string>:"),
        "{text}"
    );
    // the two other spinners wait for it, told by their native frames (a dump may catch the
    // handover: the holder just let go, all three waiting)
    let waiting: Vec<u64> = dumps
        .iter()
        .map(|d| d["gil_waiters"].as_u64().expect("native frames read"))
        .collect();
    assert!(waiting.iter().all(|w| (1..=3).contains(w)), "{waiting:?}");
    let mean = waiting.iter().sum::<u64>() as f64 / waiting.len() as f64;
    assert!((1.5..=2.5).contains(&mean), "{waiting:?}");
    assert!(text.contains("waiting for the GIL: "), "{text}");
    let gil =
        finding(&findings, "runtime.gil-contention").unwrap_or_else(|| panic!("{findings:#}"));
    assert!(
        gil["evidence"].to_string().contains("spin_forever"),
        "{gil:#}"
    );

    let (text, dumps, findings) = watch("sleep");
    assert!(dumps.len() >= 3, "{dumps:?}");
    // everyone sleeps in time.sleep, which lets the GIL go
    assert!(
        dumps.iter().all(|d| d.get("gil_holder").is_none()),
        "{dumps:?}"
    );
    assert!(text.contains("the GIL held in 0% of"), "{text}");
    // nobody waits for it: asleep in time.sleep is not a queue for the GIL
    assert!(dumps.iter().all(|d| d["gil_waiters"] == 0), "{dumps:?}");
    assert!(finding(&findings, "runtime.gil-contention").is_none());
    assert!(
        findings["findings"]["judged"]
            .to_string()
            .contains("runtime.gil-contention"),
        "{findings:#}"
    );
}

/// The milliseconds a profile of LockShop weighed in nanoseconds (`locks.folded`,
/// `wall.folded`) has in `LockShop.reserve`.
fn ms_in_reserve(out: &std::path::Path, folded: &str) -> f64 {
    let folded = std::fs::read_to_string(out.join(folded)).unwrap_or_default();
    (folded.lines())
        .filter(|l| l.contains("LockShop.reserve"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>()
        / 1e6
}

/// `at_reserve_ms` as a percentage of the run's `kind` profile (weighed in nanoseconds).
fn reserve_share(json: &serde_json::Value, kind: &str, at_reserve_ms: f64) -> f64 {
    let total_ms = json[kind]["summary"]["samples"].as_f64().unwrap() / 1e6;
    100.0 * at_reserve_ms / total_ms
}

/// The run's `kind` profile (`locks`, `wall`) was taken by async-profiler.
fn by_async_profiler(json: &serde_json::Value, kind: &str) {
    assert_eq!(
        json[kind]["profiler"]
            .as_str()
            .map(|p| p.starts_with("async-profiler")),
        Some(true),
        "{:#}",
        json[kind]
    );
}

/// The report's flame graph of the `kind` profile, searched in Chromium, gives reserve the
/// share the profile has.
fn reserve_drawn_as_recorded(
    out: &std::path::Path,
    json: &serde_json::Value,
    kind: &str,
    at_reserve_ms: f64,
) {
    let flame = format!("{kind}-flame");
    let (share, _) = common::flame_search(&out.join("report.html"), &flame, "LockShop.reserve");
    let expected = reserve_share(json, kind, at_reserve_ms);
    assert!(
        (share - expected).abs() < 1.0,
        "{kind}: {share} vs {expected}"
    );
}

/// JFR's lock waits (`--runtime deep`) against the service's own stopwatch
/// (tests/apps/java_locks/LockShop times every wait for its lock and writes them down when
/// stopped): a `synchronized` block held across a 10 ms call, then a ReentrantLock held the
/// same way, each waited for by 3 of 4 request threads. The summary counts the same monitor
/// waits of 10 ms or more in the same seconds and sums the same wait time (within 2%; for the
/// ReentrantLock, whose waiters may park more than once, parks within 15% and the time parked
/// within 10%), names the lock's
/// class and the frame that asked for it, leaves the pool's idle threads out, and the
/// blocked-threads finding carries JFR's figures; the lock taken only to count, never held
/// across the call, has no waits and no finding.
/// async-profiler's lock profile of the run in `out` (`--off-cpu` of a JVM) against the
/// service's own stopwatch (`truth`: each wait's start in unix ms and its length in ms): the
/// time waited in `LockShop.reserve` lies between the service's waits of 0.2 ms or more wholly
/// inside the measured phase and all its waits begun around it (the session starts as the
/// phase does and stops after its last answers); next to none without contention.
fn lock_profile_matches_the_stopwatch(
    mode: &str,
    out: &std::path::Path,
    truth: &[(u64, f64)],
    json: &serde_json::Value,
) {
    let at_reserve_ms = ms_in_reserve(out, "locks.folded");
    if mode == "unlocked" {
        // the count's lock is held for a moment, and four threads take it: now and then one
        // finds it taken (0.7 ms in one run of 10), where the locked service waits ~24 s
        assert!(at_reserve_ms < 100.0, "{at_reserve_ms} ms waited");
        return;
    }
    let measured = kiln_record::Run::open(out).unwrap().measured().unwrap();
    let (first, last) = (
        measured.first_unix_ms.unwrap(),
        measured.last_unix_ms.unwrap(),
    );
    let span = (kiln_record::second_start_ms(first) as f64, last as f64);
    let inner: f64 = (truth.iter())
        .filter(|(start, ms)| {
            let start = *start as f64;
            *ms >= 0.2 && start >= span.0 + 500.0 && start + ms <= span.1 - 500.0
        })
        .map(|(_, ms)| ms)
        .sum();
    let outer: f64 = (truth.iter())
        .filter(|(start, _)| (span.0 - 1000.0..=span.1 + 1500.0).contains(&(*start as f64)))
        .map(|(_, ms)| ms)
        .sum();
    // a parked waiter that loses the lock to a barging thread spins before it parks again:
    // that spin is waiting the stopwatch counts and a park profile does not
    let lowest = if mode == "parked" { 0.85 } else { 0.97 };
    assert!(
        inner > 1000.0 && at_reserve_ms >= lowest * inner && at_reserve_ms <= 1.01 * outer,
        "{mode}: async-profiler {at_reserve_ms:.0} ms waited in LockShop.reserve, the service \
         {inner:.0} ms inside the measured phase, {outer:.0} ms around it"
    );
    by_async_profiler(json, "locks");
    if mode != "locked" {
        return;
    }
    // said in the summary by the lock's class and the method that waited for it
    let text = kiln(&["report", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    let said =
        |label: &str, what: &str| (text.lines()).any(|l| l.starts_with(label) && l.contains(what));
    assert!(said("Total ", "s of lock wait"), "{text}");
    assert!(said("Locks ", "LockShop$Inventory"), "{text}");
    assert!(said("Waited in", "LockShop.reserve"), "{text}");
    // and drawn in the report: reserve's share of the time waited
    reserve_drawn_as_recorded(out, json, "locks", at_reserve_ms);
}

/// The wall-clock profile's time in `LockShop.reserve` (waiting for the lock, holding it,
/// sleeping: running or not) against the service's own stopwatch of every call: the calls'
/// time inside the measured phase, and inside it widened by the profile's start and stop.
fn wall_profile_matches_the_stopwatch(
    mode: &str,
    out: &std::path::Path,
    waits_file: &std::path::Path,
    json: &serde_json::Value,
) {
    let at_reserve_ms = ms_in_reserve(out, "wall.folded");
    // the service writes them beside its waits, to WAITS_FILE.calls
    let mut calls_file = waits_file.as_os_str().to_owned();
    calls_file.push(".calls");
    let calls: Vec<(f64, f64)> = std::fs::read_to_string(&calls_file)
        .unwrap()
        .lines()
        .map(|l| {
            let (start, us) = l.split_once(' ').unwrap();
            let start: f64 = start.parse().unwrap();
            (start, start + us.parse::<f64>().unwrap() / 1e3)
        })
        .collect();
    let measured = kiln_record::Run::open(out).unwrap().measured().unwrap();
    let (first, last) = (
        kiln_record::second_start_ms(measured.first_unix_ms.unwrap()) as f64,
        measured.last_unix_ms.unwrap() as f64,
    );
    let within = |from: f64, to: f64| -> f64 {
        (calls.iter())
            .map(|(start, end)| (end.min(to) - start.max(from)).max(0.0))
            .sum()
    };
    let (inner, outer) = (within(first, last), within(first - 500.0, last + 1500.0));
    // 4 connections keep 4 threads in reserve: about 4 s of it a second
    assert!(
        inner > 20_000.0 && at_reserve_ms >= 0.9 * inner && at_reserve_ms <= 1.05 * outer,
        "{mode}: the wall clock {at_reserve_ms:.0} ms in LockShop.reserve, the service's calls \
         {inner:.0} ms inside the measured phase, {outer:.0} ms around it"
    );
    by_async_profiler(json, "wall");
    if mode != "locked" {
        return;
    }
    // said in the summary among the methods that took the threads' time, and drawn
    let text = kiln(&["report", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    let wall_section: Vec<&str> = (text.lines())
        .skip_while(|l| !l.starts_with("Wall "))
        .take_while(|l| !l.starts_with("Flame"))
        .collect();
    assert!(
        wall_section.iter().any(|l| l.contains("s of wall clock")),
        "{text}"
    );
    // "Top total" lists the ten largest: reserve, or ten at least as large as reserve's
    // share (beside a busy neighbour the pool's idle threads, parked for work, outweighed the
    // request threads: their chain of frames filled the list)
    let reserve_pct = reserve_share(json, "wall", at_reserve_ms);
    let listed: Vec<f64> = (wall_section.iter())
        .skip_while(|l| !l.starts_with("Top total"))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || l.starts_with(' '))
        .map(|(_, l)| l)
        .filter_map(|l| l.get(11..)?.trim_start().split('%').next()?.parse().ok())
        .collect();
    assert!(
        wall_section.iter().any(|l| l.contains("LockShop.reserve"))
            || listed.len() == 10 && listed.iter().all(|pct| *pct >= reserve_pct - 0.1),
        "reserve {reserve_pct:.1}%\n{text}"
    );
    reserve_drawn_as_recorded(out, json, "wall", at_reserve_ms);
}

/// tests/apps/java_locks/LockShop (compiled into `classes`) in `mode`, serving on a port of
/// its own, its waits written to `waits_file` at SIGTERM. `container`: in mount and PID
/// namespaces of its own with a /tmp of its own, as in a container (then `waits_file` is
/// not written: it is in the JVM's /tmp).
fn lock_shop(
    classes: &std::path::Path,
    mode: &str,
    waits_file: &std::path::Path,
    container: bool,
) -> (Killed, u16) {
    let port = free_port();
    // the JDK's server answers in two writes: without nodelay, Nagle and delayed ACKs add
    // 40 ms to each request, and the 4 connections' requests rarely meet at the lock
    let java = |classpath: &str| {
        format!(
            "exec java -Dsun.net.httpserver.nodelay=true -cp '{classpath}' LockShop {port} {mode} '{}'",
            waits_file.display()
        )
    };
    let mut command = if container {
        let mut c = Command::new("unshare");
        // --kill-child: the JVM goes with the unshare this test kills
        c.args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--propagation",
            "private",
            "--kill-child",
            "sh",
            "-c",
        ])
        // the classes copied into the container's own /tmp: a checkout under /tmp (a fresh
        // clone's) is hidden by it, though still read from the directory entered before
        .arg(format!(
            "cd '{}' && mount -t tmpfs kiln-test /tmp && mkdir /tmp/lockshop && \
             cp -R . /tmp/lockshop && {}",
            classes.display(),
            java("/tmp/lockshop")
        ));
        c
    } else {
        let mut c = Command::new("sh");
        c.arg("-c").arg(java(&classes.display().to_string()));
        c
    };
    // stderr piped for wait_port to show if it exits (the JVM writes little there)
    let mut app = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("java starts");
    wait_port(port, &mut app, "LockShop");
    (Killed(app), port)
}

/// `--off-cpu` alone on a JVM in a container (mount and PID namespaces of its own, its /tmp
/// not kiln's): async-profiler, copied into the JVM's /tmp, samples the CPU and the waiters'
/// stacks at the lock, and thread dumps over the JVM's own attach socket (no JFR) name the
/// ReentrantLock's holder and where it is.
#[test]
fn off_cpu_on_a_jvm_in_a_container_names_the_holder_of_the_lock_its_waiters_park_on() {
    let _turn = common::group("runtime");
    let library = common::apps::async_profiler();
    // not under the system's temporary directory: the container's /tmp is a tmpfs of its own
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let classes = tmp.path().join("lockshop");
    javac(
        &[workspace().join("tests/apps/java_locks/LockShop.java")],
        None,
        &classes,
    );
    let (_app, port) = lock_shop(
        &classes,
        "parked",
        std::path::Path::new("/tmp/waits.txt"),
        true,
    );
    let json = kiln_run_watched(
        port,
        &tmp.path().join("run"),
        &[
            "-c",
            "4",
            "--warmup",
            "1s",
            "-d",
            "5s",
            "--profile",
            "--off-cpu",
            "--async-profiler",
            library.to_str().unwrap(),
        ],
    );
    let runtime = &json["runtime"];
    let threads = &runtime["threads"];
    let site = (threads["contended"].as_array().into_iter().flatten())
        .find(|c| c["lock_class"] == "java.util.concurrent.locks.ReentrantLock$NonfairSync")
        .unwrap_or_else(|| panic!("{threads:#}"));
    // all the run says of its dumps, to tell a holder never walked for from one not found
    // (beside the noisy neighbour it told apart a summary that unnamed a holder and walks
    // that all fell on a hand-off)
    let said = format!("{threads:#}\nnot read: {:#}", runtime["not_read"]);
    assert_eq!(site["waiting_at"], "LockShop.reserve", "{said}");
    assert_eq!(site["holder_frames"][1], "LockShop.reserve", "{said}");
    assert!(
        threads["dumps_with_holders"].as_u64().unwrap() >= 1,
        "{said}"
    );
    // the run's page names the holder as the summary does
    let html = std::fs::read_to_string(tmp.path().join("run/report.html")).unwrap();
    let runtime_section = html
        .split("<section id=\"runtime\">")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .unwrap_or_else(|| panic!("no runtime section in the page"));
    assert!(
        runtime_section.contains("ReentrantLock$NonfairSync at LockShop.reserve")
            && runtime_section.contains("; held by "),
        "{runtime_section}"
    );
    // the CPU and the waiters' stacks: async-profiler's
    by_async_profiler(&json, "profile");
    by_async_profiler(&json, "locks");
    // no JFR recording: its lock waits are not there, and the summary says why
    assert!(
        runtime["lock_waits"]
            .as_array()
            .is_none_or(|waits| waits.is_empty()),
        "{runtime:#}"
    );
    assert!(
        runtime["not_read"].to_string().contains("(--runtime deep)"),
        "{runtime:#}"
    );
}

/// The two services with a lock (a monitor, a ReentrantLock) run at once, each under its own
/// kiln: each is its own stopwatch, so the one beside it changes both sides of a comparison
/// alike (one after another, the three held the machine 45 s). The service without a lock runs
/// after them, alone: beside two others on two cores, a thread preempted while it holds the
/// brief lock made its neighbours wait (1 run in 5), which is contention, not its absence.
#[test]
fn lock_waits_from_jfr_match_the_services_own_stopwatch() {
    let _turn = common::group("runtime");
    let library = common::apps::async_profiler();
    let tmp = tempfile::tempdir().unwrap();
    let classes = tmp.path().join("lockshop");
    javac(
        &[workspace().join("tests/apps/java_locks/LockShop.java")],
        None,
        &classes,
    );
    std::thread::scope(|s| {
        let cases = [
            ("locked", "monitor", "LockShop$Inventory"),
            (
                "parked",
                "park",
                "java.util.concurrent.locks.ReentrantLock$NonfairSync",
            ),
        ]
        .map(|case| {
            let (tmp, classes, library) = (tmp.path(), &classes, &library);
            s.spawn(move || lock_waits_match_the_stopwatch(tmp, classes, library, case))
        });
        for case in cases {
            case.join().unwrap();
        }
    });
    lock_waits_match_the_stopwatch(tmp.path(), &classes, &library, ("unlocked", "", ""));
}

/// One service of `lock_waits_from_jfr_match_the_services_own_stopwatch`: its `mode`, the
/// `kind` of wait JFR must see and the lock's `class` ("" when it has no lock).
fn lock_waits_match_the_stopwatch(
    tmp: &Path,
    classes: &Path,
    library: &Path,
    (mode, kind, class): (&str, &str, &str),
) {
    let waits_file = tmp.join(format!("{mode}-waits.txt"));
    let (app, port) = lock_shop(classes, mode, &waits_file, false);
    let out = tmp.join(mode);
    // --off-cpu of a JVM also takes async-profiler's lock profile
    let json = kiln_run_watched(
        port,
        &out,
        &[
            "-c",
            "4",
            "--warmup",
            "2s",
            "-d",
            "8s",
            "--runtime",
            "deep",
            "--off-cpu",
            "--async-profiler",
            library.to_str().unwrap(),
        ],
    );
    // SIGTERM: the service writes down its waits as it stops
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(app.0.id() as i32, libc::SIGTERM) };
    let mut app = app;
    let _ = app.0.wait();
    let truth: Vec<(u64, f64)> = std::fs::read_to_string(&waits_file)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[1].parse::<f64>().unwrap() / 1e3)
        })
        .collect();
    lock_profile_matches_the_stopwatch(mode, &out, &truth, &json);
    wall_profile_matches_the_stopwatch(mode, &out, &waits_file, &json);
    if mode != "unlocked" {
        // the waiting stacks are the lock profile's; the holding stack is the thread
        // dumps' (a monitor's owner is in each, a ReentrantLock's in a dump taken again
        // with -l): asleep in reserve, under the lock
        let threads = &json["runtime"]["threads"];
        let held_in_reserve = (threads["contended"].as_array().into_iter().flatten()).any(|c| {
            c["lock_class"] == class
                && c["waiting_at"] == "LockShop.reserve"
                && c["holder_frames"][0] == "java.lang.Thread.sleep"
                && c["holder_frames"][1] == "LockShop.reserve"
        });
        assert!(held_in_reserve, "{mode}: {threads:#}");
        let with_holders = threads["dumps_with_holders"].as_u64().unwrap();
        if mode == "parked" {
            assert!(with_holders >= 1, "{threads:#}");
        } else {
            assert_eq!(with_holders, 0, "a monitor's owner is in every dump");
        }
    }
    let runtime = &json["runtime"];
    let sites = runtime["lock_waits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let at_reserve: Vec<&serde_json::Value> = sites
        .iter()
        .filter(|s| s["at"].as_str().unwrap().starts_with("LockShop.reserve"))
        .collect();
    if mode == "unlocked" {
        assert!(at_reserve.is_empty(), "{sites:#?}");
        assert!(
            finding(&json, "runtime.blocked-threads").is_none(),
            "{:#}",
            json["findings"]
        );
        return;
    }
    assert_eq!(at_reserve.len(), 1, "{mode}: {sites:#?}");
    let site = at_reserve[0];
    assert_eq!(site["kind"], kind, "{site:#}");
    assert_eq!(site["lock_class"], class, "{site:#}");
    // the waits of 10 ms or more the service timed, begun in the seconds JFR's were
    // counted in
    let (from, to) = (
        site["from_unix_s"].as_u64().unwrap(),
        site["to_unix_s"].as_u64().unwrap(),
    );
    // the service's stopwatch brackets the JVM's wait with a little more (a clock read, a
    // call): a wait JFR measured at 9.9 ms may be 10.1 ms to it, so JFR's count lies
    // between the service's waits of 11 ms or more and of 10 ms or more
    let timed = |at_least_ms: f64| -> Vec<f64> {
        truth
            .iter()
            .filter(|(start_ms, ms)| *ms >= at_least_ms && (from..=to).contains(&(start_ms / 1000)))
            .map(|(_, ms)| *ms)
            .collect()
    };
    let (loose, strict) = (timed(10.0), timed(11.0));
    let waits = site["waits"].as_u64().unwrap() as usize;
    let wait_ms = site["wait_ms"].as_f64().unwrap();
    assert!(strict.len() > 100, "{mode}: {} waits timed", strict.len());
    let (loose_ms, strict_ms) = (loose.iter().sum::<f64>(), strict.iter().sum::<f64>());
    if kind == "monitor" {
        // JFR records each contended monitor enter once, whole (a wait at a second's
        // edge may fall on either side)
        assert!(
            (strict.len().saturating_sub(2)..=loose.len() + 2).contains(&waits),
            "{mode}: JFR {waits} waits, the service {} of 11 ms or more, {} of 10 ms or more",
            strict.len(),
            loose.len()
        );
        assert!(
            wait_ms >= 0.98 * strict_ms && wait_ms <= 1.01 * loose_ms,
            "{mode}: JFR {wait_ms:.0} ms, the service {strict_ms:.0} to {loose_ms:.0} ms"
        );
    } else {
        // JFR records each park: a waiter for a nonfair lock may be woken, lose the lock
        // to a thread that barged in, and park again (a CI run: 690 parks for 645 waits;
        // beside a CPU hog, where a woken waiter waits for a CPU while another barges in:
        // 657 for 561), and a wait made of parks under 10 ms each is not recorded. The
        // time parked is most of the time waited.
        let n = loose.len() as f64;
        assert!(
            (0.85 * n..=1.3 * n).contains(&(waits as f64)),
            "{mode}: JFR {waits} parks, the service {n} waits of 10 ms or more"
        );
        assert!(
            wait_ms >= 0.9 * strict_ms && wait_ms <= 1.01 * loose_ms,
            "{mode}: JFR {wait_ms:.0} ms parked, the service waited {strict_ms:.0} to \
                 {loose_ms:.0} ms"
        );
    }
    // 3 of 4 request threads wait while one holds the lock
    let waiting = site["threads_waiting_mean"].as_f64().unwrap();
    assert!((1.5..=3.2).contains(&waiting), "{mode}: {waiting}");
    // no idle pool thread's park among the places
    assert!(
        sites
            .iter()
            .all(|s| !s.to_string().contains("ThreadPoolExecutor.getTask")),
        "{sites:#?}"
    );
    let f = finding(&json, "runtime.blocked-threads")
        .unwrap_or_else(|| panic!("{mode}: {:#}", json["findings"]));
    assert!(
        f["evidence"].to_string().contains("JFR measured"),
        "{mode}: {f:#}"
    );
    assert!(
        f["evidence"].to_string().contains("LockShop.reserve"),
        "{f:#}"
    );
    assert!(
        f["evidence"].to_string().contains("held by request-"),
        "{mode}: {f:#}"
    );
}
