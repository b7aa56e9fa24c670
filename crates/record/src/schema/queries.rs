//! `queries.json`: the DB-call analysis as kiln-queries writes it and every reader reads it
//! (the summary, the report, the findings' DB rule, compare).

use serde::{Deserialize, Serialize};

pub use super::Severity;

/// How much of what came in the analysis can use: an instrumentation gap shows here
/// instead of as a silently empty result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Coverage {
    pub spans: u64,
    pub db_spans: u64,
    pub db_with_text: u64,
    pub db_with_stack: u64,
    pub db_with_caller: u64,
    pub db_with_params: u64,
    /// Spans whose SDK dropped attributes (a query text can be among them).
    pub spans_dropped_attributes: u64,
    pub rejected_spans: u64,
    pub rejected_lines: u64,
    /// Lines whose invalid UTF-8 was replaced before parsing.
    pub lossy_lines: u64,
    /// Spans read past [`MAX_SPANS_KEPT`]: counted, not analysed.
    pub spans_not_kept: u64,
    pub problems: Vec<String>,
}

/// What a statement does, as far as N+1 detection cares.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
)]
#[serde(rename_all = "snake_case")]
pub enum StatementClass {
    Read,
    Write,
    Ddl,
    /// Transaction control, session settings, pings: real round trips, but not the
    /// application's queries (a JDBC driver setting can add three of them per read).
    Housekeeping,
    #[default]
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The application's own code, not a library's.
    pub app: bool,
}

impl Frame {
    /// `function (file:line)` with the file's last two path components.
    pub fn label(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("{} ({}:{line})", self.function, short_path(file)),
            (Some(file), None) => format!("{} ({})", self.function, short_path(file)),
            _ => self.function.clone(),
        }
    }

    /// `file:line` where the frame is, for "the loop is at ...".
    pub fn location(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("{file}:{line}"),
            (Some(file), None) => file.clone(),
            _ => self.function.clone(),
        }
    }
}

fn short_path(path: &str) -> &str {
    let mut cut = path.len();
    for _ in 0..2 {
        match path[..cut].rfind(['/', '\\']) {
            Some(i) => cut = i,
            None => return path,
        }
    }
    &path[cut + 1..]
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    pub id: String,
    pub route: String,
    pub service: String,
    pub start_ns: u64,
    pub duration_ns: u64,
    pub error: bool,
    pub db_calls: usize,
    pub housekeeping_calls: usize,
    /// DB time as the union of the calls' intervals (parallel calls are not counted twice).
    pub db_time_ns: u64,
    #[serde(skip)]
    pub calls: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    NPlusOne,
    NPlusOneWrite,
    Redundant,
    ChunkyBatch,
    Slow,
    Housekeeping,
}

impl FindingKind {
    /// The kind as recorded, e.g. `n_plus_one`.
    pub fn name(self) -> &'static str {
        match self {
            Self::NPlusOne => "n_plus_one",
            Self::NPlusOneWrite => "n_plus_one_write",
            Self::Redundant => "redundant",
            Self::ChunkyBatch => "chunky_batch",
            Self::Slow => "slow",
            Self::Housekeeping => "housekeeping",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Self::NPlusOne => "N+1 queries",
            Self::NPlusOneWrite => "N+1 writes",
            Self::Redundant => "Redundant queries",
            Self::ChunkyBatch => "Batches too small",
            Self::Slow => "Slow query",
            Self::Housekeeping => "Housekeeping statements",
        }
    }
}

/// One finding in one request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub id: String,
    pub kind: FindingKind,
    pub severity: Severity,
    pub route: String,
    pub request: String,
    pub fingerprint: String,
    pub summary: String,
    pub shape: String,
    /// Calls in the group.
    pub calls: usize,
    /// Different values among them, when known.
    pub distinct_values: Option<usize>,
    /// Union of the calls' intervals.
    pub time_ns: u64,
    /// Of the request's DB time.
    pub share_of_db_time: f64,
    /// Application frames root first; empty when call sites are unknown.
    pub site: Vec<Frame>,
    /// The group was formed by parent span, not by stack: call sites unknown.
    pub structural: bool,
    /// The calls' stacks hold no application frame (`site` is then empty): the call site
    /// is the nearest frame, named in the evidence.
    #[serde(default)]
    pub no_app_frame: bool,
    /// More than half the calls overlapped another: run concurrently.
    pub parallel: bool,
    pub evidence: String,
    pub fix: String,
    /// When its last call ended (Unix ms; 0 in older records).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub end_unix_ms: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// A finding across the requests it was seen in.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FindingSummary {
    #[serde(flatten)]
    pub example: Finding,
    pub requests: usize,
    pub calls_median: f64,
    pub calls_max: usize,
    pub time_total_ns: u64,
    /// Slow calls: when each ended (Unix ms, in order, at most [`SLOW_ENDS_KEPT`]), so that
    /// the findings can tell a slow statement from a host whose CPU was saturated then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ends_unix_ms: Vec<u64>,
}

/// The slow calls' end times a finding keeps.
pub const SLOW_ENDS_KEPT: usize = 1000;

/// Missing fields are left empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FingerprintUse {
    pub fingerprint: String,
    pub summary: String,
    pub shape: String,
    pub class: StatementClass,
    pub calls: usize,
    pub time_ns: u64,
}

/// Missing fields are left empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RouteSummary {
    pub route: String,
    pub requests: usize,
    pub calls_median: f64,
    pub calls_p95: f64,
    pub calls_max: usize,
    pub db_time_median_ms: f64,
    pub db_time_p95_ms: f64,
    pub top_queries: Vec<FingerprintUse>,
}

/// What `queries.json` keeps of the analysis (the analyzer's working data is not recorded).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AnalysisRecord {
    pub coverage: Coverage,
    pub requests_total: usize,
    pub requests_matched: usize,
    pub db_calls: usize,
    /// Calls left out of the findings by --ignore-sql / --ignore-frame.
    pub ignored_calls: usize,
    /// DB calls whose stack holds an application frame (of those with a stack).
    pub calls_with_app_frame: usize,
    pub calls_with_stack: usize,
    /// The analysed window (Unix ns, from and to) when one was set: a run's measured load.
    /// `kiln queries RUN_DIR` judges the run's spans in the same window again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ns: Option<(u64, u64)>,
    /// Requests (and their DB calls) whose root started outside the analysed window.
    pub requests_outside_window: usize,
    pub calls_outside_window: usize,
    /// What arrived twice and was counted once (absent when nothing did, and in records
    /// written before it was counted).
    #[serde(skip_serializing_if = "CountedOnce::is_none")]
    pub counted_once: CountedOnce,
    /// Analysed requests that began at a server (or consumer) span; 0 with DB calls means
    /// no request span arrived and a request's calls could not be told apart. `None` in
    /// records written before it was counted: unknown, not zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_with_server_span: Option<usize>,
    /// Analysed traces whose server span never arrived (lost by an exporter's queue, or
    /// cut at the end of the window): their calls counted, their loops never a finding of
    /// their own while other requests have their server span.
    #[serde(skip_serializing_if = "is_zero")]
    pub requests_without_server_span: usize,
    /// Loops found in those traces: joined to the same loop's finding (same statement and
    /// call site), or left out where no request with its server span had it.
    #[serde(skip_serializing_if = "is_zero")]
    pub orphan_findings_joined: usize,
    #[serde(skip_serializing_if = "is_zero")]
    pub orphan_findings_left_out: usize,
    /// The analysed requests' time, summed (ns): what a finding's time is a share of when
    /// findings are ranked by their cost in the run. `None` in older records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_time_ns: Option<u64>,
    pub routes: Vec<RouteSummary>,
    pub findings: Vec<FindingSummary>,
    pub worst_requests: Vec<Request>,
}

/// Spans that said one thing twice, each counted once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CountedOnce {
    /// The same span (trace and span id) received again: an SDK set up twice exports
    /// everything twice (a gunicorn post_fork hook beside `opentelemetry-instrument`).
    pub duplicate_spans: usize,
    /// DB spans with a DB span of the same statement inside: two instrumentations of one
    /// call (SQLAlchemy's over psycopg2's); the inner one is the call, with its timing.
    pub nested_db_spans: usize,
}

impl CountedOnce {
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The DB stack trie in brief (its stacks are parts of their own).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TrieRecord {
    pub calls: u64,
    pub nodes: usize,
    /// Which frames the trie was built from (`app`, `all`, ...).
    pub frames: String,
    /// The heaviest call sites as indented text.
    pub heaviest: String,
}

/// What each stage of the analysis cost kiln, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct QueryCost {
    /// Reading and parsing the spans.
    pub read: f64,
    /// Grouping, fingerprints and findings.
    pub analysis: f64,
    pub trie: f64,
    pub html_and_speedscope: f64,
}

/// `queries.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct QueriesRecord {
    pub analysis: AnalysisRecord,
    pub trie: TrieRecord,
    /// The analysis' own page, beside `queries.json`.
    pub html: String,
    pub cost_ms: QueryCost,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_and_severity_is_named_as_serde_writes_it() {
        use FindingKind::*;
        for kind in [
            NPlusOne,
            NPlusOneWrite,
            Redundant,
            ChunkyBatch,
            Slow,
            Housekeeping,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.name());
        }
        for severity in [Severity::Low, Severity::Medium, Severity::High] {
            assert_eq!(serde_json::to_value(severity).unwrap(), severity.as_str());
        }
    }
}
