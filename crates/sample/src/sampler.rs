//! One tick of the sampler: read everything, compare with the previous reading, and give
//! the figures of the interval in between. The caller decides when to tick (once a second).

use kiln_record::clock::unix_ms_now;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cgroup::{CgroupReading, CgroupSecond};
use crate::counters::Pressure;
use crate::procfs::{HostStat, KernelReading, ProcFs, SegmentsSeen, TaskStat};
use crate::rates::{host_cpu_split, task_rates, CpuSplit, TaskRates};
use crate::sock_diag::ListenQueue;
use crate::sockets::SocketSummary;
use crate::target::TargetProcesses;
use crate::threads::ThreadReader;

/// The part kind (and file stem) of the sampler's per-second records in a run directory.
pub const RESOURCES_PART: &str = "resources";

/// Clock ticks per second of /proc times (USER_HZ); 100 on every Linux architecture kiln
/// runs on.
const USER_HZ: f64 = 100.0;
/// How many threads to name in each "hottest" list.
const TOP_THREADS: usize = 5;

/// The watched process over one interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessSecond {
    #[serde(flatten)]
    pub rates: TaskRates,
    pub rss_kib: u64,
    pub threads: u64,
    /// The threads that used the most CPU, then the ones that switched out the most.
    pub hottest_by_cpu: Vec<TaskRates>,
    pub hottest_by_switches: Vec<TaskRates>,
    /// Its TCP sockets at the end of the interval (absent in older records).
    #[serde(default)]
    pub sockets: Option<SocketSummary>,
    /// Open file descriptors at the end of the interval (None: not listable).
    #[serde(default)]
    pub open_fds: Option<u64>,
    /// Its control group's figures (cgroup v1 or v2): the container's own, not the host's.
    #[serde(default)]
    pub cgroup: Option<CgroupSecond>,
    /// Its threads by state at the end of the interval (R running, S sleeping, D in
    /// uninterruptible wait -- usually disk or a lock in the kernel -- T stopped, Z zombie).
    #[serde(default)]
    pub thread_states: BTreeMap<String, u64>,
    /// CPU of every thread, grouped by name with the trailing number folded (`http-nio-8080-exec-*`:
    /// a pool is one group, whatever its size), the busiest groups first and the rest as
    /// `(other threads)`: the groups add up to the process's CPU.
    #[serde(default)]
    pub cpu_by_thread_group: Vec<ThreadGroupCpu>,
    /// Each of the target's processes when it has more than one (a pre-fork server's master
    /// and workers), the roots first: the figures above are their sums.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ServingProcess>,
    /// CPU of processes that exited within the interval, percent of one core: what their
    /// parent's reaped-children times grew by beyond what was seen of them (a worker
    /// replaced after its max_requests). Part of the sums above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_cpu_pct: Option<f64>,
}

/// One process of a target of several over one interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServingProcess {
    pub pid: i32,
    pub name: String,
    /// The process it was forked from.
    pub ppid: i32,
    /// Percent of one core, user and system.
    pub cpu_pct: f64,
    pub rss_kib: u64,
}

/// A group of same-named threads and the CPU they used together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadGroupCpu {
    pub name: String,
    pub threads: u64,
    /// Percent of one core.
    pub cpu_pct: f64,
}

/// A thread name with its trailing number as `*`: a pool's threads are one group
/// (`http-nio-8080-exec-*`), while `C1 CompilerThread*` and `C2 CompilerThread*`, or
/// `pool-1-thread-*` and `pool-2-thread-*`, stay apart.
pub fn thread_group_name(name: &str) -> String {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() == name.len() {
        name.to_string()
    } else {
        format!("{stem}*")
    }
}

/// The watched process's thread groups (a pool is one group) and their mean CPU (percent
/// of a core) and most threads over the samples, so that the groups add up to the process's
/// CPU; records made before the groups were sampled give their top threads.
pub fn thread_groups_mean(samples: &[ResourceSecond]) -> Vec<(String, f64, u64)> {
    let procs: Vec<_> = samples.iter().filter_map(|s| s.process.as_ref()).collect();
    let grouped = procs.iter().any(|p| !p.cpu_by_thread_group.is_empty());
    let mut by_group: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for p in &procs {
        if grouped {
            for g in &p.cpu_by_thread_group {
                let e = by_group.entry(g.name.clone()).or_default();
                e.0 += g.cpu_pct;
                e.1 = e.1.max(g.threads);
            }
        } else {
            for t in &p.hottest_by_cpu {
                let e = by_group.entry(t.name.clone()).or_default();
                e.0 += t.cpu_user_pct + t.cpu_system_pct;
                e.1 = 1;
            }
        }
    }
    by_group
        .into_iter()
        .map(|(name, (sum, threads))| (name, sum / samples.len().max(1) as f64, threads))
        .collect()
}

/// Every thread's CPU by group, the busiest `TOP_THREADS` groups and the rest together.
fn thread_groups(per_thread: &[TaskRates]) -> Vec<ThreadGroupCpu> {
    let mut groups: BTreeMap<String, ThreadGroupCpu> = BTreeMap::new();
    for t in per_thread {
        let name = thread_group_name(&t.name);
        let g = groups
            .entry(name.clone())
            .or_insert_with(|| ThreadGroupCpu {
                name,
                ..Default::default()
            });
        g.threads += 1;
        g.cpu_pct += t.cpu_user_pct + t.cpu_system_pct;
    }
    let mut groups: Vec<ThreadGroupCpu> = groups.into_values().collect();
    groups.sort_by(|a, b| b.cpu_pct.total_cmp(&a.cpu_pct).then(a.name.cmp(&b.name)));
    if groups.len() > TOP_THREADS {
        let rest = groups.split_off(TOP_THREADS);
        groups.push(ThreadGroupCpu {
            name: "(other threads)".into(),
            threads: rest.iter().map(|g| g.threads).sum(),
            cpu_pct: rest.iter().map(|g| g.cpu_pct).sum(),
        });
    }
    groups
}

/// What the host and the target did during one interval. Figures that could not be read
/// are `None` (a missing /proc file, a process that exited).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceSecond {
    /// Seconds since sampling started, at the end of the interval.
    pub second: u32,
    /// Wall-clock time at the end of the interval (ms since the Unix epoch), to align with
    /// the load engine's seconds.
    #[serde(default)]
    pub unix_ms: u64,
    pub interval_s: f64,
    pub host_cpu: Option<CpuSplit>,
    pub host_cpu_per_core: Vec<(u32, CpuSplit)>,
    pub host_context_switches_per_s: Option<f64>,
    pub run_queue: Option<u64>,
    pub blocked: Option<u64>,
    pub process: Option<ProcessSecond>,
    /// Kernel counters over the interval (absent in records written before they existed).
    #[serde(default)]
    pub kernel: Option<KernelSecond>,
    /// The host's memory at the end of the interval.
    #[serde(default)]
    pub host_memory: Option<HostMemory>,
}

/// The host's memory (from /proc/meminfo), KiB.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostMemory {
    pub total_kib: u64,
    /// What can be allocated without swapping (MemAvailable).
    pub available_kib: u64,
    pub cached_kib: Option<u64>,
    /// Written to but not yet to disk.
    pub dirty_kib: Option<u64>,
    pub swap_used_kib: Option<u64>,
}

impl HostMemory {
    fn of(meminfo: &BTreeMap<String, u64>) -> Option<Self> {
        let get = |k: &str| meminfo.get(k).copied();
        Some(Self {
            total_kib: get("MemTotal")?,
            available_kib: get("MemAvailable")
                .or_else(|| Some(get("MemFree")? + get("Cached")?))?,
            cached_kib: get("Cached"),
            dirty_kib: get("Dirty"),
            swap_used_kib: Some(get("SwapTotal")?.saturating_sub(get("SwapFree")?)),
        })
    }
}

/// Host-wide kernel events during one interval (counts, not rates), and pressure now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelSecond {
    /// TCP connections dropped because a listen (accept) queue was full.
    pub listen_overflows: Option<u64>,
    /// SYNs dropped at a listener, for any reason (overflows included).
    pub listen_drops: Option<u64>,
    pub tcp_retrans_segs: Option<u64>,
    /// TCP segments sent (retransmissions not counted), for the retransmitted share.
    #[serde(default)]
    pub tcp_out_segs: Option<u64>,
    /// NET_RX and NET_TX softirqs per CPU: which CPUs do the network's work.
    pub net_rx_per_cpu: Vec<u64>,
    pub net_tx_per_cpu: Vec<u64>,
    pub thp_fault_alloc: Option<u64>,
    pub thp_fault_fallback: Option<u64>,
    pub compact_stall: Option<u64>,
    pub major_faults: Option<u64>,
    /// Pressure stall information (percent of time some task waited), 10 s averages.
    pub psi_cpu: Option<Pressure>,
    pub psi_memory: Option<Pressure>,
    pub psi_io: Option<Pressure>,
    /// Interrupts per CPU over the interval, all sources, and the network devices' alone
    /// (empty when /proc/interrupts could not be read).
    #[serde(default)]
    pub interrupts_per_cpu: Vec<u64>,
    #[serde(default)]
    pub nic_interrupts_per_cpu: Vec<u64>,
    /// The host's listeners whose accept queue overflowed over the interval (their own drop
    /// counts grew), the most drops first: whose drops the host-wide ListenOverflows count
    /// (empty when none dropped or sock_diag could not be asked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropping_listeners: Vec<DroppingListener>,
}

/// A listener of the host that dropped connections over one interval, as `ss -ltp` would
/// show it: its address, the drops, its queue and limit at the interval's end, and the
/// process holding it when one was found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DroppingListener {
    pub address: String,
    pub dropped: u64,
    pub queued: u64,
    pub limit: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// At most this many dropping listeners are kept per second.
const DROPPING_LISTENERS: usize = 3;

/// The listeners whose drop counts grew from `a` to `b` (a listener first seen in `b`
/// counts from zero: it opened within the interval), the most drops first, each with the
/// process `holder` finds holding its socket. Empty without both readings.
fn dropping_listeners(
    a: Option<&HashMap<u64, ListenQueue>>,
    b: Option<&HashMap<u64, ListenQueue>>,
    mut holder: impl FnMut(u64) -> (Option<i32>, Option<String>),
) -> Vec<DroppingListener> {
    let (Some(a), Some(b)) = (a, b) else {
        return Vec::new();
    };
    let mut grown: Vec<(u64, &ListenQueue)> = b
        .values()
        .filter_map(|q| {
            let before = a.get(&q.inode).and_then(|p| p.drops).unwrap_or(0);
            let dropped = u64::from(q.drops?.saturating_sub(before));
            (dropped > 0 && q.inode != 0).then_some((dropped, q))
        })
        .collect();
    grown.sort_by_key(|(dropped, q)| (std::cmp::Reverse(*dropped), q.local));
    grown.truncate(DROPPING_LISTENERS);
    grown
        .into_iter()
        .map(|(dropped, q)| {
            let (pid, command) = holder(q.inode);
            DroppingListener {
                address: q.local.map_or_else(|| "?".into(), |l| l.to_string()),
                dropped,
                queued: q.queued.into(),
                limit: q.limit.into(),
                pid,
                command,
            }
        })
        .collect()
}

impl KernelSecond {
    fn between(a: &KernelReading, b: &KernelReading) -> Self {
        let net = |key: &str| Some(b.net.get(key)?.saturating_sub(*a.net.get(key)?));
        let vm = |key: &str| Some(b.vmstat.get(key)?.saturating_sub(*a.vmstat.get(key)?));
        let per_cpu = |name: &str| -> Vec<u64> {
            match (a.softirqs.get(name), b.softirqs.get(name)) {
                (Some(x), Some(y)) => y.iter().zip(x).map(|(y, x)| y.saturating_sub(*x)).collect(),
                _ => Vec::new(),
            }
        };
        Self {
            listen_overflows: net("TcpExt.ListenOverflows"),
            listen_drops: net("TcpExt.ListenDrops"),
            tcp_retrans_segs: net("Tcp.RetransSegs"),
            tcp_out_segs: net("Tcp.OutSegs"),
            net_rx_per_cpu: per_cpu("NET_RX"),
            net_tx_per_cpu: per_cpu("NET_TX"),
            thp_fault_alloc: vm("thp_fault_alloc"),
            thp_fault_fallback: vm("thp_fault_fallback"),
            compact_stall: vm("compact_stall"),
            major_faults: vm("pgmajfault"),
            psi_cpu: b.psi_cpu,
            psi_memory: b.psi_memory,
            psi_io: b.psi_io,
            interrupts_per_cpu: deltas(
                a.interrupts.as_ref().map(|i| &i.all_per_cpu),
                b.interrupts.as_ref().map(|i| &i.all_per_cpu),
            ),
            nic_interrupts_per_cpu: deltas(
                a.interrupts.as_ref().map(|i| &i.nic_per_cpu),
                b.interrupts.as_ref().map(|i| &i.nic_per_cpu),
            ),
            dropping_listeners: Vec::new(),
        }
    }
}

/// Per-CPU counts between two readings (empty unless both were read with the same CPUs).
fn deltas(a: Option<&Vec<u64>>, b: Option<&Vec<u64>>) -> Vec<u64> {
    match (a, b) {
        (Some(a), Some(b)) if a.len() == b.len() => {
            b.iter().zip(a).map(|(y, x)| y.saturating_sub(*x)).collect()
        }
        _ => Vec::new(),
    }
}

/// One of the target's processes at one reading: the whole process and each thread.
struct ProcessReading {
    stat: TaskStat,
    threads: Vec<TaskStat>,
}

struct Reading {
    at: Instant,
    /// Clock ticks since boot at the reading (CLOCK_BOOTTIME, the clock of a process's
    /// start time): a process that started after it was born within the next interval.
    boot_ticks: Option<u64>,
    cgroup: Option<CgroupReading>,
    kernel: KernelReading,
    /// The host's listeners (live host only; None when sock_diag could not be asked).
    listeners: Option<HashMap<u64, ListenQueue>>,
    host: Option<HostStat>,
    /// The target's processes, roots first (empty without a target).
    processes: Vec<ProcessReading>,
}

/// Reads /proc each tick and keeps the previous reading.
pub struct Sampler {
    proc: ProcFs,
    target: Option<TargetProcesses>,
    started: Instant,
    previous: Option<Reading>,
    page_kib: u64,
    /// Each target process's threads, by pid.
    readers: HashMap<i32, ThreadReader>,
    /// compare() reads with `&self`; only the segment counters change between readings.
    segments: std::cell::RefCell<SegmentsSeen>,
    /// The process holding each dropping listener seen so far, by inode (looked up once: it
    /// reads every process's descriptors).
    holders: std::cell::RefCell<HashMap<u64, Option<i32>>>,
}

impl Sampler {
    /// The host, and the process `pid` with every process it forks.
    pub fn new(proc: ProcFs, pid: Option<i32>) -> Self {
        Self::of_target(proc, pid.map(TargetProcesses::of_pid))
    }

    /// The host, and the target's processes (followed as they come and go).
    pub fn of_target(proc: ProcFs, target: Option<TargetProcesses>) -> Self {
        let mut sampler = Self {
            proc,
            target,
            started: Instant::now(),
            previous: None,
            page_kib: page_size_kib(),
            readers: HashMap::new(),
            segments: Default::default(),
            holders: Default::default(),
        };
        sampler.previous = Some(sampler.read());
        sampler
    }

    fn main_pid(&self) -> Option<i32> {
        self.target.as_ref().map(TargetProcesses::main_pid)
    }

    fn read(&mut self) -> Reading {
        // the clocks first, as the reading begins: a process absent from this reading that
        // started after `boot_ticks` was born within the next interval
        let at = Instant::now();
        let boot_ticks = self.proc.is_live().then(boot_ticks).flatten();
        let members = match &mut self.target {
            Some(target) => target.members(&self.proc),
            None => Vec::new(),
        };
        self.readers.retain(|pid, _| members.contains(pid));
        let processes = members
            .iter()
            .filter_map(|&pid| {
                let stat = self.proc.process(pid)?;
                let reader = self
                    .readers
                    .entry(pid)
                    .or_insert_with(|| ThreadReader::new(pid));
                Some(ProcessReading {
                    stat,
                    threads: reader.read(&self.proc),
                })
            })
            .collect();
        Reading {
            at,
            boot_ticks,
            cgroup: self.main_pid().and_then(|p| self.proc.cgroup(p)),
            kernel: self.proc.kernel_reading(),
            listeners: self
                .proc
                .is_live()
                .then(crate::sock_diag::listen_queues)
                .and_then(Result::ok),
            host: self.proc.host_stat(),
            processes,
        }
    }

    /// True while the watched process (if any) still runs; a zombie (exited, not yet reaped
    /// by its parent) counts as gone.
    pub fn target_alive(&self) -> bool {
        self.target.as_ref().is_none_or(|t| t.alive(&self.proc))
    }

    /// Ticks every `interval` until `duration` has passed or `stop_reason` gives a reason,
    /// handing each sample to `on_sample`. Ends early, with a reason, when the watched
    /// process exits.
    pub fn run_every(
        &mut self,
        interval: Duration,
        duration: Option<Duration>,
        stop_reason: &dyn Fn() -> Option<String>,
        on_sample: &mut dyn FnMut(ResourceSecond),
    ) -> Option<String> {
        let started = Instant::now();
        let mut next = started + interval;
        loop {
            if duration.is_some_and(|d| next > started + d) {
                return None;
            }
            while Instant::now() < next {
                if let Some(reason) = stop_reason() {
                    return Some(reason);
                }
                std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
            }
            if let Some(reason) = stop_reason() {
                return Some(reason);
            }
            if !self.target_alive() {
                return Some(format!("process {} exited", self.main_pid().unwrap_or(0)));
            }
            on_sample(self.tick());
            next += interval;
        }
    }

    /// Reads now and returns the interval since the last tick.
    pub fn tick(&mut self) -> ResourceSecond {
        let now = self.read();
        let out = match &self.previous {
            Some(before) => self.compare(before, &now),
            None => ResourceSecond::default(),
        };
        self.previous = Some(now);
        out
    }

    fn compare(&self, a: &Reading, b: &Reading) -> ResourceSecond {
        let secs = b.at.duration_since(a.at).as_secs_f64();
        let mut out = ResourceSecond {
            second: b.at.duration_since(self.started).as_secs_f64().round() as u32,
            unix_ms: unix_ms_now(),
            interval_s: secs,
            ..Default::default()
        };
        if let (Some(ha), Some(hb)) = (&a.host, &b.host) {
            out.host_cpu = host_cpu_split(&ha.all, &hb.all);
            out.host_cpu_per_core = hb
                .per_cpu
                .iter()
                .filter_map(|(n, after)| {
                    let before = ha.per_cpu.iter().find(|(m, _)| m == n)?;
                    Some((*n, host_cpu_split(&before.1, after)?))
                })
                .collect();
            out.host_context_switches_per_s = match (ha.context_switches, hb.context_switches) {
                (Some(x), Some(y)) if secs > 0.0 => Some(y.saturating_sub(x) as f64 / secs),
                _ => None,
            };
            out.run_queue = hb.procs_running;
            out.blocked = hb.procs_blocked;
        }
        let holder = |inode: u64| {
            let mut holders = self.holders.borrow_mut();
            let pid = *holders
                .entry(inode)
                .or_insert_with(|| self.proc.holder_of(&[inode]));
            (pid, pid.and_then(|p| self.proc.command(p)))
        };
        out.kernel = Some(KernelSecond {
            dropping_listeners: dropping_listeners(
                a.listeners.as_ref(),
                b.listeners.as_ref(),
                holder,
            ),
            ..KernelSecond::between(&a.kernel, &b.kernel)
        });
        out.host_memory = HostMemory::of(&b.kernel.meminfo);
        out.process = self.target_second(a, b, secs);
        out
    }

    /// The target's processes over the interval from `a` to `b`, summed. A process seen in
    /// both counts what it used between them; one born within the interval counts from zero;
    /// one that exited within it counts what its parent's reaped-children times grew by
    /// beyond what was last seen of it. None when no process of the target was seen twice.
    fn target_second(&self, a: &Reading, b: &Reading, secs: f64) -> Option<ProcessSecond> {
        let same = |x: &TaskStat, y: &TaskStat| x.id == y.id && x.starttime == y.starttime;
        let mut totals: Option<TaskRates> = None;
        let mut per_thread: Vec<TaskRates> = Vec::new();
        let mut processes = Vec::new();
        let mut exited_ticks = 0u64;
        for p in &b.processes {
            let seen = a.processes.iter().find(|q| same(&q.stat, &p.stat));
            let born = seen.is_none() && a.boot_ticks.is_some_and(|boot| p.stat.starttime >= boot);
            let unborn;
            let (before, before_threads): (&TaskStat, &[TaskStat]) = match seen {
                Some(q) => (&q.stat, &q.threads),
                None if born => {
                    unborn = from_zero(&p.stat);
                    (&unborn, &[])
                }
                None => continue,
            };
            let Some(rates) = task_rates(before, &p.stat, secs, USER_HZ) else {
                continue;
            };
            if seen.is_some() {
                // children of this process that were seen before and are gone now: what its
                // reaped-children times grew by, less what was seen of them
                let reaped = |t: &TaskStat| t.cutime + t.cstime;
                let last_seen: u64 = a
                    .processes
                    .iter()
                    .filter(|q| q.stat.ppid == p.stat.id)
                    .filter(|q| !b.processes.iter().any(|r| same(&r.stat, &q.stat)))
                    .map(|q| q.stat.utime + q.stat.stime)
                    .sum();
                exited_ticks += reaped(&p.stat)
                    .saturating_sub(reaped(before))
                    .saturating_sub(last_seen);
            }
            per_thread.extend(p.threads.iter().filter_map(|t| {
                // both readings list threads by id; a process born in the interval has
                // every thread new
                let before = match before_threads.binary_search_by_key(&t.id, |x| x.id) {
                    Ok(i) => before_threads[i].clone(),
                    Err(_) if born => from_zero(t),
                    Err(_) => return None,
                };
                task_rates(&before, t, secs, USER_HZ)
            }));
            processes.push(ServingProcess {
                pid: p.stat.id,
                name: p.stat.name.clone(),
                ppid: p.stat.ppid,
                cpu_pct: rates.cpu_user_pct + rates.cpu_system_pct,
                rss_kib: p.stat.rss_pages * self.page_kib,
            });
            totals = Some(match totals {
                None => rates,
                Some(mut sum) => {
                    sum.cpu_user_pct += rates.cpu_user_pct;
                    sum.cpu_system_pct += rates.cpu_system_pct;
                    sum
                }
            });
        }
        let mut rates = totals?;
        // an exited process's user and system split is not kept apart in its parent's
        // reaped times as seen here: counted as user time
        let exited_cpu_pct =
            (exited_ticks > 0).then(|| exited_ticks as f64 / USER_HZ / secs * 100.0);
        rates.cpu_user_pct += exited_cpu_pct.unwrap_or(0.0);
        // /proc/PID/status counts the main thread's switches only: sum the threads'.
        let sum =
            |f: fn(&TaskRates) -> Option<f64>| per_thread.iter().filter_map(f).reduce(|a, b| a + b);
        rates.voluntary_switches_per_s = sum(|t| t.voluntary_switches_per_s);
        rates.involuntary_switches_per_s = sum(|t| t.involuntary_switches_per_s);
        rates.cpu_wait_pct = sum(|t| t.cpu_wait_pct);
        let cpu = |t: &TaskRates| t.cpu_user_pct + t.cpu_system_pct;
        let switches = |t: &TaskRates| {
            t.voluntary_switches_per_s.unwrap_or(0.0) + t.involuntary_switches_per_s.unwrap_or(0.0)
        };
        let cpu_by_thread_group = thread_groups(&per_thread);
        per_thread.sort_by(|x, y| cpu(y).total_cmp(&cpu(x)));
        let hottest_by_cpu = per_thread.iter().take(TOP_THREADS).cloned().collect();
        per_thread.sort_by(|x, y| switches(y).total_cmp(&switches(x)));
        let hottest_by_switches = per_thread.iter().take(TOP_THREADS).cloned().collect();
        // every process's descriptors: their count summed, their sockets as one set (a
        // socket the master and its workers share is one socket)
        let mut open_fds: Option<u64> = None;
        let mut inodes: Option<std::collections::HashSet<u64>> = None;
        for p in &processes {
            if let Some((count, held)) = self.proc.descriptors(p.pid) {
                *open_fds.get_or_insert(0) += count;
                inodes.get_or_insert_with(Default::default).extend(held);
            }
        }
        let all_threads = || b.processes.iter().flat_map(|p| p.threads.iter());
        Some(ProcessSecond {
            rates,
            rss_kib: b.processes.iter().map(|p| p.stat.rss_pages).sum::<u64>() * self.page_kib,
            threads: b.processes.iter().map(|p| p.stat.num_threads).sum(),
            hottest_by_cpu,
            hottest_by_switches,
            cpu_by_thread_group,
            sockets: inodes.as_ref().map(|inodes| {
                let mut sockets = self.proc.sockets_with(inodes, b.listeners.as_ref());
                let mut seen = self.segments.borrow_mut();
                self.proc.count_segments(&mut sockets, inodes, &mut seen);
                sockets
            }),
            open_fds,
            cgroup: match (&a.cgroup, &b.cgroup) {
                (Some(x), Some(y)) if x.path == y.path => Some(CgroupSecond::between(x, y, secs)),
                _ => None,
            },
            thread_states: all_threads().fold(BTreeMap::new(), |mut m, t| {
                *m.entry(t.state.to_string()).or_insert(0) += 1;
                m
            }),
            processes: if processes.len() > 1 {
                processes
            } else {
                Vec::new()
            },
            exited_cpu_pct,
        })
    }
}

/// A task as it was before it started: no CPU used, no switches, no waits (the counts a
/// reading has, as zero), so that a process born within an interval counts all it used.
fn from_zero(t: &TaskStat) -> TaskStat {
    TaskStat {
        id: t.id,
        name: t.name.clone(),
        state: t.state,
        ppid: t.ppid,
        starttime: t.starttime,
        voluntary_switches: t.voluntary_switches.map(|_| 0),
        involuntary_switches: t.involuntary_switches.map(|_| 0),
        run_delay_ns: t.run_delay_ns.map(|_| 0),
        ..Default::default()
    }
}

/// Clock ticks (USER_HZ) since boot, on the clock of a process's start time.
fn boot_ticks() -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the struct we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 {
        return None;
    }
    Some(now.tv_sec as u64 * USER_HZ as u64 + now.tv_nsec as u64 / (1_000_000_000 / USER_HZ as u64))
}

fn page_size_kib() -> u64 {
    // Linux on x86-64 and most arm64 kernels use 4 KiB pages; /proc/self/smaps says for sure.
    std::fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("KernelPageSize:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(4)
}

#[cfg(test)]
mod group_tests {
    use super::*;

    #[test]
    fn thread_names_fold_their_numbers() {
        assert_eq!(
            thread_group_name("http-nio-8080-exec-12"),
            "http-nio-8080-exec-*"
        );
        assert_eq!(thread_group_name("GC Thread#3"), "GC Thread#*");
        assert_eq!(
            thread_group_name("C2 CompilerThread0"),
            "C2 CompilerThread*"
        );
        assert_eq!(thread_group_name("main"), "main");
    }
}
