//! `--runtime deep` beside a process whose owner is hostile: a fake JVM run as `nobody` (a
//! Python process that catches SIGQUIT and serves `/tmp/.java_pid<pid>`, which is all kiln's
//! JVM test asks for). kiln runs as root here, as it usually does.
//!
//! - links planted at both trigger places toward a root-owned file: kiln truncated it through
//!   them; now it creates nothing and the file is whole;
//! - the trigger kiln creates is owned by the target's owner, as the JVM checks;
//! - a reply without end is cut at the cap, a reply of a byte at a time at the deadline of
//!   the whole exchange;
//! - JVM counters that are a FIFO are refused without waiting.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kiln_runtime::attach::Attach;

const NOBODY: u32 = 65534;

const FAKE_JVM: &str = r#"
import os, signal, socket, sys, threading, time
pid = os.getpid()
out = os.environ["OUT"]
victim = os.environ.get("VICTIM")
if victim:
    for place in (os.getcwd(), "/tmp"):
        os.symlink(victim, os.path.join(place, f".attach_pid{pid}"))
if os.environ.get("FIFO"):
    os.makedirs("/tmp/hsperfdata_nobody", exist_ok=True)
    os.mkfifo(f"/tmp/hsperfdata_nobody/{pid}")

def serve():
    path = f"/tmp/.java_pid{pid}"
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(4)
    while True:
        c, _ = s.accept()
        request = c.recv(4096)
        try:
            if b"endless" in request:
                c.sendall(b"0\n")
                while True:
                    c.sendall(b"x" * 65536)
            else:
                while True:
                    c.sendall(b"0")
                    time.sleep(0.2)
        except OSError:
            pass
        c.close()

def on_quit(sig, frame):
    # what a JVM looks at: the trigger and its owner
    for place in (os.getcwd(), "/tmp"):
        try:
            st = os.lstat(os.path.join(place, f".attach_pid{pid}"))
            with open(os.path.join(out, "seen"), "a") as f:
                f.write(f"{place} {st.st_uid}\n")
        except FileNotFoundError:
            pass
    threading.Thread(target=serve, daemon=True).start()

signal.signal(signal.SIGQUIT, on_quit)
print("ready", flush=True)
while True:
    time.sleep(1)
"#;

struct Fake {
    child: Child,
    pid: i32,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for name in [
            format!("/tmp/.java_pid{}", self.pid),
            format!("/tmp/.attach_pid{}", self.pid),
            format!("/tmp/hsperfdata_nobody/{}", self.pid),
        ] {
            let _ = std::fs::remove_file(name);
        }
    }
}

/// A fake JVM as `nobody`, in a working directory of nobody's, writing what it sees to `out`.
fn fake(dir: &Path, victim: Option<&Path>, fifo: bool) -> Fake {
    let cwd = dir.join("cwd");
    let out = dir.join("out");
    for d in [&cwd, &out] {
        std::fs::create_dir(d).unwrap();
        std::os::unix::fs::chown(d, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.join("fake_jvm.py");
    std::fs::write(&script, FAKE_JVM).unwrap();
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
        ])
        .arg(&script)
        .current_dir(&cwd)
        .env("OUT", &out)
        .stdout(Stdio::piped());
    if let Some(victim) = victim {
        command.env("VICTIM", victim);
    }
    if fifo {
        command.env("FIFO", "1");
    }
    let mut child = command.spawn().expect("setpriv and python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = child.id() as i32;
    // A JVM killed earlier with this pid (the e2e tests' JVMs, as root, in the same /tmp)
    // leaves its socket behind, and kiln rightly refuses a socket that is not the target's
    // owner's: a fresh-clone CI run met one. The fake makes its own only when triggered.
    let _ = std::fs::remove_file(format!("/tmp/.java_pid{pid}"));
    Fake { child, pid }
}

fn root() -> bool {
    // SAFETY: geteuid has no arguments and no memory effects.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: kiln's root-only hazards need the test to run as root");
    }
    root
}

#[test]
fn a_planted_link_at_the_trigger_leaves_the_file_it_points_to_whole() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // a root-only file, behind a folder nobody may enter
    let vault = tempfile::tempdir().unwrap();
    let victim = vault.path().join("precious");
    std::fs::write(&victim, "root's data").unwrap();
    let fake = fake(dir.path(), Some(&victim), false);
    let opened = Attach::open(fake.pid, Path::new("/proc"));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's data");
    let refused = opened.unwrap_err().to_string();
    assert!(refused.contains("cannot create .attach_pid"), "{refused}");
}

#[test]
fn the_trigger_is_the_owners_and_a_reply_is_bounded_in_size_and_time() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path(), None, false);
    let mut attach = Attach::open(fake.pid, Path::new("/proc")).expect("the fake listens");
    let seen = std::fs::read_to_string(dir.path().join("out/seen")).unwrap();
    let cwd = std::fs::canonicalize(dir.path().join("cwd")).unwrap();
    assert_eq!(seen.trim(), format!("{} {NOBODY}", cwd.display()));

    let started = Instant::now();
    let endless = attach.jcmd("endless").unwrap_err().to_string();
    assert!(endless.contains("longer than"), "{endless}");
    assert!(started.elapsed() < Duration::from_secs(10));

    attach.reply_timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let drip = attach.jcmd("drip").unwrap_err().to_string();
    assert!(drip.contains("deadline"), "{drip}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

/// hsperfdata that is a FIFO: kiln hung on it forever; now it is refused at once.
#[test]
fn counters_that_are_a_fifo_are_refused_without_waiting() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path(), None, true);
    let started = Instant::now();
    let Err(refused) = kiln_runtime::jvm::JvmReader::open(fake.pid, Path::new("/proc")) else {
        panic!("a FIFO read as counters");
    };
    let refused = refused.to_string();
    assert!(refused.contains("not a regular file"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(2));
}
