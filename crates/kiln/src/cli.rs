//! Command-line flags. Names follow wrk/oha (`-c`, `-d`, `-t`, `-H`), wrk2 (`-R`) and curl
//! (`-X`/`-m`, `-b @file`, `-k`), so users' muscle memory works.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use kiln_load::plan::DurationArg;

#[derive(Parser, Debug)]
#[command(
    name = "kiln",
    version,
    about = "A performance lab in one binary: honest load, and what the target did meanwhile",
    after_help = "Exit codes: 0 complete, 1 error (also a plan's data failing mid-run), 2 bad usage, 3 run interrupted (target stopped answering), 4 kiln doctor found a bad setting, 99 a --threshold failed, 130 Ctrl-C."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Load a URL, or run a plan file, and report latency, throughput and errors.
    Run(Box<RunArgs>),
    /// The highest rate a service keeps its SLOs at, found by loading it step by step, and
    /// what stops it there (its CPU, or how many requests it serves at once).
    Capacity(Box<CapacityArgs>),
    /// Plan files: check one without sending anything, or make one from a browser's HAR
    /// recording.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Print the summary of a recorded run again, from its run directory.
    Report(ReportArgs),
    /// What is wrong in a recorded run: the bottlenecks with their evidence, cause and fix,
    /// ranked (as at the end of kiln run).
    Findings(FindingsArgs),
    /// Did a change help? Two recorded runs side by side: each percentile, throughput and
    /// error rate with the change, its 95% interval and a verdict; findings fixed and new.
    Compare(CompareArgs),
    /// Many runs of one target over time (nightly CI): each run's p50, p99, throughput and
    /// failures, and the change points among them (E-Divisive means with a permutation test),
    /// each with the run where the new level starts.
    History(HistoryArgs),
    /// What hedged requests would do to a recorded run: p99 and p99.9 with a second copy
    /// after a delay, the extra load, and whether the slow requests were independent enough.
    Hedge(HedgeArgs),
    /// Put the run records of load shards (kiln run --shard i/N) together into one: seconds
    /// merged exactly, each shard's own health kept, thresholds judged once on the whole.
    Merge(MergeArgs),
    /// Kubernetes manifests that run a plan's shards as an Indexed Job (kiln k8s job).
    #[command(subcommand)]
    K8s(K8sCommand),
    /// Find, fix and prove: load a shop with planted problems, name them, load it fixed, compare.
    Demo(DemoArgs),
    /// The demo's shop on its own (a realistic target for trying kiln and for tests).
    #[command(hide = true)]
    DemoShop(DemoShopArgs),
    /// Watch what the host and a process do, once a second, without load.
    Watch(WatchArgs),
    /// Flame graphs of a running process (perf), or of profiles made elsewhere.
    Profile(ProfileArgs),
    /// Audit the host: settings that distort latency, throughput or profiles, with the fix.
    Doctor(DoctorArgs),
    /// Which code makes which database calls: N+1 loops, repeats, slow and housekeeping
    /// statements, and the DB stack trie, from OpenTelemetry spans (files, or received live).
    Queries(QueriesArgs),
    /// Fetch what kiln can use beside itself (async-profiler for JVM targets).
    #[command(subcommand)]
    Setup(SetupCommand),
}

#[derive(Subcommand, Debug)]
pub enum SetupCommand {
    /// async-profiler's library for JVM targets' profiles (inlined frames kept), fetched from
    /// Maven Central, checked against the SHA-256 kiln pins, and kept in kiln's data
    /// directory (~/.local/share/kiln), where `kiln run --profile` finds it.
    AsyncProfiler(SetupAsyncProfilerArgs),
}

#[derive(Args, Debug)]
pub struct SetupAsyncProfilerArgs {
    /// Keep the library here instead (then give it with --async-profiler or
    /// KILN_ASYNC_PROFILER).
    #[arg(long = "dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Read the release's jar from this file instead of the network (it is checked the same).
    #[arg(long = "jar", value_name = "FILE")]
    pub jar: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct QueriesArgs {
    /// Span files: OTLP/JSON (one document or JSON lines, optionally gzipped), OTLP/protobuf,
    /// or a run directory (its recorded spans are read again).
    pub files: Vec<PathBuf>,
    /// Be the OTLP/HTTP endpoint (POST /v1/traces) the application exports to, on this
    /// address (loopback unless you say otherwise).
    #[arg(long = "listen", value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:4318")]
    pub listen: Option<String>,
    /// How long to listen (default: until Ctrl-C).
    #[arg(short = 'd', long = "duration", requires = "listen")]
    pub duration: Option<DurationArg>,
    #[command(flatten)]
    pub analysis: QueryAnalysisArgs,
    /// The run directory (default: runs/<time>-queries).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    /// Print the analysis as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
}

/// How spans are analysed, shared by `kiln queries` and `kiln run --otlp-listen`.
#[derive(Args, Debug, Clone)]
pub struct QueryAnalysisArgs {
    /// Only requests whose route matches this pattern (`*` matches anything), e.g. 'GET /export/*'.
    #[arg(long = "route")]
    pub route: Option<String>,
    /// Only this request: its id (trace id, or trace id/span id) as findings and the worst
    /// requests show it, or the start of it. The DB stack trie is then that request's.
    #[arg(long = "request")]
    pub request: Option<String>,
    /// Calls of one statement from one call site that make an N+1 (2 for a strict CI gate).
    #[arg(long = "n-plus-one", default_value_t = 5, value_parser = clap::value_parser!(u64).range(2..))]
    pub n_plus_one: u64,
    /// A single call at least this long (ms) is a slow query.
    #[arg(long = "slow-ms", default_value_t = 500.0)]
    pub slow_ms: f64,
    /// Frames in the DB stack trie: app (the application's own; framework, driver and runtime
    /// frames folded away) or all.
    #[arg(long = "frames", value_enum, default_value = "app")]
    pub frames: TrieFrames,
    /// Also write the HTML report (findings, routes, the treemap) here.
    #[arg(long = "html")]
    pub html: Option<PathBuf>,
    /// Leave calls whose normalized statement matches this pattern (`*` matches anything) out
    /// of the findings, e.g. 'SELECT * FROM flags WHERE *'. Repeatable.
    #[arg(long = "ignore-sql")]
    pub ignore_sql: Vec<String>,
    /// Leave calls with a stack frame matching this pattern (its function, or file:line) out of
    /// the findings, e.g. '*preload_associations*' or 'com.acme.cache.*'. Repeatable.
    #[arg(long = "ignore-frame")]
    pub ignore_frames: Vec<String>,
    /// The application's own code, when kiln's rules take it for a library's: a frame whose
    /// function starts with this (Java/.NET/Go package) or whose file path contains it
    /// (Python, Node) is the application's, and no other is. Repeatable.
    #[arg(long = "app-package")]
    pub app_packages: Vec<String>,
    /// Exit with 99 when a finding is at least this severe (a CI gate).
    #[arg(long = "fail-on", value_enum)]
    pub fail_on: Option<FailOn>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeDepth {
    Default,
    Deep,
}

impl RuntimeDepth {
    pub fn depth(self) -> kiln_runtime::watch::Depth {
        match self {
            Self::Default => kiln_runtime::watch::Depth::Default,
            Self::Deep => kiln_runtime::watch::Depth::Deep,
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrieFrames {
    App,
    All,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOn {
    Low,
    Medium,
    High,
}

impl FailOn {
    pub fn severity(self) -> kiln_findings::Severity {
        match self {
            Self::Low => kiln_findings::Severity::Low,
            Self::Medium => kiln_findings::Severity::Medium,
            Self::High => kiln_findings::Severity::High,
        }
    }
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Also check this process (its open-files limit and cgroup CPU quota).
    #[arg(long = "pid", conflicts_with = "port")]
    pub pid: Option<i32>,
    /// Also check the process listening on this TCP port.
    #[arg(long = "port")]
    pub port: Option<u16>,
    /// Read /proc and /sys under this directory instead of / (a copy of another host's).
    #[arg(long = "root", default_value = "/")]
    pub root: PathBuf,
    /// Print the checks as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub action: Option<ProfileAction>,
    /// The process to profile (with its child processes).
    #[arg(long = "pid", conflicts_with = "port")]
    pub pid: Option<i32>,
    /// Profile the process listening on this TCP port.
    #[arg(long = "port")]
    pub port: Option<u16>,
    /// How long to profile.
    #[arg(short = 'd', long = "duration", default_value = "10s")]
    pub duration: DurationArg,
    /// cpu: where the CPU time goes (on-CPU). cswitch: where threads leave the CPU
    /// (blocking, waiting, preemption), one sample per context switch.
    #[arg(long = "event", value_enum, default_value = "cpu")]
    pub event: ProfileEvent,
    /// Samples per second for --event cpu.
    #[arg(short = 'F', long = "frequency", default_value_t = 99)]
    pub frequency: u32,
    /// How perf walks stacks: fp (frame pointers; needed through JIT code) or dwarf (whole
    /// stacks of native code built without frame pointers). Default: fp for Java, Node and
    /// Python, dwarf otherwise.
    #[arg(long = "call-graph", value_enum)]
    pub call_graph: Option<ProfileCallGraph>,
    /// A JVM's CPU profile is taken by async-profiler inside it (inlined methods keep their
    /// names) when its library is found: this path, KILN_ASYNC_PROFILER, or the copy `kiln
    /// setup async-profiler` keeps; `off` takes it with perf and the JVM's perf map.
    #[arg(long = "async-profiler", value_name = "PATH|off")]
    pub async_profiler: Option<PathBuf>,
    #[command(flatten)]
    pub output: ProfileOutput,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileCallGraph {
    Fp,
    Dwarf,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileEvent {
    Cpu,
    Cswitch,
}

/// Where and how a profile is written and shown.
#[derive(Args, Debug, Clone)]
pub struct ProfileOutput {
    /// The run directory (default: runs/<time>-profile-...).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    /// Functions listed in the top tables.
    #[arg(long = "top", default_value_t = 10)]
    pub top: usize,
    /// Print the summary as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
    /// Which of a pprof profile's sample types to read, by name (`alloc_space`,
    /// `cpu`) or index, as `go tool pprof -sample_index` (default: the profile's default
    /// type, else the last).
    #[arg(long = "sample-index", value_name = "NAME|N")]
    pub sample_index: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ProfileAction {
    /// Read a profile made elsewhere: pprof (.pb.gz), collapsed stacks (FlameGraph,
    /// async-profiler -o collapsed, py-spy --format raw), `perf script` text (any -F fields)
    /// or speedscope JSON; gzip, zip (of one file) and UTF-16 text are opened first, and
    /// formats it does not read (JFR, Chrome traces, callgrind) are named with how to
    /// convert them.
    Import {
        file: PathBuf,
        #[command(flatten)]
        output: ProfileOutput,
    },
    /// A differential flame graph: widths from AFTER, red where a stack grew, blue where it
    /// shrank (BEFORE is scaled to AFTER's sample count first). Files in any import format.
    Diff {
        before: PathBuf,
        after: PathBuf,
        #[command(flatten)]
        output: ProfileOutput,
    },
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The process to watch.
    #[arg(long = "pid", conflicts_with_all = ["port", "spawn"])]
    pub pid: Option<i32>,
    /// Watch the process listening on this TCP port (with --spawn: wait until the started
    /// process listens on it).
    #[arg(long = "port")]
    pub port: Option<u16>,
    /// Start the process to watch with this command (through sh; stopped when the watch
    /// ends), as kiln run --spawn does: a Go target gets GODEBUG=gctrace=1.
    #[arg(long = "spawn", value_name = "CMD")]
    pub spawn: Option<String>,
    /// How long to watch.
    #[arg(short = 'd', long = "duration", default_value = "10s")]
    pub duration: DurationArg,
    /// Time between samples.
    #[arg(long = "interval", default_value = "1s")]
    pub interval: DurationArg,
    /// The run directory (default: runs/<time>-watch-<pid>).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    /// Print each sample as a JSON line on stdout.
    #[arg(long = "json")]
    pub json: bool,
    /// How far to look into the process's runtime, as for kiln run (`deep`: thread dumps).
    #[arg(long = "runtime", value_enum, default_value_t = RuntimeDepth::Default)]
    pub runtime: RuntimeDepth,
}

/// `kiln capacity URL|plan.yaml --slo 'p99<50ms'`.
#[derive(Args, Debug)]
#[command(
    after_help = "Each step is a whole run under OUT/steps/; OUT/capacity.json has the search. \
-d sets each step's measured time (default: long enough for the SLOs' percentiles, 3 to 30 s), \
--warmup each step's warm-up (default 1s), -c the probe's connections. \
Exit codes: 0 a capacity found (or above --max-rate), 99 no rate kept the SLOs, 1 error, 130 Ctrl-C."
)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub load: kiln_runner::load_flags::LoadFlags,

    /// A service level objective every step must keep, k6 style (repeatable): 'p99<50ms',
    /// 'p(99.9)<200ms', 'mean<20ms', 'max<1s', 'failed<1%'.
    #[arg(help_heading = "Capacity", long = "slo", required = true)]
    pub slos: Vec<String>,

    /// No step offers more than this many requests per second.
    #[arg(help_heading = "Capacity", long = "max-rate", value_name = "N")]
    pub max_rate: Option<f64>,

    /// The first step's rate (and no closed-model probe) [default: 80% of what the probe
    /// served].
    #[arg(help_heading = "Capacity", long = "start-rate", value_name = "N")]
    pub start_rate: Option<f64>,

    /// Done when the lowest rate that broke an SLO is within this much above the highest
    /// that kept them all.
    #[arg(
        help_heading = "Capacity",
        long = "precision",
        value_name = "PERCENT",
        default_value = "5%"
    )]
    pub precision: crate::cli::Percent,

    /// A closed-model sweep instead of the rate search: these connection counts back to back
    /// (JMeter's threads), each level measured (-d, 5 s by default) and judged against the
    /// SLOs; the Universal Scalability Law fitted over them says where throughput peaks.
    /// (Not -c: that stays the probe's and each level's plain connection count.)
    #[arg(
        help_heading = "Capacity",
        long = "sweep",
        value_name = "N,N,...",
        value_delimiter = ','
    )]
    pub sweep: Vec<usize>,

    /// The whole search's time at most; it reports the interval it reached.
    #[arg(help_heading = "Capacity", long = "budget", default_value = "5m")]
    pub budget: DurationArg,

    /// Watch the process with this pid through every step (its CPU tells a CPU-bound
    /// service from one that runs out of workers).
    #[arg(help_heading = "Watching the target", long = "watch-pid")]
    pub watch_pid: Option<i32>,

    /// Like --watch-pid, for the processes listening on this TCP port.
    #[arg(help_heading = "Watching the target", long = "watch-port")]
    pub watch_port: Option<u16>,

    /// Also profile the watched process over each step's measured part.
    #[arg(help_heading = "Profiling", long = "profile")]
    pub profile: bool,

    /// Where the search is recorded [default: a fresh directory under runs/].
    #[arg(long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// The search's name [default: the URL or plan file].
    #[arg(long = "name")]
    pub name: Option<String>,

    /// Print the search's record as JSON.
    #[arg(long = "json")]
    pub json: bool,

    /// No progress lines.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
}

/// A share given as `5%` or `0.05`.
#[derive(Clone, Copy, Debug)]
pub struct Percent(pub f64);

impl std::str::FromStr for Percent {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let share = match s.strip_suffix('%') {
            Some(pct) => pct.trim().parse::<f64>().map(|p| p / 100.0),
            None => s.parse::<f64>(),
        }
        .map_err(|_| format!("'{s}' is not a share (e.g. 5% or 0.05)"))?;
        if !(share > 0.0 && share < 1.0) {
            return Err(format!("'{s}' is out of range: above 0% and below 100%"));
        }
        Ok(Self(share))
    }
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub load: kiln_runner::load_flags::LoadFlags,

    /// Write the thresholds' and checks' outcome as JUnit XML (for CI), one test case each.
    #[arg(help_heading = "Plans and CI", long = "junit", value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Compare this run with a base run (a run directory) once it is recorded, as
    /// `kiln compare BASE THIS` does.
    #[arg(
        help_heading = "Plans and CI",
        long = "compare",
        value_name = "BASE_RUN"
    )]
    pub compare: Option<PathBuf>,

    /// With --compare: exit with 99 when a figure regressed against the base.
    #[arg(
        help_heading = "Plans and CI",
        long = "fail-on-regression",
        requires = "compare"
    )]
    pub fail_on_regression: bool,

    /// Start the target with this command (through sh; stopped when the run ends), wait
    /// until it accepts connections on the URL's address, and watch it as --watch-pid
    /// would. A Go target gets GODEBUG=gctrace=1: every GC cycle is read from its stderr.
    #[arg(
        help_heading = "Watching the target",
        long = "spawn",
        value_name = "CMD"
    )]
    pub spawn: Option<String>,

    /// Seconds between the JMeter-style summary lines when stderr is not a terminal.
    #[arg(
        help_heading = "Watching the target",
        long = "interval",
        default_value = "5s"
    )]
    pub interval: DurationArg,

    /// Record what this process and the host do during the run, once a second.
    #[arg(
        help_heading = "Watching the target",
        long = "watch-pid",
        conflicts_with = "watch_port"
    )]
    pub watch_pid: Option<i32>,

    /// Like --watch-pid, for the process listening on this TCP port (usually the target's).
    #[arg(help_heading = "Watching the target", long = "watch-port")]
    pub watch_port: Option<u16>,

    /// How far to look into the watched process's runtime: `default` reads what it publishes
    /// for free (a JVM's GC, safepoints, JIT); `deep` also takes a thread dump every 2 s over
    /// the JVM's attach socket (thread states, who holds the locks others wait for).
    #[arg(help_heading = "Watching the target", long = "runtime", value_enum, default_value_t = RuntimeDepth::Default)]
    pub runtime: RuntimeDepth,

    /// Also profile the watched process (and its children) with perf over the measured runs,
    /// warm-up excluded: an on-CPU flame graph in the run directory.
    #[arg(help_heading = "Profiling", long = "profile")]
    pub profile: bool,

    /// Samples per second for --profile.
    #[arg(
        help_heading = "Profiling",
        long = "profile-frequency",
        default_value_t = 99
    )]
    pub profile_frequency: u32,

    /// Also record where the watched process's threads leave the CPU (perf: every context
    /// switch with its stack) over the measured runs: an off-CPU flame graph, and the
    /// findings about locks and waits. Costs the target on every switch: 17% of throughput
    /// at ~9,000 requests/s here (docs/benchmarks.md), little at a few hundred.
    #[arg(help_heading = "Profiling", long = "off-cpu")]
    pub off_cpu: bool,

    /// A JVM target's --profile is taken by async-profiler inside the JVM (inlined methods
    /// keep their names) when its library is found: this path, KILN_ASYNC_PROFILER, or the
    /// copy `kiln setup async-profiler` keeps; `off` takes it with perf and the JVM's perf map.
    #[arg(
        help_heading = "Profiling",
        long = "async-profiler",
        value_name = "PATH|off"
    )]
    pub async_profiler: Option<PathBuf>,

    /// A JVM target's allocations by site over the measured runs (async-profiler, a sample
    /// every 512 KiB allocated, weighed back to bytes): a flame graph of bytes, and the
    /// bytes each request allocates.
    #[arg(help_heading = "Profiling", long = "alloc")]
    pub alloc: bool,

    /// Receive the target's OpenTelemetry traces (OTLP/HTTP, POST /v1/traces) during the run
    /// and analyse its DB calls: N+1 loops, repeats, the DB stack trie (as kiln queries).
    #[arg(help_heading = "Traces and DB calls", long = "otlp-listen", value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:4318")]
    pub otlp_listen: Option<String>,

    /// After the load, how long to wait at most for spans still in the application's export
    /// queue (SDKs batch for 5 s by default).
    #[arg(
        help_heading = "Traces and DB calls",
        long = "otlp-wait",
        default_value = "6s"
    )]
    pub otlp_wait: DurationArg,

    #[command(flatten, next_help_heading = "Traces and DB calls")]
    pub queries: QueryAnalysisArgs,

    /// The run directory (default: runs/<time>-<name>).
    #[arg(help_heading = "Output", long = "out")]
    pub out: Option<PathBuf>,

    /// A name for the run (default: from the URL).
    #[arg(help_heading = "Output", long = "name")]
    pub name: Option<String>,

    /// Print the summary as JSON on stdout.
    #[arg(help_heading = "Output", long = "json")]
    pub json: bool,

    /// No live progress.
    #[arg(help_heading = "Output", short = 'q', long = "quiet")]
    pub quiet: bool,
}

#[derive(Subcommand, Debug)]
pub enum PlanCommand {
    /// Check a plan whole (keys, types, files, variables, load shape, thresholds) and show
    /// what it will run; sends nothing. Exits with 1 when the plan has a mistake.
    Check(PlanCheckArgs),
    /// Make a plan from a HAR file (a browser's recorded session): one scenario with its
    /// requests in order, the think times the user took, static resources left out.
    FromHar(FromHarArgs),
}

#[derive(Args, Debug)]
pub struct PlanCheckArgs {
    pub plan: PathBuf,
    /// Set a variable or a load setting, as with kiln run (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Print what the plan runs as JSON.
    #[arg(long = "json")]
    pub json: bool,
    /// Look the plan's host names up too (a check sends nothing and looks nothing up
    /// unless asked).
    #[arg(long = "resolve")]
    pub resolve: bool,
}

#[derive(Args, Debug)]
pub struct FromHarArgs {
    pub har: PathBuf,
    /// Write the plan here (default: standard output).
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    /// Keep requests for images, fonts, style sheets and scripts too.
    #[arg(long = "keep-static")]
    pub keep_static: bool,
    /// Keep requests to this host too, beside the recording's main one (repeatable; `*`
    /// keeps every host but link-local addresses such as a cloud's metadata service).
    #[arg(long = "hosts", value_name = "HOST")]
    pub hosts: Vec<String>,
}

#[derive(Args, Debug)]
pub struct FindingsArgs {
    /// A run directory (holding run.json), or a capacity search's (capacity.json). or a capacity search's (capacity.json). old, copied or interrupted runs are judged too.
    pub run_dir: PathBuf,
    /// Print the findings as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
    /// Exit with 99 when a finding is at least this severe (a CI gate).
    #[arg(long = "fail-on", value_enum)]
    pub fail_on: Option<FailOn>,
    /// Judge the record again with this kiln's rules instead of reading the findings it
    /// recorded.
    #[arg(long = "rejudge")]
    pub rejudge: bool,
}

#[derive(Args, Debug)]
pub struct HedgeArgs {
    /// A run directory (holding run.json), or a capacity search's (capacity.json). or a capacity search's (capacity.json). interrupted runs too.
    pub run_dir: PathBuf,
    /// When the second copy goes: a percentile of the run's latency (p95, p99.9) or a time
    /// (5ms, 500us); repeat to weigh several.
    #[arg(long = "at", value_name = "DELAY", default_value = "p95")]
    pub at: Vec<kiln_hedge::Delay>,
    /// Each request waits for this many sub-requests (a fan-out), each hedged alike.
    #[arg(long = "fanout", value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub fanout: u32,
    /// Print the what-if as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum K8sCommand {
    /// The ConfigMap (the plan), the results volume claim and the Indexed Job of N shards,
    /// as YAML on stdout: kiln k8s job plan.yaml --workers 8 | kubectl apply -f -
    Job(K8sJobArgs),
}

#[derive(Args, Debug)]
pub struct K8sJobArgs {
    /// The plan file each shard runs.
    pub plan: String,
    /// Shards (pods), one per node.
    #[arg(long = "workers", value_name = "N")]
    pub workers: u32,
    /// The kiln image the pods run [default: kiln:VERSION, built from docker/Dockerfile].
    #[arg(long = "image")]
    pub image: Option<String>,
    #[arg(long = "namespace")]
    pub namespace: Option<String>,
    /// The Job's name (its ConfigMap and volume claim take it as a prefix).
    #[arg(long = "name", default_value = "kiln-load")]
    pub name: String,
    /// When the shards start their load (RFC 3339 UTC) [default: when every pod is ready,
    /// by a file barrier on the results volume].
    #[arg(long = "start-at", value_name = "TIME")]
    pub start_at: Option<String>,
    /// Start this long from now instead (pods must be scheduled and their image pulled by
    /// then), e.g. 120s.
    #[arg(long = "lead", value_name = "DURATION")]
    pub lead: Option<DurationArg>,
    /// Each pod's CPU (request = limit).
    #[arg(long = "cpu", default_value = "2")]
    pub cpu: String,
    /// Each pod's memory (request = limit).
    #[arg(long = "memory", default_value = "1Gi")]
    pub memory: String,
    /// The size of the ReadWriteMany volume the shards write their run directories to.
    #[arg(long = "results-size", default_value = "10Gi")]
    pub results_size: String,
    /// More `kiln run` arguments for every shard, after `--`.
    #[arg(last = true)]
    pub run_args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' run directories.
    #[arg(required = true)]
    pub run_dirs: Vec<PathBuf>,
    /// Where to write the merged run record (a new directory).
    #[arg(long = "out", value_name = "DIR")]
    pub out: PathBuf,
    /// Merge even when shards are missing (the merged record is marked interrupted).
    #[arg(long = "allow-partial")]
    pub allow_partial: bool,
    /// Merge records of different plans.
    #[arg(long = "any-plans")]
    pub any_plans: bool,
    /// Print the merged summary as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Run directories, or directories holding them (searched three levels deep).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The figures judged (p50_ms, p99_ms, throughput, failed_pct; all by default).
    #[arg(long = "metric", value_name = "NAME")]
    pub metrics: Vec<String>,
    /// A change stands at this permutation p-value or below.
    #[arg(long = "alpha", default_value_t = 0.01)]
    pub alpha: f64,
    /// A change smaller than this share of the level before it is not one (0.1: 10%).
    #[arg(long = "min-change", default_value_t = 0.1)]
    pub min_change: f64,
    /// Print the history as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
    /// Exit 99 when any figure changed (a CI gate).
    #[arg(long = "fail-on-change")]
    pub fail_on_change: bool,
    /// Write the newest run of each target in Bencher Metric Format (bencher.dev) to FILE.
    #[arg(long = "bmf", value_name = "FILE")]
    pub bmf: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The run before the change (a run directory; --repeat N runs give the best intervals).
    pub base: PathBuf,
    /// The run after the change.
    pub new: PathBuf,
    /// Print the comparison as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
    /// Also write the comparison as a page (both runs' series on one axis) to FILE.
    #[arg(long = "html", value_name = "FILE")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub method: CompareMethod,
}

/// How `kiln compare` (and `kiln run --compare`) computes intervals and verdicts.
#[derive(Args, Debug, Clone)]
pub struct CompareMethod {
    /// Bootstrap resamples for the intervals.
    #[arg(long = "resamples", default_value_t = 2000, value_parser = clap::value_parser!(u32).range(100..=100_000))]
    pub resamples: u32,
    /// The resampling seed: the same records and seed give the same table.
    #[arg(long = "seed", default_value_t = 1)]
    pub seed: u64,
    /// Confidence of the intervals, held by all of them together (0.5 to 0.999).
    #[arg(long = "confidence", default_value_t = 0.95)]
    pub confidence: f64,
    /// Exit with 99 when a figure regressed (a CI gate).
    #[arg(long = "fail-on-regression")]
    pub fail_on_regression: bool,
}

impl Default for CompareMethod {
    fn default() -> Self {
        let options = kiln_compare::Options::default();
        Self {
            resamples: options.resamples,
            seed: options.seed,
            confidence: options.confidence,
            fail_on_regression: false,
        }
    }
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A run directory (holding run.json), or a capacity search's (capacity.json). or a capacity search's (capacity.json).
    pub run_dir: PathBuf,
    /// Print the summary as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
    /// (Re)build the HTML report: into FILE, or into report.html in the run directory.
    #[arg(long = "html", value_name = "FILE")]
    #[allow(clippy::option_option)]
    pub html: Option<Option<PathBuf>>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Seconds each of the two loads lasts (the periodic-stall finding needs 30).
    #[arg(long = "seconds", default_value_t = 30)]
    pub seconds: u64,
    /// Requests per second, arriving as a Poisson process.
    #[arg(long = "rate", default_value_t = 150.0)]
    pub rate: f64,
    /// Where the demo's run directories go.
    #[arg(long = "runs-dir", default_value = "runs")]
    pub runs_dir: PathBuf,
    /// Print the two runs' findings and the comparison as JSON on stdout.
    #[arg(long = "json")]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DemoShopArgs {
    /// The address to listen on; the bound one is printed as "listening on ADDR".
    #[arg(long = "listen", default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
    /// Fix every planted problem.
    #[arg(long = "fixed", conflicts_with = "fix")]
    pub fixed: bool,
    /// Fix these problems only: n-plus-one, backtraces, json, mmap, stall, lock.
    #[arg(long = "fix", value_delimiter = ',')]
    pub fix: Vec<kiln_demo_shop::Problem>,
    /// The price list expires at every multiple of this on the wall clock.
    #[arg(long = "price-ttl", default_value = "3s", value_parser = humantime::parse_duration)]
    pub price_ttl: std::time::Duration,
    /// The share of requests traced, when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    #[arg(long = "trace-ratio", default_value_t = 0.2)]
    pub trace_ratio: f64,
}
