//! `--http2` against hyper's HTTP/2 server: h2 chosen by ALPN over TLS, h2c by prior
//! knowledge over plain TCP; kiln's counts equal the server's, which counts by protocol.

use crate::common;

use common::{json_with_exit, kiln};
use kiln_targets::h2::H2Target;
use serde_json::Value;

fn run(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut all = vec![
        "run",
        "--json",
        "--quiet",
        "-d",
        "1s",
        "--out",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    json_with_exit(&kiln(&all), 0)
}

#[test]
fn http2_over_tls_and_h2c_count_what_the_server_answered() {
    let _turn = common::beside();
    for tls in [true, false] {
        let target = H2Target::start(tls).unwrap();
        let url = target.url(tls, "/");
        let json = run(&[&url, "-k", "--http2", "-c", "4"]);
        let total = &json["total"];
        let requests = total["requests"].as_u64().unwrap();
        assert!(requests > 100, "tls {tls}: {total}");
        assert_eq!(total["failed"], 0, "tls {tls}: {total}");
        assert_eq!(
            target.answered("HTTP/2.0", "/"),
            requests,
            "tls {tls}: every request was HTTP/2"
        );
        assert_eq!(target.answered("HTTP/1.1", "/"), 0);
        // One connection per -c, as with HTTP/1.1.
        assert_eq!(total["connections_opened"], 4, "tls {tls}");
    }
}

#[test]
fn without_http2_tls_stays_on_http1_and_the_open_model_works_over_h2() {
    let _turn = common::beside();
    let target = H2Target::start(true).unwrap();
    let json = run(&[&target.url(true, "/"), "-k", "-c", "2"]);
    let requests = json["total"]["requests"].as_u64().unwrap();
    assert_eq!(target.answered("HTTP/1.1", "/"), requests);
    assert_eq!(target.answered("HTTP/2.0", "/"), 0);

    let target = H2Target::start(false).unwrap();
    let json = run(&[
        &target.url(false, "/"),
        "--http2",
        "--rate",
        "200",
        "-c",
        "2",
    ]);
    let total = &json["total"];
    assert_eq!(total["scheduled"], 200, "{total}");
    // every scheduled request is sent and answered over HTTP/2, but for one kiln could not
    // send by the deadline on a host that starved it (counted as unsent, not lost)
    let requests = total["requests"].as_u64().unwrap();
    let unsent = total["unsent"].as_u64().unwrap();
    assert_eq!(requests + unsent, 200, "{total}");
    assert!(unsent <= 2, "{total}");
    assert_eq!(target.answered("HTTP/2.0", "/"), requests, "{total}");
}

#[test]
fn http2_streams_share_each_connection_and_the_summary_says_so() {
    let _turn = common::beside();
    let target = H2Target::start(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = target.url(true, "/sleep/20");
    let args = [
        "run", &url, "-k", "--http2", "-p", "4", "-c", "2", "-d", "1s",
    ];
    let run = kiln(&[&args[..], &["--out", out.to_str().unwrap()]].concat());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        text.contains("closed model, 2 connections x 4 HTTP/2 streams"),
        "{text}"
    );
    // two connections opened by the run (the target also saw kiln's reachability check)
    let measured = kiln_record::Run::open(&out).unwrap().measured().unwrap();
    assert_eq!(measured.end.unwrap().connections_opened, 2);
    assert_eq!(target.most_at_once(), (8, 4));
    let record = common::manifest(&out);
    assert_eq!(record["plan"]["http2_streams"], 4, "{}", record["plan"]);
    // refused where it cannot mean anything, with what it needs
    let refused = kiln(&["run", &url, "-p", "4", "-d", "1s"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--http2-streams 4 needs --http2"));
}

#[test]
fn a_plan_over_http2_carries_its_token() {
    let _turn = common::beside();
    let target = H2Target::start(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        format!(
            r#"
base_url: {base}
http2: true
scenarios:
  - name: me
    steps:
      - name: login
        method: POST
        url: /login
        json: {{user: a}}
        extract:
          token: {{json: $.token}}
      - name: me
        url: /me
        headers:
          Authorization: "Bearer {{{{token}}}}"
        check:
          status: 200
          json:
            - path: $.token
              equals: "{{{{token}}}}"
load:
  vus: 3
  iterations: 30
"#,
            base = target.url(true, "")
        ),
    )
    .unwrap();
    let json = run(&[plan.to_str().unwrap(), "-k"]);
    let names = &json["total"]["names"];
    assert_eq!(names["login"]["requests"], 30, "{names}");
    assert_eq!(names["me"]["requests"], 30);
    assert_eq!(names["me"]["checks"], 60);
    assert_eq!(names["me"]["checks_failed"], 0, "{names}");
    assert_eq!(target.answered("HTTP/2.0", "/login"), 30);
    assert_eq!(target.answered("HTTP/2.0", "/me"), 30);
    assert_eq!(target.total(), 60);
}

/// A server that answers at once and never reads a request's body, its window shut: kiln
/// cancels each stream once its answer is whole instead of keeping the unsent body queued
/// (it piled up 523 MB in 16 s). Its peak memory stays far below the bodies it was asked to
/// send.
#[test]
fn bodies_a_server_never_reads_do_not_pile_up() {
    let _turn = common::beside();
    let target = kiln_targets::h2::ZeroWindowTarget::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.bin");
    const BODY_BYTES: u64 = 64 * 1024;
    std::fs::write(&body, vec![b'x'; BODY_BYTES as usize]).unwrap();
    let url = format!("http://{}/upload", target.addr);
    let body_arg = format!("@{}", body.display());
    let out = dir.path().join("run");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run", &url, "--http2", "-m", "POST", "-b", &body_arg, "-c", "2",
        ])
        .args([
            "-d",
            "3s",
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // the peak as the kernel kept it (VmHWM), read until kiln is gone
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    while let Ok(text) = std::fs::read_to_string(&status) {
        if let Some(kib) = text
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        {
            peak_kib = kib;
        }
        if text.contains("State:\tZ") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let json = json_with_exit(&child.wait_with_output().unwrap(), 0);
    let requests = json["total"]["requests"].as_u64().unwrap();
    assert_eq!(target.answered(), requests, "{}", json["total"]);
    let asked_mib = (requests * BODY_BYTES) >> 20;
    // kept, they grew kiln by ~45 MiB a second here (268 MiB after 6 s); dropped, kiln stays
    // at its ~22 MiB
    assert!(asked_mib >= 1024, "too few requests to tell: {requests}");
    assert!(
        peak_kib >> 10 < 48,
        "peak {} MiB for {asked_mib} MiB of bodies never read",
        peak_kib >> 10
    );
}

/// 2 s of `kiln run --http2` with `extra` against a server that refuses every fifth stream
/// of each connection unprocessed (REFUSED_STREAM): the server, and the run's total, in
/// which no request failed and some refused streams were seen.
fn run_against_refusals(extra: &[&str]) -> (kiln_targets::h2::RefusingTarget, Value) {
    let target = kiln_targets::h2::RefusingTarget::start(5).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}/", target.addr);
    let out = dir.path().join("run");
    let mut args = vec![
        "run", &url, "--http2", "-c", "2", "-d", "2s", "--json", "--quiet",
    ];
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(extra);
    let json = json_with_exit(&common::kiln(&args), 0);
    let total = json["total"].clone();
    assert!(target.refused() >= 10, "too few refused to tell: {total}");
    assert_eq!(total["errors"], serde_json::json!({}), "{total}");
    (target, total)
}

/// Streams an HTTP/2 server refuses before processing them are sent again, once, as RFC
/// 9113 8.7 allows: no request fails, each is counted once, and the retries are said.
#[test]
fn streams_the_server_refuses_unprocessed_are_sent_again_and_none_fails() {
    let _turn = common::beside();
    let (target, total) = run_against_refusals(&[]);
    let requests = total["requests"].as_u64().unwrap();
    assert_eq!(target.answered(), requests, "{total}");
    assert_eq!(
        total["wire"]["retried"].as_u64(),
        Some(target.refused()),
        "{total}"
    );
}

/// The same with hedged requests: a first copy or a second one that the server refuses
/// unprocessed is sent again on its own connection, and no request fails.
#[test]
fn hedged_copies_the_server_refuses_unprocessed_are_sent_again() {
    let _turn = common::beside();
    let (target, total) = run_against_refusals(&["--hedge", "p50", "--hedge-cap", "50%"]);
    // each refusal kiln saw was sent again (a second copy cut as its first copy answered may
    // be refused after kiln stopped listening to it)
    let retried = total["wire"]["retried"].as_u64().unwrap();
    assert!(retried > 0 && retried <= target.refused(), "{total}");
    // every request answered once at least: first copies, and second copies beside them
    assert!(
        target.answered() >= total["requests"].as_u64().unwrap(),
        "{total}"
    );
}
