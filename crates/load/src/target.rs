//! The URL under load: parsed, its credentials turned into Basic auth, resolved once before
//! the run. Pure data that the plan, the scenarios and the connections all name.

use std::net::{SocketAddr, ToSocketAddrs};

use http::header::HeaderValue;
use http::Uri;

use crate::error::PlanError;

/// The URL under load, resolved once before the run.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub tls: bool,
    /// A gRPC service's method (`grpc://`, `grpcs://` over TLS): its calls go over HTTP/2 and
    /// their answers carry a gRPC status.
    pub grpc: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, as sent in the request line.
    pub path_and_query: String,
    /// The `Host` header value (host and port, never the URL's user and password).
    pub authority: String,
    /// `Authorization: Basic ...` from the URL's `user:password@`, as curl sends it.
    pub basic_auth: Option<HeaderValue>,
    pub addr: SocketAddr,
}

impl Target {
    /// Parses and resolves a URL: `http`, `https`, and `grpc`, `grpcs` for a gRPC method
    /// (`grpc://host:port/package.Service/Method`).
    pub fn parse(url: &str) -> Result<Self, PlanError> {
        Self::parse_unresolved(url)?.resolved()
    }

    /// The host's address looked up (the first the resolver gives).
    pub fn resolved(mut self) -> Result<Self, PlanError> {
        self.addr = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| PlanError::Resolve {
                host: self.host.clone(),
                why: e.to_string(),
            })?
            .next()
            .ok_or_else(|| PlanError::Resolve {
                host: self.host.clone(),
                why: "no addresses".into(),
            })?;
        Ok(self)
    }

    /// Parses a URL without looking its host up, for a plan checked or shipped elsewhere
    /// (a cluster's service names resolve only there). Its `addr` is `0.0.0.0:0`, which no
    /// connection reaches: [`Target::resolved`] before loading it.
    pub fn parse_unresolved(url: &str) -> Result<Self, PlanError> {
        let bad = |why: &str| PlanError::BadUrl {
            url: url.to_string(),
            why: why.to_string(),
        };
        let uri: Uri = url
            .trim()
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let (tls, grpc) = match uri.scheme_str() {
            Some("http") => (false, false),
            Some("https") => (true, false),
            Some("grpc") => (false, true),
            Some("grpcs") => (true, true),
            Some(other) => {
                return Err(bad(&format!(
                    "scheme '{other}' is not http, https, grpc or grpcs"
                )))
            }
            None => return Err(bad("no scheme; write http://host:port/path")),
        };
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return Err(bad("no host"));
        }
        // A port that is not a number in 1..=65535 is a typo (`:80800`): refuse it rather than
        // load the scheme's default port, which may be some other service.
        let (userinfo, host_port) = match authority.as_str().rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority.as_str()),
        };
        let port = match port_text(host_port) {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            // digits only: Rust's integer parse takes a leading `+`, and `:+80` is no port
            // a browser or curl would load
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(bad(&format!("port '{p}' is not a number from 1 to 65535"))),
            },
        };
        // The request line's target always starts with `/` (RFC 9112 3.2.1):
        // `http://host?q=1` asks for `/?q=1`.
        let path_and_query = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") => "/".to_string(),
            Some(p) if p.starts_with('/') => p.to_string(),
            Some(p) => format!("/{p}"),
        };
        let basic_auth = userinfo
            .map(basic_auth_header)
            .transpose()
            .map_err(|e| bad(&format!("user and password: {e}")))?;
        // The URL as shown and recorded: a password never reaches run.json or the terminal.
        let shown_url = redact_password(url.trim());
        Ok(Self {
            url: shown_url,
            tls,
            grpc,
            host,
            port,
            path_and_query,
            authority: host_port.to_string(),
            basic_auth,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        })
    }
}

/// The port written after a host (`host:port`, `[::1]:port`), if any. `http`'s own parser
/// says "no port" for one that does not fit in 16 bits, which would load port 80.
fn port_text(host_port: &str) -> Option<&str> {
    let after_host = match host_port.rfind(']') {
        Some(end) => &host_port[end + 1..],
        None => host_port,
    };
    after_host.rsplit_once(':').map(|(_, port)| port)
}

/// `scheme://user:password@host...` with the password replaced by `***`; any other text as
/// it is. For URLs shown or recorded (the summary, run.json's plan and command line).
pub fn redact_password(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_string();
    };
    let rest = &text[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return text.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &text[..scheme_end + 3], &rest[at..]),
        None => text.to_string(),
    }
}

/// `user:password` (percent-encoded, as in a URL) as a Basic `Authorization` value.
fn basic_auth_header(userinfo: &str) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    use base64::Engine as _;
    let decoded = percent_encoding::percent_decode_str(userinfo).collect::<Vec<u8>>();
    let mut value = b"Basic ".to_vec();
    value.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(&decoded)
            .as_bytes(),
    );
    HeaderValue::from_bytes(&value)
}
