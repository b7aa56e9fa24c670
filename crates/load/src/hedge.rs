//! Hedged requests (`kiln run --hedge`): a request not answered after the hedge delay gets a
//! second copy, sent to the next target (the URL, then each replica, in turn); the first
//! answer wins. As in "The Tail at Scale" and gRPC's hedging policy (A6): the delay is fixed
//! or a percentile of the run's recent latency, a token bucket caps the extra load, and
//! hedging pauses while requests fail (gRPC's retry throttling).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kiln_hedge::Delay;
use kiln_record::{LatencyHistogram, SecondRecord};

use crate::target::Target;

/// A percentile delay is read from the first copies' latency over this many recent seconds...
const WINDOW_SECONDS: usize = 3;
/// ...once that window holds this many responses beyond the percentile (20 beyond p95 is
/// 400 responses): fewer place it by chance. No second copy goes out before.
const MIN_BEYOND_PERCENTILE: f64 = 20.0;
/// A percentile delay is never below this: a second copy sooner is no longer a hedge.
const MIN_PERCENTILE_DELAY_US: u64 = 100;
/// The budget's bucket holds at most this many second copies (a burst after a quiet spell).
const BUDGET_BURST: f64 = 10.0;
/// gRPC's retry throttling: a bucket of 10 tokens; a failed copy takes one, a good one gives
/// 0.1 back; hedging is allowed while more than half are left. Sustained failures above about
/// one in eleven copies pause it.
const THROTTLE_TOKENS: f64 = 10.0;
const THROTTLE_PER_SUCCESS: f64 = 0.1;

/// `--hedge`, `--hedge-cap` and `--replica`, with the delay in force during the run.
#[derive(Clone, Debug)]
pub struct HedgePlan {
    pub delay: Delay,
    /// Second copies per first copy at most (0.05 is 5%).
    pub cap: f64,
    /// Targets after the URL: first copies go to each target in turn, a request's second
    /// copy to the one after its first.
    pub replicas: Vec<Target>,
    live: Arc<LiveDelay>,
}

/// The delay in force, shared by every worker and kept by the collector from the merged
/// seconds. It lives as long as the plan, so a warm-up's latency sets the measured phase's.
#[derive(Debug, Default)]
struct LiveDelay {
    /// Microseconds; 0 while a percentile is not known yet.
    us: AtomicU64,
    window: Mutex<VecDeque<LatencyHistogram>>,
}

impl HedgePlan {
    pub fn new(delay: Delay, cap: f64, replicas: Vec<Target>) -> Self {
        let live = LiveDelay::default();
        if let Delay::Fixed(us) = delay {
            live.us.store(us, Ordering::Relaxed);
        }
        Self {
            delay,
            cap,
            replicas,
            live: Arc::new(live),
        }
    }

    /// Targets in all: the URL and the replicas.
    pub fn targets(&self) -> usize {
        1 + self.replicas.len()
    }

    /// The delay after which a second copy goes; `None` while a percentile is not known.
    pub fn delay_now(&self) -> Option<Duration> {
        match self.live.us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Takes one merged second: a percentile delay is read again from the recent seconds'
    /// first copies (bounded by `MIN_PERCENTILE_DELAY_US` and `max`), and the second records
    /// the delay in force.
    pub(crate) fn observe(&self, second: &mut SecondRecord, max: Duration) {
        let Some(h) = second.hedge.as_mut() else {
            return;
        };
        if let Delay::Percentile(p) = self.delay {
            if let Ok(mut window) = self.live.window.lock() {
                window.push_back(h.first_copy.clone());
                while window.len() > WINDOW_SECONDS {
                    window.pop_front();
                }
                let mut recent = LatencyHistogram::new();
                for s in window.iter() {
                    recent.merge(s);
                }
                let beyond = recent.count() as f64 * (1.0 - p / 100.0);
                if beyond >= MIN_BEYOND_PERCENTILE {
                    let max_us = (max.as_micros() as u64).max(MIN_PERCENTILE_DELAY_US);
                    let us = self
                        .delay
                        .resolve_us(&recent)
                        .clamp(MIN_PERCENTILE_DELAY_US, max_us);
                    self.live.us.store(us, Ordering::Relaxed);
                }
            }
        }
        h.delay_us = self.live.us.load(Ordering::Relaxed);
    }
}

/// Why a request due a second copy did not get one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The budget had no token.
    OverBudget,
    /// Copies have been failing: hedging is paused.
    Paused,
}

/// One worker thread's hedging: its budget, its throttle, the next target. Per thread, as a
/// client's channel is; the cap holds for each, so for their sum.
#[derive(Debug)]
pub(crate) struct HedgeWorker {
    cap: f64,
    targets: usize,
    next_target: usize,
    /// Second copies allowed now. Starts empty: no copy goes before its share of first
    /// copies, so at every moment second copies <= cap x first copies.
    budget: f64,
    throttle: f64,
}

impl HedgeWorker {
    pub fn new(plan: &HedgePlan, worker: usize) -> Self {
        Self {
            cap: plan.cap,
            targets: plan.targets(),
            // Threads start on different targets so a short run still spreads its requests.
            next_target: worker % plan.targets(),
            budget: 0.0,
            throttle: THROTTLE_TOKENS,
        }
    }

    /// A first copy goes out: where to, and where its second copy would go.
    pub fn first_copy(&mut self) -> (usize, usize) {
        let first = self.next_target;
        self.next_target = (first + 1) % self.targets;
        self.budget = (self.budget + self.cap).min(BUDGET_BURST.max(self.cap));
        (first, (first + 1) % self.targets)
    }

    /// A copy ended: an answer below 500 (and not 429) is a success, anything else a failure.
    pub fn copy_ended(&mut self, status: Option<u16>) {
        let ok = status.is_some_and(|s| s < 500 && s != 429);
        self.throttle = if ok {
            (self.throttle + THROTTLE_PER_SUCCESS).min(THROTTLE_TOKENS)
        } else {
            (self.throttle - 1.0).max(0.0)
        };
    }

    /// A request is due a second copy: takes a token, or says why not.
    pub fn take_hedge(&mut self) -> Result<(), Refused> {
        if self.throttle <= THROTTLE_TOKENS / 2.0 {
            return Err(Refused::Paused);
        }
        if self.budget < 1.0 {
            return Err(Refused::OverBudget);
        }
        self.budget -= 1.0;
        Ok(())
    }
}

/// Methods a second copy may repeat (RFC 9110 §9.2.2: idempotent).
pub fn is_idempotent(method: &http::Method) -> bool {
    use http::Method;
    [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::TRACE,
        Method::PUT,
        Method::DELETE,
    ]
    .contains(method)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_record::HedgeSecond;

    fn plan(delay: Delay, cap: f64, replicas: usize) -> HedgePlan {
        let target = Target::parse("http://127.0.0.1:1/").unwrap();
        HedgePlan::new(delay, cap, vec![target; replicas])
    }

    #[test]
    fn second_copies_never_outrun_the_cap_of_first_copies() {
        let p = plan(Delay::Fixed(1000), 0.05, 0);
        let mut w = HedgeWorker::new(&p, 0);
        let mut hedges = 0u64;
        for firsts in 1..=10_000u64 {
            w.first_copy();
            w.copy_ended(Some(200));
            // every request wants a hedge: only the budget stops them
            if w.take_hedge().is_ok() {
                hedges += 1;
            }
            assert!(
                hedges as f64 <= 0.05 * firsts as f64 + 1e-9,
                "{hedges} of {firsts}"
            );
        }
        assert!(
            hedges >= 499,
            "the budget lets its whole share out: {hedges}"
        );
    }

    #[test]
    fn failures_pause_hedging_and_successes_resume_it() {
        let p = plan(Delay::Fixed(1000), 1.0, 0);
        let mut w = HedgeWorker::new(&p, 0);
        w.first_copy();
        assert_eq!(w.take_hedge(), Ok(()));
        for _ in 0..5 {
            w.copy_ended(None);
        }
        w.first_copy();
        assert_eq!(w.take_hedge(), Err(Refused::Paused));
        // one failure in two keeps it paused
        for _ in 0..100 {
            w.copy_ended(Some(503));
            w.copy_ended(Some(200));
        }
        assert_eq!(w.take_hedge(), Err(Refused::Paused));
        // from (nearly) empty, back above half the bucket takes about 50 good copies
        for _ in 0..45 {
            w.copy_ended(Some(200));
        }
        assert_eq!(w.take_hedge(), Err(Refused::Paused));
        for _ in 0..10 {
            w.copy_ended(Some(200));
        }
        assert_eq!(w.take_hedge(), Ok(()));
    }

    #[test]
    fn first_copies_go_round_the_targets_and_the_second_to_the_next() {
        let p = plan(Delay::Fixed(1000), 0.1, 2);
        let mut w = HedgeWorker::new(&p, 1);
        let picks: Vec<_> = (0..4).map(|_| w.first_copy()).collect();
        assert_eq!(picks, vec![(1, 2), (2, 0), (0, 1), (1, 2)]);
        let alone = plan(Delay::Fixed(1000), 0.1, 0);
        assert_eq!(HedgeWorker::new(&alone, 3).first_copy(), (0, 0));
    }

    fn second_with(latencies_us: &[(u64, u64)]) -> SecondRecord {
        let mut h = HedgeSecond::default();
        for &(us, n) in latencies_us {
            h.first_copy.record_n_us(us, n);
        }
        SecondRecord {
            hedge: Some(h),
            ..Default::default()
        }
    }

    #[test]
    fn a_percentile_delay_waits_for_enough_responses_then_follows_the_recent_seconds() {
        let p = plan(Delay::Percentile(95.0), 0.1, 0);
        let max = Duration::from_secs(10);
        let mut s = second_with(&[(1000, 100)]);
        p.observe(&mut s, max);
        assert_eq!(p.delay_now(), None, "100 responses place no p95");
        assert_eq!(s.hedge.as_ref().unwrap().delay_us, 0);
        let mut s = second_with(&[(1000, 380), (50_000, 20)]);
        p.observe(&mut s, max);
        // 500 responses: 480 at 1 ms, 20 at 50 ms; p95 is the 475th
        let us = p.delay_now().unwrap().as_micros() as u64;
        assert!((990..=1010).contains(&us), "{us}");
        assert_eq!(s.hedge.as_ref().unwrap().delay_us, us);
        // three seconds later only the recent latency counts, and the bounds hold
        for _ in 0..3 {
            p.observe(&mut second_with(&[(10, 1000)]), max);
        }
        assert_eq!(p.delay_now(), Some(Duration::from_micros(100)));
        for _ in 0..3 {
            p.observe(&mut second_with(&[(60_000_000, 1000)]), max);
        }
        assert_eq!(p.delay_now(), Some(max));
    }

    #[test]
    fn a_fixed_delay_is_in_force_from_the_start() {
        let p = plan(Delay::Fixed(5000), 0.1, 0);
        assert_eq!(p.delay_now(), Some(Duration::from_millis(5)));
        assert!(is_idempotent(&http::Method::GET) && !is_idempotent(&http::Method::POST));
    }
}
