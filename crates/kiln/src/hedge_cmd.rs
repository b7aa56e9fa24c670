//! `kiln hedge RUN_DIR`: what hedged requests would do to a recorded run's latency.

use anyhow::{bail, Context, Result};
use kiln_hedge::{Independence, Report};
use kiln_record::Run;

use crate::cli::HedgeArgs;

pub fn run(args: HedgeArgs) -> Result<u8> {
    let run = Run::open(&args.run_dir)
        .with_context(|| format!("cannot read the run in {}", args.run_dir.display()))?;
    let Some(total) = run.measured() else {
        bail!(
            "{} holds no measured load to weigh hedging on",
            args.run_dir.display()
        );
    };
    // A hedged run: the what-if starts from its first copies' own latency (the run as it was
    // without the second copies) and is shown beside what hedging measured.
    let latency = total
        .totals
        .hedge
        .as_ref()
        .map_or(&total.totals.latency, |h| &h.first_copy);
    if latency.is_empty() {
        bail!("{} recorded no responses", args.run_dir.display());
    }
    let mut report = Report::new(latency.count(), run.seconds.len(), args.fanout);
    report.hedged_run = kiln_hedge::measured(&total.totals, &run.manifest().plan);
    for at in &args.at {
        let delay_us = at.resolve_us(latency);
        let Some(prediction) = kiln_hedge::predict(latency, delay_us, args.fanout) else {
            continue;
        };
        let spread = Independence::judge(&kiln_hedge::SecondCounts::of_run(&run, delay_us));
        report.add(at.to_string(), prediction, spread);
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::stdout::text(&kiln_hedge::to_text(&report));
    }
    Ok(0)
}
