//! `kiln history`: the runs found under some directories, grouped by what they loaded (the
//! method and URL), ordered by their start, each with its headline figures, and the change
//! points in each figure over the runs ([`edivisive`]). A run that did not complete is shown,
//! not judged.

pub mod edivisive;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kiln_record::schema::noise::{NoiseSecond, NOISE_PART};
use kiln_record::{Run, RunStatus};
use serde::Serialize;

pub use edivisive::{change_points, change_points_where, ChangePoint, Options};

/// The figures a run is summed up by, in the order they are shown.
pub const METRICS: [&str; 4] = ["p50_ms", "p99_ms", "throughput", "failed_pct"];

/// One run's headline figures.
#[derive(Clone, Debug, Serialize)]
pub struct RunPoint {
    pub dir: PathBuf,
    pub id: String,
    pub started_at: String,
    pub status: String,
    /// By [`METRICS`] name.
    pub figures: BTreeMap<String, f64>,
    /// How late kiln's own noise probe woke, the run's median second (ms): the host's share
    /// of a latency change.
    pub host_noise_ms: Option<f64>,
}

impl RunPoint {
    fn judged(&self) -> bool {
        self.status == RunStatus::Complete.as_str()
    }
}

/// The runs of one target, and each figure's change points (indexes into the judged runs,
/// those that completed).
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub target: String,
    pub runs: Vec<RunPoint>,
    pub changes: BTreeMap<String, Vec<Change>>,
}

/// A change point, with the run where the new level starts.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    /// The first run of the new level.
    pub run: String,
    pub dir: PathBuf,
    #[serde(flatten)]
    pub point: ChangePoint,
}

/// What could not be read, kept to be said beside the history.
#[derive(Debug, Default, Serialize)]
pub struct History {
    pub series: Vec<Series>,
    pub unreadable: Vec<String>,
}

/// The run directories under `roots` (a directory holding run.json is a run; others are
/// searched, three levels deep at most).
pub fn find_runs(roots: &[PathBuf]) -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        if dir.join("run.json").is_file() {
            out.push(dir.to_path_buf());
            return;
        }
        if depth == 0 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            walk(&d, depth - 1, out);
        }
    }
    let mut out = Vec::new();
    for root in roots {
        walk(root, 3, &mut out);
    }
    out
}

/// Reads the runs in `dirs`, groups them by target, orders them by start, and finds the
/// changes in `metrics`.
pub fn history(dirs: &[PathBuf], metrics: &[String], options: &Options) -> History {
    let mut out = History::default();
    let mut groups: BTreeMap<String, Vec<RunPoint>> = BTreeMap::new();
    for dir in dirs {
        match read_point(dir) {
            Ok((target, point)) => groups.entry(target).or_default().push(point),
            Err(why) => out.unreadable.push(format!("{}: {why}", dir.display())),
        }
    }
    for (target, mut runs) in groups {
        runs.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        let judged: Vec<&RunPoint> = runs.iter().filter(|r| r.judged()).collect();
        let mut changes = BTreeMap::new();
        for metric in metrics {
            let values: Vec<f64> = judged
                .iter()
                .map(|r| r.figures.get(metric).copied().unwrap_or(f64::NAN))
                .collect();
            if values.iter().any(|v| !v.is_finite()) {
                continue;
            }
            // a latency change no larger than the change in how late kiln's own noise probe
            // woke (each side's median run) is the host's, not the target's
            let noise: Vec<Option<f64>> = judged.iter().map(|r| r.host_noise_ms).collect();
            let side_noise = |r: std::ops::Range<usize>| {
                let mut known: Vec<f64> = noise[r].iter().flatten().copied().collect();
                known.sort_by(f64::total_cmp);
                known.get(known.len() / 2).copied()
            };
            let latency = metric.ends_with("_ms");
            let accept = |before: std::ops::Range<usize>, after: std::ops::Range<usize>| {
                if !latency {
                    return true;
                }
                let change = edivisive::mean(&values[after.clone()])
                    - edivisive::mean(&values[before.clone()]);
                match (side_noise(before), side_noise(after)) {
                    (Some(nb), Some(na)) => change.abs() > (na - nb).abs(),
                    _ => true,
                }
            };
            let found = change_points_where(&values, options, &accept)
                .into_iter()
                .map(|point| Change {
                    run: judged[point.index].id.clone(),
                    dir: judged[point.index].dir.clone(),
                    point,
                })
                .collect();
            changes.insert(metric.clone(), found);
        }
        out.series.push(Series {
            target,
            runs,
            changes,
        });
    }
    out
}

/// A run's target and headline figures.
fn read_point(dir: &Path) -> Result<(String, RunPoint), String> {
    let run = Run::open(dir).map_err(|e| e.to_string())?;
    let manifest = run.manifest();
    let plan = manifest
        .plan
        .load()
        .ok_or_else(|| "not a load run".to_string())?;
    let target = format!("{} {}", plan.method, plan.url);
    let mut figures = BTreeMap::new();
    if let Some(total) = run.measured() {
        let latency = total.totals.latency.stats();
        figures.insert("p50_ms".into(), latency.p50_us as f64 / 1000.0);
        figures.insert("p99_ms".into(), latency.p99_us as f64 / 1000.0);
        figures.insert("throughput".into(), total.throughput());
        figures.insert("failed_pct".into(), 100.0 * total.failed_ratio());
    }
    let mut late: Vec<f64> = (run.lines::<NoiseSecond>(NOISE_PART).iter())
        .map(|s| s.probe_late_max_ms)
        .filter(|v| v.is_finite())
        .collect();
    late.sort_by(f64::total_cmp);
    let host_noise_ms = late.get(late.len() / 2).copied();
    Ok((
        target,
        RunPoint {
            dir: dir.to_path_buf(),
            id: manifest.id.clone(),
            started_at: manifest.started_at.clone(),
            status: manifest.status.as_str().to_string(),
            figures,
            host_noise_ms,
        },
    ))
}

/// The newest completed run of each target in Bencher Metric Format (bencher.dev's JSON of
/// benchmark -> measure -> value): `latency` is p50 and `latency-p99` p99 in nanoseconds (its
/// built-in latency unit), `throughput` requests a second, `failed-percent` the failed share.
pub fn bencher_metric_format(history: &History) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for series in &history.series {
        let Some(run) = series.runs.iter().rev().find(|r| r.judged()) else {
            continue;
        };
        let f = |k: &str| run.figures.get(k).copied().unwrap_or(0.0);
        out.insert(
            series.target.clone(),
            serde_json::json!({
                "latency": {"value": f("p50_ms") * 1e6},
                "latency-p99": {"value": f("p99_ms") * 1e6},
                "throughput": {"value": f("throughput")},
                "failed-percent": {"value": f("failed_pct")},
            }),
        );
    }
    serde_json::Value::Object(out)
}
