//! Rules over the runtime's own figures (`--watch-*`; thread dumps with `--runtime deep`):
//! time lost to GC pauses, and threads that wait for a lock another thread holds, with the
//! holder's frame and a known cause named (log4j2's full ring buffer).

use kiln_record::text::safe_text;
use kiln_runtime::summary::{JvmSummary, RuntimeSummary};
use serde_json::json;

use super::{Draft, Rule};
use crate::{RunRecord, Severity, Verdict};

/// Paused for GC this share of the time or more is a finding (JDK Mission Control's "GC
/// pauses" and "application halts" rules start warning at 5% and call 10% severe).
const PAUSE_SHARE: f64 = 0.05;
const PAUSE_SHARE_HIGH: f64 = 0.10;
/// Below that share, GC still explains the tail when most slow seconds had a pause of at
/// least this long...
const TAIL_PAUSE_MS: f64 = 10.0;
/// ...in at least this share of them...
const TAIL_ALIGNED: f64 = 0.6;
/// ...of at least this many slow seconds (a second whose p99 is twice the run's median p99).
const MIN_SLOW_SECONDS: usize = 3;

/// A lock is contended when threads wait for it in at least this share of the dumps...
const SEEN_SHARE: f64 = 0.5;
/// ...and this many on average.
const MIN_WAITERS: f64 = 2.0;
const MIN_DUMPS: u32 = 2;

/// A second in which the JIT compiled this long (a tenth of a core) is a busy one...
const JIT_BUSY_MS: f64 = 100.0;
/// ...and the warm-up was not over when this many of the measured seconds were busy, at
/// least this share of them (one or two busy seconds are the burst of new connections' code
/// at a phase's start, not a warm-up).
const JIT_BUSY_SECONDS: usize = 3;
const JIT_BUSY_SHARE: f64 = 0.25;

pub const JIT_WARMUP: Rule = Rule {
    id: "runtime.jit-warmup",
    judge: jit_warmup,
};

/// Exceptions a second at which JDK Mission Control's "Thrown Exceptions" rule warns, and at
/// which it calls the rate severe.
const EXCEPTIONS_PER_S: f64 = 5_000.0;
const EXCEPTIONS_PER_S_HIGH: f64 = 10_000.0;

pub const EXCEPTIONS: Rule = Rule {
    id: "runtime.exceptions",
    judge: exceptions,
};

/// The fix for young collections that is not about what allocates.
const YOUNG_ROOM: &str = "give the young generation room (a larger -Xmx, or -Xmn), or set a \
     pause goal (-XX:MaxGCPauseMillis) or a low-pause collector (-XX:+UseZGC) when the tail \
     matters more than throughput";

pub const GC_PAUSES: Rule = Rule {
    id: "runtime.gc-pauses",
    judge: gc_pauses,
};

pub const BLOCKED_THREADS: Rule = Rule {
    id: "runtime.blocked-threads",
    judge: blocked_threads,
};

/// The runtime's summary when the runtime is a JVM whose figures were read, else why not.
fn jvm_of(run: &RunRecord) -> Result<(&RuntimeSummary, &JvmSummary), Verdict> {
    let Some(runtime) = &run.runtime else {
        return Err(Verdict::Unjudged(
            "the target's runtime was not watched (run with --watch-port PORT or --watch-pid \
             PID)"
                .into(),
        ));
    };
    match (runtime.info.runtime.as_str(), &runtime.jvm) {
        // nothing managed: no collector, no Java threads
        ("native", _) => Err(Verdict::Clear),
        ("jvm", Some(jvm)) => Ok((runtime, jvm)),
        ("jvm", None) => Err(Verdict::Unjudged(format!(
            "the JVM's figures could not be read: {}",
            safe_text(&runtime.info.not_read.join("; "))
        ))),
        (other, _) => Err(Verdict::Unjudged(format!(
            "kiln does not read {} runtimes' GC and threads yet",
            safe_text(other)
        ))),
    }
}

/// The runtime's summary when the target is a Go program.
fn go_of(run: &RunRecord) -> Option<&RuntimeSummary> {
    run.runtime.as_ref().filter(|r| r.info.runtime == "go")
}

/// A Go target's GC: stopped the world long enough, or its cycles (and the mark assist they
/// make allocating requests do) are where the slow seconds are.
fn go_gc(run: &RunRecord, runtime: &RuntimeSummary) -> Verdict {
    let Some(go) = &runtime.go else {
        return Verdict::Unjudged(
            "a Go target's GC cycles are read when kiln starts it (kiln run --spawn CMD sets \
             GODEBUG=gctrace=1)"
                .into(),
        );
    };
    // the measured seconds' GC cycles, each as the wall-clock span it ran
    let cycles: Vec<(f64, f64)> = run
        .runtime_seconds
        .iter()
        .filter_map(|s| s.go.as_ref())
        .flat_map(|g| &g.cycles)
        .map(|c| {
            let start = c.start_unix_ms;
            (start, start + c.mark_ms + c.pause_ms)
        })
        .collect();
    // the slow seconds (each ending at its unix_ms) with the cycles that ran in them
    let slow: Vec<(u64, usize)> = slow_load_seconds(run)
        .into_iter()
        .map(|(end, _)| {
            let (from, to) = (end as f64 - 1000.0, end as f64);
            let running = cycles
                .iter()
                .filter(|(start, stop)| *start <= to && *stop >= from)
                .count();
            (end, running)
        })
        .collect();
    let aligned = slow.iter().filter(|(_, running)| *running > 0).count();
    let explains_tail =
        slow.len() >= MIN_SLOW_SECONDS && aligned as f64 >= TAIL_ALIGNED * slow.len() as f64;
    let share = go.pause_share;
    if share < PAUSE_SHARE && !explains_tail {
        return Verdict::Clear;
    }
    let mut evidence = vec![format!(
        "{} GC cycles in {} of the {} measured seconds, stopping the world {:.1} ms in all \
         ({:.2}% of the time, longest {:.2} ms)",
        go.gc_cycles,
        go.seconds_with_gc,
        go.seconds,
        go.pause_ms,
        100.0 * share,
        go.longest_pause_ms
    )];
    if go.cpu_known {
        evidence.push(format!(
            "the GC's CPU: {:.0} ms ({:.1}% of a core), {:.0} ms of it mark assist: requests' \
             goroutines made to mark because they allocated while a cycle ran",
            go.gc_cpu_ms,
            100.0 * go.gc_cpu_cores,
            go.assist_cpu_ms
        ));
    }
    if !slow.is_empty() {
        evidence.push(format!(
            "{aligned} of the {} slow seconds (p99 twice the run's median p99) had a GC cycle \
             running",
            slow.len()
        ));
    }
    if let Some(a) = &runtime.go_assist {
        evidence.push(format!(
            "the execution traces: goroutines spent {:.0} ms in mark assist in {} of {} \
             traced seconds{}",
            a.assist_ms,
            a.seconds_with_assist,
            a.seconds_traced,
            a.worst_second.map_or(String::new(), |(_, ms)| format!(
                ", up to {ms:.0} ms in one"
            ))
        ));
        evidence.extend(a.functions.iter().take(3).map(|f| {
            format!(
                "    {:.0} ms assisting in {} ({} goroutines)",
                f.assist_ms,
                safe_text(&f.function),
                f.goroutines
            )
        }));
    }
    if let Some(live) = go.heap_live_max_mb {
        evidence.push(format!("live heap up to {live:.0} MB"));
    }
    Verdict::Found(vec![Draft {
        rule: GC_PAUSES.id,
        key: "go",
        severity: if share >= PAUSE_SHARE_HIGH {
            Severity::High
        } else {
            Severity::Medium
        },
        title: if share >= PAUSE_SHARE {
            format!(
                "The Go program stopped for garbage collection {:.1}% of the time",
                100.0 * share
            )
        } else {
            format!(
                "Go's garbage collector makes the tail: {aligned} of {} slow seconds had a GC \
                 cycle running",
                slow.len()
            )
        },
        evidence,
        window: run.window(),
        cause: "a burst of allocation (a cache rebuilt at once when it expires, a large \
                response decoded) starts GC cycles; while one runs, every goroutine that \
                allocates is made to help mark (mark assist), so the requests of those seconds \
                run slower, and the heap's growth brings the next cycle sooner"
            .into(),
        fix: "allocate less in the burst: rebuild a cache in the background or piece by piece \
              and swap it in, spread expiries with jitter, reuse buffers (sync.Pool); give the \
              collector room so cycles come less often (a higher GOGC, or GOMEMLIMIT set to \
              the memory you can spend)"
            .into(),
        impact: if share >= PAUSE_SHARE {
            (share, "the measured time")
        } else {
            (
                aligned as f64 / run.seconds.len().max(1) as f64,
                "the measured seconds",
            )
        },
        data: json!({"gc_cycles": go.gc_cycles, "pause_share": share,
            "pause_ms": go.pause_ms, "gc_cpu_ms": go.gc_cpu_ms,
            "assist_cpu_ms": go.assist_cpu_ms, "slow_seconds": slow.len(),
            "slow_seconds_with_cycle": aligned}),
    }
    .finish()])
}

/// Seconds whose p99 is at least twice the run's median p99 (and 5 ms above it): the end
/// of each on the wall clock and its p99.
fn slow_load_seconds(run: &RunRecord) -> Vec<(u64, u64)> {
    let mut p99s: Vec<u64> = run
        .seconds
        .iter()
        .filter(|s| s.requests > 0)
        .map(|s| s.p99_us)
        .collect();
    if p99s.is_empty() {
        return Vec::new();
    }
    p99s.sort_unstable();
    let median = p99s[p99s.len() / 2];
    run.seconds
        .iter()
        .filter(|s| s.requests > 0 && s.p99_us >= 2 * median && s.p99_us >= median + 5_000)
        .map(|s| (s.unix_ms, s.p99_us))
        .collect()
}

/// Seconds whose p99 is at least twice the run's median p99 (and 5 ms above it), with the
/// GC pause time of the runtime's second that covers each.
fn slow_seconds(run: &RunRecord) -> Vec<(u64, u64, f64)> {
    slow_load_seconds(run)
        .into_iter()
        .map(|(end, p99)| {
            // the runtime's second ending nearest this one (both end at their time)
            let paused = run
                .runtime_seconds
                .iter()
                .filter(|r| r.unix_ms.abs_diff(end) <= 500)
                .filter_map(|r| r.jvm.as_ref())
                .map(|j| j.gc_pause_ms)
                .fold(0.0, f64::max);
            (end, p99, paused)
        })
        .collect()
}

fn gc_pauses(run: &RunRecord) -> Verdict {
    if let Some(runtime) = go_of(run) {
        return go_gc(run, runtime);
    }
    let (_, jvm) = match jvm_of(run) {
        Ok(found) => found,
        Err(verdict) => return verdict,
    };
    let share = jvm.gc_pause_share;
    let slow = slow_seconds(run);
    let aligned = slow.iter().filter(|s| s.2 >= TAIL_PAUSE_MS).count();
    let explains_tail =
        slow.len() >= MIN_SLOW_SECONDS && aligned as f64 >= TAIL_ALIGNED * slow.len() as f64;
    if share < PAUSE_SHARE && !explains_tail {
        return Verdict::Clear;
    }
    let mut evidence = vec![format!(
        "{} GC pauses stopped the application for {:.0} ms: {:.1}% of the measured time",
        jvm.gc_pauses,
        jvm.gc_pause_ms,
        100.0 * share
    )];
    let mut collectors = jvm.by_collector.clone();
    collectors.sort_by(|a, b| b.pause_ms.total_cmp(&a.pause_ms));
    for c in collectors.iter().filter(|c| c.pauses > 0).take(3) {
        evidence.push(format!(
            "{}: {} pauses, {:.0} ms, {:.1} ms each on average",
            safe_text(&c.name),
            c.pauses,
            c.pause_ms,
            c.pause_ms / c.pauses as f64
        ));
    }
    if let Some(p) = &jvm.longest_pause {
        evidence.push(format!(
            "longest pause {:.1} ms ({})",
            p.ms,
            safe_text(&p.collector)
        ));
    }
    if !slow.is_empty() {
        evidence.push(format!(
            "{aligned} of the {} slow seconds (p99 twice the run's median p99) had a GC pause \
             of {TAIL_PAUSE_MS:.0} ms or more",
            slow.len()
        ));
    }
    let worst = collectors.first().map(|c| c.name.as_str()).unwrap_or("");
    let full = worst.contains("full") || worst.contains("old") || worst.contains("MSC");
    // young collections come as often as the young generation fills: what allocates, if
    // --alloc recorded it
    let allocation = (!full).then(|| allocation_of(run)).flatten();
    if let Some(a) = &allocation {
        evidence.push(a.evidence());
    }
    let (cause, fix) = if full {
        (
            "full collections stop every application thread while the whole heap is marked \
             and compacted: something calls System.gc() (the application, RMI's periodic \
             collection, direct-buffer allocation), or the old generation fills up (a heap \
             too small for the live data, or a leak)",
            "if the application or a library calls System.gc(): -XX:+DisableExplicitGC (or \
             -XX:+ExplicitGCInvokesConcurrent to keep direct buffers freed); otherwise give \
             the heap room (-Xmx) and see whether the heap after each collection keeps \
             growing (a leak)",
        )
    } else {
        (
            "young collections stop the application each time the young generation fills: \
             the allocation rate and the live data copied at each collection decide how often \
             and how long",
            YOUNG_ROOM,
        )
    };
    let fix = match (&allocation, full) {
        (Some(a), _) => format!(
            "allocate less in {} ({:.0}% of the bytes; alloc-flame.svg shows who calls it): \
             fewer temporary objects, buffers reused, collections sized once; or {YOUNG_ROOM}",
            safe_text(&a.site),
            a.site_pct,
        ),
        (None, false) => format!(
            "allocate less per request (run again with --alloc to see which code allocates \
             the bytes), or {YOUNG_ROOM}"
        ),
        (None, true) => fix.to_string(),
    };
    let severity = if share >= PAUSE_SHARE_HIGH {
        Severity::High
    } else {
        Severity::Medium
    };
    Verdict::Found(vec![Draft {
        rule: GC_PAUSES.id,
        key: "",
        severity,
        title: if share >= PAUSE_SHARE {
            format!(
                "The JVM stopped for garbage collection {:.1}% of the time",
                100.0 * share
            )
        } else {
            format!(
                "GC pauses make the tail: {aligned} of {} slow seconds had a pause",
                slow.len()
            )
        },
        evidence,
        window: run.window(),
        cause: cause.into(),
        fix,
        impact: if share >= PAUSE_SHARE {
            (share, "the measured time")
        } else {
            (
                aligned as f64 / run.seconds.len().max(1) as f64,
                "the measured seconds",
            )
        },
        data: json!({"gc_pause_share": share, "gc_pauses": jvm.gc_pauses,
            "gc_pause_ms": jvm.gc_pause_ms, "by_collector": collectors,
            "slow_seconds": slow.len(), "slow_seconds_with_pause": aligned,
            "alloc_bytes_per_request": allocation.as_ref().map(|a| a.bytes_per_request),
            "allocated_in": allocation.as_ref().map(|a| &a.site)}),
    }
    .finish()])
}

/// What a JVM allocated over the measured load (`--alloc`): per request, and the method
/// that allocated the most bytes.
struct Allocation {
    bytes_per_request: f64,
    site: String,
    site_pct: f64,
}

impl Allocation {
    fn evidence(&self) -> String {
        format!(
            "the JVM allocated {} a request over the measured load (--alloc), {:.0}% of it in {}",
            kiln_record::text::bytes(self.bytes_per_request.round() as u64),
            self.site_pct,
            safe_text(&self.site)
        )
    }
}

fn allocation_of(run: &RunRecord) -> Option<Allocation> {
    let alloc = run.alloc.as_ref()?;
    let top = alloc.summary.allocated_in.first()?;
    Some(Allocation {
        bytes_per_request: alloc.per_request(run.measured()?.totals.requests)?,
        site: super::profile::strip_mark(&top.name).to_string(),
        site_pct: top.self_pct,
    })
}

/// The JIT compiler still busy in the measured seconds: the numbers mix compiling with the
/// steady state, and the latency of the first seconds is not the service's.
fn jit_warmup(run: &RunRecord) -> Verdict {
    // Go compiles ahead of time: nothing warms up
    if go_of(run).is_some() {
        return Verdict::Clear;
    }
    if let Err(verdict) = jvm_of(run) {
        return verdict;
    }
    let jit: Vec<(u32, f64)> = run
        .runtime_seconds
        .iter()
        .filter_map(|s| Some((s.second, s.jvm.as_ref()?.jit_ms?)))
        .collect();
    if jit.is_empty() {
        return Verdict::Unjudged("this JVM does not count its JIT's compile time".into());
    }
    let busy: Vec<&(u32, f64)> = jit.iter().filter(|(_, ms)| *ms >= JIT_BUSY_MS).collect();
    if busy.len() < JIT_BUSY_SECONDS || (busy.len() as f64) < JIT_BUSY_SHARE * jit.len() as f64 {
        return Verdict::Clear;
    }
    let total_ms: f64 = jit.iter().map(|(_, ms)| ms).sum();
    let share = total_ms / (1000.0 * jit.len() as f64);
    let last_busy = busy.last().map_or(0, |(second, _)| *second);
    let mut evidence = vec![
        format!(
            "the JIT compiled for {:.0} ms in the {} measured seconds: {:.0}% of a core",
            total_ms,
            jit.len(),
            100.0 * share
        ),
        format!(
            "{} of them had {JIT_BUSY_MS:.0} ms of compiling or more, the last at second {last_busy} of the watch",
            busy.len()
        ),
    ];
    // the compiler threads' own CPU from the sampler, a second witness beside the JVM's
    // compile-time counter
    let compiler_pct = run.runtime.as_ref().and_then(|r| {
        r.cpu_by_thread_role
            .iter()
            .find(|role| role.role == kiln_runtime::jvm_threads::JvmThreadRole::Compiler)
            .map(|role| role.cpu_pct)
    });
    if let Some(pct) = compiler_pct {
        evidence.push(format!(
            "the compiler threads (C1/C2 CompilerThread) used {pct:.0}% of a core on average"
        ));
    }
    let third = run.seconds.len() / 3;
    if third >= 1 {
        let rate = |s: &[crate::record::LoadPoint]| {
            s.iter().map(|p| p.requests).sum::<u64>() as f64 / s.len() as f64
        };
        let (first, last) = (
            rate(&run.seconds[..third]),
            rate(&run.seconds[run.seconds.len() - third..]),
        );
        evidence.push(format!(
            "throughput {first:.0}/s in the first third of the run, {last:.0}/s in the last"
        ));
    }
    Verdict::Found(vec![Draft {
        rule: JIT_WARMUP.id,
        key: "",
        severity: Severity::Medium,
        title: format!(
            "The JVM was still warming up: its JIT compiled in {} of {} measured seconds",
            busy.len(),
            jit.len()
        ),
        evidence,
        window: run.window(),
        cause: "the JIT compiler turns hot code into machine code in the first seconds or \
                minutes under load; until it is done, requests run slower and the compiler \
                threads take CPU, so the run measured a service still warming up"
            .into(),
        fix: "warm up before measuring: kiln run --warmup auto (ends when the JIT has gone \
              quiet) or a longer --warmup; in production, warm up before taking traffic \
              (a readiness check after a synthetic load, or CDS/AOT caches on newer JDKs)"
            .into(),
        impact: (share, "a core (compiling)"),
        data: json!({"jit_ms": total_ms, "busy_seconds": busy.len(), "seconds": jit.len(),
            "compiler_threads_cpu_pct": compiler_pct}),
    }
    .finish()])
}

/// Exceptions created at a rate that costs CPU (each one walks the stack to fill it in).
fn exceptions(run: &RunRecord) -> Verdict {
    // Go returns errors as values: there is no exception to build
    if go_of(run).is_some() {
        return Verdict::Clear;
    }
    let (runtime, _) = match jvm_of(run) {
        Ok(found) => found,
        Err(verdict) => return verdict,
    };
    let (Some(rate), Some(thrown)) = (runtime.exceptions_per_s, runtime.exceptions) else {
        return Verdict::Unjudged(
            "no JFR recording was read (run with --runtime deep; a JDK with its jfr tool)".into(),
        );
    };
    if rate < EXCEPTIONS_PER_S {
        return Verdict::Clear;
    }
    let requests = run.measured().map_or(0, |m| m.totals.requests);
    let mut evidence = vec![format!(
        "the JVM created {rate:.0} exceptions a second ({thrown} over the measured load), \
         counted by JFR's jdk.ExceptionStatistics"
    )];
    if requests > 0 {
        evidence.push(format!(
            "{:.1} per request ({requests} requests)",
            thrown as f64 / requests as f64
        ));
    }
    Verdict::Found(vec![Draft {
        rule: EXCEPTIONS.id,
        key: "",
        severity: if rate >= EXCEPTIONS_PER_S_HIGH {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!("The JVM creates {rate:.0} exceptions a second"),
        evidence,
        window: run.window(),
        cause: "exceptions used for control flow (a cache miss, a parse that fails, a lookup \
                that finds nothing): each one walks the thread's stack to record it, which \
                costs far more than a returned value"
            .into(),
        fix: "return a value (null, Optional, a result type) where the miss is expected; \
              where a library throws, check before calling it; a throwable that must stay can \
              skip its stack (the four-argument Throwable constructor with \
              writableStackTrace=false). --profile shows where they are built \
              (fillInStackTrace)"
            .into(),
        impact: (
            (rate / (2.0 * EXCEPTIONS_PER_S_HIGH)).min(1.0),
            "the JMC severe rate, doubled",
        ),
        data: json!({"exceptions_per_s": rate, "exceptions": thrown, "requests": requests}),
    }
    .finish()])
}

fn blocked_threads(run: &RunRecord) -> Verdict {
    let (runtime, go) = match go_of(run) {
        Some(runtime) => (runtime, true),
        None => match jvm_of(run) {
            Ok((runtime, _)) => (runtime, false),
            Err(verdict) => return verdict,
        },
    };
    let (threads_noun, whose) = if go {
        ("Goroutines", "the goroutines")
    } else {
        ("Threads", "the JVM's threads")
    };
    // JFR's lock waits (a JVM under --runtime deep): every wait of 10 ms or more, measured
    let jfr = &runtime.lock_waits;
    let dumps = match &runtime.threads {
        Some(t) if t.dumps >= MIN_DUMPS => Some(t),
        Some(t) if jfr.is_empty() => {
            return Verdict::Unjudged(format!(
                "{} thread dump is too few to judge (at least {MIN_DUMPS}: a longer run)",
                t.dumps
            ))
        }
        None if jfr.is_empty() => {
            return Verdict::Unjudged(if go {
                "no goroutine dumps were taken (run with --runtime deep; the program serves \
                 them when it imports net/http/pprof)"
                    .into()
            } else {
                "no thread dumps were taken (run with --runtime deep)".into()
            })
        }
        _ => None,
    };
    let method = |frame: &str| frame.split('(').next().unwrap_or(frame).trim().to_string();
    let jfr_at = |at: &str| jfr.iter().find(|w| method(&w.place.at) == method(at));
    let mut found = Vec::new();
    let mut judged_sites = Vec::new();
    if let Some(threads) = dumps {
        let all_threads: f64 = threads.states_mean.values().sum();
        for site in threads.contended.iter().filter(|s| {
            f64::from(s.dumps_seen) >= SEEN_SHARE * f64::from(threads.dumps)
                && s.waiters_mean >= MIN_WAITERS
        }) {
            judged_sites.push(method(&site.waiting_at));
            let known = site.signature.as_deref();
            let mut evidence = vec![format!(
                "in {} of {} thread dumps, {:.1} threads on average (up to {}) waited for a \
                 {} at {}",
                site.dumps_seen,
                threads.dumps,
                site.waiters_mean,
                site.waiters_max,
                safe_text(&site.lock_class),
                safe_text(&site.waiting_at)
            )];
            if let Some(w) = jfr_at(&site.waiting_at) {
                evidence.push(jfr_evidence(w));
            }
            if !site.waiter_names.is_empty() {
                evidence.push(format!(
                    "waiting: {}",
                    safe_text(&site.waiter_names.join(", "))
                ));
            }
            if let Some(holder) = &site.holder {
                evidence.push(format!("held by {}, at:", safe_text(holder)));
                evidence.extend(
                    site.holder_frames
                        .iter()
                        .take(6)
                        .map(|f| format!("    {}", safe_text(f))),
                );
            }
            let share = if all_threads > 0.0 {
                site.waiters_mean / all_threads
            } else {
                0.0
            };
            found.push(lock_finding(
                run,
                LockPlace {
                    at: &site.waiting_at,
                    key: &site.waiting_at,
                    known,
                    holder: site.holder.as_deref(),
                    noun: threads_noun,
                    waiting: site.waiters_mean,
                },
                evidence,
                (share, whose),
                json!({"site": site, "dumps": threads.dumps, "jfr": jfr_at(&site.waiting_at)}),
            ));
        }
    }
    // places JFR measured that the dumps did not judge (too few dumps, or waits the dumps'
    // moments missed)
    for w in jfr
        .iter()
        .filter(|w| w.threads_waiting_mean >= JFR_MIN_WAITING)
        .filter(|w| !judged_sites.contains(&method(&w.place.at)))
    {
        let known =
            kiln_runtime::threads::known_signature(w.place.frames.iter().map(String::as_str));
        let mut evidence = vec![jfr_evidence(w)];
        if !w.place.thread_names.is_empty() {
            evidence.push(format!(
                "waiting: {} ({} threads in all)",
                safe_text(&w.place.thread_names.join(", ")),
                w.place.threads
            ));
        }
        evidence.push("the waiting threads' stack:".into());
        evidence.extend(
            w.place
                .frames
                .iter()
                .take(8)
                .map(|f| format!("    {}", safe_text(f))),
        );
        found.push(lock_finding(
            run,
            LockPlace {
                at: &w.place.at,
                key: &method(&w.place.at),
                known,
                holder: None,
                noun: threads_noun,
                waiting: w.threads_waiting_mean,
            },
            evidence,
            // the share of the waiters' time: threads waiting of those that waited here
            (
                (w.threads_waiting_mean / f64::from(w.place.threads.max(1))).min(1.0),
                "the waiting threads' time",
            ),
            json!({"jfr": w}),
        ));
    }
    if found.is_empty() {
        Verdict::Clear
    } else {
        Verdict::Found(found)
    }
}

/// A place where threads waited for a lock, as the finding names it.
struct LockPlace<'a> {
    /// The frame that asked for the lock, as shown.
    at: &'a str,
    /// What keeps the finding's id stable from run to run.
    key: &'a str,
    known: Option<&'a str>,
    holder: Option<&'a str>,
    /// "Threads" or "Goroutines".
    noun: &'a str,
    /// Threads waiting on average.
    waiting: f64,
}

fn lock_finding(
    run: &RunRecord,
    place: LockPlace,
    evidence: Vec<String>,
    impact: (f64, &str),
    data: serde_json::Value,
) -> crate::Finding {
    let (cause, fix) = lock_cause_and_fix(place.known, place.holder);
    Draft {
        rule: BLOCKED_THREADS.id,
        key: place.key,
        severity: if place.known.is_some() || place.waiting >= 4.0 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: blocked_title(place.known, place.noun, place.at, place.waiting),
        evidence,
        window: run.window(),
        cause,
        fix,
        impact,
        data,
    }
    .finish()
}

/// JFR's lock waits at one place are a finding from this many threads waiting on average:
/// one thread always waiting means the lock serialises requests' work.
const JFR_MIN_WAITING: f64 = 1.0;

fn jfr_evidence(w: &kiln_runtime::summary::LockWaitSummary) -> String {
    format!(
        "JFR measured {} waits of {} ms or more for a {} {} at {}: {:.1} s in all over {} s, \
         {:.1} threads waiting on average, the longest {:.0} ms",
        w.waits,
        kiln_runtime::jfr::LOCK_THRESHOLD_MS,
        safe_text(&w.place.lock_class),
        w.place.noun(),
        safe_text(&w.place.at),
        w.wait_ms / 1e3,
        w.to_unix_s + 1 - w.from_unix_s,
        w.threads_waiting_mean,
        w.longest_ms
    )
}

fn blocked_title(known: Option<&str>, noun: &str, at: &str, waiting: f64) -> String {
    match known {
        Some(name) => {
            format!("Threads wait to log: {name} ({waiting:.1} threads blocked on average)")
        }
        None => format!(
            "{noun} wait for a lock at {} ({waiting:.1} on average)",
            safe_text(at)
        ),
    }
}

/// What causes waits at a lock and what to change, for a known signature or in general.
fn lock_cause_and_fix(known: Option<&str>, holder: Option<&str>) -> (String, String) {
    match known {
        Some("log4j2 async logger ring buffer full") => (
            "log4j2's async loggers write through a ring buffer; the log destination \
             (its appender) is slower than the requests log, the buffer is full, and \
             with the default queue-full policy every logging thread waits for a free \
             slot, one at a time behind a lock"
                .to_string(),
            "make the destination keep up (a faster appender, less logged per \
             request, no slow network appender in the request path), or let a full \
             buffer drop events instead of stopping requests: \
             -Dlog4j2.asyncQueueFullPolicy=Discard (with log4j2.discardThreshold, \
             INFO by default); a larger log4j2.asyncLoggerRingBufferSize only absorbs \
             bursts"
                .to_string(),
        ),
        Some("logback AsyncAppender queue full") => (
            "logback's AsyncAppender queue is full: its destination is slower than \
             the requests log, and put() blocks the logging threads"
                .to_string(),
            "make the destination keep up, or set neverBlock=\"true\" on the \
             AsyncAppender (full queue drops events) and a larger queueSize for bursts"
                .to_string(),
        ),
        _ => (
            "threads queue for a lock another thread holds while it works (slow work \
             inside the critical section, one lock for data every request touches)"
                .to_string(),
            format!(
                "shorten what {} does while holding the lock (no I/O or slow work \
                 inside it), split the lock per shard of the data, or use a \
                 concurrent structure instead",
                safe_text(holder.unwrap_or("the holder"))
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second, T0_MS};
    use kiln_record::schema::profile::ProfileRecord;
    use kiln_runtime::summary::{summarize, ContendedSite, ThreadsSummary};
    use kiln_runtime::{CollectorSecond, JvmSecond, RuntimeInfo, RuntimeSecond};

    fn jvm_info() -> RuntimeInfo {
        RuntimeInfo {
            runtime: "jvm".into(),
            ..Default::default()
        }
    }

    /// Ten seconds of 100 requests at 2 ms; in the `slow` seconds 5 of them take 60 ms.
    fn load_with_slow(slow: &[usize]) -> RunRecord {
        let seconds: Vec<Second> = (0..10)
            .map(|i| {
                if slow.contains(&i) {
                    Second::latencies(&[(2_000, 95), (60_000, 5)])
                } else {
                    Second::ok(100)
                }
            })
            .collect();
        load_run(&seconds)
    }

    /// Ten seconds of 100 requests at 2 ms, with the JVM pausing `pause_ms` each second in
    /// `collector`, and in the `slow` seconds requests of 60 ms at the tail.
    fn run_with_gc(collector: &str, pause_ms: &[f64], slow: &[usize]) -> RunRecord {
        let mut run = load_with_slow(slow);
        run.runtime_seconds = (0..10)
            .map(|i| RuntimeSecond {
                second: i as u32 + 1,
                unix_ms: T0_MS + 1000 * (i as u64 + 1),
                interval_s: 1.0,
                jvm: Some(JvmSecond {
                    gc: vec![CollectorSecond {
                        name: collector.into(),
                        pauses: u64::from(pause_ms[i] > 0.0),
                        pause_ms: pause_ms[i],
                    }],
                    gc_pauses: u64::from(pause_ms[i] > 0.0),
                    gc_pause_ms: pause_ms[i],
                    ..Default::default()
                }),
                thread_dump: None,
                python: None,
                go: None,
            })
            .collect();
        let seconds: Vec<&RuntimeSecond> = run.runtime_seconds.iter().collect();
        run.runtime = Some(summarize(&jvm_info(), &seconds));
        run
    }

    #[test]
    fn a_jvm_paused_for_gc_a_tenth_of_the_time_fires_with_its_collector() {
        let run = run_with_gc("G1 full collection pauses", &[120.0; 10], &[]);
        let Verdict::Found(found) = gc_pauses(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert_eq!(f.severity, Severity::High);
        assert!(f.title.contains("12.0% of the time"), "{}", f.title);
        assert!(
            f.evidence[1].starts_with("G1 full collection pauses: 10 pauses, 1200 ms"),
            "{:?}",
            f.evidence
        );
        assert!(f.fix.contains("DisableExplicitGC"), "{}", f.fix);
        assert!((f.impact.share - 0.12).abs() < 1e-9);
    }

    #[test]
    fn short_pauses_are_clear_unless_they_line_up_with_the_slow_seconds() {
        // 0.5% of the time in short pauses, every second: clear
        let run = run_with_gc("G1 young collection pauses", &[5.0; 10], &[2, 5, 8]);
        assert!(matches!(gc_pauses(&run), Verdict::Clear));
        // 3 slow seconds, each with a 25 ms pause, and short pauses elsewhere: GC makes the tail
        let mut pauses = [1.0; 10];
        for i in [2, 5, 8] {
            pauses[i] = 25.0;
        }
        let run = run_with_gc("G1 young collection pauses", &pauses, &[2, 5, 8]);
        let Verdict::Found(found) = gc_pauses(&run) else {
            panic!("no finding");
        };
        assert!(
            found[0].title.contains("3 of 3 slow seconds"),
            "{}",
            found[0].title
        );
        assert!(
            found[0]
                .fix
                .starts_with("allocate less per request (run again with --alloc"),
            "{}",
            found[0].fix
        );
        // the same pauses in other seconds than the slow ones: clear
        let run = run_with_gc("G1 young collection pauses", &pauses, &[1, 4, 7]);
        assert!(matches!(gc_pauses(&run), Verdict::Clear));
    }

    /// An allocation profile of `bytes` in all, `site_pct` of them in `site`.
    fn alloc_record(bytes: u64, site: &str, site_pct: f64) -> ProfileRecord {
        let share = |name: &str, pct: f64| kiln_record::schema::profile::FunctionShare {
            name: name.into(),
            self_samples: (bytes as f64 * pct / 100.0) as u64,
            total_samples: (bytes as f64 * pct / 100.0) as u64,
            self_pct: pct,
            total_pct: pct,
        };
        let summary = kiln_record::schema::profile::ProfileSummary {
            samples: bytes,
            distinct_stacks: 2,
            kernel_pct: 0.0,
            top_self: Vec::new(),
            top_total: Vec::new(),
            blocked_in: Vec::new(),
            allocated_in: vec![share(site, site_pct), share("Other.work", 100.0 - site_pct)],
            unwalked: Vec::new(),
            waiting_for_work_pct: None,
        };
        ProfileRecord::new(summary, "allocated/bytes")
    }

    #[test]
    fn young_pauses_driven_by_allocation_name_the_site_that_allocates() {
        // 6% of the time in young pauses; the JVM allocated 1,000 requests x 1 MiB, 61% of it
        // in Shop.render
        let mut run = run_with_gc("G1 young collection pauses", &[60.0; 10], &[]);
        run.alloc = Some(alloc_record(1000 << 20, "Shop.render_[j]", 61.0));
        let Verdict::Found(found) = gc_pauses(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        let said = f.evidence.join("\n");
        assert!(
            said.contains("allocated 1.0 MiB a request over the measured load (--alloc), 61% of it in Shop.render"),
            "{said}"
        );
        assert!(
            f.fix
                .starts_with("allocate less in Shop.render (61% of the bytes"),
            "{}",
            f.fix
        );
        assert_eq!(
            f.data["allocated_in"], "Shop.render",
            "without the inlined mark"
        );
        assert_eq!(f.data["alloc_bytes_per_request"], 1048576.0);
        // without --alloc: the fix says how to find the allocating code
        run.alloc = None;
        let Verdict::Found(found) = gc_pauses(&run) else {
            panic!("no finding");
        };
        assert!(
            found[0]
                .fix
                .contains("run again with --alloc to see which code allocates the bytes"),
            "{}",
            found[0].fix
        );
        assert!(found[0].data["allocated_in"].is_null());
        // full collections are not allocation's: the fix stays theirs, allocation unsaid
        let mut run = run_with_gc("G1 full collection pauses", &[60.0; 10], &[]);
        run.alloc = Some(alloc_record(1000 << 20, "Shop.render", 61.0));
        let Verdict::Found(found) = gc_pauses(&run) else {
            panic!("no finding");
        };
        assert!(!found[0].fix.contains("Shop.render"), "{}", found[0].fix);
        assert!(!found[0].evidence.join(" ").contains("--alloc"));
        // the same allocation and pauses too short to matter: no finding
        let mut run = run_with_gc("G1 young collection pauses", &[5.0; 10], &[]);
        run.alloc = Some(alloc_record(1000 << 20, "Shop.render", 61.0));
        assert!(matches!(gc_pauses(&run), Verdict::Clear));
    }

    /// Ten seconds of 100 requests at 2 ms, a Go target with one GC cycle (2 ms of pause,
    /// 150 ms of mark) starting 200 ms into each second of `gc`, and 60 ms requests at the
    /// tail in the `slow` seconds.
    fn go_run(gc: &[usize], slow: &[usize]) -> RunRecord {
        use kiln_runtime::go::{GoGcCycle, GoSecond};
        let mut run = load_with_slow(slow);
        run.runtime_seconds = (0..10)
            .map(|i| RuntimeSecond {
                second: i as u32 + 1,
                unix_ms: T0_MS + 1000 * (i as u64 + 1),
                interval_s: 1.0,
                go: Some(GoSecond::of(if gc.contains(&i) {
                    vec![GoGcCycle {
                        number: i as u64 + 1,
                        start_unix_ms: (T0_MS + 1000 * i as u64 + 200) as f64,
                        pause_ms: 2.0,
                        mark_ms: 150.0,
                        assist_cpu_ms: 40.0,
                        background_cpu_ms: 80.0,
                        heap_live_mb: 60.0,
                        ..Default::default()
                    }]
                } else {
                    vec![]
                })),
                ..Default::default()
            })
            .collect();
        let seconds: Vec<&RuntimeSecond> = run.runtime_seconds.iter().collect();
        let info = RuntimeInfo {
            runtime: "go".into(),
            ..Default::default()
        };
        run.runtime = Some(summarize(&info, &seconds));
        run
    }

    #[test]
    fn go_gc_cycles_in_the_slow_seconds_are_found_and_elsewhere_are_not() {
        let run = go_run(&[2, 5, 8], &[2, 5, 8]);
        let Verdict::Found(found) = gc_pauses(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert!(
            f.title
                .contains("Go's garbage collector makes the tail: 3 of 3 slow seconds"),
            "{}",
            f.title
        );
        assert!(
            f.evidence[0].starts_with("3 GC cycles in 3 of the 10"),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence[1].contains("120 ms of it mark assist"),
            "{:?}",
            f.evidence
        );
        assert!(f.fix.contains("GOMEMLIMIT"), "{}", f.fix);
        // the execution traces' mark assist, when taken, joins the evidence
        let mut traced = run.clone();
        traced.runtime.as_mut().unwrap().go_assist = Some(kiln_runtime::summary::GoAssistSummary {
            assist_ms: 361.8,
            seconds_traced: 15,
            seconds_with_assist: 4,
            worst_second: Some((1_795_428_003, 341.1)),
            functions: vec![kiln_runtime::gotrace::AssistWhere {
                function: "main.build".into(),
                assist_ms: 39.2,
                goroutines: 5,
            }],
        });
        let Verdict::Found(found) = gc_pauses(&traced) else {
            panic!("no finding");
        };
        let evidence = found[0].evidence.join("\n");
        assert!(
            evidence.contains("362 ms in mark assist in 4 of 15 traced seconds, up to 341 ms"),
            "{evidence}"
        );
        assert!(
            evidence.contains("39 ms assisting in main.build (5 goroutines)"),
            "{evidence}"
        );
        // the same cycles in other seconds than the slow ones, or none slow: clear
        assert!(matches!(
            gc_pauses(&go_run(&[1, 4, 7], &[2, 5, 8])),
            Verdict::Clear
        ));
        assert!(matches!(
            gc_pauses(&go_run(&[2, 5, 8], &[])),
            Verdict::Clear
        ));
        // the JVM's rules do not apply: Go has no JIT and no exceptions; goroutines unread
        assert!(matches!(jit_warmup(&run), Verdict::Clear));
        assert!(matches!(exceptions(&run), Verdict::Clear));
        assert!(matches!(blocked_threads(&run), Verdict::Unjudged(_)));
        // a Go target kiln did not start: its GC was not read, and it says how to
        let mut unread = run.clone();
        unread.runtime.as_mut().unwrap().go = None;
        let Verdict::Unjudged(why) = gc_pauses(&unread) else {
            panic!("judged");
        };
        assert!(why.contains("--spawn"), "{why}");
    }

    fn run_with_jit(jit_ms: &[f64]) -> RunRecord {
        let mut run = run_with_gc("young", &[0.0; 10], &[]);
        for (s, ms) in run.runtime_seconds.iter_mut().zip(jit_ms) {
            s.jvm.as_mut().unwrap().jit_ms = Some(*ms);
        }
        run
    }

    #[test]
    fn a_jit_busy_through_the_measured_seconds_is_a_warm_up_not_over() {
        let run = run_with_jit(&[900.0, 800.0, 600.0, 300.0, 150.0, 40.0, 10.0, 0.0, 0.0, 0.0]);
        let Verdict::Found(found) = jit_warmup(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert!(f.title.contains("5 of 10 measured seconds"), "{}", f.title);
        assert!(f.evidence[0].contains("2800 ms"), "{:?}", f.evidence);
        assert!(f.fix.contains("--warmup auto"), "{}", f.fix);
        assert!((f.impact.share - 0.28).abs() < 1e-9);
    }

    #[test]
    fn a_burst_at_the_start_or_a_quiet_jit_is_clear() {
        // two busy seconds: new connections' code compiled as the phase began
        let run = run_with_jit(&[600.0, 300.0, 20.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0]);
        assert!(matches!(jit_warmup(&run), Verdict::Clear));
        let run = run_with_jit(&[50.0; 10]);
        assert!(matches!(jit_warmup(&run), Verdict::Clear));
        // no JIT counter: said so
        let mut run = run_with_jit(&[]);
        for s in &mut run.runtime_seconds {
            s.jvm.as_mut().unwrap().jit_ms = None;
        }
        assert!(matches!(jit_warmup(&run), Verdict::Unjudged(r) if r.contains("JIT")));
    }

    #[test]
    fn exceptions_at_jmcs_rates_fire_and_below_them_are_clear() {
        let mut run = run_with_gc("young", &[0.0; 10], &[]);
        assert!(matches!(exceptions(&run), Verdict::Unjudged(r) if r.contains("--runtime deep")));
        let runtime = run.runtime.as_mut().unwrap();
        runtime.exceptions_per_s = Some(12_000.0);
        runtime.exceptions = Some(120_000);
        let Verdict::Found(found) = exceptions(&run) else {
            panic!("no finding");
        };
        assert_eq!(found[0].severity, Severity::High);
        assert!(
            found[0].evidence[1].starts_with("120.0 per request (1000 requests)"),
            "{:?}",
            found[0].evidence
        );
        run.runtime.as_mut().unwrap().exceptions_per_s = Some(4_000.0);
        assert!(matches!(exceptions(&run), Verdict::Clear));
    }

    #[test]
    fn without_a_jvm_it_says_why_or_is_clear() {
        let mut run = load_run(&[Second::ok(10)]);
        assert!(matches!(gc_pauses(&run), Verdict::Unjudged(r) if r.contains("--watch-port")));
        run.runtime = Some(summarize(
            &RuntimeInfo {
                runtime: "go".into(),
                ..Default::default()
            },
            &[],
        ));
        assert!(matches!(gc_pauses(&run), Verdict::Unjudged(r) if r.contains("--spawn")));
        assert!(matches!(blocked_threads(&run), Verdict::Unjudged(_)));
        run.runtime.as_mut().unwrap().info.runtime = "python".into();
        assert!(matches!(gc_pauses(&run), Verdict::Unjudged(r) if r.contains("python")));
        run.runtime.as_mut().unwrap().info.runtime = "native".into();
        assert!(matches!(gc_pauses(&run), Verdict::Clear));
        run.runtime.as_mut().unwrap().info.runtime = "jvm".into();
        run.runtime.as_mut().unwrap().info.not_read = vec!["no hsperfdata".into()];
        assert!(matches!(gc_pauses(&run), Verdict::Unjudged(r) if r.contains("no hsperfdata")));
    }

    fn run_with_dumps(sites: Vec<ContendedSite>, dumps: u32) -> RunRecord {
        let mut run = run_with_gc("young", &[0.0; 10], &[]);
        run.runtime.as_mut().unwrap().threads = Some(ThreadsSummary {
            dumps,
            states_mean: [("BLOCKED".into(), 6.0), ("RUNNABLE".into(), 6.0)].into(),
            blocked_max: 7,
            contended: sites,
            ..Default::default()
        });
        run
    }

    fn site(seen: u32, waiters: f64, signature: Option<&str>) -> ContendedSite {
        ContendedSite {
            lock_class: "java.lang.Object".into(),
            waiting_at: "org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull".into(),
            dumps_seen: seen,
            waiters_mean: waiters,
            waiters_max: waiters.ceil() as u32,
            holder: Some("request-19".into()),
            holder_frames: vec!["jdk.internal.misc.Unsafe.park".into(), "com.lmax.disruptor.MultiProducerSequencer.next".into()],
            waiter_names: vec!["request-18".into(), "request-20".into()],
            signature: signature.map(str::to_string),
        }
    }

    #[test]
    fn threads_blocked_behind_a_full_log4j2_ring_buffer_are_named_with_the_fix() {
        let run = run_with_dumps(
            vec![site(3, 6.0, Some("log4j2 async logger ring buffer full"))],
            3,
        );
        let Verdict::Found(found) = blocked_threads(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert_eq!(f.severity, Severity::High);
        assert!(
            f.title.contains("log4j2 async logger ring buffer full"),
            "{}",
            f.title
        );
        assert!(f.fix.contains("asyncQueueFullPolicy=Discard"), "{}", f.fix);
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("MultiProducerSequencer.next")),
            "{:?}",
            f.evidence
        );
        assert!((f.impact.share - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_lock_met_once_or_by_one_thread_is_clear_and_no_dumps_is_said() {
        // seen in 1 of 4 dumps; seen always but by one thread at a time
        let run = run_with_dumps(vec![site(1, 5.0, None), site(4, 1.0, None)], 4);
        assert!(matches!(blocked_threads(&run), Verdict::Clear));
        let run = run_with_dumps(vec![site(1, 5.0, None)], 1);
        assert!(matches!(blocked_threads(&run), Verdict::Unjudged(r) if r.contains("too few")));
        let mut run = run_with_dumps(Vec::new(), 3);
        run.runtime.as_mut().unwrap().threads = None;
        assert!(
            matches!(blocked_threads(&run), Verdict::Unjudged(r) if r.contains("--runtime deep"))
        );
        // an unknown lock: the holder is named in the fix
        let run = run_with_dumps(vec![site(4, 3.0, None)], 4);
        let Verdict::Found(found) = blocked_threads(&run) else {
            panic!("no finding");
        };
        assert_eq!(found[0].severity, Severity::Medium);
        assert!(found[0].fix.contains("request-19"), "{}", found[0].fix);
    }

    fn jfr_site(at: &str, waiting: f64, frames: &[&str]) -> kiln_runtime::summary::LockWaitSummary {
        kiln_runtime::summary::LockWaitSummary {
            place: kiln_runtime::jfr::LockWaitPlace {
                kind: "monitor".into(),
                lock_class: "LockShop$Inventory".into(),
                at: at.into(),
                frames: frames.iter().map(|f| f.to_string()).collect(),
                threads: 4,
                thread_names: vec!["request-20".into(), "request-21".into()],
            },
            waits: 500,
            wait_ms: waiting * 8_000.0,
            longest_ms: 48.0,
            threads_waiting_mean: waiting,
            from_unix_s: 1_795_575_655,
            to_unix_s: 1_795_575_662,
        }
    }

    #[test]
    fn jfr_lock_waits_are_a_finding_without_dumps_and_evidence_beside_them() {
        // JFR alone (the dumps too few): 2.5 threads always waiting at LockShop.reserve
        let mut run = run_with_dumps(Vec::new(), 1);
        run.runtime.as_mut().unwrap().lock_waits = vec![jfr_site(
            "LockShop.reserve(line 44)",
            2.5,
            &["LockShop.reserve(line 44)"],
        )];
        let Verdict::Found(found) = blocked_threads(&run) else {
            panic!("no finding");
        };
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert!(f.title.contains("LockShop.reserve"), "{}", f.title);
        assert!(
            f.evidence[0].contains("JFR measured 500 waits"),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence[0].contains("2.5 threads waiting"),
            "{:?}",
            f.evidence
        );
        assert!((f.impact.share - 2.5 / 4.0).abs() < 1e-9);
        // under one thread waiting on average: clear
        run.runtime.as_mut().unwrap().lock_waits =
            vec![jfr_site("LockShop.reserve(line 44)", 0.5, &[])];
        assert!(matches!(blocked_threads(&run), Verdict::Clear));
        // log4j2's enqueue among the frames: the signature is named
        run.runtime.as_mut().unwrap().lock_waits = vec![jfr_site(
            "org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull(line 273)",
            3.0,
            &["org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull(line 273)"],
        )];
        let Verdict::Found(found) = blocked_threads(&run) else {
            panic!("no finding");
        };
        assert!(
            found[0].title.contains("ring buffer full"),
            "{}",
            found[0].title
        );
        // dumps and JFR at the same place: one finding, JFR's figures in its evidence
        let mut run = run_with_dumps(
            vec![site(3, 6.0, Some("log4j2 async logger ring buffer full"))],
            3,
        );
        run.runtime.as_mut().unwrap().lock_waits = vec![jfr_site(
            "org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull(line 273)",
            5.0,
            &[],
        )];
        let Verdict::Found(found) = blocked_threads(&run) else {
            panic!("no finding");
        };
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].evidence[1].contains("JFR measured"),
            "{:?}",
            found[0].evidence
        );
    }
}
