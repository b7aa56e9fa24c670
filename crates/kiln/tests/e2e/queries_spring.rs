//! The query analyzer on a real Spring Boot application (Spring MVC, Spring Data JPA,
//! Hibernate, H2 from Maven Central) under the OpenTelemetry Java agent with the
//! span-stacktrace extension, as a new user would run it: the app's package sits under a
//! framework vendor's prefix (`org.springframework.samples.kilnshop`), its owner list has a
//! lazy-loading N+1 of known size at a known line, its owner page loads one row twice from
//! two classes, and it served traffic before kiln listened. kiln must name the loop's line,
//! find exactly the loop and the double load, and count only the measured requests.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::apps::{
    fetch, findings, free_port, get, java_under_agent, javac, line_of, wait_port_for, workspace,
    Killed,
};
use common::{json_with_exit, kiln};
use serde_json::Value;

/// Owners the app seeds; the owner list makes one pets query per owner.
const OWNERS: u64 = 10;

/// Compiles the app with javac against the fetched libraries; its classes directory.
fn compile(app: &Path, out: &Path, lib: &Path) -> PathBuf {
    let sources: Vec<PathBuf> =
        std::fs::read_dir(app.join("src/main/java/org/springframework/samples/kilnshop"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
    let classes = out.join("classes");
    javac(&sources, Some(&format!("{}/*", lib.display())), &classes);
    std::fs::copy(
        app.join("src/main/resources/application.properties"),
        classes.join("application.properties"),
    )
    .unwrap();
    classes
}

/// `kiln run URL --rate 10 ... --otlp-listen ADDR --json`: its JSON.
fn load_with_traces(url: &str, otlp_port: u16, out: &Path, warmup: &str) -> Value {
    let run = kiln(&[
        "run",
        url,
        "--rate",
        "10",
        "-d",
        "3s",
        "--warmup",
        warmup,
        "--otlp-listen",
        &format!("127.0.0.1:{otlp_port}"),
        "--otlp-wait",
        "4s",
        "--json",
        "-q",
        "--out",
        out.to_str().unwrap(),
    ]);
    json_with_exit(&run, 0)
}

fn route<'a>(analysis: &'a Value, route: &str) -> &'a Value {
    analysis["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == route)
        .unwrap_or_else(|| panic!("no route {route}: {}", analysis["routes"]))
}

#[test]
fn spring_data_jpa_under_the_agent_loop_line_double_load_and_only_the_measured_requests() {
    let _turn = common::beside();
    fetch("spring-shop.sh");
    let app_dir = workspace().join("tests/apps/spring_shop");
    let tmp = tempfile::tempdir().unwrap();
    let classes = compile(
        &app_dir,
        tmp.path(),
        &workspace().join("target/spring-shop/lib"),
    );

    let (port, otlp_port) = (free_port(), free_port());
    let app = java_under_agent(
        "spring-shop",
        &format!("http://127.0.0.1:{otlp_port}/v1/traces"),
    )
    .arg("-cp")
    .arg(format!(
        "{}:{}/*",
        classes.display(),
        workspace().join("target/spring-shop/lib").display()
    ))
    .arg("org.springframework.samples.kilnshop.ShopApplication")
    .arg(format!("--server.port={port}"))
    .spawn()
    .expect("java runs");
    let mut app = Killed(app);
    wait_port_for(port, &mut app.0, "the Spring app", Duration::from_secs(240));
    // Traffic before kiln listens: the agent keeps retrying these spans' export.
    for _ in 0..3 {
        get(port, "/owners");
    }

    let source = |class: &str| {
        app_dir.join(format!(
            "src/main/java/org/springframework/samples/kilnshop/{class}.java"
        ))
    };
    let loop_line = line_of(&source("OwnerController"), "kiln: the N+1 loop");

    // The owner list: one N+1 of OWNERS pets queries per request, at the loop's line.
    let run = load_with_traces(
        &format!("http://127.0.0.1:{port}/owners"),
        otlp_port,
        &tmp.path().join("list"),
        "2s",
    );
    let measured = run["total"]["requests"].as_u64().unwrap();
    let warmup = run["phases"][0]["requests"].as_u64().unwrap();
    assert_eq!(run["phases"][0]["phase"], "warmup");
    assert!(measured >= 20, "{measured}");
    let a = &run["queries"]["analysis"];
    // Only the measured requests: the warm-up's and the earlier ones are left out, counted.
    assert_eq!(
        route(a, "GET /owners")["requests"].as_u64(),
        Some(measured),
        "{}",
        a["routes"]
    );
    assert!(
        a["requests_outside_window"].as_u64().unwrap() >= warmup,
        "{} left out, {warmup} in the warm-up",
        a["requests_outside_window"]
    );
    assert_eq!(
        a["requests_total"].as_u64(),
        Some(measured),
        "{}",
        a["routes"]
    );
    // Every stack has an application frame, though the app lives under org.springframework.
    assert_eq!(a["calls_with_app_frame"], a["calls_with_stack"]);
    assert_eq!(
        a["calls_with_stack"].as_u64(),
        Some(measured * (1 + OWNERS))
    );
    let loops = findings(a, "n_plus_one");
    assert_eq!(loops.len(), 1, "one loop, one finding: {}", a["findings"]);
    let f = &loops[0];
    assert_eq!(f["requests"].as_u64(), Some(measured));
    assert_eq!(f["calls"].as_u64(), Some(OWNERS));
    assert_eq!(f["distinct_values"].as_u64(), Some(OWNERS));
    let site = f["site"].as_array().unwrap();
    let innermost = site.last().unwrap();
    assert_eq!(
        innermost["function"],
        "org.springframework.samples.kilnshop.OwnerController.list"
    );
    assert_eq!(innermost["line"].as_u64(), Some(loop_line as u64));
    assert!(
        f["evidence"]
            .as_str()
            .unwrap()
            .ends_with(&format!("from OwnerController.java:{loop_line}")),
        "{}",
        f["evidence"]
    );
    assert_eq!(
        a["findings"].as_array().unwrap().len(),
        1,
        "{}",
        a["findings"]
    );

    // What the README says the record costs: the spans as received, gzipped on disk.
    let record = tmp.path().join("list/spans.otlp.delimited.pb.gz");
    let on_disk = std::fs::metadata(&record).unwrap().len();
    let mut received = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&record).unwrap()),
        &mut received,
    )
    .unwrap();
    println!(
        "recorded spans: {} bytes as received, {on_disk} bytes on disk",
        received.len()
    );
    assert!(
        on_disk * 5 < received.len() as u64,
        "{on_disk} of {}",
        received.len()
    );

    // The owner page: the same row loaded by two classes, one redundant finding naming both.
    let run = load_with_traces(
        &format!("http://127.0.0.1:{port}/owners/3"),
        otlp_port,
        &tmp.path().join("page"),
        "1s",
    );
    let measured = run["total"]["requests"].as_u64().unwrap();
    let a = &run["queries"]["analysis"];
    assert_eq!(
        route(a, "GET /owners/{id}")["requests"].as_u64(),
        Some(measured)
    );
    let repeats = findings(a, "redundant");
    assert_eq!(repeats.len(), 1, "{}", a["findings"]);
    let f = &repeats[0];
    assert_eq!(f["calls"].as_u64(), Some(2));
    assert_eq!(f["requests"].as_u64(), Some(measured));
    let evidence = f["evidence"].as_str().unwrap();
    for (class, marker) in [
        ("OwnerHeader", "kiln: first load"),
        ("OwnerDetails", "kiln: second load"),
    ] {
        let at = format!("{class}.java:{}", line_of(&source(class), marker));
        assert!(evidence.contains(&at), "{at} not in: {evidence}");
    }
    assert!(findings(a, "n_plus_one").is_empty(), "{}", a["findings"]);
}
