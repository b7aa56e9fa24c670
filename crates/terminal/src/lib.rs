//! What kiln shows on a terminal. `live` is a run's output while it goes: the live view
//! (`dashboard`, on a terminal of 80x20 or more), a progress line on a smaller one, JMeter's
//! `summary +`/`summary =` lines when stderr is a log. `text` fits finished text (the summary,
//! findings) to the window and colours the words a reader looks for first.

mod dashboard;
pub mod live;
pub mod text;

pub use live::LiveOutput;
