//! Helpers shared by the binary's end-to-end tests: run `kiln`, read its JSON and records, and
//! take turns on the machine.
#![allow(dead_code)] // each test module uses its own subset

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs the `kiln` binary built for these tests, with no standard input.
pub fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kiln runs")
}

/// Runs `kiln` and returns its output with its own peak resident memory in MiB, from wait4
/// on its pid (`RUSAGE_CHILDREN` would give the largest child this test binary ever waited
/// for: a JVM, Chromium).
// reaped by wait4 below, which std's Child does not know of
#[allow(clippy::zombie_processes)]
pub fn kiln_with_peak_rss(args: &[&str]) -> (Output, i64) {
    use std::io::Read as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiln runs");
    // drained aside: a full pipe would stall kiln before it exits
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let mut stdout = Vec::new();
    let _ = child.stdout.take().unwrap().read_to_end(&mut stdout);
    let mut status = 0;
    // SAFETY: wait4 writes into the status and struct owned here, for the child started here.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as i32;
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    use std::os::unix::process::ExitStatusExt as _;
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout,
        stderr: err.join().unwrap(),
    };
    (output, usage.ru_maxrss / 1024)
}

/// Runs `kiln` with these environment variables set.
pub fn kiln_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("kiln runs")
}

/// The JSON kiln printed on stdout; on failure the panic shows both streams.
pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// This test binary started again as a target process: `cmd` (the binary, with what the
/// target reads from its environment) runs the test `test` alone, which serves and prints
/// `listening on ADDR`. The caller kills the child.
pub fn start_self_target(mut cmd: Command, test: &str) -> SelfTarget {
    use std::io::BufRead as _;
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("the test binary starts as a target");
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        // the harness may print "test as_target ... " on the same line first
        .find_map(|l| {
            l.split("listening on ")
                .nth(1)
                .map(|a| a.trim().parse().unwrap())
        })
        .expect("the target says where it listens");
    // keep reading its output so it never blocks on a full pipe
    std::thread::spawn(move || lines.for_each(drop));
    SelfTarget { child, addr }
}

/// A target process started by [`start_self_target`], killed and reaped when dropped.
pub struct SelfTarget {
    pub child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

impl SelfTarget {
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for SelfTarget {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A run directory's `run.json`.
pub fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

/// Asserts kiln exited with `code` (showing its stderr if not) and returns its JSON.
pub fn json_with_exit(out: &Output, code: i32) -> Value {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    json_of(out)
}

/// The finding of `rule` in a run's JSON (`kiln run --json`), if it found one.
pub fn finding<'a>(run: &'a Value, rule: &str) -> Option<&'a Value> {
    finding_in(&run["findings"], rule)
}

/// The finding of `rule` in findings' JSON (`kiln findings --json`, a run's `findings`).
pub fn finding_in<'a>(findings: &'a Value, rule: &str) -> Option<&'a Value> {
    findings["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == rule)
}

/// The rules that found something, in findings' JSON, in their order.
pub fn rules_in(findings: &Value) -> Vec<String> {
    findings["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_string())
        .collect()
}

/// Every latency a run directory's load record holds (all phases), merged exactly.
pub fn latency_of(dir: &Path) -> kiln_record::LatencyHistogram {
    use kiln_record::{LoadRecordLine, RunDir, LOAD_SECONDS_PART};
    let run = RunDir::open(dir).unwrap();
    let mut h = kiln_record::LatencyHistogram::new();
    for line in run
        .read_json_lines::<LoadRecordLine>(LOAD_SECONDS_PART)
        .unwrap()
    {
        if let LoadRecordLine::Second(s) = line {
            h.merge(&s.latency);
        }
    }
    h
}

/// Every second of a run directory's load part (all phases), as the record wrote it.
pub fn load_seconds(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("load-seconds.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l.get("second").cloned())
        .collect()
}

/// `kiln profile --pid PID --json --out OUT` plus `args`, expected to complete; its JSON.
pub fn profile_pid(pid: u32, out: &Path, args: &[&str]) -> Value {
    let pid = pid.to_string();
    let mut all = vec![
        "profile",
        "--pid",
        &pid,
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    json_with_exit(&kiln(&all), 0)
}
pub mod apps;
pub mod prometheus;

/// Turns on the machine, so that one binary keeps what separate binaries gave: a test that
/// measures time or shares of CPU never runs beside a test of another kind.
///
/// - [`alone`]: nothing else runs (a warming JVM or a second load beside it has hidden the
///   effect measured in scheduling noise);
/// - [`group`]: a module's timing tests, which hold beside each other (they did as one binary
///   on two threads) and beside nothing else, at most [`GROUP_AT_ONCE`] at a time;
/// - [`beside`]: tests that measure no time (counts, files, pages, refusals), up to
///   [`BESIDE_AT_ONCE`] at a time, never beside the two kinds above.
///
/// The machine goes to one kind at a time, in batches: while a kind holds it, more of its
/// tests join up to their limit, the longest first (as long as each held its turn before:
/// turns.txt); when the last one ends, the kind with the most tests waiting takes it.
/// scripts/test.sh runs this binary with a libtest thread per test
/// (`--test-threads`), so that every test waits at once and each kind runs in as few batches
/// as it can: the wall time is then about the `alone` turns plus each kind's turns divided by
/// its limit (scripts/turns_sim.py on the five fresh-clone runs of `e539562`'s turn logs: 835
/// to 871 s against 935 to 977 s with libtest's two threads, which kept a test of another kind
/// waiting in one of the two, and the kind holding the machine stopped for it).
pub const GROUP_AT_ONCE: usize = 2;
pub const BESIDE_AT_ONCE: usize = 4;

struct Turns {
    /// The kind holding the machine and how many of its tests run.
    holder: Option<(&'static str, usize)>,
    /// The tests waiting for a turn, in the order they came.
    waiting: Vec<Waiting>,
    /// The number the next test to wait is given.
    arrivals: u64,
}

/// A test waiting for its turn: its kind, its number in the order of arrival, and how long
/// it is expected to hold the turn.
struct Waiting {
    kind: &'static str,
    arrival: u64,
    expected_s: f64,
}

impl Turns {
    /// The kind the machine goes to when it is free: the one with the most tests waiting, of
    /// equals the one that came first.
    fn next_kind(&self) -> Option<&'static str> {
        let waiting_of = |kind: &str| self.waiting.iter().filter(|w| w.kind == kind).count();
        let mut next: Option<(&'static str, usize)> = None;
        for w in &self.waiting {
            let n = waiting_of(w.kind);
            if next.is_none_or(|(_, most)| n > most) {
                next = Some((w.kind, n));
            }
        }
        next.map(|(kind, _)| kind)
    }

    /// Of the tests of `kind` waiting, the one to go first: the longest expected, of equals
    /// the one that came first. Longest first, a kind's batch does not end with one long
    /// test holding the machine while the places beside it stay empty (scripts/turns_sim.py
    /// on the fresh-clone turn logs: 834 s in arrival order, 805 s longest first).
    fn first_of(&self, kind: &str) -> Option<u64> {
        (self.waiting.iter().filter(|w| w.kind == kind))
            .fold(None, |first: Option<&Waiting>, w| match first {
                Some(f) if f.expected_s >= w.expected_s => Some(f),
                _ => Some(w),
            })
            .map(|w| w.arrival)
    }
}

static TURNS: std::sync::Mutex<Turns> = std::sync::Mutex::new(Turns {
    holder: None,
    waiting: Vec::new(),
    arrivals: 0,
});
static TURN_TAKEN: std::sync::Condvar = std::sync::Condvar::new();

/// How long `test` held its turn in earlier runs (turns.txt: "seconds kind test" lines as
/// KILN_TEST_TURNS writes them), 0 for a test not listed.
fn expected_turn_s(test: &str) -> f64 {
    static EXPECTED: std::sync::OnceLock<std::collections::HashMap<&'static str, f64>> =
        std::sync::OnceLock::new();
    let expected = EXPECTED.get_or_init(|| {
        (include_str!("../turns.txt").lines())
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                match fields[..] {
                    [seconds, _kind, test] => (test, seconds.parse().expect(l)),
                    _ => panic!("turns.txt: not \"seconds kind test\": {l}"),
                }
            })
            .collect()
    });
    expected.get(test).copied().unwrap_or(0.0)
}

/// A turn on the machine, given back when dropped; when it was taken.
pub struct Turn(&'static str, std::time::Instant);

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turns = TURNS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((kind, n)) = turns.holder {
            if kind == self.0 {
                turns.holder = (n > 1).then_some((kind, n - 1));
            }
        }
        TURN_TAKEN.notify_all();
        drop(turns);
        log_turn(self.0, self.1.elapsed());
    }
}

/// With KILN_TEST_TURNS=FILE, each test's turn is added to FILE as "seconds kind test": the
/// time the test held the machine, without the time it waited for its turn (which libtest's
/// --report-time counts).
fn log_turn(kind: &str, held: std::time::Duration) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    kiln_targets::append_to_file_named_by(
        "KILN_TEST_TURNS",
        &format!("{:.3} {kind} {test}", held.as_secs_f64()),
    );
}

fn take_turn(kind: &'static str, at_once: usize) -> Turn {
    let expected_s = expected_turn_s(std::thread::current().name().unwrap_or("?"));
    let mut turns = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let arrival = turns.arrivals;
    turns.arrivals += 1;
    turns.waiting.push(Waiting {
        kind,
        arrival,
        expected_s,
    });
    loop {
        let free = match turns.holder {
            None => turns.next_kind() == Some(kind),
            Some((holder, n)) => holder == kind && n < at_once,
        };
        if free && turns.first_of(kind) == Some(arrival) {
            let me = turns.waiting.iter().position(|w| w.arrival == arrival);
            turns.waiting.remove(me.expect("a waiting test is listed"));
            let n = turns.holder.map_or(0, |(_, n)| n);
            turns.holder = Some((kind, n + 1));
            // the others of this kind may join
            TURN_TAKEN.notify_all();
            return Turn(kind, std::time::Instant::now());
        }
        turns = TURN_TAKEN.wait(turns).unwrap_or_else(|e| e.into_inner());
    }
}

/// The order of turns, without taking one (nothing runs: no turn is needed).
#[test]
fn of_a_kinds_tests_waiting_the_longest_goes_first_and_the_kind_with_most_waiting_next() {
    let waiting = |kind, arrival, expected_s| Waiting {
        kind,
        arrival,
        expected_s,
    };
    let turns = Turns {
        holder: None,
        waiting: vec![
            waiting("alone", 0, 30.0),
            waiting("runtime", 1, 10.0),
            waiting("runtime", 2, 40.0),
            waiting("runtime", 3, 40.0),
            waiting("beside", 4, 0.0),
        ],
        arrivals: 5,
    };
    assert_eq!(turns.next_kind(), Some("runtime"));
    // the longest, of equals the first to come
    assert_eq!(turns.first_of("runtime"), Some(2));
    assert_eq!(turns.first_of("beside"), Some(4));
    assert_eq!(turns.first_of("merge"), None);
    // turns.txt reads whole, and a test it lists is expected to take its time
    assert!(
        expected_turn_s("demo::the_demo_finds_every_planted_problem_and_proves_the_fixes") > 10.0
    );
    assert_eq!(expected_turn_s("no::such_test"), 0.0);
}

/// The machine to this test alone, until the turn is dropped.
pub fn alone() -> Turn {
    take_turn("alone", 1)
}

/// The machine shared with the timing tests of one module (`kind`: the module's name).
pub fn group(kind: &'static str) -> Turn {
    take_turn(kind, GROUP_AT_ONCE)
}

/// The machine shared with other tests that measure no time.
pub fn beside() -> Turn {
    take_turn("beside", BESIDE_AT_ONCE)
}

/// Headless Chromium (Debian's package; scripts/test.sh installs it).
pub fn chromium() -> &'static str {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("Chromium is installed (scripts/test.sh installs it)")
}

fn headless(page: &Path, fragment: &str, window: &str, action: &str) -> Output {
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            window,
            "--virtual-time-budget=5000",
            action,
        ])
        .arg(format!("file://{}{fragment}", page.display()))
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs")
}

/// The page's DOM after its scripts ran.
pub fn dump_dom(page: &Path) -> String {
    dump_dom_at(page, "")
}

/// As `dump_dom`, with a fragment (`#search=...`) in the page's address.
pub fn dump_dom_at(page: &Path, fragment: &str) -> String {
    String::from_utf8_lossy(
        &headless(page, fragment, "--window-size=1300,900", "--dump-dom").stdout,
    )
    .into_owned()
}

/// What `script` found in `page` as a user would use it: the page is opened in an iframe of
/// `width` px beside it (a harness page in the same folder; Chromium lets a file page reach
/// into another only with --allow-file-access-from-files), `script` runs once it loaded with
/// `page` (the iframe's document) and `frame` (the iframe) in scope, and hands its findings to
/// `done(value)`. Events it dispatches (mouseover, input, change, resize) run the page's own
/// handlers. Returns what `done` was given.
pub fn in_page(page: &Path, width: u32, script: &str) -> Value {
    let harness = page.with_file_name(format!(
        "harness-{}.html",
        page.file_stem().unwrap().to_string_lossy()
    ));
    let html = format!(
        "<!doctype html><html><body><iframe id=\"f\" width=\"{width}\" height=\"900\" \
src=\"{}\"></iframe><script>\n\
function done(v) {{ document.body.setAttribute('data-results', JSON.stringify(v)); }}\n\
var wait = function (ms) {{ return new Promise(function (r) {{ setTimeout(r, ms); }}); }};\n\
document.getElementById('f').addEventListener('load', function () {{\n\
  var frame = document.getElementById('f'), page = frame.contentDocument;\n\
  (async function () {{ try {{ {script} }} catch (e) {{ done({{error: String(e)}}); }} }})();\n\
}});\n</script></body></html>",
        page.file_name().unwrap().to_string_lossy()
    );
    std::fs::write(&harness, html).unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--window-size=1400,1000",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", harness.display()))
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    let marker = "data-results=\"";
    let at = dom
        .find(marker)
        .unwrap_or_else(|| panic!("the script gave no result: {dom}"));
    let rest = &dom[at + marker.len()..];
    let text = rest[..rest.find('"').unwrap()]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    assert!(value.get("error").is_none(), "the script failed: {value}");
    value
}

/// The report `page`'s flame graph `flame` (its element's id) searched for `query` in
/// Chromium: the share of the profile the match holds, as the page says it (percent), and
/// how many frames the graph drew.
pub fn flame_search(page: &Path, flame: &str, query: &str) -> (f64, u64) {
    let script = format!(
        r#"
        var search = page.getElementById('{flame}-search');
        search.value = {query:?};
        search.dispatchEvent(new Event('input'));
        done({{match: page.getElementById('{flame}-match').textContent,
              frames: page.querySelectorAll('#{flame} .fr').length}});
        "#
    );
    let found = in_page(page, 1300, &script);
    let share = found["match"]
        .as_str()
        .and_then(|t| t.strip_prefix("matched: "))
        .and_then(|t| t.split('%').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{found:#}"));
    (share, found["frames"].as_u64().unwrap_or(0))
}

/// A PNG screenshot of the page in a window `width` x `height`.
pub fn screenshot(page: &Path, png: &Path, width: u32, height: u32) {
    let out = headless(
        page,
        "",
        &format!("--window-size={width},{height}"),
        &format!("--screenshot={}", png.display()),
    );
    assert!(
        png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A target that answers in 1 ms, except that the whole server stalls for 400 ms every 3 s:
/// slow requests that come together (a second copy waits as long as the first).
pub fn stalling_target() -> kiln_targets::TargetServer {
    kiln_targets::TargetServer::start(kiln_targets::Behavior {
        service_time: std::time::Duration::from_millis(1),
        stall: Some(kiln_targets::Stall {
            every: std::time::Duration::from_secs(3),
            length: std::time::Duration::from_millis(400),
        }),
        ..Default::default()
    })
    .expect("the stalling target starts")
}
