//! An OTLP/HTTP trace receiver: the endpoint an instrumented application exports to
//! (`POST /v1/traces`, protobuf or JSON, gzip or not), on loopback by default. What it
//! receives is ingested for analysis and, when asked, recorded as it came (JSON lines and
//! length-delimited protobuf) so a run directory can be analysed again later.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::{oneshot, Semaphore};

use crate::{Ingest, QueryError};

/// OTLP's recommended request limit.
pub const MAX_BODY: usize = 20 << 20;
/// A gzipped body may not inflate past this.
const MAX_INFLATED: u64 = 256 << 20;
/// Bodies being read at once may hold at most this much memory together: 40 half-sent
/// 19 MB bodies once held 750 MB. A request that finds no room within `BODY_ROOM_WAIT` is
/// told to retry (503), as OTLP exporters do.
const BODY_BUDGET_KIB: usize = 128 << 10;
const BODY_ROOM_WAIT: Duration = Duration::from_secs(5);
/// A request's headers, and then its body, must arrive within these.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections held at once; more are closed at once (exporters keep one or a few).
const MAX_CONNECTIONS: usize = 256;

/// The received requests as recorded in a run directory, gzipped: what arrives compressed
/// (a padded body can inflate 1000x) stays small on disk. Each request is flushed whole, so a
/// run killed mid-way keeps every request it had received.
pub const JSON_RECORD: &str = "spans.otlp.jsonl.gz";
pub const PROTOBUF_RECORD: &str = "spans.otlp.delimited.pb.gz";
/// The names run directories had before the records were compressed; still read.
pub const LEGACY_RECORDS: [&str; 2] = ["spans.otlp.jsonl", "spans.otlp.delimited.pb"];

/// The span files a path stands for: a run directory's recorded spans, or the file itself.
pub fn span_files(path: &Path) -> Result<Vec<PathBuf>, QueryError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let found: Vec<PathBuf> = [JSON_RECORD, PROTOBUF_RECORD]
        .iter()
        .chain(LEGACY_RECORDS.iter())
        .map(|f| path.join(f))
        .filter(|p| p.exists())
        .collect();
    if found.is_empty() {
        return Err(QueryError::NotSpans {
            file: path.display().to_string(),
            why: format!("a directory without recorded spans ({JSON_RECORD} or {PROTOBUF_RECORD})"),
        });
    }
    Ok(found)
}

type RecordWriter = GzEncoder<BufWriter<File>>;

#[derive(Default)]
struct Recorder {
    json: Option<RecordWriter>,
    protobuf: Option<RecordWriter>,
    dir: PathBuf,
}

impl Recorder {
    fn writer(&mut self, name: &str, json: bool) -> std::io::Result<&mut RecordWriter> {
        let slot = if json {
            &mut self.json
        } else {
            &mut self.protobuf
        };
        if slot.is_none() {
            let file = BufWriter::new(File::create(self.dir.join(name))?);
            *slot = Some(GzEncoder::new(file, flate2::Compression::fast()));
        }
        Ok(slot.as_mut().expect("just set"))
    }
}

#[derive(Default)]
struct State {
    ingest: Ingest,
    requests: u64,
    /// When the last export request was taken in.
    last_request_at: Option<std::time::Instant>,
    rejected_requests: u64,
    recorder: Option<Recorder>,
    record_error: Option<String>,
}

/// Counts so far, for progress lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    pub requests: u64,
    /// When the last export request was taken in (none yet: `None`).
    pub last_request_at: Option<std::time::Instant>,
    pub rejected_requests: u64,
    pub spans: u64,
    pub db_spans: u64,
    /// Requests the traced services took in ([`Ingest::server_roots`]).
    pub server_roots: u64,
}

pub struct Receiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What the receiver took in, and the files it recorded.
pub struct Received {
    pub ingest: Ingest,
    pub requests: u64,
    pub rejected_requests: u64,
    pub recorded: Vec<PathBuf>,
    pub record_error: Option<String>,
}

impl Receiver {
    /// Binds `addr` ("127.0.0.1:4318"; port 0 picks a free one) and serves until stopped.
    /// With `record_dir`, every accepted request is also written there.
    pub fn start(addr: &str, record_dir: Option<&Path>) -> Result<Self, QueryError> {
        let receiver = Self::start_unrecorded(addr)?;
        if let Some(dir) = record_dir {
            receiver.record_to(dir);
        }
        Ok(receiver)
    }

    /// From now on, writes every accepted request into `dir` as well.
    pub fn record_to(&self, dir: &Path) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.recorder = Some(Recorder {
            dir: dir.to_path_buf(),
            ..Recorder::default()
        });
    }

    fn start_unrecorded(addr: &str) -> Result<Self, QueryError> {
        let bind_error = |e: std::io::Error| QueryError::Listen {
            addr: addr.to_string(),
            why: e.to_string(),
        };
        let std_listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
        std_listener.set_nonblocking(true).map_err(bind_error)?;
        let local = std_listener.local_addr().map_err(bind_error)?;
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = oneshot::channel::<()>();
        let thread_state = state.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(bind_error)?;
        let thread = std::thread::Builder::new()
            .name("kiln-otlp".into())
            .spawn(move || {
                runtime.block_on(serve(std_listener, thread_state, rx));
            })
            .map_err(bind_error)?;
        Ok(Self {
            addr: local,
            state,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Forgets what was received so far: the analysis starts from here.
    pub fn discard_received(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.ingest = Ingest::new();
        state.requests = 0;
        state.rejected_requests = 0;
    }

    pub fn stats(&self) -> ReceiverStats {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        ReceiverStats {
            requests: state.requests,
            last_request_at: state.last_request_at,
            rejected_requests: state.rejected_requests,
            spans: state.ingest.coverage.spans,
            db_spans: state.ingest.coverage.db_spans,
            server_roots: state.ingest.server_roots,
        }
    }

    /// Stops serving and hands over what was received.
    pub fn stop(mut self) -> Received {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = std::mem::take(&mut *state);
        let mut recorded = Vec::new();
        let mut record_error = state.record_error;
        if let Some(rec) = state.recorder {
            for (w, name) in [(rec.json, JSON_RECORD), (rec.protobuf, PROTOBUF_RECORD)] {
                if let Some(w) = w {
                    if let Err(e) = w.finish().and_then(|mut file| file.flush()) {
                        record_error.get_or_insert(e.to_string());
                    }
                    recorded.push(rec.dir.join(name));
                }
            }
        }
        Received {
            ingest: state.ingest,
            requests: state.requests,
            rejected_requests: state.rejected_requests,
            recorded,
            record_error,
        }
    }
}

/// Accepts and serves connections until `shutdown`.
async fn serve(
    std_listener: std::net::TcpListener,
    state: Arc<Mutex<State>>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
        return;
    };
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let bodies = Arc::new(Semaphore::new(BODY_BUDGET_KIB));
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors (EMFILE) and the like: the error repeats at once, so wait
            // instead of spinning a core while exporters queue.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = connections.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let (state, bodies) = (state.clone(), bodies.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (state, bodies) = (state.clone(), bodies.clone());
                async move { Ok::<_, std::convert::Infallible>(handle(req, state, bodies).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(slot);
        });
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
    bodies: Arc<Semaphore>,
) -> Response<Full<Bytes>> {
    let reject = |status: StatusCode, why: String| {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.rejected_requests += 1;
        drop(s);
        reply(status, "text/plain", why)
    };
    if req.uri().path() != "/v1/traces" {
        return reject(
            StatusCode::NOT_FOUND,
            "kiln receives traces at /v1/traces\n".into(),
        );
    }
    if req.method() != hyper::Method::POST {
        return reject(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST OTLP traces here\n".into(),
        );
    }
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase()
    };
    let content_type = header(hyper::header::CONTENT_TYPE);
    let gzipped = header(hyper::header::CONTENT_ENCODING).contains("gzip");
    let json = content_type.starts_with("application/json");
    if !json && !content_type.contains("protobuf") {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "content type {content_type:?}: send application/x-protobuf or application/json\n"
            ),
        );
    }
    // Room for the body in the shared budget: its declared length, else the most it may be.
    let declared = header(hyper::header::CONTENT_LENGTH)
        .parse::<usize>()
        .unwrap_or(MAX_BODY)
        .min(MAX_BODY);
    let kib = (declared >> 10).max(1) as u32;
    let Some(_room) = room_for(&bodies, kib).await else {
        let mut busy = reject(
            StatusCode::SERVICE_UNAVAILABLE,
            "kiln is reading other requests; retry\n".into(),
        );
        if let Ok(v) = "1".parse() {
            busy.headers_mut().insert(hyper::header::RETRY_AFTER, v);
        }
        return busy;
    };
    let read = tokio::time::timeout(
        BODY_TIMEOUT,
        Limited::new(req.into_body(), MAX_BODY).collect(),
    )
    .await;
    let wire = match read {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            return reject(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body not read: {e}\n"),
            )
        }
        Err(_) => {
            return reject(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {} s\n",
                    BODY_TIMEOUT.as_secs()
                ),
            )
        }
    };
    // Inflating and parsing take a worker thread, not the thread that serves every exporter;
    // the shared state is locked only to add what was parsed.
    let parsed = tokio::task::spawn_blocking(move || parse_body(&wire, gzipped, json)).await;
    let parsed = match parsed {
        Ok(Ok(parsed)) => parsed,
        Ok(Err(why)) => return reject(StatusCode::BAD_REQUEST, why.to_string()),
        Err(_) => return reject(StatusCode::INTERNAL_SERVER_ERROR, "parse failed\n".into()),
    };
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    let ParsedBody { ingest, record } = parsed;
    s.ingest.extend(ingest);
    s.requests += 1;
    s.last_request_at = Some(std::time::Instant::now());
    write_record(&mut s, json, &record);
    drop(s);
    if json {
        reply(StatusCode::OK, "application/json", "{}")
    } else {
        reply(StatusCode::OK, "application/x-protobuf", Bytes::new())
    }
}

/// Room for `kib` in the body budget, waiting at most `BODY_ROOM_WAIT`. Not in turn: tokio's
/// semaphore serves waiters first come first served, so a small request from a real exporter
/// would wait behind large half-sent ones that will never fit; here whoever fits, goes.
async fn room_for(bodies: &Arc<Semaphore>, kib: u32) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let deadline = tokio::time::Instant::now() + BODY_ROOM_WAIT;
    loop {
        match bodies.clone().try_acquire_many_owned(kib) {
            Ok(permit) => return Some(permit),
            Err(tokio::sync::TryAcquireError::Closed) => return None,
            Err(tokio::sync::TryAcquireError::NoPermits) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One request's spans, and the bytes to record for it.
struct ParsedBody {
    ingest: Ingest,
    /// JSON: the document on one line; protobuf: the request.
    record: Vec<u8>,
}

/// Why a request's body is refused (400, the reason as its body).
#[derive(Debug, thiserror::Error)]
enum BadBody {
    #[error("bad gzip: {0}\n")]
    Gzip(std::io::Error),
    #[error("not an OTLP trace request\n")]
    NotTraces,
}

/// Inflates and parses a request body; the reason when it is not an OTLP trace request.
fn parse_body(wire: &[u8], gzipped: bool, json: bool) -> Result<ParsedBody, BadBody> {
    let mut inflated = Vec::new();
    let body: &[u8] = if gzipped {
        GzDecoder::new(wire)
            .take(MAX_INFLATED)
            .read_to_end(&mut inflated)
            .map_err(BadBody::Gzip)?;
        &inflated
    } else {
        wire
    };
    let mut ingest = Ingest::new();
    let accepted = if json {
        let text = String::from_utf8_lossy(body);
        ingest.add_json_text(&text, "OTLP/JSON request")
    } else {
        ingest.add_protobuf(body).is_ok()
    };
    if !accepted {
        return Err(BadBody::NotTraces);
    }
    let record = if json {
        // One document per line. In valid JSON a raw line break can only be whitespace
        // between tokens (inside strings it is escaped), so it becomes a space.
        body.iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
            .collect()
    } else {
        body.to_vec()
    };
    Ok(ParsedBody { ingest, record })
}

/// Appends a request to the run's record: JSON lines, or length-delimited protobuf.
fn write_record(state: &mut State, json: bool, body: &[u8]) {
    let Some(recorder) = state.recorder.as_mut() else {
        return;
    };
    let result = if json {
        recorder.writer(JSON_RECORD, true).and_then(|w| {
            w.write_all(body)?;
            w.write_all(b"\n")?;
            w.flush()
        })
    } else {
        let mut prefix = Vec::new();
        prost::encoding::encode_varint(body.len() as u64, &mut prefix);
        recorder.writer(PROTOBUF_RECORD, false).and_then(|w| {
            w.write_all(&prefix)?;
            w.write_all(body)?;
            w.flush()
        })
    };
    if let Err(e) = result {
        state.record_error.get_or_insert(e.to_string());
    }
}
