//! `kiln k8s job`: the Indexed Job's manifests, validated offline against the Kubernetes
//! OpenAPI schema (kubernetes-validate from PyPI, which bundles the schemas) for several
//! worker counts and options; and refused inputs.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::kiln;

const PLAN: &str = "\
base_url: http://127.0.0.1:8080
scenarios:
  - name: visit
    steps:
      - name: home
        url: /
load:
  rate: 400
  duration: 2m
";

fn job(plan: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["k8s", "job", plan.to_str().unwrap()];
    all.extend_from_slice(args);
    kiln(&all)
}

/// kubernetes-validate --strict for Kubernetes 1.34 (the Job's podReplacementPolicy is GA
/// there), on a file of several documents.
fn validate(manifests: &Path) {
    let python = common::apps::python();
    let bin = python.parent().unwrap().join("kubernetes-validate");
    let out = Command::new(bin)
        .args(["--strict", "-k", "1.34.0", manifests.to_str().unwrap()])
        .output()
        .expect("kubernetes-validate runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_manifests_validate_against_the_kubernetes_schema() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("shop-plan.yaml");
    std::fs::write(&plan, PLAN).unwrap();
    let cases: [(&str, Vec<&str>); 3] = [
        ("1", vec!["--workers", "1"]),
        (
            "8",
            vec![
                "--workers",
                "8",
                "--image",
                "registry.example/kiln:0.1",
                "--namespace",
                "perf",
                "--name",
                "shop-load",
                "--start-at",
                "2026-12-01T10:00:00Z",
                "--cpu",
                "1500m",
                "--memory",
                "512Mi",
                "--",
                "--timeout",
                "2s",
            ],
        ),
        ("64", vec!["--workers", "64", "--lead", "5m"]),
    ];
    for (n, args) in cases {
        let out = job(&plan, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let yaml = String::from_utf8(out.stdout).unwrap();
        assert!(yaml.contains("completionMode: Indexed"), "{yaml}");
        assert!(yaml.contains(&format!("completions: {n}")), "{yaml}");
        assert!(yaml.contains(&format!("$(SHARD)/{n}")), "{yaml}");
        // without --start-at or --lead, the pods meet at a barrier on the results volume
        let by_barrier = args.iter().all(|a| *a != "--start-at" && *a != "--lead");
        assert_eq!(
            yaml.contains("- --barrier\n") && yaml.contains("- /results/.barrier-"),
            by_barrier,
            "{yaml}"
        );
        // the plan travels whole in the ConfigMap
        assert!(yaml.contains("shop-plan.yaml"), "{yaml}");
        assert!(yaml.contains("url: /"), "{yaml}");
        let file = tmp.path().join(format!("job-{n}.yaml"));
        std::fs::write(&file, &yaml).unwrap();
        validate(&file);
    }
    let out = job(&plan, &["--workers", "2", "--", "--timeout", "2s"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("- --timeout"));
}

#[test]
fn what_kubernetes_or_kiln_would_refuse_is_refused_before_the_cluster() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("plan.yaml");
    std::fs::write(&plan, PLAN).unwrap();
    let refused = |args: &[&str], says: &str| {
        let out = job(&plan, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    refused(&["--workers", "2", "--name", "Shop_Load"], "--name");
    refused(&["--workers", "0"], "--workers");
    refused(&["--workers", "2", "--namespace", "a b"], "--namespace");
    refused(
        &["--workers", "2", "--start-at", "not a time"],
        "--start-at",
    );
    refused(&["--workers", "2", "--cpu", "abc"], "--cpu");
    refused(&["--workers", "2", "--memory", "1GB"], "--memory");
    // the plan itself is checked here
    let broken = tmp.path().join("broken.yaml");
    std::fs::write(&broken, "scenarios: 3\n").unwrap();
    let out = job(&broken, &["--workers", "2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.yaml"));
}

/// A plan that reads a data file: the file travels in the ConfigMap and is mounted at its
/// path beside the plan (the manifests still validate); one outside the plan's folder, or
/// too large for a ConfigMap, is refused.
#[test]
fn the_plans_data_files_travel_with_it() {
    let _turn = common::beside();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("data")).unwrap();
    std::fs::write(tmp.path().join("data/users.csv"), "user\nann\nbob\n").unwrap();
    let with_data = |file: &str| {
        format!(
            "base_url: http://127.0.0.1:8080\ndata:\n  users: {{file: {file}}}\n\
             scenarios:\n  - name: visit\n    data: users\n    steps:\n      - url: /u/{{{{user}}}}\n\
             load:\n  rate: 10\n  duration: 1m\n"
        )
    };
    let plan = tmp.path().join("plan.yaml");
    std::fs::write(&plan, with_data("data/users.csv")).unwrap();
    let out = job(&plan, &["--workers", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert!(yaml.contains("data-0-users.csv: |"), "{yaml}");
    assert!(yaml.contains("path: data/users.csv"), "{yaml}");
    assert!(yaml.contains("ann\n"), "{yaml}");
    let file = tmp.path().join("job-data.yaml");
    std::fs::write(&file, &yaml).unwrap();
    validate(&file);

    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    let outside = tmp.path().join("sub/plan.yaml");
    std::fs::write(&outside, with_data("../data/users.csv")).unwrap();
    let out = job(&outside, &["--workers", "2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not inside the plan's folder"));

    // a link beside the plan that leads out of its folder: its target would travel into the
    // ConfigMap (a secret beside the plan's folder, here)
    let linked = tmp.path().join("linked");
    std::fs::create_dir_all(linked.join("data")).unwrap();
    std::fs::write(tmp.path().join("secret.csv"), "user\nroot:hash\n").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("secret.csv"), linked.join("data/users.csv"))
        .unwrap();
    let linked_plan = linked.join("plan.yaml");
    std::fs::write(&linked_plan, with_data("data/users.csv")).unwrap();
    let out = job(&linked_plan, &["--workers", "2"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("is a link to") && said.contains("outside the plan's folder"),
        "{said}"
    );

    let big: String = std::iter::once("user\n".to_string())
        .chain((0..200_000).map(|i| format!("user-{i:08}\n")))
        .collect();
    std::fs::write(tmp.path().join("data/users.csv"), big).unwrap();
    let out = job(&plan, &["--workers", "2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a ConfigMap holds at most"));
}
