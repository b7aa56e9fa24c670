//! A merge reads every shard's seconds at once, one open file each: more shards than the soft
//! open-files limit (1,024 by default) are merged after kiln raises it to the hard limit, and
//! more than the hard limit allows are refused with the command that allows them, before
//! anything is written. Its own test binary: it lowers this process's limits.

use std::path::{Path, PathBuf};

use kiln_merge::{merge, MergeOptions};
use kiln_record::schema::plan::{LoadPlanRecord, Model, PlanRecord, Shard};
use kiln_record::{
    LoadRecordLine, RunDir, RunLocation, RunStatus, SecondRecord, LOAD_SECONDS_PART,
};

/// Shard `index` of `count`: one second of 10 requests.
fn shard(parent: &Path, index: u32, count: u32) -> PathBuf {
    let dir = parent.join(format!("shard-{index}"));
    let workload = Model::Closed {
        connections: 1,
        think_time: std::time::Duration::ZERO,
        ramp_up: std::time::Duration::ZERO,
        stages: Vec::new(),
    };
    let mut plan = LoadPlanRecord::new("http://127.0.0.1/", workload, 1.0, 1);
    plan.shard = Some(Shard { index, count });
    let mut run = RunDir::create(
        &RunLocation::Named(dir.clone()),
        "shard",
        vec![],
        PlanRecord::from(plan),
    )
    .unwrap();
    let mut seconds = run
        .add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
        .unwrap();
    seconds
        .write(&LoadRecordLine::Second(Box::new(SecondRecord {
            phase: "run".into(),
            second: 0,
            unix_ms: 1_000_000,
            requests: 10,
            ..Default::default()
        })))
        .unwrap();
    drop(seconds);
    run.finish(RunStatus::Complete, None).unwrap();
    dir
}

fn set_files_limit(soft: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we own.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

#[test]
fn more_shards_than_the_soft_limit_merge_and_more_than_the_hard_one_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let count = 300;
    let shards: Vec<PathBuf> = (0..count).map(|i| shard(tmp.path(), i, count)).collect();
    let (_, hard) = kiln_record::descriptors::open_files_limit().unwrap();
    assert!(
        hard >= 400,
        "this test needs a hard limit of 400 open files, not {hard}"
    );

    // a soft limit of 128 (under the 300 shards): raised, and every second merged
    set_files_limit(128, hard);
    let out = tmp.path().join("merged");
    let merged = merge(&shards, &out, MergeOptions::default()).unwrap();
    assert_eq!(
        merged.status,
        RunStatus::Complete,
        "{:?}",
        merged.status_reason
    );
    let run = RunDir::open(&out).unwrap();
    let requests: u64 = run
        .json_lines::<LoadRecordLine>(LOAD_SECONDS_PART)
        .unwrap()
        .filter_map(|line| match line.unwrap() {
            LoadRecordLine::Second(s) => Some(s.requests),
            _ => None,
        })
        .sum();
    assert_eq!(requests, 10 * u64::from(count));

    // a hard limit of 256: refused with why, and no merged run written
    set_files_limit(256, 256);
    let out = tmp.path().join("refused");
    let refused = merge(&shards, &out, MergeOptions::default()).unwrap_err();
    assert!(
        refused.to_string().contains(
            "merging 300 shards reads them at once and needs 332 open files; kiln may open \
             256 (raise the hard limit: ulimit -Hn 332)"
        ),
        "{refused}"
    );
    assert!(!out.exists());
}
