//! The demo's shop as an application under test, outside the demo: kiln reads the spans the
//! OpenTelemetry SDK for Rust exports over OTLP/HTTP protobuf from a real SQLite service. Every
//! request is traced (`--trace-ratio 1`), so the truth is exact: the N+1 shop makes 1 + 8
//! statements per request, 8 of them from one loop with 8 different product ids; the fixed
//! shop makes one join per request and has no DB finding.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::apps::free_port;
use common::{json_with_exit, kiln};

/// `kiln demo-shop`, exporting its spans to 127.0.0.1:`otlp_port`; killed when dropped.
struct Shop {
    child: Child,
    addr: String,
}

impl Shop {
    fn start(args: &[&str], otlp_port: u16) -> Shop {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("demo-shop")
            .args(args)
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{otlp_port}"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the shop starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{line:?}"))
            .to_string();
        Shop { child, addr }
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Loads the shop for 4 s at 50 requests/s while receiving its spans; the run's JSON.
fn run_against(shop_args: &[&str]) -> serde_json::Value {
    let port = free_port();
    let mut args = shop_args.to_vec();
    args.extend(["--trace-ratio", "1"]);
    let shop = Shop::start(&args, port);
    let dir = tempfile::tempdir().unwrap();
    let out = kiln(&[
        "run",
        &format!("http://{}/orders/42", shop.addr),
        "--rate",
        "50",
        "-d",
        "4s",
        "--otlp-listen",
        &format!("127.0.0.1:{port}"),
        "--otlp-wait",
        "3s",
        "--json",
        "--out",
        dir.path().join("run").to_str().unwrap(),
    ]);
    json_with_exit(&out, 0)
}

#[test]
fn every_request_of_the_rust_sdk_shop_reaches_the_db_analysis() {
    let _turn = common::beside();
    let run = run_against(&["--fix", "backtraces,json,mmap,stall,lock"]);
    let sent = run["total"]["requests"].as_u64().unwrap();
    assert!(sent >= 150, "{sent} requests");
    let analysis = &run["queries"]["analysis"];
    // 1 + 8 statements per request, every request traced
    assert_eq!(
        analysis["coverage"]["db_spans"].as_u64(),
        Some(9 * sent),
        "{analysis:#}"
    );
    let findings = analysis["findings"].as_array().unwrap();
    let n1: Vec<_> = findings
        .iter()
        .filter(|f| f["kind"] == "n_plus_one")
        .collect();
    assert_eq!(n1.len(), 1, "{findings:#?}");
    assert_eq!(n1[0]["calls"], 8);
    assert_eq!(n1[0]["distinct_values"], 8);
    assert_eq!(n1[0]["requests"].as_u64(), Some(sent));
    let route = n1[0]["route"].as_str().unwrap();
    assert_eq!(route, "GET /orders/{id}");

    // fixed: one join per request, no DB finding
    let run = run_against(&["--fixed"]);
    let sent = run["total"]["requests"].as_u64().unwrap();
    let analysis = &run["queries"]["analysis"];
    assert_eq!(
        analysis["coverage"]["db_spans"].as_u64(),
        Some(sent),
        "{analysis:#}"
    );
    assert_eq!(
        analysis["findings"].as_array().unwrap().len(),
        0,
        "{analysis:#}"
    );
}
