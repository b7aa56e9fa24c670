//! Import of pprof profiles (`profile.proto`, as written by Go's runtime/pprof, async-profiler's
//! converter and others), gzipped or not, into collapsed stacks.
//!
//! The messages are declared here with prost's derive, not generated from the .proto at build
//! time: only the fields kiln reads are declared (prost skips the rest), and no protoc is needed.

use std::collections::HashMap;
use std::io::Read;

use prost::Message;

use crate::{Folded, ProfileError};

#[derive(Clone, PartialEq, Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "14")]
    default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "3")]
    address: u64,
    /// Several lines mean inlining; the last one is the caller.
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
}

#[derive(Clone, PartialEq, Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
}

/// Decompressed pprof data larger than this is refused (a gzip bomb would otherwise fill
/// memory); real CPU profiles are a few MB.
const MAX_DECODED_BYTES: u64 = 1 << 30;

/// Which of a profile's sample values the collapsed counts are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PprofImport {
    pub folded: Folded,
    /// e.g. "samples/count" or "cpu/nanoseconds".
    pub value: String,
    pub samples: usize,
}

pub fn looks_like_gzip(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
}

/// Reads a pprof profile (gzipped or raw protobuf). Counts are the value `sample_index` names,
/// else the profile's default sample type, else its last (as pprof reads them: a Go CPU
/// profile's cpu/nanoseconds).
pub fn import(data: &[u8], sample_index: Option<&str>) -> Result<PprofImport, ProfileError> {
    let raw;
    let bytes = if looks_like_gzip(data) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(data)
            .take(MAX_DECODED_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| ProfileError::Format(format!("pprof: gzip: {e}")))?;
        if out.len() as u64 > MAX_DECODED_BYTES {
            return Err(ProfileError::Format(
                "pprof: more than 1 GiB once decompressed; refused".into(),
            ));
        }
        raw = out;
        &raw[..]
    } else {
        data
    };
    let profile = Profile::decode(bytes)
        .map_err(|e| ProfileError::Format(format!("pprof: not a profile.proto message: {e}")))?;
    let string = |i: i64| -> &str {
        usize::try_from(i)
            .ok()
            .and_then(|i| profile.string_table.get(i))
            .map_or("", String::as_str)
    };
    let value_names: Vec<String> = profile
        .sample_type
        .iter()
        .map(|t| format!("{}/{}", string(t.r#type), string(t.unit)))
        .collect();
    if value_names.is_empty() {
        return Err(ProfileError::Format(
            "pprof: the profile has no sample types".into(),
        ));
    }
    let index = match sample_index {
        Some(asked) => asked_value(asked, &value_names)?,
        None => chosen_value(&profile, &value_names),
    };
    let functions: HashMap<u64, &str> = profile
        .function
        .iter()
        .map(|f| (f.id, string(f.name)))
        .collect();
    let locations: HashMap<u64, &Location> = profile.location.iter().map(|l| (l.id, l)).collect();

    let mut folded = Folded::new();
    let mut frames: Vec<String> = Vec::new();
    for sample in &profile.sample {
        let count = sample.value.get(index).copied().unwrap_or(0);
        if count <= 0 {
            continue;
        }
        frames.clear();
        if sample.location_id.is_empty() {
            // pprof keeps a sample with no stack in its totals: a root of its own
            frames.push(crate::folded::NO_STACK.to_string());
        }
        // Leaf first in the file; root first in collapsed form.
        for id in sample.location_id.iter().rev() {
            match locations.get(id) {
                Some(location) if !location.line.is_empty() => {
                    for line in location.line.iter().rev() {
                        let name = functions.get(&line.function_id).copied().unwrap_or("");
                        frames.push(if name.is_empty() {
                            format!("0x{:x}", location.address)
                        } else {
                            name.to_string()
                        });
                    }
                }
                Some(location) => frames.push(format!("0x{:x}", location.address)),
                None => frames.push(format!("[unknown location {id}]")),
            }
        }
        folded.add(&frames, count as u64);
    }
    if folded.is_empty() {
        return Err(ProfileError::Format(format!(
            "pprof: no samples with a positive {} value",
            value_names[index]
        )));
    }
    Ok(PprofImport {
        folded,
        value: value_names[index].clone(),
        samples: profile.sample.len(),
    })
}

/// Which of a profile's values is read, as pprof chooses: the one `default_sample_type` names,
/// else the last.
fn chosen_value(profile: &Profile, value_names: &[String]) -> usize {
    let named = profile
        .sample_type
        .iter()
        .position(|t| t.r#type == profile.default_sample_type && t.r#type != 0);
    named.unwrap_or(value_names.len().saturating_sub(1))
}

/// `--sample-index`: a type's index, its name (`alloc_space`) or its name and unit
/// (`alloc_space/bytes`); one the profile has not is said with those it has.
fn asked_value(asked: &str, value_names: &[String]) -> Result<usize, ProfileError> {
    let found = match asked.trim().parse::<usize>() {
        Ok(i) => (i < value_names.len()).then_some(i),
        Err(_) => value_names
            .iter()
            .position(|n| n == asked || n.split_once('/').is_some_and(|(name, _)| name == asked)),
    };
    found.ok_or_else(|| {
        let listed: Vec<String> = (value_names.iter().enumerate())
            .map(|(i, n)| format!("{i}: {n}"))
            .collect();
        ProfileError::Format(format!(
            "pprof: no sample type {asked:?}; the profile has {}",
            listed.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    /// Location `id` at address `id * 0x10`, in function `function_id`.
    fn located(id: u64, function_id: u64) -> Location {
        Location {
            id,
            address: id * 0x10,
            line: vec![Line { function_id }],
        }
    }

    /// A heap profile shaped like Go's: four values, no default: pprof shows the last
    /// (`inuse_space`), the memory held, not `alloc_objects`, the churn.
    #[test]
    fn without_a_default_the_last_value_is_read_as_pprof_does() {
        let strings = [
            "",
            "alloc_objects",
            "count",
            "alloc_space",
            "bytes",
            "inuse_objects",
            "inuse_space",
            "main.churn",
            "main.keep",
        ];
        let profile = Profile {
            sample_type: vec![
                ValueType { r#type: 1, unit: 2 },
                ValueType { r#type: 3, unit: 4 },
                ValueType { r#type: 5, unit: 2 },
                ValueType { r#type: 6, unit: 4 },
            ],
            sample: vec![
                Sample {
                    location_id: vec![1],
                    value: vec![1000, 64_000, 0, 0],
                },
                Sample {
                    location_id: vec![2],
                    value: vec![1, 1 << 20, 1, 1 << 20],
                },
            ],
            location: vec![located(1, 1), located(2, 2)],
            function: vec![Function { id: 1, name: 7 }, Function { id: 2, name: 8 }],
            string_table: strings.iter().map(|s| s.to_string()).collect(),
            default_sample_type: 0,
        };
        let imported = import(&profile.encode_to_vec(), None).unwrap();
        assert_eq!(imported.value, "inuse_space/bytes");
        assert_eq!(imported.folded.to_text(), "main.keep 1048576\n");
        // a default named in the file wins
        let with_default = Profile {
            default_sample_type: 1,
            ..profile
        };
        let imported = import(&with_default.encode_to_vec(), None).unwrap();
        assert_eq!(imported.value, "alloc_objects/count");
    }

    /// A two-function CPU profile shaped like Go's: samples/count and cpu/nanoseconds.
    fn go_like() -> Vec<u8> {
        let strings = [
            "",
            "samples",
            "count",
            "cpu",
            "nanoseconds",
            "main.main",
            "main.hot",
            "main.cold",
        ];
        let profile = Profile {
            sample_type: vec![
                ValueType { r#type: 1, unit: 2 },
                ValueType { r#type: 3, unit: 4 },
            ],
            sample: vec![
                Sample {
                    location_id: vec![2, 1],
                    value: vec![7, 70_000_000],
                },
                Sample {
                    location_id: vec![3, 1],
                    value: vec![3, 30_000_000],
                },
            ],
            location: vec![
                located(1, 1),
                located(2, 2),
                Location {
                    id: 3,
                    address: 0x30,
                    line: vec![],
                },
            ],
            function: vec![
                Function { id: 1, name: 5 },
                Function { id: 2, name: 6 },
                Function { id: 3, name: 7 },
            ],
            string_table: strings.iter().map(|s| s.to_string()).collect(),
            default_sample_type: 0,
        };
        profile.encode_to_vec()
    }

    #[test]
    fn a_go_like_profile_reads_root_first_in_its_last_value_as_pprof_does() {
        let imported = import(&go_like(), None).unwrap();
        assert_eq!(imported.value, "cpu/nanoseconds");
        assert_eq!(
            imported.folded.to_text(),
            "main.main;0x30 30000000\nmain.main;main.hot 70000000\n"
        );
        // -sample_index by name, by name and unit, by number
        for asked in ["samples", "samples/count", "0"] {
            let imported = import(&go_like(), Some(asked)).unwrap();
            assert_eq!(imported.value, "samples/count", "{asked}");
            assert_eq!(imported.folded.total(), 10);
        }
        let e = import(&go_like(), Some("alloc_space"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("0: samples/count, 1: cpu/nanoseconds"), "{e}");
        assert!(import(&go_like(), Some("2")).is_err());
    }

    /// A sample with no location (a heap profile's allocations kiln could not unwind) is in
    /// pprof's totals: it is kept as a root of its own, and the shares stay pprof's.
    #[test]
    fn a_sample_without_a_stack_is_kept() {
        let mut profile = Profile::decode(&go_like()[..]).unwrap();
        profile.sample.push(Sample {
            location_id: vec![],
            value: vec![10, 100_000_000],
        });
        let imported = import(&profile.encode_to_vec(), None).unwrap();
        assert_eq!(imported.folded.total(), 200_000_000);
        assert!(imported.folded.to_text().contains("[no stack] 100000000"));
    }

    #[test]
    fn gzipped_is_read_too() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&go_like()).unwrap();
        let data = gz.finish().unwrap();
        assert_eq!(import(&data, Some("samples")).unwrap().folded.total(), 10);
    }

    #[test]
    fn corrupt_and_truncated_input_is_a_clear_error() {
        let data = go_like();
        assert!(import(&data[..data.len() / 2], None).is_err());
        let err = import(b"\x1f\x8b not really gzip", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("gzip"), "{err}");
        assert!(import(b"", None).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_import_or_error_without_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = import(&data, None);
        }
    }
}
