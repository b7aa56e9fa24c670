//! `kiln run`: flags -> plan -> phases (warm-up, measured runs) -> run directory and summary.

use kiln_record::schema::plan::{ScenarioOutline, ShardClock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kiln_load::plan::{parse_duration, parse_stages};
use kiln_load::{LoadPlan, Model, PhaseSpec, RequestSpec, StopSignal, Target};
use kiln_record::{PhaseSummary, RunLocation, RunStatus};
use kiln_runner::{execute, JvmProfiler, OtlpSpec, RunOutcome, RunSpec};
use kiln_sample::ProcFs;

use crate::cli::{CompareMethod, FailOn, RunArgs};
use crate::exit::{
    interrupted_exit_code, EXIT_INPUT_FAILED, EXIT_SENT_NOTHING, EXIT_THRESHOLDS_FAILED,
};
use crate::summary;
use kiln_summary::thresholds::{self, Threshold};
use kiln_terminal::LiveOutput;

/// The largest request body kiln sends (each connection holds the encoded request).
const MAX_BODY_BYTES: u64 = 64 << 20;

/// `-b TEXT` or `-b @FILE`, as curl reads it; at most `MAX_BODY_BYTES` (`@/dev/zero` would
/// otherwise fill memory).
fn read_body(arg: &str) -> Result<Vec<u8>> {
    let Some(path) = arg.strip_prefix('@') else {
        return Ok(arg.as_bytes().to_vec());
    };
    kiln_record::input::read_regular(std::path::Path::new(path), MAX_BODY_BYTES)
        .with_context(|| format!("cannot read the body file '{path}'"))
}

/// The longest `--warmup auto` when no cap is given.
const AUTO_WARMUP_CAP: Duration = Duration::from_secs(60);

fn warmup_is_auto(args: &RunArgs) -> bool {
    args.warmup
        .as_deref()
        .is_some_and(|w| w.starts_with("auto"))
}

/// `--warmup DURATION`, or `auto` / `auto:CAP` (the warm-up's cap).
fn warmup_flag(args: &RunArgs) -> Result<Option<Duration>> {
    let Some(w) = args.warmup.as_deref() else {
        return Ok(None);
    };
    let cap = match w.strip_prefix("auto") {
        Some("") => return Ok(Some(AUTO_WARMUP_CAP)),
        Some(rest) => rest.strip_prefix(':').with_context(|| {
            format!("--warmup {w}: auto takes a cap as auto:DURATION, e.g. auto:30s")
        })?,
        None => w,
    };
    let d = parse_duration(cap).with_context(|| format!("--warmup {w}"))?;
    if warmup_is_auto(args) {
        check_auto_cap(&format!("--warmup {w}"), d)?;
    }
    Ok(Some(d))
}

/// An auto warm-up's cap must leave it time to judge.
fn check_auto_cap(what: &str, cap: Duration) -> Result<()> {
    if cap.as_secs() < u64::from(kiln_runner::warmup::MIN_SECONDS) {
        bail!(
            "{what}: the cap is shorter than the {} s an auto warm-up needs to judge",
            kiln_runner::warmup::MIN_SECONDS
        );
    }
    Ok(())
}

/// A plan file's warm-up as the phases take it: its time (an auto warm-up's cap) and
/// whether it is auto.
fn plan_warmup(w: Option<kiln_plan::Warmup>) -> Result<(Option<Duration>, bool)> {
    Ok(match w {
        None => (None, false),
        Some(kiln_plan::Warmup::Fixed(d)) => (Some(d), false),
        Some(kiln_plan::Warmup::Auto { cap }) => {
            let cap = cap.unwrap_or(AUTO_WARMUP_CAP);
            check_auto_cap("the plan's warmup: auto", cap)?;
            (Some(cap), true)
        }
    })
}

/// What `kiln run` loads: the engine's plan, and what a plan file adds to it.
pub struct Built {
    pub load: LoadPlan,
    /// The plan file's thresholds, then --threshold's.
    pub thresholds: Vec<String>,
    /// --warmup, else the plan file's (with `auto`: its cap).
    pub warmup: Option<Duration>,
    /// `--warmup auto`: the warm-up ends when the target has settled.
    pub warmup_auto: bool,
    /// The plan file's scenarios (name, weight, step names), for the record.
    pub outline: Option<Vec<(String, u32, Vec<String>)>>,
}

const DEFAULT_CONNECTIONS: usize = 50;
const DEFAULT_DURATION: &str = "10s";
const DEFAULT_TIMEOUT: &str = "10s";

/// Turns flags (and a plan file, when the argument is one) into a validated plan,
/// resolving hosts once.
pub fn build(args: &RunArgs) -> Result<Built> {
    let mut built = build_whole(args)?;
    if let Some(text) = &args.shard {
        let job_index = std::env::var("JOB_COMPLETION_INDEX").ok();
        let shard = kiln_load::plan::Shard::parse(text, job_index.as_deref())
            .map_err(anyhow::Error::msg)?;
        built.load = built.load.into_shard(shard)?;
    }
    Ok(built)
}

/// The whole plan, before any --shard.
fn build_whole(args: &RunArgs) -> Result<Built> {
    if kiln_plan::is_plan_path(&args.url) {
        return build_from_plan_file(args);
    }
    if !args.set.is_empty() {
        bail!("--set is for plan files (kiln run plan.yaml --set NAME=VALUE)");
    }
    Ok(Built {
        load: build_plan(args)?,
        thresholds: args.thresholds.clone(),
        warmup: warmup_flag(args)?,
        warmup_auto: warmup_is_auto(args),
        outline: None,
    })
}

/// A plan file, with kiln run's flags as the last word: -c, -d, -R and --timeout are
/// `--set vus=`, `duration=`, `rate=`, `timeout=` after the user's own --set.
fn build_from_plan_file(args: &RunArgs) -> Result<Built> {
    if args.hedge.is_some() {
        bail!("--hedge hedges a URL's request; a plan file's requests are not hedged yet");
    }
    for (given, flag) in [
        (args.stages.is_some(), "--stages"),
        (!args.headers.is_empty(), "-H"),
        (args.body.is_some(), "-b"),
        // given at all, whatever the value: `--think-time 0` beside a plan once was refused
        // and `--think-time 0s` passed silently
        (args.method.is_some(), "-m"),
        (args.think_time.is_some(), "--think-time"),
        (args.ramp_up.is_some(), "--ramp-up"),
    ] {
        if given {
            bail!("{flag} does not go with a plan file: write it in the plan");
        }
    }
    let mut sets = args
        .set
        .iter()
        .map(|s| kiln_plan::parse_set(s).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    let flag_sets = [
        ("vus", args.connections.map(|c| c.to_string())),
        ("duration", args.duration.clone()),
        ("rate", args.rate.map(|r| r.to_string())),
        ("timeout", args.timeout.clone()),
    ];
    for (key, value) in flag_sets {
        if let Some(v) = value {
            sets.push((format!("load.{key}"), v));
        }
    }
    let plan = kiln_plan::load(std::path::Path::new(&args.url), &sets)?;
    let mut load = LoadPlan {
        workload: Some(plan.workload.clone()),
        http2: args.http2 || plan.http2,
        timeout: plan.timeout.unwrap_or(parse_duration(DEFAULT_TIMEOUT)?),
        ..LoadPlan::new(plan.base().clone(), plan.model.clone(), plan.duration)
    };
    common_flags(&mut load, args)?;
    load.validate()?;
    if let Some(note) = kiln_load::limits::fit_max_connections(&mut load) {
        eprintln!("kiln: {note}");
    }
    let mut thresholds =
        thresholds::check_plan_thresholds(&args.url, &plan.thresholds, &plan.workload.names)?;
    for t in &args.thresholds {
        Threshold::parse(t)?;
        thresholds.push(t.clone());
    }
    check_repeat(args)?;
    let (warmup, warmup_auto) = match &args.warmup {
        Some(_) => (warmup_flag(args)?, warmup_is_auto(args)),
        None => plan_warmup(plan.warmup)?,
    };
    Ok(Built {
        load,
        thresholds,
        warmup,
        warmup_auto,
        outline: Some(plan.outline),
    })
}

/// The flags a URL run and a plan file's run share: connecting, threads, certificates and
/// when a failing run is dead.
fn common_flags(plan: &mut LoadPlan, args: &RunArgs) -> Result<()> {
    plan.connect_timeout = parse_duration(&args.connect_timeout)?;
    if let Some(threads) = args.threads {
        plan.threads = threads;
    }
    plan.insecure = args.insecure;
    plan.dead_after = parse_duration(&args.dead_after)?;
    plan.wait_after_deadline = args.wait_after_deadline;
    Ok(())
}

fn check_repeat(args: &RunArgs) -> Result<()> {
    if !(1..=1000).contains(&args.repeat) {
        bail!("--repeat is out of range: {} (1 to 1000)", args.repeat);
    }
    Ok(())
}

/// Turns flags into a validated plan (resolving the host once).
pub fn build_plan(args: &RunArgs) -> Result<LoadPlan> {
    let target = Target::parse(&args.url)?;
    let mut request = RequestSpec {
        method: RequestSpec::parse_method(args.method.as_deref().unwrap_or("GET"))?,
        ..Default::default()
    };
    for h in &args.headers {
        request.headers.push(RequestSpec::parse_header(h)?);
    }
    if let Some(body) = &args.body {
        request.body = read_body(body)?.into();
    }
    let (model, duration) = match (&args.rate, &args.stages) {
        (Some(rate), _) => {
            if !(rate.is_finite() && *rate > 0.0 && *rate <= 10_000_000.0) {
                // a float's Display prints every digit: a 300-digit rate came back in full
                let said = if rate.abs() < 1e9 {
                    rate.to_string()
                } else {
                    format!("{rate:.3e}")
                };
                bail!("--rate is out of range: {said} (more than 0, at most 10000000)");
            }
            let duration = parse_duration(args.duration.as_deref().unwrap_or(DEFAULT_DURATION))?;
            let stages = kiln_load::RateStage::steady(*rate, duration);
            (open_model(args, stages), duration)
        }
        (None, Some(text)) => {
            let stages = parse_stages(text)?;
            let duration = stages.iter().map(|s| s.duration).sum();
            (open_model(args, stages), duration)
        }
        (None, None) => (
            Model::Closed {
                connections: connections(args),
                think_time: parse_duration(args.think_time.as_deref().unwrap_or("0s"))?,
                ramp_up: parse_duration(args.ramp_up.as_deref().unwrap_or("0s"))?,
                stages: Vec::new(),
            },
            parse_duration(args.duration.as_deref().unwrap_or(DEFAULT_DURATION))?,
        ),
    };
    let mut plan = LoadPlan {
        request,
        timeout: parse_duration(args.timeout.as_deref().unwrap_or(DEFAULT_TIMEOUT))?,
        http2: args.http2,
        ..LoadPlan::new(target, model, duration)
    };
    common_flags(&mut plan, args)?;
    plan.hedge = hedge_plan(args, &plan.request)?;
    plan.validate()?;
    if let Some(note) = kiln_load::limits::fit_max_connections(&mut plan) {
        eprintln!("kiln: {note}");
    }
    for t in &args.thresholds {
        Threshold::parse(t)?;
    }
    check_repeat(args)?;
    Ok(plan)
}

/// `--hedge`, `--hedge-cap`, `--replica`, `--hedge-any-method`.
fn hedge_plan(args: &RunArgs, request: &RequestSpec) -> Result<Option<kiln_load::HedgePlan>> {
    let method = &request.method;
    let Some(delay) = &args.hedge else {
        return Ok(None);
    };
    let delay: kiln_hedge::Delay = delay.parse().context("--hedge")?;
    if !args.hedge_any_method && !kiln_load::hedge::is_idempotent(method) {
        bail!(
            "--hedge sends some requests twice, and {method} is not idempotent: a second copy \
             could do its work twice (--hedge-any-method hedges it anyway)"
        );
    }
    let cap = parse_hedge_cap(&args.hedge_cap)?;
    let replicas = args
        .replicas
        .iter()
        .map(|url| Target::parse(url).with_context(|| format!("--replica {url}")))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(kiln_load::HedgePlan::new(delay, cap, replicas)))
}

/// `--hedge-cap`: `5%` or `5` (percent of the requests), above 0 and at most 100.
fn parse_hedge_cap(text: &str) -> Result<f64> {
    let number = text.trim().trim_end_matches('%').trim();
    match number.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p / 100.0),
        _ => bail!("--hedge-cap {text:?} is not a share of the requests (such as 5% or 0.5%)"),
    }
}

fn connections(args: &RunArgs) -> usize {
    args.connections.unwrap_or(DEFAULT_CONNECTIONS)
}

fn open_model(args: &RunArgs, stages: Vec<kiln_load::RateStage>) -> Model {
    Model::Open {
        stages,
        connections: connections(args),
        max_connections: args.max_connections.max(connections(args)),
        arrivals: match args.arrivals {
            crate::cli::ArrivalsArg::Uniform => kiln_load::Arrivals::Uniform,
            crate::cli::ArrivalsArg::Poisson => kiln_load::Arrivals::Poisson {
                seed: args
                    .seed
                    .unwrap_or_else(|| kiln_record::clock::unix_ns_now().max(1)),
            },
        },
    }
}

/// The phases of a run: an optional warm-up, then the measured runs.
pub fn phases(
    args: &RunArgs,
    warmup: Option<Duration>,
    start_at: Option<std::time::SystemTime>,
) -> Result<Vec<(PhaseSpec, Duration)>> {
    let mut out = Vec::new();
    if let Some(d) = warmup {
        if !d.is_zero() {
            out.push((
                PhaseSpec {
                    name: "warmup".into(),
                    measured: false,
                    start_at: None,
                },
                d,
            ));
        }
    }
    for i in 1..=args.repeat {
        let name = if args.repeat == 1 {
            "run".to_string()
        } else {
            format!("run-{i}")
        };
        out.push((
            PhaseSpec {
                name,
                measured: true,
                start_at: None,
            },
            Duration::ZERO,
        ));
    }
    // --start-at or --barrier: the first phase starts then (the shards of one plan together)
    if let Some((first, _)) = out.first_mut() {
        first.start_at = start_at;
    }
    Ok(out)
}

/// When the first phase starts, on this machine's clock, and what an HTTP barrier measured
/// of this clock against shard 0's: (offset, round trip) in ms.
struct Start {
    at: std::time::SystemTime,
    clock_offset: Option<(f64, f64)>,
}

/// `--start-at`: an RFC 3339 time, e.g. 2026-12-01T10:00:00Z; or `--barrier DIR`: when
/// every shard has said it is ready there; or `--barrier http://HOST:PORT`: when every shard
/// has told shard 0, which serves the barrier there.
fn start_at(args: &RunArgs, shard: Option<kiln_load::plan::Shard>) -> Result<Option<Start>> {
    if let Some(place) = &args.barrier {
        if args.start_at.is_some() {
            bail!("--barrier and --start-at both say when to start: give one");
        }
        let Some(shard) = shard else {
            bail!("--barrier is for shards (--shard I/N): it waits for the N of them");
        };
        let timeout = parse_duration(&args.barrier_timeout)?;
        if let Some(addr) = place.strip_prefix("http://") {
            let barrier = kiln_runner::http_barrier::HttpBarrier {
                addr: addr.trim_end_matches('/').to_string(),
                index: shard.index,
                count: shard.count,
                plan: plan_id(&args.url),
                timeout,
                token: args
                    .barrier_token
                    .clone()
                    .or_else(|| std::env::var("KILN_BARRIER_TOKEN").ok())
                    .filter(|t| !t.is_empty()),
            };
            let start = barrier.wait().map_err(anyhow::Error::msg)?;
            return Ok(Some(Start {
                at: start.at,
                clock_offset: Some((start.offset_ms, start.rtt_ms)),
            }));
        }
        let barrier = kiln_runner::barrier::FileBarrier {
            dir: place.into(),
            index: shard.index,
            count: shard.count,
            timeout,
        };
        let at = barrier.wait().map_err(anyhow::Error::msg)?;
        return Ok(Some(Start {
            at,
            clock_offset: None,
        }));
    }
    args.start_at
        .as_deref()
        .map(|text| {
            let at = kiln_load::plan::parse_start_at(text).map_err(anyhow::Error::msg)?;
            Ok(Start {
                at,
                clock_offset: None,
            })
        })
        .transpose()
}

/// What an HTTP barrier compares to keep shards of other plans out: the URL or plan file as
/// given and the file's bytes, hashed (FNV-1a: stable across builds and machines, which
/// std's hasher does not promise).
fn plan_id(url_or_plan: &str) -> String {
    const MAX_PLAN_ID_BYTES: u64 = kiln_plan::MAX_PLAN_BYTES as u64;
    let bytes =
        kiln_record::input::read_regular(std::path::Path::new(url_or_plan), MAX_PLAN_ID_BYTES)
            .unwrap_or_default();
    let hash = url_or_plan
        .as_bytes()
        .iter()
        .chain(&[0])
        .chain(&bytes)
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("{hash:016x}")
}

/// A short name from the URL: `127.0.0.1-8080-api-items`.
fn name_from_url(plan: &LoadPlan) -> String {
    let path: String = plan
        .target
        .path_and_query
        .split('?')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!(
        "{}-{}{}",
        plan.target.host,
        plan.target.port,
        path.trim_end_matches('-')
    )
}

/// A run's name from its plan file: `checkout` for `plans/checkout.yaml`.
fn name_from_plan_file(path: &str) -> String {
    std::path::Path::new(path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plan".into())
}

/// `kiln run --compare BASE`: the base run and how to compare with it.
pub struct CompareWith {
    pub base: std::path::PathBuf,
    pub method: CompareMethod,
}

/// Prints the outcome and returns the exit code: 99 when a threshold failed or a finding
/// is at least as severe as `fail_on`.
pub fn print_outcome(
    outcome: &RunOutcome,
    json: bool,
    fail_on: Option<FailOn>,
    compare: Option<&CompareWith>,
    junit: Option<&std::path::Path>,
) -> Result<u8> {
    for warning in &outcome.warnings {
        eprintln!("kiln: warning: {}", crate::format::safe_text(warning));
    }
    let dir_text = outcome.dir.path().display().to_string();
    let manifest = &outcome.dir.manifest;
    let view = summary::RunView {
        dir: &dir_text,
        manifest,
        status: outcome.dir.effective_status().as_str(),
        phases: &outcome.phases,
        resources: &outcome.resources,
        noise: &outcome.noise,
        runtime: outcome
            .runtime
            .as_ref()
            .map(|(info, seconds)| (info, seconds.as_slice())),
        profile: outcome.profile.as_ref(),
        off_cpu: outcome.off_cpu.as_ref(),
        alloc: outcome.alloc.as_ref(),
        queries: outcome.queries.as_ref(),
        findings: Some(&outcome.findings),
        compare: None,
    };
    // A run compared with a base: the comparison is part of the summary (and of its JSON).
    let comparison = match compare {
        Some(with) => Some(crate::comparison::compare(
            &with.base,
            outcome.dir.path(),
            &with.method,
        )?),
        None => None,
    };
    let view = summary::RunView {
        compare: comparison.as_ref(),
        ..view
    };
    summary::print(&view, json)?;
    if let (Some(report), false) = (&outcome.report, json) {
        outln!(
            "Report     {}",
            crate::format::safe_text(&report.display().to_string())
        );
    }
    let regressed = match (compare, &comparison) {
        (Some(with), Some(c)) => crate::comparison::exit_code(c, &with.method) != 0,
        _ => false,
    };
    // a shard's thresholds are judged by kiln merge, on all the shards' requests: one shard's
    // share is not the run
    let shard = manifest.plan.load().is_some_and(|p| p.shard.is_some());
    let failed_thresholds = !shard && thresholds::thresholds_failed(manifest, &outcome.phases);
    if shard && thresholds::thresholds_failed(manifest, &outcome.phases) && !json {
        outln!("Thresholds judged on this shard alone; kiln merge judges them on the whole run");
    }
    if let Some(path) = junit {
        let total = PhaseSummary::measured_total(&outcome.phases);
        let results = total
            .as_ref()
            .map(|t| thresholds::check_all(&manifest.plan, t))
            .unwrap_or_default();
        let xml = kiln_summary::junit::render(
            &manifest.name,
            outcome.dir.effective_status().as_str(),
            manifest.status_reason.as_deref(),
            &results,
            total.as_ref(),
            total.as_ref().map_or(0.0, PhaseSummary::duration_secs),
        );
        std::fs::write(path, xml)
            .with_context(|| format!("cannot write the JUnit file {}", path.display()))?;
    }
    let failed_findings = fail_on.is_some_and(|f| outcome.findings.any_at_least(f.severity()));
    if !shard
        && sent_nothing(&outcome.phases)
        && outcome.dir.effective_status() == RunStatus::Complete
    {
        eprintln!(
            "kiln: the run sent no request in its measured time: nothing was measured (exit 1)"
        );
        return Ok(EXIT_SENT_NOTHING);
    }
    let input_failed = outcome
        .phases
        .iter()
        .filter_map(|p| p.end.as_ref())
        .any(|end| end.input_failed);
    Ok(match outcome.dir.effective_status() {
        RunStatus::Complete
            if failed_thresholds || failed_findings || outcome.queries_gate_failed || regressed =>
        {
            EXIT_THRESHOLDS_FAILED
        }
        RunStatus::Complete => 0,
        _ if input_failed && outcome.interrupted_by.is_none() => {
            eprintln!(
                "kiln: the plan's input failed mid-run, not the target; the record is kept \
                 (exit {EXIT_INPUT_FAILED})"
            );
            EXIT_INPUT_FAILED
        }
        _ => interrupted_exit_code(outcome.interrupted_by),
    })
}

/// Whether the measured phases sent no request and got no answer: such a run is not a
/// success, whatever else it says (a plan whose every request could not be built once ended
/// `complete`, exit 0, "failed 0%").
fn sent_nothing(phases: &[PhaseSummary]) -> bool {
    PhaseSummary::measured_total(phases)
        .is_some_and(|t| t.totals.requests == 0 && t.totals.sent == 0)
}

pub fn run(args: RunArgs, stop: &StopSignal) -> Result<u8> {
    let junit = args.junit.clone();
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| match kiln_plan::is_plan_path(&args.url) {
            true => name_from_plan_file(&args.url),
            false => args.url.clone(),
        });
    let ran = run_load(args, stop);
    // a run that could not start (a bad plan, a name that does not resolve) still leaves CI
    // a JUnit file that says why
    if let (Err(e), Some(path)) = (&ran, junit) {
        let xml = kiln_summary::junit::render(
            &kiln_load::plan::redact_password(&name),
            "unable to start",
            Some(&format!("{e:#}")),
            &[],
            None,
            0.0,
        );
        if let Err(write) = std::fs::write(&path, xml) {
            eprintln!(
                "kiln: warning: cannot write the JUnit file {}: {write}",
                path.display()
            );
        }
    }
    ran
}

fn run_load(args: RunArgs, stop: &StopSignal) -> Result<u8> {
    let built = build(&args)?;
    let plan = built.load;
    let start = start_at(&args, plan.shard)?;
    let phase_list = phases(&args, built.warmup, start.as_ref().map(|s| s.at))?;
    let interval = parse_duration(&args.interval)?;
    let name = args.name.clone().unwrap_or_else(|| match &built.outline {
        Some(_) => name_from_plan_file(&args.url),
        None => name_from_url(&plan),
    });
    let out = RunLocation::from_flag(args.out.as_deref(), &name);
    let mut live = LiveOutput::new(args.quiet, interval.as_secs() as u32);
    let mut plan_record = plan.to_record();
    plan_record.thresholds = built.thresholds.clone();
    plan_record.start_at = args.start_at.clone();
    if let (Some(dir), Some(at)) = (
        &args.barrier,
        phase_list.first().and_then(|(p, _)| p.start_at),
    ) {
        plan_record.barrier = Some(dir.clone());
        plan_record.start_at = Some(humantime::format_rfc3339_millis(at).to_string());
    }
    if plan.shard.is_some() {
        // shards on several machines start and count seconds by their own clocks
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let offset = start.as_ref().and_then(|s| s.clock_offset);
        plan_record.clock = Some(ShardClock {
            host: host.trim().to_string(),
            sync: kiln_sample::clock::read(),
            // shard 0's clock minus this one's, measured by the HTTP barrier
            offset_to_shard0_ms: offset.map(|(offset_ms, _)| offset_ms),
            offset_rtt_ms: offset.map(|(_, rtt_ms)| rtt_ms),
        });
    }
    if let Some(outline) = &built.outline {
        plan_record.plan_file = Some(args.url.clone());
        plan_record.scenarios = outline
            .iter()
            .map(|(name, weight, steps)| ScenarioOutline {
                name: name.clone(),
                weight: *weight,
                steps: steps.clone(),
            })
            .collect();
    }
    // --spawn: the target is started before anything is measured, and stopped when this
    // function returns (however it returns)
    let spawned = match &args.spawn {
        Some(_) if args.watch_pid.is_some() || args.watch_port.is_some() => {
            bail!("--spawn watches the process it starts: leave out --watch-pid and --watch-port")
        }
        Some(command) => Some(kiln_runner::spawn::SpawnedTarget::start(
            command,
            Some(plan.target.addr),
            kiln_runner::spawn::READY_WITHIN,
        )?),
        None => None,
    };
    let watch_pid = match (args.watch_pid, args.watch_port) {
        _ if spawned.is_some() => spawned.as_ref().map(|s| s.pid),
        (Some(pid), _) => Some(pid),
        (None, Some(port)) => {
            Some(ProcFs::default().pid_listening_on(port).with_context(|| {
                format!("--watch-port: no visible process listens on TCP port {port}")
            })?)
        }
        (None, None) => None,
    };
    if let Some(pid) = watch_pid {
        if ProcFs::default().process(pid).is_none() {
            bail!("--watch-pid: no process {pid}");
        }
    }
    if args.profile && watch_pid.is_none() {
        bail!("--profile needs the process to profile: --watch-pid PID or --watch-port PORT");
    }
    if args.off_cpu && watch_pid.is_none() {
        bail!("--off-cpu needs the process to profile: --watch-pid PID or --watch-port PORT");
    }
    if args.alloc && watch_pid.is_none() {
        bail!("--alloc needs the JVM to profile: --watch-pid PID or --watch-port PORT");
    }
    if !(1..=10_000).contains(&args.profile_frequency) {
        bail!("--profile-frequency is out of range: 1 to 10000 samples per second");
    }
    // `--fail-on` judges every finding, the DB calls' among them, once the run is recorded
    let settings = kiln_runner::QuerySettings {
        fail_on: None,
        ..crate::traces::settings(&args.queries)?
    };
    let otlp = match &args.otlp_listen {
        Some(addr) => {
            let wait = parse_duration(&args.otlp_wait)?;
            let receiver = crate::traces::start_receiver(addr)?;
            eprintln!(
                "kiln: receiving OTLP traces at http://{}/v1/traces",
                receiver.addr()
            );
            Some(OtlpSpec {
                receiver,
                wait,
                settings: &settings,
            })
        }
        None => None,
    };
    let spec = RunSpec {
        plan: &plan,
        plan_record,
        phases: &phase_list,
        out,
        name: &name,
        watch_pid,
        warmup_auto: built.warmup_auto,
        runtime_depth: args.runtime.depth(),
        profile_hz: args.profile.then_some(args.profile_frequency),
        off_cpu: args.off_cpu,
        jvm_profiler: JvmProfiler::from_flag(args.async_profiler.as_deref()),
        alloc: args.alloc,
        otlp,
        gctrace: spawned.as_ref().map(|s| s.gctrace.clone()),
    };
    let outcome = execute(spec, stop, &mut live)?;
    drop(spawned);
    let compare = args.compare.clone().map(|base| CompareWith {
        base,
        method: CompareMethod {
            fail_on_regression: args.fail_on_regression,
            ..CompareMethod::default()
        },
    });
    print_outcome(
        &outcome,
        args.json,
        args.queries.fail_on,
        compare.as_ref(),
        args.junit.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_sent_nothing_is_told_from_one_that_did() {
        let phase = |requests: u64, sent: u64, measured: bool| {
            let mut p = PhaseSummary::new(if measured { "run" } else { "warmup" });
            p.measured = measured;
            p.totals.requests = requests;
            p.totals.sent = sent;
            p
        };
        assert!(sent_nothing(&[phase(0, 0, true)]));
        // the warm-up's requests are not the measurement's
        assert!(sent_nothing(&[phase(9, 9, false), phase(0, 0, true)]));
        assert!(!sent_nothing(&[phase(1, 1, true)]));
        // requests sent and never answered (cut at the end) are not nothing
        assert!(!sent_nothing(&[phase(0, 3, true)]));
        // no measured phase at all: nothing to judge here
        assert!(!sent_nothing(&[]));
    }

    fn run_args(argv: &[&str]) -> RunArgs {
        use clap::Parser as _;
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Run(args) => *args,
            _ => unreachable!("a run"),
        }
    }

    /// A flag that a plan file holds is refused beside it whatever its value: `--think-time 0`
    /// was refused and `--think-time 0s` (the default's text) passed silently.
    #[test]
    fn a_plan_files_flags_are_refused_beside_it_whatever_their_value() {
        for (flag, value) in [
            ("--think-time", "0"),
            ("--think-time", "0s"),
            ("--ramp-up", "0s"),
            ("-m", "GET"),
        ] {
            let Err(refused) = build(&run_args(&["kiln", "run", "plan.yaml", flag, value])) else {
                panic!("{flag} {value} taken beside a plan file");
            };
            assert!(
                refused.to_string().contains("does not go with a plan file"),
                "{flag} {value}: {refused}"
            );
        }
    }
}
