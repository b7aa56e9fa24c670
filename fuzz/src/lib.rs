//! Fuzz targets: one function per parser of input kiln does not control, each taking any
//! bytes. A target must never panic, hang or allocate without bound, whatever it is given;
//! an error is a fine answer. `cargo fuzz run --features libfuzzer NAME` drives one under
//! libFuzzer (nightly); `fuzz/tests/corpus.rs` replays the committed corpus of every target
//! in the suite on stable.
//!
//! Not here: /proc files, which come from the kernel, and HdrHistogram interval logs, which
//! kiln writes and never reads.

use std::io::BufReader;

/// A fuzz target: any bytes in, nothing out (a panic is the failure).
pub type Target = fn(&[u8]);

/// Every target by name: the name is its `fuzz_targets/NAME.rs` and its `corpus/NAME` folder.
pub const TARGETS: &[(&str, Target)] = &[
    ("http1_response", http1_response),
    ("otlp_protobuf", otlp_protobuf),
    ("otlp_json", otlp_json),
    ("plan_yaml", plan_yaml),
    ("har", har),
    ("profile_import", profile_import),
    ("perf_script", perf_script),
    ("histogram", histogram),
    ("run_record", run_record),
    ("jfr_json", jfr_json),
    ("hsperfdata", hsperfdata),
    ("runtime_dumps", runtime_dumps),
    ("barrier", barrier),
];

/// A response read by kiln's HTTP/1.1 reader as it comes off a socket, in pieces whose size
/// the first byte chooses (1 to 256 bytes; its low bit asks for the response to a HEAD).
pub fn http1_response(data: &[u8]) {
    use kiln_load::http1::ResponseReader;
    let Some((&first, data)) = data.split_first() else {
        return;
    };
    let method = if first & 1 == 1 {
        http::Method::HEAD
    } else {
        http::Method::GET
    };
    let piece = usize::from(first >> 1).max(1) * 2;
    let mut reader = ResponseReader::new(&method);
    // bytes not consumed are offered again with the next piece, as the connection does
    let (mut pending, mut at) = (Vec::new(), 0);
    while at < data.len() {
        let end = (at + piece).min(data.len());
        pending.extend_from_slice(&data[at..end]);
        at = end;
        loop {
            match reader.advance(&pending) {
                Ok(p) => {
                    assert!(p.consumed <= pending.len(), "consumed past the input");
                    pending.drain(..p.consumed);
                    if !p.complete {
                        break;
                    }
                    reader.reset_for(&method, first & 2 == 2);
                    if pending.is_empty() {
                        break;
                    }
                }
                Err(_) => return,
            }
        }
    }
    let _ = reader.end_of_input();
}

/// An OTLP/HTTP protobuf export request, as the span receiver takes it.
pub fn otlp_protobuf(data: &[u8]) {
    let mut ingest = kiln_queries::Ingest::new();
    if ingest.add_protobuf(data).is_ok() {
        let _ = kiln_queries::analyze::analyze(&ingest, &Default::default());
    }
}

/// OTLP/JSON `TracesData`, as exporters' files and the receiver's JSON carry it.
pub fn otlp_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut ingest = kiln_queries::Ingest::new();
    if ingest.add_json_text(text, "fuzz") {
        let _ = kiln_queries::analyze::analyze(&ingest, &Default::default());
    }
}

/// A YAML plan file, checked without looking its hosts up or reading environment variables.
pub fn plan_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let dir = std::env::temp_dir();
    let _ = kiln_plan::parse_with(
        text,
        "fuzz.yaml",
        &dir,
        &[],
        &|_| None,
        kiln_plan::Lookup::Never,
    );
}

/// A HAR recording made into a plan.
pub fn har(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = kiln_plan::har::to_plan(text, false);
    }
}

/// A profile to import: pprof (gzipped or not), collapsed stacks or `perf script` text, told
/// apart by content.
pub fn profile_import(data: &[u8]) {
    let _ = kiln_profile::import(data);
}

/// `perf script` text read as it streams.
pub fn perf_script(data: &[u8]) {
    let _ = kiln_profile::perf::read_perf_script(BufReader::new(data));
}

/// A latency histogram of a run record (base64 of HdrHistogram's compressed encoding).
pub fn histogram(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(h) = kiln_record::LatencyHistogram::from_base64(text) {
            let _ = (h.stats(), h.quantile_us(0.99), h.log_buckets(20));
        }
    }
}

/// A run's per-second load records and resource samples (JSON lines), summarised as the
/// readers of a run do.
pub fn run_record(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<kiln_record::LoadRecordLine> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let phases = kiln_record::PhaseSummary::from_lines(&lines);
    if let Some(total) = kiln_record::PhaseSummary::measured_total(&phases) {
        let _ = total.totals.latency.stats();
    }
    let _ = kiln_record::record_warnings(kiln_record::RunStatus::Interrupted, &phases);
    let resources: Vec<kiln_sample::ResourceSecond> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let _ = resources.len();
}

/// `jfr print --json` output of a recording (a JVM's events, read as they stream).
pub fn jfr_json(data: &[u8]) {
    let _ = kiln_runtime::jfr::read_printed(data);
}

/// A JVM's hsperfdata file (its counters, mapped from the target's /tmp).
pub fn hsperfdata(data: &[u8]) {
    let _ = kiln_runtime::hsperf::Directory::parse(data);
}

/// What a watched runtime prints for kiln: a JVM thread dump, a Go goroutine dump, Go
/// GC-trace lines and py-spy's JSON dump.
pub fn runtime_dumps(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = kiln_runtime::threads::parse(text);
    let _ = kiln_runtime::goroutines::parse(text, 0, 0.0);
    for line in text.lines() {
        let _ = kiln_runtime::go::parse_gctrace(line, 0.0);
    }
    let _ = kiln_runtime::pyspy::parse(text, 0, 0.0, false);
}

/// The HTTP barrier of sharded runs: a request to shard 0 from anyone who can reach it, and
/// shard 0's answer as a shard reads it (the first byte picks which).
pub fn barrier(data: &[u8]) {
    use kiln_runner::http_barrier::{parse_answer, parse_request};
    match data.split_first() {
        Some((first, raw)) if first & 1 == 0 => {
            let _ = parse_request(raw);
        }
        Some((_, raw)) => {
            let _ = parse_answer(raw);
        }
        None => {}
    }
}
