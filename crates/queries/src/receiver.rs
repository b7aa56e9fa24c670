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

use bytes::Bytes;
use flate2::read::GzDecoder;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

use crate::{Ingest, QueryError};

/// OTLP's recommended request limit.
pub const MAX_BODY: usize = 20 << 20;
/// A gzipped body may not inflate past this.
const MAX_INFLATED: u64 = 256 << 20;

pub const JSON_RECORD: &str = "spans.otlp.jsonl";
pub const PROTOBUF_RECORD: &str = "spans.otlp.delimited.pb";

#[derive(Default)]
struct Recorder {
    json: Option<BufWriter<File>>,
    protobuf: Option<BufWriter<File>>,
    dir: PathBuf,
}

impl Recorder {
    fn writer(&mut self, name: &str, json: bool) -> std::io::Result<&mut BufWriter<File>> {
        let slot = if json {
            &mut self.json
        } else {
            &mut self.protobuf
        };
        if slot.is_none() {
            *slot = Some(BufWriter::new(File::create(self.dir.join(name))?));
        }
        Ok(slot.as_mut().expect("just set"))
    }
}

#[derive(Default)]
struct State {
    ingest: Ingest,
    requests: u64,
    rejected_requests: u64,
    recorder: Option<Recorder>,
    record_error: Option<String>,
}

/// Counts so far, for progress lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    pub requests: u64,
    pub rejected_requests: u64,
    pub spans: u64,
    pub db_spans: u64,
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
        let (tx, mut rx) = oneshot::channel::<()>();
        let thread_state = state.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(bind_error)?;
        let thread = std::thread::Builder::new()
            .name("kiln-otlp".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                        return;
                    };
                    loop {
                        tokio::select! {
                            _ = &mut rx => break,
                            accepted = listener.accept() => {
                                let Ok((stream, _)) = accepted else { continue };
                                let state = thread_state.clone();
                                tokio::spawn(async move {
                                    let service = hyper::service::service_fn(move |req| {
                                        let state = state.clone();
                                        async move { Ok::<_, std::convert::Infallible>(handle(req, &state).await) }
                                    });
                                    let _ = hyper::server::conn::http1::Builder::new()
                                        .serve_connection(TokioIo::new(stream), service)
                                        .await;
                                });
                            }
                        }
                    }
                });
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
            rejected_requests: state.rejected_requests,
            spans: state.ingest.coverage.spans,
            db_spans: state.ingest.coverage.db_spans,
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
                if let Some(mut w) = w {
                    if let Err(e) = w.flush() {
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

async fn handle(req: Request<Incoming>, state: &Mutex<State>) -> Response<Full<Bytes>> {
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
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return reject(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body not read: {e}\n"),
            )
        }
    };
    let body: Vec<u8> = if gzipped {
        let mut out = Vec::new();
        match GzDecoder::new(&body[..])
            .take(MAX_INFLATED)
            .read_to_end(&mut out)
        {
            Ok(_) => out,
            Err(e) => return reject(StatusCode::BAD_REQUEST, format!("bad gzip: {e}\n")),
        }
    } else {
        body.to_vec()
    };
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    let accepted = if json {
        let text = String::from_utf8_lossy(&body);
        s.ingest.add_json_text(&text, "OTLP/JSON request")
    } else {
        s.ingest.add_protobuf(&body).is_ok()
    };
    if !accepted {
        s.rejected_requests += 1;
        return reply(
            StatusCode::BAD_REQUEST,
            "text/plain",
            "not an OTLP trace request\n",
        );
    }
    s.requests += 1;
    record(&mut s, json, &body);
    if json {
        reply(StatusCode::OK, "application/json", "{}")
    } else {
        reply(StatusCode::OK, "application/x-protobuf", Bytes::new())
    }
}

fn record(state: &mut State, json: bool, body: &[u8]) {
    let Some(recorder) = state.recorder.as_mut() else {
        return;
    };
    let result = if json {
        // one document per line
        let line = match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(v) => v.to_string().into_bytes(),
            Err(_) => return,
        };
        recorder
            .writer(JSON_RECORD, true)
            .and_then(|w| w.write_all(&line).and_then(|_| w.write_all(b"\n")))
    } else {
        let mut prefix = Vec::new();
        prost::encoding::encode_varint(body.len() as u64, &mut prefix);
        recorder
            .writer(PROTOBUF_RECORD, false)
            .and_then(|w| w.write_all(&prefix).and_then(|_| w.write_all(body)))
    };
    if let Err(e) = result {
        state.record_error.get_or_insert(e.to_string());
    }
}
