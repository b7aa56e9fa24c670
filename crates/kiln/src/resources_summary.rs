//! The "Resources" part of a run summary: what the host and the watched process did during
//! the measured load, from the sampler's seconds in the run record.

use std::fmt::Write as _;

use kiln_record::PhaseSummary;
use kiln_sample::ResourceSecond;
use serde_json::{json, Value};

use crate::format::{self, safe_text};

/// The samples taken while the measured phases ran, by the rule every reader of the record
/// uses ([`kiln_record::Span::holds_second`]: the findings read the same samples).
pub fn during(total: &PhaseSummary, samples: &[ResourceSecond]) -> Vec<ResourceSecond> {
    let Some(span) = kiln_record::Span::measured(std::slice::from_ref(total)) else {
        return samples.to_vec();
    };
    samples
        .iter()
        .filter(|s| span.holds_second(s.unix_ms))
        .cloned()
        .collect()
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

pub fn to_json(samples: &[ResourceSecond]) -> Value {
    if samples.is_empty() {
        return Value::Null;
    }
    let hosts: Vec<_> = samples.iter().filter_map(|s| s.host_cpu).collect();
    let host = |f: fn(&kiln_sample::CpuSplit) -> f64| mean(hosts.iter().map(f));
    let procs: Vec<_> = samples.iter().filter_map(|s| s.process.as_ref()).collect();
    let cpu: Vec<f64> = procs
        .iter()
        .map(|p| p.rates.cpu_user_pct + p.rates.cpu_system_pct)
        .collect();
    let mut hottest = kiln_sample::thread_groups_mean(samples);
    hottest.sort_by(|a, b| {
        // "(other threads)" last, whatever its share
        (a.0.starts_with('('))
            .cmp(&b.0.starts_with('('))
            .then(b.1.total_cmp(&a.1))
    });
    hottest.truncate(6);
    json!({
        "samples": samples.len(),
        "host_cpu_mean_pct": {
            "user": host(|h| h.user + h.nice), "system": host(|h| h.system),
            "irq_softirq": host(|h| h.irq + h.softirq), "iowait": host(|h| h.iowait),
            "steal": host(|h| h.steal), "idle": host(|h| h.idle),
        },
        // the tightest moment: least available memory, most swap in use, most dirty pages
        "host_memory": samples.iter().filter_map(|s| s.host_memory.as_ref()).next_back().map(|last| {
            let mems = samples.iter().filter_map(|s| s.host_memory.as_ref());
            json!({
                "total_kib": last.total_kib,
                "available_min_kib": mems.clone().map(|m| m.available_kib).min(),
                "swap_used_max_kib": mems.clone().filter_map(|m| m.swap_used_kib).max(),
                "dirty_max_kib": mems.filter_map(|m| m.dirty_kib).max(),
            })
        }),
        "process": procs.first().map(|p| json!({
            "pid": p.rates.id,
            "name": p.rates.name,
            "cpu_mean_pct": mean(cpu.iter().copied()),
            "cpu_peak_pct": cpu.iter().cloned().fold(0.0, f64::max),
            "cpu_user_mean_pct": mean(procs.iter().map(|p| p.rates.cpu_user_pct)),
            "cpu_system_mean_pct": mean(procs.iter().map(|p| p.rates.cpu_system_pct)),
            "voluntary_switches_per_s_mean": mean(procs.iter().filter_map(|p| p.rates.voluntary_switches_per_s)),
            "involuntary_switches_per_s_mean": mean(procs.iter().filter_map(|p| p.rates.involuntary_switches_per_s)),
            "rss_max_kib": procs.iter().map(|p| p.rss_kib).max(),
            "threads_max": procs.iter().map(|p| p.threads).max(),
            "open_fds_max": procs.iter().filter_map(|p| p.open_fds).max(),
            // the most threads seen in each state in any sample (D: waiting in the kernel)
            "thread_states_max": procs.iter().fold(serde_json::Map::new(), |mut m, p| {
                for (state, n) in &p.thread_states {
                    let seen = m.get(state).and_then(Value::as_u64).unwrap_or(0);
                    m.insert(state.clone(), json!(seen.max(*n)));
                }
                m
            }),
            "sockets": sockets_json(&procs),
            "cgroup": cgroup_json(&procs),
        })),
        "hottest_threads": hottest.iter().map(|(n, c, t)| json!({"name": n, "cpu_mean_pct": c, "threads": t})).collect::<Vec<_>>(),
        "kernel": kernel_json(samples),
    })
}

/// The target's TCP sockets: states at the last sample, the deepest queues seen and the
/// fullest accept queue.
fn sockets_json(procs: &[&kiln_sample::ProcessSecond]) -> Value {
    let all: Vec<&kiln_sample::SocketSummary> =
        procs.iter().filter_map(|p| p.sockets.as_ref()).collect();
    let Some(last) = all.last() else {
        return Value::Null;
    };
    let deepest = |pick: fn(&kiln_sample::SocketSummary) -> &Option<(String, u64)>| {
        all.iter()
            .filter_map(|s| pick(s).as_ref())
            .max_by_key(|(_, q)| *q)
            .map(|(peer, q)| json!({"peer": peer, "bytes": q}))
    };
    let fullest = all
        .iter()
        .flat_map(|s| s.listen.iter())
        .max_by_key(|(_, queued)| *queued)
        .map(|(addr, queued)| {
            // the limit, where sock_diag gave it
            let limit = all
                .iter()
                .flat_map(|s| s.listen_backlog.iter())
                .find(|(a, _, _)| a == addr)
                .map(|(_, _, limit)| *limit);
            json!({"address": addr, "queued": queued, "limit": limit})
        });
    json!({
        "by_state": last.by_state,
        "max_send_q": deepest(|s| &s.max_send_q),
        "max_recv_q": deepest(|s| &s.max_recv_q),
        "fullest_accept_queue": fullest,
    })
}

/// The sum of counters read from a record, or None when any sample lacks the counter.
/// Saturating: a record is untrusted input and a corrupt counter must not panic the reader.
fn saturating_total(mut counts: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    counts.try_fold(0u64, |acc, n| Some(acc.saturating_add(n?)))
}

/// The target's control group over the samples: its own CPU, quota, throttling and memory.
fn cgroup_json(procs: &[&kiln_sample::ProcessSecond]) -> Value {
    let groups: Vec<&kiln_sample::CgroupSecond> =
        procs.iter().filter_map(|p| p.cgroup.as_ref()).collect();
    let Some(last) = groups.last() else {
        return Value::Null;
    };
    let sum = |f: fn(&kiln_sample::CgroupSecond) -> Option<u64>| -> Option<u64> {
        saturating_total(groups.iter().map(|g| f(g)))
    };
    json!({
        "path": last.path,
        "memory_path": last.memory_path,
        "version": last.version,
        "cpu_mean_pct": mean(groups.iter().filter_map(|g| g.cpu_pct)),
        "quota_cpus": last.quota_cpus,
        "throttled_periods": sum(|g| g.throttled_periods),
        "throttled_ms": groups.iter().map(|g| g.throttled_ms).sum::<Option<f64>>(),
        "memory_max_bytes": groups.iter().filter_map(|g| g.memory_bytes).max(),
        "memory_limit_bytes": last.memory_limit_bytes,
        "oom_kills": sum(|g| g.oom_kills),
    })
}

/// Kernel events summed over the samples (host-wide), NET_RX per CPU, and the worst pressure.
fn kernel_json(samples: &[ResourceSecond]) -> Value {
    let kernels: Vec<_> = samples.iter().filter_map(|s| s.kernel.as_ref()).collect();
    if kernels.is_empty() {
        return Value::Null;
    }
    let total = |f: fn(&kiln_sample::KernelSecond) -> Option<u64>| -> Option<u64> {
        saturating_total(kernels.iter().map(|k| f(k)))
    };
    // per-CPU counts summed over the samples
    let per_cpu = |f: fn(&kiln_sample::KernelSecond) -> &Vec<u64>| {
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
    let worst = |f: fn(&kiln_sample::KernelSecond) -> Option<f64>| {
        kernels.iter().filter_map(|k| f(k)).reduce(f64::max)
    };
    json!({
        "listen_overflows": total(|k| k.listen_overflows),
        "listen_drops": total(|k| k.listen_drops),
        "tcp_retrans_segs": total(|k| k.tcp_retrans_segs),
        "net_rx_softirqs_per_cpu": per_cpu(|k| &k.net_rx_per_cpu),
        "interrupts_per_cpu": per_cpu(|k| &k.interrupts_per_cpu),
        "nic_interrupts_per_cpu": per_cpu(|k| &k.nic_interrupts_per_cpu),
        "thp_fault_alloc": total(|k| k.thp_fault_alloc),
        "thp_fault_fallback": total(|k| k.thp_fault_fallback),
        "compact_stall": total(|k| k.compact_stall),
        "major_faults": total(|k| k.major_faults),
        "psi_some_avg10_max_pct": {
            "cpu": worst(|k| k.psi_cpu.and_then(|p| p.some_avg10)),
            "memory": worst(|k| k.psi_memory.and_then(|p| p.some_avg10)),
            "io": worst(|k| k.psi_io.and_then(|p| p.some_avg10)),
        },
    })
}

/// The resource summary as text; `during` says what the samples cover (e.g. "the measured load").
pub fn to_text(samples: &[ResourceSecond], during: &str) -> String {
    let v = to_json(samples);
    if v.is_null() {
        return String::new();
    }
    let pct = |x: &Value| format!("{:.0}%", x.as_f64().unwrap_or(0.0));
    let h = &v["host_cpu_mean_pct"];
    let mut out = format!(
        "Resources  {} samples during {during}\n  host     usr {} sys {} irq+si {} iowait {} steal {} idle {} (mean over all CPUs)\n",
        v["samples"],
        pct(&h["user"]),
        pct(&h["system"]),
        pct(&h["irq_softirq"]),
        pct(&h["iowait"]),
        pct(&h["steal"]),
        pct(&h["idle"])
    );
    let m = &v["host_memory"];
    if !m.is_null() {
        let kib = |x: &Value| {
            x.as_u64()
                .map_or("?".to_string(), |k| format::bytes(k.saturating_mul(1024)))
        };
        let _ = writeln!(
            out,
            "           memory {} total, {} available at the least; swap used {} at most; dirty {} at most",
            kib(&m["total_kib"]),
            kib(&m["available_min_kib"]),
            kib(&m["swap_used_max_kib"]),
            kib(&m["dirty_max_kib"])
        );
    }
    let p = &v["process"];
    if !p.is_null() {
        let _ = writeln!(
            out,
            "  target   {} ({}): CPU mean {} peak {} of one core (usr {} sys {}); switches/s {:.0} voluntary, {:.0} involuntary; RSS max {}; threads {}{}; open files max {}",
            p["pid"],
            safe_text(p["name"].as_str().unwrap_or("?")),
            pct(&p["cpu_mean_pct"]),
            pct(&p["cpu_peak_pct"]),
            pct(&p["cpu_user_mean_pct"]),
            pct(&p["cpu_system_mean_pct"]),
            p["voluntary_switches_per_s_mean"].as_f64().unwrap_or(0.0),
            p["involuntary_switches_per_s_mean"].as_f64().unwrap_or(0.0),
            format::bytes(p["rss_max_kib"].as_u64().unwrap_or(0).saturating_mul(1024)),
            p["threads_max"],
            match p["thread_states_max"].as_object() {
                Some(states) if !states.is_empty() => format!(
                    " (most at once: {})",
                    states.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ")
                ),
                _ => String::new(),
            },
            p["open_fds_max"].as_u64().map_or("?".to_string(), |n| n.to_string())
        );
        let hottest: Vec<String> = v["hottest_threads"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let threads = match t["threads"].as_u64() {
                    Some(n) if n > 1 => format!(" ({n} threads)"),
                    _ => String::new(),
                };
                format!(
                    "{}{threads} {}",
                    safe_text(t["name"].as_str().unwrap_or("?")),
                    pct(&t["cpu_mean_pct"])
                )
            })
            .collect();
        if !hottest.is_empty() {
            let _ = writeln!(out, "  threads  {}", hottest.join(", "));
        }
        let so = &p["sockets"];
        if !so.is_null() {
            let states: Vec<String> = so["by_state"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(state, n)| format!("{state} {n}"))
                .collect();
            let queue = |q: &Value, dir: &str| {
                if q.is_null() {
                    "0".to_string()
                } else {
                    format!(
                        "{} {dir} {}",
                        format::bytes(q["bytes"].as_u64().unwrap_or(0)),
                        safe_text(q["peer"].as_str().unwrap_or("?"))
                    )
                }
            };
            let accept = &so["fullest_accept_queue"];
            let _ = writeln!(
                out,
                "  sockets  {}; max Send-Q {}; max Recv-Q {}{}",
                crate::summary::comma_list_or_none(states.into_iter()),
                queue(&so["max_send_q"], "to"),
                queue(&so["max_recv_q"], "from"),
                if accept.is_null() {
                    String::new()
                } else {
                    format!(
                        "; accept queue max {}{} on {}",
                        accept["queued"],
                        accept["limit"]
                            .as_u64()
                            .map_or(String::new(), |l| format!(" of {l}")),
                        safe_text(accept["address"].as_str().unwrap_or("?"))
                    )
                }
            );
        }
    }
    let cg = &v["process"]["cgroup"];
    if !cg.is_null() {
        let path = cg["path"].as_str().unwrap_or("?");
        let memory_path = cg["memory_path"].as_str().unwrap_or(path);
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
            cg["version"],
            safe_text(path),
            whose(path),
            pct(&cg["cpu_mean_pct"]),
            cg["quota_cpus"].as_f64().map_or("none".to_string(), |q| format!("{q:.2} CPUs")),
            cg["throttled_periods"].as_u64().map_or("?".to_string(), |n| n.to_string()),
            cg["throttled_ms"].as_f64().map_or("?".to_string(), |ms| format!("{ms:.0} ms")),
            safe_text(memory_path),
            whose(memory_path),
            cg["memory_max_bytes"].as_u64().map_or("?".to_string(), format::bytes),
            cg["memory_limit_bytes"].as_u64().map_or("no limit".to_string(), format::bytes),
            cg["oom_kills"].as_u64().map_or("?".to_string(), |n| n.to_string())
        );
    }
    let k = &v["kernel"];
    if !k.is_null() {
        let n = |x: &Value| x.as_u64().map_or("?".to_string(), |n| n.to_string());
        let psi = |x: &Value| x.as_f64().map_or("n/a".to_string(), |p| format!("{p:.1}%"));
        let _ = writeln!(
            out,
            "  kernel   listen overflows {}, listen drops {}, TCP retransmits {}; NET_RX softirqs per CPU {}\n           interrupts per CPU {} (network devices {})\n           THP faults {} (fallback {}), compaction stalls {}, major faults {}; PSI some avg10 max: cpu {} memory {} io {}",
            n(&k["listen_overflows"]),
            n(&k["listen_drops"]),
            n(&k["tcp_retrans_segs"]),
            k["net_rx_softirqs_per_cpu"],
            k["interrupts_per_cpu"],
            k["nic_interrupts_per_cpu"],
            n(&k["thp_fault_alloc"]),
            n(&k["thp_fault_fallback"]),
            n(&k["compact_stall"]),
            n(&k["major_faults"]),
            psi(&k["psi_some_avg10_max_pct"]["cpu"]),
            psi(&k["psi_some_avg10_max_pct"]["memory"]),
            psi(&k["psi_some_avg10_max_pct"]["io"])
        );
    }
    out
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
        let text = to_text(&[second], "the run");
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
                let _ = to_json(&samples);
                let _ = to_text(&samples, "the run");
            }
        }
    }
}
