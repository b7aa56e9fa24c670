//! The DB-call analysis' parts in a run directory: `queries.json`, the DB stack trie's
//! collapsed stacks and speedscope file, the HTML page, and the recorded spans.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Doing, Result};
use kiln_load::StopSignal;
use kiln_queries::analyze::{analyze, Options, Severity};
use kiln_queries::receiver::{Receiver, JSON_RECORD};
use kiln_queries::trie::{Frames, StackTrie};
use kiln_queries::{html, Ingest};
use kiln_record::schema::queries::{AnalysisRecord, QueriesRecord, QueryCost, TrieRecord};
use kiln_record::RunDir;

pub use kiln_record::parts::{QUERIES_PART, TRIE_CALLS_PART, TRIE_TIME_PART};
pub const TRIE_SPEEDSCOPE_PART: &str = "db-trie-speedscope";
pub const HTML_PART: &str = "queries-html";
pub const SPANS_JSON_PART: &str = "otlp-json";
pub const SPANS_PROTOBUF_PART: &str = "otlp-protobuf";

/// How spans are analysed and what is written beside the analysis.
#[derive(Debug, Clone)]
pub struct QuerySettings {
    pub options: Options,
    /// Frames in the DB stack trie.
    pub frames: Frames,
    /// Also write the HTML page here.
    pub html: Option<PathBuf>,
    /// A finding at least this severe fails the run (exit 99).
    pub fail_on: Option<Severity>,
}

/// The analysis written into a run directory.
pub struct QueryReport {
    /// What queries.json holds: the analysis and the trie's heaviest paths.
    pub record: QueriesRecord,
    pub html: PathBuf,
    pub files: Vec<PathBuf>,
}

/// Analyses `ingest`, writes queries.json, the trie's collapsed stacks and speedscope file and
/// the HTML report into `dir` (and the HTML also to `--html`).
pub fn write_report(
    dir: &mut RunDir,
    ingest: &Ingest,
    settings: &QuerySettings,
    title: &str,
    read: Duration,
    window_ns: Option<(u64, u64)>,
) -> Result<QueryReport> {
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    let analysis = analyze(
        ingest,
        &Options {
            window_ns,
            ..settings.options.clone()
        },
    );
    let analysis_ms = ms(started);
    let started = Instant::now();
    let trie = StackTrie::build(&analysis, settings.frames);
    let (calls, time) = trie.folded();
    let trie_ms = ms(started);
    let started = Instant::now();
    let page = html::render(&analysis, &trie, title);
    let speedscope = trie.speedscope(title);
    let outputs_ms = ms(started);
    // kiln's own cost, per stage (reading includes parsing; analysis includes fingerprints)
    let record = QueriesRecord {
        // the working data (requests, calls) is done with: what is recorded moves out
        analysis: analysis.summary,
        trie: TrieRecord {
            calls: trie.calls(),
            nodes: trie.node_count(),
            frames: format!("{:?}", settings.frames).to_lowercase(),
            heaviest: trie.text(0.05, 30),
        },
        html: "queries.html".into(),
        cost_ms: QueryCost {
            read: read.as_secs_f64() * 1e3,
            analysis: analysis_ms,
            trie: trie_ms,
            html_and_speedscope: outputs_ms,
        },
    };
    let files = vec![
        dir.write_file_part(
            QUERIES_PART,
            "queries.json",
            1,
            serde_json::to_string_pretty(&record)?.as_bytes(),
        )?,
        dir.write_file_part(
            TRIE_CALLS_PART,
            "db-trie.folded",
            1,
            calls.to_text().as_bytes(),
        )?,
        dir.write_file_part(
            TRIE_TIME_PART,
            "db-trie-time-us.folded",
            1,
            time.to_text().as_bytes(),
        )?,
        dir.write_file_part(
            TRIE_SPEEDSCOPE_PART,
            "db-trie.speedscope.json",
            1,
            speedscope.as_bytes(),
        )?,
    ];
    let html_path = dir.write_file_part(HTML_PART, "queries.html", 1, page.as_bytes())?;
    if let Some(extra) = &settings.html {
        std::fs::write(extra, &page).doing_with(|| format!("cannot write {}", extra.display()))?;
    }
    Ok(QueryReport {
        record,
        html: html_path,
        files,
    })
}

/// Whether a finding is at least as severe as `fail_on` (exit code 99).
pub fn gate(analysis: &AnalysisRecord, fail_on: Option<Severity>) -> bool {
    fail_on.is_some_and(|threshold| {
        analysis
            .findings
            .iter()
            .any(|f| f.example.severity >= threshold)
    })
}

/// Waits for spans still in the application's export queue after the load: up to `wait`
/// from the load's end, or until a request that came after it (`at_load_end`: when the load
/// ended and the receiver's requests then) is followed by a second of quiet. Measured from
/// the load's end, not from the call: the profiles are written in between (about 4 s of the
/// demo's), and an export that came meanwhile is not waited for again.
pub fn drain(receiver: &Receiver, at_load_end: (Instant, u64), wait: Duration, stop: &StopSignal) {
    let (load_end, before) = at_load_end;
    while load_end.elapsed() < wait && !stop.is_stopped() {
        let stats = receiver.stats();
        let quiet = stats
            .last_request_at
            .is_some_and(|at| at.elapsed() >= Duration::from_secs(1));
        if stats.requests > before && quiet {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Lists the receiver's recorded files as parts.
pub fn list_recorded(dir: &mut RunDir, recorded: &[PathBuf]) -> Result<()> {
    for path in recorded {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = if name == JSON_RECORD {
            SPANS_JSON_PART
        } else {
            SPANS_PROTOBUF_PART
        };
        dir.list_part(kind, &name, 1)?;
    }
    Ok(())
}
