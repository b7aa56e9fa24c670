//! The analyzer on spans built by construction: requests whose DB calls, values, stacks and
//! timings are known, written as OTLP/JSON the way SDKs write them.

use kiln_queries::analyze::{analyze, FindingKind, Options};
use kiln_queries::trie::{Frames, StackTrie};
use kiln_queries::Ingest;
use serde_json::{json, Value};
use std::collections::BTreeMap;

struct Trace {
    trace: u128,
    next_span: u64,
    spans: Vec<Value>,
    clock: u64,
}

fn attr(key: &str, value: Value) -> Value {
    match value {
        Value::String(s) => json!({"key": key, "value": {"stringValue": s}}),
        Value::Number(n) => json!({"key": key, "value": {"intValue": n.to_string()}}),
        other => json!({"key": key, "value": other}),
    }
}

impl Trace {
    fn new(trace: u128) -> Self {
        Self {
            trace,
            next_span: 1,
            spans: Vec::new(),
            clock: 1_700_000_000_000_000_000,
        }
    }

    fn span(
        &mut self,
        parent: Option<u64>,
        name: &str,
        kind: i64,
        dur_ns: u64,
        attrs: Vec<Value>,
    ) -> u64 {
        let id = self.next_span;
        self.next_span += 1;
        let start = self.clock;
        self.clock += dur_ns + 1000;
        self.spans.push(json!({
            "traceId": format!("{:032x}", self.trace),
            "spanId": format!("{id:016x}"),
            "parentSpanId": parent.map(|p| format!("{p:016x}")).unwrap_or_default(),
            "name": name,
            "kind": kind,
            "startTimeUnixNano": start.to_string(),
            "endTimeUnixNano": (start + dur_ns).to_string(),
            "attributes": attrs,
        }));
        id
    }

    fn server(&mut self, route: &str) -> u64 {
        self.span(
            None,
            &format!("GET {route}"),
            2,
            5_000_000,
            vec![
                attr("http.request.method", json!("GET")),
                attr("http.route", json!(route)),
            ],
        )
    }

    fn query(&mut self, parent: u64, sql: &str, stack: Option<&str>, dur_ns: u64) -> u64 {
        let mut attrs = vec![
            attr("db.system", json!("postgresql")),
            attr("db.statement", json!(sql)),
        ];
        if let Some(stack) = stack {
            attrs.push(attr("code.stacktrace", json!(stack)));
        }
        self.span(
            Some(parent),
            sql.split(' ').next().unwrap_or("db"),
            3,
            dur_ns,
            attrs,
        )
    }
}

/// The traces as one service's OTLP/JSON document; a span with a `_scope` key comes from
/// that instrumentation scope, the others from `test`.
fn document(traces: &[Trace], language: &str) -> String {
    let mut scopes: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for mut span in traces.iter().flat_map(|t| t.spans.clone()) {
        let scope = match span.as_object_mut().and_then(|o| o.remove("_scope")) {
            Some(Value::String(scope)) => scope,
            _ => "test".to_string(),
        };
        scopes.entry(scope).or_default().push(span);
    }
    let scope_spans: Vec<Value> = scopes
        .into_iter()
        .map(|(name, spans)| json!({"scope": {"name": name}, "spans": spans}))
        .collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": [attr("service.name", json!("shop")), attr("telemetry.sdk.language", json!(language))]},
        "scopeSpans": scope_spans
    }]})
    .to_string()
}

fn python_stack(lines: &[(&str, u32, &str)]) -> String {
    let mut s = String::from("  File \"/usr/lib/python3.11/threading.py\", line 995, in _bootstrap\n    self._bootstrap_inner()\n");
    s.push_str("  File \"/venv/lib/python3.11/site-packages/flask/app.py\", line 880, in dispatch\n    rv = f()\n");
    for (file, line, func) in lines {
        s.push_str(&format!(
            "  File \"{file}\", line {line}, in {func}\n    code\n"
        ));
    }
    s
}

/// The analysis of a Python service's `traces` with the default options.
fn analysis_of(traces: &[Trace]) -> kiln_queries::analyze::Analysis {
    analyze(&ingest(&document(traces, "python")), &Options::default())
}

fn ingest(text: &str) -> Ingest {
    let mut ingest = Ingest::new();
    assert!(ingest.add_json_text(text, "test"));
    ingest
}

/// Route /authors: an N+1 of K queries from one line, after the query that found the rows.
/// Route /bulk: the same rows in one IN query. Route /again: one identical query R times.
fn shop(k: usize, r: usize) -> String {
    let mut traces = Vec::new();
    let mut t = Trace::new(1);
    let root = t.server("/authors");
    let list_stack = python_stack(&[("/srv/shop/views.py", 20, "authors")]);
    let loop_stack = python_stack(&[("/srv/shop/views.py", 23, "authors")]);
    t.query(
        root,
        "SELECT id FROM authors ORDER BY id LIMIT 100",
        Some(&list_stack),
        2_000_000,
    );
    for i in 0..k {
        t.query(
            root,
            &format!("SELECT title FROM books WHERE author_id = {i}"),
            Some(&loop_stack),
            1_000_000,
        );
    }
    traces.push(t);
    let mut t = Trace::new(2);
    let root = t.server("/bulk");
    let ids: Vec<String> = (0..k).map(|i| i.to_string()).collect();
    t.query(
        root,
        &format!(
            "SELECT title FROM books WHERE author_id IN ({})",
            ids.join(", ")
        ),
        Some(&python_stack(&[("/srv/shop/views.py", 40, "bulk")])),
        3_000_000,
    );
    traces.push(t);
    let mut t = Trace::new(3);
    let root = t.server("/again");
    for _ in 0..r {
        t.query(
            root,
            "SELECT value FROM settings WHERE name = 'currency'",
            Some(&python_stack(&[("/srv/shop/views.py", 52, "again")])),
            500_000,
        );
    }
    traces.push(t);
    document(&traces, "python")
}

#[test]
fn n_plus_one_redundant_and_bulk_routes_are_told_apart() {
    let (k, r) = (17, 4);
    let analysis = analyze(&ingest(&shop(k, r)), &Options::default());
    assert_eq!(analysis.summary.requests_total, 3);
    assert_eq!(analysis.summary.db_calls, 1 + k + 1 + r);
    assert_eq!(analysis.summary.coverage.db_spans as usize, 1 + k + 1 + r);
    assert_eq!(
        analysis.summary.coverage.db_with_stack,
        analysis.summary.coverage.db_spans
    );

    let n1: Vec<_> = analysis
        .summary
        .findings
        .iter()
        .filter(|f| f.example.kind == FindingKind::NPlusOne)
        .collect();
    assert_eq!(n1.len(), 1, "{:#?}", analysis.summary.findings);
    let f = &n1[0].example;
    assert_eq!(f.route, "GET /authors");
    assert_eq!(f.calls, k);
    assert_eq!(f.distinct_values, Some(k));
    assert_eq!(f.site.last().unwrap().location(), "/srv/shop/views.py:23");
    assert!(!f.structural);
    assert_eq!(f.summary, "SELECT books");
    assert_eq!(f.time_ns, k as u64 * 1_000_000);

    let red: Vec<_> = analysis
        .summary
        .findings
        .iter()
        .filter(|f| f.example.kind == FindingKind::Redundant)
        .collect();
    assert_eq!(red.len(), 1, "{:#?}", analysis.summary.findings);
    assert_eq!(red[0].example.route, "GET /again");
    assert_eq!(red[0].example.calls, r);

    assert!(
        analysis
            .summary
            .findings
            .iter()
            .all(|f| f.example.route != "GET /bulk"),
        "{:#?}",
        analysis.summary.findings
    );
    let bulk = analysis
        .summary
        .routes
        .iter()
        .find(|r| r.route == "GET /bulk")
        .unwrap();
    assert_eq!(bulk.calls_max, 1);
}

#[test]
fn below_the_threshold_is_no_n_plus_one_and_the_threshold_is_the_users() {
    let strict = Options {
        n_plus_one_min: 2,
        ..Options::default()
    };
    assert_eq!(found_only_under(&shop(4, 1), &strict).calls, 4);
}

/// The one finding of `text` under the user's `strict` bar, having none under the default bars.
fn found_only_under(text: &str, strict: &Options) -> kiln_queries::analyze::Finding {
    let none = findings_of(text, &Options::default());
    assert!(none.is_empty(), "{none:#?}");
    let mut found = findings_of(text, strict);
    assert_eq!(found.len(), 1, "{found:#?}");
    found.remove(0)
}

/// One request to /report whose one query takes `query_ms`, from views.py line 70.
fn report_of(query_ms: u64) -> String {
    let mut t = Trace::new(9);
    let root = t.server("/report");
    t.query(
        root,
        "SELECT sum(total) FROM orders WHERE placed > $1",
        Some(&python_stack(&[("/srv/shop/views.py", 70, "report")])),
        query_ms * 1_000_000,
    );
    document(&[t], "python")
}

#[test]
fn a_call_over_the_slow_bar_is_found_at_its_line_and_one_under_it_is_not() {
    let found = of_kind(&report_of(620), FindingKind::Slow);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(f.route, "GET /report");
    assert_eq!((f.calls, f.time_ns), (1, 620_000_000));
    assert_eq!(f.site.last().unwrap().location(), "/srv/shop/views.py:70");
    assert_eq!(f.severity, kiln_queries::analyze::Severity::High);
    assert!(
        f.evidence
            .starts_with("one call took 620.0 ms (threshold 500 ms) from /srv/shop/views.py:70"),
        "{}",
        f.evidence
    );
    // when it ended is kept, for the findings to judge it against the host's seconds:
    // the span ends 5.001 ms (the server span and a gap) + 620 ms after the trace's clock
    let summary = analyze(&ingest(&report_of(620)), &Options::default()).summary;
    let slow = (summary.findings.iter())
        .find(|f| f.example.kind == FindingKind::Slow)
        .unwrap();
    assert_eq!(slow.ends_unix_ms, [1_700_000_000_000 + 625]);
    // the same query under the bar is no finding, and the bar is the user's
    let strict = Options {
        slow_ms: 400.0,
        ..Options::default()
    };
    let found = found_only_under(&report_of(480), &strict);
    assert!(
        (found.evidence).starts_with("one call took 480.0 ms (threshold 400 ms)"),
        "{}",
        found.evidence
    );
}

/// One request to /checkout that sends `statements` from views.py line 88, 1 ms each.
fn checkout_of(statements: &[String]) -> String {
    let mut t = Trace::new(11);
    let root = t.server("/checkout");
    let stack = python_stack(&[("/srv/shop/views.py", 88, "checkout")]);
    for sql in statements {
        t.query(root, sql, Some(&stack), 1_000_000);
    }
    document(&[t], "python")
}

/// The findings (each its example) of the analysis of `text` with `options`.
fn findings_of(text: &str, options: &Options) -> Vec<kiln_queries::analyze::Finding> {
    (analyze(&ingest(text), options).summary.findings)
        .into_iter()
        .map(|f| f.example)
        .collect()
}

/// The findings of `kind` in the analysis of `text` with the default options.
fn of_kind(text: &str, kind: FindingKind) -> Vec<kiln_queries::analyze::Finding> {
    (findings_of(text, &Options::default()).into_iter())
        .filter(|f| f.kind == kind)
        .collect()
}

#[test]
fn rows_inserted_one_statement_each_are_a_write_loop_and_one_multi_row_insert_is_not() {
    let lines: Vec<String> = (0..9)
        .map(|i| format!("INSERT INTO order_lines (order_id, sku) VALUES (7, 'sku-{i}')"))
        .collect();
    let text = checkout_of(&lines);
    let found = of_kind(&text, FindingKind::NPlusOneWrite);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.calls, f.distinct_values), (9, Some(9)));
    assert_eq!(f.site.last().unwrap().location(), "/srv/shop/views.py:88");
    assert!(
        f.fix.starts_with("send the rows in one statement"),
        "{}",
        f.fix
    );
    // a write loop is not called a read's N+1
    assert!(of_kind(&text, FindingKind::NPlusOne).is_empty());
    // the fix: the nine rows in one statement
    let rows: Vec<String> = (0..9).map(|i| format!("(7, 'sku-{i}')")).collect();
    let one = format!(
        "INSERT INTO order_lines (order_id, sku) VALUES {}",
        rows.join(", ")
    );
    let fixed = findings_of(&checkout_of(&[one]), &Options::default());
    assert!(fixed.is_empty(), "{fixed:#?}");
}

#[test]
fn ten_batches_of_a_few_ids_are_too_small_and_nine_are_not() {
    let batches = |n: usize| -> Vec<String> {
        (0..n)
            .map(|b| {
                let ids: Vec<String> = (0..3).map(|i| (3 * b + i).to_string()).collect();
                format!(
                    "SELECT * FROM books WHERE author_id IN ({})",
                    ids.join(", ")
                )
            })
            .collect()
    };
    let text = checkout_of(&batches(10));
    let found = of_kind(&text, FindingKind::ChunkyBatch);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.calls, f.distinct_values), (10, Some(10)));
    assert!(
        f.evidence
            .starts_with("10 batched calls of one statement from /srv/shop/views.py:88"),
        "{}",
        f.evidence
    );
    // batched calls are no N+1 of single rows
    assert!(of_kind(&text, FindingKind::NPlusOne).is_empty());
    let nine = findings_of(&checkout_of(&batches(9)), &Options::default());
    assert!(nine.is_empty(), "{nine:#?}");
}

#[test]
fn finding_ids_survive_line_edits_and_other_values() {
    let a = analyze(&ingest(&shop(9, 3)), &Options::default());
    let b = analyze(
        &ingest(&shop(12, 5).replace("line 23,", "line 25,")),
        &Options::default(),
    );
    assert_eq!(sorted_ids(&a), sorted_ids(&b));
}

/// The analysis' finding ids, sorted.
fn sorted_ids(a: &kiln_queries::analyze::Analysis) -> Vec<String> {
    let mut v: Vec<String> = (a.summary.findings.iter())
        .map(|f| f.example.id.clone())
        .collect();
    v.sort();
    v
}

/// The same code checked out in two places (or run from two venvs) has the same ids: a
/// comparison of the unchanged app from two checkouts says nothing changed.
#[test]
fn finding_ids_are_the_same_from_another_checkout() {
    let here = shop(9, 3);
    let there = here.replace("/srv/shop/", "/home/ci/builds/7/shop/");
    assert_ne!(here, there);
    let ids = |doc: &str| sorted_ids(&analyze(&ingest(doc), &Options::default()));
    assert!(!ids(&here).is_empty());
    assert_eq!(ids(&here), ids(&there));
    // another file is another site
    assert_ne!(ids(&here), ids(&here.replace("views.py", "api.py")));
}

#[test]
fn route_filter_keeps_matching_requests_only() {
    let options = Options {
        route: Some("GET /a*".into()),
        ..Options::default()
    };
    let analysis = analyze(&ingest(&shop(6, 2)), &options);
    assert_eq!(analysis.summary.requests_matched, 2);
    assert_eq!(analysis.summary.routes.len(), 2);
    // the trie is the matched requests' only: /authors (1 + 6) and /again (2)
    assert_eq!(StackTrie::build(&analysis, Frames::App).calls(), 9);
}

#[test]
fn request_filter_gives_one_requests_trie() {
    let all = analyze(&ingest(&shop(6, 2)), &Options::default());
    let again = all
        .requests
        .iter()
        .find(|r| r.route == "GET /again")
        .unwrap();
    let trace_only = again.id.split('/').next().unwrap().to_uppercase();
    let options = Options {
        request: Some(trace_only),
        ..Options::default()
    };
    let one = analyze(&ingest(&shop(6, 2)), &options);
    assert_eq!(one.summary.requests_matched, 1);
    assert_eq!(one.summary.findings.len(), 1);
    assert_eq!(one.summary.findings[0].example.kind, FindingKind::Redundant);
    assert_eq!(StackTrie::build(&one, Frames::App).calls(), 2);
}

#[test]
fn huge_attribute_values_are_cut_and_flagged() {
    let mut t = Trace::new(8);
    let root = t.server("/big");
    let huge = format!("SELECT '{}' FROM t WHERE id = 1", "x".repeat(5 << 20));
    t.query(
        root,
        &huge,
        Some(&"  File \"/a.py\", line 1, in f\n".repeat(100_000)),
        1000,
    );
    let ingest = ingest(&document(&[t], "python"));
    let db = ingest.spans.iter().find_map(|s| s.db.as_ref()).unwrap();
    assert_eq!(
        db.text.as_ref().unwrap().len(),
        kiln_queries::model::MAX_QUERY_TEXT
    );
    assert!(db.text_truncated);
    assert!(db.stacktrace.as_ref().unwrap().len() <= kiln_queries::model::MAX_STACK_TEXT);
    // a cut statement still fingerprints (the scanner finishes the open string)
    let analysis = analyze(&ingest, &Options::default());
    assert_eq!(analysis.summary.db_calls, 1);
}

#[test]
fn without_stacks_parent_spans_group_and_sites_are_unknown() {
    let mut t = Trace::new(9);
    let root = t.server("/orders");
    let handler = t.span(Some(root), "load_orders", 1, 1000, vec![]);
    for i in 0..6 {
        t.query(
            handler,
            &format!("SELECT * FROM items WHERE order_id = {i}"),
            None,
            10_000_000,
        );
    }
    let analysis = analysis_of(&[t]);
    assert_eq!(analysis.summary.findings.len(), 1);
    let f = &analysis.summary.findings[0].example;
    assert!(f.structural && f.site.is_empty());
    assert!(f.evidence.contains("load_orders"), "{}", f.evidence);
    // said as before stacks were read: "under span", not "from under span"
    assert!(f.evidence.contains(" under span "), "{}", f.evidence);
    assert!(!f.evidence.contains("from under"), "{}", f.evidence);
    // 60 ms in the loop: high
    assert_eq!(f.severity, kiln_queries::analyze::Severity::High);
    assert_eq!(analysis.summary.coverage.db_with_stack, 0);
}

#[test]
fn parameterized_text_without_recorded_values_is_reported_as_unknown_values() {
    let mut t = Trace::new(4);
    let root = t.server("/p");
    for _ in 0..5 {
        t.query(root, "SELECT * FROM t WHERE id = %s", None, 1000);
    }
    let analysis = analysis_of(&[t]);
    assert_eq!(analysis.summary.findings.len(), 1);
    assert_eq!(
        analysis.summary.findings[0].example.kind,
        FindingKind::NPlusOne
    );
    assert_eq!(analysis.summary.findings[0].example.distinct_values, None);
}

#[test]
fn recorded_parameters_tell_loops_from_repeats() {
    let mut t = Trace::new(5);
    let root = t.server("/p");
    for i in 0..5 {
        let id = t.query(root, "SELECT * FROM t WHERE id = %s", None, 1000);
        let span = t
            .spans
            .iter_mut()
            .find(|s| s["spanId"] == format!("{id:016x}"))
            .unwrap();
        span["attributes"].as_array_mut().unwrap().push(attr(
            "db.statement.parameters",
            json!(format!("({},)", i % 2)),
        ));
    }
    let analysis = analysis_of(&[t]);
    // two values among five calls: no N+1 at the default 5, a repeat of 3
    let kinds: Vec<FindingKind> = analysis
        .summary
        .findings
        .iter()
        .map(|f| f.example.kind)
        .collect();
    assert_eq!(kinds, [FindingKind::Redundant]);
    assert_eq!(analysis.summary.findings[0].example.calls, 3);
}

#[test]
fn housekeeping_round_trips_are_counted_apart() {
    let mut t = Trace::new(6);
    let root = t.server("/h");
    for _ in 0..3 {
        t.query(root, "SET SESSION TRANSACTION READ ONLY", None, 1000);
        t.query(root, "select @@session.transaction_read_only", None, 1000);
        t.query(root, "SELECT * FROM t WHERE id = 1", None, 1000);
        t.query(root, "SET SESSION TRANSACTION READ WRITE", None, 1000);
    }
    let analysis = analyze(&ingest(&document(&[t], "java")), &Options::default());
    let h: Vec<_> = analysis
        .summary
        .findings
        .iter()
        .filter(|f| f.example.kind == FindingKind::Housekeeping)
        .collect();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].example.calls, 9);
    assert_eq!(analysis.summary.worst_requests[0].housekeeping_calls, 9);
}

#[test]
fn trie_weights_calls_along_their_stacks() {
    let (k, r) = (17, 4);
    let analysis = analyze(&ingest(&shop(k, r)), &Options::default());
    let trie = StackTrie::build(&analysis, Frames::App);
    assert_eq!(trie.calls() as usize, 1 + k + 1 + r);
    let (calls, time) = trie.folded();
    assert_eq!(calls.total() as usize, 1 + k + 1 + r);
    let loop_line = calls
        .lines()
        .find(|(stack, _)| stack.contains("views.py:23"))
        .expect("the loop's stack");
    assert_eq!(loop_line.1 as usize, k);
    assert!(loop_line.0.starts_with(
        "GET /authors;authors (shop/views.py:23);SQL SELECT title FROM books WHERE author_id = ?"
    ));
    assert_eq!(
        time.total(),
        (2_000 + k as u64 * 1_000 + 3_000 + r as u64 * 500)
    );
    let all = StackTrie::build(&analysis, Frames::All);
    assert!(all.node_count() > trie.node_count());
    let text = trie.text(0.0, 100);
    assert!(text.contains("views.py:23"), "{text}");
    let speedscope: Value = serde_json::from_str(&trie.speedscope("shop")).unwrap();
    assert_eq!(speedscope["profiles"].as_array().unwrap().len(), 2);
    // a record keeps the trie as its two collapsed exports: they give the same tree back
    let again = StackTrie::from_folded(&calls, &time);
    assert_eq!(
        serde_json::to_value(again.tree()).unwrap(),
        serde_json::to_value(trie.tree()).unwrap()
    );
}

#[test]
fn bad_input_loses_only_itself() {
    let good = shop(6, 2);
    let mut text = String::new();
    text.push_str(&good);
    text.push('\n');
    text.push_str("{\"resourceSpans\": [ {\"scopeSpans\": [ {\"spans\": [ {\"traceId\": 12\n"); // truncated
    text.push_str("not json at all\n");
    text.push_str("{\"resourceSpans\": \"wrong type\"}\n");
    // a span with a wrong type among good ones
    let mut doc: Value = serde_json::from_str(&shop(6, 2)).unwrap();
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array_mut()
        .unwrap()
        .push(json!({"traceId": ["x"], "spanId": 5}));
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array_mut()
        .unwrap()
        .push(json!({"traceId": "zz", "spanId": "0000000000000001"}));
    text.push_str(&doc.to_string());
    text.push('\n');
    // deep nesting
    text.push_str(&"[".repeat(100_000));
    text.push('\n');
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(b"{\"resourceSpans\": [], \"x\": \"\xff\xfe\"}\n");
    let mut ingest = Ingest::new();
    ingest.add_json_reader(&bytes[..], "mixed.jsonl").unwrap();
    let c = &ingest.coverage;
    let per_doc = (1 + 1 + 6) + (1 + 1) + (1 + 2);
    assert_eq!(c.spans as usize, 2 * per_doc + 2);
    assert_eq!(c.rejected_spans, 2);
    assert_eq!(c.rejected_lines, 4);
    assert_eq!(c.lossy_lines, 1);
    assert!(!c.problems.is_empty());
    assert!(
        c.problems.iter().any(|p| p.contains("mixed.jsonl:2")),
        "{:?}",
        c.problems
    );
}

#[test]
fn one_pretty_printed_document_and_gzip_and_base64_ids() {
    let doc: Value = serde_json::from_str(&shop(6, 2)).unwrap();
    let pretty = serde_json::to_string_pretty(&doc).unwrap();
    let mut ingest = Ingest::new();
    ingest
        .add_json_reader(pretty.as_bytes(), "pretty.json")
        .unwrap();
    assert_eq!(ingest.coverage.spans, 13);
    assert_eq!(ingest.coverage.rejected_lines, 0);

    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(pretty.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let mut ingest = Ingest::new();
    ingest.add_json_reader(&gz[..], "pretty.json.gz").unwrap();
    assert_eq!(ingest.coverage.spans, 13);

    // ids in base64, kinds and 64-bit numbers in their other spellings
    let text = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[
      {"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXQ=","name":"root","kind":"SPAN_KIND_SERVER","startTimeUnixNano":1,"endTimeUnixNano":"2"}]}]}]}"#;
    let mut ingest = Ingest::new();
    assert!(ingest.add_json_text(text, "b64"));
    assert_eq!(ingest.spans.len(), 1);
    assert_eq!(ingest.spans[0].trace_id, 0x5B8EFFF798038103D269B633813FC60C);
    assert_eq!(ingest.spans[0].span_id, 0xEEE19B7EC3C1B174);
}

mod property {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Any bytes: no panic, and every line is either read or counted as rejected.
        #[test]
        fn any_bytes_are_read_or_rejected(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            let mut ingest = Ingest::new();
            let _ = ingest.add_json_reader(&bytes[..], "fuzz");
            let _ = ingest.add_protobuf(&bytes);
            let _ = analyze(&ingest, &Options::default());
        }

        /// A real document cut anywhere: no panic; the cut line is rejected.
        #[test]
        fn truncated_documents(cut in 0usize..2000) {
            let text = shop(5, 2);
            let cut = cut.min(text.len());
            let mut ingest = Ingest::new();
            let _ = ingest.add_json_reader(&text.as_bytes()[..cut], "cut");
            let _ = analyze(&ingest, &Options::default());
        }
    }
}

#[test]
fn deep_nesting_inside_attribute_values_never_overflows_the_stack() {
    let span = |value: String| {
        format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"x","attributes":[{{"key":"k","value":{value}}}]}}]}}]}}]}}"#
        )
    };
    let n = 200_000;
    // a kvlist kiln ignores: skipped whatever its depth
    let kvlist = span(format!(
        r#"{{"kvlistValue":{}{}}}"#,
        "[".repeat(n),
        "]".repeat(n)
    ));
    // an array kiln reads: refused past serde_json's recursion limit, with a clear problem
    let array = span(format!(
        r#"{{"arrayValue":{{"values":[{}{}]}}}}"#,
        r#"{"arrayValue":{"values":["#.repeat(n),
        "]}}".repeat(n)
    ));
    let mut ingest = Ingest::new();
    ingest
        .add_json_reader(format!("{kvlist}\n{array}\n").as_bytes(), "deep")
        .unwrap();
    assert_eq!(ingest.spans.len(), 1);
    assert_eq!(ingest.coverage.rejected_lines, 1);
    assert!(
        ingest.coverage.problems[0].contains("recursion limit"),
        "{:?}",
        ingest.coverage.problems
    );
}

#[test]
fn ignore_patterns_leave_calls_out_of_the_findings_only() {
    let text = shop(7, 3);
    let by_frame = Options {
        ignore_frames: vec!["/srv/shop/views.py:23".into()],
        ..Options::default()
    };
    let a = analyze(&ingest(&text), &by_frame);
    let kinds: Vec<FindingKind> = a.summary.findings.iter().map(|f| f.example.kind).collect();
    assert_eq!(
        kinds,
        [FindingKind::Redundant],
        "the loop's line is ignored"
    );
    assert_eq!(a.summary.ignored_calls, 7);
    assert_eq!(
        a.summary.db_calls,
        1 + 7 + 1 + 3,
        "ignored calls are still counted"
    );
    // any frame, library frames included
    let by_library = Options {
        ignore_frames: vec!["dispatch".into()],
        ..Options::default()
    };
    assert!(analyze(&ingest(&text), &by_library)
        .summary
        .findings
        .is_empty());
    let by_sql = Options {
        ignore_sql: vec!["SELECT value FROM settings *".into()],
        ..Options::default()
    };
    let a = analyze(&ingest(&text), &by_sql);
    let kinds: Vec<FindingKind> = a.summary.findings.iter().map(|f| f.example.kind).collect();
    assert_eq!(kinds, [FindingKind::NPlusOne]);
    assert_eq!(
        StackTrie::build(&a, Frames::App).calls(),
        12,
        "the trie keeps them"
    );
}

#[test]
fn a_protobuf_string_that_is_not_utf8_loses_only_its_bytes_not_the_batch() {
    use kiln_queries::ingest::proto;
    use prost::Message as _;
    let kv = |key: &[u8], value: &[u8]| proto::KeyValue {
        key: key.to_vec(),
        value: Some(proto::AnyValue {
            value: Some(proto::any_value::Value::StringValue(value.to_vec())),
        }),
    };
    let span = |id: u8, name: &[u8], statement: &[u8]| proto::Span {
        trace_id: vec![1; 16],
        span_id: vec![id; 8],
        name: name.to_vec(),
        kind: 3,
        start_time_unix_nano: 1_000,
        end_time_unix_nano: 2_000,
        attributes: vec![
            kv(b"db.system", b"postgresql"),
            kv(b"db.statement", statement),
        ],
        ..Default::default()
    };
    let request = proto::ExportTraceServiceRequest {
        resource_spans: vec![proto::ResourceSpans {
            resource: Some(proto::Resource {
                attributes: vec![kv(b"service.name", b"svc")],
            }),
            scope_spans: vec![proto::ScopeSpans {
                scope: None,
                spans: vec![
                    span(1, b"SELECT \xff", b"SELECT 1 WHERE x = '\xfe'"),
                    span(2, b"SELECT", b"SELECT 2"),
                ],
            }],
        }],
    };
    let mut ingest = Ingest::new();
    ingest
        .add_protobuf(&request.encode_to_vec())
        .expect("the batch is read");
    assert_eq!(ingest.spans.len(), 2);
    assert_eq!(ingest.spans[0].name, "SELECT \u{fffd}");
    let text = ingest.spans[0]
        .db
        .as_ref()
        .unwrap()
        .text
        .as_deref()
        .unwrap();
    assert!(text.contains('\u{fffd}'), "{text}");
}

/// A Java stack as the span-stacktrace extension writes it (leaf first): the agent, the
/// JDBC driver, a reflective accessor (`accessor`), Spring's proxy, then the application's
/// frames under a Spring vendor prefix, then the server.
fn petclinic_stack(accessor: &str, repo_line: u32, controller_line: u32) -> String {
    format!(
        "\tat io.opentelemetry.javaagent.shaded.instrumentation.api.instrumenter.Instrumenter.doEnd(Instrumenter.java:325)
\tat org.postgresql.jdbc.PgPreparedStatement.executeQuery(PgPreparedStatement.java:134)
\tat org.hibernate.sql.exec.internal.JdbcSelectExecutorStandardImpl.executeQuery(JdbcSelectExecutorStandardImpl.java:200)
\tat {accessor}.invoke(Unknown Source)
\tat org.springframework.samples.petclinic.owner.OwnerRepository$$SpringCGLIB$$0.findPets(<generated>)
\tat org.springframework.samples.petclinic.owner.PetLoader.load(PetLoader.java:{repo_line})
\tat org.springframework.samples.petclinic.owner.OwnerController.showOwners(OwnerController.java:{controller_line})
\tat org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:885)
\tat org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)
\tat java.base/java.lang.Thread.run(Thread.java:840)"
    )
}

#[test]
fn an_app_under_a_vendor_prefix_is_found_at_its_line_and_jit_variants_are_one_finding() {
    let mut traces = Vec::new();
    // 20 requests; the JVM swaps the reflective accessor for a generated one after 15 calls.
    for r in 0..20u128 {
        let mut t = Trace::new(100 + r);
        let root = t.server("/owners");
        let accessor = if r < 15 {
            "jdk.internal.reflect.NativeMethodAccessorImpl"
        } else {
            "jdk.internal.reflect.GeneratedMethodAccessor7"
        };
        let stack = petclinic_stack(accessor, 48, 171);
        for pet in 0..6 {
            t.query(
                root,
                &format!("SELECT * FROM pets WHERE owner_id = {pet}"),
                Some(&stack),
                100_000,
            );
        }
        traces.push(t);
    }
    let a = analyze(&ingest(&document(&traces, "java")), &Options::default());
    assert_eq!(a.summary.findings.len(), 1, "{:#?}", a.summary.findings);
    let f = &a.summary.findings[0];
    assert_eq!(f.example.kind, FindingKind::NPlusOne);
    assert_eq!(f.requests, 20);
    assert!(!f.example.no_app_frame);
    let site: Vec<String> = f.example.site.iter().map(|s| s.location()).collect();
    assert_eq!(site, ["OwnerController.java:171", "PetLoader.java:48"]);
    assert!(
        f.example.evidence.ends_with("from PetLoader.java:48"),
        "{}",
        f.example.evidence
    );
    assert_eq!(
        (a.summary.calls_with_app_frame, a.summary.calls_with_stack),
        (120, 120)
    );
    // The DB stack trie reaches the controller in two levels, not thirty.
    let trie = StackTrie::build(&a, Frames::App);
    let text = trie.text(0.0, 10);
    assert!(text.contains("OwnerController.showOwners"), "{text}");
    assert!(!text.contains("ApplicationFilterChain"), "{text}");
}

#[test]
fn a_stack_without_an_application_frame_says_so_and_app_package_names_the_code() {
    let stack = "\tat io.opentelemetry.javaagent.Instrumenter.doEnd(Instrumenter.java:325)
\tat org.postgresql.jdbc.PgStatement.executeQuery(PgStatement.java:10)
\tat org.springframework.jdbc.core.JdbcTemplate.query(JdbcTemplate.java:400)
\tat org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)";
    let mut t = Trace::new(7);
    let root = t.server("/x");
    for i in 0..6 {
        t.query(
            root,
            &format!("SELECT a FROM b WHERE id = {i}"),
            Some(stack),
            100_000,
        );
    }
    let doc = document(&[t], "java");
    let a = analyze(&ingest(&doc), &Options::default());
    let f = &a.summary.findings[0].example;
    assert!(f.no_app_frame);
    assert!(f.site.is_empty());
    // The nearest frame that is not the agent's, and what to do.
    assert!(
        f.evidence
            .contains("PgStatement.executeQuery (PgStatement.java:10)")
            && f.evidence.contains("no application frame")
            && f.evidence.contains("--app-package"),
        "{}",
        f.evidence
    );
    assert_eq!(
        (a.summary.calls_with_app_frame, a.summary.calls_with_stack),
        (0, 6)
    );
    // The user says which code is theirs.
    let a = analyze(
        &ingest(&doc),
        &Options {
            app_packages: vec!["org.springframework.jdbc".into()],
            ..Default::default()
        },
    );
    let f = &a.summary.findings[0].example;
    assert!(!f.no_app_frame);
    assert_eq!(
        f.site[0].function,
        "org.springframework.jdbc.core.JdbcTemplate.query"
    );
}

#[test]
fn ignoring_the_agents_frames_does_not_ignore_every_call() {
    let mut t = Trace::new(8);
    let root = t.server("/owners");
    let stack = petclinic_stack("jdk.internal.reflect.NativeMethodAccessorImpl", 48, 171);
    for i in 0..6 {
        t.query(
            root,
            &format!("SELECT * FROM pets WHERE owner_id = {i}"),
            Some(&stack),
            100_000,
        );
    }
    let doc = document(&[t], "java");
    let a = analyze(
        &ingest(&doc),
        &Options {
            ignore_frames: vec!["io.opentelemetry.*".into()],
            ..Default::default()
        },
    );
    assert_eq!(a.summary.ignored_calls, 0);
    assert_eq!(a.summary.findings.len(), 1);
    let a = analyze(
        &ingest(&doc),
        &Options {
            ignore_frames: vec!["*PetLoader.load".into()],
            ..Default::default()
        },
    );
    assert_eq!(a.summary.ignored_calls, 6);
}

#[test]
fn the_same_row_loaded_twice_from_two_methods_is_one_redundant_finding_naming_both() {
    let mut t = Trace::new(9);
    let root = t.server("/owners/{id}");
    let first = python_stack(&[
        ("/srv/shop/views.py", 10, "owner"),
        ("/srv/shop/repo.py", 5, "load_owner"),
    ]);
    let second = python_stack(&[
        ("/srv/shop/views.py", 12, "owner"),
        ("/srv/shop/pets.py", 30, "owner_of"),
    ]);
    t.query(
        root,
        "SELECT * FROM owners WHERE id = 7",
        Some(&first),
        200_000,
    );
    t.query(
        root,
        "SELECT * FROM owners WHERE id = 7",
        Some(&second),
        200_000,
    );
    // A different row from the second site is not a repeat.
    t.query(
        root,
        "SELECT * FROM owners WHERE id = 8",
        Some(&second),
        200_000,
    );
    let a = analysis_of(&[t]);
    let redundant: Vec<_> = a
        .summary
        .findings
        .iter()
        .filter(|f| f.example.kind == FindingKind::Redundant)
        .collect();
    assert_eq!(redundant.len(), 1, "{:#?}", a.summary.findings);
    let f = &redundant[0].example;
    assert_eq!(f.calls, 2);
    assert!(
        f.evidence.contains("/srv/shop/repo.py:5") && f.evidence.contains("/srv/shop/pets.py:30"),
        "{}",
        f.evidence
    );
    // The same two calls from one site is the per-site finding, once.
    let mut t = Trace::new(10);
    let root = t.server("/owners/{id}");
    t.query(
        root,
        "SELECT * FROM owners WHERE id = 7",
        Some(&first),
        200_000,
    );
    t.query(
        root,
        "SELECT * FROM owners WHERE id = 7",
        Some(&first),
        200_000,
    );
    let a = analysis_of(&[t]);
    assert_eq!(a.summary.findings.len(), 1);
    assert!(a.summary.findings[0]
        .example
        .evidence
        .contains("ran 2 times from /srv/shop/repo.py:5"));
}

#[test]
fn db_spans_whose_server_span_was_lost_are_one_request_per_trace_not_routes_of_sql() {
    let mut t = Trace::new(11);
    // The server span (id 99) was never exported.
    let stack = python_stack(&[("/srv/shop/views.py", 23, "authors")]);
    for i in 0..6 {
        t.span(
            Some(99),
            &format!("SELECT {:032x}", 1000 + i),
            3,
            100_000,
            vec![
                attr("db.system", json!("postgresql")),
                attr(
                    "db.statement",
                    json!(format!("SELECT * FROM b WHERE id = {i}")),
                ),
                attr("code.stacktrace", json!(stack)),
            ],
        );
    }
    let a = analysis_of(&[t]);
    assert_eq!(a.summary.requests_total, 1);
    assert_eq!(a.summary.routes.len(), 1);
    assert_eq!(a.summary.routes[0].route, "(trace without its server span)");
    assert_eq!(a.summary.findings[0].example.kind, FindingKind::NPlusOne);
    assert_eq!(a.summary.findings[0].example.calls, 6);
}

#[test]
fn requests_outside_the_measured_window_are_left_out_and_counted() {
    // A request an application queued before kiln listened, one second before two others.
    let stack = python_stack(&[("/srv/shop/views.py", 23, "authors")]);
    let mut traces = Vec::new();
    for (n, route) in [(1u128, "/startup"), (2, "/authors"), (3, "/authors")] {
        let mut t = Trace::new(n);
        t.clock += (n as u64 - 1) * 1_000_000_000;
        let root = t.server(route);
        for i in 0..6 {
            t.query(
                root,
                &format!("SELECT * FROM b WHERE id = {i}"),
                Some(&stack),
                100_000,
            );
        }
        traces.push(t);
    }
    let text = document(&traces, "python");
    let all = analyze(&ingest(&text), &Options::default());
    assert_eq!(all.summary.requests_total, 3);
    let second = 1_700_000_001_000_000_000;
    let a = analyze(
        &ingest(&text),
        &Options {
            window_ns: Some((second, u64::MAX)),
            ..Default::default()
        },
    );
    assert_eq!(a.summary.requests_total, 2);
    assert_eq!(a.summary.requests_outside_window, 1);
    assert_eq!(a.summary.calls_outside_window, 6);
    assert_eq!(a.summary.db_calls, 12);
    assert_eq!(a.summary.routes.len(), 1);
    assert_eq!(a.summary.routes[0].route, "GET /authors");
    assert_eq!(a.summary.findings[0].requests, 2);
}

#[test]
fn a_fast_loop_that_is_all_of_a_fast_requests_db_time_is_not_high() {
    let stack = python_stack(&[("/srv/shop/views.py", 23, "authors")]);
    let severity = |call_ns: u64| {
        let mut t = Trace::new(12);
        let root = t.server("/authors");
        for i in 0..10 {
            t.query(
                root,
                &format!("SELECT * FROM b WHERE id = {i}"),
                Some(&stack),
                call_ns,
            );
        }
        let a = analysis_of(&[t]);
        format!("{:?}", a.summary.findings[0].example.severity)
    };
    // 0.8 ms in all: medium, though it is all of the request's DB time.
    assert_eq!(severity(80_000), "Medium");
    // 10 ms in all and all of the DB time: high.
    assert_eq!(severity(1_000_000), "High");
}

#[test]
fn an_app_under_a_vendor_wide_prefix_is_learned_from_its_handler_spans() {
    // An application in org.apache.shop: the rules take org.apache.* for Apache's libraries.
    let stack = "\tat io.opentelemetry.javaagent.Instrumenter.doEnd(Instrumenter.java:325)
\tat org.postgresql.jdbc.PgStatement.executeQuery(PgStatement.java:10)
\tat org.apache.shop.data.Orders.lines(Orders.java:31)
\tat org.apache.shop.web.OrderController.list(OrderController.java:20)
\tat org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)";
    let build = |handler: bool| {
        let mut t = Trace::new(13);
        let root = t.server("/orders");
        let parent = if handler {
            // The handler span under the server span, as Spring MVC's instrumentation makes.
            t.span(
                Some(root),
                "OrderController.list",
                1,
                1_000_000,
                vec![
                    attr("code.function", json!("list")),
                    attr(
                        "code.namespace",
                        json!("org.apache.shop.web.OrderController"),
                    ),
                ],
            )
        } else {
            root
        };
        for i in 0..6 {
            t.query(
                parent,
                &format!("SELECT * FROM lines WHERE order_id = {i}"),
                Some(stack),
                100_000,
            );
        }
        analyze(&ingest(&document(&[t], "java")), &Options::default())
    };
    let a = build(true);
    let f = &a.summary.findings[0].example;
    assert!(!f.no_app_frame, "{}", f.evidence);
    assert!(
        f.evidence.ends_with("from Orders.java:31"),
        "{}",
        f.evidence
    );
    assert_eq!(f.site.len(), 2);
    // Without the handler span there is nothing to learn from: said so, not guessed.
    let a = build(false);
    assert!(a.summary.findings[0].example.no_app_frame);
}

/// How two instrumentations of one call place their spans.
#[derive(Clone, Copy, Debug)]
enum Nesting {
    /// the driver's span a child of the ORM's
    Child,
    /// both children of the request's span, the driver's within the ORM's time, each from
    /// its own instrumentation scope (SQLAlchemy's span is never made current)
    Sibling,
}

/// A request of `/authors` whose loop reads `k` books from views.py line 23, each read
/// recorded as SQLAlchemy records it over psycopg2 under `opentelemetry-instrument`: an ORM
/// span with the statement and the stack, and the driver's span of the same statement
/// inside it (with `inner_stack`, the driver's span carries the stack too).
fn orm_over_driver(trace: u128, k: usize, inner_stack: bool, nesting: Nesting) -> Trace {
    let stack = python_stack(&[("/srv/shop/views.py", 23, "authors")]);
    let mut t = Trace::new(trace);
    let root = t.server("/authors");
    for i in 0..k {
        let sql = format!("SELECT title FROM books WHERE author_id = {i}");
        let outer = t.query(root, &sql, Some(&stack), 1_200_000);
        t.spans.last_mut().unwrap()["_scope"] = json!("opentelemetry.instrumentation.sqlalchemy");
        // the driver's span starts inside the ORM's and ends before it
        t.clock -= 1_100_000;
        let parent = match nesting {
            Nesting::Child => outer,
            Nesting::Sibling => root,
        };
        t.query(parent, &sql, inner_stack.then_some(stack.as_str()), 900_000);
        t.spans.last_mut().unwrap()["_scope"] = json!("opentelemetry.instrumentation.psycopg2");
        t.clock += 300_000;
    }
    t
}

#[test]
fn a_statement_two_instrumentations_record_is_one_call() {
    for (inner_stack, nesting) in [
        (false, Nesting::Child),
        (true, Nesting::Child),
        (false, Nesting::Sibling),
        (true, Nesting::Sibling),
    ] {
        let case = format!("inner stack {inner_stack}, {nesting:?}");
        // three reads: under the N+1 threshold of 5, as the app really is; six if counted twice
        let a = analysis_of(&[orm_over_driver(1, 3, inner_stack, nesting)]);
        assert_eq!(a.summary.db_calls, 3, "{case}");
        assert_eq!(a.summary.counted_once.nested_db_spans, 3, "{case}");
        assert!(
            a.summary.findings.is_empty(),
            "{case}: {:?}",
            a.summary.findings
        );
        // the inner span's timing: 0.9 ms a call
        assert_eq!(
            a.summary.worst_requests[0].db_time_ns,
            3 * 900_000,
            "{case}"
        );
        // six reads are an N+1 of six, at the loop's line
        let a = analysis_of(&[orm_over_driver(2, 6, inner_stack, nesting)]);
        assert_eq!(a.summary.db_calls, 6, "{case}");
        let f = &a.summary.findings[0].example;
        assert_eq!((f.kind, f.calls), (FindingKind::NPlusOne, 6), "{case}");
        assert!(f.evidence.contains("views.py:23"), "{case}: {}", f.evidence);
    }
}

#[test]
fn parallel_calls_of_one_instrumentation_stay_calls_of_their_own() {
    // six reads at once from one loop (asyncio.gather): overlapping, one scope, six calls
    let stack = python_stack(&[("/srv/shop/views.py", 23, "authors")]);
    let mut t = Trace::new(9);
    let root = t.server("/authors");
    for i in 0..6u64 {
        let sql = format!("SELECT title FROM books WHERE author_id = {i}");
        // each starts 0.1 ms after the one before and ends before it: within its time
        let runs = 5_000_000 - i * 500_000;
        t.query(root, &sql, Some(&stack), runs);
        t.clock -= runs + 1000 - 100_000;
    }
    let a = analysis_of(&[t]);
    assert_eq!(a.summary.db_calls, 6);
    assert_eq!(a.summary.counted_once.nested_db_spans, 0);
}

/// A request of `/home` making `distinct` different reads from lines of their own, and one
/// read `again` times more from one line.
fn home(trace: u128, distinct: usize, again: usize) -> Trace {
    let mut t = Trace::new(trace);
    let root = t.server("/home");
    for i in 0..distinct {
        let stack = python_stack(&[("/srv/shop/home.py", 10 + i as u32, "home")]);
        let table = char::from(b'a' + i as u8);
        let sql = format!("SELECT v FROM widget_{table} WHERE id = 1");
        t.query(root, &sql, Some(&stack), 200_000);
    }
    let stack = python_stack(&[("/srv/shop/home.py", 90, "home")]);
    for _ in 0..again {
        t.query(
            root,
            "SELECT value FROM settings WHERE name = 'currency'",
            Some(&stack),
            200_000,
        );
    }
    t
}

#[test]
fn spans_received_twice_are_counted_once() {
    // every span exported twice (an SDK set up twice): twelve different reads, one each
    let once = home(1, 12, 1);
    let twice = Trace {
        spans: [once.spans.clone(), once.spans.clone()].concat(),
        ..Trace::new(1)
    };
    let a = analysis_of(&[twice]);
    assert_eq!(a.summary.requests_total, 1);
    assert_eq!(a.summary.db_calls, 13);
    assert_eq!(a.summary.counted_once.duplicate_spans, 14);
    assert!(a.summary.findings.is_empty(), "{:?}", a.summary.findings);
    // the same read made twice for real is redundant: two calls, not four
    let repeated = home(2, 12, 2);
    let twice = Trace {
        spans: [repeated.spans.clone(), repeated.spans.clone()].concat(),
        ..Trace::new(2)
    };
    let a = analysis_of(&[twice]);
    assert_eq!(a.summary.db_calls, 14);
    let f = &a.summary.findings[0].example;
    assert_eq!((f.kind, f.calls), (FindingKind::Redundant, 2));
}

/// The trace of an `/authors` request whose server span never arrived: `k` reads from
/// `function` at views.py `line` under a handler span that did.
fn without_server_span(trace: u128, k: usize, function: &str, line: u32) -> Trace {
    let stack = python_stack(&[("/srv/shop/views.py", line, function)]);
    let mut t = Trace::new(trace);
    // span 1 would be the server span: the handler is its child
    t.next_span = 2;
    let handler = t.span(Some(1), "authors", 1, 5_000_000, vec![]);
    for i in 0..k {
        let sql = format!("SELECT title FROM books WHERE author_id = {i}");
        t.query(handler, &sql, Some(&stack), 100_000);
    }
    t
}

#[test]
fn a_trace_without_its_server_span_joins_its_loops_finding_or_is_left_out() {
    let mut traces: Vec<Trace> = (1..=2)
        .map(|n| orm_over_driver(n, 6, false, Nesting::Sibling))
        .collect();
    // the same loop, cut from its server span at the end of the window
    traces.push(without_server_span(3, 6, "authors", 23));
    // another loop that only a cut trace shows
    traces.push(without_server_span(4, 8, "feed", 77));
    let a = analysis_of(&traces);
    assert_eq!(a.summary.requests_with_server_span, Some(2));
    assert_eq!(a.summary.requests_without_server_span, 2);
    assert_eq!(a.summary.db_calls, 12 + 6 + 8);
    assert_eq!(
        (
            a.summary.orphan_findings_joined,
            a.summary.orphan_findings_left_out
        ),
        (1, 1)
    );
    assert_eq!(a.summary.findings.len(), 1, "{:?}", a.summary.findings);
    let f = &a.summary.findings[0];
    assert_eq!(f.example.route, "GET /authors");
    assert_eq!(f.requests, 3);
    assert!(
        f.example.evidence.contains("views.py:23"),
        "{}",
        f.example.evidence
    );
    // with no request's server span at all, the traces are judged as they are
    let a = analyze(
        &ingest(&document(
            &[without_server_span(5, 8, "feed", 77)],
            "python",
        )),
        &Options::default(),
    );
    assert_eq!(a.summary.requests_with_server_span, Some(0));
    assert_eq!(a.summary.findings.len(), 1);
}

/// Requests to /feed (5 ms each), the i-th looping `calls[i]` times over one statement
/// (0.2 ms a call: too little DB time for a loop's severity to rise with it).
fn feed_loops(calls: &[usize]) -> Vec<Trace> {
    let stack = python_stack(&[("/srv/shop/views.py", 31, "feed")]);
    calls
        .iter()
        .enumerate()
        .map(|(n, &k)| {
            let mut t = Trace::new(500 + n as u128);
            let root = t.server("/feed");
            for i in 0..k {
                t.query(
                    root,
                    &format!("SELECT body FROM posts WHERE id = {i}"),
                    Some(&stack),
                    200_000,
                );
            }
            t
        })
        .collect()
}

/// A loop's severity is its typical request's: one request with 30 calls (HIGH on its own)
/// beside four with 8 (MEDIUM) is a MEDIUM loop; in most requests at 30 it is HIGH.
#[test]
fn a_loops_severity_is_its_typical_requests_not_its_worst() {
    let f = |calls: &[usize]| analysis_of(&feed_loops(calls)).summary.findings[0].clone();
    let one_worst = f(&[30, 8, 8, 8, 8]);
    assert_eq!(one_worst.requests, 5);
    assert_eq!(one_worst.calls_max, 30);
    assert_eq!(
        one_worst.example.severity,
        kiln_queries::analyze::Severity::Medium
    );
    assert_eq!(
        f(&[30, 30, 30, 8, 8]).example.severity,
        kiln_queries::analyze::Severity::High
    );
    // the analysis keeps the requests' time a finding's cost is a share of
    let a = analysis_of(&feed_loops(&[8, 8]));
    assert_eq!(a.summary.request_time_ns, Some(10_000_000));
}
