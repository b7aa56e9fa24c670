//! `kiln profile` against work whose CPU split is known by construction: threads of this test
//! process that spend fixed shares of each 10 ms in known functions, in the kernel, or asleep.
//! perf profiles this process from outside, as it would any target.

use crate::common;

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use common::{json_with_exit, kiln, manifest, profile_pid};
use kiln_targets::{ensure, named_loop as worker, timing_attempts};
use serde_json::Value;

/// Spins in `f` until `until`.
#[inline(never)]
fn spin_until(until: Instant, f: fn(u64) -> u64) {
    let mut x = 0u64;
    while Instant::now() < until {
        x = f(x);
    }
    std::hint::black_box(x);
}

#[inline(never)]
fn burn_seventy(x: u64) -> u64 {
    let (mut x, mut i) = (x, 0u64);
    while i < 2000 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        i += 1;
    }
    x
}

#[inline(never)]
fn burn_thirty(x: u64) -> u64 {
    let (mut x, mut i) = (x, 0u64);
    while i < 2000 {
        x = std::hint::black_box(x.wrapping_mul(2862933555777941757).wrapping_add(i));
        i += 1;
    }
    x
}

/// Reads /dev/zero in 1 MiB blocks until `until`: nearly all of it is the kernel's memset.
#[inline(never)]
fn read_zeroes_until(until: Instant, file: &mut std::fs::File, buf: &mut [u8]) {
    use std::io::Read;
    while Instant::now() < until {
        let _ = file.read(buf);
    }
}

/// Round lengths of 5 to 15 ms at random, so that a sampler's fixed period cannot keep
/// landing on the same part of every round (aliasing would skew the split).
struct RandomRounds(u64);

impl RandomRounds {
    fn new() -> Self {
        Self(0x9E37_79B9_7F4A_7C15)
    }

    fn next(&mut self) -> Duration {
        // xorshift64
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_micros(5_000 + self.0 % 10_000)
    }
}

fn profile_self(args: &[&str]) -> (Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let json = profile_pid(std::process::id(), &dir.path().join("run"), args);
    (json, dir)
}

/// The collapsed stacks of one thread (perf puts the thread's name first).
fn thread_stacks(json: &Value, thread: &str) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(json["folded"].as_str().unwrap()).unwrap();
    text.lines()
        .filter_map(|l| {
            let (stack, count) = l.rsplit_once(' ')?;
            Some((stack.to_string(), count.parse().ok()?))
        })
        .filter(|(stack, _)| stack.split(';').next() == Some(thread))
        .collect()
}

fn share_of(stacks: &[(String, u64)], pick: impl Fn(&str) -> bool) -> f64 {
    let total: u64 = stacks.iter().map(|(_, c)| c).sum();
    let picked: u64 = stacks.iter().filter(|(s, _)| pick(s)).map(|(_, c)| c).sum();
    picked as f64 / total.max(1) as f64
}

/// The five most sampled leaves with their shares, for a failure's message.
fn top_leaves(stacks: &[(String, u64)]) -> String {
    let mut by_leaf = std::collections::BTreeMap::<&str, u64>::new();
    for (stack, count) in stacks {
        *by_leaf.entry(leaf(stack)).or_default() += count;
    }
    let total: u64 = by_leaf.values().sum();
    let mut leaves: Vec<_> = by_leaf.into_iter().collect();
    leaves.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    leaves
        .iter()
        .take(5)
        .map(|(name, count)| format!("{name} {:.3}", *count as f64 / total.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

fn leaf(stack: &str) -> &str {
    stack.rsplit(';').next().unwrap_or("")
}

#[test]
fn a_seventy_thirty_split_of_cpu_time_shows_as_seventy_thirty() {
    let _turn = common::alone();
    let mut rounds = RandomRounds::new();
    let stop = worker("burn-split", move || {
        let (t0, round) = (Instant::now(), rounds.next());
        spin_until(t0 + round * 7 / 10, burn_seventy);
        spin_until(t0 + round, burn_thirty);
    });
    timing_attempts(3, || {
        let (json, _dir) = profile_self(&["-d", "3s", "-F", "499"]);
        let stacks = thread_stacks(&json, "burn-split");
        let samples: u64 = stacks.iter().map(|(_, c)| c).sum();
        // 3 s at 499 Hz of one busy thread is ~1500 samples.
        ensure!(
            samples > 1000,
            "only {samples} samples of the burning thread"
        );
        let seventy = share_of(&stacks, |s| leaf(s).contains("burn_seventy"));
        let thirty = share_of(&stacks, |s| leaf(s).contains("burn_thirty"));
        // The rest is the clock reads between calls, spread evenly over both. Where samples land
        // in the code does not depend on the machine's load, so this and the checks of the
        // stacks below are judged in every attempt (a busy machine would hide them otherwise).
        assert!(
            seventy + thirty > 0.85,
            "only {:.3} of samples in the two; the leaves: {}",
            seventy + thirty,
            top_leaves(&stacks)
        );
        let split = seventy / (seventy + thirty);
        ensure!(
            (split - 0.70).abs() < 0.04,
            "burn_seventy is {split:.3} of the two, not 0.70"
        );
        // Each sits under the loop that called it: the stacks are whole.
        let whole = share_of(&stacks, |s| {
            s.contains("spin_until;") && (s.ends_with("burn_seventy") || s.ends_with("burn_thirty"))
        });
        assert!(
            whole > 0.8,
            "only {whole:.3} of samples have spin_until under the burner"
        );
        // The summary's table agrees with the file.
        let top = &json["summary"]["top_self"];
        assert!(
            top.as_array()
                .unwrap()
                .iter()
                .take(3)
                .any(|f| f["name"].as_str().unwrap().contains("burn_seventy")),
            "burn_seventy not among the top self functions: {top}"
        );
        Ok(())
    });
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn time_spent_in_system_calls_shows_as_kernel_frames() {
    let _turn = common::alone();
    let mut zero = std::fs::File::open("/dev/zero").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut rounds = RandomRounds::new();
    let stop = worker("burn-kernel", move || {
        let (t0, round) = (Instant::now(), rounds.next());
        spin_until(t0 + round * 6 / 10, burn_seventy);
        read_zeroes_until(t0 + round, &mut zero, &mut buf);
    });
    timing_attempts(3, || {
        let (json, _dir) = profile_self(&["-d", "3s", "-F", "499"]);
        let stacks = thread_stacks(&json, "burn-kernel");
        let kernel = share_of(&stacks, |s| leaf(s).ends_with("_[k]"));
        // 4 ms of each 10 ms in read(2) of /dev/zero, nearly all of it the kernel's copy.
        ensure!(
            (kernel - 0.40).abs() < 0.06,
            "kernel leaves {kernel:.3} of samples, expected 0.40"
        );
        // And the kernel frames sit under the function that made the call.
        let under_reader = share_of(&stacks, |s| {
            leaf(s).ends_with("_[k]") && s.contains("read_zeroes_until")
        });
        assert!(
            under_reader > 0.8 * kernel,
            "only {under_reader:.3} of kernel samples under read_zeroes_until"
        );
        Ok(())
    });
    stop.store(true, Ordering::Relaxed);
}

static BLOCKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[inline(never)]
fn block_here() {
    thread::sleep(Duration::from_millis(5));
    // Work after the call keeps it a call, not a tail jump that would drop this frame.
    BLOCKS.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn a_thread_that_blocks_at_a_known_rate_shows_in_the_context_switch_profile() {
    let _turn = common::alone();
    let stop = worker("blocker", block_here);
    timing_attempts(3, || {
        let (blocks_before, t0) = (BLOCKS.load(Ordering::Relaxed), Instant::now());
        let (json, _dir) = profile_self(&["-d", "2s", "--event", "cswitch"]);
        // The thread's own rate of sleeps while kiln ran, over the window perf sampled (from
        // its first switch to its last).
        let rate =
            (BLOCKS.load(Ordering::Relaxed) - blocks_before) as f64 / t0.elapsed().as_secs_f64();
        let expected = rate * json["sampled_s"].as_f64().unwrap();
        let stacks = thread_stacks(&json, "blocker");
        let switches: u64 = stacks.iter().map(|(_, c)| c).sum();
        ensure!(
            (switches as f64 - expected).abs() <= 0.08 * expected + 3.0,
            "{switches} switches of the blocking thread; it slept {expected:.0} times meanwhile"
        );
        // Where the switches happen does not depend on the machine's load: judged every time.
        let in_block_here = share_of(&stacks, |s| s.contains("block_here"));
        assert!(
            in_block_here > 0.9,
            "block_here on {in_block_here:.3} of the switch stacks"
        );
        Ok(())
    });
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn a_process_that_exits_mid_profile_keeps_what_was_taken() {
    let _turn = common::alone();
    // A shell that burns CPU until it is killed 1.5 s into a 20 s profile.
    let mut child = std::process::Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let pid_to_kill = child.id() as i32;
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(1500));
        // SAFETY: kill(2) of the child this test started.
        unsafe { libc::kill(pid_to_kill, libc::SIGKILL) };
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let pid = child.id().to_string();
    let started = Instant::now();
    let result = kiln(&[
        "profile",
        "--pid",
        &pid,
        "-d",
        "20s",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    killer.join().unwrap();
    // The shell's own CPU time, from its stat while it is a zombie (not yet waited for).
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let cpu_s = (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0;
    let _ = child.wait();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited for the full -d"
    );
    let json = json_with_exit(&result, 3);
    assert_eq!(json["status"], "interrupted");
    assert_eq!(json["target_exited"], true);
    // At most 99 samples per CPU-second of the shell (perf attaches some way into its life).
    let samples = json["summary"]["samples"].as_f64().unwrap();
    assert!(
        samples >= 20.0 && samples <= 1.1 * 99.0 * cpu_s + 5.0,
        "{samples} samples of {cpu_s} s of CPU: {json}"
    );
    let m = manifest(&out);
    assert_eq!(m["status"], "interrupted");
    assert!(m["status_reason"].as_str().unwrap().contains("exited"));
    assert!(out.join("flame.svg").exists());
}

#[test]
fn bad_targets_get_one_clear_line() {
    let _turn = common::group("profile");
    for (args, expected) in [
        (
            vec!["profile", "--pid", "999999999"],
            "no process 999999999",
        ),
        (vec!["profile"], "--pid PID or --port PORT"),
        (
            vec!["profile", "--pid", "1", "-F", "0"],
            "--frequency is out of range",
        ),
        (
            vec!["profile", "import", "/nonexistent/profile.pb.gz"],
            "cannot read /nonexistent/profile.pb.gz",
        ),
    ] {
        let out = kiln(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_missing_perf_says_what_to_install() {
    let _turn = common::group("profile");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "profile",
            "--pid",
            &std::process::id().to_string(),
            "-d",
            "1s",
            "--out",
        ])
        .arg(tempfile::tempdir().unwrap().path().join("run"))
        .env("PERF", "/nonexistent/perf")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("apt install linux-perf"), "{stderr}");
}

#[test]
fn collapsed_files_import_and_diff_with_hostile_names_kept_as_text() {
    let _turn = common::group("profile");
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.folded");
    let after = dir.path().join("after.folded");
    std::fs::write(
        &before,
        "main;parse_json 40\nmain;<script>alert(1)</script> 30\nmain;idle 30\n",
    )
    .unwrap();
    std::fs::write(
        &after,
        "main;parse_json 120\nmain;<script>alert(1)</script> 40\nmain;idle 40\nnot a stack line\n",
    )
    .unwrap();

    let out = dir.path().join("import");
    let json = json_with_exit(
        &kiln(&[
            "profile",
            "import",
            after.to_str().unwrap(),
            "--json",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    assert_eq!(json["source"]["format"], "collapsed");
    assert_eq!(json["source"]["ignored_lines"], 1);
    assert_eq!(json["summary"]["samples"], 200);
    assert_eq!(json["summary"]["top_self"][0]["name"], "parse_json");
    assert_eq!(json["summary"]["top_self"][0]["self_pct"], 60.0);
    let svg = std::fs::read_to_string(out.join("flame.svg")).unwrap();
    assert!(!svg.contains("<script>alert"));

    let out = dir.path().join("diff");
    let json = json_with_exit(
        &kiln(&[
            "profile",
            "diff",
            before.to_str().unwrap(),
            after.to_str().unwrap(),
            "--json",
            "--out",
            out.to_str().unwrap(),
        ]),
        0,
    );
    let change = &json["biggest_self_changes"][0];
    assert_eq!(change["name"], "parse_json");
    assert_eq!(
        (change["before_pct"].as_f64(), change["after_pct"].as_f64()),
        (Some(40.0), Some(60.0))
    );
    let folded = std::fs::read_to_string(out.join("diff.folded")).unwrap();
    // before scaled from 100 to 200 samples: parse_json 40 -> 80 beside 120.
    assert!(folded.contains("main;parse_json 80 120"), "{folded}");
    assert!(!std::fs::read_to_string(out.join("diff.svg"))
        .unwrap()
        .contains("<script>alert"));
}

#[test]
fn a_profiled_load_run_finds_the_targets_hot_function_and_report_shows_it_again() {
    let _turn = common::alone();
    // Each request burns 300 us of CPU in a known function, then answers.
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior {
        cpu_per_request: Duration::from_micros(300),
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let pid = std::process::id().to_string();
    let url = target.url("/");
    let result = kiln(&[
        "run",
        &url,
        "-c",
        "2",
        "-d",
        "2s",
        "--warmup",
        "1s",
        "--watch-pid",
        &pid,
        "--profile",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let json = json_with_exit(&result, 0);
    let profile = &json["profile"];
    assert!(
        profile.is_object(),
        "no profile: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(
        profile["summary"]["samples"].as_u64().unwrap() > 50,
        "{profile}"
    );
    // Over the measured 2 s only, not the warm-up.
    let secs = profile["duration_s"].as_f64().unwrap();
    assert!((1.5..3.0).contains(&secs), "profiled {secs} s");
    // The connection threads spend nearly all their CPU in the burner.
    let folded = std::fs::read_to_string(out.join("profile.folded")).unwrap();
    let conn: Vec<(String, u64)> = folded
        .lines()
        .filter_map(|l| {
            let (s, c) = l.rsplit_once(' ')?;
            Some((s.to_string(), c.parse().ok()?))
        })
        .filter(|(s, _)| s.starts_with("target-conn;"))
        .collect();
    let burn = share_of(&conn, |s| s.contains("burn_cpu_for_request"));
    assert!(
        burn > 0.8,
        "burn_cpu_for_request on {burn:.3} of the connection threads' samples"
    );
    let m = manifest(&out);
    let parts: Vec<&str> = m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert!(
        parts.contains(&"flame.svg") && parts.contains(&"profile.json"),
        "{parts:?}"
    );
    assert!(!out.join("perf.data").exists(), "perf.data is left behind");
    // kiln report shows the same profile from the directory alone.
    let report = kiln(&["report", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("Profile    pid"), "{text}");
    assert!(
        text.contains("burn_cpu_for_request") || text.contains("Top self"),
        "{text}"
    );
    let again = json_with_exit(&kiln(&["report", out.to_str().unwrap(), "--json"]), 0);
    assert_eq!(again["profile"], json["profile"]);
}

#[test]
fn profile_without_a_process_to_watch_is_refused() {
    let _turn = common::group("profile");
    let out = kiln(&["run", "http://127.0.0.1:9/", "--profile", "-d", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--profile needs the process"), "{stderr}");
}

/// The children of `pid` named `comm`, from /proc.
fn children_named(pid: u32, comm: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 2..].split(' ').nth(1).unwrap_or("");
        if &stat[open + 1..close] == comm && ppid == pid.to_string() {
            found.push(child);
        }
    }
    found
}

/// A sleeping process (no on-CPU sample will come), `kiln profile` of it for two minutes
/// writing to `out`, and the perf that kiln started, once it runs.
fn profiling_a_sleeper(out: &std::path::Path) -> (std::process::Child, std::process::Child, i32) {
    let target = std::process::Command::new("sleep")
        .arg("120")
        .spawn()
        .unwrap();
    let kiln_process = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["profile", "--pid", &target.id().to_string(), "-d", "120s"])
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let perf = loop {
        if let Some(&p) = children_named(kiln_process.id(), "perf").first() {
            break p;
        }
        assert!(Instant::now() < deadline, "perf never started");
        thread::sleep(Duration::from_millis(50));
    };
    (target, kiln_process, perf)
}

#[test]
fn perf_stops_when_kiln_is_killed_mid_profile() {
    let _turn = common::alone();
    let dir = tempfile::tempdir().unwrap();
    let (mut target, mut kiln_process, perf) = profiling_a_sleeper(&dir.path().join("run"));
    // As the OOM killer would: no chance for kiln to clean up.
    kiln_process.kill().unwrap();
    kiln_process.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    // The orphan is re-parented (to init or a subreaper) and reaped there once it exits.
    while std::fs::read_to_string(format!("/proc/{perf}/stat"))
        .is_ok_and(|s| !s[s.rfind(')').unwrap()..].starts_with(") Z"))
    {
        assert!(
            Instant::now() < deadline,
            "perf {perf} still runs 15 s after kiln was killed"
        );
        thread::sleep(Duration::from_millis(100));
    }
    let _ = target.kill();
    let _ = target.wait();
}

#[test]
fn ctrl_c_before_the_first_sample_leaves_no_perf_data() {
    let _turn = common::alone();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (mut target, mut kiln_process, _) = profiling_a_sleeper(&out);
    thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) of the kiln this test started.
    unsafe { libc::kill(kiln_process.id() as i32, libc::SIGINT) };
    kiln_process.wait().unwrap();
    assert!(out.join("run.json").exists());
    assert!(!out.join("perf.data").exists(), "perf.data left in the run");
    let _ = target.kill();
    let _ = target.wait();
}

/// Sets kernel.perf_event_paranoid while it lives; the value before is put back when dropped.
struct Paranoid(String);

impl Paranoid {
    fn set(level: &str) -> Self {
        let path = "/proc/sys/kernel/perf_event_paranoid";
        let before = std::fs::read_to_string(path).expect("perf_event_paranoid reads");
        std::fs::write(path, level)
            .expect("perf_event_paranoid is written (the tests run as root)");
        Self(before.trim().to_string())
    }
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/perf_event_paranoid", &self.0);
    }
}

/// A user who may not profile the target (not root, perf_event_paranoid 2, the target another
/// user's) was told "the profile has no samples", then "the run was not profiled (add
/// --profile)". The summary and the finding now say why, with the command that allows it.
#[test]
fn a_user_perf_refuses_is_told_why_and_the_command_that_allows_it() {
    // alone: the host's perf setting changes for the test (root's perf is not bound by it)
    let _turn = common::alone();
    let target = kiln_targets::TargetServer::start(kiln_targets::Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // nobody writes the run directory
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let dir = tmp.path().join("r");
    let out = {
        let _paranoid = Paranoid::set("2");
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_kiln"))
            .args(["run", &target.url("/"), "-d", "2s", "-c", "2", "--profile"])
            .args(["--watch-pid", &std::process::id().to_string(), "--out"])
            .arg(&dir)
            .current_dir(tmp.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("setpriv runs kiln")
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let fix = "sudo sysctl -w kernel.perf_event_paranoid=-1";
    let profile_line = stdout
        .lines()
        .find(|l| l.starts_with("Profile "))
        .unwrap_or_else(|| panic!("no Profile line:\n{stdout}"));
    assert!(
        profile_line.contains("not recorded")
            && profile_line.contains("another user's process")
            && profile_line.contains("uid 0")
            && profile_line.contains(fix),
        "{profile_line}"
    );
    let findings: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("findings.json")).expect("findings.json"),
    )
    .unwrap();
    let reason = findings["unjudged"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["rule"] == "cpu.categories")
        .and_then(|u| u["reason"].as_str())
        .unwrap_or_else(|| panic!("{findings:#}"))
        .to_string();
    assert!(
        reason.contains("--profile was given") && reason.contains(fix),
        "{reason}"
    );
    assert!(!stdout.contains("(add --profile)"), "{stdout}");
}
