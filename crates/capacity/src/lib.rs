//! `kiln capacity`: the highest open-model rate a service keeps every SLO at, and what stops
//! it there. A closed-model probe says roughly what the service serves at all; the search
//! starts below that, grows until a rate breaks an SLO, bisects to the precision asked and
//! runs the kept edge again. Each step is a whole run (its own run directory under `steps/`,
//! the target watched and judged by the findings); a step that can no longer keep an SLO
//! ends early, one judged while kiln itself was starved is run again. `capacity.json` is
//! rewritten after every step, so a search stopped anywhere still reports.

pub mod knee;
pub mod search;
pub mod step;
pub mod usl;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiln_load::StopSignal;
use kiln_record::schema::capacity::{
    CapacityRecord, CapacityStep, SearchMode, SearchStatus, StepKind, CAPACITY_FILE,
    CAPACITY_VERSION,
};
use kiln_runner::load_flags::LoadFlags;
use kiln_runner::{RunnerError, TargetProcesses};
use kiln_summary::thresholds::Threshold;

use crate::search::{Next, Search, SearchSettings};
use crate::step::{run_step, StepContext, StepTimes};

#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Step(RunnerError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl CapacityError {
    /// Whether the user's input was refused (exit 2), not a failure of the search.
    pub fn is_refused(&self) -> bool {
        match self {
            Self::Refused(_) => true,
            Self::Step(e) => e.is_refused(),
            Self::Write { .. } => false,
        }
    }
}

/// What a search runs.
pub struct CapacitySpec {
    /// The user's load (URL or plan, request, connections...); each step sets its rate,
    /// duration and warm-up.
    pub load: LoadFlags,
    pub slos: Vec<Threshold>,
    pub search: SearchSettings,
    /// The first rate; none: 80% of what the closed-model probe served.
    pub start_rate: Option<f64>,
    /// The probe's connections.
    pub probe_connections: usize,
    /// The whole search's time, at most.
    pub budget: Duration,
    /// Each step's warm-up, and its measured part (none: long enough for the SLOs'
    /// percentiles, between [`MIN_MEASURED`] and [`MAX_MEASURED`]).
    pub step_warmup: Duration,
    pub step_measured: Option<Duration>,
    pub dir: PathBuf,
    pub name: String,
    pub target: Option<TargetProcesses>,
    pub profile_hz: Option<u32>,
    /// A closed-model sweep of these connection counts instead of the rate search.
    pub sweep: Option<Vec<usize>>,
}

/// The page of a capacity directory.
pub const REPORT_FILE: &str = "report.html";
/// The shortest measured part of a step.
pub const MIN_MEASURED: Duration = Duration::from_secs(3);
/// The longest: a low rate with a p99.9 would otherwise run for minutes a step.
pub const MAX_MEASURED: Duration = Duration::from_secs(30);
/// A sweep level's measured part.
const SWEEP_MEASURED: Duration = Duration::from_secs(5);
/// The probe's measured part.
const PROBE_MEASURED: Duration = Duration::from_secs(3);
/// The step of one request at a time: short, it only reads a mean.
const ALONE_WARMUP: Duration = Duration::from_millis(500);
const ALONE_MEASURED: Duration = Duration::from_secs(2);
/// The first rate, as a share of what the probe served: a concurrency-limited service keeps
/// a latency SLO up to most of it.
const START_SHARE: f64 = 0.8;
/// A step judged while kiln was starved is run again at most this many times.
const STARVED_REPEATS: u32 = 2;
/// A step's time beside its load: the findings, the report, the record.
const STEP_OVERHEAD: Duration = Duration::from_secs(1);

/// What the search shows while it goes.
pub trait CapacityProgress {
    fn step_started(&mut self, _n: u32, _kind: StepKind, _rate: Option<f64>, _seconds: f64) {}
    fn step_ended(&mut self, _step: &CapacityStep) {}
}

/// Shows nothing.
pub struct Quiet;
impl CapacityProgress for Quiet {}

/// Runs the search into `spec.dir` and returns its record (also in `capacity.json`).
pub fn run(
    spec: CapacitySpec,
    stop: &StopSignal,
    progress: &mut dyn CapacityProgress,
) -> Result<CapacityRecord, CapacityError> {
    if spec.slos.is_empty() {
        return Err(CapacityError::Refused(
            "kiln capacity needs an SLO to keep, e.g. --slo 'p99<50ms'".into(),
        ));
    }
    claim(&spec.dir)?;
    let started = Instant::now();
    let mut record = CapacityRecord {
        version: CAPACITY_VERSION,
        mode: if spec.sweep.is_some() {
            SearchMode::Connections
        } else {
            SearchMode::Rate
        },
        name: spec.name.clone(),
        target: kiln_load::plan::redact_password(&spec.load.url),
        slos: spec.slos.iter().map(|s| s.text.clone()).collect(),
        precision: spec.search.precision,
        max_rate_asked: spec.search.max_rate,
        status: SearchStatus::Running,
        status_reason: None,
        started: kiln_record::now_rfc3339(),
        ended: None,
        elapsed_s: 0.0,
        max_rate: None,
        first_broken_rate: None,
        broken_by: Vec::new(),
        concurrency_at_knee: None,
        knee: None,
        usl: None,
        requests_total: 0,
        steps: Vec::new(),
    };
    write(&spec.dir, &record)?;
    let cx = StepContext {
        load: &spec.load,
        slos: &spec.slos,
        name: &spec.name,
        target: spec.target.as_ref(),
        profile_hz: spec.profile_hz,
        dir: &spec.dir,
    };
    let to_judge = spec
        .slos
        .iter()
        .map(Threshold::requests_to_judge)
        .max()
        .unwrap_or(0);
    let measured_for = |rate: f64| {
        spec.step_measured.unwrap_or_else(|| {
            Duration::from_secs_f64(to_judge as f64 / rate.max(1e-3))
                .clamp(MIN_MEASURED, MAX_MEASURED)
        })
    };
    let over_budget = |times: StepTimes| {
        started.elapsed() + times.warmup + times.measured + STEP_OVERHEAD > spec.budget
    };
    let mut n = 0u32;
    let sweep = spec.sweep.as_deref().map(|levels| {
        (|| -> Result<SearchStatus, CapacityError> {
            for &connections in levels {
                let times = StepTimes {
                    warmup: spec.step_warmup,
                    measured: spec.step_measured.unwrap_or(SWEEP_MEASURED),
                };
                if over_budget(times) {
                    return Ok(SearchStatus::BudgetSpent);
                }
                n += 1;
                progress.step_started(n, StepKind::Sweep, None, secs(times));
                let ran = run_step(
                    &cx,
                    n,
                    StepKind::Sweep,
                    None,
                    Some(connections),
                    times,
                    stop,
                )?;
                record.requests_total += ran.requests_sent;
                progress.step_ended(&ran.step);
                record.steps.push(ran.step);
                write(&spec.dir, &record)?;
                if ran.interrupted {
                    return Ok(SearchStatus::Interrupted);
                }
            }
            Ok(SearchStatus::Complete)
        })()
    });
    let outcome = sweep.unwrap_or_else(|| {
        (|| -> Result<SearchStatus, CapacityError> {
            let start = match spec.start_rate {
                Some(r) => r,
                None => {
                    let times = StepTimes {
                        warmup: spec.step_warmup,
                        measured: spec.step_measured.unwrap_or(PROBE_MEASURED),
                    };
                    progress.step_started(0, StepKind::Probe, None, secs(times));
                    let probe = run_step(
                        &cx,
                        0,
                        StepKind::Probe,
                        None,
                        Some(spec.probe_connections),
                        times,
                        stop,
                    )?;
                    record.requests_total += probe.requests_sent;
                    progress.step_ended(&probe.step);
                    let served = probe.step.throughput;
                    record.steps.push(probe.step);
                    write(&spec.dir, &record)?;
                    if probe.interrupted {
                        return Ok(SearchStatus::Interrupted);
                    }
                    if served <= 0.0 {
                        return Err(CapacityError::Refused(format!(
                            "the probe ({} connections) got no answer: nothing to search from",
                            spec.probe_connections
                        )));
                    }
                    // one request at a time: its time with nothing queued beside it
                    let times = StepTimes {
                        warmup: spec.step_warmup.min(ALONE_WARMUP),
                        measured: ALONE_MEASURED,
                    };
                    progress.step_started(0, StepKind::Alone, None, secs(times));
                    let alone = run_step(&cx, 0, StepKind::Alone, None, Some(1), times, stop)?;
                    record.requests_total += alone.requests_sent;
                    progress.step_ended(&alone.step);
                    record.steps.push(alone.step);
                    write(&spec.dir, &record)?;
                    if alone.interrupted {
                        return Ok(SearchStatus::Interrupted);
                    }
                    served * START_SHARE
                }
            };
            let mut search = Search::new(spec.search.clone(), start);
            loop {
                let (rate, kind) = match search.next() {
                    Next::Done(status) => return Ok(status),
                    Next::Run { rate, kind } => (rate, kind),
                };
                let times = StepTimes {
                    warmup: spec.step_warmup,
                    measured: measured_for(rate),
                };
                let mut kind = kind;
                let mut repeats = 0;
                let kept = loop {
                    if over_budget(times) {
                        return Ok(SearchStatus::BudgetSpent);
                    }
                    n += 1;
                    progress.step_started(n, kind, Some(rate), secs(times));
                    let ran = run_step(&cx, n, kind, Some(rate), None, times, stop)?;
                    record.requests_total += ran.requests_sent;
                    progress.step_ended(&ran.step);
                    let (kept, starved) = (ran.step.kept, ran.step.starved);
                    record.steps.push(ran.step);
                    write(&spec.dir, &record)?;
                    if ran.interrupted {
                        return Ok(SearchStatus::Interrupted);
                    }
                    // kiln's own starvation makes latency look worse, never better: only a
                    // broken verdict is doubted
                    if kept || !starved || repeats == STARVED_REPEATS {
                        break kept;
                    }
                    if let Some(doubted) = record.steps.last_mut() {
                        doubted.believed = false;
                    }
                    repeats += 1;
                    kind = StepKind::Repeat;
                };
                search.observe(rate, kept);
            }
        })()
    });
    let status = match outcome {
        Ok(status) => status,
        Err(e) if record.steps.is_empty() || e.is_refused() => {
            record.status = SearchStatus::Failed;
            record.status_reason = Some(e.to_string());
            let _ = write(&spec.dir, &record);
            return Err(e);
        }
        Err(e) => {
            record.status_reason = Some(e.to_string());
            SearchStatus::Failed
        }
    };
    finish(
        &mut record,
        status,
        started.elapsed(),
        cores_available(spec.target.as_ref()),
    );
    write(&spec.dir, &record)?;
    write_page(&spec.dir, &record)?;
    Ok(record)
}

fn secs(times: StepTimes) -> f64 {
    (times.warmup + times.measured).as_secs_f64()
}

/// The CPUs the target can use: the host's, or fewer where it is pinned (taskset, a cpuset).
fn cores_available(target: Option<&TargetProcesses>) -> f64 {
    let host = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = target.and_then(|t| kiln_sample::ProcFs::default().cpus_allowed(t.main_pid()));
    pinned.map_or(host, |p| p.min(host).max(1)) as f64
}

/// The search's result from its steps.
fn finish(record: &mut CapacityRecord, status: SearchStatus, elapsed: Duration, cores: f64) {
    record.status = status;
    record.ended = Some(kiln_record::now_rfc3339());
    record.elapsed_s = elapsed.as_secs_f64();
    if record.mode == SearchMode::Connections {
        // a sweep's capacity: the most answered at a level that kept every SLO
        record.max_rate = record
            .steps
            .iter()
            .filter(|s| s.kept)
            .map(|s| s.throughput)
            .reduce(f64::max);
        let levels: Vec<(f64, f64)> = record
            .steps
            .iter()
            .filter_map(|s| Some((s.connections? as f64, s.throughput)))
            .collect();
        record.usl = usl::fit(&levels);
        record.knee = knee::sweep_knee(&record.steps, record.usl.as_ref(), cores);
        record.concurrency_at_knee = record.knee.as_ref().map(|k| k.concurrency);
        return;
    }
    let mut search = Search::new(SearchSettings::default(), 1.0);
    for s in record.steps.iter().filter(|s| s.believed) {
        if let Some(rate) = s.offered_rate {
            search.observe(rate, s.kept);
        }
    }
    record.max_rate = search.highest_kept();
    record.first_broken_rate = search.lowest_broken();
    record.broken_by = record
        .edge_step()
        .map(|s| s.broken.clone())
        .unwrap_or_default();
    record.knee = knee::knee(&record.steps, cores);
    record.concurrency_at_knee = record.knee.as_ref().map(|k| k.concurrency);
}

/// The search's page, `report.html` beside `capacity.json`.
pub fn write_page(dir: &Path, record: &CapacityRecord) -> Result<(), CapacityError> {
    let path = dir.join(REPORT_FILE);
    std::fs::write(&path, kiln_report::render_capacity(record))
        .map_err(|source| CapacityError::Write { path, source })
}

/// Makes the capacity directory, refusing one that holds a search already.
fn claim(dir: &Path) -> Result<(), CapacityError> {
    std::fs::create_dir_all(dir).map_err(|source| CapacityError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    if dir.join(CAPACITY_FILE).exists() || dir.join("steps").exists() {
        return Err(CapacityError::Refused(format!(
            "{} holds a capacity search already: give another --out",
            dir.display()
        )));
    }
    Ok(())
}

/// Writes `capacity.json` whole, through a temporary file (a reader never sees half).
fn write(dir: &Path, record: &CapacityRecord) -> Result<(), CapacityError> {
    let path = dir.join(CAPACITY_FILE);
    let tmp = dir.join(format!(".{CAPACITY_FILE}.tmp"));
    let json = serde_json::to_vec_pretty(record).expect("a capacity record serializes");
    std::fs::write(&tmp, json)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| CapacityError::Write { path, source })
}
