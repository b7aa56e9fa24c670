//! `--pid P | --port P`: the process a command looks at.

use anyhow::{bail, Context, Result};
use kiln_sample::{ProcFs, TargetProcesses};

/// The pid given and what it forks, or every process serving the port (a pre-fork master
/// and its workers); the process must exist and be readable.
pub fn resolve_target(
    proc: &ProcFs,
    pid: Option<i32>,
    port: Option<u16>,
    verb: &str,
) -> Result<TargetProcesses> {
    let target = match (pid, port) {
        (Some(pid), _) => TargetProcesses::of_pid(pid),
        (None, Some(port)) => TargetProcesses::of_port(proc, port).with_context(|| {
            format!("no visible process listens on TCP port {port} (run kiln as the target's user or root)")
        })?,
        (None, None) => bail!("say what to {verb}: --pid PID or --port PORT"),
    };
    let pid = target.main_pid();
    if proc.process(pid).is_none() {
        bail!("no process {pid} (or /proc/{pid} is not readable)");
    }
    Ok(target)
}

/// The main process of `resolve_target` (a pre-fork server's master).
pub fn resolve(proc: &ProcFs, pid: Option<i32>, port: Option<u16>, verb: &str) -> Result<i32> {
    resolve_target(proc, pid, port, verb).map(|t| t.main_pid())
}
