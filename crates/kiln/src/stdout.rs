//! Standard output that cannot panic: `println!` panics when stdout is a closed pipe
//! (`kiln report DIR | head -1`) or a full disk. Here a closed pipe ends kiln quietly, as
//! `cat` and `grep` end, and any other failure is one line on stderr and exit 1. The run
//! record is finished before the summary is printed, so nothing recorded is lost.

use std::io::Write as _;

/// Exit code for a reader that went away: what a shell reports for a process ended by SIGPIPE.
const EXIT_BROKEN_PIPE: i32 = 141;

/// Writes to stdout, or ends kiln as described above. Colour (ANSI styles) is kept only for
/// a terminal that takes it (anstream: not a pipe, not NO_COLOR).
pub fn write(args: std::fmt::Arguments) {
    let mut out = anstream::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        let _ = writeln!(
            std::io::stderr(),
            "kiln: error: cannot write to standard output: {e}"
        );
        std::process::exit(1);
    }
}

/// A summary's text, fitted to the terminal's width and coloured when stdout is one.
pub fn text(text: &str) {
    match kiln_terminal::text::stdout_width() {
        Some(width) => write(format_args!("{}", kiln_terminal::text::fit(text, width))),
        None => write(format_args!("{text}")),
    }
}

/// `print!` that never panics (see the module).
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*)) };
}

/// `println!` that never panics (see the module).
macro_rules! outln {
    () => { $crate::stdout::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*))) };
}
