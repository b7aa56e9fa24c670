//! `kiln compare --html`: the comparison as a page, both runs' series drawn on one axis.

use std::fmt::Write as _;

use kiln_compare::{Comparison, FindingChange, Row, Verdict};
use kiln_record::text::{html_escape as esc, us_f};
use kiln_record::{PhaseSummary, Run};
use serde_json::{json, Value};

use kiln_record::parts::PROFILE_FOLDED_PART;

use crate::{page, read_folded, Load};

/// The comparison of `base` and `new` as one self-contained page.
pub fn render_compare(base: &Run, new: &Run, c: &Comparison) -> String {
    let (lb, ln) = (Load::read(base), Load::read(new));
    let mut body = format!(
        "<header><h1>kiln compare: {} &rarr; {}</h1><div class=\"sub\">BASE {} &middot; NEW {}</div></header>",
        esc(&base.manifest().name),
        esc(&new.manifest().name),
        esc(&c.base.dir),
        esc(&c.new.dir)
    );
    body += "<section id=\"verdict\"><h2>Verdict</h2><div class=\"verdict\">";
    let _ = write!(
        body,
        "{} improved, {} regressed, the rest within noise or not judged; findings: {} fixed, {} new, {} unchanged.",
        c.count(Verdict::Improved),
        c.count(Verdict::Regressed),
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
    let (flame_html, flames) = diff_flame(base, new);
    body += &flame_html;
    let data = json!({
        "overlay": overlay(&lb, &ln),
        "distribution": distribution(&lb, &ln),
        "flames": flames,
    });
    page(
        &format!(
            "kiln compare: {} -> {}",
            base.manifest().name,
            new.manifest().name
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
        let per_request = c.cpu_ms_per_request().is_some();
        out += "<section id=\"profile\"><h2>Profile</h2>";
        if per_request {
            out += "<p class=\"muted\">Each function's CPU per request: its self share of the \
samples times the run's CPU per request (a share can rise while the function costs less).</p>";
        }
        out += "<table><tr><th>function</th><th class=\"n\">BASE self</th><th class=\"n\">NEW self</th>";
        if per_request {
            out += "<th class=\"n\">BASE ms/request</th><th class=\"n\">NEW ms/request</th>\
<th class=\"n\">change</th>";
        }
        out += "</tr>";
        for p in &c.profile {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td class=\"n\">{:.1}%</td><td class=\"n\">{:.1}%</td>",
                esc(&p.name),
                p.before_pct,
                p.after_pct
            );
            if let Some((b, n)) = c.function_ms_per_request(p) {
                let change = if b > 0.0 {
                    format!("{:+.1}%", 100.0 * (n - b) / b)
                } else {
                    "new".into()
                };
                let _ = write!(
                    out,
                    "<td class=\"n\">{b:.3}</td><td class=\"n\">{n:.3}</td><td class=\"n\">{change}</td>"
                );
            }
            out += "</tr>";
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

/// The differential flame graph in the run page's viewer, both ways: NEW's stacks (what grew
/// in red, what shrank in blue) and BASE's (what the change removed is visible only there),
/// BASE scaled to NEW's samples; search, zoom and hover as on a run's page. Its section and
/// the viewers' data.
fn diff_flame(base: &Run, new: &Run) -> (String, Vec<Value>) {
    let (Ok(Some(b)), Ok(Some(n))) = (
        read_folded(base, PROFILE_FOLDED_PART),
        read_folded(new, PROFILE_FOLDED_PART),
    ) else {
        return (String::new(), Vec::new());
    };
    let data = crate::flame::diff_flame_data(&b, &n);
    if data.is_null() {
        return (String::new(), Vec::new());
    }
    let mut html = String::from(
        "<section id=\"diff-flame\"><h2>Differential flame graph</h2>\
<p class=\"muted\">Red: a stack that takes a larger share of NEW's samples than of BASE's; \
blue: a smaller one. Hover a frame for both runs' samples.</p>",
    );
    let mut flames = Vec::new();
    for (side, heading) in [
        ("new", "NEW's stacks (widths from NEW)"),
        (
            "base",
            "BASE's stacks (widths from BASE: what the change removed)",
        ),
    ] {
        let el = format!("diff-{side}");
        let _ = write!(
            html,
            "<h3>{heading}</h3>{}",
            crate::flame_viewer(&el, false)
        );
        let mut view = data[side].clone();
        view["el"] = json!(el);
        view["section"] = json!(el);
        view["unit"] = json!("samples");
        view["side"] = json!(side);
        flames.push(view);
    }
    (html + "</section>", flames)
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
