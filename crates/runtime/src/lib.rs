//! kiln's runtime insights: what the target's runtime did, second by second, on the same
//! clock as the load and the sampler. Today the JVM's default layer: GC pauses (each with its
//! start and length), safepoints, JIT compilation, threads and heap, read from hsperfdata (no
//! attach, no flags, no agent); other runtimes are detected and named with what kiln cannot
//! yet read from them.
//!
//! Readers of a run record use the types here and nothing else of this crate.

pub mod as_target;
pub mod async_profiler;
pub mod attach;
mod debug_http;
pub mod detect;
mod error;
pub mod expvar;
pub mod go;
pub mod goroutines;
pub mod gotrace;
pub mod hsperf;
pub mod jfr;
pub mod jvm;
pub mod jvm_threads;
pub mod pyspy;
pub mod summary;
pub mod threads;
pub mod watch;

use serde::{Deserialize, Serialize};

pub use detect::{detect, Runtime};
pub use error::RuntimeError;

/// The part kind (and file stem) of the per-second runtime records in a run directory.
pub const RUNTIME_SECONDS_PART: &str = "runtime-seconds";
/// The part holding what runtime was found and what could be read ([`RuntimeInfo`]).
pub const RUNTIME_PART: &str = "runtime";
pub const RUNTIME_FILE: &str = "runtime.json";

/// What kiln found running in the watched process and what it could read of it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    pub pid: i32,
    /// `jvm`, `go`, `python`, `node` or `native`.
    pub runtime: String,
    /// e.g. `OpenJDK 64-Bit Server VM 17.0.15+6-Debian-1deb12u1`.
    #[serde(default)]
    pub version: Option<String>,
    /// e.g. the JVM's collector (`G1`) and its command line's main class.
    #[serde(default)]
    pub details: Vec<(String, String)>,
    /// What was read and from where (`GC pauses, safepoints, JIT, threads, heap: hsperfdata
    /// /tmp/hsperfdata_app/4242`).
    #[serde(default)]
    pub read: Vec<String>,
    /// What could not be read, each with why (permissions, a flag that turns it off, not
    /// built yet for this runtime): never silently nothing.
    #[serde(default)]
    pub not_read: Vec<String>,
    /// The JVM's count of throwables created, once a second, from a JFR recording
    /// (`--runtime deep`): read at the end of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throwable_counts: Vec<jfr::ThrowableCount>,
    /// Where threads waited for locks (`jfr::LOCK_THRESHOLD_MS` or longer), per place and
    /// second, from the same recording.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lock_waits: Vec<jfr::LockWaitSite>,
    /// A Go target's mark assist from execution traces (`--runtime deep` with pprof).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go_trace: Option<gotrace::GoTraceRecord>,
}

/// One second of the runtime's own figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeSecond {
    /// Seconds since watching started, at the end of the interval.
    pub second: u32,
    /// Wall-clock time at the end of the interval (ms since the Unix epoch), to align with
    /// the load's and the sampler's seconds.
    pub unix_ms: u64,
    pub interval_s: f64,
    #[serde(default)]
    pub jvm: Option<JvmSecond>,
    /// A thread dump taken in this second (`--runtime deep`; one every few seconds): a JVM's,
    /// or a Go target's goroutine dump in the same terms (goroutines for threads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_dump: Option<threads::ThreadDump>,
    /// A Python target's py-spy dump (`--runtime deep`; one every few seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<pyspy::PyDump>,
    /// A Go target's GC cycles in this second (gctrace, when kiln started it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go: Option<go::GoSecond>,
}

/// The JVM over one interval (from hsperfdata). Counts are over the interval; `None`: the
/// counter is not in this JVM (names differ between JDK 17, 21 and 25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JvmSecond {
    /// Stop-the-world GC pauses per collector (`G1 young collection pauses`, ...): exact
    /// counts and time from the JVM's counters.
    pub gc: Vec<CollectorSecond>,
    /// The pauses one by one, as seen by polling (two pauses of one collector between two
    /// polls show as one: `gc` stays exact, this list may be shorter).
    pub pauses: Vec<GcPause>,
    pub gc_pauses: u64,
    pub gc_pause_ms: f64,
    pub safepoints: Option<u64>,
    /// Time the application was stopped at safepoints (GC or not), and the part of it spent
    /// bringing threads to a stop.
    pub safepoint_ms: Option<f64>,
    pub safepoint_sync_ms: Option<f64>,
    pub jit_compiles: Option<u64>,
    pub jit_ms: Option<f64>,
    pub jit_bailouts: Option<u64>,
    pub classes_loaded: Option<u64>,
    pub threads_live: Option<u64>,
    pub threads_started: Option<u64>,
    /// Java heap used and committed at the end of the interval.
    pub heap_used_kib: Option<u64>,
    pub heap_committed_kib: Option<u64>,
    pub metaspace_used_kib: Option<u64>,
    /// Monitor enters that had to wait (JDK 21 and older; removed in 25).
    pub contended_locks: Option<u64>,
}

/// One collector's pauses over one interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectorSecond {
    pub name: String,
    pub pauses: u64,
    pub pause_ms: f64,
}

/// One GC pause.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GcPause {
    pub collector: String,
    /// When it began: wall clock (ms since the Unix epoch, good to a few ms) and the JVM's own
    /// uptime clock (ms, exact: the clock of `-Xlog:gc`'s `uptime` decorations).
    pub start_unix_ms: f64,
    pub start_uptime_ms: f64,
    pub ms: f64,
}
