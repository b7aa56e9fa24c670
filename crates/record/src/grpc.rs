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
    pub fn merge(&mut self, other: &GrpcStreamSecond) {
        self.calls = self.calls.saturating_add(other.calls);
        self.messages_received = (self.messages_received).saturating_add(other.messages_received);
        self.messages_sent = self.messages_sent.saturating_add(other.messages_sent);
        self.first_message.merge(&other.first_message);
    }
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
    fn http_statuses_map_as_grpc_clients_map_them() {
        assert_eq!(grpc_code_of_http(200), None);
        assert_eq!(grpc_code_of_http(503), Some(14));
        assert_eq!(grpc_code_of_http(404), Some(12));
        assert_eq!(grpc_code_of_http(500), Some(2));
    }
}
