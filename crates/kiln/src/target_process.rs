//! `--pid P | --port P`: the process a command looks at.

use anyhow::{bail, Context, Result};
use kiln_sample::ProcFs;

/// The pid given, or the one listening on the port; it must exist and be readable.
pub fn resolve(proc: &ProcFs, pid: Option<i32>, port: Option<u16>, verb: &str) -> Result<i32> {
    let pid = match (pid, port) {
        (Some(pid), _) => pid,
        (None, Some(port)) => proc.pid_listening_on(port).with_context(|| {
            format!("no visible process listens on TCP port {port} (run kiln as the target's user or root)")
        })?,
        (None, None) => bail!("say what to {verb}: --pid PID or --port PORT"),
    };
    if proc.process(pid).is_none() {
        bail!("no process {pid} (or /proc/{pid} is not readable)");
    }
    Ok(pid)
}
