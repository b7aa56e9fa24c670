//! `capacity.json`: a `kiln capacity` search as kiln-capacity writes it and every reader
//! (the summary, the report, compare) reads it. A capacity directory holds this file and
//! `steps/`, one run directory per step of the search, each a whole run record.

use serde::{Deserialize, Serialize};

/// The file at the root of a capacity directory.
pub const CAPACITY_FILE: &str = "capacity.json";
/// The record's version: readers refuse a newer one instead of misreading it.
pub const CAPACITY_VERSION: u32 = 1;

/// How the search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStatus {
    /// Still searching (a record read mid-search, or one whose writer was killed).
    Running,
    /// The edge found to the precision asked.
    Complete,
    /// The time budget ran out first: the interval is as far as it got.
    BudgetSpent,
    /// Every step up to `--max-rate` kept the SLOs: the capacity is above it.
    AboveMaxRate,
    /// Not even the lowest rate tried kept them.
    NothingKept,
    /// Stopped by a signal; the steps so far are kept and still report.
    Interrupted,
    /// A step could not run (the target went away): `status_reason` says why.
    Failed,
}

impl SearchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Complete => "complete",
            Self::BudgetSpent => "budget_spent",
            Self::AboveMaxRate => "above_max_rate",
            Self::NothingKept => "nothing_kept",
            Self::Interrupted => "interrupted",
            Self::Failed => "failed",
        }
    }
}

/// Why a step was run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Closed model, as many connections as asked: the most the target serves at all, which
    /// the open-model search starts from.
    Probe,
    /// Closed model, one connection: a request's time with nothing queued beside it (the
    /// knee's Little's law reads it).
    Alone,
    /// An open-model rate of the search (growth or bisection).
    Search,
    /// The edge's highest kept rate run again: an edge held once is not believed.
    Confirm,
    /// A step repeated because kiln itself was starved of CPU while it ran.
    Repeat,
    /// A level of a closed-model sweep (`--sweep`): this many connections back to back.
    Sweep,
}

/// An SLO a step broke, with what was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BrokenSlo {
    /// As given, e.g. `p99<50ms`.
    pub slo: String,
    /// What the step measured, as shown (e.g. `212 ms`, `3.10%`).
    pub actual: String,
}

/// One step of the search: one rate, judged against every SLO.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapacityStep {
    /// 1, 2, ... in the order run (the probe is 0; one request alone, when measured, is 0
    /// too).
    pub n: u32,
    pub kind: StepKind,
    /// Open model: the arrivals per second offered. The probe: none (closed model).
    pub offered_rate: Option<f64>,
    /// The probe's connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<usize>,
    /// The measured part's length (warm-up left out), seconds.
    pub duration_s: f64,
    /// Requests that ended in the measured part.
    pub requests: u64,
    /// Answered requests per second.
    pub throughput: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// The mean of the fastest 99%: a typical time that a busy host's few stalls do not pull
    /// up (the knee reads a request's time alone from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_fastest_ms: Option<f64>,
    /// Open model: the mean from the actual send (the target's time as the client saw it,
    /// without the wait for a connection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_mean_ms: Option<f64>,
    pub failed_ratio: f64,
    /// Requests in flight at the target on average (Little's law: throughput x mean time).
    pub concurrency: f64,
    /// The watched target's CPU, cores (none when nothing was watched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cores: Option<f64>,
    /// Time its threads waited for a CPU, runnable but not running, cores (the kernel's
    /// schedstat): what it wanted beside what it got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_wait_cores: Option<f64>,
    /// Its busiest thread's CPU, cores (a single-threaded server is bound at one), and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hottest_thread: Option<(String, f64)>,
    /// Whether every SLO held.
    pub kept: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken: Vec<BrokenSlo>,
    /// The step ended before its time because an SLO could no longer hold: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_early: Option<String>,
    /// kiln itself waited for a CPU in its seconds: its latency is not believed, the step is
    /// run again.
    #[serde(default)]
    pub starved: bool,
    /// Whether its verdict counts: a step broken while kiln was starved and then run again
    /// does not (its repeat's does).
    #[serde(default = "believed_by_default")]
    pub believed: bool,
    /// Too few requests for the SLO's percentile to be judged well (fewer than ten beyond it).
    #[serde(default)]
    pub few_requests: bool,
    /// The step's run directory, relative to the capacity directory.
    pub dir: String,
    /// The findings of the step's run, their rule and title (most severe first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<StepFinding>,
}

fn believed_by_default() -> bool {
    true
}

/// A finding of a step's run, as named in the capacity record (the run's `findings.json` has
/// the rest).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepFinding {
    pub rule: String,
    pub severity: super::Severity,
    pub title: String,
}

/// What stops the service at its capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// Its CPU: the step past the edge had it saturated.
    Cpu,
    /// A number of requests served at once (workers, threads, a pool), the CPU idle.
    Concurrency,
    /// Not told apart: the target's CPU was not watched.
    Unknown,
    /// A serial part (a sweep's USL σ): throughput levels off however many come at once.
    Contention,
    /// Each request paying for the others in flight (a sweep's USL κ): throughput falls past
    /// a peak.
    Coherency,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Concurrency => "concurrency",
            Self::Unknown => "unknown",
            Self::Contention => "contention",
            Self::Coherency => "coherency",
        }
    }
}

/// The knee: what the steps say about why throughput stops where it does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    pub limit: Limit,
    /// The most answered per second in any step.
    pub throughput_max: f64,
    /// A request's time alone: the mean at the lowest rate run (ms).
    pub alone_ms: f64,
    /// Requests the service holds at once at its peak (Little's law: `throughput_max` x
    /// `alone_ms`): the workers, threads or pool that serve them.
    pub concurrency: f64,
    /// The watched target's CPU at its busiest step, cores, and the cores it could use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores_available: Option<f64>,
    /// The knee in a sentence, with its numbers.
    pub text: String,
    /// What to try.
    pub fix: String,
}

/// What a search varies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// The open-model rate, searched for the highest one kept.
    #[default]
    Rate,
    /// Closed-model connections, each level given (`--sweep`).
    Connections,
}

/// The Universal Scalability Law fitted to a sweep's throughput by connections:
/// `X(N) = λN / (1 + σ(N-1) + κN(N-1))`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UslFit {
    /// Throughput of one alone, per second.
    pub lambda: f64,
    /// Contention: the serial share.
    pub sigma: f64,
    /// Coherency: what each pays for every other.
    pub kappa: f64,
    /// How much of the throughput's spread the curve explains.
    pub r_squared: f64,
    /// Where throughput peaks, `sqrt((1-σ)/κ)`, and the peak (none without coherency).
    pub peak_concurrency: Option<f64>,
    pub peak_throughput: Option<f64>,
    pub points: usize,
}

/// A whole search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapacityRecord {
    pub version: u32,
    #[serde(default)]
    pub mode: SearchMode,
    pub name: String,
    /// The URL or plan file loaded.
    pub target: String,
    pub slos: Vec<String>,
    /// The interval the search narrows to, as a share of the rate (0.05: within 5%).
    pub precision: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_asked: Option<f64>,
    pub status: SearchStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    pub started: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// Seconds from the first step's start to the last one's end.
    pub elapsed_s: f64,
    /// The highest rate that kept every SLO (every time it ran).
    pub max_rate: Option<f64>,
    /// The lowest rate that broke one: the capacity is in `[max_rate, first_broken_rate)`.
    pub first_broken_rate: Option<f64>,
    /// What broke there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken_by: Vec<BrokenSlo>,
    /// Requests in flight at the target at the highest kept rate (Little's law).
    pub concurrency_at_knee: Option<f64>,
    pub knee: Option<Knee>,
    /// A sweep's scalability curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usl: Option<UslFit>,
    /// Requests sent over the whole search, every step's warm-up included.
    pub requests_total: u64,
    pub steps: Vec<CapacityStep>,
}

impl CapacityRecord {
    /// Reads a capacity directory's record (`capacity.json`), refusing a newer version.
    pub fn read(dir: &std::path::Path) -> Result<Self, String> {
        let path = dir.join(CAPACITY_FILE);
        let bytes = crate::input::read_regular(&path, 64 << 20)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let record: Self = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not a capacity record: {e}", path.display()))?;
        if record.version > CAPACITY_VERSION {
            return Err(format!(
                "{} is version {} of the capacity record; this kiln reads up to \
                 {CAPACITY_VERSION}",
                path.display(),
                record.version
            ));
        }
        Ok(record)
    }

    /// Whether `dir` holds a capacity search (not a run).
    pub fn is_in(dir: &std::path::Path) -> bool {
        dir.join(CAPACITY_FILE).is_file()
    }

    /// The step that ran at `rate`'s edge: the lowest broken one (its run holds the
    /// findings of what stops the service).
    pub fn edge_step(&self) -> Option<&CapacityStep> {
        let rate = self.first_broken_rate?;
        self.steps
            .iter()
            .rev()
            .find(|s| s.believed && !s.kept && s.offered_rate == Some(rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A damaged, foreign or newer capacity.json is a clear error, never a panic.
    #[test]
    fn a_record_that_is_not_one_is_said_so() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!CapacityRecord::is_in(dir.path()));
        let read = |text: &str| {
            std::fs::write(dir.path().join(CAPACITY_FILE), text).unwrap();
            CapacityRecord::read(dir.path()).unwrap_err()
        };
        assert!(read("{not json").contains("is not a capacity record"));
        assert!(read("[1, 2]").contains("is not a capacity record"));
        let newer = read(
            r#"{"version": 99, "name": "x", "target": "t", "slos": [], "precision": 0.05,
            "status": "complete", "started": "", "elapsed_s": 1, "max_rate": null,
            "first_broken_rate": null, "concurrency_at_knee": null, "knee": null,
            "requests_total": 0, "steps": []}"#,
        );
        assert!(
            newer.contains("version 99 of the capacity record"),
            "{newer}"
        );
        assert!(CapacityRecord::is_in(dir.path()));
    }
}
