//! The run as one self-contained HTML page (`report.html`): the verdict and findings first,
//! then latency, throughput and errors over time, the resources on the same time axis, the
//! percentile distribution, the profile, and the command and plan that made the run.
//!
//! Charts are drawn by uPlot (1.6.32, MIT, 51 KB; vendored unchanged in `vendor/uplot`), the
//! library vegeta's plots moved to: canvas time series with synchronised cursors that stay
//! fast with hours of seconds, where SVG drawn here would be a chart library of our own.
//!
//! Untrusted text stays text. Everything from the outside (URLs, headers, SQL, frames,
//! finding evidence) is HTML-escaped where the page is built, or travels in a JSON block
//! (with `<`, `>`, `&` and U+2028/9 escaped) that the page's one script reads and turns into
//! chart data only. A Content-Security-Policy allows that script (by a nonce) and inline
//! styles, and nothing else: no other script, no request to anywhere.
//!
//! It reads the run record only (old, copied or interrupted runs too).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

mod capacity;
mod compare;
mod flame;

pub use capacity::render_capacity;
pub use compare::render_compare;

use kiln_findings::{Finding, FlameCite, Report};
use kiln_profile::{Folded, FunctionShare};
use kiln_queries::trie::StackTrie;
use kiln_record::parts::{
    ALLOC, LOCKS, LOCKS_NOT_RECORDED, OFF_CPU, ON_CPU, QUERIES_PART, TRIE_CALLS_PART,
    TRIE_TIME_PART, WALL, WALL_NOT_RECORDED,
};
use kiln_record::schema::plan::PlanRecord;
use kiln_record::schema::profile::Event;
use kiln_record::schema::queries::QueriesRecord;
use kiln_record::text::{html_escape as esc, script_json, us};
use kiln_record::{LatencyHistogram, PhaseSummary, RecordError, Run};
use kiln_sample::{
    DoctorRecord, NoiseSecond, ResourceSecond, DOCTOR_PART, NOISE_PART, RESOURCES_PART,
};
use serde_json::{json, Value};

/// The part kind and file name of the report.
pub const REPORT_HTML_PART: &str = "report-html";
pub const REPORT_HTML_FILE: &str = "report.html";

const UPLOT_JS: &str = include_str!("../vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../vendor/uplot/uPlot.min.css");
const PAGE_JS: &str = include_str!("page.js");

/// Builds the page for a run directory.
pub fn render(run: &Run) -> String {
    let load = Load::read(run);
    let resources = read_resources(run);
    let findings = kiln_findings::recorded_or_judged(run);
    let (profile_html, flame) = profile_section(run, ProfileKind::OnCpu);
    let (off_cpu_html, off_cpu_flame) = profile_section(run, ProfileKind::OffCpu);
    let (alloc_html, alloc_flame) = profile_section(run, ProfileKind::Alloc);
    let (locks_html, locks_flame) = profile_section(run, ProfileKind::Locks);
    let (wall_html, wall_flame) = profile_section(run, ProfileKind::Wall);
    let flames: Vec<Value> = [flame, off_cpu_flame, locks_flame, wall_flame, alloc_flame]
        .into_iter()
        .filter(|f| !f.is_null())
        .collect();
    let data = json!({
        "flames": flames,
        "seconds": load.series,
        "phases": load.phase_spans,
        "resources": resources,
        "noise": read_noise(run),
        "distribution": load.distribution(),
    });
    let m = run.manifest();
    let mut html = format!(
        "<header><h1>kiln report: {}</h1><div class=\"sub\">{} &middot; {} &middot; started {} \
&middot; kiln {}</div></header>",
        esc(&m.name),
        esc(&m.id),
        esc(run.status.as_str()),
        esc(&m.started_at),
        esc(&m.kiln_version)
    );
    // (id, label, html) of each section the run recorded; what it did not record is said in
    // one line at the end instead of an empty section each
    let mut sections: Vec<(&str, &str, String)> = vec![(
        "verdict",
        "Verdict",
        verdict_section(&findings, &load, &m.plan),
    )];
    if let Some(plan) = plan_section(&load, &m.plan) {
        sections.push(("plan", "Requests by name", plan));
    }
    sections.push(("findings", "Findings", findings_section(&findings)));
    sections.push(("load", "Load", load_section(&load, &m.plan)));
    let mut not_recorded = Vec::new();
    if resources.is_null() {
        not_recorded.push("resources (kiln run --watch-pid PID or --watch-port PORT)");
    } else {
        sections.push((
            "resources",
            "Resources",
            "<section id=\"resources\"><h2>Resources</h2>\
<div class=\"chart\" id=\"chart-host-cpu\"></div>\
<div class=\"chart\" id=\"chart-target-cpu\"></div>\
<div class=\"chart\" id=\"chart-target-switches\"></div>\
<div class=\"chart\" id=\"chart-target-memory\"></div>\
<div class=\"chart\" id=\"chart-sockets\"></div>\
<div class=\"chart\" id=\"chart-threads\"></div>\
<div class=\"chart\" id=\"chart-cores\"></div>\
<div class=\"chart\" id=\"chart-kernel\"></div></section>"
                .to_string(),
        ));
    }
    for (id, label, html, absent) in [
        ("profile", "Profile", profile_html, "a profile (--profile)"),
        (
            "offcpu",
            "Off-CPU",
            off_cpu_html,
            "an off-CPU profile (--off-cpu)",
        ),
    ] {
        match html {
            Some(html) => sections.push((id, label, html)),
            None => not_recorded.push(absent),
        }
    }
    // a JVM's lock waits, wall clock and allocations: a section when taken, and no line when
    // not (most targets are no JVM), unless one was asked for and could not be taken
    for (html, id, label, key, absent) in [
        (
            locks_html,
            "locks",
            "Lock waits",
            LOCKS_NOT_RECORDED,
            "a JVM's lock waits (--off-cpu)",
        ),
        (
            wall_html,
            "wall",
            "Wall clock",
            WALL_NOT_RECORDED,
            "a JVM's wall clock (--off-cpu)",
        ),
        (
            alloc_html,
            "alloc",
            "Allocations",
            "--alloc",
            "allocations (--alloc)",
        ),
    ] {
        match html {
            Some(html) => sections.push((id, label, html)),
            None if run.manifest().not_recorded.contains_key(key) => not_recorded.push(absent),
            None => {}
        }
    }
    // the watched runtime's lines as the terminal showed them (a JVM's GC, threads and the
    // holders of their contended locks; a Go target's GC; Python's GIL): no section and no
    // line for a process with no runtime watched
    if let Some(text) = kiln_summary::run::runtime_text_of(run) {
        sections.push((
            "runtime",
            "Runtime",
            format!(
                "<section id=\"runtime\"><h2>Runtime</h2><pre>{}</pre></section>",
                esc(text.trim_end())
            ),
        ));
    }
    let sent = PhaseSummary::measured_total(&load.phases).map(|t| t.totals.requests);
    let (queries_html, has_map) = queries_section(run, sent);
    match queries_html {
        Some(html) => sections.push(("queries", "DB calls", html)),
        None => not_recorded.push("DB calls (traces: --otlp-listen)"),
    }
    sections.push(("host", "Host", host_section(run)));
    sections.push(("command", "Command", command_section(run)));
    html += "<nav>";
    for (id, label, _) in &sections {
        let _ = write!(html, "<a href=\"#{id}\">{label}</a>");
    }
    html += "</nav>";
    for (_, _, section) in &sections {
        html += section;
    }
    if !not_recorded.is_empty() {
        let _ = write!(
            html,
            "<p class=\"muted\" id=\"not-recorded\">Not recorded in this run: {}.</p>",
            not_recorded.join("; ")
        );
    }
    page(&format!("kiln report: {}", m.name), &html, &data, has_map)
}

/// The page around a body: the policy, the style, the data block and the scripts (the
/// treemap's when the body has one).
fn page(title: &str, body: &str, data: &Value, treemap: bool) -> String {
    let nonce = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    let treemap_script = if treemap {
        format!(
            "<script nonce=\"{nonce}\">{}</script>",
            kiln_queries::html::TREEMAP_SCRIPT
        )
    } else {
        String::new()
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:; \
base-uri 'none'; form-action 'none'\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{}</title><style>{UPLOT_CSS}{STYLE}{}</style></head><body>{body}\
<script type=\"application/json\" id=\"kiln-data\">{}</script>\
<script nonce=\"{nonce}\">{UPLOT_JS}</script><script nonce=\"{nonce}\">{PAGE_JS}</script>{treemap_script}\
</body></html>",
        esc(title),
        kiln_queries::html::TREEMAP_STYLE,
        script_json(&data.to_string())
    )
}

/// Writes `report.html` into the run directory (listed in its manifest).
pub fn write(run: &mut Run) -> Result<PathBuf, RecordError> {
    let html = render(run);
    run.dir_mut()
        .write_file_part(REPORT_HTML_PART, REPORT_HTML_FILE, 1, html.as_bytes())
}

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#fafafa}
header{padding:12px 24px;background:#1d2330;color:#fff}
header h1{font-size:19px;margin:0}
.sub{color:#c9d1d9;font-size:13px}
nav{padding:6px 24px;background:#eef1f5;font-size:13px;position:sticky;top:0;z-index:5}
nav a{margin-right:14px;color:#0b57d0}
section{padding:6px 24px}
h2{font-size:17px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}
.finding{background:#fff;border:1px solid #ddd;border-left:5px solid #888;margin:8px 0;padding:6px 12px}
.finding.high{border-left-color:#b00020}.finding.medium{border-left-color:#d97706}.finding.low{border-left-color:#888}
.sev{font-weight:bold;text-transform:uppercase;font-size:12px;margin-right:6px}
.high .sev{color:#b00020}.medium .sev{color:#b35c00}.low .sev{color:#555}
.finding ul{margin:4px 0 4px 18px;padding:0}
.verdict{font-size:16px;background:#fff;border:1px solid #ddd;padding:10px 14px}
.muted{color:#666}
.fail{color:#b00020}
tr.fail td{background:#fdecea}
.chart{margin:10px 0;background:#fff}
.flame-box{position:relative;background:#fff;border:1px solid #ddd;overflow:hidden}
.fr{position:absolute;height:15px;box-sizing:border-box;border:1px solid #fff;font:11px/13px ui-monospace,monospace;
  overflow:hidden;white-space:nowrap;padding:0 2px;cursor:pointer;color:#111}
.fr.hit{background:#e040fb !important}
.flame-tools{margin:6px 0}
.flame-status{font:12px/1.4 ui-monospace,monospace;color:#333;min-height:17px;margin:2px 0 6px;
  white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
img.flame{max-width:100%;border:1px solid #ddd;background:#fff}
.links{margin-top:4px;font-size:13px}.links a{color:#0b57d0}
tr.check-bad td{background:#fde7e9}tr.check-warn td{background:#fff4e0}
tr.improved td{background:#e6f4ea}tr.regressed td{background:#fde7e9}
"#;

/// The flame graph viewer's frame (page.js draws into it): search, zoom reset, the callers
/// view when `reverse`, the match's share, the box and the hover status line.
pub(crate) fn flame_viewer(flame: &str, reverse: bool) -> String {
    let reverse = if reverse {
        format!(
            "<label><input id=\"{flame}-reverse\" type=\"checkbox\"> callers (the functions \
that used the time at the bottom)</label> "
        )
    } else {
        String::new()
    };
    format!(
        "<div class=\"flame-tools\"><input id=\"{flame}-search\" type=\"search\" \
placeholder=\"search frames (regular expression, any case)\" size=\"40\"> \
<button id=\"{flame}-reset\" type=\"button\">reset zoom</button> {reverse}\
<span id=\"{flame}-match\" class=\"muted\"></span></div>\
<div id=\"{flame}\" class=\"flame-box\"></div>\
<div id=\"{flame}-status\" class=\"flame-status\">hover a frame for its samples and share</div>"
    )
}

fn verdict_section(findings: &Report, load: &Load, plan: &PlanRecord) -> String {
    let mut out = String::from("<section id=\"verdict\"><h2>Verdict</h2><div class=\"verdict\">");
    // a plan's thresholds decide the run's exit (99 when one fails, as k6): said first
    if let Some(total) = PhaseSummary::measured_total(&load.phases) {
        let checked = kiln_summary::thresholds::check_all(plan, &total);
        let failed = checked.iter().filter(|t| !t.ok).count();
        if failed > 0 {
            let _ = write!(
                out,
                "<div class=\"fail\"><b>{failed} of {} thresholds failed</b> (exit 99): {}</div>",
                checked.len(),
                checked
                    .iter()
                    .filter(|t| !t.ok)
                    .map(|t| format!("{} (measured {})", esc(&t.threshold), esc(&t.actual_text)))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        } else if !checked.is_empty() {
            let _ = write!(out, "<div>All {} thresholds passed.</div>", checked.len());
        }
    }
    match findings.findings.first() {
        Some(top) => {
            let _ = write!(
                out,
                "{} finding{}; the first to fix: <b>{}</b>",
                findings.findings.len(),
                if findings.findings.len() == 1 {
                    ""
                } else {
                    "s"
                },
                esc(&top.title)
            );
        }
        None => out += "No findings: no rule saw a problem in this record.",
    }
    if let Some(total) = PhaseSummary::measured_total(&load.phases) {
        let stats = total.latency_stats();
        let _ = write!(
            out,
            "<div class=\"muted\">{} requests, {:.1}/s, {:.2}% failed; p50 {}, p99 {}, max {}</div>",
            total.totals.requests,
            total.throughput(),
            100.0 * total.failed_ratio(),
            us(stats.p50_us),
            us(stats.p99_us),
            us(stats.max_us)
        );
    }
    if let Some(s) = &findings.symptoms {
        out += &symptoms_list(s);
    }
    out + "</div></section>"
}

/// A plan run's thresholds and its requests by name (JMeter's aggregate table with kiln's
/// checks beside it), first after the verdict as Gatling and JMeter put them; None for a run
/// with neither.
fn plan_section(load: &Load, plan: &PlanRecord) -> Option<String> {
    let total = PhaseSummary::measured_total(&load.phases)?;
    let checked = kiln_summary::thresholds::check_all(plan, &total);
    let rows = kiln_summary::names::rows(&total);
    if checked.is_empty() && rows.is_empty() {
        return None;
    }
    let mut out = String::from("<section id=\"plan\"><h2>Requests by name</h2>");
    if !checked.is_empty() {
        out += "<table><tr><th>threshold</th><th>result</th><th class=\"n\">measured</th></tr>";
        for t in &checked {
            let _ = write!(
                out,
                "<tr class=\"{}\"><td><code>{}</code></td><td>{}</td><td class=\"n\">{}</td></tr>",
                if t.ok { "pass" } else { "fail" },
                esc(&t.threshold),
                if t.ok { "pass" } else { "FAIL" },
                esc(&t.actual_text)
            );
        }
        out += "</table>";
    }
    let t = &total.totals;
    if t.iterations > 0 || t.checks > 0 {
        let _ = write!(
            out,
            "<p>{} iterations; checks {} run, {} failed</p>",
            t.iterations, t.checks, t.checks_failed
        );
    }
    if !rows.is_empty() {
        out +=
            "<table><tr><th>label</th><th class=\"n\"># samples</th><th class=\"n\">error %</th>\
<th class=\"n\">median</th><th class=\"n\">90% line</th><th class=\"n\">95% line</th>\
<th class=\"n\">99% line</th><th class=\"n\">max</th><th class=\"n\">throughput</th>\
<th class=\"n\">checks failed</th><th class=\"n\">nothing to extract</th></tr>";
        for r in &rows {
            let line = |i: usize| r.lines_us.map_or("-".to_string(), |l| us(l[i]));
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2}%</td><td class=\"n\">{}</td>\
<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
<td class=\"n\">{:.1}/s</td><td class=\"n\">{} of {}</td><td class=\"n\">{}</td></tr>",
                esc(&r.label),
                r.samples,
                r.error_pct,
                line(0),
                line(1),
                line(2),
                line(3),
                line(4),
                r.throughput,
                r.checks_failed,
                r.checks,
                r.extractions_failed
            );
        }
        out += "</table>";
    }
    Some(out + "</section>")
}

/// Which findings explain the p99 and the CPU per request, with their shares.
fn symptoms_list(s: &kiln_findings::symptoms::Symptoms) -> String {
    let mut out = String::from("<ul class=\"symptoms\">");
    if s.above_p99 > 0 {
        let _ = write!(
            out,
            "<li>p99 {}: of the {} requests slower than it, ",
            us(s.p99_us),
            s.above_p99
        );
        if s.p99_explained.is_empty() {
            out += "none lies in a finding's seconds";
        }
        let held: Vec<String> = s
            .p99_explained
            .iter()
            .map(|e| {
                format!(
                    "{:.0}% in the seconds of <b>{}</b>",
                    100.0 * e.share,
                    esc(&e.title)
                )
            })
            .collect();
        out += &held.join("; ");
        out += "</li>";
    }
    if let Some(cpu) = s.cpu_ms_per_request {
        let _ = write!(out, "<li>the target's CPU {cpu:.2} ms per request");
        let shares: Vec<String> = s
            .cpu_explained
            .iter()
            .map(|e| format!("{:.0}% <code>{}</code>", 100.0 * e.share, esc(&e.rule)))
            .collect();
        if !shares.is_empty() {
            let _ = write!(out, ": {}", shares.join("; "));
        }
        out += "</li>";
    }
    out + "</ul>"
}

fn findings_section(report: &Report) -> String {
    let mut out = String::from("<section id=\"findings\"><h2>Findings</h2>");
    if report.findings.is_empty() {
        out += "<p class=\"muted\">None.</p>";
    }
    for f in &report.findings {
        out += &finding_card(f);
    }
    if !report.unjudged.is_empty() {
        out += "<details><summary>Rules that could not judge this run</summary><ul>";
        for u in &report.unjudged {
            let _ = write!(
                out,
                "<li><code>{}</code>: {}</li>",
                esc(&u.rule),
                esc(&u.reason)
            );
        }
        out += "</ul></details>";
    }
    out + "</section>"
}

fn finding_card(f: &Finding) -> String {
    let sev = f.severity.as_str();
    let mut out = format!(
        "<div class=\"finding {sev}\" id=\"finding-{}\"><div><span class=\"sev\">{sev}</span>\
<b>{}</b> <span class=\"muted\">{} &middot; {:.0}% of {}</span></div><ul>",
        esc(&f.id),
        esc(&f.title),
        esc(&f.rule),
        100.0 * f.impact.share,
        esc(&f.impact.of)
    );
    for e in &f.evidence {
        let _ = write!(out, "<li>{}</li>", esc(e));
    }
    let _ = write!(
        out,
        "</ul><div><b>Cause:</b> {}</div><div><b>Fix:</b> {}</div>{}</div>",
        esc(&f.cause),
        esc(&f.fix),
        finding_links(f)
    );
    out
}

/// Links from a finding to what it cites: its frames in the flame graph, its time window
/// in the charts, its statements in the DB section.
fn finding_links(f: &Finding) -> String {
    let mut links = Vec::new();
    if let Some(FlameCite { event, frame }) = &f.flame {
        let (hash, which) = match event {
            Event::Cswitch => ("offcpu-search", "off-CPU flame graph"),
            Event::Cpu => ("search", "flame graph"),
        };
        links.push(format!(
            "<a href=\"#{hash}={}\">find {} in the {which}</a>",
            percent_encode(&regex_escape(frame)),
            esc(frame)
        ));
    }
    if let Some(w) = &f.window {
        links.push(format!(
            "<a href=\"#window={}-{}\">show its time in the charts</a>",
            w.from_unix_ms, w.to_unix_ms
        ));
    }
    if f.rule.starts_with("db.") {
        links.push("<a href=\"#queries\">see the DB calls</a>".to_string());
    }
    if links.is_empty() {
        String::new()
    } else {
        format!("<div class=\"links\">{}</div>", links.join(" &middot; "))
    }
}

/// A frame name as a regular expression matching itself.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\^$.|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Everything but unreserved characters percent-encoded (UTF-8), for a URL fragment.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn load_section(load: &Load, plan: &PlanRecord) -> String {
    let mut out = String::from(
        "<section id=\"load\"><h2>Load</h2>\
<div class=\"chart\" id=\"chart-latency\"></div><div class=\"chart\" id=\"chart-throughput\"></div>\
<div class=\"chart\" id=\"chart-distribution\"></div>\
<div class=\"chart\" id=\"chart-noise\"></div>\
<div class=\"chart\" id=\"chart-wire\"></div>\
<table><tr><th>phase</th><th class=\"n\">requests</th><th class=\"n\">per second</th>\
<th class=\"n\">failed</th><th class=\"n\">p50</th><th class=\"n\">p90</th><th class=\"n\">p99</th>\
<th class=\"n\">p99.9</th><th class=\"n\">max</th></tr>",
    );
    let measured_total = PhaseSummary::measured_total(&load.phases);
    let all = load.phases.iter().chain(
        measured_total
            .iter()
            .filter(|_| load.phases.iter().filter(|p| p.measured).count() > 1),
    );
    for p in all {
        let s = p.latency_stats();
        let h = &p.totals.latency;
        let _ = write!(
            out,
            "<tr><td>{}{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{}</td>\
<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&p.phase),
            if p.measured { "" } else { " (not measured)" },
            p.totals.requests,
            p.throughput(),
            p.failed(),
            us(s.p50_us),
            us(h.quantile_us(0.9)),
            us(s.p99_us),
            us(h.quantile_us(0.999)),
            us(s.max_us)
        );
    }
    out += "</table>";
    if let Some(total) = &measured_total {
        out += "<table><tr><th>answer</th><th class=\"n\">count</th></tr>";
        for (code, n) in &total.totals.status {
            let _ = write!(out, "<tr><td>HTTP {code}</td><td class=\"n\">{n}</td></tr>");
        }
        let t = &total.totals;
        for (name, n, message) in kiln_record::grpc::named_statuses(&t.grpc, &t.grpc_messages) {
            let said = message.map_or_else(String::new, |m| {
                format!(" \u{2014} \u{201c}{}\u{201d}", esc(m))
            });
            let _ = write!(
                out,
                "<tr><td>gRPC {}{said}</td><td class=\"n\">{n}</td></tr>",
                esc(&name)
            );
        }
        if let Some(stream) = &t.grpc_stream {
            let first = stream.first_message.stats();
            let _ = write!(
                out,
                "<tr><td>messages received ({:.2} a call; first message p50 {}, p99 {})</td><td class=\"n\">{}</td></tr>\
<tr><td>messages sent</td><td class=\"n\">{}</td></tr>",
                stream.received_per_call(),
                us(first.p50_us),
                us(first.p99_us),
                stream.messages_received,
                stream.messages_sent
            );
        }
        for (kind, n) in &total.totals.errors {
            let _ = write!(
                out,
                "<tr><td>error: {}</td><td class=\"n\">{n}</td></tr>",
                esc(kind.label())
            );
        }
        out += "</table>";
        if let Some(hedging) = kiln_hedge::measured(&total.totals, plan) {
            out += &hedging_table(&hedging);
        }
    }
    for a in load.phases.iter().flat_map(|p| &p.anomalies) {
        let _ = write!(out, "<p class=\"muted\">{}</p>", esc(a));
    }
    for p in &load.problems {
        let _ = write!(out, "<p class=\"muted\">{}</p>", esc(p));
    }
    out + "</section>"
}

/// A hedged run's figures: copies sent and won, hedged latency beside the first copies'.
fn hedging_table(m: &kiln_hedge::Measured) -> String {
    let mut out = format!(
        "<p>Hedged at {}: {} second copies for {} requests ({:.1}% extra load, cap {:.1}%), {} \
answered first; {} not hedged over the budget, {} while copies were failing.</p>\
<table><tr><th>latency</th><th class=\"n\">hedged</th><th class=\"n\">first copies</th></tr>",
        esc(&m.delay),
        m.hedges,
        m.first_copies,
        100.0 * m.extra_share,
        100.0 * m.cap,
        m.won,
        m.over_budget,
        m.paused
    );
    for ((label, hedged), (_, first)) in m.hedged.labelled().iter().zip(m.first_copy.labelled()) {
        let _ = write!(
            out,
            "<tr><td>{label}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            us(*hedged),
            us(first)
        );
    }
    out += "</table>";
    if m.targets.len() > 1 {
        out += "<table><tr><th>target</th><th class=\"n\">first copies</th>\
<th class=\"n\">second copies</th><th class=\"n\">won</th></tr>";
        for t in &m.targets {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(&t.url),
                t.first_copies,
                t.hedges,
                t.won
            );
        }
        out += "</table>";
    }
    out
}

/// A profile's section (on-CPU or off-CPU), and its flame graph's data for the page's
/// script. The section's id names its elements (`ID-search`, `ID-match`, ...).
fn profile_section(run: &Run, kind: ProfileKind) -> (Option<String>, Value) {
    let (id, heading, parts, what, unit) = match kind {
        ProfileKind::OnCpu => (
            "profile",
            "Profile",
            ON_CPU,
            "On-CPU flame graph",
            "samples",
        ),
        ProfileKind::OffCpu => (
            "offcpu",
            "Off-CPU",
            OFF_CPU,
            "Off-CPU flame graph (where threads left the CPU: every context switch with its stack)",
            "switches",
        ),
        ProfileKind::Locks => (
            "locks",
            "Lock waits",
            LOCKS,
            "Lock wait flame graph (the time a JVM's threads waited for contended locks, by \
             the stack that waited; the leaf is the lock's class)",
            "ns waited",
        ),
        ProfileKind::Wall => (
            "wall",
            "Wall clock",
            WALL,
            "Wall-clock flame graph (every thread of a JVM, running or waiting, under the \
             thread's name: where a request's time went, CPU or not)",
            "ns",
        ),
        ProfileKind::Alloc => (
            "alloc",
            "Allocations",
            ALLOC,
            "Allocation flame graph (the bytes a JVM allocated, by the stack that allocated \
             them; the leaf is the type)",
            "bytes",
        ),
    };
    let flame = match kind {
        ProfileKind::OnCpu => "flame",
        ProfileKind::OffCpu => "offcpu-flame",
        ProfileKind::Locks => "locks-flame",
        ProfileKind::Wall => "wall-flame",
        ProfileKind::Alloc => "alloc-flame",
    };
    let mut out = format!("<section id=\"{id}\"><h2>{heading}</h2>");
    let folded = match read_folded(run, parts.folded.0) {
        Ok(Some(folded)) => Some(folded),
        // not recorded: said once with the others, no section
        Ok(None) => return (None, Value::Null),
        Err(problem) => {
            let _ = write!(out, "<p class=\"muted\">{}</p>", esc(&problem));
            None
        }
    };
    let Some(folded) = folded else {
        return (Some(out + "</section>"), Value::Null);
    };
    // nanoseconds (time waited, threads' time) read as seconds
    let amount = match unit.strip_prefix("ns") {
        Some(rest) => format!("{:.3} s{rest}", folded.total() as f64 / 1e9),
        None => format!("{} {unit}", folded.total()),
    };
    let _ = write!(
        out,
        "<p class=\"muted\">{what}, {amount}: click a frame to zoom, search to \
highlight (the match's share is shown), hover for a frame's figures. The same as an SVG: <code>{}</code>; for \
speedscope: <code>{}</code>.</p>\
{}<table>",
        parts.flame.1,
        parts.speedscope.1,
        flame_viewer(flame, true)
    );
    if kind == ProfileKind::OnCpu {
        out +=
            "<tr><th>function (self)</th><th class=\"n\">self</th><th class=\"n\">total</th></tr>";
        for f in folded.top_self(12) {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td class=\"n\">{:.1}%</td><td class=\"n\">{:.1}%</td></tr>",
                esc(&f.name),
                f.self_pct,
                f.total_pct
            );
        }
    } else {
        // an allocation's self is its type, off-CPU self time the scheduler's, a waiting
        // thread's self its futex or poll: each stack is counted where the code allocated,
        // where it blocked, or in the Java methods that took the time
        let by_self = |shares: Vec<FunctionShare>| -> Vec<(String, f64)> {
            shares.into_iter().map(|f| (f.name, f.self_pct)).collect()
        };
        let (header, rows) = match kind {
            ProfileKind::Alloc => (
                "<tr><th>allocated in (the method above the type)</th>\
<th class=\"n\">share of the bytes</th></tr>",
                by_self(folded.allocated_in(12)),
            ),
            ProfileKind::Locks => (
                "<tr><th>waited in (the method above the lock's class)</th>\
<th class=\"n\">share of the time waited</th></tr>",
                by_self(folded.allocated_in(12)),
            ),
            ProfileKind::Wall => (
                "<tr><th>Java method (total: its callees' time too; threads waiting for work \
left out)</th><th class=\"n\">share of the threads' time</th></tr>",
                (kiln_profile::summarize_wall(&folded, 12)
                    .top_total
                    .into_iter())
                .map(|f| (f.name, f.total_pct))
                .collect(),
            ),
            ProfileKind::OffCpu | ProfileKind::OnCpu => (
                "<tr><th>blocked in (the first frame outside the kernel)</th>\
<th class=\"n\">share of the switches</th></tr>",
                by_self(folded.blocked_in(12)),
            ),
        };
        out += header;
        for (name, pct) in rows {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td class=\"n\">{:.1}%</td></tr>",
                esc(&name),
                pct
            );
        }
    }
    out += "</table></section>";
    let mut data = flame::flame_data(&folded);
    if let Value::Object(o) = &mut data {
        o.insert("el".into(), json!(flame));
        o.insert("section".into(), json!(id));
        o.insert("unit".into(), json!(unit));
    }
    (Some(out), data)
}

/// Which of a run's profiles.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ProfileKind {
    OnCpu,
    OffCpu,
    Locks,
    Wall,
    Alloc,
}

/// A collapsed-stacks part of the record: `None` when the run has none, the problem in
/// words when it cannot be read.
fn read_folded(run: &Run, kind: &str) -> Result<Option<Arc<Folded>>, String> {
    run.parsed(kind, Folded::of_part)
}

/// The DB section, and whether it holds the treemap (whose script the page then needs).
/// The DB calls section. `sent`: the run's measured requests, of which the traced ones are a
/// sample (said, with every count of calls reconciled: spans received, calls in the traced
/// requests, calls outside the window or any request).
fn queries_section(run: &Run, sent: Option<u64>) -> (Option<String>, bool) {
    let mut out = String::from("<section id=\"queries\"><h2>DB calls</h2>");
    let q = match run.part_or_problem::<QueriesRecord>(QUERIES_PART) {
        Ok(Some(q)) => q,
        // no traces: said once with the other parts not recorded
        Ok(None) => return (None, false),
        Err(e) => {
            let problem = esc(&e.to_string());
            return (
                Some(format!("{out}<p class=\"muted\">{problem}</p></section>")),
                false,
            );
        }
    };
    let a = &q.analysis;
    out += &db_counts(a, sent);
    out += &kiln_queries::html::routes_table(&a.routes);
    let folded = |kind: &str| read_folded(run, kind).ok().flatten();
    let mut has_map = false;
    if let (Some(calls), Some(time)) = (folded(TRIE_CALLS_PART), folded(TRIE_TIME_PART)) {
        out += &kiln_queries::html::treemap(&StackTrie::from_folded(&calls, &time));
        has_map = true;
    }
    (Some(out + "</section>"), has_map)
}

/// The DB section's counts: calls in the traced requests, the traced requests as a sample
/// of the run's `sent`, and every DB span received accounted for (a page said "9072 DB
/// calls" in one place and "8298 calls" in another).
fn db_counts(a: &kiln_record::schema::queries::AnalysisRecord, sent: Option<u64>) -> String {
    let c = &a.coverage;
    let mut out = String::new();
    let _ = write!(
        out,
        "<p>{} DB calls in {} traced requests over {} routes. The DB findings are with the \
others above; the same as its own page: <code>queries.html</code>.</p>",
        a.db_calls,
        a.requests_matched,
        a.routes.len(),
    );
    if let Some(sent) = sent.filter(|&s| s > a.requests_matched as u64) {
        let _ = write!(
            out,
            "<p class=\"muted\">A sample: {} of the run's {sent} measured requests ({:.1}%) \
were traced (the application's trace sampler keeps some, or their spans were not all \
exported); the figures per request are the sample's.</p>",
            a.requests_matched,
            100.0 * a.requests_matched as f64 / sent as f64
        );
    }
    let elsewhere = (c.db_spans as usize)
        .saturating_sub(a.db_calls)
        .saturating_sub(a.calls_outside_window);
    let _ = write!(
        out,
        "<p class=\"muted\">{} DB spans received: {} in the traced requests above, {} in \
requests outside the measured window (the warm-up), {elsewhere} in no request kiln could \
match. Of these spans, {} carry their query text and {} a stack.</p>",
        c.db_spans, a.db_calls, a.calls_outside_window, c.db_with_text, c.db_with_caller,
    );
    out
}

/// The doctor's checks as the run found the host: the ones that are not ok, with their
/// evidence and fix, then the count of the rest.
fn host_section(run: &Run) -> String {
    let mut out = String::from("<section id=\"host\"><h2>Host checks</h2>");
    let doctor = match run.part_or_problem::<DoctorRecord>(DOCTOR_PART) {
        Ok(Some(doctor)) => doctor,
        Ok(None) => {
            out +=
                "<p class=\"muted\">This run has no host checks (runs before kiln recorded them; \
<code>kiln doctor</code> audits the host now).</p>";
            return out + "</section>";
        }
        Err(e) => {
            let _ = write!(out, "<p class=\"muted\">{}</p>", esc(&e.to_string()));
            return out + "</section>";
        }
    };
    let not_ok = doctor.not_ok();
    let _ = write!(
        out,
        "<p>{} of {} checks ok as the run started (<code>kiln doctor</code>; kiln changes nothing, \
the fixes are for you to run).</p>",
        doctor.checks.len() - not_ok.len(),
        doctor.checks.len()
    );
    if !not_ok.is_empty() {
        out += "<table><tr><th>check</th><th>verdict</th><th>evidence</th><th>why it matters</th><th>fix</th></tr>";
        for c in not_ok {
            let _ = write!(
                out,
                "<tr class=\"check-{v}\"><td><code>{}</code></td><td>{v}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                esc(&c.id),
                esc(&c.evidence),
                esc(&c.why),
                esc(&c.fix),
                v = c.verdict.label()
            );
        }
        out += "</table>";
    }
    out + "</section>"
}

fn command_section(run: &Run) -> String {
    let m = run.manifest();
    let plan = serde_json::to_string_pretty(&m.plan).unwrap_or_default();
    format!(
        "<section id=\"command\"><h2>Command and plan</h2><pre>{}</pre>\
<details><summary>Plan as kiln understood it</summary><pre>{}</pre></details>\
<p class=\"muted\">Run directory: {}</p></section>",
        esc(&m.command.join(" ")),
        esc(&plan),
        esc(&run.path().display().to_string())
    )
}

/// The load part as the page shows it: series per second (all phases, on one clock), the
/// phases, and a histogram per measured phase for the distribution.
#[derive(Default)]
struct Load {
    series: Value,
    /// Each second's phase, p50 and p99 (ms) and requests, for the comparison's overlay.
    points: Vec<(String, Value, Value, u64)>,
    phase_spans: Vec<Value>,
    phases: Vec<PhaseSummary>,
    problems: Vec<String>,
}

impl Load {
    fn read(run: &Run) -> Self {
        let mut load = Load {
            phases: run.phases.clone(),
            problems: run.load_problem.iter().cloned().collect(),
            ..Load::default()
        };
        let mut cols: [Vec<Value>; 10] = Default::default();
        let mut any_service = false;
        let mut any_wire = false;
        let mut last_phase: Option<String> = None;
        run.each_second(|s| {
            // a gap between phases: the lines break there instead of joining one repeat's
            // end to the next one's start
            if last_phase.as_ref().is_some_and(|p| *p != s.phase) {
                let t = cols[0].last().and_then(Value::as_f64).unwrap_or(0.0);
                cols[0].push(json!(t + 0.5));
                cols[1..].iter_mut().for_each(|c| c.push(Value::Null));
            }
            last_phase = Some(s.phase.clone());
            let ms = |h: &LatencyHistogram, q: f64| {
                if h.is_empty() {
                    Value::Null
                } else {
                    json!(h.quantile_us(q) as f64 / 1000.0)
                }
            };
            let failed = s.failed();
            cols[0].push(json!(s.unix_ms as f64 / 1000.0));
            cols[1].push(ms(&s.latency, 0.5));
            cols[2].push(ms(&s.latency, 0.9));
            cols[3].push(ms(&s.latency, 0.99));
            cols[4].push(ms(&s.latency, 1.0));
            cols[5].push(json!(s.requests));
            cols[6].push(json!(failed));
            cols[7].push(s.service.as_ref().map_or(Value::Null, |h| ms(h, 0.99)));
            cols[8].push(json!(s.wire.connects));
            cols[9].push(json!(s.wire.long_gaps()));
            any_wire |= !s.wire.is_empty();
            load.points.push((
                s.phase.clone(),
                ms(&s.latency, 0.5),
                ms(&s.latency, 0.99),
                s.requests,
            ));
            any_service |= s.service.is_some();
        });
        let [t, p50, p90, p99, max, requests, failed, service, connects, two_part] = cols;
        load.series = json!({
            "t": t, "p50": p50, "p90": p90, "p99": p99, "max": max,
            "requests": requests, "failed": failed,
            "service_p99": if any_service { json!(service) } else { Value::Null },
            "connects": if any_wire { json!(connects) } else { Value::Null },
            "two_part": if any_wire { json!(two_part) } else { Value::Null },
        });
        load.phase_spans = load
            .phases
            .iter()
            .map(|p| {
                json!({
                    "name": p.phase,
                    "measured": p.measured,
                    // a second's time is its end
                    "from": p.first_unix_ms.map(|ms| kiln_record::second_start_ms(ms) as f64 / 1000.0),
                    "to": p.last_unix_ms.map(|ms| ms as f64 / 1000.0),
                })
            })
            .collect();
        load
    }

    /// The measured seconds, in order: (p50 ms, p99 ms, requests).
    fn measured_points(&self) -> Vec<(Value, Value, u64)> {
        let measured = PhaseSummary::measured_names(&self.phases);
        self.points
            .iter()
            .filter(|(phase, ..)| measured.contains(&phase.as_str()))
            .map(|(_, p50, p99, n)| (p50.clone(), p99.clone(), *n))
            .collect()
    }

    /// Latency at percentiles from 0 to 99.999 (x = 1/(1-q), HdrHistogram's plot), for all
    /// measured phases together and each repeat.
    fn distribution(&self) -> Value {
        let measured: Vec<&PhaseSummary> = self.phases.iter().filter(|p| p.measured).collect();
        let Some(total) = PhaseSummary::measured_total(&self.phases) else {
            return Value::Null;
        };
        let steps: Vec<f64> = (0..=50)
            .map(|i| 1.0 - 10f64.powf(-(i as f64) / 10.0))
            .collect();
        let curve = |h: &LatencyHistogram| -> Vec<f64> {
            steps
                .iter()
                .map(|q| h.quantile_us(*q) as f64 / 1000.0)
                .collect()
        };
        let mut names = vec!["all measured".to_string()];
        let mut series = vec![curve(&total.totals.latency)];
        if measured.len() > 1 {
            for p in &measured {
                names.push(p.phase.clone());
                series.push(curve(&p.totals.latency));
            }
        }
        json!({
            "x": steps.iter().map(|q| 1.0 / (1.0 - q)).collect::<Vec<f64>>(),
            "names": names,
            "series": series,
        })
    }
}

/// The percentiles of the distribution chart: 0 to 99.999, ten steps per nine.
fn percentile_steps() -> Vec<f64> {
    (0..=50)
        .map(|i| 1.0 - 10f64.powf(-(i as f64) / 10.0))
        .collect()
}

/// kiln's own waits for a CPU per second (`noise.jsonl`): its worst thread's and its probe's.
fn read_noise(run: &Run) -> Value {
    let (mut t, mut wait, mut late) = (Vec::new(), Vec::new(), Vec::new());
    for s in run.lines::<NoiseSecond>(NOISE_PART).iter() {
        t.push(s.unix_ms as f64 / 1000.0);
        wait.push(s.wait_max_ms);
        late.push(s.probe_late_max_ms);
    }
    if t.is_empty() {
        return Value::Null;
    }
    json!({"t": t, "wait_max": wait, "probe_late": late})
}

/// The sampler's series, one column per figure (null where a second lacks it).
fn read_resources(run: &Run) -> Value {
    let lines = run.lines::<ResourceSecond>(RESOURCES_PART);
    let mut cols: Vec<Vec<Value>> = vec![Vec::new(); 22];
    let mut cores: Vec<Vec<Value>> = Vec::new();
    let mut any_process = false;
    for s in lines.iter() {
        let cpu = s.host_cpu.as_ref();
        let host = |f: fn(&kiln_sample::CpuSplit) -> f64| cpu.map_or(Value::Null, |c| json!(f(c)));
        let p = s.process.as_ref();
        any_process |= p.is_some();
        let proc = |f: &dyn Fn(&kiln_sample::ProcessSecond) -> Option<f64>| {
            p.and_then(f).map_or(Value::Null, |v| json!(v))
        };
        let row = [
            json!(s.unix_ms as f64 / 1000.0),
            host(|c| c.user + c.nice),
            host(|c| c.system),
            host(|c| c.irq),
            host(|c| c.softirq),
            host(|c| c.steal),
            host(|c| c.iowait),
            proc(&|p| Some(p.rates.cpu_user_pct)),
            proc(&|p| Some(p.rates.cpu_system_pct)),
            proc(&|p| Some(p.rss_kib as f64 / 1024.0)),
            proc(&|p| Some(p.threads as f64)),
            proc(&|p| p.open_fds.map(|n| n as f64)),
            proc(&|p| p.rates.voluntary_switches_per_s),
            proc(&|p| p.rates.involuntary_switches_per_s),
            proc(&|p| {
                p.sockets
                    .as_ref()
                    .and_then(|s| s.max_send_q.as_ref().map(|(_, n)| *n as f64))
            }),
            proc(&|p| {
                p.sockets
                    .as_ref()
                    .and_then(|s| s.max_recv_q.as_ref().map(|(_, n)| *n as f64))
            }),
            proc(&|p| Some(*p.thread_states.get("R").unwrap_or(&0) as f64)),
            proc(&|p| Some(*p.thread_states.get("S").unwrap_or(&0) as f64)),
            proc(&|p| Some(*p.thread_states.get("D").unwrap_or(&0) as f64)),
            proc(&|p| p.cgroup.as_ref().and_then(|c| c.throttled_ms)),
            s.kernel
                .as_ref()
                .and_then(|k| k.listen_overflows)
                .map_or(Value::Null, |n| json!(n)),
            s.kernel
                .as_ref()
                .and_then(|k| k.tcp_retrans_segs)
                .map_or(Value::Null, |n| json!(n)),
        ];
        // each core's busy share (all but idle and iowait), a column per core
        for (i, (_, split)) in s.host_cpu_per_core.iter().enumerate() {
            if cores.len() <= i {
                cores.push(vec![Value::Null; cols[0].len()]);
            }
            cores[i].push(json!(100.0 - split.idle - split.iowait));
        }
        for core in cores.iter_mut().skip(s.host_cpu_per_core.len()) {
            core.push(Value::Null);
        }
        for (col, v) in cols.iter_mut().zip(row) {
            col.push(v);
        }
    }
    if cols[0].is_empty() {
        return Value::Null;
    }
    let names = [
        "t",
        "host_user",
        "host_system",
        "host_irq",
        "host_softirq",
        "host_steal",
        "host_iowait",
        "target_user",
        "target_system",
        "rss_mib",
        "threads",
        "fds",
        "voluntary",
        "involuntary",
        "send_q",
        "recv_q",
        "threads_running",
        "threads_sleeping",
        "threads_disk_wait",
        "throttled_ms",
        "listen_overflows",
        "retransmits",
    ];
    let mut out = serde_json::Map::new();
    for (name, col) in names.iter().zip(cols) {
        out.insert(name.to_string(), json!(col));
    }
    if !any_process {
        out.insert("target_user".into(), Value::Null);
    }
    out.insert("cores".into(), json!(cores));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_db_counts_say_the_sample_and_account_for_every_span() {
        let mut a = kiln_record::schema::queries::AnalysisRecord {
            requests_matched: 922,
            db_calls: 8298,
            calls_outside_window: 500,
            ..Default::default()
        };
        a.coverage.db_spans = 9072;
        let html = db_counts(&a, Some(4569));
        assert!(
            html.contains("8298 DB calls in 922 traced requests"),
            "{html}"
        );
        assert!(
            html.contains("922 of the run's 4569 measured requests (20.2%)"),
            "{html}"
        );
        assert!(
            html.contains(
                "9072 DB spans received: 8298 in the traced requests above, 500 in \
requests outside the measured window (the warm-up), 274 in no request"
            ),
            "{html}"
        );
        // every request traced: no sample to speak of
        assert!(!db_counts(&a, Some(922)).contains("A sample"));
    }

    /// kiln-record's v1 demo record in a directory of its own, with `runtime.json` as given.
    fn demo_record_with_runtime(runtime: &Value) -> tempfile::TempDir {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../record/tests/fixtures/v1-demo-planted");
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(&fixture).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
        std::fs::write(dir.path().join("runtime.json"), runtime.to_string()).unwrap();
        dir
    }

    #[test]
    fn the_runtime_lines_are_a_section_with_the_targets_text_kept_as_text() {
        let hostile = "17<img src=x onerror=alert(1)>";
        let dir = demo_record_with_runtime(&json!({
            "pid": 4242,
            "runtime": "jvm",
            "version": hostile,
            "details": [["main class", "<script>alert(2)</script>"]],
            "read": [],
            "not_read": ["threads: <b>refused</b>"],
        }));
        let page = render(&Run::open(dir.path()).unwrap());
        let section = &page[page
            .find("<section id=\"runtime\">")
            .expect("a runtime section")..];
        let section = &section[..section.find("</section>").unwrap()];
        assert!(
            section.contains("JVM 17&lt;img src=x onerror=alert(1)&gt;"),
            "{section}"
        );
        assert!(
            section.contains("&lt;script&gt;alert(2)&lt;/script&gt;"),
            "{section}"
        );
        assert!(
            section.contains("not read: threads: &lt;b&gt;refused"),
            "{section}"
        );
        assert!(page.contains("<a href=\"#runtime\">Runtime</a>"));
        for raw in ["<img src=x", "<script>alert(2)", "<b>refused"] {
            assert!(!page.contains(raw), "{raw} unescaped");
        }
    }

    #[test]
    fn a_frame_becomes_a_search_link_that_matches_only_itself() {
        let frame = "Foo::bar<T>(int[], \"x\") [k]";
        let escaped = regex_escape(frame);
        assert_eq!(escaped, "Foo::bar<T>\\(int\\[\\], \"x\"\\) \\[k\\]");
        let link = percent_encode(&escaped);
        assert!(link
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.~%".contains(&b)));
        assert!(link.starts_with("Foo%3A%3Abar%3CT%3E%5C%28int"), "{link}");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    #[test]
    fn a_finding_over_the_off_cpu_profile_links_to_its_flame_graph() {
        let finding = |flame: Option<(Event, &str)>| Finding {
            id: "x".into(),
            rule: "r".into(),
            severity: kiln_findings::Severity::High,
            about: kiln_findings::About::Target,
            title: "t".into(),
            evidence: vec![],
            window: None,
            cause: String::new(),
            fix: String::new(),
            impact: kiln_findings::Impact {
                share: 0.5,
                of: "x".into(),
            },
            flame: flame.map(|(event, frame)| FlameCite {
                event,
                frame: frame.into(),
            }),
            data: Value::Null,
            seconds: Vec::new(),
        };
        let off = finding_links(&finding(Some((Event::Cswitch, "app::get"))));
        assert!(
            off.contains("href=\"#offcpu-search=app%3A%3Aget\""),
            "{off}"
        );
        assert!(off.contains("off-CPU flame graph"), "{off}");
        let on = finding_links(&finding(Some((Event::Cpu, "app::get"))));
        assert!(on.contains("href=\"#search=app%3A%3Aget\""), "{on}");
    }
}
