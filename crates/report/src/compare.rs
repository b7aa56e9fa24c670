//! `kiln compare --html`: the comparison as a page, both runs' series drawn on one axis.

use std::fmt::Write as _;

use kiln_compare::{Comparison, FindingChange, Row, Verdict};
use kiln_record::text::{html_escape as esc, us_f};
use kiln_record::{PhaseSummary, RunDir};
use serde_json::{json, Value};

use base64::Engine as _;
use kiln_profile::{FlameStyle, FoldedDiff};
use kiln_record::parts::PROFILE_FOLDED_PART;

use crate::{page, read_folded, Load};

/// A differential flame graph larger than this is left out (the page must stay light).
const MAX_EMBEDDED_DIFF: usize = 4 << 20;

/// The comparison of `base` and `new` as one self-contained page.
pub fn render_compare(base: &RunDir, new: &RunDir, c: &Comparison) -> String {
    let (lb, ln) = (Load::read(base), Load::read(new));
    let mut body = format!(
        "<header><h1>kiln compare: {} &rarr; {}</h1><div class=\"sub\">BASE {} &middot; NEW {}</div></header>",
        esc(&base.manifest.name),
        esc(&new.manifest.name),
        esc(&c.base.dir),
        esc(&c.new.dir)
    );
    body += "<section id=\"verdict\"><h2>Verdict</h2><div class=\"verdict\">";
    let count = |v: Verdict| c.rows.iter().filter(|r| r.verdict == v).count();
    let _ = write!(
        body,
        "{} improved, {} regressed, the rest within noise or not judged; findings: {} fixed, {} new, {} unchanged.",
        count(Verdict::Improved),
        count(Verdict::Regressed),
        c.findings.fixed.len(),
        c.findings.new.len(),
        c.findings.unchanged.len()
    );
    body += "<ul>";
    for line in &c.hygiene {
        let _ = write!(body, "<li>{}</li>", esc(line));
    }
    body += "</ul></div></section>";
    body += &table(c);
    body += "<section id=\"load\"><h2>Both runs</h2>\
<div class=\"chart\" id=\"chart-overlay-latency\"></div>\
<div class=\"chart\" id=\"chart-overlay-throughput\"></div>\
<div class=\"chart\" id=\"chart-distribution\"></div></section>";
    body += &findings(c);
    body += &profile_and_db(c);
    body += &diff_flame(base, new);
    let data = json!({
        "overlay": overlay(&lb, &ln),
        "distribution": distribution(&lb, &ln),
    });
    page(
        &format!(
            "kiln compare: {} -> {}",
            base.manifest.name, new.manifest.name
        ),
        &body,
        &data,
        false,
    )
}

fn table(c: &Comparison) -> String {
    let mut out = format!(
        "<section id=\"table\"><h2>Figures</h2><table><tr><th>figure</th><th class=\"n\">BASE</th>\
<th class=\"n\">NEW</th><th class=\"n\">change</th><th>{:.0}% interval</th><th>verdict</th><th>note</th></tr>",
        c.confidence * 100.0
    );
    for row in c.rows.iter().chain(&c.resources) {
        let class = match row.verdict {
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            _ => "same",
        };
        let interval = row.interval.map_or("-".to_string(), |[lo, hi]| {
            format!("[{}, {}]", change(row, lo), change(row, hi))
        });
        let p = row
            .p_value
            .map_or(String::new(), |p| format!(" (p={p:.3})"));
        let _ = write!(
            out,
            "<tr class=\"{class}\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
<td class=\"n\">{}</td><td>{}</td><td><b>{}</b>{}</td><td class=\"muted\">{}</td></tr>",
            esc(&row.metric),
            value(row, row.base),
            value(row, row.new),
            change(row, row.change),
            interval,
            row.verdict.as_str(),
            p,
            esc(row.note.as_deref().unwrap_or(""))
        );
    }
    out += "</table><ul class=\"muted\">";
    for w in &c.warnings {
        let _ = write!(out, "<li>{}</li>", esc(w));
    }
    let _ = write!(
        out,
        "<li>{} resamples, seed {}; the {} intervals hold together at {:.0}%.</li></ul></section>",
        c.resamples,
        c.seed,
        c.figures_judged,
        c.confidence * 100.0
    );
    out
}

fn value(row: &Row, v: f64) -> String {
    match row.unit.as_str() {
        "us" => us_f(v),
        "req/s" => format!("{v:.1}/s"),
        "%" => format!("{v:.2}%"),
        unit => format!("{v:.3} {}", esc(unit)),
    }
}

fn change(row: &Row, v: f64) -> String {
    if !v.is_finite() {
        "new".into()
    } else if row.relative {
        format!("{:+.1}%", 100.0 * v)
    } else {
        format!("{v:+.2} pt")
    }
}

fn findings(c: &Comparison) -> String {
    let mut out = String::from("<section id=\"findings\"><h2>Findings</h2>");
    let f = &c.findings;
    for (label, list) in [
        ("Fixed", &f.fixed),
        ("New", &f.new),
        ("Unchanged", &f.unchanged),
        ("In BASE, not judged in NEW", &f.not_judged_in_new),
        (
            "About the host or kiln, not the target (in either run)",
            &f.host,
        ),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = write!(out, "<h3>{label}</h3><ul>");
        for item in list.iter() {
            out += &finding(item);
        }
        out += "</ul>";
    }
    out + "</section>"
}

fn finding(f: &FindingChange) -> String {
    format!(
        "<li><span class=\"sev\">{}</span> {} <span class=\"muted\">{}</span></li>",
        esc(&f.severity),
        esc(&f.title),
        esc(&f.rule)
    )
}

fn profile_and_db(c: &Comparison) -> String {
    let mut out = String::new();
    if !c.profile.is_empty() {
        out += "<section id=\"profile\"><h2>Profile</h2><table><tr><th>function</th>\
<th class=\"n\">BASE self</th><th class=\"n\">NEW self</th></tr>";
        for p in &c.profile {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td class=\"n\">{:.1}%</td><td class=\"n\">{:.1}%</td></tr>",
                esc(&p.name),
                p.before_pct,
                p.after_pct
            );
        }
        out += "</table></section>";
    }
    if !c.db_routes.is_empty() {
        out += "<section id=\"queries\"><h2>DB calls per request</h2><table><tr><th>route</th>\
<th class=\"n\">BASE calls</th><th class=\"n\">NEW calls</th><th class=\"n\">BASE DB ms</th>\
<th class=\"n\">NEW DB ms</th></tr>";
        let n = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        for r in &c.db_routes {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(&r.route),
                n(r.base_calls_per_request),
                n(r.new_calls_per_request),
                n(r.base_db_ms_per_request),
                n(r.new_db_ms_per_request)
            );
        }
        out += "</table></section>";
    }
    out
}

/// The differential flame graph (NEW's stacks; red grew, blue shrank; BASE scaled to NEW's
/// samples), as an image: an SVG shown by `<img>` runs none of its script.
fn diff_flame(base: &RunDir, new: &RunDir) -> String {
    let (Ok(Some(b)), Ok(Some(n))) = (
        read_folded(base, PROFILE_FOLDED_PART),
        read_folded(new, PROFILE_FOLDED_PART),
    ) else {
        return String::new();
    };
    let style = FlameStyle {
        title: "Differential flame graph: NEW's stacks, red grew, blue shrank",
        ..FlameStyle::default()
    };
    match FoldedDiff::new(&b, &n).svg(&style) {
        Ok(svg) if svg.len() <= MAX_EMBEDDED_DIFF => format!(
            "<section id=\"diff-flame\"><h2>Differential flame graph</h2>\
<p class=\"muted\">Each frame is NEW's; its colour says how its share changed from BASE (BASE \
scaled to NEW's samples). Interactive: kiln profile diff BASE/profile.folded NEW/profile.folded.</p>\
<img class=\"flame\" alt=\"differential flame graph\" src=\"data:image/svg+xml;base64,{}\"></section>",
            base64::engine::general_purpose::STANDARD.encode(&svg)
        ),
        Ok(_) => "<section id=\"diff-flame\"><p class=\"muted\">The differential flame graph is \
too large to embed: kiln profile diff BASE/profile.folded NEW/profile.folded.</p></section>"
            .into(),
        Err(e) => format!(
            "<section id=\"diff-flame\"><p class=\"muted\">{}</p></section>",
            esc(&e.to_string())
        ),
    }
}

/// Both runs' measured seconds on one axis: second 0 is each one's first.
fn overlay(base: &Load, new: &Load) -> Value {
    let (b, n) = (base.measured_points(), new.measured_points());
    let len = b.len().max(n.len());
    let col = |points: &[(Value, Value, u64)], pick: &dyn Fn(&(Value, Value, u64)) -> Value| {
        (0..len)
            .map(|i| points.get(i).map_or(Value::Null, pick))
            .collect::<Vec<Value>>()
    };
    json!({
        "x": (0..len).collect::<Vec<usize>>(),
        "base_p50": col(&b, &|p| p.0.clone()),
        "base_p99": col(&b, &|p| p.1.clone()),
        "new_p50": col(&n, &|p| p.0.clone()),
        "new_p99": col(&n, &|p| p.1.clone()),
        "base_requests": col(&b, &|p| json!(p.2)),
        "new_requests": col(&n, &|p| json!(p.2)),
    })
}

/// The two runs' percentile curves (all measured seconds of each).
fn distribution(base: &Load, new: &Load) -> Value {
    let (Some(b), Some(n)) = (
        PhaseSummary::measured_total(&base.phases),
        PhaseSummary::measured_total(&new.phases),
    ) else {
        return Value::Null;
    };
    let steps = crate::percentile_steps();
    let curve = |p: &PhaseSummary| -> Vec<f64> {
        steps
            .iter()
            .map(|q| p.totals.latency.quantile_us(*q) as f64 / 1000.0)
            .collect()
    };
    json!({
        "x": steps.iter().map(|q| 1.0 / (1.0 - q)).collect::<Vec<f64>>(),
        "names": ["BASE", "NEW"],
        "series": [curve(&b), curve(&n)],
    })
}
