//! Change points in a series of runs' figures: E-Divisive means (Matteson and James, "A
//! Nonparametric Approach for Multiple Change Point Analysis", 2014), as MongoDB's and Apache
//! Otava's performance CI use it. The split of a segment that maximizes the energy distance
//! between its two sides is a candidate; a permutation test (the segment's values shuffled)
//! gives its p-value; accepted splits cut the series, and the search goes on in the pieces.
//! Written here: the method is small (prefix sums make each segment O(n^2)), and the crates
//! that have it carry a statistics stack kiln does not need.

/// How change points are judged.
#[derive(Clone, Debug)]
pub struct Options {
    /// A split stands when its permutation p-value is at most this.
    pub alpha: f64,
    /// Permutations per test (the smallest p-value is 1 / (permutations + 1)).
    pub permutations: usize,
    /// Points on each side of a change at least (one run alone is no new level).
    pub min_size: usize,
    /// A change smaller than this share of the level before it is not one (noise on a
    /// shared machine moves levels by a few percent).
    pub min_relative: f64,
    /// The permutations' generator seed: the same series gives the same answer.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            alpha: 0.01,
            permutations: 999,
            min_size: 2,
            min_relative: 0.1,
            seed: 0x6b69_6c6e,
        }
    }
}

/// A change: the index of the first point of the new level, the permutation p-value, the
/// levels' means either side (within the segment it split), and an interval of the change.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ChangePoint {
    pub index: usize,
    pub p_value: f64,
    pub before_mean: f64,
    pub after_mean: f64,
    /// The change in means (after - before), and its 95% interval (normal approximation).
    pub change: f64,
    pub change_low: f64,
    pub change_high: f64,
}

/// The change points of `x`, in order.
pub fn change_points(x: &[f64], options: &Options) -> Vec<ChangePoint> {
    change_points_where(x, options, &|_, _| true)
}

/// `change_points`, a split standing only where `accept` (given the two sides' index ranges)
/// also says so: what else explains a change (the host's noise) is the caller's to judge.
pub fn change_points_where(
    x: &[f64],
    options: &Options,
    accept: &dyn Fn(std::ops::Range<usize>, std::ops::Range<usize>) -> bool,
) -> Vec<ChangePoint> {
    let mut rng = fastrand::Rng::with_seed(options.seed);
    let mut cuts = vec![0, x.len()];
    let mut found = Vec::new();
    // segments already judged to hold no change
    let mut settled: Vec<(usize, usize)> = Vec::new();
    loop {
        let best = cuts
            .windows(2)
            .map(|w| (w[0], w[1]))
            .filter(|seg| !settled.contains(seg))
            .filter_map(|(a, b)| {
                best_split(&x[a..b], options.min_size).map(|(t, q)| (a, b, a + t, q))
            })
            .max_by(|p, q| p.3.total_cmp(&q.3));
        let Some((a, b, at, q)) = best else {
            break;
        };
        let p = permutation_p(&x[a..b], q, options, &mut rng);
        let (before, after) = (&x[a..at], &x[at..b]);
        let (mb, ma) = (mean(before), mean(after));
        let big_enough = (ma - mb).abs() >= options.min_relative * mb.abs().max(f64::MIN_POSITIVE);
        if p > options.alpha || !big_enough || !accept(a..at, at..b) {
            settled.push((a, b));
            continue;
        }
        let se =
            (variance(before) / before.len() as f64 + variance(after) / after.len() as f64).sqrt();
        found.push(ChangePoint {
            index: at,
            p_value: p,
            before_mean: mb,
            after_mean: ma,
            change: ma - mb,
            change_low: ma - mb - 1.96 * se,
            change_high: ma - mb + 1.96 * se,
        });
        let i = cuts.partition_point(|&c| c < at);
        cuts.insert(i, at);
    }
    found.sort_by_key(|c| c.index);
    found
}

pub(crate) fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len().max(1) as f64
}

fn variance(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = mean(x);
    x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() - 1) as f64
}

/// The split of `x` (its first index of the second side) that maximizes the energy
/// statistic q(t, k) = m n / (m + n) * (2/(m n) B - 2/(m(m-1)) W1 - 2/(n(n-1)) W2) over the
/// sides x[..t] (m points) and x[t..k] (n points), every end k of the segment tried (as
/// E-Divisive does: a level that comes back later does not hide the step); B is the sum of
/// distances across the sides, W1 and W2 those within each. None when `x` is too short.
fn best_split(x: &[f64], min_size: usize) -> Option<(usize, f64)> {
    let len = x.len();
    let min = min_size.max(2);
    if len < 2 * min {
        return None;
    }
    // prefix[i][j]: the sum of |x_a - x_b| over a < i, b < j
    let mut prefix = vec![0.0f64; (len + 1) * (len + 1)];
    let at = |i: usize, j: usize| i * (len + 1) + j;
    for i in 0..len {
        for j in 0..len {
            prefix[at(i + 1, j + 1)] =
                (x[i] - x[j]).abs() + prefix[at(i, j + 1)] + prefix[at(i + 1, j)]
                    - prefix[at(i, j)];
        }
    }
    let rect = |r0: usize, r1: usize, c0: usize, c1: usize| {
        prefix[at(r1, c1)] - prefix[at(r0, c1)] - prefix[at(r1, c0)] + prefix[at(r0, c0)]
    };
    let mut best: Option<(usize, f64)> = None;
    for end in 2 * min..=len {
        for t in min..=end - min {
            let (m, n) = (t as f64, (end - t) as f64);
            let across = rect(0, t, t, end);
            let within1 = rect(0, t, 0, t) / 2.0;
            let within2 = rect(t, end, t, end) / 2.0;
            let e = 2.0 * across / (m * n)
                - 2.0 * within1 / (m * (m - 1.0))
                - 2.0 * within2 / (n * (n - 1.0));
            let q = m * n / (m + n) * e;
            if best.is_none_or(|(_, b)| q > b) {
                best = Some((t, q));
            }
        }
    }
    best
}

/// The share of shuffles of `x` whose best split is at least `q` (the observed one counted).
fn permutation_p(x: &[f64], q: f64, options: &Options, rng: &mut fastrand::Rng) -> f64 {
    let mut shuffled = x.to_vec();
    let mut at_least = 0usize;
    for _ in 0..options.permutations {
        rng.shuffle(&mut shuffled);
        if best_split(&shuffled, options.min_size).is_some_and(|(_, qp)| qp >= q) {
            at_least += 1;
        }
    }
    (at_least + 1) as f64 / (options.permutations + 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A level with a little noise of its own (deterministic).
    fn level(value: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n)
            .map(|_| value * (1.0 + 0.04 * (rng.f64() - 0.5)))
            .collect()
    }

    #[test]
    fn one_step_is_found_where_it_starts() {
        let mut x = level(1.0, 12, 1);
        x.extend(level(3.0, 8, 2));
        let found = change_points(&x, &Options::default());
        assert_eq!(found.len(), 1, "{found:#?}");
        let c = &found[0];
        assert_eq!(c.index, 12);
        assert!(c.p_value <= 0.01);
        assert!(
            (c.change - 2.0).abs() < 0.1 && c.change_low > 1.8 && c.change_high < 2.2,
            "{c:?}"
        );
    }

    #[test]
    fn a_flat_noisy_series_has_none_and_two_steps_are_two() {
        let flat = level(5.0, 30, 3);
        assert!(change_points(&flat, &Options::default()).is_empty());
        let mut x = level(1.0, 10, 4);
        x.extend(level(2.0, 10, 5));
        x.extend(level(1.0, 10, 6));
        let at: Vec<usize> = change_points(&x, &Options::default())
            .iter()
            .map(|c| c.index)
            .collect();
        assert_eq!(at, [10, 20]);
    }

    #[test]
    fn one_odd_run_is_no_new_level_and_short_series_have_none() {
        let mut x = level(1.0, 19, 7);
        x.push(5.0);
        assert!(change_points(&x, &Options::default())
            .iter()
            .all(|c| c.index != 19));
        assert!(change_points(&[1.0, 9.0, 9.0], &Options::default()).is_empty());
        assert!(change_points(&[], &Options::default()).is_empty());
    }

    proptest::proptest! {
        /// Any series gives changes inside it, in order, each with both sides long enough.
        #[test]
        fn changes_lie_inside_the_series(x in proptest::collection::vec(0.0f64..100.0, 0..40)) {
            let options = Options { permutations: 49, ..Options::default() };
            let found = change_points(&x, &options);
            for w in found.windows(2) {
                proptest::prop_assert!(w[0].index + 2 <= w[1].index);
            }
            for c in &found {
                proptest::prop_assert!(c.index >= 2 && c.index + 2 <= x.len());
            }
        }
    }
}
