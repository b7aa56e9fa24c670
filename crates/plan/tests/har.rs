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
    assert!(to_plan("{}", false)
        .unwrap_err()
        .to_string()
        .contains("not a HAR"));
    assert!(matches!(
        to_plan(r#"{"log":{"entries":[]}}"#, false),
        Err(kiln_plan::har::HarError::NoRequests)
    ));
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
        .to_string()
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

/// A form recorded as `postData.params` (HAR 1.2's alternative to `text`, as Chrome saves
/// many form posts) was replayed with a form Content-Type and an empty body: it is sent as
/// the browser sent it, URL-encoded or multipart with the recorded boundary.
#[test]
fn a_form_recorded_as_params_is_sent_as_the_browser_sent_it() {
    let har = serde_json::json!({"log": {"entries": [
        {"request": {"method": "POST", "url": "http://127.0.0.1:1/login",
            "headers": [{"name": "Content-Type", "value": "application/x-www-form-urlencoded"}],
            "postData": {"mimeType": "application/x-www-form-urlencoded",
                "params": [{"name": "user", "value": "ann smith"}, {"name": "pass", "value": "a&b=c"},
                           {"name": "next", "value": "/cart?x=1"}]}},
         "response": {"status": 302}},
        {"request": {"method": "POST", "url": "http://127.0.0.1:1/upload",
            "headers": [{"name": "content-type", "value": "multipart/form-data; boundary=----WebKitFormBoundaryAbC"}],
            "postData": {"mimeType": "multipart/form-data; boundary=----WebKitFormBoundaryAbC",
                "params": [{"name": "title", "value": "holiday"},
                           {"name": "photo", "fileName": "a\"b.jpg", "contentType": "image/jpeg"}]}},
         "response": {"status": 200}},
        {"request": {"method": "POST", "url": "http://127.0.0.1:1/upload2", "headers": [],
            "postData": {"mimeType": "multipart/form-data", "params": [{"name": "k", "value": "v"}]}},
         "response": {"status": 200}}
    ]}});
    let made = to_plan(&har.to_string(), false).unwrap();
    let plan = kiln_plan::parse(&made.yaml, "p.yaml", std::path::Path::new("."), &[])
        .unwrap_or_else(|e| panic!("{e}\n{}", made.yaml));
    let steps = &plan.workload.scenarios[0].steps;
    let header = |i: usize| {
        let (_, v) = steps[i]
            .headers
            .iter()
            .find(|(n, _)| n == "content-type")
            .unwrap();
        v.as_literal().unwrap()
    };
    assert_eq!(
        steps[0].body.as_literal().unwrap(),
        "user=ann+smith&pass=a%26b%3Dc&next=%2Fcart%3Fx%3D1"
    );
    assert_eq!(header(0), "application/x-www-form-urlencoded");
    assert_eq!(
        steps[1].body.as_literal().unwrap(),
        "------WebKitFormBoundaryAbC\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nholiday\r\n\
         ------WebKitFormBoundaryAbC\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"a_b.jpg\"\r\n\
         Content-Type: image/jpeg\r\n\r\n\r\n------WebKitFormBoundaryAbC--\r\n"
    );
    assert_eq!(
        header(1),
        "multipart/form-data; boundary=----WebKitFormBoundaryAbC"
    );
    // no boundary recorded: kiln's own, named in the Content-Type it sends
    let own = header(2);
    let boundary = own.strip_prefix("multipart/form-data; boundary=").unwrap();
    let body = steps[2].body.as_literal().unwrap();
    assert!(body.starts_with(&format!("--{boundary}\r\n")), "{body}");
    assert!(body.ends_with(&format!("--{boundary}--\r\n")), "{body}");
}

/// A recorder that types every entry "other" (as some proxies do) kept its style sheets,
/// scripts and images: they are known by their response type or extension then; an entry
/// typed as the page's own call is never static, whatever its path.
#[test]
fn static_files_typed_other_are_known_by_type_or_extension() {
    let entry = |url: &str, kind: &str, mime: &str| {
        serde_json::json!({"request": {"method": "GET", "url": url, "headers": []},
            "response": {"status": 200, "content": {"mimeType": mime}}, "_resourceType": kind})
    };
    let har = serde_json::json!({"log": {"entries": [
        entry("http://127.0.0.1:1/", "other", "text/html"),
        entry("http://127.0.0.1:1/site.css", "other", ""),
        entry("http://127.0.0.1:1/app.js?v=3", "other", ""),
        entry("http://127.0.0.1:1/img/1", "other", "image/gif"),
        entry("http://127.0.0.1:1/logo.JPG", "other", "application/octet-stream"),
        entry("http://127.0.0.1:1/api/config.js", "xhr", "application/javascript"),
    ]}});
    let made = to_plan(&har.to_string(), false).unwrap();
    assert_eq!(
        (made.requests, made.static_left_out),
        (2, 4),
        "{}",
        made.yaml
    );
    assert!(
        made.yaml.contains("url: \"/api/config.js\""),
        "{}",
        made.yaml
    );
}

/// A WebSocket handshake was replayed as a GET checked for 101, so every check failed: it is
/// left out and said so.
#[test]
fn websocket_handshakes_are_left_out_and_named() {
    let har = serde_json::json!({"log": {"entries": [
        {"request": {"method": "GET", "url": "http://127.0.0.1:1/", "headers": []},
         "response": {"status": 200}},
        {"request": {"method": "GET", "url": "http://127.0.0.1:1/socket",
            "headers": [{"name": "Upgrade", "value": "websocket"}]},
         "response": {"status": 101}, "_resourceType": "websocket"},
        {"request": {"method": "GET", "url": "http://127.0.0.1:1/live",
            "headers": [{"name": "upgrade", "value": "WebSocket"}]},
         "response": {"status": 0}}
    ]}});
    let made = to_plan(&har.to_string(), false).unwrap();
    assert_eq!((made.requests, made.websockets_left_out), (1, 2));
    assert!(made.yaml.contains("# 2 WebSocket connection(s) left out"));
    assert!(!made.yaml.contains("101"), "{}", made.yaml);
}

/// `kiln plan check` resolved every host, so checking a recording of public sites offline
/// failed on the first name: a plan read without lookups keeps its names and an address no
/// connection reaches; read for a run, a name that does not resolve is still an error.
#[test]
fn a_plan_is_checked_without_looking_its_names_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.yaml");
    std::fs::write(
        &path,
        "base_url: http://kiln-no-such-host.invalid:8080/api\n\
         scenarios:\n  - name: s\n    steps:\n      - url: /x\n      - url: https://other.invalid/y\n",
    )
    .unwrap();
    let plan = kiln_plan::load_with(&path, &[], kiln_plan::Lookup::Never).unwrap();
    let origins = &plan.workload.origins;
    assert_eq!(origins.len(), 2);
    assert_eq!(origins[0].host, "kiln-no-such-host.invalid");
    assert_eq!(origins[0].port, 8080);
    assert_eq!(origins[1].port, 443);
    assert_eq!(origins[0].addr.port(), 0);
    let e = kiln_plan::load(&path, &[]).unwrap_err();
    assert!(e.to_string().contains("cannot resolve host"), "{e}");
}

/// A recording holds what a browser did: a `wss:` socket answered 200, a `file:` page, a
/// `data:` image. The plan kiln wrote from it was refused by `kiln plan check` ("scheme 'wss'
/// is not http or https"); they are left out and counted, and the main host is the first
/// HTTP one.
#[test]
fn entries_that_are_not_http_are_left_out_and_the_plan_checks() {
    let har = serde_json::json!({"log": {"entries": [
        {"request": {"method": "GET", "url": "file:///etc/passwd", "headers": []},
         "response": {"status": 200}},
        {"request": {"method": "GET", "url": "http://127.0.0.1:1/", "headers": []},
         "response": {"status": 200}},
        {"request": {"method": "GET", "url": "wss://127.0.0.1:1/ws", "headers": []},
         "response": {"status": 200}},
        {"request": {"method": "GET", "url": "data:image/png;base64,iVBOR", "headers": []},
         "response": {"status": 200}}
    ]}});
    let made = to_plan(&har.to_string(), false).unwrap();
    assert_eq!(
        (
            made.requests,
            made.websockets_left_out,
            made.not_http_left_out
        ),
        (1, 1, 2),
        "{}",
        made.yaml
    );
    assert!(
        made.other_hosts_left_out.is_empty(),
        "{:?}",
        made.other_hosts_left_out
    );
    assert!(
        made.yaml.contains("base_url: \"http://127.0.0.1:1\""),
        "{}",
        made.yaml
    );
    assert!(
        made.yaml.contains("# 2 request(s) that are not HTTP"),
        "{}",
        made.yaml
    );
    kiln_plan::parse_with(
        &made.yaml,
        "made.yaml",
        std::path::Path::new("."),
        &[],
        &|_| None,
        kiln_plan::Lookup::Never,
    )
    .unwrap_or_else(|e| panic!("the plan made does not check: {e}\n{}", made.yaml));
}

/// A recording whose bodies make a plan larger than kiln reads is refused with why, not
/// written as a plan `kiln plan check` then refuses.
#[test]
fn a_plan_too_large_to_read_is_not_written() {
    let body = "x".repeat(1 << 20);
    let entries: Vec<serde_json::Value> = (0..5)
        .map(|i| {
            serde_json::json!({"request": {"method": "POST", "url": format!("http://127.0.0.1:1/{i}"),
                "headers": [], "postData": {"mimeType": "text/plain", "text": body}},
             "response": {"status": 200}})
        })
        .collect();
    let har = serde_json::json!({"log": {"entries": entries}});
    let err = to_plan(&har.to_string(), false).unwrap_err();
    assert!(
        err.to_string().contains("more than kiln reads (4 MiB)"),
        "{err}"
    );
}
