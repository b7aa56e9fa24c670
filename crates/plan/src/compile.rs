//! From the plan as written to what the engine runs, checking everything on the way.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use kiln_load::feeder::{AtEnd, Feeder, Order, Share};
use kiln_load::plan::{parse_duration, RateStage, VuStage};
use kiln_load::scenario::{
    Check, CheckKind, DataUse, Expected, Extract, ExtractFrom, Scenario, Step, Think, Workload,
};
use kiln_load::template::{RenderContext, Slots, Template};
use kiln_load::{Arrivals, Model, Target};
use serde_saphyr::{Location, Spanned};

use crate::schema::{self, Scalar, Text};
use crate::{Located, Lookup, Plan, PlanFileError};

/// The load settings `--set` can change (bare or as `load.NAME`).
pub const LOAD_KEYS: [&str; 10] = [
    "vus",
    "max_vus",
    "ramp",
    "duration",
    "iterations",
    "rate",
    "arrivals",
    "seed",
    "warmup",
    "timeout",
];

/// Scenarios, steps and names a plan may have: far above any real plan, and a bound on
/// what one costs to hold.
const MAX_STEPS: usize = 10_000;
const MAX_NAMES: usize = 1_000;
const MAX_GROUP_DEPTH: usize = 8;

struct Ctx<'a> {
    file: &'a str,
    dir: &'a Path,
    env: &'a dyn Fn(&str) -> Option<String>,
    lookup: Lookup,
    slots: Slots,
    names: Vec<String>,
    name_index: HashMap<String, usize>,
    origins: Vec<Target>,
    /// The base URL's path, put before every relative URL.
    base_path: String,
    steps: usize,
    /// The slots of every variable a template uses (URLs, headers, bodies, checks,
    /// variables' values): a `--set` variable none of them uses is a typo.
    used: HashSet<usize>,
}

impl Ctx<'_> {
    fn target(&self, url: &str) -> Result<Target, kiln_load::plan::PlanError> {
        let target = match self.lookup {
            Lookup::Now => Target::parse(url),
            Lookup::Never => Target::parse_unresolved(url),
        }?;
        if target.grpc {
            // a plan's steps are HTTP requests so far; a gRPC method is `kiln run grpc://...`
            return Err(kiln_load::plan::PlanError::BadUrl {
                url: target.url,
                why: "a plan's steps are HTTP requests; call a gRPC method with kiln run \
                      grpc://host:port/package.Service/Method"
                    .into(),
            });
        }
        Ok(target)
    }

    fn err_at(&self, at: Location, message: impl std::fmt::Display) -> PlanFileError {
        PlanFileError {
            file: self.file.to_string(),
            line: at.line(),
            column: at.column(),
            message: message.to_string(),
        }
    }

    fn err(&self, message: impl std::fmt::Display) -> PlanFileError {
        self.err_at(Location::UNKNOWN, message)
    }

    fn template(&mut self, text: &Text) -> Result<Template, PlanFileError> {
        let env = self.env;
        let t = Template::parse_with_env(&text.value.0, &mut self.slots, env)
            .map_err(|e| self.err_at(text.referenced, e))?;
        self.used.extend(t.vars());
        Ok(t)
    }

    fn name(&mut self, name: String) -> Result<usize, PlanFileError> {
        if let Some(&i) = self.name_index.get(&name) {
            return Ok(i);
        }
        if self.names.len() >= MAX_NAMES {
            return Err(self.err(format!(
                "more than {MAX_NAMES} request names; name steps that are the same request alike"
            )));
        }
        self.names.push(name.clone());
        self.name_index.insert(name, self.names.len() - 1);
        Ok(self.names.len() - 1)
    }

    /// The origin of an absolute URL (added if new) and its path; a relative URL's path
    /// under the base URL.
    fn split_url(&mut self, url: &Text) -> Result<(usize, String), PlanFileError> {
        let text = url.value.0.trim();
        let at = url.referenced;
        // a path that holds "://" further on (`/://`) is still a path
        let scheme_end = text.find("://").filter(|_| !text.starts_with('/'));
        if let Some(scheme_end) = scheme_end {
            let rest = &text[scheme_end + 3..];
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let origin_text = &text[..scheme_end + 3 + authority_end];
            if origin_text.contains("{{") {
                return Err(self.err_at(
                    at,
                    "the scheme, host and port of a URL cannot use variables (they are \
                     resolved and connected to before the run)",
                ));
            }
            let path = &rest[authority_end..];
            let path = if path.starts_with('/') {
                path.to_string()
            } else {
                format!("/{path}")
            };
            let target = self
                .target(origin_text)
                .map_err(|e| self.err_at(at, e.to_string()))?;
            let index = match self
                .origins
                .iter()
                // the same host with other credentials is another origin: a step once sent
                // base_url's user and password for a URL that named its own
                .position(|o| {
                    o.tls == target.tls
                        && o.authority == target.authority
                        && o.basic_auth == target.basic_auth
                }) {
                Some(i) => i,
                None => {
                    self.origins.push(target);
                    self.origins.len() - 1
                }
            };
            return Ok((index, path));
        }
        if self.origins.is_empty() {
            return Err(self.err_at(
                at,
                format!("'{text}' is relative, and the plan has no base_url"),
            ));
        }
        let sep = if text.starts_with('/') || text.is_empty() {
            ""
        } else {
            "/"
        };
        let path = format!("{}{sep}{text}", self.base_path);
        Ok((0, if path.is_empty() { "/".into() } else { path }))
    }
}

pub fn compile(
    parsed: schema::PlanFile,
    file: &str,
    dir: &Path,
    sets: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
    lookup: Lookup,
) -> Result<Plan, PlanFileError> {
    let mut cx = Ctx {
        file,
        dir,
        env,
        lookup,
        slots: Slots::default(),
        names: Vec::new(),
        name_index: HashMap::new(),
        origins: Vec::new(),
        base_path: String::new(),
        steps: 0,
        used: HashSet::new(),
    };
    let schema::PlanFile {
        base_url,
        mut vars,
        defaults,
        data,
        scenarios,
        load,
        thresholds,
        http2,
    } = parsed;
    let mut load = load.map(|l| l.value).unwrap_or_default();
    let set_vars = apply_sets(&mut cx, sets, &mut vars, &mut load)?;

    if let Some(base) = &base_url {
        let target = cx
            .target(&base.value.0)
            .map_err(|e| cx.err_at(base.referenced, e.to_string()))?;
        cx.base_path = target
            .path_and_query
            .split('?')
            .next()
            .unwrap_or("")
            .trim_end_matches('/')
            .to_string();
        cx.origins.push(target);
    }

    let initial_values = resolve_vars(&mut cx, &vars)?;
    let defaults = defaults.map(|d| d.value).unwrap_or_default();
    let reset_cookies = match defaults.cookies.as_ref().map(|c| c.value.0.as_str()) {
        None | Some("reset") => true,
        Some("keep") => false,
        Some(other) => {
            let at = defaults
                .cookies
                .as_ref()
                .map_or(Location::UNKNOWN, |c| c.referenced);
            return Err(cx.err_at(at, format!("cookies: '{other}' is not reset or keep")));
        }
    };
    let default_think = match &defaults.think {
        Some(t) => think(&cx, t)?,
        None => Think::None,
    };
    let mut default_headers = Vec::new();
    for (name, value) in &defaults.headers {
        header_value_text(&cx, name, value)?;
        default_headers.push((
            header_name(&cx, name, value.referenced)?,
            cx.template(value)?,
        ));
    }

    // Data files, opened now: a missing file is an error before the run.
    let mut feeders = Vec::new();
    let mut feeder_index = HashMap::new();
    for (name, spec) in &data {
        let feeder = open_feeder(&cx, name, spec)?;
        feeder_index.insert(name.clone(), feeders.len());
        feeders.push(Arc::new(feeder));
    }

    if scenarios.value.is_empty() {
        return Err(cx.err_at(scenarios.referenced, "scenarios: the plan has none"));
    }
    let global_set: HashSet<usize> = (0..cx.slots.len())
        .filter(|&s| initial_values.get(s).is_some_and(Option::is_some))
        .collect();
    let mut compiled = Vec::new();
    let mut outline = Vec::new();
    for sc in &scenarios.value {
        let sc_at = sc.referenced;
        let sc = &sc.value;
        let weight = sc.weight.as_ref().map_or(1, |w| w.value);
        if weight == 0 || weight > 1_000_000 {
            let at = sc.weight.as_ref().map_or(sc_at, |w| w.referenced);
            return Err(cx.err_at(at, "weight is 1 to 1000000"));
        }
        let mut known = global_set.clone();
        let data_use = match &sc.data {
            None => None,
            Some(name) => {
                let &index = feeder_index.get(&name.value.0).ok_or_else(|| {
                    cx.err_at(
                        name.referenced,
                        format!(
                            "no data named '{}' (data: has {})",
                            name.value.0,
                            list(data.keys())
                        ),
                    )
                })?;
                let slots: Vec<usize> = feeders[index]
                    .columns
                    .iter()
                    .map(|c| cx.slots.slot(c))
                    .collect();
                known.extend(slots.iter().copied());
                Some(DataUse {
                    feeder: index,
                    slots,
                })
            }
        };
        let mut steps = Vec::new();
        let step_defaults = StepDefaults {
            headers: &default_headers,
            think: &default_think,
        };
        for step in &sc.steps {
            flatten_step(&mut cx, step, "", 0, &step_defaults, &mut known, &mut steps)?;
        }
        if steps.is_empty() {
            return Err(cx.err_at(
                sc_at,
                format!("scenario '{}' has no steps", sc.name.value.0),
            ));
        }
        outline.push((
            sc.name.value.0.clone(),
            weight,
            steps
                .iter()
                .map(|s: &Step| cx.names[s.name].clone())
                .collect(),
        ));
        compiled.push(Scenario {
            name: sc.name.value.0.clone(),
            weight,
            data: data_use,
            steps,
        });
    }

    let (model, duration, iterations) = load_shape(&cx, &load)?;
    let timeout = optional_duration(&cx, load.timeout.as_ref())?;
    let warmup = load
        .warmup
        .as_ref()
        .map(|w| warmup_of(&cx, w))
        .transpose()?;
    // A `--set` name that is no load setting and that nothing uses is a typo (`--set vsu=10`
    // once did nothing, silently); a variable the file declares may go unused.
    if let Some(unused) = set_vars.iter().find(|(name, declared)| {
        !declared && cx.slots.get(name).is_none_or(|s| !cx.used.contains(&s))
    }) {
        return Err(cx.err(format!(
            "--set {}: no load setting has this name and nothing in the plan uses \
             {{{{{}}}}} (load settings: {})",
            unused.0,
            unused.0,
            LOAD_KEYS.join(", ")
        )));
    }
    let mut initial = initial_values;
    initial.resize(cx.slots.len(), None);
    let workload = Workload {
        origins: cx.origins.clone(),
        scenarios: compiled,
        names: Arc::from(cx.names.clone()),
        slot_names: (0..cx.slots.len())
            .map(|s| cx.slots.name(s).to_string())
            .collect(),
        initial,
        feeders,
        reset_cookies,
        iterations,
    };
    Ok(Plan {
        workload: Arc::new(workload),
        model,
        duration,
        timeout,
        warmup,
        http2,
        thresholds: thresholds
            .iter()
            .map(|t| Located {
                text: t.value.0.clone(),
                line: t.referenced.line(),
                column: t.referenced.column(),
            })
            .collect(),
        outline,
    })
}

fn list<'a>(items: impl Iterator<Item = &'a String>) -> String {
    let all: Vec<&str> = items.map(String::as_str).collect();
    if all.is_empty() {
        "none".into()
    } else {
        all.join(", ")
    }
}

fn located(value: &str) -> Text {
    Spanned::new(
        Scalar(value.to_string()),
        Location::UNKNOWN,
        Location::UNKNOWN,
    )
}

/// `--set`: a variable, or a load setting when the name is one and no variable has it.
/// Returns the variables set, each with whether the file declares it in `vars:`.
fn apply_sets(
    cx: &mut Ctx,
    sets: &[(String, String)],
    vars: &mut BTreeMap<String, Text>,
    load: &mut schema::LoadFile,
) -> Result<Vec<(String, bool)>, PlanFileError> {
    let mut set_vars = Vec::new();
    let in_file: HashSet<String> = vars.keys().cloned().collect();
    for (key, value) in sets {
        let load_key = key
            .strip_prefix("load.")
            .or_else(|| (!vars.contains_key(key)).then_some(key.as_str()))
            .filter(|k| LOAD_KEYS.contains(k));
        let var = key.strip_prefix("vars.").unwrap_or(key);
        let v = Some(located(value));
        match load_key {
            // As k6's --vus and --duration: a flat load in place of the plan's VU stages.
            Some(k @ ("vus" | "ramp" | "duration")) => {
                if load.has_vu_stages() {
                    load.stages = None;
                }
                match k {
                    "vus" => load.vus = v,
                    "ramp" => load.ramp = v,
                    _ => load.duration = v,
                }
            }
            Some("max_vus") => load.max_vus = v,
            Some("iterations") => load.iterations = v,
            Some("rate") => {
                load.rate = v;
                load.stages = None;
            }
            Some("arrivals") => load.arrivals = v,
            Some("seed") => load.seed = v,
            Some("warmup") => load.warmup = v,
            Some("timeout") => load.timeout = v,
            _ => {
                kiln_load::template::check_name(var)
                    .map_err(|e| cx.err(format!("--set {key}: {e}")))?;
                vars.insert(var.to_string(), located(value));
                set_vars.push((var.to_string(), in_file.contains(var)));
            }
        }
    }
    Ok(set_vars)
}

/// Computes the plan's variables once: each may use the environment and other variables
/// (never itself, directly or through others).
fn resolve_vars(
    cx: &mut Ctx,
    vars: &BTreeMap<String, Text>,
) -> Result<Vec<Option<String>>, PlanFileError> {
    let mut templates = BTreeMap::new();
    for (name, value) in vars {
        kiln_load::template::check_name(name).map_err(|e| cx.err_at(value.referenced, e))?;
        let slot = cx.slots.slot(name);
        templates.insert(slot, (cx.template(value)?, value.referenced));
    }
    let mut values: Vec<Option<String>> = vec![None; cx.slots.len()];
    let mut rng = fastrand_seed();
    // Resolve in dependency order; a round that resolves nothing means a cycle or a
    // reference to something that is not a variable.
    let mut pending: Vec<usize> = templates.keys().copied().collect();
    while !pending.is_empty() {
        let before = pending.len();
        let mut still = Vec::new();
        for slot in pending {
            let (template, at) = &templates[&slot];
            if let Some(missing) = template.vars().find(|v| !templates.contains_key(v)) {
                return Err(cx.err_at(
                    *at,
                    format!(
                        "vars: '{}' uses {{{{{}}}}}, which is not one of the plan's vars \
                         (vars may use env and other vars only)",
                        cx.slots.name(slot),
                        cx.slots.name(missing)
                    ),
                ));
            }
            let mut rcx = RenderContext {
                values: &values,
                vu: 0,
                iteration: 0,
                rng: &mut rng,
            };
            match template.render_to_string(&mut rcx) {
                Ok(text) => values[slot] = Some(text),
                Err(_) => still.push(slot),
            }
        }
        if still.len() == before {
            let names: Vec<&str> = still.iter().map(|&s| cx.slots.name(s)).collect();
            let at = templates[&still[0]].1;
            return Err(cx.err_at(
                at,
                format!("vars: {} refer to each other in a circle", names.join(", ")),
            ));
        }
        pending = still;
    }
    Ok(values)
}

fn fastrand_seed() -> kiln_load::template::Rng {
    kiln_load::template::Rng::new()
}

fn open_feeder(
    cx: &Ctx,
    name: &str,
    spec: &Spanned<schema::DataFile>,
) -> Result<Feeder, PlanFileError> {
    let at = spec.referenced;
    let spec = &spec.value;
    let pick =
        |field: &Option<Text>, choices: &[&str], what: &str| -> Result<usize, PlanFileError> {
            match field {
                None => Ok(0),
                Some(t) => choices.iter().position(|c| *c == t.value.0).ok_or_else(|| {
                    cx.err_at(
                        t.referenced,
                        format!(
                            "{what}: '{}' is not one of {}",
                            t.value.0,
                            choices.join(", ")
                        ),
                    )
                }),
            }
        };
    let share = [Share::All, Share::Vu][pick(&spec.share, &["all", "vu"], "share")?];
    let order =
        [Order::Sequential, Order::Random][pick(&spec.order, &["sequential", "random"], "order")?];
    let at_end = [AtEnd::Recycle, AtEnd::Stop][pick(&spec.at_end, &["recycle", "stop"], "at_end")?];
    let path = cx.dir.join(&spec.file.value.0);
    Feeder::open(name, &path, spec.columns.clone(), share, order, at_end)
        .map_err(|e| cx.err_at(spec.file.referenced, format!("data '{name}': {e}")))
        .map_err(|e| {
            if e.line == 0 {
                cx.err_at(at, e.message)
            } else {
                e
            }
        })
}

/// A header's value as written may not hold a line break or another control character (a tab
/// aside): CR/LF would end the header and start another, and the request would not be sent.
fn header_value_text(cx: &Ctx, name: &str, value: &Text) -> Result<(), PlanFileError> {
    match outside_placeholders(&value.value.0).find(|c| c.is_control() && *c != '\t') {
        Some(c) => Err(cx.err_at(
            value.referenced,
            format!("header '{name}' holds {c:?}, which no header value may hold"),
        )),
        None => Ok(()),
    }
}

/// The characters of a template's text outside its `{{...}}` placeholders (what is sent as
/// written).
fn outside_placeholders(text: &str) -> impl Iterator<Item = char> + '_ {
    let mut depth_open = false;
    let mut chars = text.chars().peekable();
    std::iter::from_fn(move || loop {
        let c = chars.next()?;
        if !depth_open && c == '{' && chars.peek() == Some(&'{') {
            chars.next();
            depth_open = true;
        } else if depth_open && c == '}' && chars.peek() == Some(&'}') {
            chars.next();
            depth_open = false;
        } else if !depth_open {
            return Some(c);
        }
    })
}

fn header_name(cx: &Ctx, name: &str, at: Location) -> Result<HeaderName, PlanFileError> {
    HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| cx.err_at(at, format!("'{name}' is not a header name")))
}

fn parse_dur(cx: &Ctx, text: &str, at: Location) -> Result<Duration, PlanFileError> {
    parse_duration(text).map_err(|e| cx.err_at(at, from_set(at, e.to_string())))
}

/// Marks a message about a value that came from `--set` (it has no place in the file).
fn from_set(at: Location, message: String) -> String {
    if at.line() == 0 {
        format!("{message} (from --set)")
    } else {
        message
    }
}

/// `warmup: 30s`, `warmup: auto` or `warmup: auto:45s`.
fn warmup_of(cx: &Ctx, t: &Text) -> Result<crate::Warmup, PlanFileError> {
    let text = t.value.0.trim();
    match text.strip_prefix("auto") {
        None => Ok(crate::Warmup::Fixed(parse_dur(cx, text, t.referenced)?)),
        Some("") => Ok(crate::Warmup::Auto { cap: None }),
        Some(rest) => match rest.strip_prefix(':') {
            Some(cap) => Ok(crate::Warmup::Auto {
                cap: Some(parse_dur(cx, cap, t.referenced)?),
            }),
            None => Err(cx.err_at(
                t.referenced,
                from_set(
                    t.referenced,
                    format!("warmup: {text}: auto takes a cap as auto:DURATION, e.g. auto:30s"),
                ),
            )),
        },
    }
}

fn optional_duration(cx: &Ctx, t: Option<&Text>) -> Result<Option<Duration>, PlanFileError> {
    t.map(|t| parse_dur(cx, &t.value.0, t.referenced))
        .transpose()
}

fn think(cx: &Ctx, t: &Spanned<schema::ThinkFile>) -> Result<Think, PlanFileError> {
    let d = |text: &str| parse_dur(cx, text, t.referenced);
    Ok(match &t.value {
        schema::ThinkFile::Constant(c) => Think::Constant(d(c)?),
        schema::ThinkFile::Poisson(m) => Think::Poisson(d(m)?),
        schema::ThinkFile::Uniform(lo, hi) => {
            let (lo, hi) = (d(lo)?, d(hi)?);
            if lo > hi {
                return Err(cx.err_at(t.referenced, "uniform: the minimum is above the maximum"));
            }
            Think::Uniform(lo, hi)
        }
        schema::ThinkFile::Gaussian { mean, stddev } => Think::Gaussian {
            mean: d(mean)?,
            stddev: d(stddev)?,
        },
    })
}

struct StepDefaults<'a> {
    headers: &'a [(HeaderName, Template)],
    think: &'a Think,
}

/// Compiles a step (or a group's steps, their names prefixed with the group's), checking
/// that every variable it uses is set by then.
fn flatten_step(
    cx: &mut Ctx,
    step: &Spanned<schema::StepFile>,
    prefix: &str,
    depth: usize,
    defaults: &StepDefaults,
    known: &mut HashSet<usize>,
    out: &mut Vec<Step>,
) -> Result<(), PlanFileError> {
    let at = step.referenced;
    let s = &step.value;
    if let Some(group) = &s.group {
        let inner = s
            .steps
            .as_ref()
            .ok_or_else(|| cx.err_at(at, "a group needs steps:"))?;
        if s.url.is_some()
            || s.method.is_some()
            || s.body.is_some()
            || s.json.is_some()
            || s.form.is_some()
        {
            return Err(cx.err_at(at, "a group has steps:, not a request of its own"));
        }
        if depth >= MAX_GROUP_DEPTH {
            return Err(cx.err_at(at, format!("groups nest at most {MAX_GROUP_DEPTH} deep")));
        }
        let prefix = format!("{prefix}{}/", group.value.0);
        for inner_step in inner {
            flatten_step(cx, inner_step, &prefix, depth + 1, defaults, known, out)?;
        }
        return Ok(());
    }
    if s.steps.is_some() {
        return Err(cx.err_at(at, "steps: inside a step needs group: NAME"));
    }
    cx.steps += 1;
    if cx.steps > MAX_STEPS {
        return Err(cx.err_at(at, format!("more than {MAX_STEPS} steps")));
    }
    let url = s
        .url
        .as_ref()
        .ok_or_else(|| cx.err_at(at, "a step needs url: (or group: with steps:)"))?;
    let method_text = s.method.as_ref().map_or("GET", |m| m.value.0.as_str());
    let method = kiln_load::RequestSpec::parse_method(method_text).map_err(|e| {
        cx.err_at(
            s.method.as_ref().map_or(at, |m| m.referenced),
            e.to_string(),
        )
    })?;
    let (origin, path_text) = cx.split_url(url)?;
    if let Some(c) = outside_placeholders(&path_text).find(|c| c.is_whitespace() || c.is_control())
    {
        return Err(cx.err_at(
            url.referenced,
            format!(
                "the URL's path holds {c:?}, which would end the request line: encode it \
                 (a space as %20)"
            ),
        ));
    }
    let path = cx.template(&Spanned::new(
        Scalar(path_text.clone()),
        url.referenced,
        url.defined,
    ))?;
    let name_text = match &s.name {
        Some(n) => n.value.0.clone(),
        None => format!("{method} {path_text}"),
    };
    let name = cx.name(format!("{prefix}{name_text}"))?;

    let mut headers: Vec<(HeaderName, Template)> = Vec::new();
    for (n, v) in &s.headers {
        header_value_text(cx, n, v)?;
        headers.push((header_name(cx, n, v.referenced)?, cx.template(v)?));
    }
    for (n, v) in defaults.headers {
        if !headers.iter().any(|(h, _)| h == n) {
            headers.push((n.clone(), v.clone()));
        }
    }
    let mut content_type = |value: &str| {
        if !headers.iter().any(|(h, _)| h == http::header::CONTENT_TYPE) {
            headers.push((http::header::CONTENT_TYPE, Template::literal(value)));
        }
    };
    let body = match (&s.body, &s.json, &s.form) {
        (Some(b), None, None) => cx.template(b)?,
        (None, Some(j), None) => {
            let text = serde_json::to_string(&j.value)
                .map_err(|e| cx.err_at(j.referenced, e.to_string()))?;
            content_type("application/json");
            // A value stands inside a JSON string: a quote in a user name stays in the string.
            cx.template(&Spanned::new(Scalar(text), j.referenced, j.defined))?
                .json_escaped()
        }
        (None, None, Some(f)) => {
            content_type("application/x-www-form-urlencoded");
            let mut fields = Vec::new();
            for (i, (name, value)) in f.value.iter().enumerate() {
                if i > 0 {
                    fields.push(Template::literal("&"));
                }
                fields.push(Template::literal(name).form_encoded());
                fields.push(Template::literal("="));
                fields.push(cx.template(value)?.form_encoded());
            }
            Template::concat(fields)
        }
        (None, None, None) => Template::default(),
        _ => {
            let at = [
                s.json.as_ref().map(|j| j.referenced),
                s.form.as_ref().map(|f| f.referenced),
            ]
            .into_iter()
            .flatten()
            .next()
            .unwrap_or(at);
            return Err(cx.err_at(at, "a step has one of body:, json:, form:"));
        }
    };

    // Every variable used must be set by now: by vars/--set, the scenario's data, or an
    // extraction of an earlier step.
    let used: Vec<usize> = path
        .vars()
        .chain(headers.iter().flat_map(|(_, t)| t.vars()))
        .chain(body.vars())
        .collect();
    if let Some(&missing) = used.iter().find(|v| !known.contains(v)) {
        return Err(cx.err_at(
            at,
            format!(
                "step '{}' uses {{{{{}}}}} before anything sets it (set it in vars:, with \
                 --set {}=VALUE, as a column of the scenario's data, or with extract: in an \
                 earlier step)",
                cx.names[name],
                cx.slots.name(missing),
                cx.slots.name(missing)
            ),
        ));
    }

    let checks = match &s.check {
        Some(c) => compile_checks(cx, c)?,
        None => Vec::new(),
    };
    let check_vars: Vec<usize> = checks.iter().flat_map(check_vars).collect();
    if let Some(&missing) = check_vars.iter().find(|v| !known.contains(v)) {
        return Err(cx.err_at(
            s.check.as_ref().map_or(at, |c| c.referenced),
            format!(
                "a check of step '{}' uses {{{{{}}}}} before anything sets it",
                cx.names[name],
                cx.slots.name(missing)
            ),
        ));
    }
    let mut extract = Vec::new();
    for (var, spec) in &s.extract {
        kiln_load::template::check_name(var).map_err(|e| cx.err_at(spec.referenced, e))?;
        let slot = cx.slots.slot(var);
        extract.push(compile_extract(cx, slot, spec)?);
        known.insert(slot);
    }
    let think = match &s.think {
        Some(t) => think(cx, t)?,
        None => defaults.think.clone(),
    };
    out.push(Step {
        name,
        origin,
        method,
        path,
        headers,
        body,
        extract,
        checks,
        think,
    });
    Ok(())
}

/// The variables a check's texts use.
fn check_vars(check: &Check) -> Vec<usize> {
    match &check.kind {
        CheckKind::BodyContains(t)
        | CheckKind::Json {
            equals: Some(Expected::Text(t)),
            ..
        } => t.vars().collect(),
        _ => Vec::new(),
    }
}

fn compile_extract(
    cx: &mut Ctx,
    slot: usize,
    spec: &Spanned<schema::ExtractFile>,
) -> Result<Extract, PlanFileError> {
    let at = spec.referenced;
    let e = &spec.value;
    let given = [&e.json, &e.regex, &e.header, &e.cookie]
        .iter()
        .filter(|x| x.is_some())
        .count();
    if given != 1 {
        return Err(cx.err_at(
            at,
            "an extraction has one of json:, regex:, header:, cookie:",
        ));
    }
    let from = if let Some(j) = &e.json {
        ExtractFrom::Json(json_path(cx, j)?)
    } else if let Some(r) = &e.regex {
        ExtractFrom::Regex(regex(cx, r)?)
    } else if let Some(h) = &e.header {
        ExtractFrom::Header(h.value.0.clone())
    } else if let Some(c) = &e.cookie {
        ExtractFrom::Cookie(c.value.0.clone())
    } else {
        return Err(cx.err_at(
            at,
            "an extraction has one of json:, regex:, header:, cookie:",
        ));
    };
    Ok(Extract {
        slot,
        from,
        default: e.default.as_ref().map(|d| d.value.0.clone()),
    })
}

fn json_path(cx: &Ctx, t: &Text) -> Result<serde_json_path::JsonPath, PlanFileError> {
    serde_json_path::JsonPath::parse(&t.value.0)
        .map_err(|e| cx.err_at(t.referenced, format!("JSONPath '{}': {e}", t.value.0)))
}

fn regex(cx: &Ctx, t: &Text) -> Result<regex::Regex, PlanFileError> {
    regex::RegexBuilder::new(&t.value.0)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            cx.err_at(
                t.referenced,
                format!("regex: {}", first_line_of(&e.to_string())),
            )
        })
}

fn first_line_of(text: &str) -> String {
    text.lines().last().unwrap_or(text).trim().to_string()
}

fn compile_checks(
    cx: &mut Ctx,
    spec: &Spanned<schema::CheckFile>,
) -> Result<Vec<Check>, PlanFileError> {
    let c = &spec.value;
    let mut out = Vec::new();
    if let Some(status) = &c.status {
        let codes = status.value.0.clone();
        if codes.is_empty() {
            return Err(cx.err_at(status.referenced, "status: lists no status"));
        }
        let label = format!(
            "status is {}",
            codes
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        );
        out.push(Check {
            label,
            kind: CheckKind::Status(codes),
        });
    }
    if let Some(text) = &c.body_contains {
        out.push(Check {
            label: format!("body contains {:?}", text.value.0),
            kind: CheckKind::BodyContains(cx.template(text)?),
        });
    }
    if let Some(re) = &c.body_matches {
        out.push(Check {
            label: format!("body matches {:?}", re.value.0),
            kind: CheckKind::BodyMatches(regex(cx, re)?),
        });
    }
    for j in c.json.iter().flatten() {
        let path = json_path(cx, &j.value.path)?;
        let label = match &j.value.equals {
            Some(v) => format!("{} is {v}", j.value.path.value.0),
            None => format!("{} exists", j.value.path.value.0),
        };
        let equals = match &j.value.equals {
            Some(serde_json::Value::String(text)) => Some(Expected::Text(
                cx.template(&Spanned::new(Scalar(text.clone()), j.referenced, j.defined))?,
            )),
            Some(other) => Some(Expected::Value(other.clone())),
            None => None,
        };
        out.push(Check {
            label,
            kind: CheckKind::Json { path, equals },
        });
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(cx: &Ctx, t: &Text, what: &str) -> Result<T, PlanFileError> {
    t.value.0.trim().parse().map_err(|_| {
        cx.err_at(
            t.referenced,
            from_set(
                t.referenced,
                format!("{what}: '{}' is not a number", t.value.0),
            ),
        )
    })
}

/// The load's shape: closed (VUs) unless a rate or stages make it open.
fn load_shape(
    cx: &Ctx,
    load: &schema::LoadFile,
) -> Result<(Model, Duration, Option<u64>), PlanFileError> {
    let range = |t: &Text, ok: bool, why: &str| {
        if ok {
            Ok(())
        } else {
            Err(cx.err_at(t.referenced, from_set(t.referenced, why.to_string())))
        }
    };
    let vus = match &load.vus {
        Some(t) => {
            let n: usize = number(cx, t, "vus")?;
            range(t, (1..=100_000).contains(&n), "vus is 1 to 100000")?;
            Some(n)
        }
        None => None,
    };
    let duration = optional_duration(cx, load.duration.as_ref())?;
    if let (Some(d), Some(t)) = (duration, &load.duration) {
        range(t, !d.is_zero(), "duration must be more than 0")?;
    }
    let vu_stages = load.has_vu_stages();
    let open = load.rate.is_some() || (load.stages.is_some() && !vu_stages);
    if !open {
        for (t, what) in [(&load.max_vus, "max_vus"), (&load.arrivals, "arrivals")] {
            if let Some(t) = t {
                return Err(cx.err_at(
                    t.referenced,
                    format!("{what} is for the open model (rate: or stages:)"),
                ));
            }
        }
        let iterations = match &load.iterations {
            Some(t) => {
                let n: u64 = number(cx, t, "iterations")?;
                range(t, n > 0, "iterations must be more than 0")?;
                Some(n)
            }
            None => None,
        };
        // With iterations and no duration, the run lasts until they are done (at most 1 h).
        let duration = duration.unwrap_or(if iterations.is_some() {
            Duration::from_secs(3600)
        } else {
            Duration::from_secs(10)
        });
        let ramp = optional_duration(cx, load.ramp.as_ref())?.unwrap_or_default();
        if let Some(list) = load.stages.as_ref().filter(|_| vu_stages) {
            let stages = vu_stages_of(cx, load, list, vus.unwrap_or(0))?;
            let total = stages.iter().map(|s| s.duration).sum();
            let most = stages.iter().map(|s| s.target_vus).max().unwrap_or(0);
            let model = Model::Closed {
                connections: most,
                think_time: Duration::ZERO,
                ramp_up: Duration::ZERO,
                stages,
            };
            return Ok((model, total, iterations));
        }
        let model = Model::Closed {
            connections: vus.unwrap_or(1),
            think_time: Duration::ZERO,
            ramp_up: ramp,
            stages: Vec::new(),
        };
        return Ok((model, duration, iterations));
    }
    for (t, what) in [(&load.iterations, "iterations"), (&load.ramp, "ramp")] {
        if let Some(t) = t {
            return Err(cx.err_at(
                t.referenced,
                format!("{what} is for the closed model (vus: without rate:)"),
            ));
        }
    }
    let stages = match (&load.rate, &load.stages) {
        (Some(t), None) => {
            let rate: f64 = number(cx, t, "rate")?;
            range(
                t,
                rate.is_finite() && rate > 0.0 && rate <= 10_000_000.0,
                "rate is more than 0, at most 10000000",
            )?;
            RateStage::steady(rate, duration.unwrap_or(Duration::from_secs(10)))
        }
        (None, Some(list)) => {
            let mut stages = Vec::new();
            for s in list {
                let d = parse_dur(cx, &s.value.duration.0, s.referenced)?;
                let Some(rate) = s.value.rate.as_ref().filter(|_| s.value.vus.is_none()) else {
                    return Err(cx.err_at(
                        s.referenced,
                        "each stage has a rate: (open model) or each has vus: (closed), not both",
                    ));
                };
                let rate: f64 = rate.0.trim().parse().map_err(|_| {
                    cx.err_at(s.referenced, format!("rate: '{}' is not a number", rate.0))
                })?;
                if !(0.0..=10_000_000.0).contains(&rate) {
                    return Err(cx.err_at(s.referenced, "a stage's rate is 0 to 10000000"));
                }
                stages.push(RateStage {
                    duration: d,
                    target_rate: rate,
                });
            }
            if stages
                .iter()
                .map(|s| s.duration)
                .sum::<Duration>()
                .is_zero()
            {
                let at = list.first().map_or(Location::UNKNOWN, |s| s.referenced);
                return Err(cx.err_at(at, "the stages last no time"));
            }
            if let Some(t) = &load.duration {
                return Err(cx.err_at(t.referenced, "with stages:, the stages give the duration"));
            }
            stages
        }
        _ => {
            let at = load
                .rate
                .as_ref()
                .map_or(Location::UNKNOWN, |r| r.referenced);
            return Err(cx.err_at(at, "rate: or stages:, not both"));
        }
    };
    let total: Duration = stages.iter().map(|s| s.duration).sum();
    let vus = vus.unwrap_or(10);
    let max_vus = match &load.max_vus {
        Some(t) => {
            let n: usize = number(cx, t, "max_vus")?;
            range(t, n >= vus && n <= 100_000, "max_vus is from vus to 100000")?;
            n
        }
        None => (vus * 10).clamp(vus, 100_000),
    };
    let arrivals = match load.arrivals.as_ref().map(|a| a.value.0.as_str()) {
        None | Some("uniform") => Arrivals::Uniform,
        Some("poisson") => Arrivals::Poisson {
            seed: match &load.seed {
                Some(t) => number(cx, t, "seed")?,
                None => clock_seed(),
            },
        },
        Some(other) => {
            let at = load
                .arrivals
                .as_ref()
                .map_or(Location::UNKNOWN, |a| a.referenced);
            return Err(cx.err_at(at, format!("arrivals: '{other}' is not uniform or poisson")));
        }
    };
    Ok((
        Model::Open {
            stages,
            connections: vus,
            max_connections: max_vus,
            arrivals,
        },
        total,
        None,
    ))
}

/// A closed model's VU stages, from `start` VUs: each stage has `vus:` and no `rate:`; the
/// stages give the duration (no `duration:` or `ramp:` beside them).
fn vu_stages_of(
    cx: &Ctx,
    load: &schema::LoadFile,
    list: &[Spanned<schema::StageFile>],
    start: usize,
) -> Result<Vec<VuStage>, PlanFileError> {
    for (t, what) in [(&load.duration, "duration"), (&load.ramp, "ramp")] {
        if let Some(t) = t {
            return Err(cx.err_at(
                t.referenced,
                format!("with stages:, the stages give the {what}"),
            ));
        }
    }
    let mut stages = Vec::new();
    if start > 0 {
        stages.push(VuStage {
            duration: Duration::ZERO,
            target_vus: start,
        });
    }
    for s in list {
        let Some(vus) = s.value.vus.as_ref().filter(|_| s.value.rate.is_none()) else {
            return Err(cx.err_at(
                s.referenced,
                "each stage has a rate: (open model) or each has vus: (closed), not both",
            ));
        };
        let n: usize = vus
            .0
            .trim()
            .parse()
            .ok()
            .filter(|n| *n <= 100_000)
            .ok_or_else(|| {
                cx.err_at(
                    s.referenced,
                    format!("vus: '{}' is not a number of VUs (0 to 100000)", vus.0),
                )
            })?;
        stages.push(VuStage {
            duration: parse_dur(cx, &s.value.duration.0, s.referenced)?,
            target_vus: n,
        });
    }
    let at = list.first().map_or(Location::UNKNOWN, |s| s.referenced);
    if stages
        .iter()
        .map(|s| s.duration)
        .sum::<Duration>()
        .is_zero()
    {
        return Err(cx.err_at(at, "the stages last no time"));
    }
    if stages.iter().all(|s| s.target_vus == 0) {
        return Err(cx.err_at(at, "the stages never run a VU"));
    }
    Ok(stages)
}

fn clock_seed() -> u64 {
    kiln_record::clock::unix_ns_now().max(1)
}
