//! `kiln compare` end to end on real runs: a target whose slow requests take 200 ms, then
//! the same target with them at 50 ms and the first again, those two at once. Truth by
//! construction: every 50th request is slow (2%), so p99 falls by three quarters and p50 does
//! not move; between the two runs of the first target nothing changes. (A stall four times
//! the other, not twice: a busy CI machine's waits for a CPU lengthened a few of one run's
//! requests by 50 ms, enough to tie three runs of 100 ms with three of 50.)

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kiln_targets::{Behavior, TargetServer};
use serde_json::Value;

fn target(slow_ms: u64) -> TargetServer {
    TargetServer::start(Behavior {
        // a service time of its own keeps p50 far above loopback's jitter
        service_time: Duration::from_millis(2),
        slow_every: Some((50, Duration::from_millis(slow_ms))),
        ..Behavior::default()
    })
    .unwrap()
}

fn run(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run", url, "--rate", "250", "-d", "4s", "--repeat", "3", "-q",
        ])
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success() || out.status.code() == Some(99),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn compare(base: &Path, new: &Path) -> Value {
    let out = compare_with(base, new, &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn compare_with(base: &Path, new: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("compare")
        .args(args)
        .arg(base)
        .arg(new)
        .output()
        .unwrap()
}

fn row<'a>(c: &'a Value, metric: &str) -> &'a Value {
    c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == metric)
        .unwrap_or_else(|| panic!("no {metric} in {c}"))
}

#[test]
fn a_shrinking_stall_improves_p99_and_the_same_target_shows_no_change() {
    let _turn = common::group("compare");
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    let slow = target(200);
    let faster = target(50);
    run(&slow.url("/"), &a, &[]);
    // then the second target (kiln run --compare: the comparison is part of the run's
    // summary) and the first again, at once: 250 requests/s of a 2 ms service each leave
    // the machine far from busy, and each target counts its own fiftieth requests
    let out = std::thread::scope(|s| {
        s.spawn(|| run(&slow.url("/"), &c, &[]));
        run(
            &faster.url("/"),
            &b,
            &["--compare", a.to_str().unwrap(), "--json"],
        )
    });
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let inline = &summary["compare"];

    let ab = compare(&a, &b);
    assert_eq!(ab["base"]["repeats"], 3);
    let p99 = row(&ab, "p99");
    assert_eq!(p99["verdict"], "improved", "{ab:#}");
    let interval = p99["interval"].as_array().unwrap();
    assert!(interval[1].as_f64().unwrap() < 0.0, "{p99}");
    // the truth: 200 ms -> 50 ms (plus the 2 ms service time on both): 52 / 202 - 1
    let change = p99["change"].as_f64().unwrap();
    assert!((change + 0.743).abs() < 0.05, "{p99}");
    // p50 is not what changed (its strict `~` is tested on synthetic run sets; here a
    // shared machine's drift between runs may move a 2 ms median by a few percent)
    assert!(
        row(&ab, "p50")["change"].as_f64().unwrap().abs() < 0.1,
        "{ab:#}"
    );
    assert_eq!(row(&ab, "throughput")["verdict"], "~", "{ab:#}");
    // the same comparison, made by kiln run --compare
    assert_eq!(row(inline, "p99")["verdict"], "improved", "{inline:#}");
    assert_eq!(row(inline, "p99")["base"], p99["base"]);
    // the two plans differ in their URL only (another port), and kiln says so
    let hygiene = ab["hygiene"].to_string();
    assert!(
        hygiene.contains("the plans differ: the target: GET http://127.0.0.1:"),
        "{hygiene}"
    );

    // The same target again: its planted tail and its rate do not change. (Its p90/p95 of a
    // 2 ms service can move 5-8% between runs on a shared CI machine, a real drift of the
    // machine that kiln reports and that the "not interleaved" line warns of; the
    // false-positive rate of the method itself is tested on synthetic run sets in
    // crates/compare/tests/statistics.rs.)
    let ac = compare(&a, &c);
    for metric in ["p99", "throughput", "error rate"] {
        assert_eq!(row(&ac, metric)["verdict"], "~", "{metric}: {ac:#}");
    }
    assert!(
        row(&ac, "p99")["change"].as_f64().unwrap().abs() < 0.02,
        "{ac:#}"
    );
    assert!(ac["hygiene"].to_string().contains("same plan"), "{ac:#}");

    // the table for people: the verdict and benchstat's small-sample note
    let text = compare_with(&a, &b, &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("improved"), "{text}");
    assert!(text.contains("cannot go below p=0.100"), "{text}");
    // the comparison as a page: both runs drawn, the improved row marked, in Chromium
    let page = tmp.path().join("compare.html");
    let out = compare_with(&a, &b, &["--html", page.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = common::dump_dom(&page);
    assert!(dom.contains("data-charts=\"3\""), "{dom}");
    assert!(dom.contains("<tr class=\"improved\"><td>p99</td>"), "{dom}");
    // the overlay's p99 lines: NEW's seconds sit at about a quarter of BASE's
    let sums = |label: &str| -> f64 {
        let key = format!("&quot;{label}&quot;:");
        let at = dom
            .find(&key)
            .unwrap_or_else(|| panic!("no {label}: {dom}"))
            + key.len();
        dom[at..].split([',', '}']).next().unwrap().parse().unwrap()
    };
    let ratio = sums("NEW p99") / sums("BASE p99");
    assert!((0.2..0.35).contains(&ratio), "{ratio}");

    // a regression gates CI: b -> a is p99 four times over
    let gate = compare_with(&b, &a, &["--fail-on-regression"]);
    assert_eq!(gate.status.code(), Some(99));

    // a run killed half-way (run.json still `running`, its last line cut) is compared on
    // its finished seconds, and said to be interrupted
    let cut = tmp.path().join("cut");
    std::fs::create_dir(&cut).unwrap();
    for entry in std::fs::read_dir(&c).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), cut.join(entry.file_name())).unwrap();
    }
    let manifest = std::fs::read_to_string(cut.join("run.json")).unwrap();
    std::fs::write(
        cut.join("run.json"),
        manifest.replace("\"status\": \"complete\"", "\"status\": \"running\""),
    )
    .unwrap();
    let seconds = std::fs::read(cut.join("load-seconds.jsonl")).unwrap();
    std::fs::write(
        cut.join("load-seconds.jsonl"),
        &seconds[..seconds.len() / 2],
    )
    .unwrap();
    let half = compare(&a, &cut);
    assert_eq!(half["new"]["status"], "interrupted", "{half:#}");
    assert!(half["new"]["requests"].as_u64().unwrap() > 0);
    assert!(
        half["hygiene"].to_string().contains("NEW is interrupted"),
        "{half:#}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let _turn = common::group("compare");
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("compare")
        .arg(tmp.path().join("missing"))
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read the BASE run"), "{err}");
}
