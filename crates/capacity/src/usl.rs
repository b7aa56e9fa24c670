//! The Universal Scalability Law (Gunther) fitted to throughput by concurrency:
//! `X(N) = λN / (1 + σ(N-1) + κN(N-1))`. σ is contention (a serial part: throughput levels
//! off at λ/σ), κ coherency (each request paying for every other: throughput falls past
//! `N* = sqrt((1-σ)/κ)`). The fit says whether more threads or more instances would help and
//! where the peak is, with its quality.
//!
//! Fitted here, not by a crate: for fixed (σ, κ) the best λ is a closed form (X is linear in
//! it), which leaves two bounded parameters, searched on a grid and refined by shrinking it
//! around the best point. That is exact enough for the handful of points a sweep has, always
//! converges, and needs no optimiser crate.

use kiln_record::schema::capacity::UslFit;

/// σ and κ are searched in [0, 1]; κ on a log scale from here up (0 is tried too).
const KAPPA_MIN: f64 = 1e-6;
const GRID: usize = 41;
const REFINES: usize = 30;

fn model(n: f64, sigma: f64, kappa: f64) -> f64 {
    n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
}

/// The best λ for (σ, κ) and the squared error it leaves.
fn best_lambda(points: &[(f64, f64)], sigma: f64, kappa: f64) -> (f64, f64) {
    let (mut xg, mut gg) = (0.0, 0.0);
    for &(n, x) in points {
        let g = model(n, sigma, kappa);
        xg += x * g;
        gg += g * g;
    }
    let lambda = if gg > 0.0 { xg / gg } else { 0.0 };
    let sse = points
        .iter()
        .map(|&(n, x)| (x - lambda * model(n, sigma, kappa)).powi(2))
        .sum();
    (lambda, sse)
}

/// Fits the law to `(concurrency, throughput)` points; none with fewer than 4 distinct
/// concurrencies (three parameters need more points than that to be judged).
pub fn fit(points: &[(f64, f64)]) -> Option<UslFit> {
    let points: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(n, x)| n.is_finite() && x.is_finite() && *n >= 1.0 && *x >= 0.0)
        .collect();
    let mut distinct: Vec<f64> = points.iter().map(|p| p.0).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    if distinct.len() < 4 {
        return None;
    }
    // (σ, log10 κ) on a grid, then the grid shrunk around the best cell
    let (mut s_lo, mut s_hi) = (0.0f64, 1.0f64);
    let (mut k_lo, mut k_hi) = (KAPPA_MIN.log10(), 0.0f64);
    let kappa_of = |lk: f64| {
        if lk <= KAPPA_MIN.log10() {
            0.0
        } else {
            10f64.powf(lk)
        }
    };
    let mut best = (f64::INFINITY, 0.0, 0.0, 0.0);
    for _ in 0..REFINES {
        for i in 0..GRID {
            let sigma = s_lo + (s_hi - s_lo) * i as f64 / (GRID - 1) as f64;
            for j in 0..GRID {
                let lk = k_lo + (k_hi - k_lo) * j as f64 / (GRID - 1) as f64;
                let kappa = kappa_of(lk);
                let (lambda, sse) = best_lambda(&points, sigma, kappa);
                if sse < best.0 {
                    best = (sse, lambda, sigma, lk);
                }
            }
        }
        let (s_step, k_step) = ((s_hi - s_lo) / 8.0, (k_hi - k_lo) / 8.0);
        s_lo = (best.2 - s_step).max(0.0);
        s_hi = (best.2 + s_step).min(1.0);
        k_lo = (best.3 - k_step).max(KAPPA_MIN.log10());
        k_hi = (best.3 + k_step).min(0.0);
    }
    let (sse, lambda, sigma, lk) = best;
    let kappa = kappa_of(lk);
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let sst: f64 = points.iter().map(|p| (p.1 - mean).powi(2)).sum();
    let r_squared = if sst > 0.0 { 1.0 - sse / sst } else { 1.0 };
    // the peak: where dX/dN = 0, when coherency bends the curve back
    let peak_n = (kappa > 0.0 && sigma < 1.0).then(|| ((1.0 - sigma) / kappa).sqrt());
    let peak_x = peak_n.map(|n| lambda * model(n, sigma, kappa));
    Some(UslFit {
        lambda,
        sigma,
        kappa,
        r_squared,
        peak_concurrency: peak_n,
        peak_throughput: peak_x,
        points: points.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(lambda: f64, sigma: f64, kappa: f64, ns: &[f64]) -> Vec<(f64, f64)> {
        ns.iter()
            .map(|&n| (n, lambda * model(n, sigma, kappa)))
            .collect()
    }

    const NS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

    #[test]
    fn a_curve_made_by_the_law_gives_its_parameters_back() {
        let f = fit(&curve(1000.0, 0.05, 0.002, &NS)).unwrap();
        assert!((f.lambda - 1000.0).abs() < 5.0, "{f:?}");
        assert!((f.sigma - 0.05).abs() < 0.005, "{f:?}");
        assert!((f.kappa - 0.002).abs() < 0.0002, "{f:?}");
        assert!(f.r_squared > 0.999);
        let peak = ((1.0 - 0.05) / 0.002f64).sqrt();
        assert!((f.peak_concurrency.unwrap() - peak).abs() < 1.0, "{f:?}");
    }

    #[test]
    fn contention_alone_levels_off_and_has_no_peak() {
        let f = fit(&curve(100.0, 0.2, 0.0, &NS)).unwrap();
        assert!((f.sigma - 0.2).abs() < 0.01, "{f:?}");
        assert!(f.kappa < 1e-4, "{f:?}");
        // a κ of (nearly) nothing puts the peak far past what was tried, or nowhere
        assert!(f.peak_concurrency.is_none_or(|n| n > 1000.0), "{f:?}");
    }

    #[test]
    fn noise_lowers_the_fits_quality_and_too_few_points_give_none() {
        let mut noisy = curve(500.0, 0.1, 0.001, &NS);
        for (i, p) in noisy.iter_mut().enumerate() {
            p.1 *= if i % 2 == 0 { 1.15 } else { 0.85 };
        }
        let f = fit(&noisy).unwrap();
        assert!(f.r_squared < 0.99 && f.r_squared > 0.5, "{f:?}");
        assert!(fit(&curve(500.0, 0.1, 0.0, &[1.0, 2.0, 4.0])).is_none());
        assert!(fit(&[(1.0, f64::NAN), (2.0, 1.0), (0.0, 3.0)]).is_none());
    }
}
