//! Processes kiln starts and stops (the demo's shop, test servers; `--spawn` later).

use std::process::Child;
use std::time::{Duration, Instant};

/// Asks `child` to stop (SIGTERM: it may flush and exit on its own), waits up to `grace`,
/// then kills it. Reaped either way.
pub fn stop_gracefully(child: &mut Child, grace: Duration) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a pid we started and have not reaped: no memory is involved
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
