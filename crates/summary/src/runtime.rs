//! The end summary's runtime lines: what runtime the watched process runs, what kiln read
//! of it over the measured load (a JVM's GC pauses, safepoints, JIT, threads and heap) and
//! what it could not read, with why.

use std::fmt::Write as _;

use kiln_runtime::summary::{GoSummary, PythonSummary, RuntimeSummary, ThreadsSummary};

use kiln_record::text::{self as format, safe_text};

fn ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} s", v / 1000.0)
    } else {
        format!("{v:.1} ms")
    }
}

fn kib(v: u64) -> String {
    format::bytes(v.saturating_mul(1024))
}

pub fn to_text(s: &RuntimeSummary) -> String {
    let info = &s.info;
    let name = match info.runtime.as_str() {
        "jvm" => "JVM",
        "go" => "Go",
        "python" => "Python",
        "node" => "Node.js",
        _ => "native (no managed runtime)",
    };
    let mut head = name.to_string();
    if let Some(v) = &info.version {
        let _ = write!(head, " {}", safe_text(v));
    }
    for (key, value) in &info.details {
        if key != "collectors" {
            let _ = write!(head, ", {key} {}", safe_text(value));
        }
    }
    let mut out = format!("Runtime    {head}\n");
    if !s.cpu_by_thread_role.is_empty() {
        let roles: Vec<String> = s
            .cpu_by_thread_role
            .iter()
            .map(|r| format!("{} {:.1}%", r.role.label(), r.cpu_pct))
            .collect();
        let _ = writeln!(
            out,
            "           threads' CPU (% of a core): {}",
            roles.join(", ")
        );
    }
    if let Some(j) = &s.jvm {
        let mut gc = format!(
            "           GC: {} pauses, {} paused ({:.1}% of the time)",
            j.gc_pauses,
            ms(j.gc_pause_ms),
            j.gc_pause_share * 100.0
        );
        if let Some(p) = &j.longest_pause {
            let _ = write!(gc, "; longest {} ({})", ms(p.ms), safe_text(&p.collector));
        }
        if let Some((second, pause)) = j.worst_second {
            let _ = write!(gc, "; most in second {second} ({})", ms(pause));
        }
        out += &gc;
        out += "\n";
        let collectors: Vec<String> = j
            .by_collector
            .iter()
            .filter(|c| c.pauses > 0)
            .map(|c| format!("{} {} ({})", safe_text(&c.name), c.pauses, ms(c.pause_ms)))
            .collect();
        if !collectors.is_empty() {
            let _ = writeln!(out, "             {}", collectors.join(", "));
        }
        if let (Some(n), Some(t)) = (j.safepoints, j.safepoint_ms) {
            let _ = writeln!(
                out,
                "           safepoints: {n}, {} stopped{}",
                ms(t),
                j.safepoint_sync_ms
                    .map(|sync| format!(" ({} of it bringing threads to a stop)", ms(sync)))
                    .unwrap_or_default()
            );
        }
        if let (Some(n), Some(t)) = (j.jit_compiles, j.jit_ms) {
            let _ = writeln!(
                out,
                "           JIT: {n} compiles, {} compiling{}",
                ms(t),
                j.jit_last_busy_second
                    .map(|s| format!("; busy until second {s}"))
                    .unwrap_or_default()
            );
        }
        let mut mem = Vec::new();
        if let Some(t) = j.threads_live_max {
            mem.push(format!("Java threads up to {t}"));
        }
        if let Some(used) = j.heap_used_max_kib {
            mem.push(match j.heap_committed_kib {
                Some(c) => format!("Java heap up to {} used of {} committed", kib(used), kib(c)),
                None => format!("Java heap up to {} used", kib(used)),
            });
        }
        if let Some(m) = j.metaspace_used_kib {
            mem.push(format!("metaspace {}", kib(m)));
        }
        if let Some(c) = j.classes_loaded.filter(|c| *c > 0) {
            mem.push(format!("{c} classes loaded"));
        }
        if let Some(c) = j.contended_locks {
            mem.push(format!("{c} contended monitor enters"));
        }
        if !mem.is_empty() {
            let _ = writeln!(out, "           {}", mem.join("; "));
        }
    }
    if let Some(t) = &s.threads {
        // a Go target's goroutine dumps are read in the same terms
        let noun = if info.runtime == "go" {
            "goroutines"
        } else {
            "threads"
        };
        out += &threads_text(t, noun);
    }
    if let Some(p) = &s.python {
        out += &python_text(p);
    }
    if let Some(g) = &s.go {
        out += &go_text(g);
    }
    if let Some(a) = &s.go_assist {
        out += &go_assist_text(a);
    }
    if let (Some(rate), Some(n)) = (s.exceptions_per_s, s.exceptions) {
        let _ = writeln!(
            out,
            "           exceptions: {rate:.0} created a second, {n} in the window (JFR)"
        );
    }
    for w in s.lock_waits.iter().take(3) {
        let _ = writeln!(
            out,
            "           lock waits (JFR, {} ms or longer): {:.1} threads on average waited for a \
             {} {} at {}: {} waits, {:.1} s in all, the longest {:.0} ms",
            kiln_runtime::jfr::LOCK_THRESHOLD_MS,
            w.threads_waiting_mean,
            safe_text(&w.place.lock_class),
            w.place.noun(),
            safe_text(&w.place.at),
            w.waits,
            w.wait_ms / 1e3,
            w.longest_ms
        );
    }
    for why in &info.not_read {
        let _ = writeln!(out, "           not read: {}", safe_text(why));
    }
    out
}

/// The thread dumps' lines: states, the most often contended lock with its holder, and what
/// the dumps cost.
fn threads_text(t: &ThreadsSummary, noun: &str) -> String {
    let states: Vec<String> = t
        .states_mean
        .iter()
        .map(|(state, n)| format!("{n:.1} {}", safe_text(state)))
        .collect();
    let mut out = format!(
        "           {noun} ({} dump{}, mean): {}",
        t.dumps,
        if t.dumps == 1 { "" } else { "s" },
        states.join(", "),
    );
    if noun == "threads" {
        let _ = write!(out, "; up to {} BLOCKED", t.blocked_max);
    }
    out += "\n";
    for site in t.contended.iter().take(3) {
        let _ = write!(
            out,
            "           contended: {:.1} {noun} (up to {}) wait for a {} at {} in {} of {} dumps",
            site.waiters_mean,
            site.waiters_max,
            safe_text(&site.lock_class),
            safe_text(&site.waiting_at),
            site.dumps_seen,
            t.dumps
        );
        if let Some(holder) = &site.holder {
            let _ = write!(
                out,
                "; held by {} at {}",
                safe_text(holder),
                safe_text(&holder_place(&site.holder_frames))
            );
        }
        if let Some(signature) = &site.signature {
            let _ = write!(out, " [{}]", safe_text(signature));
        }
        out += "\n";
    }
    let _ = writeln!(
        out,
        "           the dumps cost: {} each on average (longest {}){}{}",
        ms(t.took_ms_mean),
        ms(t.took_ms_max),
        t.safepoint_ms_mean
            .map(|sp| format!(", of which the JVM stood {} at safepoints", ms(sp)))
            .unwrap_or_default(),
        match t.dumps_with_holders {
            0 => String::new(),
            n => format!("; {n} taken again with -l for j.u.c. locks' holders (a heap walk)"),
        }
    );
    out
}

/// Where a lock's holder is: its innermost frame, and when that is the JDK's (a sleep, a
/// socket read) the first frame of the code that called it, which holds the lock.
fn holder_place(frames: &[String]) -> String {
    const JDK: [&str; 4] = ["java.", "javax.", "jdk.", "sun."];
    let jdk = |f: &String| JDK.iter().any(|p| f.starts_with(p));
    match frames.first() {
        None => "?".to_string(),
        Some(first) if jdk(first) => match frames.iter().find(|f| !jdk(f)) {
            Some(caller) => format!("{first} in {caller}"),
            None => first.clone(),
        },
        Some(first) => first.clone(),
    }
}

/// py-spy's view: threads, the GIL's holder and where it was.
/// A Go target's GC lines (gctrace): cycles, stop-the-world time, the GC's CPU and how much
/// of it allocating goroutines did (mark assist), and where it came.
fn go_text(g: &GoSummary) -> String {
    let mut out = format!(
        "           GC: {} cycles in {} of {} seconds, {} stopped ({:.2}% of the time; longest {})\n",
        g.gc_cycles,
        g.seconds_with_gc,
        g.seconds,
        ms(g.pause_ms),
        100.0 * g.pause_share,
        ms(g.longest_pause_ms)
    );
    if g.cpu_known {
        let _ = write!(
            out,
            "             GC CPU {} ({:.1}% of a core), {} of it mark assist by allocating goroutines",
            ms(g.gc_cpu_ms),
            100.0 * g.gc_cpu_cores,
            ms(g.assist_cpu_ms)
        );
        if let Some((second, assist)) = g.worst_assist_second {
            let _ = write!(out, "; most in second {second} ({})", ms(assist));
        }
    } else {
        out += "             the GC's CPU and mark assist were not read (expvar has pauses only)";
    }
    if let Some(live) = g.heap_live_max_mb {
        let _ = write!(out, "; live heap up to {live:.0} MB");
    }
    out += "\n";
    out
}

/// Mark assist from the execution traces: how much, in which seconds, in which functions.
fn go_assist_text(a: &kiln_runtime::summary::GoAssistSummary) -> String {
    let mut out = format!(
        "           mark assist (execution traces): {} in {} of {} traced seconds",
        ms(a.assist_ms),
        a.seconds_with_assist,
        a.seconds_traced
    );
    if let Some((_, worst)) = a.worst_second {
        let _ = write!(out, ", at most {} in a second", ms(worst));
    }
    out += "\n";
    for f in a.functions.iter().take(3) {
        let _ = writeln!(
            out,
            "             {} assisting in {} ({} goroutines)",
            ms(f.assist_ms),
            safe_text(&f.function),
            f.goroutines
        );
    }
    out
}

fn python_text(p: &PythonSummary) -> String {
    let mut out = format!(
        "           threads: {:.1} on average, {:.1} running Python code; the GIL held in {:.0}% of {} py-spy dumps (each {} on average, at most {})\n",
        p.threads_mean,
        p.active_mean,
        100.0 * p.gil_held_share,
        p.dumps,
        ms(p.took_ms_mean),
        ms(p.took_ms_max)
    );
    for h in &p.gil_holders {
        let _ = writeln!(
            out,
            "             GIL holder at {} in {:.0}% of dumps ({})",
            safe_text(&h.frame),
            100.0 * h.share,
            safe_text(&h.threads.join(", "))
        );
    }
    if let Some(waiting) = p.gil_waiters_mean {
        let _ = writeln!(
            out,
            "             waiting for the GIL: {waiting:.1} threads on average, at most {}{}",
            p.gil_waiters_max,
            if p.gil_waiter_names.is_empty() {
                String::new()
            } else {
                format!(" ({})", safe_text(&p.gil_waiter_names.join(", ")))
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::holder_place;

    #[test]
    fn a_holder_in_the_jdk_is_placed_in_the_code_that_called_it() {
        let frames = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            holder_place(&frames(&[
                "java.lang.Thread.sleep",
                "LockShop.reserve",
                "LockShop.lambda$main$2"
            ])),
            "java.lang.Thread.sleep in LockShop.reserve"
        );
        assert_eq!(
            holder_place(&frames(&["com.lmax.disruptor.MultiProducerSequencer.next"])),
            "com.lmax.disruptor.MultiProducerSequencer.next"
        );
        assert_eq!(
            holder_place(&frames(&["jdk.internal.misc.Unsafe.park"])),
            "jdk.internal.misc.Unsafe.park"
        );
        assert_eq!(holder_place(&[]), "?");
    }
}
