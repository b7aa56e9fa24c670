//! `kiln k8s job`: the manifests that run a plan's shards as a Kubernetes Indexed Job.
//!
//! One pod per shard (`completionMode: Indexed`, parallelism = completions = N), never
//! retried (`backoffLimit: 0`, a shard replayed late would load the target twice), spread
//! over nodes so shards do not share a machine, each running
//! `kiln run /plan/<file> --shard $(SHARD)/N --start-at T --out /results/shard-$(SHARD)` with
//! the plan from a ConfigMap and the run directories on a ReadWriteMany volume, where
//! `kiln merge` reads them afterwards.

use serde_json::{json, Value};

/// What the Job is made of.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// The Job's name (and its ConfigMap's and volume claim's prefix): a DNS label.
    pub name: String,
    pub namespace: Option<String>,
    pub image: String,
    pub workers: u32,
    /// The plan file's name and its text, mounted at /plan/<name>.
    pub plan_name: String,
    pub plan_text: String,
    /// RFC 3339: when every shard starts its load.
    pub start_at: String,
    /// Each worker's CPU and memory (requests = limits: a guaranteed pod, not throttled
    /// below what it asked for).
    pub cpu: String,
    pub memory: String,
    /// The ReadWriteMany claim the shards write their run directories to, and its size.
    pub results_claim: String,
    pub results_size: String,
    /// Extra `kiln run` arguments (after the plan).
    pub run_args: Vec<String>,
}

/// Why a spec cannot be rendered.
pub fn check(spec: &JobSpec) -> Result<(), String> {
    let dns_label = |s: &str| {
        !s.is_empty()
            && s.len() <= 52 // the Job controller appends "-<index>-<random>" to pod names
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if !dns_label(&spec.name) {
        return Err(format!(
            "--name {:?}: lower-case letters, digits and '-', at most 52 characters",
            spec.name
        ));
    }
    if let Some(ns) = &spec.namespace {
        if !dns_label(ns) {
            return Err(format!("--namespace {ns:?} is not a DNS label"));
        }
    }
    if !(1..=10_000).contains(&spec.workers) {
        return Err(format!("--workers {}: 1 to 10000", spec.workers));
    }
    if spec.image.trim().is_empty() || spec.image.contains(char::is_whitespace) {
        return Err(format!(
            "--image {:?} is not an image reference",
            spec.image
        ));
    }
    if spec.plan_name.is_empty()
        || !spec
            .plan_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        return Err(format!(
            "the plan file's name {:?} cannot be a ConfigMap key (letters, digits, '-', '.', '_')",
            spec.plan_name
        ));
    }
    Ok(())
}

/// The manifests, in the order to apply them: the ConfigMap, the volume claim, the Job.
pub fn manifests(spec: &JobSpec) -> Vec<Value> {
    let meta = |name: String| {
        let mut m = json!({"name": name, "labels": {"app.kubernetes.io/name": "kiln",
            "app.kubernetes.io/instance": spec.name}});
        if let Some(ns) = &spec.namespace {
            m["namespace"] = json!(ns);
        }
        m
    };
    let config = format!("{}-plan", spec.name);
    let n = spec.workers;
    let mut args = vec![
        "run".to_string(),
        format!("/plan/{}", spec.plan_name),
        "--shard".into(),
        format!("$(SHARD)/{n}"),
        "--start-at".into(),
        spec.start_at.clone(),
        "--out".into(),
        "/results/shard-$(SHARD)".into(),
        "--quiet".into(),
    ];
    args.extend(spec.run_args.iter().cloned());
    let pod_labels =
        json!({"app.kubernetes.io/name": "kiln", "app.kubernetes.io/instance": spec.name});
    vec![
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(config.clone()),
            "data": {spec.plan_name.clone(): spec.plan_text},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta(spec.results_claim.clone()),
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": spec.results_size}},
            },
        }),
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta(spec.name.clone()),
            "spec": {
                "completionMode": "Indexed",
                "completions": n,
                "parallelism": n,
                // a shard is never run again: replayed after the start it would load late
                "backoffLimit": 0,
                "podReplacementPolicy": "Failed",
                "ttlSecondsAfterFinished": 86400,
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "restartPolicy": "Never",
                        // one shard per node: shards sharing a machine share its CPU
                        "topologySpreadConstraints": [{
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": pod_labels},
                        }],
                        "affinity": {"podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [{
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": pod_labels},
                            }],
                        }},
                        "containers": [{
                            "name": "kiln",
                            "image": spec.image,
                            "args": args,
                            "env": [{
                                "name": "SHARD",
                                "valueFrom": {"fieldRef": {"fieldPath":
                                    "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
                            }],
                            "resources": {
                                "requests": {"cpu": spec.cpu, "memory": spec.memory},
                                "limits": {"cpu": spec.cpu, "memory": spec.memory},
                            },
                            "volumeMounts": [
                                {"name": "plan", "mountPath": "/plan", "readOnly": true},
                                {"name": "results", "mountPath": "/results"},
                            ],
                        }],
                        "volumes": [
                            {"name": "plan", "configMap": {"name": config}},
                            {"name": "results", "persistentVolumeClaim": {"claimName": spec.results_claim}},
                        ],
                    },
                },
            },
        }),
    ]
}

/// The manifests as YAML documents.
pub fn to_yaml(spec: &JobSpec) -> Result<String, String> {
    serde_saphyr::to_string_multiple(&manifests(spec)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(workers: u32) -> JobSpec {
        JobSpec {
            name: "kiln-load".into(),
            namespace: Some("perf".into()),
            image: "ghcr.io/example/kiln:0.1".into(),
            workers,
            plan_name: "plan.yaml".into(),
            plan_text: "target: http://shop:8080\n".into(),
            start_at: "2026-12-01T10:00:00Z".into(),
            cpu: "2".into(),
            memory: "1Gi".into(),
            results_claim: "kiln-load-results".into(),
            results_size: "10Gi".into(),
            run_args: vec![],
        }
    }

    #[test]
    fn an_indexed_job_of_n_pods_each_one_shard_never_retried() {
        let m = manifests(&spec(8));
        let job = &m[2]["spec"];
        assert_eq!(job["completionMode"], "Indexed");
        assert_eq!(
            (job["completions"].as_u64(), job["parallelism"].as_u64()),
            (Some(8), Some(8))
        );
        assert_eq!(job["backoffLimit"], 0);
        let c = &job["template"]["spec"]["containers"][0];
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(
            args.windows(2).any(|w| w == ["--shard", "$(SHARD)/8"]),
            "{args:?}"
        );
        assert!(args
            .windows(2)
            .any(|w| w == ["--start-at", "2026-12-01T10:00:00Z"]));
        assert_eq!(m[0]["data"]["plan.yaml"], "target: http://shop:8080\n");
        let yaml = to_yaml(&spec(8)).unwrap();
        assert_eq!(yaml.matches("\n---\n").count(), 2, "{yaml}");
    }

    #[test]
    fn names_that_kubernetes_refuses_are_refused_here() {
        let mut s = spec(2);
        s.name = "Kiln_Load".into();
        assert!(check(&s).unwrap_err().contains("--name"));
        let mut s = spec(0);
        assert!(check(&s).is_err());
        s.workers = 2;
        s.image = "a b".into();
        assert!(check(&s).is_err());
        assert!(check(&spec(3)).is_ok());
    }
}
