//! Which rate to try next: growth until a rate breaks an SLO, then bisection between the
//! highest kept rate and the lowest broken one until they are within the precision asked,
//! then the kept edge run again. Only rates and verdicts go in, so the search is tested here
//! against services whose capacity is known, without running one.

use kiln_record::schema::capacity::{SearchStatus, StepKind};

/// How the search narrows.
#[derive(Clone, Debug)]
pub struct SearchSettings {
    /// Done when the lowest broken rate is within this share above the highest kept one.
    pub precision: f64,
    /// No rate above this is tried.
    pub max_rate: Option<f64>,
    /// While nothing has broken, each rate is this many times the last.
    pub growth: f64,
    /// Below this no rate is tried: nothing kept the SLOs.
    pub min_rate: f64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            precision: 0.05,
            max_rate: None,
            growth: 1.25,
            min_rate: 0.5,
        }
    }
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Next {
    Run { rate: f64, kind: StepKind },
    Done(SearchStatus),
}

/// The rates run and their verdicts.
#[derive(Clone, Debug)]
pub struct Search {
    settings: SearchSettings,
    start: f64,
    /// Each rate run, and whether it kept every SLO; a rate run twice keeps only if it kept
    /// both times.
    verdicts: Vec<(f64, bool)>,
}

/// A rate as the search runs and shows it: three significant figures (400.3 req/s is not a
/// rate anyone asks for, and equal rates compare equal).
pub fn round_rate(rate: f64) -> f64 {
    if !(rate.is_finite() && rate > 0.0) {
        return 0.0;
    }
    let digits = 3 - 1 - rate.log10().floor() as i32;
    let scale = 10f64.powi(digits.max(0));
    let rounded = (rate * scale).round() / scale;
    if digits < 0 {
        let big = 10f64.powi(-digits);
        (rate / big).round() * big
    } else {
        rounded
    }
}

impl Search {
    /// A search whose first step offers `start` (e.g. 80% of the closed-model probe's
    /// throughput).
    pub fn new(settings: SearchSettings, start: f64) -> Self {
        let start = match settings.max_rate {
            Some(max) => start.min(max),
            None => start,
        };
        Self {
            start: round_rate(start.max(settings.min_rate)),
            settings,
            verdicts: Vec::new(),
        }
    }

    pub fn observe(&mut self, rate: f64, kept: bool) {
        self.verdicts.push((rate, kept));
    }

    fn kept(&self, rate: f64) -> bool {
        self.verdicts
            .iter()
            .filter(|(r, _)| *r == rate)
            .all(|(_, k)| *k)
    }

    /// The lowest rate that broke an SLO.
    pub fn lowest_broken(&self) -> Option<f64> {
        self.verdicts
            .iter()
            .filter(|(_, k)| !k)
            .map(|(r, _)| *r)
            .reduce(f64::min)
    }

    /// The highest rate that kept every SLO every time it ran, below the lowest broken one.
    pub fn highest_kept(&self) -> Option<f64> {
        let hi = self.lowest_broken().unwrap_or(f64::INFINITY);
        self.verdicts
            .iter()
            .map(|(r, _)| *r)
            .filter(|r| *r < hi && self.kept(*r))
            .reduce(f64::max)
    }

    fn runs_of(&self, rate: f64) -> usize {
        self.verdicts.iter().filter(|(r, _)| *r == rate).count()
    }

    pub fn next(&self) -> Next {
        if self.verdicts.is_empty() {
            return Next::Run {
                rate: self.start,
                kind: StepKind::Search,
            };
        }
        let search = |rate: f64| Next::Run {
            rate: round_rate(rate),
            kind: StepKind::Search,
        };
        match (self.highest_kept(), self.lowest_broken()) {
            (Some(lo), None) => match self.settings.max_rate {
                Some(max) if lo >= max => Next::Done(SearchStatus::AboveMaxRate),
                Some(max) => search((lo * self.settings.growth).min(max)),
                None => search(lo * self.settings.growth),
            },
            (None, Some(hi)) => {
                let half = round_rate(hi / 2.0);
                if half < self.settings.min_rate {
                    Next::Done(SearchStatus::NothingKept)
                } else {
                    search(half)
                }
            }
            (Some(lo), Some(hi)) => {
                let mid = round_rate((lo * hi).sqrt());
                let narrow = hi <= lo * (1.0 + self.settings.precision) || mid <= lo || mid >= hi;
                match (narrow, self.runs_of(lo)) {
                    (true, 1) => Next::Run {
                        rate: lo,
                        kind: StepKind::Confirm,
                    },
                    (true, _) => Next::Done(SearchStatus::Complete),
                    (false, _) => search(mid),
                }
            }
            (None, None) => unreachable!("a verdict is kept or broken"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against a service that keeps its SLO below `capacity`, as a step
    /// would judge it; returns the steps' rates and the search.
    fn against(capacity: f64, start: f64, settings: SearchSettings) -> (Vec<f64>, Search) {
        let mut s = Search::new(settings, start);
        let mut rates = Vec::new();
        while let Next::Run { rate, .. } = s.next() {
            rates.push(rate);
            s.observe(rate, rate < capacity);
            assert!(rates.len() < 60, "the search ends: {rates:?}");
        }
        (rates, s)
    }

    #[test]
    fn the_search_brackets_the_capacity_to_its_precision_in_few_steps() {
        for (capacity, start) in [
            (400.0, 320.0),
            (400.0, 100.0),
            (400.0, 390.0),
            (55.0, 900.0),
        ] {
            let (rates, s) = against(capacity, start, SearchSettings::default());
            let (lo, hi) = (s.highest_kept().unwrap(), s.lowest_broken().unwrap());
            assert!(lo < capacity && hi >= capacity, "{capacity}: {lo}..{hi}");
            assert!(hi <= lo * 1.05 + 1.0, "{capacity}: {lo}..{hi} in {rates:?}");
            assert!(rates.len() <= 14, "{capacity} from {start}: {rates:?}");
            assert_eq!(s.next(), Next::Done(SearchStatus::Complete));
        }
        // from 80% of a probe that saw the capacity: a handful of steps
        let (rates, _) = against(400.0, 320.0, SearchSettings::default());
        assert!(rates.len() <= 7, "{rates:?}");
    }

    #[test]
    fn the_kept_edge_runs_twice_and_a_repeat_that_breaks_moves_it_down() {
        let mut s = Search::new(SearchSettings::default(), 100.0);
        s.observe(100.0, true);
        s.observe(125.0, false);
        s.observe(112.0, true);
        s.observe(118.0, true);
        s.observe(122.0, false);
        // 118..122 is within 5%: 118 once more
        assert_eq!(
            s.next(),
            Next::Run {
                rate: 118.0,
                kind: StepKind::Confirm
            }
        );
        // it broke this time: 118 is broken, the edge is 112..118, and 112 gets its repeat
        // once the interval is narrow again
        s.observe(118.0, false);
        assert_eq!(s.highest_kept(), Some(112.0));
        assert_eq!(s.lowest_broken(), Some(118.0));
        let Next::Run { rate, kind } = s.next() else {
            panic!("not done")
        };
        assert_eq!((rate, kind), (115.0, StepKind::Search));
    }

    #[test]
    fn a_service_that_keeps_up_to_the_max_rate_or_never_is_said_so() {
        let settings = SearchSettings {
            max_rate: Some(500.0),
            ..Default::default()
        };
        let (rates, s) = against(10_000.0, 320.0, settings);
        assert_eq!(rates.last(), Some(&500.0));
        assert!(rates.iter().all(|r| *r <= 500.0));
        assert_eq!(s.next(), Next::Done(SearchStatus::AboveMaxRate));

        let (rates, s) = against(0.0, 320.0, SearchSettings::default());
        assert_eq!(s.next(), Next::Done(SearchStatus::NothingKept));
        assert!(rates.len() <= 11, "{rates:?}");
    }

    #[test]
    fn rates_are_rounded_to_three_figures() {
        assert_eq!(round_rate(400.3), 400.0);
        assert_eq!(round_rate(12.345), 12.3);
        assert_eq!(round_rate(0.5678), 0.568);
        assert_eq!(round_rate(18_499.0), 18_500.0);
        assert_eq!(round_rate(f64::NAN), 0.0);
    }
}
