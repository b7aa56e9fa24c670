//! `kiln compare BASE NEW`: the change between two recorded runs, with intervals and verdicts.

use anyhow::Result;

use crate::cli::CompareArgs;
use crate::comparison::{compare, exit_code, open, write_page};

pub fn run(args: CompareArgs) -> Result<u8> {
    use kiln_record::schema::capacity::CapacityRecord;
    match (
        CapacityRecord::is_in(&args.base),
        CapacityRecord::is_in(&args.new),
    ) {
        (true, true) => return capacity(&args),
        (false, false) => {}
        _ => anyhow::bail!(
            "one of the two is a capacity search (kiln capacity) and the other a run: compare \
             two searches, or two runs (a search's steps/ are runs)"
        ),
    }
    let (base, new) = open(&args.base, &args.new)?;
    let comparison = compare(&base, &new, &args.method)?;
    if let Some(file) = &args.html {
        write_page(&base, &new, &comparison, file)?;
        eprintln!(
            "kiln: the comparison's page: {}",
            crate::format::safe_text(&file.display().to_string())
        );
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        crate::stdout::text(&kiln_compare::to_text(&comparison));
    }
    Ok(exit_code(&comparison, &args.method))
}

/// Two capacity searches: the change of the highest rate kept, with what their brackets allow.
fn capacity(args: &CompareArgs) -> Result<u8> {
    use kiln_compare::capacity::{capacity_text, compare_capacity, CapacityVerdict};
    use kiln_record::schema::capacity::CapacityRecord;
    if args.html.is_some() {
        anyhow::bail!(
            "--html draws two runs; two capacity searches are compared as text or --json"
        );
    }
    let read = |dir: &std::path::Path| CapacityRecord::read(dir).map_err(anyhow::Error::msg);
    let (base, new) = (read(&args.base)?, read(&args.new)?);
    let c = compare_capacity(
        &args.base.display().to_string(),
        &base,
        &args.new.display().to_string(),
        &new,
    );
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        crate::stdout::text(&capacity_text(&c));
    }
    Ok(
        if args.method.fail_on_regression && c.verdict == CapacityVerdict::Regressed {
            crate::exit::EXIT_THRESHOLDS_FAILED
        } else {
            0
        },
    )
}
