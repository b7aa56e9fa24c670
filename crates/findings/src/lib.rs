//! kiln's findings: rules over a run record (the load's seconds, the resources, the profile,
//! the DB-call analysis, the plan) that say what is wrong, with its evidence, its likely
//! cause, the fix to try and what it costs. A rule reads only the record: it runs no load and
//! reads no /proc, so a copied, old or interrupted run is judged as the live one was.
//!
//! Each rule lives in [`rules`] beside its tests on fixture records; [`judge`] runs them all
//! and ranks what fired. A rule that lacks what it needs says so ([`Unjudged`]) instead of
//! staying silent, so a missing instrument is visible.

pub mod record;
pub mod rules;
pub mod symptoms;
mod text;

use serde::{Deserialize, Serialize};

pub use record::RunRecord;
pub use text::{symptoms_text, to_text, UnjudgedLines};

use kiln_record::parts::FINDINGS_PART;
use kiln_record::{RecordError, Run, RunDir};

/// The version of `findings.json`. 2: a finding names the frame it cites in a flame graph
/// (`flame`); a record of version 1 is judged again.
pub const FINDINGS_VERSION: u32 = 2;

pub use kiln_record::schema::Severity;

/// What a finding costs, by which findings are ranked: a share of something the user pays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Impact {
    /// 0..1.
    pub share: f64,
    /// Of what: "the target's CPU", "requests", "latency", "DB time"...
    pub of: String,
}

/// A span of wall-clock time a finding is about (ms since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
}

/// One problem kiln names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable: the same problem gets the same id on the next run (the rule, and for problems
    /// that can occur more than once, a hash of what tells them apart).
    pub id: String,
    /// The rule that fired, e.g. `cpu.system-above-user`.
    pub rule: String,
    pub severity: Severity,
    /// Whose evidence it is: the target's own, the host's, or kiln's own.
    #[serde(default)]
    pub about: About,
    /// One line in the user's words.
    pub title: String,
    /// The numbers behind it, each with its unit, one per line.
    pub evidence: Vec<String>,
    /// The time the evidence covers, when it is a window of the run.
    pub window: Option<Window>,
    /// The likely cause.
    pub cause: String,
    /// The fix to try: the setting, flag or code change.
    pub fix: String,
    pub impact: Impact,
    /// The frame the finding cites in one of the run's flame graphs, for the report's link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flame: Option<FlameCite>,
    /// The evidence as data (series, frames, statements), for the report and scripts.
    #[serde(default)]
    pub data: serde_json::Value,
    /// The load's seconds (their ends, ms since the Unix epoch) this finding explains, when
    /// it is some of them (a period's spikes, the seconds kiln was starved): the share of the
    /// requests above p99 it accounts for is counted in them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seconds: Vec<u64>,
}

impl Finding {
    /// The finding, explaining these seconds of the load.
    pub fn in_seconds(mut self, mut seconds: Vec<u64>) -> Self {
        seconds.sort_unstable();
        self.seconds = seconds;
        self
    }

    /// The finding, citing `flame` in a flame graph.
    pub fn citing(mut self, flame: Option<FlameCite>) -> Self {
        self.flame = flame;
        self
    }
}

/// Whose evidence a finding rests on. Only the target's findings are the target's to fix: a
/// comparison never counts the others as fixed or new.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum About {
    /// The target's process, threads, sockets or cgroup.
    #[default]
    Target,
    /// Other processes on the host.
    Host,
    /// kiln itself (the load generator).
    Kiln,
}

impl About {
    /// Whose evidence findings of `rule` rest on.
    pub fn of_rule(rule: &str) -> Self {
        match rule {
            // other processes' CPU; the host's interrupt placement (its fix is the host's:
            // receive queues, RPS, irqbalance), whoever's traffic it is
            "cpu.host-busy" | "cpu.hypervisor-steal" | "cpu.irq-hotspot" => Self::Host,
            "load.generator-starved" => Self::Kiln,
            _ => Self::Target,
        }
    }
}

/// A frame a finding cites, and which profile's flame graph shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlameCite {
    /// The profile's event: `cpu` (on-CPU) or `cswitch` (off-CPU).
    pub event: kiln_record::schema::profile::Event,
    pub frame: String,
}

/// A rule that could not judge this record, and why (no profile, too few samples...).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unjudged {
    pub rule: String,
    pub reason: String,
}

/// Every rule's verdict on one record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    /// Ranked: most severe first, then by impact.
    pub findings: Vec<Finding>,
    /// The rules that judged the record (whether or not they found something).
    pub judged: Vec<String>,
    pub unjudged: Vec<Unjudged>,
    /// What could not be read from the record (a damaged part); the rules judged the rest.
    #[serde(default)]
    pub read_problems: Vec<String>,
    /// What the run shows (p99, throughput, CPU per request) and which findings explain it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symptoms: Option<symptoms::Symptoms>,
}

impl Report {
    /// Whether a finding is at least this severe (`--fail-on`).
    pub fn any_at_least(&self, severity: Severity) -> bool {
        self.findings.iter().any(|f| f.severity >= severity)
    }
}

/// What one rule says about one record.
#[derive(Debug)]
pub enum Verdict {
    Found(Vec<Finding>),
    Clear,
    Unjudged(String),
}

/// Runs every rule over `record` and ranks what they found.
pub fn judge(record: &RunRecord) -> Report {
    let mut report = Report {
        version: FINDINGS_VERSION,
        read_problems: record.problems.clone(),
        ..Report::default()
    };
    for rule in rules::ALL {
        match (rule.judge)(record) {
            Verdict::Found(found) => {
                report.findings.extend(found);
                report.judged.push(rule.id.to_string());
            }
            Verdict::Clear => report.judged.push(rule.id.to_string()),
            Verdict::Unjudged(reason) => report.unjudged.push(Unjudged {
                rule: rule.id.to_string(),
                reason,
            }),
        }
    }
    relate(&mut report.findings);
    merge_one_cause(&mut report.findings);
    rules::blame_the_generator(&mut report.findings, record);
    rules::note_the_busy_host(&mut report.findings, record);
    rank(&mut report.findings);
    report.symptoms = symptoms::Symptoms::of(record, &report.findings);
    report
}

/// Findings that one explains: a heavy tail made by periodic spikes is said to be their
/// effect, and ranked below them, rather than standing as a second problem.
fn relate(findings: &mut [Finding]) {
    let Some(periodic) = findings
        .iter()
        .find(|f| f.rule == "latency.periodic-spikes")
        .map(|f| f.id.clone())
    else {
        return;
    };
    for f in findings
        .iter_mut()
        .filter(|f| f.rule == "latency.tail-heavy")
    {
        f.severity = Severity::Low;
        f.evidence.push(format!(
            "the periodic latency spikes ({periodic}) make at least part of this tail: fix them \
             first"
        ));
    }
}

/// Findings of one cause become one: system time above user time whose kernel work is mostly
/// page faults (the profile's kernel frames say so) is the page-fault finding's evidence, not
/// a second problem (its share of the CPU is those faults, counted twice otherwise).
fn merge_one_cause(findings: &mut Vec<Finding>) {
    let kernel_is_faults = |f: &Finding| {
        f.rule == "cpu.system-above-user" && f.data["kernel_work"][0]["work"] == "page faults"
    };
    let (Some(kernel_at), true) = (
        findings.iter().position(kernel_is_faults),
        findings.iter().any(|f| f.rule == "cpu.page-faults"),
    ) else {
        return;
    };
    let kernel = findings.remove(kernel_at);
    let Some(faults) = findings.iter_mut().find(|f| f.rule == "cpu.page-faults") else {
        return;
    };
    faults.severity = faults.severity.max(kernel.severity);
    faults.evidence.push(kernel.title);
    faults.evidence.extend(kernel.evidence);
    faults.data["system_above_user"] = kernel.data;
}

/// Most severe first; among equals the larger impact first; ties by id, so the order is stable.
fn rank(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(b.impact.share.total_cmp(&a.impact.share))
            .then(a.id.cmp(&b.id))
    });
}

/// Judges the run as read.
pub fn judge_run(run: &Run) -> Report {
    judge(&RunRecord::of(run))
}

/// Writes `findings.json` into the run directory.
pub fn write(dir: &mut RunDir, report: &Report) -> Result<std::path::PathBuf, RecordError> {
    let text = serde_json::to_string_pretty(report).map_err(|e| RecordError::Malformed {
        path: dir.path().join("findings.json"),
        detail: e.to_string(),
    })?;
    dir.write_file_part(
        FINDINGS_PART,
        "findings.json",
        FINDINGS_VERSION,
        text.as_bytes(),
    )
}

/// The findings a run recorded, when it recorded them in a version this kiln reads.
pub fn recorded(run: &Run) -> Option<Report> {
    let report = run.part::<Report>(FINDINGS_PART)?;
    (report.version == FINDINGS_VERSION).then(|| {
        let mut report = Report::clone(&report);
        // recorded before findings said whose evidence they rest on
        for f in &mut report.findings {
            f.about = About::of_rule(&f.rule);
        }
        report
    })
}

/// The findings a run recorded; judged now when it recorded none this kiln reads (an older
/// kiln, a run killed before the end, a damaged findings.json).
pub fn recorded_or_judged(run: &Run) -> Report {
    recorded(run).unwrap_or_else(|| judge_run(run))
}

/// A stable id for one problem of a rule: the rule, and a short hash of what tells this
/// occurrence apart from others of the same rule (a peer address, a frame, a statement).
pub fn finding_id(rule: &str, key: &str) -> String {
    if key.is_empty() {
        return rule.to_string();
    }
    let hash = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
    format!("{rule}:{:08x}", hash >> 32)
}

#[cfg(test)]
mod related {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};

    #[test]
    fn a_tail_made_by_periodic_spikes_is_said_to_be_their_effect() {
        // 180 s at 2 ms with one 400 ms request in every 10th second: both rules fire
        let seconds: Vec<Second> = (0..180)
            .map(|t| {
                if t % 10 == 0 {
                    Second::latencies(&[(2_000, 80), (300_000, 15), (400_000, 5)])
                } else {
                    Second::ok(100)
                }
            })
            .collect();
        let report = judge(&load_run(&seconds));
        let rules: Vec<&str> = report.findings.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(
            rules,
            ["latency.periodic-spikes", "latency.tail-heavy"],
            "{report:?}"
        );
        // the symptom: every request slower than p99 (the 400 ms ones) lies in a spike second
        let symptoms = report.symptoms.as_ref().unwrap();
        assert_eq!(symptoms.p99_us, 300_031, "{symptoms:?}");
        assert_eq!(symptoms.above_p99, 90);
        assert_eq!(symptoms.p99_explained.len(), 1, "{symptoms:?}");
        assert_eq!(symptoms.p99_explained[0].rule, "latency.periodic-spikes");
        assert_eq!(symptoms.p99_explained[0].share, 1.0);
        let tail = &report.findings[1];
        assert_eq!(tail.severity, Severity::Low);
        assert!(tail
            .evidence
            .last()
            .unwrap()
            .contains("periodic latency spikes"));
        // a tail with no period behind it stands as its own finding
        let steady = judge(&load_run(&vec![
            Second::latencies(&[
                (2_000, 98),
                (40_000, 2)
            ]);
            180
        ]));
        let tail = steady
            .findings
            .iter()
            .find(|f| f.rule == "latency.tail-heavy")
            .unwrap();
        assert_eq!(tail.severity, Severity::High, "{tail:?}");
        assert!(!tail.evidence.iter().any(|e| e.contains("periodic")));
    }

    fn finding(rule: &str, severity: Severity, data: serde_json::Value) -> Finding {
        Finding {
            id: rule.into(),
            rule: rule.into(),
            severity,
            about: About::Target,
            title: format!("{rule} title"),
            evidence: vec![format!("{rule} evidence")],
            window: None,
            cause: String::new(),
            fix: String::new(),
            impact: Impact {
                share: 0.4,
                of: "the target's CPU".into(),
            },
            flame: None,
            data,
            seconds: Vec::new(),
        }
    }

    #[test]
    fn system_time_that_is_page_faults_is_the_page_fault_finding() {
        let kernel = serde_json::json!({"kernel_work": [{"work": "page faults", "samples": 9}]});
        let mut findings = vec![
            finding("cpu.system-above-user", Severity::Medium, kernel.clone()),
            finding("cpu.page-faults", Severity::High, serde_json::json!({})),
        ];
        merge_one_cause(&mut findings);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let f = &findings[0];
        assert_eq!(f.rule, "cpu.page-faults");
        assert_eq!(
            f.evidence,
            [
                "cpu.page-faults evidence",
                "cpu.system-above-user title",
                "cpu.system-above-user evidence"
            ]
        );
        assert_eq!(f.data["system_above_user"], kernel);
        // kernel time of another kind stands on its own
        let futex = serde_json::json!({"kernel_work": [{"work": "lock waits (futex)"}]});
        let mut findings = vec![
            finding("cpu.system-above-user", Severity::Medium, futex),
            finding("cpu.page-faults", Severity::High, serde_json::json!({})),
        ];
        merge_one_cause(&mut findings);
        assert_eq!(findings.len(), 2);
    }
}

#[cfg(test)]
mod any_record {
    //! A record is untrusted input: whatever numbers its parts hold, every rule judges it
    //! without a panic (no overflow, no division by zero, no out-of-range index).
    use super::*;
    use crate::record::LoadPoint;
    use crate::rules::fixtures::{load_run, profiled_run, Second};
    use kiln_sample::{
        CgroupSecond, CpuSplit, KernelSecond, ProcessSecond, ResourceSecond, SocketSummary,
        TaskRates,
    };
    use proptest::prelude::*;

    fn number() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..100, 0u64..u64::from(u32::MAX), any::<u64>()]
    }

    fn float() -> impl Strategy<Value = f64> {
        prop_oneof![0.0..200.0f64, any::<f64>()]
    }

    prop_compose! {
        fn resource_second()(n in prop::collection::vec(number(), 8),
                             f in prop::collection::vec(float(), 6)) -> ResourceSecond {
            let split = CpuSplit { user: f[0], system: f[1], idle: f[2], softirq: f[3], irq: f[4],
                ..Default::default() };
            ResourceSecond {
                unix_ms: n[0],
                host_cpu_per_core: vec![(0, split), (n[1] as u32 % 4, split)],
                process: Some(ProcessSecond {
                    rates: TaskRates { cpu_user_pct: f[0], cpu_system_pct: f[5], ..Default::default() },
                    sockets: Some(SocketSummary {
                        max_send_q: Some(("127.0.0.1:1".into(), n[2])),
                        listen_backlog: vec![("127.0.0.1:2".into(), n[3], n[4])],
                        ..Default::default()
                    }),
                    cgroup: Some(CgroupSecond {
                        quota_cpus: Some(f[1]), throttled_periods: Some(n[5]),
                        throttled_ms: Some(f[2]), cpu_pct: Some(f[3]), ..Default::default()
                    }),
                    ..Default::default()
                }),
                kernel: Some(KernelSecond {
                    listen_overflows: Some(n[6]), listen_drops: Some(n[7]),
                    net_rx_per_cpu: vec![n[1], n[2]], thp_fault_alloc: Some(n[3]),
                    compact_stall: Some(n[4]), ..Default::default()
                }),
                ..Default::default()
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn any_numbers_are_judged_without_a_panic(
            resources in prop::collection::vec(resource_second(), 0..12),
            points in prop::collection::vec((number(), number(), number()), 0..40),
            status in prop::collection::vec((400u16..=u16::MAX, number()), 0..3),
        ) {
            let mut second = Second::ok(10);
            second.status.extend(status);
            let mut run = load_run(&vec![second; 3]);
            run.resources = resources;
            run.seconds = points
                .into_iter()
                .map(|(unix_ms, max_us, requests)| LoadPoint { unix_ms, max_us, requests,
                    ..Default::default() })
                .collect();
            run.profile = profiled_run("a;b_[k];page_fault_[k] 300\na;syscall;__x64_sys_clock_gettime_[k] 7\n").profile;
            let report = judge(&run);
            let _ = to_text(&report, UnjudgedLines::Listed);
        }
    }
}
