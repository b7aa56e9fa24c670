//! The host's noise as kiln felt it: a probe thread that sleeps to a deadline every
//! [`PROBE_INTERVAL`] and notes how late it woke (cyclictest's measure), and once a second the
//! scheduler's run delay of each of kiln's threads (`/proc/self/task/*/schedstat`, the time it
//! was runnable and waited on a run queue). A quiet host gives waits of microseconds; a CPU hog
//! beside kiln gives milliseconds, and those seconds' requests left late.
//!
//! The probe costs 50 wake-ups a second and one read of each thread's schedstat per second
//! (bench/noise.py: 0.13% of a core here, where a wake-up costs about 34 us of CPU; cyclictest
//! at 10 ms costs 0.67%).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kiln_record::clock::unix_ms_now;

pub use kiln_record::schema::noise::{NoiseSecond, NOISE_FILE, NOISE_PART, STARVED_MS};

/// How often the probe wakes: a stall of S ms makes it S - 20 ms late at least, so one of 40 ms
/// is starved for sure ([`STARVED_MS`]); every 10 ms cost 0.34% of a core on a VM whose timer
/// wake-ups are dear, over the 0.2% allowed.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(20);

/// The probe's thread, stopped and joined by [`NoiseProbe::finish`] (stopped, not waited for,
/// when dropped: a run that failed half-way leaves no probe behind).
pub struct NoiseProbe {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<NoiseSecond>>>,
}

impl NoiseProbe {
    /// Starts the probe; `on_second` gets each second as it ends (the run directory's writer).
    pub fn start(
        mut on_second: impl FnMut(&NoiseSecond) + Send + 'static,
    ) -> std::io::Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-noise".into())
            .spawn(move || {
                let mut seconds = Vec::new();
                probe(&flag, &mut |s| {
                    on_second(&s);
                    seconds.push(s);
                });
                seconds
            })?;
        Ok(Self {
            done,
            thread: Some(thread),
        })
    }

    /// Stops the probe and returns every second it measured (the last one, if at least half a
    /// second long, included).
    pub fn finish(mut self) -> Vec<NoiseSecond> {
        self.done.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for NoiseProbe {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

fn probe(done: &AtomicBool, emit: &mut dyn FnMut(NoiseSecond)) {
    let mut waits = ThreadWaits::default();
    waits.read();
    let mut second_began = Instant::now();
    let mut late_max = Duration::ZERO;
    let mut wakeups = 0u32;
    let mut deadline = Instant::now() + PROBE_INTERVAL;
    loop {
        sleep_until(deadline);
        let now = Instant::now();
        late_max = late_max.max(now.saturating_duration_since(deadline));
        wakeups += 1;
        let stopping = done.load(Ordering::SeqCst);
        let length = now - second_began;
        if length >= Duration::from_secs(1) || (stopping && length >= Duration::from_millis(500)) {
            let (longest, wait_total) = waits.read();
            let (wait_max_ms, wait_max_thread, wait_max_runs) = match longest {
                Some(w) => (Some(w.wait_ns as f64 / 1e6), w.name, w.runs),
                None => (None, String::new(), 0),
            };
            emit(NoiseSecond {
                unix_ms: unix_ms_now(),
                interval_s: length.as_secs_f64(),
                probe_late_max_ms: late_max.as_secs_f64() * 1e3,
                probe_wakeups: wakeups,
                wait_total_ms: wait_total.map(|ns| ns as f64 / 1e6),
                wait_max_ms,
                wait_max_thread,
                wait_max_runs,
            });
            second_began = now;
            late_max = Duration::ZERO;
            wakeups = 0;
        }
        if stopping {
            return;
        }
        // the next deadline on the grid; after a stall longer than the interval, the next one
        // from now (catching up would wake at once, late, again and again for one stall)
        deadline += PROBE_INTERVAL;
        if deadline <= now {
            deadline = now + PROBE_INTERVAL;
        }
    }
}

/// Sleeps until `deadline` on the monotonic clock (an absolute deadline: a wake-up that came
/// late does not push the next one).
fn sleep_until(deadline: Instant) {
    let wait = deadline.saturating_duration_since(Instant::now());
    if !wait.is_zero() {
        std::thread::sleep(wait);
    }
}

/// A thread's schedstat: time waited on a run queue (ns) and times put on a CPU.
#[derive(Clone, Debug, Default)]
struct Waits {
    name: String,
    wait_ns: u64,
    runs: u64,
}

/// Each of this process's threads' schedstat at the last reading, by thread id.
#[derive(Default)]
struct ThreadWaits {
    last: HashMap<u32, Waits>,
}

impl ThreadWaits {
    /// Reads every thread's schedstat; returns the thread whose waits grew most since the last
    /// reading (with that growth), and the sum of all growths (none without schedstat). A
    /// thread seen for the first time counts from zero: it began since the last reading.
    fn read(&mut self) -> (Option<Waits>, Option<u64>) {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return (None, None);
        };
        let mut now = HashMap::with_capacity(self.last.len());
        let mut longest: Option<Waits> = None;
        let mut total: Option<u64> = None;
        for task in tasks.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<u32>().ok())
            else {
                continue;
            };
            let Some((wait_ns, runs)) = std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|s| parse_schedstat_waits(&s))
            else {
                continue;
            };
            let before = self.last.get(&tid);
            let name = match before {
                Some(w) => w.name.clone(),
                None => std::fs::read_to_string(task.path().join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_default(),
            };
            let grew = Waits {
                name: name.clone(),
                wait_ns: wait_ns.saturating_sub(before.map_or(0, |w| w.wait_ns)),
                runs: runs.saturating_sub(before.map_or(0, |w| w.runs)),
            };
            *total.get_or_insert(0) += grew.wait_ns;
            if longest.as_ref().is_none_or(|l| grew.wait_ns > l.wait_ns) {
                longest = Some(grew);
            }
            now.insert(
                tid,
                Waits {
                    name,
                    wait_ns,
                    runs,
                },
            );
        }
        self.last = now;
        (longest, total)
    }
}

/// The time a task waited on a run queue (ns) and the times it was put on a CPU, from
/// `/proc/.../schedstat` (`run_ns wait_ns count`).
pub fn parse_schedstat_waits(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().skip(1);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_is_read_or_refused() {
        assert_eq!(
            parse_schedstat_waits("147477 717406 2\n"),
            Some((717406, 2))
        );
        assert_eq!(parse_schedstat_waits("147477 717406"), None);
        assert_eq!(parse_schedstat_waits("1 x 2"), None);
        assert_eq!(parse_schedstat_waits(""), None);
    }
}
