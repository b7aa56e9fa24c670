//! Helpers for the tests that run real instrumented applications: free ports, plain HTTP
//! GETs, waiting for a port, killing children on drop, `kiln queries --listen` as a child.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The app's Python: target/pyenv, made by scripts/python-env.sh (which the test runs; it
/// returns at once when the environment is current).
pub fn python() -> PathBuf {
    let status = Command::new("bash")
        .arg(workspace().join("scripts/python-env.sh"))
        .status()
        .expect("bash runs");
    assert!(status.success(), "scripts/python-env.sh failed");
    workspace().join("target/pyenv/bin/python")
}

/// The environment `opentelemetry-instrument` reads to send a Python app's spans, and only
/// them, to kiln's OTLP listener on `otlp_port` (batches every 200 ms).
pub fn python_otel_env(command: &mut Command, service: &str, otlp_port: u16) {
    command
        .env("OTEL_SERVICE_NAME", service)
        .env("OTEL_TRACES_EXPORTER", "otlp")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "none")
        .env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("http://127.0.0.1:{otlp_port}/v1/traces"),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "200");
}

/// async-profiler's library, fetched once into target/async-profiler by `kiln setup
/// async-profiler` (as a user would, with the pinned checksum checked).
pub fn async_profiler() -> PathBuf {
    let dir = workspace().join("target/async-profiler");
    let library = dir.join("libasyncProfiler.so");
    if !library.exists() {
        let out = super::kiln(&["setup", "async-profiler", "--dir", dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "kiln setup async-profiler: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    library
}

/// A Go program of tests/apps (`go_grpc`, `otelcol`), built into the Go build cache: the
/// test script builds them beside the others, a test run without them builds one here once.
pub fn go_app(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let cache = workspace().join("target/go-build-cache");
    let bin = cache.join(name);
    // one build at a time: two tests asking for one app wait for the same build
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        if !bin.exists() {
            let status = Command::new("go")
                .args(["build", "-o"])
                .arg(&bin)
                .arg(".")
                .current_dir(workspace().join("tests/apps").join(name))
                .env("GOCACHE", &cache)
                .status()
                .expect("go runs");
            assert!(status.success(), "tests/apps/{name} did not build");
        }
        built.push(name.to_string());
    }
    bin
}

pub fn free_port() -> u16 {
    kiln_targets::free_port().expect("a free port on 127.0.0.1")
}

pub fn get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("app answers");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    assert!(
        out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/1.0 200"),
        "{path}: {out}"
    );
    out
}

pub fn wait_port(port: u16, child: &mut Child, what: &str) {
    wait_port_for(port, child, what, Duration::from_secs(60));
}

/// `wait_port` with its own limit (a Spring Boot app under the agent starts slowly on a busy
/// 2-core machine).
pub fn wait_port_for(port: u16, child: &mut Child, what: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            // what it said, where its stderr was piped (for a child that writes little)
            let mut said = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = stderr.read_to_string(&mut said);
            }
            panic!("{what} exited before listening: {status}\n{said}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Killed(pub Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        // A JVM kiln attached to leaves its attach socket when killed (it removes it only
        // as it exits): one left behind is taken for the socket of whichever process gets
        // the pid next (a test's fake JVM once did). The JVMs here are the child itself
        // (`exec java`).
        let _ = std::fs::remove_file(format!("/tmp/.java_pid{}", self.0.id()));
    }
}

/// A child started in a process group of its own (`process_group(0)`), the whole group
/// killed (SIGKILL) when dropped: a pre-fork server's workers go with their master.
pub struct KilledGroup(pub Child);
impl Drop for KilledGroup {
    fn drop(&mut self) {
        // SAFETY: a signal to the process group this test made
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// The line of `marker` in the app's source, 1-based.
pub fn line_of(file: &Path, marker: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .position(|l| l.contains(marker))
        .expect("marker in app")
        + 1
}

pub fn findings(analysis: &Value, kind: &str) -> Vec<Value> {
    analysis["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .cloned()
        .collect()
}

/// `kiln queries --listen` running as a child, recording into `out`.
pub struct Listening {
    child: Killed,
    pub port: u16,
}

impl Listening {
    pub fn start(out: &Path) -> Self {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args([
                "queries",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--json",
                "--out",
            ])
            .arg(out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut child = Killed(child);
        wait_port(port, &mut child.0, "kiln queries --listen");
        Self { child, port }
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1/traces", self.port)
    }

    /// Ctrl-C, then kiln's JSON report (asserting it exited 0).
    pub fn finish(mut self) -> Value {
        // SAFETY: signals our own child
        unsafe { libc::kill(self.child.0.id() as i32, libc::SIGINT) };
        let mut stdout = String::new();
        self.child
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        let status = self.child.0.wait().unwrap();
        let mut stderr = String::new();
        self.child
            .0
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(0), "{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
    }
}

/// The Flask shop (tests/apps/python_shop) on `conninfo`, exporting to `endpoint`.
pub fn start_python_shop(
    conninfo: &str,
    endpoint: &str,
    authors: usize,
    repeats: usize,
) -> (Killed, u16) {
    let port = free_port();
    let app = Command::new(python())
        .arg(python_shop_file())
        .env("DATABASE_URL", conninfo)
        .env("PORT", port.to_string())
        .env("N_AUTHORS", authors.to_string())
        .env("REPEATS", repeats.to_string())
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut app = Killed(app);
    wait_port(port, &mut app.0, "the Python app");
    (app, port)
}

/// The Flask shop, run from a copy whose folders are named like libraries
/// (`.../opentelemetry/sqlalchemy/app.py`): an application's own folders must not be taken
/// for the libraries they are named after.
pub fn python_shop_file() -> PathBuf {
    let source = workspace().join("tests/apps/python_shop/app.py");
    let dir = workspace().join("target/python-shop/opentelemetry/sqlalchemy");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("app.py");
    // written whole, then renamed: tests running at once never see half a file (a name of
    // its own per call: two tests of one binary share a process id, and one's rename took
    // the other's file away)
    let tmp = tempfile::NamedTempFile::new_in(&dir).unwrap();
    std::fs::copy(&source, tmp.path()).unwrap();
    tmp.persist(&copy).unwrap();
    copy.canonicalize().unwrap()
}

/// Each shop route, `rounds` times.
pub fn visit_shop(port: u16, rounds: usize) {
    for _ in 0..rounds {
        get(port, "/authors");
        get(port, "/bulk");
        get(port, "/settings");
    }
}

/// What the shop apps do by construction: on /authors an N+1 of `authors` queries from the
/// line marked `N+1 LOOP`, on /settings `repeats` identical queries from the line marked
/// `REPEATED`, on /bulk one JOIN.
pub struct ShopTruth<'a> {
    pub source: &'a Path,
    /// The file and function as the stacks name them.
    pub file: &'a str,
    pub loop_function: &'a str,
    /// The language's line comment, before the markers.
    pub comment: &'a str,
    pub authors: usize,
    pub repeats: usize,
    pub rounds: usize,
}

/// kiln found exactly the shop's N+1 and repeats, at their lines, and nothing else.
pub fn assert_shop_findings(a: &Value, t: &ShopTruth) {
    let n1 = findings(a, "n_plus_one");
    assert_eq!(n1.len(), 1, "{:#}", a["findings"]);
    let f = &n1[0];
    assert_eq!(f["route"], "GET /authors");
    assert_eq!(f["calls"], t.authors as u64);
    assert_eq!(f["requests"], t.rounds as u64);
    // the instrumentation recorded the bound values: all different
    assert_eq!(f["distinct_values"], t.authors as u64);
    let leaf = f["site"].as_array().unwrap().last().unwrap();
    assert_eq!(leaf["file"], t.file);
    assert_eq!(leaf["function"], t.loop_function);
    assert_eq!(
        leaf["line"],
        line_of(t.source, &format!("{} N+1 LOOP", t.comment)) as u64
    );

    let repeated = findings(a, "redundant");
    assert_eq!(repeated.len(), 1, "{:#}", a["findings"]);
    assert_eq!(repeated[0]["route"], "GET /settings");
    assert_eq!(repeated[0]["calls"], t.repeats as u64);
    let leaf = repeated[0]["site"].as_array().unwrap().last().unwrap();
    assert_eq!(
        leaf["line"],
        line_of(t.source, &format!("{} REPEATED", t.comment)) as u64
    );

    let bulk = a["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "GET /bulk")
        .expect("bulk route");
    assert_eq!(bulk["calls_max"], 1);
    // nothing else, and nothing at all on the bulk route, but for one call a busy host
    // stalled past the slow bar (500 ms), which is then true: the shops' queries take
    // milliseconds, and a host beside other work once held one SELECT for 923 ms (the slow
    // bar's own tests are kiln-queries' analysis tests)
    let all = a["findings"].as_array().unwrap();
    let stalled = findings(a, "slow");
    assert!(
        stalled.len() <= 1 && stalled.iter().all(|f| f["calls"] == 1),
        "{all:#?}"
    );
    assert_eq!(all.len() - stalled.len(), 2, "{all:#?}");
}

/// Runs one of scripts/ (the fetch scripts are no-ops once their files are there).
pub fn fetch(script: &str) {
    let status = Command::new("bash")
        .arg(workspace().join("scripts").join(script))
        .status()
        .unwrap();
    assert!(status.success(), "scripts/{script} failed");
}

/// A jar scripts/java-agent.sh (or spring-shop.sh) put in target/m2.
pub fn m2_jar(group: &str, name: &str, version: &str) -> String {
    let path = workspace()
        .join("target/m2")
        .join(group.replace('.', "/"))
        .join(name)
        .join(version)
        .join(format!("{name}-{version}.jar"));
    assert!(
        path.exists(),
        "{} (scripts/java-agent.sh fetches it)",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

/// What HdrHistogram's own Java reader (HistogramLogProcessor, from Maven Central) makes of a
/// `latency.hlog`, asked for the `latency` tag in kiln's microseconds: (total count, max,
/// p50), in microseconds.
pub fn hlog_processor(hlog: &Path) -> (u64, u64, u64) {
    let jar = m2_jar("org.hdrhistogram", "HdrHistogram", "2.2.2");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let status = Command::new("java")
        .args(["-cp", &jar, "org.HdrHistogram.HistogramLogProcessor", "-i"])
        .arg(hlog)
        .args(["-tag", "latency", "-outputValueUnitRatio", "1000", "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "HistogramLogProcessor failed on {hlog:?}");
    let hgrm = std::fs::read_to_string(dir.path().join("out.hgrm")).unwrap();
    // values are milliseconds with three decimals: kiln's microseconds exactly
    let us = |ms: &str| (ms.trim().parse::<f64>().unwrap() * 1000.0).round() as u64;
    let summary = hgrm
        .lines()
        .find_map(|l| l.strip_prefix("#[Max"))
        .unwrap_or_else(|| panic!("{hgrm}"));
    let (max, count) = summary.split_once(',').unwrap();
    let max = us(max.trim_start_matches([' ', '=']));
    let count = count
        .split('=')
        .nth(1)
        .unwrap()
        .trim_end_matches(']')
        .trim();
    let p50 = hgrm
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("0.500000000000"))
        .and_then(|l| l.split_whitespace().next())
        .map(us)
        .unwrap_or_else(|| panic!("{hgrm}"));
    (count.parse().unwrap(), max, p50)
}

/// Compiles `sources` with javac (against `classpath` when given) into `classes`.
pub fn javac(sources: &[PathBuf], classpath: Option<&str>, classes: &Path) {
    let mut javac = Command::new("javac");
    if let Some(cp) = classpath {
        javac.arg("-cp").arg(cp);
    }
    let out = javac
        .arg("-d")
        .arg(classes)
        .args(sources)
        .output()
        .expect("javac runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `java` under the OpenTelemetry Java agent with the span-stacktrace extension at
/// min.duration 0 and recorded JDBC parameters, exporting OTLP/protobuf to `endpoint` every
/// 100 ms: the setup the README documents. The caller adds the classpath and main class.
pub fn java_under_agent(service: &str, endpoint: &str) -> Command {
    fetch("java-agent.sh");
    let agent = m2_jar(
        "io.opentelemetry.javaagent",
        "opentelemetry-javaagent",
        "2.33.1",
    );
    let extension = m2_jar(
        "io.opentelemetry.contrib",
        "opentelemetry-span-stacktrace",
        "1.51.0-alpha",
    );
    let mut java = Command::new("java");
    java.arg(format!("-javaagent:{agent}"))
        .arg(format!("-Dotel.javaagent.extensions={extension}"))
        .args([
            "-Dotel.java.experimental.span-stacktrace.min.duration=0",
            "-Dotel.instrumentation.jdbc.experimental.capture-query-parameters=true",
            "-Dotel.exporter.otlp.protocol=http/protobuf",
            "-Dotel.metrics.exporter=none",
            "-Dotel.logs.exporter=none",
            "-Dotel.bsp.schedule.delay=100",
            "-Dotel.javaagent.logging=none",
        ])
        .arg(format!("-Dotel.service.name={service}"))
        .arg(format!("-Dotel.exporter.otlp.traces.endpoint={endpoint}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    java
}

/// A Java service of tests/apps compiled against real log4j2 (2.24.3, from Maven Central):
/// tests/apps/java_logs/LogShop, or tests/apps/java_case/CaseShop (with Jackson 2.17.2 too).
pub struct LogShop {
    classes: PathBuf,
    classpath: String,
    main: &'static str,
}

impl LogShop {
    pub fn compile(dir: &Path) -> Self {
        Self::compile_app(dir, "LogShop", "tests/apps/java_logs/LogShop.java", &[])
    }

    /// The held-out-style service of the second case study: JSON, exceptions and logging.
    pub fn compile_case_shop(dir: &Path) -> Self {
        let jackson = ["jackson-core", "jackson-databind", "jackson-annotations"]
            .map(|name| m2_jar("com.fasterxml.jackson.core", name, "2.17.2"));
        Self::compile_app(
            dir,
            "CaseShop",
            "tests/apps/java_case/CaseShop.java",
            &jackson,
        )
    }

    fn compile_app(dir: &Path, main: &'static str, source: &str, jars: &[String]) -> Self {
        fetch("java-agent.sh");
        let log4j = |name: &str| m2_jar("org.apache.logging.log4j", name, "2.24.3");
        let classpath = [log4j("log4j-api"), log4j("log4j-core")]
            .iter()
            .chain(jars)
            .cloned()
            .collect::<Vec<_>>()
            .join(":");
        let classes = dir.join(format!("{main}-classes"));
        javac(&[workspace().join(source)], Some(&classpath), &classes);
        Self {
            classes,
            classpath,
            main,
        }
    }

    /// Starts the shop, `planted` or `fixed`, with one of tests/apps/java_logs' log4j2
    /// configurations, on its own port.
    pub fn start(&self, mode: &str, config: &str) -> (Killed, u16) {
        // the method that throws keeps a frame of its own: the JVM's perf map has no
        // inlining, and C2 once inlined it (with the handler) into the JDK server's
        // Filter$Chain.doFilter, the only frame left to name as the thrower
        self.start_with(
            mode,
            config,
            &[
                "-XX:CompileCommand=quiet",
                "-XX:CompileCommand=dontinline,LogShop::cachedPrice",
            ],
        )
    }

    /// [`Self::start`] with these JVM flags instead of keeping the thrower out of line; `arg`
    /// is the service's argument after its port (LogShop's mode, CaseShop's CPU file).
    pub fn start_with(&self, arg: &str, config: &str, flags: &[&str]) -> (Killed, u16) {
        let port = free_port();
        let app = workspace().join("tests/apps/java_logs");
        let mut child = Command::new("java")
            .arg("-XX:+PreserveFramePointer")
            .args(flags)
            // the JDK's server answers in two writes: without this, Nagle and delayed ACKs
            // add 40 ms
            .arg("-Dsun.net.httpserver.nodelay=true")
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                app.join(config).display()
            ))
            .arg("-cp")
            .arg(format!("{}:{}", self.classes.display(), self.classpath))
            .args([self.main, &port.to_string(), arg])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("java starts");
        wait_port(port, &mut child, self.main);
        (Killed(child), port)
    }
}
