//! The Mann-Whitney U test on per-repeat figures, as benchstat reports it beside a change:
//! exact (every split of the pooled values enumerated) for up to 20 values, the normal
//! approximation above. Written here because it is twenty lines and the crates that have it
//! bring a statistics library with them.

/// The two-sided p-value that `a` and `b` come from one distribution; `None` when a side
/// is empty.
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let ranks = mid_ranks(&pooled);
    let (n, k) = (pooled.len(), a.len());
    let mean = k as f64 * (n as f64 + 1.0) / 2.0;
    let observed = (ranks[..k].iter().sum::<f64>() - mean).abs();
    if n <= 20 {
        let (mut extreme, mut total) = (0u64, 0u64);
        for_each_subset(n, k, &mut |chosen| {
            let sum: f64 = chosen.iter().map(|i| ranks[*i]).sum();
            total += 1;
            if (sum - mean).abs() >= observed - 1e-9 {
                extreme += 1;
            }
        });
        return Some(extreme as f64 / total as f64);
    }
    let (na, nb) = (k as f64, (n - k) as f64);
    let sd = (na * nb * (n as f64 + 1.0) / 12.0).sqrt();
    if sd == 0.0 {
        return Some(1.0);
    }
    // with a continuity correction
    let z = ((observed - 0.5).max(0.0)) / sd;
    Some((2.0 * (1.0 - standard_normal_cdf(z))).min(1.0))
}

/// The smallest p-value the exact test can give for `n` vs `m` values (all of one side
/// below all of the other), benchstat's warning when it is above alpha.
pub fn smallest_p(n: usize, m: usize) -> f64 {
    let a: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let b: Vec<f64> = (0..m).map(|i| (n + i) as f64).collect();
    mann_whitney_p(&a, &b).unwrap_or(1.0)
}

fn mid_ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|x, y| values[*x].total_cmp(&values[*y]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for at in &order[i..=j] {
            ranks[*at] = rank;
        }
        i = j + 1;
    }
    ranks
}

fn for_each_subset(n: usize, k: usize, visit: &mut dyn FnMut(&[usize])) {
    fn go(
        start: usize,
        n: usize,
        k: usize,
        chosen: &mut Vec<usize>,
        visit: &mut dyn FnMut(&[usize]),
    ) {
        if chosen.len() == k {
            return visit(chosen);
        }
        for i in start..=n - (k - chosen.len()) {
            chosen.push(i);
            go(i + 1, n, k, chosen, visit);
            chosen.pop();
        }
    }
    go(0, n, k, &mut Vec::with_capacity(k), visit);
}

/// The standard normal distribution function.
fn standard_normal_cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_p_values_are_benchstats() {
        // benchstat's uTestMinP table: n=2 0.333, 3 0.1, 4 0.0286, 5 0.0079
        for (n, want) in [(2, 0.3333), (3, 0.1), (4, 0.02857), (5, 0.00794)] {
            let got = smallest_p(n, n);
            assert!((got - want).abs() < 1e-3, "n={n}: {got}");
        }
    }

    #[test]
    fn identical_samples_are_not_different_and_separated_ones_are() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(mann_whitney_p(&a, &a), Some(1.0));
        let b = [11.0, 12.0, 13.0, 14.0, 15.0, 16.0];
        assert!(mann_whitney_p(&a, &b).unwrap() < 0.01);
        // the normal approximation above 20 values agrees on the direction
        let big_a: Vec<f64> = (0..15).map(f64::from).collect();
        let big_b: Vec<f64> = (100..115).map(f64::from).collect();
        assert!(mann_whitney_p(&big_a, &big_b).unwrap() < 1e-4);
        let interleaved: Vec<f64> = (0..15).map(|i| f64::from(i) + 0.5).collect();
        assert!(mann_whitney_p(&big_a, &interleaved).unwrap() > 0.5);
        assert_eq!(mann_whitney_p(&[], &a), None);
    }
}
