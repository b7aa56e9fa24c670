//! The plan file as written: YAML mapped onto these structs. Unknown keys are refused
//! (`deny_unknown_fields`), and the values checked later carry their line and column
//! (`Spanned`), so every error can say where it is.

use std::collections::BTreeMap;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_saphyr::Spanned;

/// A scalar written as a string, a number or a boolean, kept as its text (`rate: 100` and
/// `rate: "100"` mean the same).
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, a number or true/false")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

pub type Text = Spanned<Scalar>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Where relative URLs go: `http://host:port` with an optional path prefix.
    pub base_url: Option<Text>,
    #[serde(default)]
    pub vars: BTreeMap<String, Text>,
    #[serde(default)]
    pub defaults: Option<Spanned<Defaults>>,
    #[serde(default)]
    pub data: BTreeMap<String, Spanned<DataFile>>,
    pub scenarios: Spanned<Vec<Spanned<ScenarioFile>>>,
    #[serde(default)]
    pub load: Option<Spanned<LoadFile>>,
    #[serde(default)]
    pub thresholds: Vec<Text>,
    /// Speak HTTP/2 (ALPN over TLS, prior knowledge over plain TCP).
    #[serde(default)]
    pub http2: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(default)]
    pub headers: BTreeMap<String, Text>,
    /// A think time after every step that has none of its own.
    pub think: Option<Spanned<ThinkFile>>,
    /// `reset` (each iteration starts with no cookies, as k6) or `keep`.
    pub cookies: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataFile {
    pub file: Text,
    /// The column names when the file has no header row.
    pub columns: Option<Vec<String>>,
    /// `all` (one sequence for all VUs) or `vu` (each VU its own).
    pub share: Option<Text>,
    /// `sequential` or `random`.
    pub order: Option<Text>,
    /// `recycle` or `stop`.
    pub at_end: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: Text,
    pub weight: Option<Spanned<u32>>,
    /// The name of a `data:` entry: each iteration takes one of its rows.
    pub data: Option<Text>,
    pub steps: Vec<Spanned<StepFile>>,
}

/// A request, or a group of steps (`group:` with `steps:`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFile {
    pub name: Option<Text>,
    pub method: Option<Text>,
    pub url: Option<Text>,
    #[serde(default)]
    pub headers: BTreeMap<String, Text>,
    pub body: Option<Text>,
    /// A JSON body written as YAML; sent with `content-type: application/json`.
    pub json: Option<Spanned<serde_json::Value>>,
    /// Form fields, in order; sent URL-encoded with
    /// `content-type: application/x-www-form-urlencoded`.
    pub form: Option<Spanned<indexmap::IndexMap<String, Text>>>,
    #[serde(default)]
    pub extract: BTreeMap<String, Spanned<ExtractFile>>,
    pub check: Option<Spanned<CheckFile>>,
    pub think: Option<Spanned<ThinkFile>>,
    pub group: Option<Text>,
    pub steps: Option<Vec<Spanned<StepFile>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractFile {
    pub json: Option<Text>,
    pub regex: Option<Text>,
    pub header: Option<Text>,
    pub cookie: Option<Text>,
    pub default: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckFile {
    /// One status or a list.
    pub status: Option<Spanned<OneOrMany>>,
    pub body_contains: Option<Text>,
    pub body_matches: Option<Text>,
    pub json: Option<Vec<Spanned<JsonCheckFile>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonCheckFile {
    pub path: Text,
    pub equals: Option<serde_json::Value>,
}

/// `200` or `[200, 201]`.
#[derive(Debug, PartialEq)]
pub struct OneOrMany(pub Vec<u16>);

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a status (200) or a list of them ([200, 201])")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<OneOrMany, E> {
                status(v).map(|s| OneOrMany(vec![s]))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<OneOrMany, E> {
                self.visit_u64(u64::try_from(v).map_err(|_| E::custom("a status is 100 to 599"))?)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<u64>()? {
                    out.push(status(v)?);
                }
                Ok(OneOrMany(out))
            }
        }
        fn status<E: de::Error>(v: u64) -> Result<u16, E> {
            u16::try_from(v)
                .ok()
                .filter(|s| (100..600).contains(s))
                .ok_or_else(|| E::custom(format!("{v} is not an HTTP status (100 to 599)")))
        }
        d.deserialize_any(V)
    }
}

/// `think: 500ms` (constant) or one of `{constant: 1s}`, `{uniform: [100ms, 300ms]}`,
/// `{gaussian: {mean: 1s, stddev: 200ms}}`, `{poisson: 1s}`.
#[derive(Debug, PartialEq)]
pub enum ThinkFile {
    Constant(String),
    Uniform(String, String),
    Gaussian { mean: String, stddev: String },
    Poisson(String),
}

impl<'de> Deserialize<'de> for ThinkFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ThinkFile;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a duration (500ms) or one of {constant: D}, {uniform: [MIN, MAX]}, \
                     {gaussian: {mean: D, stddev: D}}, {poisson: MEAN}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ThinkFile, E> {
                Ok(ThinkFile::Constant(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ThinkFile, E> {
                Ok(ThinkFile::Constant(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ThinkFile, E> {
                Ok(ThinkFile::Constant(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ThinkFile, A::Error> {
                let Some(kind) = map.next_key::<String>()? else {
                    return Err(de::Error::custom("an empty think time"));
                };
                let think = match kind.as_str() {
                    "constant" => ThinkFile::Constant(map.next_value::<Scalar>()?.0),
                    "poisson" => ThinkFile::Poisson(map.next_value::<Scalar>()?.0),
                    "uniform" => {
                        let v: Vec<Scalar> = map.next_value()?;
                        match <[Scalar; 2]>::try_from(v) {
                            Ok([lo, hi]) => ThinkFile::Uniform(lo.0, hi.0),
                            Err(_) => return Err(de::Error::custom("uniform takes [MIN, MAX]")),
                        }
                    }
                    "gaussian" => {
                        #[derive(Deserialize)]
                        #[serde(deny_unknown_fields)]
                        struct G {
                            mean: Scalar,
                            stddev: Scalar,
                        }
                        let g: G = map.next_value()?;
                        ThinkFile::Gaussian {
                            mean: g.mean.0,
                            stddev: g.stddev.0,
                        }
                    }
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown think time '{other}' (constant, uniform, gaussian, poisson)"
                        )))
                    }
                };
                if map.next_key::<String>()?.is_some() {
                    return Err(de::Error::custom("a think time has one kind"));
                }
                Ok(think)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadFile {
    /// Closed model: VUs; open model: VUs made before the start.
    pub vus: Option<Text>,
    /// Open model: the most VUs (iterations in flight) kiln runs to keep the rate.
    pub max_vus: Option<Text>,
    /// Closed model: start the VUs evenly over this time.
    pub ramp: Option<Text>,
    pub duration: Option<Text>,
    /// Closed model: iterations in all, shared by the VUs; the run ends when they are done.
    pub iterations: Option<Text>,
    /// Open model: iterations started per second.
    pub rate: Option<Text>,
    /// Open model: `[{duration: 30s, rate: 100}, ...]`, each ramping from the last; closed
    /// model: `[{duration: 30s, vus: 50}, ...]` (from `vus:`, 0 if unset).
    pub stages: Option<Vec<Spanned<StageFile>>>,
    /// `uniform` or `poisson`.
    pub arrivals: Option<Text>,
    pub seed: Option<Text>,
    pub warmup: Option<Text>,
    pub timeout: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageFile {
    pub duration: Scalar,
    pub rate: Option<Scalar>,
    pub vus: Option<Scalar>,
}

impl LoadFile {
    /// Stages that give VU counts (a closed model) rather than rates.
    pub fn has_vu_stages(&self) -> bool {
        self.stages
            .iter()
            .flatten()
            .any(|s| s.value.vus.is_some() && s.value.rate.is_none())
    }
}
