//! `kiln capacity`: flags -> the search's spec -> kiln-capacity -> the table and the verdict.

use anyhow::{bail, Result};
use kiln_capacity::search::SearchSettings;
use kiln_capacity::{CapacityProgress, CapacitySpec};
use kiln_load::StopSignal;
use kiln_record::schema::capacity::{CapacityStep, SearchStatus, StepKind};
use kiln_runner::load_flags::WarmupArg;
use kiln_sample::ProcFs;
use kiln_summary::thresholds::Threshold;
use std::time::Duration;

use crate::cli::CapacityArgs;
use crate::exit::{interrupted_exit_code, EXIT_THRESHOLDS_FAILED};

/// Each step's warm-up unless --warmup says otherwise.
const STEP_WARMUP: Duration = Duration::from_secs(1);
/// The probe's connections unless -c says otherwise.
const PROBE_CONNECTIONS: usize = 50;

pub fn run(args: CapacityArgs, stop: &StopSignal) -> Result<u8> {
    let load = &args.load;
    // what the search sets itself, step by step
    for (given, flag, why) in [
        (
            load.rate.is_some(),
            "--rate",
            "the search sets each step's rate",
        ),
        (
            load.stages.is_some(),
            "--stages",
            "the search sets each step's rate",
        ),
        (
            load.repeat != 1,
            "--repeat",
            "the search repeats the edge itself",
        ),
        (
            load.shard.is_some(),
            "--shard",
            "a search runs in one process",
        ),
        (
            load.start_at.is_some(),
            "--start-at",
            "a search runs in one process",
        ),
        (
            load.barrier.is_some(),
            "--barrier",
            "a search runs in one process",
        ),
        (
            !load.thresholds.is_empty(),
            "--threshold",
            "give the objectives as --slo",
        ),
        (
            load.hedge.is_some(),
            "--hedge",
            "a search measures the service as it is",
        ),
    ] {
        if given {
            bail!("kiln capacity: {flag} does not go with a search ({why})");
        }
    }
    let step_warmup = match &load.warmup {
        None => STEP_WARMUP,
        Some(WarmupArg::Fixed(d)) => *d,
        Some(WarmupArg::Auto { .. }) => {
            bail!("kiln capacity: --warmup auto does not go with a search: give each step's warm-up as a time")
        }
    };
    let mut slos = Vec::new();
    for text in &args.slos {
        let slo = Threshold::parse(text).map_err(|e| anyhow::anyhow!("--slo: {e}"))?;
        if !slo.is_slo() {
            bail!(
                "--slo '{}': an objective is a limit a service keeps at low rates, on latency \
                 or failures (p99<50ms, mean<20ms, max<1s, failed<1%)",
                crate::format::safe_text(text)
            );
        }
        slos.push(slo);
    }
    for (value, flag) in [
        (args.max_rate, "--max-rate"),
        (args.start_rate, "--start-rate"),
    ] {
        if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
            bail!("{flag} must be a rate above 0 (got {v})");
        }
    }
    if args.sweep.contains(&0) {
        bail!("--sweep: a level of 0 connections sends nothing");
    }
    let sweep = (!args.sweep.is_empty()).then(|| {
        let mut levels = args.sweep.clone();
        levels.sort_unstable();
        levels.dedup();
        levels
    });
    let proc = ProcFs::default();
    let target = match (args.watch_pid, args.watch_port) {
        (None, None) => None,
        (pid, port) => Some(crate::target_process::resolve_target(
            &proc, pid, port, "watch",
        )?),
    };
    if args.profile && target.is_none() {
        bail!("--profile needs the process to profile: --watch-pid PID or --watch-port PORT");
    }
    let name = args.name.clone().unwrap_or_else(|| load.name_as_given());
    let dir = args.out.clone().unwrap_or_else(|| {
        std::path::Path::new("runs").join(kiln_record::default_run_dir_name(&format!(
            "capacity-{}",
            kiln_load::plan::redact_password(&name)
        )))
    });
    let spec = CapacitySpec {
        load: args.load.clone(),
        slos,
        search: SearchSettings {
            precision: args.precision.0,
            max_rate: args.max_rate,
            ..SearchSettings::default()
        },
        start_rate: args.start_rate,
        probe_connections: args.load.connections.unwrap_or(PROBE_CONNECTIONS),
        budget: args.budget.value,
        step_warmup,
        step_measured: args.load.duration.as_ref().map(|d| d.value),
        dir: dir.clone(),
        name,
        target,
        profile_hz: args.profile.then_some(99),
        sweep,
    };
    let mut progress = Lines { quiet: args.quiet };
    let record = kiln_capacity::run(spec, stop, &mut progress)?;
    let dir_text = dir.display().to_string();
    if args.json {
        let mut json = serde_json::to_value(&record)?;
        json["dir"] = serde_json::Value::String(dir_text);
        outln!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        crate::stdout::text(&kiln_summary::capacity::text(&record, &dir_text));
        outln!(
            "Report     {}",
            crate::format::safe_text(&dir.join(kiln_capacity::REPORT_FILE).display().to_string())
        );
    }
    Ok(match record.status {
        SearchStatus::Interrupted => interrupted_exit_code(stop.interrupted_by()),
        SearchStatus::Failed => 1,
        SearchStatus::NothingKept => EXIT_THRESHOLDS_FAILED,
        _ => 0,
    })
}

/// A line on stderr as each step starts and ends.
struct Lines {
    quiet: bool,
}

impl CapacityProgress for Lines {
    fn step_started(&mut self, n: u32, kind: StepKind, rate: Option<f64>, seconds: f64) {
        if self.quiet {
            return;
        }
        let what = match (rate, kind) {
            (Some(r), _) => format!("{} req/s", kiln_summary::capacity::rate(r)),
            (None, StepKind::Alone) => "one request at a time".into(),
            (None, StepKind::Sweep) => "a level of the sweep".into(),
            (None, _) => "the closed-model probe".into(),
        };
        let why = match kind {
            StepKind::Confirm => " (the edge again)",
            StepKind::Repeat => " (again: kiln was starved)",
            StepKind::Sweep => " (closed model)",
            _ => "",
        };
        eprintln!("kiln: step {n}: {what}{why} for {seconds:.0} s");
    }

    fn step_ended(&mut self, step: &CapacityStep) {
        if !self.quiet {
            eprintln!(
                "kiln: {}",
                kiln_summary::capacity::step_line(step).trim_start()
            );
        }
    }
}
