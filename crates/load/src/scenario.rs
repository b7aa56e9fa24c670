//! Scenarios: what a plan's virtual users do. A VU runs iterations; an iteration picks a
//! scenario by weight, takes a row of its data, and sends its steps in order, each rendered
//! from templates, its response checked and read for the variables later steps use.
//!
//! Everything here is built and checked before the run (by `kiln-plan`); the engine only
//! runs it. Per-name statistics go to the run record under each step's name.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use regex::Regex;
use serde_json_path::JsonPath;

use crate::feeder::{Feeder, Row, VuCursor};
use crate::http1::{Captured, RequestParts};
use crate::target::Target;
use crate::template::{RenderContext, Template};

/// Everything a plan's VUs need, shared read-only by every load thread.
#[derive(Debug)]
pub struct Workload {
    /// Where requests go; a step names one by index. The first is the plan's base URL.
    pub origins: Vec<Target>,
    pub scenarios: Vec<Scenario>,
    /// Step names, the keys of the per-name statistics; a step refers to one by index.
    pub names: Arc<[String]>,
    /// Variable names by slot (for messages).
    pub slot_names: Vec<String>,
    /// Values every iteration starts with, by slot: the plan's `vars` and `--set`.
    pub initial: Vec<Option<String>>,
    pub feeders: Vec<Arc<Feeder>>,
    /// Start each iteration with an empty cookie jar (k6's default); else a VU keeps its
    /// cookies from one iteration to the next.
    pub reset_cookies: bool,
    /// Closed model: the total iterations of the run, shared by all VUs (k6's
    /// shared-iterations); the phase ends when they are done.
    pub iterations: Option<u64>,
}

impl Workload {
    /// Picks a scenario by weight.
    pub fn pick(&self, rng: &mut fastrand::Rng) -> &Scenario {
        let total: u64 = self.scenarios.iter().map(|s| u64::from(s.weight)).sum();
        let mut x = rng.u64(..total.max(1));
        for s in &self.scenarios {
            if x < u64::from(s.weight) {
                return s;
            }
            x -= u64::from(s.weight);
        }
        &self.scenarios[0]
    }
}

#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub weight: u32,
    /// The data this scenario's iterations take a row of, if any.
    pub data: Option<DataUse>,
    pub steps: Vec<Step>,
}

/// A scenario's data: which feeder, and the slot each of its columns fills.
#[derive(Debug)]
pub struct DataUse {
    pub feeder: usize,
    pub slots: Vec<usize>,
}

#[derive(Debug)]
pub struct Step {
    /// Index into [`Workload::names`].
    pub name: usize,
    pub origin: usize,
    pub method: Method,
    /// Path and query, starting with `/`.
    pub path: Template,
    pub headers: Vec<(HeaderName, Template)>,
    pub body: Template,
    pub extract: Vec<Extract>,
    pub checks: Vec<Check>,
    pub think: Think,
}

impl Step {
    /// Whether an explicit status check decides which statuses are failures.
    pub fn checks_status(&self) -> bool {
        self.checks
            .iter()
            .any(|c| matches!(c.kind, CheckKind::Status(_)))
    }
}

/// A value read from a response into a variable.
#[derive(Debug)]
pub struct Extract {
    pub slot: usize,
    pub from: ExtractFrom,
    /// Used when the value is not found; without one, not finding it fails the iteration.
    pub default: Option<String>,
}

#[derive(Debug)]
pub enum ExtractFrom {
    /// The first node an RFC 9535 JSONPath selects in the body.
    Json(JsonPath),
    /// The first match in the body: its first group if it has one, else the whole match.
    Regex(Regex),
    Header(String),
    /// A cookie the response set.
    Cookie(String),
}

#[derive(Debug)]
pub struct Check {
    /// How it is named in messages: `status is 200`, `body contains "ok"`.
    pub label: String,
    pub kind: CheckKind,
}

#[derive(Debug)]
pub enum CheckKind {
    Status(Vec<u16>),
    /// The text, rendered for the iteration (`body_contains: "{{user}}"`).
    BodyContains(Template),
    BodyMatches(Regex),
    /// The path selects a node; equal to the value when one is given.
    Json {
        path: JsonPath,
        equals: Option<Expected>,
    },
}

/// What a JSON check expects: a value as written, or a text rendered for the iteration
/// (a YAML string may use variables: `equals: "{{user}}"`).
#[derive(Debug)]
pub enum Expected {
    Value(serde_json::Value),
    Text(Template),
}

/// A pause after a step, as a user reads the page.
#[derive(Clone, Debug, PartialEq)]
pub enum Think {
    None,
    Constant(Duration),
    Uniform(Duration, Duration),
    /// Normal, cut at zero.
    Gaussian {
        mean: Duration,
        stddev: Duration,
    },
    /// Exponential with this mean: the gaps of a Poisson process.
    Poisson(Duration),
}

impl Think {
    /// One pause. The distributions are a line each on the VU's generator (Box-Muller for
    /// the normal, inversion for the exponential), so no distribution crate is needed.
    pub fn sample(&self, rng: &mut fastrand::Rng) -> Duration {
        let secs = match self {
            Think::None => return Duration::ZERO,
            Think::Constant(d) => return *d,
            Think::Uniform(lo, hi) => {
                lo.as_secs_f64() + rng.f64() * (hi.as_secs_f64() - lo.as_secs_f64())
            }
            Think::Gaussian { mean, stddev } => {
                let (u1, u2) = (1.0 - rng.f64(), rng.f64());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                mean.as_secs_f64() + z * stddev.as_secs_f64()
            }
            Think::Poisson(mean) => -(1.0 - rng.f64()).ln() * mean.as_secs_f64(),
        };
        Duration::try_from_secs_f64(secs.clamp(0.0, 3600.0)).unwrap_or_default()
    }
}

/// What a response's checks found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Checked {
    pub run: u64,
    pub failed: u64,
    /// The first failed check's label.
    pub first_failure: Option<String>,
}

/// A response's body parsed as JSON at most once, for however many checks and extractions.
struct Body<'a> {
    bytes: &'a [u8],
    json: Option<Option<serde_json::Value>>,
}

impl<'a> Body<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, json: None }
    }

    fn text(&self) -> std::borrow::Cow<'a, str> {
        String::from_utf8_lossy(self.bytes)
    }

    fn json(&mut self) -> Option<&serde_json::Value> {
        self.json
            .get_or_insert_with(|| serde_json::from_slice(self.bytes).ok())
            .as_ref()
    }

    fn select(&mut self, path: &JsonPath) -> Option<serde_json::Value> {
        let value = self.json()?;
        path.query(value).first().cloned()
    }
}

/// Runs a step's checks on its response; their texts are rendered in `cx`.
pub fn run_checks(
    step: &Step,
    status: u16,
    captured: &Captured,
    cx: &mut RenderContext<'_>,
) -> Checked {
    let mut body = Body::new(&captured.body);
    let mut out = Checked::default();
    for check in &step.checks {
        let ok = match &check.kind {
            CheckKind::Status(allowed) => allowed.contains(&status),
            CheckKind::BodyContains(text) => text
                .render_to_string(cx)
                .is_ok_and(|t| memchr::memmem::find(body.bytes, t.as_bytes()).is_some()),
            CheckKind::BodyMatches(re) => re.is_match(&body.text()),
            CheckKind::Json { path, equals } => match (body.select(path), equals) {
                (Some(found), Some(Expected::Value(want))) => json_equal(&found, want),
                (Some(found), Some(Expected::Text(want))) => want
                    .render_to_string(cx)
                    .is_ok_and(|t| json_equal(&found, &serde_json::Value::String(t))),
                (Some(_), None) => true,
                (None, _) => false,
            },
        };
        out.run += 1;
        if !ok {
            out.failed += 1;
            out.first_failure.get_or_insert_with(|| check.label.clone());
        }
    }
    out
}

/// JSON equality where a check written `equals: 3` matches `3.0` and a string matches the
/// same text: YAML and JSON disagree on little, but numbers are the usual surprise.
fn json_equal(found: &serde_json::Value, want: &serde_json::Value) -> bool {
    use serde_json::Value::{Number, String as Text};
    match (found, want) {
        (Number(a), Number(b)) => a.as_f64() == b.as_f64(),
        // A rendered text matches a number or boolean of the same text (`"{{id}}"` and 7).
        (Number(_) | serde_json::Value::Bool(_), Text(t)) => {
            found.to_string().as_str() == t.as_str()
        }
        _ => found == want,
    }
}

/// Reads a step's extractions into `values`; the first one not found (without a default)
/// is returned by its slot.
pub fn run_extractions(
    step: &Step,
    captured: &Captured,
    jar_from_response: &[(String, String)],
    values: &mut [Option<String>],
) -> Result<(), usize> {
    let mut body = Body::new(&captured.body);
    for ex in &step.extract {
        let found = match &ex.from {
            ExtractFrom::Json(path) => body.select(path).map(|v| match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            }),
            ExtractFrom::Regex(re) => {
                let text = body.text();
                re.captures(&text).and_then(|c| {
                    c.get(if c.len() > 1 { 1 } else { 0 })
                        .map(|m| m.as_str().to_string())
                })
            }
            ExtractFrom::Header(name) => captured
                .header(name)
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            ExtractFrom::Cookie(name) => jar_from_response
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()),
        };
        match found.or_else(|| ex.default.clone()) {
            Some(v) => {
                if let Some(slot) = values.get_mut(ex.slot) {
                    *slot = Some(v);
                }
            }
            None => return Err(ex.slot),
        }
    }
    Ok(())
}

/// A VU's cookies for one origin, as a browser keeps them for one site (domain and path
/// attributes are not followed: a plan's origin is one site).
#[derive(Clone, Debug, Default)]
pub struct CookieJar {
    cookies: Vec<(String, String)>,
}

impl CookieJar {
    /// Takes the response's `Set-Cookie` headers; returns the cookies it set (for `cookie:`
    /// extractions). `Max-Age=0` or a past `Expires` deletes one.
    pub fn take_response(&mut self, captured: &Captured) -> Vec<(String, String)> {
        let mut set = Vec::new();
        for (name, value) in &captured.headers {
            if name != "set-cookie" {
                continue;
            }
            let text = String::from_utf8_lossy(value);
            let mut attrs = text.split(';');
            let Some((n, v)) = attrs.next().and_then(|nv| nv.split_once('=')) else {
                continue;
            };
            let (n, v) = (n.trim().to_string(), v.trim().trim_matches('"').to_string());
            if n.is_empty() {
                continue;
            }
            let deleted = attrs.any(|a| {
                let a = a.trim().to_ascii_lowercase();
                a.strip_prefix("max-age=")
                    .is_some_and(|age| age.trim().parse::<i64>().is_ok_and(|s| s <= 0))
                    || a.starts_with("expires=thu, 01 jan 1970")
            });
            self.cookies.retain(|(name, _)| *name != n);
            if !deleted {
                self.cookies.push((n.clone(), v.clone()));
            }
            set.push((n, v));
        }
        set
    }

    /// The `Cookie` header value, if there are cookies.
    pub fn header(&self) -> Option<String> {
        if self.cookies.is_empty() {
            return None;
        }
        Some(
            self.cookies
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }

    pub fn clear(&mut self) {
        self.cookies.clear();
    }
}

/// One virtual user's own state across its iterations.
pub struct VuState {
    pub id: u64,
    pub iteration: u64,
    pub rng: fastrand::Rng,
    /// One jar per origin.
    pub jars: Vec<CookieJar>,
    /// One cursor per feeder (used by `share: vu` feeders).
    pub cursors: Vec<VuCursor>,
}

impl VuState {
    pub fn new(id: u64, workload: &Workload, seed: u64) -> Self {
        Self {
            id,
            iteration: 0,
            rng: fastrand::Rng::with_seed(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            jars: vec![CookieJar::default(); workload.origins.len()],
            cursors: workload
                .feeders
                .iter()
                .map(|_| VuCursor::default())
                .collect(),
        }
    }

    /// The values an iteration of `scenario` starts with: the plan's, then a data row's.
    /// `Ok(None)` when the scenario's data has ended.
    pub fn start_iteration(
        &mut self,
        workload: &Workload,
        scenario: &Scenario,
    ) -> Result<Option<Vec<Option<String>>>, crate::feeder::FeedError> {
        let mut values = workload.initial.clone();
        if let Some(data) = &scenario.data {
            let feeder = &workload.feeders[data.feeder];
            let row: Option<Row> = feeder.next(&mut self.cursors[data.feeder], &mut self.rng)?;
            let Some(row) = row else { return Ok(None) };
            for (slot, value) in data.slots.iter().zip(row) {
                if let Some(v) = values.get_mut(*slot) {
                    *v = Some(value);
                }
            }
        }
        if workload.reset_cookies {
            self.jars.iter_mut().for_each(CookieJar::clear);
        }
        Ok(Some(values))
    }
}

/// Renders a step's request: its templates, the VU's cookies, the origin's Basic auth. An unset variable is returned by its slot; a header value that is
/// not valid after rendering by its name.
pub fn render_request(
    step: &Step,
    origin: &Target,
    jar: &CookieJar,
    cx: &mut RenderContext<'_>,
) -> Result<RequestParts, RenderError> {
    let path = step.path.render_to_string(cx).map_err(RenderError::Unset)?;
    let mut headers = Vec::with_capacity(step.headers.len() + 2);
    for (name, value) in &step.headers {
        let text = value.render_to_string(cx).map_err(RenderError::Unset)?;
        let value = HeaderValue::from_str(&text)
            .map_err(|_| RenderError::BadHeader(name.as_str().to_string()))?;
        headers.push((name.clone(), value));
    }
    let has =
        |n: &HeaderName, headers: &[(HeaderName, HeaderValue)]| headers.iter().any(|(h, _)| h == n);
    if let Some(cookies) = jar.header() {
        if !has(&http::header::COOKIE, &headers) {
            let value = HeaderValue::from_str(&cookies)
                .map_err(|_| RenderError::BadHeader("cookie".into()))?;
            headers.push((http::header::COOKIE, value));
        }
    }
    if let Some(auth) = &origin.basic_auth {
        if !has(&http::header::AUTHORIZATION, &headers) {
            headers.push((http::header::AUTHORIZATION, auth.clone()));
        }
    }
    let body = step.body.render_to_string(cx).map_err(RenderError::Unset)?;
    // A rendered path must still be one request target: no spaces or line breaks.
    if path
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(RenderError::BadPath(path));
    }
    Ok(RequestParts {
        method: step.method.clone(),
        path,
        headers,
        body: body.into(),
    })
}

#[derive(Debug, PartialEq, Eq)]
pub enum RenderError {
    Unset(usize),
    BadHeader(String),
    BadPath(String),
}

impl RenderError {
    /// Why the request was not sent, in words that name what was wrong, never the value
    /// (from a data file or a response: it may be a secret).
    pub fn why(&self) -> String {
        match self {
            RenderError::Unset(_) => "a variable it uses had no value".into(),
            RenderError::BadHeader(name) => format!(
                "header '{}' would hold a line break or a control character",
                name.chars().take(64).collect::<String>()
            ),
            RenderError::BadPath(_) => "its URL would hold a space or a line break".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Slots;

    fn captured(headers: &[(&str, &str)], body: &str) -> Captured {
        Captured {
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.as_bytes().to_vec(),
            body_truncated: false,
        }
    }

    /// A render context over `values` (leaked: tests only).
    fn cx(values: &[Option<String>]) -> RenderContext<'static> {
        let values: &'static [Option<String>] = Box::leak(values.to_vec().into_boxed_slice());
        RenderContext {
            values,
            vu: 1,
            iteration: 0,
            rng: Box::leak(Box::new(fastrand::Rng::with_seed(1))),
        }
    }

    fn step(extract: Vec<Extract>, checks: Vec<Check>) -> Step {
        Step {
            name: 0,
            origin: 0,
            method: Method::GET,
            path: Template::literal("/"),
            headers: vec![],
            body: Template::default(),
            extract,
            checks,
            think: Think::None,
        }
    }

    #[test]
    fn checks_count_each_failure_and_name_the_first() {
        let checks = vec![
            Check {
                label: "status is 200".into(),
                kind: CheckKind::Status(vec![200]),
            },
            Check {
                label: "has ok".into(),
                kind: CheckKind::BodyContains(Template::literal("\"ok\"")),
            },
            Check {
                label: "n is 3".into(),
                kind: CheckKind::Json {
                    path: JsonPath::parse("$.n").unwrap(),
                    equals: Some(Expected::Value(serde_json::json!(3))),
                },
            },
            Check {
                label: "has items".into(),
                kind: CheckKind::Json {
                    path: JsonPath::parse("$.items[0]").unwrap(),
                    equals: None,
                },
            },
        ];
        let s = step(vec![], checks);
        let ok = captured(&[], r#"{"ok":1,"n":3.0,"items":[1]}"#);
        assert_eq!(
            run_checks(&s, 200, &ok, &mut cx(&[])),
            Checked {
                run: 4,
                failed: 0,
                first_failure: None
            }
        );
        let bad = captured(&[], r#"{"n":4}"#);
        let c = run_checks(&s, 500, &bad, &mut cx(&[]));
        assert_eq!((c.run, c.failed), (4, 4));
        assert_eq!(c.first_failure.as_deref(), Some("status is 200"));
        // A body that is not JSON fails the JSON checks, nothing panics.
        assert_eq!(
            run_checks(&s, 200, &captured(&[], "<html>"), &mut cx(&[])).failed,
            3
        );
        // Texts are rendered for the iteration.
        let mut slots = Slots::default();
        let who = Template::parse("{{who}}", &mut slots).unwrap();
        let s = step(
            vec![],
            vec![Check {
                label: "user is who".into(),
                kind: CheckKind::Json {
                    path: JsonPath::parse("$.user").unwrap(),
                    equals: Some(Expected::Text(who)),
                },
            }],
        );
        let r = captured(&[], r#"{"user":"ann"}"#);
        assert_eq!(
            run_checks(&s, 200, &r, &mut cx(&[Some("ann".into())])).failed,
            0
        );
        assert_eq!(
            run_checks(&s, 200, &r, &mut cx(&[Some("bob".into())])).failed,
            1
        );
    }

    #[test]
    fn extractions_fill_slots_or_name_the_missing_one() {
        let s = step(
            vec![
                Extract {
                    slot: 0,
                    from: ExtractFrom::Json(JsonPath::parse("$.token").unwrap()),
                    default: None,
                },
                Extract {
                    slot: 1,
                    from: ExtractFrom::Regex(Regex::new(r"order-(\d+)").unwrap()),
                    default: None,
                },
                Extract {
                    slot: 2,
                    from: ExtractFrom::Header("ETag".into()),
                    default: None,
                },
                Extract {
                    slot: 3,
                    from: ExtractFrom::Cookie("sid".into()),
                    default: Some("none".into()),
                },
            ],
            vec![],
        );
        let mut values = vec![None; 4];
        let r = captured(&[("etag", "\"v1\"")], r#"{"token":"abc","see":"order-42"}"#);
        assert_eq!(run_extractions(&s, &r, &[], &mut values), Ok(()));
        assert_eq!(
            values,
            [
                Some("abc".into()),
                Some("42".into()),
                Some("\"v1\"".into()),
                Some("none".into())
            ]
        );
        let mut values = vec![None; 4];
        assert_eq!(
            run_extractions(&s, &captured(&[], "{}"), &[], &mut values),
            Err(0)
        );
    }

    #[test]
    fn the_cookie_jar_keeps_replaces_and_deletes() {
        let mut jar = CookieJar::default();
        let set = jar.take_response(&captured(
            &[
                ("set-cookie", "sid=abc; Path=/; HttpOnly"),
                ("set-cookie", "theme=\"dark\""),
            ],
            "",
        ));
        assert_eq!(set[0], ("sid".to_string(), "abc".to_string()));
        assert_eq!(jar.header().unwrap(), "sid=abc; theme=dark");
        jar.take_response(&captured(&[("set-cookie", "sid=def")], ""));
        assert_eq!(jar.header().unwrap(), "theme=dark; sid=def");
        jar.take_response(&captured(&[("set-cookie", "theme=; Max-Age=0")], ""));
        assert_eq!(jar.header().unwrap(), "sid=def");
        jar.clear();
        assert_eq!(jar.header(), None);
    }

    #[test]
    fn think_times_have_their_means() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mean = |t: Think, rng: &mut fastrand::Rng| {
            (0..20_000)
                .map(|_| t.sample(rng).as_secs_f64())
                .sum::<f64>()
                / 20_000.0
        };
        let ms = Duration::from_millis;
        assert_eq!(Think::Constant(ms(5)).sample(&mut rng), ms(5));
        for (t, want) in [
            (Think::Uniform(ms(100), ms(300)), 0.2),
            (
                Think::Gaussian {
                    mean: ms(200),
                    stddev: ms(20),
                },
                0.2,
            ),
            (Think::Poisson(ms(200)), 0.2),
        ] {
            let got = mean(t.clone(), &mut rng);
            assert!((got - want).abs() < 0.01, "{t:?}: {got}");
        }
        // Cut at zero, never negative.
        let wide = Think::Gaussian {
            mean: ms(1),
            stddev: ms(100),
        };
        assert!((0..1000).all(|_| wide.sample(&mut rng) <= Duration::from_secs(1)));
    }

    #[test]
    fn requests_render_with_cookies_auth_and_refuse_broken_paths() {
        let mut slots = Slots::default();
        let mut s = step(vec![], vec![]);
        s.path = Template::parse("/u/{{id}}", &mut slots).unwrap();
        s.headers = vec![(
            HeaderName::from_static("x-token"),
            Template::parse("{{id}}", &mut slots).unwrap(),
        )];
        let origin = Target::parse("http://me:pw@127.0.0.1:9/").unwrap();
        let mut jar = CookieJar::default();
        jar.take_response(&captured(&[("set-cookie", "a=1")], ""));
        let mut rng = fastrand::Rng::with_seed(1);
        let values = [Some("7".to_string())];
        let mut cx = RenderContext {
            values: &values,
            vu: 1,
            iteration: 0,
            rng: &mut rng,
        };
        let r = render_request(&s, &origin, &jar, &mut cx).unwrap();
        let bytes = crate::http1::encode_request(
            &r.method,
            &r.path,
            &origin.authority,
            &r.headers,
            &r.body,
        );
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("GET /u/7 HTTP/1.1\r\nhost: 127.0.0.1:9\r\nx-token: 7\r\ncookie: a=1\r\nauthorization: Basic "), "{text}");
        let values = [Some("7 HTTP/1.1\r\nx: y".to_string())];
        let mut cx = RenderContext {
            values: &values,
            vu: 1,
            iteration: 0,
            rng: &mut rng,
        };
        assert!(render_request(&s, &origin, &jar, &mut cx).is_err());
        let values = [None];
        let mut cx = RenderContext {
            values: &values,
            vu: 1,
            iteration: 0,
            rng: &mut rng,
        };
        assert_eq!(
            render_request(&s, &origin, &jar, &mut cx).err(),
            Some(RenderError::Unset(0))
        );
    }
}
