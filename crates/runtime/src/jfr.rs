//! A JFR recording for `--runtime deep`, started and dumped over the attach socket, read at
//! the end with the target JDK's own `jfr` tool (`jfr print --json`): today the count of
//! throwables the JVM created (`jdk.ExceptionStatistics`, a cumulative count once a second).
//! JFR's binary format is not parsed here: the JDK's reader is the reference for it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::attach::Attach;

/// One reading of the JVM's count of throwables created since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThrowableCount {
    pub unix_ms: u64,
    pub throwables: u64,
}

/// A recording kiln started.
pub struct Recording {
    name: String,
}

impl Recording {
    /// Starts a recording with the JDK's default settings (about 1% overhead by design). The
    /// first JFR start in a JVM takes a second or two.
    pub fn start(attach: &Attach) -> Result<Self, String> {
        let name = format!("kiln-{}", std::process::id());
        attach.jcmd(&format!("JFR.start name={name} settings=default"))?;
        Ok(Self { name })
    }

    /// Dumps and stops the recording, and reads the throwable counts from it with the target
    /// JDK's `jfr` tool. The dump is written by the JVM into its own /tmp and removed after.
    pub fn finish(
        self,
        attach: &Attach,
        pid: i32,
        proc_root: &Path,
    ) -> Result<Vec<ThrowableCount>, String> {
        let file = format!("/tmp/{}-{pid}.jfr", self.name);
        let dumped = attach.jcmd(&format!("JFR.dump name={} filename={file}", self.name));
        let _ = attach.jcmd(&format!("JFR.stop name={}", self.name));
        dumped?;
        let ours = proc_root
            .join(pid.to_string())
            .join("root")
            .join(file.trim_start_matches('/'));
        let read = jfr_tool(pid, proc_root).and_then(|jfr| {
            let out = Command::new(&jfr)
                .args(["print", "--json", "--events", "jdk.ExceptionStatistics"])
                .arg(&ours)
                .output()
                .map_err(|e| format!("cannot run {}: {e}", jfr.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "{} print failed: {}",
                    jfr.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            throwable_counts(&out.stdout)
        });
        let _ = std::fs::remove_file(&ours);
        read
    }
}

/// The `jfr` tool beside the target's `java` (its own JDK reads its own recordings best),
/// else one on PATH.
fn jfr_tool(pid: i32, proc_root: &Path) -> Result<PathBuf, String> {
    let beside = std::fs::read_link(proc_root.join(pid.to_string()).join("exe"))
        .ok()
        .and_then(|java| Some(java.parent()?.join("jfr")))
        .filter(|jfr| jfr.exists());
    if let Some(jfr) = beside {
        return Ok(jfr);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("jfr"))
        .find(|jfr| jfr.exists())
        .ok_or_else(|| {
            "no jfr tool beside the target's java or on PATH (a JRE without jdk.jfr's tool)"
                .to_string()
        })
}

#[derive(Deserialize)]
struct Printed {
    recording: PrintedRecording,
}

#[derive(Deserialize)]
struct PrintedRecording {
    events: Vec<PrintedEvent>,
}

#[derive(Deserialize)]
struct PrintedEvent {
    #[serde(rename = "type")]
    kind: String,
    values: serde_json::Value,
}

/// The `jdk.ExceptionStatistics` events of `jfr print --json`, oldest first.
pub fn throwable_counts(json: &[u8]) -> Result<Vec<ThrowableCount>, String> {
    let printed: Printed = serde_json::from_slice(json)
        .map_err(|e| format!("jfr print --json gave what kiln cannot read: {e}"))?;
    let mut counts: Vec<ThrowableCount> = printed
        .recording
        .events
        .iter()
        .filter(|e| e.kind == "jdk.ExceptionStatistics")
        .filter_map(|e| {
            let start = e.values["startTime"].as_str()?;
            let at = humantime::parse_rfc3339(start).ok()?;
            Some(ThrowableCount {
                unix_ms: at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64,
                throwables: e.values["throwables"].as_u64()?,
            })
        })
        .collect();
    counts.sort_by_key(|c| c.unix_ms);
    Ok(counts)
}

/// Throwables created per second between the first and the last reading inside
/// `[from_ms, to_ms]`, and how many: None with fewer than two readings there.
pub fn rate_within(counts: &[ThrowableCount], from_ms: u64, to_ms: u64) -> Option<(f64, u64)> {
    let inside: Vec<&ThrowableCount> = counts
        .iter()
        .filter(|c| c.unix_ms >= from_ms && c.unix_ms <= to_ms)
        .collect();
    let (first, last) = (inside.first()?, inside.last()?);
    let span_s = (last.unix_ms - first.unix_ms) as f64 / 1000.0;
    let thrown = last.throwables.saturating_sub(first.throwables);
    (span_s > 0.0).then(|| (thrown as f64 / span_s, thrown))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRINTED: &str = r#"{"recording": {"events": [
        {"type": "jdk.ExceptionStatistics", "values": {"startTime": "2026-11-24T08:04:15.119509299Z", "throwables": 54089}},
        {"type": "jdk.ExceptionStatistics", "values": {"startTime": "2026-11-24T08:04:14.118163914Z", "duration": "PT0S", "throwables": 10970}},
        {"type": "jdk.GarbageCollection", "values": {"startTime": "2026-11-24T08:04:14.5Z"}},
        {"type": "jdk.ExceptionStatistics", "values": {"startTime": "2026-11-24T08:04:16.119Z", "throwables": 108089}}
    ]}}"#;

    #[test]
    fn counts_are_read_in_time_order_and_rated_over_a_window() {
        let counts = throwable_counts(PRINTED.as_bytes()).unwrap();
        assert_eq!(counts.len(), 3);
        assert_eq!(counts[0].throwables, 10970);
        assert_eq!(counts[0].unix_ms, 1_795_507_454_118);
        let (rate, thrown) = rate_within(&counts, 1_795_507_455_000, 1_795_507_457_000).unwrap();
        assert_eq!(thrown, 54_000);
        assert!((rate - 54_000.0 / 1.000).abs() < 100.0, "{rate}");
        assert_eq!(
            rate_within(&counts, 0, 1_795_507_454_500),
            None,
            "one reading"
        );
    }

    #[test]
    fn what_is_not_jfr_json_is_a_clear_error() {
        assert!(throwable_counts(b"not json")
            .unwrap_err()
            .contains("cannot read"));
        assert!(throwable_counts(b"{\"recording\": {\"events\": []}}")
            .unwrap()
            .is_empty());
    }
}
