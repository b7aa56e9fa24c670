//! `profile.json` (and `offcpu.json`): a profile's summary and how it was taken, as
//! kiln-profile writes it and the summary, report and findings read it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One function's share of the samples: where it was the leaf (self) and where it was on
/// the stack at all (total, counted once per sample even when it recurses).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionShare {
    pub name: String,
    pub self_samples: u64,
    pub total_samples: u64,
    pub self_pct: f64,
    pub total_pct: f64,
}

/// The short summary printed in the terminal and in `--json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileSummary {
    pub samples: u64,
    pub distinct_stacks: usize,
    /// Percent of samples whose leaf frame is in the kernel.
    pub kernel_pct: f64,
    pub top_self: Vec<FunctionShare>,
    pub top_total: Vec<FunctionShare>,
    /// An off-CPU profile's switches by where the code blocked: the first frame outside the
    /// kernel from the leaf (its self time is all `schedule`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_in: Vec<FunctionShare>,
    /// An allocation profile's bytes by the method that allocated them: the frame above
    /// the leaf (the leaf is the allocated type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocated_in: Vec<FunctionShare>,
    /// async-profiler's samples whose Java stack it could not walk, by its reason
    /// (`not_walkable_Java`): time no Java method's share holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unwalked: Vec<FunctionShare>,
    /// A wall-clock profile's share (percent) of threads waiting for work to come (an idle
    /// pool's, a selector's), which its lists leave out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_work_pct: Option<f64>,
}

/// The formats `import` recognizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceFormat {
    Pprof,
    Collapsed,
    PerfScript,
    Speedscope,
}

/// What to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    /// On-CPU: the `cpu-clock` software event at a fixed frequency (works without hardware
    /// counters, e.g. in VMs).
    Cpu,
    /// Off-CPU, counted: every `context-switches` software event, with the stack the thread
    /// switched out from (where it blocked or was preempted).
    Cswitch,
}

impl Event {
    pub fn perf_name(self) -> &'static str {
        match self {
            Event::Cpu => "cpu-clock",
            Event::Cswitch => "context-switches",
        }
    }

    /// What one sample of this event stands for, for titles and summaries.
    pub fn count_name(self) -> &'static str {
        match self {
            Event::Cpu => "samples",
            Event::Cswitch => "switches",
        }
    }
}

/// How perf walks the stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallGraph {
    /// Frame pointers: cheap, and the only way through JIT code (Java with
    /// -XX:+PreserveFramePointer, Node, Python -X perf); loses callers in code built without
    /// them (most distributions' C libraries, Rust release builds).
    Fp,
    /// DWARF unwinding of a copy of each sample's user stack: whole stacks for native code
    /// built without frame pointers, at a larger perf.data and a slower perf script.
    Dwarf,
}

/// What kiln found and did about a process's JIT frames.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JitRecord {
    /// Done by kiln (e.g. "wrote /tmp/perf-42.map with jcmd Compiler.perfmap").
    pub done: Vec<String>,
    /// What the user should add for better stacks, with the exact flag.
    pub advice: Vec<String>,
}

/// Where an imported profile came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportSource {
    pub file: PathBuf,
    pub format: SourceFormat,
    /// For pprof: which sample value the counts are.
    pub value: Option<String>,
    /// Lines of collapsed text that were not `stack count` and were skipped.
    pub ignored_lines: usize,
    /// The samples behind the counts when each weighs more than one (pprof's values,
    /// perf script's periods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
}

/// A count name split into what is counted and its unit, as pprof writes a value
/// (`inuse_space/bytes`, `cpu-clock/nanoseconds`); `samples`, `switches` and `x/count` have
/// none.
pub fn count_unit(count_name: &str) -> (&str, Option<&str>) {
    match count_name.rsplit_once('/') {
        Some((name, "count" | "")) => (name, None),
        Some((name, unit)) => (name, Some(unit)),
        None => (count_name, None),
    }
}

fn samples() -> String {
    "samples".into()
}

/// `profile.json`: the summary, and how the profile was taken (a perf profile) or where it
/// came from (an import).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileRecord {
    pub summary: ProfileSummary,
    /// What one sample stands for (`samples`, `switches`, a pprof value's name and unit,
    /// see [`count_unit`]).
    #[serde(default = "samples")]
    pub count_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<i32>,
    /// From perf's start to the stop (or the target's exit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// From the first sample to the last: the window perf really saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_hz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_graph: Option<CallGraph>,
    /// perf record's CPU while sampling, percent of one core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf_cpu_pct: Option<f64>,
    /// Whether the target exited before the end (what was taken until then is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_exited: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jit: Option<JitRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ImportSource>,
    /// Which profiler took it (`perf`, `async-profiler 4.1`); None for an import or an older
    /// record (perf then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiler: Option<String>,
    /// Why the better profiler for this target did not take it (a JVM profiled by perf:
    /// async-profiler not installed, attach refused ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiler_note: Option<String>,
}

impl ProfileRecord {
    /// What one of `requests` cost in this profile's count (an allocation profile: the bytes
    /// a request allocated); None without requests. The summary and the findings read it here.
    pub fn per_request(&self, requests: u64) -> Option<f64> {
        (requests > 0).then(|| self.summary.samples as f64 / requests as f64)
    }

    /// A record of `summary` alone, counting `count_name`.
    pub fn new(summary: ProfileSummary, count_name: &str) -> Self {
        Self {
            summary,
            count_name: count_name.to_string(),
            event: None,
            pids: Vec::new(),
            duration_s: None,
            sampled_s: None,
            frequency_hz: None,
            call_graph: None,
            perf_cpu_pct: None,
            target_exited: None,
            jit: None,
            source: None,
            profiler: None,
            profiler_note: None,
        }
    }
}
