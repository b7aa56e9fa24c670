//! What kiln saw on its side of the socket, per second: how each HTTP/1.1 response arrived
//! (in one piece, or its last byte some time after its first) and what new connections cost
//! and how they ended. Kept as counts: no per-request log.

use serde::{Deserialize, Serialize};

/// The gap buckets' upper bounds in milliseconds (the last bucket has none): under 1, 1-10,
/// 10-30, 30-60 (Linux's 40 ms delayed ACK), 60-180, 180-260 (the 200 ms of other stacks),
/// 260 and more.
pub const GAP_BOUNDS_MS: [u64; 6] = [1, 10, 30, 60, 180, 260];

/// The buckets of a delayed-ACK stall: 30-60 ms (Linux's 40 ms minimum) and 180-260 ms
/// (200 ms, other stacks' default).
pub const DELAYED_ACK_BUCKETS: [usize; 2] = [3, 5];

/// Gaps from this length on are summed in [`WireSecond::gap_us_over_30ms`].
pub const LONG_GAP_MS: u64 = 30;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WireSecond {
    /// HTTP/1.1 responses by the time from their first byte's arrival to their last's (see
    /// [`GAP_BOUNDS_MS`]).
    pub gaps: [u64; 7],
    /// The gaps of 30 ms or more, added up (microseconds).
    pub gap_us_over_30ms: u64,
    /// The socket reads those responses took (a response in two parts takes two at least).
    pub reads: u64,
    /// New connections opened, and their TCP connect times added up (microseconds).
    pub connects: u64,
    pub connect_us: u64,
    /// TLS handshakes, their times added up (microseconds), and how many resumed a session.
    pub tls_handshakes: u64,
    pub tls_us: u64,
    pub tls_resumed: u64,
    /// Connections the target ended: it said `Connection: close`, or closed while idle.
    pub closed_by_target: u64,
    /// Connections the target reset or closed with a request unanswered.
    pub reset: u64,
    /// Connections kiln closed after a request failed on them (a timeout, a response that
    /// was not HTTP, a TLS error).
    pub closed_by_kiln: u64,
    /// Requests the target refused before processing them (HTTP/2 REFUSED_STREAM, or past a
    /// GOAWAY's last stream), sent again once as RFC 9113 8.7 allows; each is counted once,
    /// by its final outcome, in the requests.
    pub retried: u64,
}

impl WireSecond {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// A response whose last byte came `gap_us` after its first.
    pub fn response(&mut self, gap_us: u64) {
        let ms = gap_us / 1000;
        let bucket = GAP_BOUNDS_MS
            .iter()
            .position(|&bound| ms < bound)
            .unwrap_or(GAP_BOUNDS_MS.len());
        self.gaps[bucket] += 1;
        if ms >= LONG_GAP_MS {
            self.gap_us_over_30ms = self.gap_us_over_30ms.saturating_add(gap_us);
        }
    }

    /// HTTP/1.1 responses counted.
    pub fn responses(&self) -> u64 {
        self.gaps.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Responses whose gap lies in a delayed-ACK band.
    pub fn delayed_ack_band(&self) -> u64 {
        DELAYED_ACK_BUCKETS.iter().map(|&b| self.gaps[b]).sum()
    }

    /// Responses whose gap was 30 ms or more.
    pub fn long_gaps(&self) -> u64 {
        self.gaps[3..].iter().sum()
    }

    /// The share of responses that came in two parts 30 ms or more apart (None: none timed).
    pub fn two_part_share(&self) -> Option<f64> {
        let timed = self.responses();
        (timed > 0).then(|| self.long_gaps() as f64 / timed as f64)
    }

    /// The mean gap of the responses in two parts, microseconds (None: there were none).
    pub fn two_part_mean_us(&self) -> Option<f64> {
        let long = self.long_gaps();
        (long > 0).then(|| self.gap_us_over_30ms as f64 / long as f64)
    }

    /// Socket reads a timed response (None: none timed).
    pub fn reads_per_response(&self) -> Option<f64> {
        let timed = self.responses();
        (timed > 0).then(|| self.reads as f64 / timed as f64)
    }

    /// `requests` over the connections opened (None: none opened).
    pub fn requests_per_connection(&self, requests: u64) -> Option<f64> {
        (self.connects > 0).then(|| requests as f64 / self.connects as f64)
    }

    pub fn merge(&mut self, other: &WireSecond) {
        for (mine, theirs) in self.gaps.iter_mut().zip(other.gaps) {
            *mine = mine.saturating_add(theirs);
        }
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.gap_us_over_30ms, other.gap_us_over_30ms);
        add(&mut self.reads, other.reads);
        add(&mut self.connects, other.connects);
        add(&mut self.connect_us, other.connect_us);
        add(&mut self.tls_handshakes, other.tls_handshakes);
        add(&mut self.tls_us, other.tls_us);
        add(&mut self.tls_resumed, other.tls_resumed);
        add(&mut self.closed_by_target, other.closed_by_target);
        add(&mut self.reset, other.reset);
        add(&mut self.closed_by_kiln, other.closed_by_kiln);
        add(&mut self.retried, other.retried);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_fall_in_their_buckets_and_long_ones_are_summed() {
        let mut w = WireSecond::default();
        for us in [
            0, 999, 1_000, 29_999, 40_000, 44_000, 60_000, 200_000, 300_000,
        ] {
            w.response(us);
        }
        assert_eq!(w.gaps, [2, 1, 1, 2, 1, 1, 1]);
        assert_eq!(w.delayed_ack_band(), 3);
        assert_eq!(w.long_gaps(), 5);
        assert_eq!(w.gap_us_over_30ms, 644_000);
        let mut sum = WireSecond::default();
        sum.merge(&w);
        sum.merge(&w);
        assert_eq!(sum.responses(), 18);
    }
}
