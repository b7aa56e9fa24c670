//! Why kiln could not read a target's runtime: the crate's one error type. Its text is what
//! kiln says to the user (in a warning, or in the record's `not_recorded`), so each error
//! carries what kiln was doing when it failed.

/// An error of this crate.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A file, socket or process kiln could not use, and what it was doing with it.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// What the target, its runtime or a helper said or failed to say, in words.
    #[error("{0}")]
    Said(String),
}

impl From<String> for RuntimeError {
    fn from(said: String) -> Self {
        RuntimeError::Said(said)
    }
}

impl From<&str> for RuntimeError {
    fn from(said: &str) -> Self {
        RuntimeError::Said(said.to_string())
    }
}

/// For `map_err`: an I/O error while doing `what` (`cannot read /tmp/x`).
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Io { what, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_says_what_kiln_was_doing_and_keeps_its_source() {
        let e = io("cannot read /proc/1/maps")(std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(
            e.to_string()
                .starts_with("cannot read /proc/1/maps: Permission denied"),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(RuntimeError::from("no JVM").to_string(), "no JVM");
    }
}
