//! Helpers of the sampler's truth tests: threads of the test process doing known work, read
//! as the sampler reads them.

#![allow(dead_code)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use kiln_sample::threads::ThreadReader;
use kiln_sample::{task_rates, ProcFs, TaskStat};
use kiln_targets::named_loop;

pub const USER_HZ: f64 = 100.0;

/// The named thread as the sampler reads it (kept files, skipped when idle, taskstats).
pub fn thread_named(reader: &mut ThreadReader, name: &str) -> TaskStat {
    reader
        .read(&ProcFs::default())
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no thread named {name}"))
}

/// Runs `work` on a named thread until stopped, and lets it get going; returns the stop flag.
pub fn start(name: &str, work: impl Fn() + Send + 'static) -> Arc<AtomicBool> {
    let stop = named_loop(name, work);
    thread::sleep(Duration::from_millis(100));
    stop
}

/// Samples the named thread over 2 s.
pub fn measure(name: &str) -> kiln_sample::TaskRates {
    let mut reader = ThreadReader::new(std::process::id() as i32);
    let before = thread_named(&mut reader, name);
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs(2));
    let after = thread_named(&mut reader, name);
    task_rates(&before, &after, t0.elapsed().as_secs_f64(), USER_HZ).unwrap()
}
