//! Python's threads and its GIL, read with py-spy (`py-spy dump --json --pid P`): which thread
//! holds the GIL and in what function, how many threads there are and how many run Python
//! code. py-spy reads the interpreter's memory from outside (ptrace), so the target needs no
//! change; each dump stops it for a moment, measured and recorded with the dump.

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
    #[serde(default)]
    short_filename: Option<String>,
    #[serde(default)]
    filename: String,
    #[serde(default)]
    line: i64,
}

/// Reads `py-spy dump --json` output.
pub fn parse(json: &str, unix_ms: u64, took_ms: f64) -> Result<PyDump, String> {
    let threads: Vec<RawThread> = serde_json::from_str(json)
        .map_err(|e| format!("py-spy's output is not the JSON it writes: {e}"))?;
    let gil_holder = threads.iter().find(|t| t.owns_gil).map(|t| PyThread {
        name: t.thread_name.clone().unwrap_or_else(|| "(unnamed)".into()),
        frame: t.frames.first().map_or_else(
            || "(no Python frame)".to_string(),
            |f| {
                let file = f.short_filename.as_deref().unwrap_or(&f.filename);
                format!("{} ({file}:{})", f.name, f.line)
            },
        ),
    });
    Ok(PyDump {
        unix_ms,
        took_ms,
        threads: threads.len() as u32,
        active: threads.iter().filter(|t| t.active).count() as u32,
        gil_holder,
    })
}

/// The py-spy executable kiln runs.
#[derive(Clone, Debug)]
pub struct PySpy {
    exe: PathBuf,
}

impl PySpy {
    /// `KILN_PY_SPY` when set, else `py-spy` on the PATH.
    pub fn find() -> Result<Self, String> {
        if let Some(exe) = std::env::var_os("KILN_PY_SPY") {
            let exe = PathBuf::from(exe);
            return if exe.is_file() {
                Ok(Self { exe })
            } else {
                Err(format!(
                    "KILN_PY_SPY names {}, which is not a file",
                    exe.display()
                ))
            };
        }
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("py-spy"))
            .find(|exe| exe.is_file())
            .map(|exe| Self { exe })
            .ok_or_else(|| {
                "py-spy is not installed (pip install py-spy, or set KILN_PY_SPY)".into()
            })
    }

    pub fn path(&self) -> &Path {
        &self.exe
    }

    /// One dump of `pid`.
    pub fn dump(&self, pid: i32) -> Result<PyDump, String> {
        let unix_ms = crate::watch::unix_ms_now();
        let asked = Instant::now();
        let out = std::process::Command::new(&self.exe)
            .args(["dump", "--json", "--pid", &pid.to_string()])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        let took_ms = asked.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().next().unwrap_or("no message").trim();
            return Err(format!("py-spy failed: {first}"));
        }
        parse(&String::from_utf8_lossy(&out.stdout), unix_ms, took_ms)
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
        let d = parse(DUMP, 5, 2.5).unwrap();
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
        );
        assert_eq!(idle.unwrap().gil_holder, None);
        for bad in [
            "",
            "Error: Failed to find python version",
            "{}",
            "[{\"frames\": 3}]",
        ] {
            assert!(
                parse(bad, 0, 0.0).unwrap_err().contains("not the JSON"),
                "{bad}"
            );
        }
    }
}
