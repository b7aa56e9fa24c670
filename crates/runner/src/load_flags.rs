//! `kiln run`'s flags that say what to load and when: the URL or plan file, the load's shape,
//! the request, the warm-up and repeats, shards and their barrier, hedging and thresholds;
//! and their turning into the engine's plan (validated, hosts resolved once), its phases and
//! when the first one starts. The binary flattens [`LoadFlags`] into its `run` command; the
//! plan is built here so that every front end builds it alike and the binary only wires.

use std::time::Duration;

use crate::error::{Doing, Result, RunnerError};
use crate::refuse;
use kiln_load::plan::{parse_duration, parse_stages, DurationArg};
use kiln_load::{LoadPlan, Model, PhaseSpec, RequestSpec, Target};
use kiln_record::schema::plan::{LoadPlanRecord, ScenarioOutline, ShardClock};
use kiln_summary::thresholds::{self, Threshold};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrivalsArg {
    Uniform,
    Poisson,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoArg {
    Epoll,
    Uring,
}

#[derive(clap::Args, Debug, Clone)]
pub struct LoadFlags {
    /// The URL to load (http:// or https://; grpc:// or grpcs:// and the method,
    /// grpc://host:port/package.Service/Method), or a plan file (plan.yaml: scenarios, data,
    /// load shape, thresholds; see `kiln plan check`).
    pub url: String,

    /// Connections (closed model: each sends back to back; open model: opened up front, more
    /// as arrivals wait) [default: 50; open model: what the rate needs at a 20 ms response,
    /// one per load thread at least, 50 at most]. With a plan: its VUs.
    #[arg(help_heading = "Load", short = 'c', long = "connections")]
    pub connections: Option<usize>,

    /// How long each measured run lasts (e.g. 30s, 3m) [default: 10s]. Ignored with
    /// --stages. With a plan: overrides its duration.
    #[arg(help_heading = "Load", short = 'd', long = "duration")]
    pub duration: Option<DurationArg>,

    /// With a plan: set a variable, or a load setting (rate, vus, duration, iterations,
    /// max_vus, ramp, arrivals, seed, warmup, timeout), e.g. --set rate=2000 (repeatable).
    #[arg(help_heading = "Plans and CI", long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    /// Load generator threads (default: one per CPU).
    #[arg(help_heading = "Load", short = 't', long = "threads")]
    pub threads: Option<usize>,

    /// Open model: a constant arrival rate, in requests per second. Latency is measured from
    /// each request's scheduled send time.
    #[arg(
        help_heading = "Load",
        short = 'R',
        long = "rate",
        conflicts_with = "stages"
    )]
    pub rate: Option<f64>,

    /// Open model: how arrivals are spaced. uniform: exactly 1/rate apart (wrk2, k6).
    /// poisson: exponential gaps with mean 1/rate, as independent users arrive (bursts and
    /// lulls included); the seed is recorded with the plan.
    #[arg(
        help_heading = "Load",
        long = "arrivals",
        value_enum,
        default_value = "uniform"
    )]
    pub arrivals: ArrivalsArg,

    /// The seed for --arrivals poisson (default: from the clock), to repeat a run exactly.
    #[arg(help_heading = "Load", long = "seed")]
    pub seed: Option<u64>,

    /// Open model with ramping rates: DURATION:RATE stages, each ramping linearly from the
    /// previous rate (starting at 0), e.g. 30s:100,60s:2000,30s:0. A 0s stage jumps.
    #[arg(help_heading = "Load", long = "stages")]
    pub stages: Option<String>,

    /// Open model: the most connections kiln opens to keep the schedule.
    #[arg(
        help_heading = "Load",
        long = "max-connections",
        default_value_t = 1000
    )]
    pub max_connections: usize,

    /// Closed model: pause between a response and the connection's next request [default: 0s].
    #[arg(help_heading = "Load", long = "think-time")]
    pub think_time: Option<DurationArg>,

    /// Closed model: start the connections evenly over this time [default: 0s].
    #[arg(help_heading = "Load", long = "ramp-up")]
    pub ramp_up: Option<DurationArg>,

    /// HTTP method [default: GET].
    #[arg(
        help_heading = "Request",
        short = 'm',
        long = "method",
        visible_short_alias = 'X'
    )]
    pub method: Option<String>,

    /// A request header, 'Name: value' (repeatable).
    #[arg(help_heading = "Request", short = 'H', long = "header")]
    pub headers: Vec<String>,

    /// The request body: a string, or @FILE to read it from a file.
    #[arg(help_heading = "Request", short = 'b', long = "body")]
    pub body: Option<String>,

    /// Time allowed for a whole request (send, wait, read the body) [default: 10s].
    #[arg(help_heading = "Request", long = "timeout")]
    pub timeout: Option<DurationArg>,

    /// Time allowed to open a connection (TCP and TLS).
    #[arg(
        help_heading = "Request",
        long = "connect-timeout",
        default_value = "5s"
    )]
    pub connect_timeout: DurationArg,

    /// Accept any TLS certificate (self-signed targets).
    #[arg(help_heading = "Request", short = 'k', long = "insecure")]
    pub insecure: bool,

    /// gRPC: a .proto file that defines the method (repeatable); compiled by kiln itself,
    /// no protoc needed. The message is -b's JSON.
    #[arg(help_heading = "gRPC", long = "proto", value_name = "FILE")]
    pub protos: Vec<std::path::PathBuf>,

    /// gRPC: where the .proto files' imports are found (repeatable) [default: each file's
    /// own directory].
    #[arg(help_heading = "gRPC", long = "import-path", value_name = "DIR")]
    pub import_paths: Vec<std::path::PathBuf>,

    /// gRPC: the method's descriptors as protoc writes them (--descriptor_set_out
    /// --include_imports), instead of .proto files.
    #[arg(help_heading = "gRPC", long = "protoset", value_name = "FILE")]
    pub protoset: Option<std::path::PathBuf>,

    /// Speak HTTP/2: offered by ALPN over https (HTTP/1.1 if the server declines), prior
    /// knowledge (h2c) over http. One request at a time per connection, as in HTTP/1.1,
    /// unless --http2-streams says more.
    #[arg(help_heading = "Request", long = "http2")]
    pub http2: bool,

    /// With --http2: requests in flight at once on each connection (h2load's -m, oha's -p),
    /// so -c 8 --http2-streams 10 keeps 80 requests going over 8 connections.
    #[arg(
        help_heading = "Request",
        short = 'p',
        long = "http2-streams",
        visible_alias = "http2-parallel",
        default_value_t = 1,
        value_name = "N"
    )]
    pub http2_streams: usize,

    /// How the load threads' plain http:// connections send and receive. epoll: a system
    /// call per send and per receive, as wrk and oha. uring: each thread's sends and
    /// receives are submitted to an io_uring in batches (one system call per turn of its
    /// loop), receives armed once per connection. Where io_uring is missing or refused (a
    /// container's seccomp profile, kernel.io_uring_disabled) the run says so and uses
    /// epoll. TLS connections use epoll.
    #[arg(
        help_heading = "Request",
        long = "io",
        value_enum,
        default_value = "epoll"
    )]
    pub io: IoArg,

    /// Load for this long first and leave it out of the results (warms caches and JITs);
    /// `auto` (or `auto:CAP`, 60 s by default) ends it when throughput is steady and, for a
    /// JVM watched with --watch-*, its JIT compiler has gone quiet.
    #[arg(help_heading = "Load", long = "warmup")]
    pub warmup: Option<WarmupArg>,

    /// Measured runs; with more than one, the summary shows each and their mean and spread.
    #[arg(help_heading = "Load", long = "repeat", default_value_t = 1)]
    pub repeat: u32,

    /// Stop the run as interrupted when the target gave no response at all for this long.
    #[arg(help_heading = "Load", long = "dead-after", default_value = "5s")]
    pub dead_after: DurationArg,

    /// At the deadline, wait for requests in flight up to --timeout (as oha's flag of this
    /// name does). Without it the run ends at -d: they get half a second, and those still
    /// waiting are counted as abandoned.
    #[arg(
        help_heading = "Load",
        short = 'w',
        long = "wait-ongoing-requests-after-deadline"
    )]
    pub wait_after_deadline: bool,

    /// Run shard I of N load processes sharing this plan (I from 0; auto/N takes I from
    /// JOB_COMPLETION_INDEX): an open model's arrivals are dealt among the shards, a closed
    /// model's connections divided. `kiln merge` puts the shards' records together.
    #[arg(help_heading = "Shards", long = "shard", value_name = "I/N")]
    pub shard: Option<String>,

    /// Start the load at this UTC time (RFC 3339, e.g. 2026-12-01T10:00:00Z), so that shards
    /// on several machines start together.
    #[arg(help_heading = "Shards", long = "start-at", value_name = "TIME")]
    pub start_at: Option<String>,

    /// Start when every shard is ready: each writes a file to DIR (a folder all shards
    /// share, such as a ReadWriteMany volume) and all start 3 s after the last one's. Or
    /// http://HOST:PORT: shard 0 serves the barrier there (on that address, or every
    /// interface for a name), the others ask it, measure their clock against shard 0's and
    /// start 1 s after the last one is ready, by shard 0's clock.
    #[arg(
        help_heading = "Shards",
        long = "barrier",
        value_name = "DIR|http://HOST:PORT"
    )]
    pub barrier: Option<String>,

    /// A secret every shard of an HTTP barrier is given: shard 0 refuses requests without
    /// it. Better from the environment, KILN_BARRIER_TOKEN, which `ps` does not show.
    #[arg(help_heading = "Shards", long = "barrier-token", value_name = "TOKEN")]
    pub barrier_token: Option<String>,

    /// How long --barrier waits for the other shards.
    #[arg(
        help_heading = "Shards",
        long = "barrier-timeout",
        value_name = "DURATION",
        default_value = "10m"
    )]
    pub barrier_timeout: DurationArg,

    /// Hedged requests: a request not answered after this delay gets a second copy and the
    /// first answer wins. A time (5ms) or a percentile of the run's recent latency (p95).
    #[arg(help_heading = "Hedging", long = "hedge", value_name = "DELAY|pNN")]
    pub hedge: Option<kiln_hedge::Delay>,

    /// With --hedge: second copies at most this share of the requests (a token bucket).
    #[arg(
        help_heading = "Hedging",
        long = "hedge-cap",
        value_name = "PERCENT",
        default_value = "10%",
        requires = "hedge"
    )]
    pub hedge_cap: HedgeCap,

    /// With --hedge: another target for the same request (repeatable). First copies go to
    /// the URL and each replica in turn, a request's second copy to the next one.
    #[arg(
        help_heading = "Hedging",
        long = "replica",
        value_name = "URL",
        requires = "hedge"
    )]
    pub replicas: Vec<String>,

    /// With --hedge: hedge any method, not only idempotent ones (GET, HEAD, PUT, DELETE...).
    #[arg(
        help_heading = "Hedging",
        long = "hedge-any-method",
        requires = "hedge"
    )]
    pub hedge_any_method: bool,

    /// A pass/fail threshold on the measured results, k6 style (repeatable): 'p99<250ms',
    /// 'p(99.9)<1s', 'max<2s', 'mean<50ms', 'failed<1%', 'rate>=1000', 'unsent<1'.
    /// Any failure exits with 99.
    #[arg(help_heading = "Plans and CI", long = "threshold")]
    pub thresholds: Vec<String>,

    /// Send the run's metrics each second while it lasts (repeatable):
    /// 'prometheus=URL' (remote write 1.0, native histograms; Prometheus takes it at
    /// http://HOST:9090/api/v1/write with --web.enable-remote-write-receiver), or
    /// 'prometheus=URL,classic' for a receiver without native histograms, or 'otlp=URL'
    /// (OTLP/HTTP metrics, exponential histograms; the Collector's http://HOST:4318). A
    /// receiver that is down or slow never slows the run: what it missed is counted and said
    /// at the end.
    #[arg(help_heading = "Export", long = "export", value_name = "KIND=URL")]
    pub exports: Vec<String>,
}

/// The largest request body kiln sends (each connection holds the encoded request).
const MAX_BODY_BYTES: u64 = 64 << 20;

/// `-b TEXT` or `-b @FILE`, as curl reads it; at most `MAX_BODY_BYTES` (`@/dev/zero` would
/// otherwise fill memory).
fn read_body(arg: &str) -> Result<Vec<u8>> {
    let Some(path) = arg.strip_prefix('@') else {
        return Ok(arg.as_bytes().to_vec());
    };
    kiln_record::input::read_regular(std::path::Path::new(path), MAX_BODY_BYTES)
        .doing_with(|| format!("cannot read the body file '{path}'"))
}

/// A gRPC URL's call: its method found in --proto's or --protoset's descriptors, or in what
/// the server's reflection service sends, -b's JSON encoded for it once (a client stream's
/// messages one after another), sent as gRPC sends a call (POST over HTTP/2, the framed
/// messages, `te: trailers`, the deadline as `grpc-timeout`).
fn grpc_request(args: &LoadFlags, target: &Target, timeout: Duration) -> Result<RequestSpec> {
    if args
        .method
        .as_deref()
        .is_some_and(|m| !m.eq_ignore_ascii_case("POST"))
    {
        refuse!("a gRPC call is a POST; -m does not apply to grpc:// URLs");
    }
    let refused = |e: kiln_grpc::GrpcError| RunnerError::Refused(e.to_string());
    let pool = match (&args.protoset, args.protos.is_empty()) {
        (Some(_), false) => refuse!("--proto or --protoset, not both"),
        (Some(set), true) => kiln_grpc::read_protoset(set).map_err(refused)?,
        (None, false) => {
            kiln_grpc::compile_protos(&args.protos, &args.import_paths).map_err(refused)?
        }
        (None, true) => reflected_descriptors(args, target)?,
    };
    let method = kiln_grpc::find_method(&pool, &target.path_and_query).map_err(refused)?;
    let json = match &args.body {
        Some(body) => String::from_utf8(read_body(body)?)
            .map_err(|_| RunnerError::Refused("-b: a gRPC message is JSON, in UTF-8".into()))?,
        None => String::new(),
    };
    let call = kiln_grpc::request_body(&method, &json)
        .map_err(|e| RunnerError::Refused(format!("-b: {e}")))?;
    let mut headers = grpc_headers()?;
    headers.push(RequestSpec::parse_header(&format!(
        "grpc-timeout: {}",
        kiln_grpc::timeout_header(timeout)
    ))?);
    Ok(RequestSpec {
        method: RequestSpec::parse_method("POST")?,
        headers,
        body: call.body,
        grpc_stream_sent: (method.client_streaming || method.server_streaming)
            .then_some(call.messages),
    })
}

/// The headers every gRPC call carries: its content type, and `te: trailers` (its status
/// comes in trailers).
fn grpc_headers() -> Result<Vec<(http::HeaderName, http::HeaderValue)>> {
    Ok(vec![
        RequestSpec::parse_header("content-type: application/grpc")?,
        RequestSpec::parse_header("te: trailers")?,
    ])
}

/// How long the reflection service has to answer.
const REFLECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL's service's descriptors from the server's reflection service (v1, or v1alpha),
/// asked over a connection of its own before the run.
fn reflected_descriptors(args: &LoadFlags, target: &Target) -> Result<kiln_grpc::DescriptorPool> {
    let Some((service, _)) = kiln_grpc::split_method(&target.path_and_query) else {
        refuse!(
            "'{}' names no method: write grpc://host:port/package.Service/Method",
            target.path_and_query
        );
    };
    // -H's metadata goes with it too: a server may ask for its token on every call
    let mut headers = grpc_headers()?;
    for h in &args.headers {
        headers.push(RequestSpec::parse_header(h)?);
    }
    let mut transport = |path: &str, body: kiln_grpc::Bytes| {
        let request = kiln_load::http1::RequestParts {
            method: http::Method::POST,
            path: path.to_string(),
            headers: headers.clone(),
            body,
        };
        let (response, captured) = kiln_load::single::exchange(
            target,
            args.insecure,
            true,
            args.connect_timeout.value,
            REFLECTION_TIMEOUT,
            &request,
        )
        .map_err(|kind| unanswered(kind, &target.authority))?;
        let code = response
            .grpc
            .map_or(kiln_record::grpc::GRPC_INTERNAL, |g| g.code);
        let content_type =
            (captured.header("content-type")).map(|v| String::from_utf8_lossy(v).into_owned());
        Ok(kiln_grpc::reflection::Answer {
            code,
            http_status: response.status,
            content_type,
            body: captured.body,
        })
    };
    kiln_grpc::reflection::reflect(service, &mut transport).map_err(|e| {
        RunnerError::Refused(format!(
            "cannot take {service}'s descriptors from the server: {e}"
        ))
    })
}

/// Why a call before the run had no answer: an HTTP/1.1 server closes (or answers) a
/// connection that opens with HTTP/2's preface.
fn unanswered(kind: kiln_record::ErrorKind, authority: &str) -> String {
    use kiln_record::ErrorKind::{BadResponse, Reset};
    match kind {
        Reset | BadResponse => format!(
            "{authority} {} HTTP/2's first frames: it does not speak HTTP/2, as gRPC servers do",
            if kind == Reset {
                "closed the connection at"
            } else {
                "did not answer"
            }
        ),
        _ => format!("{} ({authority})", kind.label()),
    }
}

/// The longest `--warmup auto` when no cap is given.
const AUTO_WARMUP_CAP: Duration = Duration::from_secs(60);

/// `--warmup DURATION`, or `auto` / `auto:CAP` (an auto warm-up's cap), checked as the flags
/// are parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum WarmupArg {
    Fixed(Duration),
    Auto { cap: Duration },
}

impl std::str::FromStr for WarmupArg {
    type Err = RunnerError;

    fn from_str(w: &str) -> Result<Self> {
        let Some(rest) = w.strip_prefix("auto") else {
            return Ok(Self::Fixed(parse_duration(w)?));
        };
        let cap = match rest {
            "" => {
                return Ok(Self::Auto {
                    cap: AUTO_WARMUP_CAP,
                })
            }
            rest => rest
                .strip_prefix(':')
                .doing("auto takes a cap as auto:DURATION, e.g. auto:30s")?,
        };
        let cap = parse_duration(cap)?;
        check_auto_cap(cap)?;
        Ok(Self::Auto { cap })
    }
}

impl WarmupArg {
    /// A plan file's warm-up, an auto warm-up's cap checked as the flag's is.
    fn of_plan(w: kiln_plan::Warmup) -> Result<Self> {
        Ok(match w {
            kiln_plan::Warmup::Fixed(d) => Self::Fixed(d),
            kiln_plan::Warmup::Auto { cap } => {
                let cap = cap.unwrap_or(AUTO_WARMUP_CAP);
                check_auto_cap(cap).doing("the plan's warmup: auto")?;
                Self::Auto { cap }
            }
        })
    }

    /// The warm-up's time (an auto warm-up's cap), and whether it is auto.
    fn phase(w: Option<&Self>) -> (Option<Duration>, bool) {
        match w {
            None => (None, false),
            Some(Self::Fixed(d)) => (Some(*d), false),
            Some(Self::Auto { cap }) => (Some(*cap), true),
        }
    }
}

/// An auto warm-up's cap must leave it time to judge.
fn check_auto_cap(cap: Duration) -> Result<()> {
    if cap.as_secs() < u64::from(crate::warmup::MIN_SECONDS) {
        refuse!(
            "the cap is shorter than the {} s an auto warm-up needs to judge",
            crate::warmup::MIN_SECONDS
        );
    }
    Ok(())
}

/// What `kiln run` loads: the engine's plan, and what a plan file adds to it.
struct Built {
    pub load: LoadPlan,
    /// The plan file's thresholds, then --threshold's.
    pub thresholds: Vec<String>,
    /// --warmup, else the plan file's (with `auto`: its cap).
    pub warmup: Option<Duration>,
    /// `--warmup auto`: the warm-up ends when the target has settled.
    pub warmup_auto: bool,
    /// The plan file's scenarios (name, weight, step names), for the record.
    pub outline: Option<Vec<(String, u32, Vec<String>)>>,
    /// What was changed to make the plan fit (a connection cap above the open-files limit).
    pub notes: Vec<String>,
}

const DEFAULT_CONNECTIONS: usize = 50;
const DEFAULT_DURATION: Duration = Duration::from_secs(10);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Turns flags (and a plan file, when the argument is one) into a validated plan,
/// resolving hosts once.
fn build(args: &LoadFlags) -> Result<Built> {
    let mut built = build_whole(args)?;
    if let Some(text) = &args.shard {
        let job_index = std::env::var("JOB_COMPLETION_INDEX").ok();
        let shard = kiln_load::plan::Shard::parse(text, job_index.as_deref())
            .map_err(|e| crate::RunnerError::Refused(e.to_string()))?;
        built.load = built.load.into_shard(shard)?;
    }
    Ok(built)
}

/// The whole plan, before any --shard.
fn build_whole(args: &LoadFlags) -> Result<Built> {
    if kiln_plan::is_plan_path(&args.url) {
        return build_from_plan_file(args);
    }
    if !args.set.is_empty() {
        refuse!("--set is for plan files (kiln run plan.yaml --set NAME=VALUE)");
    }
    let (load, notes) = build_plan(args)?;
    let (warmup, warmup_auto) = WarmupArg::phase(args.warmup.as_ref());
    Ok(Built {
        load,
        thresholds: args.thresholds.clone(),
        warmup,
        warmup_auto,
        outline: None,
        notes,
    })
}

/// A plan file, with kiln run's flags as the last word: -c, -d, -R and --timeout are
/// `--set vus=`, `duration=`, `rate=`, `timeout=` after the user's own --set.
fn build_from_plan_file(args: &LoadFlags) -> Result<Built> {
    if args.hedge.is_some() {
        refuse!("--hedge hedges a URL's request; a plan file's requests are not hedged yet");
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
            refuse!("{flag} does not go with a plan file: write it in the plan");
        }
    }
    let mut sets = args
        .set
        .iter()
        .map(|s| kiln_plan::parse_set(s).map_err(|e| crate::RunnerError::Refused(e.to_string())))
        .collect::<Result<Vec<_>>>()?;
    let flag_sets = [
        ("vus", args.connections.map(|c| c.to_string())),
        ("duration", args.duration.as_ref().map(|d| d.text.clone())),
        ("rate", args.rate.map(|r| r.to_string())),
        ("timeout", args.timeout.as_ref().map(|t| t.text.clone())),
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
        timeout: plan.timeout.unwrap_or(DEFAULT_TIMEOUT),
        ..LoadPlan::new(plan.base().clone(), plan.model.clone(), plan.duration)
    };
    common_flags(&mut load, args)?;
    load.validate()?;
    let notes = start_notes(&mut load);
    let mut thresholds =
        thresholds::check_plan_thresholds(&args.url, &plan.thresholds, &plan.workload.names)?;
    for t in &args.thresholds {
        Threshold::parse(t)?;
        thresholds.push(t.clone());
    }
    check_repeat(args)?;
    // --warmup, else the plan file's
    let warmup = match &args.warmup {
        Some(w) => Some(w.clone()),
        None => plan.warmup.map(WarmupArg::of_plan).transpose()?,
    };
    let (warmup, warmup_auto) = WarmupArg::phase(warmup.as_ref());
    Ok(Built {
        load,
        thresholds,
        warmup,
        warmup_auto,
        outline: Some(plan.outline),
        notes,
    })
}

/// The flags a URL run and a plan file's run share: connecting, threads, certificates and
/// when a failing run is dead.
fn common_flags(plan: &mut LoadPlan, args: &LoadFlags) -> Result<()> {
    plan.connect_timeout = args.connect_timeout.value;
    if let Some(threads) = args.threads {
        plan.threads = threads;
    }
    plan.insecure = args.insecure;
    plan.dead_after = args.dead_after.value;
    plan.wait_after_deadline = args.wait_after_deadline;
    plan.http2_streams = args.http2_streams;
    if args.io == IoArg::Uring {
        if plan.target.tls {
            refuse!(
                "--io uring: TLS connections run on epoll only (an http:// URL runs on io_uring)"
            );
        }
        match kiln_load::probe_io_uring() {
            Ok(()) => plan.io = kiln_load::IoPath::Uring,
            Err(why) => plan.io_uring_refused = Some(why.to_string()),
        }
    }
    Ok(())
}

/// What the run says before it starts: connections fitted to the descriptors it may open,
/// and io_uring asked for and refused.
fn start_notes(plan: &mut LoadPlan) -> Vec<String> {
    let refused = (plan.io_uring_refused.as_ref())
        .map(|why| format!("--io uring: {why}; the epoll path runs"));
    kiln_load::limits::fit_max_connections(plan)
        .into_iter()
        .chain(refused)
        .collect()
}

fn check_repeat(args: &LoadFlags) -> Result<()> {
    if !(1..=1000).contains(&args.repeat) {
        refuse!("--repeat is out of range: {} (1 to 1000)", args.repeat);
    }
    Ok(())
}

/// Turns a URL's flags into a validated plan (resolving the host once), and what was changed
/// to make it fit.
fn build_plan(args: &LoadFlags) -> Result<(LoadPlan, Vec<String>)> {
    let target = Target::parse(&args.url)?;
    let timeout = DurationArg::or(args.timeout.as_ref(), DEFAULT_TIMEOUT);
    let request = if target.grpc {
        grpc_request(args, &target, timeout)?
    } else {
        if !args.protos.is_empty() || args.protoset.is_some() {
            refuse!("--proto and --protoset are for gRPC: write the URL as grpc://host:port/package.Service/Method");
        }
        let mut request = RequestSpec {
            method: RequestSpec::parse_method(args.method.as_deref().unwrap_or("GET"))?,
            ..Default::default()
        };
        if let Some(body) = &args.body {
            request.body = read_body(body)?.into();
        }
        request
    };
    let mut request = request;
    for h in &args.headers {
        request.headers.push(RequestSpec::parse_header(h)?);
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
                refuse!("--rate is out of range: {said} (more than 0, at most 10000000)");
            }
            let duration = DurationArg::or(args.duration.as_ref(), DEFAULT_DURATION);
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
                think_time: DurationArg::or(args.think_time.as_ref(), Duration::ZERO),
                ramp_up: DurationArg::or(args.ramp_up.as_ref(), Duration::ZERO),
                stages: Vec::new(),
            },
            DurationArg::or(args.duration.as_ref(), DEFAULT_DURATION),
        ),
    };
    let http2 = args.http2 || target.grpc;
    let mut plan = LoadPlan {
        request,
        timeout,
        http2,
        ..LoadPlan::new(target, model, duration)
    };
    common_flags(&mut plan, args)?;
    plan.hedge = hedge_plan(args, &plan.request, plan.target.grpc)?;
    plan.validate()?;
    let notes = start_notes(&mut plan);
    for t in &args.thresholds {
        Threshold::parse(t)?;
    }
    check_repeat(args)?;
    Ok((plan, notes))
}

/// `--hedge`, `--hedge-cap`, `--replica`, `--hedge-any-method`: a non-idempotent method (and
/// every gRPC call, a POST) is hedged only with `--hedge-any-method`.
fn hedge_plan(
    args: &LoadFlags,
    request: &RequestSpec,
    grpc: bool,
) -> Result<Option<kiln_load::HedgePlan>> {
    let method = &request.method;
    let Some(delay) = &args.hedge else {
        return Ok(None);
    };
    let delay = *delay;
    if !args.hedge_any_method && grpc {
        refuse!(
            "--hedge sends some calls twice, and kiln cannot know whether this gRPC method is \
             safe to call twice: --hedge-any-method hedges it (as a service config's \
             hedgingPolicy names the methods that may be)"
        );
    }
    if !args.hedge_any_method && !kiln_load::hedge::is_idempotent(method) {
        refuse!(
            "--hedge sends some requests twice, and {method} is not idempotent: a second copy \
             could do its work twice (--hedge-any-method hedges it anyway)"
        );
    }
    let cap = args.hedge_cap.0;
    let replicas = args
        .replicas
        .iter()
        .map(|url| Target::parse(url).doing_with(|| format!("--replica {url}")))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(kiln_load::HedgePlan::new(delay, cap, replicas)))
}

/// `--hedge-cap`: `5%` or `5` (percent of the requests), above 0 and at most 100; the
/// share it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HedgeCap(pub f64);

impl std::str::FromStr for HedgeCap {
    type Err = RunnerError;

    fn from_str(text: &str) -> Result<Self> {
        let number = text.trim().trim_end_matches('%').trim();
        match number.parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 100.0 => Ok(Self(p / 100.0)),
            _ => refuse!("{text:?} is not a share of the requests (such as 5% or 0.5%)"),
        }
    }
}

fn connections(args: &LoadFlags) -> usize {
    args.connections.unwrap_or(DEFAULT_CONNECTIONS)
}

/// A response time the open model opens connections for up front, by Little's law.
const UP_FRONT_RESPONSE: Duration = Duration::from_millis(20);

/// The open model's connections opened up front: `-c`, else what the peak rate needs at a
/// 20 ms response (at least one per load thread, at most the default of 50). More open as
/// arrivals wait with every connection busy (up to --max-connections). Connections opened for
/// nothing are not free: a server that serves one connection at a time per worker (gunicorn's
/// sync workers, uwsgi without threads) blocks reading one kiln is not sending on.
fn open_connections(args: &LoadFlags, stages: &[kiln_load::RateStage]) -> usize {
    args.connections.unwrap_or_else(|| {
        let peak = stages.iter().map(|s| s.target_rate).fold(0.0, f64::max);
        let threads = args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let needed = (peak * UP_FRONT_RESPONSE.as_secs_f64()).ceil() as usize;
        needed.clamp(threads.clamp(1, DEFAULT_CONNECTIONS), DEFAULT_CONNECTIONS)
    })
}

fn open_model(args: &LoadFlags, stages: Vec<kiln_load::RateStage>) -> Model {
    let connections = open_connections(args, &stages);
    Model::Open {
        stages,
        connections,
        max_connections: args.max_connections.max(connections),
        arrivals: match args.arrivals {
            ArrivalsArg::Uniform => kiln_load::Arrivals::Uniform,
            ArrivalsArg::Poisson => kiln_load::Arrivals::Poisson {
                seed: args
                    .seed
                    .unwrap_or_else(|| kiln_record::clock::unix_ns_now().max(1)),
            },
        },
    }
}

/// The phases of a run: an optional warm-up, then the measured runs.
fn phases(
    args: &LoadFlags,
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
    pub at: std::time::SystemTime,
    pub clock_offset: Option<(f64, f64)>,
}

/// `--start-at`: an RFC 3339 time, e.g. 2026-12-01T10:00:00Z; or `--barrier DIR`: when
/// every shard has said it is ready there; or `--barrier http://HOST:PORT`: when every shard
/// has told shard 0, which serves the barrier there.
fn start_at(args: &LoadFlags, shard: Option<kiln_load::plan::Shard>) -> Result<Option<Start>> {
    if let Some(place) = &args.barrier {
        if args.start_at.is_some() {
            refuse!("--barrier and --start-at both say when to start: give one");
        }
        let Some(shard) = shard else {
            refuse!("--barrier is for shards (--shard I/N): it waits for the N of them");
        };
        let timeout = args.barrier_timeout.value;
        if let Some(addr) = place.strip_prefix("http://") {
            let barrier = crate::http_barrier::HttpBarrier {
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
            let start = barrier.wait()?;
            return Ok(Some(Start {
                at: start.at,
                clock_offset: Some((start.offset_ms, start.rtt_ms)),
            }));
        }
        let barrier = crate::barrier::FileBarrier {
            dir: place.into(),
            index: shard.index,
            count: shard.count,
            timeout,
        };
        let at = barrier.wait()?;
        return Ok(Some(Start {
            at,
            clock_offset: None,
        }));
    }
    args.start_at
        .as_deref()
        .map(|text| {
            let at = kiln_load::plan::parse_start_at(text)?;
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

/// What a run's flags load: the engine's plan, its phases, the plan as recorded, and the
/// run's default name.
pub struct Load {
    pub plan: LoadPlan,
    pub phases: Vec<(PhaseSpec, Duration)>,
    pub record: LoadPlanRecord,
    /// `--warmup auto`: the warm-up ends when the target has settled.
    pub warmup_auto: bool,
    /// From the plan file's name, else from the URL.
    pub default_name: String,
    /// What was changed to make the plan fit, to be said.
    pub notes: Vec<String>,
    /// `--export`'s receivers.
    pub exports: Vec<kiln_export::ExportTarget>,
}

impl LoadFlags {
    /// The plan and its phases; with `--barrier`, once every shard is ready (this waits).
    pub fn prepare(&self) -> Result<Load> {
        // a receiver that cannot be reached by name is said before anything waits
        let exports = (self.exports.iter())
            .map(|e| kiln_export::ExportTarget::parse(e))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let built = build(self)?;
        let plan = built.load;
        let start = start_at(self, plan.shard)?;
        let phases = phases(self, built.warmup, start.as_ref().map(|s| s.at))?;
        let mut record = plan.to_record();
        record.thresholds = built.thresholds;
        record.start_at = self.start_at.clone();
        if let (Some(dir), Some(at)) = (&self.barrier, phases.first().and_then(|(p, _)| p.start_at))
        {
            record.barrier = Some(dir.clone());
            record.start_at = Some(humantime::format_rfc3339_millis(at).to_string());
        }
        if plan.shard.is_some() {
            // shards on several machines start and count seconds by their own clocks
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let offset = start.as_ref().and_then(|s| s.clock_offset);
            record.clock = Some(ShardClock {
                host: host.trim().to_string(),
                sync: kiln_sample::clock::read(),
                // shard 0's clock minus this one's, measured by the HTTP barrier
                offset_to_shard0_ms: offset.map(|(offset_ms, _)| offset_ms),
                offset_rtt_ms: offset.map(|(_, rtt_ms)| rtt_ms),
            });
        }
        let default_name = match &built.outline {
            Some(_) => name_from_plan_file(&self.url),
            None => name_from_url(&plan),
        };
        if let Some(outline) = built.outline {
            record.plan_file = Some(self.url.clone());
            record.scenarios = outline
                .into_iter()
                .map(|(name, weight, steps)| ScenarioOutline {
                    name,
                    weight,
                    steps,
                })
                .collect();
        }
        Ok(Load {
            plan,
            phases,
            record,
            warmup_auto: built.warmup_auto,
            default_name,
            notes: built.notes,
            exports,
        })
    }

    /// The run's name before its plan is built: the plan file's name, else the URL as given.
    pub fn name_as_given(&self) -> String {
        match kiln_plan::is_plan_path(&self.url) {
            true => name_from_plan_file(&self.url),
            false => self.url.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Run {
        #[command(flatten)]
        flags: LoadFlags,
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
            let run = Run::try_parse_from(["run", "plan.yaml", flag, value]).unwrap();
            let Err(refused) = build(&run.flags) else {
                panic!("{flag} {value} taken beside a plan file");
            };
            assert!(
                refused.to_string().contains("does not go with a plan file"),
                "{flag} {value}: {refused}"
            );
        }
    }
}
