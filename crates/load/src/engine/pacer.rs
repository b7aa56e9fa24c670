//! The open model's pacer: a thread that releases each arrival into the queue at its due time.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::PhaseShared;

/// Queued arrivals per phase before further ones are dropped and counted as unsent; bounds
/// memory when the target stalls for long.
const MAX_QUEUED_ARRIVALS: usize = 1_000_000;

/// Pushes each arrival into the queue at its due time. A sleeping thread wakes within tens
/// of microseconds on Linux, far closer than an async timer's millisecond tick.
pub(super) fn run_pacer(
    schedule: impl Iterator<Item = Duration>,
    shared: &PhaseShared,
    tx: async_channel::Sender<Instant>,
) {
    let mut next_worker = 0usize;
    let mut arrivals = schedule.map(|offset| shared.t0 + offset);
    while let Some(due) = arrivals.next() {
        if !sleep_until(due, shared) {
            // Arrivals due before the stop were scheduled even if this thread was too late
            // to release them (a starved CPU at the end of a phase): they count as unsent.
            let stopped = Instant::now().min(shared.deadline);
            let missed = std::iter::once(due)
                .chain(arrivals)
                .take_while(|&d| d < stopped)
                .count() as u64;
            shared.scheduled.fetch_add(missed, Ordering::SeqCst);
            shared.unsent.fetch_add(missed, Ordering::SeqCst);
            return;
        }
        shared.scheduled.fetch_add(1, Ordering::Relaxed);
        if tx.len() >= MAX_QUEUED_ARRIVALS || tx.try_send(due).is_err() {
            shared.unsent.fetch_add(1, Ordering::Relaxed);
        }
        if tx.len() > shared.idle.load(Ordering::Relaxed) {
            shared.grow[next_worker % shared.grow.len()].notify_one();
            next_worker += 1;
        }
    }
}

/// Sleeps until `due`; false if the phase stopped first.
fn sleep_until(due: Instant, shared: &PhaseShared) -> bool {
    loop {
        if shared.should_stop() {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        thread::sleep((due - now).min(Duration::from_millis(50)));
    }
}
