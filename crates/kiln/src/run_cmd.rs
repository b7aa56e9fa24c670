//! `kiln run`: flags -> plan -> phases (warm-up, measured runs) -> run directory and summary.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kiln_load::plan::{parse_duration, parse_stages};
use kiln_load::{LoadPlan, Model, PhaseSpec, RequestSpec, StopSignal, Target};
use kiln_record::{
    JsonLinesWriter, LoadRecordLine, PhaseSummary, RunDir, RunLocation, RunStatus,
    LOAD_SECONDS_PART,
};
use kiln_sample::{ProcFs, ResourceSecond, Sampler, RESOURCES_PART};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::cli::RunArgs;
use crate::live::LiveOutput;
use crate::summary;
use crate::thresholds::{self, Threshold};

/// Exit codes, documented in `kiln --help`.
pub const EXIT_INTERRUPTED: u8 = 3;

/// A run stopped by a signal exits as shells report it: 128 + the signal (Ctrl-C 130,
/// SIGTERM 143, SIGHUP 129).
pub fn signal_exit_code(signal: i32) -> u8 {
    128u8.saturating_add(u8::try_from(signal).unwrap_or(0))
}

/// The exit code of an interrupted run: the signal's when one stopped it, else 3.
pub fn interrupted_exit_code(signal: Option<i32>) -> u8 {
    signal.map_or(EXIT_INTERRUPTED, signal_exit_code)
}

/// An error with its causes, each said once (an I/O error's text is often already in the
/// message of the error that wraps it).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if !text.contains(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    text
}
/// As k6's ThresholdsHaveFailed.
pub const EXIT_THRESHOLDS_FAILED: u8 = 99;

/// The largest request body kiln sends (each connection holds the encoded request).
const MAX_BODY_BYTES: u64 = 64 << 20;

/// `-b TEXT` or `-b @FILE`, as curl reads it; at most `MAX_BODY_BYTES` (`@/dev/zero` would
/// otherwise fill memory).
fn read_body(arg: &str) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let Some(path) = arg.strip_prefix('@') else {
        return Ok(arg.as_bytes().to_vec());
    };
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read the body file '{path}'"))?;
    let mut body = Vec::new();
    file.take(MAX_BODY_BYTES + 1)
        .read_to_end(&mut body)
        .with_context(|| format!("cannot read the body file '{path}'"))?;
    if body.len() as u64 > MAX_BODY_BYTES {
        bail!(
            "the body file '{path}' is larger than {} MiB",
            MAX_BODY_BYTES >> 20
        );
    }
    Ok(body)
}

/// Creates a run directory: `out` when given, else a fresh one under `runs/` named for the
/// time and `name`. The command line is recorded with any URL password redacted.
pub fn create_run_dir(
    location: &RunLocation,
    name: &str,
    plan: serde_json::Value,
) -> Result<RunDir> {
    let command: Vec<String> = std::env::args()
        .map(|a| kiln_load::plan::redact_password(&a))
        .collect();
    RunDir::create(location, name, command, plan).with_context(|| match location {
        RunLocation::Named(path) => format!("cannot create the run directory {}", path.display()),
        RunLocation::Fresh { parent, .. } => {
            format!("cannot create a run directory in {}", parent.display())
        }
    })
}

/// On an error after the run directory exists, marks the run `failed` with the reason, so
/// no record is left `running` by an error kiln saw (a full disk, an unwritable --html).
pub fn or_fail<T>(dir: &mut RunDir, result: Result<T>) -> Result<T> {
    if let Err(e) = &result {
        let _ = dir.finish(RunStatus::Failed, Some(error_text(e)));
    }
    result
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
            let stages = kiln_load::RateStage::steady(*rate, duration);
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
    let mut plan = LoadPlan {
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
    if let Some(note) = kiln_load::limits::fit_max_connections(&mut plan) {
        eprintln!("kiln: {note}");
    }
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
        arrivals: match args.arrivals {
            crate::cli::ArrivalsArg::Uniform => kiln_load::Arrivals::Uniform,
            crate::cli::ArrivalsArg::Poisson => kiln_load::Arrivals::Poisson {
                seed: args.seed.unwrap_or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(1)
                }),
            },
        },
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
    /// The sampler's seconds, when a process was watched.
    pub resources: Vec<ResourceSecond>,
    /// The profile's record (`profile.json`), when the run was profiled.
    pub profile: Option<serde_json::Value>,
    /// The DB-call analysis (`queries.json`), when traces were received.
    pub queries: Option<serde_json::Value>,
    /// `--fail-on` met by a DB-call finding.
    pub queries_gate_failed: bool,
    /// The signal that stopped the run, if one did.
    pub interrupted_by: Option<i32>,
}

/// Receiving the target's traces beside the load.
pub struct OtlpSpec<'a> {
    pub receiver: kiln_queries::receiver::Receiver,
    pub wait: Duration,
    pub analysis: &'a crate::cli::QueryAnalysisArgs,
}

/// What one `execute` runs and where it records it.
pub struct RunSpec<'a> {
    pub plan: &'a LoadPlan,
    /// The plan as written to `run.json` (with what the engine does not know, e.g. thresholds).
    pub plan_record: serde_json::Value,
    pub phases: &'a [(PhaseSpec, Duration)],
    pub out: RunLocation,
    pub name: &'a str,
    /// A process to sample beside the load.
    pub watch_pid: Option<i32>,
    /// Profile the watched process over the measured phases at this frequency.
    pub profile_hz: Option<u32>,
    pub otlp: Option<OtlpSpec<'a>>,
}

/// Runs every phase, streaming each second to the run directory.
pub fn execute(spec: RunSpec, stop: &StopSignal, live: &mut LiveOutput) -> Result<RunOutcome> {
    let RunSpec {
        plan,
        plan_record,
        phases: phase_list,
        out,
        name,
        watch_pid,
        profile_hz,
        otlp,
    } = spec;
    kiln_load::preflight(plan)?;
    let mut dir = create_run_dir(&out, name, plan_record)?;
    let mut writer = dir.add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)?;
    if let Some(o) = &otlp {
        o.receiver.record_to(dir.path());
    }
    let watcher = match watch_pid {
        Some(pid) => Some(ResourceWatcher::start(
            dir.add_json_lines_part(RESOURCES_PART, "resources.jsonl", 1)?,
            pid,
            stop.clone(),
        )?),
        None => None,
    };
    let mut phases = Vec::new();
    let mut write_error = None;
    let mut early: Option<String> = None;
    let mut profiler: Option<ProfileWatcher> = None;
    // The measured phases' span of wall-clock time: the DB analysis covers the requests
    // that began in it (not spans an application queued before, nor the warm-up's).
    let mut measured_window: Option<(u64, u64)> = None;
    for (spec, duration) in phase_list {
        if let (Some(pid), Some(hz), None, true) = (watch_pid, profile_hz, &profiler, spec.measured)
        {
            profiler = Some(ProfileWatcher::start(pid, hz, dir.path())?);
        }
        let mut phase_plan = plan.clone();
        if !duration.is_zero() {
            phase_plan.duration = *duration;
        }
        let mut summary = PhaseSummary::new(&spec.name);
        live.start_phase(&spec.name, phase_plan.duration.as_secs());
        let phase_started = unix_ns_now();
        let ran = kiln_load::run_phase(&phase_plan, spec, stop, &mut |second| {
            summary.add_second(second);
            live.second(second);
            if write_error.is_none() {
                if let Err(e) = writer.write(&LoadRecordLine::Second(Box::new(second.clone()))) {
                    write_error = Some(e);
                    stop.stop("cannot write the run record");
                }
            }
        });
        let end = or_fail(&mut dir, ran.map_err(Into::into))?;
        if spec.measured {
            let from = measured_window.map_or(phase_started, |(from, _)| from);
            measured_window = Some((from, unix_ns_now()));
        }
        live.end_phase(&end);
        let wrote = writer.write(&LoadRecordLine::PhaseEnd(end.clone()));
        or_fail(&mut dir, wrote.map_err(Into::into))?;
        summary.set_end(&end);
        phases.push(summary);
        if let Some(reason) = end.stopped_early {
            early = Some(reason);
            break;
        }
    }
    let resources = watcher.map(ResourceWatcher::finish).unwrap_or_default();
    let profile = match profiler {
        Some(p) => p.finish(&mut dir),
        None => None,
    };
    let (queries, queries_gate_failed) = match otlp {
        Some(o) => {
            let finished = finish_queries(o, &mut dir, stop, measured_window);
            let (record, gate) = or_fail(&mut dir, finished)?;
            (Some(record), gate)
        }
        None => (None, false),
    };
    if let Some(e) = write_error {
        dir.finish(RunStatus::Failed, Some(e.to_string()))?;
        return Err(e.into());
    }
    let wrote = write_latency_log(&mut dir);
    or_fail(&mut dir, wrote)?;
    let interrupted_by = stop.interrupted_by();
    match early {
        Some(reason) => dir.finish(RunStatus::Interrupted, Some(reason))?,
        None => dir.finish(RunStatus::Complete, None)?,
    }
    Ok(RunOutcome {
        dir,
        phases,
        resources,
        profile,
        queries,
        queries_gate_failed,
        interrupted_by,
    })
}

/// Now, in nanoseconds since the Unix epoch (the clock span timestamps use).
fn unix_ns_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The run record's part holding `latency.hlog`.
pub const HLOG_PART: &str = "latency-hlog";

/// The run's per-second histograms as an HdrHistogram interval log (`latency.hlog`), for
/// HistogramLogAnalyzer, hdr-plot and HistogramLogProcessor.
fn write_latency_log(dir: &mut RunDir) -> Result<()> {
    // The seconds are read back one at a time (each holds its histograms) and the log is
    // written as it is made: memory stays flat however long the run was.
    let lines = dir.json_lines::<LoadRecordLine>(LOAD_SECONDS_PART)?;
    let mut read_error = None;
    let seconds = lines
        .map_while(|line| line.map_err(|e| read_error = Some(e)).ok())
        .filter_map(|line| match line {
            LoadRecordLine::Second(s) => Some(*s),
            LoadRecordLine::PhaseEnd(_) => None,
        });
    dir.write_file_part_with(HLOG_PART, "latency.hlog", 1, |out| {
        kiln_record::write_hlog(out, seconds)
    })
    .context("cannot write the latency log")?;
    match read_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Waits for the last spans, stops the receiver and writes the DB-call analysis.
fn finish_queries(
    o: OtlpSpec,
    dir: &mut RunDir,
    stop: &StopSignal,
    measured_window: Option<(u64, u64)>,
) -> Result<(serde_json::Value, bool)> {
    crate::queries_cmd::drain(&o.receiver, o.wait, stop);
    let received = o.receiver.stop();
    crate::queries_cmd::list_recorded(dir, &received.recorded)?;
    if let Some(e) = &received.record_error {
        eprintln!("kiln: warning: the received spans were not all recorded: {e}");
    }
    let report = crate::queries_cmd::write_report(
        dir,
        &received.ingest,
        o.analysis,
        "kiln run: DB calls",
        Duration::ZERO, // read as it arrived, during the run
        measured_window,
    )?;
    let gate = crate::queries_cmd::gate(&report.analysis, o.analysis.fail_on);
    Ok((report.record, gate))
}

/// perf on the watched process over the measured phases, on its own thread.
struct ProfileWatcher {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<kiln_profile::Profiled, kiln_profile::ProfileError>>,
    pid: i32,
    hz: u32,
}

impl ProfileWatcher {
    fn start(pid: i32, hz: u32, dir: &Path) -> Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let pids = ProcFs::default().process_tree(pid);
        let data = dir.join("perf.data");
        let options = kiln_profile::RecordOptions {
            frequency_hz: hz,
            ..Default::default()
        };
        let (attached_tx, attached_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kiln-profiler".into())
            .spawn(move || {
                // Bounded by the load, which ends first; a day is only a backstop.
                kiln_profile::profile_processes(
                    &pids,
                    &options,
                    Duration::from_secs(86_400),
                    &data,
                    &|| flag.load(Ordering::SeqCst),
                    &|| {
                        let _ = attached_tx.send(());
                    },
                )
            })?;
        // The phase opens new connections, and the target new threads for them: perf must be
        // attached first to follow them. If perf fails, the channel closes and the load goes on.
        let _ = attached_rx.recv_timeout(Duration::from_secs(10));
        Ok(Self {
            done,
            thread,
            pid,
            hz,
        })
    }

    /// Stops perf and writes the profile into the run directory. A profile that failed
    /// (perf missing, forbidden) is reported and the run's other records stand.
    fn finish(self, dir: &mut RunDir) -> Option<serde_json::Value> {
        self.done.store(true, Ordering::SeqCst);
        let joined = self.thread.join();
        let _ = std::fs::remove_file(dir.path().join("perf.data"));
        let profiled = match joined {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                eprintln!(
                    "kiln: --profile: {}",
                    crate::format::safe_text(&e.to_string())
                );
                return None;
            }
            Err(_) => return None,
        };
        let extra = crate::profile_cmd::how_taken(&profiled, self.hz);
        let title = format!("On-CPU of pid {} during the measured load", self.pid);
        match crate::profile_cmd::write_profile(dir, &profiled.folded, &title, "samples", 10, extra)
        {
            Ok(written) => serde_json::to_value(&written.record).ok(),
            Err(e) => {
                eprintln!(
                    "kiln: --profile: {}",
                    crate::format::safe_text(&e.to_string())
                );
                None
            }
        }
    }
}

/// The sampler on its own thread beside the load, writing one line a second. The watched
/// process exiting stops the load: what follows would no longer be about it.
struct ResourceWatcher {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<ResourceSecond>>,
}

impl ResourceWatcher {
    fn start(mut writer: JsonLinesWriter, pid: i32, load: StopSignal) -> Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-sampler".into())
            .spawn(move || {
                let mut sampler = Sampler::new(ProcFs::default(), Some(pid));
                let mut samples = Vec::new();
                let stop = || {
                    flag.load(Ordering::SeqCst)
                        .then(|| "load ended".to_string())
                };
                let ended = sampler.run_every(Duration::from_secs(1), None, &stop, &mut |s| {
                    let _ = writer.write(&s);
                    samples.push(s);
                });
                if let Some(reason) = ended.filter(|_| !flag.load(Ordering::SeqCst)) {
                    load.stop(&format!("the watched {reason}"));
                }
                samples
            })?;
        Ok(Self { done, thread })
    }

    fn finish(self) -> Vec<ResourceSecond> {
        self.done.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
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

/// Whether a `--threshold` recorded in the plan fails on the measured phases.
pub fn thresholds_failed(manifest: &kiln_record::RunManifest, phases: &[PhaseSummary]) -> bool {
    summary::measured_total(phases).is_some_and(|total| {
        thresholds::check_all(&manifest.plan, &total)
            .iter()
            .any(|t| !t.ok)
    })
}

/// Prints the outcome and returns the exit code.
pub fn print_outcome(outcome: &RunOutcome, json: bool) -> Result<u8> {
    let dir_text = outcome.dir.path().display().to_string();
    let manifest = &outcome.dir.manifest;
    let view = summary::RunView {
        dir: &dir_text,
        manifest,
        status: outcome.dir.effective_status().as_str(),
        phases: &outcome.phases,
        resources: &outcome.resources,
        profile: outcome.profile.as_ref(),
        queries: outcome.queries.as_ref(),
    };
    summary::print(&view, json)?;
    let failed_thresholds = thresholds_failed(manifest, &outcome.phases);
    Ok(match outcome.dir.effective_status() {
        RunStatus::Complete if failed_thresholds || outcome.queries_gate_failed => {
            EXIT_THRESHOLDS_FAILED
        }
        RunStatus::Complete => 0,
        _ => interrupted_exit_code(outcome.interrupted_by),
    })
}

pub fn run(args: RunArgs, stop: &StopSignal) -> Result<u8> {
    let plan = build_plan(&args)?;
    let phase_list = phases(&args)?;
    let interval = parse_duration(&args.interval)?;
    let name = args.name.clone().unwrap_or_else(|| name_from_url(&plan));
    let out = RunLocation::from_flag(args.out.as_deref(), &name);
    let mut live = LiveOutput::new(args.quiet, interval.as_secs() as u32);
    let mut plan_record = plan.to_record();
    plan_record["thresholds"] = serde_json::json!(args.thresholds);
    let watch_pid = match (args.watch_pid, args.watch_port) {
        (Some(pid), _) => Some(pid),
        (None, Some(port)) => {
            Some(ProcFs::default().pid_listening_on(port).with_context(|| {
                format!("--watch-port: no visible process listens on TCP port {port}")
            })?)
        }
        (None, None) => None,
    };
    if let Some(pid) = watch_pid {
        if ProcFs::default().process(pid).is_none() {
            bail!("--watch-pid: no process {pid}");
        }
    }
    if args.profile && watch_pid.is_none() {
        bail!("--profile needs the process to profile: --watch-pid PID or --watch-port PORT");
    }
    if !(1..=10_000).contains(&args.profile_frequency) {
        bail!("--profile-frequency is out of range: 1 to 10000 samples per second");
    }
    let otlp = match &args.otlp_listen {
        Some(addr) => {
            crate::queries_cmd::options(&args.queries)?;
            let wait = parse_duration(&args.otlp_wait)?;
            let receiver = crate::queries_cmd::start_receiver(addr)?;
            eprintln!(
                "kiln: receiving OTLP traces at http://{}/v1/traces",
                receiver.addr()
            );
            Some(OtlpSpec {
                receiver,
                wait,
                analysis: &args.queries,
            })
        }
        None => None,
    };
    let spec = RunSpec {
        plan: &plan,
        plan_record,
        phases: &phase_list,
        out,
        name: &name,
        watch_pid,
        profile_hz: args.profile.then_some(args.profile_frequency),
        otlp,
    };
    let outcome = execute(spec, stop, &mut live)?;
    print_outcome(&outcome, args.json)
}
