//! What the wire showed over a phase, as a line of the run summary and its JSON: requests a
//! connection, what a new connection cost, and responses that came in two parts.

use kiln_record::text::us;
use kiln_record::wire::WireSecond;
use kiln_record::PhaseSummary;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WireSummary {
    pub connections_opened: u64,
    pub requests_per_connection: Option<f64>,
    pub connect_mean_us: Option<f64>,
    pub tls_handshakes: u64,
    pub tls_mean_us: Option<f64>,
    pub tls_resumed: u64,
    pub closed_by_target: u64,
    /// Connections reset with a request on them, and those kiln closed after a failure.
    pub reset: u64,
    pub closed_by_kiln: u64,
    /// Requests the target refused unprocessed (HTTP/2) and kiln sent again, once each.
    pub retried: u64,
    /// HTTP/1.1 responses timed from first byte to last.
    pub responses_timed: u64,
    /// Of them, the share whose last byte came 30 ms or more after the first, and those
    /// gaps' mean.
    pub two_part_share: Option<f64>,
    pub two_part_mean_us: Option<f64>,
    /// The responses by gap (see `kiln_record::wire::GAP_BOUNDS_MS`).
    pub gaps: [u64; 7],
    /// Socket reads a timed response (None in records from before reads were counted).
    pub reads_per_response: Option<f64>,
}

fn mean(sum: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| sum as f64 / n as f64)
}

impl WireSummary {
    /// The phase's wire figures; None when none were recorded (an older record).
    pub fn of(total: &PhaseSummary) -> Option<Self> {
        let w: &WireSecond = &total.totals.wire;
        if w.is_empty() {
            return None;
        }
        Some(Self {
            connections_opened: w.connects,
            requests_per_connection: w.requests_per_connection(total.totals.requests),
            connect_mean_us: mean(w.connect_us, w.connects),
            tls_handshakes: w.tls_handshakes,
            tls_mean_us: mean(w.tls_us, w.tls_handshakes),
            tls_resumed: w.tls_resumed,
            closed_by_target: w.closed_by_target,
            reset: w.reset,
            closed_by_kiln: w.closed_by_kiln,
            retried: w.retried,
            responses_timed: w.responses(),
            two_part_share: w.two_part_share(),
            two_part_mean_us: w.two_part_mean_us(),
            gaps: w.gaps,
            reads_per_response: w.reads_per_response().filter(|_| w.reads > 0),
        })
    }

    /// `Wire       1.00 requests a connection (1759 opened, 0.1ms to connect, the target
    /// closed 1759); 99.3% of responses came in two parts 43.6ms apart`
    pub fn text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(per) = self.requests_per_connection {
            let mut connections = format!(
                "{per:.2} requests a connection ({} opened, {} to connect",
                self.connections_opened,
                us(self.connect_mean_us.unwrap_or(0.0).round() as u64)
            );
            if let Some(tls) = self.tls_mean_us {
                connections += &format!(
                    ", {} of TLS handshake, {} of {} resumed",
                    us(tls.round() as u64),
                    self.tls_resumed,
                    self.tls_handshakes
                );
            }
            if self.closed_by_target > 0 {
                connections += &format!(", the target closed {}", self.closed_by_target);
            }
            if self.reset > 0 {
                connections += &format!(", {} reset", self.reset);
            }
            if self.closed_by_kiln > 0 {
                connections += &format!(", kiln closed {} after a failure", self.closed_by_kiln);
            }
            connections.push(')');
            parts.push(connections);
        }
        if self.retried > 0 {
            parts.push(format!(
                "{} requests refused unprocessed (HTTP/2) and sent again",
                self.retried
            ));
        }
        if let Some(share) = self.two_part_share {
            let reads = self
                .reads_per_response
                .map_or(String::new(), |r| format!(" ({r:.2} reads a response)"));
            parts.push(match self.two_part_mean_us {
                Some(gap) if share > 0.0 => format!(
                    "{:.1}% of responses came in two parts {} apart{reads}",
                    share * 100.0,
                    us(gap.round() as u64)
                ),
                _ => format!("every response came in one piece{reads}"),
            });
        }
        match parts.is_empty() {
            true => String::new(),
            false => format!("Wire       {}\n", parts.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_what_the_counts_say() {
        let mut total = PhaseSummary::new("run");
        let mut second = kiln_record::SecondRecord {
            phase: "run".into(),
            requests: 100,
            ..Default::default()
        };
        for gap in [44_000; 50].into_iter().chain([100; 50]) {
            second.wire.response(gap);
        }
        second.wire.connects = 2;
        second.wire.connect_us = 300;
        second.wire.reads = 150;
        second.wire.reset = 1;
        second.wire.closed_by_kiln = 2;
        second.wire.retried = 3;
        total.add_second(&second);
        let w = WireSummary::of(&total).unwrap();
        assert_eq!(w.requests_per_connection, Some(50.0));
        assert_eq!(
            w.text(),
            "Wire       50.00 requests a connection (2 opened, 150us to connect, 1 reset, kiln \
             closed 2 after a failure); 3 requests refused unprocessed (HTTP/2) and sent again; \
             50.0% of responses came in two parts 44.0ms apart (1.50 reads a response)\n"
        );
        assert_eq!(WireSummary::of(&PhaseSummary::new("run")), None);
    }
}
