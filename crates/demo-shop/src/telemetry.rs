//! The shop's OpenTelemetry traces, as an instrumented service sends them: the SDK's batch
//! processor exporting OTLP/HTTP protobuf to the endpoint the standard environment variables
//! name (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). Without one the
//! shop traces nothing (no exporter retrying a collector that is not there).

use std::panic::Location;
use std::time::Duration;

use anyhow::{Context as _, Result};
use opentelemetry::trace::{
    Span as _, SpanKind, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

pub const SERVICE_NAME: &str = "kiln-demo-shop";

pub struct Tracing {
    provider: Option<SdkTracerProvider>,
}

impl Tracing {
    pub fn from_env(ratio: f64) -> Result<Tracing> {
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            return Ok(Tracing { provider: None });
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .context("cannot build the OTLP exporter")?;
        // every 200 ms, and a queue deep enough for a few seconds of a load test's spans
        let batch = BatchConfigBuilder::default()
            .with_scheduled_delay(Duration::from_millis(200))
            .with_max_queue_size(1 << 16)
            .with_max_export_batch_size(4096)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(batch)
                    .build(),
            )
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
            .build();
        Ok(Tracing {
            provider: Some(provider),
        })
    }

    pub fn tracer(&self) -> Option<SdkTracer> {
        self.provider.as_ref().map(|p| p.tracer(SERVICE_NAME))
    }

    /// Sends what is queued and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(e) = provider.shutdown_with_timeout(Duration::from_secs(3)) {
                eprintln!("kiln-demo-shop: traces not all sent: {e}");
            }
        }
    }
}

/// A request's server span, the parent of its database calls.
pub fn server_span(tracer: Option<&SdkTracer>, route: &'static str, path: &str) -> Context {
    let Some(tracer) = tracer else {
        return Context::new();
    };
    let span = tracer
        .span_builder(format!("GET {route}"))
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("http.request.method", "GET"),
            KeyValue::new("http.route", route),
            KeyValue::new("url.path", path.to_string()),
        ])
        .start(tracer);
    Context::new().with_span(span)
}

pub fn end_server_span(cx: &Context, status: u16) {
    let span = cx.span();
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(status),
    ));
    span.end();
}

/// Runs one database call inside a client span carrying its statement, its bound value and
/// the line of code that made it (OpenTelemetry's `code.*` attributes, from the caller's
/// location: no stack walk).
#[track_caller]
pub fn db_call<T>(
    tracer: Option<&SdkTracer>,
    parent: &Context,
    function: &'static str,
    sql: &str,
    value: Option<i64>,
    call: impl FnOnce() -> T,
) -> T {
    let site = Location::caller();
    let Some(tracer) = tracer.filter(|_| parent.span().span_context().is_sampled()) else {
        return call();
    };
    let mut attributes = vec![
        KeyValue::new("db.system.name", "sqlite"),
        KeyValue::new("db.query.text", sql.to_string()),
        KeyValue::new("code.function.name", function),
        KeyValue::new("code.file.path", site.file()),
        KeyValue::new("code.line.number", i64::from(site.line())),
    ];
    if let Some(v) = value {
        attributes.push(KeyValue::new("db.query.parameter.0", v.to_string()));
    }
    let mut span = tracer
        .span_builder(first_words(sql))
        .with_kind(SpanKind::Client)
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    let out = call();
    span.end();
    out
}

/// A span name from a statement: its operation and table ("SELECT products").
fn first_words(sql: &str) -> String {
    let mut words = sql.split_whitespace();
    let op = words.next().unwrap_or("query");
    let table = words
        .skip_while(|w| !w.eq_ignore_ascii_case("from"))
        .nth(1)
        .unwrap_or("");
    format!("{op} {table}").trim().to_string()
}
