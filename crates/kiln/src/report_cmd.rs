//! `kiln report RUN_DIR`: the summary again, rebuilt from the run directory alone.

use anyhow::{Context, Result};
use kiln_record::Run;

use crate::cli::ReportArgs;

pub fn run(args: ReportArgs) -> Result<u8> {
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
