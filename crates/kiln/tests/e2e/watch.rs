//! `kiln watch` against processes whose behaviour is known: a shell spinning one core, this
//! test process found by its listening port, a process that exits mid-watch.

use std::process::Command;

use serde_json::Value;

use crate::common;
use common::{json_with_exit, kiln, manifest};

fn samples(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A process's user and system time so far, in seconds, as the kernel counts it.
fn kernel_cpu_seconds(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // after the command's parenthesis: state is field 3, utime 14 and stime 15
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // SAFETY: sysconf has no memory effects.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let tick = |i: usize| fields[i - 3].parse::<f64>().unwrap() / ticks;
    (tick(14), tick(15))
}

/// A shell spinning on one core: kiln's user time for it is the kernel's own over the same
/// window (a busy machine gives it less of a core, and both figures say so alike).
#[test]
fn a_spinning_process_is_seen_using_one_core_of_user_time() {
    let _turn = common::alone();
    let mut busy = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    let pid = busy.id().to_string();
    let before = kernel_cpu_seconds(busy.id());
    let started = std::time::Instant::now();
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
    let wall = started.elapsed().as_secs_f64();
    let after = kernel_cpu_seconds(busy.id());
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
    let (mut user_s, mut system_s, mut watched_s) = (0.0, 0.0, 0.0);
    for sample in &s {
        let p = &sample["process"];
        assert_eq!(p["id"].as_u64(), Some(busy.id() as u64));
        let interval = sample["interval_s"].as_f64().unwrap();
        let user = p["cpu_user_pct"].as_f64().unwrap();
        user_s += user / 100.0 * interval;
        system_s += p["cpu_system_pct"].as_f64().unwrap() / 100.0 * interval;
        watched_s += interval;
        // the spinner's user time is part of the host's (two CPUs: half a point per point)
        let host_user = sample["host_cpu"]["user"].as_f64().unwrap();
        assert!(
            host_user + 2.0 >= user / 2.0,
            "host {host_user}%, process {user}%"
        );
    }
    let kernel_user = after.0 - before.0;
    // kiln watched 3 s of the test's longer window: at most what the kernel counted over the
    // whole window (a tick of slack), at least its share of it (two ticks and 5% of slack)
    let tick = 0.011;
    assert!(
        user_s <= kernel_user + tick,
        "kiln {user_s:.3}s, kernel {kernel_user:.3}s"
    );
    let share = kernel_user * watched_s / wall;
    assert!(
        user_s >= share * 0.95 - 2.0 * tick,
        "kiln {user_s:.3}s, kernel {kernel_user:.3}s over {wall:.2}s, {watched_s:.2}s watched"
    );
    assert!(user_s > 0.1, "the spinner ran: {user_s:.3}s");
    assert!(system_s <= (after.1 - before.1) + tick && system_s < user_s);
    let written = std::fs::read_to_string(dir.join("resources.jsonl")).unwrap();
    assert_eq!(written.lines().count(), 3);
}

#[test]
fn watch_port_finds_the_listening_process() {
    let _turn = common::alone();
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
    let _turn = common::alone();
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
    let _turn = common::alone();
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
    let _turn = common::alone();
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
            "noise.jsonl",
            "resources.jsonl",
            "runtime.json",
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
