//! `kiln compare BASE NEW`: the change between two recorded runs, with intervals and verdicts.

use anyhow::Result;

use crate::cli::CompareArgs;
use crate::comparison::{compare, exit_code, open, write_page};

pub fn run(args: CompareArgs) -> Result<u8> {
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
