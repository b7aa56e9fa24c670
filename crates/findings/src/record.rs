//! What the rules read: one run record as they see it, made from the run as read
//! ([`kiln_record::Run`], which reads each part once for every reader). A part that is missing
//! leaves its field empty (the rules that need it say they cannot judge); a part that cannot
//! be read is named in `problems` and the rest is still judged.

use std::sync::Arc;

use kiln_hedge::SecondCounts;
use kiln_profile::Folded;
use kiln_record::parts::{ProfileParts, ALLOC, OFF_CPU, ON_CPU, QUERIES_PART};
use kiln_record::schema::profile::{Event, ProfileRecord};
use kiln_record::schema::queries::QueriesRecord;
use kiln_record::{PhaseSummary, Run, RunManifest, RunStatus};
use kiln_runtime::summary::{during, summarize_within, RuntimeSummary};
use kiln_runtime::{RuntimeInfo, RuntimeSecond, RUNTIME_PART, RUNTIME_SECONDS_PART};
use kiln_sample::{
    DoctorRecord, NoiseSecond, ResourceSecond, DOCTOR_PART, NOISE_PART, RESOURCES_PART,
};

use crate::Window;

pub use kiln_record::LoadPoint;

/// The profile of the run: its collapsed stacks and `profile.json`.
#[derive(Clone, Debug)]
pub struct Profile {
    pub folded: Folded,
    /// `profile.json`: the summary and how the profile was taken.
    pub record: ProfileRecord,
}

impl Profile {
    /// A profile of `folded` taken by perf with `event`, nothing else recorded (for records
    /// built by hand).
    pub fn of(folded: Folded, event: Event) -> Self {
        let mut record = ProfileRecord::new(
            kiln_profile::summarize_event(&folded, 10, event),
            event.count_name(),
        );
        record.event = Some(event);
        Self { folded, record }
    }
}

/// A run record as the rules see it.
#[derive(Clone, Debug)]
pub struct RunRecord {
    pub manifest: RunManifest,
    pub status: RunStatus,
    pub phases: Vec<PhaseSummary>,
    /// The measured phases' seconds, in the order recorded.
    pub seconds: Vec<LoadPoint>,
    /// The sampler's seconds that overlap the measured load (all of them without load).
    pub resources: Vec<ResourceSecond>,
    /// kiln's own waits for a CPU in the measured seconds (`noise.jsonl`; none in records
    /// from before kiln measured them).
    pub noise: Vec<NoiseSecond>,
    pub profile: Option<Profile>,
    /// Where threads left the CPU: every context switch with its stack (`--off-cpu`).
    pub off_cpu: Option<Profile>,
    /// A JVM's allocations by site (`--alloc`): its summary, bytes by allocating method.
    pub alloc: Option<ProfileRecord>,
    /// `queries.json`: the DB-call analysis.
    pub queries: Option<QueriesRecord>,
    /// `doctor.json`: the host checks taken as the run started.
    pub doctor: Option<DoctorRecord>,
    /// The runtime's own figures over the measured load (`runtime.json` and
    /// `runtime-seconds.jsonl`): what it is, what was read, GC, JIT, thread dumps.
    pub runtime: Option<RuntimeSummary>,
    /// The runtime's seconds in the measured window, to line up with the load's.
    pub runtime_seconds: Vec<RuntimeSecond>,
    /// The measured seconds' responses and how many were slower than the run's p95 (the
    /// delay a hedge would wait), with that delay: how the tail spreads over the run.
    pub tail: Option<(u64, Vec<SecondCounts>)>,
    /// Each measured second's end and how many of its requests were slower than the run's
    /// p99: where the symptom lies.
    pub above_p99: Vec<(u64, u64)>,
    /// Parts that could not be read.
    pub problems: Vec<String>,
}

impl RunRecord {
    /// Why a part a flag records is missing: what went wrong when the flag was given, else
    /// `missing` and the flag that would record it ("the run was not profiled (add
    /// --profile)").
    pub fn not_recorded(&self, flag: &str, missing: &str) -> String {
        self.manifest.why_not_recorded(flag, missing)
    }

    /// A record with nothing in it but its manifest (for building records in tests).
    pub fn empty(manifest: RunManifest) -> Self {
        Self {
            status: manifest.status,
            manifest,
            phases: Vec::new(),
            seconds: Vec::new(),
            resources: Vec::new(),
            noise: Vec::new(),
            profile: None,
            off_cpu: None,
            alloc: None,
            queries: None,
            doctor: None,
            runtime: None,
            runtime_seconds: Vec::new(),
            tail: None,
            above_p99: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// The record of `run` as the rules see it; what cannot be read is said in `problems`.
    pub fn of(run: &Run) -> Self {
        let mut record = Self::empty(run.manifest().clone());
        record.status = run.status;
        record.phases = run.phases.clone();
        record.seconds = run.seconds.clone();
        let window = record.window();
        record.resources = run.lines_measured(RESOURCES_PART, |s: &ResourceSecond| s.unix_ms);
        record.noise = run.lines_measured(NOISE_PART, |s: &NoiseSecond| s.unix_ms);
        record.profile = read_profile(run, ON_CPU);
        record.off_cpu = read_profile(run, OFF_CPU);
        record.alloc = run.part(ALLOC.summary.0).map(owned);
        // `kiln profile --event cswitch` wrote its switches as the profile before they had
        // parts of their own: they are not where the CPU went
        if record.off_cpu.is_none()
            && record
                .profile
                .as_ref()
                .is_some_and(|p| p.record.event == Some(Event::Cswitch))
        {
            record.off_cpu = record.profile.take();
        }
        record.queries = run.part(QUERIES_PART).map(owned);
        record.doctor = run.part(DOCTOR_PART).map(owned);
        record.read_runtime(run, window);
        if let Some(total) = record.measured() {
            let p95 = total.totals.latency.quantile_us(0.95);
            let p99 = total.totals.latency.quantile_us(0.99);
            // one more pass for both: the tail's spread and where the requests above p99 lie
            let (tail, above) = run
                .each_measured_second(|s| {
                    (
                        SecondCounts::of(s, p95),
                        (s.unix_ms, s.latency.count_above(p99)),
                    )
                })
                .into_iter()
                .unzip();
            record.tail = Some((p95, tail));
            record.above_p99 = above;
        }
        record.problems = run.problems();
        record
    }

    fn read_runtime(&mut self, run: &Run, window: Option<Window>) {
        let Some(info) = run.part::<RuntimeInfo>(RUNTIME_PART) else {
            return;
        };
        let seconds = run.lines::<RuntimeSecond>(RUNTIME_SECONDS_PART);
        // the seconds as the end summary takes them: from the first measured second's end
        let ends = window.map(|w| (w.from_unix_ms + 1000, w.to_unix_ms));
        self.runtime_seconds = during(&seconds, ends).into_iter().cloned().collect();
        let in_window: Vec<&RuntimeSecond> = self.runtime_seconds.iter().collect();
        let mut summary = summarize_within(
            &info,
            &in_window,
            window.map(|w| (w.from_unix_ms, w.to_unix_ms)),
        );
        add_thread_roles(&mut summary, &self.resources);
        self.runtime = Some(summary);
    }

    /// The target's CPU (user and system seconds) in each sampled second, with the requests
    /// of the load second nearest it (within half a second): CPU per request, second by
    /// second, when the target was watched.
    pub fn cpu_seconds(&self) -> Vec<(f64, f64, u64)> {
        let load = &self.seconds;
        self.resources
            .iter()
            .filter_map(|s| {
                let p = s.process.as_ref()?;
                // the load's seconds are in time order: the nearest is at or just before the
                // first one ending after this sample
                let after = load.partition_point(|l| l.unix_ms <= s.unix_ms);
                let nearest = [after.checked_sub(1), Some(after)]
                    .into_iter()
                    .flatten()
                    .filter_map(|i| load.get(i))
                    .min_by_key(|l| l.unix_ms.abs_diff(s.unix_ms))
                    .filter(|l| l.unix_ms.abs_diff(s.unix_ms) <= 500)?;
                let (user, system) = (
                    p.rates.cpu_user_pct / 100.0 * s.interval_s,
                    p.rates.cpu_system_pct / 100.0 * s.interval_s,
                );
                (user.is_finite() && system.is_finite() && nearest.requests > 0).then_some((
                    user,
                    system,
                    nearest.requests,
                ))
            })
            .collect()
    }

    /// The measured phases merged.
    pub fn measured(&self) -> Option<PhaseSummary> {
        PhaseSummary::measured_total(&self.phases)
    }

    /// Cores kiln itself used over the measured phases (its own CPU over their duration).
    pub fn kiln_cores(&self) -> Option<f64> {
        PhaseSummary::kiln_cores(&self.phases)
    }

    /// The measured load's wall-clock window.
    pub fn window(&self) -> Option<Window> {
        let span = PhaseSummary::measured_span(&self.phases)?;
        Some(Window {
            from_unix_ms: span.from_unix_ms,
            to_unix_ms: span.to_unix_ms,
        })
    }

    /// The window the resources cover (the load's, or the sampler's own without load).
    pub fn resource_window(&self) -> Option<Window> {
        self.window().or_else(|| {
            let first = self.resources.first()?;
            let last = self.resources.last()?;
            Some(Window {
                from_unix_ms: kiln_record::second_start_ms(first.unix_ms),
                to_unix_ms: last.unix_ms,
            })
        })
    }

    /// Whether the run loaded with an open model (a rate), where latency counts from the
    /// intended send.
    pub fn open_model(&self) -> bool {
        self.manifest.plan.open_model()
    }
}

/// The run's profile recorded in `parts`: its summary and its collapsed stacks.
fn read_profile(run: &Run, parts: ProfileParts) -> Option<Profile> {
    let record = run.part::<ProfileRecord>(parts.summary.0)?;
    let folded = run.parsed(parts.folded.0, Folded::of_part).ok()??;
    Some(Profile {
        folded: owned(folded),
        record: owned(record),
    })
}

/// A part as the rules keep it: their own copy (the run keeps its own for other readers).
fn owned<T: Clone>(part: Arc<T>) -> T {
    T::clone(&part)
}

/// A JVM's runtime summary gets its threads' CPU by role (compilers, GC, ...) over the
/// same resource samples: for the findings here, and for the binary's end summary.
pub fn add_thread_roles(
    runtime: &mut kiln_runtime::summary::RuntimeSummary,
    samples: &[kiln_sample::ResourceSecond],
) {
    let groups = kiln_sample::thread_groups_mean(samples);
    runtime.set_thread_cpu(groups.iter().map(|(name, pct, _)| (name.as_str(), *pct)));
}
