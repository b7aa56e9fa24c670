//! Helpers shared by the binary's integration tests: run `kiln`, read its JSON and records.
#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs the `kiln` binary built for these tests, with no standard input.
pub fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kiln runs")
}

/// Runs `kiln` with these environment variables set.
pub fn kiln_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("kiln runs")
}

/// The JSON kiln printed on stdout; on failure the panic shows both streams.
pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A run directory's `run.json`.
pub fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

/// Asserts kiln exited with `code` (showing its stderr if not) and returns its JSON.
pub fn json_with_exit(out: &Output, code: i32) -> Value {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_of(out)
}

/// The finding of `rule` in a run's JSON (`kiln run --json`), if it found one.
pub fn finding<'a>(run: &'a Value, rule: &str) -> Option<&'a Value> {
    run["findings"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == rule)
}

/// `kiln profile --pid PID --json --out OUT` plus `args`, expected to complete; its JSON.
pub fn profile_pid(pid: u32, out: &Path, args: &[&str]) -> Value {
    let pid = pid.to_string();
    let mut all = vec![
        "profile",
        "--pid",
        &pid,
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    json_with_exit(&kiln(&all), 0)
}
pub mod apps;

/// Headless Chromium (Debian's package; scripts/test.sh installs it).
pub fn chromium() -> &'static str {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("Chromium is installed (scripts/test.sh installs it)")
}

fn headless(page: &Path, fragment: &str, window: &str, action: &str) -> Output {
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            window,
            "--virtual-time-budget=5000",
            action,
        ])
        .arg(format!("file://{}{fragment}", page.display()))
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs")
}

/// The page's DOM after its scripts ran.
pub fn dump_dom(page: &Path) -> String {
    dump_dom_at(page, "")
}

/// As `dump_dom`, with a fragment (`#search=...`) in the page's address.
pub fn dump_dom_at(page: &Path, fragment: &str) -> String {
    String::from_utf8_lossy(
        &headless(page, fragment, "--window-size=1300,900", "--dump-dom").stdout,
    )
    .into_owned()
}

/// A PNG screenshot of the page in a window `width` x `height`.
pub fn screenshot(page: &Path, png: &Path, width: u32, height: u32) {
    let out = headless(
        page,
        "",
        &format!("--window-size={width},{height}"),
        &format!("--screenshot={}", png.display()),
    );
    assert!(
        png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A target that answers in 1 ms, except that the whole server stalls for 400 ms every 3 s:
/// slow requests that come together (a second copy waits as long as the first).
pub fn stalling_target() -> kiln_targets::TargetServer {
    kiln_targets::TargetServer::start(kiln_targets::Behavior {
        service_time: std::time::Duration::from_millis(1),
        stall: Some(kiln_targets::Stall {
            every: std::time::Duration::from_secs(3),
            length: std::time::Duration::from_millis(400),
        }),
        ..Default::default()
    })
    .expect("the stalling target starts")
}
