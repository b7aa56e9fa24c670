//! Traces from the flags: how spans are analysed, and the OTLP receiver (for `kiln queries`,
//! `kiln run --otlp-listen` and the demo).

use std::net::SocketAddr;

use anyhow::{bail, Result};
use kiln_queries::analyze::Options;
use kiln_queries::receiver::Receiver;
use kiln_queries::trie::Frames;
use kiln_runner::QuerySettings;

use crate::cli::{FailOn, QueryAnalysisArgs, TrieFrames};

/// How spans are analysed, from the flags.
pub fn settings(args: &QueryAnalysisArgs) -> Result<QuerySettings> {
    if !(args.slow_ms.is_finite() && args.slow_ms > 0.0) {
        bail!(
            "--slow-ms must be a positive number of milliseconds, not {}",
            args.slow_ms
        );
    }
    let options = Options {
        n_plus_one_min: args.n_plus_one as usize,
        slow_ms: args.slow_ms,
        route: args.route.clone(),
        request: args.request.clone(),
        worst_requests: 10,
        ignore_sql: args.ignore_sql.clone(),
        ignore_frames: args.ignore_frames.clone(),
        app_packages: args.app_packages.clone(),
        window_ns: None,
    };
    Ok(QuerySettings {
        options,
        frames: match args.frames {
            TrieFrames::App => Frames::App,
            TrieFrames::All => Frames::All,
        },
        html: args.html.clone(),
        fail_on: args.fail_on.map(FailOn::severity),
    })
}

/// Starts the receiver (before the run directory exists, so that a bad address leaves no
/// directory behind); a non-loopback address gets a warning.
pub fn start_receiver(addr: &str) -> Result<Receiver> {
    let receiver = Receiver::start(addr, None)?;
    let local: SocketAddr = receiver.addr();
    if !local.ip().is_loopback() {
        eprintln!("kiln: warning: receiving traces on {local}, reachable from other hosts");
    }
    Ok(receiver)
}
