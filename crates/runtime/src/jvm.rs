//! The JVM's default layer: its hsperfdata counters read every few milliseconds, turned into
//! GC pauses (each with its start and length), and once a second into a [`JvmSecond`].
//!
//! A pause is seen from a collector's counters: `invocations` and `lastEntryTime` change when
//! it starts, `lastExitTime` and `time` when it ends; a pause whose exit is at or after its
//! entry, with an entry not reported before, is a new finished pause.

use crate::error::io;
use crate::RuntimeError;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::as_target::{open_regular, Owner};
use crate::hsperf::{layout_of, Directory, MAX_FILE};
use crate::{CollectorSecond, GcPause, JvmSecond};

/// The most collectors a JVM declares (G1 has three, Serial and Parallel two).
const MAX_COLLECTORS: usize = 8;

/// Finds `pid`'s hsperfdata under its own root (a container's /tmp too): the file is named
/// by the pid as the process's own namespace numbers it (`NSpid`).
pub fn locate(pid: i32, proc_root: &Path) -> Result<PathBuf, RuntimeError> {
    let base = proc_root.join(pid.to_string());
    let ns_pid = ns_pid(pid, proc_root)?;
    let tmp = base.join("root/tmp");
    let entries = std::fs::read_dir(&tmp).map_err(io(format!("cannot list {}", tmp.display())))?;
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("hsperfdata_")
        {
            let candidate = entry.path().join(&ns_pid);
            if candidate.exists() {
                return Ok(candidate);
            }
        }
    }
    Err(format!(
        "no hsperfdata file for pid {pid} in {}/hsperfdata_*/ (the JVM was started with \
         -XX:-UsePerfData or -XX:+PerfDisableSharedMem)",
        tmp.display()
    )
    .into())
}

/// `pid` as its own PID namespace numbers it (the innermost of `NSpid`): the JVM names its
/// hsperfdata file and its attach socket by that number.
pub fn ns_pid(pid: i32, proc_root: &Path) -> Result<String, RuntimeError> {
    let path = proc_root.join(pid.to_string()).join("status");
    let status =
        std::fs::read_to_string(&path).map_err(io(format!("cannot read {}", path.display())))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last())
        .map_or_else(|| pid.to_string(), str::to_string))
}

/// One collector and the last pause reported of it.
#[derive(Clone, Debug)]
struct Collector {
    prefix: String,
    name: String,
    reported_entry: i64,
}

/// Cumulative counters at one reading, to be differenced over a second.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    collectors: Vec<(i64, i64)>,
    safepoints: Option<i64>,
    safepoint_ticks: Option<i64>,
    safepoint_sync_ticks: Option<i64>,
    compiles: Option<i64>,
    compile_ticks: Option<i64>,
    bailouts: Option<i64>,
    classes: Option<i64>,
    threads_started: Option<i64>,
    contended: Option<i64>,
}

/// A JVM's hsperfdata, open and read.
pub struct JvmReader {
    path: PathBuf,
    file: std::fs::File,
    /// The file's size, read when it was opened and when its layout changed.
    size: usize,
    buf: Vec<u8>,
    dir: Directory,
    ticks_per_ms: f64,
    vm_start_unix_ms: f64,
    collectors: Vec<Collector>,
    /// Whether `dir` has been parsed from the file once.
    parsed: bool,
}

impl JvmReader {
    /// Opens `pid`'s hsperfdata; the error says why it cannot be read.
    /// The file is opened as the JVM's owner, never through a link, a FIFO or a device, and
    /// no larger than [`MAX_FILE`] (it is the target's file: its owner may have put anything
    /// there).
    pub fn open(pid: i32, proc_root: &Path) -> Result<Self, RuntimeError> {
        let path = locate(pid, proc_root)?;
        let owner = Owner::of(pid, proc_root)?;
        let file = open_regular(&owner, &path, MAX_FILE as u64).map_err(|e| {
            format!("{e} (the JVM's counters are readable by the JVM's user and root only)")
        })?;
        let mut reader = Self {
            path: path.to_path_buf(),
            file,
            size: 0,
            buf: Vec::new(),
            dir: Directory::default(),
            ticks_per_ms: 1e6,
            vm_start_unix_ms: 0.0,
            collectors: Vec::new(),
            parsed: false,
        };
        reader.refresh()?;
        Ok(reader)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again (one `pread` of its 32 KiB); the directory is parsed again only
    /// when the JVM has added counters. hsperfdata is a region of fixed size the JVM maps
    /// when it starts, so its size is asked of the file system then and when the layout
    /// changes, not at every poll (a profile found the `statx` a fifth of a poll's cost).
    pub fn refresh(&mut self) -> Result<(), RuntimeError> {
        if self.size == 0 {
            self.size = self.file_size()?;
        }
        self.read_whole()?;
        let (layout, _) = layout_of(&self.buf).map_err(|e| e.to_string())?;
        // parsed again only when the layout changed: a file that never shows a collector is
        // not parsed at every poll
        if !self.parsed || layout != self.dir.layout() {
            let size = self.file_size()?;
            if size != self.size {
                self.size = size;
                self.read_whole()?;
            }
            self.dir = Directory::parse(&self.buf).map_err(|e| e.to_string())?;
            self.parsed = true;
            self.learn_layout();
        }
        Ok(())
    }

    fn file_size(&self) -> Result<usize, RuntimeError> {
        Ok(self
            .file
            .metadata()
            .map_err(io(format!("{}", self.path.display())))?
            .len()
            .min(MAX_FILE as u64) as usize)
    }

    /// `size` bytes from the start, or fewer if the file has become shorter.
    fn read_whole(&mut self) -> Result<(), RuntimeError> {
        self.buf.resize(self.size, 0);
        let mut filled = 0;
        while filled < self.size {
            match self.file.read_at(&mut self.buf[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) => return Err(format!("{}: {e}", self.path.display()).into()),
            }
        }
        self.buf.truncate(filled);
        Ok(())
    }

    /// Reads the constants and the collectors after a (re)parse; a collector keeps what was
    /// reported of it.
    fn learn_layout(&mut self) {
        let long = |name: &str| self.dir.long(&self.buf, name);
        let frequency = long("sun.os.hrt.frequency")
            .filter(|f| *f > 0)
            .unwrap_or(1_000_000_000);
        self.ticks_per_ms = frequency as f64 / 1000.0;
        self.vm_start_unix_ms = long("sun.rt.createVmBeginTime").unwrap_or(0) as f64;
        let mut collectors = Vec::new();
        for n in 0..MAX_COLLECTORS {
            let prefix = format!("sun.gc.collector.{n}.");
            if !self.dir.has(&format!("{prefix}invocations")) {
                continue;
            }
            let name = self
                .dir
                .text(&self.buf, &format!("{prefix}name"))
                .unwrap_or_else(|| format!("collector {n}"));
            let reported_entry = match self.collectors.iter().find(|c| c.prefix == prefix) {
                Some(known) => known.reported_entry,
                // What happened before kiln looked is not reported as a pause.
                None => self
                    .dir
                    .long(&self.buf, &format!("{prefix}lastEntryTime"))
                    .unwrap_or(0),
            };
            collectors.push(Collector {
                prefix,
                name,
                reported_entry,
            });
        }
        self.collectors = collectors;
    }

    fn long(&self, name: &str) -> Option<i64> {
        self.dir.long(&self.buf, name)
    }

    pub fn text(&self, name: &str) -> Option<String> {
        self.dir.text(&self.buf, name)
    }

    /// The pauses that finished since the last call (one per collector at most).
    pub fn new_pauses(&mut self) -> Vec<GcPause> {
        let mut out = Vec::new();
        for i in 0..self.collectors.len() {
            let c = &self.collectors[i];
            let entry = self
                .long(&format!("{}lastEntryTime", c.prefix))
                .unwrap_or(0);
            let exit = self.long(&format!("{}lastExitTime", c.prefix)).unwrap_or(0);
            if entry > c.reported_entry && exit >= entry {
                let start_uptime_ms = entry as f64 / self.ticks_per_ms;
                out.push(GcPause {
                    collector: c.name.clone(),
                    start_unix_ms: self.vm_start_unix_ms + start_uptime_ms,
                    start_uptime_ms,
                    ms: (exit - entry) as f64 / self.ticks_per_ms,
                });
                self.collectors[i].reported_entry = entry;
            }
        }
        out
    }

    /// The JVM's total time at safepoints so far (ms), if it counts it.
    pub fn safepoint_ms_total(&self) -> Option<f64> {
        Some(self.long("sun.rt.safepointTime")? as f64 / self.ticks_per_ms)
    }

    pub fn totals(&self) -> Totals {
        Totals {
            collectors: self
                .collectors
                .iter()
                .map(|c| {
                    (
                        self.long(&format!("{}invocations", c.prefix)).unwrap_or(0),
                        self.long(&format!("{}time", c.prefix)).unwrap_or(0),
                    )
                })
                .collect(),
            safepoints: self.long("sun.rt.safepoints"),
            safepoint_ticks: self.long("sun.rt.safepointTime"),
            safepoint_sync_ticks: self.long("sun.rt.safepointSyncTime"),
            compiles: self.long("sun.ci.totalCompiles"),
            compile_ticks: self.long("java.ci.totalTime"),
            bailouts: self.long("sun.ci.totalBailouts"),
            classes: self.long("java.cls.loadedClasses"),
            threads_started: self.long("java.threads.started"),
            contended: self.long("sun.rt._sync_ContendedLockAttempts"),
        }
    }

    /// The interval from `before` to `now`, with the pauses seen in it and the gauges as
    /// they are now.
    pub fn second(&self, before: &Totals, now: &Totals, pauses: Vec<GcPause>) -> JvmSecond {
        let count = |a: Option<i64>, b: Option<i64>| Some(b?.saturating_sub(a?).max(0) as u64);
        let ms = |a: Option<i64>, b: Option<i64>| {
            Some(b?.saturating_sub(a?).max(0) as f64 / self.ticks_per_ms)
        };
        let gc: Vec<CollectorSecond> = self
            .collectors
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (inv0, t0) = before.collectors.get(i).copied().unwrap_or_default();
                let (inv1, t1) = now.collectors.get(i).copied().unwrap_or_default();
                CollectorSecond {
                    name: c.name.clone(),
                    pauses: inv1.saturating_sub(inv0).max(0) as u64,
                    pause_ms: t1.saturating_sub(t0).max(0) as f64 / self.ticks_per_ms,
                }
            })
            .collect();
        let kib = |v: Option<i64>| v.map(|b| b.max(0) as u64 / 1024);
        JvmSecond {
            gc_pauses: gc.iter().map(|c| c.pauses).sum(),
            gc_pause_ms: gc.iter().map(|c| c.pause_ms).sum(),
            gc,
            pauses,
            safepoints: count(before.safepoints, now.safepoints),
            safepoint_ms: ms(before.safepoint_ticks, now.safepoint_ticks),
            safepoint_sync_ms: ms(before.safepoint_sync_ticks, now.safepoint_sync_ticks),
            jit_compiles: count(before.compiles, now.compiles),
            jit_ms: ms(before.compile_ticks, now.compile_ticks),
            jit_bailouts: count(before.bailouts, now.bailouts),
            classes_loaded: count(before.classes, now.classes),
            threads_live: self.long("java.threads.live").map(|v| v.max(0) as u64),
            threads_started: count(before.threads_started, now.threads_started),
            heap_used_kib: self.heap_used_bytes().map(|b| b / 1024),
            heap_committed_kib: self.committed_heap().map(|b| b / 1024),
            metaspace_used_kib: kib(self.long("sun.gc.metaspace.used")),
            contended_locks: count(before.contended, now.contended),
        }
    }

    /// The heap in use: a generation's spaces are counted in its `space.N.used`.
    pub fn heap_used_bytes(&self) -> Option<u64> {
        let mut total = None;
        for name in self.dir.names() {
            if name.starts_with("sun.gc.generation.") && name.ends_with(".used") {
                let v = self.long(name).unwrap_or(0).max(0) as u64;
                *total.get_or_insert(0) += v;
            }
        }
        total
    }

    /// The generations' committed sizes (`sun.gc.generation.N.capacity`).
    fn committed_heap(&self) -> Option<u64> {
        let mut total = None;
        for n in 0..MAX_COLLECTORS {
            if let Some(v) = self.long(&format!("sun.gc.generation.{n}.capacity")) {
                *total.get_or_insert(0) += v.max(0) as u64;
            }
        }
        total
    }

    /// The JVM's name and version, e.g. `OpenJDK 64-Bit Server VM 17.0.15+6-Debian-1deb12u1`.
    pub fn version(&self) -> Option<String> {
        let name = self.text("java.property.java.vm.name");
        let version = self.text("java.property.java.vm.version");
        match (name, version) {
            (Some(n), Some(v)) => Some(format!("{n} {v}")),
            (n, v) => n.or(v),
        }
    }

    /// The collector policy and the main class or jar, as the JVM names them.
    pub fn details(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(gc) = self.text("sun.gc.policy.name") {
            out.push(("gc".to_string(), gc));
        }
        if let Some(command) = self.text("sun.rt.javaCommand") {
            out.push(("command".to_string(), command));
        }
        if let Some(names) = Some(
            self.collectors
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )
        .filter(|n| !n.is_empty())
        {
            out.push(("collectors".to_string(), names));
        }
        out
    }
}
