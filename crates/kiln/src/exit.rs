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
