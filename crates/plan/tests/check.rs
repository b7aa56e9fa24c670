//! Plans are checked whole before anything is sent: a good plan compiles to what it says,
//! and each kind of mistake is one error at its line and column.

use std::path::Path;
use std::time::Duration;

use kiln_load::scenario::{CheckKind, ExtractFrom, Think};
use kiln_load::Model;
use kiln_plan::{parse_with_env, Plan, PlanFileError, Warmup};

const GOOD: &str = r#"
base_url: http://127.0.0.1:8080/api
vars:
  password: "{{env.SHOP_PASSWORD}}"
  greeting: "hello {{password}}"
defaults:
  headers:
    Accept: application/json
  think: 10ms
data:
  users:
    file: users.csv
    share: all
    at_end: recycle
scenarios:
  - name: shopper
    weight: 3
    data: users
    steps:
      - name: login
        method: POST
        url: /login
        json: {user: "{{user}}", password: "{{password}}"}
        extract:
          token: {json: $.token}
        check:
          status: 200
      - group: browse
        steps:
          - url: /orders/{{$randomInt(1,9)}}
            headers:
              Authorization: Bearer {{token}}
            check:
              status: [200, 404]
              json:
                - path: $.user
                  equals: "{{user}}"
            think: {uniform: [5ms, 15ms]}
  - name: anonymous
    steps:
      - url: http://127.0.0.1:8081/health
load:
  vus: 4
  duration: 2s
thresholds:
  - p99{name:login}<300ms
"#;

fn env(name: &str) -> Option<String> {
    (name == "SHOP_PASSWORD").then(|| "s3cret".to_string())
}

fn dir_with_users() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("users.csv"), "user,note\nann,x\nbob,y\n").unwrap();
    dir
}

fn check(text: &str, sets: &[(&str, &str)]) -> Result<Plan, PlanFileError> {
    let dir = dir_with_users();
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    parse_with_env(text, "plan.yaml", dir.path(), &sets, &env)
}

fn error(text: &str) -> PlanFileError {
    check(text, &[]).expect_err("the plan must be refused")
}

#[test]
fn a_good_plan_compiles_to_what_it_says() {
    let plan = check(GOOD, &[]).unwrap();
    let w = &plan.workload;
    assert_eq!(w.origins.len(), 2);
    assert_eq!(w.origins[0].authority, "127.0.0.1:8080");
    assert_eq!(w.origins[1].authority, "127.0.0.1:8081");
    assert_eq!(
        w.names.to_vec(),
        [
            "login",
            "browse/GET /api/orders/{{$randomInt(1,9)}}",
            "GET /health"
        ]
    );
    let shopper = &w.scenarios[0];
    assert_eq!((shopper.weight, shopper.steps.len()), (3, 2));
    assert!(shopper.data.is_some());
    let login = &shopper.steps[0];
    assert!(matches!(login.extract[0].from, ExtractFrom::Json(_)));
    assert!(matches!(login.checks[0].kind, CheckKind::Status(ref s) if s == &[200]));
    assert_eq!(login.think, Think::Constant(Duration::from_millis(10)));
    let browse = &shopper.steps[1];
    assert_eq!(browse.checks.len(), 2);
    assert_eq!(
        browse.think,
        Think::Uniform(Duration::from_millis(5), Duration::from_millis(15))
    );
    // Default headers, a JSON body's content type.
    assert!(login.headers.iter().any(|(n, _)| n == "content-type"));
    assert!(login.headers.iter().any(|(n, _)| n == "accept"));
    // vars are computed once, the environment's among them.
    let greeting = w.slot_names.iter().position(|n| n == "greeting").unwrap();
    assert_eq!(w.initial[greeting].as_deref(), Some("hello s3cret"));
    assert!(matches!(plan.model, Model::Closed { connections: 4, .. }));
    assert_eq!(plan.duration, Duration::from_secs(2));
    assert_eq!(plan.thresholds[0].text, "p99{name:login}<300ms");
    assert_eq!(plan.thresholds[0].line, 46);
}

#[test]
fn set_overrides_load_settings_and_variables() {
    let plan = check(
        GOOD,
        &[("rate", "200"), ("duration", "5s"), ("password", "other")],
    )
    .unwrap();
    match &plan.model {
        Model::Open {
            stages,
            connections,
            ..
        } => {
            assert_eq!(stages[0].target_rate, 200.0);
            assert_eq!(*connections, 4);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(plan.duration, Duration::from_secs(5));
    let w = &plan.workload;
    let greeting = w.slot_names.iter().position(|n| n == "greeting").unwrap();
    assert_eq!(w.initial[greeting].as_deref(), Some("hello other"));
    let e = check(GOOD, &[("rate", "fast")]).unwrap_err();
    assert!(e.to_string().contains("(from --set)"), "{e}");
}

#[test]
fn a_set_name_that_nothing_uses_is_a_typo() {
    // `vsu` is no load setting and no template uses it: it once did nothing, silently
    let e = check(GOOD, &[("vsu", "10")]).unwrap_err().to_string();
    assert!(
        e.contains("--set vsu: no load setting has this name and nothing in the plan uses {{vsu}}"),
        "{e}"
    );
    assert!(e.contains("vus, max_vus"), "{e}");
    // a variable the file declares may be set though nothing uses it...
    let declared = GOOD.replace("vars:\n", "vars:\n  spare: x\n");
    check(&declared, &[("spare", "y")]).unwrap();
    // ...and one only --set gives is fine when a step uses it (`token` is also extracted)
    check(GOOD, &[("vars.token", "t0")]).unwrap();
}

#[test]
fn a_warm_up_is_a_time_or_auto_with_an_optional_cap() {
    let plan = |warmup: &str| {
        let text = format!(
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  warmup: {warmup}\n"
        );
        check(&text, &[]).unwrap().warmup
    };
    assert_eq!(plan("30s"), Some(Warmup::Fixed(Duration::from_secs(30))));
    assert_eq!(plan("auto"), Some(Warmup::Auto { cap: None }));
    assert_eq!(
        plan("auto:45s"),
        Some(Warmup::Auto {
            cap: Some(Duration::from_secs(45))
        })
    );
}

#[test]
fn vu_stages_make_a_closed_ramp_and_set_vus_flattens_it() {
    let text = "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  vus: 2\n  iterations: 50\n  stages:\n    - {duration: 10s, vus: 8}\n    - {duration: 5s, vus: 0}\n";
    let plan = check(text, &[]).unwrap();
    match &plan.model {
        Model::Closed {
            connections,
            stages,
            ..
        } => {
            assert_eq!(*connections, 8, "the most VUs");
            let vus: Vec<usize> = stages.iter().map(|s| s.target_vus).collect();
            assert_eq!(vus, [2, 8, 0], "from vus: 2 at once");
            assert_eq!(stages[0].duration, Duration::ZERO);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(plan.duration, Duration::from_secs(15));
    assert_eq!(plan.workload.iterations, Some(50));
    // As k6's --vus: a flat load in place of the stages.
    let plan = check(text, &[("vus", "3"), ("duration", "4s")]).unwrap();
    match &plan.model {
        Model::Closed {
            connections,
            stages,
            ..
        } => assert_eq!((*connections, stages.len()), (3, 0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(plan.duration, Duration::from_secs(4));
}

#[test]
fn each_mistake_is_one_error_at_its_place() {
    let cases: &[(&str, &str, (u64, u64), &str)] = &[
        (
            "unknown key",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\n        methd: GET\n",
            (5, 9),
            "methd",
        ),
        (
            "wrong type",
            "scenarios:\n  - name: a\n    weight: heavy\n    steps: []\n",
            (3, 13),
            "",
        ),
        (
            "missing data file",
            "data:\n  u:\n    file: nope.csv\nscenarios:\n  - name: a\n    data: u\n    steps:\n      - url: http://127.0.0.1:1/\n",
            (3, 11),
            "cannot open",
        ),
        (
            "variable never set",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/x/{{id}}\n",
            (4, 9),
            "{{id}} before anything sets it",
        ),
        (
            "extracted only after its use",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/{{t}}\n      - url: http://127.0.0.1:1/\n        extract:\n          t: {header: x}\n",
            (4, 9),
            "{{t}}",
        ),
        (
            "vars in a circle",
            "vars:\n  a: \"{{b}}\"\n  b: \"{{a}}\"\nscenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\n",
            (2, 6),
            "circle",
        ),
        (
            "a var refers to itself",
            "vars:\n  a: \"x{{a}}\"\nscenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\n",
            (2, 6),
            "circle",
        ),
        (
            "impossible load shape",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  rate: 10\n  iterations: 5\n",
            (7, 15),
            "closed model",
        ),
        (
            "max_vus below vus",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  rate: 10\n  vus: 20\n  max_vus: 5\n",
            (8, 12),
            "max_vus",
        ),
        (
            "bad regex",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\n        extract:\n          x: {regex: \"(\"}\n",
            (6, 22),
            "regex",
        ),
        (
            "bad JSONPath",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\n        check:\n          json:\n            - path: \"$[\"\n",
            (7, 21),
            "JSONPath",
        ),
        (
            "relative URL without a base",
            "scenarios:\n  - name: a\n    steps:\n      - url: /x\n",
            (4, 14),
            "no base_url",
        ),
        (
            "templated host",
            "vars:\n  h: x\nscenarios:\n  - name: a\n    steps:\n      - url: http://{{h}}/x\n",
            (6, 14),
            "cannot use variables",
        ),
        (
            "unknown data",
            "scenarios:\n  - name: a\n    data: nope\n    steps:\n      - url: http://127.0.0.1:1/\n",
            (3, 11),
            "no data named 'nope'",
        ),
        (
            "bad status",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\n        check:\n          status: 999\n",
            (6, 19),
            "not an HTTP status",
        ),
        (
            "two bodies",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\n        body: x\n        form: {a: b}\n",
            (6, 15),
            "one of body:, json:, form:",
        ),
        (
            "a stage with a rate and VUs",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  stages:\n    - {duration: 1s, vus: 2}\n    - {duration: 1s, vus: 2, rate: 3}\n",
            (8, 7),
            "not both",
        ),
        (
            "VU stages and a duration",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  duration: 5s\n  stages:\n    - {duration: 1s, vus: 2}\n",
            (6, 13),
            "the stages give the duration",
        ),
        (
            "VU stages that run no VU",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  stages:\n    - {duration: 1s, vus: 0}\n",
            (7, 7),
            "never run a VU",
        ),
        (
            "no scenarios",
            "scenarios: []\n",
            (1, 12),
            "has none",
        ),
        (
            "auto warm-up without a colon",
            "scenarios:\n  - name: a\n    steps:\n      - url: http://127.0.0.1:1/\nload:\n  warmup: auto30s\n",
            (6, 11),
            "auto:DURATION",
        ),
    ];
    for (what, text, (line, column), says) in cases {
        let e = error(text);
        assert_eq!(
            (e.line, e.column),
            (*line, *column),
            "{what}: {e} (expected line {line} column {column})"
        );
        assert!(e.message.contains(says), "{what}: {e}");
        assert!(e.to_string().starts_with("plan.yaml:"), "{what}: {e}");
    }
}

#[test]
fn hostile_plans_get_errors_not_hangs_or_panics() {
    // Deep nesting.
    let deep = format!("scenarios: {}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(check(&deep, &[]).is_err());
    // Groups nested deeper than allowed.
    let mut nested = String::from("scenarios:\n  - name: a\n    steps:\n");
    let mut indent = 6;
    for _ in 0..12 {
        nested.push_str(&format!(
            "{}- group: g\n{}  steps:\n",
            " ".repeat(indent),
            " ".repeat(indent)
        ));
        indent += 4;
    }
    nested.push_str(&format!(
        "{}- url: http://127.0.0.1:1/\n",
        " ".repeat(indent)
    ));
    assert!(error(&nested).message.contains("nest"));
    // A billion laughs.
    let mut laughs = String::from("a0: &a0 [\"lol\"]\n");
    for i in 1..20 {
        laughs.push_str(&format!(
            "a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n",
            p = i - 1
        ));
    }
    laughs.push_str("scenarios: []\n");
    assert!(check(&laughs, &[]).is_err());
    // A 100 MB string.
    let huge = format!("scenarios:\n  - name: \"{}\"\n", "x".repeat(100 << 20));
    let e = check(&huge, &[]).unwrap_err();
    assert!(e.message.contains("longer than"), "{e}");
}

#[test]
fn a_plan_file_is_read_from_disk_with_data_beside_it() {
    let dir = dir_with_users();
    let path = dir.path().join("plan.yaml");
    std::fs::write(
        &path,
        "data:\n  users: {file: users.csv}\nscenarios:\n  - name: a\n    data: users\n    steps:\n      - url: http://127.0.0.1:1/u/{{user}}\n",
    )
    .unwrap();
    let plan = kiln_plan::load(&path, &[]).unwrap();
    assert_eq!(plan.workload.feeders[0].columns, ["user", "note"]);
    let e = kiln_plan::load(Path::new("/nonexistent/plan.yaml"), &[]).unwrap_err();
    assert!(e.to_string().contains("cannot read"), "{e}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    #[test]
    fn no_text_panics_the_plan_checker(text in "[a-z_:\\-\\[\\]{}\"'\n &*|0-9./$]{0,200}") {
        let _ = check(&text, &[]);
    }

    #[test]
    fn no_good_plan_with_a_line_changed_panics(line in 0usize..47, junk in "[a-z:\\-\\[\\]{}\" 0-9]{0,20}") {
        let mut lines: Vec<String> = GOOD.lines().map(str::to_string).collect();
        if line < lines.len() {
            lines[line] = junk;
        }
        let _ = check(&lines.join("\n"), &[]);
    }
}

/// A literal CR/LF in a header or a space in a path passed the check, and the run then sent
/// nothing and ended `complete`: both are refused where they stand. A placeholder's braces
/// may hold spaces.
#[test]
fn a_line_break_in_a_header_or_a_space_in_a_path_is_refused() {
    let header = error(
        "base_url: http://127.0.0.1:8080\nscenarios:\n  - name: s\n    steps:\n      - url: /a\n        headers:\n          X-A: \"one\\r\\nX-B: two\"\nload: {vus: 1, duration: 1s}\n",
    );
    assert!(
        header.message.contains("header 'X-A' holds '\\r'"),
        "{header}"
    );
    assert_eq!(header.line, 7);
    let default = error(
        "base_url: http://127.0.0.1:8080\ndefaults:\n  headers:\n    X-A: \"a\\nb\"\nscenarios:\n  - name: s\n    steps:\n      - url: /a\nload: {vus: 1, duration: 1s}\n",
    );
    assert!(default.message.contains("holds '\\n'"), "{default}");
    let path = error(
        "base_url: http://127.0.0.1:8080\nscenarios:\n  - name: s\n    steps:\n      - url: /a b\nload: {vus: 1, duration: 1s}\n",
    );
    assert!(path.message.contains("the URL's path holds ' '"), "{path}");
    assert_eq!(path.line, 5);
    check(
        "base_url: http://127.0.0.1:8080\nvars: {id: '7'}\nscenarios:\n  - name: s\n    steps:\n      - url: /a/{{ id }}\n        headers:\n          X-A: \"{{ id }}\\tok\"\nload: {vus: 1, duration: 1s}\n",
        &[],
    )
    .expect("placeholders may hold spaces, a header a tab");
}

#[test]
fn the_same_host_with_other_credentials_is_another_origin() {
    let plan = check(
        "base_url: http://ann:one@127.0.0.1:8080\n\
         scenarios:\n\
         \x20 - name: two users\n\
         \x20   steps:\n\
         \x20     - url: /a\n\
         \x20     - url: http://bob:two@127.0.0.1:8080/b\n\
         \x20     - url: http://ann:one@127.0.0.1:8080/c\n\
         load:\n  vus: 1\n  iterations: 1\n",
        &[],
    )
    .unwrap();
    let w = &plan.workload;
    assert_eq!(w.origins.len(), 2, "{:?}", w.origins);
    let steps = &w.scenarios[0].steps;
    let auth = |i: usize| w.origins[steps[i].origin].basic_auth.clone().unwrap();
    assert_ne!(auth(0), auth(1), "bob's step has bob's credentials");
    assert_eq!(auth(0), auth(2));
}
