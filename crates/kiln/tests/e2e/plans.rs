//! `kiln run plan.yaml` against a shop API that issues a token and a session cookie at
//! login and counts what it saw per route and per user: kiln's figures must equal the
//! server's own, every data row must be used as often as the feeder's mode says, the
//! token and the cookie must be carried on every request, and a failing check must be
//! counted exactly.

use crate::common;

use std::path::Path;

use common::{json_with_exit, kiln};
use kiln_targets::shop_api::ShopApi;
use serde_json::Value;

const USERS: [&str; 5] = ["ann", "bob", "cid", "dee", "eve"];

fn write_users(dir: &Path) {
    let mut csv = String::from("user,note\n");
    for u in USERS {
        csv.push_str(&format!("{u},\"a note, with a comma\"\n"));
    }
    std::fs::write(dir.join("users.csv"), csv).unwrap();
}

/// A login, an order read with the token, the cart read with the cookie, and a health call
/// whose check fails on purpose.
fn plan(api: &ShopApi, load: &str) -> String {
    format!(
        r#"
base_url: {base}
vars:
  password: {password}
data:
  users:
    file: users.csv
    share: all
    order: sequential
    at_end: recycle
scenarios:
  - name: shopper
    data: users
    steps:
      - name: login
        method: POST
        url: /login
        json: {{user: "{{{{user}}}}", password: "{{{{password}}}}"}}
        extract:
          token: {{json: $.token}}
        check:
          status: 200
          json:
            - path: $.user
              equals: "{{{{user}}}}"
      - name: order
        url: /orders/{{{{$randomInt(1,100)}}}}
        headers:
          Authorization: Bearer {{{{token}}}}
        check:
          status: 200
      - name: cart
        url: /cart
        check:
          body_contains: items
      - name: health
        url: /health
        check:
          body_contains: "this is not in the answer"
{load}
thresholds:
  - "p99{{name:order}}<5s"
  - "failed{{name:order}}<1%"
"#,
        base = api.url(""),
        password = api.password(),
    )
}

fn run_plan(dir: &Path, text: &str, extra: &[&str]) -> Value {
    let path = dir.join("plan.yaml");
    std::fs::write(&path, text).unwrap();
    let out_dir = dir.join(format!(
        "run-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let mut args = vec![
        "run",
        path.to_str().unwrap(),
        "--json",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    json_with_exit(&kiln(&args), 0)
}

#[test]
fn a_closed_plan_matches_the_servers_counts_exactly() {
    let _turn = common::beside();
    let api = ShopApi::start("pw-1").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_users(dir.path());
    // 40 iterations over 5 rows, shared and recycled: each user logs in exactly 8 times.
    let load = "load:\n  vus: 4\n  iterations: 40\n  duration: 60s\n";
    let json = run_plan(dir.path(), &plan(&api, load), &[]);
    let total = &json["total"];
    let server = api.counts();

    assert_eq!(total["iterations"], 40, "{total}");
    for u in USERS {
        assert_eq!(server.logins.get(u), Some(&8), "{u}: {:?}", server.logins);
    }
    assert_eq!(server.token_failures, 0);
    assert_eq!(server.cookie_failures, 0);
    assert_eq!(server.bad_logins, 0);
    // kiln's per-name counts are the server's per-route counts.
    let names = &total["names"];
    for (name, route) in [
        ("login", "POST /login"),
        ("order", "GET /orders"),
        ("cart", "GET /cart"),
        ("health", "GET /health"),
    ] {
        assert_eq!(
            names[name]["requests"].as_u64(),
            server.routes.get(route).copied(),
            "{name}: {names}"
        );
        assert_eq!(names[name]["requests"], 40, "{name}");
    }
    // The failing check fails once per iteration, and nothing else fails.
    assert_eq!(names["health"]["checks_failed"], 40);
    assert_eq!(names["health"]["failed"], 40);
    for name in ["login", "order", "cart"] {
        assert_eq!(names[name]["failed"], 0, "{name}: {}", names[name]);
        assert_eq!(names[name]["checks_failed"], 0, "{name}");
    }
    assert_eq!(names["login"]["checks"], 80, "two checks per login");
    assert_eq!(total["checks"], 40 * 5);
    assert_eq!(total["checks_failed"], 40);
    // Every HTTP status was a 200; the failed requests are the failed checks (JMeter's
    // Error %), and the finding says which requests and checks.
    assert_eq!(total["requests"], 160);
    assert_eq!(total["status"]["200"], 160);
    assert_eq!(total["failed"], 40);
    let errors = json["findings"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "load.errors")
        .expect("load.errors fires");
    let evidence = errors["evidence"].to_string();
    assert!(
        evidence.contains("failed by request name: health 40")
            && evidence.contains("checks failed: 40 of 200"),
        "{evidence}"
    );
    // The per-name thresholds were checked on the order step.
    let thresholds = json["thresholds"].as_array().unwrap();
    assert_eq!(thresholds.len(), 2);
    assert!(thresholds.iter().all(|t| t["ok"] == true), "{thresholds:?}");
    // The run record keeps the per-name figures second by second.
    let run_dir = Path::new(json["run_dir"].as_str().unwrap());
    // The page says the thresholds first and has JMeter's table with the checks; the parts
    // this run did not record are one line, not empty sections.
    let page = common::dump_dom(&run_dir.join("report.html"));
    assert!(page.contains("All 2 thresholds passed."), "{page}");
    assert!(
        page.contains("<code>p99{name:order}&lt;5s</code>"),
        "{page}"
    );
    let by_name = &page[page
        .find("<section id=\"plan\">")
        .expect("the plan section")..];
    let health = &by_name[by_name.find("<td>health</td>").expect("health's row")..];
    let health_row = &health[..health.find("</tr>").unwrap()];
    assert!(
        health_row.contains("<td class=\"n\">40 of 40</td>"),
        "{health_row}"
    );
    assert!(
        page.contains("Not recorded in this run: resources"),
        "{page}"
    );
    assert!(!page.contains("<section id=\"resources\">"), "{page}");
    let seconds = std::fs::read_to_string(run_dir.join("load-seconds.jsonl")).unwrap();
    let logins_recorded: u64 = seconds
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["second"]["names"]["login"]["requests"].as_u64())
        .sum();
    assert_eq!(logins_recorded, 40);
}

#[test]
fn per_vu_data_and_an_open_model() {
    let _turn = common::beside();
    let api = ShopApi::start("pw-2").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_users(dir.path());
    // share: vu, at_end: stop: each VU logs in as each of the 5 users once, then stops;
    // with 3 VUs that is 15 iterations and the run ends when the data does.
    let text = plan(&api, "load:\n  vus: 3\n  duration: 60s\n")
        .replace("share: all", "share: vu")
        .replace("at_end: recycle", "at_end: stop");
    let json = run_plan(dir.path(), &text, &[]);
    let server = api.counts();
    assert_eq!(json["total"]["iterations"], 15, "{}", json["total"]);
    for u in USERS {
        assert_eq!(server.logins.get(u), Some(&3), "{u}: {:?}", server.logins);
    }
    assert!(
        json["total"]["duration_s"].as_f64().unwrap() < 30.0,
        "the run ends when the data does"
    );

    // Open model: 40 iterations a second for 2 s, the rate from --set.
    let api = ShopApi::start("pw-3").unwrap();
    let json = run_plan(
        dir.path(),
        &plan(&api, "load:\n  rate: 10\n  duration: 2s\n  vus: 5\n"),
        &["--set", "rate=40"],
    );
    let server = api.counts();
    let iterations = json["total"]["iterations"].as_u64().unwrap();
    assert!((78..=80).contains(&iterations), "{iterations}");
    assert_eq!(
        json["total"]["names"]["login"]["requests"].as_u64(),
        server.routes.get("POST /login").copied()
    );
    assert_eq!(server.token_failures, 0);
    assert_eq!(json["total"]["scheduled"], 80);
}

/// A plan's data file emptied mid-run (its rows are read where they lie): the run stops
/// with the reason, its record kept and marked interrupted, and exits 1, an error of kiln's
/// input; 3 is for a target that stopped answering, and this one answered every request.
#[test]
fn a_data_file_emptied_mid_run_stops_it_as_an_input_error_not_the_targets() {
    let _turn = common::beside();
    let api = ShopApi::start("pw-9").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_users(dir.path());
    let path = dir.path().join("plan.yaml");
    std::fs::write(&path, plan(&api, "load:\n  vus: 2\n  duration: 20s\n")).unwrap();
    let out_dir = dir.path().join("run");
    let users = dir.path().join("users.csv");
    let started = std::time::Instant::now();
    let out = std::thread::scope(|s| {
        // emptied once the run has logged a user in: mid-run however late kiln starts (1.5 s
        // after the test began, a CI run's kiln had not yet read the file, and found it empty)
        s.spawn(|| {
            let logged_in = || api.counts().routes.contains_key("POST /login");
            while !logged_in() && started.elapsed() < std::time::Duration::from_secs(15) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            std::fs::write(&users, "user,note\n").unwrap();
        });
        kiln(&[
            "run",
            path.to_str().unwrap(),
            "--quiet",
            "--out",
            out_dir.to_str().unwrap(),
        ])
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the plan's input failed mid-run"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "{stderr}"
    );
    let manifest = common::manifest(&out_dir);
    assert_eq!(manifest["status"], "interrupted", "{manifest:#}");
    assert!(
        manifest["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains("users.csv has no data rows any more")),
        "{manifest:#}"
    );
    // it still reports, from the record
    let report = kiln(&["report", out_dir.to_str().unwrap(), "--json"]);
    assert_eq!(report.status.code(), Some(0));
    let logins = api.counts().routes.get("POST /login").copied().unwrap_or(0);
    assert!(logins > 0, "{stderr}");
}

#[test]
fn a_correlation_that_fails_is_counted_and_cuts_the_iteration() {
    let _turn = common::beside();
    let api = ShopApi::start("pw-4").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_users(dir.path());
    // A wrong password: every login answers 401 with no token, the extraction fails, and
    // the order, cart and health steps are never sent.
    let text = plan(&api, "load:\n  vus: 2\n  iterations: 10\n")
        .replace(&format!("password: {}", api.password()), "password: wrong");
    let path = dir.path().join("plan.yaml");
    std::fs::write(&path, text).unwrap();
    let junit = dir.path().join("junit.xml");
    let record = dir.path().join("run");
    let out = kiln(&[
        "run",
        path.to_str().unwrap(),
        "--json",
        "--quiet",
        "--junit",
        junit.to_str().unwrap(),
        "--out",
        record.to_str().unwrap(),
    ]);
    // The per-name threshold on `order` fails: no order was sent.
    let json = json_with_exit(&out, 99);
    // JUnit for CI: the run, both thresholds, the login's checks.
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let failed: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .filter_map(|n| n.parent().and_then(|p| p.attribute("name")))
        .collect();
    assert_eq!(
        failed,
        ["p99{name:order}<5s", "failed{name:order}<1%", "login"],
        "{xml}"
    );
    let names = &json["total"]["names"];
    assert_eq!(names["login"]["requests"], 10);
    assert_eq!(names["login"]["failed"], 10);
    assert_eq!(names["login"]["status"]["401"], 10);
    // status and user: two failed checks per login; the extraction failed too, counted
    // apart (it is no check: JUnit once said "30 of 30 checks failed" for two checks)
    assert_eq!(names["login"]["checks"], 20);
    assert_eq!(names["login"]["checks_failed"], 20);
    assert_eq!(names["login"]["extractions_failed"], 10);
    let login = doc
        .descendants()
        .find(|n| {
            n.has_tag_name("failure") && n.parent().unwrap().attribute("name") == Some("login")
        })
        .unwrap();
    assert_eq!(
        login.attribute("message"),
        Some("20 of 20 checks failed; 10 of 10 responses had nothing to extract"),
        "{xml}"
    );
    assert!(names.get("order").is_none(), "{names}");
    // the page opens with the failed thresholds, as the exit code says
    let page = std::fs::read_to_string(record.join("report.html")).unwrap();
    let verdict = &page[page.find("<section id=\"verdict\">").unwrap()..];
    let verdict = &verdict[..verdict.find("</section>").unwrap()];
    assert!(
        verdict.contains("<b>2 of 2 thresholds failed</b> (exit 99)"),
        "{verdict}"
    );
    assert!(
        page.contains("<tr class=\"fail\"><td><code>failed{name:order}&lt;1%</code></td>"),
        "{page}"
    );
    let server = api.counts();
    assert_eq!(server.bad_logins, 10);
    assert_eq!(server.routes.get("GET /orders"), None);
}

#[test]
fn plan_check_shows_the_plan_and_points_at_mistakes() {
    let _turn = common::beside();
    let api = ShopApi::start("pw-5").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_users(dir.path());
    let path = dir.path().join("plan.yaml");
    std::fs::write(&path, plan(&api, "load:\n  vus: 2\n  duration: 5s\n")).unwrap();
    let out = kiln(&["plan", "check", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("scenario   shopper (weight 1, 4 steps)"),
        "{text}"
    );
    assert!(text.contains("data       users ="), "{text}");
    assert!(text.contains("load       closed, 2 VUs, 5s"), "{text}");
    assert!(api.counts().routes.is_empty(), "plan check sends nothing");

    // A typo in a key: the error names the file, line and column.
    let bad =
        plan(&api, "load:\n  vus: 2\n").replace("body_contains: items", "body_contain: items");
    std::fs::write(&path, bad).unwrap();
    let out = kiln(&["plan", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = format!("{}:35:11", path.display());
    assert!(
        err.contains(&expected) && err.contains("body_contain"),
        "{err}"
    );
    // A threshold kiln cannot read, at its place.
    let bad =
        plan(&api, "load:\n  vus: 2\n").replace("failed{name:order}<1%", "fail{name:order}<1%");
    std::fs::write(&path, bad).unwrap();
    let out = kiln(&["run", path.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad threshold"));
    assert!(api.counts().routes.is_empty(), "a bad plan sends nothing");
    // A threshold on a name no step has: refused by the check and the run, at its place (it
    // once failed only after the run).
    let typo =
        plan(&api, "load:\n  vus: 2\n").replace("failed{name:order}<1%", "failed{name:ordr}<1%");
    std::fs::write(&path, typo).unwrap();
    for args in [vec!["plan", "check"], vec!["run"]] {
        let mut args = args;
        args.extend([path.to_str().unwrap(), "--quiet"]);
        if args[0] == "plan" {
            args.pop();
        }
        let out = kiln(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{}:45:5", path.display()))
                && err.contains("'ordr', which no step has"),
            "{args:?}: {err}"
        );
    }
    assert!(api.counts().routes.is_empty(), "a bad plan sends nothing");
}

/// VU stages (k6's ramping-vus): 0 -> 4 VUs over 2 s, 4 for 1 s, down to 1 over 1 s, 1 for
/// 2 s. The server sees each VU (its `$vu` in a header) no sooner than its place in the ramp
/// allows, the last VU in leaves first, and kiln's counts are the server's.
#[test]
fn vu_stages_start_and_stop_vus_on_the_ramp() {
    let _turn = common::beside();
    let api = ShopApi::start("pw-6").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
base_url: {base}
scenarios:
  - name: visit
    steps:
      - name: health
        url: /health
        headers:
          X-VU: "{{{{$vu}}}}"
        think: 20ms
load:
  stages:
    - {{duration: 2s, vus: 4}}
    - {{duration: 1s, vus: 4}}
    - {{duration: 1s, vus: 1}}
    - {{duration: 2s, vus: 1}}
"#,
        base = api.url("")
    );
    std::fs::write(dir.path().join("plan.yaml"), &text).unwrap();
    let check = kiln(&[
        "plan",
        "check",
        dir.path().join("plan.yaml").to_str().unwrap(),
    ]);
    let shown = String::from_utf8_lossy(&check.stdout);
    assert!(
        shown.contains("closed, 0->4 VUs in 2s, 4 VUs for 1s, 4->1 VUs in 1s, 1 VUs for 2s"),
        "{shown}"
    );
    let launched = std::time::Instant::now();
    let json = run_plan(dir.path(), &text, &[]);
    let seen = api.vus();
    let names: Vec<&str> = seen.keys().map(String::as_str).collect();
    assert_eq!(names, ["1", "2", "3", "4"], "VUs 1 to 4 and no more");
    for (g, vu) in ["1", "2", "3", "4"].iter().enumerate() {
        // VU g (from 0) is due when the count passes g: 0.5 s apart. Later is fine (a busy
        // machine), sooner is not.
        let due = std::time::Duration::from_millis(500 * g as u64);
        let first = seen[*vu].first.duration_since(launched);
        assert!(first >= due, "VU {vu} first seen {first:?}, due {due:?}");
    }
    // VU 1 runs 6 s, VU 4 from 1.5 s to about 3.3 s.
    let (one, four) = (seen["1"].requests, seen["4"].requests);
    assert!(one > four * 2, "VU 1 sent {one}, VU 4 {four}");
    let server_total: u64 = seen.values().map(|v| v.requests).sum();
    assert_eq!(json["total"]["requests"], server_total, "{}", json["total"]);
    assert_eq!(json["total"]["names"]["health"]["requests"], server_total);
}

/// User names with quotes, spaces, ampersands and non-ASCII log in by a JSON body and by a
/// form: each is escaped for where it stands, so the server reads back exactly the name in
/// the data file, and every login's token works.
#[test]
fn json_and_form_bodies_escape_what_they_carry() {
    let _turn = common::beside();
    let api = ShopApi::start("p&w =\"1\"").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let users = ["o\"neil & co", "a+b=c", "zoë ☃", "back\\slash"];
    let mut csv = String::from("user\n");
    for u in users {
        csv.push_str(&format!("\"{}\"\n", u.replace('"', "\"\"")));
    }
    std::fs::write(dir.path().join("users.csv"), csv).unwrap();
    let text = format!(
        r#"
base_url: {base}
vars:
  password: '{password}'
data:
  users: {{file: users.csv}}
scenarios:
  - name: by_json
    data: users
    steps:
      - name: json_login
        method: POST
        url: /login
        json: {{user: "{{{{user}}}}", password: "{{{{password}}}}"}}
        extract: {{token: {{json: $.token}}}}
        check: {{json: [{{path: $.user, equals: "{{{{user}}}}"}}]}}
      - name: order
        url: /orders/1
        headers: {{Authorization: "Bearer {{{{token}}}}"}}
  - name: by_form
    data: users
    steps:
      - name: form_login
        method: POST
        url: /login
        form:
          user: "{{{{user}}}}"
          password: "{{{{password}}}}"
        extract: {{token: {{json: $.token}}}}
        check: {{json: [{{path: $.user, equals: "{{{{user}}}}"}}]}}
      - name: order
        url: /orders/2
        headers: {{Authorization: "Bearer {{{{token}}}}"}}
load:
  vus: 2
  iterations: 40
"#,
        base = api.url(""),
        password = api.password()
    );
    let json = run_plan(dir.path(), &text, &[]);
    let names = &json["total"]["names"];
    let server = api.counts();
    assert_eq!(server.bad_logins, 0, "{names}");
    assert_eq!(server.token_failures, 0);
    assert_eq!(server.routes["POST /login"], 40);
    let logged_in: Vec<&str> = server.logins.keys().map(String::as_str).collect();
    let mut expected = users.to_vec();
    expected.sort();
    assert_eq!(
        logged_in, expected,
        "the server read back each name exactly"
    );
    assert_eq!(server.logins.values().sum::<u64>(), 40);
    for name in ["json_login", "form_login"] {
        assert!(names[name]["requests"].as_u64().unwrap() > 0, "{names}");
        assert_eq!(names[name]["checks_failed"], 0, "{names}");
    }
    assert_eq!(names["order"]["failed"], 0, "{names}");
}

/// A browser recording of the shop (a page's image, a login, the cart) becomes a plan with
/// `kiln plan from-har`; run as recorded, the session cookie from the login is carried by the
/// VU's jar to the cart, so the server sees no failure.
#[test]
fn a_har_recording_becomes_a_plan_that_runs() {
    let _turn = common::beside();
    let api = ShopApi::start("pw-7").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = api.url("");
    let har = serde_json::json!({"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
    "entries": [
        {"startedDateTime": "2026-11-24T02:00:00.000Z", "time": 2,
         "request": {"method": "GET", "url": format!("{base}/health"), "headers": []},
         "response": {"status": 200, "content": {"mimeType": "application/json"}}},
        {"startedDateTime": "2026-11-24T02:00:00.003Z", "time": 1,
         "request": {"method": "GET", "url": format!("{base}/logo.png"), "headers": []},
         "response": {"status": 200, "content": {"mimeType": "image/png"}}},
        {"startedDateTime": "2026-11-24T02:00:00.005Z", "time": 2,
         "request": {"method": "POST", "url": format!("{base}/login"),
             "headers": [{"name": "Content-Type", "value": "application/json"}],
             "postData": {"mimeType": "application/json",
                 "text": format!("{{\"user\":\"ann\",\"password\":\"{}\"}}", api.password())}},
         "response": {"status": 200, "content": {"mimeType": "application/json"}}},
        {"startedDateTime": "2026-11-24T02:00:00.010Z", "time": 2,
         "request": {"method": "GET", "url": format!("{base}/cart"),
             "headers": [{"name": "Cookie", "value": "sid=recorded-and-stale"}]},
         "response": {"status": 200, "content": {"mimeType": "application/json"}}}
    ]}});
    let har_path = dir.path().join("shop.har");
    std::fs::write(&har_path, har.to_string()).unwrap();
    let plan_path = dir.path().join("plan.yaml");
    let out = kiln(&[
        "plan",
        "from-har",
        har_path.to_str().unwrap(),
        "-o",
        plan_path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("3 requests into") && said.contains("(1 static left out)"),
        "{said}"
    );
    let text = std::fs::read_to_string(&plan_path).unwrap();
    let json = run_plan(
        dir.path(),
        &text,
        &["--set", "vus=2", "--set", "iterations=12"],
    );
    let server = api.counts();
    assert_eq!(server.routes["GET /health"], 12, "{:?}", server.routes);
    assert_eq!(server.routes["POST /login"], 12);
    assert_eq!(server.routes["GET /cart"], 12);
    assert!(
        !server.routes.contains_key("GET /logo.png"),
        "static left out"
    );
    assert_eq!((server.cookie_failures, server.bad_logins), (0, 0));
    assert_eq!(json["total"]["requests"], 36);
    assert_eq!(json["total"]["failed"], 0, "{}", json["total"]);
}

/// A data file's value with a line break cannot be a header: the request is not sent and
/// counted as a failed check, and the run now says why (it said only "checks 173 run, 173
/// failed"), naming the header, never the value.
#[test]
fn a_request_that_cannot_be_made_from_its_data_is_said_with_why() {
    let _turn = common::beside();
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("users.csv"),
        "token\n\"secret\r\nInjected: 1\"\nfine\n",
    )
    .unwrap();
    let text = format!(
        r#"
base_url: {}
data:
  users: {{file: users.csv}}
scenarios:
  - name: s
    data: users
    steps:
      - name: home
        url: /
        headers: {{X-Token: "{{{{token}}}}"}}
load: {{vus: 1, iterations: 10}}
"#,
        target.url("").trim_end_matches('/')
    );
    let junit = dir.path().join("junit.xml");
    let json = run_plan(dir.path(), &text, &["--junit", junit.to_str().unwrap()]);
    let home = &json["total"]["names"]["home"];
    // every other iteration takes the bad row: 5 sent, 5 not
    assert_eq!(home["requests"], 5, "{json:#}");
    assert_eq!(target.answered(), 5);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("5 not sent: header &apos;x-token&apos; would hold a line break"),
        "{xml}"
    );
    assert!(
        !xml.contains("secret"),
        "the value itself is never said: {xml}"
    );
    let seconds = std::fs::read_to_string(
        Path::new(json["run_dir"].as_str().unwrap()).join("load-seconds.jsonl"),
    )
    .unwrap();
    assert!(!seconds.contains("secret"), "nor recorded");
}
