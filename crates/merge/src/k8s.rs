//! `kiln k8s job`: the manifests that run a plan's shards as a Kubernetes Indexed Job.
//!
//! One pod per shard (`completionMode: Indexed`, parallelism = completions = N), never
//! retried (`backoffLimit: 0`, a shard replayed late would load the target twice), spread
//! over nodes so shards do not share a machine, each running
//! `kiln run /plan/<file> --shard $(SHARD)/N --start-at T --out /results/shard-$(SHARD)` with
//! the plan (and the data files it reads) from a ConfigMap and the run directories on a
//! ReadWriteMany volume, where `kiln merge` reads them afterwards.

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
    /// The plan's data files: their paths relative to the plan's folder and their bytes,
    /// mounted beside the plan at /plan/<path>.
    pub data_files: Vec<(String, Vec<u8>)>,
    /// When every shard starts its load.
    pub start: JobStart,
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

/// How the shards start together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobStart {
    /// At this RFC 3339 time.
    At(String),
    /// When all are ready: a file barrier in this folder of the results volume (named per
    /// generated Job, so an earlier Job's files are never counted).
    Barrier(String),
}

/// Why a spec cannot be rendered as Kubernetes manifests.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// A flag or the plan that Kubernetes would refuse: what to change.
    #[error("{0}")]
    Refused(String),
    #[error("the manifests as YAML: {0}")]
    Yaml(String),
}

/// Why a spec cannot be rendered.
pub fn check(spec: &JobSpec) -> Result<(), K8sError> {
    let dns_label = |s: &str| {
        !s.is_empty()
            && s.len() <= 52 // the Job controller appends "-<index>-<random>" to pod names
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if !dns_label(&spec.name) {
        return Err(K8sError::Refused(format!(
            "--name {:?}: lower-case letters, digits and '-', at most 52 characters",
            spec.name
        )));
    }
    if let Some(ns) = &spec.namespace {
        if !dns_label(ns) {
            return Err(K8sError::Refused(format!(
                "--namespace {ns:?} is not a DNS label"
            )));
        }
    }
    // Kubernetes quantities: `2`, `1.5`, `500m` for CPU; `1Gi`, `512Mi`, `1G` for memory
    let quantity = |s: &str, suffixes: &[&str]| {
        let number = suffixes.iter().find_map(|x| s.strip_suffix(x)).unwrap_or(s);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, "0"));
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
        digits(whole) && digits(fraction) && number.bytes().any(|b| (b'1'..=b'9').contains(&b))
    };
    if !quantity(&spec.cpu, &["m"]) {
        return Err(K8sError::Refused(format!(
            "--cpu {:?} is not a CPU quantity such as 2, 1.5 or 500m",
            spec.cpu
        )));
    }
    let memory_suffixes = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
    ];
    if !quantity(&spec.memory, &memory_suffixes) {
        return Err(K8sError::Refused(format!(
            "--memory {:?} is not a memory quantity such as 1Gi or 512Mi",
            spec.memory
        )));
    }
    if !(1..=10_000).contains(&spec.workers) {
        return Err(K8sError::Refused(format!(
            "--workers {}: 1 to 10000",
            spec.workers
        )));
    }
    if spec.image.trim().is_empty() || spec.image.contains(char::is_whitespace) {
        return Err(K8sError::Refused(format!(
            "--image {:?} is not an image reference",
            spec.image
        )));
    }
    if spec.plan_name.is_empty()
        || !spec
            .plan_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        return Err(K8sError::Refused(format!(
            "the plan file's name {:?} cannot be a ConfigMap key (letters, digits, '-', '.', '_')",
            spec.plan_name
        )));
    }
    let mut carried = spec.plan_text.len();
    for (path, bytes) in &spec.data_files {
        let parts: Vec<&str> = path.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(K8sError::Refused(format!(
                "the data file {path:?} is not inside the plan's folder: \
                 kiln carries a plan's data files beside it, so name them relative to it"
            )));
        }
        carried += bytes.len();
    }
    if carried > CONFIG_MAP_MAX {
        return Err(K8sError::Refused(format!(
            "the plan and its data files are {carried} bytes; a ConfigMap holds at most \
             {CONFIG_MAP_MAX} (1 MiB): build an image with the data in it \
             (FROM the kiln image, COPY the plan's folder) and run the plan from there"
        )));
    }
    Ok(())
}

/// What Kubernetes keeps in one ConfigMap (its data and binaryData together).
pub const CONFIG_MAP_MAX: usize = 1024 * 1024;

/// The ConfigMap's key for data file `i` (keys cannot hold '/': the volume's items put each
/// back at its path).
fn data_key(i: usize, path: &str) -> String {
    let tail: String = path
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    format!("data-{i}-{tail}")
}

/// The ConfigMap's `data` (UTF-8 files) and `binaryData` (the others, base64), and the
/// volume's items that put every key at its path under /plan.
fn plan_volume(spec: &JobSpec) -> (Value, Value, Value) {
    use base64::Engine;
    let mut data = serde_json::Map::new();
    let mut binary = serde_json::Map::new();
    let mut items = vec![json!({"key": spec.plan_name, "path": spec.plan_name})];
    data.insert(spec.plan_name.clone(), json!(spec.plan_text));
    for (i, (path, bytes)) in spec.data_files.iter().enumerate() {
        let key = data_key(i, path);
        match std::str::from_utf8(bytes) {
            Ok(text) => data.insert(key.clone(), json!(text)),
            Err(_) => binary.insert(
                key.clone(),
                json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
            ),
        };
        items.push(json!({"key": key, "path": path}));
    }
    (
        Value::Object(data),
        Value::Object(binary),
        Value::Array(items),
    )
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
        match &spec.start {
            JobStart::At(_) => "--start-at".into(),
            JobStart::Barrier(_) => "--barrier".into(),
        },
        match &spec.start {
            JobStart::At(t) => t.clone(),
            JobStart::Barrier(folder) => format!("/results/{folder}"),
        },
        "--out".into(),
        "/results/shard-$(SHARD)".into(),
        "--quiet".into(),
    ];
    args.extend(spec.run_args.iter().cloned());
    let pod_labels =
        json!({"app.kubernetes.io/name": "kiln", "app.kubernetes.io/instance": spec.name});
    let (data, binary_data, items) = plan_volume(spec);
    let mut config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(config.clone()),
        "data": data,
    });
    if binary_data.as_object().is_some_and(|b| !b.is_empty()) {
        config_map["binaryData"] = binary_data;
    }
    vec![
        config_map,
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
                            {"name": "plan", "configMap": {"name": config, "items": items}},
                            {"name": "results", "persistentVolumeClaim": {"claimName": spec.results_claim}},
                        ],
                    },
                },
            },
        }),
    ]
}

/// The manifests as YAML documents.
pub fn to_yaml(spec: &JobSpec) -> Result<String, K8sError> {
    serde_saphyr::to_string_multiple(&manifests(spec)).map_err(|e| K8sError::Yaml(e.to_string()))
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
            data_files: vec![],
            start: JobStart::At("2026-12-01T10:00:00Z".into()),
            cpu: "2".into(),
            memory: "1Gi".into(),
            results_claim: "kiln-load-results".into(),
            results_size: "10Gi".into(),
            run_args: vec![],
        }
    }

    /// The arguments every shard's pod runs kiln with.
    fn shard_args(manifests: &[Value]) -> Vec<&str> {
        manifests[2]["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect()
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
        let args = shard_args(&m);
        assert!(
            args.windows(2).any(|w| w == ["--shard", "$(SHARD)/8"]),
            "{args:?}"
        );
        assert!(args
            .windows(2)
            .any(|w| w == ["--start-at", "2026-12-01T10:00:00Z"]));
        assert_eq!(m[0]["data"]["plan.yaml"], "target: http://shop:8080\n");
        let mut s = spec(8);
        s.start = JobStart::Barrier(".barrier-1764583200".into());
        let m = manifests(&s);
        let args = shard_args(&m);
        assert!(
            args.windows(2)
                .any(|w| w == ["--barrier", "/results/.barrier-1764583200"]),
            "{args:?}"
        );
        assert!(!args.contains(&"--start-at"));
        let yaml = to_yaml(&spec(8)).unwrap();
        assert_eq!(yaml.matches("\n---\n").count(), 2, "{yaml}");
    }

    #[test]
    fn names_that_kubernetes_refuses_are_refused_here() {
        let mut s = spec(2);
        s.name = "Kiln_Load".into();
        assert!(check(&s).unwrap_err().to_string().contains("--name"));
        let mut s = spec(0);
        assert!(check(&s).is_err());
        s.workers = 2;
        s.image = "a b".into();
        assert!(check(&s).is_err());
        assert!(check(&spec(3)).is_ok());
        for outside in ["../users.csv", "/etc/passwd", "data//u.csv", "./u.csv"] {
            let mut s = spec(2);
            s.data_files = vec![(outside.into(), b"u\n".to_vec())];
            assert!(
                check(&s).unwrap_err().to_string().contains("not inside"),
                "{outside}"
            );
        }
        let mut s = spec(2);
        s.data_files = vec![("big.csv".into(), vec![b'x'; CONFIG_MAP_MAX])];
        assert!(check(&s)
            .unwrap_err()
            .to_string()
            .contains("at most 1048576"));
        // quantities Kubernetes would refuse when the Job is applied
        for cpu in ["abc", "", "0", "2 ", "-1", "1.", "m"] {
            let mut s = spec(2);
            s.cpu = cpu.into();
            assert!(
                check(&s).unwrap_err().to_string().contains("--cpu"),
                "{cpu:?}"
            );
        }
        for memory in ["1GB", "lots", "0Mi", "Gi"] {
            let mut s = spec(2);
            s.memory = memory.into();
            assert!(
                check(&s).unwrap_err().to_string().contains("--memory"),
                "{memory:?}"
            );
        }
        for (cpu, memory) in [("2", "1Gi"), ("500m", "512Mi"), ("1.5", "2G")] {
            let mut s = spec(2);
            (s.cpu, s.memory) = (cpu.into(), memory.into());
            assert!(check(&s).is_ok(), "{cpu} {memory}");
        }
    }

    /// Data files travel in the ConfigMap under keys Kubernetes takes, and the volume's
    /// items put each back at its path beside the plan; bytes that are not UTF-8 go as
    /// binaryData.
    #[test]
    fn the_plans_data_files_are_mounted_at_their_paths_beside_it() {
        let mut s = spec(2);
        s.data_files = vec![
            ("data/users v2.csv".into(), b"user\nann\n".to_vec()),
            ("ids.bin".into(), vec![0xff, 0xfe, 0]),
        ];
        assert!(check(&s).is_ok());
        let m = manifests(&s);
        assert_eq!(m[0]["data"]["data-0-users_v2.csv"], "user\nann\n");
        assert_eq!(m[0]["binaryData"]["data-1-ids.bin"], "//4A");
        let items = &m[2]["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"];
        assert_eq!(items[0], json!({"key": "plan.yaml", "path": "plan.yaml"}));
        assert_eq!(
            items[1],
            json!({"key": "data-0-users_v2.csv", "path": "data/users v2.csv"})
        );
        assert_eq!(
            items[2],
            json!({"key": "data-1-ids.bin", "path": "ids.bin"})
        );
    }
}
