//! The load engine's part of the run record: one JSON line per phase second, and one line
//! when a phase ends. Everything the load summary shows is rebuilt from these lines, so a run
//! killed half-way still reports its finished seconds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{LatencyHistogram, LatencyStats};

/// The part kind (and file name stem) of the per-second load records.
pub const LOAD_SECONDS_PART: &str = "load-seconds";

/// Why a request got no HTTP response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The target refused the TCP connection (nothing listening).
    ConnectRefused,
    /// The TCP (or TLS) connection was not established within the timeout.
    ConnectTimeout,
    /// Any other failure to connect (unreachable network, DNS, no ports left).
    ConnectOther,
    /// The target closed or reset the connection before answering.
    Reset,
    /// No complete response within the request timeout.
    Timeout,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The target answered with something that is not valid HTTP.
    BadResponse,
    Other,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectTimeout,
        ErrorKind::ConnectOther,
        ErrorKind::Reset,
        ErrorKind::Timeout,
        ErrorKind::Tls,
        ErrorKind::BadResponse,
        ErrorKind::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::ConnectRefused => "connect refused",
            ErrorKind::ConnectTimeout => "connect timeout",
            ErrorKind::ConnectOther => "connect failed",
            ErrorKind::Reset => "connection reset/closed",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Tls => "TLS",
            ErrorKind::BadResponse => "bad response",
            ErrorKind::Other => "other",
        }
    }
}

/// What happened in one second of a phase (by completion time).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SecondRecord {
    pub phase: String,
    /// Seconds since the phase started: this record covers `[second, second + 1)`.
    pub second: u32,
    /// Wall-clock end of this second (ms since the Unix epoch), to align with other series.
    #[serde(default)]
    pub unix_ms: u64,
    /// Requests that ended this second: HTTP responses plus errors.
    pub requests: u64,
    /// Requests sent this second.
    pub sent: u64,
    /// Open model: arrivals due this second by the schedule.
    #[serde(default)]
    pub scheduled: u64,
    pub status: BTreeMap<u16, u64>,
    /// A gRPC run's calls answered this second by their status code (`grpc-status`, or the
    /// code an HTTP error maps to): every response of a gRPC run has one, and a call whose
    /// code is not OK failed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc: BTreeMap<u8, u64>,
    /// A gRPC run's failed calls' first `grpc-message` this second, by status code.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_messages: BTreeMap<u8, String>,
    /// A streaming method's messages and latency to the first message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_stream: Option<crate::grpc::GrpcStreamSecond>,
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Response body bytes received.
    pub body_bytes: u64,
    /// Open connections at the end of the second.
    pub connections: u64,
    /// Latency of the responses that ended this second. In an open model it is measured
    /// from the intended send time (no coordinated omission); in a closed model from the send.
    pub latency: LatencyHistogram,
    /// Open model only: latency from the actual send (the target's service time as seen by
    /// the client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<LatencyHistogram>,
    /// Open model: the worst delay this second between a request's intended and actual send.
    #[serde(default)]
    pub send_lag_max_us: u64,
    /// For people and scripts reading the file: `latency`'s p50, p90, p99 and max, in
    /// microseconds (derived; the histogram is the record).
    #[serde(default)]
    pub latency_p50_p90_p99_max_us: [u64; 4],
    /// A plan's scenario iterations that ended this second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub iterations: u64,
    /// A plan's checks run and failed this second (over all requests).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub checks: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub checks_failed: u64,
    /// A plan's figures per request name (a step's `name`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<String, NameSecond>,
    /// `kiln run --hedge`: second copies sent and won, the first copies' own latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<crate::HedgeSecond>,
    /// What the wire showed: how responses arrived, connections opened and ended.
    #[serde(default, skip_serializing_if = "crate::wire::WireSecond::is_empty")]
    pub wire: crate::wire::WireSecond,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One request name's figures in one second: JMeter's aggregate-report row, kept whole.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NameSecond {
    /// Requests with this name that ended this second.
    pub requests: u64,
    /// Ended without a response, with a status of 400 or above (unless the step's own
    /// status check accepts it), or with a failed check: JMeter's "Error %".
    pub failed: u64,
    #[serde(default)]
    pub status: BTreeMap<u16, u64>,
    #[serde(default)]
    pub errors: BTreeMap<ErrorKind, u64>,
    #[serde(default)]
    pub checks: u64,
    #[serde(default)]
    pub checks_failed: u64,
    /// Responses from which a step's extraction (a token, an id) found nothing: the
    /// request failed, but no check did (JUnit once said "214 of 644 checks failed" for a
    /// step with one check, counting each failed extraction as a check run and failed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub extractions_failed: u64,
    /// Requests that could not be made, by why (a header whose value from a data file held a
    /// line break, a variable without a value): each a failed check, nothing sent. The reasons
    /// name the header or the variable, never the value (it may be a secret).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_sent: BTreeMap<String, u64>,
    #[serde(default)]
    pub body_bytes: u64,
    /// Counted as the whole run's latency is (the first request of an open-model iteration
    /// from its scheduled time).
    pub latency: LatencyHistogram,
}

impl NameSecond {
    pub fn merge(&mut self, other: &NameSecond) {
        self.requests = self.requests.saturating_add(other.requests);
        self.failed = self.failed.saturating_add(other.failed);
        add_counts(&mut self.status, &other.status);
        add_counts(&mut self.errors, &other.errors);
        self.checks = self.checks.saturating_add(other.checks);
        self.checks_failed = self.checks_failed.saturating_add(other.checks_failed);
        self.extractions_failed = self
            .extractions_failed
            .saturating_add(other.extractions_failed);
        add_counts(&mut self.not_sent, &other.not_sent);
        self.body_bytes = self.body_bytes.saturating_add(other.body_bytes);
        self.latency.merge(&other.latency);
    }
}

fn add_counts<K: Ord + Clone>(into: &mut BTreeMap<K, u64>, from: &BTreeMap<K, u64>) {
    for (k, n) in from {
        let count = into.entry(k.clone()).or_default();
        *count = count.saturating_add(*n);
    }
}

impl SecondRecord {
    /// Adds another worker's record of the same second (histograms merge exactly).
    pub fn merge(&mut self, other: &SecondRecord) {
        // Saturating: a corrupt record's huge count must not wrap into a small one.
        self.requests = self.requests.saturating_add(other.requests);
        self.sent = self.sent.saturating_add(other.sent);
        self.scheduled = self.scheduled.saturating_add(other.scheduled);
        add_counts(&mut self.status, &other.status);
        add_counts(&mut self.grpc, &other.grpc);
        for (code, message) in &other.grpc_messages {
            (self.grpc_messages.entry(*code)).or_insert_with(|| message.clone());
        }
        add_counts(&mut self.errors, &other.errors);
        self.iterations = self.iterations.saturating_add(other.iterations);
        self.checks = self.checks.saturating_add(other.checks);
        self.checks_failed = self.checks_failed.saturating_add(other.checks_failed);
        for (name, figures) in &other.names {
            match self.names.get_mut(name) {
                Some(mine) => mine.merge(figures),
                None => {
                    self.names.insert(name.clone(), figures.clone());
                }
            }
        }
        self.body_bytes = self.body_bytes.saturating_add(other.body_bytes);
        self.connections = self.connections.saturating_add(other.connections);
        self.latency.merge(&other.latency);
        if let Some(service) = &other.service {
            self.service
                .get_or_insert_with(LatencyHistogram::new)
                .merge(service);
        }
        self.send_lag_max_us = self.send_lag_max_us.max(other.send_lag_max_us);
        if let Some(hedge) = &other.hedge {
            self.hedge.get_or_insert_with(Default::default).merge(hedge);
        }
        if let Some(stream) = &other.grpc_stream {
            (self.grpc_stream.get_or_insert_with(Default::default)).merge(stream);
        }
        self.wire.merge(&other.wire);
    }

    /// Fills the derived percentile fields from the histogram.
    pub fn fill_percentiles(&mut self) {
        let h = &self.latency;
        self.latency_p50_p90_p99_max_us = [
            h.quantile_us(0.5),
            h.quantile_us(0.9),
            h.quantile_us(0.99),
            h.max_us(),
        ];
    }

    pub fn responses(&self) -> u64 {
        self.status.values().fold(0, |a, n| a.saturating_add(*n))
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().fold(0, |a, n| a.saturating_add(*n))
    }

    /// Non-2xx/3xx responses plus requests without a response. In a plan's run, the sum of
    /// its names' failures: a status a step's check accepts is not one, a failed check is.
    /// In a gRPC run, calls whose status is not OK (an HTTP error is one, mapped).
    pub fn failed(&self) -> u64 {
        if !self.grpc.is_empty() {
            let not_ok = (self.grpc.iter())
                .filter(|(code, _)| **code != crate::grpc::GRPC_OK)
                .fold(0u64, |a, (_, n)| a.saturating_add(*n));
            return not_ok.saturating_add(self.error_count());
        }
        if !self.names.is_empty() {
            return self
                .names
                .values()
                .fold(0, |a, n| a.saturating_add(n.failed));
        }
        let bad_status = self
            .status
            .iter()
            .filter(|(code, _)| **code >= 400)
            .fold(0u64, |a, (_, n)| a.saturating_add(*n));
        bad_status.saturating_add(self.error_count())
    }

    /// Whether adding `other` to this record would overflow a count.
    pub fn overflows_with(&self, other: &SecondRecord) -> bool {
        let sum = |a: u64, b: u64| a.checked_add(b).is_none();
        sum(self.requests, other.requests)
            || sum(self.sent, other.sent)
            || sum(self.scheduled, other.scheduled)
            || sum(self.body_bytes, other.body_bytes)
            || sum(self.responses(), other.responses())
            || sum(self.error_count(), other.error_count())
            || other.responses() == u64::MAX
            || other.error_count() == u64::MAX
            || sum(self.latency.count(), other.latency.count())
    }
}

/// Written once when a phase ends, by whatever path it ended.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PhaseEnd {
    pub phase: String,
    /// False for the warm-up: its numbers are kept but left out of the results.
    pub measured: bool,
    /// Wall time of the load window (excluding the wait for requests in flight at its end).
    pub duration_us: u64,
    /// Open model: arrivals the schedule asked for that were never sent, because every
    /// connection was busy and the connection cap was reached, or the run ended first.
    pub unsent: u64,
    /// Requests still in flight when the phase ended: half a second after the deadline (or
    /// `--timeout` after it with `-w`), or at once when the run was stopped early.
    pub abandoned: u64,
    /// Requests still waiting for their connection to open when the phase ended (SYNs
    /// unanswered: the target's accept queue full): never sent, in no count but this one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub abandoned_connecting: u64,
    pub connections_opened: u64,
    /// Idle keep-alive connections taken over from the phase before (plain HTTP/1.1), not
    /// opened anew: a warm-up hands its connections to the measured run.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub connections_kept: u64,
    /// kiln's own CPU time during the phase.
    pub kiln_cpu_user_us: u64,
    pub kiln_cpu_system_us: u64,
    /// kiln's peak resident memory so far, in KiB.
    pub kiln_max_rss_kib: u64,
    /// Why the phase stopped early, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// It stopped because kiln's own input failed (a plan's data file that became
    /// unreadable or empty mid-run), not because of the target: an error of the run's input.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_failed: bool,
    /// Why a phase of no fixed length ended when it did (`--warmup auto`: what had settled,
    /// or that its cap came first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_because: Option<String>,
}

/// One line of the `load-seconds` part.
#[derive(Clone, Debug, Serialize, Deserialize)]
// Externally tagged (`{"second": {..}}`): internally tagged enums cannot read integer map keys.
#[serde(rename_all = "snake_case")]
pub enum LoadRecordLine {
    Second(Box<SecondRecord>),
    PhaseEnd(PhaseEnd),
}

/// A phase's figures, merged from its second records (exactly: histograms add).
#[derive(Clone, Debug, Default)]
pub struct PhaseSummary {
    pub phase: String,
    pub measured: bool,
    pub seconds: u32,
    /// The phase's seconds added together (requests, status codes, errors, histograms...);
    /// its `second`, `connections` and `unix_ms` are not meaningful.
    pub totals: SecondRecord,
    pub max_connections: u64,
    /// Wall-clock span of the recorded seconds (ends of the first and last), ms since epoch.
    pub first_unix_ms: Option<u64>,
    pub last_unix_ms: Option<u64>,
    /// The phase-end line, absent when the run was killed mid-phase.
    pub end: Option<PhaseEnd>,
    /// Lines left out because they cannot be true (a second recorded twice, counts that
    /// overflow): a corrupted record, said rather than summed.
    pub anomalies: Vec<String>,
}

impl PhaseSummary {
    /// The measured phases' span (warm-ups left out), if any second was measured.
    pub fn measured_span(phases: &[PhaseSummary]) -> Option<crate::Span> {
        let measured = phases.iter().filter(|p| p.measured);
        let first = measured.clone().filter_map(|p| p.first_unix_ms).min()?;
        let last = measured.filter_map(|p| p.last_unix_ms).max()?;
        Some(crate::Span::of_seconds(first, last))
    }
}

impl PhaseSummary {
    pub fn new(phase: &str) -> Self {
        Self {
            phase: phase.to_string(),
            measured: !phase.starts_with("warmup"),
            ..Default::default()
        }
    }

    pub fn add_second(&mut self, s: &SecondRecord) {
        // Seconds are written in order, once each: another copy of one is corruption.
        if s.second < self.seconds {
            self.anomalies.push(format!(
                "second {} of phase {} is recorded again after second {}: left out",
                s.second,
                self.phase,
                self.seconds - 1
            ));
            return;
        }
        if self.totals.overflows_with(s) {
            self.anomalies.push(format!(
                "second {} of phase {} has counts too large to add (corrupt): left out",
                s.second, self.phase
            ));
            return;
        }
        self.seconds = self.seconds.max(s.second.saturating_add(1));
        if s.unix_ms > 0 {
            self.first_unix_ms = Some(self.first_unix_ms.map_or(s.unix_ms, |f| f.min(s.unix_ms)));
            self.last_unix_ms = Some(self.last_unix_ms.map_or(s.unix_ms, |l| l.max(s.unix_ms)));
        }
        self.totals.merge(s);
        self.max_connections = self.max_connections.max(s.connections);
    }

    pub fn set_end(&mut self, end: &PhaseEnd) {
        self.measured = end.measured;
        self.end = Some(end.clone());
    }

    /// Cores kiln itself used over the measured phases (its own CPU over their duration).
    pub fn kiln_cores(phases: &[PhaseSummary]) -> Option<f64> {
        let total = Self::measured_total(phases)?;
        let cpu_s: f64 = phases
            .iter()
            .filter(|p| p.measured)
            .filter_map(|p| p.end.as_ref())
            .map(|e| (e.kiln_cpu_user_us as f64 + e.kiln_cpu_system_us as f64) / 1e6)
            .sum();
        let duration_s = total.duration_secs();
        (duration_s > 0.0).then(|| cpu_s / duration_s)
    }

    /// The names of the measured phases (the warm-up left out).
    pub fn measured_names(phases: &[PhaseSummary]) -> Vec<&str> {
        phases
            .iter()
            .filter(|p| p.measured)
            .map(|p| p.phase.as_str())
            .collect()
    }

    /// The phases a summary is about: the measured ones, merged when there are several.
    pub fn measured_total(phases: &[PhaseSummary]) -> Option<PhaseSummary> {
        let measured: Vec<&PhaseSummary> = phases.iter().filter(|p| p.measured).collect();
        match measured.len() {
            0 => None,
            1 => Some(measured[0].clone()),
            _ => Some(PhaseSummary::merged("all runs", &measured)),
        }
    }

    /// Groups record lines into phases, in the order they first appear.
    pub fn from_lines<'a>(
        lines: impl IntoIterator<Item = &'a LoadRecordLine>,
    ) -> Vec<PhaseSummary> {
        let mut phases: Vec<PhaseSummary> = Vec::new();
        for line in lines {
            Self::add_line(&mut phases, line);
        }
        phases
    }

    /// Adds one record line to the phase it belongs to (a new one at the end if it is the
    /// first line of its phase).
    pub fn add_line(phases: &mut Vec<PhaseSummary>, line: &LoadRecordLine) {
        let name = match line {
            LoadRecordLine::Second(s) => &s.phase,
            LoadRecordLine::PhaseEnd(e) => &e.phase,
        };
        let at = match phases.iter().position(|p| &p.phase == name) {
            Some(i) => i,
            None => {
                phases.push(PhaseSummary::new(name));
                phases.len() - 1
            }
        };
        match line {
            LoadRecordLine::Second(s) => phases[at].add_second(s),
            LoadRecordLine::PhaseEnd(e) => phases[at].set_end(e),
        }
    }

    pub fn responses(&self) -> u64 {
        self.totals.responses()
    }

    pub fn error_count(&self) -> u64 {
        self.totals.error_count()
    }

    /// Non-2xx/3xx responses plus requests without a response (a plan's: see
    /// [`SecondRecord::failed`]).
    pub fn failed(&self) -> u64 {
        self.totals.failed()
    }

    /// The load window in seconds: from the phase end line, or the seconds recorded.
    /// A phase stopped before its first request says 0 s (its ticker's empty second is no
    /// second of load: "0 in 1.0 s" read as a second that ran).
    pub fn duration_secs(&self) -> f64 {
        match &self.end {
            Some(end) => end.duration_us as f64 / 1e6,
            None => self.seconds as f64,
        }
    }

    /// Completed requests per second.
    pub fn throughput(&self) -> f64 {
        let d = self.duration_secs();
        if d > 0.0 {
            self.totals.requests as f64 / d
        } else {
            0.0
        }
    }

    pub fn failed_ratio(&self) -> f64 {
        if self.totals.requests == 0 {
            0.0
        } else {
            self.failed() as f64 / self.totals.requests as f64
        }
    }

    pub fn unsent(&self) -> u64 {
        self.end.as_ref().map_or(0, |e| e.unsent)
    }

    pub fn latency_stats(&self) -> LatencyStats {
        self.totals.latency.stats()
    }

    /// Merges several phases (e.g. the measured repeats) into one, exactly.
    pub fn merged(name: &str, phases: &[&PhaseSummary]) -> PhaseSummary {
        let mut out = PhaseSummary::new(name);
        let mut end = PhaseEnd {
            phase: name.to_string(),
            measured: true,
            ..Default::default()
        };
        for p in phases {
            out.seconds = out.seconds.saturating_add(p.seconds);
            out.anomalies.extend(p.anomalies.iter().cloned());
            out.totals.merge(&p.totals);
            out.max_connections = out.max_connections.max(p.max_connections);
            out.first_unix_ms = match (out.first_unix_ms, p.first_unix_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            out.last_unix_ms = out.last_unix_ms.max(p.last_unix_ms);
            end.duration_us += (p.duration_secs() * 1e6) as u64;
            if let Some(e) = &p.end {
                end.unsent += e.unsent;
                end.abandoned += e.abandoned;
                end.abandoned_connecting += e.abandoned_connecting;
                end.connections_opened += e.connections_opened;
                end.connections_kept += e.connections_kept;
                end.kiln_cpu_user_us += e.kiln_cpu_user_us;
                end.kiln_cpu_system_us += e.kiln_cpu_system_us;
                end.kiln_max_rss_kib = end.kiln_max_rss_kib.max(e.kiln_max_rss_kib);
            }
        }
        out.end = Some(end);
        out
    }
}

/// Writes the seconds' histograms as an HdrHistogram interval log (`.hlog`, what the Java
/// `HistogramLogWriter` writes and HistogramLogAnalyzer, hdr-plot and `HistogramLogProcessor`
/// read): one `latency` line per second and, in an open model, one `service` line; values in
/// microseconds, timestamps in seconds since the first second began. The warm-up's seconds
/// are tagged `warmup-latency` and `warmup-service`: a reader asking for `latency` gets the
/// measured figures kiln reports (read whole, the warm-up was counted in).
pub fn write_hlog<S: std::borrow::Borrow<SecondRecord>>(
    out: &mut impl std::io::Write,
    seconds: impl IntoIterator<Item = S>,
) -> std::io::Result<()> {
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use hdrhistogram::serialization::V2DeflateSerializer;
    use std::time::{Duration, UNIX_EPOCH};
    let mut seconds = seconds.into_iter().peekable();
    let base_ms = seconds
        .peek()
        .map_or(0, |s| crate::second_start_ms(s.borrow().unix_ms));
    let base = UNIX_EPOCH + Duration::from_millis(base_ms);
    let mut serializer = V2DeflateSerializer::new();
    let mut writer = IntervalLogWriterBuilder::new()
        .add_comment("kiln latency log: values in microseconds; tags latency (from the scheduled send) and service (from the actual send), warmup-latency and warmup-service for the warm-up (left out of kiln's figures); HistogramLogProcessor: -tag latency -outputValueUnitRatio 1000")
        .with_start_time(base)
        .with_base_time(base)
        .with_max_value_divisor(1000.0)
        .begin_log_with(out, &mut serializer)?;
    let fail = |e| std::io::Error::other(format!("{e:?}"));
    for s in seconds {
        let s = s.borrow();
        let start =
            Duration::from_millis(crate::second_start_ms(s.unix_ms).saturating_sub(base_ms));
        let warmup = s.phase.starts_with("warmup");
        let tag = |t: &'static str| match (warmup, t) {
            (true, "latency") => Tag::new("warmup-latency"),
            (true, _) => Tag::new("warmup-service"),
            (false, _) => Tag::new(t),
        };
        writer
            .write_histogram(
                s.latency.inner(),
                start,
                Duration::from_secs(1),
                tag("latency"),
            )
            .map_err(fail)?;
        if let Some(service) = &s.service {
            writer
                .write_histogram(
                    service.inner(),
                    start,
                    Duration::from_secs(1),
                    tag("service"),
                )
                .map_err(fail)?;
        }
    }
    Ok(())
}

/// The run record's part holding `latency.hlog`.
pub const HLOG_PART: &str = "latency-hlog";

/// Writes `latency.hlog` from the directory's load record (a run's, or a merged one's).
/// The seconds are read back one at a time and the log written as it is made: memory stays
/// flat however long the run was.
pub fn write_latency_log(
    dir: &mut crate::RunDir,
) -> Result<std::path::PathBuf, crate::RecordError> {
    let lines = dir.json_lines::<LoadRecordLine>(LOAD_SECONDS_PART)?;
    let mut read_error = None;
    let seconds = lines
        .map_while(|line| line.map_err(|e| read_error = Some(e)).ok())
        .filter_map(|line| match line {
            LoadRecordLine::Second(s) => Some(*s),
            LoadRecordLine::PhaseEnd(_) => None,
        });
    let path =
        dir.write_file_part_with(HLOG_PART, "latency.hlog", 1, |out| write_hlog(out, seconds))?;
    match read_error {
        Some(e) => Err(e),
        None => Ok(path),
    }
}

/// What a reader must be told about a load record before its numbers: lines left out as
/// corrupt, and a run marked complete whose phases have no end line (the file was cut).
pub fn record_warnings(status: crate::RunStatus, phases: &[PhaseSummary]) -> Vec<String> {
    let mut warnings: Vec<String> = phases
        .iter()
        .flat_map(|p| p.anomalies.iter().cloned())
        .collect();
    if status == crate::RunStatus::Complete {
        for p in phases.iter().filter(|p| p.end.is_none()) {
            warnings.push(format!(
                "run.json says complete, but phase {} has no end line: its record was cut after \
                 {} s, and its numbers cover only that",
                p.phase, p.seconds
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plans_failures_are_its_names_failures() {
        let mut s = SecondRecord {
            requests: 10,
            ..Default::default()
        };
        // Without names: every status of 400 and above, and every error.
        s.status.insert(200, 6);
        s.status.insert(404, 3);
        s.errors.insert(ErrorKind::Reset, 1);
        assert_eq!(s.failed(), 4);
        // A plan whose step expects the 404s, and one failed check on a 200.
        s.names.insert(
            "missing".into(),
            NameSecond {
                requests: 3,
                failed: 0,
                ..Default::default()
            },
        );
        s.names.insert(
            "page".into(),
            NameSecond {
                requests: 7,
                failed: 2,
                checks: 7,
                checks_failed: 1,
                ..Default::default()
            },
        );
        assert_eq!(s.failed(), 2);
        let mut merged = SecondRecord::default();
        merged.merge(&s);
        merged.merge(&s);
        assert_eq!(merged.failed(), 4);
        assert_eq!(merged.names["page"].checks_failed, 2);
    }

    #[test]
    fn a_phase_stopped_before_it_began_lasted_no_time() {
        let mut lines = vec![second("run", 0, &[], 200)];
        lines.push(LoadRecordLine::PhaseEnd(PhaseEnd {
            phase: "run".into(),
            measured: true,
            duration_us: 0,
            ..Default::default()
        }));
        let phases = PhaseSummary::from_lines(&lines);
        assert_eq!(phases[0].duration_secs(), 0.0);
        assert_eq!(phases[0].throughput(), 0.0);
    }

    #[test]
    fn a_second_recorded_twice_or_with_overflowing_counts_is_left_out_and_said() {
        let mut huge = second("run", 2, &[1_000], 200);
        if let LoadRecordLine::Second(s) = &mut huge {
            s.requests = u64::MAX;
            s.status.insert(200, u64::MAX);
        }
        let lines = [
            second("run", 0, &[1_000], 200),
            second("run", 1, &[1_000], 200),
            second("run", 1, &[1_000], 200),
            huge,
        ];
        let phases = PhaseSummary::from_lines(&lines);
        assert_eq!(phases[0].totals.requests, 2);
        assert_eq!(phases[0].responses(), 2);
        assert_eq!(phases[0].anomalies.len(), 2, "{:?}", phases[0].anomalies);
        assert!(phases[0].anomalies[0].contains("second 1 of phase run is recorded again"));
        let warnings = record_warnings(crate::RunStatus::Complete, &phases);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[2].contains("no end line"), "{warnings:?}");
        // An interrupted run is expected to lack its end line.
        assert_eq!(
            record_warnings(crate::RunStatus::Interrupted, &phases).len(),
            2
        );
    }

    fn second(phase: &str, s: u32, latencies: &[u64], status: u16) -> LoadRecordLine {
        let mut latency = LatencyHistogram::new();
        latencies.iter().for_each(|v| latency.record_us(*v));
        LoadRecordLine::Second(Box::new(SecondRecord {
            phase: phase.into(),
            second: s,
            requests: latencies.len() as u64,
            sent: latencies.len() as u64,
            status: [(status, latencies.len() as u64)].into(),
            latency,
            ..Default::default()
        }))
    }

    #[test]
    fn phases_are_rebuilt_from_lines_and_merge_exactly() {
        let lines = [
            second("warmup", 0, &[5_000; 10], 200),
            second("run-1", 0, &[1_000, 2_000], 200),
            second("run-1", 1, &[3_000], 500),
            LoadRecordLine::PhaseEnd(PhaseEnd {
                phase: "run-1".into(),
                measured: true,
                duration_us: 2_000_000,
                ..Default::default()
            }),
            second("run-2", 0, &[4_000], 200),
        ];
        let text: Vec<String> = lines
            .iter()
            .map(|l| serde_json::to_string(l).unwrap())
            .collect();
        let parsed: Vec<LoadRecordLine> = text
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        let phases = PhaseSummary::from_lines(&parsed);
        assert_eq!(phases.len(), 3);
        assert!(!phases[0].measured);
        let run1 = &phases[1];
        assert_eq!(run1.totals.requests, 3);
        assert_eq!(run1.failed(), 1);
        assert!((run1.throughput() - 1.5).abs() < 1e-9);
        assert!(phases[2].end.is_none());
        assert_eq!(phases[2].duration_secs(), 1.0);
        let both = PhaseSummary::merged("all", &[&phases[1], &phases[2]]);
        assert_eq!(both.totals.latency.count(), 4);
        assert_eq!(
            both.totals.latency.max_us(),
            phases[2].totals.latency.max_us()
        );
    }
}
