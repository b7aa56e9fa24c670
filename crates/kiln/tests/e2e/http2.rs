//! `--http2` against hyper's HTTP/2 server: h2 chosen by ALPN over TLS, h2c by prior
//! knowledge over plain TCP; kiln's counts equal the server's, which counts by protocol.

use crate::common;

use common::{json_with_exit, kiln};
use kiln_targets::h2::H2Target;
use serde_json::Value;

fn run(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut all = vec![
        "run",
        "--json",
        "--quiet",
        "-d",
        "1s",
        "--out",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    json_with_exit(&kiln(&all), 0)
}

#[test]
fn http2_over_tls_and_h2c_count_what_the_server_answered() {
    let _turn = common::beside();
    for tls in [true, false] {
        let target = H2Target::start(tls).unwrap();
        let url = target.url(tls, "/");
        let json = run(&[&url, "-k", "--http2", "-c", "4"]);
        let total = &json["total"];
        let requests = total["requests"].as_u64().unwrap();
        assert!(requests > 100, "tls {tls}: {total}");
        assert_eq!(total["failed"], 0, "tls {tls}: {total}");
        assert_eq!(
            target.answered("HTTP/2.0", "/"),
            requests,
            "tls {tls}: every request was HTTP/2"
        );
        assert_eq!(target.answered("HTTP/1.1", "/"), 0);
        // One connection per -c, as with HTTP/1.1.
        assert_eq!(total["connections_opened"], 4, "tls {tls}");
    }
}

#[test]
fn without_http2_tls_stays_on_http1_and_the_open_model_works_over_h2() {
    let _turn = common::beside();
    let target = H2Target::start(true).unwrap();
    let json = run(&[&target.url(true, "/"), "-k", "-c", "2"]);
    let requests = json["total"]["requests"].as_u64().unwrap();
    assert_eq!(target.answered("HTTP/1.1", "/"), requests);
    assert_eq!(target.answered("HTTP/2.0", "/"), 0);

    let target = H2Target::start(false).unwrap();
    let json = run(&[
        &target.url(false, "/"),
        "--http2",
        "--rate",
        "200",
        "-c",
        "2",
    ]);
    let total = &json["total"];
    assert_eq!(total["scheduled"], 200, "{total}");
    assert_eq!(total["requests"], 200, "{total}");
    assert_eq!(target.answered("HTTP/2.0", "/"), 200);
}

#[test]
fn a_plan_over_http2_carries_its_token() {
    let _turn = common::beside();
    let target = H2Target::start(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        format!(
            r#"
base_url: {base}
http2: true
scenarios:
  - name: me
    steps:
      - name: login
        method: POST
        url: /login
        json: {{user: a}}
        extract:
          token: {{json: $.token}}
      - name: me
        url: /me
        headers:
          Authorization: "Bearer {{{{token}}}}"
        check:
          status: 200
          json:
            - path: $.token
              equals: "{{{{token}}}}"
load:
  vus: 3
  iterations: 30
"#,
            base = target.url(true, "")
        ),
    )
    .unwrap();
    let json = run(&[plan.to_str().unwrap(), "-k"]);
    let names = &json["total"]["names"];
    assert_eq!(names["login"]["requests"], 30, "{names}");
    assert_eq!(names["me"]["requests"], 30);
    assert_eq!(names["me"]["checks"], 60);
    assert_eq!(names["me"]["checks_failed"], 0, "{names}");
    assert_eq!(target.answered("HTTP/2.0", "/login"), 30);
    assert_eq!(target.answered("HTTP/2.0", "/me"), 30);
    assert_eq!(target.total(), 60);
}
