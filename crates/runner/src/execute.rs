//! One run: the load's phases, with the sampler, the profiler and the trace receiver beside
//! them, streamed into a run directory; then the record's derived parts (the latency log, the
//! DB-call analysis, the findings) and its final status.

use kiln_record::clock::unix_ns_now;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Doing, Result};
use kiln_load::{LoadPlan, PhaseSpec, StopSignal};
use kiln_profile::Event;
use kiln_record::schema::profile::ProfileRecord;
use kiln_record::schema::queries::QueriesRecord;
use kiln_record::{
    JsonLinesWriter, LoadRecordLine, PhaseEnd, PhaseSummary, RunDir, RunLocation, RunStatus,
    SecondRecord, LOAD_SECONDS_PART,
};
use kiln_sample::TargetProcesses;
use kiln_sample::{
    Doctor, DoctorRecord, NoiseProbe, NoiseSecond, ProcFs, ResourceSecond, Sampler, DOCTOR_FILE,
    DOCTOR_PART, NOISE_FILE, NOISE_PART, RESOURCES_PART,
};

use kiln_runtime::watch::Depth;

use crate::warmup::Settle;
use kiln_runtime::jvm_threads::{role_of, JvmThreadRole};
use kiln_runtime::{RuntimeInfo, RuntimeSecond};

use crate::runtime_watch::RuntimeWatcher;

use crate::dir::{create_run_dir, or_fail};
use crate::jvm_profile::{self, JvmBeside, JvmBesideWatcher, JvmCpuProfile, JvmProfiler};
use crate::profile_parts;
use crate::query_parts::{self, QuerySettings};

/// What a run shows while it goes (the terminal's live lines; nothing in tests).
pub trait Progress {
    /// A phase starts: its name, planned seconds, and whether it counts in the results.
    fn start_phase(&mut self, _name: &str, _seconds: u64, _measured: bool) {}
    fn second(&mut self, _second: &SecondRecord) {}
    fn end_phase(&mut self, _end: &PhaseEnd) {}
}

/// Shows nothing.
pub struct Silent;
impl Progress for Silent {}

/// A finished (or stopped) run: where it is, how it ended, what it measured.
pub struct RunOutcome {
    pub dir: RunDir,
    pub phases: Vec<PhaseSummary>,
    /// The sampler's seconds, when a process was watched.
    pub resources: Vec<ResourceSecond>,
    /// How long kiln itself waited for a CPU, each second of the run.
    pub noise: Vec<NoiseSecond>,
    /// The watched process's runtime and its own figures per second (a JVM's GC, ...).
    pub runtime: Option<(RuntimeInfo, Vec<RuntimeSecond>)>,
    /// The profile's record (`profile.json`), when the run was profiled.
    pub profile: Option<ProfileRecord>,
    /// The off-CPU profile's record (`offcpu.json`), when one was taken.
    pub off_cpu: Option<ProfileRecord>,
    /// The allocation profile's record (`alloc.json`), when one was taken.
    pub alloc: Option<ProfileRecord>,
    /// A JVM's lock profile's record (`locks.json`), when `--off-cpu` took one.
    pub locks: Option<ProfileRecord>,
    /// A JVM's wall-clock profile's record (`wall.json`), when `--off-cpu` took one.
    pub wall: Option<ProfileRecord>,
    /// The DB-call analysis (`queries.json`), when traces were received.
    pub queries: Option<QueriesRecord>,
    /// `--fail-on` met by a DB-call finding.
    pub queries_gate_failed: bool,
    /// The signal that stopped the run, if one did.
    pub interrupted_by: Option<i32>,
    /// The findings over the whole record (`findings.json`).
    pub findings: kiln_findings::Report,
    /// `report.html`, when it could be written.
    pub report: Option<std::path::PathBuf>,
    /// What each `--export` receiver got.
    pub exports: Option<kiln_record::schema::export::ExportsRecord>,
    /// What went wrong beside the run without ending it (a profile perf could not take,
    /// spans that could not all be recorded), for the user to read.
    pub warnings: Vec<String>,
}

/// Receiving the target's traces beside the load.
pub struct OtlpSpec<'a> {
    pub receiver: kiln_queries::receiver::Receiver,
    pub wait: Duration,
    pub settings: &'a QuerySettings,
}

/// What one `execute` runs and where it records it.
pub struct RunSpec<'a> {
    pub plan: &'a LoadPlan,
    /// The plan as written to `run.json` (with what the engine does not know, e.g. thresholds).
    pub plan_record: kiln_record::schema::plan::LoadPlanRecord,
    pub phases: &'a [(PhaseSpec, Duration)],
    pub out: RunLocation,
    pub name: &'a str,
    /// The processes to sample beside the load: one, or a pre-fork server's master and
    /// workers (every process serving the port).
    pub target: Option<TargetProcesses>,
    /// How deep to look into its runtime (thread dumps with `Deep`).
    pub runtime_depth: Depth,
    /// The warm-up (the phase not measured) ends when the target has settled, its duration
    /// being the cap (`--warmup auto`).
    pub warmup_auto: bool,
    /// Profile the watched process over the measured phases at this frequency.
    pub profile_hz: Option<u32>,
    /// Also record where its threads leave the CPU (every context switch, with its stack).
    pub off_cpu: bool,
    /// Which profiler takes a JVM's on-CPU profile.
    pub jvm_profiler: JvmProfiler,
    /// A JVM's allocations by site (async-profiler) over the measured phases.
    pub alloc: bool,
    pub otlp: Option<OtlpSpec<'a>>,
    /// A Go target's GC cycles, when kiln started it (`--spawn`).
    pub gctrace: Option<kiln_runtime::go::GcTraceFeed>,
    /// `--export`: the receivers each second goes to while the run lasts.
    pub exports: &'a [kiln_export::ExportTarget],
}

/// Runs every phase, streaming each second to the run directory.
pub fn execute(spec: RunSpec, stop: &StopSignal, live: &mut dyn Progress) -> Result<RunOutcome> {
    let RunSpec {
        plan,
        plan_record,
        phases: phase_list,
        out,
        name,
        target,
        runtime_depth,
        warmup_auto,
        profile_hz,
        off_cpu,
        jvm_profiler,
        alloc,
        otlp,
        gctrace,
        exports,
    } = spec;
    // The main process (a pre-fork server's master) for what attaches to one process (a
    // JVM's tools); the runtime is read in a worker, where the requests run.
    let watch_pid = target.as_ref().map(TargetProcesses::main_pid);
    let runtime_pid = target
        .clone()
        .map(|mut t| t.runtime_process(&ProcFs::default()));
    // A target that never answered the first connection is recorded as a failed run (the
    // host's checks beside it say why a listener may not accept); a refused or misnamed one
    // is the user's mistake, said in a line.
    let preflight = match kiln_load::preflight(plan) {
        Err(
            e @ kiln_load::LoadError::Unreachable {
                timed_out: true, ..
            },
        ) => Err(e),
        said => Ok(said?),
    };
    let shard = plan_record
        .shard
        .map(|s| format!("{}/{}", s.index, s.count));
    let mut dir = create_run_dir(&out, name, plan_record.into())?;
    let mut writer = dir.add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)?;
    let mut warnings = Vec::new();
    // The host as the run found it: the report shows it, the findings cite it.
    let doctor = DoctorRecord {
        pid: watch_pid,
        checks: Doctor::new("/", watch_pid).run(),
    };
    let written = serde_json::to_vec_pretty(&doctor)
        .map_err(crate::RunnerError::from)
        .and_then(|json| Ok(dir.write_file_part(DOCTOR_PART, DOCTOR_FILE, 1, &json)?));
    if let Err(e) = written {
        warnings.push(format!("the host checks were not recorded: {e:#}"));
    }
    if let Err(e) = preflight {
        let why = crate::RunnerError::from(e);
        let _ = dir.finish(RunStatus::Failed, Some(crate::error_text(&why)));
        return Err(crate::RunnerError::NotStarted {
            dir: dir.path().to_path_buf(),
            source: Box::new(why),
        });
    }
    if let Some(o) = &otlp {
        o.receiver.record_to(dir.path());
    }
    let exporter = match exports {
        [] => None,
        targets => {
            let labels = kiln_export::RunLabels {
                run: dir.manifest.id.clone(),
                plan: Some(name.to_string()),
                shard,
            };
            let started = kiln_export::Exporter::start(targets, &labels);
            Some(Arc::new(or_fail(&mut dir, started.map_err(Into::into))?))
        }
    };
    // kiln's own waits for a CPU, watched or not: the host's noise as the generator felt it
    let noise = NoiseProbe::start({
        let mut writer = dir.add_json_lines_part(NOISE_PART, NOISE_FILE, 1)?;
        move |second| {
            let _ = writer.write(second);
        }
    })?;
    let watcher = match &target {
        Some(target) => Some(ResourceWatcher::start(
            dir.add_json_lines_part(RESOURCES_PART, "resources.jsonl", 1)?,
            target.clone(),
            stop.clone(),
            exporter.clone(),
        )?),
        None => None,
    };
    let runtime_watcher = match runtime_pid {
        Some(pid) => {
            // --off-cpu's lock profile has the waiters' stacks; a JVM's thread dumps name
            // the holders
            let depth = match runtime_depth {
                Depth::Default if off_cpu && jvm_profile::is_jvm(pid) => Depth::Dumps,
                depth => depth,
            };
            Some(RuntimeWatcher::start(&mut dir, pid, depth, gctrace)?)
        }
        None => None,
    };
    let mut phases = Vec::new();
    let mut write_error = None;
    let mut early: Option<String> = None;
    let mut profilers: Vec<ProfileWatcher> = Vec::new();
    // The measured phases' span of wall-clock time: the DB analysis covers the requests
    // that began in it (not spans an application queued before, nor the warm-up's).
    let mut measured_window: Option<(u64, u64)> = None;
    // async-profiler's profiles beside the CPU's, started with the first measured phase
    let mut jvm_beside: Vec<JvmBesideWatcher> = Vec::new();
    let mut jvm_beside_tried = false;
    // idle connections one phase leaves to the next
    let kept = kiln_load::KeptConnections::default();
    for (spec, duration) in phase_list {
        if let (Some(pid), false, true) = (watch_pid, jvm_beside_tried, spec.measured) {
            jvm_beside_tried = true;
            if let Some(watcher) = &runtime_watcher {
                watcher.measuring_started();
            }
            // a lock and a wall-clock profile come with --off-cpu when the target is a JVM,
            // said missing only then
            let jvm_off_cpu = off_cpu && jvm_profile::is_jvm(pid);
            let kinds = [
                (alloc, JvmBeside::Alloc),
                (jvm_off_cpu, JvmBeside::Locks),
                (jvm_off_cpu, JvmBeside::Wall),
            ];
            for kind in kinds
                .into_iter()
                .filter_map(|(wanted, k)| wanted.then_some(k))
            {
                match JvmBesideWatcher::start(kind, pid, &jvm_profiler) {
                    Ok(w) => jvm_beside.push(w),
                    Err(why) => {
                        warnings.push(format!("{}: {why}", kind.flag()));
                        (dir.manifest.not_recorded).insert(kind.flag().into(), why.to_string());
                    }
                }
            }
        }
        if let (Some(target), true, true) = (&target, profilers.is_empty(), spec.measured) {
            if let Some(hz) = profile_hz {
                profilers.push(ProfileWatcher::start(
                    target,
                    Event::Cpu,
                    hz,
                    dir.path(),
                    &jvm_profiler,
                )?);
            }
            if off_cpu {
                profilers.push(ProfileWatcher::start(
                    target,
                    Event::Cswitch,
                    0,
                    dir.path(),
                    &jvm_profiler,
                )?);
            }
        }
        let mut phase_plan = plan.clone();
        if !duration.is_zero() {
            phase_plan.duration = *duration;
        }
        let mut summary = PhaseSummary::new(&spec.name);
        live.start_phase(&spec.name, phase_plan.duration.as_secs(), spec.measured);
        let phase_started = unix_ns_now();
        let mut settle = (warmup_auto && !spec.measured).then(Settle::default);
        let mut settled = None;
        let jit = runtime_watcher.as_ref().map(|w| w.jit_ms.clone());
        // the compiler threads' CPU: a second witness of the JIT, and the only one when the
        // JVM keeps no counters (-XX:-UsePerfData)
        let compiler = runtime_watcher
            .as_ref()
            .filter(|w| w.is_jvm)
            .and(watcher.as_ref())
            .map(|w| w.compiler_cpu.clone());
        let ran = kiln_load::run_phase(&phase_plan, spec, &kept, stop, &mut |second| {
            if let (Some(judge), None) = (settle.as_mut(), &settled) {
                // judged under the series' lock: the watcher's next push waits a moment
                // rather than the series being copied every second
                let held = jit.as_ref().and_then(|j| j.lock().ok());
                let jit_ms: &[f64] = held.as_deref().map_or(&[], Vec::as_slice);
                let held_cpu = compiler.as_ref().and_then(|c| c.lock().ok());
                let compiler_pct: &[f64] = held_cpu.as_deref().map_or(&[], Vec::as_slice);
                settled = judge.second(second.requests, jit_ms, compiler_pct);
                drop((held, held_cpu));
                if settled.is_some() {
                    stop.end_phase();
                }
            }
            summary.add_second(second);
            live.second(second);
            if let Some(e) = &exporter {
                e.load_second(second);
            }
            if write_error.is_none() {
                if let Err(e) = writer.write(&LoadRecordLine::Second(Box::new(second.clone()))) {
                    write_error = Some(e);
                    stop.stop("cannot write the run record");
                }
            }
        });
        let mut end = or_fail(&mut dir, ran.map_err(Into::into))?;
        if end.stopped_early.is_none() {
            end.ended_because = settled.or_else(|| settle.map(|s| s.unsettled()));
        }
        if spec.measured {
            let from = measured_window.map_or(phase_started, |(from, _)| from);
            measured_window = Some((from, unix_ns_now()));
        }
        live.end_phase(&end);
        if let Some(e) = &exporter {
            e.phase_end(&end);
        }
        let wrote = writer.write(&LoadRecordLine::PhaseEnd(end.clone()));
        or_fail(&mut dir, wrote.map_err(Into::into))?;
        summary.set_end(&end);
        phases.push(summary);
        if let Some(reason) = end.stopped_early {
            early = Some(reason);
            break;
        }
    }
    // perf's profiles are stopped together, so that their reports are made at once (on-CPU's
    // and off-CPU's took 1.5 and 2.4 s one after the other on a demo side)
    for p in &profilers {
        p.stop();
    }
    // the spans still to come are waited for from here, while the profiles are written
    let at_load_end = otlp.as_ref().map(|o| query_parts::LoadEnd {
        at: Instant::now(),
        exports: o.receiver.stats().requests,
        answered: phases
            .iter()
            .map(|p| p.totals.status.values().sum::<u64>())
            .sum(),
    });
    let resources = watcher.map(ResourceWatcher::finish).unwrap_or_default();
    // the sampler's thread has ended: the exporter is this thread's alone again
    let exports = (exporter.and_then(|e| Arc::try_unwrap(e).ok()))
        .map(|e| finish_exports(e, &mut dir, &mut warnings));
    let noise = noise.finish();
    let runtime = runtime_watcher.map(|w| w.finish(&mut dir, &mut warnings));
    let (mut alloc_profile, mut locks, mut wall) = (None, None, None);
    for w in jvm_beside {
        let kind = w.kind();
        let record = w.finish(&mut dir, &mut warnings);
        match kind {
            JvmBeside::Alloc => alloc_profile = record,
            JvmBeside::Locks => locks = record,
            JvmBeside::Wall => wall = record,
        }
    }
    let (mut profile, mut off_cpu) = (None, None);
    for p in profilers {
        let event = p.event;
        let record = p.finish(&mut dir, &mut warnings);
        match event {
            Event::Cpu => profile = record,
            Event::Cswitch => off_cpu = record,
        }
    }
    let (queries, queries_gate_failed) = match (otlp, at_load_end) {
        (Some(o), Some(at_load_end)) => {
            let finished = finish_queries(
                o,
                at_load_end,
                &mut dir,
                stop,
                measured_window,
                &mut warnings,
            );
            let (record, gate) = or_fail(&mut dir, finished)?;
            (Some(record), gate)
        }
        _ => (None, false),
    };
    if let Some(e) = write_error {
        dir.finish(RunStatus::Failed, Some(e.to_string()))?;
        return Err(e.into());
    }
    let wrote = kiln_record::write_latency_log(&mut dir).doing("cannot write the latency log");
    or_fail(&mut dir, wrote)?;
    let interrupted_by = stop.interrupted_by();
    match early {
        Some(reason) => dir.finish(RunStatus::Interrupted, Some(reason))?,
        None => dir.finish(RunStatus::Complete, None)?,
    }
    // Judged from the record as written, as `kiln findings` would judge a copy of it.
    // The findings and the page read the record once, together.
    let mut run = kiln_record::Run::read(dir);
    let findings = kiln_findings::judge_run(&run);
    if let Err(e) = kiln_findings::write(run.dir_mut(), &findings) {
        warnings.push(format!("the findings were not recorded: {e}"));
    }
    let report = match kiln_report::write(&mut run) {
        Ok(path) => Some(path),
        Err(e) => {
            warnings.push(format!("the HTML report was not written: {e}"));
            None
        }
    };
    let dir = run.into_dir();
    Ok(RunOutcome {
        report,
        dir,
        phases,
        resources,
        noise,
        runtime,
        profile,
        off_cpu,
        alloc: alloc_profile,
        locks,
        wall,
        queries,
        queries_gate_failed,
        interrupted_by,
        findings,
        warnings,
        exports,
    })
}

/// Waits a moment for the receivers to take the last seconds, records what each got and
/// says what any of them missed.
fn finish_exports(
    exporter: kiln_export::Exporter,
    dir: &mut RunDir,
    warnings: &mut Vec<String>,
) -> kiln_record::schema::export::ExportsRecord {
    use kiln_record::schema::export::{EXPORTS_FILE, EXPORTS_PART};
    let record = exporter.finish();
    for e in &record.exports {
        if e.seconds_dropped > 0 {
            let why = e.last_error.as_deref().unwrap_or("no answer in time");
            warnings.push(format!(
                "--export {}: {} of {} seconds did not reach it (last: {why})",
                e.url,
                e.seconds_dropped,
                e.seconds_dropped + e.seconds_sent
            ));
        }
    }
    let written = serde_json::to_vec_pretty(&record)
        .map_err(crate::RunnerError::from)
        .and_then(|json| Ok(dir.write_file_part(EXPORTS_PART, EXPORTS_FILE, 1, &json)?));
    if let Err(e) = written {
        warnings.push(format!("the exports' account was not recorded: {e:#}"));
    }
    record
}

/// Waits for the last spans, stops the receiver and writes the DB-call analysis.
fn finish_queries(
    o: OtlpSpec,
    at_load_end: query_parts::LoadEnd,
    dir: &mut RunDir,
    stop: &StopSignal,
    measured_window: Option<(u64, u64)>,
    warnings: &mut Vec<String>,
) -> Result<(QueriesRecord, bool)> {
    query_parts::drain(&o.receiver, at_load_end, o.wait, stop);
    let received = o.receiver.stop();
    query_parts::list_recorded(dir, &received.recorded)?;
    if let Some(e) = &received.record_error {
        warnings.push(format!("the received spans were not all recorded: {e}"));
    }
    let report = query_parts::write_report(
        dir,
        &received.ingest,
        o.settings,
        "kiln run: DB calls",
        Duration::ZERO, // read as it arrived, during the run
        measured_window,
    )?;
    let gate = query_parts::gate(&report.record.analysis, o.settings.fail_on);
    Ok((report.record, gate))
}

/// The watched process's profile over the measured phases: perf on its own thread, or
/// async-profiler inside a JVM.
struct ProfileWatcher {
    pid: i32,
    event: Event,
    hz: u32,
    how: Profiler,
}

enum Profiler {
    Perf {
        done: Arc<AtomicBool>,
        thread: std::thread::JoinHandle<Result<kiln_profile::Profiled, kiln_profile::ProfileError>>,
        /// Why not async-profiler, for a JVM.
        note: Option<String>,
    },
    Async(JvmCpuProfile),
}

impl ProfileWatcher {
    /// `hz` is the sampling frequency of on-CPU profiles (every switch is taken off-CPU).
    fn start(
        target: &TargetProcesses,
        event: Event,
        hz: u32,
        dir: &Path,
        jvm: &JvmProfiler,
    ) -> Result<Self> {
        let pid = target.main_pid();
        let mut note = None;
        if event == Event::Cpu && jvm_profile::is_jvm(pid) {
            match JvmCpuProfile::start(pid, hz, jvm) {
                Ok(profile) => {
                    return Ok(Self {
                        pid,
                        event,
                        hz,
                        how: Profiler::Async(profile),
                    })
                }
                Err(why) => note = why.map(|e| e.to_string()),
            }
        }
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        // every process serving the target as the measured load starts (perf follows the
        // threads and children they make from then on)
        let pids = target.clone().members(&ProcFs::default());
        let data = dir.join(Self::data_file(event));
        let options = kiln_profile::RecordOptions {
            event,
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
            pid,
            event,
            hz,
            how: Profiler::Perf { done, thread, note },
        })
    }

    /// perf's data file (two profiles can run at once; both files are removed at the end).
    fn data_file(event: Event) -> &'static str {
        match event {
            Event::Cpu => "perf.data",
            Event::Cswitch => "perf-offcpu.data",
        }
    }

    /// Asks perf to stop: it then writes its report on its own thread, which
    /// [`ProfileWatcher::finish`] joins (async-profiler is stopped there).
    fn stop(&self) {
        if let Profiler::Perf { done, .. } = &self.how {
            done.store(true, Ordering::SeqCst);
        }
    }

    /// Stops the profiler and writes the profile into the run directory. A profile that
    /// failed (perf missing, forbidden, the JVM gone) is reported and the run's other records
    /// stand.
    fn finish(self, dir: &mut RunDir, warnings: &mut Vec<String>) -> Option<ProfileRecord> {
        let flag = match self.event {
            Event::Cpu => "--profile",
            Event::Cswitch => "--off-cpu",
        };
        // said now and kept in the record, where readers say it instead of "add --profile"
        let failed = |dir: &mut RunDir, warnings: &mut Vec<String>, e: &dyn std::fmt::Display| {
            warnings.push(format!("{flag}: {e}"));
            dir.manifest
                .not_recorded
                .insert(flag.to_string(), e.to_string());
            None
        };
        let title = match self.event {
            Event::Cpu => format!("On-CPU of pid {} during the measured load", self.pid),
            Event::Cswitch => format!(
                "Off-CPU of pid {} during the measured load: where threads left the CPU",
                self.pid
            ),
        };
        let parts = profile_parts::parts_of(self.event);
        let count = self.event.count_name();
        let write = |dir: &mut RunDir, folded: &kiln_profile::Folded, origin| {
            profile_parts::write_profile(dir, parts, folded, &title, count, 10, origin)
        };
        let written = match self.how {
            Profiler::Perf { done, thread, note } => {
                done.store(true, Ordering::SeqCst); // when not stopped already
                let joined = thread.join();
                let _ = std::fs::remove_file(dir.path().join(Self::data_file(self.event)));
                let profiled = match joined {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => return failed(dir, warnings, &e),
                    Err(_) => {
                        let why = "the profiler's thread panicked";
                        return failed(dir, warnings, &why);
                    }
                };
                let origin = profile_parts::Origin::Perf(&profiled, self.hz, note);
                write(dir, &profiled.folded, origin)
            }
            Profiler::Async(profile) => match profile.stop() {
                Ok((folded, taken)) => {
                    write(dir, &folded, profile_parts::Origin::AsyncProfiler(&taken))
                }
                Err(e) => return failed(dir, warnings, &e),
            },
        };
        match written {
            Ok(written) => Some(written.record),
            Err(e) => failed(dir, warnings, &e),
        }
    }
}

/// The sampler on its own thread beside the load, writing one line a second. The watched
/// process exiting stops the load: what follows would no longer be about it.
struct ResourceWatcher {
    done: Arc<AtomicBool>,
    /// The CPU (percent of a core) of the process's JIT compiler threads in each sample, for
    /// `--warmup auto` (all zero but for a JVM).
    compiler_cpu: Arc<std::sync::Mutex<Vec<f64>>>,
    thread: std::thread::JoinHandle<Vec<ResourceSecond>>,
}

impl ResourceWatcher {
    fn start(
        mut writer: JsonLinesWriter,
        target: TargetProcesses,
        load: StopSignal,
        exporter: Option<Arc<kiln_export::Exporter>>,
    ) -> Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let compiler_cpu = Arc::new(std::sync::Mutex::new(Vec::new()));
        let compiler = compiler_cpu.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-sampler".into())
            .spawn(move || {
                let mut sampler = Sampler::of_target(ProcFs::default(), Some(target));
                let mut samples = Vec::new();
                let stop = || {
                    flag.load(Ordering::SeqCst)
                        .then(|| "load ended".to_string())
                };
                let ended = sampler.run_every(Duration::from_secs(1), None, &stop, &mut |s| {
                    let _ = writer.write(&s);
                    if let Some(e) = &exporter {
                        e.resource_second(&s);
                    }
                    if let (Some(p), Ok(mut series)) = (&s.process, compiler.lock()) {
                        series.push(
                            p.cpu_by_thread_group
                                .iter()
                                .filter(|g| role_of(&g.name) == JvmThreadRole::Compiler)
                                .map(|g| g.cpu_pct)
                                .sum(),
                        );
                    }
                    samples.push(s);
                });
                if let Some(reason) = ended.filter(|_| !flag.load(Ordering::SeqCst)) {
                    load.stop(&format!("the watched {reason}"));
                }
                samples
            })?;
        Ok(Self {
            done,
            compiler_cpu,
            thread,
        })
    }

    fn finish(self) -> Vec<ResourceSecond> {
        self.done.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}
