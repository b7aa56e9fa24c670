//! A run's runtime figures over its measured window, for the end summary, the report and the
//! findings: read from the record's [`RuntimeSecond`]s, never from the process.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::go::GoSecond;
use crate::jfr::rate_within;
use crate::pyspy::PyDump;
use crate::threads::ThreadDump;
use crate::{CollectorSecond, GcPause, RuntimeInfo, RuntimeSecond};

/// What the runtime did over a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeSummary {
    #[serde(flatten)]
    pub info: RuntimeInfo,
    /// Seconds of runtime figures in the window (0 when nothing could be read).
    pub seconds: u32,
    pub jvm: Option<JvmSummary>,
    /// What the thread dumps in the window showed (`--runtime deep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<ThreadsSummary>,
    /// Throwables the JVM created in the window, and per second (JFR, `--runtime deep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exceptions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exceptions_per_s: Option<f64>,
    /// Where threads waited for locks in the window (JFR, `--runtime deep`), the longest
    /// waited first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lock_waits: Vec<LockWaitSummary>,
    /// What the py-spy dumps in the window showed (a Python target, `--runtime deep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonSummary>,
    /// A Go target's GC cycles in the window (gctrace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go: Option<GoSummary>,
    /// A Go target's mark assist in the window, from its execution traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go_assist: Option<GoAssistSummary>,
    /// A JVM's threads' CPU by what they do (JIT compilers, GC, an async logger's consumer),
    /// from the sampler's per-thread CPU over the same window; filled by whoever has it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_by_thread_role: Vec<crate::jvm_threads::RoleCpu>,
}

/// Waits for one lock at one place over a window (whole wall-clock seconds inside it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockWaitSummary {
    #[serde(flatten)]
    pub place: crate::jfr::LockWaitPlace,
    pub waits: u64,
    pub wait_ms: f64,
    pub longest_ms: f64,
    /// Threads waiting here on average: the wait time over the window's wall time.
    pub threads_waiting_mean: f64,
    /// The wall-clock seconds counted, first and last (Unix seconds, inclusive).
    pub from_unix_s: u64,
    pub to_unix_s: u64,
}

/// The lock waits that began in the whole wall-clock seconds inside `[from_ms, to_ms]`.
fn lock_waits_within(
    sites: &[crate::jfr::LockWaitSite],
    (from_ms, to_ms): (u64, u64),
) -> Vec<LockWaitSummary> {
    let (first, end) = (from_ms.div_ceil(1000), to_ms / 1000);
    if end <= first {
        return Vec::new();
    }
    let span_ms = (end - first) as f64 * 1000.0;
    let mut out: Vec<LockWaitSummary> = sites
        .iter()
        .filter_map(|site| {
            let inside: Vec<_> = site
                .seconds
                .iter()
                .filter(|s| s.unix_s >= first && s.unix_s < end)
                .collect();
            let waits: u64 = inside.iter().map(|s| u64::from(s.waits)).sum();
            let wait_ms: f64 = inside.iter().map(|s| s.wait_ms).sum();
            (waits > 0).then(|| LockWaitSummary {
                place: site.place.clone(),
                waits,
                wait_ms,
                longest_ms: inside.iter().map(|s| s.longest_ms).fold(0.0, f64::max),
                threads_waiting_mean: wait_ms / span_ms,
                from_unix_s: first,
                to_unix_s: end - 1,
            })
        })
        .collect();
    out.sort_by(|a, b| b.wait_ms.total_cmp(&a.wait_ms));
    out
}

/// Mark assist over a window (whole wall-clock seconds inside it), from execution traces.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoAssistSummary {
    pub assist_ms: f64,
    /// Seconds the traces covered inside the window, and of them those with assist.
    pub seconds_traced: u32,
    pub seconds_with_assist: u32,
    /// The second with the most assist: Unix second and ms.
    pub worst_second: Option<(u64, f64)>,
    /// Where goroutines were when made to assist, over the whole watch (a function's
    /// share is not split by second).
    pub functions: Vec<crate::gotrace::AssistWhere>,
}

fn go_assist_within(
    record: &crate::gotrace::GoTraceRecord,
    (from_ms, to_ms): (u64, u64),
) -> Option<GoAssistSummary> {
    let first = from_ms
        .max(record.from_unix_ms.max(0.0) as u64)
        .div_ceil(1000);
    let end = to_ms.min(record.to_unix_ms.max(0.0) as u64) / 1000;
    if end <= first {
        return None;
    }
    let inside: Vec<_> = record
        .seconds
        .iter()
        .filter(|s| s.unix_s >= first && s.unix_s < end)
        .collect();
    Some(GoAssistSummary {
        assist_ms: inside.iter().map(|s| s.assist_ms).sum(),
        seconds_traced: (end - first) as u32,
        seconds_with_assist: inside.iter().filter(|s| s.assist_ms > 0.0).count() as u32,
        worst_second: inside
            .iter()
            .max_by(|a, b| a.assist_ms.total_cmp(&b.assist_ms))
            .map(|s| (s.unix_s, s.assist_ms)),
        functions: record.where_.iter().take(5).cloned().collect(),
    })
}

/// A Go target's GC over a window, from its gctrace cycles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoSummary {
    pub gc_cycles: u64,
    /// Stop-the-world time, in all and as a share of the window's wall time.
    pub pause_ms: f64,
    pub pause_share: f64,
    pub longest_pause_ms: f64,
    /// CPU that goroutines spent assisting the mark (taken from the requests that
    /// allocated), and all the GC's CPU.
    pub assist_cpu_ms: f64,
    pub gc_cpu_ms: f64,
    /// The GC's CPU as a share of one core over the window (0.25 = a quarter of a core).
    pub gc_cpu_cores: f64,
    pub heap_live_max_mb: Option<f64>,
    /// The second with the most mark-assist CPU: its number and that CPU (ms).
    pub worst_assist_second: Option<(u32, f64)>,
    /// Seconds with at least one cycle, of the window's.
    pub seconds_with_gc: u32,
    pub seconds: u32,
    /// The cycles' marking and CPU were read (gctrace has them; expvar does not).
    pub cpu_known: bool,
}

fn summarize_go(seconds: &[(&RuntimeSecond, &GoSecond)]) -> GoSummary {
    let wall_ms: f64 = seconds.iter().map(|(s, _)| s.interval_s * 1e3).sum();
    let cycles = || seconds.iter().flat_map(|(_, g)| &g.cycles);
    let pause_ms: f64 = seconds.iter().map(|(_, g)| g.pause_ms).sum();
    let gc_cpu_ms: f64 = seconds.iter().map(|(_, g)| g.gc_cpu_ms).sum();
    GoSummary {
        gc_cycles: seconds.iter().map(|(_, g)| g.gc_cycles).sum(),
        pause_ms,
        pause_share: if wall_ms > 0.0 {
            pause_ms / wall_ms
        } else {
            0.0
        },
        longest_pause_ms: cycles().map(|c| c.pause_ms).fold(0.0, f64::max),
        assist_cpu_ms: seconds.iter().map(|(_, g)| g.assist_cpu_ms).sum(),
        gc_cpu_ms,
        gc_cpu_cores: if wall_ms > 0.0 {
            gc_cpu_ms / wall_ms
        } else {
            0.0
        },
        heap_live_max_mb: cycles().map(|c| c.heap_live_mb).reduce(f64::max),
        worst_assist_second: seconds
            .iter()
            .filter(|(_, g)| g.assist_cpu_ms > 0.0)
            .max_by(|a, b| a.1.assist_cpu_ms.total_cmp(&b.1.assist_cpu_ms))
            .map(|(s, g)| (s.second, g.assist_cpu_ms)),
        seconds_with_gc: seconds.iter().filter(|(_, g)| g.gc_cycles > 0).count() as u32,
        seconds: seconds.len() as u32,
        cpu_known: cycles().any(|c| c.mark_ms > 0.0 || c.cpu_ms() > 0.0),
    }
}

/// py-spy dumps over a window: threads, who held the GIL and where, what the dumps cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PythonSummary {
    pub dumps: u32,
    pub took_ms_mean: f64,
    pub took_ms_max: f64,
    pub threads_mean: f64,
    pub active_mean: f64,
    /// Share of the dumps in which a thread held the GIL.
    pub gil_held_share: f64,
    /// Where the GIL's holder was, by innermost frame, the most often first (at most 5).
    pub gil_holders: Vec<GilHolder>,
    /// Threads waiting to take the GIL, mean and most over the dumps that could tell (native
    /// frames); `None` when none could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gil_waiters_mean: Option<f64>,
    #[serde(default)]
    pub gil_waiters_max: u32,
    /// Some of the threads seen waiting for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gil_waiter_names: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GilHolder {
    pub frame: String,
    /// Share of the dumps.
    pub share: f64,
    pub threads: Vec<String>,
}

fn summarize_python<'a>(dumps: impl Iterator<Item = &'a PyDump>) -> Option<PythonSummary> {
    let dumps: Vec<&PyDump> = dumps.collect();
    if dumps.is_empty() {
        return None;
    }
    let n = dumps.len() as f64;
    let mean = |f: fn(&PyDump) -> f64| dumps.iter().map(|d| f(d)).sum::<f64>() / n;
    let mut holders: BTreeMap<&str, (u32, Vec<String>)> = BTreeMap::new();
    for holder in dumps.iter().filter_map(|d| d.gil_holder.as_ref()) {
        let e = holders.entry(&holder.frame).or_default();
        e.0 += 1;
        if !e.1.contains(&holder.name) {
            e.1.push(holder.name.clone());
        }
    }
    let held: u32 = holders.values().map(|(count, _)| count).sum();
    let mut gil_holders: Vec<GilHolder> = holders
        .into_iter()
        .map(|(frame, (count, threads))| GilHolder {
            frame: frame.to_string(),
            share: f64::from(count) / n,
            threads,
        })
        .collect();
    gil_holders.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.frame.cmp(&b.frame)));
    gil_holders.truncate(5);
    let told: Vec<u32> = dumps.iter().filter_map(|d| d.gil_waiters).collect();
    let mut gil_waiter_names: Vec<String> = Vec::new();
    for name in dumps.iter().flat_map(|d| &d.gil_waiter_names) {
        if gil_waiter_names.len() < 5 && !gil_waiter_names.contains(name) {
            gil_waiter_names.push(name.clone());
        }
    }
    Some(PythonSummary {
        dumps: dumps.len() as u32,
        took_ms_mean: mean(|d| d.took_ms),
        took_ms_max: dumps.iter().map(|d| d.took_ms).fold(0.0, f64::max),
        threads_mean: mean(|d| f64::from(d.threads)),
        active_mean: mean(|d| f64::from(d.active)),
        gil_held_share: f64::from(held) / n,
        gil_holders,
        gil_waiters_mean: (!told.is_empty())
            .then(|| told.iter().map(|w| f64::from(*w)).sum::<f64>() / told.len() as f64),
        gil_waiters_max: told.iter().copied().max().unwrap_or(0),
        gil_waiter_names,
    })
}

/// Thread dumps over a window: states, contended locks and what the dumps cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadsSummary {
    pub dumps: u32,
    /// Of them, taken with `-l` (the j.u.c. locks' holders in them).
    #[serde(default)]
    pub dumps_with_holders: u32,
    /// The dumps' round trips (what they cost the watcher), mean and longest.
    pub took_ms_mean: f64,
    pub took_ms_max: f64,
    /// The JVM's safepoint time during the dumps (what they cost the target), mean and
    /// longest; `None` when it does not count safepoint time.
    pub safepoint_ms_mean: Option<f64>,
    pub safepoint_ms_max: Option<f64>,
    /// Java threads by state, the mean over the dumps.
    pub states_mean: BTreeMap<String, f64>,
    /// The most BLOCKED threads in one dump.
    pub blocked_max: u32,
    /// Contended locks by where their waiters wait, the most often seen first.
    pub contended: Vec<ContendedSite>,
}

/// One place where threads waited for a lock, over the dumps that showed it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContendedSite {
    pub lock_class: String,
    pub waiting_at: String,
    /// In how many dumps threads waited here.
    pub dumps_seen: u32,
    /// Waiters per dump that showed it: mean and most.
    pub waiters_mean: f64,
    pub waiters_max: u32,
    /// The holder and its innermost frames, as the dump with the most waiters showed them.
    pub holder: Option<String>,
    pub holder_frames: Vec<String>,
    pub waiter_names: Vec<String>,
    pub signature: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JvmSummary {
    pub gc_pauses: u64,
    pub gc_pause_ms: f64,
    /// Paused for GC, as a share of the window's wall time (0.012 = 1.2%).
    pub gc_pause_share: f64,
    pub by_collector: Vec<CollectorSecond>,
    pub longest_pause: Option<GcPause>,
    /// The second with the most GC pause time: its number and its pause time.
    pub worst_second: Option<(u32, f64)>,
    pub safepoints: Option<u64>,
    pub safepoint_ms: Option<f64>,
    pub safepoint_sync_ms: Option<f64>,
    pub jit_compiles: Option<u64>,
    pub jit_ms: Option<f64>,
    /// The last second whose compile time was at least a tenth of the busiest second's: the
    /// JIT's warm-up lasted until about then.
    pub jit_last_busy_second: Option<u32>,
    pub classes_loaded: Option<u64>,
    pub threads_live_max: Option<u64>,
    pub heap_used_max_kib: Option<u64>,
    pub heap_committed_kib: Option<u64>,
    pub metaspace_used_kib: Option<u64>,
    pub contended_locks: Option<u64>,
}

/// The seconds whose interval overlaps `[first_ms, last_ms]` (wall clock), as the resources'
/// summary picks them; all of them without a window.
pub fn during(seconds: &[RuntimeSecond], window: Option<(u64, u64)>) -> Vec<&RuntimeSecond> {
    seconds
        .iter()
        .filter(|s| {
            window.is_none_or(|(first, last)| s.unix_ms + 1000 > first && s.unix_ms <= last + 500)
        })
        .collect()
}

fn sum_some<T: std::iter::Sum<T>>(values: impl Iterator<Item = Option<T>>) -> Option<T> {
    let v: Vec<T> = values.flatten().collect();
    (!v.is_empty()).then(|| v.into_iter().sum())
}

pub fn summarize(info: &RuntimeInfo, seconds: &[&RuntimeSecond]) -> RuntimeSummary {
    summarize_within(info, seconds, None)
}

/// As [`summarize`], with the load's measured window on the wall clock (ms since the Unix
/// epoch, from the start of its first second to the end of its last): rates of counts read
/// less often than the runtime's seconds (JFR's, once a second at their own phase) are taken
/// over it rather than over the seconds that overlap it.
pub fn summarize_within(
    info: &RuntimeInfo,
    seconds: &[&RuntimeSecond],
    load_window: Option<(u64, u64)>,
) -> RuntimeSummary {
    let jvm: Vec<(&RuntimeSecond, &crate::JvmSecond)> = seconds
        .iter()
        .filter_map(|s| s.jvm.as_ref().map(|j| (*s, j)))
        .collect();
    // the window the seconds cover, on the wall clock
    let window = load_window.or_else(|| {
        seconds.first().zip(seconds.last()).map(|(first, last)| {
            let from = first
                .unix_ms
                .saturating_sub((first.interval_s * 1000.0) as u64);
            (from, last.unix_ms)
        })
    });
    let exceptions = window.and_then(|(from, to)| rate_within(&info.throwable_counts, from, to));
    RuntimeSummary {
        info: info.clone(),
        seconds: seconds.len() as u32,
        jvm: (!jvm.is_empty()).then(|| summarize_jvm(&jvm)),
        threads: summarize_threads(seconds.iter().filter_map(|s| s.thread_dump.as_ref())),
        python: summarize_python(seconds.iter().filter_map(|s| s.python.as_ref())),
        go: {
            let go: Vec<(&RuntimeSecond, &GoSecond)> = seconds
                .iter()
                .filter_map(|s| s.go.as_ref().map(|g| (*s, g)))
                .collect();
            (!go.is_empty()).then(|| summarize_go(&go))
        },
        exceptions: exceptions.map(|(_, n)| n),
        exceptions_per_s: exceptions.map(|(rate, _)| rate),
        lock_waits: window.map_or_else(Vec::new, |w| lock_waits_within(&info.lock_waits, w)),
        go_assist: info
            .go_trace
            .as_ref()
            .zip(window)
            .and_then(|(record, w)| go_assist_within(record, w)),
        cpu_by_thread_role: Vec::new(),
    }
}

impl RuntimeSummary {
    /// A JVM's threads' CPU by role from the process's thread groups over the same window
    /// (`(name, percent of a core)`); other runtimes' threads have no roles to tell.
    pub fn set_thread_cpu<'a>(&mut self, groups: impl IntoIterator<Item = (&'a str, f64)>) {
        if self.info.runtime == "jvm" {
            self.cpu_by_thread_role = crate::jvm_threads::cpu_by_role(groups);
        }
    }
}

fn summarize_threads<'a>(dumps: impl Iterator<Item = &'a ThreadDump>) -> Option<ThreadsSummary> {
    let dumps: Vec<&ThreadDump> = dumps.collect();
    if dumps.is_empty() {
        return None;
    }
    let n = dumps.len() as f64;
    let safepoints: Vec<f64> = dumps.iter().filter_map(|d| d.safepoint_ms).collect();
    let mut states_mean: BTreeMap<String, f64> = BTreeMap::new();
    for dump in &dumps {
        for (state, count) in &dump.states {
            *states_mean.entry(state.clone()).or_insert(0.0) += f64::from(*count) / n;
        }
    }
    // (the site, its waiters over all dumps, the waiters of the dump its holder was named in)
    let mut sites: Vec<(ContendedSite, u32, u32)> = Vec::new();
    for c in dumps.iter().flat_map(|d| &d.contended) {
        let index = match sites
            .iter()
            .position(|(s, _, _)| s.lock_class == c.lock_class && s.waiting_at == c.waiting_at)
        {
            Some(i) => i,
            None => {
                sites.push((
                    ContendedSite {
                        lock_class: c.lock_class.clone(),
                        waiting_at: c.waiting_at.clone(),
                        ..Default::default()
                    },
                    0,
                    0,
                ));
                sites.len() - 1
            }
        };
        let (site, total_waiters, holder_waiters) = &mut sites[index];
        site.dumps_seen += 1;
        *total_waiters += c.waiters;
        if c.waiters > site.waiters_max {
            site.waiter_names = c.waiter_names.clone();
        }
        // the holder from the worst dump that named one: a later dump with more waiters and
        // no holder (a plain dump, or one at a hand-off) must not unname it
        if c.holder.is_some() && (site.holder.is_none() || c.waiters > *holder_waiters) {
            site.holder = c.holder.clone();
            site.holder_frames = c.holder_frames.clone();
            *holder_waiters = c.waiters;
        }
        site.waiters_max = site.waiters_max.max(c.waiters);
        site.signature = site.signature.take().or_else(|| c.signature.clone());
    }
    let mut contended: Vec<ContendedSite> = sites
        .into_iter()
        .map(|(mut site, total, _)| {
            site.waiters_mean = f64::from(total) / f64::from(site.dumps_seen);
            site
        })
        .collect();
    contended.sort_by(|a, b| {
        b.dumps_seen
            .cmp(&a.dumps_seen)
            .then(b.waiters_mean.total_cmp(&a.waiters_mean))
    });
    Some(ThreadsSummary {
        dumps: dumps.len() as u32,
        dumps_with_holders: dumps.iter().filter(|d| d.with_holders).count() as u32,
        took_ms_mean: dumps.iter().map(|d| d.took_ms).sum::<f64>() / n,
        took_ms_max: dumps.iter().map(|d| d.took_ms).fold(0.0, f64::max),
        safepoint_ms_mean: (!safepoints.is_empty())
            .then(|| safepoints.iter().sum::<f64>() / safepoints.len() as f64),
        safepoint_ms_max: safepoints.iter().copied().reduce(f64::max),
        states_mean,
        blocked_max: dumps
            .iter()
            .map(|d| d.states.get("BLOCKED").copied().unwrap_or(0))
            .max()
            .unwrap_or(0),
        contended,
    })
}

fn summarize_jvm(seconds: &[(&RuntimeSecond, &crate::JvmSecond)]) -> JvmSummary {
    let wall_ms: f64 = seconds.iter().map(|(s, _)| s.interval_s * 1000.0).sum();
    let mut by_collector: Vec<CollectorSecond> = Vec::new();
    for (_, j) in seconds {
        for c in &j.gc {
            match by_collector.iter_mut().find(|b| b.name == c.name) {
                Some(b) => {
                    b.pauses += c.pauses;
                    b.pause_ms += c.pause_ms;
                }
                None => by_collector.push(c.clone()),
            }
        }
    }
    let gc_pause_ms: f64 = seconds.iter().map(|(_, j)| j.gc_pause_ms).sum();
    let longest_pause = seconds
        .iter()
        .flat_map(|(_, j)| &j.pauses)
        .max_by(|a, b| a.ms.total_cmp(&b.ms))
        .cloned();
    let worst_second = seconds
        .iter()
        .filter(|(_, j)| j.gc_pause_ms > 0.0)
        .max_by(|a, b| a.1.gc_pause_ms.total_cmp(&b.1.gc_pause_ms))
        .map(|(s, j)| (s.second, j.gc_pause_ms));
    let busiest = seconds
        .iter()
        .filter_map(|(_, j)| j.jit_ms)
        .fold(0.0, f64::max);
    let jit_last_busy_second = seconds
        .iter()
        .filter(|(_, j)| busiest > 0.0 && j.jit_ms.unwrap_or(0.0) >= busiest / 10.0)
        .map(|(s, _)| s.second)
        .max();
    let last = seconds.last().map(|(_, j)| *j);
    JvmSummary {
        gc_pauses: seconds.iter().map(|(_, j)| j.gc_pauses).sum(),
        gc_pause_ms,
        gc_pause_share: if wall_ms > 0.0 {
            gc_pause_ms / wall_ms
        } else {
            0.0
        },
        by_collector,
        longest_pause,
        worst_second,
        safepoints: sum_some(seconds.iter().map(|(_, j)| j.safepoints)),
        safepoint_ms: sum_some(seconds.iter().map(|(_, j)| j.safepoint_ms)),
        safepoint_sync_ms: sum_some(seconds.iter().map(|(_, j)| j.safepoint_sync_ms)),
        jit_compiles: sum_some(seconds.iter().map(|(_, j)| j.jit_compiles)),
        jit_ms: sum_some(seconds.iter().map(|(_, j)| j.jit_ms)),
        jit_last_busy_second,
        classes_loaded: sum_some(seconds.iter().map(|(_, j)| j.classes_loaded)),
        threads_live_max: seconds.iter().filter_map(|(_, j)| j.threads_live).max(),
        heap_used_max_kib: seconds.iter().filter_map(|(_, j)| j.heap_used_kib).max(),
        heap_committed_kib: last.and_then(|j| j.heap_committed_kib),
        metaspace_used_kib: last.and_then(|j| j.metaspace_used_kib),
        contended_locks: sum_some(seconds.iter().map(|(_, j)| j.contended_locks)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JvmSecond;

    fn second(n: u32, pauses: &[(&str, f64)], jit_ms: f64) -> RuntimeSecond {
        let mut gc: Vec<CollectorSecond> = Vec::new();
        for (name, ms) in pauses {
            match gc.iter_mut().find(|c| c.name == *name) {
                Some(c) => {
                    c.pauses += 1;
                    c.pause_ms += ms;
                }
                None => gc.push(CollectorSecond {
                    name: name.to_string(),
                    pauses: 1,
                    pause_ms: *ms,
                }),
            }
        }
        RuntimeSecond {
            second: n,
            unix_ms: 1_000_000 + u64::from(n) * 1000,
            interval_s: 1.0,
            thread_dump: None,
            python: None,
            go: None,
            jvm: Some(JvmSecond {
                gc_pauses: pauses.len() as u64,
                gc_pause_ms: pauses.iter().map(|p| p.1).sum(),
                pauses: pauses
                    .iter()
                    .map(|(c, ms)| GcPause {
                        collector: c.to_string(),
                        ms: *ms,
                        ..Default::default()
                    })
                    .collect(),
                gc,
                jit_ms: Some(jit_ms),
                jit_compiles: Some(1),
                threads_live: Some(10 + u64::from(n)),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn totals_share_longest_and_the_jits_warm_up() {
        let seconds = [
            second(1, &[("young", 5.0)], 300.0),
            second(2, &[("young", 5.0), ("full", 40.0)], 100.0),
            second(3, &[], 20.0),
            second(4, &[("young", 10.0)], 1.0),
        ];
        let all: Vec<&RuntimeSecond> = seconds.iter().collect();
        let s = summarize(&RuntimeInfo::default(), &all);
        let j = s.jvm.unwrap();
        assert_eq!((j.gc_pauses, j.gc_pause_ms), (4, 60.0));
        assert!((j.gc_pause_share - 0.015).abs() < 1e-12);
        assert_eq!(j.longest_pause.unwrap().ms, 40.0);
        assert_eq!(j.worst_second, Some((2, 45.0)));
        let young = j.by_collector.iter().find(|c| c.name == "young").unwrap();
        assert_eq!((young.pauses, young.pause_ms), (3, 20.0));
        // 300 ms at first; 100 and then 20 are still a tenth of it or more... 20 is not.
        assert_eq!(j.jit_last_busy_second, Some(2));
        assert_eq!(j.threads_live_max, Some(14));
        assert_eq!(j.jit_compiles, Some(4));
        // The window keeps the seconds that overlap it.
        let window = during(&seconds, Some((1_002_500, 1_003_000)));
        assert_eq!(window.iter().map(|s| s.second).collect::<Vec<_>>(), [2, 3]);
        // No JVM figures: no JVM summary, the info stays.
        let empty = summarize(
            &RuntimeInfo {
                runtime: "go".into(),
                ..Default::default()
            },
            &[],
        );
        assert_eq!(
            (
                empty.seconds,
                empty.jvm.is_none(),
                empty.info.runtime.as_str()
            ),
            (0, true, "go")
        );
    }

    #[test]
    fn thread_dumps_add_up_by_where_threads_wait() {
        use crate::threads::Contention;
        let dump = |blocked: u32, waiters: u32, took: f64| ThreadDump {
            unix_ms: 0,
            took_ms: took,
            safepoint_ms: Some(took / 4.0),
            states: [
                ("BLOCKED".to_string(), blocked),
                ("RUNNABLE".to_string(), 2),
            ]
            .into(),
            contended: (waiters > 0)
                .then(|| Contention {
                    lock_class: "java.lang.Object".into(),
                    waiters,
                    waiting_at: "log.Enqueue".into(),
                    holder: Some(format!("holder-{waiters}")),
                    signature: Some("sig".into()),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            with_holders: took > 25.0,
        };
        let mut seconds: Vec<RuntimeSecond> = (1..=4).map(|n| second(n, &[], 0.0)).collect();
        seconds[0].thread_dump = Some(dump(3, 3, 10.0));
        seconds[2].thread_dump = Some(dump(0, 0, 20.0));
        seconds[3].thread_dump = Some(dump(5, 5, 30.0));
        let all: Vec<&RuntimeSecond> = seconds.iter().collect();
        let t = summarize(&RuntimeInfo::default(), &all).threads.unwrap();
        assert_eq!(t.dumps, 3);
        assert_eq!(t.dumps_with_holders, 1);
        assert_eq!((t.took_ms_mean, t.took_ms_max), (20.0, 30.0));
        assert_eq!(t.safepoint_ms_max, Some(7.5));
        assert_eq!(t.blocked_max, 5);
        assert!((t.states_mean["BLOCKED"] - 8.0 / 3.0).abs() < 1e-12);
        assert_eq!(t.contended.len(), 1);
        let site = &t.contended[0];
        assert_eq!(
            (site.dumps_seen, site.waiters_mean, site.waiters_max),
            (2, 4.0, 5)
        );
        assert_eq!(
            site.holder.as_deref(),
            Some("holder-5"),
            "from the worst dump"
        );
        assert_eq!(site.signature.as_deref(), Some("sig"));
        // no dumps, no summary
        let none: Vec<&RuntimeSecond> = seconds[1..3]
            .iter()
            .filter(|s| s.thread_dump.is_none())
            .collect();
        assert!(summarize(&RuntimeInfo::default(), &none).threads.is_none());
    }

    /// Beside a busy neighbour a plain dump (no `-l`) caught more waiters than the walk that
    /// named their holder, and the run said the lock had none.
    #[test]
    fn a_holder_named_once_stays_named_beside_worse_dumps_that_name_none() {
        use crate::threads::Contention;
        let dump = |waiters: u32, holder: Option<&str>| ThreadDump {
            contended: vec![Contention {
                lock_class: "java.util.concurrent.locks.ReentrantLock$NonfairSync".into(),
                waiters,
                waiter_names: (0..waiters).map(|n| format!("request-{n}")).collect(),
                waiting_at: "LockShop.reserve".into(),
                holder: holder.map(String::from),
                holder_frames: holder
                    .map(|h| vec![format!("{h}.frame")])
                    .unwrap_or_default(),
                ..Default::default()
            }],
            with_holders: holder.is_some(),
            ..Default::default()
        };
        let mut seconds: Vec<RuntimeSecond> = (1..=4).map(|n| second(n, &[], 0.0)).collect();
        seconds[0].thread_dump = Some(dump(2, Some("request-7")));
        seconds[1].thread_dump = Some(dump(3, None));
        seconds[2].thread_dump = Some(dump(1, Some("request-9")));
        seconds[3].thread_dump = Some(dump(3, Some("request-4")));
        let all: Vec<&RuntimeSecond> = seconds.iter().collect();
        let site = |seconds: &[&RuntimeSecond]| {
            summarize(&RuntimeInfo::default(), seconds)
                .threads
                .unwrap()
                .contended[0]
                .clone()
        };
        let first_three = site(&all[..3]);
        assert_eq!(first_three.holder.as_deref(), Some("request-7"));
        assert_eq!(first_three.holder_frames, ["request-7.frame"]);
        assert_eq!(first_three.waiters_max, 3);
        assert_eq!(
            first_three.waiter_names.len(),
            3,
            "the worst dump's waiters"
        );
        // a later walk that names a holder among more waiters is the one shown
        assert_eq!(site(&all).holder.as_deref(), Some("request-4"));
    }
}
