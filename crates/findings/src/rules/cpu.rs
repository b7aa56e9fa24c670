//! Rules over the target's and the host's CPU: kernel time above user time (and what the
//! kernel was doing), a CPU quota that throttled the target, interrupts on one or two cores,
//! requests that wait rather than run, and requests waiting for a thread of a pool.

use std::collections::BTreeMap;

use kiln_profile::Folded;
use kiln_record::text::safe_text;
use kiln_sample::ResourceSecond;
use serde_json::json;

use super::{duration_us, host_checks, mean, with_host_fixes, Draft, Fix, Rule, NO_PROCESS};
use crate::{RunRecord, Severity, Verdict, Window};

/// Fewer seconds of samples than this and a mean is one burst.
const MIN_SECONDS: usize = 5;

fn process_seconds(run: &RunRecord) -> Result<Vec<&ResourceSecond>, Verdict> {
    let seconds: Vec<&ResourceSecond> = run
        .resources
        .iter()
        .filter(|s| s.process.is_some())
        .collect();
    if seconds.is_empty() {
        return Err(Verdict::Unjudged(NO_PROCESS.into()));
    }
    if seconds.len() < MIN_SECONDS {
        return Err(Verdict::Unjudged(format!(
            "{} seconds of the target's samples are too few (at least {MIN_SECONDS})",
            seconds.len()
        )));
    }
    Ok(seconds)
}

/// The target's mean CPU over these seconds, in cores (user and system).
fn target_cores(seconds: &[&ResourceSecond]) -> Option<f64> {
    mean(seconds.iter().filter_map(|s| {
        let r = &s.process.as_ref()?.rates;
        Some((r.cpu_user_pct + r.cpu_system_pct) / 100.0)
    }))
}

/// The target's mean wait for a CPU over these seconds, in cores (its threads' run-queue
/// time, schedstat); None in records without it.
fn target_cpu_wait_cores(seconds: &[&ResourceSecond]) -> Option<f64> {
    mean(
        seconds
            .iter()
            .filter_map(|s| Some(s.process.as_ref()?.rates.cpu_wait_pct? / 100.0)),
    )
}

/// Whether in sample `s` the host's CPU was saturated by other work: less than
/// [`HOST_IDLE_BELOW`] idle, the target using less than half of what was busy.
pub(crate) fn saturated_by_others(s: &ResourceSecond) -> bool {
    let (Some(c), Some(p)) = (s.host_cpu, s.process.as_ref()) else {
        return false;
    };
    let cores = s.host_cpu_per_core.len() as f64;
    let idle = c.idle + c.iowait;
    let busy = (1.0 - idle / 100.0) * cores;
    let target = (p.rates.cpu_user_pct + p.rates.cpu_system_pct) / 100.0;
    cores > 0.0 && idle < HOST_IDLE_BELOW && target < 0.5 * busy
}

/// The host saturated by other work in at least this share of the load's seconds hides the
/// target's own waits and stalls in its waits for a CPU.
pub(crate) const SATURATED_SHARE: f64 = 0.5;

/// Why the target's own waits cannot be told from its waits for a CPU, when the host was
/// saturated by other work in most of the load's seconds (None otherwise).
pub(crate) fn saturated_host(run: &RunRecord) -> Option<String> {
    let from = run.seconds.iter().map(|s| s.unix_ms).min()?;
    let to = run.seconds.iter().map(|s| s.unix_ms).max()?;
    let during: Vec<&ResourceSecond> = run
        .resources
        .iter()
        .filter(|s| (from..=to).contains(&s.unix_ms))
        .collect();
    let saturated = during.iter().filter(|s| saturated_by_others(s)).count();
    (!during.is_empty() && saturated as f64 >= SATURATED_SHARE * during.len() as f64).then(|| {
        format!(
            "the host's CPU was saturated by other work in {saturated} of {} seconds (under \
             {HOST_IDLE_BELOW:.0}% idle, the target using less than half of it)",
            during.len()
        )
    })
}

fn window_of(seconds: &[&ResourceSecond]) -> Option<Window> {
    Some(Window {
        from_unix_ms: kiln_record::second_start_ms(seconds.first()?.unix_ms),
        to_unix_ms: seconds.last()?.unix_ms,
    })
}

pub const SYSTEM_ABOVE_USER: Rule = Rule {
    id: "cpu.system-above-user",
    judge: system_above_user,
};

/// What the kernel does for a process, told by the kernel frames of its samples.
struct KernelWork {
    name: &'static str,
    frames: &'static [&'static str],
    cause: &'static str,
    fix: Fix,
}

/// Memory mapped and touched per request: the kernel's page faults (the profile's category and
/// the kernel work of system time alike).
pub(crate) const PAGE_FAULTS_FIX: Fix = Fix {
    any: "keep memory instead of mapping it per request: reuse buffers and pools",
    runtimes: &[
        (
            "native",
            "native code",
            "with glibc malloc, blocks above 128 KiB are mmap'ed and returned on free (raise \
             MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_, or use jemalloc)",
        ),
        (
            "python",
            "Python",
            "large objects come from glibc malloc: raise MALLOC_MMAP_THRESHOLD_ and \
             MALLOC_TRIM_THRESHOLD_",
        ),
        ("jvm", "a JVM", "pre-touch the heap (-XX:+AlwaysPreTouch)"),
        (
            "go",
            "Go",
            "keep large buffers in a sync.Pool; GOGC or GOMEMLIMIT to return memory less eagerly",
        ),
    ],
};

/// In order: the first that matches a sample's kernel frames takes it.
const KERNEL_WORK: &[KernelWork] = &[
    KernelWork {
        name: "memory compaction",
        frames: &[
            "compact_zone",
            "isolate_migratepages",
            "compaction_alloc",
            "khugepaged",
        ],
        cause: "the kernel compacts memory to make huge pages for the process's faults",
        fix: Fix {
            any: "set /sys/kernel/mm/transparent_hugepage/defrag to defer+madvise (or \
                  madvise), or transparent huge pages to madvise",
            runtimes: &[(
                "jvm",
                "a JVM",
                "pre-touch the heap at start (-XX:+AlwaysPreTouch)",
            )],
        },
    },
    KernelWork {
        name: "page faults",
        frames: &[
            "page_fault",
            "handle_mm_fault",
            "do_anonymous_page",
            "clear_page",
            "do_huge_pmd_anonymous_page",
            "__do_munmap",
            "unmap_page_range",
            "zap_pte_range",
        ],
        cause: "memory is mapped, touched for the first time and unmapped again, over and \
                over: each new page costs a fault and zeroing",
        fix: PAGE_FAULTS_FIX,
    },
    KernelWork {
        name: "lock waits (futex)",
        frames: &["futex_"],
        cause: "threads go to the kernel to wait for and wake each other on contended locks",
        fix: Fix::any(
            "find the contended lock (the lock findings, a thread dump); hold it shorter, \
              shard it, or use a lock-free structure",
        ),
    },
    KernelWork {
        name: "clock reads",
        frames: &[
            "clock_gettime",
            "gettimeofday",
            "read_hpet",
            "pvclock_clocksource_read",
        ],
        cause: "time reads enter the kernel instead of staying in the vDSO",
        fix: Fix::any(
            "check /sys/devices/system/clocksource/clocksource0/current_clocksource (tsc \
              keeps reads in user space); read the clock less often in hot loops",
        ),
    },
    KernelWork {
        name: "the network stack",
        frames: &[
            "tcp_",
            "inet_",
            "ip_",
            "__netif",
            "net_rx",
            "sock_",
            "skb_",
            "__dev_queue_xmit",
        ],
        cause: "the kernel sends and receives many small packets for the process",
        fix: Fix::any(
            "write responses in fewer, larger writes; keep connections alive; batch small \
              messages",
        ),
    },
    KernelWork {
        name: "file I/O",
        frames: &[
            "vfs_read",
            "vfs_write",
            "ext4_",
            "xfs_",
            "filemap_",
            "do_fsync",
        ],
        cause: "the process reads and writes files in small pieces or syncs them often",
        fix: Fix::any("buffer writes, avoid fsync per request, cache what is read"),
    },
];

/// Kernel samples by the work they do (leaf in the kernel), with the top kernel frames.
fn kernel_work(folded: &Folded) -> (u64, Vec<(&'static KernelWork, u64)>) {
    let mut kernel_samples = 0u64;
    let mut by_work: Vec<(&KernelWork, u64)> = KERNEL_WORK.iter().map(|w| (w, 0)).collect();
    for (stack, count) in folded.lines() {
        if !stack
            .rsplit(';')
            .next()
            .is_some_and(kiln_profile::is_kernel_frame)
        {
            continue;
        }
        kernel_samples += count;
        let kernel_frames: Vec<&str> = stack
            .split(';')
            .filter(|f| kiln_profile::is_kernel_frame(f))
            .collect();
        if let Some(slot) = by_work.iter_mut().find(|(w, _)| {
            w.frames
                .iter()
                .any(|p| kernel_frames.iter().any(|f| f.contains(p)))
        }) {
            slot.1 += count;
        }
    }
    by_work.retain(|(_, n)| *n > 0);
    by_work.sort_by_key(|w| std::cmp::Reverse(w.1));
    (kernel_samples, by_work)
}

/// The target spends more of its CPU in the kernel than in its own code.
fn system_above_user(run: &RunRecord) -> Verdict {
    let seconds = match process_seconds(run) {
        Ok(s) => s,
        Err(v) => return v,
    };
    let rates = || {
        seconds
            .iter()
            .filter_map(|s| s.process.as_ref())
            .map(|p| &p.rates)
    };
    let user: f64 = rates()
        .map(|r| r.cpu_user_pct)
        .filter(|v| v.is_finite())
        .sum();
    let system: f64 = rates()
        .map(|r| r.cpu_system_pct)
        .filter(|v| v.is_finite())
        .sum();
    let n = seconds.len() as f64;
    // a nearly idle process's split says nothing about where its time goes
    if (user + system) / n < 10.0 || system <= user {
        return Verdict::Clear;
    }
    let share = system / (user + system);
    let above = rates()
        .filter(|r| r.cpu_system_pct > r.cpu_user_pct)
        .count();
    let mut evidence = vec![
        format!(
            "the target used {:.0}% of a core in the kernel and {:.0}% in its own code \
             (mean over {} s): {:.0}% of its CPU is system time",
            system / n,
            user / n,
            seconds.len(),
            100.0 * share
        ),
        format!("system above user in {above} of {} seconds", seconds.len()),
    ];
    let kernel = |f: fn(&kiln_sample::KernelSecond) -> Option<u64>| -> u64 {
        seconds
            .iter()
            .filter_map(|s| s.kernel.as_ref().and_then(f))
            .fold(0u64, u64::saturating_add)
    };
    let (thp, compact) = (kernel(|k| k.thp_fault_alloc), kernel(|k| k.compact_stall));
    if thp > 0 || compact > 0 {
        evidence.push(format!(
            "host: {thp} huge-page faults, {compact} compaction stalls"
        ));
    }
    let mut data = json!({"user_pct_mean": user / n, "system_pct_mean": system / n,
        "seconds": seconds.len(), "thp_fault_alloc": thp, "compact_stall": compact});
    let (cause, fix) = match &run.profile {
        Some(p) => {
            let (kernel_samples, work) = kernel_work(&p.folded);
            let total = p.folded.total().max(1) as f64;
            for (w, count) in work.iter().take(3) {
                evidence.push(format!(
                    "{:.0}% of the profile's samples in the kernel doing {}",
                    100.0 * *count as f64 / total,
                    w.name
                ));
            }
            data["kernel_samples"] = json!(kernel_samples);
            data["kernel_work"] = work
                .iter()
                .map(|(w, n)| json!({"work": w.name, "samples": n}))
                .collect();
            match work.first() {
                Some((w, _)) => (w.cause.to_string(), w.fix.for_run(run)),
                None => (
                    "the profile's kernel frames do not point at one kind of work".into(),
                    "read the kernel frames (marked _[k]) in the flame graph".into(),
                ),
            }
        }
        None => (
            "unknown without a profile: page faults, lock waits, system calls or the network \
             stack"
                .into(),
            "run again with --profile: the kernel frames say which".into(),
        ),
    };
    Verdict::Found(vec![Draft {
        rule: SYSTEM_ABOVE_USER.id,
        key: "",
        severity: if share >= 2.0 / 3.0 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "The target spends {:.0}% of its CPU in the kernel (system time above user time)",
            100.0 * share
        ),
        evidence,
        window: window_of(&seconds),
        cause,
        fix,
        impact: (share, "the target's CPU"),
        data,
    }
    .finish()])
}

pub const CGROUP_THROTTLED: Rule = Rule {
    id: "cpu.cgroup-throttled",
    judge: cgroup_throttled,
};

/// The kernel's default CFS period: 10 periods a second.
const PERIODS_PER_SECOND: f64 = 10.0;

/// The target's control group ran out of its CPU quota in many periods.
fn cgroup_throttled(run: &RunRecord) -> Verdict {
    let seconds = match process_seconds(run) {
        Ok(s) => s,
        Err(v) => return v,
    };
    let groups: Vec<_> = seconds
        .iter()
        .filter_map(|s| s.process.as_ref()?.cgroup.as_ref())
        .collect();
    let Some(quota) = groups.iter().rev().find_map(|g| g.quota_cpus) else {
        return Verdict::Clear; // no quota, nothing to throttle
    };
    let throttled_periods = groups
        .iter()
        .filter_map(|g| g.throttled_periods)
        .fold(0u64, u64::saturating_add);
    let throttled_ms: f64 = groups
        .iter()
        .filter_map(|g| g.throttled_ms)
        .filter(|v| v.is_finite())
        .sum();
    let share = throttled_periods as f64 / (PERIODS_PER_SECOND * groups.len().max(1) as f64);
    if share < 0.05 {
        return Verdict::Clear;
    }
    let throttled_seconds = groups
        .iter()
        .filter(|g| g.throttled_periods.unwrap_or(0) > 0)
        .count();
    let used = mean(groups.iter().filter_map(|g| g.cpu_pct));
    let mut evidence = vec![
        format!(
            "CPU quota {quota:.2} CPUs; throttled in {throttled_periods} of about {:.0} \
             100 ms periods ({:.0}%)",
            PERIODS_PER_SECOND * groups.len() as f64,
            100.0 * share
        ),
        format!(
            "throttled in {throttled_seconds} of {} seconds, {throttled_ms:.0} ms in all",
            groups.len()
        ),
    ];
    if let Some(used) = used {
        evidence.push(format!("the group used {used:.0}% of a core on average"));
    }
    let (host_evidence, host_fixes) = host_checks(run, &["cgroup-cpu-target"]);
    evidence.extend(host_evidence);
    Verdict::Found(vec![Draft {
        rule: CGROUP_THROTTLED.id,
        key: "",
        severity: if share >= 0.25 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "The CPU quota throttled the target in {:.0}% of scheduling periods",
            100.0 * share
        ),
        evidence,
        window: window_of(&seconds),
        cause: "the target's threads use up the control group's CPU quota early in a 100 ms \
                period and wait, runnable, for the next one: latency grows in steps of up to \
                100 ms"
            .into(),
        fix: with_host_fixes(
            host_fixes,
            format!(
                "raise or remove the CPU limit (cpu.max; resources.limits.cpu in Kubernetes); \
                 size thread pools to the quota ({quota:.2} CPUs{}); allow bursts with \
                 cpu.max.burst",
                match run.runtime.as_ref().map(|r| r.info.runtime.as_str()) {
                    Some("go") => ": GOMAXPROCS",
                    Some("jvm") => ": -XX:ActiveProcessorCount",
                    Some(_) => "",
                    None => ": GOMAXPROCS for Go, -XX:ActiveProcessorCount for a JVM",
                }
            ),
        ),
        impact: (share, "scheduling periods"),
        data: json!({"quota_cpus": quota, "throttled_periods": throttled_periods,
            "throttled_ms": throttled_ms, "seconds": groups.len()}),
    }
    .finish()])
}

pub const IRQ_HOTSPOT: Rule = Rule {
    id: "cpu.irq-hotspot",
    judge: irq_hotspot,
};

/// One or two cores busy with interrupts while the others have room.
fn irq_hotspot(run: &RunRecord) -> Verdict {
    let seconds: Vec<&ResourceSecond> = run
        .resources
        .iter()
        .filter(|s| s.host_cpu_per_core.len() >= 2)
        .collect();
    if seconds.len() < MIN_SECONDS {
        return Verdict::Unjudged(if run.resources.is_empty() {
            "no host samples (run with --watch-port PORT or --watch-pid PID)".into()
        } else {
            "too few samples of each core's CPU".into()
        });
    }
    // per core: mean busy and mean interrupt (hard + soft) percent
    let mut cores: std::collections::BTreeMap<u32, (f64, f64, usize)> = Default::default();
    for s in &seconds {
        for (core, split) in &s.host_cpu_per_core {
            let busy = 100.0 - split.idle - split.iowait;
            let irq = split.irq + split.softirq;
            if busy.is_finite() && irq.is_finite() {
                let e = cores.entry(*core).or_default();
                *e = (e.0 + busy, e.1 + irq, e.2 + 1);
            }
        }
    }
    let cores: Vec<(u32, f64, f64)> = cores
        .into_iter()
        .filter(|(_, (_, _, n))| *n > 0)
        .map(|(c, (b, i, n))| (c, b / n as f64, i / n as f64))
        .collect();
    let Some(&(hot, hot_busy, hot_irq)) = cores.iter().max_by(|a, b| a.2.total_cmp(&b.2)) else {
        return Verdict::Clear;
    };
    let others = mean(cores.iter().filter(|c| c.0 != hot).map(|c| c.1)).unwrap_or(100.0);
    if !(hot_irq >= 30.0 && hot_busy >= 90.0 && others < 60.0) {
        return Verdict::Clear;
    }
    let mut evidence = vec![
        format!("CPU {hot}: {hot_busy:.0}% busy, {hot_irq:.0}% of it in interrupts"),
        format!("the other cores: {others:.0}% busy on average"),
    ];
    let net_rx: Vec<u64> =
        seconds
            .iter()
            .filter_map(|s| s.kernel.as_ref())
            .fold(Vec::new(), |mut sums, k| {
                if sums.len() < k.net_rx_per_cpu.len() {
                    sums.resize(k.net_rx_per_cpu.len(), 0);
                }
                for (sum, n) in sums.iter_mut().zip(&k.net_rx_per_cpu) {
                    *sum = sum.saturating_add(*n);
                }
                sums
            });
    let all_rx = net_rx.iter().fold(0u64, |a, n| a.saturating_add(*n));
    if let Some(on_hot) = net_rx.get(hot as usize).filter(|_| all_rx > 0) {
        evidence.push(format!(
            "{:.0}% of network receive softirqs ran on CPU {hot}",
            100.0 * *on_hot as f64 / all_rx as f64
        ));
    }
    let (host_evidence, host_fixes) = host_checks(run, &["irqbalance", "nic-interrupts", "rps"]);
    evidence.extend(host_evidence);
    Verdict::Found(vec![Draft {
        rule: IRQ_HOTSPOT.id,
        key: "",
        severity: Severity::High,
        title: format!("Interrupts saturate CPU {hot} while the other cores have room"),
        evidence,
        window: window_of(&seconds),
        cause: "the network card's interrupts and receive processing all land on one core \
                (one receive queue, or all queues' interrupts pinned together)"
            .into(),
        fix: with_host_fixes(
            host_fixes,
            "spread receive processing: more receive queues (RSS, ethtool -L), RPS/RFS \
             (/sys/class/net/IFACE/queues/rx-*/rps_cpus), irqbalance or IRQ affinity \
             (/proc/irq/N/smp_affinity_list)"
                .into(),
        ),
        impact: (hot_irq / 100.0, "one core"),
        data: json!({"cpu": hot, "busy_pct": hot_busy, "irq_pct": hot_irq,
            "others_busy_pct": others}),
    }
    .finish()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{profiled_run, resource_run};
    use kiln_sample::{CgroupSecond, CpuSplit, ProcessSecond, TaskRates};

    fn process(user: f64, system: f64) -> ResourceSecond {
        ResourceSecond {
            process: Some(ProcessSecond {
                rates: TaskRates {
                    cpu_user_pct: user,
                    cpu_system_pct: system,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A host second of a 2-core VM with this share of steal (and a third of it idle).
    fn stolen(steal: f64) -> ResourceSecond {
        let split = CpuSplit {
            user: 60.0 - steal,
            idle: 40.0,
            steal,
            ..Default::default()
        };
        ResourceSecond {
            host_cpu: Some(split),
            host_cpu_per_core: vec![(0, split), (1, split)],
            ..process(40.0, 10.0)
        }
    }

    /// 28% steal with a third of the VM idle is found, with its share in cores; 3% is not,
    /// nor a run whose host CPU was not sampled.
    #[test]
    fn a_hypervisor_taking_the_vms_cpu_is_found_and_a_quiet_one_is_not() {
        let mut seconds = vec![stolen(20.0); 10];
        seconds[3] = stolen(60.0);
        seconds[7] = stolen(40.0);
        let Verdict::Found(found) = hypervisor_steal(&resource_run(seconds)) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert_eq!(
            f.title,
            "The hypervisor took 26% of this VM's CPU (steal): 0.52 of its 2 cores"
        );
        assert!(
            f.evidence[0].starts_with(
                "steal was 26% of the CPU time over 10 s, 60% at worst; 10 s at 20% or more"
            ),
            "{:?}",
            f.evidence
        );
        assert_eq!(f.about, crate::About::Host);
        assert!((f.impact.share - 0.26).abs() < 1e-9);
        assert!(matches!(
            hypervisor_steal(&resource_run(vec![stolen(3.0); 10])),
            Verdict::Clear
        ));
        assert!(matches!(
            hypervisor_steal(&resource_run(vec![process(40.0, 10.0); 10])),
            Verdict::Unjudged(_)
        ));
    }

    #[test]
    fn system_above_user_fires_with_the_kernel_work_from_the_profile() {
        let mut run = resource_run(vec![process(30.0, 70.0); 10]);
        let profile = profiled_run(
            "app;main;handle;asm_exc_page_fault_[k];exc_page_fault_[k];handle_mm_fault_[k];clear_page_erms_[k] 60\n\
             app;main;handle;entry_SYSCALL_64_[k];__x64_sys_futex_[k];futex_wait_[k] 10\n\
             app;main;handle;work 30\n",
        );
        run.profile = profile.profile;
        let Verdict::Found(found) = system_above_user(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert_eq!(f.severity, Severity::High, "70% system");
        assert!(
            f.title.contains("70% of its CPU in the kernel"),
            "{}",
            f.title
        );
        assert!(
            f.evidence[2].contains("60% of the profile's samples in the kernel doing page faults"),
            "{f:?}"
        );
        assert!(
            f.cause.contains("touched for the first time"),
            "{}",
            f.cause
        );
        assert!((f.impact.share - 0.7).abs() < 1e-9);
    }

    #[test]
    fn system_above_user_stays_quiet_for_user_bound_or_idle_targets() {
        assert!(matches!(
            system_above_user(&resource_run(vec![process(80.0, 20.0); 10])),
            Verdict::Clear
        ));
        // 2% of a core: its split means nothing
        assert!(matches!(
            system_above_user(&resource_run(vec![process(0.5, 1.5); 10])),
            Verdict::Clear
        ));
        assert!(matches!(
            system_above_user(&resource_run(vec![process(10.0, 90.0); 3])),
            Verdict::Unjudged(r) if r.contains("too few")
        ));
        assert!(matches!(
            system_above_user(&resource_run(vec![ResourceSecond::default(); 10])),
            Verdict::Unjudged(r) if r.contains("--watch-port")
        ));
    }

    fn throttled(periods: u64) -> ResourceSecond {
        let mut s = process(100.0, 5.0);
        s.process.as_mut().unwrap().cgroup = Some(CgroupSecond {
            quota_cpus: Some(1.0),
            throttled_periods: Some(periods),
            throttled_ms: Some(periods as f64 * 20.0),
            cpu_pct: Some(100.0),
            ..Default::default()
        });
        s
    }

    #[test]
    fn a_throttled_quota_fires_and_an_unthrottled_one_does_not() {
        let Verdict::Found(found) = cgroup_throttled(&resource_run(vec![throttled(4); 10])) else {
            panic!("no finding");
        };
        assert!(
            found[0].title.contains("in 40% of scheduling periods"),
            "{:?}",
            found[0]
        );
        assert_eq!(found[0].severity, Severity::High);
        assert!(matches!(
            cgroup_throttled(&resource_run(vec![throttled(0); 10])),
            Verdict::Clear
        ));
        // no quota at all
        assert!(matches!(
            cgroup_throttled(&resource_run(vec![process(100.0, 5.0); 10])),
            Verdict::Clear
        ));
    }

    fn cores(splits: &[(f64, f64)]) -> ResourceSecond {
        ResourceSecond {
            host_cpu_per_core: splits
                .iter()
                .enumerate()
                .map(|(i, (idle, softirq))| {
                    (
                        i as u32,
                        CpuSplit {
                            idle: *idle,
                            softirq: *softirq,
                            user: 100.0 - idle - softirq,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn one_core_hot_with_interrupts_fires_and_spread_interrupts_do_not() {
        let hot = resource_run(vec![
            cores(&[
                (2.0, 60.0),
                (70.0, 1.0),
                (75.0, 1.0),
                (80.0, 0.0)
            ]);
            10
        ]);
        let Verdict::Found(found) = irq_hotspot(&hot) else {
            panic!("no finding");
        };
        assert!(found[0].title.contains("CPU 0"), "{:?}", found[0]);
        assert!(
            found[0].fix.starts_with("spread receive"),
            "{}",
            found[0].fix
        );
        // the host checks taken at the run's start name this host's cause and command
        let mut with_doctor = hot.clone();
        let check = |id: &'static str, verdict, evidence: &str, fix: &str| kiln_sample::Check {
            id: id.into(),
            verdict,
            evidence: evidence.into(),
            why: "".into(),
            fix: fix.into(),
        };
        with_doctor.doctor = Some(kiln_sample::DoctorRecord {
            pid: None,
            checks: vec![
                check(
                    "rps",
                    kiln_sample::Verdict::Warn,
                    "eth0: 1 rx queue, rps off",
                    "echo f > /sys/class/net/eth0/queues/rx-0/rps_cpus",
                ),
                check("irqbalance", kiln_sample::Verdict::Ok, "running", ""),
                check(
                    "swappiness",
                    kiln_sample::Verdict::Bad,
                    "vm.swappiness = 100",
                    "sysctl vm.swappiness=1",
                ),
            ],
        });
        let Verdict::Found(cited) = irq_hotspot(&with_doctor) else {
            panic!("no finding");
        };
        let f = &cited[0];
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("host check rps (warn)") && e.contains("rps off")),
            "{:?}",
            f.evidence
        );
        // only the checks about interrupts: not the ok one, not swappiness
        assert_eq!(
            f.evidence
                .iter()
                .filter(|e| e.starts_with("host check"))
                .count(),
            1
        );
        assert!(
            f.fix
                .starts_with("on this host: echo f > /sys/class/net/eth0/queues/rx-0/rps_cpus; "),
            "{}",
            f.fix
        );
        assert_eq!(f.id, found[0].id, "the same problem keeps its id");
        let spread = resource_run(vec![
            cores(&[
                (50.0, 15.0),
                (50.0, 15.0),
                (55.0, 14.0),
                (50.0, 15.0)
            ]);
            10
        ]);
        assert!(matches!(irq_hotspot(&spread), Verdict::Clear));
        // all cores busy: the host is saturated, not one core
        let busy = resource_run(vec![
            cores(&[
                (2.0, 40.0),
                (3.0, 5.0),
                (2.0, 5.0),
                (1.0, 5.0)
            ]);
            10
        ]);
        assert!(matches!(irq_hotspot(&busy), Verdict::Clear));
    }
}

pub const SATURATED: Rule = Rule {
    id: "cpu.saturated",
    judge: saturated,
};

pub const HOST_BUSY: Rule = Rule {
    id: "cpu.host-busy",
    judge: host_busy,
};

/// The host is busy when less than this share of its CPU is idle.
pub(crate) const HOST_IDLE_BELOW: f64 = 10.0;
/// A quota is used up at this share of it.
const QUOTA_USED: f64 = 0.85;

/// What the measured seconds say about CPU: the target's cores, the host's, its idle share
/// and the target's quota.
struct CpuUse {
    target_cores: f64,
    host_cores: f64,
    host_idle_pct: Option<f64>,
    quota: Option<f64>,
    seconds: usize,
}

fn cpu_use(run: &RunRecord) -> Result<(CpuUse, Option<Window>), Verdict> {
    let seconds = process_seconds(run)?;
    let target_cores = target_cores(&seconds).unwrap_or(0.0);
    let host_cores = seconds
        .iter()
        .map(|s| s.host_cpu_per_core.len())
        .max()
        .unwrap_or(0) as f64;
    let host_idle_pct = mean(
        seconds
            .iter()
            .filter_map(|s| s.host_cpu.map(|c| c.idle + c.iowait)),
    );
    let quota = seconds
        .iter()
        .rev()
        .find_map(|s| s.process.as_ref()?.cgroup.as_ref()?.quota_cpus);
    Ok((
        CpuUse {
            target_cores,
            host_cores,
            host_idle_pct,
            quota,
            seconds: seconds.len(),
        },
        window_of(&seconds),
    ))
}

/// The target is CPU-bound: it used up its quota, or it is what keeps the host's cores busy.
fn saturated(run: &RunRecord) -> Verdict {
    let (u, window) = match cpu_use(run) {
        Ok(u) => u,
        Err(v) => return v,
    };
    let requests = run.measured().map(|m| (m.totals.requests, m.throughput()));
    let host_busy = u.host_idle_pct.is_some_and(|i| i < HOST_IDLE_BELOW);
    let (limit, limit_text) = match u.quota {
        Some(q) if q < u.host_cores || u.host_cores == 0.0 => {
            (q, format!("its CPU quota of {q:.2} CPUs"))
        }
        _ => (
            u.host_cores,
            format!("the host's {:.0} cores", u.host_cores),
        ),
    };
    let quota_used = u.quota.is_some() && limit > 0.0 && u.target_cores >= QUOTA_USED * limit;
    // on a busy host the target is the bound when it takes most of what is busy
    let busy = 1.0 - u.host_idle_pct.unwrap_or(100.0) / 100.0;
    let takes_most = u.host_cores > 0.0 && u.target_cores >= 0.5 * busy * u.host_cores;
    if !(quota_used || (host_busy && takes_most)) {
        return Verdict::Clear;
    }
    let mut evidence = vec![format!(
        "the target used {:.2} cores of {limit_text} over {} seconds",
        u.target_cores, u.seconds
    )];
    if let Some(idle) = u.host_idle_pct {
        evidence.push(format!("the host's CPU was {idle:.0}% idle"));
    }
    let mut data = json!({"target_cores": u.target_cores, "limit_cores": limit,
        "host_cores": u.host_cores, "host_idle_pct": u.host_idle_pct, "quota_cpus": u.quota});
    if let Some((n, rps)) = requests.filter(|(n, _)| *n > 0) {
        let cpu_per_request_us = u.target_cores * 1e6 / rps.max(1e-9);
        evidence.push(format!(
            "{} of CPU per request at {rps:.0} requests/s: {limit_text} serve about {:.0} \
             requests/s at most",
            duration_us(cpu_per_request_us as u64),
            limit * 1e6 / cpu_per_request_us.max(1.0)
        ));
        data["cpu_per_request_us"] = json!(cpu_per_request_us);
        data["requests"] = json!(n);
    }
    if let Some(profile) = &run.profile {
        for f in profile.folded.top_self(3) {
            evidence.push(format!(
                "{:5.1}%  of the CPU in {}",
                f.self_pct,
                safe_text(&f.name)
            ));
        }
    }
    Verdict::Found(vec![Draft {
        rule: SATURATED.id,
        key: "",
        severity: Severity::Medium,
        title: format!(
            "The target is CPU-bound: it used {:.2} cores of {limit_text}",
            u.target_cores
        ),
        evidence,
        window,
        cause: "every request costs CPU and the target has no more of it: throughput stops \
                rising and latency grows with the load"
            .into(),
        fix: "spend less CPU per request (the profile's hottest functions and the other CPU \
              findings say where), or give it more cores (a larger quota, more replicas)"
            .into(),
        impact: (
            (u.target_cores / limit.max(1e-9)).min(1.0),
            "the target's CPU",
        ),
        data,
    }
    .finish()])
}

/// The host's CPU is busy with other work than the target's: the target competes for it.
fn host_busy(run: &RunRecord) -> Verdict {
    let (u, window) = match cpu_use(run) {
        Ok(u) => u,
        Err(v) => return v,
    };
    let (Some(idle), true) = (u.host_idle_pct, u.host_cores > 0.0) else {
        return Verdict::Unjudged("the host's CPU was not sampled".into());
    };
    let busy_cores = (1.0 - idle / 100.0) * u.host_cores;
    let others = (busy_cores - u.target_cores).max(0.0);
    // judged second by second, as the rules that stand down on a saturated host judge it: one
    // reading, so "saturated" here and "not judged: saturated" there never disagree (the
    // run's means could, a half-saturated run's mean idle being above the bar)
    let Some(saturated) = saturated_host(run) else {
        return Verdict::Clear;
    };
    let kiln = run.kiln_cores();
    let mut evidence = vec![
        saturated,
        format!(
            "over the run the host's {:.0} cores were {:.0}% busy: {busy_cores:.2} cores, the \
             target's {:.2} of them",
            u.host_cores,
            100.0 - idle,
            u.target_cores
        ),
        format!("{others:.2} cores went to other processes"),
    ];
    if let Some(k) = kiln {
        evidence.push(format!("kiln's own load generation used {k:.2} of them"));
    }
    // perf is a process of its own: without this line its share reads as a neighbour's
    let perf = run.profile.as_ref().and_then(|p| p.record.perf_cpu_pct);
    if let Some(pct) = perf.filter(|pct| *pct > 0.0) {
        evidence.push(format!(
            "kiln's profiler (perf record) used {:.2} of them",
            pct / 100.0
        ));
    }
    Verdict::Found(vec![Draft {
        rule: HOST_BUSY.id,
        key: "",
        severity: Severity::Medium,
        title: format!(
            "The host's CPU is saturated by other work: the target used {:.2} of {busy_cores:.2} \
             busy cores",
            u.target_cores
        ),
        evidence,
        window,
        cause: "other processes (a neighbour, kiln itself on the same host, a build) keep the \
                cores busy: the target waits for a CPU and its figures are worse than its own"
            .into(),
        fix: "run the load from another host (or pin kiln and the target to separate cores \
              with taskset); stop the neighbour; kiln doctor checks the host"
            .into(),
        impact: ((others / u.host_cores).min(1.0), "the host's CPU"),
        data: json!({"host_cores": u.host_cores, "host_idle_pct": idle,
            "target_cores": u.target_cores, "other_cores": others, "kiln_cores": kiln}),
    }
    .finish()])
}

pub const HYPERVISOR_STEAL: Rule = Rule {
    id: "cpu.hypervisor-steal",
    judge: hypervisor_steal,
};

/// The hypervisor took at least this share of the VM's CPU over the run.
const STEAL_SHARE: f64 = 0.10;
/// A second with at least this share of steal is one of the spells counted in the evidence.
const STEAL_SPELL: f64 = 0.20;

/// A VM whose hypervisor gives its CPUs to other guests (steal time): the target and kiln ran
/// on less than the cores the VM shows. No other rule sees it: a stolen CPU is not idle, so a
/// VM can wait for its CPUs with a third of them idle, and no process of its own is the
/// cause (a demo run with 28% steal and 25% idle queued the shop for seconds).
fn hypervisor_steal(run: &RunRecord) -> Verdict {
    let seconds: Vec<(&ResourceSecond, f64)> = (run.resources.iter())
        .filter_map(|s| Some((s, s.host_cpu?.steal / 100.0)))
        .collect();
    if seconds.len() < MIN_SECONDS {
        return Verdict::Unjudged("the host's CPU was not sampled".into());
    }
    let Some((mean, cores)) = steal_share(run) else {
        return Verdict::Clear;
    };
    let shares: Vec<f64> = seconds.iter().map(|(_, steal)| *steal).collect();
    let spells = shares.iter().filter(|s| **s >= STEAL_SPELL).count();
    let worst = shares.iter().copied().fold(0.0, f64::max);
    let refs: Vec<&ResourceSecond> = seconds.iter().map(|(s, _)| *s).collect();
    Verdict::Found(vec![Draft {
        rule: HYPERVISOR_STEAL.id,
        key: "",
        severity: Severity::Medium,
        title: {
            let mut title = steal_title(mean, cores);
            title[..1].make_ascii_uppercase();
            title
        },
        evidence: vec![
            format!(
                "steal was {:.0}% of the CPU time over {} s, {:.0}% at worst; {spells} s at \
                 {:.0}% or more",
                100.0 * mean,
                seconds.len(),
                100.0 * worst,
                100.0 * STEAL_SPELL
            ),
            "the target and kiln ran on the cores left: its latency and CPU per request are \
             worse than the same VM gives alone, and differ from run to run"
                .into(),
        ],
        window: window_of(&refs),
        cause: "this VM shares its physical CPUs with other guests (a busy cloud host, a \
                burstable instance out of credits): while another guest runs, this one's threads \
                wait, and a wake-up can wait a whole host time slice (milliseconds)"
            .into(),
        fix: "compare runs taken on the same VM in quiet spells only (kiln doctor shows the steal \
              before a run), or run on dedicated, non-burstable instances"
            .into(),
        impact: (mean, "the host's CPU"),
        data: json!({"steal_share": mean, "steal_worst": worst, "spell_seconds": spells,
            "seconds": seconds.len(), "host_cores": cores}),
    }
    .finish()])
}

/// The hypervisor's mean share of the VM's CPU over the run and the VM's cores, when it took
/// at least [`STEAL_SHARE`] (None otherwise, or without enough host seconds).
fn steal_share(run: &RunRecord) -> Option<(f64, f64)> {
    let shares: Vec<f64> = (run.resources.iter())
        .filter_map(|s| Some(s.host_cpu?.steal / 100.0))
        .collect();
    if shares.len() < MIN_SECONDS {
        return None;
    }
    let cores = (run.resources.iter())
        .map(|s| s.host_cpu_per_core.len())
        .max()
        .unwrap_or(0) as f64;
    let mean = mean(shares)?;
    (mean >= STEAL_SHARE && cores > 0.0).then_some((mean, cores))
}

/// Why the target's own waits cannot be told from the hypervisor's, when it took at least
/// [`STEAL_SHARE`] of the VM's CPU over the run: the finding's title.
pub(crate) fn stolen_vm(run: &RunRecord) -> Option<String> {
    let (mean, cores) = steal_share(run)?;
    Some(steal_title(mean, cores))
}

fn steal_title(mean: f64, cores: f64) -> String {
    format!(
        "the hypervisor took {:.0}% of this VM's CPU (steal): {:.2} of its {cores:.0} cores",
        100.0 * mean,
        mean * cores
    )
}

pub const POOL_TOO_SMALL: Rule = Rule {
    id: "threads.pool-too-small",
    judge: pool_too_small,
};

/// Requests sit unread in the target's connections while its CPU has room: fewer threads
/// serve requests than the load offers at once.
fn pool_too_small(run: &RunRecord) -> Verdict {
    let seconds = match process_seconds(run) {
        Ok(s) => s,
        Err(v) => return v,
    };
    let sampled: Vec<(&ResourceSecond, &kiln_sample::SocketSummary)> = seconds
        .iter()
        .filter_map(|s| Some((*s, s.process.as_ref()?.sockets.as_ref()?)))
        .collect();
    if sampled.len() < MIN_SECONDS {
        return Verdict::Unjudged("the target's sockets were not sampled".into());
    }
    let unread = mean(sampled.iter().map(|(_, k)| k.unread as f64)).unwrap_or(0.0);
    let with_unread = sampled.iter().filter(|(_, k)| k.unread > 0).count();
    if unread < 1.0 || with_unread * 2 < sampled.len() {
        return Verdict::Clear;
    }
    let connections = mean(
        sampled
            .iter()
            .map(|(_, k)| k.by_state.get("ESTAB").copied().unwrap_or(0) as f64),
    )
    .unwrap_or(0.0);
    let Ok((
        CpuUse {
            target_cores: cores,
            host_cores,
            ..
        },
        _,
    )) = cpu_use(run)
    else {
        return Verdict::Clear;
    };
    // threads busy on the CPU: more of them would not help (the CPU findings say where it goes)
    if host_cores > 0.0 && cores >= 0.8 * host_cores {
        return Verdict::Clear;
    }
    let mut evidence = vec![
        format!(
            "{unread:.1} of the target's {connections:.0} connections on average held a request \
             it had not read yet (Recv-Q > 0), in {with_unread} of {} seconds",
            sampled.len()
        ),
        if host_cores > 0.0 {
            format!("the target used {cores:.2} of {host_cores:.0} cores: its CPU had room")
        } else {
            format!("the target used {cores:.2} cores")
        },
    ];
    let states: BTreeMap<String, f64> = seconds
        .iter()
        .filter_map(|s| s.process.as_ref())
        .flat_map(|p| p.thread_states.iter())
        .fold(BTreeMap::new(), |mut m, (state, n)| {
            *m.entry(state.clone()).or_default() += *n as f64 / seconds.len() as f64;
            m
        });
    if !states.is_empty() {
        let text: Vec<String> = states.iter().map(|(s, n)| format!("{n:.0} {s}")).collect();
        evidence.push(format!("threads by state on average: {}", text.join(", ")));
    }
    let share = (unread / connections.max(1.0)).min(1.0);
    Verdict::Found(vec![Draft {
        rule: POOL_TOO_SMALL.id,
        key: "",
        severity: if share >= 0.5 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "Requests wait for a free thread: {unread:.1} connections on average held a request \
             the target had not read"
        ),
        evidence,
        window: window_of(&seconds),
        cause: "the target serves fewer requests at once than the load offers (a worker pool \
                smaller than the concurrency): the others wait unread in their connections, \
                while the CPU has room"
            .into(),
        fix: "size the pool to the offered concurrency (Tomcat server.tomcat.threads.max, \
              Jetty/Undertow worker threads, gunicorn --workers/--threads, an executor's \
              maximum), or make each request hold its thread less (the off-CPU profile shows \
              where the threads wait)"
            .into(),
        impact: (share, "connections"),
        data: json!({"unread_mean": unread, "connections_mean": connections,
            "seconds_with_unread": with_unread, "seconds": sampled.len(), "cores": cores}),
    }
    .finish()])
}

pub const WAITING_NOT_RUNNING: Rule = Rule {
    id: "cpu.waiting-not-running",
    judge: waiting_not_running,
};

/// A request that takes at least this many times its CPU is mostly waiting.
const WAITING_FACTOR: f64 = 10.0;
/// On a host saturated by other work, requests still wait for something of their own when
/// the target's threads waited for a CPU less than this share of a request's time off it.
const MOSTLY_OWN_WAIT: f64 = 0.5;

/// Requests spend most of their time off the target's CPU: the target is not CPU-bound; it
/// waits on something else (or, on a busy host, for a CPU: the evidence says which).
fn waiting_not_running(run: &RunRecord) -> Verdict {
    let seconds = match process_seconds(run) {
        Ok(s) => s,
        Err(v) => return v,
    };
    let Some(total) = run.measured() else {
        return Verdict::Unjudged("the record holds no measured load".into());
    };
    let throughput = total.throughput();
    let cores = target_cores(&seconds);
    let host_idle = mean(seconds.iter().filter_map(|s| s.host_cpu.map(|c| c.idle)));
    let (Some(cores), true) = (cores, throughput >= 1.0) else {
        return Verdict::Unjudged("too few requests or CPU samples to divide".into());
    };
    // the target's own time per request: service time where the model measures it apart
    let h = total
        .totals
        .service
        .as_ref()
        .unwrap_or(&total.totals.latency);
    let p50_us = h.quantile_us(0.5) as f64;
    let cpu_us = cores * 1e6 / throughput;
    if p50_us < 1000.0 || p50_us < WAITING_FACTOR * cpu_us {
        return Verdict::Clear;
    }
    // the kernel's count of the target's threads' waits for a CPU (schedstat), per request:
    // on a busy host it tells a wait for a CPU from the target's own
    let cpu_wait_us = target_cpu_wait_cores(&seconds).map(|c| c * 1e6 / throughput);
    let off_cpu_us = p50_us - cpu_us;
    match (saturated_host(run), cpu_wait_us) {
        (Some(why), Some(w)) if w >= MOSTLY_OWN_WAIT * off_cpu_us => {
            return Verdict::Unjudged(format!(
                "{why}, and the target's threads waited {} a request for a CPU: a request's \
                 wait is mostly a wait for a CPU",
                super::duration_us(w.round() as u64)
            ));
        }
        (Some(why), None) => {
            return Verdict::Unjudged(format!(
                "{why}: a request's wait cannot be told from its wait for a CPU"
            ));
        }
        _ => {}
    }
    let waiting = 1.0 - cpu_us / p50_us;
    Verdict::Found(vec![Draft {
        rule: WAITING_NOT_RUNNING.id,
        key: "",
        severity: Severity::Low,
        title: format!(
            "Requests wait, not run: {:.0}% of a request's time is off the target's CPU",
            100.0 * waiting
        ),
        evidence: vec![
            format!(
                "a request takes {} (p50) and about {} of the target's CPU ({:.0}% of a core at \
                 {throughput:.0} requests/s)",
                super::duration_us(p50_us as u64),
                super::duration_us(cpu_us.round() as u64),
                100.0 * cores
            ),
            match (cpu_wait_us, host_idle) {
                (Some(w), _) => format!(
                    "its threads waited {} a request for a CPU (the kernel's schedstat): the \
                     rest of the wait is for something else",
                    super::duration_us(w.round() as u64)
                ),
                (None, Some(idle)) if idle >= 20.0 => {
                    format!("the host was {idle:.0}% idle: CPU is not what requests wait for")
                }
                // a busy host (a neighbour, kiln itself) makes runnable threads wait too
                (None, Some(idle)) => format!(
                    "the host was busy ({idle:.0}% idle): part of the wait may be for a CPU"
                ),
                (None, None) => "the host's idle time was not sampled".into(),
            },
        ],
        window: window_of(&seconds),
        cause: "the target's threads wait for something other than the CPU: a lock, a pool, \
                the disk or a downstream call such as the database"
            .into(),
        fix: "see where they wait: kiln run ... --off-cpu records the stacks the threads leave \
              the CPU from (and names a lock they queue for), kiln run --otlp-listen the time \
              spent in queries; shorten or remove the lock, size the pool to the concurrency"
            .into(),
        impact: (waiting, "latency"),
        data: json!({"p50_us": p50_us, "cpu_per_request_us": cpu_us, "cores": cores,
            "throughput_rps": throughput, "host_idle_pct": host_idle,
            "cpu_wait_per_request_us": cpu_wait_us}),
    }
    .finish()])
}

#[cfg(test)]
mod waiting_tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};
    use kiln_sample::{CpuSplit, ProcessSecond, TaskRates};

    fn with_target_cpu(mut run: RunRecord, cpu_pct: f64) -> RunRecord {
        let second = ResourceSecond {
            host_cpu: Some(CpuSplit {
                idle: 70.0,
                ..Default::default()
            }),
            process: Some(ProcessSecond {
                rates: TaskRates {
                    cpu_user_pct: cpu_pct,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        run.resources = vec![second; 10];
        run
    }

    /// On a host saturated by other work the wait is for a CPU as much as for anything the
    /// target does: not judged (a demo beside a build blamed the shop's "lock, pool, disk").
    #[test]
    fn waiting_on_a_host_saturated_by_others_is_not_judged() {
        let mut run = with_target_cpu(
            load_run(&vec![Second::latencies(&[(20_000, 100)]); 10]),
            5.0,
        );
        for (s, load) in run.resources.iter_mut().zip(&run.seconds) {
            s.unix_ms = load.unix_ms;
            s.host_cpu = Some(CpuSplit {
                idle: 3.0,
                user: 97.0,
                ..Default::default()
            });
            s.host_cpu_per_core = vec![(0, CpuSplit::default()), (1, CpuSplit::default())];
        }
        let Verdict::Unjudged(why) = waiting_not_running(&run) else {
            panic!("{:?}", waiting_not_running(&run));
        };
        assert!(
            why.contains("saturated by other work in 10 of 10 seconds"),
            "{why}"
        );
        // the kernel's count of the target's waits for a CPU tells them apart: at 100
        // requests/s, 20% of a core waiting is 2 ms a request of the ~19.5 ms off its CPU
        // (the rest is its own wait), 150% is 15 ms (mostly a wait for a CPU)
        let with_wait = |wait_pct: f64| {
            let mut run = run.clone();
            for s in &mut run.resources {
                s.process.as_mut().unwrap().rates.cpu_wait_pct = Some(wait_pct);
            }
            waiting_not_running(&run)
        };
        let Verdict::Found(found) = with_wait(20.0) else {
            panic!("{:?}", with_wait(20.0));
        };
        assert!(
            found[0].evidence[1].starts_with("its threads waited 2.00ms a request for a CPU"),
            "{:?}",
            found[0].evidence
        );
        let Verdict::Unjudged(why) = with_wait(150.0) else {
            panic!("{:?}", with_wait(150.0));
        };
        assert!(
            why.contains("waited 15.0ms a request for a CPU")
                || why.contains("waited 15.00ms a request for a CPU"),
            "{why}"
        );
    }

    #[test]
    fn requests_that_mostly_wait_fire_and_cpu_bound_ones_do_not() {
        // 100 requests/s at 20 ms each, on 5% of a core: 0.5 ms of CPU per request
        let waiting = with_target_cpu(
            load_run(&vec![Second::latencies(&[(20_000, 100)]); 10]),
            5.0,
        );
        let Verdict::Found(found) = waiting_not_running(&waiting) else {
            panic!("no finding");
        };
        assert!(
            found[0].title.contains("98% of a request's time"),
            "{:?}",
            found[0]
        );
        // the same latency with 180% of a core: 18 ms of CPU per request
        let busy = with_target_cpu(
            load_run(&vec![Second::latencies(&[(20_000, 100)]); 10]),
            180.0,
        );
        assert!(matches!(waiting_not_running(&busy), Verdict::Clear));
    }

    fn with_unread(unread: &[u64], cpu_pct: f64) -> RunRecord {
        let mut run = load_run(&vec![Second::ok(100); 10]);
        run.resources = unread
            .iter()
            .map(|&n| ResourceSecond {
                host_cpu_per_core: vec![(0, CpuSplit::default()), (1, CpuSplit::default())],
                process: Some(ProcessSecond {
                    rates: TaskRates {
                        cpu_user_pct: cpu_pct,
                        ..Default::default()
                    },
                    sockets: Some(kiln_sample::SocketSummary {
                        by_state: BTreeMap::from([("ESTAB".to_string(), 8)]),
                        unread: n,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        run
    }

    #[test]
    fn requests_unread_while_the_cpu_has_room_are_a_pool_too_small() {
        let Verdict::Found(found) = pool_too_small(&with_unread(&[6; 10], 20.0)) else {
            panic!("no finding");
        };
        assert!(
            found[0].title.contains("6.0 connections"),
            "{}",
            found[0].title
        );
        assert!(
            found[0].evidence[0].starts_with("6.0 of the target's 8 connections"),
            "{:?}",
            found[0].evidence
        );
        assert_eq!(found[0].severity, Severity::High);
        // a request caught unread now and then is no queue
        let now_and_then = with_unread(&[0, 0, 1, 0, 0, 0, 2, 0, 0, 0], 20.0);
        assert!(matches!(pool_too_small(&now_and_then), Verdict::Clear));
        // the same queue with every core busy: the CPU is the limit, not the pool
        assert!(matches!(
            pool_too_small(&with_unread(&[6; 10], 190.0)),
            Verdict::Clear
        ));
    }

    fn cpu_run(idle: f64, target_pct: f64, quota: Option<f64>) -> RunRecord {
        let mut run = load_run(&vec![Second::ok(100); 10]);
        run.resources = vec![
            ResourceSecond {
                host_cpu: Some(CpuSplit {
                    idle,
                    ..Default::default()
                }),
                host_cpu_per_core: vec![(0, CpuSplit::default()), (1, CpuSplit::default())],
                process: Some(ProcessSecond {
                    rates: TaskRates {
                        cpu_user_pct: target_pct,
                        ..Default::default()
                    },
                    cgroup: quota.map(|q| kiln_sample::CgroupSecond {
                        quota_cpus: Some(q),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            10
        ];
        // on the load's clock, as the sampler stamps them
        for (r, s) in run.resources.iter_mut().zip(&run.seconds) {
            r.unix_ms = s.unix_ms;
        }
        run
    }

    #[test]
    fn a_target_at_its_quota_or_filling_the_host_is_cpu_bound() {
        let Verdict::Found(f) = saturated(&cpu_run(70.0, 48.0, Some(0.5))) else {
            panic!("the quota used up is not found");
        };
        assert!(
            f[0].title
                .contains("0.48 cores of its CPU quota of 0.50 CPUs"),
            "{}",
            f[0].title
        );
        // 100 requests/s at 0.48 cores: 4.8 ms each, 0.5 CPUs serve about 104/s
        assert!(
            f[0].evidence[2].contains("about 104 requests/s"),
            "{:?}",
            f[0].evidence
        );
        let Verdict::Found(f) = saturated(&cpu_run(3.0, 180.0, None)) else {
            panic!("the host filled by the target is not found");
        };
        assert!(
            f[0].title.contains("1.80 cores of the host's 2 cores"),
            "{}",
            f[0].title
        );
        assert!(matches!(
            host_busy(&cpu_run(3.0, 180.0, None)),
            Verdict::Clear
        ));
        // a target with room, on a host with room
        assert!(matches!(
            saturated(&cpu_run(70.0, 20.0, None)),
            Verdict::Clear
        ));
        assert!(matches!(
            host_busy(&cpu_run(70.0, 20.0, None)),
            Verdict::Clear
        ));
    }

    /// The finding and the rules that stand down on a saturated host read the same seconds:
    /// half the seconds saturated is "saturated" for both, though the run's mean idle (50%)
    /// is far above the bar; four in ten is for neither.
    #[test]
    fn the_busy_host_is_judged_by_the_seconds_the_other_rules_read() {
        let with_saturated = |n: usize| {
            let mut run = cpu_run(3.0, 30.0, None);
            for r in run.resources.iter_mut().skip(n) {
                r.host_cpu = Some(CpuSplit {
                    idle: 97.0,
                    ..Default::default()
                });
            }
            run
        };
        let half = with_saturated(5);
        assert!(saturated_host(&half).is_some());
        assert!(matches!(host_busy(&half), Verdict::Found(_)));
        let fewer = with_saturated(4);
        assert!(saturated_host(&fewer).is_none());
        assert!(matches!(host_busy(&fewer), Verdict::Clear));
    }

    #[test]
    fn a_host_kept_busy_by_others_is_not_the_target_being_cpu_bound() {
        let run = cpu_run(3.0, 30.0, None);
        assert!(matches!(saturated(&run), Verdict::Clear));
        let Verdict::Found(f) = host_busy(&run) else {
            panic!("the busy host is not found");
        };
        assert!(
            f[0].evidence[0].contains("saturated by other work in 10 of 10 seconds")
                && f[0].evidence[2].starts_with("1.64 cores went to other processes"),
            "{:?}",
            f[0].evidence
        );
        assert!(!f[0].evidence.iter().any(|e| e.contains("perf")));
        // a profiled run says what perf itself took of the others' share
        let mut run = run;
        let mut profile = crate::record::Profile::of(
            Default::default(),
            kiln_record::schema::profile::Event::Cpu,
        );
        profile.record.perf_cpu_pct = Some(12.5);
        run.profile = Some(profile);
        let Verdict::Found(f) = host_busy(&run) else {
            panic!("the busy host is not found");
        };
        assert!(
            f[0].evidence
                .contains(&"kiln's profiler (perf record) used 0.12 of them".to_string()),
            "{:?}",
            f[0].evidence
        );
    }
}
