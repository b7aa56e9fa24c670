//! `exports.json`: what each `--export` receiver was sent during the run, and what it never
//! got (a receiver that was down, slow or refused): the run never waits for one, so what was
//! lost is counted here and said at the end.

use serde::{Deserialize, Serialize};

/// The exports' part (`exports.json`).
pub const EXPORTS_PART: &str = "exports";
pub const EXPORTS_FILE: &str = "exports.json";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExportsRecord {
    pub exports: Vec<ExportRecord>,
}

/// One receiver's account.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExportRecord {
    /// `prometheus` (remote write 1.0) or `otlp` (OTLP/HTTP metrics).
    pub kind: String,
    /// The receiver's URL without its user and password.
    pub url: String,
    /// Classic `_bucket{le}` histograms instead of native ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub classic: bool,
    /// The seconds of the run that reached it (each a write the receiver accepted).
    pub seconds_sent: u64,
    /// The samples in them (a native histogram is one sample).
    pub samples_sent: u64,
    /// Seconds it never got: refused, given up after retries, pushed out of the queue while
    /// it was unreachable, or still queued when the run ended.
    pub seconds_dropped: u64,
    /// Writes tried again after a failure.
    pub retries: u64,
    /// The last failure, as the receiver or the connection said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
