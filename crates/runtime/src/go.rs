//! A Go target's garbage collector, from the line the runtime writes to stderr for every
//! cycle when `GODEBUG=gctrace=1` is set (kiln sets it on a target it starts, `--spawn`):
//!
//! `gc 7 @15.051s 14%: 4.0+4413+2.7 ms clock, 8.0+1052/2221/2705+5.5 ms cpu, 594->737->670 MB,
//! 698 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)`
//!
//! Clock `a+b+c`: the stop-the-world sweep termination, the concurrent mark, the
//! stop-the-world mark termination (the pause is a + c). CPU `a+x/y/z+c`: x is the CPU that
//! allocating goroutines spent assisting the mark (mark assist: the request's own goroutine
//! doing GC work), y the background workers', z idle-time marking. Go documents the format as
//! subject to change: a line that does not parse is not a cycle, never a panic.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// One GC cycle as gctrace reported it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoGcCycle {
    /// The runtime's cycle number (from 1).
    pub number: u64,
    /// When the cycle began: seconds since the program started, and on the wall clock (ms
    /// since the Unix epoch; the start taken as when kiln started the process).
    pub at_s: f64,
    pub start_unix_ms: f64,
    /// Stop-the-world time: sweep termination + mark termination.
    pub pause_ms: f64,
    /// The concurrent mark's wall time.
    pub mark_ms: f64,
    /// CPU spent by allocating goroutines assisting the mark, by the background mark
    /// workers, and by idle-time marking.
    pub assist_cpu_ms: f64,
    pub background_cpu_ms: f64,
    pub idle_cpu_ms: f64,
    /// The heap when the cycle began and ended, and the live heap it marked (MB).
    pub heap_start_mb: f64,
    pub heap_end_mb: f64,
    pub heap_live_mb: f64,
    /// `runtime.GC()` asked for it.
    pub forced: bool,
}

impl GoGcCycle {
    /// All the CPU the cycle took: both pauses' and the three kinds of marking.
    pub fn cpu_ms(&self) -> f64 {
        self.assist_cpu_ms + self.background_cpu_ms + self.idle_cpu_ms
    }
}

/// Parses one gctrace line; `None` for any other line. `started_unix_ms`: when the program
/// started, to put the cycle on the wall clock.
pub fn parse_gctrace(line: &str, started_unix_ms: f64) -> Option<GoGcCycle> {
    let line = line.trim();
    let rest = line.strip_prefix("gc ")?;
    let (head, tail) = rest.split_once(':')?;
    let mut head = head.split_whitespace();
    let number: u64 = head.next()?.parse().ok()?;
    let at_s: f64 = head
        .next()?
        .strip_prefix('@')?
        .strip_suffix('s')?
        .parse()
        .ok()?;
    let mut fields = tail.split(',').map(str::trim);
    let clock: Vec<f64> = numbers(fields.next()?.strip_suffix(" ms clock")?, '+')?;
    let cpu = fields.next()?.strip_suffix(" ms cpu")?;
    let cpu_parts: Vec<&str> = cpu.split('+').collect();
    let heaps: Vec<f64> = numbers(fields.next()?.strip_suffix(" MB")?, '-')?;
    let [sweep_term, mark, mark_term] = clock[..] else {
        return None;
    };
    let [_, marking, _] = cpu_parts[..] else {
        return None;
    };
    let marking: Vec<f64> = numbers(marking, '/')?;
    let [assist, background, idle] = marking[..] else {
        return None;
    };
    let [heap_start, heap_end, heap_live] = heaps[..] else {
        return None;
    };
    // a line is the target's text: figures no Go runtime prints (a pause of 10^300 ms, a
    // heap of an exabyte) are not a cycle
    const MAX_MS: f64 = 86_400_000.0;
    const MAX_MB: f64 = 1e9;
    let times = [sweep_term, mark, mark_term, assist, background, idle];
    let sane = |v: f64, max: f64| v.is_finite() && (0.0..=max).contains(&v);
    if !sane(at_s, 1e9)
        || !times.iter().all(|v| sane(*v, MAX_MS))
        || ![heap_start, heap_end, heap_live]
            .iter()
            .all(|v| sane(*v, MAX_MB))
    {
        return None;
    }
    Some(GoGcCycle {
        number,
        at_s,
        start_unix_ms: started_unix_ms + at_s * 1000.0,
        pause_ms: sweep_term + mark_term,
        mark_ms: mark,
        assist_cpu_ms: assist,
        background_cpu_ms: background,
        idle_cpu_ms: idle,
        heap_start_mb: heap_start,
        heap_end_mb: heap_end,
        heap_live_mb: heap_live,
        forced: line.ends_with("(forced)"),
    })
}

/// `594->737->670` split at `-` (the `>` dropped), or `0.35/1.0/0.70` at `/`.
fn numbers(text: &str, sep: char) -> Option<Vec<f64>> {
    text.split(sep)
        .map(|part| part.trim_start_matches('>').trim().parse().ok())
        .collect()
}

/// The cycles a reader of the target's stderr has parsed and the watcher has not yet taken,
/// shared between the two threads.
#[derive(Clone, Debug, Default)]
pub struct GcTraceFeed {
    cycles: Arc<Mutex<Vec<GoGcCycle>>>,
}

/// The most cycles held between two takes: a Go runtime reports hundreds a second at most,
/// and a target that is not Go (its lines never taken) printed 764 MB of them in 6 s.
pub const MAX_PENDING_CYCLES: usize = 10_000;

impl GcTraceFeed {
    /// Keeps `cycle` for the next take, unless [`MAX_PENDING_CYCLES`] wait already.
    pub fn push(&self, cycle: GoGcCycle) {
        if let Ok(mut cycles) = self.cycles.lock() {
            if cycles.len() < MAX_PENDING_CYCLES {
                cycles.push(cycle);
            }
        }
    }

    /// The cycles reported since the last call.
    pub fn take(&self) -> Vec<GoGcCycle> {
        self.cycles
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }
}

/// A Go target's collector over one interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoSecond {
    /// Cycles reported in the interval, and their stop-the-world time and marking CPU.
    pub gc_cycles: u64,
    pub pause_ms: f64,
    pub assist_cpu_ms: f64,
    pub gc_cpu_ms: f64,
    /// The live heap after the last cycle in the interval (MB).
    pub heap_live_mb: Option<f64>,
    pub cycles: Vec<GoGcCycle>,
    /// Cycles that came and went unseen (expvar keeps the last 256).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cycles_lost: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl GoSecond {
    pub fn of(cycles: Vec<GoGcCycle>) -> Self {
        // folded from +0.0: an empty f64 sum is -0.0
        let total = |f: fn(&GoGcCycle) -> f64| cycles.iter().map(f).fold(0.0, |a, b| a + b);
        Self {
            gc_cycles: cycles.len() as u64,
            pause_ms: total(|c| c.pause_ms),
            assist_cpu_ms: total(|c| c.assist_cpu_ms),
            gc_cpu_ms: total(GoGcCycle::cpu_ms),
            heap_live_mb: cycles.last().map(|c| c.heap_live_mb),
            cycles,
            cycles_lost: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Go 1.26 writes them (this machine's, and the research's), each field read.
    #[test]
    fn gctrace_lines_give_each_cycles_pause_assist_and_heap() {
        let c = parse_gctrace(
            "gc 7 @15.051s 14%: 4.0+4413+2.7 ms clock, 8.0+1052/2221/2705+5.5 ms cpu, \
             594->737->670 MB, 698 MB goal, 0 MB stacks, 0 MB globals, 2 P",
            1_000_000.0,
        )
        .unwrap();
        assert_eq!(c.number, 7);
        assert_eq!(c.start_unix_ms, 1_015_051.0);
        assert!((c.pause_ms - 6.7).abs() < 1e-9);
        assert_eq!(
            (
                c.mark_ms,
                c.assist_cpu_ms,
                c.background_cpu_ms,
                c.idle_cpu_ms
            ),
            (4413.0, 1052.0, 2221.0, 2705.0)
        );
        assert_eq!(
            (c.heap_start_mb, c.heap_end_mb, c.heap_live_mb),
            (594.0, 737.0, 670.0)
        );
        assert!(!c.forced);
        let forced = parse_gctrace(
            "gc 10 @0.451s 0%: 0.81+0.69+0.004 ms clock, 1.6+0/0.11/1.3+0.008 ms cpu, \
             79->79->0 MB, 126 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)",
            0.0,
        )
        .unwrap();
        assert!(forced.forced);
        assert_eq!(forced.assist_cpu_ms, 0.0);
        assert!((forced.pause_ms - 0.814).abs() < 1e-9);
    }

    #[test]
    fn other_lines_are_not_cycles() {
        for line in [
            "",
            "listening on :8080",
            "gc 7 @15.051s 14%: 4.0+4413 ms clock, 8.0+1/2/3+5.5 ms cpu, 1->2->3 MB",
            "gc x @1s 1%: 1+2+3 ms clock, 1+1/2/3+1 ms cpu, 1->2->3 MB",
            "gc 1 @NaNs 1%: 1+2+3 ms clock, 1+1/2/3+1 ms cpu, 1->2->3 MB",
            "gc 1 @1s 1%: 1+-2+3 ms clock, 1+1/2/3+1 ms cpu, 1->2->3 MB",
            "scvg: 0 MB released",
            // figures no runtime prints
            "gc 1 @1s 1%: 1e300+2+3 ms clock, 1+1/2/3+1 ms cpu, 1->2->3 MB",
            "gc 1 @1s 1%: 1+2+3 ms clock, 1+1/2/3+1 ms cpu, 1->2->1e18 MB",
            "gc 1 @1e300s 1%: 1+2+3 ms clock, 1+1/2/3+1 ms cpu, 1->2->3 MB",
        ] {
            assert!(parse_gctrace(line, 0.0).is_none(), "{line}");
        }
    }

    /// Cycles no one takes (a target that is not Go printing such lines) stop at the bound.
    #[test]
    fn a_feed_never_taken_stays_bounded() {
        let feed = GcTraceFeed::default();
        let line = "gc 1 @1s 1%: 1+2+3 ms clock, 1+1/2/3+1 ms cpu, 1->2->3 MB, 4 MB goal";
        let cycle = parse_gctrace(line, 0.0).unwrap();
        for _ in 0..MAX_PENDING_CYCLES + 50 {
            feed.push(cycle.clone());
        }
        assert_eq!(feed.take().len(), MAX_PENDING_CYCLES);
        assert!(feed.take().is_empty());
    }

    #[test]
    fn a_second_adds_its_cycles() {
        let cycle = |pause_ms, assist_cpu_ms, live| GoGcCycle {
            pause_ms,
            assist_cpu_ms,
            background_cpu_ms: 1.0,
            heap_live_mb: live,
            ..Default::default()
        };
        let s = GoSecond::of(vec![cycle(0.5, 2.0, 10.0), cycle(0.25, 3.0, 12.0)]);
        assert_eq!(s.gc_cycles, 2);
        assert_eq!((s.pause_ms, s.assist_cpu_ms, s.gc_cpu_ms), (0.75, 5.0, 7.0));
        assert_eq!(s.heap_live_mb, Some(12.0));
    }

    proptest::proptest! {
        #[test]
        fn no_line_panics_the_parser(line in "(gc )?[0-9@s%:.+/ >,a-zA-Z-]{0,120}") {
            let _ = parse_gctrace(&line, 0.0);
        }
    }
}
