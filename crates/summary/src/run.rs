//! The end-of-run summary, as text and as JSON, built only from the run record (manifest and
//! phase summaries), so `kiln run` and `kiln report` print the same thing.

use kiln_record::schema::profile::ProfileRecord;
use kiln_record::schema::queries::QueriesRecord;
use std::fmt::Write as _;

use kiln_record::parts::{
    ALLOC, LOCKS, LOCKS_NOT_RECORDED, OFF_CPU, ON_CPU, WALL, WALL_NOT_RECORDED,
};
use kiln_record::{LatencyHistogram, LatencyStats, PhaseEnd, PhaseSummary, RunManifest};
use serde_json::{json, Value};

use crate::noise::{self, NoiseSummary};
use crate::resources::{self, comma_list_or_none, ResourcesSummary};
use crate::{profile, runtime, thresholds};
use kiln_record::schema::export::ExportsRecord;
use kiln_record::text::{self as format, safe_text};
use kiln_runtime::summary::RuntimeSummary;
use kiln_runtime::{RuntimeInfo, RuntimeSecond};
use kiln_sample::{NoiseSecond, ResourceSecond};

/// The percentile table fits 80 columns: eight cells of eight ("999.9ms" and a gap), mean
/// and spread on a line of their own.
fn percentile_header(title: &str) -> String {
    let mut header = format!("{title:<10}");
    for name in ["p50", "p75", "p90", "p95", "p99", "p99.9", "p99.99", "max"] {
        let _ = write!(header, "{name:>8}");
    }
    header
}

fn percentile_row(label: &str, s: &LatencyStats) -> String {
    let cells = [
        s.p50_us,
        s.p75_us,
        s.p90_us,
        s.p95_us,
        s.p99_us,
        s.p99_9_us,
        s.p99_99_us,
        s.max_us,
    ];
    let mut row = format!("  {label:<8}");
    for c in cells {
        let _ = write!(row, "{:>8}", format::us(c));
    }
    row
}

/// "mean 23.9ms, stdev 6.71ms" of each row of the table.
fn mean_spread(rows: &[(&str, LatencyStats)]) -> String {
    let each: Vec<String> = rows
        .iter()
        .map(|(label, s)| {
            format!(
                "{label} mean {}, stdev {}",
                format::us_f(s.mean_us),
                format::us_f(s.stdev_us)
            )
        })
        .collect();
    format!("  {}", each.join("; "))
}

/// A horizontal bar chart of the latency distribution on log-spaced buckets.
fn histogram_chart(h: &LatencyHistogram) -> String {
    let buckets = h.log_buckets(12);
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    let peak = buckets.iter().map(|b| b.1).max().unwrap_or(0).max(1);
    let mut out = String::new();
    for (upper, count) in buckets {
        let width = (count as f64 / peak as f64 * 40.0).round() as usize;
        let _ = writeln!(
            out,
            "  <= {:>8} |{:<40} {:>9} {:>6.2}%",
            format::us(upper),
            "■".repeat(width),
            count,
            count as f64 * 100.0 / total.max(1) as f64
        );
    }
    out
}

fn phase_row(p: &PhaseSummary) -> String {
    let s = p.totals.latency.stats();
    format!(
        "  {:<9}{:>10.1}{:>10}{:>10}{:>10}{:>10}{:>10}{:>9.2}%{:>9}",
        p.phase,
        p.throughput(),
        format::us(s.p50_us),
        format::us(s.p90_us),
        format::us(s.p99_us),
        format::us(s.p99_9_us),
        format::us(s.max_us),
        p.failed_ratio() * 100.0,
        p.unsent()
    )
}

/// Prints the summary of a run, as JSON or text, on stdout; what `kiln run` and
/// `kiln report` both show.
/// Everything a run's summary is made from: what `kiln run` just recorded, or what
/// `kiln report` read back from the run directory.
pub struct RunView<'a> {
    pub dir: &'a str,
    pub manifest: &'a RunManifest,
    pub status: &'a str,
    pub phases: &'a [PhaseSummary],
    pub resources: &'a [ResourceSecond],
    /// How long kiln itself waited for a CPU, per second (`noise.jsonl`).
    pub noise: &'a [NoiseSecond],
    /// The watched process's runtime and its own seconds (a JVM's GC, ...).
    pub runtime: Option<(&'a RuntimeInfo, &'a [RuntimeSecond])>,
    /// The profile's record (`profile.json`) when the run was profiled.
    pub profile: Option<&'a ProfileRecord>,
    /// The off-CPU profile's record (`offcpu.json`) when one was taken.
    pub off_cpu: Option<&'a ProfileRecord>,
    /// The allocation profile's record (`alloc.json`) when one was taken.
    pub alloc: Option<&'a ProfileRecord>,
    /// A JVM's lock profile's record (`locks.json`) when `--off-cpu` took one.
    pub locks: Option<&'a ProfileRecord>,
    /// A JVM's wall-clock profile's record (`wall.json`) when `--off-cpu` took one.
    pub wall: Option<&'a ProfileRecord>,
    /// The DB-call analysis (`queries.json`) when the run received traces.
    pub queries: Option<&'a QueriesRecord>,
    /// The findings over the whole record: what is wrong, ranked.
    pub findings: Option<&'a kiln_findings::Report>,
    /// `kiln run --compare BASE`: this run against the base.
    pub compare: Option<&'a kiln_compare::Comparison>,
    /// What each `--export` receiver got (`exports.json`).
    pub exports: Option<&'a ExportsRecord>,
}

/// A line per `--export` receiver: what reached it, and what did not.
fn exports_text(exports: Option<&ExportsRecord>) -> String {
    let mut out = String::new();
    for e in exports.map_or(&[][..], |e| e.exports.as_slice()) {
        let missed = match (e.seconds_dropped, &e.last_error) {
            (0, _) => String::new(),
            (n, Some(why)) => format!("; {n} did not reach it (last: {why})"),
            (n, None) => format!("; {n} did not reach it"),
        };
        let histograms = if e.classic {
            ", classic histograms"
        } else {
            ""
        };
        out += &format!(
            "Exported   {} {}: {} seconds, {} samples{histograms}{missed}\n",
            e.kind, e.url, e.seconds_sent, e.samples_sent
        );
    }
    out
}

/// Mean and sample standard deviation.
pub fn mean_stdev(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Per-metric mean, stdev, min and max across the measured runs.
fn across_runs(measured: &[&PhaseSummary]) -> Vec<(&'static str, Vec<f64>)> {
    let pick =
        |f: &dyn Fn(&PhaseSummary) -> f64| measured.iter().map(|p| f(p)).collect::<Vec<f64>>();
    vec![
        ("throughput_rps", pick(&|p| p.throughput())),
        (
            "p50_us",
            pick(&|p| p.totals.latency.quantile_us(0.5) as f64),
        ),
        (
            "p90_us",
            pick(&|p| p.totals.latency.quantile_us(0.9) as f64),
        ),
        (
            "p99_us",
            pick(&|p| p.totals.latency.quantile_us(0.99) as f64),
        ),
        (
            "p99_9_us",
            pick(&|p| p.totals.latency.quantile_us(0.999) as f64),
        ),
        ("max_us", pick(&|p| p.totals.latency.max_us() as f64)),
        ("failed_ratio", pick(&|p| p.failed_ratio())),
    ]
}

pub fn render_text(view: &RunView) -> String {
    let RunView {
        dir,
        manifest,
        status,
        phases,
        resources,
        noise,
        runtime,
        profile,
        off_cpu,
        alloc,
        locks,
        wall,
        queries,
        findings,
        compare,
        exports,
    } = *view;
    let recorded = Recorded {
        profile,
        off_cpu,
        alloc,
        locks,
        wall,
        queries,
        requests: None,
    };
    let mut out = String::new();
    let plan = &manifest.plan;
    let reason = manifest
        .status_reason
        .as_deref()
        .map(|r| format!(": {}", safe_text(r)))
        .unwrap_or_default();
    let Some(plan) = plan.load() else {
        // a run without load (kiln profile, kiln queries): what it recorded
        let _ = writeln!(out, "Run        {} ({status}{reason})", safe_text(dir));
        out += &recorded_extras(dir, &manifest.not_recorded, recorded);
        return out;
    };
    let open = plan.open_model();
    match &plan.plan_file {
        Some(file) => {
            let _ = writeln!(
                out,
                "\nPlan       {} -> {}",
                safe_text(file),
                safe_text(&plan.url)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "\nTarget     {} {}",
                safe_text(&plan.method),
                safe_text(&plan.url)
            );
        }
    }
    for warning in kiln_record::record_warnings(manifest.status, phases) {
        let _ = writeln!(out, "Warning    {}", safe_text(&warning));
    }
    let _ = writeln!(out, "Workload   {}", plan.workload_text());
    let _ = writeln!(out, "Run        {} ({status}{reason})", safe_text(dir));
    // what the run shows and which findings explain it, before the detail
    if let Some(symptoms) = findings.and_then(|f| f.symptoms.as_ref()) {
        out += &kiln_findings::symptoms_text(symptoms);
    }

    let measured: Vec<&PhaseSummary> = phases.iter().filter(|p| p.measured).collect();
    if let Some(w) = phases.iter().find(|p| !p.measured) {
        let _ = writeln!(
            out,
            "Warm-up    {} requests in {:.1} s, left out of the results",
            w.totals.requests,
            w.duration_secs()
        );
        if let Some(why) = w.end.as_ref().and_then(|e| e.ended_because.as_ref()) {
            let _ = writeln!(out, "           ended {}", safe_text(why));
        }
    }
    if measured.len() > 1 {
        let _ = writeln!(
            out,
            "\nRuns          req/s       p50       p90       p99     p99.9       max    failed   unsent"
        );
        for p in &measured {
            let _ = writeln!(out, "{}", phase_row(p));
        }
        let metrics = across_runs(&measured);
        let cell = |name: &str, v: f64| {
            if name.ends_with("_us") {
                format::us_f(v)
            } else if name == "failed_ratio" {
                format!("{:.2}%", v * 100.0)
            } else {
                format!("{v:.1}")
            }
        };
        for (label, pick) in [("mean", 0usize), ("stdev", 1)] {
            let mut row = format!("  {label:<9}");
            for (name, values) in &metrics {
                let (mean, stdev) = mean_stdev(values);
                let v = if pick == 0 { mean } else { stdev };
                let _ = write!(row, "{:>10}", cell(name, v));
            }
            let _ = writeln!(out, "{row}");
        }
        let _ = writeln!(out, "  (the figures below merge all measured runs exactly)");
    }

    let Some(total) = PhaseSummary::measured_total(phases) else {
        let _ = writeln!(out, "\nNo measured results were recorded.");
        out += &recorded_extras(dir, &manifest.not_recorded, recorded);
        return out;
    };
    let _ = writeln!(
        out,
        "\nRequests   {} in {:.1} s = {:.1}/s, failed {} ({:.2}%){}",
        total.totals.requests,
        total.duration_secs(),
        total.throughput(),
        total.failed(),
        total.failed_ratio() * 100.0,
        if open {
            format!(
                ", scheduled {}, unsent {}",
                total.totals.scheduled,
                total.unsent()
            )
        } else {
            String::new()
        }
    );
    if total.totals.latency.is_empty() {
        let _ = writeln!(out, "Latency    no responses");
    } else {
        let mut rows = vec![("latency", total.totals.latency.stats())];
        if let Some(service) = &total.totals.service {
            rows.push(("service", service.stats()));
        }
        let _ = writeln!(out, "{}", percentile_header("Latency"));
        for (label, stats) in &rows {
            let _ = writeln!(out, "{}", percentile_row(label, stats));
        }
        let _ = writeln!(out, "{}", mean_spread(&rows));
        if total.totals.service.is_some() {
            let _ = writeln!(
                out,
                "  latency counts from each request's scheduled send time (what a user arriving then waits); service counts from the actual send (the target alone). A gap means requests waited in kiln's queue because every connection was busy: the target was behind the schedule."
            );
        } else {
            let _ = writeln!(
                out,
                "  closed model: a slow response delays the connection's next request, so stalls are under-sampled (coordinated omission); use --rate for latency as users arriving at a rate see it."
            );
        }
        let _ = writeln!(
            out,
            "Histogram (latency)\n{}",
            histogram_chart(&total.totals.latency).trim_end()
        );
    }
    if let Some(hedging) = kiln_hedge::measured(&total.totals, &manifest.plan) {
        out += &kiln_hedge::measured_text(&hedging);
    }
    let by_name = crate::names::to_text(&total);
    if !by_name.is_empty() {
        out += "\n";
        out += &by_name;
        out += "\n";
    }
    let t = &total.totals;
    let statuses = t.status.iter().map(|(c, n)| format!("{c}: {n}"));
    let _ = writeln!(out, "Status     {}", comma_list_or_none(statuses));
    if !t.grpc.is_empty() {
        let _ = writeln!(out, "gRPC       {}", grpc_statuses(t).join(", "));
    }
    if let Some(stream) = &t.grpc_stream {
        let _ = writeln!(out, "{}", grpc_stream_line(stream));
    }
    let errors = t.errors.iter().map(|(k, n)| format!("{}: {n}", k.label()));
    let _ = writeln!(out, "Errors     {}", comma_list_or_none(errors));
    let _ = writeln!(
        out,
        "Received   {} of response bodies",
        format::bytes(total.totals.body_bytes)
    );
    if let Some(wire) = crate::wire::WireSummary::of(&total) {
        out += &wire.text();
    }
    if let Some(end) = &total.end {
        let cpu_s = (end.kiln_cpu_user_us + end.kiln_cpu_system_us) as f64 / 1e6;
        let per_cpu = if cpu_s > 0.0 {
            total.totals.requests as f64 / cpu_s
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "Generator  kiln CPU {:.2} s (user {:.2} s, system {:.2} s) = {:.0} requests per CPU-second; max RSS {}; {} connections opened{}{}",
            cpu_s,
            end.kiln_cpu_user_us as f64 / 1e6,
            end.kiln_cpu_system_us as f64 / 1e6,
            per_cpu,
            format::bytes(end.kiln_max_rss_kib.saturating_mul(1024)),
            end.connections_opened,
            if end.connections_kept > 0 {
                format!(", {} kept from the phase before", end.connections_kept)
            } else {
                String::new()
            },
            if open {
                format!("; worst send lag {}", format::us(total.totals.send_lag_max_us))
            } else {
                String::new()
            }
        );
        out += &left_at_the_end(end);
    }
    if let Some(n) = NoiseSummary::of(&noise::during(&total, noise)) {
        out += &n.text();
    }
    out += &exports_text(exports);
    out += &resources::text_of(&resources::during(&total, resources), "the measured load");
    if let Some(r) = runtime_during(runtime, Some(&total), resources) {
        out += &runtime::to_text(&r);
    }
    let requests = Some(total.totals.requests);
    out += &recorded_extras(
        dir,
        &manifest.not_recorded,
        Recorded {
            requests,
            ..recorded
        },
    );
    for t in thresholds::check_all(&manifest.plan, &total) {
        let _ = writeln!(
            out,
            "Threshold  {} {} (measured {})",
            if t.ok { "pass" } else { "FAIL" },
            safe_text(&t.threshold),
            t.actual_text
        );
    }
    if let Some(findings) = findings {
        out += "\n";
        out += &kiln_findings::to_text(findings, kiln_findings::UnjudgedLines::Folded);
    }
    if let Some(compare) = compare {
        out += "\nCompared with the base run:\n";
        out += &kiln_compare::to_text(compare);
    }
    out
}

fn phase_json(p: &PhaseSummary) -> Value {
    let end = p.end.clone().unwrap_or_default();
    let mut out = json!({
        "phase": p.phase,
        "measured": p.measured,
        "complete": p.end.is_some(),
        "duration_s": p.duration_secs(),
        "requests": p.totals.requests,
        "throughput_rps": p.throughput(),
        "sent": p.totals.sent,
        "scheduled": p.totals.scheduled,
        "unsent": p.unsent(),
        "failed": p.failed(),
        "failed_ratio": p.failed_ratio(),
        "status": p.totals.status.iter().map(|(c, n)| (c.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "errors": p.totals.errors,
        "body_bytes": p.totals.body_bytes,
        "max_connections": p.max_connections,
        "latency": p.totals.latency.stats(),
        "service": p.totals.service.as_ref().map(|s| s.stats()),
        "send_lag_max_us": p.totals.send_lag_max_us,
        "abandoned": end.abandoned,
        "abandoned_connecting": end.abandoned_connecting,
        "connections_opened": end.connections_opened,
        "connections_kept": end.connections_kept,
        "kiln_cpu_user_us": end.kiln_cpu_user_us,
        "kiln_cpu_system_us": end.kiln_cpu_system_us,
        "kiln_max_rss_kib": end.kiln_max_rss_kib,
        "ended_because": end.ended_because,
        "stopped_early": end.stopped_early,
        "iterations": p.totals.iterations,
        "checks": p.totals.checks,
        "checks_failed": p.totals.checks_failed,
        "names": crate::names::to_json(p),
        "wire": crate::wire::WireSummary::of(p),
    });
    // a gRPC run's calls by status name (absent from an HTTP run's JSON)
    if !p.totals.grpc.is_empty() {
        out["grpc_status"] = (p.totals.grpc.iter())
            .map(|(c, n)| (kiln_record::grpc::grpc_code_name(*c), json!(n)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if !p.totals.grpc_messages.is_empty() {
        out["grpc_messages"] = (p.totals.grpc_messages.iter())
            .map(|(c, m)| (kiln_record::grpc::grpc_code_name(*c), json!(m)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if let Some(stream) = &p.totals.grpc_stream {
        let first = stream.first_message.stats();
        out["grpc_stream"] = json!({
            "calls": stream.calls,
            "messages_received": stream.messages_received,
            "messages_sent": stream.messages_sent,
            "received_per_call": stream.received_per_call(),
            "sent_per_call": stream.sent_per_call(),
            "first_message": first,
        });
    }
    out
}

/// A streaming method's line: messages a call each way, and how soon the first one came.
fn grpc_stream_line(s: &kiln_record::grpc::GrpcStreamSecond) -> String {
    let first = s.first_message.stats();
    let mut line = format!(
        "Messages   {:.2} received a call, {:.2} sent ({} received in {} calls)",
        s.received_per_call(),
        s.sent_per_call(),
        s.messages_received,
        s.calls
    );
    if first.count > 0 {
        let _ = write!(
            line,
            "; first message p50 {}, p99 {}",
            format::us(first.p50_us),
            format::us(first.p99_us)
        );
    }
    line
}

/// The records taken beside the load, for their sections of the summary.
#[derive(Clone, Copy, Default)]
struct Recorded<'a> {
    profile: Option<&'a ProfileRecord>,
    off_cpu: Option<&'a ProfileRecord>,
    alloc: Option<&'a ProfileRecord>,
    locks: Option<&'a ProfileRecord>,
    wall: Option<&'a ProfileRecord>,
    queries: Option<&'a QueriesRecord>,
    /// The measured requests, for the bytes each allocated.
    requests: Option<u64>,
}

/// The sections of what was recorded beside the load: the profiles and the DB calls.
fn recorded_extras(
    dir: &str,
    not_recorded: &std::collections::BTreeMap<String, String>,
    recorded: Recorded,
) -> String {
    let mut out = String::new();
    let Recorded {
        profile,
        off_cpu,
        alloc,
        locks,
        wall,
        queries,
        requests,
    } = recorded;
    for (label, flag, recorded, flame) in [
        ("Profile", "--profile", profile, ON_CPU.flame.1),
        ("Off-CPU", "--off-cpu", off_cpu, OFF_CPU.flame.1),
        ("Locks", LOCKS_NOT_RECORDED, locks, LOCKS.flame.1),
        ("Wall", WALL_NOT_RECORDED, wall, WALL.flame.1),
        ("Alloc", "--alloc", alloc, ALLOC.flame.1),
    ] {
        if let Some(profile) = recorded {
            out += &profile_text(dir, profile, label, flame);
            if let (true, Some(per_request)) = (
                flag == "--alloc",
                requests.and_then(|n| profile.per_request(n)),
            ) {
                out += &alloc_per_request(profile, per_request);
            }
        } else if let Some(why) = not_recorded.get(flag) {
            // said where the profile would be, with the fix, not only as a warning above
            let _ = writeln!(out, "{label:<10} not recorded: {}", safe_text(why));
        }
    }
    if let Some(queries) = queries {
        out += "DB calls (from the target's traces)\n";
        out += &kiln_queries::text::report_text(queries, 5);
        let _ = writeln!(out, "Report     {dir}/queries.html");
    }
    out
}

/// `Alloc      1.20 MiB a request; 61% in Shop.render`: the bytes a measured request
/// allocated, and the method that allocated most.
fn alloc_per_request(alloc: &ProfileRecord, per_request: f64) -> String {
    let top = alloc
        .summary
        .allocated_in
        .first()
        .map_or(String::new(), |f| {
            format!("; {:.0}% in {}", f.self_pct, safe_text(&f.name))
        });
    format!(
        "Alloc      {} a request{top}\n",
        format::bytes(per_request.round() as u64)
    )
}

/// A profile's section of a run's text summary, from its record (`profile.json`,
/// `offcpu.json`), under a label of ten columns.
fn profile_text(dir: &str, profile: &ProfileRecord, label: &str, flame: &str) -> String {
    let pid = profile.pids.first().map_or("?".to_string(), i32::to_string);
    let mut out = format!(
        "{label:<10} pid {pid} over {:.1} s of the measured load{}{}\n",
        profile.duration_s.unwrap_or(0.0),
        profile
            .profiler
            .as_ref()
            .map_or(String::new(), |p| format!(", by {}", safe_text(p))),
        profile
            .perf_cpu_pct
            .map_or(String::new(), |p| format!("; perf used {p:.1}% of a core"))
    );
    if let Some(note) = &profile.profiler_note {
        out += &format!("Profiler   {}\n", safe_text(note));
    }
    let samples = profile.source.as_ref().and_then(|s| s.samples);
    out += &profile::summary_text(&profile.summary, &profile.count_name, samples);
    for advice in profile.jit.iter().flat_map(|j| &j.advice) {
        out += &format!("Advice     {}\n", safe_text(advice));
    }
    out += &format!("Flame      {}\n", safe_text(&format!("{dir}/{flame}")));
    out
}

/// The runtime's lines of a run's summary, read from its record (for the HTML report, which
/// shows what the terminal showed); `None` when no runtime was watched.
pub fn runtime_text_of(run: &kiln_record::Run) -> Option<String> {
    let info = run.part::<RuntimeInfo>(kiln_runtime::RUNTIME_PART)?;
    let seconds = run.lines::<RuntimeSecond>(kiln_runtime::RUNTIME_SECONDS_PART);
    let resources = run.lines::<ResourceSecond>(kiln_sample::RESOURCES_PART);
    let total = PhaseSummary::measured_total(&run.phases);
    runtime_during(
        Some((&*info, seconds.as_slice())),
        total.as_ref(),
        resources.as_slice(),
    )
    .map(|summary| runtime::to_text(&summary))
}

/// The runtime over the measured phases (all its seconds when the phases have no clock).
fn runtime_during(
    runtime: Option<(&RuntimeInfo, &[RuntimeSecond])>,
    total: Option<&PhaseSummary>,
    resources: &[ResourceSecond],
) -> Option<RuntimeSummary> {
    let (info, seconds) = runtime?;
    let window = total.and_then(|t| Some((t.first_unix_ms?, t.last_unix_ms?)));
    // a second's time is its end: the load began a second before its first
    let load_window = window.map(|(first, last)| (kiln_record::second_start_ms(first), last));
    let mut summary = kiln_runtime::summary::summarize_within(
        info,
        &kiln_runtime::summary::during(seconds, window),
        load_window,
    );
    let samples = match total {
        Some(t) => resources::during(t, resources),
        None => resources.to_vec(),
    };
    kiln_findings::record::add_thread_roles(&mut summary, &samples);
    Some(summary)
}

pub fn render_json(view: &RunView) -> Value {
    let (manifest, phases) = (view.manifest, view.phases);
    let total = PhaseSummary::measured_total(phases);
    let measured: Vec<&PhaseSummary> = phases.iter().filter(|p| p.measured).collect();
    let across: serde_json::Map<String, Value> = if measured.len() > 1 {
        across_runs(&measured)
            .into_iter()
            .map(|(name, values)| {
                let (mean, stdev) = mean_stdev(&values);
                let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
                let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                (
                    name.to_string(),
                    json!({"mean": mean, "stdev": stdev, "min": min, "max": max}),
                )
            })
            .collect()
    } else {
        serde_json::Map::new()
    };
    json!({
        "run_dir": view.dir,
        "id": manifest.id,
        "status": view.status,
        "status_reason": manifest.status_reason,
        "started_at": manifest.started_at,
        "ended_at": manifest.ended_at,
        "plan": manifest.plan,
        "warnings": kiln_record::record_warnings(manifest.status, phases),
        "phases": phases.iter().map(phase_json).collect::<Vec<_>>(),
        "total": total.as_ref().map(phase_json),
        "across_runs": if across.is_empty() { Value::Null } else { Value::Object(across) },
        "resources": total
            .as_ref()
            .and_then(|t| ResourcesSummary::of(&resources::during(t, view.resources))),
        "runtime": runtime_during(view.runtime, total.as_ref(), view.resources),
        "host_noise": total
            .as_ref()
            .and_then(|t| NoiseSummary::of(&noise::during(t, view.noise))),
        "hedging": total.as_ref().and_then(|t| kiln_hedge::measured(&t.totals, &manifest.plan)),
        "thresholds": total
            .as_ref()
            .map(|t| thresholds::check_all(&manifest.plan, t))
            .unwrap_or_default(),
        "exports": view.exports.map(|e| &e.exports),
        "profile": view.profile,
        "off_cpu": view.off_cpu,
        "alloc": view.alloc,
        "locks": view.locks,
        "wall": view.wall,
        "alloc_bytes_per_request": view
            .alloc
            .zip(total.as_ref())
            .and_then(|(a, t)| a.per_request(t.totals.requests)),
        "queries": view.queries,
        "findings": view.findings,
        "compare": view.compare,
    })
}

/// The requests a phase's end cut: sent and unanswered, or never connected. They are in no
/// latency, error or rate, so they are said.
fn left_at_the_end(end: &PhaseEnd) -> String {
    let mut cut = Vec::new();
    if end.abandoned > 0 {
        cut.push(format!("{} requests sent had no answer", end.abandoned));
    }
    if end.abandoned_connecting > 0 {
        cut.push(format!(
            "{} were still connecting (the target accepted no connection for them: a full accept queue?)",
            end.abandoned_connecting
        ));
    }
    if cut.is_empty() {
        return String::new();
    }
    format!(
        "Cut off    {} when the run ended: in neither the latency nor the errors nor the rate (-w waits for them up to --timeout)\n",
        cut.join(", ")
    )
}

/// A gRPC run's calls by status, by name: `OK: 990, UNAVAILABLE: 10`.
fn grpc_statuses(t: &kiln_record::SecondRecord) -> Vec<String> {
    kiln_record::grpc::named_statuses(&t.grpc, &t.grpc_messages)
        .map(|(name, n, message)| match message {
            // the server's words, as text on a terminal
            Some(m) => format!("{name}: {n} (\"{}\")", safe_text(m)),
            None => format!("{name}: {n}"),
        })
        .collect()
}

#[cfg(test)]
mod record_fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Any JSON value, a few levels deep, with the keys the records use.
    fn any_json() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("analysis"),
            Just("coverage"),
            Just("findings"),
            Just("routes"),
            Just("site"),
            Just("summary"),
            Just("top_self"),
            Just("samples"),
            Just("calls"),
            Just("requests"),
            Just("db_spans"),
            Just("calls_with_stack"),
            Just("calls_with_app_frame"),
            Just("evidence"),
            Just("name"),
            Just("line"),
            Just("trie"),
            Just("heaviest"),
            Just("worst_requests"),
            Just("requests_outside_window"),
            Just("problems"),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::vec((key.clone(), inner), 0..8).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    /// Every profile `p` (on-CPU, off-CPU and allocations) and the DB calls `q`.
    fn all<'a>(p: Option<&'a ProfileRecord>, q: Option<&'a QueriesRecord>) -> Recorded<'a> {
        Recorded {
            profile: p,
            off_cpu: p,
            alloc: p,
            locks: p,
            wall: p,
            queries: q,
            requests: Some(3),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// `profile.json` and `queries.json` as any JSON: the summary is written, never a panic.
        #[test]
        fn any_profile_or_queries_record_is_shown_without_panic(
            profile in any_json(),
            queries in any_json(),
        ) {
            let queries_of = |v: &Value| serde_json::from_value::<QueriesRecord>(v.clone()).ok();
            let profile_of = |v: &Value| serde_json::from_value::<ProfileRecord>(v.clone()).ok();
            let (p, q) = (profile_of(&profile), queries_of(&queries));
            let _ = recorded_extras("run", &Default::default(), all(p.as_ref(), q.as_ref()));
            let wrapped = json!({"analysis": queries, "summary": profile});
            let (p, q) = (profile_of(&wrapped), queries_of(&wrapped));
            let _ = recorded_extras("run", &Default::default(), all(p.as_ref(), q.as_ref()));
        }
    }
}
