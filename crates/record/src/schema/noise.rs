//! The host's noise as kiln's own process felt it, one line a second (`noise.jsonl`): how long
//! kiln's threads waited for a CPU (the scheduler's run delay, `/proc/self/task/*/schedstat`)
//! and how late a sleeping probe woke past its deadline (as cyclictest measures). Recorded for
//! every run, watched or not: a second in which kiln itself waited is a second whose latencies
//! the target may not have made.

use serde::{Deserialize, Serialize};

/// The part's kind and file.
pub const NOISE_PART: &str = "host-noise";
pub const NOISE_FILE: &str = "noise.jsonl";

/// A second in which kiln's probe woke this late or later is one in which the generator was
/// starved: requests due in it left late.
pub const STARVED_MS: f64 = 20.0;

/// One second of kiln's own scheduling.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NoiseSecond {
    /// The end of the second, ms since the Unix epoch.
    pub unix_ms: u64,
    /// Its length (the last one of a run may be shorter).
    pub interval_s: f64,
    /// The probe's latest wake-up past its deadline in the second (ms): how late kiln got a
    /// CPU at worst.
    pub probe_late_max_ms: f64,
    /// How many times the probe woke.
    pub probe_wakeups: u32,
    /// All of kiln's threads' time waiting on a run queue in the second, summed (ms); none
    /// when the kernel keeps no schedstat.
    pub wait_total_ms: Option<f64>,
    /// The thread that waited longest in the second (its waits summed, ms), its name, and how
    /// many times it was put on a CPU (its mean wait is the one over the other).
    pub wait_max_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub wait_max_thread: String,
    #[serde(default)]
    pub wait_max_runs: u64,
}

impl NoiseSecond {
    /// Whether kiln itself was starved of a CPU in this second.
    pub fn starved(&self) -> bool {
        self.probe_late_max_ms >= STARVED_MS
    }

    /// The mean wait of the thread that waited longest, per time it was put on a CPU (ms).
    pub fn wait_max_mean_ms(&self) -> Option<f64> {
        Some(self.wait_max_ms? / self.wait_max_runs.max(1) as f64)
    }
}
