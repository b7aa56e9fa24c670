//! `kiln doctor` from the command line: a fixture tree with known bad settings (through
//! `--root`) and the live host.

use crate::common;

use common::{json_of, kiln};

fn write(root: &std::path::Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_bad_setting_is_named_with_its_evidence_and_fix_and_exits_4() {
    let _turn = common::beside();
    let root = tempfile::tempdir().unwrap();
    write(
        root.path(),
        "sys/devices/system/clocksource/clocksource0/current_clocksource",
        "hpet\n",
    );
    write(
        root.path(),
        "sys/devices/system/clocksource/clocksource0/available_clocksource",
        "tsc hpet\n",
    );
    write(
        root.path(),
        "sys/kernel/mm/transparent_hugepage/enabled",
        "always madvise [never]\n",
    );
    let out = kiln(&["doctor", "--root", root.path().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.contains("[clocksource]...BAD"), "{text}");
    assert!(
        text.contains(
            "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource"
        ),
        "{text}"
    );
    assert!(text.contains("[thp-enabled]...OK"), "{text}");
    assert!(text.contains("[somaxconn]...UNKNOWN"), "{text}");

    let json = json_of(&kiln(&[
        "doctor",
        "--root",
        root.path().to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(json["worst"], "bad");
    let clock = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "clocksource")
        .unwrap();
    assert_eq!(clock["verdict"], "bad");
    assert!(clock["evidence"].as_str().unwrap().contains("hpet"));
}

#[test]
fn the_live_host_is_audited_with_the_test_process_as_target() {
    let _turn = common::beside();
    let pid = std::process::id().to_string();
    let out = kiln(&["doctor", "--pid", &pid, "--json"]);
    assert!(
        matches!(out.status.code(), Some(0) | Some(4)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    let ids: Vec<&str> = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"open-files-target") && ids.contains(&"perf-event-paranoid"),
        "{ids:?}"
    );
    let bad = kiln(&["doctor", "--pid", "999999999"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no process 999999999"));
}

#[test]
fn a_settings_file_linked_to_dev_zero_is_read_only_so_far() {
    let _turn = common::beside();
    let root = tempfile::tempdir().unwrap();
    for rel in [
        "proc/interrupts",
        "proc/sys/net/core/somaxconn",
        "sys/kernel/mm/transparent_hugepage/enabled",
    ] {
        let path = root.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink("/dev/zero", path).unwrap();
    }
    let (out, max_rss_mib) =
        common::kiln_with_peak_rss(&["doctor", "--root", root.path().to_str().unwrap(), "--json"]);
    assert!(out.status.code().is_some_and(|c| c == 0 || c == 4));
    assert!(max_rss_mib < 300, "kiln doctor peaked at {max_rss_mib} MiB");
}
