//! `kiln run`: flags -> plan -> phases (warm-up, measured runs) -> run directory and summary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kiln_load::plan::{parse_duration, parse_stages};
use kiln_load::{LoadPlan, Model, PhaseSpec, RequestSpec, StopSignal, Target};
use kiln_record::{
    default_run_dir_name, LoadRecordLine, PhaseSummary, RunDir, RunStatus, LOAD_SECONDS_PART,
};

use crate::cli::RunArgs;
use crate::live::LiveOutput;
use crate::summary;
use crate::thresholds::{self, Threshold};

/// Exit codes, documented in `kiln --help`.
pub const EXIT_INTERRUPTED: u8 = 3;
pub const EXIT_CTRL_C: u8 = 130;
/// As k6's ThresholdsHaveFailed.
pub const EXIT_THRESHOLDS_FAILED: u8 = 99;

/// `-b TEXT` or `-b @FILE`, as curl reads it.
fn read_body(arg: &str) -> Result<Vec<u8>> {
    match arg.strip_prefix('@') {
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read the body file '{path}'"))
        }
        None => Ok(arg.as_bytes().to_vec()),
    }
}

/// Turns flags into a validated plan (resolving the host once).
pub fn build_plan(args: &RunArgs) -> Result<LoadPlan> {
    let target = Target::parse(&args.url)?;
    let mut request = RequestSpec {
        method: RequestSpec::parse_method(&args.method)?,
        ..Default::default()
    };
    for h in &args.headers {
        request.headers.push(RequestSpec::parse_header(h)?);
    }
    if let Some(body) = &args.body {
        request.body = read_body(body)?.into();
    }
    let (model, duration) = match (&args.rate, &args.stages) {
        (Some(rate), _) => {
            if !(rate.is_finite() && *rate > 0.0 && *rate <= 10_000_000.0) {
                bail!("--rate is out of range: {rate} (more than 0, at most 10000000)");
            }
            let duration = parse_duration(&args.duration)?;
            let stages = vec![
                kiln_load::RateStage {
                    duration: Duration::ZERO,
                    target_rate: *rate,
                },
                kiln_load::RateStage {
                    duration,
                    target_rate: *rate,
                },
            ];
            (open_model(args, stages), duration)
        }
        (None, Some(text)) => {
            let stages = parse_stages(text)?;
            let duration = stages.iter().map(|s| s.duration).sum();
            (open_model(args, stages), duration)
        }
        (None, None) => (
            Model::Closed {
                connections: args.connections,
                think_time: parse_duration(&args.think_time)?,
                ramp_up: parse_duration(&args.ramp_up)?,
            },
            parse_duration(&args.duration)?,
        ),
    };
    let plan = LoadPlan {
        target,
        request,
        model,
        duration,
        timeout: parse_duration(&args.timeout)?,
        connect_timeout: parse_duration(&args.connect_timeout)?,
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        insecure: args.insecure,
        dead_after: parse_duration(&args.dead_after)?,
    };
    plan.validate()?;
    for t in &args.thresholds {
        Threshold::parse(t)?;
    }
    if !(1..=1000).contains(&args.repeat) {
        bail!("--repeat is out of range: {} (1 to 1000)", args.repeat);
    }
    Ok(plan)
}

fn open_model(args: &RunArgs, stages: Vec<kiln_load::RateStage>) -> Model {
    Model::Open {
        stages,
        connections: args.connections,
        max_connections: args.max_connections.max(args.connections),
    }
}

/// The phases of a run: an optional warm-up, then the measured runs.
pub fn phases(args: &RunArgs) -> Result<Vec<(PhaseSpec, Duration)>> {
    let mut out = Vec::new();
    if let Some(w) = &args.warmup {
        let d = parse_duration(w)?;
        if !d.is_zero() {
            out.push((
                PhaseSpec {
                    name: "warmup".into(),
                    measured: false,
                },
                d,
            ));
        }
    }
    for i in 1..=args.repeat {
        let name = if args.repeat == 1 {
            "run".to_string()
        } else {
            format!("run-{i}")
        };
        out.push((
            PhaseSpec {
                name,
                measured: true,
            },
            Duration::ZERO,
        ));
    }
    Ok(out)
}

/// A finished (or stopped) run: where it is, how it ended, what it measured.
pub struct RunOutcome {
    pub dir: RunDir,
    pub phases: Vec<PhaseSummary>,
    pub interrupted_by_user: bool,
}

/// Runs every phase, streaming each second to the run directory.
pub fn execute(
    plan: &LoadPlan,
    plan_record: serde_json::Value,
    phase_list: &[(PhaseSpec, Duration)],
    out_dir: &Path,
    name: &str,
    stop: &StopSignal,
    live: &mut LiveOutput,
) -> Result<RunOutcome> {
    kiln_load::preflight(plan)?;
    let command: Vec<String> = std::env::args().collect();
    let mut dir = RunDir::create(out_dir, name, command, plan_record)
        .with_context(|| format!("cannot create the run directory {}", out_dir.display()))?;
    let mut writer = dir.add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)?;
    let mut phases = Vec::new();
    let mut write_error = None;
    let mut early: Option<String> = None;
    for (spec, duration) in phase_list {
        let mut phase_plan = plan.clone();
        if !duration.is_zero() {
            phase_plan.duration = *duration;
        }
        let mut summary = PhaseSummary::new(&spec.name);
        live.start_phase(&spec.name, phase_plan.duration.as_secs());
        let end = kiln_load::run_phase(&phase_plan, spec, stop, &mut |second| {
            summary.add_second(second);
            live.second(second);
            if write_error.is_none() {
                if let Err(e) = writer.write(&LoadRecordLine::Second(Box::new(second.clone()))) {
                    write_error = Some(e);
                    stop.stop("cannot write the run record");
                }
            }
        })?;
        live.end_phase(&end);
        writer.write(&LoadRecordLine::PhaseEnd(end.clone()))?;
        summary.set_end(&end);
        phases.push(summary);
        if let Some(reason) = end.stopped_early {
            early = Some(reason);
            break;
        }
    }
    if let Some(e) = write_error {
        dir.finish(RunStatus::Failed, Some(e.to_string()))?;
        return Err(e.into());
    }
    let interrupted_by_user = stop.is_stopped();
    match early {
        Some(reason) => dir.finish(RunStatus::Interrupted, Some(reason))?,
        None => dir.finish(RunStatus::Complete, None)?,
    }
    Ok(RunOutcome {
        dir,
        phases,
        interrupted_by_user,
    })
}

/// A short name from the URL: `127.0.0.1-8080-api-items`.
fn name_from_url(plan: &LoadPlan) -> String {
    let path: String = plan
        .target
        .path_and_query
        .split('?')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!(
        "{}-{}{}",
        plan.target.host,
        plan.target.port,
        path.trim_end_matches('-')
    )
}

/// Prints the outcome and returns the exit code.
pub fn print_outcome(outcome: &RunOutcome, json: bool) -> Result<u8> {
    let dir_text = outcome.dir.path().display().to_string();
    let manifest = &outcome.dir.manifest;
    let status = outcome.dir.effective_status().as_str();
    if json {
        let value = summary::render_json(&dir_text, manifest, status, &outcome.phases);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!(
            "{}",
            summary::render_text(&dir_text, manifest, status, &outcome.phases)
        );
    }
    let failed_thresholds = summary::measured_total(&outcome.phases)
        .map(|total| {
            thresholds::check_all(&manifest.plan, &total)
                .iter()
                .any(|t| !t.ok)
        })
        .unwrap_or(false);
    Ok(match outcome.dir.effective_status() {
        RunStatus::Complete if failed_thresholds => EXIT_THRESHOLDS_FAILED,
        RunStatus::Complete => 0,
        _ if outcome.interrupted_by_user => EXIT_CTRL_C,
        _ => EXIT_INTERRUPTED,
    })
}

pub fn run(args: RunArgs, stop: &StopSignal) -> Result<u8> {
    let plan = build_plan(&args)?;
    let phase_list = phases(&args)?;
    let interval = parse_duration(&args.interval)?;
    let name = args.name.clone().unwrap_or_else(|| name_from_url(&plan));
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(default_run_dir_name(&name)));
    let mut live = LiveOutput::new(args.quiet, interval.as_secs() as u32);
    let mut plan_record = plan.to_record();
    plan_record["thresholds"] = serde_json::json!(args.thresholds);
    let outcome = execute(
        &plan,
        plan_record,
        &phase_list,
        &out_dir,
        &name,
        stop,
        &mut live,
    )?;
    print_outcome(&outcome, args.json)
}
