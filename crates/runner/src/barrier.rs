//! A start barrier in a folder every shard can write (a shared volume): each shard says it is
//! ready with a file of its own, and once all N are there each one computes the same start
//! time from them, the last shard's readiness plus a lead. Shards whose pods were scheduled or
//! pulled their image at different times still start together, without guessing a time ahead.
//!
//! It never deletes anything in the folder; a ready file older than the wait allowed before
//! this shard's own readiness belongs to an earlier run and is not counted.

use kiln_record::clock::unix_ms;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time between the last shard's readiness and the start: every shard must see the last
/// file and compute the start before it comes (a shared volume's attribute cache can hold a
/// folder's listing for a second or two).
pub const BARRIER_LEAD: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(100);
/// A ready file holds one number of milliseconds.
const READY_FILE_MAX: u64 = 64;

/// Why the shards did not meet, said with the barrier (`barrier DIR`, `barrier http://ADDR`).
#[derive(Debug, thiserror::Error)]
pub enum BarrierError {
    #[error("shard {index} of {count} is not a shard")]
    NotAShard { index: u32, count: u32 },
    #[error("{barrier}: {doing}: {source}")]
    Io {
        barrier: String,
        doing: &'static str,
        source: std::io::Error,
    },
    #[error("{barrier}: shards {} of {count} were not ready after {} s", list(waiting), timeout.as_secs())]
    NotReady {
        barrier: String,
        waiting: Vec<u32>,
        count: u32,
        timeout: Duration,
    },
    /// Shard 0 never answered this one.
    #[error("{barrier}: shard 0 did not answer in {} s ({why})", timeout.as_secs())]
    NoAnswer {
        barrier: String,
        timeout: Duration,
        why: String,
    },
    /// Told no, or told what cannot be (another plan, a start far from the clocks), or an
    /// address that cannot be listened on.
    #[error("{barrier}: {why}")]
    Refused { barrier: String, why: String },
}

fn list(shards: &[u32]) -> String {
    let names: Vec<String> = shards.iter().map(u32::to_string).collect();
    names.join(", ")
}

/// A file barrier for shard `index` of `count`.
#[derive(Clone, Debug)]
pub struct FileBarrier {
    pub dir: PathBuf,
    pub index: u32,
    pub count: u32,
    /// How long to wait for the others before giving up.
    pub timeout: Duration,
}

impl FileBarrier {
    fn ready_file(&self, index: u32) -> PathBuf {
        self.dir.join(format!("ready-{index}-of-{}", self.count))
    }

    /// Says this shard is ready (its time in milliseconds since the epoch, written whole by a
    /// rename) and waits for every shard; the time the load starts.
    pub fn wait(&self) -> Result<SystemTime, BarrierError> {
        let barrier = || format!("barrier {}", self.dir.display());
        let fail = |doing: &'static str| {
            move |source| BarrierError::Io {
                barrier: barrier(),
                doing,
                source,
            }
        };
        std::fs::create_dir_all(&self.dir).map_err(fail("cannot create it"))?;
        let mine = SystemTime::now();
        let temp = self.dir.join(format!(
            ".ready-{}-of-{}.{}",
            self.index,
            self.count,
            std::process::id()
        ));
        std::fs::write(&temp, unix_ms(mine).to_string()).map_err(fail("cannot write"))?;
        std::fs::rename(&temp, self.ready_file(self.index)).map_err(fail("cannot write"))?;
        let oldest = unix_ms(mine).saturating_sub(self.timeout.as_millis() as u64);
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            // a forged time far ahead (the year 3000, 2^64-1 ms) would keep this shard waiting
            // or overflow: a ready time is believed up to the timeout ahead of this clock
            let newest = unix_ms(SystemTime::now()).saturating_add(self.timeout.as_millis() as u64);
            let ready = self.ready_times(oldest, newest);
            if ready.iter().all(Option::is_some) {
                let last = ready.iter().flatten().max().copied().unwrap_or(0);
                return Ok(UNIX_EPOCH + Duration::from_millis(last) + BARRIER_LEAD);
            }
            if std::time::Instant::now() >= deadline {
                return Err(BarrierError::NotReady {
                    barrier: barrier(),
                    waiting: (0..self.count)
                        .filter(|&i| ready[i as usize].is_none())
                        .collect(),
                    count: self.count,
                    timeout: self.timeout,
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Each shard's ready time, `None` while its file is missing, unreadable, not a regular
    /// file of a few bytes, older than `oldest_ms` (an earlier run's) or later than `newest_ms`.
    fn ready_times(&self, oldest_ms: u64, newest_ms: u64) -> Vec<Option<u64>> {
        (0..self.count)
            .map(|i| {
                let text =
                    kiln_record::input::read_regular_text(&self.ready_file(i), READY_FILE_MAX)
                        .ok()?;
                let ms: u64 = text.trim().parse().ok()?;
                (oldest_ms..=newest_ms).contains(&ms).then_some(ms)
            })
            .collect()
    }
}

/// The barrier folder's ready files, for tests and messages.
pub fn ready_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ready-"))
        })
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn barrier(dir: &Path, index: u32, count: u32, timeout_ms: u64) -> FileBarrier {
        FileBarrier {
            dir: dir.to_path_buf(),
            index,
            count,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    /// Three shards ready at different times all get one start: the last one's readiness
    /// plus the lead.
    #[test]
    fn shards_ready_at_different_times_get_the_same_start() {
        let tmp = tempfile::tempdir().unwrap();
        // ready times are kept in milliseconds
        let before = UNIX_EPOCH + Duration::from_millis(unix_ms(SystemTime::now()));
        let handles: Vec<_> = (0..3u32)
            .map(|i| {
                let b = barrier(tmp.path(), i, 3, 10_000);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(300 * u64::from(i)));
                    b.wait().unwrap()
                })
            })
            .collect();
        let starts: Vec<SystemTime> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(starts.iter().all(|s| *s == starts[0]), "{starts:?}");
        let lead = starts[0].duration_since(before).unwrap();
        // the last shard was ready 600 ms in
        assert!(
            lead >= BARRIER_LEAD + Duration::from_millis(600),
            "{lead:?}"
        );
        assert!(lead < BARRIER_LEAD + Duration::from_secs(3), "{lead:?}");
        assert_eq!(ready_files(tmp.path()).len(), 3);
    }

    /// A shard that never comes is named after the timeout; an earlier run's ready file
    /// (older than the timeout) does not count as ready.
    #[test]
    fn a_missing_shard_is_named_and_a_stale_ready_file_is_not_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let stale = unix_ms(SystemTime::now()) - 3_600_000;
        std::fs::write(tmp.path().join("ready-1-of-3"), stale.to_string()).unwrap();
        let err = barrier(tmp.path(), 0, 3, 300).wait().unwrap_err();
        assert!(
            matches!(&err, BarrierError::NotReady { waiting, .. } if waiting == &[1, 2]),
            "{err:?}"
        );
        assert!(
            (err.to_string()).contains("shards 1, 2 of 3 were not ready"),
            "{err}"
        );
    }

    /// Ready files that lie: one linked to /dev/zero (read until memory ran out), a FIFO
    /// (which blocked the barrier past its timeout), a time far ahead (the wait went to the year
    /// 3000) and 2^64-1 ms (a panic). None counts as ready; the wait ends at its timeout.
    #[test]
    fn forged_ready_files_are_not_believed_and_the_timeout_holds() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join("ready-1-of-4")).unwrap();
        let fifo = std::ffi::CString::new(
            tmp.path()
                .join("ready-2-of-4")
                .as_os_str()
                .as_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let far = unix_ms(SystemTime::now()) + 30_000_000_000_000;
        std::fs::write(tmp.path().join("ready-3-of-4"), far.to_string()).unwrap();
        let started = std::time::Instant::now();
        let err = barrier(tmp.path(), 0, 4, 400).wait().unwrap_err();
        assert!(
            (err.to_string()).contains("shards 1, 2, 3 of 4 were not ready"),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        std::fs::write(tmp.path().join("ready-1-of-2"), u64::MAX.to_string()).unwrap();
        let err = barrier(tmp.path(), 0, 2, 300).wait().unwrap_err();
        assert!(
            (err.to_string()).contains("shards 1 of 2 were not ready"),
            "{err}"
        );
    }
}
