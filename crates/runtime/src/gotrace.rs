//! A Go target's execution traces under `--runtime deep` (it imports net/http/pprof): one
//! trace of `CHUNK_S` seconds after another from `/debug/pprof/trace`, each summarised by
//! kiln's small Go helper (tools/kiln-go-trace, on golang.org/x/exp/trace: Go's own reader is
//! the only specification of the format) into the time goroutines spent in GC mark assist,
//! per wall-clock second and per function they were in. gctrace gives a cycle's assist CPU;
//! the trace says which seconds and which code paid it.

use crate::error::io;
use crate::RuntimeError;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Seconds per trace: short, so that the last one ends soon after the watch does.
pub const CHUNK_S: u64 = 3;
/// The helper's name, looked for beside kiln's executable and on the PATH.
pub const HELPER: &str = "kiln-go-trace";

/// Mark assist in one wall-clock second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistSecond {
    pub unix_s: u64,
    pub assist_ms: f64,
    /// Goroutines that assisted in it.
    pub goroutines: u32,
}

/// A function goroutines were in when the GC made them assist (the first frame outside the
/// runtime), and how long they assisted there.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistWhere {
    pub function: String,
    pub assist_ms: f64,
    pub goroutines: u32,
}

/// What the traces of a watch held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoTraceRecord {
    pub traces: u32,
    /// The wall-clock span the traces covered (ms since the Unix epoch).
    pub from_unix_ms: f64,
    pub to_unix_ms: f64,
    pub gc_cycles: u32,
    pub seconds: Vec<AssistSecond>,
    /// The functions, the most assist first (at most 10).
    #[serde(rename = "where")]
    pub where_: Vec<AssistWhere>,
}

/// The helper's answer for one trace.
#[derive(Debug, Default, Deserialize)]
struct HelperSummary {
    from_unix_ms: f64,
    to_unix_ms: f64,
    #[serde(default)]
    seconds: Option<Vec<HelperSecond>>,
    #[serde(default, rename = "where")]
    where_: Option<Vec<AssistWhere>>,
    #[serde(default)]
    gc_cycles: u32,
}

#[derive(Debug, Deserialize)]
struct HelperSecond {
    unix_s: i64,
    assist_ms: f64,
    goroutines: u32,
}

/// The helper: `KILN_GO_TRACE`, else `kiln-go-trace` beside kiln's executable, else on the
/// PATH.
pub fn helper() -> Result<PathBuf, RuntimeError> {
    if let Some(path) = std::env::var_os("KILN_GO_TRACE") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "KILN_GO_TRACE names {}, which is not a file",
                path.display()
            )
            .into())
        };
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(HELPER)));
    beside
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|dir| dir.join(HELPER)),
        )
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "{HELPER} is not installed (from kiln's source: go build -o DIR/{HELPER} \
                 ./tools/{HELPER}, DIR beside kiln or on the PATH; or set KILN_GO_TRACE)"
            )
            .into()
        })
}

/// Runs the helper over one trace.
fn summarise(helper: &PathBuf, trace: &[u8]) -> Result<HelperSummary, RuntimeError> {
    let mut child = Command::new(helper)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(format!("cannot run {}", helper.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        // a helper that dies early closes its end: its own error says why
        let _ = stdin.write_all(trace);
    }
    let out = child
        .wait_with_output()
        .map_err(io(format!("{}", helper.display())))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr)
            .trim()
            .to_string()
            .into());
    }
    parse(&out.stdout)
}

fn parse(json: &[u8]) -> Result<HelperSummary, RuntimeError> {
    serde_json::from_slice(json)
        .map_err(|e| format!("{HELPER} gave what kiln cannot read: {e}").into())
}

/// Traces taken one after another on their own thread until told to stop.
pub struct GoTracer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<HelperSummary>, Option<String>)>,
}

impl GoTracer {
    pub fn start(addr: SocketAddr, helper: PathBuf) -> Result<Self, RuntimeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = format!("/debug/pprof/trace?seconds={CHUNK_S}");
        let thread = std::thread::Builder::new()
            .name("kiln-go-trace".into())
            .spawn(move || {
                let mut traces = Vec::new();
                while !flag.load(Ordering::SeqCst) {
                    let taken = crate::debug_http::get_within(
                        addr,
                        &path,
                        Duration::from_secs(CHUNK_S + 5),
                    )
                    .and_then(|trace| summarise(&helper, &trace));
                    match taken {
                        Ok(summary) => traces.push(summary),
                        Err(why) => return (traces, Some(why.to_string())),
                    }
                }
                (traces, None)
            })
            .map_err(io("cannot start a thread"))?;
        Ok(Self { stop, thread })
    }

    /// Stops after the trace under way (at most `CHUNK_S` seconds) and puts the traces
    /// together; why tracing stopped early, if it did.
    pub fn finish(self) -> (GoTraceRecord, Option<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let (traces, why) = self
            .thread
            .join()
            .unwrap_or_else(|_| (Vec::new(), Some("the trace reader failed".into())));
        (merge(traces), why)
    }
}

fn merge(traces: Vec<HelperSummary>) -> GoTraceRecord {
    let mut seconds: BTreeMap<u64, AssistSecond> = BTreeMap::new();
    let mut places: BTreeMap<String, AssistWhere> = BTreeMap::new();
    let mut record = GoTraceRecord {
        traces: traces.len() as u32,
        from_unix_ms: traces
            .iter()
            .map(|t| t.from_unix_ms)
            .reduce(f64::min)
            .unwrap_or(0.0),
        to_unix_ms: traces
            .iter()
            .map(|t| t.to_unix_ms)
            .reduce(f64::max)
            .unwrap_or(0.0),
        gc_cycles: traces.iter().map(|t| t.gc_cycles).sum(),
        ..Default::default()
    };
    for t in traces {
        for s in t.seconds.unwrap_or_default() {
            let Ok(unix_s) = u64::try_from(s.unix_s) else {
                continue;
            };
            let second = seconds.entry(unix_s).or_insert(AssistSecond {
                unix_s,
                ..Default::default()
            });
            second.assist_ms += s.assist_ms;
            // two traces meet inside a second: its goroutines may be counted twice
            second.goroutines = second.goroutines.max(s.goroutines);
        }
        for w in t.where_.unwrap_or_default() {
            let place = places.entry(w.function.clone()).or_insert(AssistWhere {
                function: w.function.clone(),
                ..Default::default()
            });
            place.assist_ms += w.assist_ms;
            place.goroutines += w.goroutines;
        }
    }
    record.seconds = seconds.into_values().collect();
    record.where_ = places.into_values().collect();
    record
        .where_
        .sort_by(|a, b| b.assist_ms.total_cmp(&a.assist_ms));
    record.where_.truncate(10);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_put_together_by_second_and_function() {
        let one = parse(
            br#"{"from_unix_ms": 1000.5, "to_unix_ms": 4000.0, "assist_ms": 30, "gc_cycles": 1,
                 "seconds": [{"unix_s": 2, "assist_ms": 20, "goroutines": 3},
                             {"unix_s": 3, "assist_ms": 10, "goroutines": 1}],
                 "where": [{"function": "main.rebuild", "assist_ms": 30, "goroutines": 3}]}"#,
        )
        .unwrap();
        let two = parse(
            br#"{"from_unix_ms": 4000.2, "to_unix_ms": 7000.0, "assist_ms": 5, "gc_cycles": 2,
                 "seconds": [{"unix_s": 3, "assist_ms": 5, "goroutines": 2}],
                 "where": [{"function": "main.handler", "assist_ms": 1, "goroutines": 1},
                           {"function": "main.rebuild", "assist_ms": 4, "goroutines": 1}]}"#,
        )
        .unwrap();
        // a trace with no assist at all: Go writes null for an empty list
        let idle = parse(
            br#"{"from_unix_ms": 7000.1, "to_unix_ms": 9000, "assist_ms": 0, "gc_cycles": 0,
                 "seconds": null, "where": null}"#,
        )
        .unwrap();
        let r = merge(vec![one, two, idle]);
        assert_eq!(r.traces, 3);
        assert_eq!((r.from_unix_ms, r.to_unix_ms), (1000.5, 9000.0));
        assert_eq!(r.gc_cycles, 3);
        assert_eq!(
            r.seconds,
            [
                AssistSecond {
                    unix_s: 2,
                    assist_ms: 20.0,
                    goroutines: 3
                },
                AssistSecond {
                    unix_s: 3,
                    assist_ms: 15.0,
                    goroutines: 2
                },
            ]
        );
        assert_eq!(r.where_[0].function, "main.rebuild");
        assert_eq!(r.where_[0].assist_ms, 34.0);
        assert!(parse(b"not json")
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }
}
