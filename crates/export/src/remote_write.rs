//! Prometheus remote write 1.0: a snappy-compressed `prometheus.WriteRequest`, native
//! histograms (or classic `_bucket{le}` series) for latency.
//!
//! The messages are declared here with prost's derive, with the field numbers of
//! Prometheus's `prompb/types.proto` and `remote.proto` (the part of them a writer sends):
//! compiling the .proto files would need protoc or a descriptor set for five messages.

use std::collections::HashMap;

use crate::histogram::{classic_bounds, classic_counts, NativeHistogram, SCHEMA, ZERO_THRESHOLD};
use crate::metrics::{Batch, Family, Kind, Point, Value, FAMILIES};

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Sorted by name, `__name__` among them.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<Histogram>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    /// COUNTER 1, GAUGE 2, HISTOGRAM 3.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    #[prost(string, tag = "4")]
    pub help: String,
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// A native histogram with integer counts (buckets delta-encoded).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(oneof = "Count", tags = "1, 2")]
    pub count: Option<Count>,
    #[prost(double, tag = "3")]
    pub sum: f64,
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    #[prost(oneof = "ZeroCount", tags = "6, 7")]
    pub zero_count: Option<ZeroCount>,
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    /// UNKNOWN 0, YES 1, NO 2, GAUGE 3.
    #[prost(int32, tag = "14")]
    pub reset_hint: i32,
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Count {
    #[prost(uint64, tag = "1")]
    CountInt(u64),
    #[prost(double, tag = "2")]
    CountFloat(f64),
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ZeroCount {
    #[prost(uint64, tag = "6")]
    ZeroCountInt(u64),
    #[prost(double, tag = "7")]
    ZeroCountFloat(f64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// A reset hint of NO: the histogram only grows within a series.
const RESET_NO: i32 = 2;

impl Histogram {
    fn native(h: &NativeHistogram, timestamp: i64) -> Self {
        let mut spans = Vec::new();
        let mut deltas = Vec::new();
        let mut previous = 0i64;
        for (offset, counts) in h.spans() {
            spans.push(BucketSpan {
                offset,
                length: counts.len() as u32,
            });
            for c in counts {
                deltas.push(c as i64 - previous);
                previous = c as i64;
            }
        }
        Self {
            count: Some(Count::CountInt(h.count)),
            sum: h.sum,
            schema: SCHEMA,
            zero_threshold: ZERO_THRESHOLD,
            zero_count: Some(ZeroCount::ZeroCountInt(h.zero_count)),
            positive_spans: spans,
            positive_deltas: deltas,
            reset_hint: RESET_NO,
            timestamp,
        }
    }
}

/// Turns a target's batches into write requests, one series' samples in time order: the
/// receiver refuses a whole request for one sample out of order or repeated.
pub struct Encoder {
    classic: bool,
    bounds: Vec<f64>,
    /// Each series sent so far (its labels as one text) and its last timestamp.
    last: HashMap<String, i64>,
    metadata_sent: bool,
}

/// What a write holds, for the record's account.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// The snappy-compressed protobuf body.
    pub body: Vec<u8>,
    pub samples: u64,
}

impl Encoder {
    pub fn new(classic: bool) -> Self {
        Self {
            classic,
            bounds: classic_bounds(),
            last: HashMap::new(),
            metadata_sent: false,
        }
    }

    /// The write of these batches, oldest first.
    pub fn encode(&mut self, batches: &[std::sync::Arc<Batch>]) -> Encoded {
        let mut request = WriteRequest::default();
        if !self.metadata_sent {
            self.metadata_sent = true;
            request.metadata = FAMILIES.iter().map(|f| metadata(f)).collect();
        }
        for batch in batches {
            for point in &batch.points {
                self.push(&mut request.timeseries, point, batch.unix_ms);
            }
        }
        let samples = request
            .timeseries
            .iter()
            .map(|t| (t.samples.len() + t.histograms.len()) as u64)
            .sum();
        let raw = prost::Message::encode_to_vec(&request);
        // snappy's block format cannot fail on a buffer it sized itself
        let body = snap::raw::Encoder::new()
            .compress_vec(&raw)
            .unwrap_or_default();
        Encoded { body, samples }
    }

    fn push(&mut self, out: &mut Vec<TimeSeries>, point: &Point, ts: i64) {
        match &point.value {
            Value::Number(n) => {
                let labels = labels(point.family.name, &point.labels, None);
                self.samples(out, labels, point.family.kind == Kind::Counter, ts, *n);
            }
            Value::Distribution(recorded) if self.classic => {
                let (counts, sum, count) = classic_counts(recorded, &self.bounds);
                let name = point.family.name;
                let le: Vec<String> = self.bounds.iter().map(|b| b.to_string()).collect();
                let buckets = le
                    .into_iter()
                    .zip(counts)
                    .chain([("+Inf".to_string(), count)]);
                for (le, n) in buckets {
                    let labels = labels(&format!("{name}_bucket"), &point.labels, Some(&le));
                    self.samples(out, labels, true, ts, n as f64);
                }
                let sum_labels = labels(&format!("{name}_sum"), &point.labels, None);
                self.samples(out, sum_labels, true, ts, sum);
                let count_labels = labels(&format!("{name}_count"), &point.labels, None);
                self.samples(out, count_labels, true, ts, count as f64);
            }
            Value::Distribution(recorded) => {
                let labels = labels(point.family.name, &point.labels, None);
                let native = NativeHistogram::from_recorded(recorded);
                let mut histograms = Vec::new();
                let Some(from) = self.advance(&labels, ts) else {
                    return;
                };
                if from.is_new_at_zero() {
                    let empty = NativeHistogram::default();
                    histograms.push(Histogram::native(&empty, ts - 1000));
                }
                histograms.push(Histogram::native(&native, ts));
                out.push(TimeSeries {
                    labels,
                    samples: Vec::new(),
                    histograms,
                });
            }
        }
    }

    /// A counter series that first appears is first sent at 0 a second before (it was 0
    /// then), so that `rate` and `increase` count its first second.
    fn samples(
        &mut self,
        out: &mut Vec<TimeSeries>,
        labels: Vec<Label>,
        counter: bool,
        ts: i64,
        v: f64,
    ) {
        let Some(from) = self.advance(&labels, ts) else {
            return;
        };
        let mut samples = Vec::new();
        if counter && from.is_new_at_zero() {
            samples.push(Sample {
                value: 0.0,
                timestamp: ts - 1000,
            });
        }
        samples.push(Sample {
            value: v,
            timestamp: ts,
        });
        out.push(TimeSeries {
            labels,
            samples,
            histograms: Vec::new(),
        });
    }

    /// Whether the series may take a sample at `ts` (later than its last), and whether it
    /// is new.
    fn advance(&mut self, labels: &[Label], ts: i64) -> Option<Seen> {
        let key = labels
            .iter()
            .map(|l| format!("{}\u{0}{}\u{0}", l.name, l.value))
            .collect::<String>();
        match self.last.get_mut(&key) {
            Some(last) if *last >= ts => None,
            Some(last) => {
                *last = ts;
                Some(Seen::Before)
            }
            None => {
                self.last.insert(key, ts);
                Some(Seen::New)
            }
        }
    }
}

enum Seen {
    New,
    Before,
}

impl Seen {
    fn is_new_at_zero(&self) -> bool {
        matches!(self, Seen::New)
    }
}

fn metadata(f: &Family) -> MetricMetadata {
    MetricMetadata {
        r#type: match f.kind {
            Kind::Counter => 1,
            Kind::Gauge => 2,
            Kind::Histogram => 3,
        },
        metric_family_name: f.name.to_string(),
        help: f.help.to_string(),
        unit: match f.unit {
            "s" => "seconds",
            "By" => "bytes",
            _ => "",
        }
        .to_string(),
    }
}

/// The series' labels sorted by name, as the receiver requires, `__name__` first.
fn labels(name: &str, own: &[(&'static str, String)], le: Option<&str>) -> Vec<Label> {
    let mut labels: Vec<Label> = own
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| Label {
            name: k.to_string(),
            value: v.clone(),
        })
        .collect();
    labels.extend(le.map(|le| Label {
        name: "le".into(),
        value: le.into(),
    }));
    labels.push(Label {
        name: "__name__".into(),
        value: name.into(),
    });
    labels.sort_by(|a, b| a.name.cmp(&b.name));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Recorded;
    use crate::metrics::{DURATION, REQUESTS};
    use prost::Message;
    use std::sync::Arc;

    fn decode(e: &Encoded) -> WriteRequest {
        let raw = snap::raw::Decoder::new().decompress_vec(&e.body).unwrap();
        WriteRequest::decode(raw.as_slice()).unwrap()
    }

    fn batch(ts: i64, n: f64) -> Arc<Batch> {
        Arc::new(Batch {
            unix_ms: ts,
            points: vec![Point {
                family: &REQUESTS,
                labels: vec![("status", "200".into()), ("job", "kiln".into())],
                value: Value::Number(n),
            }],
        })
    }

    #[test]
    fn a_new_counter_starts_at_zero_and_a_repeated_moment_is_not_sent() {
        let mut e = Encoder::new(false);
        let first = decode(&e.encode(&[batch(5_000, 7.0)]));
        assert_eq!(first.metadata.len(), FAMILIES.len());
        let ts = &first.timeseries[0];
        let names: Vec<&str> = ts.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "job", "status"]);
        assert_eq!(
            ts.samples,
            [
                Sample {
                    value: 0.0,
                    timestamp: 4_000
                },
                Sample {
                    value: 7.0,
                    timestamp: 5_000
                }
            ]
        );
        let again = e.encode(&[batch(5_000, 8.0), batch(6_000, 9.0)]);
        let again = decode(&again);
        assert!(again.metadata.is_empty());
        assert_eq!(again.timeseries.len(), 1);
        assert_eq!(
            again.timeseries[0].samples,
            [Sample {
                value: 9.0,
                timestamp: 6_000
            }]
        );
    }

    #[test]
    fn native_and_classic_histograms_hold_the_same_counts() {
        let mut h = kiln_record::LatencyHistogram::new();
        for us in [1_000u64, 1_000, 2_000, 40_000] {
            h.record_us(us);
        }
        let point = Batch {
            unix_ms: 10_000,
            points: vec![Point {
                family: &DURATION,
                labels: vec![],
                value: Value::Distribution(Arc::new(Recorded::of(&h))),
            }],
        };
        let native = decode(&Encoder::new(false).encode(&[Arc::new(point.clone())]));
        let hist = &native.timeseries[0].histograms[1];
        assert_eq!(hist.count, Some(Count::CountInt(4)));
        // 1 ms, 2 ms and 40 ms: three buckets apart, deltas from 0 then from each other
        assert_eq!(hist.positive_deltas, [2, -1, 0]);
        assert_eq!(hist.positive_spans.len(), 3);
        assert_eq!(
            hist.positive_spans[0].offset,
            crate::histogram::bucket_index(0.001, 8)
        );
        let classic = decode(&Encoder::new(true).encode(&[Arc::new(point)]));
        let bucket = |le: &str| {
            classic.timeseries.iter().find_map(|t| {
                let has = t.labels.iter().any(|l| l.name == "le" && l.value == le);
                has.then(|| t.samples.last().unwrap().value)
            })
        };
        assert_eq!(bucket("0.001"), Some(2.0));
        assert_eq!(bucket("0.002"), Some(3.0));
        assert_eq!(bucket("0.05"), Some(4.0));
        assert_eq!(bucket("+Inf"), Some(4.0));
        // 36 bounds, +Inf, _sum and _count
        assert_eq!(classic.timeseries.len(), 39);
    }
}
