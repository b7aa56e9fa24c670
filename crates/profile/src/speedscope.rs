//! Export to speedscope's file format (https://www.speedscope.app/file-format-schema.json):
//! one sampled profile whose samples are the distinct stacks weighted by their counts.

use std::collections::HashMap;

use serde::Serialize;

use crate::Folded;

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<Profile<'a>>,
    name: &'a str,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<Frame<'a>>,
}

#[derive(Serialize)]
struct Frame<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct Profile<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// One profile of a speedscope file: stacks, what their weights count ("none" for counts,
/// "microseconds" ...).
pub struct WeightedProfile<'a> {
    pub name: &'a str,
    pub folded: &'a Folded,
    pub unit: &'static str,
}

/// The speedscope JSON of `folded`, named `name`, its weights in `unit` as pprof names it
/// (`bytes`, `nanoseconds`; anything speedscope has no name for is "none", a count).
pub fn to_json(folded: &Folded, name: &str, unit: Option<&str>) -> String {
    to_json_profiles(
        name,
        &[WeightedProfile {
            name,
            folded,
            unit: speedscope_unit(unit),
        }],
    )
}

/// speedscope's name for a unit (its file format's `ValueUnit`).
fn speedscope_unit(unit: Option<&str>) -> &'static str {
    match unit {
        Some("bytes") => "bytes",
        Some("nanoseconds") => "nanoseconds",
        Some("microseconds") => "microseconds",
        Some("milliseconds") => "milliseconds",
        Some("seconds") => "seconds",
        _ => "none",
    }
}

/// A speedscope file of several profiles over one shared frame table (the DB stack trie
/// weighted by calls and by time, say); speedscope offers them side by side.
pub fn to_json_profiles(name: &str, profiles: &[WeightedProfile<'_>]) -> String {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut frames = Vec::new();
    let mut out = Vec::new();
    for profile in profiles {
        let mut samples = Vec::new();
        let mut weights = Vec::new();
        for (stack, count) in profile.folded.lines() {
            let sample = stack
                .split(';')
                .map(|frame| {
                    *index.entry(frame).or_insert_with(|| {
                        frames.push(Frame { name: frame });
                        frames.len() - 1
                    })
                })
                .collect();
            samples.push(sample);
            weights.push(count);
        }
        out.push(Profile {
            kind: "sampled",
            name: profile.name,
            unit: profile.unit,
            start_value: 0,
            end_value: profile.folded.total(),
            samples,
            weights,
        });
    }
    let file = File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared { frames },
        profiles: out,
        name,
        active_profile_index: 0,
        exporter: format!("kiln {}", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_string(&file).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_shared_and_samples_weighted() {
        let (f, _) = Folded::parse("main;a 3\nmain;b 2\n").unwrap();
        let v: serde_json::Value = serde_json::from_str(&to_json(&f, "t", None)).unwrap();
        let frames: Vec<&str> = v["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(frames, ["main", "a", "b"]);
        let p = &v["profiles"][0];
        assert_eq!(p["type"], "sampled");
        assert_eq!(p["samples"], serde_json::json!([[0, 1], [0, 2]]));
        assert_eq!(p["weights"], serde_json::json!([3, 2]));
        assert_eq!(p["endValue"], 5);
    }

    /// A heap profile's bytes and perf script's nanoseconds were written as unit "none".
    #[test]
    fn weights_carry_their_unit() {
        let (f, _) = Folded::parse("main;a 3\n").unwrap();
        let unit = |u| {
            let v: serde_json::Value = serde_json::from_str(&to_json(&f, "t", u)).unwrap();
            v["profiles"][0]["unit"].as_str().unwrap().to_string()
        };
        assert_eq!(unit(Some("bytes")), "bytes");
        assert_eq!(unit(Some("nanoseconds")), "nanoseconds");
        assert_eq!(unit(Some("count")), "none");
        assert_eq!(unit(None), "none");
    }
}
