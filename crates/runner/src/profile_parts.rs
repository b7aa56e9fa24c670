//! A profile's parts in a run directory: collapsed stacks, the flame graph, the speedscope
//! file and `profile.json` (the summary and how the profile was taken).

use std::path::PathBuf;

use anyhow::Result;
use kiln_profile::{speedscope_json, svg, Event, FlameStyle, Folded, ProfileSummary, Profiled};
use kiln_record::RunDir;
use serde_json::{json, Value};

pub use kiln_record::parts::{ProfileParts, OFF_CPU, ON_CPU};

/// The files of one profile in a run directory, and its summary.
pub struct WrittenProfile {
    pub summary: ProfileSummary,
    /// What `profile.json` holds: the summary and how the profile was taken.
    pub record: Value,
    pub flame: PathBuf,
    pub folded: PathBuf,
    pub speedscope: PathBuf,
}

/// The parts a profile of this event is written to.
pub fn parts_of(event: Event) -> ProfileParts {
    match event {
        Event::Cpu => ON_CPU,
        Event::Cswitch => OFF_CPU,
    }
}

/// Writes collapsed stacks, the flame graph, the speedscope file and the summary (with
/// `extra` fields about how the profile was taken) into `dir`.
pub fn write_profile(
    dir: &mut RunDir,
    parts: ProfileParts,
    folded: &Folded,
    title: &str,
    count_name: &str,
    top: usize,
    extra: Value,
) -> Result<WrittenProfile> {
    let summary = ProfileSummary::of(folded, top);
    let folded_path = dir.write_file_part(
        parts.folded.0,
        parts.folded.1,
        1,
        folded.to_text().as_bytes(),
    )?;
    let style = FlameStyle {
        title,
        count_name,
        ..FlameStyle::default()
    };
    let flame = dir.write_file_part(parts.flame.0, parts.flame.1, 1, &svg(folded, &style)?)?;
    let speedscope = dir.write_file_part(
        parts.speedscope.0,
        parts.speedscope.1,
        1,
        speedscope_json(folded, title).as_bytes(),
    )?;
    let mut record = json!({ "summary": summary, "count_name": count_name });
    if let (Some(obj), Value::Object(extra)) = (record.as_object_mut(), extra) {
        obj.extend(extra);
    }
    dir.write_file_part(
        parts.summary.0,
        parts.summary.1,
        1,
        serde_json::to_string_pretty(&record)?.as_bytes(),
    )?;
    Ok(WrittenProfile {
        summary,
        record,
        flame,
        folded: folded_path,
        speedscope,
    })
}

/// How a perf profile was taken, for `profile.json` beside its summary.
pub fn how_taken(profiled: &Profiled, frequency_hz: u32) -> Value {
    json!({"event": profiled.event, "pids": profiled.pids,
        "duration_s": profiled.duration.as_secs_f64(), "sampled_s": profiled.sampled_s,
        "frequency_hz": frequency_hz,
        "call_graph": profiled.call_graph, "perf_cpu_pct": profiled.perf_cpu_pct,
        "target_exited": profiled.target_exited, "jit": profiled.jit})
}
