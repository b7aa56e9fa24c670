//! The host clock's synchronisation as the kernel's NTP discipline reports it
//! (`ntp_adjtime` with no change: the same reading `adjtimex -p` and `timedatectl` show).
//! Shards on several machines start together by their wall clocks; a clock that is not
//! synchronised, or whose error bound is large, makes a shard's start and seconds unreliable.
//! It only reads: it never sets the clock.

pub use kiln_record::schema::plan::ClockSync;

/// Reads the kernel's clock discipline; `None` where the call is refused (seccomp).
pub fn read() -> Option<ClockSync> {
    // SAFETY: a zeroed timex with modes 0 asks for a reading and changes nothing.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::ntp_adjtime(&mut tx) };
    if state < 0 {
        return None;
    }
    Some(ClockSync {
        synchronized: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        max_error_us: tx.maxerror,
        est_error_us: tx.esterror,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading changes nothing (two in a row agree on the state), its bounds are never
    /// negative, and a clock is trusted only when synchronised within the bound.
    #[test]
    fn the_kernels_clock_discipline_is_read_without_changing_it() {
        let a = read().expect("ntp_adjtime answers");
        assert!(a.max_error_us >= 0 && a.est_error_us >= 0, "{a:?}");
        let b = read().unwrap();
        assert_eq!(a.synchronized, b.synchronized);
        eprintln!("this host's clock: {a:?}");
        let unsynced = ClockSync {
            synchronized: false,
            max_error_us: 0,
            est_error_us: 0,
        };
        assert!(!unsynced.trusted_within(1_000_000));
        let loose = ClockSync {
            synchronized: true,
            max_error_us: 600_000,
            est_error_us: 1_000,
        };
        assert!(!loose.trusted_within(100_000) && loose.trusted_within(1_000_000));
    }
}
