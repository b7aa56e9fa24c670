//! Rules over the load's own record: failed requests, a rate the run did not reach (kiln or
//! the target could not keep up, and every other number is then a floor), a heavy tail.

use kiln_record::{ErrorKind, PhaseSummary};
use serde_json::json;

use super::{duration_us, Draft, Rule};
use crate::record::LoadPoint;
use crate::{RunRecord, Severity, Verdict, Window};

const NO_LOAD: &str = "the record holds no measured load";

pub const ERRORS: Rule = Rule {
    id: "load.errors",
    judge: errors,
};

/// Requests that failed: no response (by kind) or an HTTP status of 400 and above.
fn errors(run: &RunRecord) -> Verdict {
    let Some(total) = run.measured() else {
        return Verdict::Unjudged(NO_LOAD.into());
    };
    let failed = total.failed();
    if failed == 0 || total.totals.requests == 0 {
        return Verdict::Clear;
    }
    let ratio = failed as f64 / total.totals.requests as f64;
    let severity = if ratio >= 0.05 {
        Severity::High
    } else if ratio >= 0.01 {
        Severity::Medium
    } else {
        Severity::Low
    };
    let mut evidence = vec![format!(
        "{failed} of {} requests failed ({:.2}%)",
        total.totals.requests,
        100.0 * ratio
    )];
    let mut kinds: Vec<(String, u64)> = total
        .totals
        .errors
        .iter()
        .map(|(k, n)| (format!("no response: {}", k.label()), *n))
        .chain(
            total
                .totals
                .status
                .iter()
                .filter(|(code, _)| **code >= 400)
                .map(|(code, n)| (format!("HTTP {code}"), *n)),
        )
        .collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    evidence.extend(kinds.iter().map(|(what, n)| format!("{what}: {n}")));
    // A plan's run: which requests failed, and its failed checks.
    let mut by_name: Vec<(&String, u64)> = total
        .totals
        .names
        .iter()
        .filter(|(_, n)| n.failed > 0)
        .map(|(name, n)| (name, n.failed))
        .collect();
    by_name.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    if !by_name.is_empty() {
        let top: Vec<String> = by_name
            .iter()
            .take(5)
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        evidence.push(format!("failed by request name: {}", top.join(", ")));
    }
    if total.totals.checks_failed > 0 {
        evidence.push(format!(
            "checks failed: {} of {}",
            total.totals.checks_failed, total.totals.checks
        ));
    }
    let failing: Vec<&LoadPoint> = run.seconds.iter().filter(|s| s.failed > 0).collect();
    if !failing.is_empty() {
        evidence.push(format!(
            "failures in {} of {} measured seconds",
            failing.len(),
            run.seconds.len()
        ));
    }
    let (cause, fix) = error_cause(&total);
    Verdict::Found(vec![Draft {
        rule: ERRORS.id,
        key: "",
        severity,
        title: format!("{:.2}% of requests failed", 100.0 * ratio),
        evidence,
        window: failing_window(&failing),
        cause,
        fix,
        impact: (ratio, "requests"),
        data: json!({"failed": failed, "requests": total.totals.requests,
            "errors": total.totals.errors, "status": total.totals.status}),
    }
    .finish()])
}

fn failing_window(failing: &[&LoadPoint]) -> Option<Window> {
    Some(Window {
        from_unix_ms: kiln_record::second_start_ms(failing.first()?.unix_ms),
        to_unix_ms: failing.last()?.unix_ms,
    })
}

/// The cause and fix for the most common kind of failure.
fn error_cause(total: &PhaseSummary) -> (String, String) {
    let worst_error = total.totals.errors.iter().max_by_key(|(_, n)| **n);
    let count = |codes: std::ops::RangeInclusive<u16>| {
        (total.totals.status.range(codes)).fold(0u64, |a, (_, n)| a.saturating_add(*n))
    };
    let (server_errors, client_errors) = (count(500..=u16::MAX), count(400..=499));
    let errors = worst_error.map_or(0, |(_, n)| *n);
    if errors >= server_errors.max(client_errors) {
        if let Some((kind, _)) = worst_error {
            return match kind {
                ErrorKind::ConnectRefused | ErrorKind::ConnectTimeout | ErrorKind::ConnectOther => (
                    "the target did not accept connections: nothing listened, its accept queue \
                     was full, or it hit a connection limit"
                        .into(),
                    "check that the target runs and listens; raise its listen backlog \
                     (net.core.somaxconn) and connection limit, or lower -c/--rate"
                        .into(),
                ),
                ErrorKind::Reset => (
                    "the target closed or reset connections before answering (a crash, a \
                     connection limit, keep-alive closed under the client)"
                        .into(),
                    "read the target's log at the failing seconds; check its keep-alive and \
                     connection limits"
                        .into(),
                ),
                ErrorKind::Timeout => (
                    "requests waited longer than the timeout: the target is overloaded or \
                     stuck on something it waits for"
                        .into(),
                    "lower the rate to find the capacity, and read the CPU, lock and DB \
                     findings for what the requests wait on"
                        .into(),
                ),
                _ => (
                    format!("requests got no valid response ({})", kind.label()),
                    "check the URL, the scheme (http or https) and the target's protocol".into(),
                ),
            };
        }
    }
    if server_errors >= client_errors {
        (
            "the target answered with server errors (5xx)".into(),
            "read the target's log for the exceptions behind the 5xx answers".into(),
        )
    } else {
        (
            "the target rejected the requests (4xx): the URL, method, headers or body are \
             not what it expects, or it limits the rate"
                .into(),
            "send one request with curl and compare; check authentication and rate limits".into(),
        )
    }
}

pub const RATE_NOT_REACHED: Rule = Rule {
    id: "load.rate-not-reached",
    judge: rate_not_reached,
};

/// The run did not load as asked: arrivals never sent (open model), or kiln's own CPU near
/// what its threads can give. Every latency and throughput figure is then a floor.
fn rate_not_reached(run: &RunRecord) -> Verdict {
    let Some(total) = run.measured() else {
        return Verdict::Unjudged(NO_LOAD.into());
    };
    let ends: Vec<_> = run
        .phases
        .iter()
        .filter(|p| p.measured)
        .filter_map(|p| p.end.as_ref())
        .collect();
    let unsent = ends.iter().fold(0u64, |a, e| a.saturating_add(e.unsent));
    let scheduled = total.totals.scheduled;
    let threads = run.manifest.plan.load().map_or(1, |p| p.threads.max(1)) as f64;
    let kiln_cores = run.kiln_cores().unwrap_or(0.0);
    let unsent_share = if scheduled > 0 {
        unsent as f64 / scheduled as f64
    } else {
        0.0
    };
    let kiln_busy = kiln_cores >= 0.9 * threads;
    if unsent_share < 0.01 && !kiln_busy {
        return Verdict::Clear;
    }
    let mut evidence = Vec::new();
    if scheduled > 0 {
        evidence.push(format!(
            "{unsent} of {scheduled} scheduled arrivals never sent ({:.1}%)",
            100.0 * unsent_share
        ));
    }
    evidence.push(format!(
        "kiln used {kiln_cores:.2} cores of CPU with {threads} load threads"
    ));
    if let Some(lag) = run.seconds.iter().map(|s| s.send_lag_max_us).max() {
        if run.open_model() {
            evidence.push(format!(
                "worst send delay in a second: {}",
                duration_us(lag)
            ));
        }
    }
    let (title, cause, fix) = if kiln_busy {
        (
            "kiln itself limited the load: its numbers are a floor".to_string(),
            "kiln's load threads were busy nearly all the time, so it could not send or \
             read faster"
                .to_string(),
            "give kiln more threads (--threads), run it on another machine, or split the \
             load over several kiln processes"
                .to_string(),
        )
    } else {
        (
            format!(
                "The target could not take the offered rate: {:.1}% of arrivals were never sent",
                100.0 * unsent_share
            ),
            "every connection was busy waiting for an answer and the connection cap was \
             reached: the rate is above what the target serves"
                .to_string(),
            "lower --rate to find the rate the target sustains (its knee), or raise \
             --max-connections if it can take more concurrency"
                .to_string(),
        )
    };
    Verdict::Found(vec![Draft {
        rule: RATE_NOT_REACHED.id,
        key: "",
        severity: Severity::High,
        title,
        evidence,
        window: run.window(),
        cause,
        fix,
        impact: (
            unsent_share.max(if kiln_busy { 1.0 } else { 0.0 }),
            "requests",
        ),
        data: json!({"unsent": unsent, "scheduled": scheduled, "kiln_cores": kiln_cores,
            "threads": threads}),
    }
    .finish()])
}

pub const TAIL_HEAVY: Rule = Rule {
    id: "latency.tail-heavy",
    judge: tail_heavy,
};

/// Fewer responses than this and a p99 is a handful of requests.
const TAIL_MIN_RESPONSES: u64 = 1000;
/// The slow requests must be at least this much slower than p95.
const TAIL_MIN_EXCESS_US: u64 = 5_000;

/// p99 at least 3× p95 (and 5 ms beyond it): a few requests wait far longer than the rest.
fn tail_heavy(run: &RunRecord) -> Verdict {
    let Some(total) = run.measured() else {
        return Verdict::Unjudged(NO_LOAD.into());
    };
    let h = &total.totals.latency;
    if h.count() < TAIL_MIN_RESPONSES {
        return Verdict::Unjudged(format!(
            "{} responses are too few to compare p99 with p95 (at least {TAIL_MIN_RESPONSES})",
            h.count()
        ));
    }
    let (p50, p95, p99, p999) = (
        h.quantile_us(0.5),
        h.quantile_us(0.95),
        h.quantile_us(0.99),
        h.quantile_us(0.999),
    );
    // a busy host's scheduling delays (a few ms) make a 3x ratio over a sub-millisecond p95
    // without any stall: the tail must also be TAIL_MIN_EXCESS_US beyond p95
    if p99 < 3 * p95.max(1) || p99.saturating_sub(p95) < TAIL_MIN_EXCESS_US {
        return Verdict::Clear;
    }
    // the share of all waiting that the slowest 5% did
    let (mut all, mut tail) = (0f64, 0f64);
    for v in h.inner().iter_recorded() {
        let time = v.value_iterated_to() as f64 * v.count_at_value() as f64;
        all += time;
        if v.value_iterated_to() > p95 {
            tail += time;
        }
    }
    let share = if all > 0.0 { tail / all } else { 0.0 };
    let ratio = p99 as f64 / p95.max(1) as f64;
    // what a hedge at p95 would do, and whether the slow requests were independent enough
    // for it to (a shared stall makes the copy as slow as the first)
    let hedge = kiln_hedge::predict(h, p95, 1);
    let spread = run
        .tail
        .as_ref()
        .filter(|(delay, _)| *delay == p95)
        .and_then(|(_, seconds)| kiln_hedge::Independence::judge(seconds));
    let mut evidence = vec![
        format!(
            "p50 {}, p95 {}, p99 {}, p99.9 {}, max {}",
            duration_us(p50),
            duration_us(p95),
            duration_us(p99),
            duration_us(p999),
            duration_us(h.max_us())
        ),
        format!(
            "the slowest 5% of requests spent {:.0}% of all the time requests waited",
            100.0 * share
        ),
    ];
    let mut fix = "look for the stall at the slow seconds (the other findings, the latency over \
                   time); if the slow requests are random, hedged requests for idempotent reads \
                   cut the tail"
        .to_string();
    if let (Some(hedge), Some(spread)) = (&hedge, &spread) {
        evidence.push(spread.sentence());
        if spread.independent {
            evidence.push(hedge.sentence("p95"));
            fix = format!(
                "the slow requests are random: hedge idempotent reads (a second copy after \
                 about p95, {}, to another replica, the first answer taken, the extra load \
                 capped); kiln hedge RUN --at p90 --at p99 weighs other delays",
                duration_us(p95)
            );
        } else {
            fix = "find the stall the slow requests share at the seconds they bunch in (the \
                   other findings: GC pauses, periodic spikes, blocked threads, the host); \
                   hedging would not help"
                .into();
        }
    }
    Verdict::Found(vec![Draft {
        rule: TAIL_HEAVY.id,
        key: "",
        severity: if ratio >= 10.0 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!("The tail is heavy: p99 is {ratio:.1}x p95"),
        evidence,
        window: run.window(),
        cause: "a few requests wait on something the others do not: a stall (GC, a lock, a \
                cache expiring, a flush), a slow dependency, or queueing behind a burst"
            .into(),
        fix,
        impact: (share, "latency"),
        data: json!({"p50_us": p50, "p95_us": p95, "p99_us": p99, "p999_us": p999,
            "max_us": h.max_us(), "responses": h.count(), "hedge_at_p95": hedge,
            "slow_spread": spread}),
    }
    .finish()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};

    #[test]
    fn errors_fire_with_their_kinds_and_stay_quiet_without() {
        let run = load_run(&vec![Second::ok(1000); 10]);
        assert!(matches!(errors(&run), Verdict::Clear));
        let mut seconds = vec![Second::ok(1000); 10];
        seconds[3].status.insert(503, 60);
        seconds[4].errors.insert(ErrorKind::Reset, 40);
        let run = load_run(&seconds);
        let Verdict::Found(found) = errors(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        // 100 failed of 10,100 requests
        assert_eq!(f.severity, Severity::Low, "{f:?}");
        assert!(
            f.evidence[0].starts_with("100 of 10100 requests failed (0.99%)"),
            "{f:?}"
        );
        assert_eq!(f.evidence[1], "HTTP 503: 60");
        assert!(f.cause.contains("server errors"), "{}", f.cause);
        let w = f.window.unwrap();
        assert_eq!(w.to_unix_ms - w.from_unix_ms, 2000, "seconds 3 and 4");
    }

    #[test]
    fn a_heavy_tail_fires_and_a_narrow_one_does_not() {
        // 10,000 requests at 2 ms; the heavy run has 2% of them at 40 ms
        let narrow = load_run(&vec![Second::latencies(&[(2_000, 1000)]); 10]);
        assert!(matches!(tail_heavy(&narrow), Verdict::Clear));
        // a busy host's few milliseconds over a fast p95: 5x, but only 1.2 ms beyond it
        let jitter = load_run(&vec![Second::latencies(&[(300, 980), (1_500, 20)]); 10]);
        assert!(matches!(tail_heavy(&jitter), Verdict::Clear));
        let heavy = load_run(&vec![Second::latencies(&[(2_000, 980), (40_000, 20)]); 10]);
        let Verdict::Found(found) = tail_heavy(&heavy) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert!(f.title.contains("p99 is 20.0x p95"), "{}", f.title);
        // 2% of requests at 40 ms hold 200*40 / (9800*2 + 200*40) of the waiting
        let share = 200.0 * 40.0 / (9800.0 * 2.0 + 200.0 * 40.0);
        assert!((f.impact.share - share).abs() < 0.01, "{f:?}");
        // 20 slow requests in every second: random, so a hedge at p95 (2 ms) leaves a request
        // slow only when both copies are (0.04%): p99 and p99.9 become 2 + 2 ms
        assert!(f.evidence[2].contains("one by one"), "{:?}", f.evidence);
        let slow = kiln_record::text::us(heavy.measured().unwrap().totals.latency.max_us());
        assert_eq!(
            f.evidence[3],
            format!(
                "a hedge at p95 (2.00ms) would take p99 from {slow} to 4.00ms and p99.9 from \
                 {slow} to 4.00ms, for 2.0% more requests"
            )
        );
        assert!(
            f.fix.starts_with("the slow requests are random: hedge"),
            "{}",
            f.fix
        );
        assert_eq!(f.data["hedge_at_p95"]["after"]["p99_us"], 4_000);
    }

    #[test]
    fn a_heavy_tail_from_shared_stalls_is_not_sent_to_hedging() {
        // the same 2% of requests at 40 ms, all in seconds 0 and 5 (a stall every 5 s)
        let seconds: Vec<Second> = (0..10)
            .map(|i| match i % 5 {
                0 => Second::latencies(&[(2_000, 900), (40_000, 100)]),
                _ => Second::latencies(&[(2_000, 1000)]),
            })
            .collect();
        let Verdict::Found(found) = tail_heavy(&load_run(&seconds)) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert!(f.evidence[2].contains("came together"), "{:?}", f.evidence);
        assert!(
            f.evidence[2].contains("half in 1 of 10 seconds"),
            "{:?}",
            f.evidence
        );
        assert!(f.fix.contains("hedging would not help"), "{}", f.fix);
        assert_eq!(f.data["slow_spread"]["independent"], false);
    }

    #[test]
    fn too_few_responses_cannot_judge_a_tail() {
        let run = load_run(&[Second::latencies(&[(2_000, 98), (40_000, 2)])]);
        assert!(matches!(tail_heavy(&run), Verdict::Unjudged(r) if r.contains("100 responses")));
    }

    #[test]
    fn unsent_arrivals_say_the_target_could_not_keep_up() {
        let mut run = load_run(&vec![Second::ok(1000); 10]);
        assert!(matches!(rate_not_reached(&run), Verdict::Clear));
        let end = run.phases[0].end.as_mut().unwrap();
        end.unsent = 500;
        run.phases[0].totals.scheduled = 10_500;
        let Verdict::Found(found) = rate_not_reached(&run) else {
            panic!("no finding");
        };
        assert!(found[0].title.contains("could not take the offered rate"));
        assert!(
            found[0].evidence[0].contains("500 of 10500"),
            "{:?}",
            found[0]
        );
    }

    #[test]
    fn kiln_busy_on_every_thread_says_its_numbers_are_a_floor() {
        let mut run = load_run(&vec![Second::ok(1000); 10]);
        let end = run.phases[0].end.as_mut().unwrap();
        // one thread, 10 s of load, 9.5 s of kiln's CPU
        end.kiln_cpu_user_us = 7_000_000;
        end.kiln_cpu_system_us = 2_500_000;
        let Verdict::Found(found) = rate_not_reached(&run) else {
            panic!("no finding");
        };
        assert!(
            found[0].title.contains("kiln itself limited"),
            "{:?}",
            found[0]
        );
    }
}
