//! Comparing two recorded runs from the flags: for `kiln compare`, `kiln run --compare` and
//! the demo.

use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_compare::{Comparison, Options, Verdict};
use kiln_record::Run;

use crate::cli::CompareMethod;
use crate::exit::EXIT_THRESHOLDS_FAILED;

/// Opens both runs: each is read once for the comparison, its findings and its page.
pub fn open(base: &Path, new: &Path) -> Result<(Run, Run)> {
    let open = |label: &str, path: &Path| {
        Run::open(path)
            .with_context(|| format!("cannot read the {label} run in {}", path.display()))
    };
    Ok((open("BASE", base)?, open("NEW", new)?))
}

/// Compares two runs (for `kiln compare` and `kiln run --compare`).
pub fn compare(base: &Run, new: &Run, method: &CompareMethod) -> Result<Comparison> {
    if !(0.5..=0.999).contains(&method.confidence) {
        bail!(
            "--confidence is out of range: {} (0.5 to 0.999)",
            method.confidence
        );
    }
    let options = Options {
        resamples: method.resamples,
        seed: method.seed,
        confidence: method.confidence,
    };
    Ok(kiln_compare::compare(base, new, &options)?)
}

/// The comparison's page (for `kiln compare --html`).
pub fn write_page(base: &Run, new: &Run, comparison: &Comparison, file: &Path) -> Result<()> {
    std::fs::write(file, kiln_report::render_compare(base, new, comparison))
        .with_context(|| format!("cannot write {}", file.display()))
}

/// 99 when asked to gate on regressions and one is found.
pub fn exit_code(comparison: &Comparison, method: &CompareMethod) -> u8 {
    let regressed = comparison
        .rows
        .iter()
        .any(|r| r.verdict == Verdict::Regressed);
    if method.fail_on_regression && regressed {
        EXIT_THRESHOLDS_FAILED
    } else {
        0
    }
}
