//! When the second copy goes: a fixed time (`5ms`) or a percentile of the latency (`p95`).

use kiln_record::LatencyHistogram;

/// The hedge delay as the user gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delay {
    /// A percentile of the run's own latency, 0 < p < 100 (`p95` is 95.0).
    Percentile(f64),
    /// A fixed time, in microseconds.
    Fixed(u64),
}

#[derive(Debug, PartialEq)]
pub struct DelayError(pub String);

impl std::fmt::Display for DelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DelayError {}

impl std::str::FromStr for Delay {
    type Err = DelayError;

    fn from_str(text: &str) -> Result<Self, DelayError> {
        let t = text.trim();
        let bad = |why: &str| {
            DelayError(format!(
                "{t:?} is not a hedge delay: {why} (a percentile such as p95 or p99.9, or a \
                 time such as 5ms, 500us or 0.2s)"
            ))
        };
        if let Some(p) = t.strip_prefix(['p', 'P']) {
            let p: f64 = p.parse().map_err(|_| bad("not a number after p"))?;
            if !(p > 0.0 && p < 100.0) {
                return Err(bad("a percentile is above 0 and below 100"));
            }
            return Ok(Delay::Percentile(p));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("a time needs its unit"))?;
        let (number, unit) = t.split_at(split);
        let number: f64 = number.parse().map_err(|_| bad("not a number"))?;
        let scale = match unit.trim() {
            "us" | "µs" => 1.0,
            "ms" => 1e3,
            "s" => 1e6,
            _ => return Err(bad("the unit is us, ms or s")),
        };
        let us = number * scale;
        if !(us >= 1.0 && us <= kiln_record::MAX_LATENCY_US as f64) {
            return Err(bad("a time from 1us to 1h"));
        }
        Ok(Delay::Fixed(us.round() as u64))
    }
}

impl std::fmt::Display for Delay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delay::Percentile(p) => write!(f, "p{p}"),
            Delay::Fixed(us) => f.write_str(&kiln_record::text::us(*us)),
        }
    }
}

impl Delay {
    /// The delay in microseconds for a run with this latency (a percentile is read from it).
    pub fn resolve_us(&self, latency: &LatencyHistogram) -> u64 {
        match *self {
            Delay::Percentile(p) => latency.quantile_us(p / 100.0),
            Delay::Fixed(us) => us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_times_are_read_and_nonsense_is_refused() {
        assert_eq!("p95".parse(), Ok(Delay::Percentile(95.0)));
        assert_eq!("P99.9".parse(), Ok(Delay::Percentile(99.9)));
        assert_eq!("5ms".parse(), Ok(Delay::Fixed(5_000)));
        assert_eq!("500us".parse(), Ok(Delay::Fixed(500)));
        assert_eq!("0.2s".parse(), Ok(Delay::Fixed(200_000)));
        assert_eq!("1.5 ms".parse(), Ok(Delay::Fixed(1_500)));
        for bad in [
            "", "p", "p100", "p0", "p-5", "5", "5m", "ms", "0us", "2h", "p95x", "1e3ms",
        ] {
            let e = bad.parse::<Delay>().unwrap_err();
            assert!(e.0.contains("not a hedge delay"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_percentile_resolves_from_the_run() {
        let mut h = LatencyHistogram::new();
        for us in 1..=100 {
            h.record_us(us * 100);
        }
        assert_eq!(Delay::Percentile(95.0).resolve_us(&h), h.quantile_us(0.95));
        assert!((9_500..9_510).contains(&Delay::Percentile(95.0).resolve_us(&h)));
        assert_eq!(Delay::Fixed(123).resolve_us(&h), 123);
    }
}
