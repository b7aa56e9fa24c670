//! HTTP/1.1 servers whose behaviour is known by construction, for kiln's tests.
//!
//! A thread per connection and blocking sleeps keep the timing exact (a sleep here is tens of
//! microseconds late, not a timer-wheel millisecond), so tests can derive the latency
//! distribution a client should see. They count what they answered, so a load tool's request
//! count can be checked against the server's. Never for production use: no limits at all.

pub mod h2;
pub mod planted;
pub mod postgres;
pub mod shop_api;
mod timing;
pub use timing::{append_to_file_named_by, named_loop, timing_attempts};

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A periodic pause of the whole server, like a GC pause or a cache that expires on the
/// minute: requests that arrive during `[k*every, k*every + length)` wait until it ends.
#[derive(Clone, Copy, Debug)]
pub struct Stall {
    pub every: Duration,
    pub length: Duration,
}

/// How the target answers. The default answers at once with a small body.
#[derive(Clone, Debug)]
pub struct Behavior {
    /// Time spent on every request before answering (asleep, like waiting on a database).
    pub service_time: Duration,
    /// CPU burnt on every request, in `burn_cpu_for_request` (a known hot function for
    /// profiles), before the service time.
    pub cpu_per_request: Duration,
    pub stall: Option<Stall>,
    /// Every Nth request (counted over the whole server) takes this much longer.
    pub slow_every: Option<(u64, Duration)>,
    /// Each request, independently with this probability, takes this much longer (drawn
    /// from a generator seeded per server, so two servers' slow requests are unrelated).
    pub slow_chance: Option<(f64, Duration)>,
    /// Every Nth request gets its connection reset instead of an answer.
    pub reset_every: Option<u64>,
    /// After this many answers the server keeps reading but never answers again.
    pub hang_after: Option<u64>,
    pub body: Vec<u8>,
    /// Serve HTTPS with a fresh self-signed certificate for `localhost` and 127.0.0.1.
    pub tls: bool,
    /// Problems planted for the findings' tests (page faults, clock system calls, a peer
    /// that does not read).
    pub planted: planted::Planted,
}

impl Default for Behavior {
    fn default() -> Self {
        Self {
            service_time: Duration::ZERO,
            cpu_per_request: Duration::ZERO,
            stall: None,
            slow_every: None,
            slow_chance: None,
            reset_every: None,
            hang_after: None,
            body: b"hello from kiln-targets\n".to_vec(),
            tls: false,
            planted: planted::Planted::default(),
        }
    }
}

struct Shared {
    behavior: Behavior,
    tls: Option<Arc<rustls::ServerConfig>>,
    started: Instant,
    stop: AtomicBool,
    received: AtomicU64,
    /// Seeds `slow_chance`'s draws: differs from server to server.
    seed: u64,
    answered: AtomicU64,
    /// Answers being written now.
    writing: AtomicU64,
    resets: AtomicU64,
    connections: AtomicU64,
    /// Microseconds from reading each request to having written its answer.
    handling_us: Mutex<Vec<u64>>,
    planted: planted::PlantedState,
}

/// A running target on 127.0.0.1. Stops when dropped.
pub struct TargetServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl TargetServer {
    /// Starts a target on a free loopback port.
    pub fn start(behavior: Behavior) -> io::Result<Self> {
        Self::start_on("127.0.0.1:0", behavior)
    }

    pub fn start_on(bind: &str, behavior: Behavior) -> io::Result<Self> {
        let listener = match behavior.planted.listen_backlog {
            None => TcpListener::bind(bind)?,
            Some(backlog) => {
                let address: SocketAddr = bind.parse().map_err(io::Error::other)?;
                let socket = socket2::Socket::new(
                    socket2::Domain::for_address(address),
                    socket2::Type::STREAM,
                    None,
                )?;
                socket.set_reuse_address(true)?;
                socket.bind(&address.into())?;
                socket.listen(backlog)?;
                socket.into()
            }
        };
        let addr = listener.local_addr()?;
        let tls = if behavior.tls {
            Some(self_signed_tls()?)
        } else {
            None
        };
        let planted = planted::PlantedState::start(behavior.planted.clone())?;
        let shared = Arc::new(Shared {
            planted,
            behavior,
            tls,
            started: Instant::now(),
            stop: AtomicBool::new(false),
            received: AtomicU64::new(0),
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ u64::from(std::process::id()),
            answered: AtomicU64::new(0),
            writing: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            handling_us: Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        let acceptor = thread::Builder::new()
            .name("target-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))?;
        Ok(Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.shared.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}{}", self.addr, path)
    }

    /// Requests whose head was read completely.
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::SeqCst)
    }

    /// Requests answered with a complete response. Answers being written are waited for (at
    /// most 2 s): the client may have read one before its thread counted it.
    pub fn answered(&self) -> u64 {
        let until = Instant::now() + Duration::from_secs(2);
        while self.shared.writing.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
        self.shared.answered.load(Ordering::SeqCst)
    }

    pub fn resets(&self) -> u64 {
        self.shared.resets.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The server's own view of each answer's time, from having read the request to having
    /// written the response, sorted. What a client measures can only add network and
    /// client time to this.
    pub fn handling_times_us(&self) -> Vec<u64> {
        let mut v = self
            .shared
            .handling_us
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// Stops accepting; open connections end at their next request.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(handle) = self.acceptor.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for TargetServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        if !shared.behavior.planted.accept_delay.is_zero() {
            thread::sleep(shared.behavior.planted.accept_delay);
        }
        let conn_shared = shared.clone();
        let _ = thread::Builder::new()
            .name("target-conn".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                let _ = stream.set_nodelay(true);
                let Ok(raw) = stream.try_clone() else { return };
                match &conn_shared.tls {
                    None => {
                        let _ = serve_connection(stream, &raw, &conn_shared);
                    }
                    Some(config) => {
                        let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                            return;
                        };
                        let tls = rustls::StreamOwned::new(conn, stream);
                        let _ = serve_connection(tls, &raw, &conn_shared);
                    }
                }
            });
    }
}

/// Reads requests one after another on a keep-alive connection and answers each.
fn serve_connection<S: Read + Write>(
    mut stream: S,
    raw: &TcpStream,
    shared: &Shared,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut filled = 0usize;
    loop {
        // With a worker pool, a request waits unread in the socket until a worker is free
        // (the connection's readiness is seen without reading, as a poller does).
        let _worker = if shared.planted.has_pool() {
            if filled == 0 && raw.peek(&mut [0u8; 1])? == 0 {
                return Ok(());
            }
            shared.planted.worker()
        } else {
            None
        };
        let Some(request) = read_request(&mut stream, &mut buf, &mut filled, &shared.stop)? else {
            return Ok(());
        };
        let close = request.close;
        let arrived = Instant::now();
        let nth = shared.received.fetch_add(1, Ordering::SeqCst) + 1;
        let behavior = &shared.behavior;

        if let Some(n) = behavior.reset_every {
            if n > 0 && nth.is_multiple_of(n) {
                shared.resets.fetch_add(1, Ordering::SeqCst);
                // SO_LINGER 0 makes close() send RST instead of FIN.
                let _ = socket2::SockRef::from(raw).set_linger(Some(Duration::ZERO));
                return Ok(());
            }
        }
        if let Some(limit) = behavior.hang_after {
            if shared.answered.load(Ordering::SeqCst) >= limit {
                while !shared.stop.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(20));
                }
                let _ = raw.shutdown(Shutdown::Both);
                return Ok(());
            }
        }
        if !behavior.cpu_per_request.is_zero() {
            burn_cpu_for_request(behavior.cpu_per_request);
        }
        shared.planted.on_request();
        let mut ready_at = arrived;
        if let Some(stall) = behavior.stall {
            ready_at = stall_end(shared.started, arrived, stall);
        }
        ready_at += behavior.service_time;
        if let Some((n, extra)) = behavior.slow_every {
            if n > 0 && nth.is_multiple_of(n) {
                ready_at += extra;
            }
        }
        if let Some((p, extra)) = behavior.slow_chance {
            if unit_draw(shared.seed, nth) < p {
                ready_at += extra;
            }
        }
        let now = Instant::now();
        if ready_at > now {
            thread::sleep(ready_at - now);
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n{}\r\n",
            behavior.body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        let mut response = head.into_bytes();
        response.extend_from_slice(&behavior.body);
        // counted as writing until counted as answered: a client can read the answer before
        // this thread counts it, and answered() waits for the count to catch up
        shared.writing.fetch_add(1, Ordering::SeqCst);
        let written = stream.write_all(&response);
        if written.is_ok() {
            shared.answered.fetch_add(1, Ordering::SeqCst);
        }
        shared.writing.fetch_sub(1, Ordering::SeqCst);
        written?;
        if let Ok(mut times) = shared.handling_us.lock() {
            times.push(arrived.elapsed().as_micros() as u64);
        }
        if close {
            return Ok(());
        }
    }
}

/// One request read from a keep-alive connection.
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The client asked to close the connection after the answer.
    pub close: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads the next request (head and body) from `stream`, with `buf[..filled]` holding what
/// was read past the last one. `None` when the client closed, or sent something that is
/// not HTTP (answered with 400).
pub fn read_request<S: Read + Write>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    filled: &mut usize,
    stop: &AtomicBool,
) -> io::Result<Option<Request>> {
    let (head_len, mut request, body_len) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..*filled]) {
            Ok(httparse::Status::Complete(head_len)) => {
                let headers: Vec<(String, String)> = req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).trim().to_string(),
                        )
                    })
                    .collect();
                let request = Request {
                    method: req.method.unwrap_or("").to_string(),
                    path: req.path.unwrap_or("").to_string(),
                    close: false,
                    body: Vec::new(),
                    headers,
                };
                let body_len = request
                    .header("content-length")
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                break (head_len, request, body_len);
            }
            Ok(httparse::Status::Partial) => {}
            Err(_) => {
                let _ = stream.write_all(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                return Ok(None);
            }
        }
        if *filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = stream.read(&mut buf[*filled..])?;
        if n == 0 || stop.load(Ordering::SeqCst) {
            return Ok(None);
        }
        *filled += n;
    };
    request.close = request
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    // The body, which may be partly buffered already.
    let buffered = (*filled - head_len).min(body_len);
    request
        .body
        .extend_from_slice(&buf[head_len..head_len + buffered]);
    while request.body.len() < body_len {
        let mut chunk = [0u8; 8192];
        let want = (body_len - request.body.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..want])?;
        if n == 0 {
            return Ok(None);
        }
        request.body.extend_from_slice(&chunk[..n]);
    }
    let consumed = head_len + buffered;
    buf.copy_within(consumed..*filled, 0);
    *filled -= consumed;
    Ok(Some(request))
}

/// A self-signed certificate for localhost and 127.0.0.1, and its key, as PEM (for a real
/// server's TLS, e.g. nginx's ssl_certificate).
pub fn self_signed_pem() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("rcgen makes a self-signed certificate");
    (cert.cert.pem(), cert.key_pair.serialize_pem())
}

pub(crate) fn self_signed_tls() -> io::Result<Arc<rustls::ServerConfig>> {
    let other = io::Error::other;
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
        .map_err(|e| other(e.to_string()))?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| other(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .map_err(|e| other(e.to_string()))?;
    Ok(Arc::new(config))
}

/// Pins the calling thread to one CPU (the threads and processes it starts later inherit it).
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity(0) touch only it and
    // the calling thread's own mask.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "pin to CPU {cpu}"
        );
    }
}

/// Refuses `io_uring_setup` to the calling thread and whatever it starts or executes from
/// now on, with EPERM, as a container's seccomp profile does (Docker's default refuses
/// io_uring): a seccomp filter of four instructions. Call in a thread of its own, or in a
/// child before `exec` (`CommandExt::pre_exec`); it cannot be taken back.
pub fn refuse_io_uring() -> std::io::Result<()> {
    // classic BPF: load the system call's number, refuse io_uring_setup, allow the rest
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let insn = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let program = [
        insn(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        insn(JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let filter = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with the documented arguments; the program outlives the call (the
    // kernel copies it).
    let ok = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &filter as *const libc::sock_fprog,
            ) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A port on 127.0.0.1 free now, for a server another process will bind (a JVM, Python,
/// PostgreSQL). Taken below the kernel's ephemeral range: a port from `bind(0)` is one the
/// kernel also hands to outgoing connections, and on a machine running many load tests one
/// of kiln's own connections took such a port before the server bound it (the server exited
/// with "address in use"). Below the range only another listener takes it; each call of a
/// process tries the next port, from an offset by process id, so tests running at once and
/// two test binaries start apart.
pub fn free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = ephemeral_ports_start().map_or(32_768, u32::from);
    // from 10000 up to the ephemeral range (the well-known services sit lower)
    let (low, span) = (10_000, ephemeral_low.saturating_sub(10_000));
    if span < 1_000 {
        return Ok(TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port());
    }
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (low + (start + n) % span) as u16;
        if TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "no free port below the ephemeral range",
    ))
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`), if it says.
fn ephemeral_ports_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A TCP listener on 127.0.0.1 with the given accept backlog that never accepts (for the
/// socket tests: queues, overflows, limits), and its address.
pub fn idle_listener(backlog: i32) -> (socket2::Socket, std::net::SocketAddr) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .expect("a TCP socket");
    let any_port: std::net::SocketAddr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
    socket.bind(&any_port.into()).expect("bind 127.0.0.1");
    socket.listen(backlog).expect("listen");
    let addr = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .expect("an IPv4 address");
    (socket, addr)
}

/// Spins on the CPU for `d`: the hot function a profile of a CPU-bound target must find.
#[inline(never)]
pub fn burn_cpu_for_request(d: Duration) {
    let until = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < until {
        for i in 0..500 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}

/// Request `nth`'s draw in [0, 1): SplitMix64 of the server's seed and the request's number
/// (a well-mixed hash, so the draws of consecutive requests are independent in practice).
pub fn unit_draw(seed: u64, nth: u64) -> f64 {
    let mut z = seed.wrapping_add(nth.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// When a request that arrived at `arrived` may proceed under a periodic stall.
pub fn stall_end(started: Instant, arrived: Instant, stall: Stall) -> Instant {
    let every = stall.every.as_nanos().max(1);
    let since = arrived.duration_since(started).as_nanos();
    let into_period = since % every;
    if into_period < stall.length.as_nanos() {
        arrived + Duration::from_nanos((stall.length.as_nanos() - into_period) as u64)
    } else {
        arrived
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_below_the_ephemeral_range_bindable_and_not_repeated() {
        let low = ephemeral_ports_start().unwrap();
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        for &p in &ports {
            assert!((10_000..low).contains(&p), "{p}");
            TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, p)).unwrap();
        }
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
    }

    fn get(addr: SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn answers_and_counts() {
        let t = TargetServer::start(Behavior::default()).unwrap();
        assert!(get(t.addr()).starts_with("HTTP/1.1 200 OK"));
        assert!(get(t.addr()).ends_with("hello from kiln-targets\n"));
        assert_eq!(t.answered(), 2);
    }

    #[test]
    fn every_third_request_is_reset() {
        let t = TargetServer::start(Behavior {
            reset_every: Some(3),
            ..Default::default()
        })
        .unwrap();
        let answers: Vec<bool> = (0..6)
            .map(|_| get(t.addr()).starts_with("HTTP/1.1 200"))
            .collect();
        assert_eq!(answers, vec![true, true, false, true, true, false]);
        assert_eq!(t.resets(), 2);
    }

    #[test]
    fn unit_draws_fall_below_p_about_p_of_the_time_and_differ_by_seed() {
        let below = (1..=100_000).filter(|&n| unit_draw(7, n) < 0.05).count();
        // binomial(100000, 0.05): sd 69
        assert!((4_650..5_350).contains(&below), "{below}");
        let both = (1..=100_000)
            .filter(|&n| unit_draw(7, n) < 0.05 && unit_draw(8, n) < 0.05)
            .count();
        // independent seeds: 0.25% together (sd 16)
        assert!((170..330).contains(&both), "{both}");
    }

    #[test]
    fn stall_end_waits_only_inside_the_stall() {
        let start = Instant::now();
        let stall = Stall {
            every: Duration::from_secs(1),
            length: Duration::from_millis(100),
        };
        let inside = start + Duration::from_millis(1_030);
        assert_eq!(
            stall_end(start, inside, stall),
            start + Duration::from_millis(1_100)
        );
        let outside = start + Duration::from_millis(1_500);
        assert_eq!(stall_end(start, outside, stall), outside);
    }
}
