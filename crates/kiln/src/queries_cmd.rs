//! `kiln queries`: analyse OpenTelemetry spans from files, or receive them live as an
//! OTLP/HTTP endpoint, and report N+1 loops, repeats, slow and housekeeping statements and
//! the DB stack trie (terminal tree, HTML treemap, collapsed stacks, speedscope).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kiln_load::plan::parse_duration;
use kiln_load::StopSignal;
use kiln_queries::analyze::{FindingKind, Options};
use kiln_queries::receiver::{Receiver, JSON_RECORD, LEGACY_RECORDS, PROTOBUF_RECORD};
use kiln_queries::stack::Frame;
use kiln_queries::trie::Frames;
use kiln_queries::Ingest;
use kiln_record::{RunLocation, RunStatus};
use kiln_runner::query_parts::{gate, list_recorded, write_report};
use kiln_runner::QuerySettings;
use serde_json::{json, Value};

use crate::cli::{FailOn, QueriesArgs, QueryAnalysisArgs, TrieFrames};
use crate::format::safe_text;
use crate::run_cmd::{create_run_dir, interrupted_exit_code, or_fail, EXIT_THRESHOLDS_FAILED};

/// How spans are analysed, from the flags.
pub fn settings(args: &QueryAnalysisArgs) -> Result<QuerySettings> {
    if !(args.slow_ms.is_finite() && args.slow_ms > 0.0) {
        bail!(
            "--slow-ms must be a positive number of milliseconds, not {}",
            args.slow_ms
        );
    }
    let options = Options {
        n_plus_one_min: args.n_plus_one as usize,
        slow_ms: args.slow_ms,
        route: args.route.clone(),
        request: args.request.clone(),
        worst_requests: 10,
        ignore_sql: args.ignore_sql.clone(),
        ignore_frames: args.ignore_frames.clone(),
        app_packages: args.app_packages.clone(),
        window_ns: None,
    };
    Ok(QuerySettings {
        options,
        frames: match args.frames {
            TrieFrames::App => Frames::App,
            TrieFrames::All => Frames::All,
        },
        html: args.html.clone(),
        fail_on: args.fail_on.map(FailOn::query_severity),
    })
}

/// The terminal report, from a queries.json record (so `kiln report` prints the same).
pub fn report_text(record: &Value, top: usize) -> String {
    let a = &record["analysis"];
    let c = &a["coverage"];
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    // a median or percentile: whole numbers without ".0"
    let num = |v: &Value| {
        let x = v.as_f64().unwrap_or(0.0);
        if x.fract() == 0.0 {
            format!("{x:.0}")
        } else {
            format!("{x:.1}")
        }
    };
    let text = |v: &Value| safe_text(v.as_str().unwrap_or(""));
    let db = n(&c["db_spans"]);
    let pct = |v: &Value| {
        if db == 0 {
            0.0
        } else {
            100.0 * n(v) as f64 / db as f64
        }
    };
    let mut out = format!(
        "Spans      {} read, {db} DB calls: {} with query text ({:.0}%), {} with a stack or caller frame ({:.0}%), {} with recorded values\n",
        n(&c["spans"]),
        n(&c["db_with_text"]),
        pct(&c["db_with_text"]),
        n(&c["db_with_caller"]),
        pct(&c["db_with_caller"]),
        n(&c["db_with_params"])
    );
    let rejected = n(&c["rejected_spans"]) + n(&c["rejected_lines"]);
    if rejected + n(&c["lossy_lines"]) + n(&c["spans_dropped_attributes"]) > 0 {
        out += &format!(
            "Problems   {} spans and {} lines/requests rejected, {} lines with invalid UTF-8 replaced, {} spans with dropped attributes\n",
            n(&c["rejected_spans"]),
            n(&c["rejected_lines"]),
            n(&c["lossy_lines"]),
            n(&c["spans_dropped_attributes"])
        );
        for p in c["problems"].as_array().into_iter().flatten().take(3) {
            out += &format!("           {}\n", text(p));
        }
    }
    let with_stack = n(&a["calls_with_stack"]);
    if with_stack > 0 {
        let app = n(&a["calls_with_app_frame"]);
        out += &format!(
            "           {app} of {with_stack} stacks ({:.0}%) hold an application frame{}\n",
            100.0 * app as f64 / with_stack as f64,
            if app < with_stack {
                "; for the others kiln names the nearest frame (say which code is yours: --app-package PREFIX)"
            } else {
                ""
            }
        );
    }
    if n(&a["requests_outside_window"]) > 0 {
        out += &format!(
            "Left out   {} requests ({} DB calls) that began outside the measured load (queued before kiln listened, or in the warm-up)\n",
            n(&a["requests_outside_window"]),
            n(&a["calls_outside_window"])
        );
    }
    if db > 0 && n(&c["db_with_caller"]) == 0 {
        out += "           no DB span carries a stack: call sites are unknown and N+1s are grouped by parent span.\n           Python: pip install ./agents/python (kiln-otel-stacks); Java: the span-stacktrace extension with min.duration=0 (README)\n";
    }
    let empty = Vec::new();
    let routes = a["routes"].as_array().unwrap_or(&empty);
    let findings = a["findings"].as_array().unwrap_or(&empty);
    out += &format!(
        "Requests   {} ({} matched), {} routes, {} DB calls{}\n",
        n(&a["requests_total"]),
        n(&a["requests_matched"]),
        routes.len(),
        n(&a["db_calls"]),
        match n(&a["ignored_calls"]) {
            0 => String::new(),
            k => format!(" ({k} left out of the findings by --ignore-*)"),
        }
    );
    if findings.is_empty() {
        out += "Findings   none\n";
    } else {
        out += &format!("Findings ({})\n", findings.len());
    }
    for f in findings.iter().take(top) {
        out += &format!(
            "  {:<6} {}  {}  [{}]\n         {}\n         in {} request(s), calls median {} max {}, {:.1} ms in all\n         {}\n",
            f["severity"].as_str().unwrap_or("").to_uppercase(),
            kind_title(&f["kind"]),
            text(&f["route"]),
            text(&f["id"]),
            text(&f["evidence"]),
            n(&f["requests"]),
            num(&f["calls_median"]),
            n(&f["calls_max"]),
            n(&f["time_total_ns"]) as f64 / 1e6,
            text(&f["shape"]),
        );
        for frame in f["site"].as_array().into_iter().flatten().rev().take(4) {
            let frame: Frame = serde_json::from_value(frame.clone()).unwrap_or_else(|_| Frame {
                function: "?".into(),
                file: None,
                line: None,
                app: true,
            });
            out += &format!("         at {}\n", safe_text(&frame.label()));
        }
        out += &format!("         fix: {}\n", text(&f["fix"]));
    }
    if findings.len() > top {
        out += &format!(
            "  ... {} more in queries.json and the HTML report\n",
            findings.len() - top
        );
    }
    if !routes.is_empty() {
        out += &format!(
            "{:<40} {:>8} {:>10} {:>6} {:>6} {:>10} {:>8}\n",
            "Route", "requests", "calls p50", "p95", "max", "DB ms p50", "p95"
        );
        for r in routes.iter().take(top) {
            out += &format!(
                "{:<40} {:>8} {:>10} {:>6} {:>6} {:>10.1} {:>8.1}\n",
                text(&r["route"]),
                n(&r["requests"]),
                num(&r["calls_median"]),
                num(&r["calls_p95"]),
                n(&r["calls_max"]),
                r["db_time_median_ms"].as_f64().unwrap_or(0.0),
                r["db_time_p95_ms"].as_f64().unwrap_or(0.0)
            );
        }
    }
    let worst = a["worst_requests"].as_array().unwrap_or(&empty);
    if worst.len() > 1 {
        out += "Most DB calls (--request ID for one request's trie)\n";
        for w in worst.iter().take(3) {
            out += &format!(
                "  {:>6} calls ({} housekeeping) {:>8.1} ms  {}  {}\n",
                n(&w["db_calls"]),
                n(&w["housekeeping_calls"]),
                n(&w["db_time_ns"]) as f64 / 1e6,
                text(&w["route"]),
                text(&w["id"])
            );
        }
    }
    let heaviest = record["trie"]["heaviest"].as_str().unwrap_or("");
    if !heaviest.is_empty() {
        out += "DB stack trie (calls, share, DB time; paths under 5% left out)\n";
        for line in heaviest.lines() {
            out += &safe_text(line);
            out.push('\n');
        }
    }
    out
}

fn kind_title(kind: &Value) -> &'static str {
    serde_json::from_value::<FindingKind>(kind.clone())
        .map(FindingKind::title)
        .unwrap_or("Finding")
}

fn files_of_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let found: Vec<PathBuf> = [JSON_RECORD, PROTOBUF_RECORD]
        .iter()
        .chain(LEGACY_RECORDS.iter())
        .map(|f| dir.join(f))
        .filter(|p| p.exists())
        .collect();
    if found.is_empty() {
        bail!(
            "{} is a directory without recorded spans ({JSON_RECORD} or {PROTOBUF_RECORD})",
            dir.display()
        );
    }
    Ok(found)
}

/// Reads span files (or run directories' recorded spans) into `ingest`.
pub fn read_files(ingest: &mut Ingest, files: &[PathBuf]) -> Result<()> {
    for file in files {
        let paths = if file.is_dir() {
            files_of_dir(file)?
        } else {
            vec![file.clone()]
        };
        for path in paths {
            ingest
                .add_file(&path)
                .with_context(|| format!("reading spans from {}", path.display()))?;
        }
    }
    Ok(())
}

/// Starts the receiver (before the run directory exists, so that a bad address leaves no
/// directory behind); a non-loopback address gets a warning.
pub fn start_receiver(addr: &str) -> Result<Receiver> {
    let receiver = Receiver::start(addr, None)?;
    let local: SocketAddr = receiver.addr();
    if !local.ip().is_loopback() {
        eprintln!("kiln: warning: receiving traces on {local}, reachable from other hosts");
    }
    Ok(receiver)
}

pub fn run(args: QueriesArgs, stop: &StopSignal) -> Result<u8> {
    if args.files.is_empty() && args.listen.is_none() {
        bail!("give span files to analyse, or --listen to receive them (see kiln queries --help)");
    }
    let settings = settings(&args.analysis)?;
    let duration = args.duration.as_deref().map(parse_duration).transpose()?;
    let mut ingest = Ingest::new();
    let reading = Instant::now();
    read_files(&mut ingest, &args.files)?;
    let read = reading.elapsed();
    let receiver = args.listen.as_deref().map(start_receiver).transpose()?;
    let out = RunLocation::from_flag(args.out.as_deref(), "queries");
    let plan = json!({"files": args.files, "listen": args.listen, "duration": args.duration,
        "route": args.analysis.route, "n_plus_one": args.analysis.n_plus_one, "slow_ms": args.analysis.slow_ms});
    let mut dir = create_run_dir(&out, "queries", plan)?;
    let mut status = RunStatus::Complete;
    let mut reason = None;
    if let Some(receiver) = receiver {
        receiver.record_to(dir.path());
        eprintln!(
            "kiln: receiving OTLP traces at http://{}/v1/traces (protobuf or JSON); {}",
            receiver.addr(),
            match duration {
                Some(d) => format!("for {}", humantime::format_duration(d)),
                None => "Ctrl-C ends it".into(),
            }
        );
        let tty = std::io::stderr().is_terminal();
        let started = Instant::now();
        let mut last = Instant::now();
        while !stop.is_stopped() && duration.is_none_or(|d| started.elapsed() < d) {
            std::thread::sleep(Duration::from_millis(100));
            let every = if tty {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(10)
            };
            if last.elapsed() >= every {
                last = Instant::now();
                let s = receiver.stats();
                let line = format!(
                    "kiln: {:>4.0}s  {} requests, {} spans, {} DB calls, {} rejected",
                    started.elapsed().as_secs_f64(),
                    s.requests,
                    s.spans,
                    s.db_spans,
                    s.rejected_requests
                );
                if tty {
                    eprint!("\r{line}");
                } else {
                    eprintln!("{line}");
                }
            }
        }
        if tty {
            eprintln!();
        }
        let received = receiver.stop();
        let listed = list_recorded(&mut dir, &received.recorded);
        or_fail(&mut dir, listed)?;
        if let Some(e) = &received.record_error {
            eprintln!("kiln: warning: the received spans were not all recorded: {e}");
        }
        ingest.extend(received.ingest);
        if stop.is_stopped() && duration.is_some() {
            status = RunStatus::Interrupted;
            reason = stop.reason();
        }
    }
    let written = write_report(&mut dir, &ingest, &settings, "kiln queries", read, None);
    let report = or_fail(&mut dir, written)?;
    // Freeing a million spans one by one costs more than the analysis did; the process ends
    // right after this, and the OS takes the memory back at once.
    std::mem::forget(ingest);
    dir.finish(status, reason)?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"run_dir": dir.path(), "status": status.as_str(),
                "analysis": &report.analysis, "cost_ms": report.record["cost_ms"], "html": report.html, "files": report.files})
            )?
        );
    } else {
        out!("{}", report_text(&report.record, 10));
        outln!(
            "\nReport     {}\nFiles      {} (collapsed: calls), {} (speedscope: calls and time)\nRun        {} ({})",
            report.html.display(),
            report.files[1].display(),
            report.files[3].display(),
            dir.path().display(),
            status.as_str()
        );
    }
    Ok(if status == RunStatus::Interrupted {
        interrupted_exit_code(stop.interrupted_by())
    } else if gate(&report.analysis, settings.fail_on) {
        EXIT_THRESHOLDS_FAILED
    } else {
        0
    })
}
