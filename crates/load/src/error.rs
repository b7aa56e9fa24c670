//! Why a plan cannot run.

/// A plan that cannot run, with what to change.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("malformed URL '{url}': {why}")]
    BadUrl { url: String, why: String },
    #[error("cannot resolve host '{host}': {why}")]
    Resolve { host: String, why: String },
    #[error("bad header '{header}': expected 'Name: value'")]
    BadHeader { header: String },
    #[error("bad method '{0}'")]
    BadMethod(String),
    #[error("bad duration '{text}': {why} (use e.g. 500ms, 30s, 3m, 1h)")]
    BadDuration { text: String, why: String },
    #[error("bad stages '{text}': {why} (use e.g. 30s:100,60s:2000,30s:0)")]
    BadStages { text: String, why: String },
    #[error("{what} is out of range: {why}")]
    OutOfRange { what: &'static str, why: String },
    #[error("{what} needs {needs}")]
    Needs { what: String, needs: &'static str },
    #[error("--start-at {0:?} is not a time such as 2026-12-01T10:00:00Z (UTC)")]
    BadStartAt(String),
    #[error(
        "{flag} {needed} needs about {files} open files and kiln may open {limit} (its hard \
         limit): lower {flag} to at most {most}, or raise the limit (ulimit -Hn / LimitNOFILE)"
    )]
    TooFewOpenFiles {
        flag: &'static str,
        needed: u64,
        files: u64,
        limit: u64,
        most: u64,
    },
    #[error("'{host}' is not a valid TLS server name: {why}")]
    BadServerName { host: String, why: String },
}

/// io_uring cannot be used on this machine (`--io uring`'s probe): the ring could not be made,
/// with the likely reason for its error code.
#[derive(Debug, thiserror::Error)]
#[error("io_uring is unavailable: {source}{}", hint(source))]
pub struct IoUringUnavailable {
    pub source: std::io::Error,
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) => ", refused by a seccomp profile or kernel.io_uring_disabled",
        Some(libc::ENOSYS) => ", the kernel has none",
        Some(libc::EINVAL) => ", the kernel is older than 6.1",
        _ => "",
    }
}
