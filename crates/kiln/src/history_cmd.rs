//! `kiln history DIR...`: the runs of each target over time and the change points among them.

use std::fmt::Write as _;

use anyhow::{bail, Context as _, Result};
use kiln_history::{History, Options, Series, METRICS};

use crate::cli::HistoryArgs;
use crate::format::safe_text;

pub fn run(args: HistoryArgs) -> Result<u8> {
    let metrics: Vec<String> = if args.metrics.is_empty() {
        METRICS.iter().map(|m| m.to_string()).collect()
    } else {
        args.metrics.clone()
    };
    if let Some(bad) = metrics.iter().find(|m| !METRICS.contains(&m.as_str())) {
        bail!("--metric {bad}: the figures are {}", METRICS.join(", "));
    }
    let in_range = (0.0..1.0).contains(&args.alpha) && args.alpha > 0.0 && args.min_change >= 0.0;
    if !in_range {
        bail!("--alpha is above 0 and below 1, --min-change at least 0");
    }
    let dirs = kiln_history::find_runs(&args.dirs);
    if dirs.is_empty() {
        bail!(
            "no run directories (holding run.json) under {}",
            shown(&args.dirs)
        );
    }
    let options = Options {
        alpha: args.alpha,
        min_relative: args.min_change,
        ..Options::default()
    };
    let history = kiln_history::history(&dirs, &metrics, &options);
    if let Some(file) = &args.bmf {
        let bmf = kiln_history::bencher_metric_format(&history);
        std::fs::write(file, serde_json::to_string_pretty(&bmf)?)
            .with_context(|| format!("cannot write {}", safe_text(&file.display().to_string())))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&history)?);
    } else {
        print!("{}", text(&history));
    }
    let changed = (history.series.iter()).any(|s| s.changes.values().any(|c| !c.is_empty()));
    Ok(if args.fail_on_change && changed {
        crate::exit::EXIT_THRESHOLDS_FAILED
    } else {
        0
    })
}

fn shown(dirs: &[std::path::PathBuf]) -> String {
    let names: Vec<String> = dirs
        .iter()
        .map(|d| safe_text(&d.display().to_string()))
        .collect();
    names.join(", ")
}

fn text(history: &History) -> String {
    let mut out = String::new();
    for series in &history.series {
        out += &series_text(series);
    }
    for problem in &history.unreadable {
        let _ = writeln!(out, "not read   {}", safe_text(problem));
    }
    out
}

fn series_text(s: &Series) -> String {
    let judged = s.runs.iter().filter(|r| r.status == "complete").count();
    let mut out = format!(
        "History    {}: {} runs ({judged} judged; a run that did not complete is shown, not judged)\n",
        safe_text(&s.target),
        s.runs.len()
    );
    let _ = writeln!(
        out,
        "  {:>3}  {:<25} {:<11} {:>9} {:>9} {:>10} {:>7}",
        "#", "started", "status", "p50 ms", "p99 ms", "req/s", "failed"
    );
    for (i, r) in s.runs.iter().enumerate() {
        let f = |k: &str| r.figures.get(k).copied().unwrap_or(f64::NAN);
        let _ = writeln!(
            out,
            "  {:>3}  {:<25} {:<11} {:>9.3} {:>9.3} {:>10.1} {:>6.2}%",
            i + 1,
            safe_text(&r.started_at),
            r.status,
            f("p50_ms"),
            f("p99_ms"),
            f("throughput"),
            f("failed_pct")
        );
    }
    out += "Changes\n";
    for (metric, changes) in &s.changes {
        if changes.is_empty() {
            let _ = writeln!(out, "  {metric:<11} none");
        }
        for c in changes {
            let number = s
                .runs
                .iter()
                .position(|r| r.dir == c.dir)
                .map_or(0, |i| i + 1);
            let p = &c.point;
            let _ = writeln!(
                out,
                "  {metric:<11} from run {number} ({}): {:.3} -> {:.3} ({:+.3}, 95% {:+.3} to {:+.3}), p {:.3}",
                safe_text(&c.run),
                p.before_mean,
                p.after_mean,
                p.change,
                p.change_low,
                p.change_high,
                p.p_value
            );
        }
    }
    out
}
