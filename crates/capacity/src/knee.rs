//! What stops the service at its capacity, from the steps: its CPU (the step past the edge
//! found it saturated, or the target used nearly every core it could), or a number of
//! requests it serves at once. That number is Little's law at the peak: the most it answered
//! per second times the time one request takes alone (4 workers of 10 ms answer 400 per
//! second: 400/s x 10 ms = 4 at once).

use kiln_record::schema::capacity::{CapacityStep, Knee, Limit, StepKind};

/// The findings rule that says the target was CPU-bound.
const CPU_SATURATED: &str = "cpu.saturated";
/// A target that used this share of the cores it could have is bound by them.
const CPU_BOUND_SHARE: f64 = 0.85;
/// Waits for a CPU worth saying beside what it used, cores.
const WAIT_SAID: f64 = 0.1;
/// A target that used less than this share of them at its peak is not.
const CPU_IDLE_SHARE: f64 = 0.5;

/// The knee of a search's steps; `cores` the CPUs the target could use.
pub fn knee(steps: &[CapacityStep], cores: f64) -> Option<Knee> {
    let open = || {
        steps
            .iter()
            .filter(|s| s.believed && s.offered_rate.is_some())
    };
    let throughput_max = steps.iter().map(|s| s.throughput).reduce(f64::max)?;
    // one request's time alone: at the lowest rate run, where nothing queues (a kept one
    // before a broken one)
    let lowest = |kept: bool| {
        open()
            .filter(|s| s.kept || !kept)
            .min_by(|a, b| a.offered_rate.partial_cmp(&b.offered_rate).unwrap())
    };
    // measured on one connection when it was; else the lowest rate's
    let alone_ms = match steps
        .iter()
        .find(|s| s.kind == StepKind::Alone && s.requests > 0)
    {
        Some(one) => one.mean_fastest_ms.unwrap_or(one.mean_ms),
        None => {
            let alone = lowest(true).or_else(|| lowest(false))?;
            alone.service_mean_ms.unwrap_or(alone.mean_ms)
        }
    };
    let concurrency = throughput_max * alone_ms / 1000.0;
    // the step past the edge: the lowest broken one (or the highest run, when none broke)
    let edge = open()
        .filter(|s| !s.kept)
        .min_by(|a, b| a.offered_rate.partial_cmp(&b.offered_rate).unwrap())
        .or_else(|| open().max_by(|a, b| a.offered_rate.partial_cmp(&b.offered_rate).unwrap()))?;
    let cpu = cpu_reading(steps, edge, cores);
    let limit = match cpu.verdict {
        CpuVerdict::Bound => Limit::Cpu,
        CpuVerdict::Idle => Limit::Concurrency,
        CpuVerdict::Between | CpuVerdict::NotWatched => Limit::Unknown,
    };
    let busiest = cpu.busiest;
    let cpu = cpu.text;
    let peak = format!(
        "throughput stopped at {throughput_max:.0} req/s and one request alone takes \
         {alone_ms:.1} ms ({throughput_max:.0}/s x {alone_ms:.1} ms = {concurrency:.1} at once)"
    );
    let (text, fix) = match limit {
        Limit::Cpu => (
            format!("its CPU: {cpu}, and {peak}"),
            "spend less CPU per request (kiln run --profile at the capacity's rate shows \
             where it goes), or give it more cores or replicas"
                .to_string(),
        ),
        Limit::Concurrency => (
            format!(
                "a concurrency limit of about {:.0}: {peak}, while {cpu}: requests queue for \
                 about {:.0} workers (processes, threads or a pool's connections)",
                concurrency.round(),
                concurrency.round()
            ),
            "more workers or threads (gunicorn --workers, a larger thread or connection \
             pool) should raise it about in proportion, until the CPU or a downstream binds; \
             or make each request wait less"
                .to_string(),
        ),
        Limit::Unknown | Limit::Contention | Limit::Coherency => (
            format!(
                "about {concurrency:.1} requests at once: {peak}{}",
                if busiest.is_some() {
                    format!("; {cpu}, neither idle nor all of it")
                } else {
                    String::new()
                }
            ),
            if busiest.is_some() {
                "profile it at the capacity's rate (kiln run --profile --off-cpu) to see \
                 whether it waits or computes"
                    .to_string()
            } else {
                "watch the target (--watch-port PORT) to tell its CPU from a concurrency limit"
                    .to_string()
            },
        ),
    };
    Some(Knee {
        limit,
        throughput_max,
        alone_ms,
        concurrency,
        target_cores: busiest,
        cores_available: busiest.map(|_| cores),
        text,
        fix,
    })
}

/// What the watched target's CPU says over the steps.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CpuVerdict {
    /// It used (or waited for) nearly all the cores it may use, or one thread had a core to
    /// itself, or the findings called it saturated at the edge.
    Bound,
    /// Most of its cores idle and no thread busy half the time.
    Idle,
    Between,
    NotWatched,
}

struct CpuReading {
    verdict: CpuVerdict,
    busiest: Option<f64>,
    /// Said with its numbers ("the target's CPU was at most 0.04 of 2 cores ...").
    text: String,
}

fn cpu_reading(steps: &[CapacityStep], edge: &CapacityStep, cores: f64) -> CpuReading {
    let busiest = steps.iter().filter_map(|s| s.target_cores).reduce(f64::max);
    // what it wanted: the CPU it used and the time its threads waited for one (a target on a
    // core it shares gets less than the core, and waits for the rest)
    let wanted = steps
        .iter()
        .filter_map(|s| Some(s.target_cores? + s.target_wait_cores.unwrap_or(0.0)))
        .reduce(f64::max);
    let saturated_found = edge.findings.iter().any(|f| f.rule == CPU_SATURATED);
    // a thread that had a core to itself all the time: a single-threaded server's bound
    let one_thread = steps
        .iter()
        .filter_map(|s| s.hottest_thread.as_ref())
        .filter(|(_, c)| *c >= CPU_BOUND_SHARE)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    // its busiest thread's share of a core (the whole target's where threads are not known)
    let hottest = |c: f64| {
        steps
            .iter()
            .filter_map(|s| s.hottest_thread.as_ref().map(|(_, t)| *t))
            .reduce(f64::max)
            .unwrap_or(c)
    };
    let verdict = match busiest {
        _ if saturated_found || one_thread.is_some() => CpuVerdict::Bound,
        None => CpuVerdict::NotWatched,
        Some(_) if wanted.is_some_and(|w| w >= CPU_BOUND_SHARE * cores) => CpuVerdict::Bound,
        Some(c) if c < CPU_IDLE_SHARE * cores && hottest(c) < CPU_IDLE_SHARE => CpuVerdict::Idle,
        Some(_) => CpuVerdict::Between,
    };
    let text = match (busiest, one_thread) {
        (Some(c), Some((name, t))) => format!(
            "the target's CPU was at most {c:.2} of {}, its thread {} {t:.2} of one",
            cores_text(cores),
            kiln_record::text::safe_text(name)
        ),
        (Some(c), None) => format!(
            "the target's CPU was at most {c:.2} of {}",
            cores_text(cores)
        ),
        (None, _) => String::new(),
    };
    let text = match (busiest, wanted) {
        (Some(c), Some(w)) if w - c >= WAIT_SAID => {
            format!(
                "{text}, and its threads waited for a CPU {:.2} cores' worth more",
                w - c
            )
        }
        _ => text,
    };
    CpuReading {
        verdict,
        busiest,
        text,
    }
}

/// A sweep's σ below this is no contention worth naming.
const CONTENTION_SAID: f64 = 0.05;
/// A fit this good or better is believed.
const FIT_BELIEVED: f64 = 0.8;
/// The last level below this share of the best one has fallen past the peak: by more than a
/// busy host's mutex hand-offs take from a lock that is only serial (a 1 ms lock fell 11%
/// from 4 to 32 connections here; one whose hold grows with its waiters, 80%).
const FALLEN: f64 = 0.75;

/// The knee of a closed-model sweep: its CPU first, then what the USL fit says of the
/// curve (a peak it falls from, a level it stops at, or no end yet).
pub fn sweep_knee(
    steps: &[CapacityStep],
    usl: Option<&kiln_record::schema::capacity::UslFit>,
    cores: f64,
) -> Option<Knee> {
    let levels: Vec<&CapacityStep> = steps.iter().filter(|s| s.connections.is_some()).collect();
    let best = levels
        .iter()
        .copied()
        .max_by(|a, b| a.throughput.total_cmp(&b.throughput))?;
    let last = levels
        .iter()
        .copied()
        .max_by_key(|s| s.connections.unwrap_or(0))?;
    let best_n = best.connections.unwrap_or(0);
    let alone_ms = levels
        .iter()
        .copied()
        .min_by_key(|s| s.connections.unwrap_or(0))
        .map_or(0.0, |s| s.mean_fastest_ms.unwrap_or(s.mean_ms));
    let cpu = cpu_reading(steps, last, cores);
    let fitted = usl.filter(|f| f.r_squared >= FIT_BELIEVED);
    let law = fitted.map_or(String::new(), |f| {
        format!(
            " (USL: σ={:.3}, κ={:.5}, R²={:.2} over {} levels)",
            f.sigma, f.kappa, f.r_squared, f.points
        )
    });
    let fallen = last.throughput < FALLEN * best.throughput && last.connections != best.connections;
    let (limit, text, fix) = if cpu.verdict == CpuVerdict::Bound {
        (
            Limit::Cpu,
            format!(
                "its CPU: {}; throughput peaked at {:.0}/s with {best_n} connections{law}",
                cpu.text, best.throughput
            ),
            "spend less CPU per request, or give it more cores or replicas".to_string(),
        )
    } else if fallen {
        let peak_n = fitted
            .and_then(|f| f.peak_concurrency)
            .unwrap_or(best_n as f64);
        (
            Limit::Coherency,
            format!(
                "throughput peaks at about {peak_n:.0} at once ({:.0}/s with {best_n} \
                 connections) and falls past it ({:.0}/s with {}): each request pays for the \
                 others in flight{law}",
                best.throughput,
                last.throughput,
                last.connections.unwrap_or(0)
            ),
            format!(
                "let fewer in at once (a pool or thread limit of about {peak_n:.0}), and find \
                 what they all touch: a lock handed around, a shared cache line, a hot row \
                 (kiln run --off-cpu with {best_n} connections)"
            ),
        )
    } else if let Some(f) = fitted.filter(|f| f.sigma >= CONTENTION_SAID) {
        (
            Limit::Contention,
            format!(
                "throughput levels off towards {:.0}/s: a serial part of {:.0}% of each \
                 request's time{law}",
                f.lambda / f.sigma,
                f.sigma * 100.0
            ),
            "more threads will not raise it; find the serial part (a lock, one thread, one \
             connection downstream) or add instances"
                .to_string(),
        )
    } else {
        (
            if cpu.verdict == CpuVerdict::Idle {
                Limit::Concurrency
            } else {
                Limit::Unknown
            },
            format!(
                "throughput still rises with connections ({:.0}/s with {best_n}): its peak is \
                 past the levels tried{law}",
                best.throughput
            ),
            "sweep further (more connections)".to_string(),
        )
    };
    Some(Knee {
        limit,
        throughput_max: best.throughput,
        alone_ms,
        concurrency: best.throughput * best.mean_ms / 1000.0,
        target_cores: cpu.busiest,
        cores_available: cpu.busiest.map(|_| cores),
        text,
        fix,
    })
}

/// `1 core`, `2 cores`.
fn cores_text(cores: f64) -> String {
    if cores == 1.0 {
        "1 core".to_string()
    } else {
        format!("{cores:.0} cores")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_record::schema::capacity::StepFinding;
    use kiln_record::schema::Severity;

    fn step(
        rate: f64,
        throughput: f64,
        mean_ms: f64,
        kept: bool,
        cores: Option<f64>,
    ) -> CapacityStep {
        CapacityStep {
            n: 1,
            kind: StepKind::Search,
            offered_rate: Some(rate),
            connections: None,
            duration_s: 3.0,
            requests: (throughput * 3.0) as u64,
            throughput,
            p50_ms: mean_ms,
            p90_ms: mean_ms,
            p99_ms: mean_ms,
            max_ms: mean_ms,
            mean_ms,
            mean_fastest_ms: None,
            service_mean_ms: Some(mean_ms),
            failed_ratio: 0.0,
            concurrency: throughput * mean_ms / 1000.0,
            target_cores: cores,
            target_wait_cores: None,
            hottest_thread: None,
            kept,
            broken: Vec::new(),
            ended_early: None,
            starved: false,
            believed: true,
            few_requests: false,
            dir: String::new(),
            findings: Vec::new(),
        }
    }

    /// 4 workers of 10 ms: 400/s at most, 4 at once, the CPU idle.
    #[test]
    fn workers_that_wait_are_a_concurrency_limit_of_their_number() {
        let steps = [
            step(300.0, 300.0, 10.2, true, Some(0.03)),
            step(390.0, 389.0, 12.0, true, Some(0.04)),
            step(420.0, 398.0, 150.0, false, Some(0.04)),
        ];
        let k = knee(&steps, 2.0).unwrap();
        assert_eq!(k.limit, Limit::Concurrency);
        assert!((k.concurrency - 4.06).abs() < 0.01, "{}", k.concurrency);
        assert!(
            k.text.starts_with("a concurrency limit of about 4: "),
            "{}",
            k.text
        );
        assert!(
            k.text.contains("398/s x 10.2 ms = 4.1 at once"),
            "{}",
            k.text
        );
        // the same steps unwatched: the number, and how to tell the CPU from it
        let unwatched: Vec<_> = steps
            .iter()
            .cloned()
            .map(|s| CapacityStep {
                target_cores: None,
                ..s
            })
            .collect();
        let k = knee(&unwatched, 2.0).unwrap();
        assert_eq!(k.limit, Limit::Unknown);
        assert!(k.fix.contains("--watch-port"), "{}", k.fix);
    }

    fn level(c: usize, throughput: f64, mean_ms: f64) -> CapacityStep {
        CapacityStep {
            kind: StepKind::Sweep,
            offered_rate: None,
            connections: Some(c),
            ..step(0.0, throughput, mean_ms, true, Some(0.05))
        }
    }

    fn fit_of(levels: &[CapacityStep]) -> kiln_record::schema::capacity::UslFit {
        let points: Vec<(f64, f64)> = levels
            .iter()
            .map(|s| (s.connections.unwrap() as f64, s.throughput))
            .collect();
        crate::usl::fit(&points).unwrap()
    }

    /// A lock whose hold grows with its waiters: throughput peaks and falls (coherency); the
    /// same lock without that levels off (contention); neither is the CPU.
    #[test]
    fn a_sweep_that_falls_past_its_peak_is_coherency_and_one_that_levels_off_contention() {
        let falling = [
            level(1, 180.0, 5.3),
            level(2, 367.0, 5.4),
            level(4, 670.0, 6.0),
            level(8, 374.0, 21.0),
            level(16, 227.0, 70.0),
            level(32, 137.0, 233.0),
        ];
        let fit = fit_of(&falling);
        assert!(fit.kappa > 0.01, "{fit:?}");
        let k = sweep_knee(&falling, Some(&fit), 2.0).unwrap();
        assert_eq!(k.limit, Limit::Coherency, "{}", k.text);
        assert!(
            k.text
                .starts_with("throughput peaks at about 4 at once (670/s with 4"),
            "{}",
            k.text
        );

        let level_off = [
            level(1, 175.0, 5.7),
            level(2, 340.0, 5.9),
            level(4, 600.0, 6.6),
            level(8, 610.0, 13.0),
            level(16, 590.0, 27.0),
            level(32, 545.0, 58.0),
        ];
        let fit = fit_of(&level_off);
        let k = sweep_knee(&level_off, Some(&fit), 2.0).unwrap();
        assert_eq!(k.limit, Limit::Contention, "{}", k.text);
        assert!(k.text.contains("a serial part of"), "{}", k.text);
    }

    /// One request on one connection is the time alone, not the lowest rate's (which
    /// queues a little beside others: 12.5 ms at 80% of 4 workers, on a busy host).
    #[test]
    fn a_request_alone_is_read_from_the_one_connection_step() {
        let mut alone = step(0.0, 97.0, 10.3, true, Some(0.01));
        alone.kind = StepKind::Alone;
        alone.offered_rate = None;
        let steps = [
            alone,
            step(318.0, 318.0, 12.5, true, Some(0.03)),
            step(400.0, 399.0, 90.0, false, Some(0.04)),
        ];
        let k = knee(&steps, 2.0).unwrap();
        assert_eq!(k.alone_ms, 10.3);
        assert!((k.concurrency - 4.11).abs() < 0.01, "{}", k.concurrency);
    }

    #[test]
    fn a_target_that_used_its_cores_or_was_found_saturated_is_cpu_bound() {
        let steps = [
            step(100.0, 100.0, 4.1, true, Some(0.41)),
            step(240.0, 236.0, 40.0, false, Some(0.97)),
        ];
        assert_eq!(knee(&steps, 1.0).unwrap().limit, Limit::Cpu);
        // half the host's two cores: the findings' rule decides
        assert_eq!(knee(&steps, 2.0).unwrap().limit, Limit::Unknown);
        let mut found = steps.clone();
        found[1].findings.push(StepFinding {
            rule: CPU_SATURATED.into(),
            severity: Severity::Medium,
            title: "The target is CPU-bound".into(),
        });
        let k = knee(&found, 2.0).unwrap();
        assert_eq!(k.limit, Limit::Cpu);
        assert!(k
            .text
            .starts_with("its CPU: the target's CPU was at most 0.97 of 2 cores"));
        // or it got 0.7 of its one core and waited for 0.5 more (kiln shared the core)
        let mut shared = steps.clone();
        shared[1].target_cores = Some(0.7);
        shared[1].target_wait_cores = Some(0.5);
        let k = knee(&shared, 1.0).unwrap();
        assert_eq!(k.limit, Limit::Cpu);
        assert!(
            k.text
                .contains("its threads waited for a CPU 0.50 cores' worth more"),
            "{}",
            k.text
        );
        // or one thread had a core to itself: a single-threaded server
        let mut one = steps.clone();
        one[1].hottest_thread = Some(("node".into(), 0.95));
        let k = knee(&one, 2.0).unwrap();
        assert_eq!(k.limit, Limit::Cpu);
        assert!(k.text.contains("its thread node 0.95 of one"), "{}", k.text);
    }
}
