//! Run directories: creating one, and marking it failed when an error ends the work in it.

use kiln_record::schema::plan::PlanRecord;
use kiln_record::{RunDir, RunLocation, RunStatus};

use crate::error::{error_text, Doing, Result};

/// Creates a run directory: `out` when given, else a fresh one under `runs/` named for the
/// time and `name`. The command line is recorded with any URL password redacted.
pub fn create_run_dir(location: &RunLocation, name: &str, plan: PlanRecord) -> Result<RunDir> {
    let command: Vec<String> = std::env::args()
        .map(|a| kiln_load::plan::redact_password(&a))
        .collect();
    RunDir::create(location, name, command, plan).doing_with(|| match location {
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
