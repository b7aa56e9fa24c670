//! `run.json`: what ran, when, how it ended, and which part files hold the results.

use serde::{Deserialize, Serialize};

use crate::schema::plan::PlanRecord;

/// The manifest schema this kiln writes. Readers accept this version and older.
/// 2: the plan is typed ([`PlanRecord`]): a load plan must read whole, and an empty
/// `thresholds` list is left out. Version 1 records read as they are.
pub const SCHEMA_VERSION: u32 = 2;

/// How a run ended. `Running` on disk means the process died without saying: readers treat
/// it as interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Complete,
    Interrupted,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }
}

/// One part file of the run, relative to the run directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartRef {
    /// What the part holds, e.g. `load-seconds`.
    pub kind: String,
    pub path: String,
    pub schema_version: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunManifest {
    pub schema_version: u32,
    pub kiln_version: String,
    pub id: String,
    pub name: String,
    /// The command line as typed, for humans reading the record later.
    #[serde(default)]
    pub command: Vec<String>,
    /// The plan as kiln understood it (resolved flags or YAML).
    pub plan: PlanRecord,
    /// RFC 3339 UTC timestamps.
    pub started_at: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    pub status: RunStatus,
    /// Why a run is interrupted or failed, in one line.
    #[serde(default)]
    pub status_reason: Option<String>,
    #[serde(default)]
    pub parts: Vec<PartRef>,
    /// What a flag asked for and the run could not record, by flag, with why (`--profile`:
    /// "perf may not watch other processes here ..."): readers say this, not "add --profile".
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub not_recorded: std::collections::BTreeMap<String, String>,
}

impl RunManifest {
    pub fn part(&self, kind: &str) -> Option<&PartRef> {
        self.parts.iter().find(|p| p.kind == kind)
    }

    /// Why a part a flag records is missing: what went wrong when the flag was given, else
    /// `missing` and the flag that would record it ("the run was not profiled (add
    /// --profile)").
    pub fn why_not_recorded(&self, flag: &str, missing: &str) -> String {
        match self.not_recorded.get(flag) {
            Some(why) => format!(
                "{flag} was given and recorded nothing: {}",
                crate::text::safe_text(why)
            ),
            None => format!("{missing} (add {flag})"),
        }
    }
}
