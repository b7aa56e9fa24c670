//! `kiln queries --listen` against hostile or broken clients (issue 12): half-sent bodies
//! must not hold unbounded memory nor block a real exporter, silent connections are closed,
//! and padded gzip bodies stay small on disk.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::apps::Listening;
use serde_json::json;

/// A valid OTLP/JSON request with one DB span, padded with `padding` spaces.
fn otlp_json(padding: usize) -> Vec<u8> {
    let doc = json!({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
            "name": "SELECT", "kind": 3, "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
            "attributes": [
                {"key": "db.system", "value": {"stringValue": "postgresql"}},
                {"key": "db.statement", "value": {"stringValue": "SELECT 1"}}]}]}]}]});
    let mut body = doc.to_string().into_bytes();
    // Whitespace before the closing brace is still the same JSON document.
    let close = body.pop().unwrap();
    body.extend(std::iter::repeat_n(b' ', padding));
    body.push(close);
    body
}

/// POSTs `body` and returns the status code.
fn post(port: u16, body: &[u8], gzip: bool) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let encoding = if gzip {
        "content-encoding: gzip\r\n"
    } else {
        ""
    };
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{encoding}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 1024
}

#[test]
fn half_sent_bodies_hold_bounded_memory_and_a_real_exporter_still_gets_through() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let listening = Listening::start(&tmp.path().join("q"));
    let port = listening.port;
    // 40 clients announce 19 MB bodies, send 1 MB of each, and stall.
    let chunk = vec![b' '; 1 << 20];
    let mut stalled = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let head = "POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 19000000\r\n\r\n";
        s.write_all(head.as_bytes()).unwrap();
        let _ = s.write_all(&chunk);
        stalled.push(s);
    }
    // A real exporter's request is answered while they stall.
    let started = Instant::now();
    assert_eq!(post(port, &otlp_json(0), false), 200);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the exporter waited {:?}",
        started.elapsed()
    );
    // The body budget bounds what the stalled ones hold (750 MB before).
    let rss = rss_mib(listening.pid());
    assert!(rss < 300, "kiln holds {rss} MiB for 40 half-sent bodies");
    // A client that sends half a request head is cut off by the header timeout.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent.write_all(b"POST /v1/traces HTTP/1.1\r\n").unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(25)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let got = silent.read(&mut buf);
    assert!(
        got.is_ok(),
        "still open after {:?}: {got:?}",
        started.elapsed()
    );
    drop(stalled);
    let report = listening.finish();
    assert_eq!(report["analysis"]["coverage"]["db_spans"], 1);
}

#[test]
fn padded_gzip_bodies_are_recorded_compressed_and_read_back() {
    let _turn = common::beside();
    use flate2::write::GzEncoder;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("q");
    let listening = Listening::start(&out);
    // Four requests of ~60 MB each once inflated, ~60 KB each on the wire.
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&otlp_json(60 << 20)).unwrap();
    let wire = gz.finish().unwrap();
    for _ in 0..4 {
        assert_eq!(post(listening.port, &wire, true), 200);
    }
    let report = listening.finish();
    assert_eq!(report["analysis"]["coverage"]["db_spans"], 4);
    let on_disk: u64 = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(
        on_disk < 20 << 20,
        "the run directory holds {on_disk} bytes"
    );
    // The record analyses again to the same spans.
    let again = common::kiln(&[
        "queries",
        out.to_str().unwrap(),
        "--json",
        "--out",
        tmp.path().join("again").to_str().unwrap(),
    ]);
    let again = common::json_with_exit(&again, 0);
    assert_eq!(again["analysis"]["coverage"]["db_spans"], 4);
}
