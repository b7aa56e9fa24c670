//! The DB-call analysis' parts in a run directory: `queries.json`, the DB stack trie's
//! collapsed stacks and speedscope file, the HTML page, and the recorded spans.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Doing, Result};
use kiln_load::StopSignal;
use kiln_queries::analyze::{analyze, Options, Severity};
use kiln_queries::receiver::{Receiver, ReceiverStats, JSON_RECORD};
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

/// Where the load stood when it ended, for [`drain`].
#[derive(Clone, Copy, Debug)]
pub struct LoadEnd {
    pub at: Instant,
    /// The receiver's export requests by then.
    pub exports: u64,
    /// HTTP responses the load had, warm-ups included: requests the service took in.
    pub answered: u64,
}

/// Waits for spans still in the application's export queue after the load: up to `wait`
/// from the load's end, or until every request the load had answered has come in as a
/// server span. A service whose spans name no server (a worker, a script) is waited for
/// until an export that came after the load is followed by a second of quiet. A service
/// that sends fewer server spans than requests (sampling, or the workers of a pre-fork
/// server, each with an export queue and a timer of its own: one quiet second after the
/// first worker's export once lost the others') is waited for all of `wait`. Measured from
/// the load's end, not from the call: the profiles are written in between (about 4 s of the
/// demo's), and an export that came meanwhile is not waited for again.
pub fn drain(receiver: &Receiver, load_end: LoadEnd, wait: Duration, stop: &StopSignal) {
    while load_end.at.elapsed() < wait && !stop.is_stopped() {
        if drained(&receiver.stats(), load_end) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the spans of the load's requests are in (see [`drain`]).
fn drained(stats: &ReceiverStats, load_end: LoadEnd) -> bool {
    if load_end.answered > 0 && stats.server_roots >= load_end.answered {
        return true;
    }
    let quiet = stats
        .last_request_at
        .is_some_and(|at| at.elapsed() >= Duration::from_secs(1));
    stats.server_roots == 0 && stats.requests > load_end.exports && quiet
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load_end(exports: u64, answered: u64) -> LoadEnd {
        LoadEnd {
            at: Instant::now(),
            exports,
            answered,
        }
    }

    #[test]
    fn the_spans_are_in_when_every_answered_request_has_its_server_span() {
        let long_ago = Instant::now().checked_sub(Duration::from_secs(5));
        let stats = |exports, last: Option<Instant>, server_roots| ReceiverStats {
            requests: exports,
            last_request_at: last,
            server_roots,
            ..Default::default()
        };
        // every request's server span: at once, quiet or not
        assert!(drained(
            &stats(3, Some(Instant::now()), 40),
            load_end(3, 40)
        ));
        // one worker's export came after the load and went quiet: the others' are waited for
        assert!(!drained(&stats(4, long_ago, 30), load_end(3, 40)));
        // spans without a server: an export after the load, then a second of quiet
        assert!(drained(&stats(4, long_ago, 0), load_end(3, 40)));
        assert!(!drained(
            &stats(4, Some(Instant::now()), 0),
            load_end(3, 40)
        ));
        // nothing came after the load yet
        assert!(!drained(&stats(3, long_ago, 0), load_end(3, 40)));
        // a load that had no answer waits for an export, not for zero server spans
        assert!(!drained(&stats(3, long_ago, 0), load_end(3, 0)));
    }
}
