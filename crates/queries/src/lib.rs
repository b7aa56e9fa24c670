//! kiln's query analyzer: which code makes which database calls.
//!
//! Spans come in as OpenTelemetry (OTLP/JSON files, OTLP/HTTP requests), are grouped into
//! requests (trace + the service's local root span), their SQL fingerprinted, and each
//! request's calls checked for N+1 loops, redundant repeats, slow statements and
//! housekeeping round trips. Every call's stack goes into the DB stack trie: a tree of call
//! sites weighted by DB calls and DB time, drawn as a treemap.

pub mod analyze;
pub mod html;
pub mod ingest;
pub mod model;
pub mod nosql;
pub mod receiver;
pub mod sql;
pub mod stack;
pub mod text;
pub mod trie;

pub use ingest::{Coverage, Ingest};

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("cannot read {file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file} holds no spans kiln can read: {why}")]
    NotSpans { file: String, why: String },
    #[error("not an OTLP/protobuf trace request: {0}")]
    Protobuf(String),
    #[error("cannot listen on {addr}: {why}")]
    Listen { addr: String, why: String },
}

impl QueryError {
    pub(crate) fn io(file: &str, source: std::io::Error) -> Self {
        QueryError::Io {
            file: file.to_string(),
            source,
        }
    }
}
