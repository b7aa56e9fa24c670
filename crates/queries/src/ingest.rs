//! OTLP ingest: JSON (one `TracesData` document, or JSON lines as the Collector's file
//! exporter writes them, optionally gzipped) and protobuf (`ExportTraceServiceRequest`, what
//! an SDK POSTs to `/v1/traces`). Bad input loses only itself: a line that is not JSON, a
//! span with a wrong type or a bad id is counted and described, and the rest is kept.

use foldhash::HashMap;
pub use kiln_record::schema::queries::Coverage;
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use flate2::read::GzDecoder;
use serde::de::{self, Deserializer, IgnoredAny};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::model::{id_from_bytes, parse_id, AttrCollector, AttrValue, Resource, Span, SpanKind};
use crate::QueryError;

/// A decompressed file or request body larger than this is refused (a gzip bomb).
pub const MAX_DECOMPRESSED: u64 = 4 << 30;
/// The largest JSON document read at once (one line, or one document over many lines): the
/// receiver takes at most 256 MiB inflated per request, and parsing needs several times a
/// document's size, so a file of one endless line cannot take the machine's memory.
pub const MAX_DOCUMENT: usize = 256 << 20;
/// How many problem descriptions are kept; the rest are only counted.
const MAX_PROBLEMS_KEPT: usize = 10;
/// How many spans are kept for the analysis (0.7-1.5 KB each: about half a gigabyte at
/// most); the rest are counted in [`Coverage::spans_not_kept`] and said to be left out. A
/// million spans once took 1.5 GB.
pub const MAX_SPANS_KEPT: usize = 500_000;

/// Spans and their resources, accumulated over files and requests.
#[derive(Debug, Default)]
pub struct Ingest {
    pub resources: Vec<Resource>,
    resource_index: HashMap<(String, Option<String>), u32>,
    pub spans: Vec<Span>,
    pub coverage: Coverage,
    /// Server spans without a parent: one per request a traced service took in (a span
    /// nested under another, as a second instrumentation of the same request makes, is not
    /// one). What the receiver waits for after the load.
    pub server_roots: u64,
    /// Stacks by hash: a loop's calls share one.
    stacks: HashMap<u64, Arc<str>>,
    scopes: HashMap<String, Arc<str>>,
    /// At most this many spans kept (`None`: [`MAX_SPANS_KEPT`]).
    limit: Option<usize>,
}

// ---- OTLP/JSON ----

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TracesDataJson<'a, S> {
    #[serde(default = "Vec::new", borrow)]
    resource_spans: Vec<ResourceSpansJson<'a, S>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpansJson<'a, S> {
    #[serde(default, borrow)]
    resource: Option<ResourceJson<'a>>,
    #[serde(default = "Vec::new", borrow)]
    scope_spans: Vec<ScopeSpansJson<'a, S>>,
    /// The name before OTLP 0.15.
    #[serde(default = "Vec::new", borrow)]
    instrumentation_library_spans: Vec<ScopeSpansJson<'a, S>>,
}

#[derive(Deserialize, Default)]
struct ResourceJson<'a> {
    #[serde(default, borrow)]
    attributes: Vec<KeyValueJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ScopeSpansJson<'a, S> {
    #[serde(default, borrow)]
    scope: Option<ScopeJson<'a>>,
    #[serde(default, borrow)]
    instrumentation_library: Option<ScopeJson<'a>>,
    #[serde(default = "Vec::new")]
    spans: Vec<S>,
}

#[derive(Deserialize, Default)]
struct ScopeJson<'a> {
    #[serde(default, borrow)]
    name: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpanJson<'a> {
    #[serde(default, borrow)]
    trace_id: Cow<'a, str>,
    #[serde(default, borrow)]
    span_id: Cow<'a, str>,
    #[serde(default, borrow)]
    parent_span_id: Cow<'a, str>,
    #[serde(default, borrow)]
    name: Cow<'a, str>,
    #[serde(default, deserialize_with = "kind_code")]
    kind: i64,
    #[serde(default, deserialize_with = "lenient_u64")]
    start_time_unix_nano: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    end_time_unix_nano: u64,
    #[serde(default, borrow)]
    attributes: Vec<KeyValueJson<'a>>,
    #[serde(default, deserialize_with = "lenient_u64")]
    dropped_attributes_count: u64,
    #[serde(default)]
    status: Option<StatusJson>,
}

#[derive(Deserialize)]
struct StatusJson {
    #[serde(default, deserialize_with = "status_code")]
    code: i64,
}

#[derive(Deserialize)]
struct KeyValueJson<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default, borrow)]
    value: Option<AnyValueJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyValueJson<'a> {
    #[serde(default, borrow)]
    string_value: Option<Cow<'a, str>>,
    #[serde(default)]
    bool_value: Option<bool>,
    #[serde(default, deserialize_with = "lenient_i64_opt")]
    int_value: Option<i64>,
    #[serde(default)]
    double_value: Option<f64>,
    #[serde(default, borrow)]
    array_value: Option<ArrayValueJson<'a>>,
    #[serde(default)]
    kvlist_value: Option<IgnoredAny>,
    #[serde(default)]
    bytes_value: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ArrayValueJson<'a> {
    #[serde(default, borrow)]
    values: Vec<AnyValueJson<'a>>,
}

impl<'a> AnyValueJson<'a> {
    fn into_value(self) -> AttrValue<'a> {
        if let Some(s) = self.string_value {
            AttrValue::Str(s)
        } else if let Some(i) = self.int_value {
            AttrValue::Int(i)
        } else if let Some(b) = self.bool_value {
            AttrValue::Bool(b)
        } else if let Some(d) = self.double_value {
            AttrValue::Double(d)
        } else if let Some(a) = self.array_value {
            AttrValue::Array(a.values.into_iter().map(Self::into_value).collect())
        } else {
            let _ = (self.kvlist_value, self.bytes_value);
            AttrValue::Other
        }
    }
}

/// A span that failed its own types is kept as the error, so its neighbours survive.
enum LenientSpan<'a> {
    Ok(Box<SpanJson<'a>>),
    Bad(serde_json::Error),
}

impl<'de: 'a, 'a> Deserialize<'de> for LenientSpan<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'a RawValue>::deserialize(d)?;
        Ok(match serde_json::from_str::<SpanJson<'a>>(raw.get()) {
            Ok(span) => LenientSpan::Ok(Box::new(span)),
            Err(e) => LenientSpan::Bad(e),
        })
    }
}

/// OTLP/JSON writes 64-bit integers as decimal strings; numbers are accepted too.
fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an unsigned integer or a decimal string")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom("negative value"))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            if v.is_finite() && v >= 0.0 {
                Ok(v as u64)
            } else {
                Err(E::custom("not a time"))
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            v.trim().parse().map_err(E::custom)
        }
    }
    d.deserialize_any(V)
}

fn lenient_i64_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer or a decimal string")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v).map(Some).map_err(E::custom)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(v.is_finite().then_some(v as i64))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            v.trim().parse().map(Some).map_err(E::custom)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// Enums must be integers in OTLP/JSON; protobuf-JSON's names are accepted as well.
fn kind_code<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    enum_code(d, |name| SpanKind::from_name(name) as i64)
}

fn status_code<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    enum_code(d, |name| match name.trim_start_matches("STATUS_CODE_") {
        "OK" => 1,
        "ERROR" => 2,
        _ => 0,
    })
}

fn enum_code<'de, D: Deserializer<'de>>(d: D, by_name: fn(&str) -> i64) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Code {
        Number(i64),
        Name(String),
    }
    Ok(match Code::deserialize(d)? {
        Code::Number(n) => n,
        Code::Name(name) => by_name(&name),
    })
}

// ---- OTLP/protobuf (opentelemetry-proto's trace and common messages, the fields kiln
// reads; prost skips the others). Declared by hand: a build script and protoc for nine
// messages would cost more than they save. ----

/// The messages' strings are declared as bytes: prost rejects a whole request for one string
/// that is not UTF-8, where OTLP/JSON ingest replaces the bad bytes and keeps the span; the
/// same is done here with [`lossy`].
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(bytes = "vec", tag = "1")]
        pub name: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "5")]
        pub name: Vec<u8>,
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(uint32, tag = "10")]
        pub dropped_attributes_count: u32,
        #[prost(message, optional, tag = "15")]
        pub status: Option<Status>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(int32, tag = "3")]
        pub code: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(bytes = "vec", tag = "1")]
        pub key: Vec<u8>,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 5, 6, 7")]
        pub value: Option<any_value::Value>,
    }
    pub mod any_value {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(bytes, tag = "1")]
            StringValue(Vec<u8>),
            #[prost(bool, tag = "2")]
            BoolValue(bool),
            #[prost(int64, tag = "3")]
            IntValue(i64),
            #[prost(double, tag = "4")]
            DoubleValue(f64),
            #[prost(message, tag = "5")]
            ArrayValue(super::ArrayValue),
            #[prost(message, tag = "6")]
            KvlistValue(super::KeyValueList),
            #[prost(bytes, tag = "7")]
            BytesValue(Vec<u8>),
        }
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ArrayValue {
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<AnyValue>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValueList {
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<KeyValue>,
    }
}

/// Protobuf string bytes as text, invalid UTF-8 replaced.
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn proto_value(value: proto::AnyValue) -> AttrValue<'static> {
    use proto::any_value::Value;
    match value.value {
        Some(Value::StringValue(s)) => AttrValue::Str(Cow::Owned(lossy(s))),
        Some(Value::BoolValue(b)) => AttrValue::Bool(b),
        Some(Value::IntValue(i)) => AttrValue::Int(i),
        Some(Value::DoubleValue(d)) => AttrValue::Double(d),
        Some(Value::ArrayValue(a)) => {
            AttrValue::Array(a.values.into_iter().map(proto_value).collect())
        }
        _ => AttrValue::Other,
    }
}

/// A span's fields before its ids are checked.
struct SpanParts {
    trace_id: Option<u128>,
    span_id: Option<u128>,
    parent: Option<Option<u128>>,
    name: String,
    kind: SpanKind,
    start_ns: u64,
    end_ns: u64,
    error: bool,
    dropped_attributes: u32,
}

/// Reads past the rest of a line without keeping it; the bytes skipped.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(skipped);
        }
        match memchr::memchr(b'\n', buf) {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(skipped + i as u64 + 1);
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

impl Ingest {
    pub fn new() -> Self {
        Self::default()
    }

    /// An ingest that keeps at most `limit` spans.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit: Some(limit),
            ..Self::default()
        }
    }

    /// Whether one more span may be kept; when not, it is counted and said once.
    fn room_for_a_span(&mut self) -> bool {
        let limit = self.limit.unwrap_or(MAX_SPANS_KEPT);
        if self.spans.len() < limit {
            return true;
        }
        if self.coverage.spans_not_kept == 0 {
            self.problem(format!(
                "more than {limit} spans: the first {limit} are analysed, the rest only counted \
                 (spans_not_kept)"
            ));
        }
        self.coverage.spans_not_kept += 1;
        false
    }

    /// Adds what another ingest read (the receiver's, after files were read here).
    pub fn extend(&mut self, other: Ingest) {
        let remap: Vec<u32> = other
            .resources
            .into_iter()
            .map(|r| self.intern_resource(r.service, r.language))
            .collect();
        for mut span in other.spans {
            if !self.room_for_a_span() {
                continue;
            }
            span.resource = remap[span.resource as usize];
            self.spans.push(span);
        }
        let (a, b) = (&mut self.coverage, other.coverage);
        a.spans += b.spans;
        a.db_spans += b.db_spans;
        a.db_with_text += b.db_with_text;
        a.db_with_stack += b.db_with_stack;
        a.db_with_caller += b.db_with_caller;
        a.db_with_params += b.db_with_params;
        a.spans_dropped_attributes += b.spans_dropped_attributes;
        a.rejected_spans += b.rejected_spans;
        a.rejected_lines += b.rejected_lines;
        a.lossy_lines += b.lossy_lines;
        a.spans_not_kept += b.spans_not_kept;
        for p in b.problems {
            self.problem(p);
        }
    }

    /// A file that could not be read to its end (a gzip stream cut when its writer was
    /// killed): what came before is kept, and the cut is said.
    fn stream_cut(&mut self, name: &str, e: &std::io::Error) {
        self.coverage.rejected_lines += 1;
        self.problem(format!(
            "{name}: read stopped early ({e}); what came before it is kept"
        ));
    }

    fn problem(&mut self, what: String) {
        if self.coverage.problems.len() < MAX_PROBLEMS_KEPT {
            self.coverage.problems.push(what);
        }
    }

    fn resource<'a, K: AsRef<str>>(
        &mut self,
        attrs: impl Iterator<Item = (K, AttrValue<'a>)>,
    ) -> u32 {
        let mut service = String::new();
        let mut language = None;
        for (key, value) in attrs {
            match (key.as_ref(), value) {
                ("service.name", AttrValue::Str(s)) => service = s.into_owned(),
                ("telemetry.sdk.language", AttrValue::Str(s)) => language = Some(s.into_owned()),
                _ => {}
            }
        }
        if service.is_empty() {
            service = "unknown_service".into();
        }
        self.intern_resource(service, language)
    }

    /// The index of the resource (service, SDK language), added when new.
    fn intern_resource(&mut self, service: String, language: Option<String>) -> u32 {
        let key = (service, language);
        if let Some(i) = self.resource_index.get(&key) {
            return *i;
        }
        let index = self.resources.len() as u32;
        self.resources.push(Resource {
            service: key.0.clone(),
            language: key.1.clone(),
        });
        self.resource_index.insert(key, index);
        index
    }

    fn add_span<'a>(
        &mut self,
        resource: u32,
        scope: &str,
        parts: SpanParts,
        attrs: impl Iterator<Item = (impl AsRef<str>, AttrValue<'a>)>,
        whence: &dyn Fn() -> String,
    ) {
        self.coverage.spans += 1;
        let (Some(trace_id), Some(span_id), Some(parent)) =
            (parts.trace_id, parts.span_id, parts.parent)
        else {
            self.coverage.rejected_spans += 1;
            self.problem(format!(
                "{}: span {:?} has a missing or malformed traceId/spanId/parentSpanId",
                whence(),
                parts.name
            ));
            return;
        };
        self.server_roots += u64::from(parts.kind == SpanKind::Server && parent.is_none());
        if !self.room_for_a_span() {
            return;
        }
        let mut collector = AttrCollector::default();
        for (key, value) in attrs {
            collector.add(key.as_ref(), value);
        }
        let (db, http, code_function) = collector.finish(&mut self.stacks);
        if parts.dropped_attributes > 0 {
            self.coverage.spans_dropped_attributes += 1;
        }
        if let Some(db) = &db {
            self.coverage.db_spans += 1;
            self.coverage.db_with_text += u64::from(db.text.is_some());
            self.coverage.db_with_stack += u64::from(db.stacktrace.is_some());
            self.coverage.db_with_caller += u64::from(
                db.stacktrace.is_some() || db.code_function.is_some() || db.code_file.is_some(),
            );
            self.coverage.db_with_params += u64::from(db.params.is_some());
        }
        self.spans.push(Span {
            trace_id,
            span_id: span_id as u64,
            parent_span_id: parent.map(|p| p as u64),
            name: parts.name,
            kind: parts.kind,
            start_ns: parts.start_ns,
            end_ns: parts.end_ns.max(parts.start_ns),
            error: parts.error,
            resource,
            scope: match self.scopes.get(scope) {
                Some(s) => s.clone(),
                None => {
                    let s: Arc<str> = Arc::from(scope);
                    self.scopes.insert(scope.to_string(), s.clone());
                    s
                }
            },
            dropped_attributes: parts.dropped_attributes,
            db,
            http,
            code_function: code_function.map(String::into_boxed_str),
        });
    }

    fn add_json<'a, S>(
        &mut self,
        doc: TracesDataJson<'a, S>,
        whence: &str,
        span_of: impl Fn(S) -> Result<SpanJson<'a>, serde_json::Error>,
    ) {
        for rs in doc.resource_spans {
            let attrs = rs.resource.unwrap_or_default().attributes;
            let resource = self.resource(json_attrs(attrs));
            for ss in rs
                .scope_spans
                .into_iter()
                .chain(rs.instrumentation_library_spans)
            {
                let scope = ss
                    .scope
                    .or(ss.instrumentation_library)
                    .unwrap_or_default()
                    .name;
                for span in ss.spans {
                    let span = match span_of(span) {
                        Ok(span) => span,
                        Err(e) => {
                            self.coverage.spans += 1;
                            self.coverage.rejected_spans += 1;
                            self.problem(format!("{whence}: a span was not read: {e}"));
                            continue;
                        }
                    };
                    let parent = if span.parent_span_id.trim().is_empty() {
                        Some(None)
                    } else {
                        parse_id(&span.parent_span_id, 8).map(Some)
                    };
                    let parts = SpanParts {
                        trace_id: parse_id(&span.trace_id, 16),
                        span_id: parse_id(&span.span_id, 8),
                        parent,
                        name: span.name.into_owned(),
                        kind: SpanKind::from_code(span.kind),
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano,
                        error: span.status.is_some_and(|s| s.code == 2),
                        dropped_attributes: span.dropped_attributes_count.min(u32::MAX as u64)
                            as u32,
                    };
                    self.add_span(
                        resource,
                        &scope,
                        parts,
                        json_attrs(span.attributes),
                        &|| whence.to_string(),
                    );
                }
            }
        }
    }

    /// Reads one OTLP/JSON `TracesData` document. `whence` names it in problems ("line 3").
    /// Returns false when the text is not such a document at all.
    pub fn add_json_text(&mut self, text: &str, whence: &str) -> bool {
        match self.try_json_text(text, whence) {
            Ok(()) => true,
            Err(e) => {
                self.reject_line(whence, &e);
                false
            }
        }
    }

    fn reject_line(&mut self, whence: &str, e: &serde_json::Error) {
        self.coverage.rejected_lines += 1;
        self.problem(format!("{whence}: not OTLP/JSON: {e}"));
    }

    fn try_json_text(&mut self, text: &str, whence: &str) -> Result<(), serde_json::Error> {
        // the strict parse is the fast path; only a document with a bad span pays twice
        match serde_json::from_str::<TracesDataJson<SpanJson>>(text) {
            Ok(doc) => {
                self.add_json(doc, whence, Ok);
                Ok(())
            }
            Err(strict) if strict.is_eof() || strict.is_syntax() => Err(strict),
            Err(strict) => match serde_json::from_str::<TracesDataJson<LenientSpan>>(text) {
                Ok(doc) => {
                    self.add_json(doc, whence, |s| match s {
                        LenientSpan::Ok(span) => Ok(*span),
                        LenientSpan::Bad(e) => Err(e),
                    });
                    Ok(())
                }
                Err(_) => Err(strict),
            },
        }
    }

    /// Reads an OTLP/protobuf `ExportTraceServiceRequest` (the body of a `/v1/traces` POST).
    pub fn add_protobuf(&mut self, bytes: &[u8]) -> Result<(), QueryError> {
        use prost::Message as _;
        let request = proto::ExportTraceServiceRequest::decode(bytes)
            .map_err(|e| QueryError::Protobuf(e.to_string()))?;
        for rs in request.resource_spans {
            let attrs = rs.resource.unwrap_or_default().attributes;
            let resource = self.resource(proto_attrs(attrs));
            for ss in rs.scope_spans {
                let scope = lossy(ss.scope.unwrap_or_default().name);
                for span in ss.spans {
                    let parts = SpanParts {
                        trace_id: id_from_bytes(&span.trace_id, 16),
                        span_id: id_from_bytes(&span.span_id, 8),
                        parent: if span.parent_span_id.is_empty() {
                            Some(None)
                        } else {
                            id_from_bytes(&span.parent_span_id, 8).map(Some)
                        },
                        name: lossy(span.name),
                        kind: SpanKind::from_code(span.kind.into()),
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano,
                        error: span.status.is_some_and(|s| s.code == 2),
                        dropped_attributes: span.dropped_attributes_count,
                    };
                    self.add_span(
                        resource,
                        &scope,
                        parts,
                        proto_attrs(span.attributes),
                        &|| "protobuf request".into(),
                    );
                }
            }
        }
        Ok(())
    }

    /// Reads OTLP/JSON from a reader: JSON lines, or one document over many lines; gzip is
    /// recognized by its magic bytes.
    pub fn add_json_reader(&mut self, reader: impl Read, name: &str) -> Result<(), QueryError> {
        let mut reader = BufReader::with_capacity(1 << 20, reader);
        let gzipped = reader
            .fill_buf()
            .map_err(|e| QueryError::io(name, e))?
            .starts_with(&[0x1f, 0x8b]);
        if gzipped {
            let inner = GzDecoder::new(reader).take(MAX_DECOMPRESSED);
            return self.read_lines(BufReader::with_capacity(1 << 20, inner), name);
        }
        self.read_lines(reader, name)
    }

    fn read_lines(&mut self, mut reader: impl BufRead, name: &str) -> Result<(), QueryError> {
        let mut line = Vec::new();
        let mut number = 0u64;
        let mut first = true;
        loop {
            line.clear();
            let n = match (&mut reader)
                .take(MAX_DOCUMENT as u64 + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(n) => n,
                Err(e) => {
                    self.stream_cut(name, &e);
                    return Ok(());
                }
            };
            if n == 0 {
                return Ok(());
            }
            number += 1;
            if line.len() > MAX_DOCUMENT {
                line = Vec::new();
                let skipped = skip_line(&mut reader).map_err(|e| QueryError::io(name, e))?;
                self.coverage.rejected_lines += 1;
                self.problem(format!(
                    "{name}:{number}: a line longer than {} MiB ({} MiB) was skipped",
                    MAX_DOCUMENT >> 20,
                    (MAX_DOCUMENT as u64 + 1 + skipped) >> 20
                ));
                continue;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let text = match std::str::from_utf8(&line) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => {
                    self.coverage.lossy_lines += 1;
                    String::from_utf8_lossy(&line)
                }
            };
            let whence = format!("{name}:{number}");
            let was_first = std::mem::replace(&mut first, false);
            match self.try_json_text(&text, &whence) {
                Ok(()) => {}
                // A document spread over several lines: its first line ends early. Read
                // the rest and parse the whole.
                Err(e) if e.is_eof() && was_first => {
                    let mut rest = text.into_owned().into_bytes();
                    let room = MAX_DOCUMENT.saturating_sub(rest.len()) as u64;
                    (&mut reader)
                        .take(room + 1)
                        .read_to_end(&mut rest)
                        .map_err(|e| QueryError::io(name, e))?;
                    if rest.len() > MAX_DOCUMENT {
                        self.coverage.rejected_lines += 1;
                        self.problem(format!(
                            "{name}: one document larger than {} MiB: not read",
                            MAX_DOCUMENT >> 20
                        ));
                        return Ok(());
                    }
                    let whole = String::from_utf8_lossy(&rest);
                    self.add_json_text(&whole, &format!("{name} (one document)"));
                    return Ok(());
                }
                Err(e) => self.reject_line(&whence, &e),
            }
        }
    }

    /// Reads protobuf requests each preceded by its length as a varint (what the receiver
    /// records). A bad request is counted and skipped; a bad length ends the file.
    pub fn add_delimited_protobuf(
        &mut self,
        reader: impl Read,
        name: &str,
    ) -> Result<(), QueryError> {
        let mut bytes = Vec::new();
        if let Err(e) = reader.take(MAX_DECOMPRESSED).read_to_end(&mut bytes) {
            self.stream_cut(name, &e);
        }
        let mut rest = &bytes[..];
        let mut number = 0;
        while !rest.is_empty() {
            number += 1;
            let len = match prost::encoding::decode_varint(&mut rest) {
                Ok(len) if len as usize <= rest.len() => len as usize,
                _ => {
                    self.coverage.rejected_lines += 1;
                    self.problem(format!(
                        "{name}: request {number}: bad length; the rest of the file is skipped"
                    ));
                    break;
                }
            };
            if let Err(e) = self.add_protobuf(&rest[..len]) {
                self.coverage.rejected_lines += 1;
                self.problem(format!("{name}: request {number}: {e}"));
            }
            rest = &rest[len..];
        }
        Ok(())
    }

    /// Reads a file of spans: OTLP/JSON (lines or one document), OTLP/protobuf, gzipped or
    /// not, or the receiver's record of protobuf requests (`*.delimited.pb`).
    pub fn add_file(&mut self, path: &Path) -> Result<(), QueryError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| QueryError::io(&name, e))?;
        if name.ends_with(".delimited.pb") {
            return self.add_delimited_protobuf(file, &name);
        }
        if name.ends_with(".delimited.pb.gz") {
            return self.add_delimited_protobuf(GzDecoder::new(BufReader::new(file)), &name);
        }
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let head = reader.fill_buf().map_err(|e| QueryError::io(&name, e))?;
        let gzipped = head.starts_with(&[0x1f, 0x8b]);
        let first = head.iter().find(|b| !b.is_ascii_whitespace()).copied();
        let spans_before = self.coverage.spans;
        let lines_before = self.coverage.rejected_lines;
        if gzipped || first == Some(b'{') || first.is_none() {
            self.add_json_reader(reader, &name)?;
        } else {
            let mut bytes = Vec::new();
            reader
                .take(MAX_DECOMPRESSED)
                .read_to_end(&mut bytes)
                .map_err(|e| QueryError::io(&name, e))?;
            self.add_protobuf(&bytes)
                .map_err(|e| QueryError::NotSpans {
                    file: name.clone(),
                    why: format!("neither OTLP/JSON nor OTLP/protobuf ({e})"),
                })?;
            // protobuf decodes much that is not protobuf: a file that yields no span at all
            // was most likely something else
            if self.coverage.spans == spans_before {
                return Err(QueryError::NotSpans {
                    file: name,
                    why: "not OTLP/JSON, and as OTLP/protobuf it holds no span".into(),
                });
            }
        }
        if self.coverage.spans == spans_before && self.coverage.rejected_lines > lines_before {
            return Err(QueryError::NotSpans {
                file: name,
                why: self.coverage.problems.last().cloned().unwrap_or_default(),
            });
        }
        Ok(())
    }
}

fn json_attrs(attrs: Vec<KeyValueJson<'_>>) -> impl Iterator<Item = (Cow<'_, str>, AttrValue<'_>)> {
    attrs.into_iter().map(|kv| {
        (
            kv.key,
            kv.value
                .map(AnyValueJson::into_value)
                .unwrap_or(AttrValue::Other),
        )
    })
}

fn proto_attrs(attrs: Vec<proto::KeyValue>) -> impl Iterator<Item = (String, AttrValue<'static>)> {
    attrs.into_iter().map(|kv| {
        (
            lossy(kv.key),
            kv.value.map(proto_value).unwrap_or(AttrValue::Other),
        )
    })
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    /// Spans past the limit are counted and said, not kept (a million once took 1.5 GB).
    #[test]
    fn spans_past_the_limit_are_counted_not_kept() {
        let span = |i: u32| {
            format!(
                r#"{{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"{i:016x}","parentSpanId":"","name":"s{i}","kind":2,"startTimeUnixNano":"1","endTimeUnixNano":"2"}}"#
            )
        };
        let spans: Vec<String> = (1..=5).map(span).collect();
        let doc = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[]}},"scopeSpans":[{{"scope":{{"name":"t"}},"spans":[{}]}}]}}]}}"#,
            spans.join(",")
        );
        let mut ingest = Ingest::with_limit(3);
        assert!(ingest.add_json_text(&doc, "test"));
        assert_eq!(ingest.spans.len(), 3);
        assert_eq!(ingest.coverage.spans, 5);
        assert_eq!(ingest.coverage.spans_not_kept, 2);
        assert!(
            ingest
                .coverage
                .problems
                .iter()
                .any(|p| p.contains("more than 3 spans")),
            "{:?}",
            ingest.coverage.problems
        );
        // what another ingest read is bounded the same way
        let mut more = Ingest::new();
        assert!(more.add_json_text(&doc, "test"));
        ingest.extend(more);
        assert_eq!(ingest.spans.len(), 3);
        assert_eq!(ingest.coverage.spans_not_kept, 7);
    }
}
