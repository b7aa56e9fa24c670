//! Spans as kiln keeps them after ingest: ids, times and the handful of attributes the
//! analysis reads, whatever wire format (OTLP/JSON, OTLP/protobuf) and whichever generation
//! of the semantic conventions (stable `db.query.text` or legacy `db.statement`) they came in.

use foldhash::HashMap;
use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

/// Longest query text kept; SDKs cut long statements themselves, this bounds a hostile file.
pub const MAX_QUERY_TEXT: usize = 64 * 1024;
/// Longest stack kept per span (a Java stack is ~1.6 KB; 200 frames of Python ~20 KB).
pub const MAX_STACK_TEXT: usize = 256 * 1024;
/// Longest other attribute value kept (routes, names, paths).
pub const MAX_SHORT_TEXT: usize = 4 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    Unspecified,
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl SpanKind {
    pub fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Internal,
            2 => Self::Server,
            3 => Self::Client,
            4 => Self::Producer,
            5 => Self::Consumer,
            _ => Self::Unspecified,
        }
    }

    /// The protobuf-JSON enum name some exporters write instead of the number.
    pub fn from_name(name: &str) -> Self {
        let name = name.strip_prefix("SPAN_KIND_").unwrap_or(name);
        match name.to_ascii_uppercase().as_str() {
            "INTERNAL" => Self::Internal,
            "SERVER" => Self::Server,
            "CLIENT" => Self::Client,
            "PRODUCER" => Self::Producer,
            "CONSUMER" => Self::Consumer,
            _ => Self::Unspecified,
        }
    }
}

/// An attribute value as OTLP's AnyValue carries it; strings borrowed from the JSON text
/// when they can be (most keys and values are never kept).
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Double(f64),
    Bool(bool),
    Array(Vec<AttrValue<'a>>),
    /// kvlist or bytes: nothing kiln reads.
    Other,
}

impl AttrValue<'_> {
    fn into_text(self) -> Option<String> {
        match self {
            AttrValue::Str(s) => Some(s.into_owned()),
            AttrValue::Int(i) => Some(i.to_string()),
            AttrValue::Double(d) => Some(d.to_string()),
            AttrValue::Bool(b) => Some(b.to_string()),
            // a stack as an array of frame strings
            AttrValue::Array(items) => Some(
                items
                    .into_iter()
                    .filter_map(AttrValue::into_text)
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            AttrValue::Other => None,
        }
    }

    fn as_int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i),
            AttrValue::Double(d) if d.is_finite() => Some(*d as i64),
            AttrValue::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

/// Where the service runs and in what language (which picks the stack-frame parser).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Resource {
    pub service: String,
    pub language: Option<String>,
}

/// A database call's attributes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DbAttrs {
    pub system: String,
    pub text: Option<String>,
    pub text_truncated: bool,
    pub summary: Option<String>,
    pub operation: Option<String>,
    pub collection: Option<String>,
    pub namespace: Option<String>,
    pub rows: Option<i64>,
    pub batch_size: Option<i64>,
    /// Hash of the bound parameter values when the instrumentation recorded them
    /// (`db.query.parameter.<key>`, `db.statement.parameters`).
    pub params: Option<u64>,
    /// Shared by every call with the same stack (a loop's calls).
    pub stacktrace: Option<Arc<str>>,
    pub code_function: Option<String>,
    pub code_file: Option<String>,
    pub code_line: Option<i64>,
    pub thread: Option<String>,
}

/// What a request's entry span says about the request.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HttpAttrs {
    pub route: Option<String>,
    pub path: Option<String>,
    pub method: Option<String>,
    pub status: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Span {
    pub trace_id: u128,
    pub span_id: u64,
    pub parent_span_id: Option<u64>,
    pub name: String,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub error: bool,
    /// Index into the ingest's resources.
    pub resource: u32,
    pub scope: Arc<str>,
    pub dropped_attributes: u32,
    pub db: Option<Box<DbAttrs>>,
    pub http: Option<Box<HttpAttrs>>,
    /// A span that is no DB call: the code it names (`code.function.name`, or the legacy
    /// `code.namespace` + `code.function`), e.g. the handler span's controller method.
    pub code_function: Option<Box<str>>,
}

impl Span {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

fn capped(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    (text, true)
}

fn short(value: AttrValue<'_>) -> Option<String> {
    value.into_text().map(|t| capped(t, MAX_SHORT_TEXT).0)
}

/// Attributes of one span, gathered key by key before the span is built.
#[derive(Default)]
pub struct AttrCollector {
    db: DbAttrs,
    has_db_system: bool,
    http: HttpAttrs,
    has_http: bool,
    params: Option<u64>,
    stacktrace: Option<String>,
    /// Legacy `code.namespace` (the class or module), joined to `code.function` at the end
    /// whatever the keys' order.
    code_namespace: Option<String>,
    /// An RPC span's `rpc.service` and `rpc.method`: a gRPC server span's route is
    /// `package.Service/Method` (semantic conventions since 1.37 put it all in `rpc.method`).
    rpc_service: Option<String>,
    rpc_method: Option<String>,
}

impl AttrCollector {
    /// Takes one attribute. The stable key wins over its legacy fallback whatever their
    /// order: a legacy key fills a field only while the field is empty, and a stable key
    /// always overwrites.
    pub fn add(&mut self, key: &str, value: AttrValue<'_>) {
        let db = &mut self.db;
        match key {
            "db.system.name" => {
                db.system = short(value).unwrap_or_default();
                self.has_db_system = true;
            }
            "db.system" => {
                if !self.has_db_system || db.system.is_empty() {
                    db.system = short(value).unwrap_or_default();
                }
                self.has_db_system = true;
            }
            "db.query.text" => set_text(db, value, true),
            "db.statement" => set_text(db, value, false),
            "db.query.summary" => db.summary = short(value),
            "db.operation.name" => db.operation = short(value),
            "db.operation" => fill(&mut db.operation, value),
            "db.collection.name" => db.collection = short(value),
            "db.sql.table" | "db.mongodb.collection" | "db.cassandra.table" => {
                fill(&mut db.collection, value)
            }
            "db.namespace" => db.namespace = short(value),
            "db.name" => fill(&mut db.namespace, value),
            "db.response.returned_rows" => db.rows = value.as_int(),
            "db.operation.batch.size" => db.batch_size = value.as_int(),
            "db.statement.parameters" => {
                self.params = value.into_text().map(|t| xxh3_64(t.as_bytes()))
            }
            "code.stacktrace" => {
                self.stacktrace = value.into_text().map(|t| capped(t, MAX_STACK_TEXT).0);
            }
            "code.function.name" => db.code_function = short(value),
            "code.function" => fill(&mut db.code_function, value),
            // legacy: class/module in code.namespace, method in code.function
            "code.namespace" => self.code_namespace = short(value),
            "code.file.path" => db.code_file = short(value),
            "code.filepath" => fill(&mut db.code_file, value),
            "code.line.number" => db.code_line = value.as_int(),
            "code.lineno" => {
                if db.code_line.is_none() {
                    db.code_line = value.as_int();
                }
            }
            "thread.name" => db.thread = short(value),
            "http.route" => {
                self.http.route = short(value);
                self.has_http = true;
            }
            "url.path" => {
                self.http.path = short(value);
                self.has_http = true;
            }
            "http.target" => {
                // legacy: path and query together
                if self.http.path.is_none() {
                    self.http.path =
                        short(value).map(|t| t.split('?').next().unwrap_or("").to_string());
                }
                self.has_http = true;
            }
            "rpc.service" => self.rpc_service = short(value),
            "rpc.method" => self.rpc_method = short(value),
            "http.request.method" => self.http.method = short(value),
            "http.method" => fill(&mut self.http.method, value),
            "http.response.status_code" => self.http.status = value.as_int(),
            "http.status_code" => {
                if self.http.status.is_none() {
                    self.http.status = value.as_int();
                }
            }
            _ => {
                if let Some(param) = key.strip_prefix("db.query.parameter.") {
                    // order-independent: the sum of each (key, value)'s hash
                    let text = value.into_text().unwrap_or_default();
                    let h = xxh3_64(format!("{param}\u{0}{text}").as_bytes());
                    self.params = Some(self.params.unwrap_or(0).wrapping_add(h));
                }
            }
        }
    }

    /// The span's DB and HTTP attributes, and the code it names when it is no DB call (a
    /// handler span's `Controller.method`); stacks are shared through `stacks`.
    pub fn finish(
        mut self,
        stacks: &mut HashMap<u64, Arc<str>>,
    ) -> (Option<Box<DbAttrs>>, Option<Box<HttpAttrs>>, Option<String>) {
        let mut db = self.db;
        db.params = self.params;
        if let (Some(ns), Some(f)) = (&self.code_namespace, &db.code_function) {
            if !f.contains('.') {
                db.code_function = Some(format!("{ns}.{f}"));
            }
        }
        db.stacktrace = self.stacktrace.map(|text| {
            stacks
                .entry(xxh3_64(text.as_bytes()))
                .or_insert_with(|| Arc::from(text))
                .clone()
        });
        let code = if self.has_db_system {
            None
        } else {
            db.code_function.take()
        };
        let db = self.has_db_system.then(|| Box::new(db));
        if let (None, Some(method)) = (&self.http.route, self.rpc_method) {
            self.http.route = Some(match self.rpc_service {
                Some(service) if !method.contains('/') => format!("{service}/{method}"),
                _ => method,
            });
            self.has_http = true;
        }
        let http = self.has_http.then(|| Box::new(self.http));
        (db, http, code)
    }
}

fn fill(slot: &mut Option<String>, value: AttrValue<'_>) {
    if slot.is_none() {
        *slot = short(value);
    }
}

fn set_text(db: &mut DbAttrs, value: AttrValue<'_>, stable: bool) {
    if !stable && db.text.is_some() {
        return;
    }
    if let Some(text) = value.into_text() {
        let (text, truncated) = capped(text, MAX_QUERY_TEXT);
        db.text = Some(text);
        db.text_truncated = truncated;
    }
}

/// An id from its hex form (what OTLP/JSON specifies, any case) or base64 (what plain
/// protobuf-JSON exporters write). `bytes` is the id's length: 16 for traces, 8 for spans.
pub fn parse_id(text: &str, bytes: usize) -> Option<u128> {
    let text = text.trim();
    if text.len() == bytes * 2 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return u128::from_str_radix(text, 16).ok();
    }
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    id_from_bytes(&decoded, bytes)
}

/// An id from raw bytes (OTLP/protobuf).
pub fn id_from_bytes(raw: &[u8], bytes: usize) -> Option<u128> {
    if raw.len() != bytes {
        return None;
    }
    Some(raw.iter().fold(0u128, |acc, b| (acc << 8) | u128::from(*b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(attrs: &[(&str, &str)]) -> Option<String> {
        let mut c = AttrCollector::default();
        for (k, v) in attrs {
            c.add(k, AttrValue::Str(Cow::Borrowed(v)));
        }
        let (_, http, _) = c.finish(&mut HashMap::default());
        http.and_then(|h| h.route)
    }

    #[test]
    fn an_rpc_server_spans_route_is_its_service_and_method() {
        let old = [
            ("rpc.system", "grpc"),
            ("rpc.service", "shop.v1.Orders"),
            ("rpc.method", "List"),
        ];
        assert_eq!(route(&old).as_deref(), Some("shop.v1.Orders/List"));
        // semantic conventions 1.37 on: the method's full name alone
        let new = [
            ("rpc.system.name", "grpc"),
            ("rpc.method", "shop.v1.Orders/List"),
        ];
        assert_eq!(route(&new).as_deref(), Some("shop.v1.Orders/List"));
        // an HTTP route, where a span has one, is the route
        let both = [("http.route", "/orders"), ("rpc.method", "List")];
        assert_eq!(route(&both).as_deref(), Some("/orders"));
        assert_eq!(route(&[("rpc.service", "shop.v1.Orders")]), None);
    }
}
