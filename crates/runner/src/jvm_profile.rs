//! async-profiler inside a JVM: its CPU profile (inlined frames kept, no safepoint bias) and
//! its allocation profile, each started through the attach API and stopped into collapsed
//! stacks. Used by `kiln run` over the measured phases and by `kiln profile --pid`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_record::schema::profile::ProfileRecord;
use kiln_record::RunDir;
use kiln_runtime::async_profiler::{Sampling, Session};

pub use crate::error::JvmProfileError;
use crate::profile_parts::{self, AsyncProfiled, AsyncSampled};

/// Which profiler takes a JVM's on-CPU profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum JvmProfiler {
    /// async-profiler when its library is found (`KILN_ASYNC_PROFILER`, kiln's data
    /// directory), else perf with the JVM's perf map.
    #[default]
    Auto,
    /// async-profiler from this library.
    Library(PathBuf),
    /// perf with the JVM's perf map.
    Perf,
}

impl JvmProfiler {
    /// From `--async-profiler PATH|off` (absent: found where kiln looks).
    pub fn from_flag(flag: Option<&Path>) -> Self {
        match flag {
            None => Self::Auto,
            Some(off) if off.as_os_str() == "off" => Self::Perf,
            Some(path) => Self::Library(path.to_path_buf()),
        }
    }

    /// async-profiler's library: the one given, else where `find` looks (perf for the CPU
    /// profile does not keep `--alloc` from it).
    fn library(&self) -> Result<PathBuf, JvmProfileError> {
        let explicit = match self {
            JvmProfiler::Library(path) => Some(path.as_path()),
            JvmProfiler::Auto | JvmProfiler::Perf => None,
        };
        kiln_runtime::async_profiler::find(explicit).map_err(JvmProfileError::Library)
    }
}

/// Whether `pid` runs a JVM (its perf map's runtime), where async-profiler can be loaded.
pub fn is_jvm(pid: i32) -> bool {
    kiln_profile::jit::runtime_of(pid) == kiln_profile::jit::Runtime::Java
}

/// async-profiler's CPU profile running inside a JVM.
pub struct JvmCpuProfile {
    pid: i32,
    hz: u32,
    session: Session,
    /// Flags that would make its stacks better (said in the profile's record).
    advice: Vec<String>,
}

impl JvmCpuProfile {
    /// Starts it in JVM `pid` at `hz` samples a second, or says why not (None: perf was
    /// asked for).
    pub fn start(pid: i32, hz: u32, jvm: &JvmProfiler) -> Result<Self, Option<JvmProfileError>> {
        if *jvm == JvmProfiler::Perf {
            return Err(None);
        }
        let library = jvm.library().map_err(Some)?;
        let interval = Duration::from_nanos(1_000_000_000 / u64::from(hz.max(1)));
        let session = Session::start(pid, Path::new("/proc"), &library, Sampling::Cpu(interval))
            .map_err(|e| Some(JvmProfileError::Start(e)))?;
        // without it the JVM records where compiled code is only at safepoints, and a sample
        // in inlined code is placed at the nearest one; on its command line, or in
        // JAVA_TOOL_OPTIONS (as --spawn gives it)
        let given = ["cmdline", "environ"].iter().any(|file| {
            let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
            contains_bytes(&bytes, b"+DebugNonSafepoints")
        });
        let advice = if given {
            Vec::new()
        } else {
            vec![
                "start the JVM with -XX:+UnlockDiagnosticVMOptions -XX:+DebugNonSafepoints: \
                  async-profiler then places samples in inlined code exactly"
                    .to_string(),
            ]
        };
        Ok(Self {
            pid,
            hz,
            session,
            advice,
        })
    }

    /// Stops it: the stacks it took, and how.
    pub fn stop(self) -> Result<(kiln_profile::Folded, AsyncProfiled), JvmProfileError> {
        let duration = self.session.started.elapsed();
        let folded = stopped_stacks(self.session)?;
        let taken = AsyncProfiled {
            pid: self.pid,
            duration,
            sampled: AsyncSampled::Cpu { hz: self.hz },
            advice: self.advice,
        };
        Ok((folded, taken))
    }
}

/// A session's collapsed stacks, read back after its stop.
fn stopped_stacks(session: Session) -> Result<kiln_profile::Folded, JvmProfileError> {
    let text = session.stop().map_err(JvmProfileError::Stopped)?;
    if text.trim().is_empty() {
        return Ok(kiln_profile::Folded::default());
    }
    kiln_profile::import(text.as_bytes())
        .map(|imported| imported.folded)
        .map_err(JvmProfileError::Output)
}

/// A sample every this many bytes a JVM allocates (async-profiler's default is one per
/// TLAB; 512 KiB keeps a busy service's samples to a few thousand a second).
const ALLOC_SAMPLE_BYTES: u64 = 512 * 1024;

/// The shortest lock wait a lock profile records: shorter ones are many, cost the JVM a stack
/// walk each, and add little time (async-profiler's own default is 0, every wait).
const LOCK_AT_LEAST: Duration = Duration::from_micros(100);

/// How often a wall-clock profile samples each thread: a service's hundred threads cost a
/// few thousand signals a second (async-profiler's own default is 50 ms).
const WALL_INTERVAL: Duration = Duration::from_millis(20);

/// What an allocation profile counts: bytes allocated.
pub const ALLOC_COUNT: &str = "allocated/bytes";

/// What a lock profile counts: nanoseconds waited.
pub const LOCK_COUNT: &str = "lock wait/nanoseconds";

/// A profile async-profiler takes inside a JVM beside the CPU's, over the measured phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JvmBeside {
    /// `--alloc`: bytes allocated by site.
    Alloc,
    /// `--off-cpu` of a JVM: time waited for contended locks, by the waiting stack.
    Locks,
    /// `--off-cpu` of a JVM: every thread's wall-clock time, running or waiting.
    Wall,
}

impl JvmBeside {
    /// What its stacks are, for their summary.
    fn sampled(self) -> AsyncSampled {
        match self {
            JvmBeside::Alloc | JvmBeside::Locks => AsyncSampled::LeafTyped,
            JvmBeside::Wall => AsyncSampled::WallClock,
        }
    }

    /// The flag it is said under when it could not be taken (the record's `not_recorded`).
    pub(crate) fn flag(self) -> &'static str {
        match self {
            JvmBeside::Alloc => "--alloc",
            JvmBeside::Locks => kiln_record::parts::LOCKS_NOT_RECORDED,
            JvmBeside::Wall => kiln_record::parts::WALL_NOT_RECORDED,
        }
    }

    fn sampling(self) -> Sampling {
        match self {
            JvmBeside::Alloc => Sampling::Alloc(ALLOC_SAMPLE_BYTES),
            JvmBeside::Locks => Sampling::Lock(LOCK_AT_LEAST),
            JvmBeside::Wall => Sampling::Wall(WALL_INTERVAL),
        }
    }
}

/// A [`JvmBeside`] profile running inside a JVM.
pub(crate) struct JvmBesideWatcher {
    kind: JvmBeside,
    pid: i32,
    session: Session,
}

impl JvmBesideWatcher {
    /// Starts it in JVM `pid`, or says why it cannot be taken.
    pub(crate) fn start(
        kind: JvmBeside,
        pid: i32,
        jvm: &JvmProfiler,
    ) -> Result<Self, JvmProfileError> {
        if !is_jvm(pid) {
            let what = match kind {
                JvmBeside::Alloc => "allocation profiles",
                JvmBeside::Locks => "lock profiles",
                JvmBeside::Wall => "wall-clock profiles",
            };
            return Err(JvmProfileError::NotAJvm { what });
        }
        let library = jvm.library()?;
        let session = Session::start(pid, Path::new("/proc"), &library, kind.sampling())
            .map_err(JvmProfileError::Start)?;
        Ok(Self { kind, pid, session })
    }

    pub(crate) fn kind(&self) -> JvmBeside {
        self.kind
    }

    /// Stops it and writes its profile into the run directory.
    pub(crate) fn finish(
        self,
        dir: &mut RunDir,
        warnings: &mut Vec<String>,
    ) -> Option<ProfileRecord> {
        let duration = self.session.started.elapsed();
        let pid = self.pid;
        let (parts, count, title) = match self.kind {
            JvmBeside::Alloc => (
                profile_parts::ALLOC,
                ALLOC_COUNT,
                format!("Allocations of pid {pid} during the measured load (bytes by site)"),
            ),
            JvmBeside::Locks => (
                profile_parts::LOCKS,
                LOCK_COUNT,
                format!(
                    "Lock waits of pid {pid} during the measured load (time waited by stack; \
                     the leaf is the lock's class)"
                ),
            ),
            JvmBeside::Wall => (
                profile_parts::WALL,
                kiln_record::parts::WALL_COUNT,
                format!(
                    "Wall clock of pid {pid} during the measured load (every thread's time, \
                     running or waiting, under the thread's name)"
                ),
            ),
        };
        let kind = self.kind;
        // what went wrong is said in the record, as text
        let stacks = stopped_stacks(self.session).map_err(|e| e.to_string());
        let written = stacks.and_then(|folded| {
            if folded.total() == 0 && kind == JvmBeside::Locks {
                // no thread waited for a lock as long as the threshold: nothing to draw
                return Ok(None);
            }
            let taken = AsyncProfiled {
                pid: self.pid,
                duration,
                sampled: kind.sampled(),
                advice: Vec::new(),
            };
            profile_parts::write_profile(
                dir,
                parts,
                &folded,
                &title,
                count,
                10,
                profile_parts::Origin::AsyncProfiler(&taken),
            )
            .map(Some)
            .map_err(|e| e.to_string())
        });
        match written {
            Ok(w) => w.map(|w| w.record),
            Err(e) => {
                let flag = self.kind.flag();
                warnings.push(format!("{flag}: {e}"));
                dir.manifest.not_recorded.insert(flag.into(), e);
                None
            }
        }
    }
}

fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
