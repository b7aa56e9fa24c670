//! `kiln profile`: flame graphs of a running process with perf, of profiles made elsewhere
//! (`import`), and of the difference between two (`diff`). Each writes a run directory:
//! collapsed stacks, an interactive SVG, a speedscope file and the summary as JSON.

use kiln_record::schema::plan::PlanRecord;
use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_load::StopSignal;
use kiln_profile::{CallGraph, Event, RecordOptions};
use kiln_record::schema::profile::ImportSource;
use kiln_record::{RunDir, RunLocation, RunStatus};
use kiln_runner::profile_parts::{write_diff, write_profile, Origin, WrittenProfile, ON_CPU};
use kiln_runner::profile_session::ProfileSession;
use kiln_sample::ProcFs;
use serde_json::{json, Value};

use crate::cli::{ProfileAction, ProfileArgs, ProfileCallGraph, ProfileEvent, ProfileOutput};
use crate::exit::{signal_exit_code, EXIT_INTERRUPTED};
use crate::format::safe_text;
use crate::target_process;

pub fn run(args: ProfileArgs, stop: &StopSignal) -> Result<u8> {
    match args.action {
        Some(ProfileAction::Import { file, output }) => import(&file, &output),
        Some(ProfileAction::Diff {
            before,
            after,
            output,
        }) => diff(&before, &after, &output),
        None => record(&args, stop),
    }
}

fn create_dir(output: &ProfileOutput, name: &str, plan: Value) -> Result<RunDir> {
    Ok(kiln_runner::create_run_dir(
        &RunLocation::from_flag(output.out.as_deref(), name),
        name,
        PlanRecord::Other(plan),
    )?)
}

fn files_text(written: &WrittenProfile, run_dir: &Path, status: RunStatus) -> String {
    format!(
        "Flame      {}\nFiles      {} (collapsed), {} (speedscope)\nRun        {} ({})\n",
        written.flame.display(),
        written.folded.display(),
        written.speedscope.display(),
        run_dir.display(),
        status.as_str()
    )
}

fn record(args: &ProfileArgs, stop: &StopSignal) -> Result<u8> {
    let pid = target_process::resolve(&ProcFs::default(), args.pid, args.port, "profile")?;
    let duration = args.duration.value;
    if !(1..=10_000).contains(&args.frequency) {
        bail!("--frequency is out of range: 1 to 10000 samples per second");
    }
    let options = RecordOptions {
        event: match args.event {
            ProfileEvent::Cpu => Event::Cpu,
            ProfileEvent::Cswitch => Event::Cswitch,
        },
        frequency_hz: args.frequency,
        call_graph: args.call_graph.map(|c| match c {
            ProfileCallGraph::Fp => CallGraph::Fp,
            ProfileCallGraph::Dwarf => CallGraph::Dwarf,
        }),
        ..RecordOptions::default()
    };
    let session = ProfileSession::start(
        pid,
        args.port,
        options,
        duration,
        args.async_profiler.as_deref(),
        args.output.out.as_deref(),
    )?;
    if !args.output.json {
        say_what_is_taken(&session, args.call_graph.is_some());
    }
    let taken = session.take(args.output.top, stop)?;
    let code = match stop.interrupted_by() {
        Some(signal) => signal_exit_code(signal),
        None if taken.target_exited => EXIT_INTERRUPTED,
        None => 0,
    };
    let written = &taken.written;
    let run_dir = &taken.run_dir;
    if args.output.json {
        // the record (summary, how it was taken) with where it went
        let mut out = serde_json::to_value(&written.record)?;
        if let Some(obj) = out.as_object_mut() {
            for (key, value) in [
                ("run_dir", json!(run_dir)),
                ("status", json!(taken.status.as_str())),
                ("flame", json!(written.flame)),
                ("folded", json!(written.folded)),
                ("speedscope", json!(written.speedscope)),
            ] {
                obj.insert(key.into(), value);
            }
        }
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(code);
    }
    outln!(
        "Profile    {}, {:.1} s, {}{}",
        taken.title,
        taken.taken_for.as_secs_f64(),
        taken.how,
        (taken.reason.as_ref()).map_or_else(String::new, |r| format!(" — {}", safe_text(r)))
    );
    out!(
        "{}",
        kiln_summary::profile::summary_text(
            &written.record.summary,
            taken.event.count_name(),
            None
        )
    );
    for done in &taken.jit_done {
        outln!("JIT        {}", safe_text(done));
    }
    for advice in &taken.advice {
        outln!("Advice     {}", safe_text(advice));
    }
    out!("{}", files_text(written, run_dir, taken.status));
    Ok(code)
}

/// Which profiler samples what, before it starts.
fn say_what_is_taken(session: &ProfileSession, call_graph_given: bool) {
    if let Some(why) = &session.not_async {
        eprintln!("kiln: {}; perf takes the profile", safe_text(why));
    }
    if session.in_jvm() && call_graph_given {
        eprintln!(
            "kiln: --call-graph is perf's; async-profiler walks the JVM's stacks itself \
             (--async-profiler off to use perf)"
        );
    }
    let options = &session.options;
    eprintln!(
        "kiln: profiling pid {}{} for {} ({} {}) with {}...",
        session.pid,
        if session.pids.len() > 1 && !session.in_jvm() {
            format!(" and {} child processes", session.pids.len() - 1)
        } else {
            String::new()
        },
        humantime::format_duration(session.duration),
        options.event.perf_name(),
        match options.event {
            Event::Cpu => format!("at {} Hz", options.frequency_hz),
            Event::Cswitch => "on every switch".into(),
        },
        if session.in_jvm() {
            "async-profiler"
        } else {
            "perf"
        },
    );
}

fn read_profile(path: &Path, output: &ProfileOutput) -> Result<kiln_profile::Imported> {
    let options = kiln_profile::ImportOptions {
        sample_index: output.sample_index.clone(),
    };
    let imported = match kiln_profile::import_file_with(path, &options) {
        Err(kiln_profile::ProfileError::Io { source, .. }) => {
            return Err(source).with_context(|| format!("cannot read {}", path.display()))
        }
        other => other.with_context(|| path.display().to_string())?,
    };
    if imported.ignored_lines > 0 {
        eprintln!(
            "kiln: {}: skipped {} line{} that {} not `stack count`",
            safe_text(&path.display().to_string()),
            imported.ignored_lines,
            if imported.ignored_lines == 1 { "" } else { "s" },
            if imported.ignored_lines == 1 {
                "is"
            } else {
                "are"
            }
        );
    }
    Ok(imported)
}

fn file_stem(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('.').next())
        .filter(|n| !n.is_empty())
        .unwrap_or("profile")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn import(file: &Path, output: &ProfileOutput) -> Result<u8> {
    let imported = read_profile(file, output)?;
    let name = format!("import-{}", file_stem(file));
    let source = ImportSource {
        file: file.to_path_buf(),
        format: imported.format,
        value: imported.value.clone(),
        ignored_lines: imported.ignored_lines,
        samples: imported.samples,
    };
    let mut dir = create_dir(output, &name, json!({"profile_import": source}))?;
    let title = format!("Profile {}", file.display());
    let count_name = imported.value.clone().unwrap_or_else(|| "samples".into());
    let written = write_profile(
        &mut dir,
        ON_CPU,
        &imported.folded,
        &title,
        &count_name,
        output.top,
        Origin::Import(source.clone()),
    )?;
    dir.finish(RunStatus::Complete, None)?;
    if output.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"run_dir": dir.path(), "source": source,
            "summary": written.record.summary, "flame": written.flame, "folded": written.folded,
            "speedscope": written.speedscope}))?
        );
        return Ok(0);
    }
    outln!(
        "Imported   {} ({}{})",
        safe_text(&file.display().to_string()),
        serde_json::to_value(imported.format)?
            .as_str()
            .unwrap_or(""),
        imported
            .value
            .map_or_else(String::new, |v| format!(", counts are {v}"))
    );
    out!(
        "{}",
        kiln_summary::profile::summary_text(&written.record.summary, &count_name, imported.samples)
    );
    out!("{}", files_text(&written, dir.path(), dir.manifest.status));
    Ok(0)
}

fn diff(before_path: &Path, after_path: &Path, output: &ProfileOutput) -> Result<u8> {
    let before = read_profile(before_path, output)?.folded;
    let after = read_profile(after_path, output)?.folded;
    let name = format!("diff-{}-{}", file_stem(before_path), file_stem(after_path));
    let mut dir = create_dir(
        output,
        &name,
        json!({"profile_diff": {"before": before_path, "after": after_path}}),
    )?;
    let title = format!(
        "Differential: {} -> {} (red grew, blue shrank)",
        before_path.display(),
        after_path.display()
    );
    let written = write_diff(&mut dir, &before, &after, &title, output.top)?;
    dir.finish(RunStatus::Complete, None)?;
    let (flame, folded, changes) = (&written.flame, &written.folded, &written.changes);
    let (before_samples, after_samples) = (written.before_samples, written.after_samples);
    if output.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"run_dir": dir.path(), "flame": flame,
            "folded": folded, "before_samples": before_samples, "after_samples": after_samples,
            "biggest_self_changes": changes}))?
        );
        return Ok(0);
    }
    outln!(
        "Diff       {before_samples} samples before, {after_samples} after (before scaled to after)"
    );
    for (i, c) in changes.iter().enumerate() {
        let head = if i == 0 { "Self share" } else { "" };
        outln!(
            "{head:<11}{:>6.1}% -> {:>5.1}%  ({:+.1})  {}",
            c.before_pct,
            c.after_pct,
            c.after_pct - c.before_pct,
            safe_text(&c.name)
        );
    }
    outln!(
        "Flame      {}\nFiles      {} (stack before after)\nRun        {}",
        flame.display(),
        folded.display(),
        dir.path().display()
    );
    Ok(0)
}
