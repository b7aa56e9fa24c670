//! One step of the search: the user's load at one rate, run as a whole `kiln run` (warm-up,
//! measured part, the target watched, findings, report) into its own run directory, ended
//! early once an SLO can no longer hold, and judged against every SLO.

use std::path::Path;
use std::time::Duration;

use kiln_load::plan::DurationArg;
use kiln_load::StopSignal;
use kiln_record::schema::capacity::{BrokenSlo, CapacityStep, StepFinding, StepKind};
use kiln_record::{PhaseEnd, PhaseSummary, RunLocation, SecondRecord};
use kiln_runner::load_flags::{LoadFlags, WarmupArg};
use kiln_runner::{execute, JvmProfiler, Progress, RunOutcome, RunSpec, TargetProcesses};
use kiln_sample::ResourceSecond;
use kiln_summary::thresholds::Threshold;

use crate::CapacityError;

/// How long a step offers its rate.
#[derive(Clone, Copy, Debug)]
pub struct StepTimes {
    /// Left out of the verdict: the target settles at the new rate (and drains what a step
    /// past its capacity left queued).
    pub warmup: Duration,
    /// Judged.
    pub measured: Duration,
}

/// What every step shares.
pub struct StepContext<'a> {
    pub load: &'a LoadFlags,
    pub slos: &'a [Threshold],
    pub name: &'a str,
    pub target: Option<&'a TargetProcesses>,
    pub profile_hz: Option<u32>,
    /// The capacity directory; the step's run goes under its `steps/`.
    pub dir: &'a Path,
}

/// The rule that says kiln's own process was starved of a CPU while it loaded.
const GENERATOR_STARVED: &str = "load.generator-starved";
/// The share of a step's answers its typical mean is taken over.
const FASTEST: f64 = 0.99;
/// The findings a step's record names (its `findings.json` has them all).
const FINDINGS_NAMED: usize = 6;

/// A step run: its line of the record and how many requests it sent in all.
pub struct StepRun {
    pub step: CapacityStep,
    pub requests_sent: u64,
    pub interrupted: bool,
}

/// Runs one step: `rate` in the open model, or (none) the closed model with `connections`.
pub fn run_step(
    cx: &StepContext,
    n: u32,
    kind: StepKind,
    rate: Option<f64>,
    connections: Option<usize>,
    times: StepTimes,
    stop: &StopSignal,
) -> Result<StepRun, CapacityError> {
    let mut flags = cx.load.clone();
    flags.rate = rate;
    if rate.is_none() {
        flags.connections = connections;
    }
    flags.duration = Some(duration_arg(times.measured));
    flags.warmup = Some(WarmupArg::Fixed(times.warmup));
    flags.repeat = 1;
    flags.thresholds = cx.slos.iter().map(|s| s.text.clone()).collect();
    let load = flags.prepare().map_err(CapacityError::Step)?;
    let (dir_name, name) = match (rate, kind) {
        (Some(r), _) => (format!("{n:02}-{r}rps"), format!("{} at {r}/s", cx.name)),
        (None, StepKind::Alone) => (format!("{n:02}-alone"), format!("{} alone", cx.name)),
        (None, _) => (format!("{n:02}-probe"), format!("{} probe", cx.name)),
    };
    let spec = RunSpec {
        plan: &load.plan,
        plan_record: load.record,
        phases: &load.phases,
        out: RunLocation::Named(cx.dir.join("steps").join(&dir_name)),
        name: &name,
        target: cx.target.cloned(),
        runtime_depth: Default::default(),
        warmup_auto: false,
        profile_hz: cx.profile_hz,
        off_cpu: false,
        jvm_profiler: JvmProfiler::Auto,
        alloc: false,
        otlp: None,
        gctrace: None,
        exports: &load.exports,
    };
    let planned = rate.map_or(0, |r| (r * times.measured.as_secs_f64()).round() as u64);
    let mut watch = EarlyEnd {
        slos: cx.slos,
        planned,
        measured: false,
        so_far: SecondRecord::default(),
        stop,
        ended_early: None,
        answered: Vec::new(),
    };
    let outcome = execute(spec, stop, &mut watch).map_err(CapacityError::Step)?;
    let mut step = judge(
        cx.slos,
        &outcome,
        &watch.answered,
        watch.ended_early,
        rate.is_some(),
    );
    step.n = n;
    step.kind = kind;
    step.offered_rate = rate;
    step.connections = connections.filter(|_| rate.is_none());
    step.dir = format!("steps/{dir_name}");
    let requests_sent = outcome.phases.iter().map(|p| p.totals.sent).sum();
    Ok(StepRun {
        step,
        requests_sent,
        interrupted: outcome.interrupted_by.is_some(),
    })
}

/// Answers per second over the measured part's whole seconds. A phase's figure divides
/// every answer by the load window, those that came in the grace after it included: for a
/// short step past the target's capacity (a second, ended early, then half a second of
/// answers to what it had queued) that read 985/s from 8 workers that serve 800.
fn answered_per_second(answered: &[(u32, u64)], window_s: f64) -> Option<f64> {
    let whole = window_s.floor() as u32;
    (whole >= 1).then(|| {
        let sum: u64 = answered
            .iter()
            .filter(|(s, _)| *s < whole)
            .map(|(_, n)| n)
            .sum();
        sum as f64 / whole as f64
    })
}

fn duration_arg(d: Duration) -> DurationArg {
    DurationArg {
        value: d,
        text: format!("{}ms", d.as_millis()),
    }
}

/// Ends the measured part once an SLO is broken whatever its rest does.
struct EarlyEnd<'a> {
    slos: &'a [Threshold],
    planned: u64,
    measured: bool,
    so_far: SecondRecord,
    stop: &'a StopSignal,
    ended_early: Option<(String, String)>,
    /// The measured part's answers, second by second.
    answered: Vec<(u32, u64)>,
}

impl Progress for EarlyEnd<'_> {
    fn start_phase(&mut self, _name: &str, _seconds: u64, measured: bool) {
        self.measured = measured;
        self.so_far = SecondRecord::default();
        self.answered.clear();
    }

    fn second(&mut self, second: &SecondRecord) {
        if !self.measured {
            return;
        }
        self.answered.push((second.second, second.responses()));
        if self.ended_early.is_some() {
            return;
        }
        self.so_far.merge(second);
        let broken = self.slos.iter().find_map(|slo| {
            slo.broken_already(&self.so_far, self.planned)
                .map(|why| (slo.text.clone(), why))
        });
        if let Some(broken) = broken {
            self.ended_early = Some(broken);
            self.stop.end_phase();
        }
    }

    fn end_phase(&mut self, _end: &PhaseEnd) {}
}

/// The step's figures and verdict from its run and the answers of its measured seconds
/// (`answered`: second, answers).
/// A probe (closed model, `open_model` false) is not judged on its count: it measures what
/// the target serves at all.
fn judge(
    slos: &[Threshold],
    outcome: &RunOutcome,
    answered: &[(u32, u64)],
    early: Option<(String, String)>,
    open_model: bool,
) -> CapacityStep {
    let total = PhaseSummary::measured_total(&outcome.phases).unwrap_or_default();
    let stats = total.latency_stats();
    let ms = |us: u64| us as f64 / 1000.0;
    let secs = total.duration_secs();
    // under a whole second, the phase's own figure
    let throughput = answered_per_second(answered, secs).unwrap_or(if secs > 0.0 {
        total.responses() as f64 / secs
    } else {
        0.0
    });
    let service_mean_ms = total
        .totals
        .service
        .as_ref()
        .filter(|h| !h.is_empty())
        .map(|h| h.mean_us() / 1000.0);
    let mean_ms = stats.mean_us / 1000.0;
    let mut broken: Vec<BrokenSlo> = slos
        .iter()
        .map(|slo| slo.check(&total))
        .filter(|r| !r.ok)
        .map(|r| BrokenSlo {
            slo: r.threshold,
            actual: r.actual_text,
        })
        .collect();
    let ended_early = early.map(|(slo, why)| {
        if !broken.iter().any(|b| b.slo == slo) {
            broken.push(BrokenSlo {
                slo,
                actual: why.clone(),
            });
        }
        why
    });
    let to_judge = slos
        .iter()
        .map(Threshold::requests_to_judge)
        .max()
        .unwrap_or(0);
    let findings = &outcome.findings.findings;
    // a step ended early is judged on what broke it, not on a full count
    let few_requests = ended_early.is_none() && open_model && total.totals.requests < to_judge;
    CapacityStep {
        n: 0,
        kind: StepKind::Search,
        offered_rate: None,
        connections: None,
        duration_s: secs,
        requests: total.totals.requests,
        throughput,
        p50_ms: ms(stats.p50_us),
        p90_ms: ms(stats.p90_us),
        p99_ms: ms(stats.p99_us),
        max_ms: ms(stats.max_us),
        mean_ms,
        mean_fastest_ms: (total.totals.latency.count() > 0)
            .then(|| total.totals.latency.mean_up_to_quantile_us(FASTEST) / 1000.0),
        service_mean_ms,
        failed_ratio: total.failed_ratio(),
        concurrency: throughput * service_mean_ms.unwrap_or(mean_ms) / 1000.0,
        target_cores: mean_of(&outcome.resources, &outcome.phases, |t| Some(cores_of(t))),
        target_wait_cores: mean_of(&outcome.resources, &outcome.phases, |t| {
            t.cpu_wait_pct.map(|w| w / 100.0)
        }),
        hottest_thread: hottest_thread(&outcome.resources, &outcome.phases),
        kept: broken.is_empty(),
        broken,
        ended_early,
        starved: findings.iter().any(|f| f.rule == GENERATOR_STARVED),
        believed: true,
        few_requests,
        dir: String::new(),
        findings: findings
            .iter()
            .take(FINDINGS_NAMED)
            .map(|f| StepFinding {
                rule: f.rule.clone(),
                severity: f.severity,
                title: f.title.clone(),
            })
            .collect(),
    }
}

/// The watched target's processes over the measured seconds.
fn measured<'a>(
    resources: &'a [ResourceSecond],
    phases: &[PhaseSummary],
) -> Vec<&'a kiln_sample::ProcessSecond> {
    let Some(span) = PhaseSummary::measured_span(phases) else {
        return Vec::new();
    };
    resources
        .iter()
        .filter(|r| span.holds_second(r.unix_ms))
        .filter_map(|r| r.process.as_ref())
        .collect()
}

fn cores_of(t: &kiln_sample::TaskRates) -> f64 {
    (t.cpu_user_pct + t.cpu_system_pct) / 100.0
}

/// A figure of the watched target's, in cores, averaged over the measured seconds that have
/// it.
fn mean_of(
    resources: &[ResourceSecond],
    phases: &[PhaseSummary],
    figure: impl Fn(&kiln_sample::TaskRates) -> Option<f64>,
) -> Option<f64> {
    let seconds = measured(resources, phases);
    let values: Vec<f64> = seconds.iter().filter_map(|p| figure(&p.rates)).collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The thread that used the most CPU over the measured seconds (by name, its mean cores).
fn hottest_thread(resources: &[ResourceSecond], phases: &[PhaseSummary]) -> Option<(String, f64)> {
    let seconds = measured(resources, phases);
    let mut by_thread: std::collections::BTreeMap<(i32, &str), f64> = Default::default();
    for p in &seconds {
        for t in &p.hottest_by_cpu {
            *by_thread.entry((t.id, t.name.as_str())).or_default() += cores_of(t);
        }
    }
    by_thread
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|((_, name), sum)| (name.to_string(), sum / seconds.len() as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_per_second_leave_out_the_grace_after_the_window() {
        // 1.4 s of window: second 0 whole; second 1 holds 0.4 s and the grace's answers
        assert_eq!(answered_per_second(&[(0, 800), (1, 700)], 1.4), Some(800.0));
        assert_eq!(
            answered_per_second(&[(0, 400), (1, 402), (2, 398), (3, 190)], 3.0),
            Some(400.0)
        );
        assert_eq!(answered_per_second(&[(0, 300)], 0.6), None);
    }
}
