//! Printing a run's summary (built by kiln-summary) on stdout, as text or JSON.

use std::path::Path;

use anyhow::Result;
use kiln_record::parts::{ALLOC, OFF_CPU, ON_CPU, QUERIES_PART};
use kiln_record::schema::profile::ProfileRecord;
use kiln_record::schema::queries::QueriesRecord;
use kiln_record::{LoadRecordLine, PhaseSummary, RunDir, LOAD_SECONDS_PART};
use kiln_sample::{NoiseSecond, ResourceSecond, NOISE_PART, RESOURCES_PART};

use crate::exit::EXIT_THRESHOLDS_FAILED;

pub use kiln_summary::run::*;

/// Prints the summary of a run, as JSON or text; what `kiln run` and `kiln report` both show.
pub fn print(view: &RunView, json: bool) -> serde_json::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(&render_json(view))?);
    } else {
        crate::stdout::text(&render_text(view));
    }
    Ok(())
}

/// Prints the summary of the run in `dir` (at `path`) again, from its record alone; the exit
/// code is 99 when a threshold recorded in its plan fails, as `kiln run` and k6 exit.
pub fn print_run(dir: &RunDir, path: &Path, json: bool) -> Result<u8> {
    // Line by line: a long run's seconds are never all in memory at once.
    let mut phases = Vec::new();
    for line in dir.json_lines::<LoadRecordLine>(LOAD_SECONDS_PART)? {
        PhaseSummary::add_line(&mut phases, &line?);
    }
    let resources: Vec<ResourceSecond> = dir.read_json_lines(RESOURCES_PART)?;
    let noise: Vec<NoiseSecond> = or_warning(dir.read_json_lines(NOISE_PART)).unwrap_or_default();
    let runtime_info: Option<kiln_runtime::RuntimeInfo> =
        dir.read_json_part(kiln_runtime::RUNTIME_PART)?;
    let runtime_seconds: Vec<kiln_runtime::RuntimeSecond> =
        dir.read_json_lines(kiln_runtime::RUNTIME_SECONDS_PART)?;
    // a part that does not read is said and left out: the rest still reports
    let profile: Option<ProfileRecord> = part_or_warning(dir, ON_CPU.summary.0);
    let off_cpu: Option<ProfileRecord> = part_or_warning(dir, OFF_CPU.summary.0);
    let alloc: Option<ProfileRecord> = part_or_warning(dir, ALLOC.summary.0);
    let queries: Option<QueriesRecord> = part_or_warning(dir, QUERIES_PART);
    let findings = kiln_findings::recorded_or_judged(dir);
    let dir_text = path.display().to_string();
    let view = RunView {
        dir: &dir_text,
        manifest: &dir.manifest,
        status: dir.effective_status().as_str(),
        phases: &phases,
        resources: &resources,
        noise: &noise,
        runtime: runtime_info
            .as_ref()
            .map(|info| (info, runtime_seconds.as_slice())),
        profile: profile.as_ref(),
        off_cpu: off_cpu.as_ref(),
        alloc: alloc.as_ref(),
        queries: queries.as_ref(),
        findings: Some(&findings),
        compare: None,
    };
    print(&view, json)?;
    // As `kiln run` and k6: a failed threshold is exit 99, also when the run is read again.
    Ok(
        if kiln_summary::thresholds::thresholds_failed(&dir.manifest, &phases) {
            EXIT_THRESHOLDS_FAILED
        } else {
            0
        },
    )
}

fn part_or_warning<T: serde::de::DeserializeOwned>(dir: &RunDir, kind: &str) -> Option<T> {
    or_warning(dir.read_json_part(kind)).flatten()
}

/// What was read, or None with the reason said on stderr.
fn or_warning<T>(read: Result<T, kiln_record::RecordError>) -> Option<T> {
    read.map_err(|e| {
        eprintln!(
            "kiln: warning: {}",
            crate::format::safe_text(&e.to_string())
        )
    })
    .ok()
}
