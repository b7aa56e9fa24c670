//! A browser's HAR recording becomes a plan that kiln checks and runs as recorded.

use std::time::Duration;

use kiln_load::scenario::{CheckKind, Think};
use kiln_plan::har::to_plan;

/// Three requests as Chrome saves them: a page, its logo (static), a login whose body holds
/// text that looks like a template, and a call to another origin 1.5 s later.
const HAR: &str = r#"{"log": {"version": "1.2", "creator": {"name": "WebInspector", "version": "537.36"},
 "entries": [
  {"startedDateTime": "2026-11-24T02:00:00.000Z", "time": 100,
   "request": {"method": "GET", "url": "http://127.0.0.1:8080/shop?x=1#top", "httpVersion": "HTTP/1.1",
     "headers": [{"name": "Host", "value": "127.0.0.1:8080"}, {"name": "Accept", "value": "text/html"},
                 {"name": "Cookie", "value": "sid=old"}, {"name": ":authority", "value": "x"}]},
   "response": {"status": 200, "content": {"mimeType": "text/html"}}, "_resourceType": "document"},
  {"startedDateTime": "2026-11-24T02:00:00.050Z", "time": 5,
   "request": {"method": "GET", "url": "http://127.0.0.1:8080/logo.png", "headers": []},
   "response": {"status": 200, "content": {"mimeType": "image/png"}}, "_resourceType": "image"},
  {"startedDateTime": "2026-11-24T02:00:01.100Z", "time": 400,
   "request": {"method": "POST", "url": "http://127.0.0.1:8080/login", "headers": [],
     "postData": {"mimeType": "application/json", "text": "{\"user\":\"ann\",\"note\":\"{{not a var}}\"}"}},
   "response": {"status": 302, "content": {}}},
  {"startedDateTime": "2026-11-24T02:00:03.000Z", "time": 20,
   "request": {"method": "GET", "url": "http://127.0.0.1:9090/api/cart", "headers": [{"name": "X-Trace", "value": "a\"b\tc"}, {"name": "X-Broken", "value": "x\ny"}]},
   "response": {"status": 200, "content": {"mimeType": "application/json"}}}
 ]}}"#;

#[test]
fn a_recording_becomes_a_plan_that_checks() {
    let made = to_plan(HAR, false).unwrap();
    // a header value with a line break cannot be sent: left out
    assert!(!made.yaml.contains("X-Broken"), "{}", made.yaml);
    assert_eq!((made.requests, made.static_left_out), (3, 1));
    let plan = kiln_plan::parse(&made.yaml, "recorded.yaml", std::path::Path::new("."), &[])
        .unwrap_or_else(|e| panic!("{e}\n{}", made.yaml));
    let w = &plan.workload;
    assert_eq!(w.origins.len(), 2);
    assert_eq!(
        w.names.to_vec(),
        ["GET /shop", "POST /login", "GET /api/cart"]
    );
    let steps = &w.scenarios[0].steps;
    // The page: its query kept, its fragment and the connection's own headers dropped.
    assert_eq!(steps[0].path.as_literal().unwrap(), "/shop?x=1");
    let headers: Vec<&str> = steps[0].headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(headers, ["accept"]);
    // The user's pauses: 1.1 s - 0.1 s after the page, 3.0 - 1.5 s after the login.
    assert_eq!(steps[0].think, Think::Constant(Duration::from_millis(1000)));
    assert_eq!(steps[1].think, Think::Constant(Duration::from_millis(1500)));
    assert_eq!(steps[2].think, Think::None);
    // The body is sent as recorded: `{{` stays text.
    assert_eq!(
        steps[1].body.as_literal().unwrap(),
        r#"{"user":"ann","note":"{{not a var}}"}"#
    );
    assert!(
        steps[1]
            .headers
            .iter()
            .any(|(n, v)| n == "content-type"
                && v.as_literal().as_deref() == Some("application/json"))
    );
    assert!(matches!(&steps[1].checks[0].kind, CheckKind::Status(s) if s == &[302]));
    assert_eq!(steps[2].origin, 1);
    let trace = &steps[2].headers[0].1;
    assert_eq!(trace.as_literal().unwrap(), "a\"b\tc");
}

#[test]
fn static_files_are_kept_when_asked_and_bad_files_say_why() {
    assert_eq!(to_plan(HAR, true).unwrap().requests, 4);
    assert!(to_plan("{}", false).unwrap_err().contains("not a HAR"));
    assert!(to_plan(r#"{"log":{"entries":[]}}"#, false)
        .unwrap_err()
        .contains("no requests"));
}

#[test]
fn a_path_holding_a_scheme_separator_is_still_a_path() {
    // proptest's find: `/://` was read as an absolute URL with no scheme
    let har = serde_json::json!({"log": {"entries": [{
        "request": {"method": "GET", "url": "http://127.0.0.1:1/://x", "headers": []},
        "response": {"status": 200}
    }]}});
    let made = to_plan(&har.to_string(), false).unwrap();
    let plan = kiln_plan::parse(&made.yaml, "p.yaml", std::path::Path::new("."), &[]).unwrap();
    let step = &plan.workload.scenarios[0].steps[0];
    assert_eq!(step.path.as_literal().unwrap(), "/://x");
}

proptest::proptest! {
    /// Whatever text a recording holds, the plan made from it parses back to the same URL,
    /// header and body: nothing recorded changes the plan's structure.
    #[test]
    fn recorded_text_stays_text(path in "/[a-z0-9/{}$:#\\[\\]'\" -]{0,30}", body in "\\PC{0,40}", header in "[ -~]{0,20}") {
        let path = path.replace(['#', ' '], "_");
        let har = serde_json::json!({"log": {"entries": [{
            "request": {"method": "POST", "url": format!("http://127.0.0.1:1{path}"),
                "headers": [{"name": "X-Any", "value": header}],
                "postData": {"mimeType": "text/plain", "text": body}},
            "response": {"status": 200}
        }]}});
        let made = to_plan(&har.to_string(), false).unwrap();
        let plan = kiln_plan::parse(&made.yaml, "p.yaml", std::path::Path::new("."), &[]).unwrap();
        let step = &plan.workload.scenarios[0].steps[0];
        let want = if path.is_empty() { "/".to_string() } else { path.clone() };
        proptest::prop_assert_eq!(step.path.as_literal().unwrap(), want);
        let want_body = if body.is_empty() { None } else { Some(body.clone()) };
        proptest::prop_assert_eq!(step.body.as_literal().filter(|b| !b.is_empty()), want_body);
        let any = step.headers.iter().find(|(n, _)| n == "x-any").unwrap();
        proptest::prop_assert_eq!(any.1.as_literal().unwrap(), header);
    }
}

/// A page's recording also calls analytics and a cloud's metadata address: only the main
/// host's requests are kept (the others named in a comment), `--hosts` keeps another, and a
/// link-local address is never kept, even with `*`.
#[test]
fn other_hosts_are_left_out_unless_asked_and_metadata_never() {
    let har = r#"{"log": {"entries": [
      {"request": {"method": "GET", "url": "https://shop.example.com/", "headers": []}},
      {"request": {"method": "POST", "url": "https://analytics.example.net/collect", "headers": []}},
      {"request": {"method": "GET", "url": "http://169.254.169.254/latest/meta-data/", "headers": []}},
      {"request": {"method": "GET", "url": "https://shop.example.com:8443/api", "headers": []}}
    ]}}"#;
    let made = to_plan(har, false).unwrap();
    assert_eq!(made.requests, 2, "{}", made.yaml);
    assert_eq!(
        made.other_hosts_left_out,
        [
            ("http://169.254.169.254".to_string(), 1),
            ("https://analytics.example.net".to_string(), 1)
        ]
    );
    assert!(made
        .yaml
        .contains("#   \"https://analytics.example.net\" (1)"));
    let with = |hosts: &[&str]| {
        kiln_plan::har::to_plan_with(
            har,
            &kiln_plan::har::HarOptions {
                keep_static: false,
                hosts: hosts.iter().map(|h| h.to_string()).collect(),
            },
        )
        .unwrap()
    };
    let analytics = with(&["Analytics.Example.NET"]);
    assert_eq!(analytics.requests, 3);
    assert!(analytics
        .yaml
        .contains("https://analytics.example.net/collect"));
    let all = with(&["*"]);
    assert_eq!(all.requests, 3);
    assert!(!all.yaml.contains("url: \"http://169.254.169.254"));
    let metadata_first = r#"{"log": {"entries": [
      {"request": {"method": "GET", "url": "http://169.254.169.254/latest/", "headers": []}}]}}"#;
    assert!(to_plan(metadata_first, false)
        .unwrap_err()
        .contains("link-local"));
}

/// A HAR that starts with a byte-order mark was refused ("expected value at line 1 column
/// 1"); a body with C1 controls and DEL was written raw into the plan, which YAML forbids.
#[test]
fn a_byte_order_mark_and_c1_controls_make_a_plan_that_checks() {
    let har = "\u{feff}{\"log\": {\"entries\": [{\"request\": {\"method\": \"POST\", \
               \"url\": \"http://127.0.0.1:8080/x\", \"headers\": [], \"postData\": \
               {\"mimeType\": \"text/plain\", \"text\": \"a\\u0088b\\u007fc\\u0085d\"}}}]}}";
    let made = to_plan(har, false).unwrap();
    assert_eq!(made.requests, 1);
    assert!(
        made.yaml.contains(r"a\u0088b\u007Fc\u0085d"),
        "{}",
        made.yaml
    );
    assert!(!made.yaml.contains('\u{88}'));
    kiln_plan::parse(&made.yaml, "recorded.yaml", std::path::Path::new("."), &[])
        .unwrap_or_else(|e| panic!("{e}\n{}", made.yaml));
}
