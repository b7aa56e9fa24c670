//! `kiln doctor`: the host audit (kiln-sample's checks) printed like `redis-server
//! --check-system`: one line per check with its verdict, then the evidence, why it matters
//! and the fix for each that is not ok.

use anyhow::Result;
use kiln_sample::{Doctor, ProcFs, Verdict};
use serde_json::json;

use crate::cli::DoctorArgs;
use crate::format::safe_text;
use crate::target_process;

/// Exit code when a check is bad.
pub const EXIT_BAD_SETTING: u8 = 4;

pub fn run(args: DoctorArgs) -> Result<u8> {
    let target = match (args.pid, args.port) {
        (None, None) => None,
        (pid, port) => Some(target_process::resolve(
            &ProcFs::new(&args.root),
            pid,
            port,
            "check",
        )?),
    };
    let checks = Doctor::new(&args.root, target).run();
    let worst = checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    let code = if worst == Verdict::Bad {
        EXIT_BAD_SETTING
    } else {
        0
    };
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "root": args.root, "pid": target, "worst": worst, "checks": checks
            }))?
        );
        return Ok(code);
    }
    for c in &checks {
        outln!("[{}]...{}", c.id, c.verdict.label().to_uppercase());
        if c.verdict != Verdict::Ok {
            outln!("    evidence  {}", safe_text(&c.evidence));
            outln!("    why       {}", c.why);
            if !c.fix.is_empty() {
                outln!("    fix       {}", safe_text(&c.fix));
            }
        }
    }
    let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    outln!(
        "\n{} ok, {} warn, {} bad, {} unknown. kiln doctor changes nothing; the fixes are for you to run.",
        count(Verdict::Ok),
        count(Verdict::Warn),
        count(Verdict::Bad),
        count(Verdict::Unknown)
    );
    Ok(code)
}
