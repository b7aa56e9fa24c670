//! `kiln watch --pid P | --port P`: the sampler on its own. A compact line per sample on
//! stderr, every sample in the run directory (`resources.jsonl`), a summary at the end.

use kiln_record::schema::plan::PlanRecord;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use kiln_load::{SelfUsage, StopSignal};
use kiln_record::{RunLocation, RunStatus};
use kiln_runner::runtime_watch::RuntimeWatcher;
use kiln_runtime::summary::summarize;
use kiln_runtime::RuntimeSecond;
use kiln_sample::{ProcFs, ResourceSecond, Sampler, RESOURCES_PART};
use serde_json::json;

use crate::cli::WatchArgs;
use crate::exit::interrupted_exit_code;
use crate::format::safe_text;
use crate::target_process;
use kiln_runner::create_run_dir;

pub fn run(args: WatchArgs, stop: &StopSignal) -> Result<u8> {
    let proc = ProcFs::default();
    // --spawn: started before anything is watched, stopped when this function returns
    let spawned = match &args.spawn {
        Some(command) => Some(kiln_runner::spawn::SpawnedTarget::start(
            command,
            args.port
                .map(|port| std::net::SocketAddr::from(([127, 0, 0, 1], port))),
            kiln_runner::spawn::READY_WITHIN,
        )?),
        None => None,
    };
    let mut target = match &spawned {
        Some(target) => kiln_sample::TargetProcesses::of_pid(target.pid),
        None => target_process::resolve_target(&proc, args.pid, args.port, "watch")?,
    };
    let pid = target.main_pid();
    let (duration, interval) = (args.duration.value, args.interval.value);
    if interval < Duration::from_millis(100) {
        bail!("--interval is out of range: at least 100ms");
    }
    let name = format!("watch-{pid}");
    let out = RunLocation::from_flag(args.out.as_deref(), &name);
    let plan = json!({"watch": {"pid": pid, "port": args.port, "duration_s": duration.as_secs_f64(),
                      "interval_s": interval.as_secs_f64(), "spawn": args.spawn}});
    let mut dir = create_run_dir(&out, &name, PlanRecord::Other(plan))?;
    let mut writer = dir.add_json_lines_part(RESOURCES_PART, "resources.jsonl", 1)?;
    let gctrace = spawned.as_ref().map(|s| s.gctrace.clone());
    // a pre-fork server's runtime is read in a worker, where the requests run
    let runtime_pid = target.runtime_process(&proc);
    let runtime = RuntimeWatcher::start(&mut dir, runtime_pid, args.runtime.depth(), gctrace)?;

    let usage_before = SelfUsage::now();
    let started = Instant::now();
    let mut sampler = Sampler::of_target(proc, Some(target));
    let mut samples: Vec<ResourceSecond> = Vec::new();
    let mut write_error = None;
    let ended = sampler.run_every(interval, Some(duration), &|| stop.reason(), &mut |sample| {
        if let Err(e) = writer.write(&sample) {
            write_error.get_or_insert(e);
        }
        if args.json {
            outln!("{}", serde_json::to_string(&sample).unwrap_or_default());
        } else {
            eprintln!("{}", kiln_summary::resources::second_line(&sample));
        }
        samples.push(sample);
    });
    let mut warnings = Vec::new();
    let (runtime_info, runtime_seconds) = runtime.finish(&mut dir, &mut warnings);
    if let Some(e) = write_error {
        dir.finish(RunStatus::Failed, Some(e.to_string()))?;
        return Err(e.into());
    }
    let usage = SelfUsage::now().since(&usage_before);
    let elapsed = started.elapsed().as_secs_f64();
    let own_pct = (usage.user_us + usage.system_us) as f64 / 1e4 / elapsed.max(1e-9);
    match &ended {
        Some(reason) => dir.finish(RunStatus::Interrupted, Some(reason.clone()))?,
        None => dir.finish(RunStatus::Complete, None)?,
    }
    if !args.json {
        out!(
            "\n{}",
            kiln_summary::resources::text_of(&samples, &format!("the watch of process {pid}"))
        );
        let all: Vec<&RuntimeSecond> = runtime_seconds.iter().collect();
        let mut runtime = summarize(&runtime_info, &all);
        kiln_findings::record::add_thread_roles(&mut runtime, &samples);
        out!("{}", kiln_summary::runtime::to_text(&runtime));
        for warning in &warnings {
            outln!("Warning    {}", safe_text(warning));
        }
        outln!(
            "Run        {} ({})",
            dir.path().display(),
            dir.manifest.status.as_str()
        );
        outln!("Sampler    kiln's own CPU {own_pct:.2}% of one core");
    }
    let signal = stop.interrupted_by();
    Ok(if signal.is_some() || ended.is_some() {
        interrupted_exit_code(signal)
    } else {
        0
    })
}
