//! The target's own OpenTelemetry traces, for the demo: every traced request reports a
//! server span and the database calls a typical ORM page makes -- one query for an order's
//! lines, then one query per line for its product (an N+1 of `items` calls from the loop in
//! `load_products`). The calls are simulated (their intervals are laid out inside the
//! request's service time; no database runs), so their count, SQL and call site are known
//! exactly. Spans go to an OTLP/HTTP endpoint as JSON, batched every 200 ms like an SDK's
//! batch processor.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where and how often the target reports traces.
#[derive(Clone, Debug)]
pub struct Traces {
    /// The OTLP/HTTP receiver (`POST /v1/traces`).
    pub endpoint: SocketAddr,
    /// Trace one request in this many (a head sampler's ratio).
    pub every: u64,
    /// Product queries per traced request: the N of the N+1.
    pub items: usize,
}

/// Where the simulated queries come from, as a stack would show them.
pub const LIST_QUERY: &str = "SELECT product_id, qty FROM order_lines WHERE order_id = $1";
pub const ITEM_QUERY_PREFIX: &str = "SELECT name, price FROM products WHERE id = ";

struct Frame {
    function: &'static str,
    line: u32,
}

const HANDLER: Frame = Frame {
    function: "kiln_targets::traced::show_order",
    line: line!(),
};
const LOOP: Frame = Frame {
    function: "kiln_targets::traced::load_products",
    line: line!(),
};

/// The line of the N+1 loop as the spans report it (`file:line`).
pub fn loop_site() -> String {
    format!("{}:{}", file!(), LOOP.line)
}

fn stack(frames: &[&Frame]) -> String {
    // leaf first, as Java and Node print them
    let mut out = String::new();
    for f in frames.iter().rev() {
        let _ = write!(out, "\\tat {}({}:{})\\n", f.function, file!(), f.line);
    }
    out
}

pub(crate) struct Exporter {
    config: Traces,
    pending: Mutex<Vec<String>>,
    stop: AtomicBool,
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// One span of a trace, written as OTLP/JSON.
struct SpanJson<'a> {
    id: u64,
    parent: Option<u64>,
    name: &'a str,
    kind: u8,
    start: u128,
    end: u128,
}

fn span(out: &mut String, trace: u128, s: SpanJson<'_>, attrs: &str) {
    let SpanJson {
        id,
        parent,
        name,
        kind,
        start,
        end,
    } = s;
    let parent = parent.map(|p| format!("{p:016x}")).unwrap_or_default();
    let _ = write!(
        out,
        r#"{{"traceId":"{trace:032x}","spanId":"{id:016x}","parentSpanId":"{parent}","name":"{name}","kind":{kind},"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{attrs}]}},"#
    );
}

fn attr(key: &str, value: &str) -> String {
    format!(r#"{{"key":"{key}","value":{{"stringValue":"{value}"}}}}"#)
}

impl Exporter {
    pub(crate) fn start(config: Traces) -> Arc<Self> {
        let exporter = Arc::new(Self {
            config,
            pending: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let worker = exporter.clone();
        let _ = thread::Builder::new()
            .name("target-otlp".into())
            .spawn(move || {
                while !worker.stop.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(200));
                    worker.flush();
                }
                worker.flush();
            });
        exporter
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.flush();
    }

    /// Records request `nth` (when sampled), which took `service` from now.
    pub(crate) fn request(&self, nth: u64, service: Duration) {
        let every = self.config.every.max(1);
        if !nth.is_multiple_of(every) {
            return;
        }
        let start = unix_ns();
        let end = start + service.as_nanos();
        let items = self.config.items as u128;
        // the request's time: 1 list query and `items` product queries in its middle half
        let slot = (end - start) / 2 / (items + 1).max(1);
        let trace = (u128::from(nth) << 64) | 0x6b696c6e;
        let root = nth << 8 | 1;
        let mut spans = String::new();
        span(
            &mut spans,
            trace,
            SpanJson {
                id: root,
                parent: None,
                name: "GET /orders/{id}",
                kind: 2,
                start,
                end,
            },
            &[
                attr("http.request.method", "GET"),
                attr("http.route", "/orders/{id}"),
            ]
            .join(","),
        );
        let db = |sql: &str, frames: &[&Frame]| {
            [
                attr("db.system.name", "postgresql"),
                attr("db.query.text", sql),
                attr("code.stacktrace", &stack(frames)),
            ]
            .join(",")
        };
        let t0 = start + (end - start) / 4;
        span(
            &mut spans,
            trace,
            SpanJson {
                id: root + 1,
                parent: Some(root),
                name: "SELECT order_lines",
                kind: 3,
                start: t0,
                end: t0 + slot * 9 / 10,
            },
            &db(&LIST_QUERY.replace("$1", &nth.to_string()), &[&HANDLER]),
        );
        for i in 0..items {
            let s = t0 + slot * (i + 1);
            let sql = format!(
                "{ITEM_QUERY_PREFIX}{}",
                (u128::from(nth) * 31 + i * 7) % 1000
            );
            span(
                &mut spans,
                trace,
                SpanJson {
                    id: root + 2 + i as u64,
                    parent: Some(root),
                    name: "SELECT products",
                    kind: 3,
                    start: s,
                    end: s + slot * 9 / 10,
                },
                &db(&sql, &[&HANDLER, &LOOP]),
            );
        }
        spans.pop();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.push(spans);
    }

    pub(crate) fn flush(&self) {
        let batch: Vec<String> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        if batch.is_empty() {
            return;
        }
        let body = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{}]}},"scopeSpans":[{{"scope":{{"name":"kiln-targets"}},"spans":[{}]}}]}}]}}"#,
            [
                attr("service.name", "demo-shop"),
                attr("telemetry.sdk.language", "rust")
            ]
            .join(","),
            batch.join(",")
        );
        // a lost batch is lost, as with an SDK whose collector is away
        let _ = post(self.config.endpoint, &body);
    }
}

fn post(endpoint: SocketAddr, body: &str) -> std::io::Result<()> {
    let mut stream = TcpStream::connect_timeout(&endpoint, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "POST /v1/traces HTTP/1.1\r\nHost: {endpoint}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    Ok(())
}
