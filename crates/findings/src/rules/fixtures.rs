//! Run records built in memory for the rules' tests: a load whose every number is known by
//! construction, resources a second at a time, profiles as collapsed-stack text.

use std::collections::BTreeMap;

use kiln_profile::Folded;
use kiln_record::{ErrorKind, PhaseEnd, PhaseSummary, RunManifest, RunStatus, SecondRecord};
use kiln_sample::ResourceSecond;

use crate::record::{LoadPoint, Profile};
use crate::RunRecord;

/// The wall clock of the fixtures' first second (2026-11-23 10:00:00 UTC).
pub const T0_MS: u64 = 1_795_428_000_000;

/// One second of load.
#[derive(Clone, Debug, Default)]
pub struct Second {
    pub status: BTreeMap<u16, u64>,
    pub errors: BTreeMap<ErrorKind, u64>,
    /// (latency in µs, responses)
    pub latencies: Vec<(u64, u64)>,
}

impl Second {
    /// `n` responses, 200 OK, each 2 ms.
    pub fn ok(n: u64) -> Self {
        Self::latencies(&[(2_000, n)])
    }

    /// 200 OK responses with these latencies.
    pub fn latencies(latencies: &[(u64, u64)]) -> Self {
        Self {
            status: BTreeMap::from([(200, latencies.iter().map(|(_, n)| n).sum())]),
            errors: BTreeMap::new(),
            latencies: latencies.to_vec(),
        }
    }
}

/// A complete run's manifest: an open model at 100/s on one thread.
pub fn manifest() -> RunManifest {
    use kiln_record::schema::plan::{Arrivals, LoadPlanRecord, Model, RateStage};
    let workload = Model::Open {
        stages: RateStage::steady(100.0, std::time::Duration::from_secs(10)),
        connections: 1,
        max_connections: 16,
        arrivals: Arrivals::Uniform,
    };
    RunManifest {
        schema_version: 1,
        kiln_version: "test".into(),
        id: "fixture".into(),
        name: "fixture".into(),
        command: Vec::new(),
        plan: LoadPlanRecord::new("http://127.0.0.1/", workload, 10.0, 1).into(),
        started_at: "2026-11-23T10:00:00Z".into(),
        ended_at: None,
        status: RunStatus::Complete,
        status_reason: None,
        parts: Vec::new(),
        not_recorded: Default::default(),
    }
}

/// A complete run of one measured phase with these seconds.
pub fn load_run(seconds: &[Second]) -> RunRecord {
    let mut run = RunRecord::empty(manifest());
    run.status = RunStatus::Complete;
    let mut phase = PhaseSummary::new("run");
    let mut records = Vec::new();
    for (i, s) in seconds.iter().enumerate() {
        let mut record = SecondRecord {
            phase: "run".into(),
            second: i as u32,
            unix_ms: T0_MS + 1000 * (i as u64 + 1),
            status: s.status.clone(),
            errors: s.errors.clone(),
            ..Default::default()
        };
        for (us, n) in &s.latencies {
            record.latency.record_n_us(*us, *n);
        }
        record.requests =
            (s.status.values().chain(s.errors.values())).fold(0u64, |a, n| a.saturating_add(*n));
        record.sent = record.requests;
        record.scheduled = record.requests;
        phase.add_second(&record);
        run.seconds.push(LoadPoint::of(&record));
        records.push(record);
    }
    // the slow-request spread as RunRecord::read finds it
    let p95 = phase.totals.latency.quantile_us(0.95);
    let counts = records.iter().map(|r| kiln_hedge::SecondCounts {
        requests: r.latency.count(),
        slow: r.latency.count_above(p95),
    });
    run.tail = Some((p95, counts.collect()));
    let p99 = phase.totals.latency.quantile_us(0.99);
    run.above_p99 = records
        .iter()
        .map(|r| (r.unix_ms, r.latency.count_above(p99)))
        .collect();
    phase.set_end(&PhaseEnd {
        phase: "run".into(),
        measured: true,
        duration_us: seconds.len() as u64 * 1_000_000,
        ..Default::default()
    });
    run.phases.push(phase);
    run
}

/// A run with resources only (as `kiln watch` records), one sample a second.
pub fn resource_run(samples: Vec<ResourceSecond>) -> RunRecord {
    let mut run = RunRecord::empty(manifest());
    run.resources = samples
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            s.second = i as u32;
            s.unix_ms = T0_MS + 1000 * (i as u64 + 1);
            s.interval_s = 1.0;
            s
        })
        .collect();
    run
}

/// A run with a profile of these collapsed stacks (`frame;frame;leaf count` lines).
pub fn profiled_run(folded: &str) -> RunRecord {
    let mut run = RunRecord::empty(manifest());
    let folded = Folded::parse(folded).expect("valid collapsed stacks").0;
    run.profile = Some(Profile::of(
        folded,
        kiln_record::schema::profile::Event::Cpu,
    ));
    run
}
