//! Rules over sockets and the kernel's TCP counters: an accept queue that overflowed, data
//! queueing toward a peer that does not read it.

use kiln_record::text::safe_text;
use kiln_sample::ResourceSecond;
use serde_json::json;

use super::{bytes, duration_us, host_checks, with_host_fixes, Draft, Rule, NO_PROCESS};
use crate::{RunRecord, Severity, Verdict, Window};

/// What a rule over the kernel's TCP counters says when none were sampled.
const NO_KERNEL_COUNTERS: &str =
    "no kernel TCP counters sampled (run with --watch-port PORT or --watch-pid PID)";

pub const LISTEN_OVERFLOW: Rule = Rule {
    id: "kernel.listen-overflow",
    judge: listen_overflow,
};

/// The kernel dropped connections because an accept queue was full.
fn listen_overflow(run: &RunRecord) -> Verdict {
    let kernels: Vec<(&ResourceSecond, u64, u64)> = run
        .resources
        .iter()
        .filter_map(|s| {
            let k = s.kernel.as_ref()?;
            Some((s, k.listen_overflows?, k.listen_drops.unwrap_or(0)))
        })
        .collect();
    if kernels.is_empty() {
        return Verdict::Unjudged(NO_KERNEL_COUNTERS.into());
    }
    let overflows = kernels.iter().fold(0u64, |a, k| a.saturating_add(k.1));
    let drops = kernels.iter().fold(0u64, |a, k| a.saturating_add(k.2));
    if overflows == 0 && drops == 0 {
        return Verdict::Clear;
    }
    let hit: Vec<&ResourceSecond> = kernels
        .iter()
        .filter(|k| k.1 > 0 || k.2 > 0)
        .map(|k| k.0)
        .collect();
    let mut evidence = vec![format!(
        "{overflows} accept-queue overflows and {drops} dropped connection attempts \
             (the whole host's TcpExt counters), in {} of {} seconds",
        hit.len(),
        kernels.len()
    )];
    // The counters are the whole host's (its network namespace's): another listener's
    // overflows are counted too (a demo once printed HIGH "overflowed 82 times" above "held
    // up to 0 of 128"). The target's listeners count their own drops (sk_drops): when those
    // were sampled they decide; on older records, its queue seen at its limit does (a sample
    // a second can miss a queue that filled between two samples).
    let fullest = run
        .resources
        .iter()
        .filter_map(|s| s.process.as_ref()?.sockets.as_ref())
        .flat_map(|s| s.listen_backlog.iter())
        .max_by_key(|(_, queued, _)| *queued);
    let held = fullest.map(|(addr, queued, limit)| {
        format!(
            "its queue on {} held at most {queued} of {limit} connections",
            safe_text(addr)
        )
    });
    let own = target_listen_drops(run);
    let not_the_targets = match (&own, fullest) {
        (Some((_, 0)), _) => true,
        (Some(_), _) => false,
        (None, Some((_, queued, limit))) => queued < limit,
        (None, None) => false,
    };
    let others = other_listeners(run);
    if not_the_targets {
        let own_note =
            own.map(|(addrs, _)| format!("its listener on {} dropped none", safe_text(&addrs)));
        let said: Vec<String> = own_note.into_iter().chain(held).collect();
        let whose = if others.is_empty() {
            "another listener on this host dropped them".to_string()
        } else {
            format!("dropped by {}", others.join(", "))
        };
        return Verdict::Unjudged(format!(
            "this host's accept queues overflowed {overflows} times, but not the target's: \
             {} ({whose})",
            said.join("; ")
        ));
    }
    if !others.is_empty() {
        evidence.push(format!(
            "other listeners of this host dropped connections too: {}",
            others.join(", ")
        ));
    }
    if let Some((addrs, n)) = &own {
        evidence.push(format!(
            "the target's listener on {} dropped {n} connections itself (its own count)",
            safe_text(addrs)
        ));
    }
    if let Some((addr, queued, limit)) = fullest {
        evidence.push(format!(
            "the target's accept queue on {} held up to {queued} of {limit} connections",
            safe_text(addr)
        ));
    }
    let (host_evidence, host_fixes) = host_checks(run, &["somaxconn", "tcp-max-syn-backlog"]);
    evidence.extend(host_evidence);
    let requests = run.measured().map_or(0, |m| m.totals.requests);
    let dropped = own.as_ref().map_or(drops, |(_, n)| *n);
    let share = if requests > 0 {
        dropped as f64 / requests as f64
    } else {
        0.0
    };
    Verdict::Found(vec![Draft {
        rule: LISTEN_OVERFLOW.id,
        key: "",
        severity: if share >= 0.01 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!("The accept queue overflowed {overflows} times: connections were dropped"),
        evidence,
        window: Some(Window {
            from_unix_ms: hit
                .first()
                .map_or(0, |s| kiln_record::second_start_ms(s.unix_ms)),
            to_unix_ms: hit.last().map_or(0, |s| s.unix_ms),
        }),
        cause: "connections arrived faster than the target accepted them; the kernel dropped \
                them and clients retried after 1 s, then 3 s (latency spikes of a second and \
                more)"
            .into(),
        fix: with_host_fixes(
            host_fixes,
            "raise the listen backlog (the backlog argument of listen(): Tomcat's acceptCount, \
             nginx's listen ... backlog=) and net.core.somaxconn, which caps it; accept faster \
             (more acceptor threads, less work on the accepting thread)"
                .into(),
        ),
        impact: (share, "requests"),
        data: json!({"listen_overflows": overflows, "listen_drops": drops,
            "target_listen_drops": own.map(|(_, n)| n)}),
    }
    .finish()])
}

/// The host's listeners other than the target's that dropped connections over the run (the
/// sampler names them from their own drop counts), the most drops first, each said as
/// "ADDRESS (COMMAND, pid PID) N times"; empty when none were named.
fn other_listeners(run: &RunRecord) -> Vec<String> {
    let targets: std::collections::BTreeSet<&str> = (run.resources.iter())
        .filter_map(|s| s.process.as_ref()?.sockets.as_ref())
        .flat_map(|s| s.listen_backlog.iter().map(|(addr, _, _)| addr.as_str()))
        .collect();
    /// A listener's drops, and the process holding it when named.
    type Dropped<'a> = (u64, Option<(i32, &'a str)>);
    let mut dropped: std::collections::BTreeMap<&str, Dropped> = Default::default();
    for l in (run.resources.iter())
        .filter_map(|s| s.kernel.as_ref())
        .flat_map(|k| k.dropping_listeners.iter())
        .filter(|l| !targets.contains(l.address.as_str()))
    {
        let (n, who) = dropped.entry(l.address.as_str()).or_default();
        *n = n.saturating_add(l.dropped);
        if let (Some(pid), Some(command)) = (l.pid, &l.command) {
            *who = Some((pid, command.as_str()));
        }
    }
    let mut by_count: Vec<_> = dropped.into_iter().collect();
    by_count.sort_by_key(|(_, (n, _))| std::cmp::Reverse(*n));
    by_count
        .into_iter()
        .take(3)
        .map(|(addr, (n, who))| {
            let who = who.map_or(String::new(), |(pid, command)| {
                format!(" ({}, pid {pid})", safe_text(command))
            });
            format!("{}{who} {n} times", safe_text(addr))
        })
        .collect()
}

/// The connections the target's listeners dropped over the run, by their own counters:
/// their addresses (joined) and the sum of each one's growth from its first sample to its
/// last. None when no sample carried the counters.
fn target_listen_drops(run: &RunRecord) -> Option<(String, u64)> {
    let mut seen: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for (addr, n) in run
        .resources
        .iter()
        .filter_map(|s| s.process.as_ref()?.sockets.as_ref())
        .flat_map(|s| s.listen_dropped.iter())
    {
        let (low, high) = seen.entry(addr.as_str()).or_insert((*n, *n));
        *low = (*low).min(*n);
        *high = (*high).max(*n);
    }
    if seen.is_empty() {
        return None;
    }
    let grown = seen
        .values()
        .fold(0u64, |a, (low, high)| a.saturating_add(high - low));
    let addrs: Vec<&str> = seen.keys().copied().collect();
    Some((addrs.join(", "), grown))
}

pub const SEND_QUEUE_GROWTH: Rule = Rule {
    id: "sockets.send-queue-growth",
    judge: send_queue_growth,
};

/// A Send-Q this large toward one peer is a peer that does not read.
const LARGE_SEND_Q: u64 = 1 << 20;
/// Growing this many seconds in a row, to at least `GROWN_SEND_Q`, is a peer falling behind.
const GROWING_SECONDS: usize = 10;
const GROWN_SEND_Q: u64 = 64 << 10;

/// Data queues in the target's sockets toward one peer: the peer is not draining it.
fn send_queue_growth(run: &RunRecord) -> Verdict {
    let queues: Vec<(&ResourceSecond, Option<&(String, u64)>)> = run
        .resources
        .iter()
        .filter_map(|s| {
            let sockets = s.process.as_ref()?.sockets.as_ref()?;
            Some((s, sockets.max_send_q.as_ref()))
        })
        .collect();
    if queues.is_empty() {
        return Verdict::Unjudged(if run.resources.is_empty() {
            NO_PROCESS.into()
        } else {
            "the target's sockets were not sampled".into()
        });
    }
    // the longest run of seconds with the same peer's queue never shrinking
    let mut best: Option<(usize, usize)> = None; // (start, end) indices, inclusive
    let mut start = 0;
    for i in 1..=queues.len() {
        let continues = i < queues.len()
            && matches!((queues[i - 1].1, queues[i].1),
                (Some((a, qa)), Some((b, qb))) if a == b && qb >= qa && *qb > 0);
        if !continues {
            if best.is_none_or(|(s, e)| i - 1 - start > e - s) && queues[start].1.is_some() {
                best = Some((start, i - 1));
            }
            start = i;
        }
    }
    let largest = queues
        .iter()
        .filter_map(|(s, q)| q.map(|q| (s, q)))
        .max_by_key(|(_, (_, n))| *n);
    let growing = best.filter(|(s, e)| {
        e - s + 1 >= GROWING_SECONDS && queues[*e].1.is_some_and(|(_, n)| *n >= GROWN_SEND_Q)
    });
    let (peer, peak, from, to) = match (growing, largest) {
        (Some((s, e)), _) => {
            let (peer, peak) = queues[e].1.expect("a growing run ends on a queue");
            (peer, *peak, queues[s].0, queues[e].0)
        }
        (None, Some((s, (peer, peak)))) if *peak >= LARGE_SEND_Q => (peer, *peak, *s, *s),
        _ => return Verdict::Clear,
    };
    let start_q = queues
        .iter()
        .find(|(s, _)| s.unix_ms == from.unix_ms)
        .and_then(|(_, q)| q.map(|(_, n)| *n))
        .unwrap_or(0);
    let seconds = (to.unix_ms.saturating_sub(from.unix_ms) / 1000 + 1) as usize;
    let peer_text = safe_text(peer);
    let evidence = vec![
        format!(
            "unsent data toward {peer_text} grew from {} to {} over {seconds} s",
            bytes(start_q),
            bytes(peak)
        ),
        format!(
            "the largest Send-Q of the target's connections, sampled each second: {} at its \
             peak",
            bytes(largest.map_or(peak, |(_, (_, n))| *n))
        ),
    ];
    Verdict::Found(vec![Draft {
        rule: SEND_QUEUE_GROWTH.id,
        key: peer,
        severity: if peak >= 4 * LARGE_SEND_Q {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!("Data piles up toward {peer_text}: the peer does not read it"),
        evidence,
        window: Some(Window {
            from_unix_ms: kiln_record::second_start_ms(from.unix_ms),
            to_unix_ms: to.unix_ms,
        }),
        cause: format!(
            "{peer_text} reads slower than the target writes (a log or metrics server that \
             cannot keep up, a slow client); once the socket buffer is full the target's \
             writes block, or its own queue toward it grows"
        ),
        fix: format!(
            "make {peer_text} keep up, or make the target's writes to it asynchronous with a \
             bounded queue and a drop policy (an async appender that discards when full) and a \
             write timeout"
        ),
        impact: (seconds as f64 / queues.len() as f64, "the sampled seconds"),
        data: json!({"peer": peer, "send_q_bytes": peak, "from_bytes": start_q,
            "seconds": seconds}),
    }
    .finish()])
}

pub const RETRANSMITS: Rule = Rule {
    id: "kernel.retransmits",
    judge: retransmits,
};

/// A retransmitted share of TCP segments above this is loss worth finding.
const RETRANS_SHARE: f64 = 0.005;
/// Fewer retransmitted segments than this are a handful of lost packets, not a problem.
const MIN_RETRANS: u64 = 20;

/// TCP segments sent again: packets are lost between the load and the target (or toward
/// anything else the host talks to), and every loss costs its request a timeout.
fn retransmits(run: &RunRecord) -> Verdict {
    let counts: Vec<(&ResourceSecond, u64, u64)> = run
        .resources
        .iter()
        .filter_map(|s| {
            let k = s.kernel.as_ref()?;
            Some((s, k.tcp_retrans_segs?, k.tcp_out_segs?))
        })
        .collect();
    if counts.is_empty() {
        return Verdict::Unjudged(NO_KERNEL_COUNTERS.into());
    }
    let lossy = |retrans: u64, out: u64| {
        retrans >= MIN_RETRANS && retrans as f64 / out.max(1) as f64 >= RETRANS_SHARE
    };
    // (segments sent again, segments sent) over the seconds
    let totals = |c: &[(&ResourceSecond, u64, u64)]| {
        c.iter().fold((0u64, 0u64), |(r, o), c| {
            (r.saturating_add(c.1), o.saturating_add(c.2))
        })
    };
    let (host_retrans, host_out) = totals(&counts);
    let host_said = format!(
        "{host_retrans} of {host_out} TCP segments sent were retransmissions ({:.2}%), the \
         whole host's (its network namespace's) Tcp counters",
        100.0 * host_retrans as f64 / host_out.max(1) as f64
    );
    // The host's counters count every process's connections: a neighbour's SYNs to a full
    // queue are retransmissions too (a demo beside one was told "20% of segments sent
    // again"). The target's own connections decide when they were read.
    let own: Vec<(&ResourceSecond, u64, u64)> = run
        .resources
        .iter()
        .filter_map(|s| {
            let sockets = s.process.as_ref()?.sockets.as_ref()?;
            Some((s, sockets.retrans_segs?, sockets.out_segs?))
        })
        .collect();
    let (counts, retrans, out, mut evidence) = if own.is_empty() {
        (counts, host_retrans, host_out, vec![host_said])
    } else {
        let (retrans, out) = totals(&own);
        let said = format!(
            "{retrans} of {out} TCP segments the target's own connections sent were \
             retransmissions ({:.2}%)",
            100.0 * retrans as f64 / out.max(1) as f64
        );
        if !lossy(retrans, out) && lossy(host_retrans, host_out) {
            return Verdict::Unjudged(format!(
                "this host's connections lost packets, but not the target's: {host_said}; \
                 {said} (another process's connections sent them again)"
            ));
        }
        (own, retrans, out, vec![said, host_said])
    };
    let share = retrans as f64 / out.max(1) as f64;
    if !lossy(retrans, out) {
        return Verdict::Clear;
    }
    let hit: Vec<&ResourceSecond> = counts.iter().filter(|c| c.1 > 0).map(|c| c.0).collect();
    evidence.push(format!(
        "retransmits in {} of {} seconds",
        hit.len(),
        counts.len()
    ));
    if let Some(total) = run.measured() {
        let h = &total.totals.latency;
        evidence.push(format!(
            "latency p50 {}, p99 {}, max {}: a lost segment waits for the retransmission \
             timeout (200 ms at least on Linux)",
            duration_us(h.quantile_us(0.5)),
            duration_us(h.quantile_us(0.99)),
            duration_us(h.max_us())
        ));
    }
    Verdict::Found(vec![Draft {
        rule: RETRANSMITS.id,
        key: "",
        severity: if share >= 0.02 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "Packets are lost: {:.2}% of TCP segments were sent again",
            100.0 * share
        ),
        evidence,
        window: Some(Window {
            from_unix_ms: hit
                .first()
                .map_or(0, |s| kiln_record::second_start_ms(s.unix_ms)),
            to_unix_ms: hit.last().map_or(0, |s| s.unix_ms),
        }),
        cause: "segments are dropped on the way (a lossy link, a full NIC ring or switch \
                buffer, a traffic policer, a firewall rule) and TCP resends them after a \
                timeout or duplicate acknowledgements: the requests they carry wait"
            .into(),
        fix: "find where packets drop: ss -ti (retrans per connection: toward which peer), \
              ip -s link and ethtool -S (NIC drops), ethtool -g (ring sizes), tc -s qdisc \
              (queue drops), nstat -az TcpExt (the kind of loss)"
            .into(),
        impact: (share, "TCP segments"),
        data: json!({"retrans_segs": retrans, "out_segs": out, "share": share,
            "seconds": counts.len()}),
    }
    .finish()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::resource_run;
    use kiln_sample::{KernelSecond, ProcessSecond, SocketSummary};

    fn sockets(max_send_q: Option<(&str, u64)>) -> ResourceSecond {
        ResourceSecond {
            process: Some(ProcessSecond {
                sockets: Some(SocketSummary {
                    max_send_q: max_send_q.map(|(a, n)| (a.to_string(), n)),
                    listen_backlog: vec![("127.0.0.1:8080".into(), 128, 128)],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            kernel: Some(KernelSecond {
                listen_overflows: Some(0),
                listen_drops: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_send_queue_growing_toward_one_peer_fires() {
        let samples = (0..15)
            .map(|i| sockets(Some(("127.0.0.1:5140", 20_000 * (i + 1)))))
            .collect();
        let Verdict::Found(found) = send_queue_growth(&resource_run(samples)) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert!(f.title.contains("127.0.0.1:5140"), "{f:?}");
        assert!(f.evidence[0].contains("over 15 s"), "{f:?}");
        // the same peer gives the same id on another run
        assert_eq!(
            f.id,
            crate::finding_id("sockets.send-queue-growth", "127.0.0.1:5140")
        );
    }

    #[test]
    fn small_or_changing_send_queues_do_not_fire() {
        // a client's responses in flight: small, up and down
        let samples = (0..30)
            .map(|i| sockets(Some(("127.0.0.1:40000", [4_000, 9_000, 2_000][i % 3]))))
            .collect();
        assert!(matches!(
            send_queue_growth(&resource_run(samples)),
            Verdict::Clear
        ));
        // the largest queue moves between peers
        let samples = (0..30)
            .map(|i| {
                sockets(Some((
                    ["127.0.0.1:1", "127.0.0.1:2"][i % 2],
                    100_000 + i as u64,
                )))
            })
            .collect();
        assert!(matches!(
            send_queue_growth(&resource_run(samples)),
            Verdict::Clear
        ));
        assert!(matches!(
            send_queue_growth(&resource_run(vec![sockets(None); 10])),
            Verdict::Clear
        ));
    }

    #[test]
    fn accept_queue_overflows_fire_and_a_quiet_kernel_does_not() {
        assert!(matches!(
            listen_overflow(&resource_run(vec![sockets(None); 10])),
            Verdict::Clear
        ));
        let mut samples = vec![sockets(None); 10];
        samples[4].kernel = Some(KernelSecond {
            listen_overflows: Some(37),
            listen_drops: Some(37),
            ..Default::default()
        });
        let Verdict::Found(found) = listen_overflow(&resource_run(samples)) else {
            panic!("no finding");
        };
        assert!(
            found[0].title.contains("overflowed 37 times"),
            "{:?}",
            found[0]
        );
        assert!(
            found[0].evidence[1].contains("up to 128 of 128"),
            "{:?}",
            found[0]
        );
        // the same host counters while the target's queue stayed nearly empty: another
        // listener's overflows, a note and no finding about the target
        let mut samples = vec![sockets(None); 10];
        for s in &mut samples {
            if let Some(sockets) = s.process.as_mut().and_then(|p| p.sockets.as_mut()) {
                sockets.listen_backlog = vec![("127.0.0.1:8080".into(), 0, 128)];
            }
        }
        samples[4].kernel = Some(KernelSecond {
            listen_overflows: Some(82),
            listen_drops: Some(82),
            ..Default::default()
        });
        let Verdict::Unjudged(note) = listen_overflow(&resource_run(samples.clone())) else {
            panic!("a host's overflow blamed on the target");
        };
        assert!(
            note.contains("overflowed 82 times, but not the target's"),
            "{note}"
        );
        assert!(note.contains("held at most 0 of 128"), "{note}");
        assert!(note.contains("another listener on this host"), "{note}");
        // the sampler named the other listener in two seconds: it is said with its process
        // and its drops summed, and the target's listener is never among the others
        let listener =
            |address: &str, dropped: u64, who: Option<(i32, &str)>| kiln_sample::DroppingListener {
                address: address.into(),
                dropped,
                queued: 2,
                limit: 1,
                pid: who.map(|w| w.0),
                command: who.map(|w| w.1.into()),
            };
        let shed = Some((4242, "flood<er>"));
        for (i, n) in [(4, 50), (5, 32)] {
            let kernel = samples[i].kernel.get_or_insert_with(Default::default);
            kernel.dropping_listeners = vec![
                listener("127.0.0.1:9999", n, shed),
                listener("127.0.0.1:8080", 0, None),
            ];
        }
        let Verdict::Unjudged(note) = listen_overflow(&resource_run(samples)) else {
            panic!("a named listener's overflow blamed on the target");
        };
        assert!(
            note.contains("(dropped by 127.0.0.1:9999 (flood<er>, pid 4242) 82 times)"),
            "{note}"
        );
        assert!(!note.contains("8080 ("), "{note}");
    }

    /// The target's listener's own drop counter decides over the once-a-second queue sample:
    /// drops counted at it are its own though no sample saw its queue full, and none counted
    /// at it are another listener's though a sample saw its queue at its limit.
    #[test]
    fn the_listeners_own_drop_count_decides_whose_overflows_they_are() {
        let with = |queued: u64, dropped: &dyn Fn(usize) -> u64| {
            let mut samples = vec![sockets(None); 10];
            for (i, s) in samples.iter_mut().enumerate() {
                let sockets = s.process.as_mut().unwrap().sockets.as_mut().unwrap();
                sockets.listen_backlog = vec![("127.0.0.1:8080".into(), queued, 128)];
                sockets.listen_dropped = vec![("127.0.0.1:8080".into(), dropped(i))];
            }
            samples[4].kernel = Some(KernelSecond {
                listen_overflows: Some(40),
                listen_drops: Some(40),
                ..Default::default()
            });
            listen_overflow(&resource_run(samples))
        };
        // 25 dropped at the target's listener (it had dropped 5 before the run)
        let Verdict::Found(found) = with(3, &|i| if i < 4 { 5 } else { 30 }) else {
            panic!("the target's own drops not found");
        };
        let f = &found[0];
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("on 127.0.0.1:8080 dropped 25 connections itself")),
            "{f:?}"
        );
        assert_eq!(f.data["target_listen_drops"], 25);
        // its counter stood still (at 5, from before the run) though its queue was seen full
        let Verdict::Unjudged(note) = with(128, &|_| 5) else {
            panic!("another listener's drops blamed on the target");
        };
        assert!(
            note.contains("but not the target's: its listener on 127.0.0.1:8080 dropped none"),
            "{note}"
        );
    }

    fn kernel(retrans: u64, out: u64) -> ResourceSecond {
        ResourceSecond {
            kernel: Some(KernelSecond {
                tcp_retrans_segs: Some(retrans),
                tcp_out_segs: Some(out),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn retransmitted_segments_are_found_and_a_clean_network_is_not() {
        let lossy = resource_run(vec![kernel(30, 1000); 10]);
        let Verdict::Found(found) = retransmits(&lossy) else {
            panic!("no finding");
        };
        assert!(found[0].title.contains("3.00%"), "{}", found[0].title);
        assert_eq!(found[0].severity, Severity::High);
        assert!(found[0].evidence[0].starts_with("300 of 10000 TCP segments"));
        // no loss, and a handful of retransmits in a large run
        assert!(matches!(
            retransmits(&resource_run(vec![kernel(0, 1000); 10])),
            Verdict::Clear
        ));
        assert!(matches!(
            retransmits(&resource_run(vec![kernel(1, 100_000); 10])),
            Verdict::Clear
        ));
        assert!(matches!(
            retransmits(&resource_run(vec![ResourceSecond::default(); 3])),
            Verdict::Unjudged(_)
        ));
    }

    /// The host's counters and the target's own connections' (retrans, out) per second.
    fn host_and_own(host: (u64, u64), own: (u64, u64)) -> ResourceSecond {
        let mut s = kernel(host.0, host.1);
        s.process = Some(ProcessSecond {
            sockets: Some(SocketSummary {
                retrans_segs: Some(own.0),
                out_segs: Some(own.1),
                ..Default::default()
            }),
            ..Default::default()
        });
        s
    }

    #[test]
    fn the_targets_own_connections_decide_whose_packets_were_lost() {
        // the host sent 20% again (a neighbour's SYNs to a full queue), the target none
        let neighbour = resource_run(vec![host_and_own((250, 1250), (0, 800)); 10]);
        let Verdict::Unjudged(note) = retransmits(&neighbour) else {
            panic!("another process's retransmissions blamed on the target");
        };
        assert!(note.contains("but not the target's"), "{note}");
        assert!(
            note.contains("0 of 8000 TCP segments the target's own"),
            "{note}"
        );
        // the target's own connections lost 3%: found, by its own figures
        let lossy = resource_run(vec![host_and_own((40, 1200), (30, 1000)); 10]);
        let Verdict::Found(found) = retransmits(&lossy) else {
            panic!("the target's own losses not found");
        };
        assert!(found[0].title.contains("3.00%"), "{}", found[0].title);
        assert!(
            found[0].evidence[0].starts_with("300 of 10000 TCP segments the target's own"),
            "{:?}",
            found[0].evidence
        );
        // neither lost anything
        let clean = resource_run(vec![host_and_own((0, 1200), (0, 1000)); 10]);
        assert!(matches!(retransmits(&clean), Verdict::Clear));
    }
}
