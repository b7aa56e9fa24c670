//! The host's noise over the measured load, as kiln itself felt it (`noise.jsonl`): the
//! summary's "Host noise" line and the `--json` summary's `host_noise`.

use std::fmt::Write as _;

use kiln_record::{PhaseSummary, Span};
use kiln_sample::{NoiseSecond, STARVED_MS};
use serde::Serialize;

use kiln_record::text::safe_text;

/// The seconds of `seconds` inside the measured span of `total` (all of them without one).
pub fn during(total: &PhaseSummary, seconds: &[NoiseSecond]) -> Vec<NoiseSecond> {
    Span::keep(
        kiln_record::PhaseSummary::measured_span(std::slice::from_ref(total)),
        seconds,
        |s| s.unix_ms,
    )
}

/// How late kiln got a CPU over some seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NoiseSummary {
    pub seconds: usize,
    /// The probe's latest wake-up (ms).
    pub probe_late_max_ms: f64,
    /// Seconds in which the probe woke [`STARVED_MS`] or more late: kiln's requests left late.
    pub starved_seconds: usize,
    pub starved_ms: f64,
    /// The thread that waited longest for a CPU in any one second: its waits summed (ms), its
    /// name, and its mean wait each time it was put on a CPU (ms). None without schedstat.
    pub wait_max_ms: Option<f64>,
    pub wait_max_thread: String,
    pub wait_max_mean_ms: Option<f64>,
}

impl NoiseSummary {
    /// None without seconds (a record from before kiln measured its noise).
    pub fn of(seconds: &[NoiseSecond]) -> Option<Self> {
        if seconds.is_empty() {
            return None;
        }
        let longest = seconds
            .iter()
            .filter(|s| s.wait_max_ms.is_some())
            .max_by(|a, b| {
                a.wait_max_ms
                    .unwrap_or(0.0)
                    .total_cmp(&b.wait_max_ms.unwrap_or(0.0))
            });
        Some(Self {
            seconds: seconds.len(),
            probe_late_max_ms: seconds
                .iter()
                .map(|s| s.probe_late_max_ms)
                .fold(0.0, f64::max),
            starved_seconds: seconds.iter().filter(|s| s.starved()).count(),
            starved_ms: STARVED_MS,
            wait_max_ms: longest.and_then(|w| w.wait_max_ms),
            wait_max_thread: longest.map_or_else(String::new, |w| w.wait_max_thread.clone()),
            wait_max_mean_ms: longest.and_then(NoiseSecond::wait_max_mean_ms),
        })
    }

    /// The summary's line, e.g. "Host noise  kiln's probe woke up to 58 ms late; 3 of 30
    /// seconds 20 ms or more late: requests due in them left late, whatever the target did;
    /// its thread kiln-load-1 waited up to 61 ms of a second for a CPU (0.6 ms each time)".
    pub fn text(&self) -> String {
        let mut out = format!(
            "Host noise  kiln's probe woke up to {} late",
            ms_text(self.probe_late_max_ms)
        );
        if self.starved_seconds > 0 {
            let _ = write!(
                out,
                "; {} of {} seconds {} or more late: requests due in them left late, whatever the target did",
                self.starved_seconds,
                self.seconds,
                ms_text(self.starved_ms)
            );
        } else {
            out += " (quiet)";
        }
        if let (Some(ms), Some(mean)) = (self.wait_max_ms, self.wait_max_mean_ms) {
            let _ = write!(
                out,
                "; its thread {} waited up to {} of a second for a CPU ({} each time)",
                safe_text(&self.wait_max_thread),
                ms_text(ms),
                ms_text(mean)
            );
        }
        out += "\n";
        out
    }
}

fn ms_text(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(wait: Option<f64>, late: f64) -> NoiseSecond {
        NoiseSecond {
            unix_ms: 1,
            interval_s: 1.0,
            probe_late_max_ms: late,
            probe_wakeups: 100,
            wait_total_ms: wait,
            wait_max_ms: wait,
            wait_max_thread: "kiln-load-0".into(),
            wait_max_runs: 100,
        }
    }

    #[test]
    fn the_latest_wake_up_the_starved_seconds_and_the_longest_wait_are_said() {
        let s = NoiseSummary::of(&[
            second(Some(0.2), 0.1),
            second(Some(31.2), 4.0),
            second(Some(3.0), 25.0),
        ])
        .unwrap();
        assert_eq!(s.wait_max_ms, Some(31.2));
        assert_eq!(s.probe_late_max_ms, 25.0);
        assert_eq!(s.starved_seconds, 1);
        assert_eq!(
            s.text(),
            "Host noise  kiln's probe woke up to 25 ms late; 1 of 3 seconds 20 ms or more late: \
             requests due in them left late, whatever the target did; its thread kiln-load-0 \
             waited up to 31 ms of a second for a CPU (0.3 ms each time)\n"
        );
        let quiet = NoiseSummary::of(&[second(Some(0.4), 0.2)]).unwrap();
        assert_eq!(
            quiet.text(),
            "Host noise  kiln's probe woke up to 0.2 ms late (quiet); its thread kiln-load-0 \
             waited up to 0.4 ms of a second for a CPU (0.0 ms each time)\n"
        );
        assert!(NoiseSummary::of(&[]).is_none());
        let probe_only = NoiseSummary::of(&[second(None, 30.0)]).unwrap();
        assert_eq!(probe_only.starved_seconds, 1);
        assert!(!probe_only.text().contains("thread"));
    }
}
