//! Comparing two recorded runs from the flags: for `kiln compare`, `kiln run --compare` and
//! the demo.

use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_compare::{Comparison, Options, Verdict};
use kiln_record::RunDir;

use crate::cli::CompareMethod;
use crate::exit::EXIT_THRESHOLDS_FAILED;

/// Reads both runs and compares them (for `kiln compare` and `kiln run --compare`).
pub fn compare(base: &Path, new: &Path, method: &CompareMethod) -> Result<Comparison> {
    if !(0.5..=0.999).contains(&method.confidence) {
        bail!(
            "--confidence is out of range: {} (0.5 to 0.999)",
            method.confidence
        );
    }
    let open = |label: &str, path: &Path| {
        RunDir::open(path)
            .with_context(|| format!("cannot read the {label} run in {}", path.display()))
    };
    let (base_dir, new_dir) = (open("BASE", base)?, open("NEW", new)?);
    let options = Options {
        resamples: method.resamples,
        seed: method.seed,
        confidence: method.confidence,
    };
    Ok(kiln_compare::compare(&base_dir, &new_dir, &options)?)
}

/// The comparison's page (for `kiln compare --html` and the demo).
pub fn write_page(base: &Path, new: &Path, comparison: &Comparison, file: &Path) -> Result<()> {
    let (base, new) = (RunDir::open(base)?, RunDir::open(new)?);
    std::fs::write(file, kiln_report::render_compare(&base, &new, comparison))
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
