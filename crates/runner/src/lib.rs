//! kiln's run orchestration, shared by `kiln run` and `kiln demo`: the load's phases with the
//! sampler, the profiler and the OTLP receiver beside them, written into one run directory
//! with its derived parts (latency log, DB-call analysis, findings). It prints nothing: the
//! binary shows progress through [`Progress`] and reads the [`RunOutcome`].

pub mod barrier;
pub mod child;
pub mod dir;
pub mod error;
pub mod execute;
pub mod http_barrier;
pub mod jvm_profile;
pub mod load_flags;
pub mod profile_parts;
pub mod profile_session;
pub mod query_parts;
pub mod runtime_watch;
pub mod spawn;
pub mod warmup;

pub use dir::{create_run_dir, or_fail};
pub use error::{error_text, Doing, RunnerError};
pub use execute::{execute, OtlpSpec, Progress, RunOutcome, RunSpec, Silent};
pub use jvm_profile::JvmProfiler;
pub use kiln_sample::TargetProcesses;
pub use query_parts::QuerySettings;
