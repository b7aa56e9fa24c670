//! `kiln compare BASE NEW`: did a change help, by how much, and how sure is that.
//!
//! The method (researched in `report-compare-findings.md` §1): the unit of replication is a
//! repeat (`--repeat N` phases), not a request or a second, since requests and seconds are
//! correlated. Each figure's change gets a 95% interval from a two-level bootstrap (repeats,
//! then circular blocks of seconds, seeded so the same records give the same table), and a
//! verdict in criterion's way: improved or regressed only when the whole interval lies
//! outside a noise band; `~` otherwise. Beside it, benchstat's Mann-Whitney p over the
//! repeats' own figures, with its small-sample warnings.
//!
//! It reads run records only (either side may be old, copied or interrupted).

mod bootstrap;
pub mod capacity;
mod rank;
mod sample;
mod text;

use std::collections::BTreeSet;

use kiln_findings::Report;
use kiln_record::schema::plan::{LoadPlanRecord, PlanRecord};
use kiln_record::schema::queries::RouteSummary;
use kiln_record::{Run, RunStatus};
use serde::Serialize;

use bootstrap::{block_seconds, Estimate, Grid, GridSide, Resampler};
pub use rank::{mann_whitney_p, smallest_p};
pub use sample::{Repeat, Second, Side};
pub use text::{row_line, to_text};

/// The version of the JSON `kiln compare --json` prints.
pub const COMPARE_VERSION: u32 = 1;

/// How the comparison is computed.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bootstrap resamples.
    pub resamples: u32,
    pub seed: u64,
    /// The interval's confidence, 0..1.
    pub confidence: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resamples: 2000,
            seed: 1,
            confidence: 0.95,
        }
    }
}

/// Better when lower (latency, errors) or higher (throughput).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Lower,
    Higher,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Improved,
    Regressed,
    /// No change outside the noise band that the interval supports.
    #[serde(rename = "~")]
    Same,
    /// Not judged: too few requests for the figure, or a figure without an interval.
    #[serde(rename = "n/a")]
    NotJudged,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Improved => "improved",
            Self::Regressed => "regressed",
            Self::Same => "~",
            Self::NotJudged => "n/a",
        }
    }
}

/// One compared figure.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `p50`, `p99.9`, `max`, `throughput`, `error rate`...
    pub metric: String,
    /// `us`, `req/s`, `%`, `ms CPU/req`.
    pub unit: String,
    pub base: f64,
    pub new: f64,
    /// Relative change (NEW/BASE - 1), or for shares (`%`) the difference in points.
    pub change: f64,
    /// Whether `change` is relative (a ratio) or a difference in the unit's points.
    pub relative: bool,
    /// The interval of `change`; `None` when the figure has none (say why in `note`).
    pub interval: Option<[f64; 2]>,
    /// The noise band: a change inside `±band` is no change.
    pub band: f64,
    pub better: Better,
    pub verdict: Verdict,
    /// Mann-Whitney p over the repeats' own figures, when both sides have two or more.
    pub p_value: Option<f64>,
    pub note: Option<String>,
}

/// A finding and what became of it.
#[derive(Clone, Debug, Serialize)]
pub struct FindingChange {
    pub id: String,
    pub rule: String,
    pub severity: String,
    pub title: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FindingsChange {
    /// In BASE, judged and not found in NEW.
    pub fixed: Vec<FindingChange>,
    /// In NEW, not in BASE.
    pub new: Vec<FindingChange>,
    pub unchanged: Vec<FindingChange>,
    /// In BASE, but NEW could not judge it (no profile, too few samples...).
    pub not_judged_in_new: Vec<FindingChange>,
    /// About the host or kiln itself (a busy host, kiln starved of a CPU), in either run:
    /// not the target's to fix or to break, so never fixed or new.
    #[serde(default)]
    pub host: Vec<FindingChange>,
}

/// A route's DB calls per request in both runs (medians over its requests).
#[derive(Clone, Debug, Serialize)]
pub struct RouteChange {
    pub route: String,
    pub base_requests: u64,
    pub new_requests: u64,
    pub base_calls_per_request: Option<f64>,
    pub new_calls_per_request: Option<f64>,
    pub base_db_ms_per_request: Option<f64>,
    pub new_db_ms_per_request: Option<f64>,
}

/// One side as the table's header shows it.
#[derive(Clone, Debug, Serialize)]
pub struct SideSummary {
    pub dir: String,
    pub name: String,
    pub id: String,
    pub status: String,
    pub started_at: String,
    pub repeats: usize,
    pub seconds: usize,
    pub requests: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub version: u32,
    pub base: SideSummary,
    pub new: SideSummary,
    /// Said before the table: what could make the comparison unfair.
    pub hygiene: Vec<String>,
    pub rows: Vec<Row>,
    /// The target's CPU per request (with its interval) and its system share.
    pub resources: Vec<Row>,
    pub findings: FindingsChange,
    /// Functions whose share of the target's CPU samples moved most (both runs profiled).
    pub profile: Vec<kiln_profile::ShareChange>,
    /// DB calls per request, by route (both runs with traces).
    pub db_routes: Vec<RouteChange>,
    /// Small-sample and method notes, said after the table.
    pub warnings: Vec<String>,
    pub resamples: u32,
    pub seed: u64,
    /// The intervals hold together at this confidence (each at 1 - (1 - confidence)/k).
    pub confidence: f64,
    /// k: the figures whose intervals hold together.
    pub figures_judged: usize,
}

impl Comparison {
    /// The target's CPU per request (ms) in BASE and NEW, when both watched it.
    pub fn cpu_ms_per_request(&self) -> Option<(f64, f64)> {
        (self.resources.iter())
            .find(|r| r.metric == CPU_PER_REQUEST)
            .map(|r| (r.base, r.new))
            .filter(|(b, n)| b.is_finite() && n.is_finite())
    }

    /// A function's CPU per request (ms) in BASE and NEW: its self share of each profile
    /// times each run's CPU per request. A share that rose while the CPU per request fell by
    /// 92% is a function that costs less, not a regression.
    pub fn function_ms_per_request(&self, f: &kiln_profile::ShareChange) -> Option<(f64, f64)> {
        self.cpu_ms_per_request()
            .map(|(b, n)| (f.before_pct / 100.0 * b, f.after_pct / 100.0 * n))
    }

    /// The figures of the table (the load's and the target's resources) with this verdict:
    /// the headline counts what the table shows ("4 improved" stood over 5 improved rows).
    pub fn count(&self, verdict: Verdict) -> usize {
        (self.rows.iter().chain(&self.resources))
            .filter(|r| r.verdict == verdict)
            .count()
    }
}

#[derive(Debug)]
pub struct CompareError(pub String);

impl std::fmt::Display for CompareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CompareError {}

/// The latency figures compared: (label, quantile, noise band).
const PERCENTILES: [(&str, f64, f64); 5] = [
    ("p50", 0.5, 0.02),
    ("p90", 0.9, 0.03),
    ("p95", 0.95, 0.03),
    ("p99", 0.99, 0.05),
    ("p99.9", 0.999, 0.10),
];
/// Below this a latency change is timer noise, whatever its share.
const LATENCY_FLOOR_US: f64 = 10.0;
/// A percentile is judged only with this many requests above it on each side.
const TAIL_REQUESTS: f64 = 20.0;
const THROUGHPUT_BAND: f64 = 0.02;
/// Error rates are compared in percentage points.
const ERROR_BAND_POINTS: f64 = 0.1;

/// Compares two runs.
pub fn compare(base: &Run, new: &Run, options: &Options) -> Result<Comparison, CompareError> {
    let base_side = Side::read(base);
    let new_side = Side::read(new);
    for (label, side) in [("BASE", &base_side), ("NEW", &new_side)] {
        if side.repeats.is_empty() {
            let why = side
                .problems
                .first()
                .map_or(String::new(), |p| format!(": {p}"));
            return Err(CompareError(format!(
                "{label} ({}) has no measured seconds of load to compare{why}",
                side.dir
            )));
        }
    }
    let base_findings = kiln_findings::recorded_or_judged(base);
    let new_findings = kiln_findings::recorded_or_judged(new);
    Ok(compare_sides(
        &base_side,
        &new_side,
        (&base_findings, &new_findings),
        options,
    ))
}

/// Compares two sides already read (tests build them directly).
pub fn compare_sides(
    base: &Side,
    new: &Side,
    findings: (&Report, &Report),
    options: &Options,
) -> Comparison {
    let grid = Grid::of(&[base, new]);
    let on_grid = [
        GridSide::new(&grid, &base.repeats),
        GridSide::new(&grid, &new.repeats),
    ];
    let mut quantiles: Vec<f64> = PERCENTILES.iter().map(|p| p.1).collect();
    quantiles.push(1.0);
    let mut resamplers = [
        Resampler::new(&grid, &on_grid[0]),
        Resampler::new(&grid, &on_grid[1]),
    ];
    let points = [resamplers[0].all(&quantiles), resamplers[1].all(&quantiles)];
    let per_repeat: [Vec<Estimate>; 2] = [0, 1].map(|i| {
        let count = [base, new][i].repeats.len();
        (0..count)
            .map(|r| resamplers[i].repeat(r, &quantiles))
            .collect()
    });
    let draws = resample_in_streams(&grid, &on_grid, &quantiles, options);
    let requests = [base.requests(), new.requests()];
    let tail_enough =
        |q: f64| (TAIL_REQUESTS / (1.0 - q)).ceil() as u64 <= requests[0].min(requests[1]);
    // Simultaneous intervals (Bonferroni): each of the k figures judged gets the interval at
    // 1 - (1 - confidence)/k, so that all k hold together at `confidence` and a comparison of
    // two run sets of one target says "no change" that often, not 1 - k(1 - confidence).
    // the target's CPU per request, second by second, when both sides watched it
    let cpu = [base.record.cpu_seconds(), new.record.cpu_seconds()];
    let wire = [wire_seconds(base), wire_seconds(new)];
    let judged = 2
        + usize::from(cpu.iter().all(|c| !c.is_empty()))
        + 2 * usize::from(wire.iter().all(|w| !w.is_empty()))
        + PERCENTILES.iter().filter(|p| tail_enough(p.1)).count();
    let tail = (1.0 - options.confidence.clamp(0.5, 0.9999)) / 2.0 / judged as f64;
    let interval = |change: &dyn Fn(&Estimate, &Estimate) -> f64| -> Option<[f64; 2]> {
        // a draw without the figure (no whole second for a rate) is left out
        let mut changes: Vec<f64> = draws
            .iter()
            .map(|[b, n]| change(b, n))
            .filter(|c| c.is_finite())
            .collect();
        if changes.is_empty() {
            return None;
        }
        changes.sort_by(f64::total_cmp);
        let at = |q: f64| {
            changes[((q * (changes.len() - 1) as f64).round() as usize).min(changes.len() - 1)]
        };
        Some([at(tail), at(1.0 - tail)])
    };
    let p_of = |figure: &dyn Fn(&Estimate) -> f64| -> Option<f64> {
        let [a, b] = [0, 1].map(|i| per_repeat[i].iter().map(figure).collect::<Vec<f64>>());
        (a.len() >= 2 && b.len() >= 2)
            .then(|| mann_whitney_p(&a, &b))
            .flatten()
    };

    let mut rows = Vec::new();
    for (i, (label, q, band)) in PERCENTILES.iter().enumerate() {
        let (b, n) = (
            points[0].quantiles_us[i] as f64,
            points[1].quantiles_us[i] as f64,
        );
        let needed = (TAIL_REQUESTS / (1.0 - q)).ceil() as u64;
        let mut row = Row {
            metric: label.to_string(),
            unit: "us".into(),
            base: b,
            new: n,
            change: ratio_change(b, n),
            relative: true,
            interval: None,
            band: band.max(if b > 0.0 { LATENCY_FLOOR_US / b } else { 0.0 }),
            better: Better::Lower,
            verdict: Verdict::NotJudged,
            p_value: p_of(&|e: &Estimate| e.quantiles_us[i] as f64),
            note: None,
        };
        if !tail_enough(*q) {
            row.note = Some(format!(
                "too few requests for {label}: {needed} on each side give it {TAIL_REQUESTS} above it"
            ));
        } else {
            row.interval = interval(&|bs, ns| {
                ratio_change(bs.quantiles_us[i] as f64, ns.quantiles_us[i] as f64)
            });
            row.verdict = verdict(&row);
        }
        rows.push(row);
    }
    let last = quantiles.len() - 1;
    let (b, n) = (
        points[0].quantiles_us[last] as f64,
        points[1].quantiles_us[last] as f64,
    );
    rows.push(Row {
        metric: "max".into(),
        unit: "us".into(),
        base: b,
        new: n,
        change: ratio_change(b, n),
        relative: true,
        interval: None,
        band: 0.0,
        better: Better::Lower,
        verdict: Verdict::NotJudged,
        p_value: p_of(&|e: &Estimate| e.quantiles_us[last] as f64),
        note: Some("one request decides the maximum: no interval".into()),
    });
    // requests per whole second (a phase's last second is cut by the end of its load)
    let throughputs = [points[0].per_second, points[1].per_second];
    let mut row = Row {
        metric: "throughput".into(),
        unit: "req/s".into(),
        base: throughputs[0],
        new: throughputs[1],
        change: ratio_change(throughputs[0], throughputs[1]),
        relative: true,
        interval: interval(&|bs, ns| ratio_change(bs.per_second, ns.per_second)),
        band: THROUGHPUT_BAND,
        better: Better::Higher,
        verdict: Verdict::NotJudged,
        p_value: p_of(&|e: &Estimate| e.per_second),
        note: None,
    };
    row.verdict = verdict(&row);
    rows.push(row);
    let mut row = Row {
        metric: "error rate".into(),
        unit: "%".into(),
        base: 100.0 * points[0].failed_ratio,
        new: 100.0 * points[1].failed_ratio,
        change: 100.0 * (points[1].failed_ratio - points[0].failed_ratio),
        relative: false,
        interval: interval(&|bs, ns| 100.0 * (ns.failed_ratio - bs.failed_ratio)),
        band: ERROR_BAND_POINTS,
        better: Better::Lower,
        verdict: Verdict::NotJudged,
        p_value: p_of(&|e: &Estimate| e.failed_ratio),
        note: None,
    };
    row.verdict = verdict(&row);
    rows.push(row);
    rows.extend(wire_rows(&wire, options, tail));

    Comparison {
        version: COMPARE_VERSION,
        base: summary(base),
        new: summary(new),
        hygiene: hygiene(base, new),
        rows,
        resources: resource_rows(&cpu, options, tail),
        findings: findings_change(findings.0, findings.1),
        profile: profile_changes(base, new),
        db_routes: db_route_changes(base, new),
        warnings: warnings(base, new),
        resamples: options.resamples.max(1),
        seed: options.seed,
        confidence: options.confidence,
        figures_judged: judged,
    }
}

/// The bootstrap's resamples in a fixed number of streams, each with its own seed, run in
/// parallel: the same records and seed give the same draws on any machine.
fn resample_in_streams(
    grid: &Grid,
    sides: &[GridSide; 2],
    quantiles: &[f64],
    options: &Options,
) -> Vec<[Estimate; 2]> {
    const STREAMS: u64 = 8;
    let total = u64::from(options.resamples.max(1));
    std::thread::scope(|scope| {
        let streams: Vec<_> = (0..STREAMS)
            .map(|i| {
                let count = total / STREAMS + u64::from(i < total % STREAMS);
                scope.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(
                        options.seed.wrapping_mul(STREAMS).wrapping_add(i),
                    );
                    let mut resamplers = [
                        Resampler::new(grid, &sides[0]),
                        Resampler::new(grid, &sides[1]),
                    ];
                    (0..count)
                        .map(|_| {
                            [
                                resamplers[0].resample(&mut rng, quantiles),
                                resamplers[1].resample(&mut rng, quantiles),
                            ]
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        streams
            .into_iter()
            // a stream that panicked would be a bug here: say it rather than lose draws
            .flat_map(|s| s.join().expect("a resampling stream panicked"))
            .collect()
    })
}

fn ratio_change(base: f64, new: f64) -> f64 {
    if base > 0.0 {
        new / base - 1.0
    } else if new > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// Criterion's rule: a verdict only when the whole interval is outside the noise band.
fn verdict(row: &Row) -> Verdict {
    let Some([lo, hi]) = row.interval else {
        return Verdict::NotJudged;
    };
    let (up, down) = if lo > row.band {
        (true, false)
    } else if hi < -row.band {
        (false, true)
    } else {
        return Verdict::Same;
    };
    match (row.better, up, down) {
        (Better::Lower, true, _) | (Better::Higher, _, true) => Verdict::Regressed,
        _ => Verdict::Improved,
    }
}

fn summary(side: &Side) -> SideSummary {
    let m = &side.record.manifest;
    SideSummary {
        dir: side.dir.clone(),
        name: m.name.clone(),
        id: m.id.clone(),
        status: side.record.status.as_str().into(),
        started_at: m.started_at.clone(),
        repeats: side.repeats.len(),
        seconds: side.seconds(),
        requests: side.requests(),
    }
}

/// What could make the comparison unfair, said before the table.
fn hygiene(base: &Side, new: &Side) -> Vec<String> {
    let mut lines = Vec::new();
    let (bm, nm) = (&base.record.manifest, &new.record.manifest);
    let differing = plan_differences(&bm.plan, &nm.plan);
    if differing.is_empty() {
        lines.push("same plan".to_string());
    } else {
        lines.push(format!("the plans differ: {}", differing.join("; ")));
    }
    if bm.kiln_version == nm.kiln_version {
        lines.push(format!("same kiln ({})", bm.kiln_version));
    } else {
        lines.push(format!(
            "different kiln versions: {} and {}",
            bm.kiln_version, nm.kiln_version
        ));
    }
    for (label, side) in [("BASE", base), ("NEW", new)] {
        if side.record.status != RunStatus::Complete {
            lines.push(format!(
                "{label} is {}: its finished seconds are compared",
                side.record.status.as_str()
            ));
        }
        let unsent: u64 = side
            .record
            .phases
            .iter()
            .filter(|p| p.measured)
            .map(|p| p.unsent())
            .sum();
        if unsent > 0 {
            lines.push(format!(
                "{label}: {unsent} scheduled requests were never sent (every connection busy): \
                 the target fell behind the offered rate there"
            ));
        }
    }
    match (base.record.window(), new.record.window()) {
        (Some(b), Some(n)) if b.to_unix_ms <= n.from_unix_ms + 1000 => lines.push(
            "not interleaved: BASE ran before NEW, so a drift of the machine between them \
             counts as a change (run them alternately to rule it out)"
                .into(),
        ),
        (Some(b), Some(n)) if n.to_unix_ms <= b.from_unix_ms + 1000 => lines.push(
            "not interleaved: NEW ran before BASE, so a drift of the machine between them \
             counts as a change"
                .into(),
        ),
        _ => {}
    }
    lines
}

/// What differs between the two plans, in words: `the load: closed model, 64 connections,
/// ... in BASE; open model, 500/s ... in NEW` (the plans' JSON fragments read as noise).
/// Shard clocks and start times differ between any two runs and are left out.
fn plan_differences(base: &PlanRecord, new: &PlanRecord) -> Vec<String> {
    let (Some(b), Some(n)) = (base.load(), new.load()) else {
        return if base == new {
            Vec::new()
        } else {
            vec!["one of them is not a load run".into()]
        };
    };
    let mut out = Vec::new();
    let mut differ = |what: &str, b: String, n: String| {
        if b != n {
            out.push(format!("{what}: {b} in BASE; {n} in NEW"));
        }
    };
    let target = |p: &LoadPlanRecord| format!("{} {}", p.method, p.url);
    differ("the target", target(b), target(n));
    differ("the load", b.workload_text(), n.workload_text());
    let names = |list: &[String], none: &str| match list.is_empty() {
        true => none.to_string(),
        false => list.join(", "),
    };
    differ(
        "the headers",
        names(&b.headers, "none"),
        names(&n.headers, "none"),
    );
    let body = |p: &LoadPlanRecord| format!("{} bytes", p.body_bytes);
    differ("the body", body(b), body(n));
    let timeout = |p: &LoadPlanRecord| format!("{} s", p.timeout_s);
    differ("the timeout", timeout(b), timeout(n));
    let http = |p: &LoadPlanRecord| {
        let version = if p.http2 { "HTTP/2" } else { "HTTP/1.1" };
        let certificates = if p.insecure {
            ", certificates not checked"
        } else {
            ""
        };
        format!("{version}{certificates}")
    };
    differ("the protocol", http(b), http(n));
    let hedging = |p: &LoadPlanRecord| match &p.hedge {
        None => "off".to_string(),
        Some(h) => format!(
            "after {}, at most {:.0}% more requests{}",
            h.delay,
            100.0 * h.cap,
            match h.replicas.len() {
                0 => String::new(),
                n => format!(", {n} replicas"),
            }
        ),
    };
    differ("hedging", hedging(b), hedging(n));
    differ(
        "the thresholds",
        names(&b.thresholds, "none"),
        names(&n.thresholds, "none"),
    );
    let file = |p: &LoadPlanRecord| p.plan_file.clone().unwrap_or_else(|| "none".into());
    differ("the plan file", file(b), file(n));
    out
}

/// The name of the row of the target's CPU per request.
const CPU_PER_REQUEST: &str = "target CPU per request";

/// Seconds per block when the target's CPU per request is resampled: a second's CPU and
/// requests depend on the seconds around it (queues, GC), blocks keep that together.
const CPU_BLOCK_SECONDS: usize = 5;
/// CPU per request changes within this share are no change (the sampler reads clock ticks).
const CPU_BAND: f64 = 0.05;
/// A wire share (requests on a new connection, responses in two parts) that moves by fewer
/// points is no change.
const WIRE_BAND_POINTS: f64 = 2.0;

/// One moving-block resample of `n` seconds (circular blocks of [`CPU_BLOCK_SECONDS`]):
/// `take` is called with each drawn second's index.
fn block_resample(n: usize, rng: &mut fastrand::Rng, mut take: impl FnMut(usize)) {
    let block = CPU_BLOCK_SECONDS.min(n).max(1);
    for _ in 0..n.div_ceil(block) {
        let start = rng.usize(..n);
        for k in 0..block {
            take((start + k) % n);
        }
    }
}

/// The interval at `tail` of `changes` (the resamples' changes; infinite ones left out).
fn interval_of(mut changes: Vec<f64>, tail: f64) -> Option<[f64; 2]> {
    changes.retain(|c| c.is_finite());
    changes.sort_by(f64::total_cmp);
    let at = |q: f64| {
        changes[((q * (changes.len() - 1) as f64).round() as usize).min(changes.len() - 1)]
    };
    (!changes.is_empty()).then(|| [at(tail), at(1.0 - tail)])
}

/// CPU per request (ms) of a moving-block resample of the seconds.
fn cpu_per_request_draw(seconds: &[(f64, f64, u64)], rng: &mut fastrand::Rng) -> f64 {
    let (mut cpu, mut requests) = (0.0, 0u64);
    block_resample(seconds.len(), rng, |i| {
        let (u, s, r) = seconds[i];
        cpu += u + s;
        requests += r;
    });
    1000.0 * cpu / requests.max(1) as f64
}

/// The target's CPU per request, with its interval from a block bootstrap of each side's
/// seconds (at the same simultaneous tail as the latency figures), and its system share.
fn resource_rows(cpu: &[Vec<(f64, f64, u64)>; 2], options: &Options, tail: f64) -> Vec<Row> {
    let [bs, ns] = cpu;
    if bs.is_empty() || ns.is_empty() {
        return Vec::new();
    }
    let totals = |s: &[(f64, f64, u64)]| {
        s.iter().fold((0.0, 0.0, 0u64), |(u, sy, r), x| {
            (u + x.0, sy + x.1, r.saturating_add(x.2))
        })
    };
    let ((bu, bsys, br), (nu, nsys, nr)) = (totals(bs), totals(ns));
    let per_request = |cpu: f64, r: u64| 1000.0 * cpu / r.max(1) as f64;
    let (b, n) = (per_request(bu + bsys, br), per_request(nu + nsys, nr));
    let mut rng = fastrand::Rng::with_seed(options.seed ^ 0xC0FF_EE00);
    let changes: Vec<f64> = (0..options.resamples.max(1))
        .map(|_| {
            let (db, dn) = (
                cpu_per_request_draw(bs, &mut rng),
                cpu_per_request_draw(ns, &mut rng),
            );
            ratio_change(db, dn)
        })
        .collect();
    let mut cpu = Row {
        metric: CPU_PER_REQUEST.into(),
        unit: "ms".into(),
        base: b,
        new: n,
        change: ratio_change(b, n),
        relative: true,
        interval: interval_of(changes, tail),
        band: CPU_BAND,
        better: Better::Lower,
        verdict: Verdict::NotJudged,
        p_value: None,
        note: None,
    };
    cpu.verdict = verdict(&cpu);
    let share = |u: f64, s: f64| 100.0 * s / (u + s).max(f64::MIN_POSITIVE);
    vec![
        cpu,
        Row {
            metric: "target system share".into(),
            unit: "%".into(),
            base: share(bu, bsys),
            new: share(nu, nsys),
            change: share(nu, nsys) - share(bu, bsys),
            relative: false,
            interval: None,
            band: 0.0,
            better: Better::Lower,
            verdict: Verdict::NotJudged,
            p_value: None,
            note: Some("a split, not a cost: no verdict".into()),
        },
    ]
}

/// Each measured second's wire counts: (requests, connections opened, HTTP/1.1 responses
/// timed, responses in two parts). Empty when the run recorded no wire.
fn wire_seconds(side: &Side) -> Vec<[u64; 4]> {
    let seconds = &side.record.seconds;
    if seconds.iter().all(|s| s.wire.is_empty()) {
        return Vec::new();
    }
    seconds
        .iter()
        .map(|s| {
            let w = &s.wire;
            [s.requests, w.connects, w.responses(), w.long_gaps()]
        })
        .collect()
}

/// Requests on a new connection, and responses in two parts (30 ms or more between their
/// first and last byte: a delayed-ACK stall), as percentages over both sides' measured
/// seconds, when both recorded the wire. Intervals from the same block bootstrap of the
/// seconds as the CPU per request; a change is in points.
fn wire_rows(wire: &[Vec<[u64; 4]>; 2], options: &Options, tail: f64) -> Vec<Row> {
    if wire.iter().any(|w| w.is_empty()) {
        return Vec::new();
    }
    // (metric, numerator, denominator, band in points)
    let figures = [
        ("requests on a new connection", 1, 0, WIRE_BAND_POINTS),
        ("responses in two parts", 3, 2, WIRE_BAND_POINTS),
    ];
    let mut rng = fastrand::Rng::with_seed(options.seed ^ 0x57_1BE5);
    figures
        .iter()
        .map(|&(metric, num, den, band)| {
            let share = |sums: [u64; 4]| 100.0 * sums[num] as f64 / sums[den].max(1) as f64;
            let total = |seconds: &[[u64; 4]]| {
                seconds.iter().fold([0u64; 4], |mut acc, s| {
                    for (a, v) in acc.iter_mut().zip(s) {
                        *a = a.saturating_add(*v);
                    }
                    acc
                })
            };
            let draw = |seconds: &[[u64; 4]], rng: &mut fastrand::Rng| {
                let mut sums = [0u64; 4];
                block_resample(seconds.len(), rng, |i| {
                    for (a, v) in sums.iter_mut().zip(seconds[i]) {
                        *a = a.saturating_add(v);
                    }
                });
                share(sums)
            };
            let changes = (0..options.resamples.max(1))
                .map(|_| {
                    let b = draw(&wire[0], &mut rng);
                    draw(&wire[1], &mut rng) - b
                })
                .collect();
            let (b, n) = (share(total(&wire[0])), share(total(&wire[1])));
            let mut row = Row {
                metric: metric.into(),
                unit: "%".into(),
                base: b,
                new: n,
                change: n - b,
                relative: false,
                interval: interval_of(changes, tail),
                band,
                better: Better::Lower,
                verdict: Verdict::NotJudged,
                p_value: None,
                note: None,
            };
            row.verdict = verdict(&row);
            row
        })
        .collect()
}

fn profile_changes(base: &Side, new: &Side) -> Vec<kiln_profile::ShareChange> {
    match (&base.record.profile, &new.record.profile) {
        (Some(b), Some(n)) if !b.folded.is_empty() && !n.folded.is_empty() => {
            kiln_profile::FoldedDiff::new(&b.folded, &n.folded)
                .biggest_self_changes(&b.folded, &n.folded, 10)
        }
        _ => Vec::new(),
    }
}

fn db_route_changes(base: &Side, new: &Side) -> Vec<RouteChange> {
    fn routes(side: &Side) -> &[RouteSummary] {
        let queries = side.record.queries.as_ref();
        queries.map_or(&[], |q| q.analysis.routes.as_slice())
    }
    fn find<'a>(list: &'a [RouteSummary], route: &str) -> Option<&'a RouteSummary> {
        list.iter().find(|r| r.route == route)
    }
    let (b, n) = (routes(base), routes(new));
    if b.is_empty() || n.is_empty() {
        return Vec::new();
    }
    let names: BTreeSet<&str> = b.iter().chain(n).map(|r| r.route.as_str()).collect();
    names
        .into_iter()
        .map(|route| {
            let (rb, rn) = (find(b, route), find(n, route));
            RouteChange {
                base_requests: rb.map_or(0, |r| r.requests as u64),
                new_requests: rn.map_or(0, |r| r.requests as u64),
                base_calls_per_request: rb.map(|r| r.calls_median),
                new_calls_per_request: rn.map(|r| r.calls_median),
                base_db_ms_per_request: rb.map(|r| r.db_time_median_ms),
                new_db_ms_per_request: rn.map(|r| r.db_time_median_ms),
                route: route.to_string(),
            }
        })
        .collect()
}

fn findings_change(base: &Report, new: &Report) -> FindingsChange {
    let change = |f: &kiln_findings::Finding| FindingChange {
        id: f.id.clone(),
        rule: f.rule.clone(),
        severity: f.severity.as_str().into(),
        title: f.title.clone(),
    };
    let in_new: BTreeSet<&str> = new.findings.iter().map(|f| f.id.as_str()).collect();
    let in_base: BTreeSet<&str> = base.findings.iter().map(|f| f.id.as_str()).collect();
    let mut out = FindingsChange::default();
    let about_target = |f: &&kiln_findings::Finding| f.about == kiln_findings::About::Target;
    let mut host: Vec<&kiln_findings::Finding> =
        base.findings.iter().chain(&new.findings).collect();
    host.retain(|f| !about_target(f));
    host.sort_by(|a, b| a.id.cmp(&b.id));
    host.dedup_by(|a, b| a.id == b.id);
    out.host = host.into_iter().map(change).collect();
    for f in base.findings.iter().filter(about_target) {
        if in_new.contains(f.id.as_str()) {
            out.unchanged.push(change(f));
        } else if new
            .judged
            .iter()
            .any(|r| r == kiln_findings::rules::judging_rule(&f.rule))
        {
            out.fixed.push(change(f));
        } else {
            out.not_judged_in_new.push(change(f));
        }
    }
    out.new = new
        .findings
        .iter()
        .filter(about_target)
        .filter(|f| !in_base.contains(f.id.as_str()))
        .map(change)
        .collect();
    out
}

fn warnings(base: &Side, new: &Side) -> Vec<String> {
    let mut out = Vec::new();
    let (rb, rn) = (base.repeats.len(), new.repeats.len());
    if rb == 1 || rn == 1 {
        out.push(
            "one run on a side: the intervals cover the variation between seconds, not \
             between runs (restarts, JIT, placement); --repeat 5 on both sides covers it"
                .into(),
        );
    } else if rb < 5 || rn < 5 {
        out.push(format!(
            "{rb} vs {rn} repeats: the rank test cannot go below p={:.3} (benchstat's warning); \
             the verdicts come from the bootstrap intervals",
            smallest_p(rb, rn)
        ));
    }
    let shortest = base
        .repeats
        .iter()
        .chain(&new.repeats)
        .map(|r| r.seconds.len())
        .min()
        .unwrap_or(0);
    if shortest < 20 {
        out.push(format!(
            "a repeat of {shortest} s: blocks of {} s are few, so its interval is rough (30 s or more per repeat is better)",
            block_seconds(shortest)
        ));
    }
    for (label, side) in [("BASE", base), ("NEW", new)] {
        for p in &side.problems {
            out.push(format!("{label}: {p}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_findings::{About, Finding, Impact, Severity};

    fn finding(rule: &str) -> Finding {
        Finding {
            id: kiln_findings::finding_id(rule, ""),
            rule: rule.into(),
            severity: Severity::Medium,
            about: About::of_rule(rule),
            title: rule.into(),
            evidence: Vec::new(),
            window: None,
            cause: String::new(),
            fix: String::new(),
            impact: Impact {
                share: 0.5,
                of: "latency".into(),
            },
            flame: None,
            data: serde_json::Value::Null,
            seconds: Vec::new(),
        }
    }

    #[test]
    fn findings_about_the_host_or_kiln_are_never_fixed_or_new() {
        let judged: Vec<String> = ["cpu.categories", "cpu.host-busy", "load.generator-starved"]
            .map(String::from)
            .to_vec();
        let base = Report {
            findings: vec![finding("cpu.json"), finding("cpu.host-busy")],
            judged: judged.clone(),
            ..Report::default()
        };
        let new = Report {
            findings: vec![finding("load.generator-starved"), finding("cpu.host-busy")],
            judged,
            ..Report::default()
        };
        let change = findings_change(&base, &new);
        let rules = |list: &[FindingChange]| -> Vec<String> {
            list.iter().map(|f| f.rule.clone()).collect()
        };
        assert_eq!(rules(&change.fixed), ["cpu.json"]);
        assert!(change.new.is_empty(), "{:?}", change.new);
        assert!(change.unchanged.is_empty(), "{:?}", change.unchanged);
        assert_eq!(
            rules(&change.host),
            ["cpu.host-busy", "load.generator-starved"]
        );
    }
}
