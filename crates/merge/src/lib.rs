//! `kiln merge`: the run records of N load shards (`kiln run --shard i/N`) put together into
//! one run record that findings, report and compare read as any other.
//!
//! Each second of each phase is merged across the shards exactly (HDR histograms add; counts
//! add), seconds matched by their number within the phase: the shards started together
//! (`--start-at`), and each one's actual start is kept to show the skew. A missing or
//! interrupted shard makes the merged record `interrupted`, with what the others had; records
//! of different plans are refused unless the caller allows it.

pub mod k8s;

use kiln_record::schema::plan::{MergedFrom, Model, PlanRecord};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kiln_record::{LoadRecordLine, PhaseEnd, RunDir, RunLocation, RunStatus, LOAD_SECONDS_PART};
use serde::Serialize;

/// The part that names each shard and its own health.
pub const SHARDS_PART: &str = "shards";

/// What the caller allows.
#[derive(Clone, Copy, Debug, Default)]
pub struct MergeOptions {
    /// Merge records whose plans differ (beyond what sharding changes).
    pub any_plans: bool,
    /// Merge when shards are missing (the record is marked interrupted).
    pub allow_partial: bool,
}

/// One shard as the merged record keeps it: where it came from and how its generator did.
#[derive(Clone, Debug, Serialize)]
pub struct ShardHealth {
    pub dir: String,
    /// Its `--shard` index, when it was one.
    pub index: Option<u64>,
    pub status: RunStatus,
    pub status_reason: Option<String>,
    pub requests: u64,
    pub scheduled: u64,
    pub unsent: u64,
    pub p99_us: u64,
    /// The worst delay between a request's scheduled and actual send.
    pub send_lag_max_us: u64,
    pub kiln_cpu_s: f64,
    /// Its first second's start on the wall clock (ms since the epoch), and how far after the
    /// earliest shard's start that was.
    pub started_unix_ms: Option<u64>,
    pub start_skew_ms: Option<u64>,
    /// The machine it ran on and its clock's synchronisation when it started (the kernel's
    /// NTP state and error bound), as the shard recorded them.
    pub host: Option<String>,
    pub clock_synchronized: Option<bool>,
    pub clock_max_error_us: Option<i64>,
    /// Shard 0's clock minus this shard's, as an HTTP barrier measured it (ms), and the
    /// round trip it was measured over (it holds to half of that).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_rtt_ms: Option<f64>,
}

impl ShardHealth {
    /// A shard's health before its seconds are read: nothing counted yet.
    fn new(dir: String, status: RunStatus) -> Self {
        Self {
            dir,
            index: None,
            status,
            status_reason: None,
            requests: 0,
            scheduled: 0,
            unsent: 0,
            p99_us: 0,
            send_lag_max_us: 0,
            kiln_cpu_s: 0.0,
            started_unix_ms: None,
            start_skew_ms: None,
            host: None,
            clock_synchronized: None,
            clock_max_error_us: None,
            clock_offset_ms: None,
            clock_offset_rtt_ms: None,
        }
    }

    /// Its start on shard 0's clock when an HTTP barrier measured the offset, else on its own.
    fn start_on_common_clock(&self) -> Option<u64> {
        let started = self.started_unix_ms?;
        Some(match self.clock_offset_ms {
            Some(offset) => (started as f64 + offset).round().max(0.0) as u64,
            None => started,
        })
    }
}

/// What a merge made.
#[derive(Clone, Debug, Serialize)]
pub struct Merged {
    pub dir: PathBuf,
    pub status: RunStatus,
    pub status_reason: Option<String>,
    pub shards: Vec<ShardHealth>,
    /// `--shard` indexes that should be there and are not.
    pub missing: Vec<u64>,
}

/// Why records cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The shards cannot make one record as they are (different plans, a shard twice or
    /// missing, more than the open-files limit): what to change.
    #[error("{0}")]
    Refused(String),
    /// A record that could not be read or written: where, and why.
    #[error("{at}: {source}")]
    Record {
        at: String,
        source: kiln_record::RecordError,
    },
    #[error("the shards' health: {0}")]
    Json(#[from] serde_json::Error),
}

/// A shard start later than this after the earliest is named in the merged record's reason.
pub const LATE_START_MS: u64 = 1000;

/// Shards on several machines whose clocks may be further apart than this are named: their
/// starts and seconds cannot be lined up to better than that.
pub const CLOCK_ERROR_BOUND_US: i64 = 100_000;

/// The plan with what sharding changes taken out: the shard, the start time, and the
/// connection counts the shards divided.
fn plan_without_shard(plan: &PlanRecord) -> PlanRecord {
    let PlanRecord::Load(load) = plan else {
        return plan.clone();
    };
    let mut load = load.clone();
    load.shard = None;
    load.start_at = None;
    load.barrier = None;
    load.clock = None;
    load.workload.set_connections(0, 0);
    if let Model::Closed { stages, .. } = &mut load.workload {
        stages.clear();
    }
    PlanRecord::Load(load)
}

/// A shard's lines up to the first one that cannot be read. The record's reader passes over a
/// last line cut short (a killed shard) and gives an error only for a line that lines follow:
/// a record damaged mid-file, which `damaged` then says.
struct ReadableLines<I> {
    lines: I,
    damaged: std::rc::Rc<std::cell::RefCell<Option<String>>>,
    done: bool,
}

impl<I: Iterator<Item = Result<LoadRecordLine, kiln_record::RecordError>>> Iterator
    for ReadableLines<I>
{
    type Item = LoadRecordLine;

    fn next(&mut self) -> Option<LoadRecordLine> {
        if self.done {
            return None;
        }
        match self.lines.next()? {
            Ok(line) => Some(line),
            Err(e) => {
                self.done = true;
                *self.damaged.borrow_mut() = Some(e.to_string());
                None
            }
        }
    }
}

/// The most shards a record may claim (as `--shard` accepts).
pub const MAX_SHARDS: u64 = 100_000;

/// Open files a merge needs beside one per shard: the merged record's, the standard streams,
/// and a margin.
const FILES_BESIDE_SHARDS: u64 = 32;

/// Reads `dirs`, merges them into a new run directory at `out`.
pub fn merge(dirs: &[PathBuf], out: &Path, options: MergeOptions) -> Result<Merged, MergeError> {
    let err = MergeError::Refused;
    let record = |at: String| move |source| MergeError::Record { at, source };
    if dirs.is_empty() {
        return Err(err(
            "nothing to merge: name the shards' run directories".into()
        ));
    }
    let runs: Vec<RunDir> = dirs
        .iter()
        .map(|d| RunDir::open(d).map_err(record(format!("cannot read the run in {}", d.display()))))
        .collect::<Result<_, _>>()?;
    let first_plan = plan_without_shard(&runs[0].manifest.plan);
    if !options.any_plans {
        for run in &runs[1..] {
            if plan_without_shard(&run.manifest.plan) != first_plan {
                return Err(err(format!(
                    "{} and {} ran different plans (--any-plans merges them anyway)",
                    runs[0].path().display(),
                    run.path().display()
                )));
            }
        }
    }
    // the shards that should be there: 0..N of the first one's count
    let shard_of = |run: &RunDir| -> Option<(u64, u64)> {
        let s = run.manifest.plan.load()?.shard?;
        Some((u64::from(s.index), u64::from(s.count)))
    };
    // a record is read, not believed: it may claim 10^12 shards (the list of the missing
    // ran out of memory) or a shard past its count
    for run in &runs {
        if let Some((index, count)) = shard_of(run) {
            if !(1..=MAX_SHARDS).contains(&count) || index >= count {
                return Err(err(format!(
                    "{} says it is shard {index} of {count}: kiln runs 1 to {MAX_SHARDS} shards, \
                     each below the count",
                    run.path().display()
                )));
            }
        }
    }
    let mut missing = Vec::new();
    if let Some((_, count)) = shard_of(&runs[0]) {
        let mut seen = BTreeMap::new();
        for run in &runs {
            if let Some((index, other_count)) = shard_of(run) {
                if other_count != count {
                    return Err(err(format!(
                        "{} is one of {count} shards and {} one of {other_count}",
                        runs[0].path().display(),
                        run.path().display()
                    )));
                }
                if let Some(other) = seen.insert(index, run.path().to_path_buf()) {
                    return Err(err(format!(
                        "{} and {} are both shard {index}",
                        other.display(),
                        run.path().display()
                    )));
                }
            }
        }
        missing = (0..count).filter(|i| !seen.contains_key(i)).collect();
        if !missing.is_empty() && !options.allow_partial {
            return Err(err(format!(
                "shards {} of {count} are missing (--allow-partial merges what is here)",
                list(&missing)
            )));
        }
    }

    // Every shard's seconds are read at once (below): one open file each, beside the merged
    // record's. The soft limit (1,024 by default) is raised to the hard one first, as a
    // load's is; a merge the hard limit cannot hold is refused before anything is written
    // (10,000 shards once failed with "too many open files" at ~1,018).
    let needed = runs.len() as u64 + FILES_BESIDE_SHARDS;
    if let Some(limit) = kiln_record::descriptors::raise_open_files_limit() {
        if needed > limit {
            return Err(err(format!(
                "merging {} shards reads them at once and needs {needed} open files; kiln \
                 may open {limit} (raise the hard limit: ulimit -Hn {needed})",
                runs.len()
            )));
        }
    }

    // The merged record is written while the shards are read, a second at a time, so memory
    // stays flat however long the run: each shard's file is in (phase, second) order, and the
    // heads of all shards are merged at the least (phase, second) key.
    let mut plan = runs[0].manifest.plan.clone();
    if let PlanRecord::Load(merged) = &mut plan {
        // the connections the shards divided, added back up (saturating: a record is read,
        // not believed)
        let (sum, sum_max) = (runs.iter())
            .filter_map(|r| r.manifest.plan.load())
            .map(|p| p.workload.connections())
            .fold((0usize, 0usize), |(c, m), (dc, dm)| {
                (c.saturating_add(dc), m.saturating_add(dm))
            });
        merged.workload.set_connections(sum, sum_max);
        merged.merged_from = Some(MergedFrom {
            shards: runs.len(),
            of: merged.shard.map(|s| s.count),
        });
        merged.shard = None;
        merged.clock = None;
    }
    let name = format!("{}-merged", runs[0].manifest.name);
    let mut dir = RunDir::create(
        &RunLocation::Named(out.to_path_buf()),
        &name,
        std::env::args().collect(),
        plan,
    )
    .map_err(record(format!(
        "cannot write the merged run in {}",
        out.display()
    )))?;
    // whatever fails from here on leaves the merged record `failed` with why, not `running`
    let written = (|| -> Result<Merged, MergeError> {
        let write_err = |source| MergeError::Record {
            at: out.display().to_string(),
            source,
        };
        let mut writer = dir
            .add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
            .map_err(write_err)?;
        let mut streams = Vec::new();
        let mut damage = Vec::new();
        let mut shards = Vec::new();
        for run in &runs {
            let lines = run
                .json_lines::<LoadRecordLine>(LOAD_SECONDS_PART)
                .map_err(record(run.path().display().to_string()))?;
            // a record cut mid-line (a killed shard) ends at its last whole line; one damaged
            // further up is said (it was merged as complete, cut silently)
            let damaged = std::rc::Rc::new(std::cell::RefCell::new(None));
            damage.push(damaged.clone());
            streams.push(
                ReadableLines {
                    lines,
                    damaged,
                    done: false,
                }
                .peekable(),
            );
            let clock = run.manifest.plan.load().and_then(|p| p.clock.as_ref());
            let sync = clock.and_then(|c| c.sync);
            shards.push(ShardHealth {
                index: shard_of(run).map(|s| s.0),
                status_reason: run.manifest.status_reason.clone(),
                host: clock.map(|c| c.host.clone()),
                clock_synchronized: sync.map(|s| s.synchronized),
                clock_max_error_us: sync.map(|s| s.max_error_us),
                clock_offset_ms: clock.and_then(|c| c.offset_to_shard0_ms),
                clock_offset_rtt_ms: clock.and_then(|c| c.offset_rtt_ms),
                ..ShardHealth::new(run.path().display().to_string(), run.effective_status())
            });
        }
        let mut latencies: Vec<kiln_record::LatencyHistogram> = runs
            .iter()
            .map(|_| kiln_record::LatencyHistogram::new())
            .collect();
        let mut phases: Vec<String> = Vec::new();
        loop {
            let key = streams
                .iter_mut()
                .filter_map(|s| s.peek().map(|line| line_key(line, &mut phases)))
                .min();
            let Some(key) = key else {
                break;
            };
            let mut merged: Option<LoadRecordLine> = None;
            for (i, stream) in streams.iter_mut().enumerate() {
                let Some(line) = stream.next_if(|line| line_key(line, &mut phases) == key) else {
                    continue;
                };
                let health = &mut shards[i];
                match &line {
                    LoadRecordLine::Second(s) => {
                        if health.started_unix_ms.is_none() && s.unix_ms > 0 {
                            health.started_unix_ms =
                                Some(s.unix_ms.saturating_sub(1000 * (u64::from(s.second) + 1)));
                        }
                        health.requests = health.requests.saturating_add(s.requests);
                        health.scheduled = health.scheduled.saturating_add(s.scheduled);
                        health.send_lag_max_us = health.send_lag_max_us.max(s.send_lag_max_us);
                        latencies[i].merge(&s.latency);
                    }
                    LoadRecordLine::PhaseEnd(e) => {
                        health.unsent = health.unsent.saturating_add(e.unsent);
                        health.kiln_cpu_s +=
                            e.kiln_cpu_user_us.saturating_add(e.kiln_cpu_system_us) as f64 / 1e6;
                    }
                }
                merged = Some(match (merged, line) {
                    (None, line) => line,
                    (Some(LoadRecordLine::Second(mut into)), LoadRecordLine::Second(s)) => {
                        into.merge(&s);
                        LoadRecordLine::Second(into)
                    }
                    (Some(LoadRecordLine::PhaseEnd(mut into)), LoadRecordLine::PhaseEnd(e)) => {
                        merge_end(&mut into, &e);
                        LoadRecordLine::PhaseEnd(into)
                    }
                    (Some(other), _) => other,
                });
            }
            if let Some(mut line) = merged {
                if let LoadRecordLine::Second(s) = &mut line {
                    s.fill_percentiles();
                }
                writer.write(&line).map_err(write_err)?;
            }
        }
        drop(writer);
        // a merged directory is presented as a run: its latency log too
        kiln_record::write_latency_log(&mut dir).map_err(write_err)?;
        for (health, latency) in shards.iter_mut().zip(&latencies) {
            health.p99_us = latency.quantile_us(0.99);
        }
        // starts compared on one clock: shard 0's, where an HTTP barrier measured the offsets
        let earliest = shards
            .iter()
            .filter_map(ShardHealth::start_on_common_clock)
            .min();
        for s in &mut shards {
            s.start_skew_ms = s.start_on_common_clock().zip(earliest).map(|(a, e)| a - e);
        }

        let mut reasons = Vec::new();
        if !missing.is_empty() {
            reasons.push(format!("shards {} missing", list(&missing)));
        }
        for (shard, damaged) in shards.iter().zip(&damage) {
            if let Some(why) = damaged.borrow().as_ref() {
                reasons.push(format!(
                    "{}'s load record is damaged ({why}): its seconds after that are left out",
                    shard.dir
                ));
            }
        }
        for s in shards.iter().filter(|s| s.status != RunStatus::Complete) {
            reasons.push(format!(
                "{} was {}{}",
                s.dir,
                s.status.as_str(),
                s.status_reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ));
        }
        let late: Vec<String> = shards
            .iter()
            .filter(|s| s.start_skew_ms.is_some_and(|k| k > LATE_START_MS))
            .map(|s| format!("{} started {} ms late", s.dir, s.start_skew_ms.unwrap_or(0)))
            .chain(untrusted_clocks(&shards))
            .collect();
        let status = if reasons.is_empty() {
            RunStatus::Complete
        } else {
            RunStatus::Interrupted
        };
        reasons.extend(late);

        let shards_json = serde_json::to_vec_pretty(&shards)?;
        dir.write_file_part(SHARDS_PART, "shards.json", 1, &shards_json)
            .map_err(write_err)?;
        let reason = (!reasons.is_empty()).then(|| reasons.join("; "));
        dir.finish(status, reason.clone()).map_err(write_err)?;
        Ok(Merged {
            dir: dir.path().to_path_buf(),
            status,
            status_reason: reason,
            shards,
            missing,
        })
    })();
    if let Err(e) = &written {
        let _ = dir.finish(RunStatus::Failed, Some(e.to_string()));
    }
    written
}

/// Shards on more than one machine whose clocks were not synchronised, or only within more
/// than [`CLOCK_ERROR_BOUND_US`]: their starts may be apart by up to that, whatever their
/// records say. Shards on one machine share its clock, so nothing is said of them; nor of a
/// shard whose offset from shard 0 an HTTP barrier measured (it started by shard 0's clock).
fn untrusted_clocks(shards: &[ShardHealth]) -> Vec<String> {
    let hosts: std::collections::BTreeSet<&str> =
        shards.iter().filter_map(|s| s.host.as_deref()).collect();
    if hosts.len() < 2 {
        return Vec::new();
    }
    shards
        .iter()
        .filter(|s| s.clock_offset_ms.is_none())
        .filter_map(|s| match (s.clock_synchronized?, s.clock_max_error_us?) {
            (false, _) => Some(format!(
                "{}'s clock was not synchronised (NTP): its start may be off by any amount",
                s.dir
            )),
            (true, e) if e > CLOCK_ERROR_BOUND_US => Some(format!(
                "{}'s clock was synchronised only to within {} ms: its start may be off by that much",
                s.dir,
                e / 1000
            )),
            _ => None,
        })
        .collect()
}

/// Where a line falls in a shard's record: its phase's place (the warm-up, then the measured
/// runs in order, then any other phase in the order first seen) and its second; a phase's end
/// after its seconds.
fn line_key(line: &LoadRecordLine, phases: &mut Vec<String>) -> (usize, u32) {
    let (phase, second) = match line {
        LoadRecordLine::Second(s) => (&s.phase, s.second),
        LoadRecordLine::PhaseEnd(e) => (&e.phase, u32::MAX),
    };
    let rank = match phase.as_str() {
        "warmup" => 0,
        "run" => 1,
        other => match other
            .strip_prefix("run-")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => n,
            None => {
                let seen = match phases.iter().position(|p| p == other) {
                    Some(i) => i,
                    None => {
                        phases.push(other.to_string());
                        phases.len() - 1
                    }
                };
                1_000_000 + seen
            }
        },
    };
    (rank, second)
}

/// Two shards' ends of one phase: counts add, the window is the longest, an early stop is
/// any shard's.
fn merge_end(into: &mut PhaseEnd, other: &PhaseEnd) {
    into.duration_us = into.duration_us.max(other.duration_us);
    into.unsent = into.unsent.saturating_add(other.unsent);
    into.abandoned = into.abandoned.saturating_add(other.abandoned);
    into.abandoned_connecting = into
        .abandoned_connecting
        .saturating_add(other.abandoned_connecting);
    into.connections_opened = into
        .connections_opened
        .saturating_add(other.connections_opened);
    into.connections_kept = into.connections_kept.saturating_add(other.connections_kept);
    into.kiln_cpu_user_us = into.kiln_cpu_user_us.saturating_add(other.kiln_cpu_user_us);
    into.kiln_cpu_system_us = into
        .kiln_cpu_system_us
        .saturating_add(other.kiln_cpu_system_us);
    into.kiln_max_rss_kib = into.kiln_max_rss_kib.max(other.kiln_max_rss_kib);
    if into.stopped_early.is_none() {
        into.stopped_early = other.stopped_early.clone();
    }
}

fn list(items: &[u64]) -> String {
    items
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The merge as text: each shard's own figures, so a sick generator stands out.
pub fn shards_text(m: &Merged) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "Merged     {} shard records into {} ({})\n",
        m.shards.len(),
        m.dir.display(),
        m.status.as_str()
    );
    for s in &m.shards {
        let _ = writeln!(
            out,
            "  shard {:>3}  {} requests, p99 {}, unsent {}, worst send lag {}, kiln CPU {:.2} s, started +{} ms{}  {}",
            s.index.map_or("-".into(), |i| i.to_string()),
            s.requests,
            kiln_record::text::us(s.p99_us),
            s.unsent,
            kiln_record::text::us(s.send_lag_max_us),
            s.kiln_cpu_s,
            s.start_skew_ms.unwrap_or(0),
            match (s.clock_offset_ms, s.clock_offset_rtt_ms, s.clock_synchronized, s.clock_max_error_us) {
                (Some(o), Some(rtt), _, _) => format!(" (clock {o:+.1} ms from shard 0's, ±{:.1} ms)", rtt / 2.0),
                (_, _, Some(true), Some(e)) => format!(" (clock synchronised, ±{})", kiln_record::text::us(e.max(0) as u64)),
                (_, _, Some(false), _) => " (clock not synchronised)".to_string(),
                _ => String::new(),
            },
            kiln_record::text::safe_text(&s.dir)
        );
    }
    if let Some(reason) = &m.status_reason {
        let _ = writeln!(out, "  {}", kiln_record::text::safe_text(reason));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load plan recorded by shard `index` of `count`.
    fn shard_plan(index: u32, count: u32) -> PlanRecord {
        let workload = Model::Closed {
            connections: 1,
            think_time: std::time::Duration::ZERO,
            ramp_up: std::time::Duration::ZERO,
            stages: Vec::new(),
        };
        let mut plan =
            kiln_record::schema::plan::LoadPlanRecord::new("http://127.0.0.1/", workload, 1.0, 1);
        plan.shard = Some(kiln_record::schema::plan::Shard { index, count });
        plan.into()
    }

    fn shard(dir: &str, host: &str, synchronized: bool, max_error_us: i64) -> ShardHealth {
        ShardHealth {
            host: Some(host.into()),
            clock_synchronized: Some(synchronized),
            clock_max_error_us: Some(max_error_us),
            ..ShardHealth::new(dir.into(), RunStatus::Complete)
        }
    }

    /// Clocks matter only between machines: an unsynchronised or loosely synchronised one is
    /// named when the shards ran on several hosts, and nothing is said on one host.
    #[test]
    fn untrusted_clocks_are_named_only_across_machines() {
        let one_host = [
            shard("a", "h1", false, 16_000_000),
            shard("b", "h1", false, 16_000_000),
        ];
        assert!(untrusted_clocks(&one_host).is_empty());
        let two = [
            shard("a", "h1", true, 2_000),
            shard("b", "h2", false, 16_000_000),
            shard("c", "h3", true, 400_000),
        ];
        let named = untrusted_clocks(&two);
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named[0].starts_with("b's clock was not synchronised"));
        assert!(named[1].contains("c's clock was synchronised only to within 400 ms"));
        // the same shards after an HTTP barrier measured b's and c's offsets from shard 0
        let measured = two.map(|mut s| {
            if s.dir != "a" {
                s.clock_offset_ms = Some(-1500.0);
                s.clock_offset_rtt_ms = Some(0.8);
            }
            s
        });
        assert!(untrusted_clocks(&measured).is_empty());
    }

    /// A shard whose clock runs 1.5 s behind shard 0's, measured by the barrier, started
    /// with the others: its start is compared on shard 0's clock.
    #[test]
    fn starts_are_compared_on_shard_zeros_clock() {
        let zero = ShardHealth {
            started_unix_ms: Some(1_000_000),
            ..shard("a", "h1", true, 1000)
        };
        let behind = ShardHealth {
            started_unix_ms: Some(998_520),
            clock_offset_ms: Some(1_500.4),
            clock_offset_rtt_ms: Some(0.6),
            ..shard("b", "h2", true, 1000)
        };
        assert_eq!(zero.start_on_common_clock(), Some(1_000_000));
        assert_eq!(behind.start_on_common_clock(), Some(1_000_020));
    }

    /// A record claiming 10^12 shards once took the merge out of memory listing the missing
    /// ones; one past its own count, or counts that disagree, are refused by name too.
    #[test]
    fn a_record_claiming_absurd_shards_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let run = |name: &str, index: u32, count: u32| {
            let dir = tmp.path().join(name);
            let mut run = RunDir::create(
                &kiln_record::RunLocation::Named(dir.clone()),
                name,
                vec![],
                shard_plan(index, count),
            )
            .unwrap();
            run.finish(RunStatus::Complete, None).unwrap();
            dir
        };
        let huge = run("huge", 0, 1_000_000);
        // a count past what the record's type holds is a record that does not read
        let forged = run("forged", 0, 7);
        let manifest = forged.join("run.json");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let text = text.replace("\"count\": 7", "\"count\": 1000000000000");
        std::fs::write(&manifest, text).unwrap();
        let past = run("past", 5, 2);
        let two = run("two", 0, 2);
        let three = run("three", 1, 3);
        let out = tmp.path().join("out");
        let merged = |dirs: &[PathBuf]| {
            (merge(dirs, &out, MergeOptions::default()).unwrap_err()).to_string()
        };
        assert!(merged(&[huge]).contains("shard 0 of 1000000"));
        let unread = merged(&[forged]);
        assert!(
            unread.contains("cannot read the run") && unread.contains("load plan"),
            "{unread}"
        );
        assert!(merged(&[past]).contains("shard 5 of 2"));
        assert!(merged(&[two, three]).contains("one of 2 shards and"));
    }

    /// A shard whose load record has a bad line with lines after it (damaged, not cut at its
    /// end by a kill) was merged as `complete`, its later seconds dropped in silence; now the
    /// merge is interrupted and says which shard and line. A last line cut short is not damage.
    #[test]
    fn a_shard_damaged_mid_file_makes_the_merge_say_so() {
        let tmp = tempfile::tempdir().unwrap();
        let shard = |name: &str, index: u32, damage: &str| {
            let dir = tmp.path().join(name);
            let mut run = RunDir::create(
                &kiln_record::RunLocation::Named(dir.clone()),
                name,
                vec![],
                shard_plan(index, 2),
            )
            .unwrap();
            let mut w = run
                .add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
                .unwrap();
            let second = |n: u32| {
                LoadRecordLine::Second(Box::new(kiln_record::SecondRecord {
                    phase: "run".into(),
                    second: n,
                    unix_ms: 1_000_000 + 1000 * u64::from(n + 1),
                    requests: 10,
                    ..Default::default()
                }))
            };
            w.write(&second(0)).unwrap();
            drop(w);
            let path = dir.join("load-seconds.jsonl");
            let mut text = std::fs::read_to_string(&path).unwrap();
            text.push_str(damage);
            std::fs::write(&path, text).unwrap();
            let mut w = run
                .add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
                .unwrap();
            if damage.ends_with('\n') {
                w.write(&second(1)).unwrap();
            }
            drop(w);
            run.finish(RunStatus::Complete, None).unwrap();
            dir
        };
        let good = shard("good", 0, "");
        let damaged = shard("damaged", 1, "{\"second\": not json}\n");
        let merged = merge(
            &[good.clone(), damaged],
            &tmp.path().join("out"),
            MergeOptions::default(),
        )
        .unwrap();
        assert_eq!(merged.status, RunStatus::Interrupted);
        let reason = merged.status_reason.unwrap();
        assert!(
            reason.contains("damaged's load record is damaged") || reason.contains("damaged ("),
            "{reason}"
        );
        assert!(reason.contains("line 2"), "{reason}");
        // a last line cut short: a killed shard's end, not damage
        let cut = shard("cut", 1, "{\"second\": {\"pha");
        let merged = merge(
            &[good, cut],
            &tmp.path().join("out2"),
            MergeOptions::default(),
        )
        .unwrap();
        assert_eq!(
            merged.status,
            RunStatus::Complete,
            "{:?}",
            merged.status_reason
        );
    }

    /// A merge that fails after its directory was made leaves it `failed` with why; it was
    /// left `running`.
    #[test]
    fn a_merge_that_fails_midway_leaves_its_record_failed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard");
        let mut run = RunDir::create(
            &kiln_record::RunLocation::Named(dir.clone()),
            "shard",
            vec![],
            PlanRecord::Other(serde_json::json!({})),
        )
        .unwrap();
        drop(
            run.add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
                .unwrap(),
        );
        run.finish(RunStatus::Complete, None).unwrap();
        // the part the record names is gone (a copy that left it behind)
        std::fs::remove_file(dir.join("load-seconds.jsonl")).unwrap();
        let out = tmp.path().join("out");
        let failed = merge(&[dir], &out, MergeOptions::default()).unwrap_err();
        let written = RunDir::open(&out).unwrap();
        assert_eq!(written.manifest.status, RunStatus::Failed);
        assert_eq!(
            written.manifest.status_reason.as_deref(),
            Some(failed.to_string().as_str())
        );
    }

    /// A forged shard whose seconds claim 2^64-1 requests each: its totals saturate instead
    /// of wrapping (or panicking).
    #[test]
    fn forged_counts_saturate() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("forged");
        let mut run = RunDir::create(
            &kiln_record::RunLocation::Named(dir.clone()),
            "forged",
            vec![],
            shard_plan(0, 1),
        )
        .unwrap();
        let mut w = run
            .add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
            .unwrap();
        for n in 0..2u32 {
            w.write(&LoadRecordLine::Second(Box::new(
                kiln_record::SecondRecord {
                    phase: "run".into(),
                    second: n,
                    unix_ms: 1_000_000 + 1000 * u64::from(n + 1),
                    requests: u64::MAX,
                    scheduled: u64::MAX,
                    ..Default::default()
                },
            )))
            .unwrap();
        }
        drop(w);
        run.finish(RunStatus::Complete, None).unwrap();
        let merged = merge(&[dir], &tmp.path().join("out"), MergeOptions::default()).unwrap();
        assert_eq!(merged.shards[0].requests, u64::MAX);
        assert_eq!(merged.shards[0].scheduled, u64::MAX);
    }
}
