//! The open model's arrival schedule: when the k-th request is due, from rate stages.
//!
//! Arrival k (k = 0, 1, ...) is due at the time t where the cumulative expected count
//! N(t) = integral of the rate reaches k. Within a linear stage from rate r0 to r1 over D,
//! N grows as r0*u + (r1 - r0)*u^2/(2D); solving that quadratic gives exact due times, so a
//! constant 1000/s for 10 s schedules exactly 10,000 requests, evenly spaced. Poisson
//! arrivals replace k by a running sum of unit-mean exponential gaps: the standard
//! time-change of a unit-rate Poisson process into one whose rate follows the stages.

use std::time::Duration;

use crate::plan::{Arrivals, RateStage};

/// Yields due times (offsets from the phase start) in order.
#[derive(Clone, Debug)]
pub struct ArrivalSchedule {
    /// (start offset s, duration s, rate at start, rate at end, cumulative count at start)
    segments: Vec<(f64, f64, f64, f64, f64)>,
    next_k: u64,
    segment: usize,
    /// Poisson arrivals: the generator and the cumulative count reached so far (a sum of
    /// unit-mean exponential gaps, mapped through the rate like an arrival's index).
    poisson: Option<(fastrand::Rng, f64)>,
}

impl ArrivalSchedule {
    /// Stages start from `start_rate` (a zero-length first stage sets it directly).
    pub fn new(start_rate: f64, stages: &[RateStage]) -> Self {
        let mut segments = Vec::with_capacity(stages.len());
        let (mut t, mut rate, mut count) = (0.0, start_rate, 0.0);
        for stage in stages {
            let d = stage.duration.as_secs_f64();
            if d > 0.0 {
                segments.push((t, d, rate, stage.target_rate, count));
                count += d * (rate + stage.target_rate) / 2.0;
                t += d;
            }
            rate = stage.target_rate;
        }
        Self {
            segments,
            next_k: 0,
            segment: 0,
            poisson: None,
        }
    }

    /// Spaces the arrivals as `arrivals` says.
    pub fn with_arrivals(mut self, arrivals: Arrivals) -> Self {
        self.poisson = match arrivals {
            Arrivals::Uniform => None,
            Arrivals::Poisson { seed } => Some((fastrand::Rng::with_seed(seed), 0.0)),
        };
        self
    }

    /// A constant rate for a duration.
    pub fn constant(rate: f64, duration: Duration) -> Self {
        Self::new(
            rate,
            &[RateStage {
                duration,
                target_rate: rate,
            }],
        )
    }

    /// The total arrivals the schedule will yield.
    pub fn total(&self) -> u64 {
        // the expected count, for Poisson arrivals too
        let mut copy = self.clone();
        copy.next_k = 0;
        copy.segment = 0;
        copy.poisson = None;
        copy.count() as u64
    }
}

impl Iterator for ArrivalSchedule {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let k = match &mut self.poisson {
            None => self.next_k as f64,
            Some((rng, cumulative)) => {
                // an exponential gap of mean 1 (1 - U is in (0, 1])
                *cumulative -= (1.0 - rng.f64()).ln();
                *cumulative
            }
        };
        while let Some(&(start, d, r0, r1, n0)) = self.segments.get(self.segment) {
            let n_end = n0 + d * (r0 + r1) / 2.0;
            // Arrivals due exactly at a segment's end belong to the next segment, so a
            // 10 s stage at 1000/s holds arrivals 0..9999.
            if k < n_end - 1e-9 {
                let need = k - n0;
                let a = (r1 - r0) / (2.0 * d);
                // Stable root of a*u^2 + r0*u - need = 0 (also when a is 0 or negative).
                let disc = (r0 * r0 + 4.0 * a * need).max(0.0);
                let denom = r0 + disc.sqrt();
                let u = if denom > 0.0 { 2.0 * need / denom } else { 0.0 };
                self.next_k += 1;
                return Some(Duration::from_secs_f64(start + u.clamp(0.0, d)));
            }
            self.segment += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(secs: f64, rate: f64) -> RateStage {
        RateStage {
            duration: Duration::from_secs_f64(secs),
            target_rate: rate,
        }
    }

    #[test]
    fn poisson_arrivals_have_the_rate_and_exponential_gaps() {
        let times: Vec<f64> = ArrivalSchedule::constant(1000.0, Duration::from_secs(20))
            .with_arrivals(Arrivals::Poisson { seed: 42 })
            .map(|d| d.as_secs_f64())
            .collect();
        // 20,000 expected, standard deviation sqrt(20000) = 141
        assert!(
            (times.len() as f64 - 20_000.0).abs() < 4.0 * 141.0,
            "{}",
            times.len()
        );
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((mean - 0.001).abs() < 0.00003, "mean gap {mean}");
        // exponential: the deviation equals the mean, and P(gap > 2 ms) = e^-2
        assert!((sd / mean - 1.0).abs() < 0.04, "cv {}", sd / mean);
        let over = gaps.iter().filter(|&&g| g > 0.002).count() as f64 / gaps.len() as f64;
        assert!(
            (over - (-2.0f64).exp()).abs() < 0.01,
            "P(gap > 2 ms) = {over}"
        );
        // the same seed, the same arrivals; the expected count is the uniform one
        let again = ArrivalSchedule::constant(1000.0, Duration::from_secs(20))
            .with_arrivals(Arrivals::Poisson { seed: 42 });
        assert_eq!(again.clone().count(), times.len());
        assert_eq!(again.total(), 20_000);
    }

    #[test]
    fn poisson_arrivals_follow_a_ramp() {
        // 0 -> 2000/s over 10 s: 10,000 expected, a quarter of them in the first half
        let times: Vec<f64> = ArrivalSchedule::new(0.0, &[stage(10.0, 2000.0)])
            .with_arrivals(Arrivals::Poisson { seed: 7 })
            .map(|d| d.as_secs_f64())
            .collect();
        assert!((times.len() as f64 - 10_000.0).abs() < 4.0 * 100.0);
        let first_half = times.iter().filter(|&&t| t < 5.0).count() as f64;
        assert!((first_half - 2_500.0).abs() < 4.0 * 50.0, "{first_half}");
    }

    #[test]
    fn a_constant_rate_is_evenly_spaced_and_counts_exactly() {
        let times: Vec<Duration> =
            ArrivalSchedule::constant(1000.0, Duration::from_secs(10)).collect();
        assert_eq!(times.len(), 10_000);
        assert_eq!(times[0], Duration::ZERO);
        let gap = times[5001] - times[5000];
        assert!((gap.as_secs_f64() - 0.001).abs() < 1e-9);
        assert!(*times.last().unwrap() < Duration::from_secs(10));
    }

    #[test]
    fn a_linear_ramp_puts_a_quarter_of_arrivals_in_its_first_half() {
        // 0 -> 2000/s over 10 s: 10,000 arrivals, 2,500 of them in the first 5 s.
        let times: Vec<Duration> = ArrivalSchedule::new(0.0, &[stage(10.0, 2000.0)]).collect();
        assert!((times.len() as i64 - 10_000).abs() <= 1, "{}", times.len());
        let first_half = times.iter().filter(|t| t.as_secs_f64() < 5.0).count();
        assert!((first_half as i64 - 2_500).abs() <= 1, "{first_half}");
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn stages_ramp_up_hold_and_down() {
        let stages = [
            stage(0.0, 100.0),
            stage(2.0, 100.0),
            stage(2.0, 300.0),
            stage(2.0, 0.0),
        ];
        let s = ArrivalSchedule::new(0.0, &stages);
        // 200 + (100+300)/2*2 + 300/2*2 = 200 + 400 + 300
        assert!((s.total() as i64 - 900).abs() <= 1, "{}", s.total());
    }

    proptest::proptest! {
        #[test]
        fn arrivals_are_ordered_and_match_the_integral(r0 in 0.0f64..5000.0, r1 in 0.0f64..5000.0, secs in 0.1f64..5.0) {
            let s = ArrivalSchedule::new(r0, &[stage(secs, r1)]);
            let expected = secs * (r0 + r1) / 2.0;
            let times: Vec<Duration> = s.collect();
            proptest::prop_assert!((times.len() as f64 - expected).abs() <= 1.0 + 1e-6);
            proptest::prop_assert!(times.windows(2).all(|w| w[0] <= w[1]));
            proptest::prop_assert!(times.iter().all(|t| t.as_secs_f64() <= secs + 1e-9));
        }
    }
}

#[cfg(test)]
mod shard_tests {
    use super::*;
    use crate::plan::Shard;

    /// The shards' arrivals, put together, are the whole schedule's: none lost, none twice.
    #[test]
    fn shards_together_release_exactly_the_whole_schedule() {
        let stages = [
            RateStage {
                duration: Duration::from_secs(3),
                target_rate: 700.0,
            },
            RateStage {
                duration: Duration::from_secs(2),
                target_rate: 50.0,
            },
        ];
        for arrivals in [Arrivals::Uniform, Arrivals::Poisson { seed: 7 }] {
            let whole: Vec<Duration> = ArrivalSchedule::new(0.0, &stages)
                .with_arrivals(arrivals)
                .collect();
            for count in [2u32, 3, 4] {
                let mut union: Vec<Duration> = (0..count)
                    .flat_map(|index| {
                        let shard = Shard { index, count };
                        ArrivalSchedule::new(0.0, &stages)
                            .with_arrivals(arrivals)
                            .enumerate()
                            .filter(move |(j, _)| shard.takes(*j as u64))
                            .map(|(_, due)| due)
                    })
                    .collect();
                union.sort();
                assert_eq!(union, whole, "{count} shards, {arrivals:?}");
            }
        }
    }
}
