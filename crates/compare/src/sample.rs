//! One side of a comparison: a run record's measured repeats, second by second, with each
//! second's latency histogram kept as its recorded buckets (what the bootstrap resamples).

use kiln_findings::RunRecord;
use kiln_record::{Run, SecondRecord};

/// One measured second: its latency buckets (the histogram's highest equivalent value of
/// each bucket, in microseconds, with its count), requests and failures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Second {
    pub buckets: Vec<(u64, u64)>,
    pub requests: u64,
    pub failed: u64,
    /// The phase's last second: the load window ends inside it, so its requests are not a
    /// second's worth (it counts for latency, not for the rate).
    pub partial: bool,
}

impl Second {
    pub fn of(s: &SecondRecord) -> Self {
        let buckets = s
            .latency
            .inner()
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        Self {
            buckets,
            requests: s.requests,
            failed: s.failed(),
            partial: false,
        }
    }
}

/// A measured phase (one repeat of the run).
#[derive(Clone, Debug, Default)]
pub struct Repeat {
    pub phase: String,
    pub seconds: Vec<Second>,
}

impl Repeat {
    pub fn requests(&self) -> u64 {
        self.seconds
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.requests))
    }
}

/// A run record as the comparison reads it.
pub struct Side {
    pub dir: String,
    pub record: RunRecord,
    pub repeats: Vec<Repeat>,
    /// Records of seconds that could not be read (the rest is compared).
    pub problems: Vec<String>,
}

impl Side {
    pub fn read(run: &Run) -> Self {
        let record = RunRecord::of(run);
        let problems = record.problems.clone();
        let mut repeats: Vec<Repeat> = record
            .phases
            .iter()
            .filter(|p| p.measured)
            .map(|p| Repeat {
                phase: p.phase.clone(),
                seconds: Vec::new(),
            })
            .collect();
        run.each_second(|s| {
            if let Some(r) = repeats.iter_mut().find(|r| r.phase == s.phase) {
                r.seconds.push(Second::of(s));
            }
        });
        repeats.retain(|r| !r.seconds.is_empty());
        for r in &mut repeats {
            let several = r.seconds.len() > 1;
            if let Some(last) = r.seconds.last_mut() {
                last.partial = several;
            }
        }
        Self {
            dir: run.path().display().to_string(),
            record,
            repeats,
            problems,
        }
    }

    pub fn requests(&self) -> u64 {
        self.repeats
            .iter()
            .fold(0u64, |a, r| a.saturating_add(r.requests()))
    }

    pub fn seconds(&self) -> usize {
        self.repeats.iter().map(|r| r.seconds.len()).sum()
    }
}
