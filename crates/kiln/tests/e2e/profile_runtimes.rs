//! Profiles of other runtimes: a JIT-compiled Java method named through the JVM's perf map,
//! and a Go program's own pprof CPU profile imported. The programs are written here with a
//! known CPU split and built by the tests (javac, go), like a user's service would be.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{json_with_exit, kiln, profile_pid};

const JAVA_HOT: &str = r#"
public class Hot {
    static long spinHot(long x) {
        for (int i = 0; i < 1000; i++) { x = x * 6364136223846793005L + i; }
        return x;
    }
    public static void main(String[] args) {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        long x = 0;
        while (System.nanoTime() < end) { x = spinHot(x); }
        System.out.println(x);
    }
}
"#;

/// Kills the child when the test ends, pass or fail.
struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_hot_java_method_is_named_in_the_profile() {
    let _turn = common::group("profile_runtimes");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Hot.java"), JAVA_HOT).unwrap();
    let javac = Command::new("javac")
        .arg("Hot.java")
        .current_dir(dir.path())
        .status();
    assert!(
        javac.is_ok_and(|s| s.success()),
        "javac (a JDK) is needed: scripts/test.sh installs it"
    );
    let java = Killed(
        Command::new("java")
            // A method of its own in the profile, not inlined into main by the JIT.
            .args([
                "-XX:+PreserveFramePointer",
                "-XX:CompileCommand=quiet",
                "-XX:CompileCommand=dontinline,Hot::spinHot",
                "-cp",
            ])
            .arg(dir.path())
            .args(["Hot", "30"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Let the JIT compile spinHot before sampling.
    std::thread::sleep(Duration::from_secs(2));
    let json = profile_pid(java.0.id(), &dir.path().join("run"), &["-d", "3s"]);
    let jit_done = json["jit"]["done"].to_string();
    assert!(jit_done.contains("Compiler.perfmap"), "{json}");
    // The map kiln had the JVM write is gone once perf script has read it.
    let map = format!("/tmp/perf-{}.map", java.0.id());
    assert!(!std::path::Path::new(&map).exists(), "{map} left behind");
    let top: Vec<&str> = json["summary"]["top_self"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        top.iter()
            .take(3)
            .any(|n| n.contains("Hot") && n.contains("spinHot")),
        "the hot Java method is not named among the top self frames: {top:?}"
    );
    // With PreserveFramePointer, no advice about it.
    assert!(!json["jit"]["advice"]
        .to_string()
        .contains("PreserveFramePointer"));
}

const NODE_HOT: &str = r#"
function hotLoop(n) { let x = 0; for (let i = 0; i < n; i++) { x = (x * 31 + i) | 0; } return x; }
const end = Date.now() + 30000; let s = 0;
while (Date.now() < end) { s += hotLoop(100000); }
console.log(s);
"#;

#[test]
fn a_hot_javascript_function_is_named_with_perf_basic_prof() {
    let _turn = common::group("profile_runtimes");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hot.js");
    std::fs::write(&script, NODE_HOT).unwrap();
    let node = Killed(
        Command::new("node")
            .arg("--perf-basic-prof")
            // hotLoop in a frame of its own: once TurboFan optimized the script's loop on the
            // stack with hotLoop inlined, 40% of its samples were the caller's (a perf map
            // has no inlining); when that came before the profile's 2 s, the test failed
            .arg("--no-turbo-inlining")
            .arg(&script)
            // node writes an isolate log into its working directory: keep it in the temp dir.
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("node (Node.js) is needed: scripts/test.sh installs it"),
    );
    std::thread::sleep(Duration::from_secs(1));
    let json = profile_pid(node.0.id(), &dir.path().join("run"), &["-d", "2s"]);
    assert_eq!(
        json["call_graph"], "fp",
        "JIT code is walked by frame pointers"
    );
    let top = &json["summary"]["top_self"][0];
    assert!(top["name"].as_str().unwrap().contains("hotLoop"), "{top}");
    assert!(top["self_pct"].as_f64().unwrap() > 70.0, "{top}");
    assert!(
        json["jit"]["advice"].as_array().unwrap().is_empty(),
        "{json}"
    );
}

const GO_SPLIT: &str = r#"
package main

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
)

// retained holds 48 MiB for the heap profile's inuse_space; churn's garbage is most of its
// alloc_objects
var retained [][]byte
var sink []byte

//go:noinline
func retain() {
	for i := 0; i < 48; i++ {
		retained = append(retained, make([]byte, 1<<20))
	}
}

//go:noinline
func churn() {
	for i := 0; i < 200000; i++ {
		sink = make([]byte, 64)
	}
}

// heapAndLegacy writes a heap profile (profile.proto) and the legacy debug=1 texts of the
// mutex, block and threadcreate profiles beside the CPU profile
func heapAndLegacy(dir string) {
	runtime.MemProfileRate = 1
	runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(1)
	retain()
	churn()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				mu.Lock()
				time.Sleep(10 * time.Microsecond)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	runtime.GC()
	write := func(name, file string, debug int) {
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			panic(err)
		}
		pprof.Lookup(name).WriteTo(f, debug)
		f.Close()
	}
	write("heap", "heap.pb.gz", 0)
	write("mutex", "mutex.txt", 1)
	write("block", "block.txt", 1)
	write("threadcreate", "threadcreate.txt", 1)
}

func cpuTime() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

//go:noinline
func hot(x uint64) uint64 {
	for i := 0; i < 200; i++ {
		x = x*6364136223846793005 + uint64(i)
	}
	return x
}

//go:noinline
func cold(x uint64) uint64 {
	for i := 0; i < 200; i++ {
		x = x*2862933555777941757 + uint64(i)
	}
	return x
}

func main() {
	f, err := os.Create(os.Args[1])
	if err != nil {
		panic(err)
	}
	pprof.StartCPUProfile(f)
	var x uint64
	// 3 s of this process's CPU (at most 30 s of wall time): ~300 samples at pprof's 100 Hz
	// however busy the machine is
	cap := time.Now().Add(30 * time.Second)
	for cpuTime() < 3*time.Second && time.Now().Before(cap) {
		// Rounds of the same work, 7 calls of hot for 3 of cold: the CPU splits 70/30
		// however the machine schedules the process (a split by wall time would not on a
		// busy one). Their length is random, so that the profiler's fixed 10 ms tick cannot
		// fall on the same part of every round.
		k := 2000 + rand.Intn(4000)
		for i := 0; i < 7*k; i++ {
			x = hot(x)
		}
		for i := 0; i < 3*k; i++ {
			x = cold(x)
		}
	}
	pprof.StopCPUProfile()
	f.Close()
	heapAndLegacy(filepath.Dir(os.Args[1]))
	fmt.Println(x, len(retained), len(sink))
}
"#;

fn go_cpu_profile(dir: &Path) -> std::path::PathBuf {
    std::fs::write(dir.join("main.go"), GO_SPLIT).unwrap();
    let profile = dir.join("cpu.pb.gz");
    let status = Command::new("go")
        .args(["run", "main.go"])
        .arg(&profile)
        .current_dir(dir)
        .env("GOFLAGS", "")
        .env("GO111MODULE", "off")
        .stdout(Stdio::null())
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "go (the Go toolchain) is needed"
    );
    profile
}

#[test]
fn a_go_pprof_profile_imports_with_its_known_split() {
    let _turn = common::group("profile_runtimes");
    let dir = tempfile::tempdir().unwrap();
    let profile = go_cpu_profile(dir.path());
    let out = dir.path().join("run");
    let json = json_with_exit(
        &kiln(&[
            "profile",
            "import",
            profile.to_str().unwrap(),
            "--json",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    assert_eq!(json["source"]["format"], "pprof");
    // pprof's default: the last sample type, the CPU time
    assert_eq!(json["source"]["value"], "cpu/nanoseconds");
    // inclusive shares: a sample in Go's preemption handler (runtime.asyncPreempt, many on a
    // busy machine) belongs to the function it interrupted; hot and cold do not call each other
    let shares = &json["summary"]["top_total"];
    let pct = |name: &str| {
        shares
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .and_then(|f| f["total_pct"].as_f64())
            .unwrap_or(0.0)
    };
    // 3 s of CPU at Go's 100 Hz: ~300 samples; 70/30 of the loop by construction, within
    // sampling noise.
    assert!(json["summary"]["samples"].as_u64().unwrap() > 200, "{json}");
    let (hot, cold) = (pct("main.hot"), pct("main.cold"));
    assert!(hot + cold > 90.0, "{shares}");
    let split = hot / (hot + cold);
    assert!(
        (split - 0.70).abs() < 0.08,
        "main.hot is {split:.3} of the two: {shares}"
    );
    assert_eq!(
        json["summary"]["top_self"][0]["name"], "main.hot",
        "{shares}"
    );
    // The stacks are root first: main.main calls both.
    let folded = std::fs::read_to_string(out.join("profile.folded")).unwrap();
    assert!(
        folded.lines().any(|l| l.contains("main.main;main.hot ")),
        "{folded}"
    );
}

/// The Go program's heap profile is read in its default value, inuse_space, in bytes (it
/// once read alloc_objects: the churn at 100%), in the summary and the speedscope file; its
/// legacy debug=1 texts (mutex, block, threadcreate) are refused by name with the way to
/// convert them (they were read as collapsed stacks: "cycles/second =" at 99.5%, exit 0); a
/// cut or corrupt file is a clear error.
#[test]
fn a_go_heap_profile_reads_in_bytes_and_legacy_or_corrupt_files_are_clear_errors() {
    let _turn = common::group("profile_runtimes");
    let dir = tempfile::tempdir().unwrap();
    let profile = go_cpu_profile(dir.path());
    let heap = dir.path().join("heap.pb.gz");
    let out = dir.path().join("heap-run");
    let run = kiln(&[
        "profile",
        "import",
        heap.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}");
    assert!(text.contains("counts are inuse_space/bytes"), "{text}");
    // 48 MiB retained by construction, at MemProfileRate 1 (every allocation recorded)
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("Total      "))
        .unwrap_or_else(|| panic!("{text}"));
    let mib: f64 = total.split(' ').next().unwrap().parse().unwrap();
    assert!(
        total.contains("MiB of inuse_space") && (48.0..56.0).contains(&mib),
        "{text}"
    );
    let top = text.lines().find(|l| l.starts_with("Top self")).unwrap();
    assert!(top.contains("main.retain"), "{text}");
    let speedscope: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("profile.speedscope.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(speedscope["profiles"][0]["unit"], "bytes");
    for (file, kind) in [
        ("mutex.txt", "legacy contention profile"),
        ("block.txt", "legacy contention profile"),
        ("threadcreate.txt", "legacy thread profile"),
    ] {
        let path = dir.path().join(file);
        let head = std::fs::read_to_string(&path).unwrap();
        let run = kiln(&["profile", "import", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{file}: {stderr}\n{head}");
        assert!(
            stderr.contains(kind) && stderr.contains("go tool pprof -proto"),
            "{file}: {stderr}\n{head}"
        );
    }
    let data = std::fs::read(&profile).unwrap();
    let cut = dir.path().join("cut.pb.gz");
    std::fs::write(&cut, &data[..data.len() / 2]).unwrap();
    let out = kiln(&["profile", "import", cut.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not a profile kiln can read"), "{stderr}");
    assert!(!stderr.contains("panicked"));
}

/// `--alloc` on a JVM whose requests allocate 64 KiB in `render` and 16 KiB in `checksum`
/// (tests/apps/java_alloc, by construction; the JDK's HTTP server adds a few KiB of its own):
/// async-profiler's allocation profile gives those two sites 80 KiB a request within 10%, in
/// the ratio 4:1 within 5 points, and the summary says the bytes a request allocates.
#[test]
fn a_jvms_allocations_per_request_and_by_site_match_what_it_allocates() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let classes = tmp.path().join("classes");
    common::apps::javac(
        &[common::apps::workspace().join("tests/apps/java_alloc/AllocShop.java")],
        None,
        &classes,
    );
    let library = common::apps::async_profiler();
    let port = common::apps::free_port();
    let mut child = Command::new("java")
        .arg("-Dsun.net.httpserver.nodelay=true")
        .arg("-cp")
        .arg(&classes)
        .args(["AllocShop", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("java starts");
    common::apps::wait_port(port, &mut child, "AllocShop");
    let app = Killed(child);
    let out = tmp.path().join("run");
    let run = json_with_exit(
        &kiln(&[
            "run",
            &format!("http://127.0.0.1:{port}/"),
            "--watch-pid",
            &app.0.id().to_string(),
            "--alloc",
            "--async-profiler",
            library.to_str().unwrap(),
            "-c",
            "2",
            "--warmup",
            "2s",
            "-d",
            "4s",
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    drop(app);
    let requests = run["total"]["requests"].as_f64().unwrap();
    let sites = &run["alloc"]["summary"]["allocated_in"];
    let bytes_in = |method: &str| {
        sites
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with(method))
            .map(|s| s["self_samples"].as_f64().unwrap())
            .sum::<f64>()
    };
    let (render, checksum) = (bytes_in("AllocShop.render"), bytes_in("AllocShop.checksum"));
    let per_request_kib = (render + checksum) / requests / 1024.0;
    assert!(
        (72.0..88.0).contains(&per_request_kib),
        "{per_request_kib:.1} KiB a request at the two sites: {sites:#}"
    );
    let render_share = 100.0 * render / (render + checksum);
    assert!(
        (75.0..85.0).contains(&render_share),
        "render's share {render_share:.1}%: {sites:#}"
    );
    // all of it, the server's own included: a little more than the two sites
    let all = run["alloc_bytes_per_request"].as_f64().unwrap() / 1024.0;
    assert!(all >= per_request_kib && all < 1.5 * 80.0, "{all:.1} KiB");
    let text = kiln(&["report", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("KiB a request;"), "{text}");
    assert!(out.join("alloc-flame.svg").exists() && out.join("alloc.folded").exists());
    // the report's allocation flame graph, searched in Chromium: render's share of the bytes
    let (share, frames) =
        common::flame_search(&out.join("report.html"), "alloc-flame", "AllocShop.render");
    let expected = 100.0 * render / (run["alloc"]["summary"]["samples"].as_f64().unwrap());
    assert!((share - expected).abs() < 1.0, "{share} vs {expected}");
    assert!(frames > 3, "{frames} frames");
}
