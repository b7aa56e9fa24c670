//! JIT-compiled code has no symbols in any file perf can read; runtimes write them to
//! `/tmp/perf-<pid>.map` (`START SIZE name`, hex), which `perf script` reads by itself. Here:
//! which runtime a process is, what kiln can do for it, and what the user must add.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A runtime whose frames need help to get names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Java,
    Node,
    Python,
    Native,
}

/// What kiln found and did about a process's JIT frames.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct JitReport {
    /// Done by kiln (e.g. "wrote /tmp/perf-42.map with jcmd Compiler.perfmap").
    pub done: Vec<String>,
    /// What the user should add for better stacks, with the exact flag.
    pub advice: Vec<String>,
    /// Perf maps kiln had the runtime write (none was there before): removed once `perf
    /// script` has read them, so /tmp does not fill with one per profiled JVM.
    #[serde(skip)]
    pub maps_written: Vec<PathBuf>,
}

impl JitReport {
    /// Removes the perf maps kiln caused (see `maps_written`).
    pub fn remove_written_maps(&mut self) {
        for map in self.maps_written.drain(..) {
            let _ = std::fs::remove_file(map);
        }
    }
}

/// The runtime of `pid`, from its executable's name.
pub fn runtime_of(pid: i32) -> Runtime {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    runtime_of_exe(&exe)
}

fn runtime_of_exe(exe: &Path) -> Runtime {
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == "java" {
        Runtime::Java
    } else if name == "node" || name == "nodejs" {
        Runtime::Node
    } else if name.starts_with("python") {
        Runtime::Python
    } else {
        Runtime::Native
    }
}

/// The process's command line, arguments split.
fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn environ_has(pid: i32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .any(|e| e == entry.as_bytes())
}

/// Advice that applies before profiling (flags the process was or was not started with).
pub fn check_before(pid: i32) -> JitReport {
    let args = cmdline(pid);
    let has = |flag: &str| args.iter().any(|a| a.starts_with(flag));
    let mut report = JitReport::default();
    match runtime_of(pid) {
        Runtime::Java => {
            if !has("-XX:+PreserveFramePointer") {
                report.advice.push(
                    "start the JVM with -XX:+PreserveFramePointer: without it perf loses the \
                     Java callers above each compiled frame"
                        .into(),
                );
            }
        }
        Runtime::Node => {
            if !has("--perf-basic-prof") && !has("--perf-prof") {
                report.advice.push(
                    "start node with --perf-basic-prof (or --perf-basic-prof-only-functions) so \
                     JavaScript frames get names instead of hex addresses"
                        .into(),
                );
            }
        }
        Runtime::Python => {
            let perf_on = args.windows(2).any(|w| w[0] == "-X" && w[1] == "perf")
                || has("-Xperf")
                || environ_has(pid, "PYTHONPERFSUPPORT=1");
            if !perf_on {
                report.advice.push(
                    "Python 3.12+: start with -X perf (or PYTHONPERFSUPPORT=1) to see Python \
                     functions; before 3.12, profile with `py-spy record --format raw -o \
                     out.txt --pid PID` and `kiln profile import out.txt`"
                        .into(),
                );
            }
        }
        Runtime::Native => {}
    }
    report
}

/// Work to do after recording, while the process still runs: for Java, have the JVM write
/// its perf map (`jcmd PID Compiler.perfmap`, JDK 17+) so that `perf script` names the
/// compiled methods.
pub fn prepare_symbols(pid: i32, report: &mut JitReport) {
    if runtime_of(pid) != Runtime::Java {
        return;
    }
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let existed = map.exists();
    let jcmd = jcmd_beside(pid);
    let result = Command::new(&jcmd)
        .arg(pid.to_string())
        .arg("Compiler.perfmap")
        .stdin(Stdio::null())
        .output();
    match result {
        Ok(out)
            if out.status.success()
                && !String::from_utf8_lossy(&out.stdout).contains("Unknown") =>
        {
            report.done.push(format!(
                "wrote /tmp/perf-{pid}.map with `jcmd {pid} Compiler.perfmap`"
            ));
        }
        Ok(out) => report.advice.push(format!(
            "`jcmd {pid} Compiler.perfmap` failed ({}); Java frames stay unnamed: use JDK 17+ \
             or perf-map-agent",
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .chain(String::from_utf8_lossy(&out.stderr).lines())
                .last()
                .unwrap_or("")
                .trim()
        )),
        Err(e) => report.advice.push(format!(
            "could not run {} ({e}); Java frames stay unnamed",
            jcmd.display()
        )),
    }
    if !existed {
        report.maps_written.push(map.clone());
    }
    // The JVM writes the file asynchronously on some versions.
    for _ in 0..20 {
        if map.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The jcmd of the JVM's own JDK (next to its `java`), else the one on PATH.
fn jcmd_beside(pid: i32) -> PathBuf {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let sibling = exe.with_file_name("jcmd");
    if sibling.exists() {
        sibling
    } else {
        PathBuf::from("jcmd")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_are_told_by_their_executable() {
        assert_eq!(
            runtime_of_exe(Path::new("/usr/lib/jvm/java-17/bin/java")),
            Runtime::Java
        );
        assert_eq!(runtime_of_exe(Path::new("/usr/bin/node")), Runtime::Node);
        assert_eq!(
            runtime_of_exe(Path::new("/usr/bin/python3.11")),
            Runtime::Python
        );
        assert_eq!(
            runtime_of_exe(Path::new("/usr/sbin/nginx")),
            Runtime::Native
        );
    }

    #[test]
    fn this_native_test_process_needs_no_advice() {
        let report = check_before(std::process::id() as i32);
        assert!(report.advice.is_empty());
    }
}

/// A JIT frame as the JVM's perf map names it, `long Hot.spinHot_[j]`, without its return
/// type: `Hot.spinHot_[j]` (the `_[j]` mark stays: flame graphs colour JIT code by it).
pub fn without_return_type(frame: &str) -> String {
    let Some(name) = frame.strip_suffix("_[j]") else {
        return frame.to_string();
    };
    // Only the JVM's `type package.Class.method`: Node's `LazyCompile:*fn /path/x.js:2:17`
    // and other runtimes' names keep every part.
    let java_type = |t: &str| {
        !t.is_empty()
            && t.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '.' | '[' | ']'))
    };
    match name.split_once(' ') {
        Some((ty, method))
            if java_type(ty) && method.contains('.') && !method.contains([' ', '/', ':', '\\']) =>
        {
            format!("{method}_[j]")
        }
        _ => frame.to_string(),
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn jit_frames_lose_their_return_type_and_keep_their_mark() {
        assert_eq!(
            without_return_type("long Hot.spinHot_[j]"),
            "Hot.spinHot_[j]"
        );
        assert_eq!(
            without_return_type("java.lang.String[] a.B.c_[j]"),
            "a.B.c_[j]"
        );
        assert_eq!(
            without_return_type("StubRoutines _[j]"),
            "StubRoutines _[j]"
        );
        assert_eq!(without_return_type("Interpreter_[j]"), "Interpreter_[j]");
        assert_eq!(
            without_return_type("do_syscall_64_[k]"),
            "do_syscall_64_[k]"
        );
    }
}
