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

/// As [`stop_gracefully`], for `child` that leads process group `group` and `family` (its
/// descendants, some of which may have left the group): all are asked to stop, and those left
/// after `grace` are killed.
pub fn stop_group_gracefully(child: &mut Child, group: i32, family: &[i32], grace: Duration) {
    let signal_all = |signal: i32| {
        // SAFETY: kill(2) with pids and a group kiln started: no memory is involved. A pid
        // that has ended meanwhile gives ESRCH.
        unsafe {
            libc::kill(-group, signal);
            for &pid in family {
                libc::kill(pid, signal);
            }
        }
    };
    signal_all(libc::SIGTERM);
    let deadline = Instant::now() + grace;
    let mut leader_done = false;
    while Instant::now() < deadline {
        leader_done = leader_done || matches!(child.try_wait(), Ok(Some(_)));
        if leader_done && family.iter().all(|&pid| !alive(pid)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_all(libc::SIGKILL);
    let _ = child.wait();
}

/// Whether `pid` runs still (a zombie, ended and waiting to be reaped, does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // the state follows the command's closing parenthesis
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}
