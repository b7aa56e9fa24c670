//! `kiln run plan.yaml` against a shop API that issues a token and a session cookie at
//! login and counts what it saw per route and per user: kiln's figures must equal the
//! server's own, every data row must be used as often as the feeder's mode says, the
//! token and the cookie must be carried on every request, and a failing check must be
//! counted exactly.

mod common;

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

#[test]
fn a_correlation_that_fails_is_counted_and_cuts_the_iteration() {
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
    let out = kiln(&[
        "run",
        path.to_str().unwrap(),
        "--json",
        "--quiet",
        "--junit",
        junit.to_str().unwrap(),
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
    // status, user and the extraction: three failed checks per login.
    assert_eq!(names["login"]["checks_failed"], 30);
    assert!(names.get("order").is_none(), "{names}");
    let server = api.counts();
    assert_eq!(server.bad_logins, 10);
    assert_eq!(server.routes.get("GET /orders"), None);
}

#[test]
fn plan_check_shows_the_plan_and_points_at_mistakes() {
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
}
