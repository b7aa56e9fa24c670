//! `kiln profile`: flame graphs of a running process with perf, of profiles made elsewhere
//! (`import`), and of the difference between two (`diff`). Each writes a run directory:
//! collapsed stacks, an interactive SVG, a speedscope file and the summary as JSON.

use kiln_record::schema::plan::PlanRecord;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kiln_load::plan::parse_duration;
use kiln_load::StopSignal;
use kiln_profile::{
    profile_processes, CallGraph, Event, FlameStyle, FoldedDiff, Profiled, RecordOptions,
};
use kiln_record::schema::profile::ImportSource;
use kiln_record::{RunDir, RunLocation, RunStatus};
use kiln_runner::jvm_profile::{self, JvmCpuProfile, JvmProfiler};
use kiln_runner::profile_parts::{
    parts_of, write_profile, AsyncProfiled, Origin, WrittenProfile, ON_CPU,
};
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
    kiln_runner::create_run_dir(
        &RunLocation::from_flag(output.out.as_deref(), name),
        name,
        PlanRecord::Other(plan),
    )
}

fn files_text(written: &WrittenProfile, dir: &RunDir) -> String {
    format!(
        "Flame      {}\nFiles      {} (collapsed), {} (speedscope)\nRun        {} ({})\n",
        written.flame.display(),
        written.folded.display(),
        written.speedscope.display(),
        dir.path().display(),
        dir.manifest.status.as_str()
    )
}

/// A profile as it was taken: by perf (with why not async-profiler, for a JVM), or by
/// async-profiler inside a JVM.
enum Taken {
    Perf(Profiled, Option<String>),
    Async(kiln_profile::Folded, AsyncProfiled),
}

fn record(args: &ProfileArgs, stop: &StopSignal) -> Result<u8> {
    let proc = ProcFs::default();
    let pid = target_process::resolve(&proc, args.pid, args.port, "profile")?;
    let duration = parse_duration(&args.duration)?;
    if !(1..=10_000).contains(&args.frequency) {
        bail!("--frequency is out of range: 1 to 10000 samples per second");
    }
    let pids = proc.process_tree(pid);
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
    // a JVM's CPU profile from async-profiler inside it, when it can be had
    let mut jvm_profile = None;
    let mut not_async = None;
    if options.event == Event::Cpu && jvm_profile::is_jvm(pid) {
        let jvm = JvmProfiler::from_flag(args.async_profiler.as_deref());
        match JvmCpuProfile::start(pid, args.frequency, &jvm) {
            Ok(profile) => jvm_profile = Some(profile),
            Err(why) => not_async = why,
        }
    }
    let name = format!("profile-{pid}");
    let profiler = if jvm_profile.is_some() {
        "async-profiler"
    } else {
        "perf"
    };
    let plan = json!({"profile": {"pid": pid, "port": args.port, "pids": pids,
        "event": options.event, "frequency_hz": args.frequency, "duration_s": duration.as_secs_f64(),
        "profiler": profiler}});
    let mut dir = create_dir(&args.output, &name, plan)?;
    if !args.output.json {
        if let Some(why) = &not_async {
            eprintln!("kiln: {}; perf takes the profile", safe_text(why));
        }
        if jvm_profile.is_some() && args.call_graph.is_some() {
            eprintln!(
                "kiln: --call-graph is perf's; async-profiler walks the JVM's stacks itself \
                 (--async-profiler off to use perf)"
            );
        }
        eprintln!(
            "kiln: profiling pid {pid}{} for {} ({} {}) with {profiler}...",
            if pids.len() > 1 && jvm_profile.is_none() {
                format!(" and {} child processes", pids.len() - 1)
            } else {
                String::new()
            },
            humantime::format_duration(duration),
            options.event.perf_name(),
            match options.event {
                Event::Cpu => format!("at {} Hz", args.frequency),
                Event::Cswitch => "on every switch".into(),
            }
        );
    }
    let taken = match jvm_profile {
        Some(profile) => take_in_jvm(profile, pid, duration, stop),
        None => take_with_perf(&pids, &options, duration, &dir, stop)
            .map(|profiled| Taken::Perf(profiled, not_async)),
    };
    let taken = match taken {
        Ok(t) => t,
        Err(e) => {
            dir.finish(RunStatus::Failed, Some(format!("{e:#}")))?;
            return Err(e);
        }
    };
    let (folded, event, taken_for, target_exited) = match &taken {
        Taken::Perf(p, _) => (&p.folded, p.event, p.duration, p.target_exited),
        Taken::Async(folded, a) => (folded, Event::Cpu, a.duration, false),
    };
    let title = format!(
        "{} of pid {pid} ({})",
        match event {
            Event::Cpu => "On-CPU",
            Event::Cswitch => "Context switches",
        },
        proc.process(pid).map_or_else(String::new, |p| p.name)
    );
    let origin = match &taken {
        Taken::Perf(profiled, note) => Origin::Perf(profiled, args.frequency, note.clone()),
        Taken::Async(_, async_profiled) => Origin::AsyncProfiler(async_profiled),
    };
    let written = write_profile(
        &mut dir,
        parts_of(event),
        folded,
        &title,
        event.count_name(),
        args.output.top,
        origin,
    )?;
    let (status, reason, code) = if let Some(signal) = stop.interrupted_by() {
        (
            RunStatus::Interrupted,
            stop.reason(),
            signal_exit_code(signal),
        )
    } else if target_exited {
        (
            RunStatus::Interrupted,
            Some(format!("process {pid} exited during the profile")),
            EXIT_INTERRUPTED,
        )
    } else {
        (RunStatus::Complete, None, 0)
    };
    dir.finish(status, reason.clone())?;
    if args.output.json {
        // the record (summary, how it was taken) with where it went
        let mut out = serde_json::to_value(&written.record)?;
        if let Some(obj) = out.as_object_mut() {
            for (key, value) in [
                ("run_dir", json!(dir.path())),
                ("status", json!(status.as_str())),
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
    let how = match &taken {
        Taken::Perf(profiled, _) => format!(
            "{} stacks",
            serde_json::to_value(profiled.call_graph)?
                .as_str()
                .unwrap_or("")
        ),
        Taken::Async(..) => "async-profiler, inlined frames kept".to_string(),
    };
    outln!(
        "Profile    {title}, {:.1} s, {how}{}",
        taken_for.as_secs_f64(),
        reason.map_or_else(String::new, |r| format!(" — {}", safe_text(&r)))
    );
    out!(
        "{}",
        kiln_summary::profile::summary_text(&written.record.summary, event.count_name(), None)
    );
    let (done, advice): (&[String], &[String]) = match &taken {
        Taken::Perf(profiled, _) => (&profiled.jit.done, &profiled.jit.advice),
        Taken::Async(_, async_profiled) => (&[], &async_profiled.advice),
    };
    for done in done {
        outln!("JIT        {}", safe_text(done));
    }
    for advice in advice {
        outln!("Advice     {}", safe_text(advice));
    }
    out!("{}", files_text(&written, &dir));
    Ok(code)
}

/// perf on `pids` for `duration` or until stopped; its data file removed on every path.
fn take_with_perf(
    pids: &[i32],
    options: &RecordOptions,
    duration: Duration,
    dir: &RunDir,
    stop: &StopSignal,
) -> Result<Profiled> {
    let data = dir.path().join("perf.data");
    let stopped = || stop.reason().is_some();
    let profiled = profile_processes(pids, options, duration, &data, &stopped, &|| {});
    // perf.data is large and only perf reads it; the collapsed stacks keep what matters.
    // Gone on every path, also when perf failed or was stopped before its first sample.
    let _ = std::fs::remove_file(&data);
    let profiled = profiled?;
    let _ = std::fs::remove_file(dir.path().join("perf-record.log"));
    Ok(profiled)
}

/// async-profiler's CPU profile of JVM `pid` for `duration` or until stopped.
fn take_in_jvm(
    profile: JvmCpuProfile,
    pid: i32,
    duration: Duration,
    stop: &StopSignal,
) -> Result<Taken> {
    let started = Instant::now();
    while started.elapsed() < duration && stop.reason().is_none() {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("process {pid} exited during the profile: async-profiler's samples went with it");
        }
        let left = duration.saturating_sub(started.elapsed());
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    let (folded, taken) = profile.stop().map_err(anyhow::Error::msg)?;
    Ok(Taken::Async(folded, taken))
}

fn read_profile(path: &Path) -> Result<kiln_profile::Imported> {
    let imported = match kiln_profile::import_file(path) {
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
    let imported = read_profile(file)?;
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
    out!("{}", files_text(&written, &dir));
    Ok(0)
}

fn diff(before_path: &Path, after_path: &Path, output: &ProfileOutput) -> Result<u8> {
    let before = read_profile(before_path)?.folded;
    let after = read_profile(after_path)?.folded;
    let diff = FoldedDiff::new(&before, &after);
    let changes = diff.biggest_self_changes(&before, &after, output.top);
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
    let style = FlameStyle {
        title: &title,
        ..FlameStyle::default()
    };
    // Kinds of their own: a diff's stacks carry two counts, no reader of profiles takes them.
    let flame = dir.write_file_part("profile-diff-flame", "diff.svg", 1, &diff.svg(&style)?)?;
    let folded = dir.write_file_part(
        "profile-diff-folded",
        "diff.folded",
        1,
        diff.to_text().as_bytes(),
    )?;
    let result = json!({"before_samples": diff.before_total, "after_samples": diff.after_total,
        "biggest_self_changes": changes});
    dir.write_file_part(
        "profile-diff-summary",
        "diff.json",
        1,
        serde_json::to_string_pretty(&result)?.as_bytes(),
    )?;
    dir.finish(RunStatus::Complete, None)?;
    if output.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"run_dir": dir.path(), "flame": flame,
            "folded": folded, "before_samples": diff.before_total, "after_samples": diff.after_total,
            "biggest_self_changes": changes}))?
        );
        return Ok(0);
    }
    outln!(
        "Diff       {} samples before, {} after (before scaled to after)",
        diff.before_total,
        diff.after_total
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
