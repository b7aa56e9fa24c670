//! Run directories: creating one, and marking it failed when an error ends the work in it.

use anyhow::{Context, Result};
use kiln_record::schema::plan::PlanRecord;
use kiln_record::{RunDir, RunLocation, RunStatus};

/// Creates a run directory: `out` when given, else a fresh one under `runs/` named for the
/// time and `name`. The command line is recorded with any URL password redacted.
pub fn create_run_dir(location: &RunLocation, name: &str, plan: PlanRecord) -> Result<RunDir> {
    let command: Vec<String> = std::env::args()
        .map(|a| kiln_load::plan::redact_password(&a))
        .collect();
    RunDir::create(location, name, command, plan).with_context(|| match location {
        RunLocation::Named(path) => format!("cannot create the run directory {}", path.display()),
        RunLocation::Fresh { parent, .. } => {
            format!("cannot create a run directory in {}", parent.display())
        }
    })
}

/// On an error after the run directory exists, marks the run `failed` with the reason, so
/// no record is left `running` by an error kiln saw (a full disk, an unwritable --html).
pub fn or_fail<T>(dir: &mut RunDir, result: Result<T>) -> Result<T> {
    if let Err(e) = &result {
        let _ = dir.finish(RunStatus::Failed, Some(error_text(e)));
    }
    result
}

/// An error with its causes, each said once (an I/O error's text is often already in the
/// message of the error that wraps it).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if !text.contains(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    text
}
