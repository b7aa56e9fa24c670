//! What the wire shows, against Python's own http.server (tests/apps/python_wire) and the
//! JDK's (tests/apps/java_wire): the 40 ms delayed-ACK stall of a server writing headers and
//! body apart, found with a share that is the share of slow requests and gone with the fix
//! (one buffered write; the JDK's nodelay setting); a server slow for 40 ms of real work in
//! one write is not taken for it; a server closing every connection is
//! connection churn, and the same server keeping them alive is not.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{self, apps::Killed, finding, json_of, json_with_exit, kiln};

/// A server started with `command`, and the port it says it listens on.
fn started(mut command: Command) -> (Killed, u16) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the server said {line:?}"));
    (Killed(child), port)
}

/// tests/apps/python_wire/server.py in `mode`.
fn python(mode: &str) -> Command {
    let mut command = Command::new("python3");
    command
        .arg(common::apps::workspace().join("tests/apps/python_wire/server.py"))
        .arg(mode);
    command
}

/// tests/apps/java_wire's JDK HttpServer, compiled into `classes`, with Nagle's algorithm
/// on its sockets (the JDK's default) or off (`-Dsun.net.httpserver.nodelay=true`).
fn java(classes: &Path, nodelay: bool) -> Command {
    let mut command = Command::new("java");
    if nodelay {
        command.arg("-Dsun.net.httpserver.nodelay=true");
    }
    command.arg("-cp").arg(classes).arg("WireServer");
    command
}

/// `kiln run` of 3 s on 2 connections against `server`: its JSON, and the share of its
/// responses that took 30 ms or more, from the load record's own histograms.
fn run(server: Command) -> (Value, f64) {
    let dir = tempfile::tempdir().unwrap();
    run_into(server, &dir.path().join("run"))
}

/// [`run`], its record kept in `out`.
fn run_into(server: Command, out: &Path) -> (Value, f64) {
    let (_server, port) = started(server);
    let json = json_with_exit(
        &kiln(&[
            "run",
            &format!("http://127.0.0.1:{port}/"),
            "-c",
            "2",
            "-d",
            "3s",
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    let latency = common::latency_of(out);
    let slow = latency.count_above(30_000) as f64 / latency.count().max(1) as f64;
    (json, slow)
}

#[test]
fn a_delayed_ack_stall_is_found_and_its_fix_and_slow_work_are_not() {
    let _turn = common::group("wire");
    let runs = tempfile::tempdir().unwrap();
    let (split, slow) = run_into(python("split"), &runs.path().join("split"));
    let stall = finding(&split, "net.delayed-ack")
        .unwrap_or_else(|| panic!("no delayed-ACK finding: {:#}", split["findings"]));
    let share = stall["data"]["share"].as_f64().unwrap();
    assert!(
        (share - slow).abs() <= 0.10,
        "the finding's share {share:.2} against {slow:.2} of requests above 30 ms"
    );
    assert!(
        stall["fix"].as_str().unwrap().contains("TCP_NODELAY"),
        "{stall:#}"
    );
    let wire = &split["total"]["wire"];
    assert!(wire["two_part_share"].as_f64().unwrap() > 0.5, "{wire:#}");
    // headers and body in two writes 40 ms apart: two reads a response
    let reads = wire["reads_per_response"].as_f64().unwrap();
    assert!((1.9..2.2).contains(&reads), "{wire:#}");

    let (fixed, _) = run_into(python("buffered"), &runs.path().join("buffered"));
    assert!(
        finding(&fixed, "net.delayed-ack").is_none(),
        "{:#}",
        fixed["findings"]
    );
    let wire = &fixed["total"]["wire"];
    assert!(wire["two_part_share"].as_f64().unwrap() < 0.05, "{wire:#}");
    // one write: one read a response (a few split by the loopback's timing at most)
    let reads = wire["reads_per_response"].as_f64().unwrap();
    assert!((1.0..1.1).contains(&reads), "{wire:#}");
    // the comparison: the stall's finding fixed, the responses in two parts gone
    let compared = json_of(&kiln(&[
        "compare",
        runs.path().join("split").to_str().unwrap(),
        runs.path().join("buffered").to_str().unwrap(),
        "--json",
    ]));
    let two_part = compared["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "responses in two parts")
        .unwrap_or_else(|| panic!("{compared:#}"));
    assert!(two_part["base"].as_f64().unwrap() > 50.0, "{two_part}");
    assert!(two_part["new"].as_f64().unwrap() < 5.0, "{two_part}");
    assert_eq!(two_part["verdict"], "improved", "{two_part}");
    assert!(
        compared["findings"]["fixed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "net.delayed-ack"),
        "{:#}",
        compared["findings"]
    );

    // 40 ms of work, answered in one write: slow, but no stall on the wire
    // the JDK's HttpServer the same: stalled by default, clear with nodelay
    let dir = tempfile::tempdir().unwrap();
    let classes = dir.path().join("classes");
    common::apps::javac(
        &[common::apps::workspace().join("tests/apps/java_wire/WireServer.java")],
        None,
        &classes,
    );
    let (jdk, slow) = run(java(&classes, false));
    let stall = finding(&jdk, "net.delayed-ack")
        .unwrap_or_else(|| panic!("no delayed-ACK finding: {:#}", jdk["findings"]));
    let share = stall["data"]["share"].as_f64().unwrap();
    assert!(
        (share - slow).abs() <= 0.10,
        "JDK: {share:.2} against {slow:.2}"
    );
    let (nodelay, _) = run(java(&classes, true));
    assert!(
        finding(&nodelay, "net.delayed-ack").is_none(),
        "{:#}",
        nodelay["findings"]
    );

    let (slow_work, _) = run(python("slow"));
    assert!(
        slow_work["total"]["latency"]["p50_us"].as_u64().unwrap() >= 40_000,
        "{:#}",
        slow_work["total"]["latency"]
    );
    assert!(
        finding(&slow_work, "net.delayed-ack").is_none(),
        "{:#}",
        slow_work["findings"]
    );
}

#[test]
fn a_connection_per_request_is_churn_and_keep_alive_is_not() {
    let _turn = common::group("wire");
    let (close, _) = run(python("close"));
    let churn = finding(&close, "net.connection-churn")
        .unwrap_or_else(|| panic!("no churn finding: {:#}", close["findings"]));
    let per = churn["data"]["requests_per_connection"].as_f64().unwrap();
    assert!((0.95..1.05).contains(&per), "{churn:#}");
    let wire = &close["total"]["wire"];
    // one connection a request, give or take the two each connection slot opens ahead
    // of its first request and the two the run's end leaves open
    let n = |v: &Value| v.as_u64().unwrap() as i64;
    let requests = n(&close["total"]["requests"]);
    assert!(
        (n(&wire["connections_opened"]) - requests).abs() <= 2,
        "{requests} requests: {wire:#}"
    );
    assert!(
        (n(&wire["closed_by_target"]) - requests).abs() <= 2,
        "{requests} requests: {wire:#}"
    );

    let (kept, _) = run(python("buffered"));
    assert!(
        finding(&kept, "net.connection-churn").is_none(),
        "{:#}",
        kept["findings"]
    );
    assert_eq!(kept["total"]["wire"]["connections_opened"], 2);
}
