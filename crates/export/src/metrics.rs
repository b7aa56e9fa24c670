//! The run's figures as monitoring metrics: cumulative since the run (or the phase) began,
//! as Prometheus and OpenTelemetry both want counters and histograms, so that a receiver
//! that missed a second loses resolution, not counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use kiln_record::{LatencyHistogram, PhaseEnd, SecondRecord};
use kiln_sample::ResourceSecond;

use crate::histogram::Recorded;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A metric's name, meaning and unit, stated once for every receiver.
#[derive(Debug, PartialEq, Eq)]
pub struct Family {
    /// The Prometheus name.
    pub name: &'static str,
    /// The OpenTelemetry name: what the Collector's Prometheus exporters turn back into
    /// `name` (dots to underscores, the unit and `_total` added), so that one dashboard
    /// reads either path.
    pub otlp: &'static str,
    pub help: &'static str,
    /// UCUM, as OpenTelemetry writes units ("s", "By"; none for counts).
    pub unit: &'static str,
    pub kind: Kind,
}

pub const REQUESTS: Family = Family {
    name: "kiln_requests_total",
    otlp: "kiln.requests",
    help: "Requests that ended, by status: the HTTP status, or why no response came (timeout, connect_refused, reset, ...)",
    unit: "",
    kind: Kind::Counter,
};
pub const DURATION: Family = Family {
    name: "kiln_request_duration_seconds",
    otlp: "kiln.request.duration",
    help: "Latency of the requests that ended: from the intended send in an open model (no coordinated omission), from the send in a closed one",
    unit: "s",
    kind: Kind::Histogram,
};
pub const SCHEDULED: Family = Family {
    name: "kiln_requests_scheduled_total",
    otlp: "kiln.requests.scheduled",
    help: "Open model: arrivals the schedule asked for",
    unit: "",
    kind: Kind::Counter,
};
pub const SENT: Family = Family {
    name: "kiln_requests_sent_total",
    otlp: "kiln.requests.sent",
    help: "Requests sent",
    unit: "",
    kind: Kind::Counter,
};
pub const UNSENT: Family = Family {
    name: "kiln_requests_unsent_total",
    otlp: "kiln.requests.unsent",
    help: "Arrivals never sent (every connection busy at the cap, or the phase ended first), counted when their phase ends",
    unit: "",
    kind: Kind::Counter,
};
pub const CUT_OFF: Family = Family {
    name: "kiln_requests_cut_off_total",
    otlp: "kiln.requests.cut_off",
    help: "Requests still in flight or still connecting when their phase ended, counted then",
    unit: "",
    kind: Kind::Counter,
};
pub const GRPC_CALLS: Family = Family {
    name: "kiln_grpc_calls_total",
    otlp: "kiln.grpc.calls",
    help: "gRPC calls answered, by grpc-status",
    unit: "",
    kind: Kind::Counter,
};
pub const CONNECTIONS: Family = Family {
    name: "kiln_open_connections",
    otlp: "kiln.open_connections",
    help: "Connections open to the target at the end of the second",
    unit: "",
    kind: Kind::Gauge,
};
pub const KILN_CPU: Family = Family {
    name: "kiln_process_cpu_seconds_total",
    otlp: "kiln.process.cpu",
    help: "CPU time kiln itself used since the run began (user and system)",
    unit: "s",
    kind: Kind::Counter,
};
pub const TARGET_CPU: Family = Family {
    name: "kiln_target_cpu_seconds_total",
    otlp: "kiln.target.cpu",
    help: "CPU time the watched target used (every process serving the port), by mode",
    unit: "s",
    kind: Kind::Counter,
};
pub const TARGET_CPU_WAIT: Family = Family {
    name: "kiln_target_cpu_wait_seconds_total",
    otlp: "kiln.target.cpu_wait",
    help: "Time the target's threads waited in the run queue for a CPU (schedstat)",
    unit: "s",
    kind: Kind::Counter,
};
pub const TARGET_RSS: Family = Family {
    name: "kiln_target_resident_memory_bytes",
    otlp: "kiln.target.resident_memory",
    help: "Resident memory of the watched target",
    unit: "By",
    kind: Kind::Gauge,
};
pub const TARGET_THREADS: Family = Family {
    name: "kiln_target_threads",
    otlp: "kiln.target.threads",
    help: "Threads of the watched target",
    unit: "",
    kind: Kind::Gauge,
};

/// Every family kiln exports, for metadata and the dashboard's test.
pub const FAMILIES: [&Family; 13] = [
    &REQUESTS,
    &DURATION,
    &SCHEDULED,
    &SENT,
    &UNSENT,
    &CUT_OFF,
    &GRPC_CALLS,
    &CONNECTIONS,
    &KILN_CPU,
    &TARGET_CPU,
    &TARGET_CPU_WAIT,
    &TARGET_RSS,
    &TARGET_THREADS,
];

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(f64),
    /// A cumulative latency distribution.
    Distribution(Arc<Recorded>),
}

/// One series' value at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub family: &'static Family,
    /// The run's labels, then the series' own, in no particular order.
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

/// What a moment of the run sends: its points, all at one timestamp.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub unix_ms: i64,
    pub points: Vec<Point>,
}

/// The labels every series of the run carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunLabels {
    /// The run directory's name: one run's series among many.
    pub run: String,
    /// The plan's name, for a plan run.
    pub plan: Option<String>,
    /// `i/N` of a sharded run: the shards' series sum to the whole.
    pub shard: Option<String>,
}

impl RunLabels {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![("job", "kiln".to_string()), ("run", self.run.clone())];
        pairs.extend(self.plan.clone().map(|p| ("plan", p)));
        pairs.extend(self.shard.clone().map(|s| ("shard", s)));
        pairs
    }
}

/// A request without a response as a status label: its error's name as the record writes
/// it (`timeout`, `connect_refused`).
fn error_label(kind: kiln_record::ErrorKind) -> String {
    use kiln_record::ErrorKind::*;
    match kind {
        ConnectRefused => "connect_refused",
        ConnectTimeout => "connect_timeout",
        ConnectOther => "connect_other",
        Reset => "reset",
        Timeout => "timeout",
        Tls => "tls",
        BadResponse => "bad_response",
        Other => "other",
    }
    .to_string()
}

/// The running totals.
#[derive(Default)]
pub struct RunMetrics {
    labels: Vec<(&'static str, String)>,
    /// (phase, name, status) -> requests ended
    requests: BTreeMap<(String, Option<String>, String), u64>,
    durations: BTreeMap<(String, Option<String>), LatencyHistogram>,
    scheduled: BTreeMap<String, u64>,
    sent: BTreeMap<String, u64>,
    unsent: BTreeMap<String, u64>,
    cut_off: BTreeMap<String, u64>,
    grpc: BTreeMap<(String, String), u64>,
    target_cpu_user_s: f64,
    target_cpu_system_s: f64,
    target_cpu_wait_s: Option<f64>,
}

impl RunMetrics {
    pub fn new(labels: &RunLabels) -> Self {
        Self {
            labels: labels.pairs(),
            ..Self::default()
        }
    }

    fn point(&self, family: &'static Family, own: &[(&'static str, &str)], value: Value) -> Point {
        let mut labels = self.labels.clone();
        labels.extend(own.iter().map(|(k, v)| (*k, v.to_string())));
        Point {
            family,
            labels,
            value,
        }
    }

    /// A load second: the request counts and latency so far of its phase (per request name
    /// in a plan), the schedule's, and kiln's own CPU so far (`kiln_cpu_s`).
    pub fn load_second(&mut self, s: &SecondRecord, kiln_cpu_s: f64) -> Batch {
        let phase = s.phase.clone();
        let mut add = |name: Option<&String>, status: String, n: u64| {
            *(self.requests)
                .entry((phase.clone(), name.cloned(), status))
                .or_default() += n;
        };
        if s.names.is_empty() {
            for (code, n) in &s.status {
                add(None, code.to_string(), *n);
            }
            for (kind, n) in &s.errors {
                add(None, error_label(*kind), *n);
            }
            (self.durations.entry((phase.clone(), None)).or_default()).merge(&s.latency);
        } else {
            for (name, second) in &s.names {
                for (code, n) in &second.status {
                    add(Some(name), code.to_string(), *n);
                }
                for (kind, n) in &second.errors {
                    add(Some(name), error_label(*kind), *n);
                }
                (self.durations.entry((phase.clone(), Some(name.clone()))))
                    .or_default()
                    .merge(&second.latency);
            }
        }
        *self.scheduled.entry(phase.clone()).or_default() += s.scheduled;
        *self.sent.entry(phase.clone()).or_default() += s.sent;
        for (code, n) in &s.grpc {
            let key = (phase.clone(), kiln_record::grpc::grpc_code_name(*code));
            *self.grpc.entry(key).or_default() += n;
        }

        let mut points = Vec::new();
        let named = |phase: &str, name: &Option<String>| {
            let mut own = vec![("phase", phase.to_string())];
            own.extend(name.clone().map(|n| ("name", n)));
            own
        };
        for ((p, name, status), n) in &self.requests {
            if *p != s.phase {
                continue;
            }
            let mut own = named(p, name);
            own.push(("status", status.clone()));
            points.push(self.owned_point(&REQUESTS, own, Value::Number(*n as f64)));
        }
        for ((p, name), h) in &self.durations {
            if *p != s.phase {
                continue;
            }
            let value = Value::Distribution(Arc::new(Recorded::of(h)));
            points.push(self.owned_point(&DURATION, named(p, name), value));
        }
        let at_phase = [("phase", s.phase.as_str())];
        if s.scheduled > 0 || self.scheduled[&s.phase] > 0 {
            let n = self.scheduled[&s.phase] as f64;
            points.push(self.point(&SCHEDULED, &at_phase, Value::Number(n)));
        }
        let sent = self.sent[&s.phase] as f64;
        points.push(self.point(&SENT, &at_phase, Value::Number(sent)));
        for ((p, status), n) in &self.grpc {
            if *p == s.phase {
                let own = vec![("phase", p.clone()), ("grpc_status", status.clone())];
                points.push(self.owned_point(&GRPC_CALLS, own, Value::Number(*n as f64)));
            }
        }
        let open = Value::Number(s.connections as f64);
        points.push(self.point(&CONNECTIONS, &[], open));
        points.push(self.point(&KILN_CPU, &[], Value::Number(kiln_cpu_s)));
        Batch {
            unix_ms: s.unix_ms as i64,
            points,
        }
    }

    fn owned_point(
        &self,
        family: &'static Family,
        own: Vec<(&'static str, String)>,
        value: Value,
    ) -> Point {
        let mut labels = self.labels.clone();
        labels.extend(own);
        Point {
            family,
            labels,
            value,
        }
    }

    /// A phase's end: what it never sent and what it cut off.
    pub fn phase_end(&mut self, end: &PhaseEnd, unix_ms: i64) -> Batch {
        let unsent = self.unsent.entry(end.phase.clone()).or_default();
        *unsent += end.unsent;
        let unsent = *unsent as f64;
        let cut = self.cut_off.entry(end.phase.clone()).or_default();
        *cut += end.abandoned + end.abandoned_connecting;
        let cut = *cut as f64;
        let at_phase = [("phase", end.phase.as_str())];
        Batch {
            unix_ms,
            points: vec![
                self.point(&UNSENT, &at_phase, Value::Number(unsent)),
                self.point(&CUT_OFF, &at_phase, Value::Number(cut)),
            ],
        }
    }

    /// A sampler's second of the watched target.
    pub fn resource_second(&mut self, r: &ResourceSecond) -> Option<Batch> {
        let p = r.process.as_ref()?;
        let seconds = |pct: f64| pct / 100.0 * r.interval_s;
        self.target_cpu_user_s += seconds(p.rates.cpu_user_pct);
        self.target_cpu_system_s += seconds(p.rates.cpu_system_pct);
        if let Some(wait) = p.rates.cpu_wait_pct {
            *self.target_cpu_wait_s.get_or_insert(0.0) += seconds(wait);
        }
        let mut points = vec![
            self.point(
                &TARGET_CPU,
                &[("mode", "user")],
                Value::Number(self.target_cpu_user_s),
            ),
            self.point(
                &TARGET_CPU,
                &[("mode", "system")],
                Value::Number(self.target_cpu_system_s),
            ),
            self.point(&TARGET_RSS, &[], Value::Number(p.rss_kib as f64 * 1024.0)),
            self.point(&TARGET_THREADS, &[], Value::Number(p.threads as f64)),
        ];
        if let Some(wait) = self.target_cpu_wait_s {
            points.push(self.point(&TARGET_CPU_WAIT, &[], Value::Number(wait)));
        }
        Some(Batch {
            unix_ms: r.unix_ms as i64,
            points,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(phase: &str, ok: u64, errors: u64, ms: u64) -> SecondRecord {
        let mut s = SecondRecord {
            phase: phase.into(),
            unix_ms: ms,
            requests: ok + errors,
            sent: ok + errors,
            ..SecondRecord::default()
        };
        s.status.insert(200, ok);
        if errors > 0 {
            s.errors.insert(kiln_record::ErrorKind::Timeout, errors);
        }
        for _ in 0..ok {
            s.latency.record_us(2_000);
        }
        s
    }

    fn number(batch: &Batch, family: &Family, label: (&str, &str)) -> Option<f64> {
        batch.points.iter().find_map(|p| {
            let has = p.labels.iter().any(|(k, v)| *k == label.0 && v == label.1);
            match (&p.value, p.family == family && has) {
                (Value::Number(n), true) => Some(*n),
                _ => None,
            }
        })
    }

    #[test]
    fn counts_accumulate_per_phase_and_status() {
        let labels = RunLabels {
            run: "r1".into(),
            shard: Some("0/2".into()),
            ..RunLabels::default()
        };
        let mut m = RunMetrics::new(&labels);
        m.load_second(&second("warmup", 5, 0, 1_000), 0.1);
        m.load_second(&second("main", 10, 1, 2_000), 0.2);
        let b = m.load_second(&second("main", 20, 2, 3_000), 0.3);
        assert_eq!(b.unix_ms, 3_000);
        assert_eq!(number(&b, &REQUESTS, ("status", "200")), Some(30.0));
        assert_eq!(number(&b, &REQUESTS, ("status", "timeout")), Some(3.0));
        // the warm-up's series is not repeated with the main phase's seconds
        assert!(b
            .points
            .iter()
            .all(|p| !p.labels.contains(&("phase", "warmup".into()))));
        assert_eq!(number(&b, &SENT, ("phase", "main")), Some(33.0));
        assert_eq!(number(&b, &KILN_CPU, ("run", "r1")), Some(0.3));
        let h = b
            .points
            .iter()
            .find_map(|p| match &p.value {
                Value::Distribution(d) => Some(d.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(h.0.iter().map(|(_, c)| c).sum::<u64>(), 30);
        assert!(b
            .points
            .iter()
            .all(|p| p.labels.contains(&("shard", "0/2".into()))));
    }
}
