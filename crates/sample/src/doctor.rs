//! `kiln doctor`: host checks that decide whether latency and throughput figures (and
//! profiles) taken here can be trusted. Each check reads named files under a root (`/` on the
//! live host, a fixture tree in tests), gives a verdict with its evidence, says in one sentence
//! why it matters, and the exact command that would fix it. It never changes the host; what
//! it cannot read is `unknown`, with the reason, never a guess.

use std::fs;
use std::path::{Path, PathBuf};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::counters::{parse_interrupts, parse_meminfo};
use crate::procfs::ProcFs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Unknown,
    Warn,
    Bad,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Unknown => "unknown",
            Verdict::Warn => "warn",
            Verdict::Bad => "bad",
        }
    }
}

/// One check's outcome. Also what a run record's `doctor.json` holds, so the texts are
/// owned when read back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    pub id: Cow<'static, str>,
    pub verdict: Verdict,
    /// What was read: `file = value`, or why nothing could be.
    pub evidence: String,
    /// Why it matters for latency, throughput or profiling, in one sentence.
    pub why: Cow<'static, str>,
    /// The command that would fix it (empty when there is nothing to fix).
    pub fix: String,
}

/// The run record's part that holds the doctor's checks, taken as the run starts.
pub const DOCTOR_PART: &str = "doctor";
pub const DOCTOR_FILE: &str = "doctor.json";

/// What `doctor.json` holds: the checks, and the process audited with the host.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DoctorRecord {
    pub pid: Option<i32>,
    pub checks: Vec<Check>,
}

impl DoctorRecord {
    /// The check with this id, when it was taken.
    pub fn check(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    /// The checks that are not ok, worst first (in the doctor's order within a verdict).
    pub fn not_ok(&self) -> Vec<&Check> {
        let mut out: Vec<&Check> = self
            .checks
            .iter()
            .filter(|c| c.verdict != Verdict::Ok)
            .collect();
        out.sort_by_key(|c| std::cmp::Reverse(c.verdict));
        out
    }
}

/// The host (or a fixture tree) to audit, and the process to audit with it.
pub struct Doctor {
    root: PathBuf,
    /// Whether kiln runs as root (perf restrictions do not apply to root).
    pub as_root: bool,
    pub target_pid: Option<i32>,
}

impl Doctor {
    pub fn new(root: impl AsRef<Path>, target_pid: Option<i32>) -> Self {
        Self {
            root: root.as_ref().to_path_buf(),
            // SAFETY: geteuid has no preconditions.
            as_root: unsafe { libc::geteuid() } == 0,
            target_pid,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// The trimmed contents of `rel`, or why it could not be read.
    fn read(&self, rel: &str) -> Result<String, Unreadable> {
        use std::io::Read as _;
        // Settings files are short; under --root one may be a link to /dev/zero.
        const MAX_SETTING_BYTES: u64 = 4 << 20;
        let mut text = String::new();
        fs::File::open(self.path(rel))
            .and_then(|f| f.take(MAX_SETTING_BYTES).read_to_string(&mut text))
            .map_err(|e| Unreadable::Io {
                rel: rel.to_string(),
                kind: e.kind(),
            })?;
        Ok(text.trim().to_string())
    }

    fn number(&self, rel: &str) -> Result<i64, Unreadable> {
        let text = self.read(rel)?;
        text.split_whitespace()
            .next()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| Unreadable::NotANumber {
                rel: rel.to_string(),
                text,
            })
    }

    /// Every check, in a fixed order.
    pub fn run(&self) -> Vec<Check> {
        let mut checks = vec![
            self.thp("thp-enabled", "enabled"),
            self.thp("thp-defrag", "defrag"),
            self.clocksource(),
            self.perf_event_paranoid(),
            self.kptr_restrict(),
            self.somaxconn(),
            self.syn_backlog(),
            self.swappiness(),
            self.governor(),
            self.steal(),
            self.irqbalance(),
            self.nic_interrupt_spread(),
            self.rps(),
            self.open_files("open-files-shell", "self"),
            self.cgroup_cpu("cgroup-cpu-shell", "self"),
        ];
        if let Some(pid) = self.target_pid {
            let pid = pid.to_string();
            checks.push(self.open_files("open-files-target", &pid));
            checks.push(self.cgroup_cpu("cgroup-cpu-target", &pid));
        }
        checks
    }

    fn thp(&self, id: &'static str, file: &str) -> Check {
        let rel = format!("sys/kernel/mm/transparent_hugepage/{file}");
        let why = if file == "enabled" {
            "always-on huge pages make page faults compact memory in the request path and spend system time (a case study's 40% sys)"
        } else {
            "defrag=always stalls allocations on direct compaction, which shows as latency spikes and system time"
        };
        let fix = format!("echo madvise > /{rel}");
        match self.read(&rel) {
            Err(e) => unknown(id, e.to_string(), why),
            Ok(text) => {
                let chosen = bracketed(&text).unwrap_or("?");
                let verdict = if chosen == "always" {
                    Verdict::Warn
                } else {
                    Verdict::Ok
                };
                check(id, verdict, format!("{rel} = {text}"), why, fix)
            }
        }
    }

    fn clocksource(&self) -> Check {
        let id = "clocksource";
        let why = "a clocksource without a vDSO fast path (xen, hpet, acpi_pm) turns every clock read into a system call: timestamps cost microseconds";
        let rel = "sys/devices/system/clocksource/clocksource0/current_clocksource";
        let current = match self.read(rel) {
            Ok(c) => c,
            Err(e) => return unknown(id, e.to_string(), why),
        };
        let available = self
            .read("sys/devices/system/clocksource/clocksource0/available_clocksource")
            .unwrap_or_default();
        let evidence = format!("{rel} = {current} (available: {available})");
        let slow = ["xen", "hpet", "acpi_pm"].contains(&current.as_str());
        if !slow {
            return check(id, Verdict::Ok, evidence, why, "");
        }
        let fix = if available.split_whitespace().any(|c| c == "tsc") {
            format!("echo tsc > /{rel} (persist: kernel command line clocksource=tsc)")
        } else {
            "no tsc offered by this kernel: check the hypervisor's documentation (EC2: use a Nitro instance)".into()
        };
        check(id, Verdict::Bad, evidence, why, fix)
    }

    fn perf_event_paranoid(&self) -> Check {
        let id = "perf-event-paranoid";
        let why = "perf (kiln profile) may only watch other users' processes, and kernel frames, when this allows it";
        let rel = "proc/sys/kernel/perf_event_paranoid";
        match self.number(rel) {
            Err(e) => unknown(id, e.to_string(), why),
            Ok(level) => {
                let evidence = format!(
                    "{rel} = {level}{}",
                    if self.as_root {
                        " (kiln runs as root)"
                    } else {
                        ""
                    }
                );
                let verdict = if self.as_root || level <= 1 {
                    Verdict::Ok
                } else if level == 2 {
                    Verdict::Warn
                } else {
                    Verdict::Bad
                };
                check(
                    id,
                    verdict,
                    evidence,
                    why,
                    "sysctl -w kernel.perf_event_paranoid=1",
                )
            }
        }
    }

    fn kptr_restrict(&self) -> Check {
        let id = "kptr-restrict";
        let why = "when kernel addresses are hidden, flame graphs show kernel time as [unknown] instead of the kernel's functions";
        let rel = "proc/sys/kernel/kptr_restrict";
        match self.number(rel) {
            Err(e) => unknown(id, e.to_string(), why),
            Ok(level) => {
                let verdict = if level == 0 || (level == 1 && self.as_root) {
                    Verdict::Ok
                } else {
                    Verdict::Warn
                };
                check(
                    id,
                    verdict,
                    format!("{rel} = {level}"),
                    why,
                    "sysctl -w kernel.kptr_restrict=0",
                )
            }
        }
    }

    fn somaxconn(&self) -> Check {
        self.at_least(
            "somaxconn",
            "a listen backlog is capped at somaxconn: bursts of connections beyond it are dropped (ListenOverflows) and retried a second later",
            "proc/sys/net/core/somaxconn",
            1024,
            "sysctl -w net.core.somaxconn=4096",
        )
    }

    fn syn_backlog(&self) -> Check {
        self.at_least(
            "tcp-max-syn-backlog",
            "half-open connections beyond this are dropped or answered with syncookies during a connection burst",
            "proc/sys/net/ipv4/tcp_max_syn_backlog",
            1024,
            "sysctl -w net.ipv4.tcp_max_syn_backlog=4096",
        )
    }

    /// A numeric setting that warns below `minimum`.
    fn at_least(
        &self,
        id: &'static str,
        why: &'static str,
        rel: &str,
        minimum: i64,
        fix: &str,
    ) -> Check {
        match self.number(rel) {
            Err(e) => unknown(id, e.to_string(), why),
            Ok(n) => {
                let verdict = if n < minimum {
                    Verdict::Warn
                } else {
                    Verdict::Ok
                };
                check(id, verdict, format!("{rel} = {n}"), why, fix)
            }
        }
    }

    /// The hypervisor's share of this VM's CPU time since boot (steal): a VM that has had
    /// its CPUs taken before will have them taken during the run, in spells.
    fn steal(&self) -> Check {
        let id = "cpu-steal";
        let why = "a hypervisor that gives this VM's CPUs to other guests (steal) delays every wake-up by its time slice: latency and CPU per request vary from run to run for reasons outside the VM";
        let stat = match self.read("proc/stat") {
            Ok(s) => s,
            Err(e) => return unknown(id, e.to_string(), why),
        };
        // cpu  user nice system idle iowait irq softirq steal ...
        let ticks: Vec<u64> = (stat.lines().next().unwrap_or(""))
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|t| t.parse().ok())
            .collect();
        let total: u64 = ticks.iter().fold(0, |a, t| a.saturating_add(*t));
        let (Some(&steal), true) = (ticks.get(7), total > 0) else {
            return unknown(id, "proc/stat: no steal column".into(), why);
        };
        let share = steal as f64 / total as f64;
        let verdict = if share >= STEAL_WARN {
            Verdict::Warn
        } else {
            Verdict::Ok
        };
        check(
            id,
            verdict,
            format!(
                "proc/stat: steal {:.1}% of the CPU time since boot ({steal} of {total} ticks)",
                100.0 * share
            ),
            why,
            "nothing on this VM: run on a dedicated or non-burstable instance, or compare runs taken in the same quiet spell (a run's cpu.hypervisor-steal finding says when steal was high)",
        )
    }

    fn swappiness(&self) -> Check {
        let id = "swappiness";
        let why = "a service whose pages are swapped out waits on the disk to touch them again: latency spikes unrelated to load";
        let rel = "proc/sys/vm/swappiness";
        let level = match self.number(rel) {
            Ok(n) => n,
            Err(e) => return unknown(id, e.to_string(), why),
        };
        let meminfo = parse_meminfo(&self.read("proc/meminfo").unwrap_or_default());
        let used = match (meminfo.get("SwapTotal"), meminfo.get("SwapFree")) {
            (Some(t), Some(f)) => Some(t.saturating_sub(*f)),
            _ => None,
        };
        let evidence = format!(
            "{rel} = {level}; swap in use: {}",
            used.map_or("unknown (proc/meminfo)".into(), |u| format!("{u} kB"))
        );
        let verdict = if level > 10 && used.unwrap_or(0) > 0 {
            Verdict::Warn
        } else {
            Verdict::Ok
        };
        check(id, verdict, evidence, why, "sysctl -w vm.swappiness=10")
    }

    fn governor(&self) -> Check {
        let id = "cpu-governor";
        let why = "a power-saving governor runs the CPU slower until load ramps it up: the first requests and light loads look slower than they are";
        let cpus = match self.cpu_dirs() {
            Ok(c) => c,
            Err(e) => return unknown(id, e.to_string(), why),
        };
        let mut governors: Vec<String> = Vec::new();
        for cpu in &cpus {
            if let Ok(g) = self.read(&format!(
                "sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"
            )) {
                if !governors.contains(&g) {
                    governors.push(g);
                }
            }
        }
        if governors.is_empty() {
            return unknown(id, "no cpufreq/scaling_governor under sys/devices/system/cpu (usual in a VM: the hypervisor decides)".into(), why);
        }
        let evidence = format!(
            "scaling_governor of {} CPUs: {}",
            cpus.len(),
            governors.join(", ")
        );
        if governors.iter().all(|g| g == "performance") {
            check(id, Verdict::Ok, evidence, why, "")
        } else {
            check(
                id,
                Verdict::Warn,
                evidence,
                why,
                "cpupower frequency-set -g performance",
            )
        }
    }

    fn cpu_dirs(&self) -> Result<Vec<String>, Unreadable> {
        let dir = self.path("sys/devices/system/cpu");
        let mut cpus: Vec<String> = fs::read_dir(&dir)
            .map_err(|e| Unreadable::Io {
                rel: "sys/devices/system/cpu".into(),
                kind: e.kind(),
            })?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| {
                n.strip_prefix("cpu")
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        cpus.sort();
        Ok(cpus)
    }

    fn online_cpus(&self) -> usize {
        self.cpu_dirs().map_or(1, |c| c.len().max(1))
    }

    fn irqbalance(&self) -> Check {
        let id = "irqbalance";
        let why = "without irqbalance (or pinned queues) every device interrupt can land on one CPU, which then saturates in softirq before the others are busy";
        let cpus = match self.cpu_dirs() {
            Ok(c) => c.len(),
            Err(e) => return unknown(id, e.to_string(), why),
        };
        let Ok(entries) = fs::read_dir(self.path("proc")) else {
            return unknown(id, "proc: not readable".into(), why);
        };
        let running = entries.filter_map(|e| e.ok()).any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                && fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "irqbalance")
        });
        let evidence = format!(
            "irqbalance {} (proc/*/comm); {cpus} CPUs",
            if running { "running" } else { "not running" }
        );
        if running || cpus == 1 {
            check(id, Verdict::Ok, evidence, why, "")
        } else {
            check(id, Verdict::Warn, evidence, why, "apt install irqbalance && systemctl enable --now irqbalance (or pin NIC queues in /proc/irq/N/smp_affinity_list)")
        }
    }

    /// Network device interrupt counts per CPU from /proc/interrupts.
    fn nic_interrupts(&self) -> Result<Vec<u64>, Unreadable> {
        Ok(parse_interrupts(&self.read("proc/interrupts")?).nic_per_cpu)
    }

    fn nic_interrupt_spread(&self) -> Check {
        let id = "nic-interrupts";
        let why = "when one CPU takes a NIC's interrupts, its softirq time caps throughput while the other CPUs idle (a case study's two pinned cores)";
        let per_cpu = match self.nic_interrupts() {
            Ok(v) => v,
            Err(e) => return unknown(id, e.to_string(), why),
        };
        let total: u64 = per_cpu.iter().sum();
        if total == 0 || per_cpu.len() < 2 {
            return unknown(
                id,
                "no network device interrupts in proc/interrupts (loopback only, or a single CPU)"
                    .into(),
                why,
            );
        }
        let (busiest, most) = per_cpu
            .iter()
            .enumerate()
            .max_by_key(|(_, c)| **c)
            .map(|(i, c)| (i, *c))
            .unwrap_or((0, 0));
        let share = most as f64 / total as f64;
        let evidence = format!(
            "proc/interrupts: network device interrupts per CPU {:?}; CPU{busiest} has {:.0}%",
            per_cpu,
            share * 100.0
        );
        if share > 0.9 {
            check(id, Verdict::Warn, evidence, why, "spread the queues: irqbalance, or echo CPU-list > /proc/irq/N/smp_affinity_list per queue; with one queue, enable RPS (see rps)")
        } else {
            check(id, Verdict::Ok, evidence, why, "")
        }
    }

    fn rps(&self) -> Check {
        let id = "rps";
        let why = "with a single receive queue and RPS off, all received packets are processed on one CPU";
        let dir = self.path("sys/class/net");
        let Ok(entries) = fs::read_dir(&dir) else {
            return unknown(id, "sys/class/net: not readable".into(), why);
        };
        let mut single_queue_off = Vec::new();
        let mut seen = Vec::new();
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n != "lo")
            .collect();
        names.sort();
        for name in names {
            let queues = fs::read_dir(dir.join(&name).join("queues"))
                .map(|q| {
                    q.filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .filter(|n| n.starts_with("rx-"))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            if queues.is_empty() {
                continue;
            }
            let off = queues.iter().all(|q| {
                self.read(&format!("sys/class/net/{name}/queues/{q}/rps_cpus"))
                    .is_ok_and(|m| m.chars().all(|c| c == '0' || c == ','))
            });
            seen.push(format!(
                "{name}: {} rx queue{}, rps {}",
                queues.len(),
                if queues.len() == 1 { "" } else { "s" },
                if off { "off" } else { "on" }
            ));
            if queues.len() == 1 && off && self.online_cpus() > 1 {
                single_queue_off.push(name);
            }
        }
        if seen.is_empty() {
            return unknown(
                id,
                "no network interface with receive queues in sys/class/net".into(),
                why,
            );
        }
        let evidence = seen.join("; ");
        match single_queue_off.first() {
            Some(name) => {
                let mask = format!("{:x}", (1u64 << self.online_cpus().min(63)) - 1);
                check(
                    id,
                    Verdict::Warn,
                    evidence,
                    why,
                    format!("echo {mask} > /sys/class/net/{name}/queues/rx-0/rps_cpus"),
                )
            }
            None => check(id, Verdict::Ok, evidence, why, ""),
        }
    }

    fn open_files(&self, id: &'static str, pid: &str) -> Check {
        let why = "each connection is a file descriptor: a low limit turns a load test into 'Too many open files' errors";
        let rel = format!("proc/{pid}/limits");
        let text = match self.read(&rel) {
            Ok(t) => t,
            Err(e) => return unknown(id, e.to_string(), why),
        };
        let Some(line) = text.lines().find(|l| l.starts_with("Max open files")) else {
            return unknown(id, format!("{rel}: no 'Max open files' line"), why);
        };
        let fields: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
        let soft = fields.first().copied().unwrap_or("?");
        let hard = fields.get(1).copied().unwrap_or("?");
        let evidence = format!("{rel}: Max open files soft {soft}, hard {hard}");
        let soft_n = if soft == "unlimited" {
            Some(u64::MAX)
        } else {
            soft.parse::<u64>().ok()
        };
        match soft_n {
            None => unknown(id, evidence, why),
            Some(n) if n < 65_536 => check(
                id,
                Verdict::Warn,
                evidence,
                why,
                if pid == "self" {
                    "ulimit -n 65536 (in the shell that starts kiln; raise the hard limit in /etc/security/limits.conf if needed)".into()
                } else {
                    format!("prlimit --pid {pid} --nofile=65536:65536 (persist: LimitNOFILE=65536 in its systemd unit)")
                },
            ),
            Some(_) => check(id, Verdict::Ok, evidence, why, ""),
        }
    }

    /// The CPU quota of `pid`'s cgroup, v1 (`cpu.cfs_quota_us`, hybrid hosts included) or v2
    /// (`cpu.max`), read as the sampler reads it.
    fn cgroup_cpu(&self, id: &'static str, pid: &str) -> Check {
        let why = "a CPU quota throttles the process for the rest of each period once used up: latency steps of up to the period (100 ms) at moderate load";
        let Some(group) = ProcFs::new(&self.root).cgroup_of(pid) else {
            return unknown(
                id,
                format!("proc/{pid}/cgroup: unreadable or no cgroup entry"),
                why,
            );
        };
        let (quota_file, no_quota) = match group.version {
            1 => (
                format!(
                    "/sys/fs/cgroup/cpu{}/cpu.cfs_quota_us",
                    group.path.trim_end_matches('/')
                ),
                "-1",
            ),
            _ => (
                format!("/sys/fs/cgroup{}/cpu.max", group.path.trim_end_matches('/')),
                "max",
            ),
        };
        let throttled = group.nr_throttled.unwrap_or(0);
        let throttled_ms = group.throttled_us.unwrap_or(0) as f64 / 1000.0;
        let Some(cores) = group.quota_cpus else {
            let evidence = format!(
                "cgroup v{} {}: no CPU quota ({quota_file} absent or unlimited)",
                group.version, group.path
            );
            return check(id, Verdict::Ok, evidence, why, "");
        };
        let evidence = format!(
            "cgroup v{} {}: quota {cores:.2} CPUs; nr_throttled {throttled}, throttled {throttled_ms:.0} ms",
            group.version, group.path
        );
        let fix = format!("raise or remove the quota: echo {no_quota} > {quota_file} (containers: --cpus, Kubernetes: resources.limits.cpu); quota now {cores:.2} CPUs");
        let verdict = if throttled > 0 {
            Verdict::Bad
        } else {
            Verdict::Warn
        };
        check(id, verdict, evidence, why, fix)
    }
}

/// A check's outcome; the fix is kept only when the verdict is not ok (an ok host has
/// nothing to run).
fn check(
    id: &'static str,
    verdict: Verdict,
    evidence: String,
    why: &'static str,
    fix: impl Into<String>,
) -> Check {
    Check {
        id: id.into(),
        verdict,
        evidence,
        why: why.into(),
        fix: if verdict == Verdict::Ok {
            String::new()
        } else {
            fix.into()
        },
    }
}

/// Steal since boot above this share of the CPU time warns.
const STEAL_WARN: f64 = 0.05;

/// Why a setting could not be read: a check's reason when it cannot judge.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("{rel}: {}", kind.to_string().replace('_', " "))]
    Io {
        rel: String,
        kind: std::io::ErrorKind,
    },
    #[error("{rel}: not a number: {text:?}")]
    NotANumber { rel: String, text: String },
}

fn unknown(id: &'static str, reason: String, why: &'static str) -> Check {
    check(id, Verdict::Unknown, reason, why, "")
}

/// `always [madvise] never` -> `madvise`.
fn bracketed(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture tree of /proc and /sys files.
    struct Tree(tempfile::TempDir);

    impl Tree {
        fn new() -> Self {
            Tree(tempfile::tempdir().unwrap())
        }
        fn file(self, rel: &str, text: &str) -> Self {
            let path = self.0.path().join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
            self
        }
        fn doctor(&self, as_root: bool, pid: Option<i32>) -> Doctor {
            let mut d = Doctor::new(self.0.path(), pid);
            d.as_root = as_root;
            d
        }
    }

    fn find<'a>(checks: &'a [Check], id: &str) -> &'a Check {
        checks.iter().find(|c| c.id == id).unwrap()
    }

    /// A host that is bad or warn on every check that can be.
    fn bad_host() -> Tree {
        Tree::new()
            .file("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")
            .file("sys/kernel/mm/transparent_hugepage/defrag", "[always] defer defer+madvise madvise never\n")
            .file("sys/devices/system/clocksource/clocksource0/current_clocksource", "xen\n")
            .file("sys/devices/system/clocksource/clocksource0/available_clocksource", "xen tsc hpet acpi_pm\n")
            .file("proc/sys/kernel/perf_event_paranoid", "3\n")
            .file("proc/sys/kernel/kptr_restrict", "2\n")
            .file("proc/sys/net/core/somaxconn", "128\n")
            .file("proc/sys/net/ipv4/tcp_max_syn_backlog", "256\n")
            .file("proc/sys/vm/swappiness", "60\n")
            .file("proc/stat", "cpu  600 0 200 1000 0 0 0 200 0 0\ncpu0 300 0 100 500 0 0 0 100 0 0\n")
            .file("proc/meminfo", "MemTotal: 100 kB\nSwapTotal:     2048 kB\nSwapFree:     1024 kB\n")
            .file("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n")
            .file("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n")
            .file("proc/interrupts", "           CPU0       CPU1\n 24:    900000          3   PCI-MSI 49152-edge      virtio0-input.0\n 25:        10          0   PCI-MSI 49153-edge      virtio0-output.0\nLOC:    100     100   Local timer interrupts\n")
            .file("sys/class/net/eth0/queues/rx-0/rps_cpus", "00\n")
            .file("sys/class/net/lo/queues/rx-0/rps_cpus", "00\n")
            .file("proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 4096                 files\n")
            .file("proc/self/cgroup", "0::/kiln.slice\n")
            .file("sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
            .file("sys/fs/cgroup/kiln.slice/cpu.max", "50000 100000\n")
            .file("sys/fs/cgroup/kiln.slice/cpu.stat", "usage_usec 10\nnr_periods 50\nnr_throttled 7\nthrottled_usec 350000\n")
            .file("proc/42/limits", "Max open files            unlimited            unlimited            files\n")
            .file("proc/42/cgroup", "0::/\n")
    }

    #[test]
    fn every_bad_verdict_is_reached_with_its_evidence_and_fix() {
        let tree = bad_host();
        let checks = tree.doctor(false, Some(42)).run();
        let expect = [
            (
                "thp-enabled",
                Verdict::Warn,
                "[always] madvise never",
                "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
            ),
            (
                "thp-defrag",
                Verdict::Warn,
                "[always]",
                "echo madvise > /sys/kernel/mm/transparent_hugepage/defrag",
            ),
            (
                "clocksource",
                Verdict::Bad,
                "= xen",
                "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource",
            ),
            (
                "perf-event-paranoid",
                Verdict::Bad,
                "= 3",
                "sysctl -w kernel.perf_event_paranoid=1",
            ),
            (
                "kptr-restrict",
                Verdict::Warn,
                "= 2",
                "sysctl -w kernel.kptr_restrict=0",
            ),
            (
                "somaxconn",
                Verdict::Warn,
                "= 128",
                "sysctl -w net.core.somaxconn=4096",
            ),
            (
                "tcp-max-syn-backlog",
                Verdict::Warn,
                "= 256",
                "sysctl -w net.ipv4.tcp_max_syn_backlog=4096",
            ),
            (
                "swappiness",
                Verdict::Warn,
                "swap in use: 1024 kB",
                "sysctl -w vm.swappiness=10",
            ),
            (
                "cpu-governor",
                Verdict::Warn,
                "powersave",
                "cpupower frequency-set -g performance",
            ),
            ("irqbalance", Verdict::Warn, "not running", "irqbalance"),
            (
                "nic-interrupts",
                Verdict::Warn,
                "CPU0 has 100%",
                "smp_affinity_list",
            ),
            (
                "rps",
                Verdict::Warn,
                "eth0: 1 rx queue, rps off",
                "echo 3 > /sys/class/net/eth0/queues/rx-0/rps_cpus",
            ),
            (
                "open-files-shell",
                Verdict::Warn,
                "soft 1024, hard 4096",
                "ulimit -n 65536",
            ),
            (
                "cgroup-cpu-shell",
                Verdict::Bad,
                "nr_throttled 7",
                "quota now 0.50 CPUs",
            ),
            (
                "cpu-steal",
                Verdict::Warn,
                "steal 10.0% of the CPU time since boot (200 of 2000 ticks)",
                "non-burstable instance",
            ),
            ("open-files-target", Verdict::Ok, "soft unlimited", ""),
            ("cgroup-cpu-target", Verdict::Ok, "no CPU quota", ""),
        ];
        assert_eq!(checks.len(), expect.len());
        for (id, verdict, evidence, fix) in expect {
            let c = find(&checks, id);
            assert_eq!(c.verdict, verdict, "{c:?}");
            assert!(c.evidence.contains(evidence), "{c:?}");
            assert!(c.fix.contains(fix), "{c:?}");
            assert!(!c.why.is_empty());
        }
    }

    #[test]
    fn a_good_host_is_ok_and_root_needs_no_perf_changes() {
        let tree = Tree::new()
            .file(
                "sys/kernel/mm/transparent_hugepage/enabled",
                "always [madvise] never\n",
            )
            .file(
                "sys/kernel/mm/transparent_hugepage/defrag",
                "always defer defer+madvise [madvise] never\n",
            )
            .file(
                "sys/devices/system/clocksource/clocksource0/current_clocksource",
                "tsc\n",
            )
            .file("proc/sys/kernel/perf_event_paranoid", "2\n")
            .file("proc/sys/kernel/kptr_restrict", "1\n")
            .file("proc/sys/net/core/somaxconn", "4096\n")
            .file("proc/sys/vm/swappiness", "60\n")
            .file("proc/stat", "cpu  600 0 200 1190 0 0 0 10 0 0\n")
            .file("proc/meminfo", "SwapTotal: 0 kB\nSwapFree: 0 kB\n")
            .file(
                "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                "performance\n",
            )
            .file("proc/self/cgroup", "0::/\n")
            .file("sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
            .file("sys/fs/cgroup/cpu.max", "max 100000\n");
        let checks = tree.doctor(true, None).run();
        for id in [
            "thp-enabled",
            "thp-defrag",
            "clocksource",
            "perf-event-paranoid",
            "kptr-restrict",
            "somaxconn",
            "swappiness",
            "cpu-governor",
            "cpu-steal",
            "irqbalance",
            "cgroup-cpu-shell",
        ] {
            assert_eq!(
                find(&checks, id).verdict,
                Verdict::Ok,
                "{:?}",
                find(&checks, id)
            );
            assert!(find(&checks, id).fix.is_empty());
        }
    }

    #[test]
    fn a_cgroup_v1_quota_on_a_hybrid_host_is_found() {
        // The cpu controller on v1 (like this machine), the unified hierarchy empty.
        let tree = Tree::new()
            .file(
                "proc/self/cgroup",
                "4:memory:/\n2:cpu,cpuacct:/docker/abc\n0::/\n",
            )
            .file(
                "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us",
                "150000\n",
            )
            .file(
                "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us",
                "100000\n",
            )
            .file(
                "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.stat",
                "nr_periods 90\nnr_throttled 0\nthrottled_time 0\n",
            );
        let c = tree.doctor(false, None).run();
        let c = find(&c, "cgroup-cpu-shell");
        assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
        assert!(
            c.evidence
                .contains("cgroup v1 /docker/abc: quota 1.50 CPUs"),
            "{c:?}"
        );
        assert!(
            c.fix
                .contains("echo -1 > /sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us"),
            "{c:?}"
        );
    }

    #[test]
    fn what_cannot_be_read_is_unknown_with_the_reason() {
        let tree = Tree::new().file("proc/sys/net/core/somaxconn", "lots\n");
        let checks = tree.doctor(false, Some(7)).run();
        assert!(
            checks.iter().all(|c| c.verdict == Verdict::Unknown),
            "{checks:#?}"
        );
        assert!(find(&checks, "somaxconn").evidence.contains("not a number"));
        assert!(find(&checks, "thp-enabled").evidence.contains("not found"));
        assert!(find(&checks, "cpu-governor")
            .evidence
            .contains("sys/devices/system/cpu"));
    }

    #[test]
    fn the_live_host_gives_a_verdict_for_every_check_without_panicking() {
        let checks = Doctor::new("/", Some(std::process::id() as i32)).run();
        assert_eq!(checks.len(), 17);
        // This machine has these files; a verdict other than unknown is expected for them.
        assert_ne!(find(&checks, "somaxconn").verdict, Verdict::Unknown);
        assert_ne!(find(&checks, "cpu-steal").verdict, Verdict::Unknown);
        assert_ne!(find(&checks, "open-files-shell").verdict, Verdict::Unknown);
    }
}
