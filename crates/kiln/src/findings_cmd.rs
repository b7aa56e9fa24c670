//! `kiln findings RUN_DIR`: what is wrong in a recorded run, ranked, from the record alone.

use anyhow::{Context, Result};
use kiln_record::Run;

use crate::cli::FindingsArgs;
use crate::exit::EXIT_THRESHOLDS_FAILED;

pub fn run(args: FindingsArgs) -> Result<u8> {
    let run = Run::open(&args.run_dir)
        .with_context(|| format!("cannot read the run in {}", args.run_dir.display()))?;
    let report = if args.rejudge {
        kiln_findings::judge_run(&run)
    } else {
        kiln_findings::recorded_or_judged(&run)
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::stdout::text(&kiln_findings::to_text(
            &report,
            kiln_findings::UnjudgedLines::Listed,
        ));
    }
    let failed = args
        .fail_on
        .is_some_and(|f| report.any_at_least(f.severity()));
    Ok(if failed { EXIT_THRESHOLDS_FAILED } else { 0 })
}
