//! The rules, one small unit each beside its tests. A rule is a function from the record to a
//! [`Verdict`]; [`ALL`] lists them in the order their verdicts are reported.

mod cpu;
mod db;
mod drift;
mod latency;
mod noise;
mod offcpu;
mod periodic;
mod profile;
mod python;
mod runtime;
mod sockets;
mod wire;

#[cfg(test)]
pub(crate) mod fixtures;

use crate::{finding_id, Finding, Impact, RunRecord, Severity, Verdict, Window};

/// One rule: its id (the `rule` of what it finds) and its judgement.
pub struct Rule {
    pub id: &'static str,
    pub judge: fn(&RunRecord) -> Verdict,
}

pub const ALL: &[Rule] = &[
    latency::ERRORS,
    latency::RATE_NOT_REACHED,
    latency::TAIL_HEAVY,
    noise::GENERATOR_STARVED,
    drift::DRIFT,
    periodic::PERIODIC_SPIKES,
    cpu::SATURATED,
    cpu::HOST_BUSY,
    cpu::HYPERVISOR_STEAL,
    cpu::SYSTEM_ABOVE_USER,
    cpu::CGROUP_THROTTLED,
    cpu::IRQ_HOTSPOT,
    cpu::WAITING_NOT_RUNNING,
    cpu::POOL_TOO_SMALL,
    sockets::LISTEN_OVERFLOW,
    sockets::SEND_QUEUE_GROWTH,
    sockets::RETRANSMITS,
    wire::DELAYED_ACK,
    wire::CONNECTION_CHURN,
    profile::CATEGORIES_RULE,
    offcpu::LOCK_CONTENTION,
    runtime::GC_PAUSES,
    runtime::JIT_WARMUP,
    runtime::EXCEPTIONS,
    runtime::BLOCKED_THREADS,
    python::GIL_CONTENTION,
    db::DB_CALLS,
];

pub(crate) use noise::{blame_the_generator, note_the_busy_host};

/// The rule in `ALL` whose verdict covers findings of `rule`: the categories rule judges
/// `cpu.json`, `cpu.exceptions` and the rest of its categories, the DB rule every kind of DB
/// finding; any other rule judges itself. A record where that rule judged and found nothing
/// of `rule` has it fixed.
pub fn judging_rule(rule: &str) -> &str {
    if profile::is_category(rule) {
        profile::CATEGORIES_RULE.id
    } else if rule.starts_with("db.") {
        db::DB_CALLS.id
    } else {
        rule
    }
}

/// The parts of a finding every rule fills in.
pub(crate) struct Draft<'a> {
    pub rule: &'a str,
    /// What tells this occurrence apart from others of the rule ("" when there is one).
    pub key: &'a str,
    pub severity: Severity,
    pub title: String,
    pub evidence: Vec<String>,
    pub window: Option<Window>,
    pub cause: String,
    pub fix: String,
    pub impact: (f64, &'a str),
    pub data: serde_json::Value,
}

impl Draft<'_> {
    pub fn finish(self) -> Finding {
        Finding {
            id: finding_id(self.rule, self.key),
            rule: self.rule.to_string(),
            severity: self.severity,
            about: crate::About::of_rule(self.rule),
            title: self.title,
            evidence: self.evidence,
            window: self.window,
            cause: self.cause,
            fix: self.fix,
            impact: Impact {
                share: if self.impact.0.is_finite() {
                    self.impact.0.clamp(0.0, 1.0)
                } else {
                    0.0
                },
                of: self.impact.1.to_string(),
            },
            flame: None,
            data: self.data,
            seconds: Vec::new(),
        }
    }
}

/// A fix: what any target can do, and what only some runtimes can. A runtime's own advice is
/// given when kiln knows the target runs on it (watched: `run.runtime`), every runtime's
/// (each named) when it does not, and none of it for a target on another runtime: no JVM
/// flags for a native or Go target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fix {
    pub any: &'static str,
    /// (runtime as `RuntimeInfo::runtime` names it, its name in a sentence, its advice)
    pub runtimes: &'static [(&'static str, &'static str, &'static str)],
}

impl Fix {
    /// Advice for any runtime alone.
    pub const fn any(text: &'static str) -> Self {
        Self {
            any: text,
            runtimes: &[],
        }
    }

    /// The fix for the target of `run`.
    pub fn for_run(&self, run: &RunRecord) -> String {
        self.text(run.runtime.as_ref().map(|r| r.info.runtime.as_str()))
    }

    /// The fix for a target on `runtime` (None: not known).
    pub fn text(&self, runtime: Option<&str>) -> String {
        let mut out = self.any.to_string();
        for (kind, name, advice) in self.runtimes {
            match runtime {
                Some(r) if r == *kind => {
                    out += "; ";
                    out += advice;
                }
                Some(_) => {}
                None => {
                    out += &format!("; for {name}: {advice}");
                }
            }
        }
        out
    }
}

/// The mean of some values, None for none (or only non-finite ones).
pub(crate) fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

pub(crate) use kiln_record::text::{bytes, us as duration_us};

/// The message a rule gives when no process was watched.
pub(crate) const NO_PROCESS: &str =
    "no process was watched (run with --watch-port PORT or --watch-pid PID)";

/// What the host checks taken at the run's start say about a finding's cause: an evidence
/// line per check among `ids` that was not ok, and their fixes (the exact commands for this
/// host), to put before the rule's general advice.
pub(crate) fn host_checks(run: &RunRecord, ids: &[&str]) -> (Vec<String>, Vec<String>) {
    let Some(doctor) = &run.doctor else {
        return (Vec::new(), Vec::new());
    };
    let not_ok = doctor
        .not_ok()
        .into_iter()
        .filter(|c| ids.contains(&c.id.as_ref()) && c.verdict != kiln_sample::Verdict::Unknown);
    let mut evidence = Vec::new();
    let mut fixes = Vec::new();
    for c in not_ok {
        evidence.push(format!(
            "host check {} ({}) at the run's start: {}",
            c.id,
            c.verdict.label(),
            kiln_record::text::safe_text(&c.evidence)
        ));
        if !c.fix.is_empty() {
            fixes.push(kiln_record::text::safe_text(&c.fix));
        }
    }
    (evidence, fixes)
}

/// A rule's fix with this host's commands first.
pub(crate) fn with_host_fixes(fixes: Vec<String>, general: String) -> String {
    if fixes.is_empty() {
        general
    } else {
        format!("on this host: {}; in general: {general}", fixes.join("; "))
    }
}
