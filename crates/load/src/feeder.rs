//! Data feeders: CSV and JSON-lines files whose rows become a scenario's variables, with
//! JMeter's choices (CSV Data Set Config): shared by all VUs or one sequence per VU,
//! sequential or random, recycled or stopping at the end.
//!
//! Files are read where they lie, never loaded, so memory does not grow with the file (a
//! 1 GB file costs what a 10-line one does). A shared sequence streams through one buffered
//! reader; a VU's own sequence is a byte offset, each row read with `pread` from there (a
//! reader per VU would be a descriptor and a buffer per VU). Random order is a shuffle
//! through a window of rows: every row is used once per pass, as in a shuffled deck, with a
//! bounded window instead of the whole file.
//!
//! A shard of a plan run on several machines (`--shard i/N`) takes every Nth row of a shared
//! sequence (rows i, i+N, i+2N ... of each pass), so the shards together use each row once
//! per pass, as one process would, and no two shards send the same row (a login, an order).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The longest row kiln reads; a longer one is an error (a file with no line ends).
pub const MAX_ROW: usize = 1024 * 1024;
/// Rows held by a random-order feeder's shuffle window.
pub const SHUFFLE_WINDOW: usize = 4096;
const FIRST_READ: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFormat {
    Csv,
    JsonLines,
}

impl DataFormat {
    /// `.jsonl` and `.ndjson` are JSON lines; anything else is CSV.
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl" | "ndjson") => DataFormat::JsonLines,
            _ => DataFormat::Csv,
        }
    }
}

/// Who reads from one sequence of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// One sequence for all VUs: each row goes to one iteration (JMeter "All threads").
    All,
    /// Each VU reads the file from its start on its own (JMeter "Current thread").
    Vu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Sequential,
    Random,
}

/// What happens after the last row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtEnd {
    /// Start again from the first row.
    Recycle,
    /// No more iterations take data: the load ends when the data does.
    Stop,
}

pub type Row = Vec<String>;

/// Where one sequence stands: the next row's byte offset and the passes completed.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    offset: u64,
    passes: u64,
}

/// A VU's own place in a `share: vu` feeder (nothing until it first reads).
#[derive(Debug, Default)]
pub struct VuCursor(Option<Cursor>);

struct SharedState {
    /// The shared sequence's reader, opened at the first row asked for.
    stream: Option<Stream>,
    passes: u64,
    /// Rows read in this pass, this shard's or not (which shard a row is for).
    rows_in_pass: u64,
    /// Random order: rows drawn from here at random and replaced from the file.
    window: Vec<Row>,
    /// `at_end: stop` and the last row has been handed out.
    ended: bool,
}

/// A reader that refuses a line longer than [`MAX_ROW`]: a file with no line ends must not
/// be read whole into one row.
struct RowLimit {
    file: File,
    since_line_end: usize,
}

impl Read for RowLimit {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        match memchr::memrchr(b'\n', &buf[..n]) {
            Some(last) => self.since_line_end = n - last - 1,
            None => self.since_line_end += n,
        }
        if self.since_line_end > MAX_ROW {
            return Err(std::io::Error::other(format!(
                "a row is longer than {MAX_ROW} bytes"
            )));
        }
        Ok(n)
    }
}

impl Seek for RowLimit {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.since_line_end = 0;
        self.file.seek(pos)
    }
}

/// The shared sequence's streaming reader.
enum Stream {
    Csv(Box<csv::Reader<RowLimit>>, csv::StringRecord),
    Lines(BufReader<RowLimit>, Vec<u8>),
}

pub struct Feeder {
    pub name: String,
    pub path: PathBuf,
    pub columns: Vec<String>,
    pub share: Share,
    pub order: Order,
    pub at_end: AtEnd,
    format: DataFormat,
    file: File,
    data_start: u64,
    len: u64,
    /// `--shard i/N`: a shared sequence's rows this process takes (index, count).
    rows_dealt: (u64, u64),
    shared: Mutex<SharedState>,
}

impl std::fmt::Debug for Feeder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeder")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

/// Why a data file cannot feed the VUs, with the file's path.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("order: random draws from one shuffled sequence for all VUs; use share: all with it")]
    RandomPerVu,
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No rows where rows must be: `has no rows`, `names no columns`, ...
    #[error("{} {lacks}", path.display())]
    Lacks { path: PathBuf, lacks: &'static str },
    /// A row that cannot be read at this byte of the file.
    #[error("{} at byte {offset}: {why}", path.display())]
    BadRow {
        path: PathBuf,
        offset: u64,
        why: String,
    },
    /// The file as a whole cannot be read on (a CSV error while streaming, a shard that gets
    /// no rows).
    #[error("{}: {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
    #[error("a data feeder's lock was poisoned")]
    Poisoned,
}

impl Feeder {
    /// Opens a data file. Its columns are `columns` when given (the file has no header row),
    /// else the CSV's first row or the first JSON line's keys.
    pub fn open(
        name: &str,
        path: &Path,
        columns: Option<Vec<String>>,
        share: Share,
        order: Order,
        at_end: AtEnd,
    ) -> Result<Self, FeedError> {
        if share == Share::Vu && order == Order::Random {
            return Err(FeedError::RandomPerVu);
        }
        let file = kiln_record::input::open_regular(path).map_err(|source| FeedError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let len = file
            .metadata()
            .map_err(|source| FeedError::Read {
                path: path.to_path_buf(),
                source,
            })?
            .len();
        let format = DataFormat::from_path(path);
        let mut feeder = Self {
            name: name.to_string(),
            path: path.to_path_buf(),
            columns: Vec::new(),
            share,
            order,
            at_end,
            format,
            file,
            data_start: 0,
            len,
            rows_dealt: (0, 1),
            shared: Mutex::new(SharedState {
                stream: None,
                passes: 0,
                rows_in_pass: 0,
                window: Vec::new(),
                ended: false,
            }),
        };
        let first = feeder.read_at(0)?;
        let Some((first_row, after_first)) = first else {
            return Err(feeder.lacks("has no rows"));
        };
        feeder.columns = match (columns, format) {
            (Some(c), _) => c,
            (None, DataFormat::Csv) => {
                feeder.data_start = after_first;
                first_row
            }
            (None, DataFormat::JsonLines) => feeder.json_keys(0)?,
        };
        if feeder.columns.is_empty() {
            return Err(feeder.lacks("names no columns"));
        }
        if feeder.read_at(feeder.data_start)?.is_none() {
            return Err(feeder.lacks("has a header row and no data rows"));
        }
        Ok(feeder)
    }

    /// The next row for a VU, or `None` when the data has ended (`at_end: stop`).
    pub fn next(
        &self,
        vu: &mut VuCursor,
        rng: &mut fastrand::Rng,
    ) -> Result<Option<Row>, FeedError> {
        match self.share {
            Share::Vu => {
                let cursor = vu.0.get_or_insert(Cursor {
                    offset: self.data_start,
                    passes: 0,
                });
                if self.at_end == AtEnd::Stop && cursor.passes > 0 {
                    return Ok(None);
                }
                self.next_in(cursor)
            }
            Share::All => {
                let mut state = self.shared.lock().map_err(|_| FeedError::Poisoned)?;
                if state.ended && state.window.is_empty() {
                    return Ok(None);
                }
                let row = match self.order {
                    Order::Sequential => self.next_shared(&mut state)?,
                    Order::Random => self.draw(&mut state, rng)?,
                };
                if row.is_none() {
                    state.ended = true;
                }
                Ok(row)
            }
        }
    }

    /// Makes this feeder shard `index` of `count`'s: a shared sequence (`share: all`) hands
    /// out only rows `index`, `index + count` ... of each pass. A VU's own sequence is not
    /// dealt: each VU reads the whole file, wherever the VU runs.
    pub fn deal_rows(&mut self, index: u32, count: u32) {
        self.rows_dealt = (u64::from(index), u64::from(count.max(1)));
    }

    /// Passes completed by the shared sequence (for tests and the summary).
    pub fn passes(&self) -> u64 {
        self.shared.lock().map_or(0, |s| s.passes)
    }

    fn lacks(&self, lacks: &'static str) -> FeedError {
        FeedError::Lacks {
            path: self.path.clone(),
            lacks,
        }
    }

    fn unreadable(&self, why: impl std::fmt::Display) -> FeedError {
        FeedError::Unreadable {
            path: self.path.clone(),
            why: why.to_string(),
        }
    }

    fn bad_row(&self, offset: u64, why: impl std::fmt::Display) -> FeedError {
        FeedError::BadRow {
            path: self.path.clone(),
            offset,
            why: why.to_string(),
        }
    }

    fn read_error(&self, source: std::io::Error) -> FeedError {
        FeedError::Read {
            path: self.path.clone(),
            source,
        }
    }

    fn open_stream(&self) -> Result<Stream, FeedError> {
        let mut file =
            kiln_record::input::open_regular(&self.path).map_err(|source| FeedError::Open {
                path: self.path.clone(),
                source,
            })?;
        file.seek(SeekFrom::Start(self.data_start))
            .map_err(|e| self.read_error(e))?;
        let limited = RowLimit {
            file,
            since_line_end: 0,
        };
        Ok(match self.format {
            DataFormat::Csv => Stream::Csv(
                Box::new(
                    csv::ReaderBuilder::new()
                        .has_headers(false)
                        .flexible(true)
                        .from_reader(limited),
                ),
                csv::StringRecord::new(),
            ),
            DataFormat::JsonLines => Stream::Lines(BufReader::new(limited), Vec::new()),
        })
    }

    /// The shared sequence's next row for this shard; `None` at the end of the file.
    fn stream_next(&self, state: &mut SharedState) -> Result<Option<Row>, FeedError> {
        let (index, count) = self.rows_dealt;
        loop {
            let Some(row) = self.stream_next_row(state)? else {
                return Ok(None);
            };
            let n = state.rows_in_pass;
            state.rows_in_pass += 1;
            if n % count == index {
                return Ok(Some(row));
            }
        }
    }

    /// The shared sequence's next row, whichever shard it is for.
    fn stream_next_row(&self, state: &mut SharedState) -> Result<Option<Row>, FeedError> {
        if state.stream.is_none() {
            state.stream = Some(self.open_stream()?);
        }
        let Some(stream) = state.stream.as_mut() else {
            return Ok(None);
        };
        match stream {
            Stream::Csv(reader, record) => match reader.read_record(record) {
                Ok(true) => Ok(Some(record.iter().map(str::to_string).collect())),
                Ok(false) => Ok(None),
                Err(e) => Err(self.unreadable(e)),
            },
            Stream::Lines(reader, line) => loop {
                line.clear();
                let n = reader
                    .read_until(b'\n', line)
                    .map_err(|e| self.unreadable(e))?;
                if n == 0 {
                    return Ok(None);
                }
                if !line.iter().all(u8::is_ascii_whitespace) {
                    return self.json_row(line, 0).map(Some);
                }
            },
        }
    }

    /// Counts a finished pass of the shared sequence and rewinds it when recycling; false
    /// when the data has ended.
    fn end_shared_pass(&self, state: &mut SharedState) -> Result<bool, FeedError> {
        state.passes += 1;
        let (index, count) = (self.rows_dealt.0, self.rows_dealt.1);
        if state.rows_in_pass <= index {
            return Err(self.unreadable(format!(
                "shard {index} of {count} has no rows: the file has {} data rows and each \
                 shard takes one row in {count}",
                state.rows_in_pass
            )));
        }
        state.rows_in_pass = 0;
        if self.at_end == AtEnd::Stop {
            return Ok(false);
        }
        let start = self.data_start;
        match state.stream.as_mut() {
            Some(Stream::Csv(reader, _)) => {
                let mut at = csv::Position::new();
                at.set_byte(start);
                reader.seek(at).map_err(|e| self.unreadable(e))?;
            }
            Some(Stream::Lines(reader, _)) => {
                (reader.seek(SeekFrom::Start(start))).map_err(|e| self.unreadable(e))?;
            }
            None => {}
        }
        Ok(true)
    }

    fn next_shared(&self, state: &mut SharedState) -> Result<Option<Row>, FeedError> {
        if let Some(row) = self.stream_next(state)? {
            return Ok(Some(row));
        }
        if !self.end_shared_pass(state)? {
            return Ok(None);
        }
        match self.stream_next(state)? {
            Some(row) => Ok(Some(row)),
            None => Err(self.lacks("has no data rows any more")),
        }
    }

    fn next_in(&self, cursor: &mut Cursor) -> Result<Option<Row>, FeedError> {
        if let Some(row) = self.read_next(cursor)? {
            return Ok(Some(row));
        }
        if !self.end_pass(cursor) {
            return Ok(None);
        }
        match self.read_next(cursor)? {
            Some(row) => Ok(Some(row)),
            None => Err(self.lacks("has no data rows any more")),
        }
    }

    /// The row at the cursor, moving past it; `None` at the end of the file.
    fn read_next(&self, cursor: &mut Cursor) -> Result<Option<Row>, FeedError> {
        Ok(self.read_at(cursor.offset)?.map(|(row, next)| {
            cursor.offset = next;
            row
        }))
    }

    /// Counts a finished pass and rewinds when recycling; false when the data has ended.
    fn end_pass(&self, cursor: &mut Cursor) -> bool {
        cursor.passes += 1;
        cursor.offset = self.data_start;
        self.at_end == AtEnd::Recycle
    }

    /// Random order: when the window is empty, fills it with the next rows of the current
    /// pass (up to the window's size, never past the pass's end) and hands them out in a
    /// random order. Each row is used exactly once per pass.
    fn draw(
        &self,
        state: &mut SharedState,
        rng: &mut fastrand::Rng,
    ) -> Result<Option<Row>, FeedError> {
        // Two tries: a window that starts exactly at a pass's end fills from the next one.
        for _ in 0..2 {
            if !state.window.is_empty() {
                break;
            }
            while state.window.len() < SHUFFLE_WINDOW {
                match self.stream_next(state)? {
                    Some(row) => state.window.push(row),
                    None => {
                        if !self.end_shared_pass(state)? {
                            state.ended = true;
                        }
                        break;
                    }
                }
            }
            if state.ended {
                break;
            }
        }
        if state.window.is_empty() {
            return Ok(None);
        }
        let i = rng.usize(..state.window.len());
        Ok(Some(state.window.swap_remove(i)))
    }

    /// Reads the row that starts at `offset`: the row and the offset after it, or `None` at
    /// the end of the file.
    fn read_at(&self, offset: u64) -> Result<Option<(Row, u64)>, FeedError> {
        let mut size = FIRST_READ;
        loop {
            let want = size.min((self.len.saturating_sub(offset)) as usize);
            if want == 0 {
                return Ok(None);
            }
            let mut buf = vec![0u8; want];
            let got = self.pread(&mut buf, offset)?;
            buf.truncate(got);
            let at_file_end = offset + got as u64 >= self.len;
            match self.parse_row(&buf, at_file_end, offset)? {
                Parsed::Row(row, used) => return Ok(Some((row, offset + used as u64))),
                Parsed::Blank(used) if at_file_end && used == buf.len() => return Ok(None),
                Parsed::Blank(_) | Parsed::NeedMore if size >= MAX_ROW => {
                    return Err(self.unreadable(format!(
                        "the row at byte {offset} is longer than {MAX_ROW} bytes"
                    )))
                }
                Parsed::Blank(_) | Parsed::NeedMore => size *= 4,
            }
        }
    }

    fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize, FeedError> {
        let mut got = 0;
        while got < buf.len() {
            match self.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_error(e)),
            }
        }
        Ok(got)
    }

    fn parse_row(&self, buf: &[u8], at_file_end: bool, offset: u64) -> Result<Parsed, FeedError> {
        match self.format {
            DataFormat::Csv => {
                let mut reader = csv::ReaderBuilder::new()
                    .has_headers(false)
                    .flexible(true)
                    .from_reader(buf);
                let mut record = csv::StringRecord::new();
                let found = reader
                    .read_record(&mut record)
                    .map_err(|e| self.bad_row(offset, e))?;
                let used = reader.position().byte() as usize;
                // A record that reaches the end of what was read may go on past it.
                if used >= buf.len() && !at_file_end {
                    return Ok(Parsed::NeedMore);
                }
                if !found {
                    return Ok(Parsed::Blank(buf.len()));
                }
                Ok(Parsed::Row(
                    record.iter().map(str::to_string).collect(),
                    used,
                ))
            }
            DataFormat::JsonLines => {
                let mut start = 0;
                loop {
                    let rest = &buf[start..];
                    let (line, used) = match memchr::memchr(b'\n', rest) {
                        Some(end) => (&rest[..end], end + 1),
                        None if at_file_end => (rest, rest.len()),
                        None => return Ok(Parsed::NeedMore),
                    };
                    if line.iter().all(u8::is_ascii_whitespace) {
                        start += used;
                        if start >= buf.len() {
                            return Ok(Parsed::Blank(buf.len()));
                        }
                        continue;
                    }
                    let row = self.json_row(line, offset + start as u64)?;
                    return Ok(Parsed::Row(row, start + used));
                }
            }
        }
    }

    fn json_object(
        &self,
        line: &[u8],
        offset: u64,
    ) -> Result<serde_json::Map<String, serde_json::Value>, FeedError> {
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            Ok(_) => Err(self.bad_row(offset, "the line is not a JSON object")),
            Err(e) => Err(self.bad_row(offset, e)),
        }
    }

    /// A JSON line's values in column order; a string as itself, anything else as JSON.
    fn json_row(&self, line: &[u8], offset: u64) -> Result<Row, FeedError> {
        let map = self.json_object(line, offset)?;
        // Before the columns are known (reading the first line), every key in order.
        if self.columns.is_empty() {
            return Ok(map.values().map(json_text).collect());
        }
        Ok(self
            .columns
            .iter()
            .map(|c| map.get(c).map(json_text).unwrap_or_default())
            .collect())
    }

    fn json_keys(&self, offset: u64) -> Result<Vec<String>, FeedError> {
        let mut buf = vec![0u8; MAX_ROW.min(self.len as usize)];
        let got = self.pread(&mut buf, offset)?;
        let text = &buf[..got];
        let line = text
            .split(|&b| b == b'\n')
            .find(|l| !l.iter().all(u8::is_ascii_whitespace))
            .unwrap_or_default();
        Ok(self.json_object(line, offset)?.keys().cloned().collect())
    }
}

enum Parsed {
    /// A row and the bytes it used (with its line end).
    Row(Row, usize),
    /// Only blank lines in these bytes.
    Blank(usize),
    /// The row goes on past what was read.
    NeedMore,
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Shard;
    use std::collections::HashMap;
    use std::io::Write;

    fn file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        (dir, path)
    }

    fn take(f: &Feeder, vu: &mut VuCursor, n: usize) -> Vec<Option<Row>> {
        let mut rng = fastrand::Rng::with_seed(9);
        (0..n).map(|_| f.next(vu, &mut rng).unwrap()).collect()
    }

    #[test]
    fn csv_with_header_quotes_and_recycling() {
        let (_d, p) = file(
            "u.csv",
            "user,note\nann,\"hello, \"\"world\"\"\"\nbob,\"two\nlines\"\n\ncid,\n",
        );
        let f = Feeder::open("u", &p, None, Share::All, Order::Sequential, AtEnd::Recycle).unwrap();
        assert_eq!(f.columns, ["user", "note"]);
        let rows = take(&f, &mut VuCursor::default(), 5);
        let users: Vec<&str> = rows
            .iter()
            .map(|r| r.as_ref().unwrap()[0].as_str())
            .collect();
        assert_eq!(users, ["ann", "bob", "cid", "ann", "bob"]);
        assert_eq!(rows[0].as_ref().unwrap()[1], "hello, \"world\"");
        assert_eq!(rows[1].as_ref().unwrap()[1], "two\nlines");
        assert_eq!(f.passes(), 1);
    }

    #[test]
    fn stop_at_end_and_per_vu_sequences() {
        let (_d, p) = file("u.csv", "id\n1\n2\n3");
        let f = Feeder::open("u", &p, None, Share::All, Order::Sequential, AtEnd::Stop).unwrap();
        let rows = take(&f, &mut VuCursor::default(), 5);
        assert_eq!(rows.iter().filter(|r| r.is_some()).count(), 3);
        assert!(rows[3].is_none() && rows[4].is_none());
        let f = Feeder::open("u", &p, None, Share::Vu, Order::Sequential, AtEnd::Recycle).unwrap();
        let (mut a, mut b) = (VuCursor::default(), VuCursor::default());
        let first = |r: &[Option<Row>]| {
            r.iter()
                .map(|x| x.as_ref().unwrap()[0].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(first(&take(&f, &mut a, 4)), ["1", "2", "3", "1"]);
        assert_eq!(first(&take(&f, &mut b, 2)), ["1", "2"]);
    }

    #[test]
    fn random_order_uses_every_row_once_per_pass() {
        let text: String = std::iter::once("n\n".to_string())
            .chain((0..100).map(|i| format!("{i}\n")))
            .collect();
        let (_d, p) = file("n.csv", &text);
        let f = Feeder::open("n", &p, None, Share::All, Order::Random, AtEnd::Recycle).unwrap();
        let rows = take(&f, &mut VuCursor::default(), 300);
        let mut seen: HashMap<String, usize> = HashMap::new();
        for r in rows.iter().flatten() {
            *seen.entry(r[0].clone()).or_default() += 1;
        }
        assert_eq!(seen.len(), 100);
        assert!(seen.values().all(|&n| n == 3), "{seen:?}");
        let in_order: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let first: Vec<String> = rows[..100]
            .iter()
            .map(|r| r.as_ref().unwrap()[0].clone())
            .collect();
        assert_ne!(first, in_order, "shuffled");
    }

    #[test]
    fn json_lines_with_given_and_found_columns() {
        let (_d, p) = file(
            "u.jsonl",
            "{\"user\":\"ann\",\"age\":31}\n\n{\"user\":\"bob\",\"tags\":[1]}\n",
        );
        let f = Feeder::open("u", &p, None, Share::All, Order::Sequential, AtEnd::Stop).unwrap();
        assert_eq!(f.columns, ["age", "user"]);
        let rows = take(&f, &mut VuCursor::default(), 3);
        assert_eq!(rows[0].as_ref().unwrap(), &["31", "ann"]);
        assert_eq!(rows[1].as_ref().unwrap(), &["", "bob"]);
        assert!(rows[2].is_none());
        let f = Feeder::open(
            "u",
            &p,
            Some(vec!["tags".into()]),
            Share::All,
            Order::Sequential,
            AtEnd::Stop,
        )
        .unwrap();
        let rows = take(&f, &mut VuCursor::default(), 2);
        assert_eq!(rows[1].as_ref().unwrap(), &["[1]"]);
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let open = |name: &str, text: &str| {
            let (_d, p) = file(name, text);
            Feeder::open("d", &p, None, Share::All, Order::Sequential, AtEnd::Stop).unwrap_err()
        };
        assert!(matches!(
            open("e.csv", ""),
            FeedError::Lacks {
                lacks: "has no rows",
                ..
            }
        ));
        assert!(open("h.csv", "a,b\n").to_string().contains("no data rows"));
        assert!(matches!(
            open("x.jsonl", "[1,2]\n"),
            FeedError::BadRow { offset: 0, why, .. } if why.contains("not a JSON object")
        ));
        assert!(open("y.jsonl", "{nope\n").to_string().contains("at byte 0"));
        let missing = Feeder::open(
            "d",
            Path::new("/nonexistent/x.csv"),
            None,
            Share::All,
            Order::Sequential,
            AtEnd::Stop,
        )
        .unwrap_err();
        assert!(
            (missing.to_string()).starts_with("cannot open /nonexistent/x.csv: "),
            "{missing}"
        );
        let (_d, p) = file("r.csv", "a\n1\n");
        let both = Feeder::open("d", &p, None, Share::Vu, Order::Random, AtEnd::Stop).unwrap_err();
        assert!(both.to_string().contains("share: all"));
    }

    #[test]
    fn a_long_row_is_read_whole_and_a_giant_one_refused() {
        let long = "x".repeat(100_000);
        let (_d, p) = file("l.csv", &format!("v\n{long}\nshort\n"));
        let f = Feeder::open("l", &p, None, Share::All, Order::Sequential, AtEnd::Stop).unwrap();
        let rows = take(&f, &mut VuCursor::default(), 2);
        assert_eq!(rows[0].as_ref().unwrap()[0].len(), 100_000);
        assert_eq!(rows[1].as_ref().unwrap()[0], "short");
        let giant = "y".repeat(MAX_ROW + 10);
        let (_d, p) = file("g.csv", &format!("v\n{giant}\n"));
        let err =
            Feeder::open("g", &p, None, Share::All, Order::Sequential, AtEnd::Stop).unwrap_err();
        assert!(err.to_string().contains("longer than"), "{err}");
        // Further in, the shared reader refuses it too, as an error and not a 1 MiB row.
        for name in ["g2.csv", "g2.jsonl"] {
            let first = if name.ends_with(".csv") {
                "v\nshort\n"
            } else {
                "{\"v\":1}\n"
            };
            // The limit is checked per read, so a row may pass it by a buffer's length.
            let giant = "y".repeat(MAX_ROW + 64 * 1024);
            let (_d, p) = file(name, &format!("{first}{giant}\n"));
            let f =
                Feeder::open("g", &p, None, Share::All, Order::Sequential, AtEnd::Stop).unwrap();
            let mut rng = fastrand::Rng::with_seed(1);
            let mut vu = VuCursor::default();
            assert!(f.next(&mut vu, &mut rng).unwrap().is_some(), "{name}");
            let second = f.next(&mut vu, &mut rng);
            assert!(
                matches!(&second, Err(e) if e.to_string().contains("longer than")),
                "{name}: {:?}",
                second.map(|r| r.map(|r| r.len()))
            );
        }
    }

    /// The shards' rows, put together, are the file's rows once per pass: none twice, none
    /// left out, in either order, whatever the number of rows and shards.
    #[test]
    fn shards_take_every_nth_row_of_a_shared_sequence() {
        for (rows, count) in [(10u32, 3u32), (9, 3), (100, 4), (5, 5)] {
            let text: String = std::iter::once("n\n".to_string())
                .chain((0..rows).map(|i| format!("{i}\n")))
                .collect();
            let (_d, p) = file("n.csv", &text);
            for order in [Order::Sequential, Order::Random] {
                let mut seen: HashMap<u32, u32> = HashMap::new();
                for index in 0..count {
                    let mut f =
                        Feeder::open("n", &p, None, Share::All, order, AtEnd::Recycle).unwrap();
                    f.deal_rows(index, count);
                    let share = Shard { index, count }.part_of(rows as usize);
                    // two passes of this shard's rows
                    for row in take(&f, &mut VuCursor::default(), 2 * share)
                        .iter()
                        .flatten()
                    {
                        let n: u32 = row[0].parse().unwrap();
                        assert_eq!(n % count, index, "{rows} rows, {count} shards, {order:?}");
                        *seen.entry(n).or_default() += 1;
                    }
                    // random order reads a whole window ahead, to the pass's end
                    let passes = if order == Order::Random { 2 } else { 1 };
                    assert_eq!(f.passes(), passes, "{rows} rows, {count} shards, {order:?}");
                }
                assert_eq!(seen.len(), rows as usize);
                assert!(seen.values().all(|&n| n == 2), "{seen:?}");
            }
        }
        // at_end: stop ends each shard's data with its own share
        let (_d, p) = file("u.csv", "id\n1\n2\n3\n4\n5\n");
        let mut f =
            Feeder::open("u", &p, None, Share::All, Order::Sequential, AtEnd::Stop).unwrap();
        f.deal_rows(1, 2);
        let got: Vec<Option<String>> = take(&f, &mut VuCursor::default(), 3)
            .into_iter()
            .map(|r| r.map(|r| r[0].clone()))
            .collect();
        assert_eq!(got, [Some("2".into()), Some("4".into()), None]);
        // a VU's own sequence is the whole file in every shard
        let mut f = Feeder::open("u", &p, None, Share::Vu, Order::Sequential, AtEnd::Stop).unwrap();
        f.deal_rows(1, 2);
        assert_eq!(
            take(&f, &mut VuCursor::default(), 6)
                .iter()
                .flatten()
                .count(),
            5
        );
    }

    #[test]
    fn a_shard_left_without_rows_is_told_why() {
        let (_d, p) = file("u.csv", "id\n1\n2\n");
        for at_end in [AtEnd::Recycle, AtEnd::Stop] {
            let mut f = Feeder::open("u", &p, None, Share::All, Order::Sequential, at_end).unwrap();
            f.deal_rows(2, 3);
            let err = f
                .next(&mut VuCursor::default(), &mut fastrand::Rng::with_seed(1))
                .unwrap_err();
            assert!(
                err.to_string()
                    .contains("shard 2 of 3 has no rows: the file has 2 data rows"),
                "{err}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn no_file_content_panics_the_feeder(text in "[a-z,\"\n{}:\\[\\] 0-9]{0,200}", jsonl in proptest::bool::ANY) {
            let (_d, p) = file(if jsonl { "p.jsonl" } else { "p.csv" }, &text);
            if let Ok(f) = Feeder::open("p", &p, None, Share::All, Order::Sequential, AtEnd::Recycle) {
                let mut rng = fastrand::Rng::with_seed(1);
                let mut vu = VuCursor::default();
                for _ in 0..20 {
                    let _ = f.next(&mut vu, &mut rng);
                }
            }
        }
    }
}
