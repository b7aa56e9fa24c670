//! gRPC status codes as the record keeps them (the number, `grpc-status`) and as people read
//! them (the name gRPC's own documents give each), and a streaming call's messages.

use serde::{Deserialize, Serialize};

use crate::LatencyHistogram;

/// `OK`: the call succeeded; every other code is a failed call.
pub const GRPC_OK: u8 = 0;

/// `INTERNAL`: what a client takes for an answer that ended without a status.
pub const GRPC_INTERNAL: u8 = 13;

/// One second of a streaming method's calls (server, client or bidirectional streaming), by
/// the calls' end as the load's own figures; absent from unary runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GrpcStreamSecond {
    /// Calls that ended this second with an answer (their status any).
    #[serde(default)]
    pub calls: u64,
    /// The messages those calls received, all of them.
    #[serde(default)]
    pub messages_received: u64,
    /// The messages those calls sent (a client stream's lines).
    #[serde(default)]
    pub messages_sent: u64,
    /// Latency to each call's first message received, measured as the call's latency is
    /// (from the intended send in an open model); calls that received none are not in it.
    #[serde(default)]
    pub first_message: LatencyHistogram,
}

impl GrpcStreamSecond {
    /// Messages received a call (0 with no calls).
    pub fn received_per_call(&self) -> f64 {
        per_call(self.messages_received, self.calls)
    }

    /// Messages sent a call (0 with no calls).
    pub fn sent_per_call(&self) -> f64 {
        per_call(self.messages_sent, self.calls)
    }

    pub fn merge(&mut self, other: &GrpcStreamSecond) {
        self.calls = self.calls.saturating_add(other.calls);
        self.messages_received = (self.messages_received).saturating_add(other.messages_received);
        self.messages_sent = self.messages_sent.saturating_add(other.messages_sent);
        self.first_message.merge(&other.first_message);
    }
}

fn per_call(messages: u64, calls: u64) -> f64 {
    if calls == 0 {
        0.0
    } else {
        messages as f64 / calls as f64
    }
}

/// The longest `grpc-message` kept, in bytes (a server may send kilobytes).
pub const MAX_GRPC_MESSAGE: usize = 200;

/// A `grpc-message` as sent (percent-encoded UTF-8, gRPC over HTTP/2) as text: `%XX` undone,
/// what is not UTF-8 replaced, cut to [`MAX_GRPC_MESSAGE`] bytes at a character's edge.
pub fn decode_grpc_message(raw: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                bytes.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                bytes.push(b);
                i += 1;
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut end = text.len().min(MAX_GRPC_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The names of gRPC's status codes 0 to 16 (grpc/doc/statuscodes.md).
const NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A code's name; a code gRPC does not define is `CODE_<n>`.
pub fn grpc_code_name(code: u8) -> String {
    NAMES
        .get(usize::from(code))
        .map_or_else(|| format!("CODE_{code}"), |name| (*name).to_string())
}

/// A run's calls by status, each with its name, its count and the first message a call
/// that ended with it carried (failed calls only).
pub fn named_statuses<'a>(
    counts: &'a std::collections::BTreeMap<u8, u64>,
    messages: &'a std::collections::BTreeMap<u8, String>,
) -> impl Iterator<Item = (String, u64, Option<&'a str>)> + 'a {
    (counts.iter()).map(|(code, n)| {
        let message = messages.get(code).map(String::as_str);
        (grpc_code_name(*code), *n, message.filter(|m| !m.is_empty()))
    })
}

/// The code a name stands for (`UNAVAILABLE`, any case, or its number), for thresholds.
pub fn grpc_code_of(name: &str) -> Option<u8> {
    let name = name.trim();
    if let Ok(n) = name.parse::<u8>() {
        return Some(n);
    }
    (NAMES.iter())
        .position(|known| known.eq_ignore_ascii_case(name))
        .map(|i| i as u8)
}

/// The code a gRPC client takes from an HTTP status when the answer carried none (a proxy's
/// error page, a server that is not gRPC): grpc/doc/http-grpc-status-mapping.md. `None` for
/// a 200, whose missing `grpc-status` is the caller's to judge.
pub fn grpc_code_of_http(status: u16) -> Option<u8> {
    Some(match status {
        200 => return None,
        400 => GRPC_INTERNAL,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_name_and_back() {
        for code in 0..=16u8 {
            assert_eq!(grpc_code_of(&grpc_code_name(code)), Some(code));
        }
        assert_eq!(grpc_code_name(14), "UNAVAILABLE");
        assert_eq!(grpc_code_name(99), "CODE_99");
        assert_eq!(grpc_code_of("unavailable"), Some(14));
        assert_eq!(grpc_code_of("4"), Some(4));
        assert_eq!(grpc_code_of("NOPE"), None);
    }

    #[test]
    fn messages_are_percent_decoded_and_cut_at_a_character() {
        assert_eq!(decode_grpc_message(b"asked to fail"), "asked to fail");
        assert_eq!(
            decode_grpc_message(b"50%25 %E2%9C%93 done"),
            "50% \u{2713} done"
        );
        // a lone or bad escape stays as sent
        assert_eq!(decode_grpc_message(b"100% %zz %4"), "100% %zz %4");
        let long = "\u{e9}".repeat(150);
        let cut = decode_grpc_message(long.as_bytes());
        assert!(cut.len() <= MAX_GRPC_MESSAGE && cut.chars().all(|c| c == '\u{e9}'));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_to_text_within_the_cap(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            proptest::prop_assert!(decode_grpc_message(&raw).len() <= MAX_GRPC_MESSAGE);
        }
    }

    #[test]
    fn http_statuses_map_as_grpc_clients_map_them() {
        assert_eq!(grpc_code_of_http(200), None);
        assert_eq!(grpc_code_of_http(503), Some(14));
        assert_eq!(grpc_code_of_http(404), Some(12));
        assert_eq!(grpc_code_of_http(500), Some(2));
    }
}
