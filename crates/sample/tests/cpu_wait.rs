//! The target's wait for a CPU (schedstat's run delay) against threads that share one CPU by
//! construction. A test binary of its own: its two spinning threads would take the CPU from
//! the timing tests of truth.rs beside them.

mod common;

use std::sync::atomic::Ordering;

use common::{measure, start};
use kiln_targets::{ensure, timing_attempts};

/// Two threads spinning on one CPU: each is runnable all the time and runs about half of it,
/// so its time on a CPU and its wait for one (schedstat) add up to the whole interval, the
/// wait a large part of it. Other work on that CPU takes from the running share, not from
/// the sum, so this holds beside a busy neighbour.
#[test]
fn two_threads_sharing_one_cpu_wait_for_it_as_long_as_they_run() {
    let spin = || {
        let mut x = 0u64;
        for i in 0..100_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    };
    let pin_to_cpu0 = || {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the call affects this thread only
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    };
    let stops: Vec<_> = ["share-cpu-a", "share-cpu-b"]
        .into_iter()
        .map(|name| {
            let once = std::sync::Once::new();
            start(name, move || {
                once.call_once(pin_to_cpu0);
                spin();
            })
        })
        .collect();
    timing_attempts(3, || {
        for name in ["share-cpu-a", "share-cpu-b"] {
            let r = measure(name);
            let wait = r.cpu_wait_pct.expect("schedstat is read");
            let on_cpu = r.cpu_user_pct + r.cpu_system_pct;
            // clock ticks (10 ms) count the time on a CPU: a few percent either way
            ensure!((88.0..=106.0).contains(&(on_cpu + wait)), "{name}: {r:?}");
            ensure!(wait >= 30.0, "{name}: {r:?}");
        }
        Ok(())
    });
    for stop in stops {
        stop.store(true, Ordering::Relaxed);
    }
}
