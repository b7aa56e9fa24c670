//! What the rules read: one run record, loaded from its directory part by part. A part that
//! is missing leaves its field empty (the rules that need it say they cannot judge); a part
//! that cannot be read is named in `problems` and the rest is still judged.

use kiln_hedge::SecondCounts;
use kiln_profile::Folded;
use kiln_record::parts::{ProfileParts, ALLOC, OFF_CPU, ON_CPU, QUERIES_PART};
use kiln_record::schema::profile::{Event, ProfileRecord};
use kiln_record::schema::queries::QueriesRecord;
use kiln_record::{
    LoadRecordLine, PhaseSummary, RunDir, RunManifest, RunStatus, SecondRecord, LOAD_SECONDS_PART,
};
use kiln_runtime::summary::{during, summarize_within, RuntimeSummary};
use kiln_runtime::{RuntimeInfo, RuntimeSecond, RUNTIME_PART, RUNTIME_SECONDS_PART};
use kiln_sample::{
    DoctorRecord, NoiseSecond, ResourceSecond, DOCTOR_PART, NOISE_PART, RESOURCES_PART,
};

use crate::Window;

/// One measured second of load, reduced to what the rules look at (a long run's seconds
/// with their histograms would not all fit in memory at once).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadPoint {
    /// The end of the second, ms since the Unix epoch.
    pub unix_ms: u64,
    pub requests: u64,
    pub failed: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub scheduled: u64,
    pub sent: u64,
    pub send_lag_max_us: u64,
    /// What the wire showed this second (connections opened, responses in two parts).
    pub wire: kiln_record::wire::WireSecond,
}

impl LoadPoint {
    pub fn of(s: &SecondRecord) -> Self {
        Self {
            unix_ms: s.unix_ms,
            requests: s.requests,
            failed: s.failed(),
            p50_us: s.latency.quantile_us(0.5),
            p99_us: s.latency.quantile_us(0.99),
            max_us: s.latency.max_us(),
            scheduled: s.scheduled,
            sent: s.sent,
            send_lag_max_us: s.send_lag_max_us,
            wire: s.wire.clone(),
        }
    }
}

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
        match self.manifest.not_recorded.get(flag) {
            Some(why) => format!(
                "{flag} was given and recorded nothing: {}",
                kiln_record::text::safe_text(why)
            ),
            None => format!("{missing} (add {flag})"),
        }
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

    /// Reads every part the rules use; what cannot be read is said in `problems`.
    pub fn read(dir: &RunDir) -> Self {
        let mut record = Self::empty(dir.manifest.clone());
        record.status = dir.effective_status();
        record.read_load(dir);
        let window = record.window();
        match dir.json_lines::<ResourceSecond>(RESOURCES_PART) {
            Ok(lines) => {
                for line in lines {
                    match line {
                        Ok(s) if window.is_none_or(|w| overlaps(&s, w)) => record.resources.push(s),
                        Ok(_) => {}
                        Err(e) => {
                            record.problems.push(e.to_string());
                            break;
                        }
                    }
                }
            }
            Err(e) => record.problems.push(e.to_string()),
        }
        match dir.read_json_lines::<NoiseSecond>(NOISE_PART) {
            Ok(seconds) => {
                let span = PhaseSummary::measured_span(&record.phases);
                record.noise = kiln_record::Span::keep(span, &seconds, |s| s.unix_ms);
            }
            Err(e) => record.problems.push(e.to_string()),
        }
        record.profile = record.read_profile(dir, ON_CPU);
        record.off_cpu = record.read_profile(dir, OFF_CPU);
        record.alloc = record.json_part(dir, ALLOC.summary.0);
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
        record.queries = record.json_part(dir, QUERIES_PART);
        record.doctor = record.json_part(dir, DOCTOR_PART);
        record.read_runtime(dir, window);
        record
    }

    fn read_runtime(&mut self, dir: &RunDir, window: Option<Window>) {
        let Some(info) = self.json_part::<RuntimeInfo>(dir, RUNTIME_PART) else {
            return;
        };
        let seconds: Vec<RuntimeSecond> = match dir.read_json_lines(RUNTIME_SECONDS_PART) {
            Ok(seconds) => seconds,
            Err(e) => {
                self.problems.push(e.to_string());
                Vec::new()
            }
        };
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

    fn read_load(&mut self, dir: &RunDir) {
        let lines = match dir.json_lines::<LoadRecordLine>(LOAD_SECONDS_PART) {
            Ok(lines) => lines,
            Err(e) => return self.problems.push(e.to_string()),
        };
        // Which phases are measured is known from each second's phase name until its end
        // line says otherwise; the points of a phase later found unmeasured are dropped.
        let mut points: Vec<(String, LoadPoint)> = Vec::new();
        for line in lines {
            match line {
                Ok(line) => {
                    if let LoadRecordLine::Second(s) = &line {
                        points.push((s.phase.clone(), LoadPoint::of(s)));
                    }
                    PhaseSummary::add_line(&mut self.phases, &line);
                }
                Err(e) => {
                    self.problems.push(e.to_string());
                    break;
                }
            }
        }
        let measured = PhaseSummary::measured_names(&self.phases);
        self.seconds = points
            .into_iter()
            .filter(|(phase, _)| measured.contains(&phase.as_str()))
            .map(|(_, p)| p)
            .collect();
        if let Some(total) = self.measured() {
            let p95 = total.totals.latency.quantile_us(0.95);
            let p99 = total.totals.latency.quantile_us(0.99);
            // one more pass for both: the tail's spread and where the requests above p99 lie
            let (tail, above) = self
                .each_measured_second(dir, |s| {
                    (tail_counts(s, p95), (s.unix_ms, s.latency.count_above(p99)))
                })
                .into_iter()
                .unzip();
            self.tail = Some((p95, tail));
            self.above_p99 = above;
        }
    }

    /// Each measured second's responses and how many were slower than `delay_us`: a second
    /// pass over the load's seconds (their histograms are not kept in memory).
    pub fn slow_seconds(&self, dir: &RunDir, delay_us: u64) -> Vec<SecondCounts> {
        self.each_measured_second(dir, |s| tail_counts(s, delay_us))
    }

    /// `f` of each measured second of the load, read again from the record.
    fn each_measured_second<T>(&self, dir: &RunDir, f: impl Fn(&SecondRecord) -> T) -> Vec<T> {
        let measured = PhaseSummary::measured_names(&self.phases);
        let Ok(lines) = dir.json_lines::<LoadRecordLine>(LOAD_SECONDS_PART) else {
            return Vec::new();
        };
        lines
            .map_while(Result::ok)
            .filter_map(|line| match line {
                LoadRecordLine::Second(s) if measured.contains(&s.phase.as_str()) => Some(f(&s)),
                _ => None,
            })
            .collect()
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

    fn read_profile(&mut self, dir: &RunDir, parts: ProfileParts) -> Option<Profile> {
        let record = self.json_part(dir, parts.summary.0)?;
        let (path, bytes) = match dir.read_part(parts.folded.0) {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(e) => {
                self.problems.push(e.to_string());
                return None;
            }
        };
        match Folded::parse(&String::from_utf8_lossy(&bytes)) {
            Ok((folded, _)) => Some(Profile { folded, record }),
            Err(e) => {
                self.problems.push(format!("{}: {e}", path.display()));
                None
            }
        }
    }

    fn json_part<T: serde::de::DeserializeOwned>(&mut self, dir: &RunDir, kind: &str) -> Option<T> {
        dir.read_json_part(kind).unwrap_or_else(|e| {
            self.problems.push(e.to_string());
            None
        })
    }

    /// The measured phases merged.
    pub fn measured(&self) -> Option<PhaseSummary> {
        PhaseSummary::measured_total(&self.phases)
    }

    /// Cores kiln itself used over the measured phases (its own CPU over their duration).
    pub fn kiln_cores(&self) -> Option<f64> {
        let total = self.measured()?;
        let cpu_s: f64 = self
            .phases
            .iter()
            .filter(|p| p.measured)
            .filter_map(|p| p.end.as_ref())
            .map(|e| (e.kiln_cpu_user_us as f64 + e.kiln_cpu_system_us as f64) / 1e6)
            .sum();
        let duration_s = total.duration_secs();
        (duration_s > 0.0).then(|| cpu_s / duration_s)
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

/// A sample covers the second before its time; it belongs to the window when that second
/// overlaps it by more than half.
/// A second's responses and how many were slower than `delay_us`; a hedged run's own view
/// without hedging: its first copies.
fn tail_counts(s: &SecondRecord, delay_us: u64) -> SecondCounts {
    let latency = s.hedge.as_ref().map_or(&s.latency, |h| &h.first_copy);
    SecondCounts {
        requests: latency.count(),
        slow: latency.count_above(delay_us),
    }
}

fn overlaps(s: &ResourceSecond, w: Window) -> bool {
    kiln_record::Span {
        from_unix_ms: w.from_unix_ms,
        to_unix_ms: w.to_unix_ms,
    }
    .holds_second(s.unix_ms)
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
