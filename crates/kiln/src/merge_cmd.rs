//! `kiln merge SHARD_DIR... --out DIR`: the shards' run records as one, then its summary
//! (thresholds judged here, once, on the merged record).

use anyhow::{Context, Result};
use kiln_record::Run;

use crate::cli::MergeArgs;

pub fn run(args: MergeArgs) -> Result<u8> {
    let options = kiln_merge::MergeOptions {
        any_plans: args.any_plans,
        allow_partial: args.allow_partial,
    };
    let merged = kiln_merge::merge(&args.run_dirs, &args.out, options)?;
    let mut run = Run::open(&merged.dir)
        .with_context(|| format!("cannot read the merged run in {}", merged.dir.display()))?;
    kiln_report::write(&mut run)
        .with_context(|| format!("cannot write the report into {}", merged.dir.display()))?;
    if !args.json {
        out!("{}\n", kiln_merge::shards_text(&merged));
    }
    crate::summary::print_run(&run, &merged.dir, args.json)
}
