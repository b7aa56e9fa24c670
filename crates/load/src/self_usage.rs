//! kiln's own CPU time and peak memory, from getrusage(2), so every result says what the
//! load generator itself cost.

/// CPU time and peak RSS of this process.
#[derive(Clone, Copy, Debug, Default)]
pub struct SelfUsage {
    pub user_us: u64,
    pub system_us: u64,
    pub max_rss_kib: u64,
}

impl SelfUsage {
    pub fn now() -> Self {
        // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return Self::default();
        }
        let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
        Self {
            user_us: us(ru.ru_utime),
            system_us: us(ru.ru_stime),
            max_rss_kib: ru.ru_maxrss.max(0) as u64,
        }
    }

    /// CPU used since `earlier`; the peak RSS is the current one.
    pub fn since(&self, earlier: &SelfUsage) -> SelfUsage {
        SelfUsage {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            system_us: self.system_us.saturating_sub(earlier.system_us),
            max_rss_kib: self.max_rss_kib,
        }
    }
}
