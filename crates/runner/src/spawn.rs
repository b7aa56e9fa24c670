//! A target kiln starts itself (`kiln run --spawn CMD`): its own process, with
//! `GODEBUG=gctrace=1` added to its environment so a Go target reports every GC cycle on
//! stderr, which is read here into a [`GcTraceFeed`], and `JAVA_TOOL_OPTIONS` with
//! `-XX:+DebugNonSafepoints` so a JVM keeps where inlined code is between safepoints
//! (async-profiler's samples then land on the inlined method, not the nearest safepoint); the rest of its output is kept (the last
//! lines) to say why it failed. kiln waits until it accepts connections on the load's address
//! and stops it (SIGTERM, then SIGKILL) when dropped, so a failing run never leaves it behind.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Doing, Result};
use crate::fail;
use kiln_runtime::go::{parse_gctrace, GcTraceFeed};

/// Lines of the target's output kept for error messages.
/// How long a `--spawn`ed target has to accept connections (kiln run, kiln watch).
pub const READY_WITHIN: Duration = Duration::from_secs(30);

const KEPT_LINES: usize = 50;
/// Without an address to wait for, the target is taken as started once it has lived this
/// long.
const SETTLE: Duration = Duration::from_millis(500);

pub struct SpawnedTarget {
    child: Child,
    pub pid: i32,
    /// The address it serves, checked free once it is stopped.
    addr: Option<SocketAddr>,
    /// GC cycles from a Go target's stderr.
    pub gctrace: GcTraceFeed,
    output: Arc<Mutex<VecDeque<String>>>,
}

impl SpawnedTarget {
    /// Starts `command` (through `sh -c`, exec'd so the process kiln watches is the target
    /// itself) and waits until `addr` accepts a connection, at most `ready_within`; without
    /// an address, until it has lived `SETTLE` (a command that fails at once is reported).
    pub fn start(command: &str, addr: Option<SocketAddr>, ready_within: Duration) -> Result<Self> {
        let godebug = match std::env::var("GODEBUG") {
            Ok(v) if !v.trim().is_empty() => format!("{v},gctrace=1"),
            _ => "gctrace=1".to_string(),
        };
        const JVM_FLAGS: &str = "-XX:+UnlockDiagnosticVMOptions -XX:+DebugNonSafepoints";
        let java_tool_options = match std::env::var("JAVA_TOOL_OPTIONS") {
            Ok(v) if !v.trim().is_empty() => format!("{v} {JVM_FLAGS}"),
            _ => JVM_FLAGS.to_string(),
        };
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("exec {command}"))
            .env("GODEBUG", godebug)
            .env("JAVA_TOOL_OPTIONS", java_tool_options)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // its own process group: a Ctrl-C at the terminal reaches kiln alone, which ends
            // the run as interrupted (exit 130) and then stops the target itself, instead of
            // the target dying first and the run ending as "the watched process exited"
            .process_group(0);
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(move || {
                // killed with kiln (even by SIGKILL, which runs no Drop): the target goes too,
                // by SIGKILL, which it cannot ignore (a target ignoring SIGTERM outlived kiln;
                // with kiln gone nobody reads what a graceful stop would flush). The "parent"
                // is the thread that forked, so start is called from a thread that lives as
                // long as the run (the main thread).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .doing_with(|| format!("--spawn: cannot start {command:?}"))?;
        let pid = i32::try_from(child.id())
            .map_err(|_| crate::RunnerError::Said("--spawn: a pid out of range".into()))?;
        let gctrace = GcTraceFeed::default();
        let output = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(stderr) = child.stderr.take() {
            read_lines(
                stderr,
                output.clone(),
                Some((gctrace.clone(), started_unix_ms)),
            );
        }
        if let Some(stdout) = child.stdout.take() {
            read_lines(stdout, output.clone(), None);
        }
        let mut target = Self {
            child,
            pid,
            addr,
            gctrace,
            output,
        };
        let started = Instant::now();
        let deadline = started + ready_within;
        loop {
            let ready = match addr {
                Some(addr) => TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok(),
                None => started.elapsed() >= SETTLE,
            };
            if ready {
                return Ok(target);
            }
            if let Ok(Some(status)) = target.child.try_wait() {
                // its last words may still be in the pipe
                std::thread::sleep(Duration::from_millis(100));
                fail!(
                    "--spawn: {command:?} exited ({status}) {}{}",
                    addr.map_or("as it started".to_string(), |a| format!(
                        "before it accepted connections on {a}"
                    )),
                    target.last_output()
                );
            }
            if let (Some(addr), true) = (addr, Instant::now() >= deadline) {
                fail!(
                    "--spawn: {command:?} did not accept connections on {addr} within {} s{}",
                    ready_within.as_secs(),
                    target.last_output()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The target's last lines of output, as a message's tail.
    fn last_output(&self) -> String {
        let lines = self.output.lock().map(|o| o.clone()).unwrap_or_default();
        if lines.is_empty() {
            return String::new();
        }
        let shown: Vec<String> = lines
            .iter()
            .map(|l| kiln_record::text::safe_text(l))
            .collect();
        format!("; its last output:\n  {}", shown.join("\n  "))
    }
}

impl Drop for SpawnedTarget {
    /// Stops the target and everything it started: its process group (a wrapper script's
    /// children, `go run`'s server) and descendants that left the group, SIGTERM first and
    /// SIGKILL after the grace. Stopping the leader alone once left the real server running,
    /// and the next run loaded that stale process.
    fn drop(&mut self) {
        let mut family = descendants(self.pid);
        family.push(self.pid);
        crate::child::stop_group_gracefully(
            &mut self.child,
            self.pid,
            &family,
            Duration::from_secs(5),
        );
        if let Some(addr) = self.addr {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                eprintln!(
                    "kiln: warning: something still accepts connections on {addr} after the \
                     spawned target stopped (a process it started that left its family?)"
                );
            }
        }
    }
}

/// Every process descended from `pid`, read from /proc's children lists (one level a
/// time, each thread's), at most a few thousand.
fn descendants(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                if !found.contains(&child) && found.len() < 4096 {
                    found.push(child);
                    next.push(child);
                }
            }
        }
    }
    found
}

/// Reads `from` line by line on its own thread: gctrace lines to the feed, the others kept.
fn read_lines(
    from: impl Read + Send + 'static,
    output: Arc<Mutex<VecDeque<String>>>,
    gctrace: Option<(GcTraceFeed, f64)>,
) {
    let _ = std::thread::Builder::new()
        .name("kiln-spawned-output".into())
        .spawn(move || {
            let mut reader = BufReader::new(from);
            let mut buf = Vec::new();
            // lines are read as bytes: a target may write anything
            while reader.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end();
                match gctrace
                    .as_ref()
                    .and_then(|(feed, at)| parse_gctrace(line, *at).map(|c| (feed, c)))
                {
                    Some((feed, cycle)) => feed.push(cycle),
                    None => {
                        if let Ok(mut kept) = output.lock() {
                            if kept.len() == KEPT_LINES {
                                kept.pop_front();
                            }
                            kept.push_back(line.chars().take(500).collect());
                        }
                    }
                }
                buf.clear();
            }
        });
}
