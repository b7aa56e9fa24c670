//! A Go target's GC from its expvar page (`import _ "expvar"` serves `GET /debug/vars` with
//! `runtime.MemStats`), for a target kiln did not start: every cycle's stop-the-world time
//! and when it ended, rebuilt from the circular `PauseNs` / `PauseEnd` buffers (the newest at
//! `(NumGC + 255) % 256`). No mark assist and no mark time: only gctrace has those.
//!
//! Each read makes the runtime stop the world briefly (`ReadMemStats`), so it is read once a
//! second; more than 256 cycles between two reads lose the oldest, and that is said.

use crate::RuntimeError;

use std::net::SocketAddr;

use crate::debug_http::{first_serving, get};
use crate::go::GoGcCycle;

/// What one read of memstats gives: the cycle count and the two circular buffers.
#[derive(Debug, PartialEq)]
struct MemStatsReading {
    num_gc: u64,
    pause_ns: Vec<u64>,
    pause_end_ns: Vec<u64>,
    heap_alloc: Option<u64>,
}

fn parse_memstats(body: &[u8]) -> Result<MemStatsReading, RuntimeError> {
    let page: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let m = &page["memstats"];
    let array = |key: &str| -> Option<Vec<u64>> {
        m[key]
            .as_array()?
            .iter()
            .map(serde_json::Value::as_u64)
            .collect()
    };
    let (Some(num_gc), Some(pause_ns), Some(pause_end_ns)) =
        (m["NumGC"].as_u64(), array("PauseNs"), array("PauseEnd"))
    else {
        return Err("no memstats with NumGC, PauseNs and PauseEnd".into());
    };
    if pause_ns.len() != 256 || pause_end_ns.len() != 256 {
        return Err("memstats' PauseNs and PauseEnd are not 256 long".into());
    }
    Ok(MemStatsReading {
        num_gc,
        pause_ns,
        pause_end_ns,
        heap_alloc: m["HeapAlloc"].as_u64(),
    })
}

/// Reads a Go target's expvar memstats and hands out the cycles since the last read.
#[derive(Debug)]
pub struct ExpvarReader {
    addr: SocketAddr,
    last_num_gc: u64,
}

impl ExpvarReader {
    /// The first of `addrs` that serves expvar memstats; the reading starts from its current
    /// cycle count (earlier cycles are not this watch's). Why none did, otherwise.
    pub fn probe(addrs: &[SocketAddr]) -> Result<Self, RuntimeError> {
        first_serving(addrs, "/debug/vars", |addr, body| {
            Ok(Self {
                addr,
                last_num_gc: parse_memstats(&body)?.num_gc,
            })
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cycles since the last read, oldest first, and how many were lost (more than 256
    /// between two reads).
    pub fn poll(&mut self) -> Result<(Vec<GoGcCycle>, u64), RuntimeError> {
        let reading = parse_memstats(&get(self.addr, "/debug/vars")?)?;
        Ok(self.cycles_since(&reading))
    }

    fn cycles_since(&mut self, r: &MemStatsReading) -> (Vec<GoGcCycle>, u64) {
        let first = (self.last_num_gc + 1).max(r.num_gc.saturating_sub(255));
        let lost = first - (self.last_num_gc + 1).min(first);
        let cycles = (first..=r.num_gc)
            .map(|k| {
                let i = ((k + 255) % 256) as usize;
                let pause_ms = r.pause_ns[i] as f64 / 1e6;
                let end_ms = r.pause_end_ns[i] as f64 / 1e6;
                GoGcCycle {
                    number: k,
                    start_unix_ms: end_ms - pause_ms,
                    pause_ms,
                    heap_live_mb: r.heap_alloc.map_or(0.0, |b| b as f64 / 1e6),
                    ..Default::default()
                }
            })
            .collect();
        self.last_num_gc = self.last_num_gc.max(r.num_gc);
        (cycles, lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(num_gc: u64) -> MemStatsReading {
        // cycle k paused k µs and ended at k seconds
        let mut pause_ns = vec![0; 256];
        let mut pause_end_ns = vec![0; 256];
        for k in num_gc.saturating_sub(255).max(1)..=num_gc {
            let i = ((k + 255) % 256) as usize;
            pause_ns[i] = k * 1000;
            pause_end_ns[i] = k * 1_000_000_000;
        }
        MemStatsReading {
            num_gc,
            pause_ns,
            pause_end_ns,
            heap_alloc: Some(5_000_000),
        }
    }

    /// Cycles come out once each, in order, from the circular buffers; more than 256 since
    /// the last read lose the oldest and say how many.
    #[test]
    fn cycles_are_rebuilt_from_the_circular_buffers() {
        let mut r = ExpvarReader {
            addr: "127.0.0.1:1".parse().unwrap(),
            last_num_gc: 3,
        };
        let (cycles, lost) = r.cycles_since(&reading(7));
        assert_eq!(lost, 0);
        let numbers: Vec<u64> = cycles.iter().map(|c| c.number).collect();
        assert_eq!(numbers, [4, 5, 6, 7]);
        assert_eq!(cycles[0].pause_ms, 0.004);
        assert_eq!(cycles[0].start_unix_ms, 4000.0 - 0.004);
        assert!(r.cycles_since(&reading(7)).0.is_empty());
        let (cycles, lost) = r.cycles_since(&reading(7 + 300));
        assert_eq!((cycles.len(), lost), (256, 44));
        assert_eq!(cycles[0].number, 52);
    }

    #[test]
    fn pages_that_are_not_memstats_are_refused() {
        assert!(parse_memstats(b"{}").is_err());
        assert!(parse_memstats(b"<html>").is_err());
        assert!(
            parse_memstats(br#"{"memstats":{"NumGC":1,"PauseNs":[1],"PauseEnd":[1]}}"#)
                .unwrap_err()
                .to_string()
                .contains("256")
        );
    }
}
