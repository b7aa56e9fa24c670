//! The runtime's watcher beside a run or a watch: its own thread, the JVM's counters polled
//! every few ms, a line a second in `runtime-seconds.jsonl`, and `runtime.json` at the end.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::Result;
use kiln_record::RunDir;
use kiln_runtime::watch::{Depth, RuntimeWatch};
use kiln_runtime::{RuntimeInfo, RuntimeSecond, RUNTIME_FILE, RUNTIME_PART, RUNTIME_SECONDS_PART};

/// The runtime's own figures on their own thread: polls a JVM's counters every few ms and
/// writes a line a second; what the runtime is and what could be read goes to `runtime.json`
/// at the end.
pub struct RuntimeWatcher {
    done: Arc<AtomicBool>,
    /// The JIT's compile time (ms) in each second so far (a JVM's), for `--warmup auto`.
    pub jit_ms: Arc<std::sync::Mutex<Vec<f64>>>,
    /// The target is a JVM (its compiler threads are a witness of its warm-up).
    pub is_jvm: bool,
    /// Set as the measured load starts (`RuntimeWatch::measuring_started`).
    measuring: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(RuntimeInfo, Vec<RuntimeSecond>)>,
}

impl RuntimeWatcher {
    pub fn start(
        dir: &mut RunDir,
        pid: i32,
        depth: Depth,
        gctrace: Option<kiln_runtime::go::GcTraceFeed>,
    ) -> Result<Self> {
        let listening = listening_addrs(pid);
        let mut watch =
            RuntimeWatch::start_with(pid, Path::new("/proc"), depth, gctrace, &listening);
        let is_jvm = watch.info.runtime == "jvm";
        let measuring = watch.measuring_started();
        let mut writer = if watch.has_series() {
            Some(dir.add_json_lines_part(RUNTIME_SECONDS_PART, "runtime-seconds.jsonl", 1)?)
        } else {
            None
        };
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let jit_ms = Arc::new(std::sync::Mutex::new(Vec::new()));
        let jit = jit_ms.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-runtime".into())
            .spawn(move || {
                let mut seconds = Vec::new();
                watch.run(&|| flag.load(Ordering::SeqCst), &mut |s| {
                    if let (Some(ms), Ok(mut series)) =
                        (s.jvm.as_ref().and_then(|j| j.jit_ms), jit.lock())
                    {
                        series.push(ms);
                    }
                    if let Some(w) = writer.as_mut() {
                        let _ = w.write(&s);
                    }
                    seconds.push(s);
                });
                (watch.info, seconds)
            })?;
        Ok(Self {
            done,
            jit_ms,
            is_jvm,
            measuring,
            thread,
        })
    }

    /// The measured load starts now: a JVM's next thread dump may name the holders of its
    /// locks again, whatever the warm-up spent.
    pub fn measuring_started(&self) {
        self.measuring.store(true, Ordering::Relaxed);
    }

    pub fn finish(
        self,
        dir: &mut RunDir,
        warnings: &mut Vec<String>,
    ) -> (RuntimeInfo, Vec<RuntimeSecond>) {
        self.done.store(true, Ordering::SeqCst);
        let (info, seconds) = self.thread.join().unwrap_or_default();
        let written = serde_json::to_vec_pretty(&info)
            .map_err(crate::RunnerError::from)
            .and_then(|json| Ok(dir.write_file_part(RUNTIME_PART, RUNTIME_FILE, 1, &json)?));
        if let Err(e) = written {
            warnings.push(format!("the runtime's record was not written: {e:#}"));
        }
        (info, seconds)
    }
}

/// The TCP addresses `pid` listens on, as a client on this host reaches them (a wildcard
/// address by loopback).
fn listening_addrs(pid: i32) -> Vec<std::net::SocketAddr> {
    let Some(sockets) = kiln_sample::ProcFs::default().process_sockets(pid) else {
        return Vec::new();
    };
    sockets
        .listen
        .iter()
        .filter_map(|(addr, _)| addr.parse::<std::net::SocketAddr>().ok())
        .map(|mut addr| {
            if addr.ip().is_unspecified() {
                addr.set_ip(if addr.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                });
            }
            addr
        })
        .collect()
}
