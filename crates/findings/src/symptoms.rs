//! The run's symptoms and which findings explain them: p99 and throughput against what was
//! asked, the target's CPU per request, and for each, the findings' shares. For latency, the
//! share of the requests slower than p99 that fall in a finding's seconds (a period's spikes,
//! the seconds kiln was starved); for CPU, a finding's share of the target's CPU samples,
//! which is its share of the CPU per request.

use serde::{Deserialize, Serialize};

use crate::{Finding, RunRecord};

/// A finding's share of a symptom.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub id: String,
    pub rule: String,
    pub title: String,
    /// 0..1.
    pub share: f64,
}

/// What the run shows, before why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Symptoms {
    pub p50_us: u64,
    pub p99_us: u64,
    /// Requests per second served, and asked for (an open model's rate, when steady).
    pub throughput: f64,
    pub asked_per_s: Option<f64>,
    /// The target's CPU per request (ms), when it was watched.
    pub cpu_ms_per_request: Option<f64>,
    /// Requests slower than p99, and the findings that hold them, largest share first.
    pub above_p99: u64,
    pub p99_explained: Vec<Share>,
    /// The findings that take a share of the target's CPU, largest first.
    pub cpu_explained: Vec<Share>,
}

/// A finding's latency share counts when it holds at least this share of the slow requests.
const MIN_SHARE: f64 = 0.05;

impl Symptoms {
    /// The symptoms of `run`, explained by `findings` (None without measured load).
    pub fn of(run: &RunRecord, findings: &[Finding]) -> Option<Self> {
        let total = run.measured()?;
        let h = &total.totals.latency;
        // no latency to explain: a p99 of 0us at 0/s said nothing true
        if h.is_empty() {
            return None;
        }
        // saturating: a record is untrusted input
        let sum = |counts: &mut dyn Iterator<Item = u64>| counts.fold(0u64, u64::saturating_add);
        let above = sum(&mut run.above_p99.iter().map(|(_, n)| *n));
        let share = |f: &Finding| Share {
            id: f.id.clone(),
            rule: f.rule.clone(),
            title: f.title.clone(),
            share: 0.0,
        };
        let mut p99_explained: Vec<Share> = findings
            .iter()
            .filter(|f| !f.seconds.is_empty() && above > 0)
            .map(|f| {
                let held = sum(&mut run
                    .above_p99
                    .iter()
                    .filter(|(at, _)| f.seconds.binary_search(at).is_ok())
                    .map(|(_, n)| *n));
                Share {
                    share: held as f64 / above as f64,
                    ..share(f)
                }
            })
            .filter(|s| s.share >= MIN_SHARE)
            .collect();
        p99_explained.sort_by(|a, b| b.share.total_cmp(&a.share));
        let mut cpu_explained: Vec<Share> = findings
            .iter()
            .filter(|f| f.impact.of == "the target's CPU" && f.impact.share > 0.0)
            .map(|f| Share {
                share: f.impact.share,
                ..share(f)
            })
            .collect();
        cpu_explained.sort_by(|a, b| b.share.total_cmp(&a.share));
        let cpu = run.cpu_seconds();
        let requests = sum(&mut cpu.iter().map(|(_, _, r)| *r));
        Some(Self {
            p50_us: h.quantile_us(0.5),
            p99_us: h.quantile_us(0.99),
            throughput: total.throughput(),
            // an open model's schedule: what was asked, whatever the target did
            asked_per_s: (run.manifest.plan.open_model() && total.duration_secs() > 0.0).then(
                || sum(&mut run.seconds.iter().map(|s| s.scheduled)) as f64 / total.duration_secs(),
            ),
            cpu_ms_per_request: (requests > 0)
                .then(|| 1000.0 * cpu.iter().map(|(u, s, _)| u + s).sum::<f64>() / requests as f64),
            above_p99: above,
            p99_explained,
            cpu_explained,
        })
    }
}
