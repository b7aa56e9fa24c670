//! Live output while a phase runs, on stderr: a progress line redrawn each second on a
//! terminal, and JMeter's `summary +` / `summary =` lines every few seconds otherwise (CI
//! logs), in the exact format JMeter users and their log parsers know.

use std::io::{IsTerminal, Write};

use kiln_record::{LatencyHistogram, LatencyStats, PhaseEnd, PhaseSummary, SecondRecord};

use kiln_record::text as format;

pub struct LiveOutput {
    tty: bool,
    /// The live view of the phase running, on a terminal wide enough for it.
    dashboard: Option<crate::dashboard::Dashboard>,
    quiet: bool,
    interval_s: u32,
    phase: String,
    planned_s: u64,
    /// Whether the phase counts in the results: only a measured phase prints `summary =`,
    /// the line log parsers take for them.
    measured: bool,
    window: PhaseSummary,
    window_start: u32,
    total: PhaseSummary,
    /// The requests the last `summary =` line counted: the phase's end repeats none.
    total_shown: Option<u64>,
    /// The latencies the "last 1 s" figures are of (see [`LiveOutput::last_second`]).
    last_second: LatencyHistogram,
}

impl LiveOutput {
    pub fn new(quiet: bool, interval_s: u32) -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            dashboard: None,
            quiet,
            interval_s: interval_s.max(1),
            phase: String::new(),
            planned_s: 0,
            measured: true,
            window: PhaseSummary::default(),
            window_start: 0,
            total: PhaseSummary::default(),
            total_shown: None,
            last_second: LatencyHistogram::new(),
        }
    }

    /// The latencies of the last second shown: second `s`'s own, but after the deadline its
    /// few late answers (the slowest of the last second, as a rule) join the last planned
    /// second's, as its requests join that second's bar.
    fn last_second(&mut self, s: &SecondRecord) -> LatencyStats {
        if crate::dashboard::after_deadline(s, self.planned_s) {
            self.last_second.merge(&s.latency);
        } else {
            self.last_second = s.latency.clone();
        }
        self.last_second.stats()
    }

    /// The lines a window ending at second `now_s` prints: its own `+`, and after the first
    /// window of a measured phase the running `=`.
    fn window_lines(&mut self, now_s: u32, active: u64) -> Vec<String> {
        let secs = now_s - self.window_start;
        let mut lines = vec![format!(
            "{} Active: {active}",
            jmeter_line("+", &self.window, secs as f64)
        )];
        if self.window_start > 0 && self.measured {
            lines.push(jmeter_line("=", &self.total, now_s as f64));
            self.total_shown = Some(self.total.totals.requests);
        }
        self.window = PhaseSummary::new(&self.phase);
        self.window_start = now_s;
        lines
    }

    /// The lines second `s` prints without a terminal: a window's, when it closes one. A
    /// second after the deadline (the drain's late answers) closes none: its requests join
    /// the window the phase's end prints.
    fn second_lines(&mut self, s: &SecondRecord) -> Vec<String> {
        let closes_window = (s.second + 1).saturating_sub(self.window_start) >= self.interval_s;
        if closes_window && !crate::dashboard::after_deadline(s, self.planned_s) {
            self.window_lines(s.second + 1, s.connections)
        } else {
            Vec::new()
        }
    }

    /// The lines the phase's end prints: what the last windows have not covered, and the
    /// measured phase's `=` unless the last window's already counted all of it.
    fn end_lines(&mut self, end: &PhaseEnd) -> Vec<String> {
        let duration = end.duration_us as f64 / 1e6;
        let secs = (duration - self.window_start as f64).max(0.0);
        let mut lines = Vec::new();
        // A remainder under a second (requests finishing during the drain) is no window of
        // its own: "summary + 1 in 00:00:00" would read as a rate of thousands. The `=` line
        // holds them.
        if self.window.totals.requests > 0 && secs >= 1.0 {
            lines.push(format!(
                "{} Active: 0",
                jmeter_line("+", &self.window, secs)
            ));
        }
        if !end.measured {
            // Log parsers take `summary =` for the results: a warm-up's is not one.
            lines.push(format!(
                "kiln: {} ended: {} requests in {duration:.1} s, left out of the results",
                end.phase, self.total.totals.requests
            ));
        } else if self.total_shown != Some(self.total.totals.requests) {
            lines.push(jmeter_line("=", &self.total, duration));
        }
        lines
    }
}

/// The live lines follow the run's phases and seconds.
impl kiln_runner::Progress for LiveOutput {
    fn start_phase(&mut self, phase: &str, planned_s: u64, measured: bool) {
        self.phase = phase.to_string();
        self.planned_s = planned_s;
        self.measured = measured;
        self.total_shown = None;
        self.window = PhaseSummary::new(phase);
        self.window_start = 0;
        self.total = PhaseSummary::new(phase);
        if !self.quiet && !self.tty {
            eprintln!("kiln: {phase} started ({planned_s} s)");
        }
        if !self.quiet && self.tty {
            self.dashboard = crate::dashboard::Dashboard::open();
        }
    }

    fn second(&mut self, s: &SecondRecord) {
        self.window.add_second(s);
        self.total.add_second(s);
        if self.quiet {
            return;
        }
        let last = self.last_second(s);
        if let Some(dashboard) = &mut self.dashboard {
            dashboard.draw(&self.phase, self.planned_s, s, &last, &self.total);
        } else if self.tty {
            let lat = self.total.totals.latency.stats();
            let line = format!(
                "[{}] {}s/{}s  {}  p50 {}  p99 {} (all {})  failed {}  conns {}",
                self.phase,
                crate::dashboard::second_shown(s, self.planned_s),
                self.planned_s,
                crate::dashboard::rate_shown(s, self.planned_s, &self.total),
                format::us(last.p50_us),
                format::us(last.p99_us),
                format::us(lat.p99_us),
                self.total.failed(),
                s.connections
            );
            // A line wider than the terminal wraps, and the redraw then returns to its last
            // row only: a new line per second. It is cut to the width instead.
            let width = crate::text::stderr_width().unwrap_or(80);
            eprint!("\r\x1b[2K{}", cut_to(&line, width.saturating_sub(1)));
            let _ = std::io::stderr().flush();
        } else {
            for line in self.second_lines(s) {
                eprintln!("{line}");
            }
        }
    }

    fn end_phase(&mut self, end: &PhaseEnd) {
        if self.quiet {
            return;
        }
        if let Some(dashboard) = self.dashboard.take() {
            dashboard.close();
            return;
        }
        if self.tty {
            eprintln!();
            return;
        }
        for line in self.end_lines(end) {
            eprintln!("{line}");
        }
    }
}

/// The first `width` characters of `line`.
fn cut_to(line: &str, width: usize) -> &str {
    match line.char_indices().nth(width) {
        Some((at, _)) => &line[..at],
        None => line,
    }
}

/// `summary +  175888 in 00:00:30 = 5862.9/s Avg:   136 Min:     9 Max:   539 Err:     0 (0.00%)`
/// (JMeter's Summariser format: times in whole milliseconds, Err counts failed samples).
pub fn jmeter_line(sign: &str, p: &PhaseSummary, secs: f64) -> String {
    let ms = |us: f64| (us / 1000.0).round() as u64;
    let rate = if secs > 0.0 {
        p.totals.requests as f64 / secs
    } else {
        0.0
    };
    let err_pct = p.failed_ratio() * 100.0;
    format!(
        "summary {sign} {:>6} in {} = {:>6.1}/s Avg: {:>5} Min: {:>5} Max: {:>5} Err: {:>5} ({:.2}%)",
        p.totals.requests,
        format::hms(secs.round() as u64),
        rate,
        ms(p.totals.latency.mean_us()),
        ms(p.totals.latency.min_us() as f64),
        ms(p.totals.latency.max_us() as f64),
        p.failed(),
        err_pct
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_is_cut_to_the_terminal_not_wrapped() {
        assert_eq!(cut_to("[run] 3s/10s  1200 req/s", 12), "[run] 3s/10s");
        assert_eq!(cut_to("short", 80), "short");
        assert_eq!(cut_to("p99 18.8µs", 9), "p99 18.8µ");
    }

    #[test]
    fn the_last_second_after_the_deadline_is_the_last_planned_one_with_its_late_answers() {
        let mut live = LiveOutput::new(true, 5);
        live.planned_s = 2;
        let second = |n: u32, latencies_ms: &[u64]| {
            let mut s = SecondRecord {
                second: n,
                ..Default::default()
            };
            for ms in latencies_ms {
                s.latency.record_us(ms * 1000);
            }
            s
        };
        assert_eq!(live.last_second(&second(0, &[5, 5])).count, 2);
        let last = live.last_second(&second(1, &[1, 1, 1, 1]));
        assert_eq!((last.count, last.max_us / 1000), (4, 1));
        // the drain second's one late answer joins the four of second 1, not alone
        let drained = live.last_second(&second(2, &[90]));
        assert_eq!(drained.count, 5);
        assert_eq!(drained.p50_us / 1000, 1, "{drained:?}");
        assert!(drained.max_us >= 89_000, "{drained:?}");
    }

    /// The lines a phase prints without a terminal, a second at a time: `(second, requests)`.
    fn phase_lines(
        measured: bool,
        planned_s: u64,
        seconds: &[(u32, u64)],
        end_us: u64,
    ) -> Vec<String> {
        let mut live = LiveOutput::new(false, 1);
        live.tty = false;
        kiln_runner::Progress::start_phase(&mut live, "phase", planned_s, measured);
        let mut lines = Vec::new();
        for &(second, requests) in seconds {
            let s = SecondRecord {
                second,
                requests,
                ..Default::default()
            };
            live.window.add_second(&s);
            live.total.add_second(&s);
            lines.extend(live.second_lines(&s));
        }
        let end = PhaseEnd {
            phase: "phase".into(),
            measured,
            duration_us: end_us,
            ..Default::default()
        };
        lines.extend(live.end_lines(&end));
        lines
    }

    #[test]
    fn a_warmups_late_second_prints_no_summary_a_log_parser_would_take_for_results() {
        // a busy host: the warm-up's 1 s ends after its second second began, which holds none
        let lines = phase_lines(false, 1, &[(0, 100), (1, 0)], 1_100_000);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("summary +    100 in 00:00:01"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("kiln: phase ended: 100 requests"),
            "{lines:?}"
        );
        // a longer warm-up's running total is no `summary =` either
        let lines = phase_lines(false, 3, &[(0, 10), (1, 10), (2, 10)], 3_000_000);
        assert!(
            lines.iter().all(|l| !l.starts_with("summary =")),
            "{lines:?}"
        );
        assert_eq!(lines.len(), 4, "{lines:?}");
    }

    #[test]
    fn a_measured_phase_ends_with_one_summary_of_all_its_requests() {
        let lines = phase_lines(true, 3, &[(0, 100), (1, 100), (2, 100)], 3_000_000);
        let totals: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("summary ="))
            .collect();
        assert_eq!(
            totals.len(),
            2,
            "at 2 s and at the end, not twice at the end: {lines:?}"
        );
        assert!(
            totals[1].starts_with("summary =    300 in 00:00:03"),
            "{lines:?}"
        );
        // late answers in the second after the deadline join the end's `=`, and under a
        // second they make no `+` of their own
        let lines = phase_lines(true, 3, &[(0, 100), (1, 100), (2, 98), (3, 2)], 3_400_000);
        assert!(
            lines
                .last()
                .unwrap()
                .starts_with("summary =    300 in 00:00:03"),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains(" in 00:00:00 ")),
            "{lines:?}"
        );
        // a one-window phase still ends with its `=`
        let lines = phase_lines(true, 1, &[(0, 50)], 1_000_000);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].starts_with("summary =     50 in 00:00:01"),
            "{lines:?}"
        );
    }

    #[test]
    fn the_summary_line_matches_jmeters_format() {
        let mut p = PhaseSummary::new("run");
        let mut s = SecondRecord {
            requests: 3,
            ..Default::default()
        };
        s.status.insert(200, 2);
        s.status.insert(500, 1);
        for us in [9_000, 136_000, 539_000] {
            s.latency.record_us(us);
        }
        p.add_second(&s);
        let line = jmeter_line("+", &p, 30.0);
        assert_eq!(
            line,
            "summary +      3 in 00:00:30 =    0.1/s Avg:   228 Min:     9 Max:   539 Err:     1 (33.33%)"
        );
    }
}
