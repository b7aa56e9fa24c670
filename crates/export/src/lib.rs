//! `--export`: a run's metrics into the team's monitoring every second while it lasts, as
//! distributions a receiver can aggregate (native histograms, not percentile gauges).
//!
//! The run hands each second to [`Exporter`], which keeps the running totals
//! ([`metrics`]) and queues them for each receiver ([`sender`]); a receiver's own thread
//! encodes and writes them ([`remote_write`]). Nothing here can slow or fail the run: what a
//! receiver never got is counted in the record's `exports.json`.

pub mod histogram;
pub mod metrics;
pub mod otlp;
pub mod remote_write;
pub mod sender;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_load::http1::RequestParts;
use kiln_load::{SelfUsage, Target};
use kiln_record::schema::export::{ExportRecord, ExportsRecord};
use kiln_record::{PhaseEnd, SecondRecord};
use kiln_sample::ResourceSecond;

pub use metrics::RunLabels;
use metrics::{Batch, RunMetrics};
use sender::{Outcome, Sender, Writer};

/// A receiver that cannot be used, said before the run starts.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("--export {0:?}: write prometheus=URL (remote write, e.g. http://localhost:9090/api/v1/write), prometheus=URL,classic for a receiver without native histograms, or otlp=URL (OTLP/HTTP, e.g. http://localhost:4318)")]
    Form(String),
    #[error("--export {text:?}: {why}")]
    Url { text: String, why: String },
    #[error("cannot start the export's thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Which protocol a receiver speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Prometheus remote write 1.0.
    Prometheus,
    /// OTLP/HTTP metrics, protobuf.
    Otlp,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Prometheus => "prometheus",
            Protocol::Otlp => "otlp",
        }
    }
}

/// One `--export KIND=URL[,classic]`.
#[derive(Clone, Debug)]
pub struct ExportTarget {
    pub protocol: Protocol,
    pub target: Target,
    /// Classic `_bucket{le}` histograms instead of native ones.
    pub classic: bool,
}

impl ExportTarget {
    /// Parses `prometheus=URL` or `prometheus=URL,classic`, the URL's host looked up.
    pub fn parse(text: &str) -> Result<Self, ExportError> {
        let form = || ExportError::Form(text.to_string());
        let (kind, rest) = text.split_once('=').ok_or_else(form)?;
        let protocol = match kind.trim() {
            "prometheus" | "prometheus-remote-write" => Protocol::Prometheus,
            "otlp" => Protocol::Otlp,
            _ => return Err(form()),
        };
        let (url, classic) = match (protocol, rest.rsplit_once(',')) {
            (Protocol::Prometheus, Some((url, "classic"))) => (url, true),
            _ => (rest, false),
        };
        let bad_url = |why: String| ExportError::Url {
            text: text.to_string(),
            why,
        };
        let target = Target::parse(url).map_err(|e| bad_url(e.to_string()))?;
        if target.grpc {
            return Err(bad_url("a receiver's URL is http:// or https://".into()));
        }
        let mut target = target;
        // an OTLP endpoint given as its base (as OTEL_EXPORTER_OTLP_ENDPOINT is): the metrics
        // path added, as the SDKs add it
        if protocol == Protocol::Otlp && target.path_and_query == "/" {
            target.path_and_query = "/v1/metrics".into();
        }
        Ok(Self {
            protocol,
            target,
            classic,
        })
    }

    /// The receiver's URL as recorded and said: without a user and password.
    pub fn shown_url(&self) -> String {
        let t = &self.target;
        let scheme = if t.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", t.authority, t.path_and_query)
    }
}

/// How long the end of a run waits for the receivers to take what is queued.
const FINISH_WAIT: Duration = Duration::from_secs(3);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The run's exports: its running totals and a queue per receiver.
pub struct Exporter {
    metrics: Mutex<RunMetrics>,
    senders: Vec<Sender>,
    cpu_at_start: SelfUsage,
}

impl Exporter {
    pub fn start(targets: &[ExportTarget], labels: &RunLabels) -> Result<Self, ExportError> {
        let mut senders = Vec::new();
        for t in targets {
            let account = ExportRecord {
                kind: t.protocol.name().into(),
                url: t.shown_url(),
                classic: t.classic,
                ..ExportRecord::default()
            };
            let writer: Box<dyn Writer> = match t.protocol {
                Protocol::Prometheus => Box::new(RemoteWrite {
                    target: t.target.clone(),
                    encoder: remote_write::Encoder::new(t.classic),
                }),
                Protocol::Otlp => Box::new(OtlpWrite {
                    target: t.target.clone(),
                    encoder: otlp::Encoder::default(),
                }),
            };
            senders.push(Sender::start(account, writer)?);
        }
        Ok(Self {
            metrics: Mutex::new(RunMetrics::new(labels)),
            senders,
            cpu_at_start: SelfUsage::now(),
        })
    }

    fn send(&self, batch: Batch) {
        let batch = Arc::new(batch);
        for s in &self.senders {
            s.push(batch.clone());
        }
    }

    fn with_metrics<T>(&self, f: impl FnOnce(&mut RunMetrics) -> T) -> Option<T> {
        self.metrics.lock().ok().map(|mut m| f(&mut m))
    }

    /// A load second as it ends.
    pub fn load_second(&self, s: &SecondRecord) {
        let used = SelfUsage::now().since(&self.cpu_at_start);
        let cpu = (used.user_us + used.system_us) as f64 / 1e6;
        if let Some(batch) = self.with_metrics(|m| m.load_second(s, cpu)) {
            self.send(batch);
        }
    }

    pub fn phase_end(&self, end: &PhaseEnd) {
        let now = kiln_record::clock::unix_ns_now() / 1_000_000;
        if let Some(batch) = self.with_metrics(|m| m.phase_end(end, now as i64)) {
            self.send(batch);
        }
    }

    /// A sampler's second of the watched target.
    pub fn resource_second(&self, r: &ResourceSecond) {
        if let Some(Some(batch)) = self.with_metrics(|m| m.resource_second(r)) {
            self.send(batch);
        }
    }

    /// Waits a moment for the receivers to take what is queued; their accounts.
    pub fn finish(self) -> ExportsRecord {
        let deadline = Instant::now() + FINISH_WAIT;
        ExportsRecord {
            exports: self
                .senders
                .into_iter()
                .map(|s| s.finish(deadline))
                .collect(),
        }
    }
}

/// A Prometheus remote-write receiver.
struct RemoteWrite {
    target: Target,
    encoder: remote_write::Encoder,
}

impl Writer for RemoteWrite {
    fn encode(&mut self, batches: &[Arc<Batch>]) -> (Vec<u8>, u64) {
        let encoded = self.encoder.encode(batches);
        (encoded.body, encoded.samples)
    }

    fn send(&mut self, body: &[u8], timeout: Duration) -> Outcome {
        let headers = [
            (http::header::CONTENT_ENCODING, "snappy"),
            (
                http::HeaderName::from_static("x-prometheus-remote-write-version"),
                "0.1.0",
            ),
        ];
        post(&self.target, &headers, body, timeout)
    }
}

/// An OTLP/HTTP receiver (the Collector, or a backend's OTLP endpoint).
struct OtlpWrite {
    target: Target,
    encoder: otlp::Encoder,
}

impl Writer for OtlpWrite {
    fn encode(&mut self, batches: &[Arc<Batch>]) -> (Vec<u8>, u64) {
        self.encoder.encode(batches)
    }

    fn send(&mut self, body: &[u8], timeout: Duration) -> Outcome {
        post(&self.target, &[], body, timeout)
    }
}

/// POSTs a protobuf body on a connection of its own (TLS, the URL's user and password as
/// Basic auth), within `timeout`: accepted on 2xx, tried again on no answer, 429 or 5xx
/// (as the remote-write and OTLP specifications ask), refused on any other status.
fn post(
    target: &Target,
    extra: &[(http::HeaderName, &'static str)],
    body: &[u8],
    timeout: Duration,
) -> Outcome {
    let value = http::HeaderValue::from_static;
    let mut headers = vec![
        (http::header::CONTENT_TYPE, value("application/x-protobuf")),
        (
            http::header::USER_AGENT,
            value(concat!("kiln/", env!("CARGO_PKG_VERSION"))),
        ),
    ];
    headers.extend(extra.iter().map(|(k, v)| (k.clone(), value(v))));
    if let Some(auth) = &target.basic_auth {
        headers.push((http::header::AUTHORIZATION, auth.clone()));
    }
    let request = RequestParts {
        method: http::Method::POST,
        path: target.path_and_query.clone(),
        headers,
        body: bytes::Bytes::copy_from_slice(body),
    };
    let answer = kiln_load::single::exchange(
        target,
        false,
        false,
        CONNECT_TIMEOUT.min(timeout),
        timeout,
        &request,
    );
    match answer {
        Ok((response, _)) if (200..300).contains(&response.status) => Outcome::Accepted,
        Ok((response, captured)) => {
            let said = String::from_utf8_lossy(&captured.body);
            let said: String = said.trim().chars().take(200).collect();
            let why = format!("HTTP {}: {said}", response.status);
            if response.status == 429 || response.status >= 500 {
                Outcome::Retry(why)
            } else {
                Outcome::Refused(why)
            }
        }
        Err(kind) => Outcome::Retry(kind.label().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text is taken or refused with the form, never a panic.
        #[test]
        fn any_export_text_is_parsed_or_refused(text in "(prometheus|otlp|x)?=?(http|https|grpc)?(://)?[0-9.:@/,]{0,30}(,classic)?") {
            if let Err(e) = ExportTarget::parse(&text) {
                prop_assert!(e.to_string().contains(&format!("{text:?}")), "{e}");
            }
        }
    }

    #[test]
    fn export_flags_are_parsed_or_refused_with_the_form() {
        let t = ExportTarget::parse("prometheus=http://u:p@127.0.0.1:9090/api/v1/write").unwrap();
        assert_eq!(t.protocol, Protocol::Prometheus);
        assert!(!t.classic);
        assert_eq!(t.shown_url(), "http://127.0.0.1:9090/api/v1/write");
        assert!(t.target.basic_auth.is_some());
        let c =
            ExportTarget::parse("prometheus=http://127.0.0.1:9090/api/v1/write,classic").unwrap();
        assert!(c.classic);
        for bad in [
            "http://127.0.0.1:9/",
            "influx=http://127.0.0.1:9/",
            "prometheus=ftp://x/",
        ] {
            let e = ExportTarget::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
