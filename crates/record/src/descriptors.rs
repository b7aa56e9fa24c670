//! The open-files limit, which every connection kiln holds and every file it reads at once
//! count against (a load's connections, a merge's shards).

/// The open-files limit (soft, hard).
pub fn open_files_limit() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some((limit.rlim_cur, limit.rlim_max))
}

/// Raises the soft open-files limit to the hard one (as wrk, oha and k6 users are told to do
/// by hand); returns the soft limit in force after.
pub fn raise_open_files_limit() -> Option<u64> {
    let (soft, hard) = open_files_limit()?;
    if soft < hard {
        let limit = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct we own; raising soft up to hard needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
            return Some(hard);
        }
    }
    Some(soft)
}
