//! kiln's run record: the directory every run writes and every report reads.
//!
//! A run directory holds `run.json` (the [`RunManifest`]) and the part files it lists. Parts
//! stream to disk while the run goes, so a run that is interrupted still reports. This crate
//! must never depend on how a part was produced: it only defines, writes, reads and merges.

pub mod clock;
pub mod descriptors;
mod error;
pub mod grpc;
mod hedge;
mod histogram;
pub mod input;
mod load;
mod manifest;
pub mod parts;
mod run;
mod run_dir;
pub mod schema;
pub mod seconds;
pub mod text;
pub mod wire;

pub use error::RecordError;
pub use hedge::{HedgeSecond, TargetHedge};
pub use histogram::{LatencyHistogram, LatencyStats, MAX_LATENCY_US};
pub use load::{
    record_warnings, write_hlog, write_latency_log, ErrorKind, LoadRecordLine, NameSecond,
    PhaseEnd, PhaseSummary, SecondRecord, HLOG_PART, LOAD_SECONDS_PART,
};
pub use manifest::{PartRef, RunManifest, RunStatus, SCHEMA_VERSION};
pub use run::{LoadPoint, Run};
pub use run_dir::{
    default_run_dir_name, now_rfc3339, JsonLinesWriter, RunDir, RunLocation, MANIFEST_FILE,
};
pub use seconds::{second_start_ms, wall_second_ending, Span, SECOND_MS};
