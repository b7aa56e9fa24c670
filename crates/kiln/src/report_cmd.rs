//! `kiln report RUN_DIR`: the summary again, rebuilt from the run directory alone.

use anyhow::{Context, Result};
use kiln_record::{LoadRecordLine, PhaseSummary, RunDir, LOAD_SECONDS_PART};

use kiln_sample::{ResourceSecond, RESOURCES_PART};

use crate::cli::ReportArgs;
use crate::summary;

pub fn run(args: ReportArgs) -> Result<u8> {
    let dir = RunDir::open(&args.run_dir)
        .with_context(|| format!("cannot read the run in {}", args.run_dir.display()))?;
    let lines: Vec<LoadRecordLine> = dir.read_json_lines(LOAD_SECONDS_PART)?;
    let phases = PhaseSummary::from_lines(&lines);
    let resources: Vec<ResourceSecond> = dir.read_json_lines(RESOURCES_PART)?;
    let status = dir.effective_status().as_str();
    let dir_text = args.run_dir.display().to_string();
    summary::print(
        &dir_text,
        &dir.manifest,
        status,
        &phases,
        &resources,
        args.json,
    )?;
    Ok(0)
}
