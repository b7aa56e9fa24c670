use std::path::PathBuf;

/// What can go wrong reading or writing a run record. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid kiln record ({detail})")]
    Malformed { path: PathBuf, detail: String },
    #[error("{path} has schema version {found}; this kiln reads up to {supported}")]
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("histogram data is corrupt: {0}")]
    Histogram(String),
}
