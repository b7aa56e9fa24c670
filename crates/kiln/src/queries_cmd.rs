//! `kiln queries`: analyse OpenTelemetry spans from files, or receive them live as an
//! OTLP/HTTP endpoint, and report N+1 loops, repeats, slow and housekeeping statements and
//! the DB stack trie (terminal tree, HTML treemap, collapsed stacks, speedscope).

use kiln_record::schema::plan::PlanRecord;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kiln_load::StopSignal;
use kiln_queries::receiver::span_files;
use kiln_queries::Ingest;
use kiln_record::{RunLocation, RunStatus};
use kiln_runner::query_parts::{gate, list_recorded, write_report};
use serde_json::json;

use crate::cli::QueriesArgs;
use crate::exit::{interrupted_exit_code, EXIT_THRESHOLDS_FAILED};
use kiln_runner::{create_run_dir, or_fail};

use crate::traces::{settings, start_receiver};

/// Reads span files (or run directories' recorded spans) into `ingest`.
fn read_files(ingest: &mut Ingest, files: &[PathBuf]) -> Result<()> {
    for file in files {
        for path in span_files(file)? {
            ingest
                .add_file(&path)
                .with_context(|| format!("reading spans from {}", path.display()))?;
        }
    }
    Ok(())
}

/// The window a run analysed its spans in (its measured load), when one of `files` is a run
/// directory whose `queries.json` says it: the same spans judged again give the same reading.
fn recorded_window(files: &[PathBuf]) -> Option<(u64, u64)> {
    use kiln_record::schema::queries::QueriesRecord;
    files.iter().filter(|f| f.is_dir()).find_map(|dir| {
        let run = kiln_record::Run::open(dir).ok()?;
        let record = run.part::<QueriesRecord>(kiln_record::parts::QUERIES_PART)?;
        record.analysis.window_ns
    })
}

pub fn run(args: QueriesArgs, stop: &StopSignal) -> Result<u8> {
    if args.files.is_empty() && args.listen.is_none() {
        bail!("give span files to analyse, or --listen to receive them (see kiln queries --help)");
    }
    let settings = settings(&args.analysis)?;
    let duration = args.duration.as_ref().map(|d| d.value);
    let mut ingest = Ingest::new();
    let reading = Instant::now();
    read_files(&mut ingest, &args.files)?;
    let read = reading.elapsed();
    let receiver = args.listen.as_deref().map(start_receiver).transpose()?;
    let out = RunLocation::from_flag(args.out.as_deref(), "queries");
    let plan = json!({"files": args.files, "listen": args.listen, "duration": args.duration.as_ref().map(|d| &d.text),
        "route": args.analysis.route, "n_plus_one": args.analysis.n_plus_one, "slow_ms": args.analysis.slow_ms});
    let mut dir = create_run_dir(&out, "queries", PlanRecord::Other(plan))?;
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
                // the application's export batches, not its requests: those are counted
                // when the spans are analysed
                let line = format!(
                    "kiln: {:>4.0}s  {} spans ({} DB calls) in {} exports, {} exports rejected",
                    started.elapsed().as_secs_f64(),
                    s.spans,
                    s.db_spans,
                    s.requests,
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
    let window = recorded_window(&args.files);
    let written = write_report(&mut dir, &ingest, &settings, "kiln queries", read, window);
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
                "analysis": &report.record.analysis, "cost_ms": report.record.cost_ms, "html": report.html, "files": report.files})
            )?
        );
    } else {
        crate::stdout::text(&kiln_queries::text::report_text(&report.record, 10));
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
    } else if gate(&report.record.analysis, settings.fail_on) {
        EXIT_THRESHOLDS_FAILED
    } else {
        0
    })
}
