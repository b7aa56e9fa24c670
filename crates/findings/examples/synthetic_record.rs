//! Writes a large run record for the findings benchmark (bench/findings.py): SECONDS seconds of
//! load at RATE requests/s (each second's latencies in its histograms, a stall at every 10th
//! wall-clock second), a resource sample per second, a profile of PROFILE_SAMPLES samples over
//! a few thousand stacks, a DB analysis with findings and the DB stack trie of 1M calls.
//! Usage: cargo run --release -p kiln-findings --example synthetic_record -- DIR [SECONDS] [RATE]

use kiln_record::parts::{
    PROFILE_FOLDED_PART, PROFILE_SUMMARY_PART, QUERIES_PART, TRIE_CALLS_PART, TRIE_TIME_PART,
};
use kiln_record::schema::plan::{Arrivals, LoadPlanRecord, Model, RateStage};
use kiln_record::schema::profile::Event;
use kiln_record::schema::queries::{
    AnalysisRecord, Coverage, Finding, FindingKind, FindingSummary, FingerprintUse, QueriesRecord,
    RouteSummary, Severity,
};
use kiln_record::{
    LoadRecordLine, PhaseEnd, RunDir, RunLocation, RunStatus, SecondRecord, LOAD_SECONDS_PART,
};
use kiln_sample::{CpuSplit, ProcessSecond, ResourceSecond, TaskRates, RESOURCES_PART};

const PROFILE_SAMPLES: u64 = 100_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .ok_or("usage: synthetic_record DIR [SECONDS] [RATE]")?;
    let seconds: u64 = args.get(1).map_or(Ok(600), |s| s.parse())?;
    let rate: u64 = args.get(2).map_or(Ok(10_000), |s| s.parse())?;
    let workload = Model::Open {
        stages: RateStage::steady(rate as f64, std::time::Duration::from_secs(seconds)),
        connections: 64,
        max_connections: 256,
        arrivals: Arrivals::Uniform,
    };
    let url = "http://127.0.0.1:8080/";
    let plan = LoadPlanRecord::new(url, workload, seconds as f64, 2).into();
    let mut run = RunDir::create(
        &RunLocation::Named(dir.into()),
        "synthetic",
        vec!["synthetic_record".into()],
        plan,
    )?;
    let t0_ms: u64 = 1_795_428_000_000;
    let mut load = run.add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)?;
    let mut resources = run.add_json_lines_part(RESOURCES_PART, "resources.jsonl", 1)?;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for t in 0..seconds {
        let mut s = SecondRecord {
            phase: "run".into(),
            second: t as u32,
            unix_ms: t0_ms + 1000 * (t + 1),
            requests: rate,
            sent: rate,
            scheduled: rate,
            status: [(200u16, rate)].into(),
            ..Default::default()
        };
        for _ in 0..rate {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 1-5 ms, and 300 ms at every 10th wall second
            let us = if t.is_multiple_of(10) && x.is_multiple_of(20) {
                300_000
            } else {
                1_000 + x % 4_000
            };
            s.latency.record_us(us);
        }
        s.fill_percentiles();
        load.write(&LoadRecordLine::Second(Box::new(s)))?;
        let cpu = CpuSplit {
            user: 60.0,
            system: 20.0,
            idle: 20.0,
            ..Default::default()
        };
        resources.write(&ResourceSecond {
            second: t as u32,
            unix_ms: t0_ms + 1000 * (t + 1),
            interval_s: 1.0,
            host_cpu: Some(cpu),
            host_cpu_per_core: vec![(0, cpu), (1, cpu)],
            process: Some(ProcessSecond {
                rates: TaskRates {
                    cpu_user_pct: 120.0,
                    cpu_system_pct: 40.0,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        })?;
    }
    load.write(&LoadRecordLine::PhaseEnd(PhaseEnd {
        phase: "run".into(),
        measured: true,
        duration_us: seconds * 1_000_000,
        ..Default::default()
    }))?;
    // a profile: 4,000 stacks of a Java service, some in exceptions and JSON
    let mut folded = String::new();
    let stacks = 4_000u64;
    for i in 0..stacks {
        let leaf = match i % 10 {
            0 => "java.lang.Throwable.fillInStackTrace_[j]",
            1 | 2 => "com.fasterxml.jackson.core.json.ReaderBasedJsonParser.nextToken_[j]",
            _ => "com.acme.shop.Pricing.compute_[j]",
        };
        folded += &format!(
            "java;Thread.run_[j];org.apache.tomcat.Worker.run_[j];com.acme.shop.Controller{}.handle_[j];com.acme.shop.Service{}.work_[j];{leaf} {}\n",
            i % 50,
            i % 200,
            PROFILE_SAMPLES / stacks
        );
    }
    run.write_file_part(PROFILE_FOLDED_PART, "profile.folded", 1, folded.as_bytes())?;
    let (folded, _) = kiln_profile::Folded::parse(&folded)?;
    let profile = kiln_findings::record::Profile::of(folded, Event::Cpu).record;
    run.write_file_part(
        PROFILE_SUMMARY_PART,
        "profile.json",
        1,
        serde_json::to_string(&profile)?.as_bytes(),
    )?;
    let findings = (0..40)
        .map(|i| FindingSummary {
            example: Finding {
                id: format!("f{i}"),
                kind: FindingKind::NPlusOne,
                severity: Severity::High,
                route: format!("GET /r{i}"),
                request: format!("r{i}"),
                fingerprint: "t-by-id".into(),
                summary: "SELECT … FROM t WHERE id = ?".into(),
                shape: "SELECT a, b FROM t WHERE id = ?".into(),
                calls: 12,
                distinct_values: Some(12),
                time_ns: 6_000_000,
                share_of_db_time: 0.9,
                site: Vec::new(),
                structural: false,
                no_app_frame: false,
                parallel: false,
                evidence: "12 calls".into(),
                fix: "batch".into(),
                end_unix_ms: 0,
            },
            requests: 1000,
            calls_median: 12.0,
            calls_max: 12,
            time_total_ns: 6_000_000_000,
            ends_unix_ms: Vec::new(),
        })
        .collect();
    let routes = (0..20)
        .map(|i| RouteSummary {
            route: format!("GET /r{i}"),
            requests: 50_000,
            calls_median: 20.0,
            calls_p95: 20.0,
            calls_max: 20,
            db_time_median_ms: 7.0,
            db_time_p95_ms: 9.0,
            top_queries: vec![FingerprintUse {
                calls: 20,
                shape: "SELECT a, b FROM t WHERE id = ?".into(),
                ..Default::default()
            }],
        })
        .collect();
    let queries = QueriesRecord {
        analysis: AnalysisRecord {
            requests_matched: 1_000_000,
            findings,
            routes,
            coverage: Coverage {
                db_spans: 1_000_000,
                db_with_text: 1_000_000,
                db_with_caller: 1_000_000,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    run.write_file_part(
        QUERIES_PART,
        "queries.json",
        1,
        serde_json::to_string(&queries)?.as_bytes(),
    )?;
    // the DB stack trie of 1,000,000 calls (the spans' analysis is bench/queries.py's; the
    // record keeps the trie as collapsed calls and DB time): 20 routes, 100 frames deep
    // paths of an ORM service, 2,000 distinct stacks
    let (mut calls, mut time) = (String::new(), String::new());
    let stacks = 2_000u64;
    for i in 0..stacks {
        let path = format!(
            "GET /r{};com.acme.shop.Controller{}.handle (Controller.java:{});com.acme.shop.Repo{}.load (Repo.java:{});SQL SELECT a, b FROM t{} WHERE id = ?",
            i % 20,
            i % 50,
            10 + i % 7,
            i % 100,
            20 + i % 13,
            i % 300
        );
        calls += &format!("{path} {}\n", 1_000_000 / stacks);
        time += &format!("{path} {}\n", 1_000_000 / stacks * 350);
    }
    run.write_file_part(TRIE_CALLS_PART, "db-trie-calls.folded", 1, calls.as_bytes())?;
    run.write_file_part(TRIE_TIME_PART, "db-trie-time.folded", 1, time.as_bytes())?;
    run.finish(RunStatus::Complete, None)?;
    println!("{dir}");
    Ok(())
}
