//! Which runtime a process runs, from what Linux shows of it: its memory maps (the JVM's
//! `libjvm.so`, `libpython`, `libnode`), its executable's name, and Go's build information in
//! the executable (the `\xff Go buildinf:` block every Go binary carries).

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    Jvm,
    Go,
    Python,
    Node,
    /// None of the above: C, C++, Rust, ... (the sampler and the profiler still see it).
    Native,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Jvm => "jvm",
            Runtime::Go => "go",
            Runtime::Python => "python",
            Runtime::Node => "node",
            Runtime::Native => "native",
        }
    }
}

const GO_BUILDINFO: &[u8] = b"\xff Go buildinf:";
/// How much of an executable to search for Go's build information: it sits in the data
/// segment, well inside this for any real binary.
const GO_SEARCH: u64 = 256 << 20;

/// The runtime of `pid`, read under `proc_root` (`/proc`, or a fixture tree in tests).
pub fn detect(pid: i32, proc_root: &Path) -> Runtime {
    let base = proc_root.join(pid.to_string());
    let maps = std::fs::read_to_string(base.join("maps")).unwrap_or_default();
    let mapped = |name: &str| {
        maps.lines()
            .filter_map(|l| l.rsplit('/').next())
            .any(|file| file.starts_with(name))
    };
    if mapped("libjvm.so") {
        return Runtime::Jvm;
    }
    let exe = std::fs::read_link(base.join("exe")).unwrap_or_default();
    let exe_name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if mapped("libnode.so") || exe_name == "node" || exe_name == "nodejs" {
        return Runtime::Node;
    }
    if mapped("libpython") || exe_name.starts_with("python") {
        return Runtime::Python;
    }
    if is_go_binary(&base.join("exe")) {
        return Runtime::Go;
    }
    Runtime::Native
}

/// Whether the file carries Go's build information: the marker at the start of the
/// `.go.buildinfo` section, which Go aligns to 16 bytes and follows with the pointer size (4
/// or 8). The bare marker is not enough: a program that looks for Go binaries (kiln itself,
/// and so the demo's shop, which is kiln) holds it as a constant.
fn is_go_binary(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file.take(GO_SEARCH));
    let finder = memchr::memmem::Finder::new(GO_BUILDINFO);
    // Search chunk by chunk, keeping the tail of each so a marker across two is found.
    let mut window = Vec::with_capacity(2 << 20);
    let mut window_at = 0u64; // the window's offset in the file
    let mut chunk = vec![0u8; 1 << 20];
    let header = GO_BUILDINFO.len() + 1;
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        window.extend_from_slice(&chunk[..n]);
        let found = finder.find_iter(&window).any(|i| {
            (window_at + i as u64).is_multiple_of(16)
                && matches!(window.get(i + GO_BUILDINFO.len()), Some(4 | 8))
        });
        if found {
            return true;
        }
        let keep = window.len().saturating_sub(header);
        window.drain(..keep);
        window_at += keep as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_process(maps: &str, exe: &Path) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("7");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("maps"), maps).unwrap();
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        root
    }

    #[test]
    fn runtimes_are_told_apart_by_their_maps_and_executables() {
        let tmp = tempfile::tempdir().unwrap();
        let plain = tmp.path().join("server");
        std::fs::write(&plain, vec![7u8; 3 << 20]).unwrap();
        let jvm = "7f00-7f10 r-xp 0 08:01 1 /usr/lib/jvm/java-17/lib/server/libjvm.so\n";
        assert_eq!(detect(7, fake_process(jvm, &plain).path()), Runtime::Jvm);
        let py = "7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0\n";
        assert_eq!(detect(7, fake_process(py, &plain).path()), Runtime::Python);
        assert_eq!(detect(7, fake_process("", &plain).path()), Runtime::Native);
        // Go's header across the boundary of two 1 MiB reads, aligned, with its pointer size
        let go = tmp.path().join("gosrv");
        let mut bytes = vec![0u8; (1 << 20) - 16];
        bytes.extend_from_slice(GO_BUILDINFO);
        // (black_box: folded into one constant, the header would be in this test binary)
        bytes.extend_from_slice(&[std::hint::black_box(8), 2]);
        bytes.extend_from_slice(&[0u8; 100]);
        std::fs::write(&go, &bytes).unwrap();
        assert_eq!(detect(7, fake_process("", &go).path()), Runtime::Go);
        // the bare marker, as a constant in a program's data: unaligned, or not followed by
        // a pointer size, it is not Go's
        for (at, after) in [((1 << 20) - 15, 8u8), ((1 << 20) - 16, b'G')] {
            let mut bytes = vec![0u8; at];
            bytes.extend_from_slice(GO_BUILDINFO);
            bytes.push(after);
            bytes.extend_from_slice(&[0u8; 100]);
            std::fs::write(&go, &bytes).unwrap();
            assert_eq!(
                detect(7, fake_process("", &go).path()),
                Runtime::Native,
                "{at}"
            );
        }
        // this test binary holds the marker as a constant, and is no Go program
        let me = std::env::current_exe().unwrap();
        assert_eq!(detect(7, fake_process("", &me).path()), Runtime::Native);
        let node = tmp.path().join("node");
        std::fs::write(&node, b"x").unwrap();
        assert_eq!(detect(7, fake_process("", &node).path()), Runtime::Node);
        // A process that is gone is nothing in particular.
        assert_eq!(detect(8, tmp.path()), Runtime::Native);
    }
}
