//! `kiln profile --pid`: one process's profile, taken by async-profiler inside a JVM when it
//! can be (inlined methods keep their names), else by perf on the process and its children,
//! and written into a run directory of its own. It prints nothing: the binary says what
//! [`ProfileSession`] is about to do and what [`TakenProfile`] holds.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::fail;
use kiln_load::StopSignal;
use kiln_profile::{profile_processes, Event, Profiled, RecordOptions};
use kiln_record::schema::plan::PlanRecord;
use kiln_record::{RunDir, RunLocation, RunStatus};
use kiln_sample::ProcFs;
use serde_json::json;

use crate::jvm_profile::{self, JvmCpuProfile, JvmProfiler};
use crate::profile_parts::{parts_of, write_profile, Origin, WrittenProfile};

/// A profile about to be taken: its run directory is written, async-profiler (for a JVM) is
/// already sampling.
pub struct ProfileSession {
    pub pid: i32,
    /// The process and its children, as perf follows them.
    pub pids: Vec<i32>,
    pub options: RecordOptions,
    pub duration: Duration,
    pub dir: RunDir,
    /// Why async-profiler could not take a JVM's profile (perf takes it instead).
    pub not_async: Option<String>,
    in_jvm: Option<JvmCpuProfile>,
}

/// A profile as it was taken and written.
pub struct TakenProfile {
    pub run_dir: std::path::PathBuf,
    pub written: WrittenProfile,
    pub title: String,
    pub event: Event,
    /// How long it sampled.
    pub taken_for: Duration,
    /// How its stacks were walked: `fp stacks`, or async-profiler's own walk.
    pub how: String,
    pub status: RunStatus,
    pub reason: Option<String>,
    /// The process exited before the profile's end.
    pub target_exited: bool,
    /// What perf did to resolve a JIT's frames, and advice for better stacks.
    pub jit_done: Vec<String>,
    pub advice: Vec<String>,
}

impl ProfileSession {
    /// Creates the run directory (under `out`, or runs/) and, for a JVM's CPU profile,
    /// starts async-profiler inside it unless `async_profiler` says `off` or it cannot load.
    pub fn start(
        pid: i32,
        port: Option<u16>,
        options: RecordOptions,
        duration: Duration,
        async_profiler: Option<&Path>,
        out: Option<&Path>,
    ) -> Result<Self> {
        let pids = ProcFs::default().process_tree(pid);
        let mut in_jvm = None;
        let mut not_async = None;
        if options.event == Event::Cpu && jvm_profile::is_jvm(pid) {
            let jvm = JvmProfiler::from_flag(async_profiler);
            match JvmCpuProfile::start(pid, options.frequency_hz, &jvm) {
                Ok(profile) => in_jvm = Some(profile),
                Err(why) => not_async = why.map(|e| e.to_string()),
            }
        }
        let profiler = if in_jvm.is_some() {
            "async-profiler"
        } else {
            "perf"
        };
        let name = format!("profile-{pid}");
        let plan = json!({"profile": {"pid": pid, "port": port, "pids": pids,
            "event": options.event, "frequency_hz": options.frequency_hz,
            "duration_s": duration.as_secs_f64(), "profiler": profiler}});
        let dir = crate::create_run_dir(
            &RunLocation::from_flag(out, &name),
            &name,
            PlanRecord::Other(plan),
        )?;
        Ok(Self {
            pid,
            pids,
            options,
            duration,
            dir,
            not_async,
            in_jvm,
        })
    }

    /// Whether async-profiler inside the JVM takes the profile (else perf does).
    pub fn in_jvm(&self) -> bool {
        self.in_jvm.is_some()
    }

    /// Samples for the duration or until stopped, then writes the profile's parts (the
    /// `top` frames in its summary) and ends the run directory. A failed profile ends it
    /// failed, with why.
    pub fn take(mut self, top: usize, stop: &StopSignal) -> Result<TakenProfile> {
        let pid = self.pid;
        let sampled = match self.in_jvm.take() {
            Some(profile) => take_in_jvm(profile, pid, self.duration, stop).map(Sampled::Jvm),
            None => take_with_perf(&self.pids, &self.options, self.duration, &self.dir, stop)
                .map(Sampled::Perf),
        };
        let sampled = match sampled {
            Ok(s) => s,
            Err(e) => {
                self.dir.finish(RunStatus::Failed, Some(format!("{e:#}")))?;
                return Err(e);
            }
        };
        let (folded, event, taken_for, target_exited, origin, how, jit_done, advice) =
            match &sampled {
                Sampled::Perf(p) => (
                    &p.folded,
                    p.event,
                    p.duration,
                    p.target_exited,
                    Origin::Perf(p, self.options.frequency_hz, self.not_async.clone()),
                    format!(
                        "{} stacks",
                        serde_json::to_value(p.call_graph)?.as_str().unwrap_or("")
                    ),
                    p.jit.done.clone(),
                    p.jit.advice.clone(),
                ),
                Sampled::Jvm((folded, a)) => (
                    folded,
                    Event::Cpu,
                    a.duration,
                    false,
                    Origin::AsyncProfiler(a),
                    "async-profiler, inlined frames kept".to_string(),
                    Vec::new(),
                    a.advice.clone(),
                ),
            };
        let title = format!(
            "{} of pid {pid} ({})",
            match event {
                Event::Cpu => "On-CPU",
                Event::Cswitch => "Context switches",
            },
            ProcFs::default()
                .process(pid)
                .map_or_else(String::new, |p| p.name)
        );
        let written = write_profile(
            &mut self.dir,
            parts_of(event),
            folded,
            &title,
            event.count_name(),
            top,
            origin,
        )?;
        let (status, reason) = if stop.interrupted_by().is_some() {
            (RunStatus::Interrupted, stop.reason())
        } else if target_exited {
            let why = format!("process {pid} exited during the profile");
            (RunStatus::Interrupted, Some(why))
        } else {
            (RunStatus::Complete, None)
        };
        self.dir.finish(status, reason.clone())?;
        Ok(TakenProfile {
            run_dir: self.dir.path().to_path_buf(),
            written,
            title,
            event,
            taken_for,
            how,
            status,
            reason,
            target_exited,
            jit_done,
            advice,
        })
    }
}

/// The samples as the profiler gave them.
enum Sampled {
    Perf(Profiled),
    Jvm((kiln_profile::Folded, crate::profile_parts::AsyncProfiled)),
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
) -> Result<(kiln_profile::Folded, crate::profile_parts::AsyncProfiled)> {
    let started = Instant::now();
    while started.elapsed() < duration && stop.reason().is_none() {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            fail!("process {pid} exited during the profile: async-profiler's samples went with it");
        }
        let left = duration.saturating_sub(started.elapsed());
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    Ok(profile.stop()?)
}
