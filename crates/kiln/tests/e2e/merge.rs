//! Shards and `kiln merge`: N local `kiln run --shard i/N` processes against one target,
//! started together with `--start-at`, merged into one record; against a single process on
//! the same schedule, and with a shard cut short, missing or running another plan.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use common::{json_with_exit, kiln, latency_of};
use kiln_record::LatencyHistogram;
use kiln_targets::{Behavior, TargetServer};
use serde_json::Value;

/// 2 ms a request: latency known to within scheduling noise.
fn target() -> TargetServer {
    TargetServer::start(Behavior {
        service_time: Duration::from_millis(2),
        ..Default::default()
    })
    .unwrap()
}

/// An RFC 3339 time `secs` from now.
fn in_secs(secs: u64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(secs)).to_string()
}

/// Starts shard `i` of `n` as its own process.
fn shard(url: &str, i: usize, n: usize, start_at: &str, out: &Path, load: &[&str]) -> Child {
    let shard = format!("{i}/{n}");
    let mut args = vec![
        "run",
        url,
        "--shard",
        &shard,
        "--start-at",
        start_at,
        "--quiet",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(load);
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `n` shards together; their run directories.
fn shards(url: &str, n: usize, tmp: &Path, load: &[&str]) -> Vec<PathBuf> {
    let start_at = in_secs(2);
    let dirs: Vec<PathBuf> = (0..n).map(|i| tmp.join(format!("shard-{i}"))).collect();
    let children: Vec<Child> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| shard(url, i, n, &start_at, d, load))
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dirs
}

fn merge(dirs: &[PathBuf], out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["merge".to_string()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    args.extend(["--out".into(), out.display().to_string(), "--json".into()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    kiln(&args)
}

fn shards_json(dir: &Path) -> Vec<Value> {
    serde_json::from_str::<Value>(&std::fs::read_to_string(dir.join("shards.json")).unwrap())
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn shards_merged_are_the_single_process_plan() {
    let _turn = common::group("merge");
    let target = target();
    let url = target.url("/");
    let tmp = tempfile::tempdir().unwrap();
    // a threshold every request fails: the shards exit 0, the merge 99
    let load = ["--rate", "400", "-d", "5s", "--threshold", "p50<10us"];
    let single = json_with_exit(
        &kiln(&[
            "run",
            &url,
            "--rate",
            "400",
            "-d",
            "5s",
            "--json",
            "--quiet",
            "--out",
            tmp.path().join("single").to_str().unwrap(),
        ]),
        0,
    );
    for n in [2, 4] {
        let dirs = shards(&url, n, &tmp.path().join(format!("n{n}")), &load);
        let out = tmp.path().join(format!("merged-{n}"));
        let merged = json_with_exit(&merge(&dirs, &out, &[]), 99);
        assert_eq!(merged["thresholds"][0]["ok"], false, "{merged:#}");
        assert_eq!(merged["status"], "complete", "{merged:#}");
        let total = &merged["total"];
        // the uniform schedule of 400/s for 5 s is 2000 arrivals, dealt among the shards
        assert_eq!(
            total["scheduled"], single["total"]["scheduled"],
            "{n} shards"
        );
        // Each shard was dealt its share of the arrivals, and every one is accounted for:
        // sent and answered, or unsent (an arrival due in the last milliseconds that a busy
        // host's pacer could not release before the deadline: 1 of 2,000 in a CI run). The
        // merged figures are the shards' added, exactly.
        let shard_figures = shards_json(&out);
        let of = |s: &Value, k: &str| s[k].as_u64().unwrap();
        for s in &shard_figures {
            assert_eq!(of(s, "scheduled"), 2000 / n as u64, "{s:#}");
            assert_eq!(
                of(s, "requests") + of(s, "unsent"),
                of(s, "scheduled"),
                "{s:#}"
            );
            assert!(of(s, "unsent") <= 5, "{s:#}");
        }
        let requests: u64 = shard_figures.iter().map(|s| of(s, "requests")).sum();
        assert_eq!(total["requests"], requests, "{n} shards");
        assert_eq!(
            total["unsent"].as_u64().unwrap(),
            shard_figures.iter().map(|s| of(s, "unsent")).sum::<u64>(),
            "{n} shards"
        );
        // the merged arrival rate is the plan's
        let rate = total["throughput_rps"].as_f64().unwrap();
        assert!((380.0..=420.0).contains(&rate), "{rate}");
        // the merged histogram is the shards' histograms added, exactly
        let mut added = LatencyHistogram::new();
        for d in &dirs {
            added.merge(&latency_of(d));
        }
        let merged_h = latency_of(&out);
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(merged_h.quantile_us(q), added.quantile_us(q), "q {q}");
        }
        assert_eq!(merged_h.count(), added.count());
        // a merged directory is a run: its latency log reads as its figures
        let lat = &total["latency"];
        let figure = |k: &str| lat[k].as_u64().unwrap();
        assert_eq!(
            common::apps::hlog_processor(&out.join("latency.hlog")),
            (figure("count"), figure("max_us"), figure("p50_us")),
            "{n} shards"
        );
        // and it says what the single process said, within scheduling noise (2 ms a request)
        let (m50, s50) = (
            total["latency"]["p50_us"].as_f64().unwrap(),
            single["total"]["latency"]["p50_us"].as_f64().unwrap(),
        );
        assert!((m50 - s50).abs() < 1000.0, "p50 {m50} against {s50}");
        // the shards started together: each one's start is within a scheduling hiccup
        // and each recorded its host and its clock's synchronisation, as the kernel says it
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let clock = kiln_sample::clock::read().unwrap();
        for s in shards_json(&out) {
            assert!(s["start_skew_ms"].as_u64().unwrap() < 500, "{s:#}");
            assert_eq!(s["host"], host.trim(), "{s:#}");
            assert_eq!(s["clock_synchronized"], clock.synchronized, "{s:#}");
        }
        // one machine's shards share its clock: nothing is said of it
        assert!(!merged["status_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("clock"));
        // the merged connections are the shards' added up, as one process's would be
        assert_eq!(
            merged["plan"]["workload"]["connections"],
            single["plan"]["workload"]["connections"]
        );
    }
}

#[test]
fn a_closed_model_divides_its_connections_and_the_index_can_come_from_the_job() {
    let _turn = common::group("merge");
    let target = target();
    let url = target.url("/");
    let tmp = tempfile::tempdir().unwrap();
    let dirs = shards(&url, 2, tmp.path(), &["-c", "5", "-d", "2s"]);
    let connections: Vec<u64> = dirs
        .iter()
        .map(|d| {
            common::manifest(d)["plan"]["workload"]["connections"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(connections, vec![3, 2]);
    // a Kubernetes Indexed Job gives the index as JOB_COMPLETION_INDEX
    let out = tmp.path().join("auto");
    let run = common::kiln_with_env(
        &[
            "run",
            &url,
            "-c",
            "5",
            "-d",
            "1s",
            "--shard",
            "auto/2",
            "--json",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ],
        &[("JOB_COMPLETION_INDEX", "1")],
    );
    let v = json_with_exit(&run, 0);
    assert_eq!(v["plan"]["shard"]["index"], 1);
    assert_eq!(v["plan"]["workload"]["connections"], 2);
}

#[test]
fn a_shard_cut_short_or_missing_leaves_an_incomplete_merge_and_other_plans_are_refused() {
    let _turn = common::group("merge");
    let target = target();
    let url = target.url("/");
    let tmp = tempfile::tempdir().unwrap();
    let start_at = in_secs(1);
    let load = ["--rate", "200", "-d", "6s"];
    let whole = shard(&url, 0, 2, &start_at, &tmp.path().join("s0"), &load);
    let cut = shard(&url, 1, 2, &start_at, &tmp.path().join("s1"), &load);
    std::thread::sleep(Duration::from_secs(3));
    // SIGINT, as Ctrl-C or a pod's termination would
    Command::new("kill")
        .args(["-INT", &cut.id().to_string()])
        .status()
        .unwrap();
    let cut_out = cut.wait_with_output().unwrap();
    assert!(!cut_out.status.success());
    assert!(whole.wait_with_output().unwrap().status.success());
    let dirs = [tmp.path().join("s0"), tmp.path().join("s1")];
    let merged = json_with_exit(&merge(&dirs, &tmp.path().join("m"), &[]), 0);
    assert_eq!(merged["status"], "interrupted", "{merged:#}");
    let reason = merged["status_reason"].as_str().unwrap();
    assert!(reason.contains("s1 was interrupted"), "{reason}");
    // what the cut shard had is in: more than the whole shard's 600, fewer than 1200
    let requests = merged["total"]["requests"].as_u64().unwrap();
    assert!((700..1200).contains(&requests), "{requests}");

    // a missing shard is refused, and merged with --allow-partial as incomplete
    let refused = merge(&dirs[..1], &tmp.path().join("partial"), &[]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("shards 1 of 2 are missing"));
    let partial = json_with_exit(
        &merge(
            &dirs[..1],
            &tmp.path().join("partial2"),
            &["--allow-partial"],
        ),
        0,
    );
    assert_eq!(partial["status"], "interrupted");
    assert!(partial["status_reason"]
        .as_str()
        .unwrap()
        .contains("shards 1 missing"));

    // a record of another plan is refused
    let other = tmp.path().join("other");
    json_with_exit(
        &kiln(&[
            "run",
            &url,
            "--rate",
            "50",
            "-d",
            "1s",
            "--shard",
            "1/2",
            "--json",
            "--quiet",
            "--out",
            other.to_str().unwrap(),
        ]),
        0,
    );
    let mixed = merge(&[dirs[0].clone(), other], &tmp.path().join("mixed"), &[]);
    assert!(!mixed.status.success());
    assert!(String::from_utf8_lossy(&mixed.stderr).contains("ran different plans"));
}

/// A plan whose VUs log in as the users of a shared data file: run as 3 shards, every user
/// logs in exactly once in all (each shard takes every third row), and a plan's shared
/// iterations are divided, not multiplied.
#[test]
fn shards_deal_a_plans_data_rows_and_divide_its_iterations() {
    let _turn = common::group("merge");
    use kiln_targets::shop_api::ShopApi;
    let api = ShopApi::start("pw").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let users: String = std::iter::once("user\n".to_string())
        .chain((0..16).map(|i| format!("u{i:02}\n")))
        .collect();
    std::fs::write(tmp.path().join("users.csv"), users).unwrap();
    let plan = |at_end: &str, load: &str| {
        format!(
            r#"
base_url: {base}
data:
  users: {{file: users.csv, share: all, at_end: {at_end}}}
scenarios:
  - name: shopper
    data: users
    steps:
      - name: login
        method: POST
        url: /login
        json: {{user: "{{{{user}}}}", password: pw}}
        check: {{status: 200}}
load:
{load}
"#,
            base = api.url(""),
        )
    };
    let once = tmp.path().join("once.yaml");
    std::fs::write(&once, plan("stop", "  vus: 3\n  duration: 20s")).unwrap();
    let dirs = shards(once.to_str().unwrap(), 3, &tmp.path().join("once"), &[]);
    let logins = api.counts().logins;
    assert_eq!(logins.len(), 16, "{logins:?}");
    assert!(logins.values().all(|&n| n == 1), "{logins:?}");
    let merged = json_with_exit(&merge(&dirs, &tmp.path().join("once-m"), &[]), 0);
    assert_eq!(merged["total"]["requests"], 16, "{merged:#}");

    let api_before = api.counts().logins.values().sum::<u64>();
    let counted = tmp.path().join("counted.yaml");
    std::fs::write(
        &counted,
        plan("recycle", "  vus: 3\n  iterations: 10\n  duration: 20s"),
    )
    .unwrap();
    shards(
        counted.to_str().unwrap(),
        3,
        &tmp.path().join("counted"),
        &[],
    );
    let api_after = api.counts().logins.values().sum::<u64>();
    assert_eq!(api_after - api_before, 10);
}

/// Two shards of 200 requests, launched 1.5 s apart (`first` first) with `--barrier
/// barrier`, both succeed and merge whole; each one's manifest, and the merge's shards.
fn shards_launched_apart(
    url: &str,
    tmp: &Path,
    barrier: &str,
    first: usize,
) -> (Vec<Value>, Vec<Value>) {
    let run = |i: usize| {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args([
                "run",
                url,
                "--rate",
                "200",
                "-d",
                "2s",
                "--shard",
                &format!("{i}/2"),
                "--barrier",
                barrier,
                "--barrier-timeout",
                "60s",
                "--quiet",
                "--json",
                "--out",
                tmp.join(format!("b{i}")).to_str().unwrap(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let launched_first = run(first);
    std::thread::sleep(Duration::from_millis(1500));
    let second = run(1 - first);
    for child in [launched_first, second] {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dirs = [tmp.join("b0"), tmp.join("b1")];
    let merged = json_with_exit(&merge(&dirs, &tmp.join("bm"), &[]), 0);
    assert_eq!(merged["status"], "complete", "{merged:#}");
    assert_eq!(merged["total"]["requests"], 400);
    let shards = shards_json(&tmp.join("bm"));
    for s in &shards {
        assert!(s["start_skew_ms"].as_u64().unwrap() < 500, "{s:#}");
    }
    (dirs.iter().map(|d| common::manifest(d)).collect(), shards)
}

/// Shards launched 1.5 s apart with `--barrier DIR` start together (the last one's
/// readiness plus 3 s), record the start they agreed on, and merge; the barrier is for shards
/// only and is one way of saying when, not two.
#[test]
fn shards_started_apart_meet_at_a_file_barrier() {
    let _turn = common::group("merge");
    let target = target();
    let url = target.url("/");
    let tmp = tempfile::tempdir().unwrap();
    let barrier = tmp.path().join("barrier");
    let (manifests, _) = shards_launched_apart(&url, tmp.path(), barrier.to_str().unwrap(), 0);
    let agreed: Vec<&Value> = manifests.iter().map(|m| &m["plan"]["start_at"]).collect();
    assert!(
        agreed[0].is_string() && agreed[0] == agreed[1],
        "{agreed:?}"
    );

    let refused = |args: &[&str], says: &str| {
        let mut all = vec!["run", url.as_str(), "--rate", "10", "-d", "1s"];
        all.extend_from_slice(args);
        let out = kiln(&all);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    let dir = barrier.to_str().unwrap();
    refused(&["--barrier", dir], "--barrier is for shards");
    refused(
        &[
            "--shard",
            "0/2",
            "--barrier",
            dir,
            "--start-at",
            "2026-12-01T10:00:00Z",
        ],
        "give one",
    );
}

/// Shards with no folder in common meet at `--barrier http://...`: shard 1 comes first and
/// asks until shard 0, launched 1.5 s later, serves the barrier; both start together, shard 1
/// records its clock's offset from shard 0's (one machine: within half the round trip) and
/// the merge shows it; a shard of another plan is refused by shard 0.
#[test]
fn shards_meet_at_an_http_barrier_and_measure_their_clocks() {
    let _turn = common::group("merge");
    let target = target();
    let url = target.url("/");
    let tmp = tempfile::tempdir().unwrap();
    let port = common::apps::free_port();
    let barrier = format!("http://127.0.0.1:{port}");
    let (manifests, shards) = shards_launched_apart(&url, tmp.path(), &barrier, 1);
    let start_ms = |m: &Value| {
        let text = m["plan"]["start_at"]
            .as_str()
            .unwrap()
            .trim_end_matches('Z');
        humantime::parse_rfc3339_weak(text)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    assert!(
        (start_ms(&manifests[0]) - start_ms(&manifests[1])).abs() <= 2,
        "{:?} {:?}",
        manifests[0]["plan"]["start_at"],
        manifests[1]["plan"]["start_at"]
    );
    let clock = &manifests[1]["plan"]["clock"];
    let (offset, rtt) = (
        clock["offset_to_shard0_ms"].as_f64().unwrap(),
        clock["offset_rtt_ms"].as_f64().unwrap(),
    );
    assert!(offset.abs() <= rtt / 2.0 + 1.0, "{clock:#}");
    // shard 0's clock is the one the others are measured against
    assert_eq!(manifests[0]["plan"]["clock"]["offset_to_shard0_ms"], 0.0);
    let one = shards.iter().find(|s| s["index"] == 1).unwrap();
    assert_eq!(one["clock_offset_ms"].as_f64(), Some(offset), "{one:#}");

    // shard 0 waits; a shard of another plan asks it and is told why
    let port = common::apps::free_port();
    let barrier = format!("http://127.0.0.1:{port}");
    let shard = |url: &str, i: &str, timeout: &str| {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["run", url, "--rate", "10", "-d", "1s", "--shard", i])
            .args([
                "--barrier",
                &barrier,
                "--barrier-timeout",
                timeout,
                "--quiet",
            ])
            .args([
                "--out",
                tmp.path().join(format!("x{}", &i[..1])).to_str().unwrap(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let zero = shard(&url, "0/2", "3s");
    std::thread::sleep(Duration::from_millis(300));
    let other = shard(&target.url("/other"), "1/2", "2s")
        .wait_with_output()
        .unwrap();
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && said.contains("another plan"),
        "{said}"
    );
    let zero = zero.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&zero.stderr);
    assert!(
        !zero.status.success() && said.contains("shards 1 of 2 were not ready"),
        "{said}"
    );
}
