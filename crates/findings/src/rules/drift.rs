//! Latency that moves steadily through the measured run: falling (the warm-up was not over,
//! so the figures mix two states) or rising (something accumulates). A trend test over the
//! per-second medians (Mann-Kendall, as hydrology and climate series use it) says whether
//! the movement is more than noise; the medians of the run's first and last fifths say how
//! big it is.

use kiln_record::text::us as duration_us;
use serde_json::json;

use super::{Draft, Rule};
use crate::record::LoadPoint;
use crate::{RunRecord, Severity, Verdict, Window};

/// Seconds with fewer responses than this have no median worth a trend.
const MIN_RESPONSES: u64 = 20;
/// Fewer such seconds than this and no trend can be told from a few slow seconds.
const MIN_SECONDS: usize = 15;
/// The trend test's bar: per-second medians are not independent (a slow second makes its
/// neighbour slow), so the bar is far below the usual 0.05.
const MAX_P: f64 = 0.001;
/// A change of this ratio and size between the first and last fifths needs less of the
/// trend test: a warm-up that falls and then stays flat dilutes Mann-Kendall with the
/// plateau's noise (14 ms falling to 1.3 ms over 7 of 16 seconds, then a slight rise, gave
/// p = 0.002). A busy host's noise rarely triples a median for seconds on end.
const LARGE_CHANGE_RATIO: f64 = 3.0;
const LARGE_CHANGE_US: f64 = 1_000.0;
const MAX_P_LARGE_CHANGE: f64 = 0.01;
/// The first and last fifths' medians must differ by this share...
const MIN_CHANGE: f64 = 0.25;
/// ...and by this much: below it a trend is scheduling and cache noise on a shared host (the
/// demo's fixed shop, alone on a CI machine, once "fell" from 588 to 386 us over 30 s).
const MIN_CHANGE_US: f64 = 500.0;

pub const DRIFT: Rule = Rule {
    id: "latency.drift",
    judge: drift,
};

fn drift(run: &RunRecord) -> Verdict {
    let points: Vec<&LoadPoint> = run
        .seconds
        .iter()
        .filter(|s| s.requests >= MIN_RESPONSES)
        .collect();
    if points.len() < MIN_SECONDS {
        return Verdict::Unjudged(format!(
            "{} seconds with {MIN_RESPONSES} responses or more are too few to see a trend \
             (at least {MIN_SECONDS})",
            points.len()
        ));
    }
    let p50: Vec<f64> = points.iter().map(|s| s.p50_us as f64).collect();
    let (z, p) = mann_kendall(&p50);
    let fifth = (p50.len() / 5).max(3);
    let first = median(&p50[..fifth]);
    let last = median(&p50[p50.len() - fifth..]);
    let change = last / first.max(1.0) - 1.0;
    let ratio = (first / last.max(1.0)).max(last / first.max(1.0));
    let bar = if ratio >= LARGE_CHANGE_RATIO && (last - first).abs() >= LARGE_CHANGE_US {
        MAX_P_LARGE_CHANGE
    } else {
        MAX_P
    };
    if p >= bar || change.abs() < MIN_CHANGE || (last - first).abs() < MIN_CHANGE_US {
        return Verdict::Clear;
    }
    let falling = change < 0.0;
    // where the medians settled: the first second from which every 5-second median stays
    // within 15% of the last fifth's (falling runs only; a rising run has not settled)
    let settled = falling
        .then(|| {
            let near = |from: usize| {
                p50[from..]
                    .windows(5)
                    .all(|w| median(w) <= 1.15 * last && median(w) >= last / 1.15)
            };
            (0..p50.len().saturating_sub(5)).find(|&i| near(i))
        })
        .flatten();
    let window = Some(Window {
        from_unix_ms: kiln_record::second_start_ms(points[0].unix_ms),
        to_unix_ms: points[points.len() - 1].unix_ms,
    });
    let start_ms = points[0].unix_ms;
    let mut evidence = vec![
        format!(
            "p50 {} over the first {fifth} s, {} over the last {fifth} s ({:+.0}%)",
            duration_us(first as u64),
            duration_us(last as u64),
            100.0 * change
        ),
        format!(
            "a steady trend, not noise: Mann-Kendall z = {z:.1} over {} seconds (p = {p:.1e})",
            p50.len()
        ),
    ];
    if let Some(i) = settled {
        evidence.push(format!(
            "settled after about {} s of the measured run",
            (points[i].unix_ms - start_ms) / 1000 + 1
        ));
    }
    let (title, cause, fix) = if falling {
        (
            format!(
                "The warm-up was not over: p50 fell from {} to {} during the measured run",
                duration_us(first as u64),
                duration_us(last as u64)
            ),
            "the target was still warming up when the measurement began (JIT compilation, \
             caches and connection pools filling): the figures mix a cold and a warm target"
                .to_string(),
            match settled {
                Some(i) => format!(
                    "measure after the warm-up: kiln run --warmup {}s (or warm the target up \
                     before the run)",
                    ((points[i].unix_ms - start_ms) / 1000 + 1).max(5)
                ),
                None => "measure after the warm-up: a longer kiln run --warmup, until the \
                         latency is flat (or warm the target up before the run)"
                    .to_string(),
            },
        )
    } else {
        (
            format!(
                "Latency rose through the run: p50 went from {} to {}",
                duration_us(first as u64),
                duration_us(last as u64)
            ),
            "something accumulates while the load runs: a queue (the rate is above what the \
             target serves), memory or GC pressure, a table or cache that grows, a leak"
                .to_string(),
            "see the rate and resource findings and the memory chart; run longer to see \
             whether it levels off; a smaller rate tells a queue from a leak"
                .to_string(),
        )
    };
    Verdict::Found(vec![Draft {
        rule: DRIFT.id,
        key: if falling { "falling" } else { "rising" },
        severity: if ratio >= 2.0 {
            Severity::High
        } else {
            Severity::Medium
        },
        title,
        evidence,
        window,
        cause,
        fix,
        impact: (1.0 - 1.0 / ratio, "latency"),
        data: json!({"first_p50_us": first, "last_p50_us": last, "change": change,
            "mann_kendall_z": z, "p": p, "seconds": p50.len(), "fifth": fifth,
            "settled_after_s": settled.map(|i| (points[i].unix_ms - start_ms) / 1000 + 1)}),
    }
    .finish()])
}

/// Mann-Kendall trend test: z and the two-sided p (normal approximation with the variance
/// corrected for ties, as in Hirsch and Slack 1984; fine from about 10 values).
fn mann_kendall(x: &[f64]) -> (f64, f64) {
    let n = x.len();
    let mut s = 0i64;
    for i in 0..n {
        for j in i + 1..n {
            s += match x[j].partial_cmp(&x[i]) {
                Some(std::cmp::Ordering::Greater) => 1,
                Some(std::cmp::Ordering::Less) => -1,
                _ => 0,
            };
        }
    }
    let mut sorted = x.to_vec();
    sorted.sort_by(f64::total_cmp);
    let ties: f64 = sorted
        .chunk_by(|a, b| a == b)
        .map(|g| {
            let t = g.len() as f64;
            t * (t - 1.0) * (2.0 * t + 5.0)
        })
        .sum();
    let nf = n as f64;
    let var = (nf * (nf - 1.0) * (2.0 * nf + 5.0) - ties) / 18.0;
    if var <= 0.0 {
        return (0.0, 1.0);
    }
    let z = match s.signum() {
        0 => 0.0,
        sign => (s - sign) as f64 / var.sqrt(),
    };
    (z, libm::erfc(z.abs() / std::f64::consts::SQRT_2))
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};

    /// A run whose second `i` has 100 responses around `p50(i)` µs.
    fn run_of(seconds: usize, p50: impl Fn(usize) -> u64) -> RunRecord {
        let s: Vec<Second> = (0..seconds)
            .map(|i| {
                let m = p50(i);
                Second::latencies(&[(m * 9 / 10, 30), (m, 40), (m * 12 / 10, 30)])
            })
            .collect();
        load_run(&s)
    }

    /// A fixed pseudo-random wobble of +-10%, the same on every run.
    fn wobble(i: usize) -> f64 {
        let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
        0.9 + 0.2 * (x % 1000) as f64 / 1000.0
    }

    #[test]
    fn a_warm_up_still_going_is_found_with_where_it_settled() {
        // 8 ms falling to 2 ms over the first 12 s, then flat, for 40 s
        let run = run_of(40, |i| {
            let warm = 2_000.0 + 6_000.0 * (1.0 - i as f64 / 12.0).max(0.0);
            (warm * wobble(i)) as u64
        });
        let Verdict::Found(found) = drift(&run) else {
            panic!("no drift found");
        };
        let f = &found[0];
        assert!(
            f.title.starts_with("The warm-up was not over"),
            "{}",
            f.title
        );
        let settled = f.data["settled_after_s"].as_u64().unwrap();
        assert!((10..=16).contains(&settled), "settled after {settled} s");
        assert!(f.fix.contains("--warmup"), "{}", f.fix);
        assert_eq!(f.severity, Severity::High);
        assert!(f.data["p"].as_f64().unwrap() < MAX_P);
    }

    #[test]
    fn a_short_warm_up_then_a_plateau_that_creeps_up_is_found() {
        // per-second p50 of a 16 s run on a busy machine (CI): a tenfold fall over 7 s, then
        // a plateau whose noise rises; Mann-Kendall alone gives p = 0.002
        let p50 = [
            14455, 12527, 10767, 8735, 6815, 4947, 3143, 1271, 1243, 1272, 1295, 1301, 1279, 1271,
            1285, 1337,
        ];
        let run = run_of(p50.len(), |i| p50[i]);
        let Verdict::Found(found) = drift(&run) else {
            panic!("no drift found");
        };
        assert!(found[0].title.starts_with("The warm-up was not over"));
        let p = found[0].data["p"].as_f64().unwrap();
        assert!((MAX_P..MAX_P_LARGE_CHANGE).contains(&p), "p = {p}");
        let settled = found[0].data["settled_after_s"].as_u64().unwrap();
        assert!((6..=9).contains(&settled), "settled after {settled} s");
        // the same shape scaled to a fall of 2.5x (the same ranks: the same p) needs the
        // stricter bar, and misses it
        let mild = run_of(p50.len(), |i| {
            (1_300 + (p50[i] as i64 - 1_300) * 17 / 100) as u64
        });
        assert!(matches!(drift(&mild), Verdict::Clear));
    }

    #[test]
    fn latency_that_keeps_rising_is_found_as_rising() {
        let run = run_of(30, |i| ((2_000 + 100 * i as u64) as f64 * wobble(i)) as u64);
        let Verdict::Found(found) = drift(&run) else {
            panic!("no drift found");
        };
        assert!(
            found[0].title.starts_with("Latency rose"),
            "{}",
            found[0].title
        );
        assert!(found[0].data["settled_after_s"].is_null());
        assert_ne!(
            found[0].id,
            finding_of_falling().id,
            "rising and falling differ"
        );
    }

    fn finding_of_falling() -> crate::Finding {
        let run = run_of(30, |i| 6_000u64.saturating_sub(150 * i as u64).max(1_000));
        match drift(&run) {
            Verdict::Found(mut f) => f.remove(0),
            _ => panic!("no drift found"),
        }
    }

    #[test]
    fn flat_noisy_or_spiky_latency_is_no_drift() {
        // noise of +-10% around 2 ms
        let flat = run_of(60, |i| (2_000.0 * wobble(i)) as u64);
        assert!(matches!(drift(&flat), Verdict::Clear));
        // a 400 ms stall every 10 s (periodic spikes are another finding)
        let spiky = run_of(60, |i| if i % 10 == 0 { 400_000 } else { 2_000 });
        assert!(matches!(drift(&spiky), Verdict::Clear));
        // a small but steady rise: 2.00 to 2.10 ms is a trend, not a problem
        let small = run_of(60, |i| 2_000 + 2 * i as u64);
        assert!(matches!(drift(&small), Verdict::Clear));
        // a sub-millisecond target whose median slid 600 -> 380 us over 30 s, as the demo's
        // fixed shop once did on a CI machine: steady, 35%, but scheduling noise in size
        let sliding = run_of(30, |i| 620 - 9 * i as u64);
        assert!(matches!(drift(&sliding), Verdict::Clear));
    }

    #[test]
    fn a_short_run_cannot_judge() {
        let run = run_of(10, |i| 8_000 - 500 * i as u64);
        assert!(matches!(drift(&run), Verdict::Unjudged(r) if r.contains("too few")));
    }

    #[test]
    fn mann_kendall_matches_a_known_value() {
        // 1..=10 strictly rising: S = 45, var = 10*9*25/18 = 125, z = 44/sqrt(125)
        let (z, p) = mann_kendall(&(1..=10).map(f64::from).collect::<Vec<_>>());
        assert!((z - 44.0 / 125f64.sqrt()).abs() < 1e-12, "{z}");
        assert!((p - 8.303e-5).abs() < 1e-8, "{p}");
        // all equal: no trend
        assert_eq!(mann_kendall(&[3.0; 12]), (0.0, 1.0));
    }
}
