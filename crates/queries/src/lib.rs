//! kiln's query analyzer.

pub mod sql;
