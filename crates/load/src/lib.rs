//! kiln's HTTP load engine.
//!
//! `target` is the URL under load, `plan` says what to send and how (closed or open model),
//! `schedule` computes when each
//! open-model request is due, `connection` keeps a connection (TCP or TLS) and `http1` speaks HTTP/1.1 on it, `recorder`
//! fills per-second records on each generator thread, `uring` is `--io uring`'s sockets,
//! and `engine` runs a phase and merges
//! the threads' seconds; `hedge` keeps `--hedge`'s delay, budget and throttle. Latency in the open model counts from the scheduled send time, so a
//! stalled target cannot hide its stall (no coordinated omission).

mod connection;
mod engine;
mod error;
pub mod feeder;
mod grpc_frames;
pub mod hedge;
/// HTTP/1.1 on a connection; public for the fuzz targets (fuzz/), which read responses with it.
pub mod http1;
pub mod limits;
pub mod plan;
mod recorder;
pub mod scenario;
pub mod schedule;
mod self_usage;
pub mod single;
mod target;
pub mod template;
mod uring;

pub use connection::{Captured, GrpcAnswer, KeptConnections};
pub use engine::{preflight, run_phase, LoadError, PhaseSpec, StopSignal};
pub use error::IoUringUnavailable;
pub use hedge::HedgePlan;
pub use plan::{
    Arrivals, IoPath, LoadPlan, Model, PlanError, RateStage, RequestSpec, Target, VuStage,
};
pub use self_usage::SelfUsage;
pub use uring::probe as probe_io_uring;
