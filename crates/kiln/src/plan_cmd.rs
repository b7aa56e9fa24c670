//! `kiln plan check FILE`: a plan checked whole and shown, nothing sent;
//! `kiln plan from-har FILE`: a browser's recording made into a plan.

use anyhow::{Context, Result};

use crate::cli::{FromHarArgs, PlanCheckArgs, PlanCommand};
use crate::format::safe_text;

pub fn run(command: PlanCommand) -> Result<u8> {
    match command {
        PlanCommand::Check(args) => check(args),
        PlanCommand::FromHar(args) => from_har(args),
    }
}

fn check(args: PlanCheckArgs) -> Result<u8> {
    let sets = args
        .set
        .iter()
        .map(|s| kiln_plan::parse_set(s).map_err(anyhow::Error::from))
        .collect::<Result<Vec<_>>>()?;
    // nothing is sent, so no name is looked up unless asked: a recording of public sites
    // checks offline
    let lookup = if args.resolve {
        kiln_plan::Lookup::Now
    } else {
        kiln_plan::Lookup::Never
    };
    let plan = kiln_plan::load_with(&args.plan, &sets, lookup)?;
    kiln_summary::thresholds::check_plan_thresholds(
        &args.plan.display().to_string(),
        &plan.thresholds,
        &plan.workload.names,
    )?;
    let w = &plan.workload;
    if args.json {
        let json = serde_json::json!({
            "plan": args.plan.display().to_string(),
            "origins": w.origins.iter().map(|o| o.url.clone()).collect::<Vec<_>>(),
            "scenarios": plan.outline.iter().map(|(name, weight, steps)| {
                serde_json::json!({"name": name, "weight": weight, "steps": steps})
            }).collect::<Vec<_>>(),
            "data": w.feeders.iter().map(|f| serde_json::json!({
                "name": f.name, "file": f.path.display().to_string(), "columns": f.columns,
            })).collect::<Vec<_>>(),
            "load": plan.model.shape_text(plan.duration, w.iterations),
            "thresholds": plan.thresholds.iter().map(|t| t.text.clone()).collect::<Vec<_>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(0);
    }
    outln!("{}: ok", safe_text(&args.plan.display().to_string()));
    for o in &w.origins {
        match args.resolve {
            true => outln!("  target     {} ({})", safe_text(&o.url), o.addr),
            false => outln!("  target     {}", safe_text(&o.url)),
        }
    }
    for (name, weight, steps) in &plan.outline {
        outln!(
            "  scenario   {} (weight {weight}, {} steps)",
            safe_text(name),
            steps.len()
        );
        for s in steps {
            outln!("               {}", safe_text(s));
        }
    }
    for f in &w.feeders {
        outln!(
            "  data       {} = {} ({})",
            safe_text(&f.name),
            safe_text(&f.path.display().to_string()),
            safe_text(&f.columns.join(", "))
        );
    }
    outln!(
        "  load       {}",
        plan.model.shape_text(plan.duration, w.iterations)
    );
    for t in &plan.thresholds {
        outln!("  threshold  {}", safe_text(&t.text));
    }
    Ok(0)
}

/// The largest HAR read: a browser's recording of a long session with bodies is hundreds of
/// megabytes.
const MAX_HAR_BYTES: u64 = 1 << 30;

fn from_har(args: FromHarArgs) -> Result<u8> {
    let text = kiln_record::input::read_regular_text(&args.har, MAX_HAR_BYTES)
        .with_context(|| format!("cannot read {}", args.har.display()))?;
    let options = kiln_plan::har::HarOptions {
        keep_static: args.keep_static,
        hosts: args.hosts.clone(),
    };
    let made = kiln_plan::har::to_plan_with(&text, &options)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.har.display()))?;
    if !made.other_hosts_left_out.is_empty() {
        let hosts: Vec<String> = made
            .other_hosts_left_out
            .iter()
            .map(|(origin, n)| format!("{} ({n})", crate::format::safe_text(origin)))
            .collect();
        eprintln!(
            "kiln: requests to other hosts left out: {} (--hosts NAME keeps one)",
            hosts.join(", ")
        );
    }
    if made.not_http_left_out > 0 {
        eprintln!(
            "kiln: {} request(s) that are not HTTP (file:, data:, blob: ...) left out",
            made.not_http_left_out
        );
    }
    if made.websockets_left_out > 0 {
        eprintln!(
            "kiln: {} WebSocket connection(s) left out: kiln replays HTTP requests, not a \
             socket's messages",
            made.websockets_left_out
        );
    }
    match &args.out {
        Some(path) => {
            std::fs::write(path, &made.yaml)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "kiln: {} requests into {} ({} static left out); check it with kiln plan check",
                made.requests,
                path.display(),
                made.static_left_out
            );
        }
        None => out!("{}", made.yaml),
    }
    Ok(0)
}
