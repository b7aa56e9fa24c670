//! `kiln demo`: what kiln is for, in one command and no setup. It starts an embedded target
//! that pauses for 100 ms every second (like a GC pause or a cache expiring on the minute),
//! loads it the way wrk does (closed model) and the way users arrive (open model), and shows
//! why the first hides the pause and the second does not. The second run is also profiled with
//! perf (when it is installed and permitted): the target's hot function, which burns a known
//! 0.3 ms of CPU per request, leads the flame graph. The target also reports its (simulated)
//! database calls as OpenTelemetry traces to kiln: one request in ten shows an N+1 of
//! `DB_ITEMS` queries from one loop, which the open run's DB-call analysis finds.

use std::time::Duration;

use anyhow::Result;
use kiln_load::{LoadPlan, Model, PhaseSpec, RateStage, RequestSpec, StopSignal, Target};
use kiln_record::RunLocation;
use kiln_targets::traced::Traces;
use kiln_targets::{Behavior, Stall, TargetServer};

use crate::cli::{DemoArgs, QueryAnalysisArgs, TrieFrames};
use crate::format;
use crate::live::LiveOutput;
use crate::run_cmd::print_outcome;
use kiln_runner::{execute, OtlpSpec, RunSpec};

/// Each answer takes 2 ms: 0.3 ms of CPU in `burn_cpu_for_request`, then 1.7 ms asleep.
const SERVICE: Duration = Duration::from_millis(2);
const CPU_PER_REQUEST: Duration = Duration::from_micros(300);
/// Product queries per traced order page: the N of the target's N+1.
const DB_ITEMS: usize = 8;
const STALL: Stall = Stall {
    every: Duration::from_secs(1),
    length: Duration::from_millis(100),
};

pub fn run(args: DemoArgs, stop: &StopSignal) -> Result<u8> {
    let receiver = crate::queries_cmd::start_receiver("127.0.0.1:0")?;
    let target = TargetServer::start(Behavior {
        service_time: SERVICE - CPU_PER_REQUEST,
        cpu_per_request: CPU_PER_REQUEST,
        stall: Some(STALL),
        traces: Some(Traces {
            endpoint: receiver.addr(),
            every: 10,
            items: DB_ITEMS,
        }),
        ..Default::default()
    })?;
    let mut receiver = Some(receiver);
    let duration = Duration::from_secs(args.seconds.clamp(1, 600));
    let base = LoadPlan {
        target: Target::parse(&target.url("/"))?,
        request: RequestSpec::default(),
        model: Model::Closed {
            connections: 4,
            think_time: Duration::ZERO,
            ramp_up: Duration::ZERO,
        },
        duration,
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        threads: 2,
        insecure: false,
        dead_after: Duration::from_secs(5),
    };
    eprintln!(
        "kiln demo: a target at {} answers in {} ({} of it on the CPU) but pauses {} every {}\n(like a GC pause).",
        target.addr(),
        format::us(SERVICE.as_micros() as u64),
        format::us(CPU_PER_REQUEST.as_micros() as u64),
        format::us(STALL.length.as_micros() as u64),
        format::us(STALL.every.as_micros() as u64)
    );
    eprintln!(
        "Expected at a steady arrival rate: 90% of requests at ~2 ms, p95 ~52 ms, p99 ~92 ms.\n\
         It sends its traces to kiln: each order page makes 1 + {DB_ITEMS} (simulated) database queries,\n\
         {DB_ITEMS} of them from one loop (an N+1).\n"
    );

    let mut code = 0;
    let mut p99s = Vec::new();
    let mut reports: Vec<std::path::PathBuf> = Vec::new();
    let analysis = crate::queries_cmd::settings(&QueryAnalysisArgs {
        route: None,
        request: None,
        n_plus_one: 5,
        slow_ms: 500.0,
        frames: TrieFrames::App,
        html: None,
        ignore_sql: Vec::new(),
        ignore_frames: Vec::new(),
        app_packages: Vec::new(),
        fail_on: None,
    })?;
    let open = LoadPlan {
        model: Model::Open {
            stages: RateStage::steady(500.0, duration),
            connections: 8,
            max_connections: 200,
            arrivals: kiln_load::Arrivals::Uniform,
        },
        ..base.clone()
    };
    for (title, plan, name, profile_hz, with_traces) in [
        (
            "1. Closed model, 4 connections back to back (what wrk and oha do):",
            base,
            "demo-closed",
            None,
            false,
        ),
        (
            "2. Open model, 500 requests/s on a schedule (what users do), profiled with perf, \
             with the target's traces:",
            open,
            "demo-open",
            Some(99),
            true,
        ),
    ] {
        eprintln!("{title}");
        let phases = [(
            PhaseSpec {
                name: "run".into(),
                measured: true,
            },
            Duration::ZERO,
        )];
        let out = RunLocation::Fresh {
            parent: args.runs_dir.clone(),
            name: name.to_string(),
        };
        let mut live = LiveOutput::new(false, 1);
        // The embedded target runs in this process, so kiln watches itself (its own load
        // threads included) to show the resource view.
        let spec = RunSpec {
            plan: &plan,
            plan_record: plan.to_record(),
            phases: &phases,
            out,
            name,
            watch_pid: Some(std::process::id() as i32),
            profile_hz,
            off_cpu: false,
            otlp: match (with_traces, receiver.take()) {
                (true, Some(receiver)) => {
                    // the closed run's traces are not this run's
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    receiver.discard_received();
                    Some(OtlpSpec {
                        receiver,
                        wait: Duration::from_secs(3),
                        settings: &analysis,
                    })
                }
                (_, r) => {
                    receiver = r;
                    None
                }
            },
        };
        let outcome = execute(spec, stop, &mut live)?;
        p99s.push(
            outcome
                .phases
                .first()
                .map_or(0, |p| p.totals.latency.quantile_us(0.99)),
        );
        reports.extend(outcome.report.clone());
        code = code.max(print_outcome(&outcome, args.json, None, None)?);
        if stop.is_stopped() {
            return Ok(code);
        }
        eprintln!();
    }
    // the pages come first: they hold everything the text above says, and more
    for report in &reports {
        eprintln!(
            "Report: {}",
            format::safe_text(&report.display().to_string())
        );
    }
    eprintln!(
        "The same target: the closed model reports p99 {}, the open model p99 {}.\n\
         A closed-model connection waits out each pause and then sends again, so the pause is\n\
         sampled once per connection instead of once per user who arrived during it.\n\
         Re-read any run with: kiln report <run dir>",
        format::us(p99s[0]),
        format::us(p99s[1])
    );
    Ok(code)
}
