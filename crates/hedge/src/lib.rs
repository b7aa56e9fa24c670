//! Hedged requests ("The Tail at Scale", Dean & Barroso): a request not answered after a
//! delay gets a second copy, and the first answer wins. This crate predicts what that does
//! to a recorded run — exactly, from its latency histogram, assuming the two copies' latencies
//! are independent — and judges from the run's seconds whether that assumption holds.
//!
//! It reads no run directory and sends nothing: the CLI and the findings hand it histograms
//! and per-second counts. `measured` reads what a hedged run (`kiln run --hedge`) recorded;
//! the hedging itself is the load engine's (`kiln_load::hedge`).

mod delay;
mod independence;
mod measured;
mod report;
mod whatif;

pub use delay::{Delay, DelayError};
pub use independence::{Independence, SecondCounts};
pub use measured::{measured, measured_text, Measured, MeasuredTarget};
pub use report::{to_text, HedgeOption, Report};
pub use whatif::{predict, Prediction, Quantiles, QUANTILES};
