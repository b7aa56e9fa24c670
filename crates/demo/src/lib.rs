//! `kiln demo`: measure, find, fix, prove -- in one command and no setup. It starts the demo
//! shop (`kiln_demo_shop`: hyper, SQLite, the OpenTelemetry SDK) in its own process with six
//! problems planted from the case studies, loads it with Poisson arrivals while watching it,
//! profiling it on and off the CPU and receiving its traces; the findings name the problems.
//! Then it starts the shop again with every fix, runs the same load, and compares the runs.
//! It tells its story on stderr as it goes, ends with the three pages to open and a short
//! summary, and gives the binary the whole as JSON.

use std::io::{BufRead, BufReader, IsTerminal};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kiln_demo_shop::Problem;
use kiln_load::{Arrivals, LoadPlan, Model, PhaseSpec, RateStage, StopSignal, Target};
use kiln_record::text::{safe_text, us};
use kiln_record::{Run, RunLocation};
use kiln_runner::{execute, OtlpSpec, QuerySettings, RunOutcome, RunSpec};
use kiln_runtime::watch::Depth;
use kiln_terminal::LiveOutput;
use serde_json::{json, Value};

/// What stops the demo.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Options that cannot run as given.
    #[error("{0}")]
    Refused(String),
    /// The demo shop did not start as it should.
    #[error("{0}")]
    Shop(String),
    /// What the demo was doing when a system call failed.
    #[error("{doing}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Run(#[from] kiln_runner::RunnerError),
    #[error(transparent)]
    Plan(#[from] kiln_load::PlanError),
    #[error(transparent)]
    Receiver(#[from] kiln_queries::QueryError),
    #[error(transparent)]
    Record(#[from] kiln_record::RecordError),
    #[error(transparent)]
    Compare(#[from] kiln_compare::CompareError),
}

type Result<T, E = DemoError> = std::result::Result<T, E>;

/// An I/O error with what the demo was doing.
fn doing(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> DemoError {
    let doing = doing.into();
    move |source| DemoError::Io { doing, source }
}

/// The order the demo loads: eight lines, so eight product queries from the N+1 loop.
const ORDER_PATH: &str = "/orders/42";
/// How long the shop may take to start (it fills its database first).
const SHOP_START: Duration = Duration::from_secs(20);
/// Left out of each run's results: the shop's start.
const WARMUP: Duration = Duration::from_secs(3);
/// Samples per second: enough for the fixed shop, which uses little CPU, to be judged.
const PROFILE_HZ: u32 = 499;
/// How long the shop's last spans may take to arrive after the load.
const TRACES_WAIT: Duration = Duration::from_secs(2);

/// What `kiln demo` is asked.
pub struct DemoOptions {
    /// Requests per second, arriving as a Poisson process.
    pub rate: f64,
    /// Seconds each of the two loads lasts (5 to 600).
    pub seconds: u64,
    /// Where the run directories go.
    pub runs_dir: PathBuf,
}

/// The shop in its own process, stopped (and its traces flushed) when dropped.
pub struct ShopProcess {
    child: Child,
    pub addr: SocketAddr,
}

impl ShopProcess {
    /// Starts `kiln demo-shop` (this process's own binary, which must be kiln) with these
    /// arguments, exporting its traces to `otlp`.
    pub fn start(args: &[&str], otlp: Option<SocketAddr>) -> Result<ShopProcess> {
        let exe = std::env::current_exe().map_err(doing("cannot find kiln's own binary"))?;
        let mut command = Command::new(exe);
        command
            .arg("demo-shop")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(addr) = otlp {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"));
        }
        let mut child = command
            .spawn()
            .map_err(doing("cannot start the demo shop"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| DemoError::Shop("no pipe from the shop".into()))?;
        // the first line says where it listens; read it on a thread so a hung shop times out
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut shop = ShopProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = rx.recv_timeout(SHOP_START).map_err(|_| {
            DemoError::Shop(format!("the demo shop did not start within {SHOP_START:?}"))
        })?;
        shop.addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| {
                DemoError::Shop(format!(
                    "the demo shop did not say where it listens: {line:?}"
                ))
            })?;
        Ok(shop)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for ShopProcess {
    fn drop(&mut self) {
        // SIGTERM: the shop sends its queued spans and exits
        kiln_runner::child::stop_gracefully(&mut self.child, Duration::from_secs(5));
    }
}

/// What kiln could not do on this machine, said before the runs.
fn perf_missing() -> Option<String> {
    let perf = kiln_profile::RecordOptions::default().perf;
    kiln_profile::perf::perf_version(&perf)
        .err()
        .map(|e| e.to_string())
}

/// Both runs and their comparison, told on stderr; the whole as JSON, or None when
/// interrupted after the first run (which is recorded).
pub fn run(args: &DemoOptions, stop: &StopSignal) -> Result<Option<Value>> {
    if !(args.rate.is_finite() && args.rate > 0.0) {
        return Err(DemoError::Refused(
            "--rate must be a positive number of requests per second".into(),
        ));
    }
    let seconds = args.seconds.clamp(5, 600);
    let duration = Duration::from_secs(seconds);
    let no_perf = perf_missing();
    eprintln!(
        "kiln demo: a shop (HTTP, SQLite, OpenTelemetry) with {} problems planted:",
        Problem::ALL.len()
    );
    for p in Problem::ALL {
        eprintln!("  - {}", p.planted());
    }
    eprintln!(
        "kiln loads it at {} requests/s (Poisson arrivals) for {seconds} s after a {} s warm-up, \
         watching, profiling and tracing it; then restarts it with every fix and proves the fixes with a comparison.",
        args.rate,
        WARMUP.as_secs()
    );
    if let Some(why) = &no_perf {
        eprintln!(
            "kiln demo: no profiles (perf cannot run: {}): the CPU and lock findings are skipped",
            safe_text(why)
        );
    }
    if seconds < 30 {
        eprintln!("kiln demo: runs under 30 s are too short to find the periodic stall");
    }
    eprintln!();
    // the DB calls analysed as `kiln queries` does by default: N+1 from 5, the app's frames
    let analysis = QuerySettings {
        options: kiln_queries::analyze::Options::default(),
        frames: kiln_queries::trie::Frames::App,
        html: None,
        fail_on: None,
    };
    let mut outcomes: Vec<RunOutcome> = Vec::new();
    for (step, (name, shop_args)) in [("demo-planted", &[][..]), ("demo-fixed", &["--fixed"][..])]
        .into_iter()
        .enumerate()
    {
        eprintln!(
            "{}. {}",
            step + 1,
            if step == 0 {
                "The shop as planted"
            } else {
                "The shop with every fix (--fixed)"
            }
        );
        let receiver = kiln_queries::receiver::Receiver::start("127.0.0.1:0", None)?;
        let shop = ShopProcess::start(shop_args, Some(receiver.addr()))?;
        let model = Model::Open {
            stages: RateStage::steady(args.rate, duration),
            connections: 16,
            max_connections: 256,
            arrivals: Arrivals::Poisson {
                seed: step as u64 + 1,
            },
        };
        let plan = LoadPlan {
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            threads: 1,
            ..LoadPlan::new(Target::parse(&shop.url(ORDER_PATH))?, model, duration)
        };
        // the shop's first seconds (threads started, connections opened, pages first
        // touched) are left out, as a user's run would leave them out
        let phases = [
            (
                PhaseSpec {
                    name: "warmup".into(),
                    measured: false,
                    start_at: None,
                },
                WARMUP,
            ),
            (
                PhaseSpec {
                    name: "run".into(),
                    measured: true,
                    start_at: None,
                },
                Duration::ZERO,
            ),
        ];
        let spec = RunSpec {
            gctrace: None,
            exports: &[],
            plan: &plan,
            plan_record: plan.to_record(),
            phases: &phases,
            out: RunLocation::Fresh {
                parent: args.runs_dir.clone(),
                name: name.to_string(),
            },
            name,
            target: Some(kiln_runner::TargetProcesses::of_pid(shop.pid())),
            runtime_depth: Depth::Default,
            warmup_auto: false,
            profile_hz: no_perf.is_none().then_some(PROFILE_HZ),
            off_cpu: no_perf.is_none(),
            jvm_profiler: Default::default(),
            alloc: false,
            otlp: Some(OtlpSpec {
                receiver,
                wait: TRACES_WAIT,
                settings: &analysis,
            }),
        };
        // a progress line on a terminal; in a log, nothing until the run's own line
        let mut live = LiveOutput::new(!std::io::stderr().is_terminal(), 5);
        let outcome = execute(spec, stop, &mut live)?;
        drop(shop);
        for w in &outcome.warnings {
            eprintln!("   kiln: {}", safe_text(w));
        }
        eprintln!("   {}", run_line(&outcome));
        // which findings explain the p99 and the CPU per request (the line above has the p99)
        if let Some(symptoms) = &outcome.findings.symptoms {
            for line in kiln_findings::symptoms_text(symptoms).lines().skip(1) {
                eprintln!("   {}", line.trim_start());
            }
        }
        for f in &outcome.findings.findings {
            eprintln!(
                "   {:<6} {}",
                f.severity.as_str().to_uppercase(),
                safe_text(&f.title)
            );
        }
        if outcome.findings.findings.is_empty() {
            eprintln!("   no findings");
        }
        // a planted problem that could not be judged here says why, not only that it is absent
        for u in (outcome.findings.unjudged.iter()).filter(|u| u.rule == "latency.periodic-spikes")
        {
            eprintln!("   not judged {}: {}", u.rule, safe_text(&u.reason));
        }
        eprintln!();
        outcomes.push(outcome);
        if stop.is_stopped() {
            break;
        }
    }
    let [planted, fixed] = &outcomes[..] else {
        eprintln!("kiln demo: interrupted; the run above is recorded");
        return Ok(None);
    };
    let (planted_run, fixed_run) = (Run::open(planted.dir.path())?, Run::open(fixed.dir.path())?);
    let comparison = kiln_compare::compare(&planted_run, &fixed_run, &Default::default())?;
    let compare_page = fixed.dir.path().join("compare.html");
    let page = kiln_report::render_compare(&planted_run, &fixed_run, &comparison);
    std::fs::write(&compare_page, page)
        .map_err(doing(format!("cannot write {}", compare_page.display())))?;

    // the pages first: they hold everything, and more than the lines below
    let pages: Vec<(&str, PathBuf)> = [
        ("Planted", planted.report.clone()),
        ("Fixed  ", fixed.report.clone()),
        ("Compare", Some(compare_page)),
    ]
    .into_iter()
    .filter_map(|(label, page)| Some((label, page?)))
    .collect();
    for (label, page) in &pages {
        eprintln!("{label} {}", safe_text(&page.display().to_string()));
    }
    eprintln!("\n3. Fixed versus planted");
    for row in comparison.rows.iter().chain(&comparison.resources) {
        if ["p50", "p99", "throughput", "target CPU per request"].contains(&row.metric.as_str()) {
            eprintln!("   {}", kiln_compare::row_line(row, row.verdict.as_str()));
        }
    }
    let f = &comparison.findings;
    eprintln!(
        "   findings: {} fixed, {} new, {} unchanged",
        f.fixed.len(),
        f.new.len(),
        f.unchanged.len()
    );
    eprintln!("Open the pages above, or: kiln report <run dir>, kiln compare <base> <new>");
    let side =
        |o: &RunOutcome| json!({"dir": o.dir.path(), "report": o.report, "findings": o.findings});
    Ok(Some(json!({
        "planted": side(planted),
        "fixed": side(fixed),
        "compare": comparison,
        "compare_page": pages.last().map(|p| &p.1),
        "skipped": no_perf.map(|why| format!("profiles: perf cannot run: {why}")),
    })))
}

/// One line for a run: its requests and latency, and its directory (the CPU per request is in
/// the comparison, over the measured seconds only).
fn run_line(o: &RunOutcome) -> String {
    let Some(total) = o.phases.iter().find(|p| p.measured).map(|p| &p.totals) else {
        return format!(
            "{}: no measured phase",
            safe_text(&o.dir.path().display().to_string())
        );
    };
    format!(
        "{} requests, p50 {}, p99 {}  ({})",
        total.latency.count(),
        us(total.latency.quantile_us(0.5)),
        us(total.latency.quantile_us(0.99)),
        safe_text(&o.dir.path().display().to_string())
    )
}
