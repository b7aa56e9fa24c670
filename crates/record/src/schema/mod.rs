//! The record's parts as types: each part's writer serializes these and every reader
//! deserializes them, so a field is named once and the compiler finds every use.

pub mod capacity;
pub mod export;
pub mod noise;
pub mod plan;
pub mod profile;
pub mod queries;

use serde::{Deserialize, Serialize};

/// How much a finding matters (the findings' and the DB analysis' alike); `--fail-on`
/// compares with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Low,
    Medium,
    High,
}

impl Severity {
    /// The severity as recorded, e.g. `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}
