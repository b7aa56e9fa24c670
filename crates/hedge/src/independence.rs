//! Does a second copy of a slow request have the run's usual chance of being fast? Only if
//! slow requests come independently. When they come together (a GC pause, a cache expiring
//! every minute, a stalled host), the copy is as slow as the first and hedging buys nothing:
//! the cause is the server. kiln sees seconds, so it judges how the slow requests spread over
//! the run's seconds: independent ones spread like draws (binomial counts per second),
//! shared stalls bunch them into a few seconds.

use serde::Serialize;

/// One second of a run: its responses and how many of them were slower than the delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SecondCounts {
    pub requests: u64,
    pub slow: u64,
}

impl SecondCounts {
    /// A second's responses and how many were slower than `delay_us`; a hedged run's own
    /// view without hedging: its first copies.
    pub fn of(s: &kiln_record::SecondRecord, delay_us: u64) -> Self {
        let latency = s.hedge.as_ref().map_or(&s.latency, |h| &h.first_copy);
        Self {
            requests: latency.count(),
            slow: latency.count_above(delay_us),
        }
    }

    /// Each measured second of `run` with its requests slower than `delay_us`: a pass over
    /// the load's seconds (their histograms are not kept in memory).
    pub fn of_run(run: &kiln_record::Run, delay_us: u64) -> Vec<Self> {
        run.each_measured_second(|s| Self::of(s, delay_us))
    }
}

/// How the slow requests spread over the seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Independence {
    /// Seconds judged (those expected to hold half a slow request or more).
    pub seconds: usize,
    pub slow: u64,
    pub requests: u64,
    /// Pearson's chi-square over the seconds divided by its degrees of freedom: about 1 for
    /// independent slow requests, far above when they bunch.
    pub dispersion: f64,
    /// The chi-square as a standard normal score (Wilson-Hilferty).
    pub z: f64,
    /// The share of slow requests beyond each second's expected count: what bunched.
    pub bunched_share: f64,
    /// The fewest seconds that hold half of the slow requests.
    pub seconds_with_half: usize,
    /// Slow requests come together: hedging will not cut them.
    pub independent: bool,
}

/// Fewer seconds than this say nothing about how slow requests spread.
pub const MIN_SECONDS: usize = 5;
/// The chi-square must be this far above chance (z of p = 0.001)...
const MIN_Z: f64 = 3.09;
/// ...and this share of the slow requests must have come in bunches: at high rates a slight
/// swing of the slow share from second to second is significant and still leaves hedging
/// almost all of its effect.
const MIN_BUNCHED: f64 = 0.25;

impl Independence {
    /// What the spread says about hedging, in a sentence.
    pub fn sentence(&self) -> String {
        if self.independent {
            format!(
                "the slow requests came one by one, as independent ones do (spread over the \
                 seconds with dispersion {:.1}; 1 is chance): a second copy has the usual \
                 chance of being fast",
                self.dispersion
            )
        } else {
            format!(
                "the slow requests came together ({:.0}% of them bunched: half in {} of {} \
                 seconds), so a second copy would wait as long as the first: hedging will not \
                 help, the cause is the server (a stall all requests share)",
                100.0 * self.bunched_share,
                self.seconds_with_half,
                self.seconds
            )
        }
    }

    /// `None` when there are too few seconds or no slow (or only slow) requests to judge.
    pub fn judge(seconds: &[SecondCounts]) -> Option<Self> {
        let requests: u64 = seconds.iter().map(|s| s.requests).sum();
        let slow: u64 = seconds.iter().map(|s| s.slow.min(s.requests)).sum();
        if requests == 0 || slow == 0 || slow == requests {
            return None;
        }
        let p = slow as f64 / requests as f64;
        let judged: Vec<&SecondCounts> = seconds
            .iter()
            .filter(|s| s.requests as f64 * p >= 0.5)
            .collect();
        if judged.len() < MIN_SECONDS {
            return None;
        }
        let (mut chi2, mut bunched, mut judged_slow) = (0.0, 0.0, 0u64);
        for s in &judged {
            let n = s.requests as f64;
            let k = s.slow.min(s.requests) as f64;
            let expected = n * p;
            chi2 += (k - expected).powi(2) / (expected * (1.0 - p));
            bunched += (k - expected).max(0.0);
            judged_slow += s.slow.min(s.requests);
        }
        let df = (judged.len() - 1) as f64;
        // Wilson-Hilferty: (X/df)^(1/3) is nearly normal with mean 1 - 2/(9 df)
        let v = 2.0 / (9.0 * df);
        let z = ((chi2 / df).cbrt() - (1.0 - v)) / v.sqrt();
        let bunched_share = if judged_slow > 0 {
            bunched / judged_slow as f64
        } else {
            0.0
        };
        let mut per_second: Vec<u64> = judged.iter().map(|s| s.slow.min(s.requests)).collect();
        per_second.sort_unstable_by(|a, b| b.cmp(a));
        let mut held = 0;
        let seconds_with_half = per_second
            .iter()
            .position(|k| {
                held += k;
                2 * held >= judged_slow
            })
            .map_or(per_second.len(), |i| i + 1);
        Some(Self {
            seconds: judged.len(),
            slow,
            requests,
            dispersion: chi2 / df,
            z,
            bunched_share,
            seconds_with_half,
            independent: !(z >= MIN_Z && bunched_share >= MIN_BUNCHED),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(mut slow: impl FnMut(usize) -> u64, n: usize) -> Vec<SecondCounts> {
        (0..n)
            .map(|i| SecondCounts {
                requests: 200,
                slow: slow(i),
            })
            .collect()
    }

    #[test]
    fn slow_requests_drawn_independently_are_independent() {
        // each of 200 requests a second slow with probability 3%, drawn
        let mut rng = fastrand::Rng::with_seed(3);
        let drawn = seconds(|_| (0..200).filter(|_| rng.f64() < 0.03).count() as u64, 60);
        let i = Independence::judge(&drawn).unwrap();
        assert!(i.independent, "{i:?}");
        assert!((0.5..1.6).contains(&i.dispersion), "{i:?}");
        // every fiftieth request slow: even spread, less dispersed than chance
        let even = seconds(|_| 4, 60);
        let i = Independence::judge(&even).unwrap();
        assert!(i.independent && i.dispersion < 0.1, "{i:?}");
    }

    #[test]
    fn a_stall_every_few_seconds_bunches_the_slow_requests() {
        // a 400 ms stall every 5 s: 80 of 200 requests slow in one second of five
        let stalls = seconds(|i| if i % 5 == 0 { 80 } else { 1 }, 60);
        let i = Independence::judge(&stalls).unwrap();
        assert!(!i.independent, "{i:?}");
        assert!(i.bunched_share > 0.7, "{i:?}");
        // 12 stalls of 80 hold 960 of 1008 slow requests: 7 of them hold half
        assert_eq!(i.seconds_with_half, 7, "{i:?}");
    }

    #[test]
    fn a_slight_swing_at_a_high_rate_is_significant_but_not_bunched() {
        // 20,000 responses a second, the slow share swinging between 4.5% and 5.5%
        let swing: Vec<SecondCounts> = (0..60)
            .map(|i| SecondCounts {
                requests: 20_000,
                slow: if i % 2 == 0 { 900 } else { 1_100 },
            })
            .collect();
        let i = Independence::judge(&swing).unwrap();
        assert!(i.z > MIN_Z, "{i:?}");
        assert!(i.independent, "{i:?}");
    }

    #[test]
    fn too_little_to_judge_is_none() {
        assert!(Independence::judge(&seconds(|_| 3, 4)).is_none());
        assert!(Independence::judge(&seconds(|_| 0, 60)).is_none());
        assert!(Independence::judge(&seconds(|_| 200, 60)).is_none());
        assert!(Independence::judge(&[]).is_none());
    }
}
