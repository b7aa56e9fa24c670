//! Plan files: a YAML description of a real workload (scenarios of requests with think
//! times, data files, values carried from one response to the next, checks, the load's
//! shape and thresholds), checked whole before a request is sent, and compiled into what
//! the load engine runs (`kiln_load::scenario::Workload` and a `Model`).
//!
//! Every mistake is one error with the file, line and column: unknown keys, wrong types,
//! missing files, a variable used before anything sets it, an impossible load shape.

mod compile;
pub mod har;
mod schema;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kiln_load::scenario::Workload;
use kiln_load::{Model, Target};

pub use compile::LOAD_KEYS;

/// The largest plan file read; a plan is a page or two of YAML, not 100 MB.
pub const MAX_PLAN_BYTES: usize = 4 * 1024 * 1024;

/// A plan, checked and ready to run.
#[derive(Debug)]
pub struct Plan {
    pub workload: Arc<Workload>,
    pub model: Model,
    /// How long each measured phase lasts (for `iterations`, the most it may take).
    pub duration: Duration,
    pub timeout: Option<Duration>,
    pub warmup: Option<Warmup>,
    /// `http2: true`: speak HTTP/2.
    pub http2: bool,
    /// Thresholds as written, with where (the binary parses them).
    pub thresholds: Vec<Located>,
    /// Scenario names and their steps' names, for `kiln plan check`.
    pub outline: Vec<(String, u32, Vec<String>)>,
}

impl Plan {
    /// The plan's first origin: its base URL (or the first step's).
    pub fn base(&self) -> &Target {
        &self.workload.origins[0]
    }
}

/// A text from the plan with its place in the file (line 0 when it came from a flag).
#[derive(Clone, Debug, PartialEq)]
pub struct Located {
    pub text: String,
    pub line: u64,
    pub column: u64,
}

/// Why a plan cannot run, and where.
#[derive(Debug, PartialEq, thiserror::Error)]
pub struct PlanFileError {
    pub file: String,
    /// 0 when the mistake is not at one place in the file (a `--set`, a missing key).
    pub line: u64,
    pub column: u64,
    pub message: String,
}

impl std::fmt::Display for PlanFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.column, self.message
            )
        }
    }
}

/// `--set NAME=VALUE`: a variable, or a load setting (`rate`, `vus`, `load.duration`...).
pub fn parse_set(text: &str) -> Result<(String, String), SetError> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| SetError(text.to_string()))
}

/// A `--set` that is not `NAME=VALUE`.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("--set '{0}': write NAME=VALUE")]
pub struct SetError(pub String);

/// Whether a `kiln run` argument names a plan file rather than a URL.
pub fn is_plan_path(arg: &str) -> bool {
    !arg.contains("://") && (arg.ends_with(".yaml") || arg.ends_with(".yml"))
}

/// Whether a plan's host names are looked up as it is read: a run needs their addresses; a
/// check sends nothing (and must work offline), and a Kubernetes job's names are the
/// cluster's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Now,
    Never,
}

/// Reads and checks a plan file, its hosts looked up; `sets` are `--set` values.
pub fn load(path: &Path, sets: &[(String, String)]) -> Result<Plan, PlanFileError> {
    load_with(path, sets, Lookup::Now)
}

/// Reads and checks a plan file, its hosts looked up or not.
pub fn load_with(
    path: &Path,
    sets: &[(String, String)],
    lookup: Lookup,
) -> Result<Plan, PlanFileError> {
    let file = path.display().to_string();
    let whole = |message: String| PlanFileError {
        file: file.clone(),
        line: 0,
        column: 0,
        message,
    };
    let text = kiln_record::input::read_regular_text(path, MAX_PLAN_BYTES as u64).map_err(|e| {
        whole(match e.kind() {
            std::io::ErrorKind::InvalidData if e.to_string().starts_with("larger") => {
                format!("the file is larger than {MAX_PLAN_BYTES} bytes, the most a plan may be")
            }
            _ => format!("cannot read: {e}"),
        })
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    parse_with(
        &text,
        &file,
        dir,
        sets,
        &|name| std::env::var(name).ok(),
        lookup,
    )
}

/// Checks plan text; data file paths are relative to `dir`.
pub fn parse(
    text: &str,
    file: &str,
    dir: &Path,
    sets: &[(String, String)],
) -> Result<Plan, PlanFileError> {
    parse_with_env(text, file, dir, sets, &|name| std::env::var(name).ok())
}

/// As [`parse`], reading `{{env.NAME}}` through `env`.
pub fn parse_with_env(
    text: &str,
    file: &str,
    dir: &Path,
    sets: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Plan, PlanFileError> {
    parse_with(text, file, dir, sets, env, Lookup::Now)
}

/// As [`parse_with_env`], its hosts looked up or not.
pub fn parse_with(
    text: &str,
    file: &str,
    dir: &Path,
    sets: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
    lookup: Lookup,
) -> Result<Plan, PlanFileError> {
    if text.len() > MAX_PLAN_BYTES {
        return Err(PlanFileError {
            file: file.to_string(),
            line: 0,
            column: 0,
            message: format!("the plan is longer than {MAX_PLAN_BYTES} bytes"),
        });
    }
    let parsed: schema::PlanFile = serde_saphyr::from_str(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        PlanFileError {
            file: file.to_string(),
            line,
            column,
            message: first_line(&e.to_string()),
        }
    })?;
    compile::compile(parsed, file, dir, sets, env, lookup)
}

/// serde-saphyr's message without the source snippet it draws under it (we print the
/// place as file:line:column).
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text).trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    // "line 3 column 9: ..." repeats the place the error already starts with.
    match line
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((place, message)) if place.contains("column") => message.to_string(),
        _ => line.to_string(),
    }
}

/// The plan's warm-up: a fixed time, or `auto` (until the target has settled, at most the
/// cap: `auto:45s`; the default cap is kiln run's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmup {
    Fixed(Duration),
    Auto { cap: Option<Duration> },
}
