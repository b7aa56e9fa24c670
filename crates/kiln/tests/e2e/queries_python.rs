//! End to end with real parts: a Flask app on a real PostgreSQL, instrumented with the
//! OpenTelemetry SDK (psycopg and Flask instrumentations, kiln's span processor for stacks),
//! exporting OTLP/protobuf to `kiln queries --listen`. The app's DB calls are known by
//! construction (tests/apps/python_shop/app.py); kiln must report exactly them. The app runs
//! from a folder named like libraries (`opentelemetry/sqlalchemy/`): still the app's code.

use crate::common;

use common::apps::{
    assert_shop_findings, findings, free_port, get, line_of, python_shop_file, start_python_shop,
    visit_shop, Listening, ShopTruth,
};
use common::{json_of, manifest};
use kiln_targets::postgres::Postgres;

#[test]
fn flask_on_postgres_n_plus_one_bulk_and_repeats() {
    let _turn = common::beside();
    const AUTHORS: usize = 12;
    const REPEATS: usize = 4;
    const ROUNDS: usize = 3;
    let pg = Postgres::start().expect("PostgreSQL starts");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let kiln = Listening::start(&out);
    let (_app, app_port) = start_python_shop(&pg.conninfo(), &kiln.endpoint(), AUTHORS, REPEATS);
    let app_file = python_shop_file();
    visit_shop(app_port, ROUNDS);
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

    assert_shop_findings(
        a,
        &ShopTruth {
            source: &app_file,
            file: app_file.to_str().unwrap(),
            loop_function: "authors",
            comment: "#",
            authors: AUTHORS,
            repeats: REPEATS,
            rounds: ROUNDS,
        },
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
        "authors (sqlalchemy/app.py:{})",
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

/// A query PostgreSQL holds for 600 ms (pg_sleep) is the slow call, found at its line with
/// the time its span measured. (The same bar with a call under it is kiln-queries' analysis
/// test; here a host beside other work may stall any call past it.)
#[test]
fn a_query_postgres_holds_past_the_bar_is_the_slow_call_at_its_line() {
    let _turn = common::beside();
    let pg = Postgres::start().expect("PostgreSQL starts");
    let tmp = tempfile::tempdir().unwrap();
    let kiln = Listening::start(&tmp.path().join("run"));
    let (_app, port) = start_python_shop(&pg.conninfo(), &kiln.endpoint(), 12, 4);
    let app_file = python_shop_file();
    get(port, "/report");
    get(port, "/flush");
    let report = kiln.finish();
    let slow = findings(&report["analysis"], "slow");
    let at_report: Vec<&serde_json::Value> = (slow.iter())
        .filter(|f| f["route"] == "GET /report")
        .collect();
    assert_eq!(at_report.len(), 1, "{slow:#?}");
    let f = at_report[0];
    assert_eq!(f["calls"], 1, "{f:#}");
    assert_eq!(f["severity"], "high", "{f:#}");
    let site = f["site"].as_array().unwrap().last().unwrap();
    assert_eq!(site["line"], line_of(&app_file, "# SLOW") as u64, "{f:#}");
    let ms = f["time_ns"].as_f64().unwrap() / 1e6;
    assert!((600.0..5_000.0).contains(&ms), "{f:#}");
    let evidence = f["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with(&format!(
            "one call took {ms:.1} ms (threshold 500 ms) from "
        )),
        "{f:#}"
    );
}

/// `kiln run --otlp-listen`: the DB-call analysis of the requests the load sent, in the
/// run's summary and record, and again from `kiln report`.
#[test]
fn kiln_run_receives_the_traces_of_its_own_load() {
    let _turn = common::beside();
    const AUTHORS: usize = 6;
    let pg = Postgres::start().expect("PostgreSQL starts");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let otlp_port = free_port();
    let endpoint = format!("http://127.0.0.1:{otlp_port}/v1/traces");
    let (_app, app_port) = start_python_shop(&pg.conninfo(), &endpoint, AUTHORS, 4);
    let app_file = python_shop_file();
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
        "medium",
        "--out",
        out.to_str().unwrap(),
    ]);
    // the N+1 is at least medium (high where its 6 calls take 5 ms of a request, as they did
    // on a slower machine): --fail-on medium exits 99, the run itself complete
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
            "at authors (sqlalchemy/app.py:{})",
            line_of(&app_file, "# N+1 LOOP")
        )),
        "{text}"
    );
}

/// Redis through redis-py's OpenTelemetry instrumentation, against a real redis-server
/// (tests/apps/python_redis/app.py drives each route once and writes the spans to a file):
/// the HGETALL loop is an N+1 of 15 at its line with Redis's own fix; a pipeline and an MGET
/// are one call each, not N+1s; the double read, whose arguments the instrumentation writes as
/// "?", is never called redundant, and the finding says how values can be recorded.
#[test]
fn redis_commands_an_n_plus_one_at_its_line_and_no_redundant_guess() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(tmp.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server runs (scripts/test.sh installs it)");
    common::apps::wait_port(port, &mut server, "redis-server");
    let _server = common::apps::Killed(server);
    let app = common::apps::workspace().join("tests/apps/python_redis/app.py");
    let spans = tmp.path().join("spans.pb");
    let ran = std::process::Command::new(common::apps::python())
        .arg(&app)
        .arg(&spans)
        .env("REDIS_URL", format!("redis://127.0.0.1:{port}/0"))
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );

    let out = common::kiln(&[
        "queries",
        spans.to_str().unwrap(),
        "--out",
        tmp.path().join("q").to_str().unwrap(),
        "--json",
    ]);
    let report = common::json_with_exit(&out, 0);
    let a = &report["analysis"];
    // per user: the cart (1 + 15), the pipeline (1 + 1), the MGET (1 + 1), the profile (2)
    assert_eq!(a["coverage"]["db_spans"], 2 * 22, "{}", a["coverage"]);
    let loops = findings(a, "n_plus_one");
    assert_eq!(loops.len(), 1, "{loops:#?}");
    let f = &loops[0];
    assert_eq!(
        (f["calls"].as_u64(), f["shape"].as_str()),
        (Some(15), Some("HGETALL ?"))
    );
    assert!(
        f["route"].as_str().unwrap().starts_with("GET /cart/"),
        "{f}"
    );
    let site = f["site"].as_array().unwrap().last().unwrap();
    assert_eq!(site["line"], line_of(&app, "# N_PLUS_ONE") as u64, "{site}");
    assert!(f["fix"].as_str().unwrap().contains("pipeline"), "{f}");
    assert!(
        f["evidence"]
            .as_str()
            .unwrap()
            .contains("redis-py's instrumentation always"),
        "{f}"
    );
    assert!(findings(a, "redundant").is_empty(), "{}", a["findings"]);
}
