//! One receiver's queue and the thread that writes to it. The run only ever adds to the
//! queue (never waits): a receiver that is down or slow fills it, the oldest seconds give
//! way to the newest (counted), and the thread retries with backoff, in order, since a
//! receiver refuses a sample older than one it has.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kiln_record::schema::export::ExportRecord;

use crate::metrics::Batch;

/// Seconds kept for a receiver that does not take them: two minutes.
const QUEUE_SECONDS: usize = 120;
/// The most seconds one write carries (a receiver back after an outage gets its backlog in
/// a few writes).
const SECONDS_PER_WRITE: usize = 30;
/// Retries of one write before its seconds are given up.
const MAX_RETRIES: u32 = 6;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest one write may take while the run lasts.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How a write went.
pub enum Outcome {
    Accepted,
    /// Worth trying again: no connection, a timeout, 429 or 5xx.
    Retry(String),
    /// Refused for what it holds (a 4xx): trying again would be refused again.
    Refused(String),
}

/// A receiver's way of taking one encoded write, and its encoder's state.
pub trait Writer: Send {
    /// Encodes these seconds (oldest first) into one write; the samples it holds.
    fn encode(&mut self, batches: &[Arc<Batch>]) -> (Vec<u8>, u64);
    /// Writes one body, giving up after `timeout`.
    fn send(&mut self, body: &[u8], timeout: Duration) -> Outcome;
}

#[derive(Default)]
struct Queue {
    batches: VecDeque<Arc<Batch>>,
    closed: bool,
    /// After the run: give up what is left at this moment.
    deadline: Option<Instant>,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    account: Mutex<ExportRecord>,
}

/// A receiver's queue and its writing thread.
pub struct Sender {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sender {
    pub fn start(account: ExportRecord, writer: Box<dyn Writer>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            account: Mutex::new(account),
        });
        let thread = std::thread::Builder::new()
            .name("kiln-export".into())
            .spawn({
                let shared = shared.clone();
                move || write_loop(&shared, writer)
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues a second; never waits for the receiver.
    pub fn push(&self, batch: Arc<Batch>) {
        let pushed_out = {
            let Ok(mut q) = self.shared.queue.lock() else {
                return;
            };
            q.batches.push_back(batch);
            let over = q.batches.len().saturating_sub(QUEUE_SECONDS);
            q.batches.drain(..over);
            over
        };
        if pushed_out > 0 {
            self.account(|a| a.seconds_dropped += pushed_out as u64);
        }
        self.shared.wake.notify_one();
    }

    fn account(&self, f: impl FnOnce(&mut ExportRecord)) {
        if let Ok(mut a) = self.shared.account.lock() {
            f(&mut a);
        }
    }

    /// Sends what is queued until `deadline`, then gives up the rest (counted); returns the
    /// account.
    pub fn finish(mut self, deadline: Instant) -> ExportRecord {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.closed = true;
            q.deadline = Some(deadline);
        }
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            // the thread ends by the deadline (each write's own timeout is shorter than
            // what is left, or it is not tried); a write already on the wire may take its
            // timeout past it
            let _ = thread.join();
        }
        let record = self.shared.account.lock().map(|a| a.clone());
        record.unwrap_or_default()
    }
}

impl Drop for Sender {
    /// A run that ended in an error without [`Sender::finish`]: its thread gives up what is
    /// queued and ends, rather than wait for seconds that will not come.
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.closed = true;
            q.deadline.get_or_insert_with(Instant::now);
        }
        self.shared.wake.notify_one();
    }
}

fn write_loop(shared: &Shared, mut writer: Box<dyn Writer>) {
    let account = |f: &mut dyn FnMut(&mut ExportRecord)| {
        if let Ok(mut a) = shared.account.lock() {
            f(&mut a);
        }
    };
    loop {
        let batches = {
            let Ok(mut q) = shared.queue.lock() else {
                return;
            };
            while q.batches.is_empty() && !q.closed {
                q = match shared.wake.wait(q) {
                    Ok(q) => q,
                    Err(_) => return,
                };
            }
            if q.batches.is_empty() {
                return;
            }
            let n = q.batches.len().min(SECONDS_PER_WRITE);
            q.batches.drain(..n).collect::<Vec<_>>()
        };
        let (body, samples) = writer.encode(&batches);
        let seconds = batches.len() as u64;
        let mut backoff = FIRST_BACKOFF;
        let mut retries = 0;
        loop {
            let deadline = deadline_now(shared);
            if past(deadline) {
                account(&mut |a| a.seconds_dropped += seconds);
                break;
            }
            let left = deadline.map_or(WRITE_TIMEOUT, |d| {
                d.saturating_duration_since(Instant::now())
            });
            match writer.send(&body, WRITE_TIMEOUT.min(left)) {
                Outcome::Accepted => {
                    account(&mut |a| {
                        a.seconds_sent += seconds;
                        a.samples_sent += samples;
                    });
                    break;
                }
                Outcome::Refused(why) => {
                    account(&mut |a| {
                        a.seconds_dropped += seconds;
                        a.last_error = Some(why.clone());
                    });
                    break;
                }
                Outcome::Retry(why) => {
                    account(&mut |a| a.last_error = Some(why.clone()));
                    if retries == MAX_RETRIES {
                        account(&mut |a| a.seconds_dropped += seconds);
                        break;
                    }
                    retries += 1;
                    account(&mut |a| a.retries += 1);
                    let left = deadline_now(shared)
                        .map_or(backoff, |d| d.saturating_duration_since(Instant::now()));
                    std::thread::sleep(backoff.min(left));
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

/// The run's end and the moment after it when what is left is given up (None while the run
/// lasts).
fn deadline_now(shared: &Shared) -> Option<Instant> {
    shared.queue.lock().ok().and_then(|q| q.deadline)
}

fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Scripted {
        answers: Vec<Outcome>,
        sent: Arc<AtomicUsize>,
    }

    impl Writer for Scripted {
        fn encode(&mut self, batches: &[Arc<Batch>]) -> (Vec<u8>, u64) {
            (vec![batches.len() as u8], batches.len() as u64)
        }
        fn send(&mut self, _body: &[u8], _: Duration) -> Outcome {
            self.sent.fetch_add(1, Ordering::SeqCst);
            if self.answers.is_empty() {
                Outcome::Accepted
            } else {
                self.answers.remove(0)
            }
        }
    }

    fn batch(ms: i64) -> Arc<Batch> {
        Arc::new(Batch {
            unix_ms: ms,
            points: Vec::new(),
        })
    }

    #[test]
    fn a_write_that_fails_once_is_sent_again_and_counted_once() {
        let sent = Arc::new(AtomicUsize::new(0));
        let writer = Scripted {
            answers: vec![Outcome::Retry("connection refused".into())],
            sent: sent.clone(),
        };
        let s = Sender::start(ExportRecord::default(), Box::new(writer)).unwrap();
        s.push(batch(1));
        let account = s.finish(Instant::now() + Duration::from_secs(5));
        assert_eq!(account.seconds_sent, 1);
        assert_eq!(account.seconds_dropped, 0);
        assert_eq!(account.retries, 1);
        assert_eq!(sent.load(Ordering::SeqCst), 2);
        assert_eq!(account.last_error.as_deref(), Some("connection refused"));
    }

    #[test]
    fn a_refused_write_is_dropped_and_a_full_queue_drops_its_oldest() {
        let sent = Arc::new(AtomicUsize::new(0));
        let writer = Scripted {
            answers: vec![Outcome::Refused("400 out of order sample".into())],
            sent,
        };
        let s = Sender::start(ExportRecord::default(), Box::new(writer)).unwrap();
        for ms in 0..(QUEUE_SECONDS as i64 + 10) {
            s.push(batch(ms));
        }
        let account = s.finish(Instant::now() + Duration::from_secs(5));
        let total = account.seconds_sent + account.seconds_dropped;
        assert_eq!(total, QUEUE_SECONDS as u64 + 10, "{account:?}");
        assert!(account.seconds_dropped >= 1);
        assert_eq!(
            account.last_error.as_deref(),
            Some("400 out of order sample")
        );
    }

    #[test]
    fn a_receiver_that_never_answers_costs_the_run_no_more_than_the_deadline() {
        struct Down;
        impl Writer for Down {
            fn encode(&mut self, _: &[Arc<Batch>]) -> (Vec<u8>, u64) {
                (Vec::new(), 0)
            }
            fn send(&mut self, _: &[u8], _: Duration) -> Outcome {
                std::thread::sleep(Duration::from_millis(50));
                Outcome::Retry("timed out".into())
            }
        }
        let s = Sender::start(ExportRecord::default(), Box::new(Down)).unwrap();
        let pushing = Instant::now();
        for ms in 0..50 {
            s.push(batch(ms));
        }
        assert!(pushing.elapsed() < Duration::from_millis(50));
        let started = Instant::now();
        let account = s.finish(Instant::now() + Duration::from_millis(600));
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(account.seconds_sent, 0);
        assert_eq!(account.seconds_dropped, 50);
    }
}
