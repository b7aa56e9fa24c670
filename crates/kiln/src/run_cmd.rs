//! `kiln run`: flags -> plan -> phases (warm-up, measured runs) -> run directory and summary.

use anyhow::{bail, Context, Result};
use kiln_load::StopSignal;
use kiln_record::{PhaseSummary, RunLocation, RunStatus};
use kiln_runner::{execute, JvmProfiler, OtlpSpec, RunOutcome, RunSpec, TargetProcesses};
use kiln_sample::ProcFs;

use crate::cli::{CompareMethod, FailOn, RunArgs};
use crate::exit::{
    interrupted_exit_code, EXIT_INPUT_FAILED, EXIT_SENT_NOTHING, EXIT_THRESHOLDS_FAILED,
};
use crate::summary;
use kiln_summary::thresholds;
use kiln_terminal::LiveOutput;

/// `kiln run --compare BASE`: the base run and how to compare with it.
pub struct CompareWith {
    pub base: std::path::PathBuf,
    pub method: CompareMethod,
}

/// Prints the outcome and returns the exit code: 99 when a threshold failed or a finding
/// is at least as severe as `fail_on`.
pub fn print_outcome(
    outcome: &RunOutcome,
    json: bool,
    fail_on: Option<FailOn>,
    compare: Option<&CompareWith>,
    junit: Option<&std::path::Path>,
) -> Result<u8> {
    for warning in &outcome.warnings {
        eprintln!("kiln: warning: {}", crate::format::safe_text(warning));
    }
    let dir_text = outcome.dir.path().display().to_string();
    let manifest = &outcome.dir.manifest;
    let view = summary::RunView {
        dir: &dir_text,
        manifest,
        status: outcome.dir.effective_status().as_str(),
        phases: &outcome.phases,
        resources: &outcome.resources,
        noise: &outcome.noise,
        runtime: outcome
            .runtime
            .as_ref()
            .map(|(info, seconds)| (info, seconds.as_slice())),
        profile: outcome.profile.as_ref(),
        off_cpu: outcome.off_cpu.as_ref(),
        alloc: outcome.alloc.as_ref(),
        locks: outcome.locks.as_ref(),
        wall: outcome.wall.as_ref(),
        queries: outcome.queries.as_ref(),
        findings: Some(&outcome.findings),
        compare: None,
        exports: outcome.exports.as_ref(),
    };
    // A run compared with a base: the comparison is part of the summary (and of its JSON).
    let comparison = match compare {
        Some(with) => {
            let (base, new) = crate::comparison::open(&with.base, outcome.dir.path())?;
            Some(crate::comparison::compare(&base, &new, &with.method)?)
        }
        None => None,
    };
    let view = summary::RunView {
        compare: comparison.as_ref(),
        ..view
    };
    summary::print(&view, json)?;
    if let (Some(report), false) = (&outcome.report, json) {
        outln!(
            "Report     {}",
            crate::format::safe_text(&report.display().to_string())
        );
    }
    let regressed = match (compare, &comparison) {
        (Some(with), Some(c)) => crate::comparison::exit_code(c, &with.method) != 0,
        _ => false,
    };
    // a shard's thresholds are judged by kiln merge, on all the shards' requests: one shard's
    // share is not the run
    let shard = manifest.plan.load().is_some_and(|p| p.shard.is_some());
    let failed_thresholds = !shard && thresholds::thresholds_failed(manifest, &outcome.phases);
    if shard && thresholds::thresholds_failed(manifest, &outcome.phases) && !json {
        outln!("Thresholds judged on this shard alone; kiln merge judges them on the whole run");
    }
    if let Some(path) = junit {
        let total = PhaseSummary::measured_total(&outcome.phases);
        let results = total
            .as_ref()
            .map(|t| thresholds::check_all(&manifest.plan, t))
            .unwrap_or_default();
        let xml = kiln_summary::junit::render(
            &manifest.name,
            outcome.dir.effective_status().as_str(),
            manifest.status_reason.as_deref(),
            &results,
            total.as_ref(),
            total.as_ref().map_or(0.0, PhaseSummary::duration_secs),
        );
        std::fs::write(path, xml)
            .with_context(|| format!("cannot write the JUnit file {}", path.display()))?;
    }
    let failed_findings = fail_on.is_some_and(|f| outcome.findings.any_at_least(f.severity()));
    if !shard
        && sent_nothing(&outcome.phases)
        && outcome.dir.effective_status() == RunStatus::Complete
    {
        eprintln!(
            "kiln: the run sent no request in its measured time: nothing was measured (exit 1)"
        );
        return Ok(EXIT_SENT_NOTHING);
    }
    let input_failed = outcome
        .phases
        .iter()
        .filter_map(|p| p.end.as_ref())
        .any(|end| end.input_failed);
    Ok(match outcome.dir.effective_status() {
        RunStatus::Complete
            if failed_thresholds || failed_findings || outcome.queries_gate_failed || regressed =>
        {
            EXIT_THRESHOLDS_FAILED
        }
        RunStatus::Complete => 0,
        _ if input_failed && outcome.interrupted_by.is_none() => {
            eprintln!(
                "kiln: the plan's input failed mid-run, not the target; the record is kept \
                 (exit {EXIT_INPUT_FAILED})"
            );
            EXIT_INPUT_FAILED
        }
        _ => interrupted_exit_code(outcome.interrupted_by),
    })
}

/// Whether the measured phases sent no request and got no answer: such a run is not a
/// success, whatever else it says (a plan whose every request could not be built once ended
/// `complete`, exit 0, "failed 0%").
fn sent_nothing(phases: &[PhaseSummary]) -> bool {
    PhaseSummary::measured_total(phases)
        .is_some_and(|t| t.totals.requests == 0 && t.totals.sent == 0)
}

pub fn run(args: RunArgs, stop: &StopSignal) -> Result<u8> {
    let junit = args.junit.clone();
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| args.load.name_as_given());
    let ran = run_load(args, stop);
    // a run that could not start (a bad plan, a name that does not resolve) still leaves CI
    // a JUnit file that says why
    if let (Err(e), Some(path)) = (&ran, junit) {
        let xml = kiln_summary::junit::render(
            &kiln_load::plan::redact_password(&name),
            "unable to start",
            Some(&format!("{e:#}")),
            &[],
            None,
            0.0,
        );
        if let Err(write) = std::fs::write(&path, xml) {
            eprintln!(
                "kiln: warning: cannot write the JUnit file {}: {write}",
                path.display()
            );
        }
    }
    ran
}

fn run_load(args: RunArgs, stop: &StopSignal) -> Result<u8> {
    let load = args.load.prepare()?;
    for note in &load.notes {
        eprintln!("kiln: {note}");
    }
    let plan = load.plan;
    let interval = args.interval.value;
    let name = args.name.clone().unwrap_or(load.default_name);
    let out = RunLocation::from_flag(args.out.as_deref(), &name);
    let mut live = LiveOutput::new(args.quiet, interval.as_secs() as u32);
    // --spawn: the target is started before anything is measured, and stopped when this
    // function returns (however it returns)
    let spawned = match &args.spawn {
        Some(_) if args.watch_pid.is_some() || args.watch_port.is_some() => {
            bail!("--spawn watches the process it starts: leave out --watch-pid and --watch-port")
        }
        Some(command) => Some(kiln_runner::spawn::SpawnedTarget::start(
            command,
            Some(plan.target.addr),
            kiln_runner::spawn::READY_WITHIN,
        )?),
        None => None,
    };
    let proc = ProcFs::default();
    let target = match (args.watch_pid, args.watch_port) {
        _ if spawned.is_some() => spawned.as_ref().map(|s| TargetProcesses::of_pid(s.pid)),
        (Some(pid), _) => {
            if proc.process(pid).is_none() {
                bail!("--watch-pid: no process {pid}");
            }
            Some(TargetProcesses::of_pid(pid))
        }
        // every process serving the port: a pre-fork master with its workers, or an
        // SO_REUSEPORT group
        (None, Some(port)) => Some(TargetProcesses::of_port(&proc, port).with_context(|| {
            format!("--watch-port: no visible process listens on TCP port {port}")
        })?),
        (None, None) => None,
    };
    let watch_pid = target.as_ref().map(TargetProcesses::main_pid);
    if args.profile && watch_pid.is_none() {
        bail!("--profile needs the process to profile: --watch-pid PID or --watch-port PORT");
    }
    if args.off_cpu && watch_pid.is_none() {
        bail!("--off-cpu needs the process to profile: --watch-pid PID or --watch-port PORT");
    }
    if args.alloc && watch_pid.is_none() {
        bail!("--alloc needs the JVM to profile: --watch-pid PID or --watch-port PORT");
    }
    if !(1..=10_000).contains(&args.profile_frequency) {
        bail!("--profile-frequency is out of range: 1 to 10000 samples per second");
    }
    // `--fail-on` judges every finding, the DB calls' among them, once the run is recorded
    let settings = kiln_runner::QuerySettings {
        fail_on: None,
        ..crate::traces::settings(&args.queries)?
    };
    let otlp = match &args.otlp_listen {
        Some(addr) => {
            let wait = args.otlp_wait.value;
            let receiver = crate::traces::start_receiver(addr)?;
            eprintln!(
                "kiln: receiving OTLP traces at http://{}/v1/traces",
                receiver.addr()
            );
            Some(OtlpSpec {
                receiver,
                wait,
                settings: &settings,
            })
        }
        None => None,
    };
    let spec = RunSpec {
        plan: &plan,
        plan_record: load.record,
        phases: &load.phases,
        out,
        name: &name,
        target,
        warmup_auto: load.warmup_auto,
        runtime_depth: args.runtime.depth(),
        profile_hz: args.profile.then_some(args.profile_frequency),
        off_cpu: args.off_cpu,
        jvm_profiler: JvmProfiler::from_flag(args.async_profiler.as_deref()),
        alloc: args.alloc,
        otlp,
        gctrace: spawned.as_ref().map(|s| s.gctrace.clone()),
        exports: &load.exports,
    };
    let outcome = execute(spec, stop, &mut live)?;
    drop(spawned);
    let compare = args.compare.clone().map(|base| CompareWith {
        base,
        method: CompareMethod {
            fail_on_regression: args.fail_on_regression,
            ..CompareMethod::default()
        },
    });
    print_outcome(
        &outcome,
        args.json,
        args.queries.fail_on,
        compare.as_ref(),
        args.junit.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_sent_nothing_is_told_from_one_that_did() {
        let phase = |requests: u64, sent: u64, measured: bool| {
            let mut p = PhaseSummary::new(if measured { "run" } else { "warmup" });
            p.measured = measured;
            p.totals.requests = requests;
            p.totals.sent = sent;
            p
        };
        assert!(sent_nothing(&[phase(0, 0, true)]));
        // the warm-up's requests are not the measurement's
        assert!(sent_nothing(&[phase(9, 9, false), phase(0, 0, true)]));
        assert!(!sent_nothing(&[phase(1, 1, true)]));
        // requests sent and never answered (cut at the end) are not nothing
        assert!(!sent_nothing(&[phase(0, 3, true)]));
        // no measured phase at all: nothing to judge here
        assert!(!sent_nothing(&[]));
    }
}
