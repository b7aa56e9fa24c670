//! How kiln ends: its exit codes (documented in `kiln --help`) and an error's one line.

pub use kiln_runner::error_text;

/// Exit codes, documented in `kiln --help`.
pub const EXIT_INTERRUPTED: u8 = 3;
/// A run that sent nothing: an error, not a result.
pub const EXIT_SENT_NOTHING: u8 = 1;
/// A run its own input stopped (a plan's data file emptied or unreadable mid-run): an error
/// of kiln's input, not the target's (3); the record is kept and marked interrupted.
pub const EXIT_INPUT_FAILED: u8 = 1;

/// A run stopped by a signal exits as shells report it: 128 + the signal (Ctrl-C 130,
/// SIGTERM 143, SIGHUP 129).
pub fn signal_exit_code(signal: i32) -> u8 {
    128u8.saturating_add(u8::try_from(signal).unwrap_or(0))
}

/// The exit code of an interrupted run: the signal's when one stopped it, else 3.
pub fn interrupted_exit_code(signal: Option<i32>) -> u8 {
    signal.map_or(EXIT_INTERRUPTED, signal_exit_code)
}

/// As k6's ThresholdsHaveFailed.
pub const EXIT_THRESHOLDS_FAILED: u8 = 99;

/// A command line clap could not take: bad usage, exit 2. A flag's value that does not read
/// (`-d soon`, `-c many`) is said in one line, as kiln's other errors are; anything else
/// (help, version, an unknown flag, a missing argument) as clap says it.
pub fn bad_flag(e: clap::Error) -> std::process::ExitCode {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::ValueValidation {
        e.exit()
    }
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(text)) => text.clone(),
        _ => String::new(),
    };
    // "--duration <DURATION>": the flag as it was given
    let flag = context(ContextKind::InvalidArg);
    let flag = flag.split(' ').next().unwrap_or_default();
    let value = context(ContextKind::InvalidValue);
    let why = std::error::Error::source(&e).map_or_else(|| e.kind().to_string(), |s| s.to_string());
    eprintln!(
        "kiln: error: {}",
        crate::format::safe_text(&format!("{flag} {value:?}: {why}"))
    );
    std::process::ExitCode::from(2)
}
