//! The shop `kiln demo` loads: a real HTTP/1.1 service (hyper on tokio, handlers on its
//! blocking pool as a servlet container runs them), a real embedded database (SQLite) and the
//! real OpenTelemetry SDK exporting its traces over OTLP/HTTP -- with the problems of kiln's
//! case studies planted in its order page, each one with its fix:
//!
//! | problem      | planted                                              | fixed                         |
//! |--------------|------------------------------------------------------|-------------------------------|
//! | `n-plus-one` | one query for the order's lines, then one per line   | one join                      |
//! | `backtraces` | a discount rule that does not apply is an error that | an `Option`                   |
//! |              | captures a backtrace, eight rules per order line     |                               |
//! | `json`       | the catalog document parsed on every request         | parsed once at start          |
//! | `mmap`       | a fresh 3 MiB page buffer mapped and cleared per page | one buffer per thread, reused |
//! | `stall`      | the price list expires on the wall clock and the     | refreshed in the background   |
//! |              | request that finds it expired reloads it under a lock |                               |
//! | `lock`       | the audit call made while the audit log is locked    | queued for a sender thread    |
//!
//! The shop runs in its own process (`kiln demo-shop`), so what kiln measures of it is the
//! shop alone, and other tests use it as a realistic application.

mod db;
mod http;
mod shop;
mod telemetry;

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

pub use http::ORDER_ROUTE;
pub use shop::{NotApplicable, Shop, AUDIT_CALL, PRICE_FETCH, RENDER_BUFFER};

/// A problem planted in the shop, by the name `--fix` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Problem {
    NPlusOne,
    Backtraces,
    Json,
    Mmap,
    Stall,
    Lock,
}

impl Problem {
    pub const ALL: [Problem; 6] = [
        Problem::NPlusOne,
        Problem::Backtraces,
        Problem::Json,
        Problem::Mmap,
        Problem::Stall,
        Problem::Lock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Problem::NPlusOne => "n-plus-one",
            Problem::Backtraces => "backtraces",
            Problem::Json => "json",
            Problem::Mmap => "mmap",
            Problem::Stall => "stall",
            Problem::Lock => "lock",
        }
    }

    /// What the problem is, in the words of the case study it comes from.
    pub fn planted(self) -> &'static str {
        match self {
            Problem::NPlusOne => "an N+1: one query per order line, from a loop",
            Problem::Backtraces => {
                "discount rules that do not apply return errors that capture a backtrace (as fillInStackTrace does)"
            }
            Problem::Json => "the catalog JSON parsed on every request",
            Problem::Mmap => "a 3 MiB buffer mapped and cleared per request (page faults)",
            Problem::Stall => {
                "the price list expires on the wall clock; its reload blocks every request"
            }
            Problem::Lock => "a slow call made while holding the lock every request takes",
        }
    }
}

impl FromStr for Problem {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Problem::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Problem::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "no problem {s:?} in the shop (one of: {})",
                    names.join(", ")
                )
            })
    }
}

/// How the shop runs.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// The problems fixed; the others are planted.
    pub fixed: Vec<Problem>,
    /// The price list's lifetime: it expires at every multiple of this on the wall clock.
    pub price_ttl: Duration,
    /// The share of requests traced (when an OTLP endpoint is set in the environment).
    pub trace_ratio: f64,
}

impl Config {
    pub fn planted(&self, problem: Problem) -> bool {
        !self.fixed.contains(&problem)
    }
}

/// Serves until SIGTERM or SIGINT, then flushes its traces. `ready` gets the bound address
/// once the shop accepts connections.
/// `ready` is told the address once the shop listens. A `dyn` callback, not a generic one: the
/// server's code is then compiled here, optimized as the shop is, and not in each caller (the
/// binary is built at a lower optimization level in tests).
pub fn serve(config: Config, ready: &mut dyn FnMut(SocketAddr)) -> anyhow::Result<()> {
    let tracing = telemetry::Tracing::from_env(config.trace_ratio)?;
    let shop = std::sync::Arc::new(Shop::open(&config, tracing.tracer())?);
    let served = http::serve(shop, config.listen, ready);
    tracing.shutdown();
    served
}
