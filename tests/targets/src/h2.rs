//! An HTTP/2 target: hyper's server speaking h2 over TLS (chosen by ALPN, HTTP/1.1 for a
//! client that does not offer h2) or h2c by prior knowledge on plain TCP. It counts the
//! requests it answered by protocol version and by path, so a load tool's HTTP/2 counts
//! can be checked against the server's own.
//!
//! `POST /login` answers `{"token":"t-<n>"}`; `GET /me` answers 200 with the bearer token it
//! was sent, 401 without one; `GET /sleep/<ms>` answers after that many milliseconds;
//! anything else `hello h2`. It also counts the connections it accepted and the most
//! requests it held at once, in all and on one connection (HTTP/2 streams in flight).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};

#[derive(Default)]
struct Counts {
    /// ("HTTP/2.0" | "HTTP/1.1", path) -> requests
    by_version_path: BTreeMap<(String, String), u64>,
}

/// Requests held at once: now and at most, in all and on one connection.
#[derive(Default)]
struct InFlight {
    now: AtomicU64,
    most: AtomicU64,
    most_on_one_connection: AtomicU64,
    connections: AtomicU64,
}

impl InFlight {
    /// Counts a request in (on a connection holding `on_connection`) until the guard drops.
    fn enter(self: &Arc<Self>, on_connection: &Arc<AtomicU64>) -> InFlightGuard {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let here = on_connection.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_on_one_connection
            .fetch_max(here, Ordering::SeqCst);
        InFlightGuard(self.clone(), on_connection.clone())
    }
}

struct InFlightGuard(Arc<InFlight>, Arc<AtomicU64>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        self.1.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct H2Target {
    addr: SocketAddr,
    counts: Arc<Mutex<Counts>>,
    in_flight: Arc<InFlight>,
    _server: LoopbackServer,
}

impl H2Target {
    /// Starts on a free loopback port; with `tls`, a fresh self-signed certificate.
    pub fn start(tls: bool) -> std::io::Result<Self> {
        let acceptor = if tls {
            let mut config = (*crate::self_signed_tls()?).clone();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
        } else {
            None
        };
        let counts = Arc::new(Mutex::new(Counts::default()));
        let in_flight = Arc::new(InFlight::default());
        let (served, held) = (counts.clone(), in_flight.clone());
        let tokens = Arc::new(AtomicU64::new(1));
        let (addr, server) = LoopbackServer::start("h2-target", move |tcp| {
            let _ = tcp.set_nodelay(true);
            let (counts, tokens, acceptor) = (served.clone(), tokens.clone(), acceptor.clone());
            let (held, on_connection) = (held.clone(), Arc::new(AtomicU64::new(0)));
            held.connections.fetch_add(1, Ordering::SeqCst);
            async move {
                let service = hyper::service::service_fn(move |req| {
                    let guard = held.enter(&on_connection);
                    let answered = answer(req, counts.clone(), tokens.clone());
                    async move {
                        let answer = answered.await;
                        drop(guard);
                        answer
                    }
                });
                let Some(acceptor) = acceptor else {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                    return;
                };
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let io = TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            }
        })?;
        Ok(Self {
            addr,
            counts,
            in_flight,
            _server: server,
        })
    }

    /// Connections accepted.
    pub fn connections(&self) -> u64 {
        self.in_flight.connections.load(Ordering::SeqCst)
    }

    /// The most requests held at once: in all, and on one connection.
    pub fn most_at_once(&self) -> (u64, u64) {
        (
            self.in_flight.most.load(Ordering::SeqCst),
            self.in_flight.most_on_one_connection.load(Ordering::SeqCst),
        )
    }

    pub fn url(&self, tls: bool, path: &str) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Requests answered with this protocol version (`HTTP/2.0`, `HTTP/1.1`) and path.
    pub fn answered(&self, version: &str, path: &str) -> u64 {
        self.counts.lock().map_or(0, |c| {
            c.by_version_path
                .get(&(version.to_string(), path.to_string()))
                .copied()
                .unwrap_or(0)
        })
    }

    /// Requests answered in all.
    pub fn total(&self) -> u64 {
        self.counts
            .lock()
            .map_or(0, |c| c.by_version_path.values().sum())
    }
}

/// A loopback listener served on a runtime thread of its own until dropped; each connection
/// it accepts is given to `serve`, whose future runs on that runtime.
struct LoopbackServer {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl LoopbackServer {
    fn start<F, Fut>(name: &str, serve: F) -> std::io::Result<(SocketAddr, Self)>
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (shutdown, mut stop) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::Builder::new().name(name.into()).spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                loop {
                    let accepted = tokio::select! {
                        a = listener.accept() => a,
                        _ = &mut stop => return,
                    };
                    if let Ok((tcp, _)) = accepted {
                        tokio::spawn(serve(tcp));
                    }
                }
            });
        })?;
        let server = Self {
            shutdown: Some(shutdown),
            thread: Some(thread),
        };
        Ok((addr, server))
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    counts: Arc<Mutex<Counts>>,
    tokens: Arc<AtomicU64>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let version = format!("{:?}", req.version());
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    // Read the whole body, as a real handler would.
    let _ = req.into_body().collect().await;
    if let Some(ms) = path.strip_prefix("/sleep/").and_then(|ms| ms.parse().ok()) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    if let Ok(mut c) = counts.lock() {
        *c.by_version_path
            .entry((version, path.clone()))
            .or_default() += 1;
    }
    let (status, body) = match (method.as_str(), path.as_str(), bearer) {
        ("POST", "/login", _) => (
            200,
            format!(
                "{{\"token\":\"t-{}\"}}",
                tokens.fetch_add(1, Ordering::SeqCst)
            ),
        ),
        ("GET", "/me", Some(token)) => (200, format!("{{\"token\":\"{token}\"}}")),
        ("GET", "/me", None) => (401, "{}".to_string()),
        _ => (200, "hello h2\n".to_string()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    Ok(response)
}

/// A hostile HTTP/2 server (h2c): it gives every stream a send window of 0, answers each
/// request at once (200, end of stream) and never reads its body nor resets the stream, so a
/// client's unsent request bodies have nowhere to go. A client that keeps them piles them up
/// (the hardening issue's 523 MB in 16 s).
pub struct ZeroWindowTarget {
    pub addr: SocketAddr,
    answered: Arc<AtomicU64>,
    _server: LoopbackServer,
}

impl ZeroWindowTarget {
    pub fn start() -> std::io::Result<Self> {
        let answered = Arc::new(AtomicU64::new(0));
        let count = answered.clone();
        let (addr, server) = LoopbackServer::start("h2-zero-window", move |socket| {
            let count = count.clone();
            async move {
                let handshake = h2::server::Builder::new()
                    .initial_window_size(0)
                    .handshake::<_, Bytes>(socket);
                let Ok(mut connection) = handshake.await else {
                    return;
                };
                // the bodies are held, unread, for as long as the connection lasts
                let mut held = Vec::new();
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    let response = Response::builder().status(200).body(()).unwrap();
                    if respond.send_response(response, true).is_ok() {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    held.push((request.into_body(), respond));
                }
            }
        })?;
        Ok(Self {
            addr,
            answered,
            _server: server,
        })
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

/// An HTTP/2 (h2c) server that refuses every `every`-th stream of each connection with
/// REFUSED_STREAM, before reading it (RFC 9113 8.7: not processed, safe to send again), and
/// answers the others 200.
pub struct RefusingTarget {
    pub addr: SocketAddr,
    answered: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    _server: LoopbackServer,
}

impl RefusingTarget {
    pub fn start(every: u64) -> std::io::Result<Self> {
        let (answered, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let counts = (answered.clone(), refused.clone());
        let (addr, server) = LoopbackServer::start("h2-refusing", move |socket| {
            let (answered, refused) = (counts.0.clone(), counts.1.clone());
            async move {
                let Ok(mut connection) = h2::server::Builder::new()
                    .handshake::<_, Bytes>(socket)
                    .await
                else {
                    return;
                };
                let mut streams = 0u64;
                while let Some(Ok((_, mut respond))) = connection.accept().await {
                    streams += 1;
                    if streams.is_multiple_of(every.max(1)) {
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let response = Response::builder().status(200).body(()).unwrap();
                    if respond.send_response(response, true).is_ok() {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })?;
        Ok(Self {
            addr,
            answered,
            refused,
            _server: server,
        })
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Streams refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}
