//! speedscope's file format (https://www.speedscope.app/file-format-schema.json): export as
//! sampled profiles whose samples are the distinct stacks weighted by their counts, and import
//! of sampled and evented profiles (what speedscope, kiln and other exporters write).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{Folded, ProfileError};

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

/// Whether text is a speedscope file: JSON naming speedscope's schema.
pub fn looks_like_speedscope(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&head[..head.len().min(1 << 16)]);
    text.trim_start().starts_with('{') && text.contains("speedscope.app/file-format-schema")
}

#[derive(Deserialize)]
struct InFile {
    shared: InShared,
    profiles: Vec<InProfile>,
}

#[derive(Deserialize)]
struct InShared {
    frames: Vec<InFrame>,
}

#[derive(Deserialize)]
struct InFrame {
    name: String,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum InProfile {
    Sampled {
        #[serde(default)]
        unit: Option<String>,
        samples: Vec<Vec<usize>>,
        weights: Vec<f64>,
    },
    Evented {
        #[serde(default)]
        unit: Option<String>,
        events: Vec<InEvent>,
    },
}

#[derive(Deserialize)]
struct InEvent {
    #[serde(rename = "type")]
    kind: String,
    frame: usize,
    at: f64,
}

/// A speedscope file's profiles, summed into one set of stacks, with the first profile's unit
/// (pprof's words: `nanoseconds`, `bytes`; None for speedscope's "none"). An evented
/// profile's stack weighs the time it was open on top; fractional weights are rounded.
pub fn import(data: &[u8]) -> Result<(Folded, Option<String>), ProfileError> {
    let bad = |why: String| ProfileError::Format(format!("speedscope: {why}"));
    let file: InFile = serde_json::from_slice(data).map_err(|e| bad(e.to_string()))?;
    let frames = &file.shared.frames;
    let name = |i: usize| -> Result<&str, ProfileError> {
        frames
            .get(i)
            .map(|f| f.name.as_str())
            .ok_or_else(|| bad(format!("frame {i} is not in its {} frames", frames.len())))
    };
    let mut folded = Folded::new();
    let mut unit = None;
    let weight = |w: f64| {
        if w.is_finite() && w > 0.0 {
            w.round() as u64
        } else {
            0
        }
    };
    for profile in &file.profiles {
        match profile {
            InProfile::Sampled {
                unit: u,
                samples,
                weights,
            } => {
                unit = unit.or_else(|| u.clone());
                if samples.len() != weights.len() {
                    return Err(bad(format!(
                        "{} samples with {} weights",
                        samples.len(),
                        weights.len()
                    )));
                }
                for (sample, w) in samples.iter().zip(weights) {
                    let stack = (sample.iter())
                        .map(|&i| name(i))
                        .collect::<Result<Vec<_>, _>>()?;
                    if !stack.is_empty() {
                        folded.add(&stack, weight(*w));
                    }
                }
            }
            InProfile::Evented { unit: u, events } => {
                unit = unit.or_else(|| u.clone());
                let mut open: Vec<usize> = Vec::new();
                let mut last = None::<f64>;
                for e in events {
                    if let (Some(t), false) = (last, open.is_empty()) {
                        let stack = (open.iter())
                            .map(|&i| name(i))
                            .collect::<Result<Vec<_>, _>>()?;
                        folded.add(&stack, weight(e.at - t));
                    }
                    last = Some(e.at);
                    match e.kind.as_str() {
                        "O" => open.push(e.frame),
                        "C" => match open.pop() {
                            Some(f) if f == e.frame => {}
                            _ => {
                                return Err(bad(format!(
                                    "a close of frame {} that is not open on top",
                                    e.frame
                                )))
                            }
                        },
                        other => return Err(bad(format!("an event of type {other:?} (O or C)"))),
                    }
                }
            }
        }
    }
    let unit = unit.filter(|u| u != "none");
    Ok((folded, unit))
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

    #[test]
    fn what_kiln_writes_it_reads_back() {
        let (f, _) = Folded::parse("main;a 3\nmain;b 2\nother 1\n").unwrap();
        let json = to_json(&f, "t", Some("nanoseconds"));
        assert!(looks_like_speedscope(json.as_bytes()));
        let (back, unit) = import(json.as_bytes()).unwrap();
        assert_eq!(
            (back.to_text(), unit.as_deref()),
            (f.to_text(), Some("nanoseconds"))
        );
    }

    #[test]
    fn an_evented_profile_weighs_each_stack_by_its_time_on_top() {
        let json = r#"{"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": [{"name": "main"}, {"name": "work"}]},
            "profiles": [{"type": "evented", "name": "t", "unit": "milliseconds", "startValue": 0, "endValue": 10,
              "events": [{"type": "O", "frame": 0, "at": 0}, {"type": "O", "frame": 1, "at": 2},
                         {"type": "C", "frame": 1, "at": 7}, {"type": "C", "frame": 0, "at": 10}]}]}"#;
        let (f, unit) = import(json.as_bytes()).unwrap();
        assert_eq!(f.to_text(), "main 5\nmain;work 5\n");
        assert_eq!(unit.as_deref(), Some("milliseconds"));
        let unbalanced = json.replace(r#"{"type": "C", "frame": 1, "at": 7}, "#, "");
        assert!(import(unbalanced.as_bytes()).is_err());
        assert!(import(br#"{"shared": {"frames": []}, "profiles": [{"type": "sampled", "samples": [[3]], "weights": [1]}]}"#).is_err());
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
