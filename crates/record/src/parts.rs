//! The kinds of parts a run directory lists, named once for their writers and their readers
//! (the load's and the sampler's parts are named beside their line types).

/// Collapsed stacks of the profile (`profile.folded`).
pub const PROFILE_FOLDED_PART: &str = "profile-folded";
/// The profile as an interactive flame graph (`flame.svg`).
pub const PROFILE_FLAME_PART: &str = "profile-flame";
/// The profile for speedscope (`profile.speedscope.json`).
pub const PROFILE_SPEEDSCOPE_PART: &str = "profile-speedscope";
/// The profile's summary and how it was taken (`profile.json`).
pub const PROFILE_SUMMARY_PART: &str = "profile-summary";
/// The DB-call analysis (`queries.json`).
pub const QUERIES_PART: &str = "queries";
/// The DB stack trie's calls and DB time (microseconds) as collapsed stacks.
pub const TRIE_CALLS_PART: &str = "db-trie-calls";
pub const TRIE_TIME_PART: &str = "db-trie-time";
/// The findings over the whole record (`findings.json`).
pub const FINDINGS_PART: &str = "findings";

/// The parts of one profile: which kinds, in which files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileParts {
    /// Collapsed stacks.
    pub folded: (&'static str, &'static str),
    /// The interactive flame graph (SVG).
    pub flame: (&'static str, &'static str),
    /// The profile for speedscope.
    pub speedscope: (&'static str, &'static str),
    /// The summary and how the profile was taken.
    pub summary: (&'static str, &'static str),
}

/// Where the CPU went (perf's `cpu-clock` samples).
pub const ON_CPU: ProfileParts = ProfileParts {
    folded: (PROFILE_FOLDED_PART, "profile.folded"),
    flame: (PROFILE_FLAME_PART, "flame.svg"),
    speedscope: (PROFILE_SPEEDSCOPE_PART, "profile.speedscope.json"),
    summary: (PROFILE_SUMMARY_PART, "profile.json"),
};

/// What a JVM allocated, in bytes by allocation site (async-profiler's TLAB-driven samples,
/// `kiln run --alloc`).
pub const ALLOC: ProfileParts = ProfileParts {
    folded: ("alloc-folded", "alloc.folded"),
    flame: ("alloc-flame", "alloc-flame.svg"),
    speedscope: ("alloc-speedscope", "alloc.speedscope.json"),
    summary: ("alloc-summary", "alloc.json"),
};

/// Where a JVM's threads waited for contended locks (monitors and java.util.concurrent
/// locks), weighed in time waited, the lock's class as the leaf (async-profiler's lock
/// profile, `kiln run --off-cpu` of a JVM).
pub const LOCKS: ProfileParts = ProfileParts {
    folded: ("locks-folded", "locks.folded"),
    flame: ("locks-flame", "locks-flame.svg"),
    speedscope: ("locks-speedscope", "locks.speedscope.json"),
    summary: ("locks-summary", "locks.json"),
};

/// The key a JVM's lock profile is said under in `not_recorded` when it could not be taken.
pub const LOCKS_NOT_RECORDED: &str = "--off-cpu (JVM locks)";

/// Where a JVM's threads spent their time, running or waiting: async-profiler's wall-clock
/// samples of every thread under its name, weighed in nanoseconds (`kiln run --off-cpu` of a
/// JVM).
pub const WALL: ProfileParts = ProfileParts {
    folded: ("wall-folded", "wall.folded"),
    flame: ("wall-flame", "wall-flame.svg"),
    speedscope: ("wall-speedscope", "wall.speedscope.json"),
    summary: ("wall-summary", "wall.json"),
};

/// What a wall-clock profile counts: nanoseconds of threads' time.
pub const WALL_COUNT: &str = "wall clock/nanoseconds";

/// The key a JVM's wall-clock profile is said under in `not_recorded` when it could not be
/// taken.
pub const WALL_NOT_RECORDED: &str = "--off-cpu (JVM wall clock)";

/// Where threads left the CPU (every `context-switches` event with its stack): blocked on
/// a lock, a read, a sleep, or preempted.
pub const OFF_CPU: ProfileParts = ProfileParts {
    folded: ("offcpu-folded", "offcpu.folded"),
    flame: ("offcpu-flame", "offcpu-flame.svg"),
    speedscope: ("offcpu-speedscope", "offcpu.speedscope.json"),
    summary: ("offcpu-summary", "offcpu.json"),
};
