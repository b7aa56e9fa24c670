//! `kiln queries` on files: bad input, exit codes, the HTML report in a real browser
//! (Chromium renders the treemap; hostile SQL and frame names stay text).

use crate::common;

use std::path::Path;

use common::{json_with_exit, kiln};
use serde_json::{json, Value};

fn attr(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

/// One request with an N+1 of `n` calls whose SQL and stack frames carry `payload`.
fn spans_file(dir: &Path, n: usize, payload: &str) -> std::path::PathBuf {
    let mut spans = vec![json!({
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "GET /x",
        "kind": 2, "startTimeUnixNano": "1000", "endTimeUnixNano": "900000000",
        "attributes": [attr("http.route", &format!("/x/{payload}")), attr("http.request.method", "GET")]
    })];
    let stack = format!(
        "  File \"/srv/app/{payload}.py\", line 7, in handler_{payload}\n    x\n  File \"/srv/app/views.py\", line 12, in load\n    y\n"
    );
    for i in 0..n {
        spans.push(json!({
            "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": format!("{:016x}", i + 1),
            "parentSpanId": "b7ad6b7169203331", "name": "SELECT", "kind": 3,
            "startTimeUnixNano": (2000 + i * 1_000_000).to_string(), "endTimeUnixNano": (2000 + i * 1_000_000 + 500_000).to_string(),
            "attributes": [attr("db.system", "postgresql"),
                attr("db.statement", &format!("SELECT '{payload}' FROM t WHERE id = {i}")),
                attr("code.stacktrace", &stack)]
        }));
    }
    let doc = json!({"resourceSpans": [{"resource": {"attributes": [attr("service.name", "svc"), attr("telemetry.sdk.language", "python")]},
        "scopeSpans": [{"spans": spans}]}]});
    let path = dir.join("spans.jsonl");
    std::fs::write(&path, doc.to_string() + "\n").unwrap();
    path
}

#[test]
fn missing_and_malformed_files_get_one_clear_line() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let out = kiln(&["queries", "/nonexistent/spans.jsonl"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("kiln: error: reading spans from /nonexistent/spans.jsonl"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, "{\"resourceSpans\": [ {\"scopeSpans\": 7").unwrap();
    let out = kiln(&[
        "queries",
        bad.to_str().unwrap(),
        "--out",
        tmp.path().join("r1").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no spans kiln can read"));

    // binary that is not protobuf either (an image, a core file ...)
    let binary = tmp.path().join("picture.png");
    std::fs::write(&binary, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").unwrap();
    let out = kiln(&[
        "queries",
        binary.to_str().unwrap(),
        "--out",
        tmp.path().join("r2").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no spans kiln can read"));

    let out = kiln(&["queries"]);
    assert_eq!(out.status.code(), Some(1));
    let out = kiln(&["queries", "x.json", "--n-plus-one", "1"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses a threshold of 1");
    let no_run = tmp.path().join("never");
    let out = kiln(&[
        "queries",
        "--listen",
        "256.0.0.1:1",
        "--out",
        no_run.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen on 256.0.0.1:1"));
    assert!(!no_run.exists(), "a bad address leaves no run directory");
}

#[test]
fn fail_on_gates_with_exit_99() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let file = spans_file(tmp.path(), 6, "plain");
    let run = |name: &str, extra: &[&str]| {
        let out_dir = tmp.path().join(name);
        let mut args = vec![
            "queries",
            file.to_str().unwrap(),
            "--json",
            "--out",
            out_dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        kiln(&args)
    };
    let v = json_with_exit(&run("a", &[]), 0);
    assert_eq!(v["analysis"]["findings"][0]["kind"], "n_plus_one");
    assert_eq!(v["analysis"]["findings"][0]["calls"], 6);
    // kiln report prints a queries-only run as what it recorded, not as a load test
    let report = kiln(&["report", tmp.path().join("a").to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("N+1 queries  GET /x/plain"), "{text}");
    assert!(!text.contains("Target"), "{text}");
    json_with_exit(&run("b", &["--fail-on", "medium"]), 99);
    // below the N+1 threshold: nothing to gate on
    json_with_exit(&run("c", &["--fail-on", "low", "--n-plus-one", "7"]), 0);
}

#[test]
fn html_report_renders_in_chromium_and_keeps_hostile_text_as_text() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let payload = "<img src=x onerror=\"document.title='PWNED'\"></script><script>document.title='PWNED'</script>";
    let file = spans_file(tmp.path(), 5, payload);
    let out_dir = tmp.path().join("run");
    let v = json_with_exit(
        &kiln(&[
            "queries",
            file.to_str().unwrap(),
            "--json",
            "--out",
            out_dir.to_str().unwrap(),
        ]),
        0,
    );
    let html = v["html"].as_str().unwrap();
    let dom = common::dump_dom(Path::new(html));
    // the script ran: the treemap has its boxes, with the route, the frames and the statement
    let cells = dom.matches("class=\"cell\"").count();
    assert!(cells >= 4, "treemap cells: {cells}\n{dom}");
    assert!(dom.contains("load (app/views.py:12)"), "{dom}");
    // nothing from the spans became markup or ran
    assert!(!dom.contains("PWNED</title>"), "{dom}");
    assert!(!dom.contains("<img src=\"x\""), "{dom}");
    assert!(dom.contains("&lt;img src=x"), "the payload shows as text");
}

#[test]
fn an_endless_line_is_skipped_with_bounded_memory_and_the_next_lines_still_read() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(spans_file(tmp.path(), 6, "ok")).unwrap();
    // A line of 1 GiB (a sparse hole, so it costs no disk), then a good document.
    let path = tmp.path().join("huge.jsonl");
    {
        use std::io::{Seek, Write};
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"{\"resourceSpans\":[").unwrap();
        f.seek(std::io::SeekFrom::Start(1 << 30)).unwrap();
        f.write_all(b"\n").unwrap();
        f.write_all(good.as_bytes()).unwrap();
    }
    let out_dir = tmp.path().join("q");
    let (out, max_rss_mib) = common::kiln_with_peak_rss(&[
        "queries",
        path.to_str().unwrap(),
        "--json",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let json = json_with_exit(&out, 0);
    let analysis = &json["analysis"];
    assert_eq!(
        analysis["coverage"]["db_spans"], 6,
        "{}",
        analysis["coverage"]
    );
    let problems = analysis["coverage"]["problems"].to_string();
    assert!(problems.contains("longer than 256 MiB"), "{problems}");
    assert!(
        max_rss_mib < 800,
        "kiln queries peaked at {max_rss_mib} MiB"
    );
}
