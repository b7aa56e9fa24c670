//! End to end on the JVM: a plain-JDBC app on a real PostgreSQL under the OpenTelemetry
//! Java agent, with the contrib span-stacktrace extension at min.duration=0 (the setup the
//! README documents), exporting OTLP/protobuf to `kiln queries --listen`.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::apps::{
    assert_shop_findings, free_port, java_under_agent, javac, m2_jar, visit_shop, wait_port,
    workspace, Killed, Listening, ShopTruth,
};
use kiln_targets::postgres::Postgres;

#[test]
fn jdbc_under_the_java_agent_n_plus_one_bulk_and_repeats() {
    let _turn = common::beside();
    const AUTHORS: usize = 9;
    const REPEATS: usize = 3;
    const ROUNDS: usize = 2;
    let driver = m2_jar("org.postgresql", "postgresql", "42.7.8");

    let tmp = tempfile::tempdir().unwrap();
    let source = workspace()
        .join("tests/apps/java_shop/App.java")
        .canonicalize()
        .unwrap();
    let classes = tmp.path().join("classes");
    javac(std::slice::from_ref(&source), None, &classes);

    let pg = Postgres::start().expect("PostgreSQL starts");
    let out = tmp.path().join("run");
    let kiln = Listening::start(&out);
    let port = free_port();
    let app = java_under_agent("java-shop", &kiln.endpoint())
        .arg("-cp")
        .arg(format!("{}:{driver}", classes.display()))
        .arg("App")
        .arg(pg.jdbc_url())
        .arg(port.to_string())
        .arg(AUTHORS.to_string())
        .arg(REPEATS.to_string())
        .spawn()
        .expect("java runs");
    let mut app = Killed(app);
    wait_port(port, &mut app.0, "the Java app");
    visit_shop(port, ROUNDS);
    // the agent exports every 100 ms; give it ample time
    std::thread::sleep(Duration::from_secs(3));
    let report = kiln.finish();
    let a = &report["analysis"];
    let c = &a["coverage"];
    let request_calls = ROUNDS * ((1 + AUTHORS) + 1 + REPEATS);
    // the seeding's statements are DB spans outside any request
    assert!(
        c["db_spans"].as_u64().unwrap() as usize >= request_calls,
        "{c}"
    );
    assert_eq!(
        c["db_with_stack"], c["db_spans"],
        "min.duration=0 gives every span a stack"
    );

    assert_shop_findings(
        a,
        &ShopTruth {
            source: &source,
            file: "App.java",
            loop_function: "App.authors",
            comment: "//",
            authors: AUTHORS,
            repeats: REPEATS,
            rounds: ROUNDS,
        },
    );
    assert!(Path::new(&out).join("spans.otlp.delimited.pb.gz").exists());
    drop(pg);
}
