//! The watched process's threads, read every tick at a cost that hardly grows with threads
//! that sleep.
//!
//! Reading `stat` and `status` of 500 threads each second (open, read, close, twice per
//! thread, and the kernel formats some sixty `status` lines each time) was 2-4% of a core,
//! against the goal of 1%. Here each thread's files stay open and are read again with
//! `pread` at offset 0 (procfs makes them anew at offset 0), and a thread's `schedstat`
//! (three numbers, the last one how many times it was put on a CPU) says whether it ran
//! at all since the last tick. One that did not has the same CPU times and switch counts,
//! so its `stat` and `status` are not read again; one that did has its switch counts from
//! taskstats (binary, see `taskstats.rs`) where allowed. A thread woken but never run since (its
//! CPU taken by others for the whole interval) keeps its last state; the host's run queue
//! shows that case.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::procfs::{parse_status_switches, parse_task_stat, ProcFs, TaskStat};
use crate::taskstats::Taskstats;

/// The times a task was put on a CPU, from `/proc/.../schedstat` (`run_ns wait_ns count`).
pub fn parse_schedstat_runs(text: &str) -> Option<u64> {
    crate::noise::parse_schedstat_waits(text).map(|(_, runs)| runs)
}

/// One file of a thread, kept open while the descriptor budget allows.
struct KeptFile {
    path: PathBuf,
    file: Option<File>,
}

impl KeptFile {
    fn new(path: PathBuf, keep: bool) -> Self {
        let file = if keep { File::open(&path).ok() } else { None };
        Self { path, file }
    }

    fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// The whole file as text, into `buf`.
    fn read<'b>(&self, buf: &'b mut Vec<u8>) -> Option<&'b str> {
        buf.clear();
        let opened;
        let file = match &self.file {
            Some(f) => f,
            None => {
                opened = File::open(&self.path).ok()?;
                &opened
            }
        };
        let mut chunk = [0u8; 4096];
        loop {
            let n = file.read_at(&mut chunk, buf.len() as u64).ok()?;
            buf.extend_from_slice(&chunk[..n]);
            // procfs hands out all it has up to the size asked: a short read is the end,
            // and asking again to see 0 would double the system calls.
            if n < chunk.len() || buf.len() > 1 << 20 {
                break;
            }
        }
        std::str::from_utf8(buf).ok()
    }
}

struct KeptThread {
    schedstat: KeptFile,
    stat: KeptFile,
    status: KeptFile,
    /// `schedstat`'s run count when `last` was read.
    runs: Option<u64>,
    last: Option<TaskStat>,
}

impl KeptThread {
    /// `keep_status` is false when taskstats gives the switch counts (status is then read
    /// only if taskstats fails for this thread).
    fn open(dir: &Path, keep: bool, keep_status: bool) -> Self {
        Self {
            schedstat: KeptFile::new(dir.join("schedstat"), keep),
            stat: KeptFile::new(dir.join("stat"), keep),
            status: KeptFile::new(dir.join("status"), keep && keep_status),
            runs: None,
            last: None,
        }
    }

    fn open_files(&self) -> usize {
        [&self.schedstat, &self.stat, &self.status]
            .iter()
            .filter(|f| f.is_open())
            .count()
    }

    /// The thread now; None once it has exited.
    fn read(&mut self, buf: &mut Vec<u8>, taskstats: Option<&mut Taskstats>) -> Option<TaskStat> {
        // the wait is added when the thread is put on a CPU, so a run count that did not
        // change means the same wait too
        let waits = self
            .schedstat
            .read(buf)
            .and_then(crate::noise::parse_schedstat_waits);
        let runs = waits.map(|(_, runs)| runs);
        if runs.is_some() && runs == self.runs {
            if let Some(last) = &self.last {
                return Some(last.clone());
            }
        }
        let mut task = parse_task_stat(self.stat.read(buf)?)?;
        task.run_delay_ns = waits.map(|(wait_ns, _)| wait_ns);
        match taskstats.and_then(|t| t.thread(task.id).ok()) {
            Some(counters) => {
                task.voluntary_switches = Some(counters.voluntary_switches);
                task.involuntary_switches = Some(counters.involuntary_switches);
            }
            None => {
                if let Some(status) = self.status.read(buf) {
                    (task.voluntary_switches, task.involuntary_switches) =
                        parse_status_switches(status);
                }
            }
        }
        self.runs = runs;
        self.last = Some(task.clone());
        Some(task)
    }
}

/// Reads every thread of one process, keeping their files open between ticks.
pub struct ThreadReader {
    pid: i32,
    threads: HashMap<i32, KeptThread>,
    open_files: usize,
    max_open_files: usize,
    buf: Vec<u8>,
    /// Switch counts without formatting `status`, where the kernel allows it.
    taskstats: Option<Taskstats>,
}

impl ThreadReader {
    pub fn new(pid: i32) -> Self {
        Self {
            pid,
            threads: HashMap::new(),
            open_files: 0,
            max_open_files: descriptor_budget(),
            buf: Vec::with_capacity(4096),
            taskstats: Taskstats::open().ok(),
        }
    }

    /// Every thread of the process, by id; threads that exit while being read are left out.
    pub fn read(&mut self, proc: &ProcFs) -> Vec<TaskStat> {
        let Some(ids) = proc.thread_ids(self.pid) else {
            self.threads.clear();
            self.open_files = 0;
            return Vec::new();
        };
        let dir = proc.path(&format!("proc/{}/task", self.pid));
        self.threads.retain(|id, _| ids.binary_search(id).is_ok());
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let keep = self.open_files + 3 <= self.max_open_files;
            let keep_status = self.taskstats.is_none();
            let thread = self.threads.entry(id).or_insert_with(|| {
                let t = KeptThread::open(&dir.join(id.to_string()), keep, keep_status);
                self.open_files += t.open_files();
                t
            });
            match thread.read(&mut self.buf, self.taskstats.as_mut()) {
                Some(task) => out.push(task),
                None => {
                    if let Some(gone) = self.threads.remove(&id) {
                        self.open_files -= gone.open_files();
                    }
                }
            }
        }
        out
    }
}

/// How many descriptors the reader may keep open: half of the soft open-files limit, less
/// a margin for everything else kiln opens.
fn descriptor_budget() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    (limit.rlim_cur as usize / 2).saturating_sub(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_the_run_count() {
        assert_eq!(parse_schedstat_runs("1234 5678 42\n"), Some(42));
        assert_eq!(parse_schedstat_runs("1234 5678\n"), None);
        assert_eq!(parse_schedstat_runs(""), None);
    }

    #[test]
    fn every_listed_thread_is_read_with_its_switch_counts() {
        let proc = ProcFs::default();
        let pid = std::process::id() as i32;
        let _sleepers: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(2))))
            .collect();
        let mut reader = ThreadReader::new(pid);
        for _ in 0..3 {
            let kept = reader.read(&proc);
            let fresh = proc.thread_ids(pid).unwrap();
            let ids = |v: &[TaskStat]| v.iter().map(|t| t.id).collect::<Vec<_>>();
            // Test threads come and go; the sleepers and the main thread are in both.
            for t in &kept {
                assert!(t.voluntary_switches.is_some(), "{t:?}");
            }
            assert!(ids(&kept).len() >= 5 && fresh.len() >= 5);
            assert!(ids(&kept).contains(&pid));
        }
    }

    #[test]
    fn a_thread_that_runs_is_read_again_and_one_that_sleeps_is_not() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let proc = ProcFs::default();
        let pid = std::process::id() as i32;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let spin = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                tx.send(unsafe { libc::gettid() }).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let spinner = rx.recv().unwrap();
        let mut reader = ThreadReader::new(pid);
        let cpu = |r: &mut ThreadReader| {
            r.read(&proc)
                .into_iter()
                .find(|t| t.id == spinner)
                .map(|t| t.utime + t.stime)
                .unwrap()
        };
        let before = cpu(&mut reader);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = cpu(&mut reader);
        stop.store(true, Ordering::Relaxed);
        spin.join().unwrap();
        // 300 ms of spinning is ~30 ticks of 10 ms; at least some must show.
        assert!(after >= before + 10, "{before} -> {after}");
    }
}
