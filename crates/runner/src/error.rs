//! What stops a run, as a type its callers can tell apart: flags or a plan refused as given
//! (the user's to change), the record that could not be written, the load, the profiler or
//! the trace receiver failing, each with what kiln was doing when it did.

use std::error::Error;

use kiln_record::RecordError;

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// Flags or a plan that cannot run as given: the message says what to change.
    #[error("{0}")]
    Refused(String),
    /// What kiln was doing, and the error that stopped it (said after it).
    #[error("{doing}")]
    While {
        doing: String,
        #[source]
        source: Box<RunnerError>,
    },
    /// The load never started (the target could not be reached); the run directory says so.
    #[error("{source} (recorded as failed in {})", dir.display())]
    NotStarted {
        dir: std::path::PathBuf,
        #[source]
        source: Box<RunnerError>,
    },
    /// An error a library below says in words (a barrier that did not open, a profiler
    /// that would not start).
    #[error("{0}")]
    Said(String),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Barrier(#[from] crate::barrier::BarrierError),
    #[error(transparent)]
    JvmProfile(#[from] JvmProfileError),
    #[error(transparent)]
    Load(#[from] kiln_load::LoadError),
    #[error(transparent)]
    Export(#[from] kiln_export::ExportError),
    #[error(transparent)]
    Plan(#[from] kiln_load::PlanError),
    #[error(transparent)]
    Threshold(#[from] kiln_summary::thresholds::ThresholdError),
    #[error(transparent)]
    PlanThreshold(#[from] kiln_summary::thresholds::PlanThresholdError),
    #[error(transparent)]
    PlanFile(#[from] kiln_plan::PlanFileError),
    #[error(transparent)]
    Profile(#[from] kiln_profile::ProfileError),
    #[error(transparent)]
    Queries(#[from] kiln_queries::QueryError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Why async-profiler gave no profile of a JVM (said in the record beside the part).
#[derive(Debug, thiserror::Error)]
pub enum JvmProfileError {
    #[error("{what} are taken inside a JVM (async-profiler); the watched process is not one")]
    NotAJvm { what: &'static str },
    /// No library where kiln looks, or not one kiln can load.
    #[error(transparent)]
    Library(kiln_runtime::RuntimeError),
    #[error("async-profiler could not start: {0}")]
    Start(kiln_runtime::RuntimeError),
    #[error("async-profiler: {0}")]
    Stopped(kiln_runtime::RuntimeError),
    #[error("async-profiler's output: {0}")]
    Output(kiln_profile::ProfileError),
}

/// The runner's results.
pub type Result<T, E = RunnerError> = std::result::Result<T, E>;

impl RunnerError {
    /// The user's to change: flags or a plan refused, wherever it was said.
    pub fn is_refused(&self) -> bool {
        match self {
            Self::Refused(_)
            | Self::Plan(_)
            | Self::PlanFile(_)
            | Self::Threshold(_)
            | Self::PlanThreshold(_) => true,
            Self::While { source, .. } | Self::NotStarted { source, .. } => source.is_refused(),
            _ => false,
        }
    }
}

impl From<String> for RunnerError {
    fn from(said: String) -> Self {
        Self::Said(said)
    }
}

/// What kiln was doing when an error stopped it, said before the error (`cannot read the
/// body file 'x': No such file or directory`).
pub trait Doing<T> {
    fn doing(self, doing: impl Into<String>) -> Result<T>;
    fn doing_with<S: Into<String>>(self, doing: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<RunnerError>> Doing<T> for std::result::Result<T, E> {
    fn doing(self, doing: impl Into<String>) -> Result<T> {
        self.doing_with(|| doing)
    }

    fn doing_with<S: Into<String>>(self, doing: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| RunnerError::While {
            doing: doing().into(),
            source: Box::new(e.into()),
        })
    }
}

/// A missing value is refused input, said as `doing`.
impl<T> Doing<T> for Option<T> {
    fn doing(self, doing: impl Into<String>) -> Result<T> {
        self.doing_with(|| doing)
    }

    fn doing_with<S: Into<String>>(self, doing: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| RunnerError::Refused(doing().into()))
    }
}

/// Returns early with flags or a plan refused, the message formatted as `format!` does.
#[macro_export]
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::RunnerError::Refused(format!($($arg)*)))
    };
}

/// Returns early with a failure that is not the user's input, said as `format!` does.
#[macro_export]
macro_rules! fail {
    ($($arg:tt)*) => {
        return Err($crate::RunnerError::Said(format!($($arg)*)))
    };
}

/// An error with its causes, each said once (an I/O error's text is often already in the
/// message of the error that wraps it).
pub fn error_text(e: &(dyn Error + 'static)) -> String {
    let mut text = String::new();
    let mut cause: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(e) = cause {
        let said = e.to_string();
        if !text.contains(&said) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&said);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_said_with_what_kiln_was_doing_and_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = Err::<(), _>(io)
            .doing("cannot read the body file 'x'")
            .doing("kiln run")
            .unwrap_err();
        assert_eq!(
            error_text(&e),
            "kiln run: cannot read the body file 'x': No such file"
        );
        assert!(!e.is_refused());
        // a cause whose text the wrapper already holds is not said again
        let record = RecordError::Malformed {
            path: "/r/run.json".into(),
            detail: "not JSON".into(),
        };
        let said = record.to_string();
        let e = RunnerError::While {
            doing: format!("cannot read {said}"),
            source: Box::new(record.into()),
        };
        assert_eq!(error_text(&e), format!("cannot read {said}"));
    }

    #[test]
    fn refused_input_is_told_apart_from_a_failure() {
        let e = None::<u8>.doing("--warmup auto takes a cap").unwrap_err();
        assert!(e.is_refused());
        assert_eq!(error_text(&e), "--warmup auto takes a cap");
        fn refuses() -> Result<()> {
            refuse!("--repeat is out of range: {} (1 to 1000)", 0)
        }
        let e = refuses().doing("kiln run").unwrap_err();
        assert!(e.is_refused());
        assert_eq!(
            error_text(&e),
            "kiln run: --repeat is out of range: 0 (1 to 1000)"
        );
    }
}
