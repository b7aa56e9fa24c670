//! `kiln watch` against processes whose behaviour is known: a shell spinning one core, this
//! test process found by its listening port, a process that exits mid-watch.

use std::process::Command;

use serde_json::Value;

mod common;
use common::{json_with_exit, kiln, manifest};

/// CPU figures need the machine to themselves: these tests run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn samples(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_spinning_process_is_seen_using_one_core_of_user_time() {
    let _alone = alone();
    let mut busy = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    let pid = busy.id().to_string();
    let out = kiln(&[
        "watch",
        "--pid",
        &pid,
        "-d",
        "3s",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let _ = busy.kill();
    let _ = busy.wait();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = samples(&out);
    assert_eq!(s.len(), 3);
    for sample in &s {
        let p = &sample["process"];
        assert_eq!(p["id"].as_u64(), Some(busy.id() as u64));
        let user = p["cpu_user_pct"].as_f64().unwrap();
        assert!(user > 60.0, "user {user}%");
        assert!(p["cpu_system_pct"].as_f64().unwrap() < 10.0);
        assert!(
            sample["host_cpu"]["user"].as_f64().unwrap() > 25.0,
            "one of two CPUs busy"
        );
    }
    let written = std::fs::read_to_string(dir.join("resources.jsonl")).unwrap();
    assert_eq!(written.lines().count(), 3);
}

#[test]
fn watch_port_finds_the_listening_process() {
    let _alone = alone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = kiln(&[
        "watch",
        "--port",
        &port,
        "-d",
        "1s",
        "--json",
        "--out",
        tmp.path().join("w").to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = samples(&out);
    assert_eq!(
        s[0]["process"]["id"].as_u64(),
        Some(std::process::id() as u64)
    );
    assert!(s[0]["process"]["threads"].as_u64().unwrap() >= 1);
}

#[test]
fn a_process_that_exits_ends_the_watch_as_interrupted() {
    let _alone = alone();
    let mut short = Command::new("sleep").arg("1.5").spawn().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    let out = kiln(&[
        "watch",
        "--pid",
        &short.id().to_string(),
        "-d",
        "10s",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let _ = short.wait();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = manifest(&dir);
    assert_eq!(manifest["status"], "interrupted");
    assert!(manifest["status_reason"]
        .as_str()
        .unwrap()
        .contains("exited"));
}

#[test]
fn watching_nothing_or_a_missing_process_is_a_clear_error() {
    let _alone = alone();
    for (args, expected) in [
        (vec!["watch"], "--pid PID or --port PORT"),
        (vec!["watch", "--pid", "999999999"], "no process 999999999"),
        (
            vec!["watch", "--pid", "1", "--interval", "1ms"],
            "--interval is out of range",
        ),
    ] {
        let out = kiln(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn a_load_run_records_the_watched_process_beside_its_seconds() {
    let _alone = alone();
    // The target runs in this test process, so --watch-port finds this process, whose
    // target threads sleep 2 ms per request: the watched CPU is small but its voluntary
    // context switches are at least one per request.
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior {
        service_time: std::time::Duration::from_millis(2),
        ..Default::default()
    })
    .unwrap();
    let port = target.addr().port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln(&[
        "run",
        &target.url("/"),
        "--rate",
        "200",
        "-d",
        "3s",
        "--watch-port",
        &port,
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let run = json_with_exit(&out, 0);
    let resources = &run["resources"];
    assert!(resources["samples"].as_u64().unwrap() >= 2, "{resources}");
    assert_eq!(
        resources["process"]["pid"].as_u64(),
        Some(std::process::id() as u64)
    );
    let switches = resources["process"]["voluntary_switches_per_s_mean"]
        .as_f64()
        .unwrap();
    assert!(
        switches >= 150.0,
        "{switches} voluntary switches/s for 200 requests/s"
    );
    let manifest = manifest(&dir);
    let parts: Vec<&str> = manifest["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        parts,
        [
            "load-seconds.jsonl",
            "doctor.json",
            "resources.jsonl",
            "latency.hlog",
            "findings.json",
            "report.html"
        ]
    );
    let report = json_with_exit(&kiln(&["report", dir.to_str().unwrap(), "--json"]), 0);
    assert_eq!(
        report["resources"], run["resources"],
        "kiln report rebuilds the resource summary"
    );
}
