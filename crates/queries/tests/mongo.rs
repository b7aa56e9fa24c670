//! MongoDB calls as PyMongo's OpenTelemetry instrumentation and the OpenTelemetry Java agent
//! record them: spans recorded from tests/apps/python_mongo and tests/apps/java_mongo against a
//! real MongoDB wire server (FerretDB) by scripts/record-mongo-spans.sh (no mongod installs
//! here). Each app's N+1 of 15 and its double read are known by construction, at lines marked
//! in its source.
//!
//! Read with SQL's rules, a statement's double-quoted values were names: every repeat looked
//! like the same values, and the N+1 was reported as "run it once and reuse the result".

use std::path::{Path, PathBuf};

use kiln_queries::analyze::{analyze, FindingKind, Options};
use kiln_queries::Ingest;
use kiln_record::schema::queries::{Finding, FindingSummary};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn findings(fixture: &str) -> Vec<FindingSummary> {
    let mut ingest = Ingest::new();
    ingest
        .add_file(
            &workspace()
                .join("crates/queries/tests/fixtures")
                .join(fixture),
        )
        .unwrap();
    analyze(&ingest, &Options::default()).summary.findings
}

/// The line of `app` (under tests/apps) ending in a comment naming `marker`, as a stack
/// frame names it (`dir/file:line`, or `File.java:line` for Java).
fn line_of(app: &str, marker: &str) -> String {
    let text = std::fs::read_to_string(workspace().join("tests/apps").join(app)).unwrap();
    // the marker as a comment at the line's end, not the header naming it
    let n = text
        .lines()
        .position(|l| l.ends_with(&format!("# {marker}")) || l.ends_with(&format!("// {marker}")))
        .unwrap()
        + 1;
    match app.strip_suffix(".java") {
        Some(_) => format!("{}:{n}", app.rsplit('/').next().unwrap()),
        None => format!("{app}:{n}"),
    }
}

const PY: &str = "python_mongo/app.py";

/// The one finding on the orders route, an N+1 of the 15 order lines with values known or not.
fn the_loop(all: &[FindingSummary], values_known: bool) -> &Finding {
    let loop_ = on_route(all, "GET /orders/");
    assert_eq!(loop_.len(), 1, "{all:#?}");
    let f = &loop_[0].example;
    let distinct = values_known.then_some(15);
    assert_eq!(
        (f.kind, f.calls, f.distinct_values),
        (FindingKind::NPlusOne, 15, distinct),
        "{f:#?}"
    );
    f
}

fn on_route<'a>(all: &'a [FindingSummary], route: &str) -> Vec<&'a FindingSummary> {
    all.iter()
        .filter(|f| f.example.route.starts_with(route))
        .collect()
}

/// With statements captured (real values in a Python dict's repr): the loop is an N+1 of 15
/// different values at its line, with MongoDB's fix; the double read is redundant, from both
/// its lines; the batched route ($in) has none.
#[test]
fn an_n_plus_one_and_a_double_read_are_told_apart_by_their_values() {
    let all = findings("pymongo-statements.otlp.pb");
    let f = the_loop(&all, true);
    assert_eq!(f.shape, "find items {order_id: ?}");
    assert_eq!(f.summary, "find items");
    let site = f.site.last().unwrap().location();
    assert!(site.ends_with(&line_of(PY, "N_PLUS_ONE")), "{site}");
    assert!(f.fix.contains("$in"), "{}", f.fix);

    let double = on_route(&all, "GET /profile/");
    assert_eq!(double.len(), 1, "{all:#?}");
    let f = &double[0].example;
    assert_eq!((f.kind, f.calls), (FindingKind::Redundant, 2));
    assert_eq!(f.shape, "find users {_id: ?}");
    for marker in ["FIRST_READ", "SECOND_READ"] {
        assert!(f.evidence.contains(&line_of(PY, marker)), "{}", f.evidence);
    }
    assert!(
        on_route(&all, "GET /orders-batched/").is_empty(),
        "{all:#?}"
    );
}

/// Without statements (PyMongo's default: the command name alone) the values are unknown:
/// the loop is still an N+1, never "the same values ran 15 times".
#[test]
fn without_recorded_values_a_loop_is_an_n_plus_one_not_a_redundant_read() {
    let all = findings("pymongo-commands.otlp.pb");
    let f = the_loop(&all, false);
    // and how to record them, in PyMongo's terms (not SQL's db.query.parameter.*)
    assert!(
        f.evidence.contains("capture_statement=True"),
        "{}",
        f.evidence
    );
    assert_eq!(f.shape, "find items");
    assert!(
        all.iter().all(|f| f.example.kind != FindingKind::Redundant),
        "{all:#?}"
    );
}

/// The Java agent writes each command as JSON with every value "?": the collection and keys
/// are the shape, the values unknown. The loop is an N+1 of 15 at its line; the double read,
/// whose values cannot be compared, is not called redundant.
#[test]
fn the_java_agents_scrubbed_json_is_an_n_plus_one_at_its_line() {
    let all = findings("java-mongo.otlp.delimited.pb.gz");
    let f = the_loop(&all, false);
    assert!(
        f.shape
            .starts_with(r#"{find: "items", filter: {order_id: ?}"#),
        "{}",
        f.shape
    );
    assert_eq!(f.summary, "find items");
    let site = f.site.last().unwrap().location();
    assert!(
        site.ends_with(&line_of("java_mongo/MongoShop.java", "N_PLUS_ONE")),
        "{site}"
    );
    assert!(
        all.iter().all(|f| f.example.kind != FindingKind::Redundant),
        "{all:#?}"
    );
}
