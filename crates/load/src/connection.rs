//! One client connection: TCP (and TLS) to the target, an HTTP/1.1 keep-alive session
//! (see `http1` for why it is not hyper's client), and the classification of every failure
//! into an [`ErrorKind`]. It never retries by itself: the caller decides, and counts.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use kiln_record::ErrorKind;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::http1::{self, ResponseReader};
use crate::plan::{LoadPlan, Target};
use crate::PlanError;

pub use crate::http1::{Captured, GrpcAnswer, RequestParts, Response};

/// A socket that could not be made for want of kiln's own resources.
fn is_local_shortage(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL)
    )
}

/// Bytes read from the socket at a time at first: a read that fills the buffer doubles it up
/// to `READ_BUFFER_MAX` (large bodies take fewer reads), and a response head may grow it to
/// `http1::MAX_HEAD`. Small answers keep a connection at 4 KiB: 16 KiB for every connection
/// was most of kiln's memory at 10,000 connections (docs/benchmarks.md, issue 35).
const READ_BUFFER: usize = 4 * 1024;
const READ_BUFFER_MAX: usize = 64 * 1024;

thread_local! {
    /// The read buffers this load thread's idle HTTP/1.1 connections gave back: a buffer is
    /// held only while a response is awaited or bytes wait unread, so 10,000 connections at
    /// 5,000 requests/s share a handful (see `H1Connection::give_back_buffer`).
    static IDLE_BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Buffers kept for reuse per thread; more are freed.
const IDLE_BUFFERS_KEPT: usize = 256;

/// Idle HTTP/1.1 keep-alive connections one phase leaves to the next, so a warm-up hands its
/// connections to the measured run. A JVM target compiles its accept and connection-setup
/// paths for the connections it saw while warming up; new ones at the measured run's start
/// deoptimised that code and set its JIT compiling again (seen: 750 ms of compiling in the
/// first measured seconds). Plain TCP only: a TLS session or an HTTP/2 connection lives in
/// the phase's runtime with state that cannot be handed over.
#[derive(Clone, Default)]
pub struct KeptConnections(Arc<std::sync::Mutex<Vec<(std::net::SocketAddr, std::net::TcpStream)>>>);

impl std::fmt::Debug for KeptConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |kept| kept.len());
        write!(f, "KeptConnections({n})")
    }
}

impl KeptConnections {
    fn put(&self, addr: std::net::SocketAddr, socket: std::net::TcpStream) {
        if let Ok(mut kept) = self.0.lock() {
            kept.push((addr, socket));
        }
    }

    /// A kept connection to `addr` that is still open and idle: the server may have closed
    /// it since (its keep-alive timeout), or sent something unasked.
    fn take(&self, addr: std::net::SocketAddr) -> Option<std::net::TcpStream> {
        let mut kept = self.0.lock().ok()?;
        while let Some(i) = kept.iter().position(|(a, _)| *a == addr) {
            let (_, socket) = kept.swap_remove(i);
            // non-blocking (as tokio left it): nothing to read is what an idle, open
            // connection says
            let mut byte = [0u8; 1];
            if matches!(socket.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            {
                return Some(socket);
            }
        }
        None
    }

    /// How many are kept (for tests).
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |kept| kept.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What every connection of a phase shares: the target, the TLS setup, the request.
pub struct ConnectionSetup {
    pub target: Target,
    /// Connections left by the phase before, taken before opening new ones (the URL's
    /// target only, not a scenario's origins or hedge replicas).
    kept: Option<KeptConnections>,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    method: http::Method,
    request: Vec<u8>,
    /// The plain request's parts, for an HTTP/2 connection.
    parts: RequestParts,
    /// Speak HTTP/2: offered by ALPN over TLS (HTTP/1.1 if the server declines), prior
    /// knowledge (h2c) on plain TCP.
    http2: bool,
    pub connect_timeout: Duration,
    /// The first failure of kiln's own resources (no descriptor, no memory, no local port)
    /// while connecting: not the target's fault, so never counted as one of its requests.
    local_failure: FirstText,
    /// The first TLS handshake error's text: "TLS" alone does not say what to fix.
    tls_failure: FirstText,
}

/// The first of several texts noted from any connection task; later ones are dropped.
#[derive(Default)]
struct FirstText(std::sync::Mutex<Option<String>>);

impl FirstText {
    fn note(&self, text: impl FnOnce() -> String) {
        if let Ok(mut first) = self.0.lock() {
            first.get_or_insert_with(text);
        }
    }

    fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|f| f.clone())
    }
}

impl ConnectionSetup {
    /// The URL's request to `plan.target`; with `kept`, idle connections an earlier phase of
    /// the run left are taken first and this phase's are left to the next.
    pub fn new(plan: &LoadPlan, kept: Option<&KeptConnections>) -> Result<Self, PlanError> {
        let target = plan.target.clone();
        // The URL's user:password becomes Basic auth unless the user set Authorization.
        let mut headers = plan.request.headers.clone();
        if let Some(auth) = &target.basic_auth {
            if !headers
                .iter()
                .any(|(n, _)| n == http::header::AUTHORIZATION)
            {
                headers.push((http::header::AUTHORIZATION, auth.clone()));
            }
        }
        let request = http1::encode_request(
            &plan.request.method,
            &target.path_and_query,
            &target.authority,
            &headers,
            &plan.request.body,
        );
        let mut setup = Self::for_origin(&target, plan.insecure, plan.connect_timeout, plan.http2)?;
        setup.method = plan.request.method.clone();
        setup.request = request;
        setup.kept = kept.cloned();
        setup.parts = RequestParts {
            method: plan.request.method.clone(),
            path: target.path_and_query.clone(),
            headers,
            body: plan.request.body.clone(),
        };
        Ok(setup)
    }

    /// Connections to one origin of a scenario, whose requests are built per send.
    pub fn for_origin(
        target: &Target,
        insecure: bool,
        connect_timeout: Duration,
        http2: bool,
    ) -> Result<Self, PlanError> {
        let tls = if target.tls {
            let config = tls_config(insecure, http2);
            let name = ServerName::try_from(target.host.clone()).map_err(|e| {
                PlanError::BadServerName {
                    host: target.host.clone(),
                    why: e.to_string(),
                }
            })?;
            Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        Ok(Self {
            target: target.clone(),
            kept: None,
            tls,
            method: http::Method::GET,
            request: Vec::new(),
            parts: RequestParts::default(),
            http2,
            connect_timeout,
            local_failure: FirstText::default(),
            tls_failure: FirstText::default(),
        })
    }

    /// What the first failed TLS handshake said, if one failed.
    pub fn tls_failure(&self) -> Option<String> {
        self.tls_failure.get()
    }

    /// kiln's own shortage that stopped a connection, if one did (see `local_failure`).
    pub fn local_failure(&self) -> Option<String> {
        self.local_failure.get()
    }

    fn note_local_failure(&self, e: &std::io::Error) {
        self.local_failure.note(|| {
            let nofile = crate::limits::open_files_limit()
                .map(|(soft, _)| format!("; kiln may open {soft} files"))
                .unwrap_or_default();
            format!(
                "kiln could not open a connection: {e}{nofile} (lower -c/--max-connections, \
                 or raise the limit: ulimit -n)"
            )
        });
    }

    /// Opens a connection (and completes the TLS handshake); its times are taken once with
    /// [`Connection::take_connect_times`].
    pub async fn connect(&self) -> Result<Connection, ErrorKind> {
        let began = Instant::now();
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect(self.target.addr))
            .await
            .map_err(|_| ErrorKind::ConnectTimeout)?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
                std::io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
                _ => {
                    if is_local_shortage(&e) {
                        self.note_local_failure(&e);
                    }
                    ErrorKind::ConnectOther
                }
            })?;
        let _ = tcp.set_nodelay(true);
        let connected = Instant::now();
        let mut times = ConnectTimes {
            connect: connected.saturating_duration_since(began),
            ..ConnectTimes::default()
        };
        let stream = match &self.tls {
            None => Stream::plain(tcp).map_err(|_| ErrorKind::ConnectOther)?,
            Some((connector, name)) => {
                let tls = tokio::time::timeout(
                    self.connect_timeout,
                    connector.connect(name.clone(), tcp),
                )
                .await
                .map_err(|_| ErrorKind::ConnectTimeout)?
                .map_err(|e| {
                    self.tls_failure.note(|| e.to_string());
                    ErrorKind::Tls
                })?;
                times.tls = Some(connected.elapsed());
                times.tls_resumed =
                    tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                Stream::Tls(Box::new(tls))
            }
        };
        let h2 = match &stream {
            Stream::Tls(tls) => tls.get_ref().1.alpn_protocol() == Some(b"h2"),
            Stream::Plain(_) | Stream::Uring(_) => self.http2,
        };
        if h2 {
            return H2Connection::handshake(stream, &self.target)
                .await
                .map(|c| Connection(Inner::H2(c), Some(times)));
        }
        Ok(Connection(self.h1(stream).0, Some(times)))
    }

    fn h1(&self, stream: Stream) -> Connection {
        Connection(
            Inner::H1(H1Connection {
                stream,
                buf: Vec::new(),
                start: 0,
                end: 0,
                reader: ResponseReader::new(&self.method),
                reusable: true,
                first_byte: None,
                reads: 0,
            }),
            None,
        )
    }

    /// An open, idle connection the phase before left (see [`KeptConnections`]), if any.
    /// Call inside the phase's runtime.
    pub fn take_kept(&self) -> Option<Connection> {
        let socket = self.kept.as_ref()?.take(self.target.addr)?;
        let stream = Stream::plain(TcpStream::from_std(socket).ok()?).ok()?;
        Some(self.h1(stream))
    }

    /// Leaves `connection` to the next phase when it is a plain HTTP/1.1 one, idle and
    /// reusable; otherwise it is closed.
    pub fn keep(&self, connection: Connection) {
        let Some(kept) = &self.kept else {
            return;
        };
        if let Inner::H1(H1Connection {
            stream,
            start,
            end,
            reusable: true,
            ..
        }) = connection.0
        {
            let socket = match stream {
                _ if start != end => None,
                Stream::Plain(tcp) => tcp.into_std().ok(),
                Stream::Uring(uring) => uring.into_std(),
                Stream::Tls(_) => None,
            };
            if let Some(socket) = socket {
                kept.put(self.target.addr, socket);
            }
        }
    }
}

/// The socket, plain or TLS (an enum rather than a trait object: no dynamic call per read).
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// Plain, on the load thread's io_uring (`--io uring`).
    Uring(crate::uring::UringStream),
}

impl Stream {
    /// A plain connection: on the thread's ring when it has one.
    fn plain(tcp: TcpStream) -> std::io::Result<Self> {
        Ok(match crate::uring::Ring::current() {
            Some(ring) => Stream::Uring(ring.stream(tcp.into_std()?)),
            None => Stream::Plain(tcp),
        })
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Uring(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Uring(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Uring(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Uring(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// An open connection, HTTP/1.1 or HTTP/2 (chosen when it was made). An enum: no dynamic
/// call per request on the HTTP/1.1 fast path.
pub struct Connection(Inner, Option<ConnectTimes>);

/// What opening a connection cost: its TCP connect and, over TLS, its handshake.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnectTimes {
    pub connect: Duration,
    pub tls: Option<Duration>,
    /// The TLS handshake resumed an earlier session (no full key exchange).
    pub tls_resumed: bool,
}

enum Inner {
    H1(H1Connection),
    H2(H2Connection),
}

impl Connection {
    /// What opening this connection cost; None for one taken over from the phase before,
    /// or once taken.
    pub fn take_connect_times(&mut self) -> Option<ConnectTimes> {
        self.1.take()
    }

    /// When the last complete HTTP/1.1 response's first bytes arrived: None over HTTP/2,
    /// after a failure, or when it was already read with the one before.
    pub fn first_byte(&self) -> Option<Instant> {
        match &self.0 {
            Inner::H1(c) => c.first_byte,
            Inner::H2(_) => None,
        }
    }

    /// The socket reads the last complete HTTP/1.1 response took (0 over HTTP/2).
    pub fn response_reads(&self) -> u32 {
        match &self.0 {
            Inner::H1(c) => c.reads,
            Inner::H2(_) => 0,
        }
    }

    /// False if the connection cannot take another request (the server closed it or asked
    /// to); the caller opens a new one. Not an error.
    pub async fn ready(&mut self) -> bool {
        match &mut self.0 {
            Inner::H1(c) => c.ready().await,
            Inner::H2(c) => c.ready(),
        }
    }

    /// Whether the last request failed because the target refused it unprocessed (HTTP/2:
    /// REFUSED_STREAM, or past a GOAWAY's last stream; RFC 9113 8.7), which may be sent
    /// again; cleared by asking.
    pub fn take_refused_unprocessed(&mut self) -> bool {
        match &mut self.0 {
            Inner::H1(_) => false,
            Inner::H2(c) => std::mem::take(&mut c.refused_unprocessed),
        }
    }

    /// Another handle on this HTTP/2 connection, to send on it beside this one
    /// (`--http2-streams`); None for HTTP/1.1, which carries one request at a time.
    pub fn share(&self) -> Option<Connection> {
        match &self.0 {
            Inner::H1(_) => None,
            Inner::H2(c) => Some(Connection(
                Inner::H2(H2Connection {
                    send: c.send.clone(),
                    driver: c.driver.clone(),
                    scheme: c.scheme.clone(),
                    authority: c.authority.clone(),
                    refused_unprocessed: false,
                    handle: true,
                    grpc: c.grpc,
                }),
                None,
            )),
        }
    }

    /// Whether this is a handle made by [`Connection::share`] (its connection is counted,
    /// in the gauge and as opened or lost, by the owner it was shared from).
    pub fn is_handle(&self) -> bool {
        matches!(&self.0, Inner::H2(c) if c.handle)
    }

    /// Sends the phase's request and reads the whole response.
    pub async fn send(&mut self, setup: &ConnectionSetup) -> Result<Response, ErrorKind> {
        match &mut self.0 {
            Inner::H1(c) => c.exchange(&setup.request).await,
            Inner::H2(c) => c
                .exchange(&setup.parts, false)
                .await
                .map(|(response, _)| response),
        }
    }

    /// Sends one request of a scenario and reads the whole response, keeping its headers
    /// and body when `capture`.
    pub async fn send_request(
        &mut self,
        request: &RequestParts,
        authority: &str,
        capture: bool,
    ) -> Result<(Response, Captured), ErrorKind> {
        match &mut self.0 {
            Inner::H1(c) => {
                let bytes = http1::encode_request(
                    &request.method,
                    &request.path,
                    authority,
                    &request.headers,
                    &request.body,
                );
                c.reader.reset_for(&request.method, capture);
                let response = c.exchange(&bytes).await?;
                Ok((response, c.reader.take_captured()))
            }
            Inner::H2(c) => c.exchange(request, capture).await,
        }
    }
}

/// An HTTP/1.1 keep-alive connection with its read buffer (`buf[start..end]` is unread;
/// empty while the connection is idle with nothing unread).
struct H1Connection {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    reader: ResponseReader,
    /// False once the server said it closes, or closed: the next request needs a new one.
    reusable: bool,
    /// When the last complete response's first bytes arrived (None after a failure).
    first_byte: Option<Instant>,
    /// The socket reads the last complete response took (0: it had arrived while idle).
    reads: u32,
}

impl H1Connection {
    /// False if the connection cannot take another request: the server asked to close it
    /// (e.g. at its keep-alive limit) or has closed it while idle. Not an error.
    async fn ready(&mut self) -> bool {
        if !self.reusable {
            return false;
        }
        // A close (or anything else) that arrived while idle. The runtime's readiness flag
        // is checked first, so this makes no system call unless the socket has news.
        let mut cx = Context::from_waker(Waker::noop());
        self.take_buffer();
        self.make_room();
        let mut spare = ReadBuf::new(&mut self.buf[self.end..]);
        match Pin::new(&mut self.stream).poll_read(&mut cx, &mut spare) {
            Poll::Pending => true,
            Poll::Ready(Ok(())) if spare.filled().is_empty() => {
                self.reusable = false;
                false
            }
            Poll::Ready(Ok(())) => {
                // Unasked-for bytes: kept, they will be read as the next response.
                self.end += spare.filled().len();
                true
            }
            Poll::Ready(Err(_)) => {
                self.reusable = false;
                false
            }
        }
    }

    async fn exchange(&mut self, request: &[u8]) -> Result<Response, ErrorKind> {
        self.stream
            .write_all(request)
            .await
            .map_err(|e| classify_io(&e))?;
        if matches!(self.stream, Stream::Tls(_)) {
            self.stream.flush().await.map_err(|e| classify_io(&e))?;
        }
        self.take_buffer();
        self.reader.reset();
        self.first_byte = None;
        // one clock read per response, at its first bytes: the gap to its last (taken by the
        // caller at completion) shows a body held back behind headers
        let mut first_byte = None;
        let mut reads = 0u32;
        loop {
            let progress = self.reader.advance(&self.buf[self.start..self.end]);
            let progress = progress.inspect_err(|_| self.reusable = false)?;
            self.start += progress.consumed;
            if progress.complete {
                let response = self.reader.response();
                self.reusable &= response.keep_alive;
                self.first_byte = first_byte;
                self.reads = reads;
                self.give_back_buffer();
                return Ok(response);
            }
            self.make_room();
            let space = self.buf.len() - self.end;
            let n = match self.stream.read(&mut self.buf[self.end..]).await {
                Ok(n) => n,
                Err(e) => {
                    self.reusable = false;
                    return Err(classify_io(&e));
                }
            };
            if n == 0 {
                self.reusable = false;
                return self.reader.end_of_input();
            }
            if first_byte.is_none() {
                first_byte = Some(Instant::now());
            }
            reads = reads.saturating_add(1);
            self.end += n;
            // the read filled the space: more was waiting, so read more at a time
            if n == space && self.buf.len() < READ_BUFFER_MAX {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
    }

    /// A read buffer for the next response: the connection's own while it holds one, else
    /// one an idle connection of this thread gave back, else a new one.
    fn take_buffer(&mut self) {
        if self.buf.is_empty() {
            self.buf = IDLE_BUFFERS
                .with_borrow_mut(Vec::pop)
                .unwrap_or_else(|| vec![0; READ_BUFFER]);
        }
    }

    /// Gives the read buffer back once no byte in it waits to be read: an idle connection
    /// holds none.
    fn give_back_buffer(&mut self) {
        if self.start != self.end || self.buf.is_empty() {
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        (self.start, self.end) = (0, 0);
        IDLE_BUFFERS.with_borrow_mut(|idle| {
            if idle.len() < IDLE_BUFFERS_KEPT {
                idle.push(buf);
            }
        });
    }

    /// Makes space after `end`: drops what was read, then grows up to the largest head.
    fn make_room(&mut self) {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.end < self.buf.len() {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        } else if self.buf.len() < http1::MAX_HEAD + READ_BUFFER {
            self.buf.resize(self.buf.len() * 2, 0);
        }
    }
}

/// Maps a socket or TLS error to what a user should read.
fn classify_io(e: &std::io::Error) -> ErrorKind {
    match e.kind() {
        std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::UnexpectedEof => ErrorKind::Reset,
        std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
        // rustls reports its failures as invalid data.
        std::io::ErrorKind::InvalidData => ErrorKind::Tls,
        _ => ErrorKind::Other,
    }
}

fn tls_config(insecure: bool, http2: bool) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions");
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    config
}

/// Headers HTTP/2 forbids (RFC 9113 8.2.2) or carries as pseudo-headers. `te: trailers` is
/// allowed (and what gRPC sends); any other `te` is not.
fn h2_forbidden(name: &http::HeaderName, value: &http::HeaderValue) -> bool {
    use http::header;
    name == header::HOST
        || name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || (name == header::TE && !value.as_bytes().eq_ignore_ascii_case(b"trailers"))
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// An HTTP/2 connection (h2, the crate hyper uses): one request at a time per connection,
/// as an HTTP/1.1 connection carries them, so VUs and connections mean the same in both;
/// with `--http2-streams N`, N handles of it ([`Connection::share`]) send at once.
/// The connection's own task (frames, pings, flow control) runs beside it on the thread.
struct H2Connection {
    send: h2::client::SendRequest<bytes::Bytes>,
    /// Shared by the connection's handles: the last one dropped ends the connection.
    driver: std::rc::Rc<H2Driver>,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// The last request failed unprocessed by the target (see [`refused_unprocessed`]).
    refused_unprocessed: bool,
    /// A handle made by [`Connection::share`]: the connection is counted by its owner.
    handle: bool,
    /// The target is a gRPC method: each answer's status is read from its trailers.
    grpc: bool,
}

/// The task that runs an HTTP/2 connection, aborted when dropped.
struct H2Driver(tokio::task::JoinHandle<()>);

impl Drop for H2Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An error that says the server did not process the stream: it refused it
/// (REFUSED_STREAM), or its graceful GOAWAY (NO_ERROR) named a last stream below it. Either
/// way the request never reached the application and may be sent again (RFC 9113 8.7).
fn refused_unprocessed(e: &h2::Error) -> bool {
    let remote_reason = |reason| e.is_remote() && e.reason() == Some(reason);
    (e.is_reset() && remote_reason(h2::Reason::REFUSED_STREAM))
        || (e.is_go_away() && remote_reason(h2::Reason::NO_ERROR))
}

fn classify_h2(e: &h2::Error) -> ErrorKind {
    if let Some(io) = e.get_io() {
        return classify_io(io);
    }
    if e.is_go_away() || e.is_reset() {
        return ErrorKind::Reset;
    }
    ErrorKind::BadResponse
}

impl H2Connection {
    async fn handshake(stream: Stream, target: &Target) -> Result<Self, ErrorKind> {
        let (send, connection) = h2::client::handshake(stream)
            .await
            .map_err(|e| classify_h2(&e))?;
        let driver = tokio::task::spawn_local(async move {
            let _ = connection.await;
        });
        Ok(Self {
            send,
            driver: std::rc::Rc::new(H2Driver(driver)),
            scheme: if target.tls {
                http::uri::Scheme::HTTPS
            } else {
                http::uri::Scheme::HTTP
            },
            authority: target.authority.parse().map_err(|_| ErrorKind::Other)?,
            refused_unprocessed: false,
            handle: false,
            grpc: target.grpc,
        })
    }

    fn ready(&mut self) -> bool {
        !self.driver.0.is_finished()
    }

    async fn exchange(
        &mut self,
        request: &RequestParts,
        capture: bool,
    ) -> Result<(Response, Captured), ErrorKind> {
        let refused = std::cell::Cell::new(false);
        let fail = |e: h2::Error| {
            refused.set(refused_unprocessed(&e));
            classify_h2(&e)
        };
        let answer = self.exchange_once(request, capture, &fail).await;
        self.refused_unprocessed = refused.get();
        answer
    }

    /// One request and its whole answer; h2's errors go through `fail`.
    async fn exchange_once(
        &mut self,
        request: &RequestParts,
        capture: bool,
        fail: &dyn Fn(h2::Error) -> ErrorKind,
    ) -> Result<(Response, Captured), ErrorKind> {
        let uri = http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(request.path.as_str())
            .build()
            .map_err(|_| ErrorKind::Other)?;
        let mut builder = http::Request::builder()
            .method(request.method.clone())
            .uri(uri);
        for (name, value) in &request.headers {
            if !h2_forbidden(name, value) {
                builder = builder.header(name, value);
            }
        }
        let req = builder.body(()).map_err(|_| ErrorKind::Other)?;
        let mut send = self.send.clone().ready().await.map_err(fail)?;
        let end = request.body.is_empty();
        let (response, mut body_out) = send.send_request(req, end).map_err(fail)?;
        if !end {
            body_out
                .send_data(request.body.clone(), true)
                .map_err(fail)?;
        }
        let response = response.await.map_err(fail)?;
        let status = response.status().as_u16();
        // a gRPC error answered at once is headers only ("trailers-only"): its status is there
        let grpc_in_headers = grpc_status_in(response.headers());
        let head_message =
            grpc_in_headers.and_then(|_| response.headers().get("grpc-message").cloned());
        let mut captured = Captured::default();
        if capture {
            captured.headers = response
                .headers()
                .iter()
                .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
                .collect();
        }
        let mut body = response.into_body();
        let mut body_bytes = 0u64;
        let mut messages = crate::grpc_frames::MessageCounter::default();
        let mut first_message = None;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(fail)?;
            body_bytes += chunk.len() as u64;
            let _ = body.flow_control().release_capacity(chunk.len());
            if self.grpc && messages.feed(&chunk) > 0 && first_message.is_none() {
                first_message = Some(Instant::now());
            }
            if capture {
                captured.keep(&chunk);
            }
        }
        let grpc = if self.grpc {
            // before the stream is cancelled below: a call that failed at once is answered
            // in headers alone, and its trailers read after our CANCEL are that reset
            let trailers = body.trailers().await.map_err(fail)?;
            let sent = trailers.as_ref().and_then(grpc_status_in);
            let code = grpc_code(status, sent.or(grpc_in_headers));
            // a failed call's message, from the block its status came in
            let said = match sent {
                Some(_) => trailers
                    .as_ref()
                    .and_then(|t| t.get("grpc-message").cloned()),
                None => head_message,
            };
            let message = said
                .filter(|_| code != kiln_record::grpc::GRPC_OK)
                .map(|v| kiln_record::grpc::decode_grpc_message(v.as_bytes()).into());
            Some(GrpcAnswer {
                code,
                messages: messages.messages(),
                first_message,
                message,
            })
        } else {
            None
        };
        // The answer is whole: a body the server never took (it answered first, and its
        // window stays shut) is dropped and the stream cancelled, or h2 keeps it queued for as
        // long as the connection lasts (the hardening issue: 523 MB in 16 s). A stream the
        // server read to its end is closed already, and this sends nothing.
        if !end {
            body_out.send_reset(h2::Reason::CANCEL);
        }
        Ok((
            Response {
                status,
                body_bytes,
                keep_alive: true,
                grpc,
            },
            captured,
        ))
    }
}

/// The `grpc-status` a header block carries, if it carries one that is a number.
fn grpc_status_in(headers: &http::HeaderMap) -> Option<u8> {
    headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A gRPC call's status: the one the server sent; else, as gRPC's clients take it, the code
/// an HTTP error maps to, or INTERNAL for a 200 that ended without one (a server that is not
/// gRPC, or one that closed the stream before its trailers).
fn grpc_code(http_status: u16, sent: Option<u8>) -> u8 {
    sent.or_else(|| kiln_record::grpc::grpc_code_of_http(http_status))
        .unwrap_or(kiln_record::grpc::GRPC_INTERNAL)
}

/// `--insecure`: accepts any certificate but still checks handshake signatures.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod kept_tests {
    use super::*;

    #[test]
    fn a_kept_connection_the_server_closed_or_wrote_to_is_not_handed_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let kept = KeptConnections::default();
        let mut accepted = Vec::new();
        for _ in 0..3 {
            let client = std::net::TcpStream::connect(addr).unwrap();
            client.set_nonblocking(true).unwrap();
            accepted.push(listener.accept().unwrap().0);
            kept.put(addr, client);
        }
        // the server closes the first, writes unasked to the second, leaves the third idle
        drop(accepted.remove(0));
        std::io::Write::write_all(&mut accepted[0], b"HTTP/1.1 408 Timeout\r\n\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let idle = kept.take(addr).expect("the idle one");
        assert_eq!(
            idle.local_addr().unwrap(),
            accepted[1].peer_addr().unwrap(),
            "the idle connection is the one handed out"
        );
        assert!(
            kept.take(addr).is_none(),
            "the others are closed, not handed out"
        );
        assert!(kept.is_empty());
        let other: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        kept.put(addr, idle);
        assert!(kept.take(other).is_none(), "kept per address");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Model;
    use std::io::{Read, Write};

    /// A server on loopback answering each of its one connection's requests with a 5-byte
    /// body, then holding it open.
    fn answering_server(requests: usize) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let mut read = Vec::new();
            let mut buf = [0u8; 1024];
            for _ in 0..requests {
                while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = socket.read(&mut buf).unwrap();
                    read.extend_from_slice(&buf[..n]);
                }
                let end = read.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                read.drain(..end);
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                    .unwrap();
            }
            let _ = socket.read(&mut buf);
        });
        (addr, server)
    }

    #[test]
    fn an_idle_connection_holds_no_read_buffer_and_the_next_request_reuses_one() {
        let (addr, server) = answering_server(3);
        let plan = LoadPlan::new(
            Target::parse(&format!("http://{addr}/")).unwrap(),
            Model::Closed {
                connections: 1,
                think_time: Duration::ZERO,
                ramp_up: Duration::ZERO,
                stages: Vec::new(),
            },
            Duration::from_secs(1),
        );
        let setup = ConnectionSetup::new(&plan, None).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let held = |c: &Connection| match &c.0 {
            Inner::H1(h1) => h1.buf.len(),
            Inner::H2(_) => unreachable!("a plain HTTP/1.1 target"),
        };
        let idle = || IDLE_BUFFERS.with_borrow(Vec::len);
        runtime.block_on(async {
            let mut connection = setup.connect().await.unwrap();
            for _ in 0..3 {
                let response = connection.send(&setup).await.unwrap();
                assert_eq!(response.status, 200);
                assert_eq!((held(&connection), idle()), (0, 1));
            }
        });
        server.join().unwrap();
    }
}
