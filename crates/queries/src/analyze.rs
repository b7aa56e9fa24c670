//! Requests, their DB calls, and what is wrong with them.
//!
//! A request is a trace's local root span in one service (its SERVER or CONSUMER span, or
//! the topmost span of the service found). Each DB call below it is fingerprinted and given
//! a call site: the application frames of its stack when the span has one (Prosopite's
//! rule: same fingerprint from the same stack), else its parent span (Sentry's rule, marked
//! `structural`). Per request and call site (shared/research/db-calls.md §11):
//! - N+1: one fingerprint, at least `n_plus_one_min` calls with different values (or with
//!   values the instrumentation did not record), unless every call is a batch (IN lists,
//!   batch size > 1);
//! - redundant: the same statement with the same values run more than once;
//! - slow: one call over `slow_ms`;
//! - housekeeping: as many transaction/session statements as application statements.
//!
//! Findings get ids that stay the same across runs and small code edits: a hash of the
//! kind, route, fingerprint and the call site's functions (not its line numbers).

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::ingest::Ingest;
use crate::model::{Span, SpanKind};
use crate::sql::{fingerprint, mask, Fingerprint, Mode};
use crate::stack::{self, Language};
pub use kiln_record::schema::queries::{
    AnalysisRecord, CountedOnce, Coverage, Finding, FindingKind, FindingSummary, FingerprintUse,
    Frame, Request, RouteSummary, Severity, StatementClass, SLOW_ENDS_KEPT,
};

#[derive(Clone, Debug)]
pub struct Options {
    /// Calls of one shape from one site that make an N+1 (Sentry: 5; 2 for a strict CI gate).
    pub n_plus_one_min: usize,
    /// A single call at least this long is a slow query.
    pub slow_ms: f64,
    /// Only requests whose route matches this glob (`*` matches anything).
    pub route: Option<String>,
    /// Only the request whose id (`traceid/spanid`, as findings and the worst-requests list
    /// print it) starts with this.
    pub request: Option<String>,
    /// How many of the worst requests to list.
    pub worst_requests: usize,
    /// Calls whose normalized statement matches one of these globs are left out of the
    /// findings (still counted and in the trie): known and accepted patterns.
    pub ignore_sql: Vec<String>,
    /// Calls with a stack frame whose function or `file:line` matches one of these globs are
    /// left out of the findings (Prosopite's allow_stack_paths, Bullet's stacktrace_excludes:
    /// any frame, not only the application's).
    pub ignore_frames: Vec<String>,
    /// The application's own code, when the rules guess wrong: a frame whose function
    /// starts with one of these, or whose file path contains one, is the application's and
    /// no other is (`--app-package com.acme.shop`, `--app-package /srv/app/`).
    pub app_packages: Vec<String>,
    /// Only requests whose root span started in this window (Unix ns, inclusive): the
    /// measured phases of a run. Spans an application queued before kiln listened, or sent
    /// during the warm-up, are left out and counted.
    pub window_ns: Option<(u64, u64)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            n_plus_one_min: 5,
            slow_ms: 500.0,
            route: None,
            request: None,
            worst_requests: 10,
            ignore_sql: Vec::new(),
            ignore_frames: Vec::new(),
            app_packages: Vec::new(),
            window_ns: None,
        }
    }
}

/// One DB call, ready for grouping.
#[derive(Clone, Debug)]
pub struct DbCall {
    pub span: usize,
    pub request: usize,
    pub fingerprint: Arc<Fingerprint>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The values the call carried: bound parameters when recorded, else the text's
    /// literals; None when the text has placeholders and the values were not recorded.
    pub values: Option<u64>,
    /// Stack frames root first; empty when the span carried none.
    pub frames: Arc<Vec<Frame>>,
    /// The call site: a hash of the application frames (of the frames that are not
    /// synthetic when no frame is the application's), or of the parent span.
    pub site: u64,
    pub structural: bool,
    /// Matched an --ignore-sql or --ignore-frame pattern: not in the findings.
    pub ignored: bool,
}

impl DbCall {
    /// Whether its stack holds an application frame.
    pub fn has_app_frame(&self) -> bool {
        self.frames.iter().any(|f| f.app)
    }
}

/// The analysis: what `queries.json` records of it, and the requests and calls it was made
/// from (for the trie and the page).
#[derive(Debug, Serialize)]
pub struct Analysis {
    #[serde(flatten)]
    pub summary: AnalysisRecord,
    #[serde(skip)]
    pub requests: Vec<Request>,
    /// Indices of the requests the options selected.
    #[serde(skip)]
    pub matched: Vec<usize>,
    #[serde(skip)]
    pub calls: Vec<DbCall>,
}

/// Matches `*` as any run of characters; everything else literally.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Total length of the union of intervals.
pub fn union_ns(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut current: Option<(u64, u64)> = None;
    for &(s, e) in intervals.iter() {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total = ce.saturating_sub(cs).saturating_add(total);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = current {
        total = ce.saturating_sub(cs).saturating_add(total);
    }
    total
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // nearest rank, as the load engine's summaries
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Caches fingerprints by masked text (`sql::mask`): the statements of a loop differ only
/// in their values, so the tokenizer runs once per statement shape, not once per call.
#[derive(Default)]
pub struct FingerprintCache {
    map: HashMap<String, Arc<Fingerprint>>,
}

impl FingerprintCache {
    const MAX_ENTRIES: usize = 200_000;

    /// The statement's fingerprint and the hash of its literal values; `collection` joins
    /// the shape of a statement that is not SQL (see [`crate::nosql`]).
    pub fn get(
        &mut self,
        system: &str,
        text: &str,
        collection: Option<&str>,
    ) -> (Arc<Fingerprint>, Option<u64>) {
        if let Some(grammar) = crate::nosql::grammar(system) {
            // one shared fingerprint per shape, as for SQL (a mask never starts with \u{1})
            let (fp, values) = crate::nosql::fingerprint(grammar, system, text, collection);
            if self.map.len() >= Self::MAX_ENTRIES {
                self.map.clear();
            }
            let fp = self
                .map
                .entry(format!("\u{1}{}", fp.id))
                .or_insert_with(|| Arc::new(fp))
                .clone();
            return (fp, values);
        }
        let masked = mask(system, text);
        if let Some(fp) = self.map.get(&masked.mask) {
            return (fp.clone(), masked.values);
        }
        if self.map.len() >= Self::MAX_ENTRIES {
            self.map.clear();
        }
        let fp = Arc::new(fingerprint(system, text));
        self.map.insert(masked.mask, fp.clone());
        (fp, masked.values)
    }
}

struct SpanIndex<'a> {
    spans: &'a [Span],
    by_id: HashMap<(u128, u64), usize>,
}

impl<'a> SpanIndex<'a> {
    fn new(spans: &'a [Span]) -> Self {
        let mut by_id: HashMap<(u128, u64), usize> = HashMap::with_capacity(spans.len());
        for (i, s) in spans.iter().enumerate() {
            // the first of a span received twice is the span
            by_id.entry((s.trace_id, s.span_id)).or_insert(i);
        }
        Self { spans, by_id }
    }

    /// A span received again (same trace and span id) after its first arrival.
    fn is_duplicate(&self, i: usize) -> bool {
        let span = &self.spans[i];
        self.by_id.get(&(span.trace_id, span.span_id)) != Some(&i)
    }

    fn parent(&self, i: usize) -> Option<usize> {
        let span = &self.spans[i];
        let parent = span.parent_span_id?;
        self.by_id.get(&(span.trace_id, parent)).copied()
    }

    /// The span's request: the nearest SERVER/CONSUMER ancestor in its own service, or the
    /// topmost ancestor of that service present. Returns the chain of ancestors' indices
    /// from that root down to the span's parent as well.
    fn local_root(&self, i: usize) -> (usize, Vec<usize>) {
        let resource = self.spans[i].resource;
        let mut chain = Vec::new();
        let mut current = i;
        let mut guard = 0;
        while let Some(parent) = self.parent(current) {
            guard += 1;
            // a cycle in hostile input must not loop forever
            if self.spans[parent].resource != resource || guard > 10_000 {
                break;
            }
            chain.push(parent);
            current = parent;
            if matches!(
                self.spans[parent].kind,
                SpanKind::Server | SpanKind::Consumer
            ) {
                break;
            }
        }
        chain.reverse();
        (current, chain)
    }
}

fn route_of(span: &Span) -> String {
    if let Some(http) = &span.http {
        let method = http.method.as_deref().unwrap_or("");
        let target = http.route.as_deref().or(http.path.as_deref());
        if let Some(target) = target {
            return if method.is_empty() {
                target.to_string()
            } else {
                format!("{method} {target}")
            };
        }
    }
    span.name.clone()
}

fn hex_id(x: u128, digits: usize) -> String {
    format!("{x:0width$x}", width = digits)
}

/// The application frames of a stack (none when no frame is the application's).
pub fn site_frames(frames: &[Frame]) -> Vec<Frame> {
    frames.iter().filter(|f| f.app).cloned().collect()
}

/// What identifies a call site: the application frames, or, when the stack holds none, its
/// frames that are not synthetic (proxies, reflection, lambdas), so that two variants of
/// one stack are one site.
fn site_identity(frames: &[Frame]) -> Vec<Frame> {
    let app = site_frames(frames);
    if !app.is_empty() {
        return app;
    }
    frames
        .iter()
        .filter(|f| !stack::synthetic(&f.function))
        .cloned()
        .collect()
}

/// A frame of the tracing instrumentation itself (the agent that made the span), or one no
/// code was written for.
fn instrumentation(f: &Frame) -> bool {
    stack::synthetic(&f.function)
        || f.function.starts_with("io.opentelemetry.")
        || f.function.starts_with("go.opentelemetry.io/")
        || f.function.starts_with("OpenTelemetry.")
        || f.file.as_deref().is_some_and(|file| {
            file.contains("/opentelemetry/instrumentation/") || file.contains("kiln_otel_stacks")
        })
}

/// The innermost frame that is not the instrumentation's: what to name when a stack holds
/// no application frame.
pub fn nearest_frame(frames: &[Frame]) -> Option<&Frame> {
    frames.iter().rev().find(|f| !instrumentation(f))
}

/// A stack's frames and its call site's hash.
type ParsedStack = (Arc<Vec<Frame>>, u64);

/// The application's packages per resource, learned from request handlers: the spans
/// right under a SERVER span that name their code (Spring MVC's `OwnerController.list`).
fn learned_packages(ingest: &Ingest, index: &SpanIndex) -> HashMap<u32, Vec<String>> {
    let mut learned: HashMap<u32, Vec<String>> = HashMap::new();
    for (i, span) in ingest.spans.iter().enumerate() {
        let Some(function) = span.code_function.as_deref() else {
            continue;
        };
        let handler = span.kind == SpanKind::Server
            || index.parent(i).is_some_and(|p| {
                ingest.spans[p].kind == SpanKind::Server
                    && ingest.spans[p].resource == span.resource
            });
        if !handler {
            continue;
        }
        if let Some(package) = stack::learned_java_package(function) {
            let packages = learned.entry(span.resource).or_default();
            if !packages.contains(&package) {
                packages.push(package);
            }
        }
    }
    learned
}

/// Frames under a package the handlers showed to be the application's are its own, even
/// under a vendor-wide prefix the rules take for a library (`org.apache.shop.`).
fn mark_learned_frames(frames: &mut [Frame], packages: &[String]) {
    for f in frames {
        if !f.app && !stack::synthetic(&f.function) {
            f.app = packages.iter().any(|p| f.function.starts_with(p.as_str()));
        }
    }
}

/// Marks frames by the user's `--app-package` list: those matching are the application's,
/// no other is; synthetic frames never are.
fn mark_app_frames(frames: &mut [Frame], app_packages: &[String]) {
    if app_packages.is_empty() {
        return;
    }
    for f in frames {
        f.app = !stack::synthetic(&f.function)
            && app_packages.iter().any(|p| {
                f.function.starts_with(p.as_str())
                    || f.file
                        .as_deref()
                        .is_some_and(|file| file.contains(p.as_str()))
            });
    }
}

fn hash_frames(frames: &[Frame], with_lines: bool) -> u64 {
    let mut text = String::new();
    for f in frames {
        text.push_str(&f.function);
        text.push('\u{1}');
        if let Some(file) = &f.file {
            text.push_str(file);
        }
        if with_lines {
            text.push_str(&f.line.unwrap_or(0).to_string());
        }
        text.push('\u{2}');
    }
    xxh3_64(text.as_bytes())
}

pub fn analyze(ingest: &Ingest, options: &Options) -> Analysis {
    let index = SpanIndex::new(&ingest.spans);
    let mut cache = FingerprintCache::default();
    let mut requests: Vec<Request> = Vec::new();
    let mut request_of_root: HashMap<usize, usize> = HashMap::new();
    let mut orphans: HashMap<u128, usize> = HashMap::new();
    let mut calls: Vec<DbCall> = Vec::new();
    // parsed stacks and their site hashes, by the interned stack text's address and resource
    let mut stacks: HashMap<(usize, u32), ParsedStack> = HashMap::new();
    let learned = learned_packages(ingest, &index);

    // every root of a request, including those without DB calls
    let mut duplicate_spans = 0;
    // requests that began at a server or consumer span
    let mut served: std::collections::HashSet<usize> = Default::default();
    for (i, span) in ingest.spans.iter().enumerate() {
        if index.is_duplicate(i) {
            duplicate_spans += 1;
            continue;
        }
        let is_root = matches!(span.kind, SpanKind::Server | SpanKind::Consumer)
            || (span.parent_span_id.is_none() && span.db.is_none());
        if is_root && index.local_root(i).0 == i {
            let n = requests.len();
            request_of_root.insert(i, n);
            if matches!(span.kind, SpanKind::Server | SpanKind::Consumer) {
                served.insert(n);
            }
            requests.push(new_request(ingest, span));
        }
    }
    let is_db_call = |span: &Span| {
        span.db.as_ref().is_some_and(|db| db.text.is_some())
            && matches!(
                span.kind,
                SpanKind::Client | SpanKind::Internal | SpanKind::Unspecified
            )
    };
    // Two instrumentations of one call (SQLAlchemy's span with psycopg2's inside): the outer
    // span is no call of its own; the inner one is, with its timing and values, and the
    // outer one's stack when it has none. Inside means its child, or (SQLAlchemy's span is
    // never made current, so psycopg2's is its sibling) a sibling from another
    // instrumentation whose time lies within it: a loop's own parallel calls come from one.
    let mut wrapped_by: HashMap<usize, usize> = HashMap::new();
    let mut wrappers: std::collections::HashSet<usize> = Default::default();
    let mut siblings: HashMap<(u128, Option<u64>), Vec<usize>> = HashMap::new();
    for (i, span) in ingest.spans.iter().enumerate() {
        if !index.is_duplicate(i) && is_db_call(span) {
            (siblings
                .entry((span.trace_id, span.parent_span_id))
                .or_default())
            .push(i);
        }
    }
    let mut same_statement = |inner: &Span, outer: &Span| {
        let (Some(a), Some(b)) = (&inner.db, &outer.db) else {
            return false;
        };
        let mut shape = |db: &crate::model::DbAttrs| {
            db.text.as_deref().map(|t| {
                cache
                    .get(&db.system, t, db.collection.as_deref())
                    .0
                    .shape
                    .clone()
            })
        };
        a.text == b.text || shape(a) == shape(b)
    };
    for (i, span) in ingest.spans.iter().enumerate() {
        if index.is_duplicate(i) || !is_db_call(span) {
            continue;
        }
        if let Some(parent) = index.parent(i) {
            let outer = &ingest.spans[parent];
            if is_db_call(outer) && !wrappers.contains(&parent) && same_statement(span, outer) {
                wrapped_by.insert(i, parent);
                wrappers.insert(parent);
            }
        }
    }
    /// How far back among a parent's DB spans (by start) an enclosing one is looked for.
    const ENCLOSING_WITHIN: usize = 8;
    for group in siblings.values_mut() {
        group.sort_by_key(|&i| {
            (
                ingest.spans[i].start_ns,
                std::cmp::Reverse(ingest.spans[i].end_ns),
            )
        });
        for j in 0..group.len() {
            let inner_i = group[j];
            if wrapped_by.contains_key(&inner_i) {
                continue;
            }
            let inner = &ingest.spans[inner_i];
            for &outer_i in group[j.saturating_sub(ENCLOSING_WITHIN)..j].iter().rev() {
                let outer = &ingest.spans[outer_i];
                let encloses = outer.start_ns <= inner.start_ns && inner.end_ns <= outer.end_ns;
                if encloses
                    && outer.scope != inner.scope
                    && !wrappers.contains(&outer_i)
                    && !wrapped_by.contains_key(&outer_i)
                    && same_statement(inner, outer)
                {
                    wrapped_by.insert(inner_i, outer_i);
                    wrappers.insert(outer_i);
                    break;
                }
            }
        }
    }

    for (i, span) in ingest.spans.iter().enumerate() {
        if index.is_duplicate(i) || wrappers.contains(&i) || !is_db_call(span) {
            continue;
        }
        let Some(db) = &span.db else { continue };
        let Some(text) = &db.text else { continue };
        let (root, mut chain) = index.local_root(i);
        // the span it stands for is no parent of its own call
        chain.retain(|c| !wrappers.contains(c));
        let root_span = &ingest.spans[root];
        // A trace whose server span was lost (never exported, dropped by a sampler): its
        // DB calls are one request "without its server span", never a route named after
        // whatever span is topmost (a SQL statement).
        let orphan = root_span.parent_span_id.is_some()
            && !matches!(root_span.kind, SpanKind::Server | SpanKind::Consumer);
        let request = if orphan {
            *orphans.entry(root_span.trace_id).or_insert_with(|| {
                requests.push(orphan_request(ingest, root_span));
                requests.len() - 1
            })
        } else {
            *request_of_root.entry(root).or_insert_with(|| {
                requests.push(new_request(ingest, root_span));
                requests.len() - 1
            })
        };
        let (fp, literals) = cache.get(&db.system, text, db.collection.as_deref());
        let language = ingest.resources[span.resource as usize]
            .language
            .as_deref()
            .map(Language::from_sdk);
        let with_site = |mut frames: Vec<Frame>| {
            if let Some(packages) = learned.get(&span.resource) {
                mark_learned_frames(&mut frames, packages);
            }
            mark_app_frames(&mut frames, &options.app_packages);
            let site = hash_frames(&site_identity(&frames), true);
            (Arc::new(frames), site)
        };
        // the outer span's stack and caller when the inner one has none
        let outer_db = wrapped_by
            .get(&i)
            .and_then(|&o| ingest.spans[o].db.as_deref());
        let stack_db = match (&db.stacktrace, outer_db) {
            (None, Some(outer)) if outer.stacktrace.is_some() || outer.code_file.is_some() => outer,
            _ => db,
        };
        let (frames, site) = match &stack_db.stacktrace {
            Some(text) => stacks
                .entry((Arc::as_ptr(text) as *const u8 as usize, span.resource))
                .or_insert_with(|| with_site(stack::parse(text, language)))
                .clone(),
            None => match (&stack_db.code_function, &stack_db.code_file) {
                (None, None) => (Arc::new(Vec::new()), 0),
                (function, file) => with_site(vec![Frame {
                    function: function.clone().unwrap_or_else(|| "?".into()),
                    file: file.clone(),
                    line: stack_db.code_line.and_then(|l| u32::try_from(l).ok()),
                    app: true,
                }]),
            },
        };
        let (site, structural) = if frames.is_empty() {
            let parent = chain.last().copied().unwrap_or(root);
            (ingest.spans[parent].span_id, true)
        } else {
            (site, false)
        };
        let values = match db.params.or(outer_db.and_then(|o| o.params)) {
            Some(p) => Some(p),
            None if fp.placeholders => None,
            None => Some(literals.unwrap_or(0)),
        };
        calls.push(DbCall {
            span: i,
            request,
            fingerprint: fp,
            start_ns: span.start_ns,
            end_ns: span.end_ns,
            values,
            frames,
            site,
            structural,
            ignored: false,
        });
    }
    let counted_once = CountedOnce {
        duplicate_spans,
        nested_db_spans: wrappers.len(),
    };
    let orphan_requests: std::collections::HashSet<usize> = orphans.values().copied().collect();

    let ignored_calls = mark_ignored(&mut calls, options);
    for (c, call) in calls.iter().enumerate() {
        requests[call.request].calls.push(c);
    }
    let requests_total = requests.len();
    for request in &mut requests {
        request.calls.sort_by_key(|&c| calls[c].start_ns);
        request.db_calls = request.calls.len();
        request.housekeeping_calls = request
            .calls
            .iter()
            .filter(|&&c| calls[c].fingerprint.class == StatementClass::Housekeeping)
            .count();
        let mut intervals: Vec<(u64, u64)> = request
            .calls
            .iter()
            .map(|&c| (calls[c].start_ns, calls[c].end_ns))
            .collect();
        request.db_time_ns = union_ns(&mut intervals);
    }

    // Requests outside the measured window are not analysed (an orphan's start is its
    // earliest call's, since its own root span is one of them).
    let inside = |r: &Request| {
        options
            .window_ns
            .is_none_or(|(from, to)| (from..=to).contains(&r.start_ns))
    };
    for request in &mut requests {
        if let Some(first) = request.calls.first() {
            request.start_ns = request.start_ns.min(calls[*first].start_ns);
        }
    }
    let outside: Vec<usize> = (0..requests.len())
        .filter(|&r| !inside(&requests[r]))
        .collect();
    let calls_outside_window = outside.iter().map(|&r| requests[r].db_calls).sum();
    let requests_total = requests_total - outside.len();
    let matched: Vec<usize> = (0..requests.len())
        .filter(|&r| inside(&requests[r]))
        .filter(|&r| {
            let id = options.request.as_deref().map(str::to_ascii_lowercase);
            options
                .route
                .as_deref()
                .is_none_or(|g| glob_match(g, &requests[r].route))
                && id.is_none_or(|id| requests[r].id.starts_with(&id))
        })
        .collect();

    // Of the analysed requests' calls: how many stacks hold an application frame.
    let analysed_calls = || matched.iter().flat_map(|&r| requests[r].calls.iter());
    let calls_with_stack = analysed_calls()
        .filter(|&&c| !calls[c].frames.is_empty())
        .count();
    let calls_with_app_frame = analysed_calls()
        .filter(|&&c| calls[c].has_app_frame())
        .count();

    let mut findings: Vec<Finding> = Vec::new();
    let mut orphan_findings: Vec<Finding> = Vec::new();
    for &r in &matched {
        let found = request_findings(&requests[r], &calls, &index, options);
        if orphan_requests.contains(&r) {
            orphan_findings.extend(found);
        } else {
            findings.extend(found);
        }
    }
    let requests_without_server_span = matched
        .iter()
        .filter(|r| orphan_requests.contains(r))
        .count();
    let requests_with_server_span = matched.iter().filter(|r| served.contains(r)).count();
    let (orphan_findings_joined, orphan_findings_left_out) = join_orphan_findings(
        &mut findings,
        orphan_findings,
        matched.len() > requests_without_server_span,
    );

    let analysis_findings = summarize_findings(findings);
    let routes = summarize_routes(&requests, &matched, &calls);
    let mut worst: Vec<Request> = matched.iter().map(|&r| requests[r].clone()).collect();
    worst.sort_by(|a, b| {
        b.db_calls
            .cmp(&a.db_calls)
            .then(b.db_time_ns.cmp(&a.db_time_ns))
    });
    worst.truncate(options.worst_requests);
    let db_calls = matched.iter().map(|&r| requests[r].db_calls).sum();
    // saturating: span times are an exporter's, untrusted
    let request_time_ns =
        (matched.iter().map(|&r| requests[r].duration_ns)).fold(0u64, u64::saturating_add);

    let summary = AnalysisRecord {
        coverage: ingest.coverage.clone(),
        requests_total,
        requests_matched: matched.len(),
        db_calls,
        ignored_calls,
        calls_with_app_frame,
        calls_with_stack,
        window_ns: options.window_ns,
        requests_outside_window: outside.len(),
        calls_outside_window,
        counted_once,
        requests_with_server_span: Some(requests_with_server_span),
        requests_without_server_span,
        orphan_findings_joined,
        orphan_findings_left_out,
        request_time_ns: Some(request_time_ns),
        routes,
        findings: analysis_findings,
        worst_requests: worst,
    };
    Analysis {
        summary,
        requests,
        matched,
        calls,
    }
}

/// Marks the calls the ignore patterns match; returns how many.
fn mark_ignored(calls: &mut [DbCall], options: &Options) -> usize {
    if options.ignore_sql.is_empty() && options.ignore_frames.is_empty() {
        return 0;
    }
    // one verdict per statement shape and per stack
    let mut by_stack: HashMap<*const Vec<Frame>, bool> = HashMap::new();
    let mut by_shape: HashMap<*const Fingerprint, bool> = HashMap::new();
    let mut count = 0;
    for call in calls.iter_mut() {
        let sql = *by_shape
            .entry(Arc::as_ptr(&call.fingerprint))
            .or_insert_with(|| {
                options
                    .ignore_sql
                    .iter()
                    .any(|g| glob_match(g, &call.fingerprint.shape))
            });
        let frame = *by_stack
            .entry(Arc::as_ptr(&call.frames))
            .or_insert_with(|| {
                // The instrumentation's own frames are on every stack: a pattern matching
                // them would leave every call out, so they are not matched.
                call.frames.iter().filter(|f| !instrumentation(f)).any(|f| {
                    options.ignore_frames.iter().any(|g| {
                        glob_match(g, &f.function)
                            || glob_match(g, &f.location())
                            || glob_match(g, &f.label())
                    })
                })
            });
        call.ignored = sql || frame;
        count += usize::from(call.ignored);
    }
    count
}

/// A loop found in a trace whose server span never arrived joins the finding of the same
/// kind, statement and call site found in requests that have theirs (one loop, one
/// finding); where none has it, it is left out: a trace cut at the window's end, or thinned
/// by an exporter's full queue, is not the evidence a finding stands on. Only when every
/// analysed request is such a trace (`any_whole` false) are they judged on their own.
/// Returns how many were joined and how many left out.
fn join_orphan_findings(
    findings: &mut Vec<Finding>,
    orphans: Vec<Finding>,
    any_whole: bool,
) -> (usize, usize) {
    if !any_whole {
        findings.extend(orphans);
        return (0, 0);
    }
    let key = |f: &Finding| (f.kind, f.fingerprint.clone(), hash_frames(&f.site, false));
    let known: HashMap<_, (String, String)> = findings
        .iter()
        .map(|f| (key(f), (f.id.clone(), f.route.clone())))
        .collect();
    let (mut joined, mut left_out) = (0, 0);
    for mut f in orphans {
        match known.get(&key(&f)) {
            Some((id, route)) => {
                f.id = id.clone();
                f.route = route.clone();
                findings.push(f);
                joined += 1;
            }
            None => left_out += 1,
        }
    }
    (joined, left_out)
}

/// The request of a trace's DB calls whose server span is missing.
fn orphan_request(ingest: &Ingest, span: &Span) -> Request {
    let mut request = new_request(ingest, span);
    request.route = "(trace without its server span)".into();
    request.id = format!("{}/-", hex_id(span.trace_id, 32));
    request
}

fn new_request(ingest: &Ingest, span: &Span) -> Request {
    let route = if span.db.is_some() && span.parent_span_id.is_none() {
        "(outside any request)".to_string()
    } else {
        route_of(span)
    };
    Request {
        id: format!(
            "{}/{}",
            hex_id(span.trace_id, 32),
            hex_id(u128::from(span.span_id), 16)
        ),
        route,
        service: ingest.resources[span.resource as usize].service.clone(),
        start_ns: span.start_ns,
        duration_ns: span.duration_ns(),
        error: span.error,
        db_calls: 0,
        housekeeping_calls: 0,
        db_time_ns: 0,
        calls: Vec::new(),
    }
}

/// A finding's id: the same in every run of the same code, wherever it was checked out or
/// installed. The site's frames count by function and file name, not by the file's folder
/// (`/home/a/shop/views.py` and `/tmp/ci/shop/views.py` are one file), nor by line (an edit
/// above the loop moves it).
fn finding_id(kind: FindingKind, route: &str, fp: &str, site: &[Frame]) -> String {
    let mut text = format!("{}|{kind:?}|{route}|{fp}|", crate::sql::FINGERPRINT_VERSION);
    for f in site {
        let file = f.file.as_deref().unwrap_or("");
        let name = file.rsplit(['/', '\\']).next().unwrap_or(file);
        text.push_str(&f.function);
        text.push('\u{1}');
        text.push_str(name);
        text.push('\u{2}');
    }
    format!("{:012x}", xxh3_64(text.as_bytes()) >> 16)
}

fn escalate(severity: Severity) -> Severity {
    match severity {
        Severity::Low => Severity::Medium,
        _ => Severity::High,
    }
}

fn request_findings(
    request: &Request,
    calls: &[DbCall],
    index: &SpanIndex,
    options: &Options,
) -> Vec<Finding> {
    let spans = index.spans;
    let mut out = Vec::new();
    // groups by (fingerprint, site), in order of first call
    let mut groups: BTreeMap<(usize, String, u64), Vec<usize>> = BTreeMap::new();
    let mut first_seen: HashMap<(String, u64), usize> = HashMap::new();
    for (order, &c) in request.calls.iter().enumerate() {
        let call = &calls[c];
        if call.fingerprint.class == StatementClass::Housekeeping || call.ignored {
            continue;
        }
        let key = (call.fingerprint.id.clone(), call.site);
        let first = *first_seen.entry(key.clone()).or_insert(order);
        groups.entry((first, key.0, key.1)).or_default().push(c);
    }
    // The same statement with the same values from different call sites (a row loaded
    // twice by two methods): by (statement, values) across the request.
    let mut by_value: BTreeMap<(String, u64), Vec<usize>> = BTreeMap::new();
    for &c in &request.calls {
        let call = &calls[c];
        if call.fingerprint.class == StatementClass::Housekeeping || call.ignored {
            continue;
        }
        if let Some(v) = call.values {
            by_value
                .entry((call.fingerprint.id.clone(), v))
                .or_default()
                .push(c);
        }
    }
    let cross_site: Vec<Vec<usize>> = by_value
        .into_values()
        .filter(|group| {
            group.len() >= 2 && group.iter().any(|&c| calls[c].site != calls[group[0]].site)
        })
        .collect();
    let covered: std::collections::HashSet<(&str, u64)> = cross_site
        .iter()
        .map(|g| {
            let c = &calls[g[0]];
            (c.fingerprint.id.as_str(), c.values.unwrap_or(0))
        })
        .collect();
    let request_db_ns = request.db_time_ns.max(1);
    let finding = |kind: FindingKind,
                   group: &[usize],
                   distinct: Option<usize>,
                   evidence: String,
                   fix: String| {
        let first = &calls[group[0]];
        let fp = &first.fingerprint;
        let site = if first.structural {
            Vec::new()
        } else {
            site_frames(&first.frames)
        };
        // The id follows what identifies the site: the app frames, else the stack's own.
        let identity = if first.structural {
            Vec::new()
        } else {
            site_identity(&first.frames)
        };
        let mut intervals: Vec<(u64, u64)> = group
            .iter()
            .map(|&c| (calls[c].start_ns, calls[c].end_ns))
            .collect();
        let time_ns = union_ns(&mut intervals);
        // saturating: span times are an exporter's, untrusted (a fuzzed one overflowed)
        let sum_ns: u64 = group
            .iter()
            .map(|&c| calls[c].end_ns.saturating_sub(calls[c].start_ns))
            .fold(0, u64::saturating_add);
        let share = time_ns as f64 / request_db_ns as f64;
        let n = group.len();
        let mut severity = match kind {
            FindingKind::Slow => Severity::High,
            FindingKind::Housekeeping => Severity::Low,
            FindingKind::Redundant if n < 5 => Severity::Low,
            _ if time_ns >= 50_000_000 || n >= 25 => Severity::High,
            _ => Severity::Medium,
        };
        // Most of a request's DB time, and enough of it to matter: 10 calls of 0.08 ms are
        // all of a fast request's DB time, and not worth a HIGH.
        if share >= 0.3 && time_ns >= 5_000_000 && kind != FindingKind::Housekeeping {
            severity = escalate(severity);
        }
        Finding {
            id: finding_id(kind, &request.route, &fp.id, &identity),
            kind,
            severity,
            route: request.route.clone(),
            request: request.id.clone(),
            fingerprint: fp.id.clone(),
            summary: fp.summary.clone(),
            shape: fp.shape.clone(),
            calls: n,
            distinct_values: distinct,
            time_ns,
            share_of_db_time: share.min(1.0),
            site,
            structural: first.structural,
            no_app_frame: !first.structural && !first.has_app_frame(),
            parallel: n > 1 && sum_ns > time_ns.saturating_add(time_ns / 2),
            evidence,
            fix,
            end_unix_ms: intervals.iter().map(|i| i.1).max().unwrap_or(0) / 1_000_000,
        }
    };
    for ((_, _, _), group) in groups {
        let first = &calls[group[0]];
        let fp = &first.fingerprint;
        let n = group.len();
        let where_ = where_text(first, index);
        // slow calls, whatever the group
        for &c in &group {
            let ms = calls[c].end_ns.saturating_sub(calls[c].start_ns) as f64 / 1e6;
            if ms >= options.slow_ms
                && matches!(
                    fp.class,
                    StatementClass::Read | StatementClass::Write | StatementClass::Other
                )
            {
                out.push(finding(
                    FindingKind::Slow,
                    &[c],
                    None,
                    format!("one call took {ms:.1} ms (threshold {:.0} ms) {where_}", options.slow_ms),
                    "EXPLAIN (ANALYZE, BUFFERS) it with real parameters: look for sequential scans and \
                     sorts on disk; add the index the filter needs or return fewer rows"
                        .into(),
                ));
            }
        }
        if n < 2 {
            continue;
        }
        let batched = group.iter().all(|&c| {
            let f = &calls[c].fingerprint;
            let batch = spans[calls[c].span]
                .db
                .as_ref()
                .and_then(|d| d.batch_size)
                .unwrap_or(0);
            f.in_list_max > 1 || f.values_rows > 1 || batch > 1
        });
        let known: Option<Vec<u64>> = group.iter().map(|&c| calls[c].values).collect();
        let write = fp.class == StatementClass::Write;
        let loop_kind = if write {
            FindingKind::NPlusOneWrite
        } else {
            FindingKind::NPlusOne
        };
        match known {
            Some(values) => {
                let mut counts: HashMap<u64, usize> = HashMap::new();
                for v in &values {
                    *counts.entry(*v).or_insert(0) += 1;
                }
                let distinct = counts.len();
                if batched {
                    if n >= 10 {
                        out.push(finding(
                            FindingKind::ChunkyBatch,
                            &group,
                            Some(distinct),
                            format!("{n} batched calls of one statement {where_}"),
                            "raise the batch size (Hibernate default_batch_fetch_size, @BatchSize) or load the \
                             whole set in one query"
                                .into(),
                        ));
                    }
                } else if distinct >= options.n_plus_one_min {
                    out.push(finding(
                        loop_kind,
                        &group,
                        Some(distinct),
                        format!(
                            "{n} calls of one statement with {distinct} different values {where_}"
                        ),
                        loop_fix(fp.mode, write),
                    ));
                }
                let repeats = counts.values().copied().max().unwrap_or(0);
                let value = counts.iter().find(|(_, &k)| k == repeats).map(|(v, _)| *v);
                let reported_across_sites =
                    value.is_some_and(|v| covered.contains(&(fp.id.as_str(), v)));
                if repeats >= 2 && !reported_across_sites {
                    let dup: Vec<usize> = group
                        .iter()
                        .copied()
                        .filter(|&c| calls[c].values == value)
                        .collect();
                    out.push(finding(
                        FindingKind::Redundant,
                        &dup,
                        Some(1),
                        format!("the same statement with the same values ran {repeats} times {where_}"),
                        "run it once and reuse the result (a variable in the request, a memoized helper, a \
                         request-scoped cache)"
                            .into(),
                    ));
                }
            }
            None if !batched && n >= options.n_plus_one_min => {
                out.push(finding(
                    loop_kind,
                    &group,
                    None,
                    format!(
                        "{n} calls of one statement {where_}; its values were not recorded, so identical \
                         repeats cannot be told apart (record them {})",
                        crate::nosql::record_values_hint(fp.mode)
                            .map_or_else(|| ": db.query.parameter.*".to_string(), |h| h.to_string())
                    ),
                    loop_fix(fp.mode, write),
                ));
            }
            None => {}
        }
    }
    for group in &cross_site {
        let mut sites: Vec<String> = Vec::new();
        for &c in group {
            let text = site_text(&calls[c], index);
            if !sites.contains(&text) {
                sites.push(text);
            }
        }
        let mut f = finding(
            FindingKind::Redundant,
            group,
            Some(1),
            format!(
                "the same statement with the same values ran {} times, from {} different places: {}",
                group.len(),
                sites.len(),
                sites.join("; ")
            ),
            "load it once and pass the result on (a variable in the request, the ORM session's \
             first-level cache by id, a request-scoped cache)"
                .into(),
        );
        // One finding for the set of sites, whichever ran first.
        let mut ids: Vec<u64> = group.iter().map(|&c| calls[c].site).collect();
        ids.sort_unstable();
        ids.dedup();
        f.id = finding_id(
            FindingKind::Redundant,
            &request.route,
            &format!("{}|{ids:?}", f.fingerprint),
            &[],
        );
        out.push(f);
    }
    // housekeeping round trips
    let app = request.db_calls - request.housekeeping_calls;
    if request.housekeeping_calls >= 2 && request.housekeeping_calls >= app {
        let group: Vec<usize> = request
            .calls
            .iter()
            .copied()
            .filter(|&c| calls[c].fingerprint.class == StatementClass::Housekeeping)
            .collect();
        let mut shapes: BTreeMap<&str, usize> = BTreeMap::new();
        for &c in &group {
            *shapes.entry(&calls[c].fingerprint.shape).or_insert(0) += 1;
        }
        let list: Vec<String> = shapes.iter().map(|(s, n)| format!("{n}× {s}")).collect();
        let mut f = finding(
            FindingKind::Housekeeping,
            &group,
            None,
            format!(
                "{} housekeeping statements for {app} application statements: {}",
                request.housekeeping_calls,
                list.join(", ")
            ),
            "each is a round trip: track session state in the driver (MySQL useLocalSessionState=true, \
             elideSetAutoCommits), drop needless read-only transactions, disable pgjdbc autosave"
                .into(),
        );
        f.id = finding_id(FindingKind::Housekeeping, &request.route, "", &[]);
        f.fingerprint.clear();
        f.summary = "housekeeping".into();
        f.shape = list.join(", ");
        out.push(f);
    }
    out
}

/// "from <site>", or "under span ..." when the call site is unknown, for the evidence.
fn where_text(call: &DbCall, index: &SpanIndex) -> String {
    let site = site_text(call, index);
    if call.structural {
        site
    } else {
        format!("from {site}")
    }
}

/// Where a call was made, for the evidence: its innermost application frame; the nearest
/// frame when the stack holds no application frame (said so); the parent span without one.
fn site_text(call: &DbCall, index: &SpanIndex) -> String {
    if call.structural {
        let parent = index
            .parent(call.span)
            .map(|p| index.spans[p].name.as_str())
            .unwrap_or("(no parent)");
        return format!("under span {parent:?} (no stacks: call site unknown)");
    }
    if let Some(f) = call.frames.iter().rev().find(|f| f.app) {
        return f.location();
    }
    match nearest_frame(&call.frames) {
        Some(f) => format!(
            "{} (no application frame in its stack: name your code with --app-package)",
            f.label()
        ),
        None => "(no application frame in its stack)".into(),
    }
}

fn loop_fix(mode: Mode, write: bool) -> String {
    if let Some(fix) = crate::nosql::loop_fix(mode, write) {
        return fix.into();
    }
    if write {
        "send the rows in one statement: a multi-row INSERT/UPDATE, executemany/addBatch, or COPY"
            .into()
    } else {
        "load the rows in one query before the loop: a JOIN or WHERE id IN (...)/= ANY(...), or the \
         ORM's eager loading (select_related/prefetch_related, selectinload, JOIN FETCH, @BatchSize)"
            .into()
    }
}

fn summarize_findings(findings: Vec<Finding>) -> Vec<FindingSummary> {
    let mut by_id: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    for f in findings {
        by_id.entry(f.id.clone()).or_default().push(f);
    }
    let mut out: Vec<FindingSummary> = by_id
        .into_values()
        .map(|mut list| {
            // the example is the worst occurrence
            list.sort_by(|a, b| b.calls.cmp(&a.calls).then(b.time_ns.cmp(&a.time_ns)));
            let mut counts: Vec<f64> = list.iter().map(|f| f.calls as f64).collect();
            counts.sort_by(f64::total_cmp);
            // the typical occurrence's severity (the median request's), not the worst one's:
            // one slow request made a loop HIGH in one run and MEDIUM in its twin
            let mut severities: Vec<Severity> = list.iter().map(|f| f.severity).collect();
            severities.sort_unstable();
            let severity = severities[severities.len() / 2];
            let time_total_ns = list.iter().map(|f| f.time_ns).fold(0, u64::saturating_add);
            let mut ends_unix_ms: Vec<u64> = match list[0].kind {
                FindingKind::Slow => list.iter().map(|f| f.end_unix_ms).collect(),
                _ => Vec::new(),
            };
            ends_unix_ms.sort_unstable();
            ends_unix_ms.truncate(SLOW_ENDS_KEPT);
            let mut example = list[0].clone();
            example.severity = severity;
            FindingSummary {
                requests: list.len(),
                calls_median: median(&counts),
                calls_max: list[0].calls,
                time_total_ns,
                ends_unix_ms,
                example,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.example
            .severity
            .cmp(&a.example.severity)
            .then(b.time_total_ns.cmp(&a.time_total_ns))
            .then(b.calls_max.cmp(&a.calls_max))
            .then(a.example.id.cmp(&b.example.id))
    });
    out
}

fn summarize_routes(
    requests: &[Request],
    matched: &[usize],
    calls: &[DbCall],
) -> Vec<RouteSummary> {
    let mut by_route: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for &r in matched {
        by_route.entry(&requests[r].route).or_default().push(r);
    }
    let mut out: Vec<RouteSummary> = by_route
        .into_iter()
        .map(|(route, rs)| {
            let mut counts: Vec<f64> = rs.iter().map(|&r| requests[r].db_calls as f64).collect();
            counts.sort_by(f64::total_cmp);
            let mut times: Vec<f64> = rs
                .iter()
                .map(|&r| requests[r].db_time_ns as f64 / 1e6)
                .collect();
            times.sort_by(f64::total_cmp);
            let mut uses: HashMap<&str, FingerprintUse> = HashMap::new();
            for &r in &rs {
                for &c in &requests[r].calls {
                    let fp = &calls[c].fingerprint;
                    let entry = uses.entry(&fp.id).or_insert_with(|| FingerprintUse {
                        fingerprint: fp.id.clone(),
                        summary: fp.summary.clone(),
                        shape: fp.shape.clone(),
                        class: fp.class,
                        calls: 0,
                        time_ns: 0,
                    });
                    entry.calls += 1;
                    let took = calls[c].end_ns.saturating_sub(calls[c].start_ns);
                    entry.time_ns = entry.time_ns.saturating_add(took);
                }
            }
            let mut top: Vec<FingerprintUse> = uses.into_values().collect();
            top.sort_by(|a, b| {
                b.calls
                    .cmp(&a.calls)
                    .then(b.time_ns.cmp(&a.time_ns))
                    .then(a.fingerprint.cmp(&b.fingerprint))
            });
            top.truncate(5);
            RouteSummary {
                route: route.to_string(),
                requests: rs.len(),
                calls_median: median(&counts),
                calls_p95: percentile(&counts, 95.0),
                calls_max: counts.last().copied().unwrap_or(0.0) as usize,
                db_time_median_ms: median(&times),
                db_time_p95_ms: percentile(&times, 95.0),
                top_queries: top,
            }
        })
        .collect();
    out.sort_by(|a, b| b.calls_max.cmp(&a.calls_max).then(a.route.cmp(&b.route)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("GET /export/*", "GET /export/csv"));
        assert!(glob_match("*export*", "GET /export/csv"));
        assert!(!glob_match("GET /export/*", "POST /export/csv"));
        assert!(glob_match("a*b*c", "abc"));
        assert!(!glob_match("a*b*c", "acb"));
        assert!(glob_match("exact", "exact"));
    }

    #[test]
    fn union_of_intervals_counts_overlap_once() {
        assert_eq!(union_ns(&mut [(0, 10), (5, 15), (20, 30)]), 25);
        assert_eq!(union_ns(&mut [(0, 10), (0, 10)]), 10);
        assert_eq!(union_ns(&mut []), 0);
    }
}
