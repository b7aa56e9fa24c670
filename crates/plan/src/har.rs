//! A HAR recording (HTTP Archive 1.2, what browsers' developer tools and proxies save)
//! made into a plan: one scenario with the recorded requests in order, the pauses the user
//! took as think times, each response's status as a check. Static resources (images, fonts,
//! style sheets, scripts) are left out unless asked for: a load test of the service rarely
//! wants the CDN's files.
//!
//! Only the recording's main host (its first request's) is kept unless others are asked for
//! (`hosts`): a page's recording calls analytics, CDNs and sometimes a cloud's metadata
//! address, and a load test must not load them. The hosts left out are listed in a comment at
//! the top of the plan; a link-local address (169.254.0.0/16, the cloud metadata service;
//! fe80::/10) is never kept.
//!
//! The plan is written as YAML by hand, every string double-quoted in JSON's escaping
//! (which YAML reads as it is) and any `{{` in recorded text escaped, so nothing recorded
//! can change the plan's structure or become a variable.

use std::fmt::Write as _;

use serde::Deserialize;

/// The largest pause kept as a think time; longer ones were the user away.
const MAX_THINK_MS: f64 = 30_000.0;
/// Pauses shorter than this are the browser's own pace, not a user's.
const MIN_THINK_MS: f64 = 50.0;

#[derive(Deserialize)]
struct Har {
    log: Log,
}

#[derive(Deserialize)]
struct Log {
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    started_date_time: Option<String>,
    #[serde(default)]
    time: f64,
    request: Request,
    response: Option<Response>,
    #[serde(rename = "_resourceType")]
    resource_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<Header>,
    post_data: Option<PostData>,
}

#[derive(Deserialize)]
struct Header {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PostData {
    mime_type: Option<String>,
    text: Option<String>,
    /// A form as name/value pairs: HAR 1.2's alternative to `text`.
    #[serde(default)]
    params: Vec<Param>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Param {
    name: String,
    #[serde(default)]
    value: String,
    file_name: Option<String>,
    content_type: Option<String>,
}

#[derive(Deserialize)]
struct Response {
    status: i64,
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Content {
    mime_type: Option<String>,
}

/// The plan made, and what went into it.
#[derive(Debug)]
pub struct MadePlan {
    pub yaml: String,
    pub requests: usize,
    pub static_left_out: usize,
    /// WebSocket handshakes (status 101) left out: kiln replays HTTP requests.
    pub websockets_left_out: usize,
    /// Requests to other hosts than the main one, left out, by origin.
    pub other_hosts_left_out: Vec<(String, usize)>,
    /// Entries that are not HTTP (`file:`, `data:`, `blob:`, an extension's page), left out:
    /// the plan kiln wrote refused them before.
    pub not_http_left_out: usize,
}

/// What [`to_plan_with`] keeps.
#[derive(Clone, Debug, Default)]
pub struct HarOptions {
    /// Static files (images, fonts, style sheets, scripts) kept too.
    pub keep_static: bool,
    /// Other hosts kept beside the main one, by name (`api.example.com`), or `*` for all
    /// (never a link-local address).
    pub hosts: Vec<String>,
}

/// The host of an origin (`https://user@Host:8443` gives `host`), lower-cased.
fn host_of(origin: &str) -> String {
    let authority = origin.split("://").nth(1).unwrap_or(origin);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.split(':').next().unwrap_or(authority),
    };
    host.to_ascii_lowercase()
}

/// A link-local address (the cloud metadata service at 169.254.169.254, fe80::/10) or the
/// metadata service's name: never loaded.
fn link_local(host: &str) -> bool {
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => v4.is_link_local(),
        Ok(std::net::IpAddr::V6(v6)) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        Err(_) => host == "metadata.google.internal" || host == "metadata",
    }
}

/// Headers a plan should not replay: the connection's own, what kiln sets itself, and the
/// cookies (the VU's jar carries them, as the browser's did).
fn replayed(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !(n.starts_with(':')
        || n.starts_with("sec-")
        || matches!(
            n.as_str(),
            "host"
                | "connection"
                | "content-length"
                | "cookie"
                | "accept-encoding"
                | "keep-alive"
                | "transfer-encoding"
                | "upgrade"
                | "te"
                | "priority"
                | "upgrade-insecure-requests"
        ))
}

/// A static file: by the browser's resource type where it names one, else (no type, or
/// "other" as some recorders write for everything) by the response's type or the path's
/// extension.
fn is_static(e: &Entry) -> bool {
    match e.resource_type.as_deref() {
        Some("image" | "font" | "stylesheet" | "script" | "media" | "manifest") => return true,
        Some("document" | "xhr" | "fetch" | "eventsource" | "websocket") => return false,
        _ => {}
    }
    let mime = e
        .response
        .as_ref()
        .and_then(|r| r.content.as_ref())
        .and_then(|c| c.mime_type.as_deref())
        .unwrap_or("");
    if mime.starts_with("image/")
        || mime.starts_with("font/")
        || mime.starts_with("text/css")
        || mime.contains("javascript")
    {
        return true;
    }
    let path = e.request.url.split(['?', '#']).next().unwrap_or("");
    [
        ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".webp", ".css", ".js", ".woff", ".woff2",
        ".ttf", ".map",
    ]
    .iter()
    .any(|ext| path.to_ascii_lowercase().ends_with(ext))
}

/// A URL's scheme in lower case (`http`, `wss`, `file`, `data` ...).
fn scheme_of(url: &str) -> String {
    url.split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// A WebSocket handshake: a `ws:`/`wss:` URL, answered 101, typed "websocket", or asking to
/// upgrade to one.
fn is_websocket(e: &Entry) -> bool {
    matches!(scheme_of(&e.request.url).as_str(), "ws" | "wss")
        || e.response.as_ref().is_some_and(|r| r.status == 101)
        || e.resource_type.as_deref() == Some("websocket")
        || e.request.headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case("upgrade") && h.value.eq_ignore_ascii_case("websocket")
        })
}

/// The boundary a multipart content type names (`multipart/form-data; boundary=X`).
fn boundary_of(content_type: &str) -> Option<&str> {
    content_type.split(';').find_map(|part| {
        let (key, value) = part.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"'))
            .filter(|b| !b.is_empty())
    })
}

/// A form recorded as name/value pairs (`postData.params`) made into the body the browser
/// sent: URL-encoded, or multipart with the recorded boundary (a file's content is not in a
/// HAR: its part is sent empty, with its name). Returns the body and, for multipart without
/// a recorded boundary, the Content-Type to send with kiln's own.
fn form_body(
    params: &[Param],
    mime: &str,
    content_type_header: Option<&str>,
) -> (String, Option<String>) {
    if !mime.to_ascii_lowercase().starts_with("multipart/") {
        let mut form = form_urlencoded::Serializer::new(String::new());
        for p in params {
            form.append_pair(&p.name, &p.value);
        }
        return (form.finish(), None);
    }
    let recorded = content_type_header
        .and_then(boundary_of)
        .or_else(|| boundary_of(mime));
    let boundary = recorded.unwrap_or("kiln-form-boundary-7MA4YWxkTrZu0gW");
    // a name or file name holding a quote or a line break would end its header early
    let clean = |t: &str| t.replace(['"', '\r', '\n'], "_");
    let mut body = String::new();
    for p in params {
        let _ = write!(
            body,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"",
            clean(&p.name)
        );
        if let Some(file) = &p.file_name {
            let _ = write!(body, "; filename=\"{}\"", clean(file));
        }
        body.push_str("\r\n");
        if let Some(ct) = &p.content_type {
            let _ = write!(body, "Content-Type: {}\r\n", clean(ct));
        }
        let _ = write!(body, "\r\n{}\r\n", p.value);
    }
    let _ = write!(body, "--{boundary}--\r\n");
    let header = recorded
        .is_none()
        .then(|| format!("multipart/form-data; boundary={boundary}"));
    (body, header)
}

/// A YAML double-quoted string holding `text` literally: JSON's escaping, and `{{` escaped
/// for kiln's templates.
fn quoted(text: &str) -> String {
    let json = serde_json::to_string(&text.replace("{{", "\\{{")).unwrap_or_else(|_| "\"\"".into());
    // JSON leaves DEL, the C1 controls and U+FEFF raw; YAML may not hold them unescaped (a
    // recorded body with U+0088 made a plan `kiln plan check` refused)
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '\u{7f}'..='\u{9f}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// `scheme://host[:port]` and the rest (path and query) of a URL.
fn split_origin(url: &str) -> Option<(&str, &str)> {
    let scheme_end = url.find("://")?;
    let rest = &url[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let origin = &url[..scheme_end + 3 + end];
    let path = rest[end..].split('#').next().unwrap_or("");
    Some((origin, path))
}

fn millis_of(time: &str) -> Option<f64> {
    // RFC 3339 with milliseconds, e.g. 2026-11-24T02:00:00.123Z or +01:00; the pause
    // between two entries needs only their difference, so a rough day count is enough.
    let (date, rest) = time.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<f64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let clock: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ':' || *c == '.')
        .collect();
    let mut c = clock.split(':').map(|p| p.parse::<f64>().ok());
    let (h, min, s) = (c.next()??, c.next()??, c.next()??);
    let days = y * 372.0 + m * 31.0 + day;
    Some((((days * 24.0 + h) * 60.0 + min) * 60.0 + s) * 1000.0)
}

/// Makes the plan; an error says what in the file is not a HAR.
/// Why a recording makes no plan.
#[derive(Debug, thiserror::Error)]
pub enum HarError {
    #[error("not a HAR file: {0}")]
    NotHar(#[from] serde_json::Error),
    #[error("the recording has no requests to replay")]
    NoRequests,
    #[error(
        "the recording's main host {0} is a link-local address (a cloud's metadata service): \
         kiln does not load it"
    )]
    LinkLocal(String),
    #[error(
        "the plan would be {:.1} MiB, more than kiln reads ({} MiB): the recording's request \
         bodies are too large to replay from a plan (keep fewer requests, or post large bodies \
         from data files)",
        *.0 as f64 / (1 << 20) as f64,
        crate::MAX_PLAN_BYTES >> 20
    )]
    TooLarge(usize),
}

pub fn to_plan(text: &str, keep_static: bool) -> Result<MadePlan, HarError> {
    to_plan_with(
        text,
        &HarOptions {
            keep_static,
            ..Default::default()
        },
    )
}

/// Makes the plan with `options`; an error says what in the file is not a HAR.
pub fn to_plan_with(text: &str, options: &HarOptions) -> Result<MadePlan, HarError> {
    // a byte-order mark before the JSON (some tools write one) is not part of it
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let har: Har = serde_json::from_str(text)?;
    let is_http = |e: &&Entry| matches!(scheme_of(&e.request.url).as_str(), "http" | "https");
    let main_host = har
        .log
        .entries
        .iter()
        .filter(is_http)
        .find_map(|e| split_origin(&e.request.url))
        .map(|(origin, _)| host_of(origin));
    if let Some(host) = main_host.as_deref().filter(|h| link_local(h)) {
        return Err(HarError::LinkLocal(host.to_string()));
    }
    let wanted = |host: &str| {
        Some(host) == main_host.as_deref()
            || (!link_local(host)
                && options
                    .hosts
                    .iter()
                    .any(|h| h == "*" || h.eq_ignore_ascii_case(host)))
    };
    let mut kept: Vec<&Entry> = Vec::new();
    let mut static_left_out = 0;
    let mut websockets_left_out = 0;
    let mut other_hosts: std::collections::BTreeMap<String, usize> = Default::default();
    let mut not_http_left_out = 0;
    for e in &har.log.entries {
        if is_websocket(e) {
            websockets_left_out += 1;
            continue;
        }
        let origin = split_origin(&e.request.url).filter(|_| is_http(&e));
        let Some((origin, _)) = origin else {
            not_http_left_out += 1;
            continue;
        };
        if !wanted(&host_of(origin)) {
            *other_hosts.entry(origin.to_string()).or_default() += 1;
            continue;
        }
        if !options.keep_static && is_static(e) {
            static_left_out += 1;
            continue;
        }
        kept.push(e);
    }
    if kept.is_empty() {
        return Err(HarError::NoRequests);
    }
    let base = split_origin(&kept[0].request.url).map_or("", |(o, _)| o);
    let mut y = String::new();
    let _ = writeln!(
        y,
        "# Made by kiln plan from-har: {} requests ({} static left out).\n\
         # Check it with `kiln plan check`; add extract: where a response's value (a token,\n\
         # an id) must be carried into a later request, and data: for many users.",
        kept.len(),
        static_left_out
    );
    if websockets_left_out > 0 {
        let _ = writeln!(
            y,
            "# {websockets_left_out} WebSocket connection(s) left out: kiln replays HTTP \
             requests, not a socket's messages."
        );
    }
    if not_http_left_out > 0 {
        let _ = writeln!(
            y,
            "# {not_http_left_out} request(s) that are not HTTP (file:, data:, blob: ...) left out."
        );
    }
    if !other_hosts.is_empty() {
        let _ = writeln!(
            y,
            "# Requests to other hosts, left out (kiln plan from-har --hosts NAME keeps one; \
             link-local addresses never):"
        );
        for (origin, n) in &other_hosts {
            // a comment line: the origin is shown as JSON would quote it, never raw
            let _ = writeln!(y, "#   {} ({n})", quoted(origin));
        }
    }
    let _ = writeln!(y, "base_url: {}", quoted(base));
    y.push_str("scenarios:\n  - name: \"recorded\"\n    steps:\n");
    for (i, e) in kept.iter().enumerate() {
        let (origin, path) = split_origin(&e.request.url).unwrap_or(("", "/"));
        let path = if path.is_empty() { "/" } else { path };
        let url = if origin == base {
            path.to_string()
        } else {
            format!("{origin}{path}")
        };
        let name = format!(
            "{} {}",
            e.request.method,
            path.split('?').next().unwrap_or(path)
        );
        let _ = writeln!(y, "      - name: {}", quoted(&name));
        let _ = writeln!(y, "        method: {}", quoted(&e.request.method));
        let _ = writeln!(y, "        url: {}", quoted(&url));
        let mut headers: Vec<(&str, &str)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // a value with a line break or another control character cannot be sent as a header
        // (no browser sent it): left out, or the plan would not check
        let sendable = |h: &&Header| !h.value.chars().any(|c| c.is_control() && c != '\t');
        for h in e
            .request
            .headers
            .iter()
            .filter(|h| replayed(&h.name))
            .filter(sendable)
        {
            // YAML keys are unique; a repeated header keeps its first value.
            if seen.insert(h.name.to_ascii_lowercase()) {
                headers.push((&h.name, &h.value));
            }
        }
        let post = e.request.post_data.as_ref();
        let mime = post.and_then(|p| p.mime_type.as_deref());
        let recorded_type = e
            .request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-type"))
            .map(|h| h.value.as_str());
        let mut form_type = None;
        let body: Option<std::borrow::Cow<str>> = match post {
            Some(p) if p.text.as_deref().is_some_and(|t| !t.is_empty()) => {
                p.text.as_deref().map(Into::into)
            }
            Some(p) if !p.params.is_empty() => {
                let (body, content_type) = form_body(
                    &p.params,
                    mime.or(recorded_type).unwrap_or(""),
                    recorded_type,
                );
                form_type = content_type;
                Some(body.into())
            }
            _ => None,
        };
        if let Some(content_type) = &form_type {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
            headers.push(("Content-Type", content_type));
        } else if let (Some(_), Some(mime), false) = (&body, mime, seen.contains("content-type")) {
            headers.push(("Content-Type", mime));
        }
        if !headers.is_empty() {
            y.push_str("        headers:\n");
            for (n, v) in headers {
                let _ = writeln!(y, "          {}: {}", quoted(n), quoted(v));
            }
        }
        if let Some(body) = &body {
            let _ = writeln!(y, "        body: {}", quoted(body));
        }
        if let Some(status) = e
            .response
            .as_ref()
            .map(|r| r.status)
            .filter(|s| (100..600).contains(s))
        {
            let _ = writeln!(y, "        check: {{status: {status}}}");
        }
        // The user's pause: from this response's end to the next request's start.
        if let Some(next) = kept.get(i + 1) {
            let gap = match (
                e.started_date_time.as_deref().and_then(millis_of),
                next.started_date_time.as_deref().and_then(millis_of),
            ) {
                (Some(a), Some(b)) => b - (a + e.time.max(0.0)),
                _ => 0.0,
            };
            if gap >= MIN_THINK_MS {
                let _ = writeln!(
                    y,
                    "        think: {}ms",
                    gap.min(MAX_THINK_MS).round() as u64
                );
            }
        }
    }
    y.push_str("load:\n  vus: 1\n  duration: 30s\n");
    // a plan kiln would refuse to read is not written
    if y.len() > crate::MAX_PLAN_BYTES {
        return Err(HarError::TooLarge(y.len()));
    }
    Ok(MadePlan {
        yaml: y,
        requests: kept.len(),
        static_left_out,
        websockets_left_out,
        other_hosts_left_out: other_hosts.into_iter().collect(),
        not_http_left_out,
    })
}
