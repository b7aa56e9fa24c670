//! Touching the watched process's files as its owner, not as kiln.
//!
//! kiln usually runs as root (perf needs it), and the watched process's owner controls its
//! working directory, its /tmp and the names in them. Whatever kiln creates, opens or connects
//! to there is done on a thread of its own whose filesystem identity (`setfsuid`/`setfsgid`,
//! per thread on Linux) is the target's: the kernel then checks permissions as it would for the
//! target, a link planted toward a root-owned file leads nowhere, and the process's other
//! threads keep root. A non-root kiln changes nothing (it cannot take another identity, and its
//! own is what the kernel checks anyway).

use crate::error::io;
use crate::RuntimeError;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The owner of a process: its effective uid and gid as /proc/PID/status gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    /// The effective uid and gid of `pid`, read under `proc_root`.
    pub fn of(pid: i32, proc_root: &Path) -> Result<Self, RuntimeError> {
        let path = proc_root.join(pid.to_string()).join("status");
        let status = std::fs::read_to_string(&path)
            .map_err(io(format!("cannot read {}", path.display())))?;
        Self::from_status(&status)
            .ok_or_else(|| format!("{} has no Uid or Gid line", path.display()).into())
    }

    fn from_status(status: &str) -> Option<Self> {
        // "Uid:\treal\teffective\tsaved\tfs": the second is what the kernel checks
        let effective = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))?
                .split_whitespace()
                .nth(1)?
                .parse::<u32>()
                .ok()
        };
        Some(Self {
            uid: effective("Uid:")?,
            gid: effective("Gid:")?,
        })
    }

    /// Runs `f` on a thread of its own whose filesystem uid and gid are this owner's (when
    /// kiln is root), and returns what it returned.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let (uid, gid) = (self.uid, self.gid);
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    // SAFETY: geteuid, setfsgid and setfsuid take integers and change only
                    // this thread's credentials; the thread ends when `f` returns.
                    unsafe {
                        if libc::geteuid() == 0 {
                            // the group first: once the uid is not 0, the group cannot change
                            libc::setfsgid(gid);
                            libc::setfsuid(uid);
                        }
                    }
                    f()
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

/// Opens a regular file of the target's for reading, as its owner: never through a link at
/// the last step, never a FIFO or device (opened without blocking, then checked), and no
/// larger than `max_bytes`.
pub fn open_regular(owner: &Owner, path: &Path, max_bytes: u64) -> Result<File, RuntimeError> {
    owner.run(|| {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(io(format!("cannot open {}", path.display())))?;
        let meta = file
            .metadata()
            .map_err(io(format!("cannot stat {}", path.display())))?;
        if !meta.file_type().is_file() {
            return Err(format!("{} is not a regular file", path.display()).into());
        }
        if meta.len() > max_bytes {
            return Err(format!(
                "{} holds {} bytes, more than the {max_bytes} kiln reads",
                path.display(),
                meta.len()
            )
            .into());
        }
        Ok(file)
    })
}

/// Copies a regular file of the target's (opened as [`open_regular`] does) into `to`, a file
/// of kiln's own, reading at most `max_bytes`.
pub fn copy_regular(
    owner: &Owner,
    from: &Path,
    to: &Path,
    max_bytes: u64,
) -> Result<u64, RuntimeError> {
    let file = open_regular(owner, from, max_bytes)?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(io(format!("cannot create {}", to.display())))?;
    // bounded again while reading: the file may grow after it was measured
    std::io::copy(&mut file.take(max_bytes), &mut out).map_err(io(format!(
        "cannot copy {} to {}",
        from.display(),
        to.display()
    )))
}

/// Whether `path` is a Unix socket owned by `owner` (as the JDK's own client checks), looked at without following a
/// link at the last step.
pub fn is_owned_socket(owner: &Owner, path: &Path) -> Result<bool, RuntimeError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() && meta.uid() == owner.uid => Ok(true),
        Ok(meta) if meta.file_type().is_socket() => Err(format!(
            "{} is owned by uid {}, not by the target's uid {}: not talking to it (left by \
             another user's process that had the same pid? The JVM cannot replace it: remove \
             it if nothing of uid {} listens on it)",
            path.display(),
            meta.uid(),
            owner.uid,
            meta.uid()
        )
        .into()),
        Ok(_) => Err(format!("{} is not a socket", path.display()).into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("cannot stat {}: {e}", path.display()).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_ids_are_read_from_status() {
        let status = "Name:\tjava\nUid:\t1000\t1001\t1002\t1003\nGid:\t50\t51\t52\t53\n";
        assert_eq!(
            Owner::from_status(status),
            Some(Owner { uid: 1001, gid: 51 })
        );
        assert_eq!(Owner::from_status("Uid:\t1\n"), None);
        assert_eq!(Owner::from_status("garbage"), None);
    }

    #[test]
    fn a_fifo_a_link_and_a_large_file_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let me = Owner::of(std::process::id() as i32, Path::new("/proc")).unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = open_regular(&me, &fifo, 100).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");

        let real = dir.path().join("real");
        std::fs::write(&real, b"0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(open_regular(&me, &link, 100).is_err());
        assert!(open_regular(&me, &real, 9)
            .unwrap_err()
            .to_string()
            .contains("more than"));
        let copy = dir.path().join("copy");
        assert_eq!(copy_regular(&me, &real, &copy, 100).ok(), Some(10));
        assert_eq!(std::fs::read(&copy).unwrap(), b"0123456789");
    }
}
