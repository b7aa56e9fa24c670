//! `run.json`'s plan: what a run was asked to do, as kiln understood it. The load's model,
//! stages and shard are the engine's own types (pure data, defined here so that every reader
//! of a record shares them).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One stage of an open-model rate ramp: go linearly to `target_rate` (requests per second)
/// over `duration`; a zero duration jumps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateStage {
    #[serde(with = "secs")]
    pub duration: Duration,
    pub target_rate: f64,
}

impl RateStage {
    /// A constant rate for `duration`: a jump to `rate`, then `rate` held (what `--rate` means).
    pub fn steady(rate: f64, duration: Duration) -> Vec<RateStage> {
        vec![
            RateStage {
                duration: Duration::ZERO,
                target_rate: rate,
            },
            RateStage {
                duration,
                target_rate: rate,
            },
        ]
    }
}

/// One stage of a closed model's VU ramp (k6's ramping-vus): go linearly to `target_vus`
/// over `duration`; a zero duration jumps. VU `g` (from 0) runs iterations while the count
/// is above `g`; one that falls out finishes its iteration first, as a user would.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VuStage {
    #[serde(with = "secs")]
    pub duration: Duration,
    pub target_vus: usize,
}

/// A duration recorded as seconds (a number), as every duration in the plan record is.
mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// How load is offered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum Model {
    /// N connections each sending back to back (after an optional think time): the load
    /// follows the target's speed, as in wrk, oha and JMeter thread groups.
    Closed {
        connections: usize,
        #[serde(with = "secs")]
        think_time: Duration,
        #[serde(with = "secs")]
        ramp_up: Duration,
        /// The VU count over time; `connections` is its most. Empty: all from the start (after
        /// `ramp_up`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stages: Vec<VuStage>,
    },
    /// Requests arrive on a schedule whatever the target does, as users do; latency counts
    /// from the scheduled time.
    Open {
        stages: Vec<RateStage>,
        /// Connections opened before the start.
        connections: usize,
        /// The most connections kiln opens to keep the schedule when the target falls behind.
        max_connections: usize,
        /// How arrivals are spaced at the scheduled rate.
        arrivals: Arrivals,
    },
}

impl Model {
    /// The load's shape in a line, as `kiln plan check` shows it: `closed, 4 VUs, 30s` or
    /// `open, 200/s over 30s, 10 to 100 VUs`.
    pub fn shape_text(&self, duration: Duration, iterations: Option<u64>) -> String {
        let d = humantime::format_duration(duration);
        match self {
            Model::Closed { stages, .. } if !stages.is_empty() => {
                let text = vu_stages_text(stages);
                match iterations {
                    Some(n) => format!("closed, {text}, {n} iterations (at most {d})"),
                    None => format!("closed, {text}"),
                }
            }
            Model::Closed {
                connections,
                ramp_up,
                ..
            } => {
                let ramp = if ramp_up.is_zero() {
                    String::new()
                } else {
                    format!(", ramp {}", humantime::format_duration(*ramp_up))
                };
                match iterations {
                    Some(n) => {
                        format!("closed, {connections} VUs{ramp}, {n} iterations (at most {d})")
                    }
                    None => format!("closed, {connections} VUs{ramp}, {d}"),
                }
            }
            Model::Open {
                stages,
                connections,
                max_connections,
                ..
            } => {
                let rates: Vec<String> = stages
                    .iter()
                    .map(|s| format!("{}/s", s.target_rate))
                    .collect();
                format!(
                    "open, {} over {d}, {connections} to {max_connections} VUs",
                    rates.join(" -> ")
                )
            }
        }
    }

    /// The connections the model opens, and (open model) the most it opens: what shards
    /// divide between them; a closed model's most is 0.
    pub fn connections(&self) -> (usize, usize) {
        match self {
            Model::Closed { connections, .. } => (*connections, 0),
            Model::Open {
                connections,
                max_connections,
                ..
            } => (*connections, *max_connections),
        }
    }

    /// Sets what [`Model::connections`] reads (`max` is ignored by a closed model).
    pub fn set_connections(&mut self, count: usize, max: usize) {
        match self {
            Model::Closed { connections, .. } => *connections = count,
            Model::Open {
                connections,
                max_connections,
                ..
            } => {
                *connections = count;
                *max_connections = max;
            }
        }
    }
}

/// How an open model spaces its arrivals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Arrivals {
    /// Evenly, 1/rate apart (wrk2, k6's constant-arrival-rate).
    #[default]
    Uniform,
    /// As independent users arrive: exponential gaps with mean 1/rate (a Poisson process,
    /// time-changed through the stages' rate), from a seed recorded with the plan so a run
    /// can be repeated exactly.
    Poisson { seed: u64 },
}

/// How the load threads' plain TCP connections send and receive (`--io`): readiness with
/// epoll and a system call per send and receive, or submitted in batches to an io_uring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoPath {
    #[default]
    Epoll,
    Uring,
}

impl IoPath {
    pub fn is_epoll(&self) -> bool {
        *self == IoPath::Epoll
    }
}

/// One of N load processes running one plan together (`--shard i/N`, i from 0, as a
/// Kubernetes Indexed Job's completion index). Open model: arrival j of the whole schedule is
/// shard `j mod N`'s, so the shards' arrivals together are exactly the single-process
/// schedule. Closed model: the connections are divided, the first `c mod N` shards taking one
/// more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// A `--shard` that is not `i/N` (or `auto/N`) with `0 <= i < N`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("--shard {text:?}: {why} (i/N with 0 <= i < N, or auto/N)")]
pub struct ShardError {
    pub text: String,
    pub why: &'static str,
}

impl Shard {
    /// `i/N`, or `auto/N` with the index from `JOB_COMPLETION_INDEX` (`job_index`).
    pub fn parse(text: &str, job_index: Option<&str>) -> Result<Self, ShardError> {
        let bad = |why: &'static str| ShardError {
            text: text.to_string(),
            why,
        };
        let (index, count) = text.split_once('/').ok_or_else(|| bad("no '/'"))?;
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| bad("N is not a whole number"))?;
        let index = match index.trim() {
            "auto" => job_index
                .ok_or_else(|| bad("auto needs JOB_COMPLETION_INDEX set"))?
                .trim()
                .parse()
                .map_err(|_| bad("JOB_COMPLETION_INDEX is not a whole number"))?,
            i => i.parse().map_err(|_| bad("i is not a whole number"))?,
        };
        if !(1..=100_000).contains(&count) || index >= count {
            return Err(bad("out of range"));
        }
        Ok(Self { index, count })
    }

    /// This shard's part of `total` (connections, VUs): a largest-remainder split.
    pub fn part_of(&self, total: usize) -> usize {
        let (n, i) = (self.count as usize, self.index as usize);
        total / n + usize::from(i < total % n)
    }

    /// Whether arrival `j` of the whole schedule is this shard's.
    pub fn takes(&self, j: u64) -> bool {
        j % u64::from(self.count) == u64::from(self.index)
    }
}

/// One reading of the kernel's clock discipline (kiln-sample reads it).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockSync {
    /// The kernel says the clock is synchronised (NTP, chrony, PTP ... have disciplined it).
    pub synchronized: bool,
    /// The kernel's bound on the clock's error (`maxerror`), microseconds.
    pub max_error_us: i64,
    /// Its estimate of the error (`esterror`), microseconds.
    pub est_error_us: i64,
}

impl ClockSync {
    /// Whether the clock can be trusted to within `bound_us` for starting together.
    pub fn trusted_within(&self, bound_us: i64) -> bool {
        self.synchronized && self.max_error_us <= bound_us
    }
}

/// A shard's clock: shards on several machines start and count seconds by their own clocks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardClock {
    pub host: String,
    /// None where the kernel refused the reading (seccomp).
    pub sync: Option<ClockSync>,
    /// Shard 0's clock minus this one's, measured by the HTTP barrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_to_shard0_ms: Option<f64>,
    /// The round trip of that measurement: the offset is known to within half of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_rtt_ms: Option<f64>,
}

/// Hedged requests as planned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HedgePlanRecord {
    /// The delay as typed (`p95`, `20ms`, ...).
    pub delay: String,
    /// Second copies per first copy at most (0.05 is 5%).
    pub cap: f64,
    /// The targets after the URL.
    pub replicas: Vec<String>,
}

/// A plan file's scenario in outline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioOutline {
    pub name: String,
    pub weight: u32,
    /// Its steps' names, in order.
    pub steps: Vec<String>,
}

/// A load run's plan (`kiln run`, `kiln demo`). Header values are left out: they may be
/// secrets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadPlanRecord {
    pub url: String,
    pub method: String,
    /// The headers' names.
    pub headers: Vec<String>,
    pub body_bytes: usize,
    pub workload: Model,
    pub duration_s: f64,
    pub timeout_s: f64,
    pub threads: usize,
    pub insecure: bool,
    pub http2: bool,
    /// `--http2-streams`: requests in flight at once on each HTTP/2 connection (1 when
    /// absent, as records before it were).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub http2_streams: usize,
    /// `--io`: epoll unless io_uring was asked for and used (records before it: epoll).
    #[serde(default, skip_serializing_if = "IoPath::is_epoll")]
    pub io: IoPath,
    /// Why io_uring was asked for and not used (the epoll path ran instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_uring_refused: Option<String>,
    pub shard: Option<Shard>,
    pub hedge: Option<HedgePlanRecord>,
    /// The thresholds as written (`p99<200ms`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<String>,
    /// `--start-at` as given, or the barrier's agreed start (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// The barrier directory shards met at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ShardClock>,
    /// The plan file a run came from, and its scenarios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_file: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<ScenarioOutline>,
    /// A merged record's shards (`kiln merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<MergedFrom>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// The shards a merged record was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedFrom {
    /// Shard records merged.
    pub shards: usize,
    /// Of how many (None when the records were not shards of one run).
    pub of: Option<u32>,
}

impl LoadPlanRecord {
    /// A GET of `url` with `workload` for `duration_s` on `threads` threads, nothing else set
    /// (for records built by hand: tests, benchmarks).
    pub fn new(url: &str, workload: Model, duration_s: f64, threads: usize) -> Self {
        Self {
            url: url.to_string(),
            method: "GET".into(),
            headers: Vec::new(),
            body_bytes: 0,
            workload,
            duration_s,
            timeout_s: 10.0,
            threads,
            insecure: false,
            http2: false,
            http2_streams: 1,
            io: IoPath::Epoll,
            io_uring_refused: None,
            shard: None,
            hedge: None,
            thresholds: Vec::new(),
            start_at: None,
            barrier: None,
            clock: None,
            plan_file: None,
            scenarios: Vec::new(),
            merged_from: None,
        }
    }

    /// Whether load came on a schedule (latency counts from the intended send).
    pub fn open_model(&self) -> bool {
        matches!(self.workload, Model::Open { .. })
    }
}

/// `run.json`'s plan. A plan with a `workload` is a load plan and must read as one: a
/// damaged or forged load plan is an error, not a plan without load.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PlanRecord {
    Load(Box<LoadPlanRecord>),
    /// A run without load (`kiln queries`, `kiln profile`, `kiln watch`): what its command
    /// was told, kept to be shown, never read.
    Other(serde_json::Value),
}

impl PlanRecord {
    /// The load's plan, for a load run.
    pub fn load(&self) -> Option<&LoadPlanRecord> {
        match self {
            PlanRecord::Load(plan) => Some(plan),
            PlanRecord::Other(_) => None,
        }
    }

    /// Whether load came on a schedule (latency counts from the intended send).
    pub fn open_model(&self) -> bool {
        self.load().is_some_and(LoadPlanRecord::open_model)
    }
}

impl<'de> Deserialize<'de> for PlanRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        if value.get("workload").is_none() {
            return Ok(PlanRecord::Other(value));
        }
        serde_json::from_value(value)
            .map(|load| PlanRecord::Load(Box::new(load)))
            .map_err(|e| serde::de::Error::custom(format!("a load plan that does not read: {e}")))
    }
}

impl From<LoadPlanRecord> for PlanRecord {
    fn from(plan: LoadPlanRecord) -> Self {
        PlanRecord::Load(Box::new(plan))
    }
}

impl LoadPlanRecord {
    /// The load in words, as the summary's Workload line says it: `open model, 500/s (30 s),
    /// 50 connections up front (max 1000), 2 threads`, and the I/O path when it is not the
    /// default (`, io_uring`, or why io_uring was asked for and not used).
    pub fn workload_text(&self) -> String {
        let io = match (&self.io, &self.io_uring_refused) {
            (IoPath::Uring, _) => ", io_uring".to_string(),
            (IoPath::Epoll, Some(why)) => format!(", epoll ({why})"),
            (IoPath::Epoll, None) => String::new(),
        };
        self.model_text() + &io
    }

    fn model_text(&self) -> String {
        let threads = self.threads;
        let secs = self.duration_s;
        // A plan file's VUs each hold a connection per origin; a URL run's are connections.
        let (units, think) = match self.scenarios.len() {
            0 if self.http2_streams > 1 => (
                format!("connections x {} HTTP/2 streams", self.http2_streams),
                None,
            ),
            0 => ("connections".to_string(), None),
            n => (
                "VUs".to_string(),
                Some(format!(
                    "{n} scenario{} (iterations)",
                    if n == 1 { "" } else { "s" }
                )),
            ),
        };
        match &self.workload {
            Model::Open {
                stages,
                connections,
                max_connections,
                arrivals,
            } => format!(
                "open model, {}{} ({secs} s), {connections} {units} up front (max {max_connections}), {threads} threads",
                rate_stages_text(stages),
                match arrivals {
                    Arrivals::Poisson { seed } => format!(", Poisson arrivals (seed {seed})"),
                    Arrivals::Uniform => String::new(),
                },
            ),
            Model::Closed {
                connections,
                think_time,
                ramp_up,
                stages,
            } => {
                let think =
                    think.unwrap_or_else(|| format!("think time {} s", think_time.as_secs_f64()));
                if stages.is_empty() {
                    format!(
                        "closed model, {connections} {units}, {think}, ramp-up {} s, {secs} s per run, {threads} threads",
                        ramp_up.as_secs_f64()
                    )
                } else {
                    format!(
                        "closed model, {} (at most {connections} {units}), {think}, {secs} s per run, {threads} threads",
                        vu_stages_text(stages)
                    )
                }
            }
        }
    }
}

/// `500/s` for a constant rate, `0->100/s in 30s, 100->2000/s in 60s` for ramps.
fn rate_stages_text(stages: &[RateStage]) -> String {
    let levels = stages
        .iter()
        .map(|s| (s.duration.as_secs_f64(), s.target_rate));
    stages_text(levels, "/s")
}

/// A closed model's VU stages in a line: `0->4 VUs in 2s, 4 VUs for 1s`.
pub fn vu_stages_text(stages: &[VuStage]) -> String {
    let levels = (stages.iter()).map(|s| (s.duration.as_secs_f64(), s.target_vus as f64));
    stages_text(levels, " VUs")
}

/// Stages as (seconds, level to reach) in a line.
fn stages_text(stages: impl Iterator<Item = (f64, f64)>, unit: &str) -> String {
    let mut parts = Vec::new();
    let mut level = 0.0;
    for (d, to) in stages {
        if d > 0.0 {
            parts.push(if to == level {
                format!("{to}{unit} for {d}s")
            } else {
                format!("{level}->{to}{unit} in {d}s")
            });
        }
        level = to;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(connections: usize) -> Model {
        Model::Closed {
            connections,
            think_time: Duration::ZERO,
            ramp_up: Duration::ZERO,
            stages: Vec::new(),
        }
    }

    #[test]
    fn the_workload_line_counts_http2_streams_only_when_there_are_several() {
        let mut plan = LoadPlanRecord::new("http://127.0.0.1:1/", closed(8), 10.0, 1);
        assert_eq!(
            plan.workload_text(),
            "closed model, 8 connections, think time 0 s, ramp-up 0 s, 10 s per run, 1 threads"
        );
        plan.http2_streams = 10;
        assert_eq!(
            plan.workload_text(),
            "closed model, 8 connections x 10 HTTP/2 streams, think time 0 s, ramp-up 0 s, \
             10 s per run, 1 threads"
        );
    }

    #[test]
    fn records_before_http2_streams_read_as_one_stream_and_one_is_not_written() {
        let plan = LoadPlanRecord::new("http://127.0.0.1:1/", closed(2), 1.0, 1);
        let mut json = serde_json::to_value(&plan).unwrap();
        assert!(json.get("http2_streams").is_none(), "{json}");
        json["http2_streams"] = 10.into();
        let read: LoadPlanRecord = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(read.http2_streams, 10);
        json.as_object_mut().unwrap().remove("http2_streams");
        let read: LoadPlanRecord = serde_json::from_value(json).unwrap();
        assert_eq!(read.http2_streams, 1);
    }
}
