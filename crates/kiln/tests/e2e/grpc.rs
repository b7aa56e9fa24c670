//! gRPC calls against a real grpcio server (tests/apps/python_grpc/orders.py) whose latency
//! and failures are known by construction, and whose own counts are the truth.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::common::{self, apps, json_with_exit, kiln};

fn app_dir() -> PathBuf {
    apps::workspace().join("tests/apps/python_grpc")
}

fn proto() -> String {
    app_dir().join("orders.proto").display().to_string()
}

/// The grpcio server, stopped with SIGTERM to say what it answered.
struct Orders {
    child: Child,
    port: u16,
}

impl Orders {
    fn start(flags: &[&str]) -> Orders {
        let mut child = Command::new(apps::python())
            .arg(app_dir().join("orders.py"))
            .args(["--port", "0"])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python runs");
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
                panic!("orders.py did not start: {line:?}\n{said}")
            });
        Orders { child, port }
    }

    fn url(&self, method: &str) -> String {
        format!("grpc://127.0.0.1:{}/shop.v1.Orders/{method}", self.port)
    }

    /// Stops the server; the calls it answered, "Method STATUS" to count.
    fn answered(mut self) -> Value {
        // SAFETY: a signal to the child this test started
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut lines = BufReader::new(self.child.stdout.take().unwrap()).lines();
        let counts = lines.next().expect("orders.py says its counts").unwrap();
        let _ = self.child.wait();
        serde_json::from_str(&counts).unwrap()
    }
}

impl Drop for Orders {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        e.contains("no method shop.v1.Orders/Put") && e.contains("shop.v1.Orders/Get"),
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
