//! `kiln report RUN_DIR`: the summary again, rebuilt from the run directory alone.

use anyhow::{Context, Result};
use kiln_record::Run;

use crate::cli::ReportArgs;

pub fn run(args: ReportArgs) -> Result<u8> {
    if kiln_record::schema::capacity::CapacityRecord::is_in(&args.run_dir) {
        return capacity(&args);
    }
    let mut run = Run::open(&args.run_dir)
        .with_context(|| format!("cannot read the run in {}", args.run_dir.display()))?;
    if let Some(file) = &args.html {
        let path = match file {
            None => kiln_report::write(&mut run).with_context(|| {
                format!("cannot write the report into {}", args.run_dir.display())
            })?,
            Some(file) => {
                std::fs::write(file, kiln_report::render(&run))
                    .with_context(|| format!("cannot write {}", file.display()))?;
                file.clone()
            }
        };
        outln!("{}", crate::format::safe_text(&path.display().to_string()));
        return Ok(0);
    }
    crate::summary::print_run(&run, &args.run_dir, args.json)
}

/// A capacity directory: the search's table and verdict again, its JSON, or its page.
fn capacity(args: &ReportArgs) -> Result<u8> {
    let record = kiln_record::schema::capacity::CapacityRecord::read(&args.run_dir)
        .map_err(anyhow::Error::msg)?;
    let dir_text = args.run_dir.display().to_string();
    if let Some(file) = &args.html {
        let path = match file {
            None => {
                kiln_capacity::write_page(&args.run_dir, &record)?;
                args.run_dir.join(kiln_capacity::REPORT_FILE)
            }
            Some(file) => {
                std::fs::write(file, kiln_report::render_capacity(&record))
                    .with_context(|| format!("cannot write {}", file.display()))?;
                file.clone()
            }
        };
        outln!("{}", crate::format::safe_text(&path.display().to_string()));
    } else if args.json {
        outln!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        crate::stdout::text(&kiln_summary::capacity::text(&record, &dir_text));
    }
    Ok(0)
}
