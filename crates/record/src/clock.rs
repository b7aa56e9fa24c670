//! The wall clock as the record stamps it: time since the Unix epoch in ms (seconds, samples,
//! barriers), µs (the HTTP barrier's clock exchange) or ns (span timestamps, seeds). Said once:
//! eleven copies in eight crates had each its own fallback for a clock before 1970.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` in ms since the Unix epoch; 0 for a time before it.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `t` in µs since the Unix epoch; 0 for a time before it.
pub fn unix_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Now, in ms since the Unix epoch.
pub fn unix_ms_now() -> u64 {
    unix_ms(SystemTime::now())
}

/// Now, in ns since the Unix epoch (u64 holds them until 2554); 0 before it.
pub fn unix_ns_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_epoch_and_before_are_zero_and_after_counts_in_each_unit() {
        assert_eq!(unix_ms(UNIX_EPOCH), 0);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(unix_us(UNIX_EPOCH - Duration::from_secs(1)), 0);
        let t = UNIX_EPOCH + Duration::from_micros(1_234_567);
        assert_eq!((unix_ms(t), unix_us(t)), (1_234, 1_234_567));
        let (ms, ns) = (unix_ms_now(), unix_ns_now());
        assert!(ms > 1_700_000_000_000 && ns / 1_000_000 >= ms, "{ms} {ns}");
    }
}
