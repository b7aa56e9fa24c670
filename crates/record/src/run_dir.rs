//! Creating, updating and reading a run directory.
//!
//! The manifest is rewritten atomically (temp file + rename) so a crash never leaves a torn
//! `run.json`; parts are JSON lines flushed as they are written.

use crate::schema::plan::PlanRecord;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::{PartRef, RecordError, RunManifest, RunStatus, SCHEMA_VERSION};

pub const MANIFEST_FILE: &str = "run.json";

/// The largest `run.json` read: a manifest is a few KiB; more is not one.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;
/// The largest line of a JSON-lines part read (a second with its histograms is a few KiB).
pub const MAX_LINE_BYTES: usize = 64 << 20;
/// The largest whole-file part read into memory (`profile.json`, `queries.json` ...).
pub const MAX_PART_BYTES: u64 = 1 << 30;

/// Where a new run is recorded: a directory the user named (`--out`), or a fresh one named
/// for the time and the run under a parent (`runs/`), never one another run took.
#[derive(Clone, Debug)]
pub enum RunLocation {
    Named(PathBuf),
    Fresh { parent: PathBuf, name: String },
}

impl RunLocation {
    /// `--out DIR` when given, else a fresh directory under `runs/` for `name`.
    pub fn from_flag(out: Option<&Path>, name: &str) -> Self {
        match out {
            Some(dir) => RunLocation::Named(dir.to_path_buf()),
            None => RunLocation::Fresh {
                parent: PathBuf::from("runs"),
                name: name.to_string(),
            },
        }
    }
}

/// Claims `path` for a new run: creates it (and its parents) and then `run.json` with
/// `create_new`, which only one process can do. False when another run holds it.
fn claim(path: &Path) -> Result<bool, RecordError> {
    fs::create_dir_all(path).map_err(io_err("create", path))?;
    let manifest = path.join(MANIFEST_FILE);
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&manifest)
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err("create", &manifest)(e)),
    }
}

/// Opens a file of a run for reading, only if it is a regular file inside the run
/// directory: a part path from run.json is untrusted (`../../etc/passwd`, `/dev/zero`, a
/// symlink, a FIFO that would block the reader forever).
fn open_inside(dir: &Path, relative: &str) -> Result<(PathBuf, File), RecordError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join(relative);
    let refuse = |why: &str| RecordError::Malformed {
        path: path.clone(),
        detail: why.to_string(),
    };
    let inside = Path::new(relative)
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if relative.is_empty() || !inside {
        return Err(refuse("a part must be a file inside the run directory"));
    }
    // O_NOFOLLOW: a symlink is refused; O_NONBLOCK: a FIFO does not block the open.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse("a part may not be a symbolic link"),
            _ => io_err("read", &path)(e),
        })?;
    let meta = file.metadata().map_err(io_err("read", &path))?;
    if !meta.is_file() {
        return Err(refuse("a part must be a regular file"));
    }
    // Every directory on the way is inside the run directory (none a link out of it).
    let real_dir = fs::canonicalize(dir).map_err(io_err("read", dir))?;
    let real = fs::canonicalize(&path).map_err(io_err("read", &path))?;
    if !real.starts_with(&real_dir) {
        return Err(refuse("a part must be a file inside the run directory"));
    }
    Ok((path, file))
}

/// Reads at most `max` bytes of `file`; more is an error naming the file.
fn read_capped(path: &Path, file: File, max: u64) -> Result<Vec<u8>, RecordError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err("read", path))?;
    if bytes.len() as u64 > max {
        return Err(RecordError::Malformed {
            path: path.to_path_buf(),
            detail: format!("larger than {max} bytes"),
        });
    }
    Ok(bytes)
}

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
    /// Creates the run's directory and writes a `running` manifest. A named directory that
    /// holds a run already is refused; a fresh one takes the next free name (`-2`, `-3` ...)
    /// when another run started in the same second.
    pub fn create(
        location: &RunLocation,
        name: &str,
        command: Vec<String>,
        plan: PlanRecord,
    ) -> Result<Self, RecordError> {
        let path = match location {
            RunLocation::Named(path) => {
                if !claim(path)? {
                    return Err(RecordError::Malformed {
                        path: path.to_path_buf(),
                        detail: "it already holds a run; choose another --out".into(),
                    });
                }
                path.clone()
            }
            RunLocation::Fresh { parent, name } => {
                let base = parent.join(default_run_dir_name(name));
                let mut taken = None;
                for n in 1..=1000 {
                    let candidate = match n {
                        1 => base.clone(),
                        _ => PathBuf::from(format!("{}-{n}", base.display())),
                    };
                    if claim(&candidate)? {
                        taken = Some(candidate);
                        break;
                    }
                }
                taken.ok_or_else(|| RecordError::Malformed {
                    path: base.clone(),
                    detail: "1000 runs with this name this second; choose --out".into(),
                })?
            }
        };
        let path = path.as_path();
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
                not_recorded: Default::default(),
            },
        };
        dir.save()?;
        Ok(dir)
    }

    /// Opens an existing run directory and reads its manifest.
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        let (file, handle) = open_inside(path, MANIFEST_FILE)?;
        let text = read_capped(&file, handle, MAX_MANIFEST_BYTES)?;
        let manifest: RunManifest =
            serde_json::from_slice(&text).map_err(|e| RecordError::Malformed {
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

    /// A whole-file part read into memory (at most `MAX_PART_BYTES`), if the run has it.
    pub fn read_part(&self, kind: &str) -> Result<Option<(PathBuf, Vec<u8>)>, RecordError> {
        let Some(part) = self.manifest.part(kind) else {
            return Ok(None);
        };
        let (path, file) = open_inside(&self.path, &part.path)?;
        let bytes = read_capped(&path, file, MAX_PART_BYTES)?;
        Ok(Some((path, bytes)))
    }

    /// A whole-file JSON part (profile.json, queries.json, findings.json), if the run has it.
    pub fn read_json_part<T: DeserializeOwned>(
        &self,
        kind: &str,
    ) -> Result<Option<T>, RecordError> {
        let Some((path, bytes)) = self.read_part(kind)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| RecordError::Malformed {
                path,
                detail: format!("not JSON: {e}"),
            })
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
        let (path, file) = open_inside(&self.path, &part.path)?;
        Ok(JsonLines {
            path,
            lines: Some(CappedLines {
                reader: BufReader::new(file),
                number: 0,
                buf: Vec::new(),
            }),
            bad: None,
            _type: std::marker::PhantomData,
        })
    }
}

/// One line read: its 1-based number and bytes, or (`TooLong`) the number of a line longer
/// than the cap.
enum Line<'a> {
    Read(usize, &'a [u8]),
    TooLong(usize),
}

/// Lines of at most `MAX_LINE_BYTES`, as bytes with their 1-based numbers.
struct CappedLines {
    reader: BufReader<File>,
    number: usize,
    buf: Vec<u8>,
}

impl CappedLines {
    /// The next line, None at the end.
    fn next_line(&mut self) -> Option<std::io::Result<Line<'_>>> {
        use std::io::Read as _;
        self.buf.clear();
        self.number += 1;
        let mut limited = (&mut self.reader).take(MAX_LINE_BYTES as u64 + 1);
        match limited.read_until(b'\n', &mut self.buf) {
            Ok(0) => None,
            Ok(_) if self.buf.len() > MAX_LINE_BYTES => Some(Ok(Line::TooLong(self.number))),
            Ok(_) => Some(Ok(Line::Read(self.number, &self.buf))),
            Err(e) => Some(Err(e)),
        }
    }
}

/// See [`RunDir::json_lines`].
pub struct JsonLines<T> {
    path: PathBuf,
    lines: Option<CappedLines>,
    /// A line that did not parse: an error only once another line follows it.
    bad: Option<RecordError>,
    _type: std::marker::PhantomData<T>,
}

impl<T: DeserializeOwned> Iterator for JsonLines<T> {
    type Item = Result<T, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        let malformed = |path: &Path, detail: String| RecordError::Malformed {
            path: path.to_path_buf(),
            detail,
        };
        loop {
            let lines = self.lines.as_mut()?;
            let (number, line) = match lines.next_line() {
                None => break,
                Some(Err(e)) => {
                    self.lines = None;
                    return Some(Err(io_err("read", &self.path)(e)));
                }
                Some(Ok(Line::TooLong(number))) => {
                    self.lines = None;
                    return Some(Err(malformed(
                        &self.path,
                        format!("line {number}: longer than {MAX_LINE_BYTES} bytes"),
                    )));
                }
                Some(Ok(Line::Read(number, line))) => (number, line),
            };
            if line.trim_ascii().is_empty() {
                continue;
            }
            if let Some(e) = self.bad.take() {
                self.lines = None;
                return Some(Err(e));
            }
            let parsed = std::str::from_utf8(line)
                .map_err(|e| format!("line {number}: not UTF-8 ({e})"))
                .and_then(|text| {
                    serde_json::from_str(text).map_err(|e| format!("line {number}: {e}"))
                });
            match parsed {
                Ok(v) => return Some(Ok(v)),
                Err(detail) => self.bad = Some(malformed(&self.path, detail)),
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
        let named = RunLocation::Named(path.clone());
        let mut dir = RunDir::create(
            &named,
            "t",
            vec![],
            PlanRecord::Other(serde_json::json!({"a": 1})),
        )
        .unwrap();
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
        assert!(RunDir::create(
            &named,
            "t",
            vec![],
            PlanRecord::Other(serde_json::Value::Null)
        )
        .is_err());
    }

    /// A run directory whose run.json lists one part at `part_path`.
    fn run_listing(part_path: &str) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run");
        let mut dir = RunDir::create(
            &RunLocation::Named(path.clone()),
            "t",
            vec![],
            PlanRecord::Other(serde_json::Value::Null),
        )
        .unwrap();
        dir.manifest.parts.push(PartRef {
            kind: "p".into(),
            path: part_path.into(),
            schema_version: 1,
        });
        dir.save().unwrap();
        (tmp, path)
    }

    #[test]
    fn part_paths_outside_the_run_or_not_regular_files_are_refused() {
        for hostile in [
            "/dev/zero",
            "../../etc/passwd",
            "/etc/passwd",
            "",
            "a/../../x",
        ] {
            let (_tmp, path) = run_listing(hostile);
            let dir = RunDir::open(&path).unwrap();
            let err = dir.read_part("p").unwrap_err().to_string();
            assert!(err.contains("inside the run directory"), "{hostile}: {err}");
            assert!(dir.json_lines::<u32>("p").is_err(), "{hostile}");
        }
        // A symlink to /dev/zero, a symlinked directory out of the run, and a FIFO (which
        // would block the reader forever) are refused without reading.
        let (_tmp, path) = run_listing("link");
        std::os::unix::fs::symlink("/dev/zero", path.join("link")).unwrap();
        let err = RunDir::open(&path).unwrap().read_part("p").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let (tmp, path) = run_listing("out/secret");
        fs::create_dir(tmp.path().join("elsewhere")).unwrap();
        fs::write(tmp.path().join("elsewhere/secret"), "x").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), path.join("out")).unwrap();
        let err = RunDir::open(&path).unwrap().read_part("p").unwrap_err();
        assert!(err.to_string().contains("inside the run"), "{err}");
        let (_tmp, path) = run_listing("fifo");
        let fifo = std::ffi::CString::new(path.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let err = RunDir::open(&path)
            .unwrap()
            .json_lines::<u32>("p")
            .err()
            .unwrap();
        assert!(err.to_string().contains("regular file"), "{err}");
    }

    #[test]
    fn an_invalid_utf8_line_is_named_by_its_number_and_a_huge_manifest_refused() {
        let (_tmp, path) = run_listing("n.jsonl");
        fs::write(path.join("n.jsonl"), b"1\n\xff\xfe\n3\n").unwrap();
        let dir = RunDir::open(&path).unwrap();
        let err = dir.read_json_lines::<u32>("p").unwrap_err().to_string();
        assert!(err.contains("line 2: not UTF-8"), "{err}");
        let big = vec![b' '; MAX_MANIFEST_BYTES as usize + 10];
        fs::write(path.join(MANIFEST_FILE), big).unwrap();
        let err = RunDir::open(&path).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
    }

    #[test]
    fn fresh_run_directories_never_collide_and_named_ones_are_claimed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let fresh = RunLocation::Fresh {
            parent: tmp.path().to_path_buf(),
            name: "same".into(),
        };
        // Eight runs started at once from eight threads, in the same second.
        let paths: Vec<PathBuf> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        RunDir::create(
                            &fresh,
                            "same",
                            vec![],
                            PlanRecord::Other(serde_json::Value::Null),
                        )
                        .unwrap()
                        .path()
                        .to_path_buf()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::BTreeSet<_> = paths.iter().collect();
        assert_eq!(distinct.len(), 8, "{paths:?}");
        // A named directory is claimed by exactly one of eight racing runs.
        let named = RunLocation::Named(tmp.path().join("mine"));
        let won = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        RunDir::create(
                            &named,
                            "mine",
                            vec![],
                            PlanRecord::Other(serde_json::Value::Null),
                        )
                        .is_ok()
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter(|_| true)
                .map(|h| h.join().unwrap())
                .filter(|&w| w)
                .count()
        });
        assert_eq!(won, 1);
    }

    #[test]
    fn a_corrupt_manifest_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(MANIFEST_FILE), "{nope").unwrap();
        let err = RunDir::open(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("run.json"), "{err}");
    }
}
