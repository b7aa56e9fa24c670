//! Pre-fork servers as their users deploy them: gunicorn's master with sync workers. The
//! target is every process serving the port, the master and the workers it forks; the truth
//! is the kernel's own counters for that process tree over the same window.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::apps::{free_port, python, wait_port, workspace, KilledGroup};
use crate::common::{self, kiln};
use kiln_sample::ProcFs;
use kiln_targets::postgres::Postgres;

/// gunicorn with `workers` sync workers serving tests/apps/python_prefork on `port`, once
/// every worker is up.
fn gunicorn(port: u16, workers: usize) -> KilledGroup {
    let python = python();
    let gunicorn = python.with_file_name("gunicorn");
    let mut server = KilledGroup(
        Command::new(&gunicorn)
            .args([
                "-w",
                &workers.to_string(),
                "-b",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("--chdir")
            .arg(workspace().join("tests/apps/python_prefork"))
            .arg("app:app")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("gunicorn starts"),
    );
    wait_port(port, &mut server.0, "gunicorn");
    let master = server.0.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ProcFs::default().process_tree(master).len() < workers + 1 {
        assert!(
            Instant::now() < deadline,
            "gunicorn's workers did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// What the kernel counted for `master` and everything it forked so far, in CPU seconds.
fn tree_cpu_s(master: i32) -> f64 {
    let ticks = ProcFs::default().tree_cpu_ticks(master);
    ticks.expect("the master runs") as f64 / 100.0
}

#[test]
fn a_gunicorn_masters_workers_are_the_target_and_their_cpu_is_its_cpu() {
    // the truth is the kernel's counters over the same window: a neighbour changes both alike
    let _turn = common::group("prefork");
    let port = free_port();
    let server = gunicorn(port, 2);
    let master = server.0.id() as i32;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let before = tree_cpu_s(master);
    // one connection per sync worker: each serves one connection at a time
    let run = kiln(&[
        "run",
        &format!("http://127.0.0.1:{port}/work"),
        "-c",
        "2",
        "-d",
        "5s",
        "--watch-port",
        &port.to_string(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let truth_s = tree_cpu_s(master) - before;
    drop(server);
    let text = String::from_utf8_lossy(&run.stdout).to_string();
    assert_eq!(run.status.code(), Some(0), "{text}");
    // each request burns 8 ms of a worker's CPU: the workers burned at least that
    let requests = common::load_seconds(&out)
        .iter()
        .map(|s| s["requests"].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert!(requests > 50, "{requests} requests\n{text}");
    assert!(
        truth_s > requests as f64 * 0.008,
        "{truth_s:.2} s for {requests}"
    );
    let seconds: Vec<serde_json::Value> = std::fs::read_to_string(out.join("resources.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut seen_s = 0.0;
    for s in &seconds {
        let p = &s["process"];
        let cpu = p["cpu_user_pct"].as_f64().unwrap() + p["cpu_system_pct"].as_f64().unwrap();
        seen_s += cpu / 100.0 * s["interval_s"].as_f64().unwrap();
        // the master first, then its two workers, every second
        let pids: Vec<i64> = p["processes"]
            .as_array()
            .unwrap_or_else(|| panic!("{p}"))
            .iter()
            .map(|w| w["pid"].as_i64().unwrap())
            .collect();
        assert_eq!(pids.len(), 3, "{p}");
        assert_eq!(pids[0], i64::from(master), "{p}");
    }
    // the sampler's window lies inside kiln's: the rest is the idle master's heartbeat
    assert!(
        seen_s <= truth_s * 1.02 + 0.02 && seen_s >= truth_s * 0.9,
        "kiln saw {seen_s:.2} CPU-s of the target, the kernel counted {truth_s:.2}"
    );
    assert!(
        text.contains("processes 3 (2 workers): ")
            && text.contains(&format!("{master} gunicorn (master)")),
        "{text}"
    );
}

/// The Conduit-shaped Flask app (tests/apps/python_conduit) under `opentelemetry-instrument
/// gunicorn -w 2`, as its users deploy it, on a PostgreSQL that logs every statement;
/// `fixed` loads the tags in one statement instead of one per article.
fn conduit(pg: &Postgres, port: u16, otlp_port: u16, fixed: bool) -> KilledGroup {
    let python = python();
    let bin = python.parent().unwrap();
    let mut command = Command::new(bin.join("opentelemetry-instrument"));
    command
        .arg(bin.join("gunicorn"))
        .args(["-w", "2", "-b", &format!("127.0.0.1:{port}")])
        .arg("--chdir")
        .arg(workspace().join("tests/apps/python_conduit"))
        .arg("app:app")
        .env(
            "DATABASE_URL",
            format!("postgresql+psycopg2://kiln@127.0.0.1:{}/postgres", pg.port),
        )
        .env("CONDUIT_FIXED", if fixed { "1" } else { "0" });
    crate::common::apps::python_otel_env(&mut command, "conduit", otlp_port);
    let mut server = KilledGroup(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("opentelemetry-instrument gunicorn starts"),
    );
    wait_port(
        port,
        &mut server.0,
        "gunicorn under opentelemetry-instrument",
    );
    server
}

/// One run of kiln against the Conduit app, and what PostgreSQL logged meanwhile: (the run's
/// text, its queries.json, the app's statements of the run).
fn conduit_run(fixed: bool) -> (String, serde_json::Value, Vec<String>, i32) {
    let pg = Postgres::start_logging_statements().expect("PostgreSQL starts");
    let schema =
        std::fs::read_to_string(workspace().join("tests/apps/python_conduit/schema.sql")).unwrap();
    pg.psql(&schema).expect("the schema loads");
    let (port, otlp_port) = (free_port(), free_port());
    let server = conduit(&pg, port, otlp_port, fixed);
    let master = server.0.id() as i32;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let before = pg.statements().unwrap().len();
    let run = kiln(&[
        "run",
        &format!("http://127.0.0.1:{port}/api/articles"),
        "-c",
        "2",
        "-d",
        "4s",
        "--watch-port",
        &port.to_string(),
        "--otlp-listen",
        &format!("127.0.0.1:{otlp_port}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&run.stdout).to_string();
    assert_eq!(run.status.code(), Some(0), "{text}");
    drop(server);
    // what the app sent: the driver's own transaction control (psycopg2's implicit BEGIN,
    // the pool's ROLLBACK) passes no cursor and has no span to count
    let statements: Vec<String> = pg.statements().unwrap()[before..]
        .iter()
        .filter(|s| !matches!(s.trim(), "BEGIN" | "ROLLBACK" | "COMMIT"))
        .cloned()
        .collect();
    let read = |dir: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("queries.json")).unwrap()).unwrap()
    };
    let queries = read(&out);
    // `kiln queries RUN_DIR` reads the run's spans again, in the run's measured window: the
    // same reading, the same findings
    let again = tmp.path().join("again");
    let reread = kiln(&[
        "queries",
        out.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(
        reread.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&reread.stderr)
    );
    let (a, b) = (&queries["analysis"], &read(&again)["analysis"]);
    for figure in [
        "requests_total",
        "db_calls",
        "requests_outside_window",
        "window_ns",
    ] {
        assert_eq!(a[figure], b[figure], "{figure}");
    }
    let ids = |a: &serde_json::Value| -> Vec<serde_json::Value> {
        a["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].clone())
            .collect()
    };
    assert_eq!(ids(a), ids(b));
    (text, queries, statements, master)
}

#[test]
fn conduit_under_opentelemetry_instrument_and_gunicorn_counts_each_db_call_once() {
    let _turn = common::group("prefork");
    let app = workspace().join("tests/apps/python_conduit/app.py");
    let loop_line = crate::common::apps::line_of(&app, "conduit: tag list");
    for fixed in [false, true] {
        let (text, queries, statements, master) = conduit_run(fixed);
        let a = &queries["analysis"];
        // the truth: PostgreSQL's log, one list statement a request and the tags' after it,
        // and SQLAlchemy's four questions on each worker's first connection
        let lists = statements.iter().filter(|s| s.contains("LIMIT")).count();
        let per_request = if fixed { 2 } else { 11 };
        assert!(lists > 10, "{lists} requests served\n{text}");
        let app_statements = statements
            .iter()
            .filter(|s| s.contains("articles") || s.contains("tags"))
            .count();
        assert_eq!(app_statements, lists * per_request, "{statements:#?}");
        // every statement of the run, counted once (a request still in flight as the load
        // ended may be missing: its server answered after kiln stopped listening)
        let db_calls = a["db_calls"].as_u64().unwrap() as usize;
        assert!(
            db_calls <= statements.len() && statements.len() - db_calls <= 2 * per_request,
            "kiln counted {db_calls} DB calls, PostgreSQL ran {}\n{text}",
            statements.len()
        );
        // kiln: each call once, though SQLAlchemy's and psycopg2's spans both record it
        let routes = a["routes"].as_array().unwrap();
        let route = routes
            .iter()
            .find(|r| r["route"] == "GET /api/articles")
            .unwrap_or_else(|| panic!("{routes:#?}\n{text}"));
        for figure in ["calls_median", "calls_p95"] {
            assert_eq!(
                route[figure].as_f64(),
                Some(per_request as f64),
                "{figure}: {route:#}\n{text}"
            );
        }
        let requests = route["requests"].as_u64().unwrap() as usize;
        assert!(
            requests * 10 >= lists * 9,
            "kiln analysed {requests} of {lists}\n{text}"
        );
        // a trace cut at the end of the window is counted apart, never a route of its own
        for other in routes.iter().filter(|r| r["route"] != "GET /api/articles") {
            assert_eq!(
                other["route"], "(trace without its server span)",
                "{other:#}"
            );
            assert!(other["calls_max"].as_u64().unwrap() as usize <= per_request);
        }
        assert!(
            a["counted_once"]["nested_db_spans"].as_u64().unwrap() as usize
                >= requests * per_request,
            "{:#}",
            a["counted_once"]
        );
        let n_plus_one = crate::common::apps::findings(a, "n_plus_one");
        if fixed {
            assert!(n_plus_one.is_empty(), "{n_plus_one:#?}\n{text}");
        } else {
            assert_eq!(n_plus_one.len(), 1, "{text}");
            assert_eq!(n_plus_one[0]["calls"], 10);
            // at the app's line, never gunicorn's console script
            let evidence = n_plus_one[0]["evidence"].as_str().unwrap();
            assert!(
                evidence.contains(&format!("app.py:{loop_line}")),
                "{evidence}"
            );
            assert!(!text.contains("bin/gunicorn"), "{text}");
        }
        // the master and its two workers are the target
        assert!(
            text.contains("processes 3 (2 workers): ")
                && text.contains(&format!("{master} gunicorn (master)")),
            "{text}"
        );
    }
}

/// kiln's run of `args` against `url`, as `kiln report --json` reads it back: its totals.
fn totals_of(url: &str, args: &[&str]) -> serde_json::Value {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let run = kiln(&[&["run", url, "--out", out.to_str().unwrap()], args].concat());
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let report = kiln(&["report", out.to_str().unwrap(), "--json"]);
    common::json_of(&report)["total"].clone()
}

#[test]
fn an_open_model_at_a_low_rate_does_not_stall_sync_workers_with_idle_connections() {
    let _turn = common::group("prefork");
    let port = free_port();
    let _server = gunicorn(port, 2);
    let url = format!("http://127.0.0.1:{port}/work");
    // one request at a time, as the server serves it: its own latency, the median of ten
    let mut alone: Vec<Duration> = (0..10)
        .map(|_| {
            let started = Instant::now();
            crate::common::apps::get(port, "/work");
            started.elapsed()
        })
        .collect();
    alone.sort();
    let single_us = alone[5].as_micros() as f64;
    // 5/s with kiln's defaults: the connections it opens up front are the rate's, and each
    // sync worker answers as soon as a request comes
    let t = totals_of(&url, &["--rate", "5", "-d", "6s"]);
    assert_eq!(t["abandoned"], 0, "{t:#}");
    assert_eq!(t["requests"], t["scheduled"], "{t:#}");
    let p50 = t["latency"]["p50_us"].as_f64().unwrap();
    assert!(
        p50 <= 2.0 * single_us + 5_000.0,
        "p50 {p50:.0}us, a request alone {single_us:.0}us: {t:#}"
    );
    // the same load with fifty connections opened up front (-c 50): each worker blocks on a
    // connection nobody sends on, and the requests queue behind it for seconds, or until
    // the run ends and cuts them (a CI run: 2 of 30 answered, 28 still waiting)
    let t = totals_of(&url, &["--rate", "5", "-d", "6s", "-c", "50"]);
    let slowest_us = t["latency"]["p99_us"].as_f64().unwrap_or(0.0);
    let cut = t["abandoned"].as_u64().unwrap();
    assert!(slowest_us > 1_000_000.0 || cut >= 5, "{t:#}");
}
