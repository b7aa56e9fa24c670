//! Every reader of a run record on hostile bytes: `run.json` and the load seconds, as raw
//! bytes and as valid lines with their numbers replaced by any value. Nothing panics; what
//! cannot be read is an error naming the file, and what can is summed without wrapping.

use std::path::Path;

use kiln_record::{
    record_warnings, LoadRecordLine, PhaseSummary, Run, RunDir, RunLocation, RunStatus,
    LOAD_SECONDS_PART,
};
use proptest::prelude::*;

/// A run directory with a load-seconds part holding `seconds`.
fn run_with_seconds(root: &Path, seconds: &[u8]) -> RunDir {
    let path = root.join("run");
    let mut dir = RunDir::create(
        &RunLocation::Named(path.clone()),
        "fuzz",
        vec![],
        kiln_record::schema::plan::PlanRecord::Other(serde_json::Value::Null),
    )
    .unwrap();
    drop(
        dir.add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
            .unwrap(),
    );
    std::fs::write(path.join("load-seconds.jsonl"), seconds).unwrap();
    dir.finish(RunStatus::Complete, None).unwrap();
    RunDir::open(&path).unwrap()
}

/// Reads the seconds as every reader does (`kiln_record::Run`), with what the readers ask of
/// it; the phases, or the first error.
fn read_phases(dir: RunDir) -> Result<Vec<PhaseSummary>, String> {
    let run = Run::read(dir);
    let _ = (
        run.span(),
        PhaseSummary::kiln_cores(&run.phases),
        run.measured(),
    );
    let _ = run.each_measured_second(|s| s.latency.count_above(1_000));
    match run.load_problem {
        Some(problem) => Err(problem),
        None => Ok(run.phases),
    }
}

/// A real second's line (with a histogram) to mutate.
fn real_second() -> String {
    let mut latency = kiln_record::LatencyHistogram::new();
    latency.record_us(1_000);
    latency.record_us(2_000);
    let second = kiln_record::SecondRecord {
        phase: "run".into(),
        second: 3,
        requests: 5,
        sent: 5,
        scheduled: 5,
        status: [(200, 4), (503, 1)].into(),
        errors: [(kiln_record::ErrorKind::Timeout, 1)].into(),
        body_bytes: 100,
        connections: 2,
        latency,
        ..Default::default()
    };
    serde_json::to_string(&LoadRecordLine::Second(Box::new(second))).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_bytes_as_run_json_are_read_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("run.json"), &bytes).unwrap();
        if let Err(e) = RunDir::open(tmp.path()) {
            prop_assert!(e.to_string().contains("run.json"), "{}", e);
        }
    }

    #[test]
    fn any_bytes_as_load_seconds_are_read_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = run_with_seconds(tmp.path(), &bytes);
        if let Ok(phases) = read_phases(dir) {
            let _ = record_warnings(RunStatus::Complete, &phases);
        }
    }

    #[test]
    fn a_second_with_any_numbers_is_read_or_refused(
        values in prop::collection::vec(any::<u64>(), 8),
        copies in 1usize..4,
    ) {
        // Every count of a valid line replaced by any value, the line repeated.
        let mut line = real_second();
        for (i, key) in ["\"requests\":5", "\"sent\":5", "\"second\":3", "\"200\":4",
                         "\"timeout\":1", "\"body_bytes\":100", "\"scheduled\":5",
                         "\"connections\":2"].iter().enumerate() {
            prop_assert!(line.contains(key), "{} not in {}", key, line);
            let (name, _) = key.split_once(':').unwrap();
            line = line.replacen(key, &format!("{name}:{}", values[i]), 1);
        }
        let text = format!("{line}\n").repeat(copies);
        let tmp = tempfile::tempdir().unwrap();
        let dir = run_with_seconds(tmp.path(), text.as_bytes());
        if let Ok(phases) = read_phases(dir) {
            for p in &phases {
                let _ = (p.throughput(), p.failed_ratio(), p.failed(), p.latency_stats());
            }
            let merged = PhaseSummary::merged("all", &phases.iter().collect::<Vec<_>>());
            // Counts saturate instead of wrapping: the merge holds at least each phase's.
            for p in &phases {
                prop_assert!(merged.totals.requests >= p.totals.requests);
            }
            let _ = record_warnings(RunStatus::Complete, &phases);
        }
    }
}

#[test]
fn the_real_second_used_above_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = run_with_seconds(tmp.path(), format!("{}\n", real_second()).as_bytes());
    let phases = read_phases(dir).unwrap();
    assert_eq!(phases[0].totals.requests, 5);
}
