//! A start barrier over HTTP, for shards with no folder in common (machines without a shared
//! volume): shard 0 serves it, the others ask it until all N are ready. Every answer carries
//! shard 0's clock, so each shard also measures its own clock's offset from shard 0's as NTP
//! does (the answer's time against the middle of the round trip; the quickest round trip
//! kept) and starts at shard 0's start time read on its own clock. Shards whose clocks
//! disagree still start together, to within half a round trip, and the record keeps the
//! offset. `curl http://SHARD0:PORT/` shows who is ready.
//!
//! HTTP by hand over std's sockets, with `httparse` reading the messages: the barrier answers
//! a few small requests a second, one JSON object each, and needs no async runtime.
//!
//! The barrier is not open to strangers: with a token (`--barrier-token`, or
//! `KILN_BARRIER_TOKEN` so that it stays out of `ps`) every request carries it and shard 0
//! refuses any other; a request must arrive whole within [`REQUEST_DEADLINE`] (one byte every
//! second kept shard 0 from answering anyone); a start time further than the timeout from
//! shard 0's clock is not believed.

use crate::barrier::BarrierError;
use kiln_record::clock::unix_us;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The last shard's readiness to the start: the others poll every `POLL` and learn the
/// start long before it comes.
pub const HTTP_LEAD: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(100);
/// Shard 0 keeps answering this long after the start (for shards still to hear it).
const SERVE_AFTER_START: Duration = Duration::from_secs(10);
/// Asks after the start is known, to find a quicker round trip for the offset.
const EXTRA_ASKS: usize = 4;
/// How long shard 0 keeps answering after every shard heard the start: the last shard's extra
/// asks must be answered, or its offset rests on one exchange (one that waited behind a slow
/// client was 400 ms long and put the start 200 ms early).
const EXTRA_ASK_WINDOW: Duration = Duration::from_millis(500);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a request may take to arrive whole (a shard sends it in one packet).
pub const REQUEST_DEADLINE: Duration = Duration::from_millis(500);

/// The barrier at `addr` (`host:port`) for shard `index` of `count`.
#[derive(Clone, Debug)]
pub struct HttpBarrier {
    pub addr: String,
    pub index: u32,
    pub count: u32,
    /// What identifies the plan: shards of another plan (or another N) are refused.
    pub plan: String,
    /// How long to wait for the others before giving up.
    pub timeout: Duration,
    /// A secret every shard is given: requests without it are refused.
    pub token: Option<String>,
}

/// When to start, on this machine's clock, and how its clock stands against shard 0's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BarrierStart {
    pub at: SystemTime,
    /// Shard 0's clock minus this one's, in ms (0 for shard 0 itself).
    pub offset_ms: f64,
    /// The quickest round trip the offset was measured over: the offset holds to half of it.
    pub rtt_ms: f64,
}

/// What shard 0 answers.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Answer {
    /// Shard 0's clock when it answered (µs since the epoch).
    now_unix_us: u64,
    ready: Vec<u32>,
    of: u32,
    /// The start on shard 0's clock, once every shard is ready.
    start_unix_ms: Option<u64>,
}

#[derive(Default)]
struct State {
    ready: BTreeSet<u32>,
    /// Shards told the start.
    told: BTreeSet<u32>,
    /// When the last shard was told it.
    all_told_at: Option<Instant>,
    start_unix_ms: Option<u64>,
}

impl HttpBarrier {
    /// Says this shard is ready and waits for every shard; when to start.
    pub fn wait(&self) -> Result<BarrierStart, BarrierError> {
        if self.count == 0 || self.index >= self.count {
            return Err(BarrierError::NotAShard {
                index: self.index,
                count: self.count,
            });
        }
        if self.index == 0 {
            self.serve()
        } else {
            self.ask()
        }
    }

    fn name(&self) -> String {
        format!("barrier http://{}", self.addr)
    }

    fn io(&self, doing: &'static str) -> impl FnOnce(std::io::Error) -> BarrierError + '_ {
        move |source| BarrierError::Io {
            barrier: self.name(),
            doing,
            source,
        }
    }

    fn refused(&self, why: impl Into<String>) -> BarrierError {
        BarrierError::Refused {
            barrier: self.name(),
            why: why.into(),
        }
    }

    /// Shard 0: answers the others on its own thread until every one has heard the start
    /// (or a while after it), and waits for them here.
    fn serve(&self) -> Result<BarrierStart, BarrierError> {
        let listener = TcpListener::bind(self.bind_addr()?).map_err(self.io("cannot listen"))?;
        listener
            .set_nonblocking(true)
            .map_err(self.io("cannot listen"))?;
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        shared.0.lock().unwrap().ready.insert(0);
        if self.count == 1 {
            shared.0.lock().unwrap().start_unix_ms = Some(start_after_lead());
        }
        let deadline = Instant::now() + self.timeout;
        {
            let (barrier, shared) = (self.clone(), shared.clone());
            std::thread::Builder::new()
                .name("kiln-barrier".into())
                .spawn(move || barrier.answer_until_told(listener, &shared, deadline))
                .map_err(self.io("cannot start a thread"))?;
        }
        let (lock, ready) = &*shared;
        let mut state = lock.lock().unwrap();
        while state.start_unix_ms.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.not_ready(&state.ready));
            }
            state = ready.wait_timeout(state, left).unwrap().0;
        }
        let start = state.start_unix_ms.unwrap_or(0);
        Ok(BarrierStart {
            at: UNIX_EPOCH + Duration::from_millis(start),
            offset_ms: 0.0,
            rtt_ms: 0.0,
        })
    }

    /// An IP address is listened on as given (127.0.0.1 stays on loopback); a name that
    /// resolves to loopback only (`localhost`) is listened on at loopback; another name (a
    /// Kubernetes Service) is this machine's, so every interface is, said on stderr. Port 0
    /// is refused: the others could not know the port.
    pub fn bind_addr(&self) -> Result<SocketAddr, BarrierError> {
        let port = self
            .addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .ok_or_else(|| self.refused("no port (http://HOST:PORT)"))?;
        if port == 0 {
            return Err(self.refused("port 0 would listen on a port the other shards cannot know"));
        }
        let addr = match self.addr.parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => {
                let resolved: Vec<SocketAddr> = self
                    .addr
                    .to_socket_addrs()
                    .map(Iterator::collect)
                    .unwrap_or_default();
                if !resolved.is_empty() && resolved.iter().all(|a| a.ip().is_loopback()) {
                    SocketAddr::from(([127, 0, 0, 1], port))
                } else {
                    SocketAddr::from(([0, 0, 0, 0], port))
                }
            }
        };
        if addr.ip().is_unspecified() {
            eprintln!(
                "kiln: the barrier listens on every interface at port {port}{}",
                if self.token.is_some() {
                    ""
                } else {
                    " without a token: anyone who reaches it can say a shard is ready \
                     (give every shard --barrier-token or KILN_BARRIER_TOKEN)"
                }
            );
        }
        Ok(addr)
    }

    fn answer_until_told(
        &self,
        listener: TcpListener,
        shared: &(Mutex<State>, Condvar),
        deadline: Instant,
    ) {
        loop {
            {
                let mut state = shared.0.lock().unwrap();
                if state.start_unix_ms.is_some()
                    && state.told.len() + 1 >= self.count as usize
                    && state.all_told_at.is_none()
                {
                    state.all_told_at = Some(Instant::now());
                }
                let extra_asks_answered = state
                    .all_told_at
                    .is_some_and(|t| t.elapsed() >= EXTRA_ASK_WINDOW);
                let after_start = state.start_unix_ms.is_some_and(|s| {
                    unix_us(SystemTime::now()) / 1000 > s + SERVE_AFTER_START.as_millis() as u64
                });
                if extra_asks_answered || after_start {
                    return;
                }
                if state.start_unix_ms.is_none() && Instant::now() >= deadline {
                    return;
                }
            }
            // woken by a connection at once: a request left waiting to be accepted would
            // make the way there slower than the way back, and the offset measured wrong
            if !readable_within(&listener, Duration::from_millis(50)) {
                continue;
            }
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = self.answer(stream, shared);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// One request: `GET /ready?shard=I&of=N&plan=P` says shard I is ready; `GET /` only
    /// asks. Either way the answer is the barrier's state and shard 0's clock.
    fn answer(
        &self,
        mut stream: TcpStream,
        shared: &(Mutex<State>, Condvar),
    ) -> std::io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let request = read_request(&mut stream, Instant::now() + REQUEST_DEADLINE)?;
        let (status, body) = match request {
            None => (400, "not an HTTP request".to_string()),
            Some(request) if !self.token_matches(request.token.as_deref()) => {
                (401, "this barrier asks for the shards' token".to_string())
            }
            Some(request) => self.respond_to(&request.path, shared),
        };
        let reason = match status {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            404 => "Not Found",
            _ => "Conflict",
        };
        let kind = if status == 200 {
            "application/json"
        } else {
            "text/plain"
        };
        write!(
            stream,
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )?;
        stream.flush()
    }

    /// Whether a request's token is the barrier's (compared in constant time: a guess learns
    /// nothing from how long the refusal took).
    fn token_matches(&self, given: Option<&str>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let given = given.unwrap_or("").as_bytes();
        given.len() == token.len()
            && given
                .iter()
                .zip(token.as_bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    fn respond_to(&self, path: &str, shared: &(Mutex<State>, Condvar)) -> (u16, String) {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        let (lock, ready) = shared;
        let mut state = lock.lock().unwrap();
        match route {
            "/" => {}
            "/ready" => {
                let field = |name: &str| {
                    query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                        .unwrap_or("")
                };
                let (Ok(shard), Ok(of)) =
                    (field("shard").parse::<u32>(), field("of").parse::<u32>())
                else {
                    return (400, "shard= and of= are numbers".into());
                };
                if of != self.count || shard >= of {
                    return (
                        409,
                        format!(
                            "this barrier is for {} shards; shard {shard} of {of} asked",
                            self.count
                        ),
                    );
                }
                if field("plan") != self.plan {
                    return (409, format!("shard {shard} runs another plan than shard 0"));
                }
                state.ready.insert(shard);
                if state.ready.len() == self.count as usize && state.start_unix_ms.is_none() {
                    state.start_unix_ms = Some(start_after_lead());
                    ready.notify_all();
                }
                if state.start_unix_ms.is_some() {
                    state.told.insert(shard);
                }
            }
            _ => return (404, "GET /ready?shard=I&of=N&plan=P or GET /".into()),
        }
        let answer = Answer {
            now_unix_us: unix_us(SystemTime::now()),
            ready: state.ready.iter().copied().collect(),
            of: self.count,
            start_unix_ms: state.start_unix_ms,
        };
        (200, serde_json::to_string(&answer).unwrap_or_default())
    }

    /// Shards 1..N: ask shard 0 until it gives the start, measuring the clocks' offset on
    /// each answer; shard 0 not listening yet is waited for, a refusal ends the wait.
    fn ask(&self) -> Result<BarrierStart, BarrierError> {
        let deadline = Instant::now() + self.timeout;
        // (round trip, offset) of the quickest exchange so far, in µs
        let mut best: Option<(i64, i64)> = None;
        let mut last_seen: Option<Answer> = None;
        let mut unreachable = String::new();
        loop {
            match self.ask_once() {
                Ok((answer, rtt, offset)) => {
                    if best.is_none_or(|(r, _)| rtt < r) {
                        best = Some((rtt, offset));
                    }
                    if let Some(start) = answer.start_unix_ms {
                        // a forged answer (the year 3000, 2^64-1) must not keep this shard
                        // waiting or overflow: the start is near shard 0's own clock
                        let near = self.timeout.as_millis() as u64 + HTTP_LEAD.as_millis() as u64;
                        let now_ms = answer.now_unix_us / 1000;
                        if start.abs_diff(now_ms) > near || now_ms > i64::MAX as u64 / 1000 {
                            return Err(self.refused(format!(
                                "a start {start} ms is not near shard 0's clock ({now_ms} ms)"
                            )));
                        }
                        for _ in 0..EXTRA_ASKS {
                            std::thread::sleep(Duration::from_millis(20));
                            if let Ok((_, rtt, offset)) = self.ask_once() {
                                if best.is_none_or(|(r, _)| rtt < r) {
                                    best = Some((rtt, offset));
                                }
                            }
                        }
                        let (rtt, offset) = best.unwrap_or((0, 0));
                        let local_us = (start as i64 * 1000 - offset).max(0) as u64;
                        let local_now_ms = unix_us(SystemTime::now()) / 1000;
                        if (local_us / 1000).abs_diff(local_now_ms) > near {
                            return Err(self.refused(format!(
                                "the start read on this clock is {} s away",
                                (local_us / 1000).abs_diff(local_now_ms) / 1000
                            )));
                        }
                        return Ok(BarrierStart {
                            at: UNIX_EPOCH + Duration::from_micros(local_us),
                            offset_ms: offset as f64 / 1000.0,
                            rtt_ms: rtt as f64 / 1000.0,
                        });
                    }
                    last_seen = Some(answer);
                }
                Err(AnswerError::Refused(why)) => return Err(self.refused(why)),
                Err(AnswerError::Unreachable(why)) => unreachable = why,
            }
            if Instant::now() >= deadline {
                return Err(match last_seen {
                    Some(answer) => self.not_ready(&answer.ready.into_iter().collect()),
                    None => BarrierError::NoAnswer {
                        barrier: self.name(),
                        timeout: self.timeout,
                        why: unreachable,
                    },
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// One exchange: the answer, the round trip and shard 0's clock minus this one's (µs).
    fn ask_once(&self) -> Result<(Answer, i64, i64), AnswerError> {
        let addr = self
            .addr
            .to_socket_addrs()
            .map_err(|e| AnswerError::Unreachable(e.to_string()))?
            .next()
            .ok_or_else(|| AnswerError::Unreachable("no address".into()))?;
        let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .map_err(|e| AnswerError::Unreachable(e.to_string()))?;
        let io = |e: std::io::Error| AnswerError::Unreachable(e.to_string());
        stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let authorization = self
            .token
            .as_ref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET /ready?shard={}&of={}&plan={} HTTP/1.1\r\nHost: {}\r\n{authorization}\
             Connection: close\r\n\r\n",
            self.index, self.count, self.plan, self.addr
        );
        let sent = SystemTime::now();
        stream.write_all(request.as_bytes()).map_err(io)?;
        let mut raw = Vec::new();
        stream.take(64 * 1024).read_to_end(&mut raw).map_err(io)?;
        let received = SystemTime::now();
        let answer = parse_answer(&raw)?;
        let (t0, t1) = (unix_us(sent) as i64, unix_us(received) as i64);
        let offset = answer.now_unix_us as i64 - (t0 + t1) / 2;
        Ok((answer, t1 - t0, offset))
    }

    fn not_ready(&self, ready: &BTreeSet<u32>) -> BarrierError {
        BarrierError::NotReady {
            barrier: self.name(),
            waiting: (0..self.count).filter(|i| !ready.contains(i)).collect(),
            count: self.count,
            timeout: self.timeout,
        }
    }
}

/// Why an answer from the barrier's address is not shard 0's start.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// Shard 0 answered no: another plan, another N, or not a barrier.
    #[error("{0}")]
    Refused(String),
    /// Not listening (yet), or the exchange broke: asked again.
    #[error("{0}")]
    Unreachable(String),
}

/// Whether a connection waits to be accepted, waiting up to `timeout` for one.
fn readable_within(listener: &TcpListener, timeout: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call; the listener outlives it
    let n = unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as libc::c_int) };
    n > 0 && fd.revents & libc::POLLIN != 0
}

fn start_after_lead() -> u64 {
    unix_us(SystemTime::now() + HTTP_LEAD).div_ceil(1000)
}

/// What shard 0 reads of a request.
#[derive(Debug)]
pub struct Request {
    path: String,
    /// The `Authorization: Bearer` token, if one was sent.
    token: Option<String>,
}

/// The request line's path and token, once the headers are in (None if it is not HTTP or
/// did not arrive whole by `deadline`).
fn read_request(stream: &mut TcpStream, deadline: Instant) -> std::io::Result<Option<Request>> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(None);
        }
        raw.extend_from_slice(&chunk[..n]);
        match parse_request(&raw) {
            RequestRead::Whole(request) => return Ok(request),
            RequestRead::Partial => {}
            RequestRead::Bad => return Ok(None),
        }
    }
}

/// What the bytes of a barrier request read so far make.
#[derive(Debug)]
pub enum RequestRead {
    /// The head is in: its path and token (None: a request line without a path).
    Whole(Option<Request>),
    /// More bytes are needed (a head of up to 8 KiB is waited for).
    Partial,
    /// Not HTTP, or a head too long.
    Bad,
}

/// Reads a barrier request's head: the request line's path and the bearer token. Bytes from a
/// stranger (public for the fuzz target).
pub fn parse_request(raw: &[u8]) -> RequestRead {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(raw) {
        Ok(httparse::Status::Complete(_)) => {
            let token = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("authorization"))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_string);
            RequestRead::Whole(request.path.map(|path| Request {
                path: path.to_string(),
                token,
            }))
        }
        Ok(httparse::Status::Partial) if raw.len() < 8 * 1024 => RequestRead::Partial,
        _ => RequestRead::Bad,
    }
}

/// Reads shard 0's answer to a shard: its status and JSON body (bytes from whoever listens
/// at the barrier's address; public for the fuzz target). Err says why it is not one.
pub fn parse_answer(raw: &[u8]) -> Result<Answer, AnswerError> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut headers);
    let body_at = match response.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err(AnswerError::Unreachable("an incomplete answer".into())),
    };
    let body = String::from_utf8_lossy(&raw[body_at..]).into_owned();
    match response.code {
        Some(200) => {}
        Some(400 | 401 | 404 | 409) => return Err(AnswerError::Refused(body)),
        other => return Err(AnswerError::Unreachable(format!("status {other:?}"))),
    }
    serde_json::from_str(&body)
        .map_err(|e| AnswerError::Refused(format!("an answer kiln cannot read: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn barrier(port: u16, index: u32, count: u32, plan: &str, timeout_ms: u64) -> HttpBarrier {
        HttpBarrier {
            addr: format!("127.0.0.1:{port}"),
            index,
            count,
            plan: plan.into(),
            timeout: Duration::from_millis(timeout_ms),
            token: None,
        }
    }

    /// Two shards' starts on one clock lie within 5 ms of each other.
    fn assert_started_together(one: &BarrierStart, zero: &BarrierStart) {
        let apart = match one.at.duration_since(zero.at) {
            Ok(d) => d,
            Err(e) => e.duration(),
        };
        assert!(apart < Duration::from_millis(5), "{one:?} {zero:?}");
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Three shards, shard 0 last to come: all get one start, a lead after the last one was
    /// ready; the others measured an offset near zero (one clock) over a short round trip.
    #[test]
    fn shards_ready_at_different_times_start_together() {
        let port = free_port();
        let before = SystemTime::now();
        let handles: Vec<_> = [2u32, 1, 0]
            .into_iter()
            .enumerate()
            .map(|(k, i)| {
                let b = barrier(port, i, 3, "p1", 10_000);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(300 * k as u64));
                    (i, b.wait().unwrap())
                })
            })
            .collect();
        let starts: Vec<(u32, BarrierStart)> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let zero = starts.iter().find(|(i, _)| *i == 0).unwrap().1;
        let lead = zero.at.duration_since(before).unwrap();
        // shard 0 came 600 ms in, the last
        assert!(lead >= HTTP_LEAD + Duration::from_millis(600), "{lead:?}");
        assert!(lead < HTTP_LEAD + Duration::from_secs(3), "{lead:?}");
        for (i, s) in &starts {
            // one clock: the start read on it differs by the offset measured, under a ms
            let apart = match s.at.duration_since(zero.at) {
                Ok(d) => d,
                Err(e) => e.duration(),
            };
            assert!(
                apart < Duration::from_millis(5),
                "shard {i}: {s:?} vs {zero:?}"
            );
            assert!(
                s.offset_ms.abs() <= s.rtt_ms / 2.0 + 1.0,
                "shard {i}: {s:?}"
            );
        }
    }

    /// A shard of another plan or another N is refused with why; a missing shard is named
    /// after the timeout, by shard 0 and by a shard that asks.
    #[test]
    fn other_plans_are_refused_and_missing_shards_named() {
        let port = free_port();
        let zero = std::thread::spawn(move || barrier(port, 0, 3, "p1", 1500).wait());
        std::thread::sleep(Duration::from_millis(200));
        let other = barrier(port, 1, 3, "p2", 1000).wait().unwrap_err();
        assert!(other.to_string().contains("another plan"), "{other}");
        let more = barrier(port, 1, 4, "p1", 1000).wait().unwrap_err();
        assert!(
            (more.to_string()).contains("this barrier is for 3 shards"),
            "{more}"
        );
        let asked = barrier(port, 1, 3, "p1", 600).wait().unwrap_err();
        assert!(
            matches!(&asked, BarrierError::NotReady { waiting, .. } if waiting == &[2]),
            "{asked}"
        );
        let served = zero.join().unwrap().unwrap_err();
        assert!(
            (served.to_string()).contains("shards 2 of 3 were not ready"),
            "{served}"
        );
        // no shard 0 at all
        let alone = barrier(free_port(), 2, 3, "p1", 300).wait().unwrap_err();
        assert!(matches!(alone, BarrierError::NoAnswer { .. }), "{alone}");
    }

    /// What is not a barrier request gets an error status, and shard 0 goes on.
    #[test]
    fn garbage_is_answered_and_the_barrier_goes_on() {
        let port = free_port();
        let zero = std::thread::spawn(move || barrier(port, 0, 2, "p", 5000).wait());
        std::thread::sleep(Duration::from_millis(200));
        for junk in [
            &b"\x00\x01 not http\r\n\r\n"[..],
            b"GET /nope HTTP/1.1\r\n\r\n",
            b"",
        ] {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(junk).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            assert!(
                answer.is_empty() || !answer.starts_with("HTTP/1.1 200"),
                "{answer}"
            );
        }
        let one = barrier(port, 1, 2, "p", 5000).wait().unwrap();
        let zero = zero.join().unwrap().unwrap();
        assert_started_together(&one, &zero);
    }

    /// With a token, a forged `ready` without it is refused (it once started shard 0 alone)
    /// and the shards that have it start together.
    #[test]
    fn a_request_without_the_token_is_refused() {
        let port = free_port();
        let with_token = |i: u32| HttpBarrier {
            token: Some("s3cret".into()),
            ..barrier(port, i, 2, "p", 5000)
        };
        let zero = {
            let b = with_token(0);
            std::thread::spawn(move || b.wait())
        };
        std::thread::sleep(Duration::from_millis(200));
        let forged = barrier(port, 1, 2, "p", 1000).wait().unwrap_err();
        assert!(
            (forged.to_string()).contains("asks for the shards' token"),
            "{forged}"
        );
        let wrong = HttpBarrier {
            token: Some("s3creT".into()),
            ..barrier(port, 1, 2, "p", 1000)
        };
        assert!(wrong.wait().is_err());
        let one = with_token(1).wait().unwrap();
        let zero = zero.join().unwrap().unwrap();
        assert_started_together(&one, &zero);
    }

    /// A client sending a byte a second held shard 0 for every read's timeout and failed both
    /// shards; now its request is dropped at the deadline and the shards start.
    #[test]
    fn a_slow_client_does_not_hold_the_barrier() {
        let port = free_port();
        let zero = std::thread::spawn(move || barrier(port, 0, 2, "p", 6000).wait());
        std::thread::sleep(Duration::from_millis(200));
        let slow = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            for byte in b"GET /ready?shard=1&of=2" {
                if s.write_all(&[*byte]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let one = barrier(port, 1, 2, "p", 6000).wait().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let zero = zero.join().unwrap().unwrap();
        assert_started_together(&one, &zero);
        slow.join().unwrap();
    }

    /// A "shard 0" that answers a start in the year 3000 (or 2^64-1 ms) is not believed.
    #[test]
    fn a_forged_start_is_refused() {
        for start in [32_503_680_000_000u64, u64::MAX] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let fake = std::thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let body = format!(
                    r#"{{"now_unix_us":{},"ready":[0,1],"of":2,"start_unix_ms":{start}}}"#,
                    unix_us(SystemTime::now())
                );
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
            let refused = barrier(port, 1, 2, "p", 1000).wait().unwrap_err();
            assert!(
                (refused.to_string()).contains("is not near shard 0's clock"),
                "{refused}"
            );
            fake.join().unwrap();
        }
    }

    /// `localhost` is listened on at loopback, not every interface; port 0 is refused.
    #[test]
    fn a_loopback_name_stays_on_loopback() {
        let b = HttpBarrier {
            addr: "localhost:4567".into(),
            ..barrier(0, 0, 2, "p", 100)
        };
        assert_eq!(
            b.bind_addr().unwrap(),
            SocketAddr::from(([127, 0, 0, 1], 4567))
        );
        let zero = HttpBarrier {
            addr: "127.0.0.1:0".into(),
            ..barrier(0, 0, 2, "p", 100)
        };
        assert!(zero.bind_addr().unwrap_err().to_string().contains("port 0"));
    }
}
