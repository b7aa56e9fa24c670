//! `kiln k8s job PLAN --workers N`: the manifests that run a plan's shards as a Kubernetes
//! Indexed Job, on stdout (`kiln k8s job plan.yaml --workers 8 | kubectl apply -f -`).

use std::time::{Duration, SystemTime};

use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_merge::k8s::{self, JobSpec, JobStart};

use crate::cli::K8sJobArgs;

pub fn job(args: K8sJobArgs) -> Result<u8> {
    if !kiln_plan::is_plan_path(&args.plan) {
        bail!("{}: kiln k8s job takes a plan file (.yaml)", args.plan);
    }
    let path = Path::new(&args.plan);
    // the plan is checked here, before the cluster sees it; its names are the cluster's
    // (a Service's), looked up only in the pods
    let plan = kiln_plan::load_with(path, &[], kiln_plan::Lookup::Never)?;
    let data_files = data_files(path, &plan)?;
    let plan_text = kiln_record::input::read_regular_text(path, kiln_plan::MAX_PLAN_BYTES as u64)
        .with_context(|| format!("cannot read {}", args.plan))?;
    let plan_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let start = match (&args.start_at, &args.lead) {
        (Some(_), Some(_)) => bail!("--start-at and --lead both say when to start: give one"),
        (Some(at), None) => {
            // refused here, not by each pod when the Job runs
            kiln_load::plan::parse_start_at(at).map_err(anyhow::Error::msg)?;
            JobStart::At(at.clone())
        }
        (None, Some(lead)) => {
            let lead: Duration = lead.value;
            JobStart::At(humantime::format_rfc3339_seconds(SystemTime::now() + lead).to_string())
        }
        // a barrier named for this generation: an earlier Job's ready files are not this one's
        (None, None) => JobStart::Barrier(format!(
            ".barrier-{}-{}",
            args.name,
            kiln_record::clock::unix_ms_now()
        )),
    };
    let spec = JobSpec {
        results_claim: format!("{}-results", args.name),
        name: args.name,
        namespace: args.namespace,
        image: args
            .image
            .unwrap_or_else(|| format!("kiln:{}", env!("CARGO_PKG_VERSION"))),
        workers: args.workers,
        plan_name,
        plan_text,
        data_files,
        start,
        cpu: args.cpu,
        memory: args.memory,
        results_size: args.results_size,
        run_args: args.run_args,
    };
    k8s::check(&spec)?;
    out!("{}", k8s::to_yaml(&spec)?);
    Ok(0)
}

/// The files the plan's data sections read, by their paths relative to the plan's folder
/// (an absolute path or one through `..` stays as written: the check refuses it). A link that
/// leads out of the plan's folder is refused: its target would travel into the ConfigMap. Each
/// is read up to one byte past what a ConfigMap holds (the check then names it).
fn data_files(plan_path: &Path, plan: &kiln_plan::Plan) -> Result<Vec<(String, Vec<u8>)>> {
    let dir = plan_path.parent().unwrap_or(Path::new(""));
    let real_dir = std::fs::canonicalize(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    })
    .with_context(|| format!("cannot read the folder of {}", plan_path.display()))?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for feeder in &plan.workload.feeders {
        let relative = feeder.path.strip_prefix(dir).unwrap_or(&feeder.path);
        let name = relative.to_string_lossy().into_owned();
        if files.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let real = std::fs::canonicalize(&feeder.path)
            .with_context(|| format!("cannot read {}", feeder.path.display()))?;
        // a path through `..` or an absolute one is named by the check below; a plain path
        // that leads out is a link
        let plain = relative.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        });
        if plain && !real.starts_with(&real_dir) {
            bail!(
                "{} is a link to {}, outside the plan's folder: copy the data beside the plan",
                feeder.path.display(),
                real.display()
            );
        }
        let max = k8s::CONFIG_MAP_MAX as u64;
        let bytes = match kiln_record::input::read_regular(&feeder.path, max) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => bail!(
                "{} is {e}; a ConfigMap holds at most {max} (1 MiB): build an image with the \
                 data in it (FROM the kiln image, COPY the plan's folder) and run the plan \
                 from there",
                feeder.path.display()
            ),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", feeder.path.display()))
            }
        };
        files.push((name, bytes));
    }
    Ok(files)
}
