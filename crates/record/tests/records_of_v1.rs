//! Records written before the parts were typed (schema 1, a real `kiln demo` run of
//! 2026-11-26, its large files left out) still read, and every field they hold is one the
//! types know: written back, each part is the same JSON.

use std::path::Path;

use kiln_record::parts::QUERIES_PART;
use kiln_record::schema::plan::{Model, Shard};
use kiln_record::schema::queries::{FindingKind, QueriesRecord};
use kiln_record::{RunDir, RunManifest};
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

/// Each v1 manifest (the demo's; a plan run's; a shard's and a merge's as the binary patched
/// them in by key; a run without load) reads typed and writes back the same JSON.
#[test]
fn v1_manifests_read_typed_and_lose_no_field() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let files = [
        "v1-demo-planted/run.json",
        "v1-manifests/plan-run.json",
        "v1-manifests/shard.json",
        "v1-manifests/merged.json",
        "v1-manifests/queries.json",
    ];
    for file in files {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let manifest: RunManifest = serde_json::from_str(&text).expect(file);
        let raw: Value = serde_json::from_str(&text).unwrap();
        // a key written as null and one left out are the same absent value
        let written = without_nulls(serde_json::to_value(&manifest).unwrap());
        assert_eq!(written, without_nulls(raw), "{file}");
        let load = manifest.plan.load();
        assert_eq!(load.is_some(), !file.ends_with("queries.json"), "{file}");
    }
    let shard = |file: &str| -> RunManifest {
        serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
    };
    let s = shard("v1-manifests/shard.json");
    let plan = s.plan.load().unwrap();
    assert_eq!(plan.shard, Some(Shard { index: 1, count: 2 }));
    let clock = plan.clock.as_ref().unwrap();
    assert_eq!(
        (clock.host.as_str(), clock.offset_to_shard0_ms),
        ("ci-7", Some(0.4))
    );
    assert!(clock.sync.unwrap().trusted_within(100_000));
    assert!(plan.open_model() && plan.thresholds == ["p99<500ms"]);
    let run = shard("v1-manifests/plan-run.json");
    let plan = run.plan.load().unwrap();
    assert_eq!(
        plan.scenarios[0].steps,
        ["login", "order", "cart", "health"]
    );
    assert!(matches!(
        plan.workload,
        Model::Closed { connections: 2, .. }
    ));
}

/// A load plan that does not read (a forged shard count past u32) is an error naming it, not
/// a plan without load.
#[test]
fn a_damaged_load_plan_is_an_error_not_another_kind_of_plan() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let text = std::fs::read_to_string(dir.join("v1-manifests/shard.json")).unwrap();
    let forged = text.replace("\"count\": 2", "\"count\": 1000000000000");
    let e = serde_json::from_str::<RunManifest>(&forged)
        .unwrap_err()
        .to_string();
    assert!(e.contains("load plan"), "{e}");
}

fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// A perf profile's `profile.json` (a real one of a v1 run) and an import's read typed and
/// write back the same JSON.
#[test]
fn v1_profile_records_read_typed_and_lose_no_field() {
    use kiln_record::schema::profile::{CallGraph, Event, ProfileRecord, SourceFormat};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-parts");
    let read = |file: &str| -> (ProfileRecord, Value) {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        (
            serde_json::from_str(&text).expect(file),
            serde_json::from_str(&text).unwrap(),
        )
    };
    for file in ["profile.json", "profile-import.json"] {
        let (typed, raw) = read(file);
        let written = without_nulls(serde_json::to_value(&typed).unwrap());
        assert_eq!(written, without_nulls(raw), "{file}");
    }
    let (perf, _) = read("profile.json");
    assert_eq!(
        (perf.event, perf.call_graph),
        (Some(Event::Cpu), Some(CallGraph::Dwarf))
    );
    assert_eq!((perf.summary.samples, perf.pids.len()), (17, 1));
    let (import, _) = read("profile-import.json");
    assert_eq!(import.source.unwrap().format, SourceFormat::Pprof);
}
