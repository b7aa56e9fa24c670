//! The hedged latency of a recorded distribution, exactly (no simulation).
//!
//! With X1 and X2 independent draws of the recorded latency and a hedge delay d, a hedged
//! request takes H = X1 if X1 <= d, else min(X1, d + X2). Its survival function is
//! S_H(t) = S(t) for t < d and S(t) * S(t - d) from d on (both copies must still be out).
//! A request that waits for K sub-requests (fan-out) survives t with 1 - (1 - S(t))^K.
//! S_H only steps where S(t) or S(t - d) steps, so walking the histogram's recorded values
//! and the same values shifted by d finds every quantile exactly.

use kiln_record::LatencyHistogram;
use serde::Serialize;

/// The quantiles a prediction states: p50, p90, p95, p99, p99.9.
pub const QUANTILES: [f64; 5] = [0.5, 0.9, 0.95, 0.99, 0.999];

/// Latency at [`QUANTILES`], in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Quantiles {
    pub p50_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p99_9_us: u64,
}

impl Quantiles {
    fn from_fn(mut at: impl FnMut(f64) -> u64) -> Self {
        let [a, b, c, d, e] = QUANTILES.map(&mut at);
        Self {
            p50_us: a,
            p90_us: b,
            p95_us: c,
            p99_us: d,
            p99_9_us: e,
        }
    }

    /// A recorded histogram's quantiles.
    pub fn of(latency: &LatencyHistogram) -> Self {
        Self::from_fn(|q| latency.quantile_us(q))
    }

    /// `(label, value)` pairs in order, for tables.
    pub fn labelled(&self) -> [(&'static str, u64); 5] {
        [
            ("p50", self.p50_us),
            ("p90", self.p90_us),
            ("p95", self.p95_us),
            ("p99", self.p99_us),
            ("p99.9", self.p99_9_us),
        ]
    }
}

/// What hedging at one delay would do to a recorded latency distribution.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    pub delay_us: u64,
    /// Sub-requests a request waits for (1: the request itself).
    pub fanout: u32,
    /// Second copies per first copy: the share of requests slower than the delay (an upper
    /// bound of the extra load; a cancelled loser costs the server less).
    pub extra_requests: f64,
    /// The latency as recorded (of a request of `fanout` sub-requests).
    pub before: Quantiles,
    /// The latency with a second copy after `delay_us`, the first answer taken.
    pub after: Quantiles,
}

impl Prediction {
    /// "a hedge at p95 (5.1ms) would cut p99 from 48ms to 6.2ms and p99.9 from 97ms to
    /// 51ms, for 5.0% more requests"; `at` names the delay as the user gave it.
    pub fn sentence(&self, at: &str) -> String {
        let us = kiln_record::text::us;
        // a percentile is shown with the time it stands for; a time as kiln writes times
        let at = if at.starts_with(['p', 'P']) {
            format!("{at} ({})", us(self.delay_us))
        } else {
            us(self.delay_us)
        };
        let (mut taken, mut left) = (Vec::new(), Vec::new());
        for (label, before, after) in [
            ("p99", self.before.p99_us, self.after.p99_us),
            ("p99.9", self.before.p99_9_us, self.after.p99_9_us),
        ] {
            if after < before {
                taken.push(format!("{label} from {} to {}", us(before), us(after)));
            } else {
                left.push(format!("{label} at {}", us(before)));
            }
        }
        let verbs: Vec<String> = [("take", taken), ("leave", left)]
            .into_iter()
            .filter(|(_, parts)| !parts.is_empty())
            .map(|(verb, parts)| format!("{verb} {}", parts.join(" and ")))
            .collect();
        format!(
            "a hedge at {at} would {}, for {:.1}% more requests",
            verbs.join(" and "),
            100.0 * self.extra_requests
        )
    }
}

/// The recorded values as (highest equivalent value, count at or below it), ascending.
struct Distribution {
    cumulative: Vec<(u64, u64)>,
    total: u64,
}

impl Distribution {
    fn of(latency: &LatencyHistogram) -> Self {
        let mut cumulative = Vec::new();
        let mut total = 0;
        for v in latency.inner().iter_recorded() {
            total += v.count_at_value();
            cumulative.push((v.value_iterated_to(), total));
        }
        Self { cumulative, total }
    }

    /// P(X > t).
    fn survival(&self, t: u64) -> f64 {
        let at = self.cumulative.partition_point(|(v, _)| *v <= t);
        let at_or_below = at.checked_sub(1).map_or(0, |i| self.cumulative[i].1);
        (self.total - at_or_below) as f64 / self.total as f64
    }

    /// The smallest candidate t whose survival is at most 1 - q; `survival` steps only at
    /// candidates.
    fn quantile(&self, candidates: &[u64], q: f64, survival: impl Fn(u64) -> f64) -> u64 {
        // a hair of slack: 0.03 * 0.03 must count as at most 1 - 0.9991
        let bar = 1.0 - q + 1e-12;
        let at = candidates.partition_point(|&t| survival(t) > bar);
        candidates
            .get(at)
            .or(candidates.last())
            .copied()
            .unwrap_or(0)
    }
}

/// The prediction for hedging after `delay_us`, with requests that wait for `fanout`
/// sub-requests each; `None` for an empty histogram.
pub fn predict(latency: &LatencyHistogram, delay_us: u64, fanout: u32) -> Option<Prediction> {
    if latency.is_empty() {
        return None;
    }
    let fanout = fanout.max(1);
    let dist = Distribution::of(latency);
    let values: Vec<u64> = dist.cumulative.iter().map(|(v, _)| *v).collect();
    let mut candidates: Vec<u64> = values
        .iter()
        .flat_map(|&v| [v, v.saturating_add(delay_us)])
        .chain([delay_us])
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    let of_fanout = |s: f64| 1.0 - (1.0 - s).powi(fanout as i32);
    let hedged = |t: u64| {
        let s = if t < delay_us {
            dist.survival(t)
        } else {
            dist.survival(t) * dist.survival(t - delay_us)
        };
        of_fanout(s)
    };
    let before = if fanout == 1 {
        // exactly what every other kiln figure says for this histogram
        Quantiles::from_fn(|q| latency.quantile_us(q))
    } else {
        Quantiles::from_fn(|q| dist.quantile(&values, q, |t| of_fanout(dist.survival(t))))
    };
    Some(Prediction {
        delay_us,
        fanout,
        extra_requests: dist.survival(delay_us),
        before,
        after: Quantiles::from_fn(|q| dist.quantile(&candidates, q, hedged)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn histogram(values: &[(u64, u64)]) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for &(us, n) in values {
            h.record_n_us(us, n);
        }
        h
    }

    #[test]
    fn independent_slow_requests_are_cut_to_the_delay_plus_a_fast_one() {
        // 97% answer in 1 ms, 3% in 40 ms. A hedge at 5 ms: a request is slow only if both
        // copies are (0.03 * 0.03 = 0.09%), else it is done by 5 + 1 = 6 ms.
        let h = histogram(&[(1_000, 9_700), (40_000, 300)]);
        // 40 ms as the histogram holds it (3 significant digits: its bucket's top)
        let slow = h.inner().highest_equivalent(40_000);
        let p = predict(&h, 5_000, 1).unwrap();
        assert_eq!(p.before.p99_us, slow);
        assert_eq!(p.before.p99_9_us, slow);
        assert_eq!(p.after.p50_us, 1_000);
        assert_eq!(p.after.p99_us, 6_000);
        assert_eq!(p.after.p99_9_us, 6_000);
        assert!((p.extra_requests - 0.03).abs() < 1e-12);
        assert_eq!(
            p.sentence("p95"),
            format!(
                "a hedge at p95 (5.00ms) would take p99 from {0} to 6.00ms and p99.9 from {0} \
                 to 6.00ms, for 3.0% more requests",
                kiln_record::text::us(slow)
            )
        );
        // fan-out 10: 1 - 0.97^10 = 26% of requests wait for a slow sub-request; hedged,
        // 1 - (1 - 0.0009)^10 = 0.9% do: p99 is 6 ms, and p99.9 is a sub-request whose two
        // copies were both slow, min(40, 5 + 40) = 40 ms
        let p = predict(&h, 5_000, 10).unwrap();
        assert_eq!(p.before.p90_us, slow);
        assert_eq!(p.before.p50_us, 1_000);
        assert_eq!(p.after.p99_us, 6_000);
        assert_eq!(p.after.p99_9_us, slow);
    }

    #[test]
    fn a_delay_beyond_every_latency_changes_nothing() {
        let h = histogram(&[(800, 50), (1_200, 40), (9_000, 10)]);
        let p = predict(&h, 20_000, 1).unwrap();
        assert_eq!(p.before, p.after);
        assert_eq!(p.extra_requests, 0.0);
        assert_eq!(
            p.sentence("20ms"),
            "a hedge at 20.0ms would leave p99 at 9.01ms and p99.9 at 9.01ms, for 0.0% more \
             requests"
        );
        assert!(predict(&LatencyHistogram::new(), 1_000, 1).is_none());
    }

    /// Hedged latencies drawn at random from the same histogram agree with the exact
    /// quantiles (the formula is the process it claims to be).
    #[test]
    fn the_exact_quantiles_agree_with_a_simulation() {
        // every quantile of the hedged latency clear of a step (so that chance cannot move
        // the simulated one across it): p90 1.5 ms, p95 2.9 ms, p99 3.5 ms, p99.9 9 ms
        let h = histogram(&[(900, 6_000), (1_500, 3_100), (7_000, 700), (60_000, 200)]);
        let dist = Distribution::of(&h);
        let draw = |rng: &mut fastrand::Rng| {
            let k = rng.u64(1..=dist.total);
            let at = dist.cumulative.partition_point(|(_, c)| *c < k);
            dist.cumulative[at].0
        };
        let mut rng = fastrand::Rng::with_seed(7);
        let d = 2_000;
        let mut sim = LatencyHistogram::new();
        for _ in 0..400_000 {
            let x1 = draw(&mut rng);
            let h = if x1 <= d {
                x1
            } else {
                x1.min(d + draw(&mut rng))
            };
            sim.record_us(h);
        }
        let p = predict(&h, d, 1).unwrap();
        for (q, exact) in QUANTILES.iter().zip(p.after.labelled()) {
            let simulated = sim.quantile_us(*q);
            let off = simulated.abs_diff(exact.1) as f64 / exact.1 as f64;
            assert!(
                off < 0.01,
                "{}: exact {} simulated {simulated}",
                exact.0,
                exact.1
            );
        }
    }

    proptest! {
        #[test]
        fn hedging_never_makes_a_quantile_worse(
            values in proptest::collection::vec((1u64..100_000, 1u64..1_000), 1..40),
            delay in 1u64..120_000,
            fanout in 1u32..20,
        ) {
            let h = histogram(&values);
            let p = predict(&h, delay, fanout).unwrap();
            let (before, after) = (p.before.labelled(), p.after.labelled());
            for (b, a) in before.iter().zip(after.iter()) {
                prop_assert!(a.1 <= b.1, "{} got worse: {} -> {}", a.0, b.1, a.1);
            }
            for w in after.windows(2) {
                prop_assert!(w[0].1 <= w[1].1);
            }
            prop_assert!((0.0..=1.0).contains(&p.extra_requests));
        }
    }
}
