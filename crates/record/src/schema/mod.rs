//! The record's parts as types: each part's writer serializes these and every reader
//! deserializes them, so a field is named once and the compiler finds every use.

pub mod plan;
pub mod profile;
pub mod queries;
