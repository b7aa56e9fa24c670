//! The load generator starved of a CPU: seconds in which kiln's probe thread woke
//! [`STARVED_MS`] or more late (its threads' waits are shown beside it). Requests due in them left late, and the
//! open model counts a late request's wait from its schedule: that latency is the host's (or
//! kiln's placement), not the target's. Said as kiln's own evidence, beside whatever latency
//! finding those seconds would otherwise lead to.

use kiln_record::schema::noise::{NoiseSecond, STARVED_MS};
use serde_json::json;

use super::{duration_us, Draft, Rule};
use crate::record::LoadPoint;
use crate::{Finding, RunRecord, Severity, Verdict, Window};

pub const GENERATOR_STARVED: Rule = Rule {
    id: "load.generator-starved",
    judge: generator_starved,
};

/// The slow seconds the starved ones are held against: this many with the worst requests.
const SLOW_SECONDS: usize = 5;

/// The load seconds whose worst requests were the run's worst (at most [`SLOW_SECONDS`], and
/// only seconds whose worst request is `floor_us` or more), slowest first.
pub(crate) fn slow_seconds(seconds: &[LoadPoint], floor_us: u64) -> Vec<&LoadPoint> {
    let mut slow: Vec<&LoadPoint> = seconds
        .iter()
        .filter(|s| s.requests > 0 && s.max_us >= floor_us)
        .collect();
    slow.sort_by(|a, b| b.max_us.cmp(&a.max_us).then(a.unix_ms.cmp(&b.unix_ms)));
    slow.truncate(SLOW_SECONDS);
    slow
}

/// Whether the load second ending at `load_ms` and the noise second `noise` share most of a
/// second of time (the seconds of the two are stamped by different threads).
pub(crate) fn coincide(load_ms: u64, noise: &NoiseSecond) -> bool {
    shares_the_second(load_ms, noise.unix_ms, noise.interval_s)
}

/// Whether the load second ending at `load_ms` and a sample of `interval_s` ending at
/// `end_ms` (kiln's probe's, the sampler's) share most of a second of time.
pub(crate) fn shares_the_second(load_ms: u64, end_ms: u64, interval_s: f64) -> bool {
    let sample_from = end_ms.saturating_sub((interval_s.max(0.0) * 1000.0) as u64);
    let (from, to) = (
        kiln_record::second_start_ms(load_ms).max(sample_from),
        load_ms.min(end_ms),
    );
    to.saturating_sub(from) >= kiln_record::SECOND_MS / 2
}

/// Whether kiln was starved in the load second ending at `load_ms`.
pub(crate) fn starved_in(load_ms: u64, noise: &[NoiseSecond]) -> bool {
    noise.iter().any(|n| n.starved() && coincide(load_ms, n))
}

/// How many of `slow` coincide with a second in which kiln was starved.
pub(crate) fn starved_among(slow: &[&LoadPoint], noise: &[NoiseSecond]) -> usize {
    slow.iter().filter(|s| starved_in(s.unix_ms, noise)).count()
}

fn generator_starved(run: &RunRecord) -> Verdict {
    let Some(total) = run.measured() else {
        return Verdict::Unjudged("the record holds no measured load".into());
    };
    if run.noise.is_empty() {
        return Verdict::Unjudged(
            "the record has no host-noise seconds (noise.jsonl: kiln's own waits for a CPU)".into(),
        );
    }
    let starved: Vec<&NoiseSecond> = run.noise.iter().filter(|s| s.starved()).collect();
    let (Some(first), Some(last)) = (starved.first(), starved.last()) else {
        return Verdict::Clear;
    };
    let worst = starved
        .iter()
        .max_by(|a, b| a.probe_late_max_ms.total_cmp(&b.probe_late_max_ms))
        .expect("starved is not empty");
    let p99 = total.totals.latency.quantile_us(0.99);
    let slow = slow_seconds(&run.seconds, p99);
    let explained = starved_among(&slow, &run.noise);
    let in_starved: Vec<&LoadPoint> = run
        .seconds
        .iter()
        .filter(|s| starved_in(s.unix_ms, &run.noise))
        .collect();
    let lag_max = in_starved
        .iter()
        .map(|s| s.send_lag_max_us)
        .max()
        .unwrap_or(0);
    let starved_load_seconds: Vec<u64> = in_starved.iter().map(|s| s.unix_ms).collect();
    let mut evidence = vec![
        format!(
            "kiln got a CPU {STARVED_MS:.0} ms or more late in {} of {} measured seconds",
            starved.len(),
            run.noise.len()
        ),
        match worst.wait_max_ms {
            Some(wait) => format!(
                "at worst its probe woke {:.0} ms late; its thread {} waited {wait:.0} ms of that second for a CPU",
                worst.probe_late_max_ms, worst.wait_max_thread
            ),
            None => format!(
                "at worst its probe woke {:.0} ms late",
                worst.probe_late_max_ms
            ),
        },
    ];
    if lag_max > 0 {
        evidence.push(format!(
            "in those seconds requests left up to {} behind their schedule",
            duration_us(lag_max)
        ));
    }
    if !slow.is_empty() {
        evidence.push(format!(
            "{explained} of the {} seconds with the slowest requests are among them",
            slow.len()
        ));
    }
    let share = if slow.is_empty() {
        0.0
    } else {
        explained as f64 / slow.len() as f64
    };
    Verdict::Found(vec![Draft {
        rule: GENERATOR_STARVED.id,
        key: "",
        // the slowest seconds are mostly kiln's own: the latency findings would blame the
        // target for them
        severity: if share >= 0.5 {
            Severity::Medium
        } else {
            Severity::Low
        },
        title: format!(
            "The load generator was starved of a CPU in {} seconds: their slow requests are kiln's lateness, not the target's",
            starved.len()
        ),
        evidence,
        window: Some(Window {
            from_unix_ms: first
                .unix_ms
                .saturating_sub((first.interval_s.max(0.0) * 1000.0) as u64),
            to_unix_ms: last.unix_ms,
        }),
        cause: "another process (or the target itself) held the CPU kiln's threads needed: a \
                busy host, a CI runner shared with other jobs, kiln and the target on the same \
                cores"
            .into(),
        fix: "give kiln CPUs of its own (taskset -c 1 kiln run ... with the target on other \
              cores), stop the other work, or load from another machine; until then, read the \
              latency of these seconds as the host's"
            .into(),
        impact: (share, "the slowest seconds"),
        data: json!({
            "starved_seconds": starved.iter().map(|s| s.unix_ms).collect::<Vec<_>>(),
            "wait_max_ms": worst.wait_max_ms,
            "wait_max_thread": worst.wait_max_thread,
            "probe_late_max_ms": worst.probe_late_max_ms,
            "send_lag_max_us": lag_max,
            "slow_seconds": slow.len(),
            "slow_seconds_starved": explained,
        }),
    }
    .finish()
    .in_seconds(starved_load_seconds)])
}

/// A latency finding's slowest seconds (at most [`SLOW_SECONDS`], within its window), by the
/// run's p99.
fn slowest_of(f: &Finding, run: &RunRecord, p99: u64) -> Vec<LoadPoint> {
    let inside: Vec<LoadPoint> = run
        .seconds
        .iter()
        .filter(|s| {
            f.window
                .is_none_or(|w| s.unix_ms > w.from_unix_ms && s.unix_ms <= w.to_unix_ms)
        })
        .cloned()
        .collect();
    slow_seconds(&inside, p99).into_iter().cloned().collect()
}

/// A latency finding whose slowest seconds are mostly seconds in which kiln was starved says
/// so, and is low: the generator was late, not the target.
pub(crate) fn blame_the_generator(findings: &mut [Finding], run: &RunRecord) {
    if !findings.iter().any(|f| f.rule == GENERATOR_STARVED.id) {
        return;
    }
    let Some(total) = run.measured() else {
        return;
    };
    let p99 = total.totals.latency.quantile_us(0.99);
    for f in findings
        .iter_mut()
        .filter(|f| f.rule.starts_with("latency."))
    {
        let slowest = slowest_of(f, run, p99);
        let slow: Vec<&LoadPoint> = slowest.iter().collect();
        let starved = starved_among(&slow, &run.noise);
        if slow.is_empty() || 2 * starved < slow.len() {
            continue;
        }
        f.severity = Severity::Low;
        f.evidence.push(format!(
            "{starved} of its {} slowest seconds are seconds in which kiln itself waited for a \
             CPU ({})",
            slow.len(),
            GENERATOR_STARVED.id
        ));
        f.cause = format!(
            "{GENERATOR_LATE}: kiln was starved of a CPU in the seconds this rests on. \
             Otherwise: {}",
            f.cause
        );
    }
}

/// How a latency finding resting on seconds of a host busy with other work begins its cause.
const OTHERS_BUSY: &str = "other processes kept the host's CPUs busy";

/// How a finding blamed on kiln's own lateness begins its cause.
const GENERATOR_LATE: &str = "the load generator was late, not the target";

/// A latency finding whose slowest seconds are mostly seconds in which other processes kept
/// the host's CPUs busy says so: the target may have waited for a CPU rather than for its own
/// work. Its severity stands (the target's users waited all the same); kiln's own lateness
/// is [`blame_the_generator`]'s.
pub(crate) fn note_the_busy_host(findings: &mut [Finding], run: &RunRecord) {
    let busy: Vec<&kiln_sample::ResourceSecond> = (run.resources.iter())
        .filter(|s| super::cpu::saturated_by_others(s))
        .collect();
    note_slowest_in(findings, run, &busy, |on, of| {
        (
            format!(
                "{on} of its {of} slowest seconds are seconds in which other processes kept \
                 the host's CPUs busy (under {:.0}% idle, the target using less than half of it)",
                super::cpu::HOST_IDLE_BELOW
            ),
            format!(
                "{OTHERS_BUSY} in the seconds this rests on: the target may have waited for a \
                 CPU, not for its own work (run again on a quieter host to tell)"
            ),
        )
    });
    // a VM's CPUs taken by the hypervisor (a demo on a VM at 32% steal: the shop's latency
    // "rose through the run" as the spells came), unless other processes were named already
    let stolen: Vec<&kiln_sample::ResourceSecond> = (run.resources.iter())
        .filter(|s| s.host_cpu.is_some_and(|c| c.steal >= STOLEN_SECOND))
        .collect();
    note_slowest_in(findings, run, &stolen, |on, of| {
        (
            format!(
                "{on} of its {of} slowest seconds are seconds in which the hypervisor took \
                 {STOLEN_SECOND:.0}% or more of this VM's CPU (steal)"
            ),
            "the hypervisor took this VM's CPUs in the seconds this rests on: the target may \
             have waited for a CPU, not for its own work (run again in a quieter spell to tell)"
                .into(),
        )
    });
}

/// A second in which the hypervisor took at least this share of the VM's CPU (steal) is one
/// in which the target may have waited for its CPUs.
const STOLEN_SECOND: f64 = 20.0;

/// Each latency finding not yet blamed on kiln or the host whose slowest seconds are mostly
/// among `marked` gets `say(how many, of how many)`'s evidence line and cause (before its own).
fn note_slowest_in(
    findings: &mut [Finding],
    run: &RunRecord,
    marked: &[&kiln_sample::ResourceSecond],
    say: impl Fn(usize, usize) -> (String, String),
) {
    let Some(total) = run.measured().filter(|_| !marked.is_empty()) else {
        return;
    };
    let p99 = total.totals.latency.quantile_us(0.99);
    for f in findings.iter_mut().filter(|f| {
        f.rule.starts_with("latency.")
            && !f.cause.starts_with(GENERATOR_LATE)
            && !f.cause.starts_with(OTHERS_BUSY)
    }) {
        let slow = slowest_of(f, run, p99);
        let on = (slow.iter())
            .filter(|s| {
                (marked.iter()).any(|b| shares_the_second(s.unix_ms, b.unix_ms, b.interval_s))
            })
            .count();
        if slow.is_empty() || 2 * on < slow.len() {
            continue;
        }
        let (evidence, cause) = say(on, slow.len());
        f.evidence.push(evidence);
        f.cause = format!("{cause}. Otherwise: {}", f.cause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};

    /// A noise second at the end of load second `i` of a fixture run.
    fn noise(run: &RunRecord, i: usize, late_ms: f64) -> NoiseSecond {
        NoiseSecond {
            unix_ms: run.seconds[i].unix_ms + 20,
            interval_s: 1.0,
            probe_late_max_ms: late_ms,
            probe_wakeups: 100,
            wait_total_ms: Some(late_ms * 1.5),
            wait_max_ms: Some(late_ms * 1.2),
            wait_max_thread: "kiln-load-0".into(),
            wait_max_runs: 100,
        }
    }

    /// 20 seconds at 2 ms; seconds 4, 9 and 14 have 15 requests at 60 ms (p99).
    fn tail_in_three_seconds() -> RunRecord {
        let mut seconds = vec![Second::ok(200); 20];
        for i in [4, 9, 14] {
            seconds[i] = Second::latencies(&[(2_000, 185), (60_000, 15)]);
        }
        load_run(&seconds)
    }

    /// The run's heavy-tail finding.
    fn tail_of(run: &RunRecord) -> Finding {
        crate::judge(run)
            .findings
            .into_iter()
            .find(|f| f.rule == "latency.tail-heavy")
            .expect("the tail is heavy")
    }

    #[test]
    fn starved_seconds_that_hold_the_slowest_requests_are_kilns_and_a_quiet_kiln_is_clear() {
        let mut run = tail_in_three_seconds();
        run.noise = (0..20)
            .map(|i| noise(&run, i, if [4, 9, 14].contains(&i) { 58.0 } else { 0.3 }))
            .collect();
        let Verdict::Found(found) = generator_starved(&run) else {
            panic!("not found");
        };
        let f = &found[0];
        assert_eq!(f.severity, Severity::Medium, "{f:#?}");
        assert!(f.title.contains("in 3 seconds"), "{}", f.title);
        assert_eq!(f.data["slow_seconds"], 3, "{f:#?}");
        assert_eq!(f.data["slow_seconds_starved"], 3);
        assert!(
            f.evidence[0].contains("in 3 of 20 measured seconds"),
            "{f:#?}"
        );
        assert_eq!(
            f.evidence[1],
            "at worst its probe woke 58 ms late; its thread kiln-load-0 waited 70 ms of that second for a CPU"
        );

        // the same slow seconds, kiln never waiting: the target's own
        run.noise = (0..20).map(|i| noise(&run, i, 0.3)).collect();
        assert!(matches!(generator_starved(&run), Verdict::Clear));

        // kiln starved in seconds other than the slow ones: said, but low
        run.noise = (0..20)
            .map(|i| noise(&run, i, if i == 2 { 30.0 } else { 0.3 }))
            .collect();
        let Verdict::Found(found) = generator_starved(&run) else {
            panic!("not found");
        };
        assert_eq!(found[0].severity, Severity::Low);
        assert_eq!(found[0].data["slow_seconds_starved"], 0);

        // a heavy tail made of those seconds is the generator's lateness
        run.noise = (0..20)
            .map(|i| noise(&run, i, if [4, 9, 14].contains(&i) { 58.0 } else { 0.3 }))
            .collect();
        let tail = tail_of(&run);
        assert_eq!(tail.severity, Severity::Low, "{tail:#?}");
        assert!(tail
            .cause
            .starts_with("the load generator was late, not the target"));
        assert!(tail
            .evidence
            .last()
            .unwrap()
            .starts_with("3 of its 3 slowest seconds"));
        // and one of the target's own is not
        run.noise = (0..20).map(|i| noise(&run, i, 0.3)).collect();
        let tail = tail_of(&run);
        assert!(!tail.cause.contains("generator"), "{tail:#?}");

        // a record from before the probe
        run.noise.clear();
        assert!(matches!(generator_starved(&run), Verdict::Unjudged(_)));
    }

    /// The same tail in seconds the hypervisor took 30% of the VM's CPU says so; at 5% it
    /// does not.
    #[test]
    fn a_tail_made_in_seconds_the_hypervisor_took_the_vms_cpus_says_so() {
        use kiln_sample::{CpuSplit, ResourceSecond};
        let with_steal = |steal: f64| {
            let mut run = tail_in_three_seconds();
            run.noise = (0..20).map(|i| noise(&run, i, 0.3)).collect();
            run.resources = (0..20)
                .map(|i| ResourceSecond {
                    unix_ms: run.seconds[i].unix_ms + 30,
                    interval_s: 1.0,
                    host_cpu: Some(CpuSplit {
                        idle: 40.0,
                        steal: if [4, 9, 14].contains(&i) { steal } else { 2.0 },
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect();
            tail_of(&run)
        };
        let stolen = with_steal(30.0);
        assert!(
            stolen
                .cause
                .starts_with("the hypervisor took this VM's CPUs"),
            "{stolen:#?}"
        );
        assert!(
            (stolen.evidence.last().unwrap())
                .starts_with("3 of its 3 slowest seconds are seconds in which the hypervisor"),
            "{stolen:#?}"
        );
        let quiet = with_steal(5.0);
        assert!(!quiet.cause.contains("hypervisor"), "{quiet:#?}");
    }

    #[test]
    fn a_tail_made_in_seconds_other_processes_kept_the_host_busy_says_so() {
        use kiln_sample::{CpuSplit, ProcessSecond, ResourceSecond, TaskRates};
        // kiln never waited
        let mut run = tail_in_three_seconds();
        run.noise = (0..20).map(|i| noise(&run, i, 0.3)).collect();
        // two cores; in `busy` seconds 97% busy, the target at 10% of a core
        let with_busy = |run: &mut RunRecord, busy: &[usize]| {
            run.resources = (0..20)
                .map(|i| ResourceSecond {
                    unix_ms: run.seconds[i].unix_ms + 30,
                    interval_s: 1.0,
                    host_cpu: Some(CpuSplit {
                        idle: if busy.contains(&i) { 3.0 } else { 80.0 },
                        ..Default::default()
                    }),
                    host_cpu_per_core: vec![(0, CpuSplit::default()), (1, CpuSplit::default())],
                    process: Some(ProcessSecond {
                        rates: TaskRates {
                            cpu_user_pct: 10.0,
                            ..Default::default()
                        },
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect();
        };
        with_busy(&mut run, &[4, 9, 14]);
        let tail = tail_of(&run);
        assert!(
            tail.cause
                .starts_with("other processes kept the host's CPUs busy"),
            "{tail:#?}"
        );
        assert!(
            tail.evidence
                .last()
                .unwrap()
                .starts_with("3 of its 3 slowest seconds"),
            "{tail:#?}"
        );
        // the host busy in other seconds: the tail is the target's own
        with_busy(&mut run, &[2, 6, 11]);
        let tail = tail_of(&run);
        assert!(!tail.cause.contains("host"), "{tail:#?}");
        // kiln starved as well in those seconds: said once, as kiln's lateness
        with_busy(&mut run, &[4, 9, 14]);
        run.noise = (0..20)
            .map(|i| noise(&run, i, if [4, 9, 14].contains(&i) { 58.0 } else { 0.3 }))
            .collect();
        let tail = tail_of(&run);
        assert!(tail.cause.starts_with(GENERATOR_LATE), "{tail:#?}");
        assert!(!tail.cause.contains("other processes"), "{tail:#?}");
    }

    #[test]
    fn seconds_coincide_when_they_share_most_of_a_second() {
        let n = |end: u64| NoiseSecond {
            unix_ms: end,
            interval_s: 1.0,
            ..Default::default()
        };
        assert!(coincide(10_000, &n(10_000)));
        assert!(coincide(10_000, &n(10_400)));
        assert!(!coincide(10_000, &n(10_600)));
        assert!(!coincide(10_000, &n(9_400)));
        assert!(!coincide(0, &n(0)));
    }
}
