//! A small shop API with a login, for the plans' tests: it issues a token and a session
//! cookie at login, checks them on later requests, and counts what it saw per route and per
//! user, so a plan's figures (requests per name, rows used per user, correlation failures)
//! can be checked against the server's own.
//!
//! Routes:
//! - `POST /login` with `{"user": U, "password": P}` (or the same as a URL-encoded form):
//!   200 `{"token": T, "user": U}` and `Set-Cookie: sid=...` when P is the password, else 401;
//! - `GET /orders/{id}` with `Authorization: Bearer T`: 200 `{"order": id, "user": U}`,
//!   401 for a token it did not issue;
//! - `GET /cart` with the session cookie: 200 `{"items": 3}`, 401 without it;
//! - `GET /health`: 200 `ok`; anything else 404.
//!
//! A request with an `x-vu` header is also counted under that VU, with the time it was
//! first seen, so a ramp's VUs can be checked against when they were due.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::read_request;

#[derive(Default)]
struct State {
    /// token -> user
    tokens: HashMap<String, String>,
    sessions: HashMap<String, String>,
    /// route ("POST /login", "GET /orders", ...) -> requests
    routes: BTreeMap<String, u64>,
    /// user -> logins
    logins: BTreeMap<String, u64>,
    token_failures: u64,
    cookie_failures: u64,
    bad_logins: u64,
    vus: BTreeMap<String, VuSeen>,
}

/// One VU's requests as the server saw them (by its `x-vu` header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VuSeen {
    pub first: Instant,
    pub last: Instant,
    pub requests: u64,
}

pub struct ShopApi {
    addr: SocketAddr,
    password: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
    acceptor: Option<thread::JoinHandle<()>>,
}

/// What the server saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShopCounts {
    pub routes: BTreeMap<String, u64>,
    pub logins: BTreeMap<String, u64>,
    pub token_failures: u64,
    pub cookie_failures: u64,
    pub bad_logins: u64,
}

impl ShopApi {
    /// Starts on a free loopback port; `password` is every user's.
    pub fn start(password: &str) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(1));
        let server = Server {
            password: password.to_string(),
            state: state.clone(),
            stop: stop.clone(),
            next: next.clone(),
        };
        let acceptor = thread::Builder::new()
            .name("shop-api-accept".into())
            .spawn(move || {
                let server = Arc::new(server);
                for stream in listener.incoming() {
                    if server.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let server = server.clone();
                    let _ = thread::Builder::new()
                        .name("shop-api-conn".into())
                        .stack_size(128 * 1024)
                        .spawn(move || {
                            let _ = stream.set_nodelay(true);
                            let _ = server.serve(stream);
                        });
                }
            })?;
        Ok(Self {
            addr,
            password: password.to_string(),
            state,
            stop,
            next,
            acceptor: Some(acceptor),
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    pub fn counts(&self) -> ShopCounts {
        let s = self.state.lock().map(|s| ShopCounts {
            routes: s.routes.clone(),
            logins: s.logins.clone(),
            token_failures: s.token_failures,
            cookie_failures: s.cookie_failures,
            bad_logins: s.bad_logins,
        });
        s.unwrap_or_default()
    }

    /// Requests per `x-vu` header value.
    pub fn vus(&self) -> BTreeMap<String, VuSeen> {
        self.state.lock().map(|s| s.vus.clone()).unwrap_or_default()
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> u64 {
        self.next.load(Ordering::SeqCst) - 1
    }
}

impl Drop for ShopApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(handle) = self.acceptor.take() {
            let _ = handle.join();
        }
    }
}

struct Server {
    password: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
}

impl Server {
    fn serve(&self, mut stream: TcpStream) -> io::Result<()> {
        let mut buf = vec![0u8; 16 * 1024];
        let mut filled = 0;
        while let Some(req) = read_request(&mut stream, &mut buf, &mut filled, &self.stop)? {
            let (status, headers, body) = self.answer(&req);
            let mut out = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                if status == 200 { "OK" } else { "Error" },
                body.len()
            );
            for h in headers {
                out.push_str(&h);
                out.push_str("\r\n");
            }
            out.push_str("\r\n");
            out.push_str(&body);
            stream.write_all(out.as_bytes())?;
            if req.close {
                break;
            }
        }
        Ok(())
    }

    fn answer(&self, req: &crate::Request) -> (u16, Vec<String>, String) {
        let Ok(mut s) = self.state.lock() else {
            return (500, vec![], "{}".into());
        };
        let path = req.path.split('?').next().unwrap_or("");
        let route = match path.split('/').nth(1) {
            Some(first) => format!("{} /{first}", req.method),
            None => format!("{} /", req.method),
        };
        *s.routes.entry(route.clone()).or_default() += 1;
        if let Some(vu) = req.header("x-vu") {
            let now = Instant::now();
            let seen = s.vus.entry(vu.to_string()).or_insert(VuSeen {
                first: now,
                last: now,
                requests: 0,
            });
            seen.last = now;
            seen.requests += 1;
        }
        match route.as_str() {
            "POST /login" => {
                let (user, password) = login_fields(req);
                if user.is_empty() || password != self.password {
                    s.bad_logins += 1;
                    return (401, vec![], r#"{"error":"bad login"}"#.into());
                }
                let n = self.next.fetch_add(1, Ordering::SeqCst);
                let token = format!("tok-{n}-{}", n.wrapping_mul(0x9E37_79B9) % 1_000_003);
                let sid = format!("s{n}");
                s.tokens.insert(token.clone(), user.clone());
                s.sessions.insert(sid.clone(), user.clone());
                *s.logins.entry(user.clone()).or_default() += 1;
                let body = serde_json::json!({"token": token, "user": user}).to_string();
                (
                    200,
                    vec![format!("set-cookie: sid={sid}; Path=/; HttpOnly")],
                    body,
                )
            }
            "GET /orders" => {
                let token = req
                    .header("authorization")
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or("");
                match s.tokens.get(token).cloned() {
                    Some(user) => {
                        let id = path.rsplit('/').next().unwrap_or("");
                        let body = serde_json::json!({"order": id, "user": user}).to_string();
                        (200, vec![], body)
                    }
                    None => {
                        s.token_failures += 1;
                        (401, vec![], r#"{"error":"bad token"}"#.into())
                    }
                }
            }
            "GET /cart" => {
                let sid = req
                    .header("cookie")
                    .and_then(|c| {
                        c.split(';')
                            .filter_map(|kv| kv.trim().split_once('='))
                            .find(|(k, _)| *k == "sid")
                            .map(|(_, v)| v.to_string())
                    })
                    .unwrap_or_default();
                if s.sessions.contains_key(&sid) {
                    (200, vec![], r#"{"items":3}"#.into())
                } else {
                    s.cookie_failures += 1;
                    (401, vec![], r#"{"error":"no session"}"#.into())
                }
            }
            "GET /health" => (200, vec![], r#""ok""#.into()),
            _ => (404, vec![], r#"{"error":"not found"}"#.into()),
        }
    }
}

/// A login's user and password, from a JSON body or a URL-encoded form.
fn login_fields(req: &crate::Request) -> (String, String) {
    let form = req
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    if form {
        let mut fields: HashMap<String, String> =
            form_urlencoded::parse(&req.body).into_owned().collect();
        let user = fields.remove("user").unwrap_or_default();
        (user, fields.remove("password").unwrap_or_default())
    } else {
        let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let field = |k: &str| body[k].as_str().unwrap_or("").to_string();
        (field("user"), field("password"))
    }
}
