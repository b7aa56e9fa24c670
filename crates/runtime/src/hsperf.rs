//! The JVM's hsperfdata file: the counters `jstat` and `jcmd PerfCounter.print` read, which
//! HotSpot keeps in a 32 KiB shared-memory file at `/tmp/hsperfdata_<user>/<pid>` unless
//! started with `-XX:-UsePerfData` or `-XX:+PerfDisableSharedMem`.
//!
//! Written here rather than taken from the `hsperf` crate: that one is GPL-3.0 and reads
//! through raw pointers into a mapping; the layout is small (HotSpot's `perfMemory.hpp`):
//!
//! - a 32-byte prologue: magic `CA FE C0 C0`, byte order (1 little endian), major, minor,
//!   accessible, used (i32), overflow (i32), mod_time_stamp (i64), first entry (i32),
//!   number of entries (i32);
//! - entries: length (i32), name offset (i32), vector length (i32, 0 for a scalar), type
//!   (`J` a long, `B` a byte vector: a string), flags, units, variability (u8 each), data
//!   offset (i32); offsets are from the entry's start.
//!
//! Every offset is checked: a file that is short, torn or hostile is an error, never a panic.

use std::collections::HashMap;

/// Why hsperfdata could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadPerfData(pub String);

impl std::fmt::Display for BadPerfData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hsperfdata: {}", self.0)
    }
}

impl std::error::Error for BadPerfData {}

const MAGIC: [u8; 4] = [0xCA, 0xFE, 0xC0, 0xC0];
const PROLOGUE: usize = 32;
/// HotSpot makes 32 KiB by default; a larger `PerfDataMemorySize` is allowed, within reason.
pub const MAX_FILE: usize = 16 << 20;
const MAX_ENTRIES: usize = 100_000;

/// Where an entry's value lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Long(usize),
    Text { at: usize, len: usize },
}

/// The file's directory of counters: names and where their values are. Values are read from
/// a buffer with the same layout (`layout_of` says whether a new reading still has it), so a
/// fast poll reads a few longs instead of parsing every name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    slots: HashMap<String, Slot>,
    little_endian: bool,
    layout: Layout,
}

/// What changes when HotSpot adds counters: the entry count and its structure time stamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub entries: u32,
    pub mod_time_stamp: i64,
}

fn bytes<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], BadPerfData> {
    buf.get(
        at..at
            .checked_add(N)
            .ok_or_else(|| BadPerfData("offset overflow".into()))?,
    )
    .and_then(|b| b.try_into().ok())
    .ok_or_else(|| {
        BadPerfData(format!(
            "{N} bytes at {at} are past the end ({})",
            buf.len()
        ))
    })
}

fn i32_at(buf: &[u8], at: usize, little: bool) -> Result<i32, BadPerfData> {
    let b = bytes::<4>(buf, at)?;
    Ok(if little {
        i32::from_le_bytes(b)
    } else {
        i32::from_be_bytes(b)
    })
}

fn i64_at(buf: &[u8], at: usize, little: bool) -> Result<i64, BadPerfData> {
    let b = bytes::<8>(buf, at)?;
    Ok(if little {
        i64::from_le_bytes(b)
    } else {
        i64::from_be_bytes(b)
    })
}

fn offset(base: usize, rel: i32, what: &str) -> Result<usize, BadPerfData> {
    usize::try_from(rel)
        .ok()
        .and_then(|r| base.checked_add(r))
        .ok_or_else(|| BadPerfData(format!("{what} offset {rel} at entry {base}")))
}

/// The prologue's layout stamp, or why the file is not (yet) readable.
pub fn layout_of(buf: &[u8]) -> Result<(Layout, bool), BadPerfData> {
    if buf.len() < PROLOGUE {
        return Err(BadPerfData(format!(
            "{} bytes, shorter than its header",
            buf.len()
        )));
    }
    if buf[..4] != MAGIC {
        return Err(BadPerfData("not an hsperfdata file (bad magic)".into()));
    }
    let little = match buf[4] {
        0 => false,
        1 => true,
        b => return Err(BadPerfData(format!("unknown byte order {b}"))),
    };
    if buf[5] != 2 {
        return Err(BadPerfData(format!(
            "version {}.{} (kiln reads 2.x)",
            buf[5], buf[6]
        )));
    }
    if buf[7] == 0 {
        return Err(BadPerfData("the JVM has not finished creating it".into()));
    }
    let entries = i32_at(buf, 28, little)?;
    let entries = u32::try_from(entries).map_err(|_| BadPerfData(format!("{entries} entries")))?;
    Ok((
        Layout {
            entries,
            mod_time_stamp: i64_at(buf, 16, little)?,
        },
        little,
    ))
}

impl Directory {
    /// Reads the directory of counters.
    pub fn parse(buf: &[u8]) -> Result<Self, BadPerfData> {
        if buf.len() > MAX_FILE {
            return Err(BadPerfData(format!("{} bytes is too large", buf.len())));
        }
        let (layout, little) = layout_of(buf)?;
        if layout.entries as usize > MAX_ENTRIES {
            return Err(BadPerfData(format!("{} entries", layout.entries)));
        }
        let mut at = offset(0, i32_at(buf, 24, little)?, "first entry")?;
        let mut slots = HashMap::with_capacity(layout.entries as usize);
        for _ in 0..layout.entries {
            let length = i32_at(buf, at, little)?;
            if length < 20 {
                return Err(BadPerfData(format!("an entry of {length} bytes at {at}")));
            }
            let name_at = offset(at, i32_at(buf, at + 4, little)?, "name")?;
            let vector = i32_at(buf, at + 8, little)?;
            let kind = bytes::<1>(buf, at + 12)?[0];
            let data_at = offset(at, i32_at(buf, at + 16, little)?, "data")?;
            let end = offset(at, length, "entry end")?;
            if end > buf.len() {
                return Err(BadPerfData(format!("an entry at {at} ends past the file")));
            }
            let name_bytes = buf.get(name_at..end).unwrap_or(&[]);
            let name_len = memchr::memchr(0, name_bytes)
                .ok_or_else(|| BadPerfData(format!("the name at {name_at} never ends")))?;
            let name = String::from_utf8_lossy(&name_bytes[..name_len]).into_owned();
            let slot = match (kind, vector) {
                (b'J', 0) => {
                    bytes::<8>(buf, data_at)?;
                    Some(Slot::Long(data_at))
                }
                (b'B', n) if n > 0 => {
                    let len = n as usize;
                    buf.get(data_at..data_at.saturating_add(len))
                        .ok_or_else(|| {
                            BadPerfData(format!("the text of {name} is past the end"))
                        })?;
                    Some(Slot::Text { at: data_at, len })
                }
                // Other kinds (vectors of longs, ...) are not used by HotSpot's counters.
                _ => None,
            };
            if let Some(slot) = slot {
                slots.insert(name, slot);
            }
            at = end;
        }
        Ok(Self {
            slots,
            little_endian: little,
            layout,
        })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn has(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }

    /// The names of the counters, in no order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(String::as_str)
    }

    /// A long counter's value in `buf` (a reading with this directory's layout).
    pub fn long(&self, buf: &[u8], name: &str) -> Option<i64> {
        match self.slots.get(name)? {
            Slot::Long(at) => i64_at(buf, *at, self.little_endian).ok(),
            Slot::Text { .. } => None,
        }
    }

    /// A string counter's value (NUL-padded in the file).
    pub fn text(&self, buf: &[u8], name: &str) -> Option<String> {
        match self.slots.get(name)? {
            Slot::Text { at, len } => {
                let raw = buf.get(*at..*at + *len)?;
                let end = memchr::memchr(0, raw).unwrap_or(raw.len());
                Some(String::from_utf8_lossy(&raw[..end]).into_owned())
            }
            Slot::Long(_) => None,
        }
    }
}

/// Builds an hsperfdata file, for tests: `(name, value)` with a long or a string.
pub fn build(entries: &[(&str, PerfValue)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[1, 2, 0, 1]);
    out.extend_from_slice(&[0; 8]); // used, overflow
    out.extend_from_slice(&7i64.to_le_bytes());
    out.extend_from_slice(&(PROLOGUE as i32).to_le_bytes());
    out.extend_from_slice(&(entries.len() as i32).to_le_bytes());
    for (name, value) in entries {
        let name_off = 20;
        let name_len = name.len() + 1;
        let data_off = (name_off + name_len).div_ceil(8) * 8;
        let (kind, vector, data): (u8, i32, Vec<u8>) = match value {
            PerfValue::Long(v) => (b'J', 0, v.to_le_bytes().to_vec()),
            PerfValue::Text(t) => {
                let mut d = t.as_bytes().to_vec();
                d.resize(t.len() + 8, 0);
                (b'B', d.len() as i32, d)
            }
        };
        let length = (data_off + data.len()).div_ceil(8) * 8;
        let start = out.len();
        out.extend_from_slice(&(length as i32).to_le_bytes());
        out.extend_from_slice(&(name_off as i32).to_le_bytes());
        out.extend_from_slice(&vector.to_le_bytes());
        out.extend_from_slice(&[kind, 0, 1, 3]);
        out.extend_from_slice(&(data_off as i32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.resize(start + data_off, 0);
        out.extend_from_slice(&data);
        out.resize(start + length, 0);
    }
    out
}

/// A counter's value, for [`build`].
#[derive(Clone, Debug, PartialEq)]
pub enum PerfValue {
    Long(i64),
    Text(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_and_texts_read_back() {
        let buf = build(&[
            ("sun.gc.collector.0.invocations", PerfValue::Long(42)),
            (
                "java.property.java.vm.version",
                PerfValue::Text("17.0.15+6".into()),
            ),
            ("sun.os.hrt.frequency", PerfValue::Long(1_000_000_000)),
        ]);
        let d = Directory::parse(&buf).unwrap();
        assert_eq!(d.long(&buf, "sun.gc.collector.0.invocations"), Some(42));
        assert_eq!(
            d.text(&buf, "java.property.java.vm.version").as_deref(),
            Some("17.0.15+6")
        );
        assert_eq!(d.long(&buf, "java.property.java.vm.version"), None);
        assert_eq!(d.long(&buf, "nope"), None);
        assert_eq!(d.layout().entries, 3);
    }

    #[test]
    fn bad_files_say_why() {
        assert!(Directory::parse(&[]).unwrap_err().0.contains("shorter"));
        let mut buf = build(&[("a", PerfValue::Long(1))]);
        buf[7] = 0;
        assert!(Directory::parse(&buf)
            .unwrap_err()
            .0
            .contains("not finished"));
        let mut buf = build(&[("a", PerfValue::Long(1))]);
        buf[0] = 0;
        assert!(Directory::parse(&buf).unwrap_err().0.contains("magic"));
        let buf = build(&[("a", PerfValue::Long(1))]);
        assert!(Directory::parse(&buf[..buf.len() - 4]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_panic_the_parser(mut buf in proptest::collection::vec(proptest::num::u8::ANY, 0..400), keep in proptest::bool::ANY) {
            if keep && buf.len() >= 8 {
                buf[..8].copy_from_slice(&[0xCA, 0xFE, 0xC0, 0xC0, 1, 2, 0, 1]);
            }
            if let Ok(d) = Directory::parse(&buf) {
                for name in d.names().map(str::to_string).collect::<Vec<_>>() {
                    let _ = d.long(&buf, &name);
                    let _ = d.text(&buf, &name);
                }
            }
        }

        #[test]
        fn a_good_file_with_bytes_changed_never_panics(at in 0usize..200, byte in proptest::num::u8::ANY) {
            let mut buf = build(&[("sun.gc.collector.0.time", PerfValue::Long(5)), ("x", PerfValue::Text("yz".into()))]);
            if at < buf.len() {
                buf[at] = byte;
            }
            let _ = Directory::parse(&buf);
        }
    }
}
