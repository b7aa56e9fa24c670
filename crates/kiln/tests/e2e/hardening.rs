//! What an adversarial pass found (issue 12), each reproduced: a wrong port, credentials in
//! the Host header, a target that never answers, signals, a watched process that exits, too
//! few file descriptors. Each test is the reproduction; it failed before its fix.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{json_of, json_with_exit, kiln, manifest};
use kiln_targets::{Behavior, TargetServer};

/// `kiln` with the open-files limit set to `files` (soft and hard), as `ulimit -n` would.
fn kiln_with_open_files(files: u64, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(args).stdin(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: files as libc::rlim_t,
                rlim_max: files as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().expect("kiln runs")
}

/// `kiln run URL ARGS --json --out DIR` started in the background.
fn spawn_run(url: &str, args: &[&str], dir: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("run")
        .arg(url)
        .args(args)
        .args(["--json", "--out", dir.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &std::process::Child, signal: i32) {
    // SAFETY: kill(2) of a child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
}

#[test]
fn a_port_that_does_not_fit_is_refused_instead_of_loading_port_80() {
    let _turn = common::beside();
    for url in ["http://127.0.0.1:99999/", "http://127.0.0.1:80800/x"] {
        let out = kiln(&["run", url, "-d", "1s"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.contains("1 to 65535"), "{url}: {stderr}");
    }
}

#[test]
fn durations_too_long_for_the_clock_are_refused_not_panicked_on() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let url = target.url("/");
    for flag in ["-d", "--warmup", "--timeout"] {
        let out = kiln(&["run", &url, flag, "500000000000y"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains("bad duration"), "{flag}: {stderr}");
        assert!(!stderr.contains("panicked"), "{flag}: {stderr}");
    }
    assert_eq!(target.answered(), 0);
}

/// A one-connection HTTP server that answers every request with 200 and keeps the request
/// heads it read.
fn recording_server() -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut heads = Vec::new();
        listener.set_nonblocking(false).unwrap();
        // kiln's preflight connection, then the run's one connection.
        for _ in 0..2 {
            let Ok((mut stream, _)) = listener.accept() else {
                break;
            };
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stream.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    heads.push(String::from_utf8_lossy(&buf[..end]).to_string());
                    buf.drain(..end + 4);
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                }
                if heads.len() >= 3 {
                    return heads;
                }
            }
        }
        heads
    });
    (format!("127.0.0.1:{port}"), handle)
}

#[test]
fn credentials_in_the_url_become_basic_auth_and_a_bare_query_asks_for_the_root() {
    let _turn = common::beside();
    let (addr, server) = recording_server();
    let url = format!("http://al%40ice:s3cret@{addr}?q=1");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln(&[
        "run",
        &url,
        "-c",
        "1",
        "-t",
        "1",
        "-d",
        "1s",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let heads = server.join().unwrap();
    assert!(
        !heads.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = heads[0].to_ascii_lowercase();
    assert!(head.starts_with("get /?q=1 http/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("\r\nhost: {addr}\r\n")), "{head}");
    // base64("al@ice:s3cret")
    assert!(
        heads[0].contains("authorization: Basic YWxAaWNlOnMzY3JldA=="),
        "{head}"
    );
    // The password is in neither the summary nor the run record.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("s3cret"), "{stdout}");
    let record = std::fs::read_to_string(dir.join("run.json")).unwrap();
    assert!(!record.contains("s3cret"), "{record}");
}

#[test]
fn a_target_that_accepts_and_never_answers_is_dead_without_waiting_for_timeouts() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior {
        hang_after: Some(0),
        ..Default::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let started = Instant::now();
    // The default --timeout (10 s) is longer than --dead-after: no request ever fails.
    let out = kiln(&[
        "run",
        &target.url("/"),
        "-c",
        "4",
        "-d",
        "60s",
        "--dead-after",
        "2s",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let run = json_with_exit(&out, 3);
    let reason = run["status_reason"].as_str().unwrap();
    assert!(reason.contains("stopped answering"), "{reason}");
    assert!(reason.contains("waiting for an answer"), "{reason}");
    // Cut, not timed out: the requests in flight are abandoned, none counted as a timeout.
    let phase = &run["phases"][0];
    assert_eq!(phase["abandoned"].as_u64(), Some(4), "{phase}");
    assert_eq!(phase["failed"].as_u64(), Some(0), "{phase}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "waited {:?}: the 10 s timeouts were waited for",
        started.elapsed()
    );
    assert_eq!(manifest(&dir)["status"], "interrupted");
}

#[test]
fn ctrl_c_cuts_requests_in_flight_to_a_stalled_target_and_counts_them_abandoned() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior {
        hang_after: Some(50),
        ..Default::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let child = spawn_run(
        &target.url("/"),
        &["--rate", "100", "-d", "60s", "--dead-after", "60s"],
        &dir,
    );
    std::thread::sleep(Duration::from_millis(2500));
    let stopped = Instant::now();
    signal(&child, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let waited = stopped.elapsed();
    let run = json_with_exit(&out, 130);
    let total = &run["total"];
    assert_eq!(total["requests"].as_u64(), Some(50), "{total}");
    assert_eq!(total["failed"].as_u64(), Some(0), "{total}");
    assert!(total["abandoned"].as_u64().unwrap() > 0, "{total}");
    assert!(
        waited < Duration::from_secs(6),
        "waited {waited:?} for requests that would time out after 10 s"
    );
}

#[test]
fn sigterm_and_sighup_stop_the_run_named_for_themselves() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    for (signo, name, code) in [
        (libc::SIGTERM, "SIGTERM", 143),
        (libc::SIGHUP, "SIGHUP", 129),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r");
        let child = spawn_run(&target.url("/"), &["--rate", "100", "-d", "60s"], &dir);
        std::thread::sleep(Duration::from_millis(1500));
        signal(&child, signo);
        let out = child.wait_with_output().unwrap();
        let run = json_with_exit(&out, code);
        assert_eq!(run["status"], "interrupted", "{name}");
        assert_eq!(run["status_reason"], format!("interrupted by {name}"));
        assert_eq!(manifest(&dir)["status"], "interrupted", "{name}");
    }
}

#[test]
fn a_watched_process_that_exits_ends_the_run_as_interrupted_with_exit_3() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let mut watched = Command::new("sleep").arg("2").spawn().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let pid = watched.id().to_string();
    let reaper = std::thread::spawn(move || watched.wait());
    let out = kiln(&[
        "run",
        &target.url("/"),
        "--rate",
        "50",
        "-d",
        "60s",
        "--watch-pid",
        &pid,
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let _ = reaper.join();
    let run = json_with_exit(&out, 3);
    let reason = run["status_reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("process {pid} exited")),
        "{reason}"
    );
    assert!(run["total"]["duration_s"].as_f64().unwrap() < 30.0);
}

#[test]
fn too_few_file_descriptors_is_an_error_before_any_load() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let out = kiln_with_open_files(300, &["run", &target.url("/"), "-c", "5000", "-d", "2s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("-c 5000 needs about"), "{stderr}");
    assert!(stderr.contains("ulimit"), "{stderr}");
    assert_eq!(target.answered(), 0);

    // The open model's default cap (1000 connections) is lowered to fit, and said so.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = kiln_with_open_files(
        600,
        &[
            "run",
            &target.url("/"),
            "--rate",
            "50",
            "-d",
            "1s",
            "--json",
            "--out",
            dir.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        // 600 files less a quarter kept for kiln's own (a limit this small keeps 150, not 256)
        stderr.contains("--max-connections lowered from 1000 to 450"),
        "{stderr}"
    );
    let run = json_of(&out);
    assert_eq!(run["status"], "complete", "{stderr}");
}

/// A short complete run of the default target in `dir`.
fn short_run(dir: &Path) -> TargetServer {
    let target = TargetServer::start(Behavior::default()).unwrap();
    let out = kiln(&[
        "run",
        &target.url("/"),
        "--rate",
        "50",
        "-d",
        "3s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    target
}

#[test]
fn report_on_a_closed_or_full_stdout_exits_without_a_panic() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let _target = short_run(&dir);
    // A reader that went away: `kiln report DIR | true`. The read end is closed before kiln
    // starts (closed after, kiln could write its whole page into the pipe's buffer first and
    // exit 0: it did in a CI run, four tests at once beside it).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["report", dir.to_str().unwrap()])
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    // A full disk.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["report", dir.to_str().unwrap()])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
}

#[test]
fn a_complete_record_cut_in_half_or_with_a_second_twice_is_reported_with_warnings() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let _target = short_run(&dir);
    let seconds = dir.join("load-seconds.jsonl");
    let text = std::fs::read_to_string(&seconds).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let whole = json_of(&kiln(&["report", dir.to_str().unwrap(), "--json"]));
    assert_eq!(whole["warnings"], serde_json::json!([]));
    // The first second written twice: counted once, and said.
    let twice = format!("{}\n{}\n", lines[0], text);
    std::fs::write(&seconds, twice).unwrap();
    let report = json_of(&kiln(&["report", dir.to_str().unwrap(), "--json"]));
    assert_eq!(report["total"]["requests"], whole["total"]["requests"]);
    assert!(report["warnings"][0]
        .as_str()
        .unwrap()
        .contains("recorded again"));
    // Cut after its first second, though run.json says complete.
    std::fs::write(&seconds, format!("{}\n", lines[0])).unwrap();
    let out = kiln(&["report", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Warning    run.json says complete"), "{text}");
}

#[test]
fn a_run_json_pointing_outside_the_run_is_refused_by_report() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let _target = short_run(&dir);
    let manifest_path = dir.join("run.json");
    let text = std::fs::read_to_string(&manifest_path).unwrap();
    for hostile in ["/dev/zero", "../../../../etc/passwd"] {
        let changed = text.replace("\"load-seconds.jsonl\"", &format!("\"{hostile}\""));
        assert_ne!(changed, text);
        std::fs::write(&manifest_path, changed).unwrap();
        let out = kiln(&["report", dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{hostile}: {stderr}");
        assert!(
            stderr.contains("inside the run directory"),
            "{hostile}: {stderr}"
        );
    }
}

#[test]
fn two_runs_in_the_same_second_get_two_directories() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args([
                "run",
                &target.url("/"),
                "-d",
                "1s",
                "-c",
                "1",
                "--name",
                "same",
                "-q",
            ])
            .current_dir(tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs = std::fs::read_dir(tmp.path().join("runs")).unwrap().count();
    assert_eq!(runs, 2);
}

#[test]
fn queries_with_an_unwritable_html_marks_the_run_failed() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let spans = tmp.path().join("spans.json");
    std::fs::write(&spans, r#"{"resourceSpans":[]}"#).unwrap();
    let dir = tmp.path().join("q");
    let out = kiln(&[
        "queries",
        spans.to_str().unwrap(),
        "--html",
        "/proc/no/such/dir/out.html",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(manifest(&dir)["status"], "failed");
}

#[test]
fn a_body_file_without_end_is_refused_not_read_into_memory() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    // a device is refused at once, as a FIFO would be (which once hung kiln forever)
    let out = kiln(&["run", &target.url("/"), "-m", "POST", "-b", "@/dev/zero"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a device, not a regular file"), "{stderr}");
    // a regular file past the bound is refused by its size
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    let at = format!("@{}", big.display());
    let out = kiln(&["run", &target.url("/"), "-m", "POST", "-b", &at]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("larger than 67108864 bytes"), "{stderr}");
    assert_eq!(target.answered(), 0);
}

#[test]
fn a_load_thread_that_panics_fails_the_run_instead_of_completing_it() {
    let _turn = common::beside();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run",
            &target.url("/"),
            "-t",
            "2",
            "-c",
            "4",
            "-d",
            "2s",
            "--out",
        ])
        .arg(&dir)
        .env("KILN_FAULT_PANIC_LOAD_THREAD", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a load thread failed"), "{stderr}");
    assert_eq!(manifest(&dir)["status"], "failed");
}

/// `--spawn`: the target kiln started goes with kiln. A Ctrl-C (SIGINT to the terminal's
/// process group) reaches kiln alone, which ends the run as interrupted (130) and stops the
/// target; it used to reach the target too, which died first and could turn the run into "the
/// watched process exited" (3). A SIGKILL of kiln, which runs none of its cleanup, takes the
/// target along (it used to be left running, holding its port), also a target that ignores
/// SIGTERM (kiln's death sent it SIGTERM, which it shrugged off).
#[test]
fn a_spawned_target_goes_with_kiln_on_ctrl_c_and_on_sigkill() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    // a target that notes a SIGINT instead of dying of it, and ignores SIGTERM
    let script = tmp.path().join("target.py");
    std::fs::write(
        &script,
        "import http.server, signal, sys\n\
         port, note = int(sys.argv[1]), sys.argv[2]\n\
         signal.signal(signal.SIGINT, lambda *_: open(note, 'w').write('SIGINT'))\n\
         signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
         http.server.ThreadingHTTPServer(('127.0.0.1', port), \
         http.server.SimpleHTTPRequestHandler).serve_forever()\n",
    )
    .unwrap();
    for (signo, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGKILL, "SIGKILL")] {
        let port = common::apps::free_port();
        let dir = tmp.path().join(name);
        let note = tmp.path().join(format!("{name}-note"));
        let target = format!("python3 {} {port} {}", script.display(), note.display());
        let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["run", &format!("http://127.0.0.1:{port}/"), "--rate", "20"])
            .args([
                "-c", "2", "-d", "60s", "--spawn", &target, "--json", "--out",
            ])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // as a shell runs a command: its own process group, which a terminal signals
            .process_group(0)
            .spawn()
            .unwrap();
        // the run is under way once it has recorded a second of load
        let seconds = dir.join("load-seconds.jsonl");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&seconds).map_or(true, |s| !s.contains("\"second\"")) {
            assert!(
                Instant::now() < deadline,
                "{name}: no second of load in 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Ctrl-C goes to the process group; kill -9 to kiln alone
        let to = if signo == libc::SIGINT {
            -(child.id() as i32)
        } else {
            child.id() as i32
        };
        // SAFETY: kill(2) of the process (group) this test started.
        assert_eq!(unsafe { libc::kill(to, signo) }, 0);
        let out = child.wait_with_output().unwrap();
        if signo == libc::SIGINT {
            let run = json_with_exit(&out, 130);
            assert_eq!(run["status_reason"], "interrupted by Ctrl-C", "{run}");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(
                Instant::now() < deadline,
                "{name}: the spawned target still serves port {port} 5 s after kiln ended"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            !note.exists(),
            "{name}: the target got the terminal's SIGINT"
        );
    }
}

/// `--spawn` through a wrapper: the server is the wrapper's child, once in its process group
/// and once in a session of its own (`setsid`). Stopping the leader alone left the server
/// running and holding its port; now the whole family stops with the run.
#[test]
fn a_spawned_wrappers_children_stop_with_the_run() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    for (name, how) in [("group", ""), ("session", "setsid ")] {
        let port = common::apps::free_port();
        let wrapper = format!(
            "sh -c '{how}python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & wait'"
        );
        let dir = tmp.path().join(name);
        let out = kiln(&[
            "run",
            &format!("http://127.0.0.1:{port}/"),
            "--rate",
            "20",
            "-c",
            "2",
            "-d",
            "2s",
            "--spawn",
            &wrapper,
            "--json",
            "--out",
            dir.to_str().unwrap(),
        ]);
        json_with_exit(&out, 0);
        let deadline = Instant::now() + Duration::from_secs(2);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(
                Instant::now() < deadline,
                "{name}: the wrapper's server still serves port {port} after kiln ended"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
