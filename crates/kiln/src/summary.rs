//! Printing a run's summary (built by kiln-summary) on stdout, as text or JSON.

pub use kiln_summary::run::*;

/// Prints the summary of a run, as JSON or text; what `kiln run` and `kiln report` both show.
pub fn print(view: &RunView, json: bool) -> serde_json::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(&render_json(view))?);
    } else {
        out!("{}", render_text(view));
    }
    Ok(())
}
