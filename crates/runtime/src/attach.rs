//! The HotSpot attach protocol, spoken by kiln: what `jcmd` does without starting a JVM of its
//! own for every call (about 0.8 s of wall time and 0.2 s of CPU each; a call over the socket
//! takes milliseconds).
//!
//! The handshake (OpenJDK `VirtualMachineImpl` for Linux): if the JVM's socket
//! `/tmp/.java_pid<nspid>` is missing (or, unlike jcmd, if nothing listens on it), create
//! `.attach_pid<nspid>` in its working directory (or its /tmp), send SIGQUIT, and wait for the
//! socket. A request is `1`, the command and three arguments, each NUL-terminated; the reply
//! is a status line (0 = done) and text until EOF.
//! The JVM answers only a peer with its own uid and gid, or root.
//!
//! kiln does not trust the process it watches: the trigger file is created as the target's
//! owner (exclusively, never through a link, never truncating), the socket is used only when
//! the target's owner (or root) owns it and is connected to as that owner, and a reply is read
//! up to [`MAX_REPLY_BYTES`] within one deadline for the whole exchange.

use crate::error::io;
use crate::RuntimeError;

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::as_target::{is_owned_socket, Owner};
use crate::jvm::ns_pid;

/// The longest wait for a JVM to open its attach socket after SIGQUIT (it answers in
/// milliseconds unless it is stuck at a safepoint or started with attach disabled).
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(5);

/// The most of one reply kiln reads: a thread dump of a JVM with thousands of deep threads is
/// a few megabytes.
pub const MAX_REPLY_BYTES: u64 = 64 << 20;

/// An open line to one JVM's attach listener.
#[derive(Debug, Clone)]
pub struct Attach {
    socket: PathBuf,
    owner: Owner,
    /// How long one whole exchange (connect, request, reply) may take.
    pub reply_timeout: Duration,
}

impl Attach {
    /// Finds or starts `pid`'s attach listener (never signals a process that does not catch
    /// SIGQUIT, which would kill it: the caller says it is a JVM; this checks the handler).
    pub fn open(pid: i32, proc_root: &Path) -> Result<Self, RuntimeError> {
        let ns = ns_pid(pid, proc_root)?;
        let owner = Owner::of(pid, proc_root)?;
        let base = proc_root.join(pid.to_string());
        let tmp = base.join("root/tmp");
        let socket = tmp.join(format!(".java_pid{ns}"));
        let attach = Self {
            socket: socket.clone(),
            owner,
            reply_timeout: Duration::from_secs(10),
        };
        // A socket file no one listens on was left by a JVM that died at this pid (killed, or
        // in a container restarted with its /tmp): the JVM, once triggered, binds its own and
        // renames it over this one, so kiln waits for a socket that is not this file.
        let stale = match is_owned_socket(&owner, &socket)? {
            true if attach.listens() => return Ok(attach),
            true => inode(&socket),
            false => None,
        };
        let status = std::fs::read_to_string(base.join("status"))
            .map_err(io(format!("cannot read the status of pid {pid}")))?;
        if !catches_sigquit(&status) {
            return Err(format!(
                "pid {pid} does not catch SIGQUIT (started with -Xrs?), so the attach listener \
                 cannot be started"
            )
            .into());
        }
        let trigger_name = format!(".attach_pid{ns}");
        let trigger = [
            base.join("cwd").join(&trigger_name),
            tmp.join(&trigger_name),
        ]
        .into_iter()
        .find(|path| owner.run(|| create_trigger(path)).is_ok())
        .ok_or_else(|| {
            format!(
                "cannot create {trigger_name} in pid {pid}'s working directory or /tmp as its \
                 owner (uid {}), or one is there already",
                owner.uid
            )
        })?;
        // SAFETY: kill(2) with a pid and a signal number has no memory effects.
        let sent = unsafe { libc::kill(pid, libc::SIGQUIT) } == 0;
        let signal_error = std::io::Error::last_os_error();
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        let mut wait = Duration::from_millis(5);
        let mut ready = Ok(false);
        while sent && Instant::now() < deadline {
            // (with no stale file, `stale` is None and any socket there is another inode)
            ready = is_owned_socket(&owner, &socket).map(|owned| owned && inode(&socket) != stale);
            if !matches!(ready, Ok(false)) {
                break;
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_millis(200));
        }
        // as the owner too: a directory swapped meanwhile leads to nothing of root's
        let _ = owner.run(|| std::fs::remove_file(&trigger));
        if !sent {
            return Err(format!("cannot signal pid {pid}: {signal_error}").into());
        }
        match ready? {
            true => Ok(attach),
            false => Err(format!(
                "pid {pid} opened no attach socket within {}s (started with \
                 -XX:+DisableAttachMechanism?)",
                ATTACH_TIMEOUT.as_secs()
            )
            .into()),
        }
    }

    /// Whether something listens on the socket: a connection as the owner, closed at once
    /// (a JVM's listener reads no request from it and goes on), is refused only by a socket
    /// file whose process is gone.
    fn listens(&self) -> bool {
        let connected = self.owner.run(|| UnixStream::connect(&self.socket));
        !matches!(connected, Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED))
    }

    /// The owner of the JVM's process (its files are touched as this owner).
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// Runs one diagnostic command (what `jcmd <pid> <command>` runs) and returns its output.
    pub fn jcmd(&self, command: &str) -> Result<String, RuntimeError> {
        self.execute("jcmd", [command, "", ""])
    }

    /// Loads the JVMTI agent at `library` (an absolute path as the JVM sees it) with
    /// `options`, as `jcmd JVMTI.agent_load` would but with the options kept whole; returns
    /// the JVM's reply (`return code: N` from the agent's `Agent_OnAttach`).
    pub fn load(&self, library: &str, options: &str) -> Result<String, RuntimeError> {
        self.execute("load", [library, "true", options])
    }

    /// Sends one request of the protocol's version 1 and reads the whole reply, within
    /// `reply_timeout` for all of it and up to [`MAX_REPLY_BYTES`].
    fn execute(&self, command: &str, args: [&str; 3]) -> Result<String, RuntimeError> {
        let deadline = Instant::now() + self.reply_timeout;
        // connected as the owner: the kernel checks the socket's permissions for the target's
        // uid, so a link toward another service's socket leads nowhere
        let mut stream = self
            .owner
            .run(|| UnixStream::connect(&self.socket))
            .map_err(io(format!("cannot connect to {}", self.socket.display())))?;
        stream
            .set_write_timeout(Some(self.reply_timeout))
            .map_err(io("cannot set a timeout on the attach socket"))?;
        stream
            .write_all(&request(command, args))
            .map_err(io(format!("cannot send {command} to the JVM")))?;
        let reply = read_reply(&mut stream, deadline, MAX_REPLY_BYTES)
            .map_err(|e| format!("no full reply to {command} from the JVM: {e}"))?;
        let reply = String::from_utf8_lossy(&reply);
        let (status, text) = reply.split_once('\n').unwrap_or((&reply, ""));
        match status.trim().parse::<i32>() {
            Ok(0) => Ok(text.to_string()),
            Ok(code) => Err(format!(
                "the JVM refused {command} {} (status {code}): {}",
                args[0],
                text.trim()
            )
            .into()),
            Err(_) => Err(format!(
                "the JVM's reply to {command} does not start with a status: {:?}",
                reply.chars().take(80).collect::<String>()
            )
            .into()),
        }
    }
}

/// The inode of the file at `path` (not followed if a link), if it is there.
fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// Creates the empty trigger file: exclusively (an existing file or link is left alone and
/// refused), without following a link, readable by its owner only.
fn create_trigger(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Reads until end of file, giving up at `deadline` or past `max_bytes`.
fn read_reply(
    stream: &mut UnixStream,
    deadline: Instant,
    max_bytes: u64,
) -> Result<Vec<u8>, RuntimeError> {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no end within the deadline ({} bytes read)", reply.len()).into());
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(io("cannot set a timeout on the attach socket"))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(reply),
            Ok(n) if reply.len() as u64 + n as u64 > max_bytes => {
                return Err(format!("the reply is longer than {max_bytes} bytes").into())
            }
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(
                    format!("no end within the deadline ({} bytes read)", reply.len()).into(),
                )
            }
            Err(e) => return Err(e.to_string().into()),
        }
    }
}

/// The bytes of one request: `1`, the command and three arguments, each ended by NUL.
fn request(command: &str, args: [&str; 3]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for part in ["1", command].into_iter().chain(args) {
        bytes.extend_from_slice(part.as_bytes());
        bytes.push(0);
    }
    bytes
}

/// Whether /proc/<pid>/status says SIGQUIT (3) is caught and not ignored.
fn catches_sigquit(status: &str) -> bool {
    let mask = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let bit = 1u64 << (libc::SIGQUIT - 1);
    mask("SigCgt:") & bit != 0 && mask("SigIgn:") & bit == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_nul_terminated_parts() {
        assert_eq!(
            request("jcmd", ["Thread.print", "", ""]),
            b"1\0jcmd\0Thread.print\0\0\0".to_vec()
        );
    }

    #[test]
    fn sigquit_is_read_from_the_masks() {
        assert!(catches_sigquit(
            "SigIgn:\t0000000000000000\nSigCgt:\t0000000000000004\n"
        ));
        assert!(!catches_sigquit(
            "SigIgn:\t0000000000000004\nSigCgt:\t0000000000000004\n"
        ));
        assert!(!catches_sigquit("SigCgt:\t0000000000000002\n"));
        assert!(!catches_sigquit("garbage"));
    }
}
