//! Records written before the parts were typed (schema 1, a real `kiln demo` run of
//! 2026-11-26, its large files left out) still read, and every field they hold is one the
//! types know: written back, each part is the same JSON.

use std::path::Path;

use kiln_record::parts::QUERIES_PART;
use kiln_record::schema::queries::{FindingKind, QueriesRecord};
use kiln_record::RunDir;
use serde_json::Value;

fn fixture() -> RunDir {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-demo-planted");
    RunDir::open(&dir).expect("the v1 fixture opens")
}

/// The part as the types read it, and as plain JSON.
fn both<T: serde::de::DeserializeOwned + serde::Serialize>(dir: &RunDir, kind: &str) -> (T, Value) {
    let typed: T = dir
        .read_json_part(kind)
        .unwrap()
        .expect("the part is listed");
    let raw: Value = dir.read_json_part(kind).unwrap().unwrap();
    (typed, raw)
}

#[test]
fn a_v1_queries_part_reads_typed_and_loses_no_field() {
    let dir = fixture();
    let (queries, raw) = both::<QueriesRecord>(&dir, QUERIES_PART);
    let a = &queries.analysis;
    assert_eq!((a.db_calls, a.requests_matched), (1656, 184));
    assert_eq!(a.findings.len(), 1);
    assert_eq!(a.findings[0].example.kind, FindingKind::NPlusOne);
    assert!(!a.routes.is_empty() && !queries.trie.heaviest.is_empty());
    assert_eq!(serde_json::to_value(&queries).unwrap(), raw);
}
