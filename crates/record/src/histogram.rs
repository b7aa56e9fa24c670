//! Latency histograms in microseconds: HDR, 3 significant digits, 1 us to 1 h.
//!
//! They merge exactly (adding counts bucket by bucket), so per-second histograms add up to
//! the run's, and runs from several machines add up to one. Stored as HdrHistogram's
//! V2+DEFLATE format in base64, the same bytes HdrHistogram's own tools read.

use base64::{engine::general_purpose::STANDARD, Engine as _};
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::RecordError;

/// The largest latency kept exactly; longer ones are recorded as this value.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// An HDR histogram of latencies in microseconds.
#[derive(Clone, Debug)]
pub struct LatencyHistogram(Histogram<u64>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        // The bounds are constants that hdrhistogram accepts, so this cannot fail.
        Self(
            Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGNIFICANT_DIGITS)
                .expect("constant histogram bounds are valid"),
        )
    }

    /// The hdrhistogram inside (for its serializers).
    pub fn inner(&self) -> &Histogram<u64> {
        &self.0
    }

    /// Records one latency; values outside 1 us..=1 h are clamped to the range.
    #[inline]
    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.clamp(1, MAX_LATENCY_US));
    }

    pub fn record_n_us(&mut self, us: u64, count: u64) {
        // Cannot fail: the value is clamped into the histogram's range.
        let _ = self.0.record_n(us.clamp(1, MAX_LATENCY_US), count);
    }

    /// Adds another histogram's counts to this one (exact).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides, so `add` cannot fail.
        let _ = self.0.add(&other.0);
    }

    pub fn reset(&mut self) {
        self.0.reset();
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The latency at quantile `q` (0..=1), in microseconds; 0 when empty.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.0.is_empty() {
            0
        } else {
            self.0.value_at_quantile(q)
        }
    }

    pub fn max_us(&self) -> u64 {
        self.0.max()
    }

    pub fn min_us(&self) -> u64 {
        if self.0.is_empty() {
            0
        } else {
            self.0.min()
        }
    }

    pub fn mean_us(&self) -> f64 {
        self.0.mean()
    }

    pub fn stdev_us(&self) -> f64 {
        self.0.stdev()
    }

    /// How many recorded values are above `us`.
    pub fn count_above(&self, us: u64) -> u64 {
        self.0.len() - self.0.count_between(0, us)
    }

    /// How many recorded values read as `us` or more, or (`inclusive` false) as more than
    /// `us`, at the histogram's resolution: a value reads as its bucket's highest equivalent,
    /// as [`Self::quantile_us`] reports it. So a quantile is at least `us` exactly when more
    /// than its share of the values read so.
    pub fn count_reading_above(&self, us: u64, inclusive: bool) -> u64 {
        let h = &self.0;
        let bucket_reads_above = if inclusive {
            true
        } else {
            h.highest_equivalent(us) > us
        };
        if bucket_reads_above {
            // every value in `us`'s bucket and after it
            match h.lowest_equivalent(us).checked_sub(1) {
                Some(below) => self.count_above(below),
                None => h.len(),
            }
        } else {
            self.count_above(us)
        }
    }

    /// Share of recorded values at or below `us` (0..=1); 1 when empty.
    pub fn fraction_at_or_below(&self, us: u64) -> f64 {
        if self.0.is_empty() {
            return 1.0;
        }
        self.0.count_between(0, us) as f64 / self.0.len() as f64
    }

    /// The mean of the values at or below quantile `q` (the fastest `q` of them): a typical
    /// time that a few stalls of a busy host do not pull up. 0 when empty.
    pub fn mean_up_to_quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        let keep = ((self.0.len() as f64 * q).ceil() as u64).max(1);
        let (mut n, mut sum) = (0u64, 0f64);
        for v in self.0.iter_recorded() {
            let take = v.count_at_value().min(keep - n);
            sum += self.0.median_equivalent(v.value_iterated_to()) as f64 * take as f64;
            n += take;
            if n >= keep {
                break;
            }
        }
        sum / n.max(1) as f64
    }

    /// Counts per bucket, for drawing: `(bucket upper bound us, count)` over `buckets`
    /// logarithmic buckets between min and max.
    pub fn log_buckets(&self, buckets: usize) -> Vec<(u64, u64)> {
        if self.0.is_empty() || buckets == 0 {
            return Vec::new();
        }
        let lo = self.min_us().max(1) as f64;
        let hi = self.max_us().max(1) as f64;
        let ratio = (hi / lo).max(1.000_001);
        let uppers: Vec<u64> = (1..=buckets)
            .map(|i| (lo * ratio.powf(i as f64 / buckets as f64)).ceil() as u64)
            .collect();
        let mut counts = vec![0u64; buckets];
        for v in self.0.iter_recorded() {
            let at = uppers.partition_point(|upper| *upper < v.value_iterated_to());
            counts[at.min(buckets - 1)] += v.count_at_value();
        }
        uppers.into_iter().zip(counts).collect()
    }

    /// Base64 of the V2+DEFLATE encoding.
    pub fn to_base64(&self) -> String {
        let mut bytes = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = V2DeflateSerializer::new().serialize(&self.0, &mut bytes);
        STANDARD.encode(bytes)
    }

    pub fn from_base64(text: &str) -> Result<Self, RecordError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|e| RecordError::Histogram(format!("not base64: {e}")))?;
        check_header(&bytes)?;
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| {
                RecordError::Histogram(format!("not an HdrHistogram V2 encoding: {e:?}"))
            })?;
        let mut hist = Self::new();
        // Re-record into our bounds so that merges stay exact whatever the file said.
        for v in decoded.iter_recorded() {
            hist.record_n_us(v.value_iterated_to(), v.count_at_value());
        }
        Ok(hist)
    }

    /// The summary figures everyone reads: percentiles, mean, spread.
    pub fn stats(&self) -> LatencyStats {
        LatencyStats {
            count: self.count(),
            min_us: self.min_us(),
            mean_us: self.mean_us(),
            stdev_us: self.stdev_us(),
            p50_us: self.quantile_us(0.50),
            p75_us: self.quantile_us(0.75),
            p90_us: self.quantile_us(0.90),
            p95_us: self.quantile_us(0.95),
            p99_us: self.quantile_us(0.99),
            p99_9_us: self.quantile_us(0.999),
            p99_99_us: self.quantile_us(0.9999),
            max_us: self.max_us(),
        }
    }
}

/// HdrHistogram's V2 encodings: plain, and DEFLATE-compressed (what kiln writes).
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// The most bytes a histogram of kiln's precision and range encodes its counts in (about
/// 28,000 buckets, at most 9 bytes each; a run's are a few hundred bytes).
const MAX_PAYLOAD_BYTES: u32 = 256 * 1024;

/// Refuses, from its header and before anything is allocated for it, a histogram other
/// than kiln's own (3 significant digits, 1 us to 1 h): a record's histograms are kiln's,
/// and a crafted one of 5 digits over 2^62 made the decoder fill a 48 MB array and walk it
/// (34 s of CPU for a megabyte of record), or claimed a 4 GB payload it then allocated.
fn check_header(bytes: &[u8]) -> Result<(), RecordError> {
    use std::io::Read as _;
    let refuse = |why: String| Err(RecordError::Histogram(why));
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |b: &[u8], at: usize| -> Option<u64> {
        Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
    };
    // cookie, payload length, normalizing offset, digits, lowest, highest, ratio
    let mut header = [0u8; 40];
    match u32_at(bytes, 0) {
        Some(V2_COOKIE) => match bytes.get(..40) {
            Some(h) => header.copy_from_slice(h),
            None => return refuse("a histogram header cut short".into()),
        },
        Some(V2_COMPRESSED_COOKIE) => {
            let compressed = bytes.get(8..).unwrap_or_default();
            let inflated = flate2::read::ZlibDecoder::new(compressed).read_exact(&mut header);
            if inflated.is_err() {
                return refuse("a compressed histogram whose header does not inflate".into());
            }
        }
        _ => return refuse("not an HdrHistogram V2 encoding (its cookie)".into()),
    }
    let field = |at| u32_at(&header, at).unwrap_or(u32::MAX);
    let (payload, digits) = (field(4), field(12));
    let (lowest, highest) = (u64_at(&header, 16), u64_at(&header, 24));
    if digits > u32::from(SIGNIFICANT_DIGITS)
        || lowest != Some(1)
        || highest.is_none_or(|h| h > MAX_LATENCY_US)
        || payload > MAX_PAYLOAD_BYTES
    {
        return refuse(format!(
            "a histogram of {digits} significant digits from {} to {} ({payload} bytes of \
             counts): kiln's are of {SIGNIFICANT_DIGITS} digits from 1 us to 1 h",
            lowest.unwrap_or(0),
            highest.unwrap_or(0)
        ));
    }
    Ok(())
}

impl Serialize for LatencyHistogram {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for LatencyHistogram {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::from_base64(&text).map_err(serde::de::Error::custom)
    }
}

/// Percentiles and moments of one latency histogram, all in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub count: u64,
    pub min_us: u64,
    pub mean_us: f64,
    pub stdev_us: f64,
    pub p50_us: u64,
    pub p75_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p99_9_us: u64,
    pub p99_99_us: u64,
    pub max_us: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_of_the_fastest_leaves_the_stalls_out() {
        let mut h = LatencyHistogram::new();
        for _ in 0..99 {
            h.record_us(10_000);
        }
        h.record_us(1_000_000);
        assert!((h.mean_us() - 19_900.0).abs() < 30.0, "{}", h.mean_us());
        assert!((h.mean_up_to_quantile_us(0.99) - 10_000.0).abs() < 10.0);
        assert!((h.mean_up_to_quantile_us(1.0) - h.mean_us()).abs() < 100.0);
        assert_eq!(LatencyHistogram::new().mean_up_to_quantile_us(0.99), 0.0);
    }
    use proptest::prelude::*;

    #[test]
    fn percentiles_of_a_uniform_sequence_are_within_a_tenth_of_a_percent() {
        let mut h = LatencyHistogram::new();
        for us in 1..=100_000u64 {
            h.record_us(us);
        }
        let s = h.stats();
        assert_eq!(s.count, 100_000);
        for (got, want) in [
            (s.p50_us, 50_000.0),
            (s.p99_us, 99_000.0),
            (s.p99_9_us, 99_900.0),
        ] {
            assert!((got as f64 - want).abs() / want < 0.001, "{got} vs {want}");
        }
    }

    #[test]
    fn values_beyond_an_hour_are_clamped_not_lost() {
        let mut h = LatencyHistogram::new();
        h.record_us(10 * MAX_LATENCY_US);
        h.record_us(0);
        assert_eq!(h.count(), 2);
        assert!(h.max_us() >= MAX_LATENCY_US);
        assert_eq!(h.min_us(), 1);
    }

    #[test]
    fn a_histogram_of_another_precision_or_range_is_refused_before_it_is_decoded() {
        let encode = |h: &Histogram<u64>| {
            let mut bytes = Vec::new();
            V2DeflateSerializer::new().serialize(h, &mut bytes).unwrap();
            bytes
        };
        // 5 digits over 2^62: tens of megabytes of counts to fill and walk
        let mut crafted = Histogram::<u64>::new_with_bounds(1, 1 << 62, 5).unwrap();
        crafted.record(1 << 61).unwrap();
        let refused = LatencyHistogram::from_base64(&STANDARD.encode(encode(&crafted)));
        let why = refused.unwrap_err().to_string();
        assert!(why.contains("5 significant digits"), "{why}");
        // a plain V2 header that claims 4 GB of counts
        let mut claimed = 0x1c84_9313u32.to_be_bytes().to_vec();
        claimed.extend(u32::MAX.to_be_bytes());
        claimed.extend(0u32.to_be_bytes());
        claimed.extend(3u32.to_be_bytes());
        claimed.extend(1u64.to_be_bytes());
        claimed.extend(MAX_LATENCY_US.to_be_bytes());
        claimed.extend(1f64.to_be_bytes());
        let why = LatencyHistogram::from_base64(&STANDARD.encode(&claimed))
            .unwrap_err()
            .to_string();
        assert!(why.contains("4294967295 bytes"), "{why}");
        // kiln's own pass, full or empty
        let mut own = LatencyHistogram::new();
        for us in [1, 250, 80_000, MAX_LATENCY_US] {
            own.record_us(us);
        }
        let back = LatencyHistogram::from_base64(&own.to_base64()).unwrap();
        assert_eq!(back, own);
        let empty = LatencyHistogram::new();
        assert_eq!(
            LatencyHistogram::from_base64(&empty.to_base64()).unwrap(),
            empty
        );
    }

    #[test]
    fn garbage_base64_is_an_error_not_a_panic() {
        assert!(LatencyHistogram::from_base64("not base64 !!").is_err());
        assert!(LatencyHistogram::from_base64("aGVsbG8gd29ybGQ=").is_err());
    }

    #[test]
    fn log_buckets_count_every_value_once() {
        let mut h = LatencyHistogram::new();
        for us in [100, 200, 300, 5_000, 5_000, 90_000] {
            h.record_us(us);
        }
        let total: u64 = h.log_buckets(12).iter().map(|b| b.1).sum();
        assert_eq!(total, 6);
    }

    proptest! {
        #[test]
        fn base64_round_trip_is_lossless(values in proptest::collection::vec(1u64..MAX_LATENCY_US, 0..300)) {
            let mut h = LatencyHistogram::new();
            for v in &values { h.record_us(*v); }
            let back = LatencyHistogram::from_base64(&h.to_base64()).unwrap();
            prop_assert_eq!(back.stats(), h.stats());
        }

        #[test]
        fn merging_parts_equals_recording_all(a in proptest::collection::vec(1u64..10_000_000, 0..200),
                                              b in proptest::collection::vec(1u64..10_000_000, 0..200)) {
            let (mut ha, mut hb, mut all) = (LatencyHistogram::new(), LatencyHistogram::new(), LatencyHistogram::new());
            for v in &a { ha.record_us(*v); all.record_us(*v); }
            for v in &b { hb.record_us(*v); all.record_us(*v); }
            ha.merge(&hb);
            prop_assert!(ha == all);
        }

        #[test]
        fn arbitrary_text_never_panics_the_decoder(text in ".{0,200}") {
            let _ = LatencyHistogram::from_base64(&text);
        }
    }
}
