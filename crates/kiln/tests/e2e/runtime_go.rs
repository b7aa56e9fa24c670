//! A Go target started by kiln (`kiln run --spawn`): its GC cycles, read from
//! `GODEBUG=gctrace=1`, against the Go runtime's own count and pause times
//! (tests/apps/go_cache writes `runtime.MemStats` when it is stopped), and where they come:
//! in the seconds after each cache rebuild, at a known wall-clock phase.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::apps::{free_port, workspace};
use common::{finding, json_with_exit, kiln};
use serde_json::Value;

/// tests/apps/go_cache built into `dir`.
fn go_cache(dir: &Path) -> PathBuf {
    let bin = dir.join("go_cache");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(workspace().join("tests/apps/go_cache/main.go"))
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        // one build cache for the tests of this file (a cold build takes ~15 s)
        .env("GOCACHE", workspace().join("target/go-build-cache"))
        .output()
        .expect("go (the Go toolchain) is needed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What go_cache wrote when stopped: its first cycle in `PauseEnd`'s window, `NumGC`, and
/// each cycle's pause end (ns since the epoch) from that first on.
fn truth_of(file: &Path) -> (u64, u64, Vec<u64>) {
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap())
        .expect("the target wrote its truth when it was stopped");
    let ends = truth["pause_end_unix_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    (
        truth["first_cycle"].as_u64().unwrap(),
        truth["num_gc"].as_u64().unwrap(),
        ends,
    )
}

/// A run's recorded Go GC cycles, in order, and the end of its last runtime second.
fn recorded_cycles(out: &Path) -> (Vec<Value>, f64) {
    let seconds = lines(&out.join("runtime-seconds.jsonl"));
    let watched_until = seconds.last().unwrap()["unix_ms"].as_f64().unwrap();
    let cycles = seconds
        .iter()
        .flat_map(|s| s["go"]["cycles"].as_array().unwrap().iter().cloned())
        .collect();
    (cycles, watched_until)
}

#[test]
fn a_spawned_go_targets_gc_cycles_are_its_own_and_come_after_each_cache_rebuild() {
    let _turn = common::group("runtime_go");
    let tmp = tempfile::tempdir().unwrap();
    let bin = go_cache(tmp.path());
    let (run, out, truth_file) = go_cache_run(&bin, tmp.path(), "background", 10, "24s", &[]);
    assert_eq!(run["total"]["failed"], 0, "{run:#}");
    let runtime = &run["runtime"];
    assert_eq!(runtime["runtime"], "go", "{runtime:#}");
    assert!(
        runtime["read"][0].as_str().unwrap().contains("gctrace"),
        "{runtime:#}"
    );

    // kiln stopped the target (SIGTERM) at the end: it wrote what its runtime counted
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth_file).unwrap()).unwrap();
    let (first, num_gc, ends) = truth_of(&truth_file);
    let pause_ends: Vec<f64> = ends.iter().map(|n| *n as f64 / 1e6).collect();

    let (cycles, watched_until) = recorded_cycles(&out);
    let seconds = lines(&out.join("runtime-seconds.jsonl"));
    // every cycle once, in order, from the first
    let numbers: Vec<u64> = cycles
        .iter()
        .map(|c| c["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    // all the runtime counted while kiln watched, and nothing it did not
    let counted_while_watched = (first..=num_gc)
        .zip(&pause_ends)
        .filter(|(_, end)| **end < watched_until - 200.0)
        .count() as u64
        + first
        - 1;
    assert!(
        numbers.len() as u64 <= num_gc,
        "{} of {num_gc}",
        numbers.len()
    );
    assert!(
        numbers.len() as u64 >= counted_while_watched,
        "{} recorded, {counted_while_watched} ended while kiln watched",
        numbers.len()
    );
    // each cycle's end (its start + concurrent mark + pauses) is the runtime's PauseEnd,
    // within the spread of the process's start and kiln's clock
    for c in &cycles {
        let n = c["number"].as_u64().unwrap();
        if n < first {
            continue;
        }
        let end = c["start_unix_ms"].as_f64().unwrap()
            + c["mark_ms"].as_f64().unwrap()
            + c["pause_ms"].as_f64().unwrap();
        let truth_end = pause_ends[(n - first) as usize];
        assert!(
            (end - truth_end).abs() < 100.0,
            "cycle {n}: gctrace says it ended at {end}, the runtime {truth_end}"
        );
    }
    // the cycles after start-up come while a rebuild (every 10 s of the clock) runs or in the
    // 3 s after it ends: its allocations start them, and a busy host (CI's) stretches a
    // rebuild, and the cycles it starts, past 1.5 s from its start; a cycle begun early in
    // the rebuild leaves the heap's goal just above what the rebuild then allocates, and the
    // requests' own allocations reach it seconds later (2.1 s after the rebuild ended in a
    // CI run beside the noisy neighbour). (Each cycle's end is checked to 100 ms above.)
    let rebuilds: Vec<(f64, f64)> = truth["rebuilds"].as_array().unwrap()[1..]
        .iter()
        .map(|r| {
            let start = r["start_unix_ms"].as_f64().unwrap();
            (start, r["end_unix_ms"].as_f64().unwrap().max(start))
        })
        .collect();
    assert!(rebuilds.len() >= 2, "{truth}");
    let later: Vec<f64> = cycles
        .iter()
        .map(|c| c["start_unix_ms"].as_f64().unwrap())
        .filter(|t| *t >= rebuilds[0].0 - 100.0)
        .collect();
    let in_window = |t: f64, (start, end): (f64, f64)| t >= start - 100.0 && t <= end + 3000.0;
    let after_rebuild = (later.iter())
        .filter(|t| rebuilds.iter().any(|r| in_window(**t, *r)))
        .count();
    // each rebuild kiln watched to its end starts a cycle, and most cycles come after one:
    // the requests' own allocations start one now and then between rebuilds (6 s after one
    // in a CI run)
    let each_rebuild = (rebuilds.iter())
        .filter(|(_, end)| *end + 500.0 < watched_until)
        .all(|r| later.iter().any(|t| in_window(*t, *r)));
    assert!(
        each_rebuild && after_rebuild * 2 > later.len(),
        "{after_rebuild} of {} cycles after a rebuild: cycles began at {later:?}, rebuilds \
         (start, end) {rebuilds:?}",
        later.len(),
    );
    // the summary counts the measured window's cycles, and says where the assist came
    let go = &runtime["go"];
    let in_summary = go["gc_cycles"].as_u64().unwrap();
    assert!(
        in_summary >= 2 && in_summary <= numbers.len() as u64,
        "{go:#}"
    );
    let (worst, _) = (
        go["worst_assist_second"][0].as_u64(),
        go["worst_assist_second"][1].as_f64(),
    );
    let worst = worst.expect("some mark assist");
    let worst_at = seconds
        .iter()
        .find(|s| s["second"].as_u64() == Some(worst))
        .unwrap()["unix_ms"]
        .as_f64()
        .unwrap();
    assert!(
        rebuilds
            .iter()
            .any(|(start, end)| worst_at >= *start && worst_at <= end + 2500.0),
        "the most assist was in second {worst} (ending {worst_at}), rebuilds at {rebuilds:?}"
    );
    // and the end summary shows it
    let report = kiln(&["report", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("mark assist by allocating goroutines"),
        "{text}"
    );
}

#[test]
fn spawn_refusals_and_a_target_that_never_listens() {
    let _turn = common::group("runtime_go");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/");
    let out = kiln(&[
        "run",
        &url,
        "--spawn",
        "sleep 60",
        "--watch-pid",
        "1",
        "-d",
        "1s",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("leave out --watch-pid"));
    // a command that exits at once: its last words are shown
    let out = kiln(&[
        "run",
        &url,
        "--spawn",
        "echo 'no such config <b>' >&2; exit 3",
        "-d",
        "1s",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exited") && stderr.contains("no such config <b>"),
        "{stderr}"
    );
}

/// Runs the go_cache target in `mode` (rebuilt every `period_s`) under 200 requests/s for
/// `duration` after a 2 s warm-up, started by kiln; the run's JSON, its directory and the
/// file the target writes its runtime's truth to when stopped.
fn go_cache_run(
    bin: &Path,
    dir: &Path,
    mode: &str,
    period_s: u32,
    duration: &str,
    extra: &[&str],
) -> (Value, PathBuf, PathBuf) {
    let port = free_port();
    let truth = dir.join(format!("truth-{mode}.json"));
    let spawn = format!(
        "{} {port} {} {mode} {period_s}",
        bin.display(),
        truth.display()
    );
    let url = format!("http://127.0.0.1:{port}/");
    let out = dir.join(format!("run-{mode}"));
    let out_text = out.to_str().unwrap();
    let mut args = vec![
        "run", &url, "--spawn", &spawn, "--rate", "200", "-d", duration, "--warmup", "2s",
        "--json", "--quiet", "--out", out_text,
    ];
    args.extend_from_slice(extra);
    let run = json_with_exit(&kiln(&args), 0);
    (run, out, truth)
}

/// Case study 2's shape: the request that finds the cache expired rebuilds it (60 MB at
/// once) while the others wait: the slow seconds are the seconds GC cycles ran in, and the
/// GC finding says so. Refreshed in place (nothing allocated in a burst), there are no
/// cycles to speak of and no finding, though the rule judged the run.
#[test]
fn a_go_cache_rebuilt_at_once_makes_gc_in_the_slow_seconds_and_one_refreshed_in_place_does_not() {
    let _turn = common::group("runtime_go");
    let tmp = tempfile::tempdir().unwrap();
    let bin = go_cache(tmp.path());
    let (inline, in_place) = std::thread::scope(|s| {
        let inline = s.spawn(|| go_cache_run(&bin, tmp.path(), "inline", 4, "20s", &[]).0);
        let in_place = s.spawn(|| go_cache_run(&bin, tmp.path(), "in-place", 4, "20s", &[]).0);
        (inline.join().unwrap(), in_place.join().unwrap())
    });
    let found = finding(&inline, "runtime.gc-pauses")
        .unwrap_or_else(|| panic!("no GC finding: {:#}", inline["findings"]));
    let data = &found["data"];
    let (slow, with_cycle) = (
        data["slow_seconds"].as_u64().unwrap(),
        data["slow_seconds_with_cycle"].as_u64().unwrap(),
    );
    // 5 rebuilds in 20 s, each a slow second
    assert!(slow >= 3 && with_cycle * 10 >= slow * 6, "{data}");
    assert!(found["title"]
        .as_str()
        .unwrap()
        .contains("Go's garbage collector"));
    assert!(found["fix"].as_str().unwrap().contains("in the background"));
    assert!(data["assist_cpu_ms"].as_f64().unwrap() > 0.0, "{data}");

    assert!(
        finding(&in_place, "runtime.gc-pauses").is_none(),
        "{:#}",
        in_place["findings"]
    );
    let unjudged = in_place["findings"]["unjudged"].as_array().unwrap();
    assert!(
        !unjudged.iter().any(|u| u["rule"] == "runtime.gc-pauses"),
        "{unjudged:?}"
    );
    // refreshing in place allocates nothing in a burst: (almost) no cycles in the window
    assert!(
        in_place["runtime"]["go"]["gc_cycles"].as_u64().unwrap() <= 2,
        "{:#}",
        in_place["runtime"]["go"]
    );
}

/// A Go target kiln did not start, watched by its port: its GC cycles come from its expvar
/// page, each one's pause and end exactly the runtime's own (`MemStats.PauseEnd`), none lost.
#[test]
fn a_watched_go_targets_gc_cycles_come_from_its_expvar_page() {
    let _turn = common::group("runtime_go");
    let tmp = tempfile::tempdir().unwrap();
    let bin = go_cache(tmp.path());
    let port = free_port();
    let truth_file = tmp.path().join("truth.json");
    let mut target = Command::new(&bin)
        .args([
            &port.to_string(),
            truth_file.to_str().unwrap(),
            "background",
            "4",
        ])
        .spawn()
        .unwrap();
    common::apps::wait_port(port, &mut target, "go_cache");
    let out = tmp.path().join("run");
    let url = format!("http://127.0.0.1:{port}/");
    let run = json_with_exit(
        &kiln(&[
            "run",
            &url,
            "--rate",
            "200",
            "-d",
            "12s",
            "--watch-port",
            &port.to_string(),
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    // SIGTERM: the target writes what its runtime counted
    unsafe { libc::kill(target.id() as i32, libc::SIGTERM) };
    target.wait().unwrap();
    let runtime = &run["runtime"];
    assert!(
        runtime["read"][0].as_str().unwrap().contains("expvar"),
        "{runtime:#}"
    );
    let (first, _, ends) = truth_of(&truth_file);
    let (cycles, watched_until) = recorded_cycles(&out);
    assert!(cycles.len() >= 2, "three rebuilds in 12 s: {cycles:?}");
    let numbers: Vec<u64> = cycles
        .iter()
        .map(|c| c["number"].as_u64().unwrap())
        .collect();
    let from = numbers[0];
    assert_eq!(
        numbers,
        (from..from + numbers.len() as u64).collect::<Vec<_>>()
    );
    for c in &cycles {
        let k = c["number"].as_u64().unwrap();
        let end_ms = c["start_unix_ms"].as_f64().unwrap() + c["pause_ms"].as_f64().unwrap();
        let truth_ms = ends[(k - first) as usize] as f64 / 1e6;
        assert!(
            (end_ms - truth_ms).abs() < 0.01,
            "cycle {k}: {end_ms} against {truth_ms}"
        );
    }
    // every cycle the runtime ended while kiln read, after its first read, is there
    let missed: Vec<u64> = (from..first + ends.len() as u64)
        .filter(|k| (ends[(k - first) as usize] as f64 / 1e6) < watched_until - 1100.0)
        .filter(|k| !numbers.contains(k))
        .collect();
    assert!(missed.is_empty(), "{missed:?}");
    // the summary says what expvar cannot tell
    let report = kiln(&["report", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("expvar has pauses only"), "{text}");
}

/// Goroutines queueing for a mutex held across a 30 ms call (40 requests/s: more than the
/// lock can serve) are seen in pprof's goroutine dumps under `--runtime deep` and found where
/// they wait; the same call made without holding the lock gives no such finding, the rule
/// having judged the dumps.
#[test]
fn goroutines_waiting_for_a_mutex_are_found_and_the_same_call_outside_the_lock_is_not() {
    let _turn = common::group("runtime_go");
    let tmp = tempfile::tempdir().unwrap();
    let bin = go_cache(tmp.path());
    let port = free_port();
    let mut target = Command::new(&bin)
        .args([
            &port.to_string(),
            tmp.path().join("t.json").to_str().unwrap(),
            "in-place",
            "60",
        ])
        .spawn()
        .unwrap();
    common::apps::wait_port(port, &mut target, "go_cache");
    let run = |path: &str| {
        let out = tmp.path().join(format!("run-{path}"));
        json_with_exit(
            &kiln(&[
                "run",
                &format!("http://127.0.0.1:{port}/{path}"),
                "--rate",
                "40",
                "-d",
                "8s",
                "--watch-port",
                &port.to_string(),
                "--runtime",
                "deep",
                "--json",
                "--quiet",
                "--out",
                out.to_str().unwrap(),
            ]),
            0,
        )
    };
    let locked = run("locked");
    let unlocked = run("unlocked");
    let _ = target.kill();
    let _ = target.wait();

    let found = finding(&locked, "runtime.blocked-threads")
        .unwrap_or_else(|| panic!("{:#}", locked["findings"]));
    let title = found["title"].as_str().unwrap();
    assert!(
        title.starts_with("Goroutines wait for a lock at main."),
        "{title}"
    );
    assert_eq!(found["data"]["site"]["lock_class"], "sync.Mutex.Lock");
    let threads = &locked["runtime"]["threads"];
    assert!(threads["dumps"].as_u64().unwrap() >= 2, "{threads:#}");
    assert!(
        locked["runtime"]["read"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("/debug/pprof/goroutine")),
        "{:#}",
        locked["runtime"]
    );

    assert!(
        finding(&unlocked, "runtime.blocked-threads").is_none(),
        "{:#}",
        unlocked["findings"]
    );
    let unjudged = unlocked["findings"]["unjudged"].as_array().unwrap();
    assert!(!unjudged
        .iter()
        .any(|u| u["rule"] == "runtime.blocked-threads"));
    // the goroutines sleeping in the call are there, not queued for the lock
    let states = &unlocked["runtime"]["threads"]["states_mean"];
    assert!(states["sleep"].as_f64().unwrap() >= 0.5, "{states}");
    assert!(states.get("sync.Mutex.Lock").is_none(), "{states}");
}

/// `kiln watch --spawn`: the same reading without load. go_cache rebuilds its cache every 2 s
/// on its own, so it collects garbage while nobody calls it; kiln starts it, waits for its
/// port, records its gctrace cycles (no more than the runtime counted, several of them) and
/// stops it at the end, when it writes its MemStats.
#[test]
fn kiln_watch_spawns_a_go_target_reads_its_gc_and_stops_it() {
    let _turn = common::group("runtime_go");
    let tmp = tempfile::tempdir().unwrap();
    let bin = go_cache(tmp.path());
    let port = free_port();
    let truth = tmp.path().join("truth-watch.json");
    let spawn = format!("{} {port} {} background 2", bin.display(), truth.display());
    let out = tmp.path().join("watch");
    let port_text = port.to_string();
    let watched = kiln(&[
        "watch",
        "--spawn",
        &spawn,
        "--port",
        &port_text,
        "-d",
        "7s",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(watched.status.success(), "{watched:?}");
    let text = String::from_utf8_lossy(&watched.stdout);
    assert!(text.contains("Runtime    Go"), "{text}");
    // stopped by kiln: it wrote its truth and no longer listens
    let (first_cycle, num_gc, _) = truth_of(&truth);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    let (cycles, _) = recorded_cycles(&out);
    let numbers: Vec<u64> = cycles
        .iter()
        .map(|c| c["number"].as_u64().unwrap())
        .collect();
    assert!(numbers.len() >= 3, "{numbers:?}");
    // every cycle once, in order, from the first: watched from its start
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    assert!(
        numbers.len() as u64 <= num_gc && first_cycle >= 1,
        "{numbers:?} of {num_gc}"
    );
}

/// `--runtime deep` on a Go target that serves pprof: execution traces, one after another,
/// read by tools/kiln-go-trace, give the time goroutines spent in GC mark assist per second
/// and per function. go_cache rebuilt inline (one request allocates 60 MB at once): mark
/// assist only happens while a GC cycle marks, so every traced second with assist holds one
/// of gctrace's cycles, and the rebuild (`main.build`) is among the functions that assisted.
/// (Which function assisted most is not fixed: request goroutines reading their requests
/// often wait in assist longer than the rebuild works in it.)
#[test]
fn execution_traces_put_mark_assist_in_the_seconds_and_functions_that_paid_it() {
    let _turn = common::group("runtime_go");
    let tmp = tempfile::tempdir().unwrap();
    let bin = go_cache(tmp.path());
    let (run, out, _) = go_cache_run(&bin, tmp.path(), "inline", 4, "16s", &["--runtime", "deep"]);
    let runtime = &run["runtime"];
    let assist = &runtime["go_assist"];
    // (no go_assist at all: the trace reader, tools/kiln-go-trace, is not beside kiln)
    assert!(
        assist["assist_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{runtime:#}"
    );
    assert!(
        assist["seconds_traced"].as_u64().unwrap() >= 12,
        "{assist:#}"
    );

    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("runtime.json")).unwrap()).unwrap();
    let trace = &info["go_trace"];
    assert!(
        trace["where"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["function"] == "main.build"),
        "{trace:#}"
    );
    // every traced second with assist holds a gctrace cycle's mark (within 50 ms)
    let (cycles, watched_until) = recorded_cycles(&out);
    let spans: Vec<(f64, f64)> = cycles
        .iter()
        .map(|c| {
            let start = c["start_unix_ms"].as_f64().unwrap();
            let end = start + c["mark_ms"].as_f64().unwrap() + c["pause_ms"].as_f64().unwrap();
            (start, end)
        })
        .collect();
    let seconds = trace["seconds"].as_array().unwrap();
    assert!(!seconds.is_empty(), "{trace:#}");
    // the last trace runs up to 3 s past the watch's end, when gctrace is no longer read
    for s in seconds
        .iter()
        .filter(|s| s["unix_s"].as_f64().unwrap() * 1000.0 + 1000.0 <= watched_until)
    {
        let from = s["unix_s"].as_f64().unwrap() * 1000.0;
        let marked = spans
            .iter()
            .any(|(start, end)| *start <= from + 1050.0 && *end >= from - 50.0);
        assert!(marked, "assist in second {s} without a GC cycle: {spans:?}");
    }
}
