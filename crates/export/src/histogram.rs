//! kiln's HDR latency histograms as the receivers' histograms: Prometheus's native
//! (exponential) buckets, which OpenTelemetry's exponential histograms share, and classic
//! `le` buckets for receivers without native ones.
//!
//! HDR keeps 3 significant digits (buckets 0.1% wide); a native histogram of schema 8 has
//! buckets 2^(1/256) - 1 = 0.27% wide, so a quantile read from the export is within about
//! 0.3% of kiln's own.

use std::collections::BTreeMap;

use kiln_record::LatencyHistogram;

/// The finest schema Prometheus accepts: each power of two split into 2^8 buckets.
pub const SCHEMA: i32 = 8;

/// The zero bucket's width: Prometheus's default (2^-128), so that only a latency of 0 falls
/// in it.
pub const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

/// A histogram in native buckets: bucket `i` counts the values in (base^(i-1), base^i],
/// base = 2^(2^-SCHEMA), in seconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NativeHistogram {
    pub count: u64,
    /// Sum of the values, in seconds.
    pub sum: f64,
    pub zero_count: u64,
    pub buckets: BTreeMap<i32, u64>,
}

/// The native bucket of a value in seconds (> 0) at `schema` (> 0): the `i` with
/// base^(i-1) < value <= base^i.
pub fn bucket_index(seconds: f64, schema: i32) -> i32 {
    let scale = f64::from(1u32 << schema);
    let i = (seconds.log2() * scale).ceil();
    // the logarithm of a bound may land a hair above it: the bound belongs below
    let below = (i - 1.0) / scale;
    if i.is_finite() && seconds <= below.exp2() {
        (i - 1.0) as i32
    } else {
        i as i32
    }
}

/// A latency histogram's recorded buckets: each one's value (the middle of the values it
/// stands for) in seconds, with its count, in order. A few hundred pairs where the HDR
/// histogram holds 28,000 counters: what a queued second keeps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recorded(pub Vec<(f64, u64)>);

impl Recorded {
    pub fn of(h: &LatencyHistogram) -> Self {
        let inner = h.inner();
        Self(
            inner
                .iter_recorded()
                .map(|v| {
                    let us = inner.median_equivalent(v.value_iterated_to());
                    (us as f64 / 1e6, v.count_at_value())
                })
                .collect(),
        )
    }
}

impl NativeHistogram {
    pub fn from_recorded(recorded: &Recorded) -> Self {
        let mut out = Self::default();
        for &(seconds, count) in &recorded.0 {
            out.count += count;
            out.sum += seconds * count as f64;
            if seconds <= ZERO_THRESHOLD {
                out.zero_count += count;
            } else {
                *out.buckets
                    .entry(bucket_index(seconds, SCHEMA))
                    .or_default() += count;
            }
        }
        out
    }

    /// The buckets as runs of consecutive indexes: (offset, counts) where the first offset is
    /// the first index and each later one the gap since the previous run's end, as
    /// Prometheus's spans and OpenTelemetry's offset-plus-counts both start from.
    pub fn spans(&self) -> Vec<(i32, Vec<u64>)> {
        let mut spans: Vec<(i32, Vec<u64>)> = Vec::new();
        let mut next = None;
        for (&i, &count) in &self.buckets {
            match (spans.last_mut(), next) {
                (Some((_, counts)), Some(n)) if n == i => counts.push(count),
                _ => {
                    let offset = next.map_or(i, |n| i - n);
                    spans.push((offset, vec![count]));
                }
            }
            next = Some(i + 1);
        }
        spans
    }
}

/// Classic histogram bounds in seconds: 1, 1.5, 2, 3, 5 and 7.5 in each decade from 0.1 ms
/// to 75 s (36 buckets and +Inf), written as decimals so that `le` reads as typed.
pub fn classic_bounds() -> Vec<f64> {
    let mut bounds = Vec::new();
    for exponent in -4..=1 {
        for mantissa in ["1", "1.5", "2", "3", "5", "7.5"] {
            if let Ok(b) = format!("{mantissa}e{exponent}").parse::<f64>() {
                bounds.push(b);
            }
        }
    }
    bounds
}

/// Cumulative counts at each of `bounds` (values at or below it), the sum in seconds and the
/// count: a classic histogram's `_bucket`, `_sum` and `_count`.
pub fn classic_counts(recorded: &Recorded, bounds: &[f64]) -> (Vec<u64>, f64, u64) {
    let mut at_or_below = vec![0u64; bounds.len()];
    let (mut sum, mut count) = (0.0, 0u64);
    for &(seconds, n) in &recorded.0 {
        sum += seconds * n as f64;
        count += n;
        let first = bounds.partition_point(|&b| b < seconds);
        if let Some(slot) = at_or_below.get_mut(first) {
            *slot += n;
        }
    }
    let mut running = 0;
    for slot in &mut at_or_below {
        running += *slot;
        *slot = running;
    }
    (at_or_below, sum, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn powers_of_two_are_the_upper_bounds_of_their_buckets() {
        assert_eq!(bucket_index(1.0, SCHEMA), 0);
        assert_eq!(bucket_index(2.0, SCHEMA), 256);
        assert_eq!(bucket_index(0.5, SCHEMA), -256);
        // just above 1: the first bucket past it
        assert_eq!(bucket_index(1.000_001, SCHEMA), 1);
        // log2(1.5) * 256 = 149.7
        assert_eq!(bucket_index(1.5, SCHEMA), 150);
        assert_eq!(bucket_index(1.0, 0), 0);
        assert_eq!(bucket_index(3.0, 0), 2);
    }

    proptest! {
        #[test]
        fn a_value_lies_inside_its_bucket(seconds in 1e-7f64..4e3) {
            let i = bucket_index(seconds, SCHEMA);
            let scale = f64::from(1u32 << SCHEMA);
            let (lower, upper) = ((f64::from(i - 1) / scale).exp2(), (f64::from(i) / scale).exp2());
            prop_assert!(lower < seconds * (1.0 + 1e-12) && seconds <= upper * (1.0 + 1e-12),
                "{seconds} in ({lower}, {upper}]");
        }

        #[test]
        fn native_buckets_keep_every_count(values in proptest::collection::vec(1u64..5_000_000, 1..300)) {
            let mut h = LatencyHistogram::new();
            for v in &values {
                h.record_us(*v);
            }
            let native = NativeHistogram::from_recorded(&Recorded::of(&h));
            prop_assert_eq!(native.count, values.len() as u64);
            prop_assert_eq!(native.buckets.values().sum::<u64>(), values.len() as u64);
            let spans = native.spans();
            prop_assert_eq!(spans.iter().map(|(_, c)| c.len()).sum::<usize>(), native.buckets.len());
            // the spans walk the buckets' indexes back
            let mut index = 0;
            let mut walked = Vec::new();
            for (n, (offset, counts)) in spans.iter().enumerate() {
                index = if n == 0 { *offset } else { index + offset };
                for c in counts {
                    walked.push((index, *c));
                    index += 1;
                }
            }
            let expected: Vec<(i32, u64)> = native.buckets.iter().map(|(i, c)| (*i, *c)).collect();
            prop_assert_eq!(walked, expected);
        }
    }

    #[test]
    fn the_99th_percentile_of_native_buckets_is_within_their_width_of_kilns() {
        let mut h = LatencyHistogram::new();
        for us in 1..=10_000u64 {
            h.record_us(us * 7);
        }
        let native = NativeHistogram::from_recorded(&Recorded::of(&h));
        // the bucket holding the 99th percentile by rank
        let rank = (0.99 * native.count as f64).ceil() as u64;
        let mut seen = 0;
        let bucket = native
            .buckets
            .iter()
            .find(|(_, c)| {
                seen += **c;
                seen >= rank
            })
            .map(|(i, _)| *i)
            .unwrap();
        let upper = (f64::from(bucket) / 256.0).exp2();
        let kiln = h.quantile_us(0.99) as f64 / 1e6;
        assert!((upper - kiln).abs() / kiln < 0.004, "{upper} vs {kiln}");
    }

    #[test]
    fn classic_buckets_are_cumulative_at_their_bounds() {
        let bounds = classic_bounds();
        assert_eq!(bounds.len(), 36);
        assert_eq!(bounds[0], 0.0001);
        assert_eq!(bounds[1], 0.00015);
        assert_eq!(bounds[35], 75.0);
        let mut h = LatencyHistogram::new();
        h.record_n_us(100, 3); // at 0.1 ms: in the first bucket (le is inclusive)
        h.record_n_us(1_200, 2); // 1.2 ms: le=0.0015
        h.record_n_us(100_000_000, 1); // 100 s: past the last bound, only in +Inf
        let (counts, sum, count) = classic_counts(&Recorded::of(&h), &bounds);
        assert_eq!(counts[0], 3);
        assert_eq!(counts[bounds.iter().position(|&b| b == 0.001).unwrap()], 3);
        assert_eq!(counts[bounds.iter().position(|&b| b == 0.0015).unwrap()], 5);
        assert_eq!(*counts.last().unwrap(), 5);
        assert_eq!(count, 6);
        assert!((sum - (0.0003 + 0.0024 + 100.0)).abs() < 0.1, "{sum}");
    }
}
