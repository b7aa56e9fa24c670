//! A capacity search as one page (`report.html` of a capacity directory): the capacity and
//! its bracket, the knee and what to try, the curve (latency and answers against the offered
//! rate, the SLO's limit beside it), and the steps with a link to each one's own report. Read
//! from `capacity.json` alone; every text from it is escaped, the curve travels as data.

use std::fmt::Write as _;

use kiln_record::schema::capacity::{CapacityRecord, CapacityStep, SearchMode, StepKind};
use kiln_record::text::html_escape as esc;
use kiln_summary::capacity::rate;
use kiln_summary::thresholds::Threshold;
use serde_json::{json, Value};

/// The curve: each rate the search ran once (the last believed run of it), in order.
fn curve(record: &CapacityRecord) -> Value {
    // a rate search's curve is against the offered rate, a sweep's against its connections
    let sweep = record.mode == SearchMode::Connections;
    let x_of = |s: &CapacityStep| match (sweep, s.kind) {
        (true, StepKind::Sweep) => s.connections.map(|c| c as f64),
        (false, _) => s.offered_rate,
        _ => None,
    };
    let mut points: Vec<(f64, &CapacityStep)> = Vec::new();
    for s in record.steps.iter().filter(|s| s.believed) {
        let Some(x) = x_of(s) else { continue };
        points.retain(|(p, _)| *p != x);
        points.push((x, s));
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let column = |f: &dyn Fn(&CapacityStep) -> f64| -> Vec<f64> {
        points.iter().map(|(_, s)| f(s)).collect()
    };
    // the latency SLOs' limits, a flat line each at the height they allow
    let limits: Vec<(String, f64)> = record
        .slos
        .iter()
        .filter_map(|t| Threshold::parse(t).ok())
        .filter_map(|t| Some((t.text.clone(), t.latency_limit_ms()?)))
        .collect();
    json!({
        "rate": points.iter().map(|(x, _)| *x).collect::<Vec<f64>>(),
        "x_label": if sweep { "connections (closed model)" } else { "offered requests per second" },
        "p50": column(&|s| s.p50_ms),
        "p99": column(&|s| s.p99_ms),
        "answered": column(&|s| s.throughput),
        "limits": limits.iter().map(|(text, ms)| json!({"label": text, "ms": ms})).collect::<Vec<_>>(),
    })
}

/// The page.
pub fn render_capacity(record: &CapacityRecord) -> String {
    let mut html = format!(
        "<header><h1>kiln capacity: {}</h1><div class=\"sub\">keeping {} &middot; {} &middot; \
started {} &middot; {} steps, {} requests in {:.0} s</div></header>",
        esc(&record.name),
        esc(&record.slos.join(", ")),
        esc(record.status.as_str()),
        esc(&record.started),
        record.steps.len(),
        record.requests_total,
        record.elapsed_s
    );
    html += "<nav><a href=\"#verdict\">Capacity</a><a href=\"#curve\">Curve</a>\
<a href=\"#steps\">Steps</a></nav>";
    html += "<section id=\"verdict\"><h2>Capacity</h2><div class=\"verdict\">";
    let text = kiln_summary::capacity::text(record, "");
    for line in text.lines().filter(|l| {
        // the summary's labelled lines (its first line names the search, as the header does)
        [
            "Capacity   ",
            "Search     ",
            "Scaling    ",
            "Knee       ",
            "Try        ",
        ]
        .iter()
        .any(|p| l.starts_with(p))
    }) {
        let (head, rest) = line.split_once(' ').unwrap_or((line, ""));
        let _ = write!(
            html,
            "<div><b>{}</b> {}</div>",
            esc(head),
            esc(rest.trim_start())
        );
    }
    html += "</div>";
    if let Some(edge) = record.edge_step().filter(|s| !s.findings.is_empty()) {
        let _ = write!(
            html,
            "<p>Findings at {} req/s, the step past the edge (<a href=\"{}/report.html\">its \
report</a>):</p><ul>",
            esc(&rate(edge.offered_rate.unwrap_or(0.0))),
            esc(&edge.dir)
        );
        for f in &edge.findings {
            let _ = write!(
                html,
                "<li><b>{}</b> {}: {}</li>",
                esc(&f.severity.as_str().to_uppercase()),
                esc(&f.rule),
                esc(&f.title)
            );
        }
        html += "</ul>";
    }
    html += "</section>";
    html += "<section id=\"curve\"><h2>Curve</h2><div class=\"chart\" id=\"chart-capacity\">\
</div></section>";
    html += "<section id=\"steps\"><h2>Steps</h2><table><tr><th>#</th><th>step</th>\
<th class=\"n\">offered/s</th><th class=\"n\">answered/s</th><th class=\"n\">p50 ms</th>\
<th class=\"n\">p99 ms</th><th class=\"n\">failed</th><th class=\"n\">target CPU</th>\
<th>verdict</th><th>run</th></tr>";
    for s in &record.steps {
        let kind = match s.kind {
            StepKind::Probe => "probe (closed)",
            StepKind::Alone => "one at a time",
            StepKind::Search => "search",
            StepKind::Confirm => "edge again",
            StepKind::Repeat => "repeat",
            StepKind::Sweep => "level (closed)",
        };
        let offered = match (s.offered_rate, s.connections) {
            (Some(r), _) => rate(r),
            (None, Some(c)) => format!("{c} conn."),
            _ => "-".into(),
        };
        let verdict = match (s.kind, s.kept) {
            (StepKind::Probe | StepKind::Alone, _) => String::new(),
            (_, true) => "kept".into(),
            (_, false) => format!(
                "broke {}",
                s.broken
                    .iter()
                    .map(|b| format!("{} ({})", b.slo, b.actual))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let doubt = if s.believed {
            ""
        } else {
            " (kiln starved: run again)"
        };
        let _ = write!(
            html,
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>\
<td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td>\
<td class=\"n\">{:.2}%</td><td class=\"n\">{}</td><td>{}{}</td>\
<td><a href=\"{}/report.html\">{}</a></td></tr>",
            s.n,
            kind,
            esc(&offered),
            s.throughput,
            s.p50_ms,
            s.p99_ms,
            s.failed_ratio * 100.0,
            s.target_cores
                .map_or("-".into(), |c| format!("{c:.2} cores")),
            esc(&verdict),
            doubt,
            esc(&s.dir),
            esc(&s.dir)
        );
    }
    html += "</table></section>";
    crate::page(
        &format!("kiln capacity: {}", record.name),
        &html,
        &json!({ "capacity": curve(record) }),
        false,
    )
}
