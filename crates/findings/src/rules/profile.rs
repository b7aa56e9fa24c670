//! Where the CPU goes, by category of frames across runtimes (JVM, Go, Python, Node, Rust,
//! native, the kernel): each category whose share of on-CPU samples passes its threshold is a
//! finding with its heaviest frames and the callers that lead into it. Frames match by name
//! (after perf's `_[k]`/`_[j]` marks); the tables follow async-profiler's classifier and
//! Sentry's frame categories.

use std::borrow::Cow;
use std::collections::HashMap;

use kiln_profile::Folded;
use kiln_record::text::safe_text;
use serde_json::json;

use super::{Draft, Fix, Rule};
use crate::{RunRecord, Severity, Verdict};

/// Fewer samples than this and a share is noise.
const MIN_SAMPLES: u64 = 200;

struct Category {
    rule: &'static str,
    /// What the samples do, for the title: "builds exceptions".
    doing: &'static str,
    /// A frame containing one of these is in the category.
    frames: &'static [&'static str],
    /// Samples in this category are not counted in these (its frames lie inside them: the
    /// allocations a JSON parser makes are the parsing's cost, gone when it is).
    takes_from: &'static [&'static str],
    /// Frames passed over when naming the caller (an exception's own constructors).
    not_callers: &'static [&'static str],
    /// Also in the category: a sample with one of the first frames above one of the second
    /// (a logger walking the stack, when the JIT has inlined the frames that name it).
    enclosing: Option<(&'static [&'static str], &'static [&'static str])>,
    threshold: f64,
    cause: &'static str,
    fix: Fix,
}

const CATEGORIES: &[Category] = &[
    Category {
        rule: "cpu.log-location",
        doing: "captures the caller's location for log events",
        frames: &[
            "StackLocatorUtil",
            "StackLocator.calcLocation",
            "StackLocator.getStackTraceElement",
            "Log4jLogEvent.getSource",
            "LogEvent.getSource",
            "logback.classic.spi.CallerData",
            "LoggingEvent.getCallerData",
            "findCaller",
        ],
        takes_from: &["cpu.exceptions", "cpu.logging", "cpu.allocation"],
        not_callers: &[],
        enclosing: Some((
            &["org.apache.logging.log4j.", "ch.qos.logback."],
            &[
                "StackWalk",
                "StackStreamFactory",
                "fill_in_stack_trace",
                "FillInStackTrace",
                "StackTraceElement",
                "Throwable.getStackTrace",
            ],
        )),
        threshold: 0.02,
        cause: "the logging pattern or configuration asks for the caller's class, method or \
                line: every event walks the stack to find it (log4j2: location is several \
                times slower, and 30-100x slower with async loggers)",
        fix: Fix::any(
            "set includeLocation=\"false\" on the loggers and appenders, and drop %C %F %L %l \
              %M (and logback's %caller) from the patterns",
        ),
    },
    Category {
        rule: "cpu.exceptions",
        doing: "builds exceptions and walks stacks",
        frames: &[
            "Throwable.fillInStackTrace",
            "JVM_FillInStackTrace",
            "java_lang_Throwable::fill_in_stack_trace",
            "Throwable.<init>",
            "StackWalker",
            "java_lang_StackTraceElement",
            "Backtrace::capture",
            "Backtrace::force_capture",
            "Backtrace::create",
            "_Unwind_Backtrace",
            "backtrace::backtrace",
            "runtime.gopanic",
            "runtime.Callers",
            "traceback.extract_stack",
        ],
        takes_from: &["cpu.allocation"],
        not_callers: &[".<init>"],
        enclosing: None,
        threshold: 0.05,
        cause: "exceptions (or stack traces) are made for ordinary control flow: each one \
                captures the whole stack",
        fix: Fix {
            any: "don't throw for expected outcomes: return a status (a Result, an Optional, an \
                  error value); capture backtraces only on errors",
            runtimes: &[
                (
                    "jvm",
                    "a JVM",
                    "if an exception must be thrown often, reuse a preallocated one or create \
                     it without a stack trace (writableStackTrace=false, or override \
                     fillInStackTrace)",
                ),
                (
                    "native",
                    "native code",
                    "Rust's Backtrace::force_capture walks the stack every time; \
                     Backtrace::capture only when RUST_LIB_BACKTRACE (or RUST_BACKTRACE) asks",
                ),
                (
                    "go",
                    "Go",
                    "panics and runtime.Callers walk the stack: return errors instead of \
                     recovering panics",
                ),
                (
                    "python",
                    "Python",
                    "traceback.extract_stack and logging's stack_info walk the stack: keep \
                     them off the hot path",
                ),
            ],
        },
    },
    Category {
        rule: "cpu.json",
        doing: "parses and writes JSON",
        frames: &[
            "com.fasterxml.jackson.",
            "com.google.gson.",
            "org.json.",
            "serde_json::",
            "encoding/json.",
            "json/decoder.py",
            "json/encoder.py",
            "simdjson",
            "JSON.parse",
            "JSON.stringify",
            "JsonParse",
            "orjson",
            "ujson",
        ],
        takes_from: &["cpu.allocation"],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "the same documents are parsed or written again and again, or they are larger \
                than the request needs",
        fix: Fix::any(
            "parse once and keep the result (cache parsed configuration and templates); reuse \
              mappers and readers; send smaller payloads; stream large ones",
        ),
    },
    Category {
        rule: "cpu.regex",
        doing: "runs regular expressions",
        frames: &[
            "java.util.regex.",
            "regex::",
            "regex_automata::",
            "regexp.",
            "sre_",
            "_sre.",
            "pcre",
            "RegExp",
        ],
        takes_from: &["cpu.allocation"],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "regular expressions run on every request, or are compiled each time \
                (String.split, String.replaceAll and matches compile their pattern on every \
                call in Java)",
        fix: Fix::any(
            "compile patterns once and keep them; use plain string functions where a pattern \
              is not needed; check patterns for backtracking",
        ),
    },
    Category {
        rule: "cpu.reflection",
        doing: "calls through reflection",
        frames: &[
            "java.lang.reflect.",
            "jdk.internal.reflect.",
            "sun.reflect.",
            "reflect.Value.",
        ],
        takes_from: &["cpu.allocation"],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "code looks up and invokes methods or fields reflectively on the hot path",
        fix: Fix::any(
            "cache the looked-up Method/Field or use MethodHandles; generate code at build \
              time instead of reflecting per call",
        ),
    },
    Category {
        rule: "cpu.logging",
        doing: "formats and writes logs",
        frames: &[
            "org.apache.logging.log4j.",
            "ch.qos.logback.",
            "java.util.logging.",
            "logging/__init__.py",
            "tracing_subscriber::",
            "log4rs::",
            "env_logger::",
            "go.uber.org/zap",
        ],
        takes_from: &["cpu.allocation"],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "every request writes log events, formatted and written on the request thread",
        fix: Fix::any(
            "log less on the hot path (levels, sampling); use asynchronous appenders; avoid \
              building messages that are not written (parameterized messages)",
        ),
    },
    Category {
        rule: "cpu.clock-syscall",
        doing: "reads the clock through system calls",
        frames: &[
            "__x64_sys_clock_gettime",
            "__do_sys_clock_gettime",
            "__arm64_sys_clock_gettime",
            "posix_get_monotonic",
            "posix_clock_realtime_get",
            "__x64_sys_gettimeofday",
            "read_hpet",
            "pvclock_clocksource_read",
            "acpi_pm_read",
        ],
        takes_from: &[],
        not_callers: &[],
        enclosing: None,
        threshold: 0.03,
        cause: "clock reads enter the kernel instead of staying in the vDSO: the clocksource \
                cannot be read from user space (xen, hpet, acpi_pm), or the code calls \
                syscall(SYS_clock_gettime) directly",
        fix: Fix::any(
            "use the tsc clocksource where it is stable \
              (/sys/devices/system/clocksource/clocksource0/current_clocksource); call \
              clock_gettime through libc, not syscall(); read the clock less often",
        ),
    },
    Category {
        rule: "cpu.page-faults",
        doing: "handles page faults",
        frames: &[
            "page_fault",
            "handle_mm_fault",
            "do_anonymous_page",
            "clear_page_erms",
            "clear_page_rep",
        ],
        takes_from: &[],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "memory is mapped and touched for the first time on the hot path (large \
                allocations freed back to the kernel and mapped again)",
        fix: super::cpu::PAGE_FAULTS_FIX,
    },
    Category {
        rule: "cpu.lock-spin",
        doing: "spins and waits on contended locks",
        frames: &[
            // the contended paths only: a futex call also wakes a condition variable or
            // parks an idle worker, which is handing work over, not fighting for a lock
            "native_queued_spin_lock_slowpath",
            "__lll_lock_wait",
            "futex::Mutex::lock_contended",
            "futex::RwLock::read_contended",
            "futex::RwLock::write_contended",
            "ObjectMonitor::enter",
            "ObjectSynchronizer::",
            "parking_lot::raw_mutex",
            "parking_lot::raw_rwlock",
            "runtime.lock2",
        ],
        takes_from: &[],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "threads contend for the same lock: they spin and call into the kernel to wait \
                and wake each other",
        fix: Fix::any(
            "find the lock (the callers below); hold it for less time, split it (per-key or \
              striped locks), or replace it with a concurrent structure",
        ),
    },
    Category {
        rule: "cpu.gc",
        doing: "collects garbage",
        frames: &[
            "GC Thread",
            "G1 Conc",
            "G1 Refine",
            "G1 Main Marker",
            "G1 Service",
            "GCTaskThread",
            "ZThread",
            "Shenandoah",
            "runtime.gcBgMarkWorker",
            "runtime.gcDrain",
            "runtime.gcAssistAlloc",
            "gc_collect_main",
        ],
        takes_from: &[],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "the program allocates fast enough that collecting garbage takes a large share \
                of the CPU",
        fix: Fix::any(
            "allocate less per request (reuse objects, avoid boxing and temporary \
              collections); give the heap more room (-Xmx, GOGC/GOMEMLIMIT)",
        ),
    },
    Category {
        rule: "cpu.jit",
        doing: "compiles code (JIT)",
        frames: &[
            "C2 CompilerThre",
            "C1 CompilerThre",
            "CompileBroker::compiler_thread_loop",
        ],
        takes_from: &[],
        not_callers: &[],
        enclosing: None,
        threshold: 0.10,
        cause: "the JIT compiler was still busy: the measured load began before warm-up ended, \
                or code keeps being deoptimized and recompiled",
        fix: Fix::any(
            "warm up longer before measuring (--warmup); if it persists, look for \
              deoptimization (-XX:+PrintCompilation shows 'made not entrant')",
        ),
    },
    Category {
        rule: "cpu.allocation",
        doing: "allocates and frees memory",
        frames: &[
            "malloc",
            "_int_free",
            "cfree",
            "__libc_free",
            "je_",
            "tcmalloc",
            "OptoRuntime::new_",
            "MemAllocator::",
            "runtime.mallocgc",
        ],
        takes_from: &[],
        not_callers: &[],
        enclosing: None,
        threshold: 0.15,
        cause: "the hot path allocates and frees many objects",
        fix: Fix::any(
            "allocate less per request: reuse buffers, preallocate collections, avoid \
              temporary strings",
        ),
    },
];

/// Whether `rule` is one of the categories this rule judges (`cpu.json`, `cpu.exceptions`...).
pub(super) fn is_category(rule: &str) -> bool {
    CATEGORIES.iter().any(|c| c.rule == rule)
}

pub const CATEGORIES_RULE: Rule = Rule {
    id: "cpu.categories",
    judge: categories,
};

/// A frame's name without its kernel, JIT, inlined, interpreted or C1 mark (perf's and
/// async-profiler's `ann`).
pub(super) fn strip_mark(frame: &str) -> &str {
    ["_[k]", "_[j]", "_[i]", "_[0]", "_[1]"]
        .iter()
        .find_map(|mark| frame.strip_suffix(mark))
        .unwrap_or(frame)
}

/// A frame's name without perf's mark and without angle brackets, so a pattern written
/// `Backtrace::create` matches Rust's `<std::backtrace::Backtrace>::create` and
/// `<T as Trait>::f` reads as a path.
pub(super) fn plain_name(frame: &str) -> Cow<'_, str> {
    let f = strip_mark(frame);
    if f.contains(['<', '>']) {
        Cow::Owned(f.chars().filter(|c| !matches!(c, '<' | '>')).collect())
    } else {
        Cow::Borrowed(f)
    }
}

/// The index of the first frame (root first) in the category, if any; `frames` are plain
/// names (`plain_name`).
fn first_match(frames: &[Cow<str>], category: &Category) -> Option<usize> {
    let has = |f: &str, names: &[&str]| names.iter().any(|p| f.contains(p));
    frames
        .iter()
        .position(|f| has(f, category.frames))
        .or_else(|| {
            let (outer, inner) = category.enclosing?;
            let at = frames.iter().position(|f| has(f, outer))?;
            frames[at + 1..].iter().any(|f| has(f, inner)).then_some(at)
        })
}

/// Samples per category, with the matched frames and their callers.
struct Tally {
    samples: u64,
    frames: HashMap<String, u64>,
    callers: HashMap<String, u64>,
}

fn tally(folded: &Folded) -> Vec<Tally> {
    let mut tallies: Vec<Tally> = CATEGORIES
        .iter()
        .map(|_| Tally {
            samples: 0,
            frames: HashMap::new(),
            callers: HashMap::new(),
        })
        .collect();
    for (stack, count) in folded.lines() {
        let frames: Vec<&str> = stack.split(';').collect();
        let names: Vec<Cow<str>> = frames.iter().map(|f| plain_name(f)).collect();
        let matched: Vec<Option<usize>> =
            CATEGORIES.iter().map(|c| first_match(&names, c)).collect();
        for (i, category) in CATEGORIES.iter().enumerate() {
            let Some(at) = matched[i] else { continue };
            // a sample of a category that lies inside another counts only there
            let inside = CATEGORIES.iter().enumerate().any(|(j, other)| {
                matched[j].is_some() && other.takes_from.contains(&category.rule)
            });
            if inside {
                continue;
            }
            let t = &mut tallies[i];
            t.samples += count;
            *t.frames
                .entry(strip_mark(frames[at]).to_string())
                .or_default() += count;
            let caller = frames[..at].iter().rev().find(|f| {
                !is_runtime_glue(f)
                    && !category
                        .not_callers
                        .iter()
                        .any(|n| strip_mark(f).ends_with(n))
            });
            if let Some(caller) = caller {
                *t.callers.entry(strip_mark(caller).to_string()).or_default() += count;
            }
        }
    }
    tallies
}

/// Frames that only pass calls on (the kernel's entry, libc's syscall() and memory routines,
/// interpreter loops, stubs, Rust's standard library around an inlined closure): not the
/// caller anyone wrote.
fn is_runtime_glue(frame: &str) -> bool {
    let f = strip_mark(frame);
    kiln_profile::is_kernel_frame(frame)
        || f.starts_with("Interpreter")
        || ["core::", "alloc::", "std::"].iter().any(|lib| {
            f.starts_with(lib) || f.strip_prefix('<').is_some_and(|g| g.starts_with(lib))
        })
        || ["__mem", "memset", "memcpy", "memmove"]
            .iter()
            .any(|libc| f.starts_with(libc))
        || f.starts_with("StubRoutines")
        || matches!(f, "[unknown]" | "syscall" | "__syscall")
}

/// The `n` heaviest names of a tally, with their share of `total`, heaviest first (ties by
/// name, so the same record gives the same list).
pub(super) fn top(map: &HashMap<String, u64>, total: u64, n: usize) -> Vec<(String, f64)> {
    let mut v: Vec<(&String, &u64)> = map.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.into_iter()
        .take(n)
        .map(|(f, c)| (f.clone(), *c as f64 / total.max(1) as f64))
        .collect()
}

/// Each category of frames whose share of the profile passes its threshold.
fn categories(run: &RunRecord) -> Verdict {
    let Some(profile) = &run.profile else {
        return Verdict::Unjudged(run.not_recorded("--profile", "the run was not profiled"));
    };
    let total = profile.folded.total();
    if total < MIN_SAMPLES {
        return Verdict::Unjudged(format!(
            "{total} samples are too few to judge where the CPU goes (at least {MIN_SAMPLES})"
        ));
    }
    let mut found = Vec::new();
    for (category, t) in CATEGORIES.iter().zip(tally(&profile.folded)) {
        let share = t.samples as f64 / total as f64;
        if share < category.threshold {
            continue;
        }
        let frames = top(&t.frames, total, 3);
        let callers = top(&t.callers, total, 3);
        let mut evidence = vec![format!(
            "{:.1}% of {total} on-CPU samples (threshold {:.0}%)",
            100.0 * share,
            100.0 * category.threshold
        )];
        evidence.extend(
            frames
                .iter()
                .map(|(f, s)| format!("{:5.1}%  in {}", 100.0 * s, safe_text(f))),
        );
        evidence.extend(
            callers
                .iter()
                .map(|(f, s)| format!("{:5.1}%  called from {}", 100.0 * s, safe_text(f))),
        );
        let severity = if share >= 0.30 {
            Severity::High
        } else if share >= 2.0 * category.threshold {
            Severity::Medium
        } else {
            Severity::Low
        };
        let flame = frames.first().map(|(frame, _)| crate::FlameCite {
            event: kiln_record::schema::profile::Event::Cpu,
            frame: frame.clone(),
        });
        found.push(
            Draft {
                rule: category.rule,
                key: "",
                severity,
                title: format!(
                    "{:.0}% of the target's CPU {}",
                    100.0 * share,
                    category.doing
                ),
                evidence,
                window: run.window(),
                cause: category.cause.into(),
                fix: category.fix.for_run(run),
                impact: (share, "the target's CPU"),
                data: json!({"samples": t.samples, "total": total,
                    "frames": frames, "callers": callers}),
            }
            .finish()
            .citing(flame),
        );
    }
    Verdict::Found(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::profiled_run;

    fn assert_called_from(f: &crate::Finding, caller: &str) {
        let line = format!("called from {caller}");
        assert!(f.evidence.iter().any(|e| e.ends_with(&line)), "{f:?}");
    }

    fn found(folded: &str) -> Vec<crate::Finding> {
        match categories(&profiled_run(folded)) {
            Verdict::Found(f) => f,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exceptions_for_control_flow_fire_with_the_thrower() {
        let f = found(
            "java;Worker.run_[j];Shop.find_[j];java.lang.Throwable.<init>_[j];java.lang.Throwable.fillInStackTrace_[j];java_lang_Throwable::fill_in_stack_trace 40\n\
             java;Worker.run_[j];Shop.render_[j] 160\n",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, "cpu.exceptions");
        assert!(
            f[0].title
                .starts_with("20% of the target's CPU builds exceptions"),
            "{:?}",
            f[0]
        );
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.contains("called from Shop.find")),
            "{:?}",
            f[0]
        );
        assert_eq!(
            f[0].severity,
            Severity::Medium,
            "20% is 4x the 5% threshold"
        );
    }

    #[test]
    fn log_location_is_named_for_itself_not_as_exceptions() {
        let f = found(
            "java;Worker.run_[j];org.apache.logging.log4j.core.impl.Log4jLogEvent.getSource_[j];org.apache.logging.log4j.util.StackLocatorUtil.calcLocation_[j];java.lang.StackWalker.walk_[j] 30\n\
             java;Worker.run_[j];Shop.render_[j] 170\n",
        );
        let rules: Vec<&str> = f.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, ["cpu.log-location"], "{f:?}");
        // the JIT inlined the frames that name it: a log4j2 frame above the stack walk
        let f = found(
            "java;Worker.run_[j];Shop.handle_[j];org.apache.logging.log4j.spi.AbstractLogger.logIfEnabled_[j];java.lang.StackStreamFactory$AbstractStackWalker.callStackWalk_[j];StackWalk::fetchFirstBatch 30\n\
             java;Worker.run_[j];Shop.find_[j];java.lang.Throwable.fillInStackTrace_[j];java_lang_Throwable::fill_in_stack_trace 20\n\
             java;Worker.run_[j];Shop.render_[j] 150\n",
        );
        let rules: Vec<&str> = f.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, ["cpu.log-location", "cpu.exceptions"], "{f:?}");
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.ends_with("called from Shop.handle")),
            "{:?}",
            f[0]
        );
        assert!(
            f[1].title.starts_with("10%"),
            "only the exceptions outside logging: {:?}",
            f[1]
        );
    }

    #[test]
    fn kernel_clock_reads_fire_and_vdso_reads_do_not() {
        let f = found(
            "app;handler;syscall;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_clock_gettime_[k];ktime_get_ts64_[k] 20\n\
             app;handler;work 180\n",
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].rule, "cpu.clock-syscall");
        // the caller is the code that asked, not the kernel's entry or libc's syscall()
        assert_called_from(&f[0], "handler");
        assert!(
            found("app;handler;clock_gettime;__vdso_clock_gettime 20\napp;handler;work 180\n")
                .is_empty()
        );
    }

    #[test]
    fn contended_locks_spin_and_condition_variables_do_not() {
        // Rust's std mutex slow path, as perf names it (the brackets do not stop the match)
        let f = found(
            "app;handler;<std::sys::sync::mutex::futex::Mutex>::lock_contended;syscall;entry_SYSCALL_64_[k];__x64_sys_futex_[k] 40\n\
             app;handler;work 160\n",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, "cpu.lock-spin");
        // a pool waking its idle workers and workers parking: futex calls, no contention
        assert!(found(
            "app;pool::spawn;<std::sys::sync::condvar::futex::Condvar>::notify_one;syscall;entry_SYSCALL_64_[k];__x64_sys_futex_[k];futex_wake_[k] 40\n\
             app;worker::park;<std::sys::sync::condvar::futex::Condvar>::wait_optional_timeout;syscall;entry_SYSCALL_64_[k];__x64_sys_futex_[k];futex_wait_[k] 40\n\
             app;handler;work 120\n",
        )
        .is_empty());
    }

    #[test]
    fn allocations_inside_a_category_are_its_cost() {
        // a parser's allocations are the parsing's; the rest of the allocations are too few
        let f = found(
            "app;handler;serde_json::de::from_str;serde_json::de::parse_object;malloc;_int_malloc 60\n\
             app;handler;serde_json::de::from_str;serde_json::de::parse_object 20\n\
             app;handler;malloc 10\n\
             app;handler;work 110\n",
        );
        let rules: Vec<&str> = f.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, ["cpu.json"], "{f:?}");
        assert!(
            f[0].evidence[0].starts_with("40.0% of 200"),
            "{:?}",
            f[0].evidence
        );
    }

    #[test]
    fn rust_backtraces_are_stack_walking() {
        let f = found(
            "app;handler;<std::backtrace::Backtrace>::force_capture;<std::backtrace::Backtrace>::create;_Unwind_Backtrace 30\n\
             app;handler;work 170\n",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, "cpu.exceptions");
        assert_called_from(&f[0], "handler");
        // the closure's iterator is not who made the backtraces
        let f = found(
            "app;handler;<core::iter::adapters::map::Map<I,F> as core::iter::traits::iterator::Iterator>::fold;<std::backtrace::Backtrace>::force_capture 30\n\
             app;handler;work 170\n",
        );
        assert_called_from(&f[0], "handler");
    }

    #[test]
    fn page_faults_are_called_from_the_code_that_touched_the_memory_not_memset() {
        let f = found(
            "app;shop::render;__memset_avx2_unaligned_erms;asm_exc_page_fault_[k];handle_mm_fault_[k];clear_page_erms_[k] 60\n\
             app;shop::render;work 140\n",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, "cpu.page-faults");
        assert_eq!(
            f[0].data["callers"][0][0], "shop::render",
            "{:?}",
            f[0].data
        );
        // the report links it to the on-CPU flame graph at its top frame
        let flame = f[0].flame.as_ref().expect("the frame it cites");
        assert_eq!(flame.event, kiln_record::schema::profile::Event::Cpu);
        assert_eq!(
            Some(flame.frame.as_str()),
            f[0].data["frames"][0][0].as_str()
        );
    }

    #[test]
    fn the_fix_fits_the_runtime_kiln_found() {
        let folded =
            "app;shop::render;asm_exc_page_fault_[k];handle_mm_fault_[k];clear_page_erms_[k] 60\n\
                      app;shop::render;work 140\n";
        let fix_for = |runtime: Option<&str>| {
            let mut run = profiled_run(folded);
            run.runtime = runtime.map(|r| kiln_runtime::summary::RuntimeSummary {
                info: kiln_runtime::RuntimeInfo {
                    runtime: r.into(),
                    ..Default::default()
                },
                ..Default::default()
            });
            let Verdict::Found(f) = categories(&run) else {
                panic!("no page faults");
            };
            f[0].fix.clone()
        };
        // a native target: the allocator's advice, no JVM flag
        let native = fix_for(Some("native"));
        assert!(native.contains("MALLOC_MMAP_THRESHOLD_"), "{native}");
        assert!(
            !native.contains("-XX") && !native.contains("sync.Pool"),
            "{native}"
        );
        // a JVM: its flag, no glibc tunables
        let jvm = fix_for(Some("jvm"));
        assert!(
            jvm.contains("-XX:+AlwaysPreTouch") && !jvm.contains("MALLOC"),
            "{jvm}"
        );
        // not known: each runtime's advice, each named
        let any = fix_for(None);
        assert!(any.contains("; for a JVM: pre-touch the heap"), "{any}");
        assert!(any.contains("; for Go: keep large buffers"), "{any}");
        // a runtime with no advice of its own: the general part alone
        assert_eq!(
            fix_for(Some("node")),
            "keep memory instead of mapping it per request: reuse buffers and pools"
        );
    }

    #[test]
    fn a_plain_profile_gives_nothing_and_a_tiny_one_cannot_judge() {
        assert!(
            found("app;main;handler;compute 500\napp;main;handler;serialize_row 300\n").is_empty()
        );
        assert!(matches!(
            categories(&profiled_run("app;main 50\n")),
            Verdict::Unjudged(r) if r.contains("50 samples")
        ));
        let mut none = profiled_run("app;main 50\n");
        none.profile = None;
        assert!(matches!(categories(&none), Verdict::Unjudged(r) if r.contains("--profile")));
    }
}
