//! The two-level bootstrap: resample repeats, then blocks of seconds within each repeat, and
//! merge the chosen seconds' histograms. Seconds and requests within a run are not
//! independent (a stall spans many requests, a GC many seconds), so the unit resampled is a
//! block of seconds, and the run-to-run variation comes from resampling whole repeats.
//!
//! Histograms are merged on a grid: the sorted bucket values both sides recorded, so a
//! resample adds each chosen second's few buckets into one array and reads its percentiles
//! with the same rule as the HDR histogram (the `ceil(q * count)`-th value), exactly.

use crate::sample::{Repeat, Side};

/// The latency values both sides recorded, sorted and distinct.
pub struct Grid {
    values: Vec<u64>,
}

impl Grid {
    pub fn of(sides: &[&Side]) -> Self {
        let mut values: Vec<u64> = sides
            .iter()
            .flat_map(|s| &s.repeats)
            .flat_map(|r| &r.seconds)
            .flat_map(|s| s.buckets.iter().map(|(v, _)| *v))
            .collect();
        values.sort_unstable();
        values.dedup();
        Self { values }
    }

    fn index(&self, value: u64) -> u32 {
        // every bucket value is on the grid by construction
        self.values.partition_point(|v| *v < value) as u32
    }
}

/// Seconds added together: a second of the record, or a block of them.
#[derive(Default)]
struct Chunk {
    /// Grid index and count, by index.
    buckets: Vec<(u32, u64)>,
    requests: u64,
    failed: u64,
    /// The requests of whole seconds and how many whole seconds (a phase's last second is
    /// cut by the end of its load: it counts for latency, not for the rate).
    rate_requests: u64,
    rate_seconds: u64,
}

/// A repeat's seconds on the grid, and its circular blocks of `block` seconds merged ahead
/// of time (a resample then adds a few blocks instead of every second).
struct GridRepeat {
    seconds: Vec<Chunk>,
    blocks: Vec<Chunk>,
}

/// One side's repeats on the grid.
pub struct GridSide {
    repeats: Vec<GridRepeat>,
}

impl GridSide {
    pub fn new(grid: &Grid, repeats: &[Repeat]) -> Self {
        let mut scratch = Accumulator::new(grid);
        let repeats = repeats
            .iter()
            .map(|r| {
                let seconds: Vec<Chunk> = r
                    .seconds
                    .iter()
                    .map(|s| Chunk {
                        buckets: s
                            .buckets
                            .iter()
                            .map(|(v, n)| (grid.index(*v), *n))
                            .collect(),
                        requests: s.requests,
                        failed: s.failed,
                        rate_requests: if s.partial { 0 } else { s.requests },
                        rate_seconds: u64::from(!s.partial),
                    })
                    .collect();
                let n = seconds.len();
                let block = block_seconds(n);
                let blocks = (0..n)
                    .map(|start| {
                        for k in 0..block {
                            scratch.add(&seconds[(start + k) % n]);
                        }
                        scratch.take_chunk()
                    })
                    .collect();
                GridRepeat { seconds, blocks }
            })
            .collect();
        Self { repeats }
    }
}

/// What one (re)sample gives: the latency at each quantile asked for, the requests per
/// second and the share of requests that failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub quantiles_us: Vec<u64>,
    pub per_second: f64,
    pub failed_ratio: f64,
}

/// Sums of a set of seconds, then read as an estimate.
struct Accumulator<'g> {
    grid: &'g Grid,
    counts: Vec<u64>,
    touched: Vec<u32>,
    total: u64,
    requests: u64,
    failed: u64,
    rate_requests: u64,
    rate_seconds: u64,
}

impl<'g> Accumulator<'g> {
    fn new(grid: &'g Grid) -> Self {
        Self {
            grid,
            counts: vec![0; grid.values.len()],
            touched: Vec::new(),
            total: 0,
            requests: 0,
            failed: 0,
            rate_requests: 0,
            rate_seconds: 0,
        }
    }

    fn add(&mut self, s: &Chunk) {
        for (i, n) in &s.buckets {
            let c = &mut self.counts[*i as usize];
            if *c == 0 {
                self.touched.push(*i);
            }
            *c = c.saturating_add(*n);
            self.total = self.total.saturating_add(*n);
        }
        self.requests = self.requests.saturating_add(s.requests);
        self.failed = self.failed.saturating_add(s.failed);
        self.rate_requests = self.rate_requests.saturating_add(s.rate_requests);
        self.rate_seconds += s.rate_seconds;
    }

    /// Reads the estimate and empties the accumulator for the next resample.
    fn take(&mut self, quantiles: &[f64]) -> Estimate {
        self.touched.sort_unstable();
        let mut out = Vec::with_capacity(quantiles.len());
        let mut targets = quantiles
            .iter()
            .map(|q| ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1));
        let mut target = targets.next();
        let mut cumulative = 0u64;
        for i in &self.touched {
            cumulative = cumulative.saturating_add(self.counts[*i as usize]);
            while let Some(t) = target {
                if cumulative < t {
                    break;
                }
                out.push(self.grid.values[*i as usize]);
                target = targets.next();
            }
        }
        // an empty sample has no latency
        out.resize(quantiles.len(), 0);
        for i in self.touched.drain(..) {
            self.counts[i as usize] = 0;
        }
        let estimate = Estimate {
            quantiles_us: out,
            // no whole second drawn (a short run's resample of its cut last second): no rate
            per_second: if self.rate_seconds == 0 {
                f64::NAN
            } else {
                self.rate_requests as f64 / self.rate_seconds as f64
            },
            failed_ratio: if self.requests == 0 {
                0.0
            } else {
                self.failed as f64 / self.requests as f64
            },
        };
        self.clear_sums();
        estimate
    }

    /// The sums as a chunk (buckets by index), emptying the accumulator.
    fn take_chunk(&mut self) -> Chunk {
        self.touched.sort_unstable();
        let buckets = self
            .touched
            .iter()
            .map(|i| (*i, std::mem::take(&mut self.counts[*i as usize])))
            .collect();
        self.touched.clear();
        let chunk = Chunk {
            buckets,
            requests: self.requests,
            failed: self.failed,
            rate_requests: self.rate_requests,
            rate_seconds: self.rate_seconds,
        };
        self.clear_sums();
        chunk
    }

    fn clear_sums(&mut self) {
        self.total = 0;
        self.requests = 0;
        self.failed = 0;
        self.rate_requests = 0;
        self.rate_seconds = 0;
    }
}

/// The block length for a repeat of `n` seconds: about ten seconds, shorter for short
/// repeats so that a resample can still mix several blocks.
pub fn block_seconds(n: usize) -> usize {
    (n / 4).clamp(1, 10)
}

/// Resamples one side; `quantiles` must be ascending.
pub struct Resampler<'g> {
    side: &'g GridSide,
    acc: Accumulator<'g>,
}

impl<'g> Resampler<'g> {
    pub fn new(grid: &'g Grid, side: &'g GridSide) -> Self {
        Self {
            side,
            acc: Accumulator::new(grid),
        }
    }

    /// All of the side's seconds: the point estimate.
    pub fn all(&mut self, quantiles: &[f64]) -> Estimate {
        for s in self.side.repeats.iter().flat_map(|r| &r.seconds) {
            self.acc.add(s);
        }
        self.acc.take(quantiles)
    }

    /// One repeat's seconds.
    pub fn repeat(&mut self, index: usize, quantiles: &[f64]) -> Estimate {
        for s in &self.side.repeats[index].seconds {
            self.acc.add(s);
        }
        self.acc.take(quantiles)
    }

    /// One bootstrap resample: as many repeats as the side has, drawn with replacement,
    /// each rebuilt from about as many seconds in circular blocks drawn with replacement.
    pub fn resample(&mut self, rng: &mut fastrand::Rng, quantiles: &[f64]) -> Estimate {
        let count = self.side.repeats.len();
        for _ in 0..count {
            let repeat = &self.side.repeats[rng.usize(..count)];
            let n = repeat.blocks.len();
            if n == 0 {
                continue;
            }
            let draws = (n as f64 / block_seconds(n) as f64).round().max(1.0) as usize;
            for _ in 0..draws {
                self.acc.add(&repeat.blocks[rng.usize(..n)]);
            }
        }
        self.acc.take(quantiles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Second;
    use kiln_findings::RunRecord;
    use kiln_record::{LatencyHistogram, RunManifest, RunStatus, SecondRecord};
    use proptest::prelude::*;

    fn manifest() -> RunManifest {
        RunManifest {
            schema_version: 1,
            kiln_version: "test".into(),
            id: "t".into(),
            name: "t".into(),
            command: vec![],
            plan: kiln_record::schema::plan::PlanRecord::Other(serde_json::Value::Null),
            started_at: String::new(),
            ended_at: None,
            status: RunStatus::Complete,
            status_reason: None,
            parts: vec![],
            not_recorded: Default::default(),
        }
    }

    fn side_of(histograms: &[LatencyHistogram]) -> Side {
        let seconds = histograms
            .iter()
            .map(|h| {
                Second::of(&SecondRecord {
                    requests: h.count(),
                    latency: h.clone(),
                    ..Default::default()
                })
            })
            .collect();
        Side {
            dir: String::new(),
            record: RunRecord::empty(manifest()),
            repeats: vec![Repeat {
                phase: "run".into(),
                seconds,
            }],
            problems: vec![],
        }
    }

    const QS: [f64; 6] = [0.0, 0.5, 0.9, 0.99, 0.999, 1.0];

    proptest! {
        /// The grid's percentiles are the merged HDR histogram's, exactly.
        #[test]
        fn grid_percentiles_are_the_histograms(
            seconds in prop::collection::vec(prop::collection::vec(1u64..5_000_000, 0..200), 1..8)
        ) {
            let histograms: Vec<LatencyHistogram> = seconds
                .iter()
                .map(|values| {
                    let mut h = LatencyHistogram::new();
                    values.iter().for_each(|v| h.record_us(*v));
                    h
                })
                .collect();
            let side = side_of(&histograms);
            let grid = Grid::of(&[&side]);
            let on_grid = GridSide::new(&grid, &side.repeats);
            let mut merged = LatencyHistogram::new();
            histograms.iter().for_each(|h| merged.merge(h));
            let mut resampler = Resampler::new(&grid, &on_grid);
            let got = resampler.all(&QS);
            let want: Vec<u64> = QS.iter().map(|q| merged.quantile_us(*q)).collect();
            // q = 0 is the HDR's lowest equivalent value, the grid's highest: compare above it
            prop_assert_eq!(&got.quantiles_us[1..], &want[1..]);
            // and the accumulator is empty again: the same answer twice
            prop_assert_eq!(resampler.all(&QS), got);
        }
    }

    #[test]
    fn a_resample_draws_as_many_seconds_as_the_repeat_has() {
        let histograms: Vec<LatencyHistogram> = (1..=37u64)
            .map(|i| {
                let mut h = LatencyHistogram::new();
                h.record_n_us(1000 * i, i);
                h
            })
            .collect();
        let side = side_of(&histograms);
        let grid = Grid::of(&[&side]);
        let on_grid = GridSide::new(&grid, &side.repeats);
        let mut resampler = Resampler::new(&grid, &on_grid);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut means = Vec::new();
        for _ in 0..400 {
            let e = resampler.resample(&mut rng, &[0.5]);
            assert!(e.per_second >= 1.0 && e.per_second <= 37.0, "{e:?}");
            means.push(e.per_second);
        }
        // circular blocks weigh every second alike: the resampled mean centres on the mean
        let mean = means.iter().sum::<f64>() / means.len() as f64;
        assert!((mean - 19.0).abs() < 1.0, "{mean}");
        assert!(means.iter().any(|m| (*m - 19.0).abs() > 0.5), "no spread");
    }
}
