//! async-profiler inside a JVM target: CPU samples with the JVM's own view of every frame
//! (methods C2 inlined into their callers keep their names, no safepoint bias, Java, native and
//! kernel frames in one stack), which the JVM's perf map cannot give perf.
//!
//! The library comes from Maven Central (`tools.profiler:async-profiler`, whose jar holds
//! `linux-x64/` and `linux-arm64/libasyncProfiler.so`): [`setup`] fetches the jar kiln was
//! built against, checks it against the SHA-256 pinned here (not a checksum fetched beside it),
//! and keeps the library in kiln's data directory. It is loaded through the HotSpot attach
//! protocol (`load <absolute path> true <options>`, as async-profiler's own `asprof` does), from
//! a copy kiln writes into the target's /tmp as the target's owner: the JVM can read it, a
//! containerised JVM sees it in its own mount namespace, and nothing of kiln's is handed over.
//! The samples are written by the JVM to a file there and read back as its owner, bounded.

use crate::error::io;
use crate::RuntimeError;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::as_target::{open_regular, Owner};
use crate::attach::Attach;

/// The async-profiler release kiln fetches and speaks to.
pub const VERSION: &str = "4.1";
/// The release's jar on Maven Central.
pub const JAR_URL: &str =
    "https://repo1.maven.org/maven2/tools/profiler/async-profiler/4.1/async-profiler-4.1.jar";
/// The jar's SHA-256, as published beside it (`.sha256`) and checked when this was written.
const JAR_SHA256: &str = "5535baa56133628cfffe2f05ca9bfef1fae3d5abe49835447262b1c6da4a9582";
/// The environment variable that names the library (`libasyncProfiler.so`) to use.
pub const ENV: &str = "KILN_ASYNC_PROFILER";
/// The file name of the library.
pub const LIBRARY: &str = "libasyncProfiler.so";

/// The most kiln reads of the collapsed stacks the JVM wrote.
const MAX_OUTPUT_BYTES: u64 = 512 << 20;
/// The largest jar kiln accepts from the network (4.1's is about 1 MB).
const MAX_JAR_BYTES: u64 = 64 << 20;

/// kiln's data directory: `$XDG_DATA_HOME/kiln`, else `~/.local/share/kiln`.
pub fn data_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty());
    match xdg {
        Some(dir) => Some(PathBuf::from(dir).join("kiln")),
        None => std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|home| PathBuf::from(home).join(".local/share/kiln")),
    }
}

/// Where [`setup`] keeps the library by default.
pub fn default_dir() -> Option<PathBuf> {
    data_dir().map(|d| d.join("async-profiler").join(VERSION))
}

/// The library to load: `explicit` (a path option), else [`ENV`], else the copy [`setup`]
/// put in kiln's data directory. The error says how to get one.
pub fn find(explicit: Option<&Path>) -> Result<PathBuf, RuntimeError> {
    let from_env = std::env::var_os(ENV).filter(|v| !v.is_empty());
    let (path, from) = match (explicit, from_env) {
        (Some(p), _) => (p.to_path_buf(), "the path given"),
        (None, Some(p)) => (PathBuf::from(p), ENV),
        (None, None) => match default_dir() {
            Some(dir) => (dir.join(LIBRARY), "kiln's data directory"),
            None => return Err(not_installed("no HOME to find kiln's data directory in")),
        },
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(path),
        Ok(_) => Err(format!("{} ({from}) is not a file", path.display()).into()),
        Err(e) if from == "kiln's data directory" && e.kind() == std::io::ErrorKind::NotFound => {
            Err(not_installed("it is not installed"))
        }
        Err(e) => Err(format!("cannot read {} ({from}): {e}", path.display()).into()),
    }
}

fn not_installed(why: &str) -> RuntimeError {
    RuntimeError::Said(format!(
        "async-profiler is not available ({why}): `kiln setup async-profiler` fetches it from \
         Maven Central, or give its {LIBRARY} with --async-profiler PATH or {ENV}"
    ))
}

/// The jar's library for this machine's architecture.
fn arch_entry() -> Result<&'static str, RuntimeError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok("linux-x64/libasyncProfiler.so"),
        "aarch64" => Ok("linux-arm64/libasyncProfiler.so"),
        other => Err(format!("async-profiler has no library for {other}").into()),
    }
}

/// The library out of the release's jar, once the jar's SHA-256 is the pinned one.
pub fn library_from_jar(jar: &[u8]) -> Result<Vec<u8>, RuntimeError> {
    let digest = ring::digest::digest(&ring::digest::SHA256, jar);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    if hex != JAR_SHA256 {
        return Err(format!(
            "the jar's SHA-256 is {hex}, not async-profiler {VERSION}'s {JAR_SHA256}: refused"
        )
        .into());
    }
    let entry = arch_entry()?;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(jar))
        .map_err(|e| format!("the jar does not open as a zip: {e}"))?;
    let mut file = archive
        .by_name(entry)
        .map_err(|e| format!("the jar has no {entry}: {e}"))?;
    let mut library = Vec::new();
    file.read_to_end(&mut library)
        .map_err(io(format!("cannot unpack {entry}")))?;
    Ok(library)
}

/// Fetches async-profiler [`VERSION`] from Maven Central (or reads the jar at `jar`, for a
/// machine without the network), checks it, and writes its library into `dir` (default:
/// [`default_dir`]). Returns the library's path.
pub fn setup(dir: Option<&Path>, jar: Option<&Path>) -> Result<PathBuf, RuntimeError> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => default_dir().ok_or("no HOME to put kiln's data directory in: give --dir")?,
    };
    let bytes = match jar {
        Some(path) => std::fs::read(path).map_err(io(format!("cannot read {}", path.display())))?,
        None => fetch(JAR_URL)?,
    };
    let library = library_from_jar(&bytes)?;
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    // written beside and renamed: a reader never sees half a library
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)
        .map_err(io(format!("cannot write in {}", dir.display())))?;
    std::io::Write::write_all(&mut tmp, &library)
        .map_err(io(format!("cannot write in {}", dir.display())))?;
    let path = dir.join(LIBRARY);
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644));
    tmp.persist(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

fn fetch(url: &str) -> Result<Vec<u8>, RuntimeError> {
    // the system's trust store (a company's proxy CA is there, not in webpki's roots)
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .tls_config(tls)
        .build()
        .into();
    let mut response = agent
        .get(url)
        .call()
        .map_err(|e| format!("cannot fetch {url}: {e}"))?;
    response
        .body_mut()
        .with_config()
        .limit(MAX_JAR_BYTES)
        .read_to_vec()
        .map_err(|e| format!("cannot read {url}: {e}").into())
}

/// What a session samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// CPU time, a sample every this much of it.
    Cpu(Duration),
    /// Allocations, a sample every this many bytes allocated (TLAB-driven: each new TLAB
    /// and each allocation outside one); the samples are weighed back to bytes.
    Alloc(u64),
    /// Contended locks (monitors and java.util.concurrent locks): every wait at least this
    /// long, with the waiting thread's stack and the lock's class as its leaf, weighed in
    /// nanoseconds waited.
    Lock(Duration),
    /// Every thread, running or waiting, a sample every this much wall-clock time of each
    /// (async-profiler signals at most 8 threads a tick and spaces the ticks so each thread
    /// keeps this interval), under its thread's name, weighed in nanoseconds.
    Wall(Duration),
}

/// async-profiler running in one JVM. Each session loads its own copy of the library, so
/// two (CPU and allocations) run side by side as two instances.
pub struct Session {
    attach: Attach,
    owner: Owner,
    /// The library's copy, as the JVM names it and as kiln reaches it.
    library_in_target: String,
    library_here: PathBuf,
    /// The target's /tmp as kiln reaches it, and the name of this session's files in it.
    tmp_here: PathBuf,
    stem: String,
    pub started: Instant,
    sampling: Sampling,
}

impl Session {
    /// Loads `library` into `pid` and starts sampling.
    pub fn start(
        pid: i32,
        proc_root: &Path,
        library: &Path,
        sampling: Sampling,
    ) -> Result<Self, RuntimeError> {
        let attach = Attach::open(pid, proc_root)?;
        let owner = attach.owner();
        let tmp_here = proc_root.join(pid.to_string()).join("root/tmp");
        let stem = format!(
            "kiln-async-profiler-{}-{}",
            std::process::id(),
            random_suffix()
        );
        let library_here = tmp_here.join(format!("{stem}.so"));
        copy_as_owner(&owner, library, &library_here)?;
        let session = Self {
            attach,
            owner,
            library_in_target: format!("/tmp/{stem}.so"),
            library_here,
            tmp_here,
            stem,
            started: Instant::now(),
            sampling,
        };
        let options = match sampling {
            Sampling::Cpu(interval) => {
                format!("start,event=cpu,interval={}", interval.as_nanos().max(1))
            }
            Sampling::Alloc(bytes) => format!("start,event=alloc,alloc={}", bytes.max(1)),
            Sampling::Lock(at_least) => format!("start,event=lock,lock={}", at_least.as_nanos()),
            Sampling::Wall(interval) => format!(
                "start,event=wall,interval={},threads",
                interval.as_nanos().max(1)
            ),
        };
        if let Err(e) = session.command(&options) {
            session.remove_library();
            return Err(e);
        }
        Ok(session)
    }

    /// Stops sampling and returns the collapsed stacks (frames annotated: `_[j]` compiled,
    /// `_[i]` inlined, `_[0]` interpreted, `_[1]` C1, `_[k]` kernel; dotted class names). An
    /// allocation profile counts bytes, its leaf frame the allocated type (`byte[]`).
    pub fn stop(self) -> Result<String, RuntimeError> {
        let name = format!("{}.collapsed", self.stem);
        let here = self.tmp_here.join(&name);
        let counts = match self.sampling {
            Sampling::Cpu(_) => "",
            // bytes allocated, nanoseconds waited
            Sampling::Alloc(_) | Sampling::Lock(_) => ",total",
            // nanoseconds of each thread's time, under the thread's name
            Sampling::Wall(_) => ",total,threads",
        };
        let stopped = self.command(&format!("stop,file=/tmp/{name},collapsed{counts},ann,dot"));
        let read = stopped.and_then(|_| {
            let mut text = String::new();
            open_regular(&self.owner, &here, MAX_OUTPUT_BYTES)?
                .take(MAX_OUTPUT_BYTES)
                .read_to_string(&mut text)
                .map_err(io("cannot read async-profiler's output"))?;
            Ok(text)
        });
        let _ = self.owner.run(|| std::fs::remove_file(&here));
        self.remove_library();
        read
    }

    /// One command to the loaded library (`load` again: the JVM hands the options to the
    /// library already loaded from that path).
    fn command(&self, options: &str) -> Result<(), RuntimeError> {
        let reply = self.attach.load(&self.library_in_target, options)?;
        match agent_return_code(&reply) {
            Some(0) => Ok(()),
            Some(code) => Err(format!(
                "async-profiler refused `{options}` (code {code}; its message is on the \
                 target's output)"
            )
            .into()),
            None => Err(format!(
                "the JVM's reply to loading async-profiler says no result: {:?}",
                reply.chars().take(120).collect::<String>()
            )
            .into()),
        }
    }

    fn remove_library(&self) {
        // the JVM keeps the mapped library; the file is not needed once loaded
        let _ = self.owner.run(|| std::fs::remove_file(&self.library_here));
    }
}

/// `return code: N` of the JVM's reply to `load` (JDK 9 and later say it so).
fn agent_return_code(reply: &str) -> Option<i32> {
    reply
        .lines()
        .find_map(|l| l.trim().strip_prefix("return code:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Copies kiln's `from` to `to` in the target's filesystem, created as the target's owner:
/// exclusively, never through a link, readable by the JVM.
fn copy_as_owner(owner: &Owner, from: &Path, to: &Path) -> Result<(), RuntimeError> {
    let bytes = std::fs::read(from).map_err(io(format!("cannot read {}", from.display())))?;
    owner.run(|| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o500)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(to)
            .map_err(io(format!(
                "cannot create {} as the target's owner",
                to.display()
            )))?;
        file.write_all(&bytes)
            .map_err(io(format!("cannot write {}", to.display())))
    })
}

/// Random hex digits for file names (std's per-process random hasher keys: the names only
/// need to differ between sessions; the files are created exclusively).
fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_return_code_is_read_from_the_reply() {
        assert_eq!(agent_return_code("return code: 0\n"), Some(0));
        assert_eq!(agent_return_code("return code: 200\n"), Some(200));
        assert_eq!(agent_return_code("Profiling started\n"), None);
    }

    #[test]
    fn a_jar_that_is_not_the_pinned_release_is_refused() {
        let err = library_from_jar(b"PK\x03\x04 not the release")
            .unwrap_err()
            .to_string();
        assert!(err.contains("refused"), "{err}");
    }
}
