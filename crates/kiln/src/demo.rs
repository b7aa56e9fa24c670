//! `kiln demo` (the runs and their story are `kiln_demo`'s) and `kiln demo-shop`, the shop the
//! demo starts in a process of its own.

use anyhow::Result;
use kiln_demo::DemoOptions;
use kiln_demo_shop::{Config, Problem};
use kiln_load::StopSignal;

use crate::cli::{DemoArgs, DemoShopArgs};

/// `kiln demo-shop`: the shop on its own, until SIGTERM or Ctrl-C.
pub fn serve_shop(args: DemoShopArgs) -> Result<u8> {
    let fixed = if args.fixed {
        Problem::ALL.to_vec()
    } else {
        args.fix
    };
    let config = Config {
        listen: args.listen,
        fixed,
        price_ttl: args.price_ttl,
        trace_ratio: args.trace_ratio.clamp(0.0, 1.0),
    };
    kiln_demo_shop::serve(config, &mut |addr| {
        // the demo (and any script) waits for this line
        outln!("listening on {addr}");
    })?;
    Ok(0)
}

/// `kiln demo`: both runs, their comparison, and with --json the whole on stdout.
pub fn run(args: DemoArgs, stop: &StopSignal) -> Result<u8> {
    let options = DemoOptions {
        rate: args.rate,
        seconds: args.seconds,
        runs_dir: args.runs_dir,
    };
    if let (Some(whole), true) = (kiln_demo::run(&options, stop)?, args.json) {
        outln!("{}", serde_json::to_string_pretty(&whole)?);
    }
    Ok(0)
}
