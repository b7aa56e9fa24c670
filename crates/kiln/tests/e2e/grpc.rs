//! gRPC calls against real servers whose latency, failures and streams are known by
//! construction, and whose own counts are the truth: a grpcio server
//! (tests/apps/python_grpc/orders.py) and grpc-go's interop service with reflection
//! (tests/apps/go_grpc).

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::common::{self, apps, json_with_exit, kiln};
use kiln_targets::postgres::Postgres;

fn app_dir() -> PathBuf {
    apps::workspace().join("tests/apps/python_grpc")
}

fn proto() -> String {
    app_dir().join("orders.proto").display().to_string()
}

/// A gRPC server this test started: it says "listening on PORT" when serving, and its counts
/// as one JSON line when stopped with SIGTERM.
struct GrpcServer {
    child: Child,
    port: u16,
    service: &'static str,
}

impl GrpcServer {
    fn start(mut command: Command, service: &'static str) -> GrpcServer {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server runs");
        let mut line = String::new();
        let stdout = child.stdout.as_mut().unwrap();
        // one byte at a time: the rest of stdout is the counts, read at the end
        let mut byte = [0u8];
        while !line.ends_with('\n') && stdout.read(&mut byte).unwrap_or(0) == 1 {
            line.push(byte[0] as char);
        }
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                let mut said = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut said);
                panic!("{service}'s server did not start: {line:?}\n{said}")
            });
        GrpcServer {
            child,
            port,
            service,
        }
    }

    fn url(&self, method: &str) -> String {
        format!("grpc://127.0.0.1:{}/{}/{method}", self.port, self.service)
    }

    /// Stops the server; the calls it answered, "Method STATUS" to count.
    fn answered(mut self) -> Value {
        // SAFETY: a signal to the child this test started
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut lines = BufReader::new(self.child.stdout.take().unwrap()).lines();
        let counts = lines.next().expect("the server says its counts").unwrap();
        let _ = self.child.wait();
        serde_json::from_str(&counts).unwrap()
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The grpcio server of shop.v1.Orders.
struct Orders;

impl Orders {
    fn start(flags: &[&str]) -> GrpcServer {
        let mut command = Command::new(apps::python());
        command
            .arg(app_dir().join("orders.py"))
            .args(["--port", "0"])
            .args(flags);
        GrpcServer::start(command, "shop.v1.Orders")
    }
}

/// grpc-go's interop service (grpc.testing.TestService) with reflection, built once (the
/// test script builds it beside the others; a test run without it builds it here).
fn test_service(flags: &[&str]) -> GrpcServer {
    let bin = apps::go_app("go_grpc");
    let mut command = Command::new(bin);
    command.args(["-port", "0"]).args(flags);
    GrpcServer::start(command, "grpc.testing.TestService")
}

fn go_proto() -> String {
    (apps::workspace().join("tests/apps/go_grpc/testing.proto"))
        .display()
        .to_string()
}

fn run(url: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", url, "--json", "--quiet"];
    args.extend(extra);
    json_with_exit(&kiln(&args), 0)
}

#[test]
fn unary_calls_at_a_rate_see_the_servers_stall_and_its_count() {
    let _turn = common::group("grpc");
    let orders = Orders::start(&["--stall-every-ms", "1000", "--stall-ms", "100"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = run(
        &orders.url("Get"),
        &[
            "--proto",
            &proto(),
            "-b",
            r#"{"id": "42", "lines": 8}"#,
            "--rate",
            "200",
            "-d",
            "5s",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let total = &run["total"];
    let requests = total["requests"].as_u64().unwrap();
    assert_eq!(total["grpc_status"]["OK"], requests, "{total:#}");
    assert_eq!(total["failed"], 0, "{total:#}");
    // what kiln counted answered is what the server answered
    let answered = orders.answered();
    assert_eq!(answered["Get OK"], requests, "{answered}");
    // a tenth of each second stalls: calls that arrive in it wait out the rest of it, so
    // p99 is near the stall's length and p50 is a call's own time (a busy machine adds
    // milliseconds, not tens)
    let lat = &total["latency"];
    let ms = |k: &str| lat[k].as_f64().unwrap() / 1000.0;
    assert!(ms("p50_us") < 20.0, "{lat:#}");
    assert!((60.0..=130.0).contains(&ms("p99_us")), "{lat:#}");
    assert!((30.0..=80.0).contains(&ms("p95_us")), "{lat:#}");
}

/// p50, p95 and p99 of a run's latency, in ms.
fn p50_p95_p99_ms(total: &Value) -> [f64; 3] {
    let lat = &total["latency"];
    ["p50_us", "p95_us", "p99_us"].map(|k| lat[k].as_f64().unwrap() / 1000.0)
}

#[test]
fn grpc_go_at_500_per_second_through_reflection_and_through_proto() {
    let _turn = common::group("grpc");
    // 100 ms of every second stalled: 10% of calls wait out what is left of it, uniformly,
    // so p95 is about half the stall, p99 about nine tenths of it, p50 a call's own time
    let service = test_service(&["-stall-every", "1s", "-stall", "100ms"]);
    let url = service.url("UnaryCall");
    let mut asked = 0;
    let at_500 = |descriptors: &[&str]| {
        let mut args = vec![
            "-b",
            r#"{"response_size": 16}"#,
            "--rate",
            "500",
            "-d",
            "5s",
        ];
        args.extend(descriptors);
        run(&url, &args)
    };
    let by_reflection = at_500(&[]);
    let by_proto = at_500(&["--proto", &go_proto()]);
    for run in [&by_reflection, &by_proto] {
        let total = &run["total"];
        let requests = total["requests"].as_u64().unwrap();
        assert_eq!(total["grpc_status"]["OK"], requests, "{total:#}");
        assert_eq!(
            (total["failed"].as_u64(), total["unsent"].as_u64()),
            (Some(0), Some(0)),
            "{total:#}"
        );
        assert_eq!(requests, 2500, "{total:#}");
        // a unary call's record has no stream figures
        assert!(total.get("grpc_stream").is_none(), "{total:#}");
        asked += requests;
        let [p50, p95, p99] = p50_p95_p99_ms(total);
        assert!(p50 < 20.0, "{:#}", total["latency"]);
        assert!((30.0..=80.0).contains(&p95), "{:#}", total["latency"]);
        assert!((60.0..=130.0).contains(&p99), "{:#}", total["latency"]);
    }
    let answered = service.answered();
    assert_eq!(answered["UnaryCall OK"], asked, "{answered}");
}

#[test]
fn hedged_calls_to_a_replica_cut_the_stalls_tail() {
    let _turn = common::group("grpc");
    // the URL's server stalls 100 ms a second; the replica never does
    let stalled = test_service(&["-stall-every", "1s", "-stall", "100ms"]);
    let replica = test_service(&[]);
    let url = stalled.url("UnaryCall");
    // every gRPC call is a POST: hedging it is the user's word that the method is safe twice
    let refused = kiln(&["run", &url, "--hedge", "10ms", "-d", "1s"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--hedge-any-method"));
    let summary = run(
        &url,
        &[
            "--rate",
            "200",
            "-d",
            "5s",
            "--hedge",
            "10ms",
            "--hedge-any-method",
            "--replica",
            &replica.url("UnaryCall"),
        ],
    );
    let h = &summary["hedging"];
    let n = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("{h:#}"));
    // first copies go to the URL and the replica in turn; a call to the stalled server that
    // arrives in the first 90 ms of its stall waits past the delay: 9% of half the calls
    let extra = n(&h["hedges"]) / n(&h["first_copies"]);
    assert!((0.03..0.07).contains(&extra), "extra load {extra}: {h:#}");
    assert!(n(&h["won"]) / n(&h["hedges"]) > 0.8, "{h:#}");
    // the first copies alone wait out the stall; hedged, a call ends soon after the delay
    assert!(n(&h["first_copy"]["p99_us"]) > 60_000.0, "{h:#}");
    assert!(n(&h["hedged"]["p99_us"]) < 40_000.0, "{h:#}");
    assert_eq!(summary["total"]["failed"], 0, "{:#}", summary["total"]);
    // each server answered what kiln sent it (a copy cut on its way may be missing)
    let cut = n(&h["cut"]);
    for (i, server) in [stalled, replica].into_iter().enumerate() {
        let target = &h["targets"][i];
        let sent = n(&target["first_copies"]) + n(&target["hedges"]);
        let answered = server.answered()["UnaryCall OK"].as_f64().unwrap_or(0.0);
        assert!(
            answered <= sent && answered >= sent - cut,
            "{answered} of {sent}: {h:#}"
        );
    }
}

#[test]
fn shards_of_a_grpc_run_merge_into_the_servers_count() {
    let _turn = common::beside();
    let service = test_service(&[]);
    let url = service.url("UnaryCall");
    let tmp = tempfile::tempdir().unwrap();
    let mut shards = Vec::new();
    for i in 0..2 {
        let out = tmp.path().join(format!("shard-{i}"));
        let shard = format!("{i}/2");
        let args = [
            "--rate",
            "100",
            "-d",
            "2s",
            "--shard",
            &shard,
            "--out",
            out.to_str().unwrap(),
        ];
        let run = run(&url, &args);
        shards.push((out, run["total"]["grpc_status"]["OK"].as_u64().unwrap()));
    }
    let merged = tmp.path().join("merged");
    let mut args = vec!["merge".to_string()];
    args.extend(shards.iter().map(|(dir, _)| dir.display().to_string()));
    args.extend([
        "--out".into(),
        merged.display().to_string(),
        "--json".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let merged = json_with_exit(&kiln(&args), 0);
    let ok = merged["total"]["grpc_status"]["OK"].as_u64().unwrap();
    // the shards' calls added, each as the server answered it
    assert_eq!(
        ok,
        shards.iter().map(|(_, n)| n).sum::<u64>(),
        "{:#}",
        merged["total"]
    );
    // every arrival dealt to a shard answered, or unsent (due in the last moment on a busy
    // host)
    let unsent = merged["total"]["unsent"].as_u64().unwrap_or(0);
    assert_eq!(ok + unsent, 200, "{:#}", merged["total"]);
    assert!(unsent <= 2, "{:#}", merged["total"]);
    assert_eq!(service.answered()["UnaryCall OK"], ok);
}

/// Five messages, each after `gap_us`, as StreamingOutputCall's request asks for them.
fn five_messages(gap_us: u32) -> String {
    let one = format!(r#"{{"size": 8, "interval_us": {gap_us}}}"#);
    format!(
        r#"{{"response_parameters": [{}]}}"#,
        [one.as_str(); 5].join(", ")
    )
}

/// A streaming method called on 2 connections for a second, every call answered: the run's
/// totals.
fn stream_run(url: &str, body: &str) -> Value {
    let run = run(
        url,
        &[
            "-b",
            body,
            "-c",
            "2",
            "-d",
            "1s",
            "--wait-ongoing-requests-after-deadline",
        ],
    );
    run["total"].clone()
}

/// Messages received and sent a call.
fn per_call(stream: &Value) -> (f64, f64) {
    let n = |k: &str| stream[k].as_f64().unwrap();
    (n("received_per_call"), n("sent_per_call"))
}

#[test]
fn streams_count_their_messages_each_way_and_time_the_first() {
    let _turn = common::group("grpc");
    let service = test_service(&[]);
    // a server stream of 5 messages 20 ms apart: 5 a call, the first after ~20 ms, the
    // call's end after ~100 ms
    let total = &stream_run(&service.url("StreamingOutputCall"), &five_messages(20_000));
    let stream = &total["grpc_stream"];
    assert_eq!(stream["received_per_call"], 5.0, "{stream:#}");
    assert_eq!(stream["sent_per_call"], 1.0, "{stream:#}");
    let calls = stream["calls"].as_u64().unwrap();
    assert_eq!(total["grpc_status"]["OK"], calls, "{total:#}");
    assert!(calls >= 10, "{stream:#}");
    let first_p50 = stream["first_message"]["p50_us"].as_f64().unwrap() / 1000.0;
    assert!((19.0..60.0).contains(&first_p50), "{stream:#}");
    let [call_p50, ..] = p50_p95_p99_ms(total);
    assert!((100.0..160.0).contains(&call_p50), "{:#}", total["latency"]);
    // a client stream of 3 lines, and a bidirectional one of 2 messages asking 2 answers each
    let client = &stream_run(
        &service.url("StreamingInputCall"),
        "{\"payload\": {\"body\": \"AAAA\"}}\n{}\n{}\n",
    )["grpc_stream"];
    assert_eq!(per_call(client), (1.0, 3.0), "{client:#}");
    let asks_two = r#"{"response_parameters": [{"size": 1}, {"size": 1}]}"#;
    let both = &stream_run(
        &service.url("FullDuplexCall"),
        &format!("[{asks_two}, {asks_two}]"),
    )["grpc_stream"];
    assert_eq!(per_call(both), (4.0, 2.0), "{both:#}");
    // what kiln counted each way is what the server counted
    let answered = service.answered();
    let pairs = [
        ("StreamingOutputCall sent", &stream["messages_received"]),
        ("StreamingOutputCall OK", &stream["calls"]),
        ("StreamingInputCall received", &client["messages_sent"]),
        ("StreamingInputCall OK", &client["calls"]),
        ("FullDuplexCall received", &both["messages_sent"]),
        ("FullDuplexCall sent", &both["messages_received"]),
    ];
    for (server_count, kilns) in pairs {
        assert_eq!(&answered[server_count], kilns, "{server_count}: {answered}");
    }
}

#[test]
fn a_server_without_the_service_or_reflection_is_said_so_and_nothing_is_sent() {
    let _turn = common::beside();
    let service = test_service(&[]);
    let refused = |url: &str| {
        let out = kiln(&["run", url, "-d", "1s"]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = refused(&format!(
        "grpc://127.0.0.1:{}/grpc.testing.Nope/Call",
        service.port
    ));
    assert!(
        e.contains("no service grpc.testing.Nope") && e.contains("grpc.testing.TestService"),
        "{e}"
    );
    let e = refused(&service.url("Nope"));
    assert!(
        e.contains("no method Nope in grpc.testing.TestService: it has EmptyCall, UnaryCall"),
        "{e}"
    );
    // the grpcio server registers no reflection service
    let orders = Orders::start(&[]);
    let e = refused(&orders.url("Get"));
    assert!(
        e.contains("no reflection service") && e.contains("--proto"),
        "{e}"
    );
    // an HTTP/1.1 server is no gRPC server
    let web = kiln_targets::TargetServer::start(Default::default()).unwrap();
    let e = refused(&format!("grpc://{}/a.B/C", web.addr()));
    assert!(
        e.contains("does not speak HTTP/2, as gRPC servers do"),
        "{e}"
    );
    let answered = service.answered();
    assert_eq!(answered, serde_json::json!({}), "{answered}");
    assert_eq!(orders.answered(), serde_json::json!({}));
}

#[test]
fn a_failing_methods_status_is_named_and_counted_as_failed() {
    let _turn = common::beside();
    let orders = Orders::start(&["--fail-every", "10"]);
    // a tenth fail: a threshold on their status fails the run as k6's do (exit 99)
    let url = orders.url("Fail");
    let args = [
        "run",
        &url,
        "--json",
        "--quiet",
        "--proto",
        &proto(),
        "-b",
        r#"{"id": "7"}"#,
        "-c",
        "2",
        "-d",
        "2s",
        "--threshold",
        "grpc{status:UNAVAILABLE}<1%",
        "--threshold",
        "grpc{status:UNAVAILABLE}<20%",
    ];
    let run = json_with_exit(&kiln(&args), 99);
    let verdicts: Vec<bool> = (run["thresholds"].as_array().unwrap().iter())
        .map(|t| t["ok"].as_bool().unwrap())
        .collect();
    assert_eq!(verdicts, [false, true], "{:#}", run["thresholds"]);
    let total = &run["total"];
    let (ok, unavailable) = (
        total["grpc_status"]["OK"].as_u64().unwrap(),
        total["grpc_status"]["UNAVAILABLE"].as_u64().unwrap(),
    );
    let answered = orders.answered();
    assert_eq!(answered["Fail OK"], ok, "{answered} {total:#}");
    assert_eq!(
        answered["Fail UNAVAILABLE"], unavailable,
        "{answered} {total:#}"
    );
    assert_eq!(total["failed"], unavailable, "{total:#}");
    assert!(unavailable > 0 && ok >= 9 * unavailable - 9, "{total:#}");
    // the status's message, as the server said it
    assert_eq!(
        total["grpc_messages"]["UNAVAILABLE"], "asked to fail",
        "{total:#}"
    );
}

#[test]
fn a_failed_calls_message_is_kept_decoded_and_shown_as_text() {
    let _turn = common::beside();
    let service = test_service(&[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // grpc-go percent-encodes the message on the wire; markup and a control character in it
    let said = "50% <b>down</b> \u{2713}\n";
    let body = serde_json::json!({"response_status": {"code": 14, "message": said}}).to_string();
    let url = service.url("UnaryCall");
    let args = [
        "run",
        &url,
        "-b",
        &body,
        "-c",
        "1",
        "-d",
        "1s",
        "--out",
        out.to_str().unwrap(),
    ];
    let text = kiln(&args);
    let summary = String::from_utf8_lossy(&text.stdout);
    let line = summary
        .lines()
        .find(|l| l.starts_with("gRPC "))
        .unwrap_or_default();
    assert!(
        line.contains("UNAVAILABLE: ") && line.ends_with("(\"50% <b>down</b> \u{2713}\u{fffd}\")"),
        "{summary}"
    );
    let json = json_with_exit(&kiln(&["report", out.to_str().unwrap(), "--json"]), 0);
    assert_eq!(
        json["total"]["grpc_messages"]["UNAVAILABLE"], said,
        "{:#}",
        json["total"]
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("gRPC UNAVAILABLE \u{2014} \u{201c}50% &lt;b&gt;down&lt;/b&gt;"),
        "the page's answers"
    );
    assert!(!html.contains("<b>down"), "the server's markup stays text");
}

#[test]
fn bad_grpc_input_is_a_clear_error_and_nothing_is_sent() {
    let _turn = common::beside();
    let orders = Orders::start(&[]);
    let refused = |url: &str, extra: &[&str]| {
        let mut args = vec!["run", url, "-d", "1s"];
        args.extend(extra);
        let out = kiln(&args);
        // refused before anything is sent, as kiln refuses any flag it cannot run (exit 1)
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = refused(&orders.url("Put"), &["--proto", &proto()]);
    assert!(
        e.contains("no method Put in shop.v1.Orders: it has Get, Fail"),
        "{e}"
    );
    let e = refused(
        &orders.url("Get"),
        &["--proto", &proto(), "-b", r#"{"idd": "1"}"#],
    );
    assert!(
        e.contains("shop.v1.OrderRequest") && e.contains("idd"),
        "{e}"
    );
    let e = refused(&orders.url("Get"), &[]);
    assert!(e.contains("--proto"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.proto");
    std::fs::write(
        &bad,
        "syntax = \"proto3\";\nmessage A {\n  strin id = 1;\n}\n",
    )
    .unwrap();
    let e = refused(&orders.url("Get"), &["--proto", bad.to_str().unwrap()]);
    assert!(e.contains("bad.proto:3:"), "{e}");
    // nothing reached the server
    let answered = orders.answered();
    assert_eq!(answered, serde_json::json!({}), "{answered}");
}

/// orders.py's List on PostgreSQL under `opentelemetry-instrument` (the stock grpc and psycopg
/// instrumentations), sending its spans to `otlp_port`.
fn instrumented_orders(pg: &Postgres, otlp_port: u16, fixed: bool) -> GrpcServer {
    let python = apps::python();
    let mut command = Command::new(python.with_file_name("opentelemetry-instrument"));
    command
        .arg(&python)
        .arg(app_dir().join("orders.py"))
        .args(["--port", "0", "--dsn", &pg.conninfo()])
        .args(fixed.then_some("--fixed"));
    apps::python_otel_env(&mut command, "orders", otlp_port);
    GrpcServer::start(command, "shop.v1.Orders")
}

#[test]
fn an_instrumented_grpcio_servers_n_plus_one_is_found_at_its_method_and_the_fixed_one_is_not() {
    let _turn = common::beside();
    for fixed in [false, true] {
        let pg = Postgres::start_logging_statements().expect("PostgreSQL starts");
        pg.psql(
            "CREATE TABLE orders (id int PRIMARY KEY);
             CREATE TABLE order_lines (order_id int, sku text);
             INSERT INTO orders SELECT g FROM generate_series(1, 20) g;
             INSERT INTO order_lines SELECT o, 'sku-' || l FROM generate_series(1, 20) o,
               generate_series(1, 3) l;",
        )
        .expect("the schema loads");
        let otlp_port = apps::free_port();
        let server = instrumented_orders(&pg, otlp_port, fixed);
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let run = run(
            &server.url("List"),
            &[
                "--proto",
                &proto(),
                "-c",
                "2",
                "-d",
                "3s",
                "--wait-ongoing-requests-after-deadline",
                "--otlp-listen",
                &format!("127.0.0.1:{otlp_port}"),
                "--out",
                out.to_str().unwrap(),
            ],
        );
        let answered = server.answered()["List OK"].as_u64().unwrap();
        assert_eq!(
            run["total"]["grpc_status"]["OK"], answered,
            "{:#}",
            run["total"]
        );
        // the truth: PostgreSQL's log, 10 lines statements a call or one (the schema's
        // statements not among them)
        let lines = (pg.statements().unwrap().iter())
            .filter(|s| s.starts_with("SELECT") && s.contains("order_lines"))
            .count() as u64;
        assert_eq!(lines, answered * if fixed { 1 } else { 10 });
        let queries: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("queries.json")).unwrap())
                .unwrap();
        let a = &queries["analysis"];
        // the gRPC server span is the request, its route the method
        let routes = a["routes"].as_array().unwrap();
        let route = (routes.iter())
            .find(|r| r["route"] == "shop.v1.Orders/List")
            .unwrap_or_else(|| panic!("{routes:#?}"));
        let per_call = if fixed { 2.0 } else { 11.0 };
        assert_eq!(route["calls_median"].as_f64(), Some(per_call), "{route:#}");
        assert!(
            route["requests"].as_u64().unwrap() * 10 >= answered * 9,
            "{route:#}"
        );
        let n1 = apps::findings(a, "n_plus_one");
        if fixed {
            assert!(n1.is_empty(), "{:#}", a["findings"]);
            continue;
        }
        assert_eq!(n1.len(), 1, "{:#}", a["findings"]);
        assert_eq!(n1[0]["calls"], 10, "{:#}", n1[0]);
        let report = kiln(&["report", out.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(text.contains("N+1 queries  shop.v1.Orders/List"), "{text}");
        // the stock instrumentation records no stack: the statement names the loop
        assert!(
            text.contains("N+1 queries in shop.v1.Orders/List: SELECT order_lines"),
            "{text}"
        );
    }
}
