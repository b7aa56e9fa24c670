//! A profile's parts in a run directory: collapsed stacks, the flame graph, the speedscope
//! file and `profile.json` (the summary and how the profile was taken).

use std::path::PathBuf;

use crate::error::Result;
use kiln_profile::{speedscope_json, svg, Event, FlameStyle, Folded, Profiled};
use kiln_record::schema::profile::{ImportSource, JitRecord, ProfileRecord};
use kiln_record::RunDir;

pub use kiln_record::parts::{ProfileParts, ALLOC, LOCKS, OFF_CPU, ON_CPU, WALL};

/// The files of one profile in a run directory, and its summary.
pub struct WrittenProfile {
    /// What `profile.json` holds: the summary and how the profile was taken.
    pub record: ProfileRecord,
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

/// Where a profile came from, for `profile.json` beside its summary.
pub enum Origin<'a> {
    /// Taken by perf at this frequency; the note says why not by async-profiler (a JVM).
    Perf(&'a Profiled, u32, Option<String>),
    /// Taken by async-profiler inside a JVM.
    AsyncProfiler(&'a AsyncProfiled),
    Import(ImportSource),
}

/// What an async-profiler instance sampled: it decides the summary its stacks get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncSampled {
    /// The CPU, at this frequency: leaves are where the threads ran.
    Cpu { hz: u32 },
    /// Allocations or lock waits: the leaf is the type or the lock's class.
    LeafTyped,
    /// Every thread's time, running or waiting, under the thread's name.
    WallClock,
}

/// What async-profiler took in one JVM.
pub struct AsyncProfiled {
    pub pid: i32,
    /// From its start to its stop.
    pub duration: std::time::Duration,
    pub sampled: AsyncSampled,
    /// Flags that would make its stacks better, as the user would add them.
    pub advice: Vec<String>,
}

/// Writes collapsed stacks, the flame graph, the speedscope file and the summary (with how
/// the profile was taken) into `dir`.
pub fn write_profile(
    dir: &mut RunDir,
    parts: ProfileParts,
    folded: &Folded,
    title: &str,
    count_name: &str,
    top: usize,
    origin: Origin,
) -> Result<WrittenProfile> {
    let summary = match &origin {
        Origin::Perf(profiled, ..) => kiln_profile::summarize_event(folded, top, profiled.event),
        Origin::AsyncProfiler(taken) => match taken.sampled {
            AsyncSampled::Cpu { .. } => kiln_profile::summarize_async_cpu(folded, top),
            AsyncSampled::LeafTyped => kiln_profile::summarize_alloc(folded, top),
            AsyncSampled::WallClock => kiln_profile::summarize_wall(folded, top),
        },
        Origin::Import(_) => kiln_profile::summarize(folded, top),
    };
    // a value with a unit (`inuse_space/bytes`) is counted in that unit
    let (counted, unit) = kiln_record::schema::profile::count_unit(count_name);
    let folded_path = dir.write_file_part(
        parts.folded.0,
        parts.folded.1,
        1,
        folded.to_text().as_bytes(),
    )?;
    let style = FlameStyle {
        title,
        count_name: unit.unwrap_or(counted),
        ..FlameStyle::default()
    };
    let flame = dir.write_file_part(parts.flame.0, parts.flame.1, 1, &svg(folded, &style)?)?;
    let speedscope = dir.write_file_part(
        parts.speedscope.0,
        parts.speedscope.1,
        1,
        speedscope_json(folded, title, unit).as_bytes(),
    )?;
    let mut record = ProfileRecord::new(summary, count_name);
    match origin {
        Origin::Perf(profiled, frequency_hz, note) => {
            record.profiler = Some("perf".into());
            record.profiler_note = note;
            record.event = Some(profiled.event);
            record.pids = profiled.pids.clone();
            record.duration_s = Some(profiled.duration.as_secs_f64());
            record.sampled_s = profiled.sampled_s;
            record.frequency_hz = Some(frequency_hz);
            record.call_graph = Some(profiled.call_graph);
            record.perf_cpu_pct = profiled.perf_cpu_pct;
            record.target_exited = Some(profiled.target_exited);
            record.jit = Some(JitRecord {
                done: profiled.jit.done.clone(),
                advice: profiled.jit.advice.clone(),
            });
        }
        Origin::AsyncProfiler(taken) => {
            record.profiler = Some(format!(
                "async-profiler {}",
                kiln_runtime::async_profiler::VERSION
            ));
            let hz = match taken.sampled {
                AsyncSampled::Cpu { hz } => Some(hz),
                AsyncSampled::LeafTyped | AsyncSampled::WallClock => None,
            };
            record.event = hz.map(|_| Event::Cpu);
            record.pids = vec![taken.pid];
            record.duration_s = Some(taken.duration.as_secs_f64());
            record.frequency_hz = hz;
            record.jit = Some(JitRecord {
                done: Vec::new(),
                advice: taken.advice.clone(),
            });
        }
        Origin::Import(source) => record.source = Some(source),
    }
    dir.write_file_part(
        parts.summary.0,
        parts.summary.1,
        1,
        serde_json::to_string_pretty(&record)?.as_bytes(),
    )?;
    Ok(WrittenProfile {
        record,
        flame,
        folded: folded_path,
        speedscope,
    })
}

/// A differential profile's files in a run directory, and what it found.
pub struct WrittenDiff {
    pub flame: PathBuf,
    pub folded: PathBuf,
    /// Samples on each side (`before` scaled to `after`'s total in the graph).
    pub before_samples: u64,
    pub after_samples: u64,
    /// The functions whose self share changed most, biggest first.
    pub changes: Vec<kiln_profile::ShareChange>,
}

/// Writes `after` against `before` (red grew, blue shrank) with its `top` biggest changes of
/// self share, under kinds of their own: a diff's stacks carry two counts, and no reader of
/// profiles takes them.
pub fn write_diff(
    dir: &mut RunDir,
    before: &Folded,
    after: &Folded,
    title: &str,
    top: usize,
) -> Result<WrittenDiff> {
    let diff = kiln_profile::FoldedDiff::new(before, after);
    let changes = diff.biggest_self_changes(before, after, top);
    let style = FlameStyle {
        title,
        ..FlameStyle::default()
    };
    let flame = dir.write_file_part("profile-diff-flame", "diff.svg", 1, &diff.svg(&style)?)?;
    let text = diff.to_text();
    let folded = dir.write_file_part("profile-diff-folded", "diff.folded", 1, text.as_bytes())?;
    let result = serde_json::json!({"before_samples": diff.before_total,
        "after_samples": diff.after_total, "biggest_self_changes": changes});
    let json = serde_json::to_string_pretty(&result)?;
    dir.write_file_part("profile-diff-summary", "diff.json", 1, json.as_bytes())?;
    Ok(WrittenDiff {
        flame,
        folded,
        before_samples: diff.before_total,
        after_samples: diff.after_total,
        changes,
    })
}
