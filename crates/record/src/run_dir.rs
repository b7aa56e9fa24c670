//! Creating, updating and reading a run directory.
//!
//! The manifest is rewritten atomically (temp file + rename) so a crash never leaves a torn
//! `run.json`; parts are JSON lines flushed as they are written.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::{PartRef, RecordError, RunManifest, RunStatus, SCHEMA_VERSION};

pub const MANIFEST_FILE: &str = "run.json";

/// A run directory on disk and its manifest.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    pub manifest: RunManifest,
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RecordError {
    let path = path.to_path_buf();
    move |source| RecordError::Io {
        action,
        path,
        source,
    }
}

/// Now as RFC 3339 UTC, e.g. `2026-11-22T13:27:50.123Z`.
pub fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_else(|_| "unknown".into())
}

/// A directory name for a run started now: `20261122-132750-<name>`.
pub fn default_run_dir_name(name: &str) -> String {
    let now = OffsetDateTime::now_utc();
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}-{}",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        safe.trim_matches('-')
    )
}

impl RunDir {
    /// Creates the directory (it must not hold a run already) and writes a `running` manifest.
    pub fn create(
        path: &Path,
        name: &str,
        command: Vec<String>,
        plan: serde_json::Value,
    ) -> Result<Self, RecordError> {
        if path.join(MANIFEST_FILE).exists() {
            return Err(RecordError::Malformed {
                path: path.to_path_buf(),
                detail: "it already holds a run; choose another --out".into(),
            });
        }
        fs::create_dir_all(path).map_err(io_err("create", path))?;
        let id = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| name.to_string());
        let dir = RunDir {
            path: path.to_path_buf(),
            manifest: RunManifest {
                schema_version: SCHEMA_VERSION,
                kiln_version: env!("CARGO_PKG_VERSION").to_string(),
                id,
                name: name.to_string(),
                command,
                plan,
                started_at: now_rfc3339(),
                ended_at: None,
                status: RunStatus::Running,
                status_reason: None,
                parts: Vec::new(),
            },
        };
        dir.save()?;
        Ok(dir)
    }

    /// Opens an existing run directory and reads its manifest.
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        let file = path.join(MANIFEST_FILE);
        let text = fs::read_to_string(&file).map_err(io_err("read", &file))?;
        let manifest: RunManifest =
            serde_json::from_str(&text).map_err(|e| RecordError::Malformed {
                path: file.clone(),
                detail: e.to_string(),
            })?;
        if manifest.schema_version > SCHEMA_VERSION {
            return Err(RecordError::NewerSchema {
                path: file,
                found: manifest.schema_version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(RunDir {
            path: path.to_path_buf(),
            manifest,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the manifest atomically.
    pub fn save(&self) -> Result<(), RecordError> {
        let file = self.path.join(MANIFEST_FILE);
        let tmp = self.path.join(".run.json.tmp");
        let text =
            serde_json::to_string_pretty(&self.manifest).map_err(|e| RecordError::Malformed {
                path: file.clone(),
                detail: e.to_string(),
            })?;
        fs::write(&tmp, text + "\n").map_err(io_err("write", &tmp))?;
        fs::rename(&tmp, &file).map_err(io_err("replace", &file))
    }

    /// Lists a part in the manifest (once) and opens it for appending JSON lines.
    pub fn add_json_lines_part(
        &mut self,
        kind: &str,
        file_name: &str,
        schema_version: u32,
    ) -> Result<JsonLinesWriter, RecordError> {
        self.list_part(kind, file_name, schema_version)?;
        JsonLinesWriter::append(&self.path.join(file_name))
    }

    /// Adds a part to the manifest, once (for a file written by other means).
    pub fn list_part(
        &mut self,
        kind: &str,
        file_name: &str,
        schema_version: u32,
    ) -> Result<(), RecordError> {
        if self.manifest.part(kind).is_none() {
            self.manifest.parts.push(PartRef {
                kind: kind.to_string(),
                path: file_name.to_string(),
                schema_version,
            });
            self.save()?;
        }
        Ok(())
    }

    /// Writes a whole-file part (a flame graph, collapsed stacks ...) atomically and lists it
    /// in the manifest (once).
    pub fn write_file_part(
        &mut self,
        kind: &str,
        file_name: &str,
        schema_version: u32,
        contents: &[u8],
    ) -> Result<PathBuf, RecordError> {
        self.write_file_part_with(kind, file_name, schema_version, |out| {
            out.write_all(contents)
        })
    }

    /// As `write_file_part`, with the contents written by `write` as they are made.
    pub fn write_file_part_with(
        &mut self,
        kind: &str,
        file_name: &str,
        schema_version: u32,
        write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
    ) -> Result<PathBuf, RecordError> {
        let file = self.path.join(file_name);
        let tmp = self.path.join(format!(".{file_name}.tmp"));
        let mut out = BufWriter::new(File::create(&tmp).map_err(io_err("write", &tmp))?);
        write(&mut out)
            .and_then(|()| out.flush())
            .map_err(io_err("write", &tmp))?;
        drop(out);
        fs::rename(&tmp, &file).map_err(io_err("replace", &file))?;
        self.list_part(kind, file_name, schema_version)?;
        Ok(file)
    }

    /// Marks the run ended with `status` and an optional one-line reason.
    pub fn finish(&mut self, status: RunStatus, reason: Option<String>) -> Result<(), RecordError> {
        self.manifest.status = status;
        self.manifest.status_reason = reason;
        self.manifest.ended_at = Some(now_rfc3339());
        self.save()
    }

    /// The status a reader should believe: a run still marked `running` whose writer is gone
    /// was interrupted.
    pub fn effective_status(&self) -> RunStatus {
        match self.manifest.status {
            RunStatus::Running => RunStatus::Interrupted,
            s => s,
        }
    }

    /// Reads every line of a JSON-lines part. A torn last line (the writer was killed
    /// mid-write) is skipped; any other bad line is an error naming its line number.
    pub fn read_json_lines<T: DeserializeOwned>(&self, kind: &str) -> Result<Vec<T>, RecordError> {
        self.json_lines(kind)?.collect()
    }

    /// The lines of a JSON-lines part, read one at a time as the iterator is pulled, so a
    /// long run's seconds (each with its histograms) are never all in memory. Bad lines as
    /// in `read_json_lines`.
    pub fn json_lines<T: DeserializeOwned>(&self, kind: &str) -> Result<JsonLines<T>, RecordError> {
        let Some(part) = self.manifest.part(kind) else {
            return Ok(JsonLines {
                path: PathBuf::new(),
                lines: None,
                bad: None,
                _type: std::marker::PhantomData,
            });
        };
        let path = self.path.join(&part.path);
        let reader = BufReader::new(File::open(&path).map_err(io_err("read", &path))?);
        Ok(JsonLines {
            path,
            lines: Some(reader.lines().enumerate()),
            bad: None,
            _type: std::marker::PhantomData,
        })
    }
}

/// See [`RunDir::json_lines`].
pub struct JsonLines<T> {
    path: PathBuf,
    lines: Option<std::iter::Enumerate<std::io::Lines<BufReader<File>>>>,
    /// A line that did not parse: an error only once another line follows it.
    bad: Option<RecordError>,
    _type: std::marker::PhantomData<T>,
}

impl<T: DeserializeOwned> Iterator for JsonLines<T> {
    type Item = Result<T, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        let lines = self.lines.as_mut()?;
        for (i, line) in lines.by_ref() {
            let line = match line {
                Ok(line) => line,
                Err(e) => {
                    self.lines = None;
                    return Some(Err(io_err("read", &self.path)(e)));
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            if let Some(e) = self.bad.take() {
                self.lines = None;
                return Some(Err(e));
            }
            match serde_json::from_str(&line) {
                Ok(v) => return Some(Ok(v)),
                Err(e) => {
                    self.bad = Some(RecordError::Malformed {
                        path: self.path.clone(),
                        detail: format!("line {}: {e}", i + 1),
                    })
                }
            }
        }
        self.lines = None;
        None
    }
}

/// Appends one JSON value per line and flushes each, so readers see every finished line.
pub struct JsonLinesWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonLinesWriter {
    fn append(path: &Path) -> Result<Self, RecordError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io_err("open", path))?;
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    pub fn write<T: Serialize>(&mut self, value: &T) -> Result<(), RecordError> {
        let path = self.path.clone();
        serde_json::to_writer(&mut self.out, value).map_err(|e| RecordError::Malformed {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        self.out.write_all(b"\n").map_err(io_err("write", &path))?;
        self.out.flush().map_err(io_err("write", &path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_dir_round_trips_and_a_torn_last_line_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("r1");
        let mut dir = RunDir::create(&path, "t", vec![], serde_json::json!({"a": 1})).unwrap();
        let mut w = dir.add_json_lines_part("nums", "nums.jsonl", 1).unwrap();
        w.write(&1u32).unwrap();
        w.write(&2u32).unwrap();
        drop(w);
        fs::OpenOptions::new()
            .append(true)
            .open(path.join("nums.jsonl"))
            .unwrap()
            .write_all(b"{\"tor")
            .unwrap();
        let back = RunDir::open(&path).unwrap();
        assert_eq!(back.effective_status(), RunStatus::Interrupted);
        let nums: Vec<u32> = back.read_json_lines("nums").unwrap();
        assert_eq!(nums, vec![1, 2]);
        // Once a line follows it, the torn one is corruption, named by its line number.
        fs::OpenOptions::new()
            .append(true)
            .open(path.join("nums.jsonl"))
            .unwrap()
            .write_all(b"\n3\n")
            .unwrap();
        let err = back.read_json_lines::<u32>("nums").unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        dir.finish(RunStatus::Complete, None).unwrap();
        assert_eq!(
            RunDir::open(&path).unwrap().manifest.status,
            RunStatus::Complete
        );
        assert!(RunDir::create(&path, "t", vec![], serde_json::Value::Null).is_err());
    }

    #[test]
    fn a_corrupt_manifest_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(MANIFEST_FILE), "{nope").unwrap();
        let err = RunDir::open(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("run.json"), "{err}");
    }
}
