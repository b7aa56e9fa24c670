//! Python's threads and its GIL, read with py-spy (`py-spy dump --json --pid P`): which thread
//! holds the GIL and in what function, how many threads there are and how many run Python
//! code. py-spy reads the interpreter's memory from outside (ptrace), so the target needs no
//! change; each dump stops it for a moment, measured and recorded with the dump.

use crate::error::io;
use crate::RuntimeError;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One py-spy dump of a Python process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PyDump {
    pub unix_ms: u64,
    /// The dump's round trip (py-spy's start, attach, read and exit).
    pub took_ms: f64,
    pub threads: u32,
    /// Threads py-spy saw running Python code rather than idle in a wait.
    pub active: u32,
    /// The thread that held the GIL, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gil_holder: Option<PyThread>,
    /// Threads waiting to take the GIL (ready to run Python, held back by the holder), told
    /// by their native frames; `None` when py-spy could not read native frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gil_waiters: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gil_waiter_names: Vec<String>,
}

/// A thread and its innermost Python frame.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PyThread {
    pub name: String,
    /// `function (file.py:line)`.
    pub frame: String,
}

#[derive(Deserialize)]
struct RawThread {
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    active: bool,
    #[serde(default)]
    owns_gil: bool,
    #[serde(default)]
    frames: Vec<RawFrame>,
}

#[derive(Deserialize)]
struct RawFrame {
    name: String,
    /// The shared object of a native frame (`--native`); none for a Python frame.
    #[serde(default)]
    module: Option<String>,
    #[serde(default)]
    short_filename: Option<String>,
    #[serde(default)]
    filename: String,
    #[serde(default)]
    line: i64,
}

impl RawFrame {
    fn is_python(&self) -> bool {
        self.module.is_none()
    }
}

/// A condition-variable wait as libc names it: CPython's GIL is a mutex and a condition
/// variable (threading's locks are semaphores, time.sleep is clock_nanosleep).
fn is_condition_wait(name: &str) -> bool {
    name.trim_start_matches('_').starts_with("pthread_cond_")
        || name.contains("futex")
        || name == "PyCOND_TIMEDWAIT"
}

/// A thread waiting to take the GIL: in `take_gil` when the build kept its name, else in a
/// condition wait asked for by the eval loop or by a thread coming back from a blocking call
/// (`PyEval_RestoreThread`), with nothing else native in between. Read from `--native`
/// frames; a thread without Python frames is not the interpreter's.
fn waits_for_gil(thread: &RawThread) -> bool {
    if thread.owns_gil || !thread.frames.iter().any(RawFrame::is_python) {
        return false;
    }
    let native: Vec<&str> = thread
        .frames
        .iter()
        .take_while(|f| !f.is_python())
        .map(|f| f.name.as_str())
        .filter(|name| !name.starts_with("0x"))
        .collect();
    if native.iter().any(|name| name.contains("take_gil")) {
        return true;
    }
    let waits = native
        .iter()
        .take_while(|name| is_condition_wait(name))
        .count();
    waits > 0
        && native.get(waits).is_none_or(|asker| {
            matches!(
                *asker,
                "PyEval_RestoreThread"
                    | "PyEval_AcquireThread"
                    | "_PyEval_EvalFrameDefault"
                    | "PyEval_EvalFrameDefault"
                    | "_PyEval_EvalFrame"
            )
        })
}

/// Reads `py-spy dump --json` output (with or without `--native`: `native` says which).
pub fn parse(json: &str, unix_ms: u64, took_ms: f64, native: bool) -> Result<PyDump, RuntimeError> {
    let threads: Vec<RawThread> = serde_json::from_str(json)
        .map_err(|e| format!("py-spy's output is not the JSON it writes: {e}"))?;
    let name = |t: &RawThread| t.thread_name.clone().unwrap_or_else(|| "(unnamed)".into());
    let gil_holder = threads.iter().find(|t| t.owns_gil).map(|t| PyThread {
        name: name(t),
        // the innermost Python frame: with --native, C frames come before it
        frame: t.frames.iter().find(|f| f.is_python()).map_or_else(
            || "(no Python frame)".to_string(),
            |f| {
                let file = f.short_filename.as_deref().unwrap_or(&f.filename);
                format!("{} ({file}:{})", f.name, f.line)
            },
        ),
    });
    let waiters: Vec<&RawThread> = threads.iter().filter(|t| waits_for_gil(t)).collect();
    Ok(PyDump {
        unix_ms,
        took_ms,
        threads: threads.len() as u32,
        active: threads.iter().filter(|t| t.active).count() as u32,
        gil_holder,
        gil_waiters: native.then_some(waiters.len() as u32),
        gil_waiter_names: waiters.iter().take(5).map(|t| name(t)).collect(),
    })
}

/// The py-spy executable kiln runs.
#[derive(Clone, Debug)]
pub struct PySpy {
    exe: PathBuf,
    /// Dumps read native frames (`--native`, which tell a thread waiting for the GIL) until
    /// py-spy refuses them here.
    native: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PySpy {
    /// `KILN_PY_SPY` when set, else `py-spy` on the PATH.
    pub fn find() -> Result<Self, RuntimeError> {
        if let Some(exe) = std::env::var_os("KILN_PY_SPY") {
            let exe = PathBuf::from(exe);
            return if exe.is_file() {
                Ok(Self::at(exe))
            } else {
                Err(format!("KILN_PY_SPY names {}, which is not a file", exe.display()).into())
            };
        }
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("py-spy"))
            .find(|exe| exe.is_file())
            .map(Self::at)
            .ok_or_else(|| {
                "py-spy is not installed (pip install py-spy, or set KILN_PY_SPY)".into()
            })
    }

    fn at(exe: PathBuf) -> Self {
        Self {
            exe,
            native: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.exe
    }

    /// One dump of `pid`, with native frames while py-spy can read them here (else without,
    /// from then on).
    pub fn dump(&self, pid: i32) -> Result<PyDump, RuntimeError> {
        use std::sync::atomic::Ordering;
        if self.native.load(Ordering::Relaxed) {
            match self.dump_with(pid, true) {
                Ok(dump) => return Ok(dump),
                Err(_) => self.native.store(false, Ordering::Relaxed),
            }
        }
        self.dump_with(pid, false)
    }

    fn dump_with(&self, pid: i32, native: bool) -> Result<PyDump, RuntimeError> {
        let unix_ms = kiln_record::clock::unix_ms_now();
        let asked = Instant::now();
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.args(["dump", "--json", "--pid", &pid.to_string()]);
        if native {
            cmd.arg("--native");
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(io(format!("cannot run {}", self.exe.display())))?;
        let took_ms = asked.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().next().unwrap_or("no message").trim();
            return Err(format!("py-spy failed: {first}").into());
        }
        parse(
            &String::from_utf8_lossy(&out.stdout),
            unix_ms,
            took_ms,
            native,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"[
      {"pid": 1, "thread_id": 10, "thread_name": "sleeper", "os_thread_id": 11,
       "active": false, "owns_gil": false,
       "frames": [{"name": "sleeper", "filename": "/tmp/gil.py", "module": null,
                   "short_filename": "gil.py", "line": 8, "locals": null}]},
      {"pid": 1, "thread_id": 12, "thread_name": "spin-2", "os_thread_id": 13,
       "active": true, "owns_gil": true,
       "frames": [{"name": "spin", "filename": "/tmp/gil.py", "module": null,
                   "short_filename": "gil.py", "line": 5, "locals": null},
                  {"name": "Thread.run", "filename": "/usr/lib/python3.11/threading.py",
                   "short_filename": "threading.py", "line": 982}],
       "process_info": null, "something_new": [1, 2]},
      {"pid": 1, "thread_id": 14, "active": true, "owns_gil": false, "frames": []}
    ]"#;

    #[test]
    fn a_dump_names_the_gil_holder_and_counts_threads() {
        let d = parse(DUMP, 5, 2.5, false).unwrap();
        assert_eq!(d.threads, 3);
        assert_eq!(d.active, 2);
        assert_eq!(
            d.gil_holder,
            Some(PyThread {
                name: "spin-2".into(),
                frame: "spin (gil.py:5)".into()
            })
        );
        assert_eq!((d.unix_ms, d.took_ms), (5, 2.5));
    }

    #[test]
    fn no_holder_and_bad_output_are_told_apart() {
        let idle = parse(
            r#"[{"active": false, "owns_gil": false, "frames": []}]"#,
            0,
            0.0,
            false,
        );
        assert_eq!(idle.unwrap().gil_holder, None);
        for bad in [
            "",
            "Error: Failed to find python version",
            "{}",
            "[{\"frames\": 3}]",
        ] {
            assert!(
                parse(bad, 0, 0.0, true)
                    .unwrap_err()
                    .to_string()
                    .contains("not the JSON"),
                "{bad}"
            );
        }
    }

    /// `py-spy dump --json --native` (0.4.3) of three threads spinning in pure Python on
    /// CPython 3.11, a sleeper and the main thread asleep: one spinner holds the GIL, the
    /// other two wait for it in pthread_cond_timedwait (take_gil inlined) under spin_forever.
    const NATIVE: &str = include_str!("../tests/fixtures/py-spy-native.json");

    #[test]
    fn native_frames_tell_the_threads_waiting_for_the_gil() {
        let d = parse(NATIVE, 0, 0.0, true).unwrap();
        assert_eq!(d.threads, 5);
        assert_eq!(d.gil_waiters, Some(2));
        assert_eq!(d.gil_waiter_names, ["worker-2", "worker-0"]);
        // the holder's innermost Python frame, not a C one
        assert!(
            d.gil_holder
                .unwrap()
                .frame
                .starts_with("spin_forever (spin.py:"),
            "the holder's Python frame"
        );
        // without native frames the waiters cannot be told
        assert_eq!(parse(NATIVE, 0, 0.0, false).unwrap().gil_waiters, None);
    }

    fn thread(native: &[&str]) -> RawThread {
        let mut frames: Vec<RawFrame> = native
            .iter()
            .map(|name| RawFrame {
                name: name.to_string(),
                module: Some("libpython3.12.so".into()),
                short_filename: None,
                filename: String::new(),
                line: 0,
            })
            .collect();
        frames.push(RawFrame {
            name: "handler".into(),
            module: None,
            short_filename: Some("app.py".into()),
            filename: "/srv/app.py".into(),
            line: 3,
        });
        RawThread {
            thread_name: None,
            active: false,
            owns_gil: false,
            frames,
        }
    }

    #[test]
    fn waits_for_the_gil_are_told_from_other_waits() {
        // take_gil by name; inlined, under the eval loop or back from a blocking call
        assert!(waits_for_gil(&thread(&[
            "__futex_abstimed_wait_common",
            "take_gil"
        ])));
        assert!(waits_for_gil(&thread(&[
            "pthread_cond_timedwait",
            "0x7f00",
            "PyEval_RestoreThread",
            "time_sleep"
        ])));
        assert!(waits_for_gil(&thread(&["pthread_cond_timedwait"])));
        // asleep, on a threading.Lock (a semaphore), in a socket read: not the GIL
        assert!(!waits_for_gil(&thread(&["clock_nanosleep", "time_sleep"])));
        assert!(!waits_for_gil(&thread(&[
            "sem_clock_wait",
            "PyThread_acquire_lock_timed",
            "lock_PyThread_acquire_lock"
        ])));
        assert!(!waits_for_gil(&thread(&["recv", "sock_recv_guts"])));
        // a condition wait some C library asked for
        assert!(!waits_for_gil(&thread(&[
            "pthread_cond_wait",
            "uv_cond_wait"
        ])));
        // no Python frame: not the interpreter's thread
        let mut native_only = thread(&["pthread_cond_wait"]);
        native_only.frames.pop();
        assert!(!waits_for_gil(&native_only));
    }
}
