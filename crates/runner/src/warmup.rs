//! `--warmup auto`: the warm-up ends when the target has settled, judged once a second from
//! the load's own seconds and, for a JVM, its JIT compiler's time (from hsperfdata): the JIT
//! has gone quiet and throughput has stopped moving. A cap ends it regardless, said so.

use std::collections::VecDeque;

/// Seconds of load looked at together to call throughput steady.
const WINDOW: usize = 3;
/// Seconds of the JIT looked at together to call it quiet: it compiles in bursts (C2 after
/// C1, recompiles after deoptimisation), so a longer look than throughput's.
const JIT_WINDOW: usize = 5;
/// The shortest auto warm-up: a JIT needs a few seconds before it is even busy.
pub const MIN_SECONDS: u32 = 5;
/// Throughput is steady when the window's slowest and fastest second differ by at most this.
const STEADY_RATIO: f64 = 1.2;
/// The JIT is quiet when each second of the window compiled at most this share of its
/// busiest second...
const QUIET_SHARE: f64 = 0.10;
/// ...or at most this many ms a second (2% of one core: background recompiles).
const QUIET_MS: f64 = 20.0;

/// The compiler threads are quiet at this share of a core or less (a background recompile).
const QUIET_CPU_PCT: f64 = 3.0;

/// One witness of the JIT's activity, second by second: its last `JIT_WINDOW` seconds and
/// its busiest second so far.
#[derive(Debug, Default)]
struct Witness {
    last: Vec<f64>,
    busiest: f64,
}

impl Witness {
    fn update(&mut self, series: &[f64]) {
        self.busiest = series.iter().copied().fold(0.0, f64::max);
        self.last = series[series.len().saturating_sub(JIT_WINDOW)..].to_vec();
    }

    fn loudest(&self) -> f64 {
        self.last.iter().copied().fold(0.0, f64::max)
    }

    /// Quiet: each of the window's seconds at most a tenth of the busiest, or `floor`.
    fn quiet(&self, floor: f64) -> bool {
        self.last.len() >= JIT_WINDOW && self.loudest() <= (self.busiest * QUIET_SHARE).max(floor)
    }
}

/// Watches the warm-up's seconds and says when it has settled, and why.
#[derive(Debug, Default)]
pub struct Settle {
    seconds: u32,
    requests: VecDeque<u64>,
    /// The JIT's compile time (ms) a second, from the JVM's counters.
    jit: Witness,
    /// The JIT compiler threads' CPU (percent of a core) a second, from the kernel's
    /// per-thread counters.
    compiler: Witness,
}

impl Settle {
    /// One more second of load (its responses) and, for a JVM, the JIT's compile time in
    /// every runtime second so far and its compiler threads' CPU in every sample so far (each
    /// witness ticks on its own clock; an empty series is a witness kiln does not have).
    /// Returns why the warm-up may end now, or None to go on.
    pub fn second(
        &mut self,
        requests: u64,
        jit_series: &[f64],
        compiler_pct: &[f64],
    ) -> Option<String> {
        self.seconds += 1;
        if self.requests.len() == WINDOW {
            self.requests.pop_front();
        }
        self.requests.push_back(requests);
        self.jit.update(jit_series);
        self.compiler.update(compiler_pct);
        if self.seconds < MIN_SECONDS || self.requests.len() < WINDOW {
            return None;
        }
        let slowest = *self.requests.iter().min()?;
        let fastest = *self.requests.iter().max()?;
        if slowest == 0 || fastest as f64 > STEADY_RATIO * slowest as f64 {
            return None;
        }
        let steady = format!(
            "throughput steady ({slowest} to {fastest} responses a second over the last {WINDOW} s)"
        );
        let (has_jit, has_compiler) = (!jit_series.is_empty(), !compiler_pct.is_empty());
        if !has_jit && !has_compiler {
            return Some(format!(
                "after {} s: {steady}; no JIT figures for this target",
                self.seconds
            ));
        }
        if (has_jit && !self.jit.quiet(QUIET_MS))
            || (has_compiler && !self.compiler.quiet(QUIET_CPU_PCT))
        {
            return None;
        }
        let mut quiet = Vec::new();
        if has_jit {
            quiet.push(format!(
                "the JIT compiled at most {:.0} ms a second over the last {JIT_WINDOW} s (its \
                 busiest second: {:.0} ms)",
                self.jit.loudest(),
                self.jit.busiest
            ));
        }
        if has_compiler {
            quiet.push(format!(
                "its compiler threads used at most {:.0}% of a core (at most {:.0}% before)",
                self.compiler.loudest(),
                self.compiler.busiest
            ));
        }
        Some(format!(
            "after {} s: {}, and {steady}",
            self.seconds,
            quiet.join("; ")
        ))
    }

    /// What had not settled when the cap came.
    pub fn unsettled(&self) -> String {
        let mut why = Vec::new();
        if !self.jit.last.is_empty() && !self.jit.quiet(QUIET_MS) {
            why.push(format!(
                "the JIT still compiled up to {:.0} ms a second (busiest {:.0} ms)",
                self.jit.loudest(),
                self.jit.busiest
            ));
        }
        if !self.compiler.last.is_empty() && !self.compiler.quiet(QUIET_CPU_PCT) {
            why.push(format!(
                "its compiler threads still used up to {:.0}% of a core",
                self.compiler.loudest()
            ));
        }
        let slowest = self.requests.iter().min().copied().unwrap_or(0);
        let fastest = self.requests.iter().max().copied().unwrap_or(0);
        if slowest == 0 || fastest as f64 > STEADY_RATIO * slowest as f64 {
            why.push(format!(
                "throughput still moved ({slowest} to {fastest} responses a second)"
            ));
        }
        format!(
            "the cap of {} s came before the target settled: {}",
            self.seconds,
            if why.is_empty() {
                "too few seconds".to_string()
            } else {
                why.join("; ")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jit_that_goes_quiet_and_steady_throughput_end_the_warm_up() {
        let mut s = Settle::default();
        let jit = [400.0, 300.0, 200.0, 90.0, 30.0, 15.0, 10.0, 12.0, 25.0, 5.0];
        let rps = [500, 800, 1000, 1150, 1200, 1210, 1190, 1205, 1200, 1200];
        let mut ended = None;
        for (i, r) in rps.into_iter().enumerate() {
            if let Some(why) = s.second(r, &jit[..=i], &[]) {
                ended = Some((i + 1, why));
                break;
            }
        }
        let (at, why) = ended.expect("settles");
        // the 5 s window 30, 15, 10, 12, 25 (second 9) is under 10% of 400 = 40: quiet
        assert_eq!(at, 9, "{why}");
        assert!(why.contains("at most 30 ms a second"), "{why}");
        assert!(why.contains("busiest second: 400 ms"), "{why}");
    }

    #[test]
    fn a_busy_jit_or_moving_throughput_keep_it_going_and_the_cap_says_why() {
        let mut s = Settle::default();
        for i in 1..=10 {
            assert_eq!(
                s.second(1000, &vec![150.0; i], &[]),
                None,
                "the JIT never quiets down"
            );
        }
        assert!(
            s.unsettled().contains("still compiled up to 150 ms"),
            "{}",
            s.unsettled()
        );
        let mut s = Settle::default();
        for i in 0..10 {
            assert_eq!(
                s.second(100 + 50 * i, &[0.0; 6], &[]),
                None,
                "throughput climbs"
            );
        }
        assert!(
            s.unsettled().contains("throughput still moved"),
            "{}",
            s.unsettled()
        );
    }

    #[test]
    fn without_jit_figures_throughput_alone_decides_after_the_minimum() {
        let mut s = Settle::default();
        for i in 1..MIN_SECONDS {
            assert_eq!(
                s.second(1000, &[], &[]),
                None,
                "second {i} is before the minimum"
            );
        }
        let why = s.second(1000, &[], &[]).expect("steady");
        assert!(why.contains("no JIT figures"), "{why}");
        let mut s = Settle::default();
        for _ in 0..10 {
            assert_eq!(s.second(0, &[], &[]), None, "nothing answered: not settled");
        }
    }

    #[test]
    fn busy_compiler_threads_keep_it_going_and_alone_can_end_it() {
        // the JIT's counter quiet, its threads still busy (another witness disagrees): not
        // settled until both are quiet
        let mut s = Settle::default();
        let jit = [
            400.0, 300.0, 10.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0,
        ];
        let cpu = [
            90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 2.0, 2.0, 2.0, 2.0, 2.0,
        ];
        let mut ended = None;
        for i in 0..jit.len() {
            if let Some(why) = s.second(1000, &jit[..=i], &cpu[..=i]) {
                ended = Some((i + 1, why));
                break;
            }
        }
        let (at, why) = ended.expect("settles");
        // the threads' last 5 s are all within a tenth of their busiest (9%) from second 12
        assert_eq!(at, 12, "{why}");
        assert!(
            why.contains("compiler threads used at most 2% of a core"),
            "{why}"
        );
        assert!(why.contains("the JIT compiled at most 5 ms"), "{why}");
        // a JVM without its counters (-XX:-UsePerfData): the threads alone decide
        let mut s = Settle::default();
        let cpu = [90.0, 80.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let ended = (0..cpu.len()).find_map(|i| s.second(1000, &[], &cpu[..=i]));
        let why = ended.expect("settles");
        assert!(!why.contains("no JIT figures"), "{why}");
        assert!(why.contains("compiler threads"), "{why}");
        let mut s = Settle::default();
        for i in 1..=10 {
            assert_eq!(s.second(1000, &[], &vec![50.0; i]), None);
        }
        assert!(
            s.unsettled()
                .contains("compiler threads still used up to 50%"),
            "{}",
            s.unsettled()
        );
    }
}
