//! `{{name}}` templates in a scenario's URLs, headers and bodies.
//!
//! A template is parsed once, when the plan is checked: its variables become slot numbers,
//! so rendering is a walk over text pieces and slot lookups, with no parsing or hashing per
//! request. Values are never expanded again: a value that contains `{{x}}` is sent as
//! those characters, so no template can refer to itself at run time.
//!
//! Built-ins start with `$`: `{{$vu}}`, `{{$iteration}}`, `{{$uuid}}`, `{{$timestamp}}`
//! (Unix milliseconds), `{{$isoTimestamp}}`, `{{$randomInt(1,100)}}`. `{{env.NAME}}` is read
//! from the environment when the plan is checked. A variable may end with a filter:
//! `{{q|url}}` percent-encodes it for a URL, `{{q|json}}` escapes it for a JSON string.
//! `\{{` is a literal `{{`.

use std::collections::HashMap;
use std::fmt::Write as _;

/// The random generator built-ins draw from (one per VU).
pub use fastrand::Rng;

/// The longest template text accepted (a hostile plan's 100 MB string is refused here).
pub const MAX_TEMPLATE: usize = 1024 * 1024;

/// Variable names to slot numbers, shared by every template of a plan.
#[derive(Clone, Debug, Default)]
pub struct Slots {
    names: Vec<String>,
    index: HashMap<String, usize>,
}

impl Slots {
    /// The slot of `name`, made if new.
    pub fn slot(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }

    pub fn get(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub fn name(&self, slot: usize) -> &str {
        self.names.get(slot).map_or("?", String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    None,
    /// Percent-encoded for a URL's path segment or query value.
    Url,
    /// Escaped for the inside of a JSON string.
    Json,
}

#[derive(Clone, Debug, PartialEq)]
enum Builtin {
    Vu,
    Iteration,
    Uuid,
    Timestamp,
    IsoTimestamp,
    RandomInt(i64, i64),
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Var(usize, Filter),
    Builtin(Builtin, Filter),
}

/// A parsed template.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What rendering needs besides the template: the iteration's variable values (by slot)
/// and the numbers the built-ins read.
pub struct RenderContext<'a> {
    pub values: &'a [Option<String>],
    pub vu: u64,
    pub iteration: u64,
    pub rng: &'a mut fastrand::Rng,
}

/// Why a text is not a template kiln can fill in: said at its place in the plan.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("a text of {0} bytes is longer than the {MAX_TEMPLATE} kiln takes")]
    TooLong(usize),
    #[error("'{{{{' at byte {0} is never closed with '}}}}'")]
    NotClosed(usize),
    #[error("unknown filter '{0}' (url or json)")]
    UnknownFilter(String),
    #[error("{{{{env.{0}}}}}: the environment has no variable {0}")]
    NoSuchVariable(String),
    #[error("'{0}' is not a variable name (letters, digits, _ - and ., starting with a letter)")]
    BadName(String),
    #[error("unknown built-in '${0}' (there are {BUILTINS})")]
    UnknownBuiltin(String),
    #[error("$randomInt({0}): write two integers, min,max")]
    RandomIntArguments(String),
    #[error("$randomInt({0}): min is above max")]
    RandomIntRange(String),
}

/// The built-ins a template may name.
const BUILTINS: &str = "$vu, $iteration, $uuid, $timestamp, $isoTimestamp, $randomInt(min,max)";

impl Template {
    /// Parses `text`; variables get slots in `slots`.
    pub fn parse(text: &str, slots: &mut Slots) -> Result<Self, TemplateError> {
        Self::parse_with_env(text, slots, &|name| std::env::var(name).ok())
    }

    /// A template that is only `text`.
    pub fn literal(text: &str) -> Self {
        Self {
            parts: if text.is_empty() {
                Vec::new()
            } else {
                vec![Part::Text(text.to_string())]
            },
        }
    }

    /// As [`Template::parse`], reading `{{env.NAME}}` through `env` (tests pass their own).
    pub fn parse_with_env(
        text: &str,
        slots: &mut Slots,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, TemplateError> {
        if text.len() > MAX_TEMPLATE {
            return Err(TemplateError::TooLong(text.len()));
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            // `\{{` is a literal `{{` (recorded text, a body that uses braces itself).
            if rest[..open].ends_with('\\') {
                literal.push_str(&rest[..open - 1]);
                literal.push_str("{{");
                rest = &rest[open + 2..];
                continue;
            }
            literal.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or(TemplateError::NotClosed(text.len() - rest.len() + open))?;
            let inner = after[..close].trim();
            rest = &after[close + 2..];
            let (expr, filter) = match inner.rsplit_once('|') {
                Some((e, "url")) => (e.trim(), Filter::Url),
                Some((e, "json")) => (e.trim(), Filter::Json),
                Some((_, f)) => return Err(TemplateError::UnknownFilter(f.trim().to_string())),
                None => (inner, Filter::None),
            };
            if let Some(name) = expr.strip_prefix("env.") {
                let value =
                    env(name).ok_or_else(|| TemplateError::NoSuchVariable(name.to_string()))?;
                literal.push_str(&apply(filter, &value));
                continue;
            }
            let part = if let Some(builtin) = expr.strip_prefix('$') {
                Part::Builtin(parse_builtin(builtin)?, filter)
            } else {
                check_name(expr)?;
                Part::Var(slots.slot(expr), filter)
            };
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal)));
            }
            parts.push(part);
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self { parts })
    }

    /// The templates one after another, as one.
    pub fn concat(templates: impl IntoIterator<Item = Template>) -> Self {
        let mut parts: Vec<Part> = Vec::new();
        for t in templates {
            for p in t.parts {
                match (parts.last_mut(), p) {
                    (Some(Part::Text(last)), Part::Text(t)) => last.push_str(&t),
                    (_, p) => parts.push(p),
                }
            }
        }
        Self { parts }
    }

    /// Percent-encoded as a form field's name or value: its text now, and every value
    /// without a filter of its own when rendered.
    pub fn form_encoded(self) -> Self {
        let parts = self
            .parts
            .into_iter()
            .map(|p| match p {
                Part::Text(t) => Part::Text(apply(Filter::Url, &t)),
                other => with_default_filter(other, Filter::Url),
            })
            .collect();
        Self { parts }
    }

    /// For a JSON body written as YAML (the text is JSON already): every value without a
    /// filter of its own is escaped for the JSON string it stands in.
    pub fn json_escaped(self) -> Self {
        let parts = self
            .parts
            .into_iter()
            .map(|p| with_default_filter(p, Filter::Json))
            .collect();
        Self { parts }
    }

    /// The slots this template reads.
    pub fn vars(&self) -> impl Iterator<Item = usize> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(slot, _) => Some(*slot),
            _ => None,
        })
    }

    /// The text when the template has no variables or built-ins.
    pub fn as_literal(&self) -> Option<String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                _ => return None,
            }
        }
        Some(out)
    }

    /// Appends the rendered text to `out`; an unset variable is an error naming its slot.
    pub fn render(&self, cx: &mut RenderContext<'_>, out: &mut String) -> Result<(), usize> {
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(slot, filter) => {
                    let value = cx
                        .values
                        .get(*slot)
                        .and_then(Option::as_deref)
                        .ok_or(*slot)?;
                    push_filtered(out, *filter, value);
                }
                Part::Builtin(b, filter) => {
                    let value = match b {
                        Builtin::Vu => cx.vu.to_string(),
                        Builtin::Iteration => cx.iteration.to_string(),
                        Builtin::Uuid => uuid_v4(cx.rng),
                        Builtin::Timestamp => kiln_record::clock::unix_ms_now().to_string(),
                        Builtin::IsoTimestamp => iso_now(),
                        Builtin::RandomInt(lo, hi) => cx.rng.i64(*lo..=*hi).to_string(),
                    };
                    push_filtered(out, *filter, &value);
                }
            }
        }
        Ok(())
    }

    pub fn render_to_string(&self, cx: &mut RenderContext<'_>) -> Result<String, usize> {
        let mut out = String::new();
        self.render(cx, &mut out)?;
        Ok(out)
    }
}

/// A variable name: letters, digits, `_`, `-` and `.`, starting with a letter or `_`.
pub fn check_name(name: &str) -> Result<(), TemplateError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok
        && name.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        Ok(())
    } else {
        Err(TemplateError::BadName(name.to_string()))
    }
}

fn parse_builtin(text: &str) -> Result<Builtin, TemplateError> {
    Ok(match text {
        "vu" => Builtin::Vu,
        "iteration" => Builtin::Iteration,
        "uuid" => Builtin::Uuid,
        "timestamp" => Builtin::Timestamp,
        "isoTimestamp" => Builtin::IsoTimestamp,
        _ => {
            let args = text
                .strip_prefix("randomInt(")
                .and_then(|a| a.strip_suffix(')'))
                .ok_or_else(|| TemplateError::UnknownBuiltin(text.to_string()))?;
            let (lo, hi) = args
                .split_once(',')
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
                .ok_or_else(|| TemplateError::RandomIntArguments(args.to_string()))?;
            if lo > hi {
                return Err(TemplateError::RandomIntRange(args.to_string()));
            }
            Builtin::RandomInt(lo, hi)
        }
    })
}

fn with_default_filter(part: Part, filter: Filter) -> Part {
    match part {
        Part::Var(slot, Filter::None) => Part::Var(slot, filter),
        Part::Builtin(b, Filter::None) => Part::Builtin(b, filter),
        other => other,
    }
}

fn apply(filter: Filter, value: &str) -> String {
    let mut out = String::new();
    push_filtered(&mut out, filter, value);
    out
}

fn push_filtered(out: &mut String, filter: Filter, value: &str) {
    match filter {
        Filter::None => out.push_str(value),
        Filter::Url => {
            out.extend(percent_encoding::utf8_percent_encode(
                value,
                percent_encoding::NON_ALPHANUMERIC,
            ));
        }
        Filter::Json => {
            // serde_json's own string escaping, without the quotes around it.
            let quoted = serde_json::to_string(value).unwrap_or_default();
            out.push_str(quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or(""));
        }
    }
}

/// A random (version 4) UUID from the VU's generator (RFC 9562 section 5.4).
fn uuid_v4(rng: &mut fastrand::Rng) -> String {
    let mut b: [u8; 16] = rng.u128(..).to_le_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        let _ = write!(s, "{byte:02x}");
    }
    s
}

fn iso_now() -> String {
    let ms = kiln_record::clock::unix_ms_now() as i128;
    let secs = (ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        tod / 3600,
        tod / 60 % 60,
        tod % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's civil_from_days; a date crate for one timestamp is not worth it).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn render(t: &Template, values: &[Option<String>]) -> Result<String, usize> {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut cx = RenderContext {
            values,
            vu: 7,
            iteration: 3,
            rng: &mut rng,
        };
        t.render_to_string(&mut cx)
    }

    #[test]
    fn variables_builtins_and_filters() {
        let mut slots = Slots::default();
        let env = |n: &str| (n == "HOST").then(|| "db1".to_string());
        let t = Template::parse_with_env(
            "/u/{{ user }}?q={{q|url}}&vu={{$vu}}-{{$iteration}}&h={{env.HOST}}",
            &mut slots,
            &env,
        )
        .unwrap();
        assert_eq!(slots.get("user"), Some(0));
        assert_eq!(slots.get("q"), Some(1));
        let values = [Some("al".to_string()), Some("a b&c".to_string())];
        assert_eq!(
            render(&t, &values).unwrap(),
            "/u/al?q=a%20b%26c&vu=7-3&h=db1"
        );
        // An unset variable names its slot.
        assert_eq!(render(&t, &[Some("al".into()), None]), Err(1));
        let j = Template::parse(r#"{"n":"{{n|json}}"}"#, &mut slots).unwrap();
        let mut values = vec![None; slots.len()];
        values[slots.get("n").unwrap()] = Some("say \"hi\"\n".into());
        assert_eq!(render(&j, &values).unwrap(), r#"{"n":"say \"hi\"\n"}"#);
    }

    #[test]
    fn an_escaped_opening_is_text() {
        let mut slots = Slots::default();
        let t = Template::parse(r"a \{{b}} {{c}}", &mut slots).unwrap();
        assert_eq!(render(&t, &[Some("C".into())]).unwrap(), "a {{b}} C");
    }

    #[test]
    fn values_are_never_expanded_again() {
        let mut slots = Slots::default();
        let t = Template::parse("{{a}}", &mut slots).unwrap();
        assert_eq!(render(&t, &[Some("{{a}}".into())]).unwrap(), "{{a}}");
    }

    #[test]
    fn builtins_look_right() {
        let mut slots = Slots::default();
        let t = Template::parse(
            "{{$uuid}} {{$randomInt(5,5)}} {{$isoTimestamp}}",
            &mut slots,
        )
        .unwrap();
        let out = render(&t, &[]).unwrap();
        let parts: Vec<&str> = out.split(' ').collect();
        assert_eq!(parts[0].len(), 36);
        assert_eq!(&parts[0][14..15], "4", "version 4: {out}");
        assert_eq!(parts[1], "5");
        assert!(parts[2].ends_with('Z') && parts[2].len() == 24, "{out}");
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn bad_templates_say_what_is_wrong() {
        let mut slots = Slots::default();
        let err = |t: &str| {
            (Template::parse_with_env(t, &mut Slots::default(), &|_| None).unwrap_err()).to_string()
        };
        assert!(err("a {{b").contains("never closed"));
        assert!(err("{{$nope}}").contains("unknown built-in"));
        assert!(err("{{$randomInt(9,1)}}").contains("min is above max"));
        assert!(err("{{a|upper}}").contains("unknown filter"));
        assert!(err("{{env.NOPE}}").contains("no variable NOPE"));
        assert!(err("{{1x}}").contains("not a variable name"));
        assert!(err("{{}}").contains("not a variable name"));
        let huge = "x".repeat(MAX_TEMPLATE + 1);
        assert!(Template::parse(&huge, &mut slots)
            .unwrap_err()
            .to_string()
            .contains("longer"));
    }

    proptest! {
        #[test]
        fn no_text_panics_the_template_parser(text in "[a-z{}|$ ().,0-9]{0,80}") {
            let mut slots = Slots::default();
            if let Ok(t) = Template::parse_with_env(&text, &mut slots, &|_| Some("v".into())) {
                let values = vec![Some("x".to_string()); slots.len()];
                prop_assert!(render(&t, &values).is_ok());
            }
        }

        #[test]
        fn text_without_braces_is_itself(text in "[^{}]{0,80}") {
            let t = Template::parse(&text, &mut Slots::default()).unwrap();
            prop_assert_eq!(render(&t, &[]).unwrap(), text);
        }
    }
}
