//! Printing a run's summary (built by kiln-summary) on stdout, as text or JSON.

use std::path::Path;

use anyhow::{bail, Result};
use kiln_record::parts::{ALLOC, LOCKS, OFF_CPU, ON_CPU, QUERIES_PART, WALL};
use kiln_record::schema::export::{ExportsRecord, EXPORTS_PART};
use kiln_record::schema::profile::ProfileRecord;
use kiln_record::schema::queries::QueriesRecord;
use kiln_record::Run;
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

/// Prints the summary of `run` (at `path`) again, from its record alone; the exit code is 99
/// when a threshold recorded in its plan fails, as `kiln run` and k6 exit. Load seconds that
/// do not read are an error; another part that does not read is said on stderr and left
/// out: the rest still reports.
pub fn print_run(run: &Run, path: &Path, json: bool) -> Result<u8> {
    // the load's seconds are what a summary is of: without them there is nothing to show
    if let Some(problem) = &run.load_problem {
        bail!("{problem}");
    }
    let resources = run.lines::<ResourceSecond>(RESOURCES_PART);
    let noise = run.lines::<NoiseSecond>(NOISE_PART);
    let runtime_info = run.part::<kiln_runtime::RuntimeInfo>(kiln_runtime::RUNTIME_PART);
    let runtime_seconds =
        run.lines::<kiln_runtime::RuntimeSecond>(kiln_runtime::RUNTIME_SECONDS_PART);
    let profile = run.part::<ProfileRecord>(ON_CPU.summary.0);
    let off_cpu = run.part::<ProfileRecord>(OFF_CPU.summary.0);
    let alloc = run.part::<ProfileRecord>(ALLOC.summary.0);
    let locks = run.part::<ProfileRecord>(LOCKS.summary.0);
    let wall = run.part::<ProfileRecord>(WALL.summary.0);
    let queries = run.part::<QueriesRecord>(QUERIES_PART);
    let exports = run.part::<ExportsRecord>(EXPORTS_PART);
    let findings = kiln_findings::recorded_or_judged(run);
    for problem in run.problems() {
        eprintln!("kiln: warning: {}", crate::format::safe_text(&problem));
    }
    let dir_text = path.display().to_string();
    let view = RunView {
        dir: &dir_text,
        manifest: run.manifest(),
        status: run.status.as_str(),
        phases: &run.phases,
        resources: &resources,
        noise: &noise,
        runtime: runtime_info
            .as_deref()
            .map(|info| (info, runtime_seconds.as_slice())),
        profile: profile.as_deref(),
        off_cpu: off_cpu.as_deref(),
        alloc: alloc.as_deref(),
        locks: locks.as_deref(),
        wall: wall.as_deref(),
        queries: queries.as_deref(),
        findings: Some(&findings),
        compare: None,
        exports: exports.as_deref(),
    };
    print(&view, json)?;
    // As `kiln run` and k6: a failed threshold is exit 99, also when the run is read again.
    Ok(
        if kiln_summary::thresholds::thresholds_failed(run.manifest(), &run.phases) {
            EXIT_THRESHOLDS_FAILED
        } else {
            0
        },
    )
}
