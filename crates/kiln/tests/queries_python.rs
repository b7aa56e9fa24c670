//! End to end with real parts: a Flask app on a real PostgreSQL, instrumented with the
//! OpenTelemetry SDK (psycopg and Flask instrumentations, kiln's span processor for stacks),
//! exporting OTLP/protobuf to `kiln queries --listen`. The app's DB calls are known by
//! construction (tests/apps/python_shop/app.py); kiln must report exactly them.

mod common;

use std::process::{Command, Stdio};

use common::apps::{
    findings, free_port, get, line_of, python, wait_port, workspace, Killed, Listening,
};
use common::{json_of, manifest};
use kiln_targets::postgres::Postgres;

#[test]
fn flask_on_postgres_n_plus_one_bulk_and_repeats() {
    const AUTHORS: usize = 12;
    const REPEATS: usize = 4;
    const ROUNDS: usize = 3;
    let python = python();
    let pg = Postgres::start().expect("PostgreSQL starts");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");

    let kiln = Listening::start(&out);
    let app_file = workspace()
        .join("tests/apps/python_shop/app.py")
        .canonicalize()
        .unwrap();
    let app_port = free_port();
    let app = Command::new(&python)
        .arg(&app_file)
        .env("DATABASE_URL", pg.conninfo())
        .env("PORT", app_port.to_string())
        .env("N_AUTHORS", AUTHORS.to_string())
        .env("REPEATS", REPEATS.to_string())
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", kiln.endpoint())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut app = Killed(app);
    wait_port(app_port, &mut app.0, "the Python app");

    for _ in 0..ROUNDS {
        get(app_port, "/authors");
        get(app_port, "/bulk");
        get(app_port, "/settings");
    }
    get(app_port, "/flush");
    // the exporter's POSTs are answered before /flush returns; Ctrl-C ends the receiver
    let report = kiln.finish();
    let a = &report["analysis"];

    // every DB call came with its SQL and a stack
    let c = &a["coverage"];
    let db_calls = ROUNDS * ((1 + AUTHORS) + 1 + REPEATS);
    assert_eq!(c["db_spans"], db_calls as u64, "{c}");
    assert_eq!(c["db_with_text"], db_calls as u64);
    assert_eq!(c["db_with_stack"], db_calls as u64);
    assert_eq!(c["rejected_spans"], 0);

    let routes: Vec<(String, f64)> = a["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().to_string(),
                r["calls_max"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(
        routes.contains(&("GET /authors".into(), (1 + AUTHORS) as f64)),
        "{routes:?}"
    );
    assert!(routes.contains(&("GET /bulk".into(), 1.0)), "{routes:?}");
    assert!(
        routes.contains(&("GET /settings".into(), REPEATS as f64)),
        "{routes:?}"
    );

    let n1 = findings(a, "n_plus_one");
    assert_eq!(n1.len(), 1, "{:#}", a["findings"]);
    let f = &n1[0];
    assert_eq!(f["route"], "GET /authors");
    assert_eq!(f["calls"], AUTHORS as u64);
    assert_eq!(f["requests"], ROUNDS as u64);
    // psycopg's capture_parameters recorded the values: all different
    assert_eq!(f["distinct_values"], AUTHORS as u64);
    let leaf = f["site"].as_array().unwrap().last().unwrap();
    assert_eq!(leaf["file"], app_file.to_str().unwrap());
    assert_eq!(leaf["line"], line_of(&app_file, "# N+1 LOOP") as u64);
    assert_eq!(leaf["function"], "authors");

    let repeated = findings(a, "redundant");
    assert_eq!(repeated.len(), 1, "{:#}", a["findings"]);
    assert_eq!(repeated[0]["route"], "GET /settings");
    assert_eq!(repeated[0]["calls"], REPEATS as u64);
    assert_eq!(
        repeated[0]["site"].as_array().unwrap().last().unwrap()["line"],
        line_of(&app_file, "# REPEATED") as u64
    );

    // nothing else, and nothing at all on the bulk route
    assert_eq!(
        a["findings"].as_array().unwrap().len(),
        2,
        "{:#}",
        a["findings"]
    );

    // the run record: spans as received, the analysis, the trie, the report
    let m = manifest(&out);
    assert_eq!(m["status"], "complete");
    let parts: Vec<&str> = m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "otlp-protobuf",
        "queries",
        "db-trie-calls",
        "db-trie-speedscope",
        "queries-html",
    ] {
        assert!(parts.contains(&kind), "{kind} in {parts:?}");
    }
    let folded = std::fs::read_to_string(out.join("db-trie.folded")).unwrap();
    let loop_line = format!(
        "authors (python_shop/app.py:{})",
        line_of(&app_file, "# N+1 LOOP")
    );
    let loop_calls: u64 = folded
        .lines()
        .filter(|l| l.contains(&loop_line))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(loop_calls as usize, ROUNDS * AUTHORS, "{folded}");

    // the recorded spans analyse again to the same findings
    let again = json_of(&common::kiln(&[
        "queries",
        out.to_str().unwrap(),
        "--json",
        "--out",
        tmp.path().join("again").to_str().unwrap(),
    ]));
    assert_eq!(again["analysis"]["findings"], a["findings"]);
    drop(pg);
}

/// `kiln run --otlp-listen`: the DB-call analysis of the requests the load sent, in the
/// run's summary and record, and again from `kiln report`.
#[test]
fn kiln_run_receives_the_traces_of_its_own_load() {
    const AUTHORS: usize = 6;
    let python = python();
    let pg = Postgres::start().expect("PostgreSQL starts");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let otlp_port = free_port();
    let app_file = workspace()
        .join("tests/apps/python_shop/app.py")
        .canonicalize()
        .unwrap();
    let app_port = free_port();
    let app = Command::new(&python)
        .arg(&app_file)
        .env("DATABASE_URL", pg.conninfo())
        .env("PORT", app_port.to_string())
        .env("N_AUTHORS", AUTHORS.to_string())
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("http://127.0.0.1:{otlp_port}/v1/traces"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut app = Killed(app);
    wait_port(app_port, &mut app.0, "the Python app");
    let url = format!("http://127.0.0.1:{app_port}/authors");
    let listen = format!("127.0.0.1:{otlp_port}");
    let run = common::kiln(&[
        "run",
        &url,
        "-c",
        "1",
        "-d",
        "2s",
        "--otlp-listen",
        &listen,
        "--json",
        "--quiet",
        "--fail-on",
        "high",
        "--out",
        out.to_str().unwrap(),
    ]);
    // the N+1 is high: --fail-on high exits 99, the run itself complete
    let v = common::json_with_exit(&run, 99);
    assert_eq!(v["status"], "complete");
    let sent = v["total"]["requests"].as_u64().expect("request count");
    let q = &v["queries"]["analysis"];
    let n1 = findings(q, "n_plus_one");
    assert_eq!(n1.len(), 1, "{:#}", q["findings"]);
    assert_eq!(n1[0]["calls"], AUTHORS as u64);
    // every request the load sent was traced and analysed
    assert_eq!(n1[0]["requests"].as_u64(), Some(sent), "{:#}", v["total"]);
    assert_eq!(
        q["coverage"]["db_spans"].as_u64(),
        Some(sent * (AUTHORS as u64 + 1))
    );
    let report = common::kiln(&["report", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("N+1 queries  GET /authors"), "{text}");
    assert!(
        text.contains(&format!(
            "at authors (python_shop/app.py:{})",
            line_of(&app_file, "# N+1 LOOP")
        )),
        "{text}"
    );
}
