//! Hedged requests in the load record: what `kiln run --hedge` did in one second.

use serde::{Deserialize, Serialize};

use crate::LatencyHistogram;

/// One second of hedging (by completion time of the request, as the load's own figures).
/// Absent from records of runs without `--hedge`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HedgeSecond {
    /// Second copies sent.
    #[serde(default)]
    pub sent: u64,
    /// Requests whose second copy answered first.
    #[serde(default)]
    pub won: u64,
    /// Copies cut because the other copy answered while they were out (their connections
    /// closed). A first copy cut has no latency of its own in `first_copy`.
    #[serde(default)]
    pub cut: u64,
    /// Requests due a second copy that the budget (`--hedge-cap`) had no token for.
    #[serde(default)]
    pub over_budget: u64,
    /// Requests due a second copy while hedging was paused because requests were failing.
    #[serde(default)]
    pub paused: u64,
    /// The hedge delay in force at the end of the second, in microseconds; 0 while a
    /// percentile delay is not known yet (no second copies are sent then).
    #[serde(default)]
    pub delay_us: u64,
    /// The first copies' own latency (responses only), from the request's scheduled time as
    /// the load's latency is: the same run without hedging, beside the hedged latency.
    #[serde(default)]
    pub first_copy: LatencyHistogram,
    /// Per target in the order given (the URL, then each `--replica`): first copies sent,
    /// second copies sent, second copies that won.
    #[serde(default)]
    pub targets: Vec<TargetHedge>,
}

/// One target's share of a hedged run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetHedge {
    #[serde(default)]
    pub first: u64,
    #[serde(default)]
    pub hedges: u64,
    #[serde(default)]
    pub won: u64,
}

impl HedgeSecond {
    /// Adds another worker's (or second's) figures; histograms merge exactly.
    pub fn merge(&mut self, other: &HedgeSecond) {
        self.sent = self.sent.saturating_add(other.sent);
        self.won = self.won.saturating_add(other.won);
        self.over_budget = self.over_budget.saturating_add(other.over_budget);
        self.paused = self.paused.saturating_add(other.paused);
        self.cut = self.cut.saturating_add(other.cut);
        self.delay_us = self.delay_us.max(other.delay_us);
        self.first_copy.merge(&other.first_copy);
        if self.targets.len() < other.targets.len() {
            self.targets
                .resize(other.targets.len(), TargetHedge::default());
        }
        for (mine, theirs) in self.targets.iter_mut().zip(&other.targets) {
            mine.first = mine.first.saturating_add(theirs.first);
            mine.hedges = mine.hedges.saturating_add(theirs.hedges);
            mine.won = mine.won.saturating_add(theirs.won);
        }
    }

    /// First copies sent over all targets.
    pub fn first_sent(&self) -> u64 {
        self.targets.iter().map(|t| t.first).sum()
    }

    /// Second copies per first copy sent: the extra load.
    pub fn extra_share(&self) -> f64 {
        match self.first_sent() {
            0 => 0.0,
            n => self.sent as f64 / n as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_adds_counts_per_target_and_histograms_exactly() {
        let mut a = HedgeSecond {
            sent: 2,
            won: 1,
            delay_us: 500,
            targets: vec![TargetHedge {
                first: 10,
                hedges: 2,
                won: 1,
            }],
            ..Default::default()
        };
        a.first_copy.record_us(100);
        let mut b = HedgeSecond {
            sent: 3,
            over_budget: 4,
            paused: 5,
            delay_us: 700,
            targets: vec![
                TargetHedge {
                    first: 5,
                    ..Default::default()
                },
                TargetHedge {
                    first: 5,
                    hedges: 3,
                    won: 2,
                },
            ],
            ..Default::default()
        };
        b.first_copy.record_us(9000);
        a.merge(&b);
        assert_eq!((a.sent, a.won, a.over_budget, a.paused), (5, 1, 4, 5));
        assert_eq!(a.delay_us, 700);
        assert_eq!(a.first_copy.count(), 2);
        assert_eq!(a.first_sent(), 20);
        assert_eq!(a.targets[1].won, 2);
        assert!((a.extra_share() - 0.25).abs() < 1e-12);
    }

    #[test]
    fn an_old_record_without_hedging_reads_as_none_and_a_partial_one_reads() {
        let h: HedgeSecond = serde_json::from_str(r#"{"sent":1}"#).unwrap();
        assert_eq!(h.sent, 1);
        assert!(h.targets.is_empty());
    }
}
