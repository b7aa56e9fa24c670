//! The "Resources" part of a run summary: what the host and the watched process did during
//! the measured load, from the sampler's seconds in the run record.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kiln_record::text::{bytes, safe_text};
use kiln_record::PhaseSummary;
use kiln_sample::{CgroupSecond, KernelSecond, ProcessSecond, ResourceSecond, SocketSummary};
use serde::Serialize;

/// The samples taken while the measured phases ran, by the rule every reader of the record
/// uses ([`kiln_record::Span::holds_second`]: the findings read the same samples).
pub fn during(total: &PhaseSummary, samples: &[ResourceSecond]) -> Vec<ResourceSecond> {
    let span = kiln_record::PhaseSummary::measured_span(std::slice::from_ref(total));
    kiln_record::Span::keep(span, samples, |s| s.unix_ms)
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The sum of counters read from a record, or None when any sample lacks the counter.
/// Saturating: a record is untrusted input and a corrupt counter must not panic the reader.
fn saturating_total(mut counts: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    counts.try_fold(0u64, |acc, n| Some(acc.saturating_add(n?)))
}

/// What the host's and the target's resources did over some samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResourcesSummary {
    pub samples: usize,
    pub host_cpu_mean_pct: HostCpu,
    pub host_memory: Option<HostMemory>,
    pub process: Option<Process>,
    pub hottest_threads: Vec<ThreadGroup>,
    pub kernel: Option<Kernel>,
}

/// The host's CPU split, each a mean over all CPUs and samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostCpu {
    pub user: Option<f64>,
    pub system: Option<f64>,
    pub irq_softirq: Option<f64>,
    pub iowait: Option<f64>,
    pub steal: Option<f64>,
    pub idle: Option<f64>,
}

/// The tightest moment: least available memory, most swap in use, most dirty pages.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostMemory {
    pub total_kib: u64,
    pub available_min_kib: Option<u64>,
    pub swap_used_max_kib: Option<u64>,
    pub dirty_max_kib: Option<u64>,
}

/// The watched process over the samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Process {
    pub pid: i32,
    pub name: String,
    pub cpu_mean_pct: Option<f64>,
    pub cpu_peak_pct: f64,
    pub cpu_user_mean_pct: Option<f64>,
    pub cpu_system_mean_pct: Option<f64>,
    pub voluntary_switches_per_s_mean: Option<f64>,
    pub involuntary_switches_per_s_mean: Option<f64>,
    pub rss_max_kib: Option<u64>,
    pub threads_max: Option<u64>,
    pub open_fds_max: Option<u64>,
    /// The most threads seen in each state in any sample (D: waiting in the kernel).
    pub thread_states_max: BTreeMap<String, u64>,
    pub sockets: Option<Sockets>,
    pub cgroup: Option<Cgroup>,
    /// Each process of a target of several (a pre-fork server's master and workers), the
    /// figures above being their sums; empty for a single process.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ServingProcessMean>,
    /// CPU of processes that exited between two samples (workers replaced), mean percent of
    /// one core: part of `cpu_mean_pct`, in no process's line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exited_cpu_mean_pct: Option<f64>,
}

/// One process of the target over the samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServingProcessMean {
    pub pid: i32,
    pub name: String,
    /// `master` when the target's other processes were forked from it, else `worker`.
    pub role: &'static str,
    /// Mean percent of one core over all the samples (a worker that lived for part of
    /// them has the rest as zero).
    pub cpu_mean_pct: f64,
    /// In how many samples it was seen.
    pub samples: usize,
}

impl ServingProcessMean {
    /// The processes seen in `procs`, in the order first seen (the roots first).
    fn of(procs: &[&ProcessSecond]) -> Vec<Self> {
        let mut out: Vec<Self> = Vec::new();
        let mut parents: Vec<i32> = Vec::new();
        for p in procs {
            for w in &p.processes {
                parents.push(w.ppid);
                match out.iter_mut().find(|o| o.pid == w.pid) {
                    Some(o) => {
                        o.cpu_mean_pct += w.cpu_pct;
                        o.samples += 1;
                    }
                    None => out.push(Self {
                        pid: w.pid,
                        name: w.name.clone(),
                        role: "worker",
                        cpu_mean_pct: w.cpu_pct,
                        samples: 1,
                    }),
                }
            }
        }
        for o in &mut out {
            o.cpu_mean_pct /= procs.len().max(1) as f64;
            if parents.contains(&o.pid) {
                o.role = "master";
            }
        }
        out
    }
}

/// A group of the target's threads (by name) and its mean CPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadGroup {
    pub name: String,
    pub cpu_mean_pct: f64,
    pub threads: u64,
}

/// The deepest socket queue seen, and whose it was.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Queue {
    pub peer: String,
    pub bytes: u64,
}

/// The fullest accept queue seen.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AcceptQueue {
    pub address: String,
    pub queued: u64,
    /// The backlog, where sock_diag gave it.
    pub limit: Option<u64>,
}

/// The target's TCP sockets: states at the last sample, the deepest queues seen and the
/// fullest accept queue.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sockets {
    pub by_state: BTreeMap<String, u64>,
    pub max_send_q: Option<Queue>,
    pub max_recv_q: Option<Queue>,
    pub fullest_accept_queue: Option<AcceptQueue>,
}

/// The target's control group over the samples: its own CPU, quota, throttling and memory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cgroup {
    pub path: String,
    pub memory_path: String,
    pub version: u8,
    pub cpu_mean_pct: Option<f64>,
    pub quota_cpus: Option<f64>,
    pub throttled_periods: Option<u64>,
    pub throttled_ms: Option<f64>,
    pub memory_max_bytes: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
}

/// The worst pressure (PSI "some", 10 s average) seen.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pressure {
    pub cpu: Option<f64>,
    pub memory: Option<f64>,
    pub io: Option<f64>,
}

/// Kernel events summed over the samples (host-wide), per-CPU counts, the worst pressure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kernel {
    pub listen_overflows: Option<u64>,
    pub listen_drops: Option<u64>,
    pub tcp_retrans_segs: Option<u64>,
    pub net_rx_softirqs_per_cpu: Vec<u64>,
    pub interrupts_per_cpu: Vec<u64>,
    pub nic_interrupts_per_cpu: Vec<u64>,
    pub thp_fault_alloc: Option<u64>,
    pub thp_fault_fallback: Option<u64>,
    pub compact_stall: Option<u64>,
    pub major_faults: Option<u64>,
    pub psi_some_avg10_max_pct: Pressure,
}

impl ResourcesSummary {
    /// The summary of `samples`; None without samples.
    pub fn of(samples: &[ResourceSecond]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let hosts: Vec<_> = samples.iter().filter_map(|s| s.host_cpu).collect();
        let host = |f: fn(&kiln_sample::CpuSplit) -> f64| mean(hosts.iter().map(f));
        let procs: Vec<&ProcessSecond> =
            samples.iter().filter_map(|s| s.process.as_ref()).collect();
        let mut hottest = kiln_sample::thread_groups_mean(samples);
        hottest.sort_by(|a, b| {
            // "(other threads)" last, whatever its share
            (a.0.starts_with('('))
                .cmp(&b.0.starts_with('('))
                .then(b.1.total_cmp(&a.1))
        });
        hottest.truncate(6);
        Some(Self {
            samples: samples.len(),
            host_cpu_mean_pct: HostCpu {
                user: host(|h| h.user + h.nice),
                system: host(|h| h.system),
                irq_softirq: host(|h| h.irq + h.softirq),
                iowait: host(|h| h.iowait),
                steal: host(|h| h.steal),
                idle: host(|h| h.idle),
            },
            host_memory: host_memory(samples),
            process: Process::of(&procs),
            hottest_threads: hottest
                .into_iter()
                .map(|(name, cpu_mean_pct, threads)| ThreadGroup {
                    name,
                    cpu_mean_pct,
                    threads,
                })
                .collect(),
            kernel: Kernel::of(samples),
        })
    }
}

fn host_memory(samples: &[ResourceSecond]) -> Option<HostMemory> {
    let mems = samples.iter().filter_map(|s| s.host_memory.as_ref());
    let last = mems.clone().next_back()?;
    Some(HostMemory {
        total_kib: last.total_kib,
        available_min_kib: mems.clone().map(|m| m.available_kib).min(),
        swap_used_max_kib: mems.clone().filter_map(|m| m.swap_used_kib).max(),
        dirty_max_kib: mems.filter_map(|m| m.dirty_kib).max(),
    })
}

impl Process {
    fn of(procs: &[&ProcessSecond]) -> Option<Self> {
        let first = procs.first()?;
        let cpu: Vec<f64> = procs
            .iter()
            .map(|p| p.rates.cpu_user_pct + p.rates.cpu_system_pct)
            .collect();
        let mut thread_states_max: BTreeMap<String, u64> = BTreeMap::new();
        for p in procs {
            for (state, n) in &p.thread_states {
                let seen = thread_states_max.entry(state.clone()).or_insert(0);
                *seen = (*seen).max(*n);
            }
        }
        Some(Self {
            pid: first.rates.id,
            name: first.rates.name.clone(),
            cpu_mean_pct: mean(cpu.iter().copied()),
            cpu_peak_pct: cpu.iter().copied().fold(0.0, f64::max),
            cpu_user_mean_pct: mean(procs.iter().map(|p| p.rates.cpu_user_pct)),
            cpu_system_mean_pct: mean(procs.iter().map(|p| p.rates.cpu_system_pct)),
            voluntary_switches_per_s_mean: mean(
                procs
                    .iter()
                    .filter_map(|p| p.rates.voluntary_switches_per_s),
            ),
            involuntary_switches_per_s_mean: mean(
                procs
                    .iter()
                    .filter_map(|p| p.rates.involuntary_switches_per_s),
            ),
            rss_max_kib: procs.iter().map(|p| p.rss_kib).max(),
            threads_max: procs.iter().map(|p| p.threads).max(),
            open_fds_max: procs.iter().filter_map(|p| p.open_fds).max(),
            thread_states_max,
            sockets: Sockets::of(procs),
            cgroup: Cgroup::of(procs),
            processes: ServingProcessMean::of(procs),
            exited_cpu_mean_pct: procs
                .iter()
                .any(|p| p.exited_cpu_pct.is_some())
                .then(|| mean(procs.iter().map(|p| p.exited_cpu_pct.unwrap_or(0.0))))
                .flatten(),
        })
    }
}

impl Sockets {
    fn of(procs: &[&ProcessSecond]) -> Option<Self> {
        let all: Vec<&SocketSummary> = procs.iter().filter_map(|p| p.sockets.as_ref()).collect();
        let last = all.last()?;
        let deepest = |pick: fn(&SocketSummary) -> &Option<(String, u64)>| {
            all.iter()
                .filter_map(|s| pick(s).as_ref())
                .max_by_key(|(_, q)| *q)
                .map(|(peer, q)| Queue {
                    peer: peer.clone(),
                    bytes: *q,
                })
        };
        let fullest = all
            .iter()
            .flat_map(|s| s.listen.iter())
            .max_by_key(|(_, queued)| *queued)
            .map(|(addr, queued)| AcceptQueue {
                address: addr.clone(),
                queued: *queued,
                limit: all
                    .iter()
                    .flat_map(|s| s.listen_backlog.iter())
                    .find(|(a, _, _)| a == addr)
                    .map(|(_, _, limit)| *limit),
            });
        Some(Self {
            by_state: last.by_state.clone(),
            max_send_q: deepest(|s| &s.max_send_q),
            max_recv_q: deepest(|s| &s.max_recv_q),
            fullest_accept_queue: fullest,
        })
    }
}

impl Cgroup {
    fn of(procs: &[&ProcessSecond]) -> Option<Self> {
        let groups: Vec<&CgroupSecond> = procs.iter().filter_map(|p| p.cgroup.as_ref()).collect();
        let last = groups.last()?;
        let sum =
            |f: fn(&CgroupSecond) -> Option<u64>| saturating_total(groups.iter().map(|g| f(g)));
        Some(Self {
            path: last.path.clone(),
            memory_path: last.memory_path.clone(),
            version: last.version,
            cpu_mean_pct: mean(groups.iter().filter_map(|g| g.cpu_pct)),
            quota_cpus: last.quota_cpus,
            throttled_periods: sum(|g| g.throttled_periods),
            throttled_ms: groups.iter().map(|g| g.throttled_ms).sum::<Option<f64>>(),
            memory_max_bytes: groups.iter().filter_map(|g| g.memory_bytes).max(),
            memory_limit_bytes: last.memory_limit_bytes,
            oom_kills: sum(|g| g.oom_kills),
        })
    }
}

impl Kernel {
    fn of(samples: &[ResourceSecond]) -> Option<Self> {
        let kernels: Vec<&KernelSecond> =
            samples.iter().filter_map(|s| s.kernel.as_ref()).collect();
        if kernels.is_empty() {
            return None;
        }
        let total =
            |f: fn(&KernelSecond) -> Option<u64>| saturating_total(kernels.iter().map(|k| f(k)));
        // per-CPU counts summed over the samples
        let per_cpu = |f: fn(&KernelSecond) -> &Vec<u64>| {
            let mut sums: Vec<u64> = Vec::new();
            for k in &kernels {
                if sums.len() < f(k).len() {
                    sums.resize(f(k).len(), 0);
                }
                for (sum, n) in sums.iter_mut().zip(f(k)) {
                    *sum = sum.saturating_add(*n);
                }
            }
            sums
        };
        let worst = |f: fn(&KernelSecond) -> Option<f64>| {
            kernels.iter().filter_map(|k| f(k)).reduce(f64::max)
        };
        Some(Self {
            listen_overflows: total(|k| k.listen_overflows),
            listen_drops: total(|k| k.listen_drops),
            tcp_retrans_segs: total(|k| k.tcp_retrans_segs),
            net_rx_softirqs_per_cpu: per_cpu(|k| &k.net_rx_per_cpu),
            interrupts_per_cpu: per_cpu(|k| &k.interrupts_per_cpu),
            nic_interrupts_per_cpu: per_cpu(|k| &k.nic_interrupts_per_cpu),
            thp_fault_alloc: total(|k| k.thp_fault_alloc),
            thp_fault_fallback: total(|k| k.thp_fault_fallback),
            compact_stall: total(|k| k.compact_stall),
            major_faults: total(|k| k.major_faults),
            psi_some_avg10_max_pct: Pressure {
                cpu: worst(|k| k.psi_cpu.and_then(|p| p.some_avg10)),
                memory: worst(|k| k.psi_memory.and_then(|p| p.some_avg10)),
                io: worst(|k| k.psi_io.and_then(|p| p.some_avg10)),
            },
        })
    }
}

/// One sample in a line, as `kiln watch` shows each on stderr: the host's CPU and run queue,
/// the process's CPU, switches, memory and threads, and its hottest thread.
pub fn second_line(s: &ResourceSecond) -> String {
    let mut line = format!("{:>4}s", s.second);
    if let Some(h) = &s.host_cpu {
        line += &format!(
            "  host usr {:>3.0}% sys {:>3.0}% si {:>2.0}% iowait {:>2.0}% steal {:>2.0}% runq {}",
            h.user + h.nice,
            h.system,
            h.softirq + h.irq,
            h.iowait,
            h.steal,
            s.run_queue.unwrap_or(0)
        );
    }
    if let Some(p) = &s.process {
        line += &format!(
            " | {} cpu {:>3.0}% (usr {:.0} sys {:.0}) cs/s {:.0}+{:.0} rss {} thr {}",
            p.rates.id,
            p.rates.cpu_user_pct + p.rates.cpu_system_pct,
            p.rates.cpu_user_pct,
            p.rates.cpu_system_pct,
            p.rates.voluntary_switches_per_s.unwrap_or(0.0),
            p.rates.involuntary_switches_per_s.unwrap_or(0.0),
            bytes(p.rss_kib.saturating_mul(1024)),
            p.threads
        );
        if let Some(t) = p.hottest_by_cpu.first() {
            line += &format!(
                " | hottest {} {:.0}%",
                safe_text(&t.name),
                t.cpu_user_pct + t.cpu_system_pct
            );
        }
    }
    line
}

/// The summary of `samples` as text, empty without samples.
pub fn text_of(samples: &[ResourceSecond], during: &str) -> String {
    ResourcesSummary::of(samples).map_or(String::new(), |r| r.to_text(during))
}

fn pct(x: Option<f64>) -> String {
    format!("{:.0}%", x.unwrap_or(0.0))
}

/// A count that may be unknown.
fn count(n: Option<u64>) -> String {
    n.map_or("?".to_string(), |n| n.to_string())
}

/// Per-CPU counts as `[a,b,...]`.
fn per_cpu(counts: &[u64]) -> String {
    let items: Vec<String> = counts.iter().map(u64::to_string).collect();
    format!("[{}]", items.join(","))
}

/// `items` joined with commas, or "none".
pub fn comma_list_or_none(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

impl ResourcesSummary {
    /// The summary as text; `during` says what the samples cover (e.g. "the measured load").
    pub fn to_text(&self, during: &str) -> String {
        let h = &self.host_cpu_mean_pct;
        let mut out = format!(
            "Resources  {} samples during {during}\n  host     usr {} sys {} irq+si {} iowait {} steal {} idle {} (mean over all CPUs)\n",
            self.samples,
            pct(h.user),
            pct(h.system),
            pct(h.irq_softirq),
            pct(h.iowait),
            pct(h.steal),
            pct(h.idle)
        );
        if let Some(m) = &self.host_memory {
            let kib = |k: Option<u64>| k.map_or("?".to_string(), |k| bytes(k.saturating_mul(1024)));
            let _ = writeln!(
                out,
                "           memory {} total, {} available at the least; swap used {} at most; dirty {} at most",
                kib(Some(m.total_kib)),
                kib(m.available_min_kib),
                kib(m.swap_used_max_kib),
                kib(m.dirty_max_kib)
            );
        }
        if let Some(p) = &self.process {
            p.text(&mut out, &self.hottest_threads);
            if let Some(cg) = &p.cgroup {
                cg.text(&mut out);
            }
        }
        if let Some(k) = &self.kernel {
            k.text(&mut out);
        }
        out
    }
}

impl Process {
    fn text(&self, out: &mut String, hottest_threads: &[ThreadGroup]) {
        let states = if self.thread_states_max.is_empty() {
            String::new()
        } else {
            let states: Vec<String> = self
                .thread_states_max
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect();
            format!(" (most at once: {})", states.join(", "))
        };
        let _ = writeln!(
            out,
            "  target   {} ({}): CPU mean {} peak {} of one core (usr {} sys {}); switches/s {:.0} voluntary, {:.0} involuntary; RSS max {}; threads {}{states}; open files max {}",
            self.pid,
            safe_text(&self.name),
            pct(self.cpu_mean_pct),
            pct(Some(self.cpu_peak_pct)),
            pct(self.cpu_user_mean_pct),
            pct(self.cpu_system_mean_pct),
            self.voluntary_switches_per_s_mean.unwrap_or(0.0),
            self.involuntary_switches_per_s_mean.unwrap_or(0.0),
            bytes(self.rss_max_kib.unwrap_or(0).saturating_mul(1024)),
            count(self.threads_max),
            count(self.open_fds_max)
        );
        self.processes_text(out);
        let hottest: Vec<String> = hottest_threads
            .iter()
            .map(|t| {
                let threads = match t.threads {
                    n if n > 1 => format!(" ({n} threads)"),
                    _ => String::new(),
                };
                format!(
                    "{}{threads} {}",
                    safe_text(&t.name),
                    pct(Some(t.cpu_mean_pct))
                )
            })
            .collect();
        if !hottest.is_empty() {
            let _ = writeln!(out, "  threads  {}", hottest.join(", "));
        }
        if let Some(so) = &self.sockets {
            so.text(out);
        }
    }
}

impl Process {
    /// `  processes 100 gunicorn (master) 0.1%, 101 gunicorn 45.0%, ...; exited 2.0%`:
    /// whose the target's CPU was, for a target of several processes.
    fn processes_text(&self, out: &mut String) {
        /// More are summed as one entry: nginx or php-fpm may run dozens.
        const NAMED: usize = 8;
        if self.processes.is_empty() {
            return;
        }
        let workers = self.processes.iter().filter(|p| p.role == "worker").count();
        let mut named: Vec<String> = self
            .processes
            .iter()
            .take(NAMED)
            .map(|p| {
                let role = if p.role == "master" { " (master)" } else { "" };
                format!(
                    "{} {}{role} {}",
                    p.pid,
                    safe_text(&p.name),
                    pct(Some(p.cpu_mean_pct))
                )
            })
            .collect();
        if self.processes.len() > NAMED {
            let rest = &self.processes[NAMED..];
            named.push(format!(
                "{} more {}",
                rest.len(),
                pct(Some(rest.iter().map(|p| p.cpu_mean_pct).sum()))
            ));
        }
        let exited = self
            .exited_cpu_mean_pct
            .map(|e| format!("; exited between samples {}", pct(Some(e))))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  processes {} ({workers} workers): {}{exited}",
            self.processes.len(),
            named.join(", ")
        );
    }
}

impl Sockets {
    fn text(&self, out: &mut String) {
        let states = self
            .by_state
            .iter()
            .map(|(state, n)| format!("{state} {n}"));
        let queue = |q: &Option<Queue>, dir: &str| match q {
            None => "0".to_string(),
            Some(q) => format!("{} {dir} {}", bytes(q.bytes), safe_text(&q.peer)),
        };
        let accept = match &self.fullest_accept_queue {
            None => String::new(),
            Some(a) => format!(
                "; accept queue max {}{} on {}",
                a.queued,
                a.limit.map_or(String::new(), |l| format!(" of {l}")),
                safe_text(&a.address)
            ),
        };
        let _ = writeln!(
            out,
            "  sockets  {}; max Send-Q {}; max Recv-Q {}{accept}",
            comma_list_or_none(states),
            queue(&self.max_send_q, "to"),
            queue(&self.max_recv_q, "from"),
        );
    }
}

impl Cgroup {
    fn text(&self, out: &mut String) {
        let whose = |p: &str| {
            if p == "/" {
                "the root group: the host's"
            } else {
                "the group's own"
            }
        };
        let _ = writeln!(
            out,
            "  cgroup   v{}, cpu {} ({}): CPU mean {} of one core, quota {}, throttled {} periods ({})\n           memory {} ({}): max {} of {}; OOM kills {}",
            self.version,
            safe_text(&self.path),
            whose(&self.path),
            pct(self.cpu_mean_pct),
            self.quota_cpus.map_or("none".to_string(), |q| format!("{q:.2} CPUs")),
            count(self.throttled_periods),
            self.throttled_ms.map_or("?".to_string(), |ms| format!("{ms:.0} ms")),
            safe_text(&self.memory_path),
            whose(&self.memory_path),
            self.memory_max_bytes.map_or("?".to_string(), bytes),
            self.memory_limit_bytes.map_or("no limit".to_string(), bytes),
            count(self.oom_kills)
        );
    }
}

impl Kernel {
    fn text(&self, out: &mut String) {
        let psi = |x: Option<f64>| x.map_or("n/a".to_string(), |p| format!("{p:.1}%"));
        let p = &self.psi_some_avg10_max_pct;
        let _ = writeln!(
            out,
            "  kernel   listen overflows {}, listen drops {}, TCP retransmits {}; NET_RX softirqs per CPU {}\n           interrupts per CPU {} (network devices {})\n           THP faults {} (fallback {}), compaction stalls {}, major faults {}; PSI some avg10 max: cpu {} memory {} io {}",
            count(self.listen_overflows),
            count(self.listen_drops),
            count(self.tcp_retrans_segs),
            per_cpu(&self.net_rx_softirqs_per_cpu),
            per_cpu(&self.interrupts_per_cpu),
            per_cpu(&self.nic_interrupts_per_cpu),
            count(self.thp_fault_alloc),
            count(self.thp_fault_fallback),
            count(self.compact_stall),
            count(self.major_faults),
            psi(p.cpu),
            psi(p.memory),
            psi(p.io)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A real second of this process, as the sampler writes it to `resources.jsonl`.
    fn real_second() -> String {
        let pid = std::process::id() as i32;
        let mut sampler = kiln_sample::Sampler::new(kiln_sample::ProcFs::default(), Some(pid));
        sampler.tick();
        std::thread::sleep(std::time::Duration::from_millis(20));
        serde_json::to_string(&sampler.tick()).unwrap()
    }

    /// Every number of `line` replaced, in turn, by one of `values`.
    fn with_numbers(line: &str, values: &[u64]) -> String {
        let mut out = String::new();
        let mut i = 0;
        let mut chars = line.chars().peekable();
        let mut after_colon = false;
        while let Some(c) = chars.next() {
            let starts_number = c.is_ascii_digit() && after_colon;
            if starts_number {
                while chars
                    .peek()
                    .is_some_and(|d| d.is_ascii_digit() || *d == '.')
                {
                    chars.next();
                }
                out += &values[i % values.len()].to_string();
                i += 1;
            } else {
                out.push(c);
            }
            after_colon = c == ':' || (c == ',' && after_colon) || (c == '[');
        }
        out
    }

    #[test]
    fn the_mutation_keeps_a_line_readable() {
        let line = with_numbers(&real_second(), &[1, 7]);
        let second: ResourceSecond = serde_json::from_str(&line).unwrap();
        assert!(second.process.is_some(), "{line}");
        let text = ResourcesSummary::of(&[second]).unwrap().to_text("the run");
        assert!(!text.is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// What `kiln report` shows of resources.jsonl: any numbers in a real line are read or
        /// refused, and summarised without a panic (no overflow, no division by zero).
        #[test]
        fn resource_seconds_with_any_numbers_summarise_without_panic(
            values in prop::collection::vec(
                prop_oneof![0u64..100, 0u64..u64::from(u32::MAX), any::<u64>()],
                1..16,
            ),
        ) {
            let line = with_numbers(&real_second(), &values);
            if let Ok(second) = serde_json::from_str::<ResourceSecond>(&line) {
                let samples = vec![second.clone(), second];
                let summary = ResourcesSummary::of(&samples).unwrap();
                let _ = serde_json::to_string(&summary).unwrap();
                let _ = summary.to_text("the run");
            }
        }
    }
}
