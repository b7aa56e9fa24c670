//! OTLP/HTTP metrics (protobuf, `POST /v1/metrics`): cumulative sums and gauges, latency as
//! an exponential histogram of scale 8 (Prometheus's native buckets shifted by one: OTLP's
//! bucket `i` is (base^i, base^(i+1)], Prometheus's is (base^(i-1), base^i]).
//!
//! The messages are opentelemetry-proto's `metrics/v1` and `common/v1` as a writer sends
//! them, declared with prost's derive (the field numbers of the .proto files).

use std::collections::HashMap;
use std::sync::Arc;

use crate::histogram::{NativeHistogram, SCHEMA, ZERO_THRESHOLD};
use crate::metrics::{Batch, Kind, Point, Value};

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(oneof = "Data", tags = "5, 7, 10")]
    pub data: Option<Data>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
    #[prost(message, tag = "10")]
    ExponentialHistogram(ExponentialHistogram),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

/// AGGREGATION_TEMPORALITY_CUMULATIVE: every point counts from its start time.
const CUMULATIVE: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(double, tag = "4")]
    pub as_double: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExponentialHistogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<ExponentialHistogramDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExponentialHistogramDataPoint {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
    #[prost(sint32, tag = "6")]
    pub scale: i32,
    #[prost(fixed64, tag = "7")]
    pub zero_count: u64,
    #[prost(message, optional, tag = "8")]
    pub positive: Option<Buckets>,
    #[prost(double, tag = "14")]
    pub zero_threshold: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Buckets {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint64, repeated, tag = "2")]
    pub bucket_counts: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(string, tag = "1")]
    pub string_value: String,
}

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            string_value: value.to_string(),
        }),
    }
}

impl ExponentialHistogramDataPoint {
    fn of(h: &NativeHistogram, attributes: Vec<KeyValue>, start: u64, time: u64) -> Self {
        // dense counts from the first bucket to the last, OTLP's index one below Prometheus's
        let positive = match (h.buckets.keys().next(), h.buckets.keys().next_back()) {
            (Some(&first), Some(&last)) => Some(Buckets {
                offset: first - 1,
                bucket_counts: (first..=last)
                    .map(|i| h.buckets.get(&i).copied().unwrap_or(0))
                    .collect(),
            }),
            _ => None,
        };
        Self {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: time,
            count: h.count,
            sum: Some(h.sum),
            scale: SCHEMA,
            zero_count: h.zero_count,
            positive,
            zero_threshold: ZERO_THRESHOLD,
        }
    }
}

/// Turns a receiver's batches into OTLP requests; each cumulative series keeps the start
/// time it was first sent with (a second before its first point: it was 0 then).
#[derive(Default)]
pub struct Encoder {
    starts: HashMap<String, u64>,
}

const MS: u64 = 1_000_000;

impl Encoder {
    /// The protobuf body of these batches (oldest first), and the points it holds.
    pub fn encode(&mut self, batches: &[Arc<Batch>]) -> (Vec<u8>, u64) {
        let mut metrics = Vec::new();
        let mut resource = vec![attribute("service.name", "kiln")];
        let mut points = 0;
        for batch in batches {
            let time = batch.unix_ms.max(0) as u64 * MS;
            for point in &batch.points {
                if resource.len() == 1 {
                    let run = point.labels.iter().find(|(k, _)| *k == "run");
                    resource.extend(run.map(|(_, v)| attribute("service.instance.id", v)));
                }
                metrics.push(self.metric(point, time));
                points += 1;
            }
        }
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: resource,
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "kiln".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                    }),
                    metrics,
                }],
            }],
        };
        (prost::Message::encode_to_vec(&request), points)
    }

    fn metric(&mut self, point: &Point, time: u64) -> Metric {
        // the resource says whose: `job` is the service's name there
        let attributes: Vec<KeyValue> = (point.labels.iter())
            .filter(|(k, v)| *k != "job" && !v.is_empty())
            .map(|(k, v)| attribute(k, v))
            .collect();
        let key = format!("{}{:?}", point.family.otlp, point.labels);
        let start = *self
            .starts
            .entry(key)
            .or_insert_with(|| time.saturating_sub(1000 * MS));
        let data = match (&point.value, point.family.kind) {
            (Value::Number(n), Kind::Gauge) => Data::Gauge(Gauge {
                data_points: vec![NumberDataPoint {
                    attributes,
                    start_time_unix_nano: 0,
                    time_unix_nano: time,
                    as_double: *n,
                }],
            }),
            (Value::Number(n), _) => Data::Sum(Sum {
                data_points: vec![NumberDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    as_double: *n,
                }],
                aggregation_temporality: CUMULATIVE,
                is_monotonic: true,
            }),
            (Value::Distribution(recorded), _) => {
                let native = NativeHistogram::from_recorded(recorded);
                Data::ExponentialHistogram(ExponentialHistogram {
                    data_points: vec![ExponentialHistogramDataPoint::of(
                        &native, attributes, start, time,
                    )],
                    aggregation_temporality: CUMULATIVE,
                })
            }
        };
        Metric {
            name: point.family.otlp.to_string(),
            description: point.family.help.to_string(),
            unit: point.family.unit.to_string(),
            data: Some(data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::{bucket_index, Recorded};
    use crate::metrics::{DURATION, REQUESTS};
    use prost::Message;

    #[test]
    fn sums_start_a_second_before_their_first_point_and_buckets_are_shifted_by_one() {
        let mut h = kiln_record::LatencyHistogram::new();
        h.record_n_us(1_000, 3);
        h.record_n_us(2_000, 1);
        let labels = vec![("job", "kiln".to_string()), ("run", "r7".to_string())];
        let batch = |ms: i64, n: f64| {
            Arc::new(Batch {
                unix_ms: ms,
                points: vec![
                    Point {
                        family: &REQUESTS,
                        labels: labels.clone(),
                        value: Value::Number(n),
                    },
                    Point {
                        family: &DURATION,
                        labels: labels.clone(),
                        value: Value::Distribution(Arc::new(Recorded::of(&h))),
                    },
                ],
            })
        };
        let mut e = Encoder::default();
        let (body, points) = e.encode(&[batch(10_000, 4.0), batch(11_000, 4.0)]);
        assert_eq!(points, 4);
        let request = ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
        let rm = &request.resource_metrics[0];
        let resource = &rm.resource.as_ref().unwrap().attributes;
        assert_eq!(resource[1], attribute("service.instance.id", "r7"));
        let metrics = &rm.scope_metrics[0].metrics;
        assert_eq!(metrics[0].name, "kiln.requests");
        let Some(Data::Sum(sum)) = &metrics[2].data else {
            panic!("{:?}", metrics[2]);
        };
        let p = &sum.data_points[0];
        assert_eq!(
            (p.start_time_unix_nano, p.time_unix_nano),
            (9_000 * MS, 11_000 * MS)
        );
        assert_eq!(p.attributes, [attribute("run", "r7")]);
        let Some(Data::ExponentialHistogram(eh)) = &metrics[1].data else {
            panic!("{:?}", metrics[1]);
        };
        let d = &eh.data_points[0];
        assert_eq!(d.count, 4);
        let buckets = d.positive.as_ref().unwrap();
        assert_eq!(buckets.offset, bucket_index(0.001, SCHEMA) - 1);
        // 1 ms and 2 ms: an octave apart, 256 buckets on, dense
        assert_eq!(buckets.bucket_counts.len(), 257);
        assert_eq!(buckets.bucket_counts[0], 3);
        assert_eq!(buckets.bucket_counts[256], 1);
        assert_eq!(buckets.bucket_counts.iter().sum::<u64>(), 4);
    }
}
