//! kiln's profiler: drives `perf` on a target's processes (on-CPU or context switches), gets
//! JIT frames named where the runtime allows, and turns every profile (its own, pprof,
//! collapsed text, perf script text) into collapsed stacks, from which it draws flame graphs,
//! differential flame graphs, speedscope files and top-function tables.

mod detect;
mod flame;
mod folded;
pub mod jit;
pub mod perf;
mod perf_text;
mod pprof;
mod speedscope;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use flame::{svg, FlameStyle, FoldedDiff, ShareChange};
pub use folded::{
    is_java_frame, is_kernel_frame, is_waiting_for_work, java_method, Folded, ParseReport,
};
pub use inferno::flamegraph::color::{BasicPalette, MultiPalette, Palette};
pub use kiln_record::schema::profile::{FunctionShare, ProfileSummary, SourceFormat};
pub use perf::{CallGraph, Event, RecordOptions};
pub use speedscope::to_json as speedscope_json;
pub use speedscope::{to_json_profiles as speedscope_json_profiles, WeightedProfile};

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("perf is not usable: {0}. Install it (Debian/Ubuntu: apt install linux-perf; Fedora: dnf install perf) or set PERF=/path/to/perf")]
    PerfMissing(String),
    #[error("{}", perf_forbidden_text(*paranoid, *owner))]
    PerfForbidden {
        paranoid: Option<i32>,
        /// The watched process's user, when it is not kiln's: perf needs more than a
        /// paranoid level of 1 for another user's process.
        owner: Option<u32>,
    },
    #[error("{0}")]
    Perf(String),
    #[error("{0}")]
    NoProcess(String),
    #[error("not a profile kiln can read: {0}")]
    Format(String),
    #[error("the profile has no samples")]
    Empty,
    #[error("drawing the flame graph failed: {0}")]
    Render(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why perf refused, and the one command that lets it.
fn perf_forbidden_text(paranoid: Option<i32>, owner: Option<u32>) -> String {
    let level = paranoid.map_or("unknown".to_string(), |p| p.to_string());
    match owner {
        Some(uid) => format!(
            "perf may not watch another user's process (the target runs as uid {uid}, kiln as \
             uid {}) while kernel.perf_event_paranoid = {level}. Run kiln as root (sudo), or \
             allow it: sudo sysctl -w kernel.perf_event_paranoid=-1",
            // SAFETY: geteuid has no preconditions and cannot fail
            unsafe { libc::geteuid() }
        ),
        None => format!(
            "perf may not watch processes here (kernel.perf_event_paranoid = {level}). Run kiln \
             as root (sudo), or allow it: sudo sysctl -w kernel.perf_event_paranoid=1"
        ),
    }
}

impl ProfileError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A profile read from a file made elsewhere.
#[derive(Clone, Debug)]
pub struct Imported {
    pub folded: Folded,
    pub format: SourceFormat,
    /// Lines of collapsed text that were not `stack count` and were skipped.
    pub ignored_lines: usize,
    /// For pprof, and perf script with periods: which value the counts are, with its unit
    /// (`inuse_space/bytes`, `cpu-clock/nanoseconds`).
    pub value: Option<String>,
    /// The samples behind the counts when each weighs more than one.
    pub samples: Option<u64>,
}

impl Imported {
    fn perf_script(read: perf::PerfScript) -> Self {
        Self {
            samples: read.value.is_some().then_some(read.samples),
            value: read.value,
            folded: read.folded,
            format: SourceFormat::PerfScript,
            ignored_lines: 0,
        }
    }

    fn collapsed(folded: Folded, report: ParseReport) -> Self {
        Self {
            folded,
            format: SourceFormat::Collapsed,
            ignored_lines: report.ignored,
            value: None,
            samples: None,
        }
    }
}

/// Reads pprof (gzipped or not), collapsed stacks (FlameGraph, inferno, async-profiler
/// `-o collapsed`, py-spy `--format raw`) or `perf script` text, telling them apart by content;
/// gzip, zip (of one file) and UTF-16 text are unwrapped first, and formats kiln does not read
/// are refused by name.
pub fn import(data: &[u8]) -> Result<Imported, ProfileError> {
    import_with(data, &ImportOptions::default())
}

/// How `import` reads what it is given.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// A pprof profile's sample type to read, by name or index (`go tool pprof
    /// -sample_index`); None: its default type, else the last.
    pub sample_index: Option<String>,
}

/// `import` with options.
pub fn import_with(data: &[u8], options: &ImportOptions) -> Result<Imported, ProfileError> {
    import_nested(data, options, 0)
}

/// How many containers deep an input may be (a zip of a gzip ...).
const MAX_NESTING: usize = 3;

fn import_nested(
    data: &[u8],
    options: &ImportOptions,
    depth: usize,
) -> Result<Imported, ProfileError> {
    if depth < MAX_NESTING {
        if let Some((inner, what)) = detect::unwrap(data)? {
            return import_nested(&inner, options, depth + 1).map_err(|e| match e {
                ProfileError::Format(why) => ProfileError::Format(format!("in the {what}: {why}")),
                other => other,
            });
        }
    }
    if speedscope::looks_like_speedscope(data) {
        let (folded, unit) = speedscope::import(data)?;
        if folded.is_empty() {
            return Err(ProfileError::Empty);
        }
        return Ok(Imported {
            folded,
            format: SourceFormat::Speedscope,
            ignored_lines: 0,
            value: unit.map(|u| format!("weight/{u}")),
            samples: None,
        });
    }
    if let Some(what) = detect::not_a_profile(data) {
        return Err(ProfileError::Format(what));
    }
    refuse_legacy(data)?;
    if looks_binary(data) {
        match pprof::import(data, options.sample_index.as_deref()) {
            Ok(p) => {
                return Ok(Imported {
                    folded: p.folded,
                    format: SourceFormat::Pprof,
                    ignored_lines: 0,
                    value: Some(p.value),
                    // a pprof sample is a stack with its summed values, not one sample taken
                    samples: None,
                });
            }
            // anything that is not pprof may be text with a stray control byte: read it as
            // text, and say pprof's error only if that fails too
            Err(e) => return import_text(data).map_err(|_| e),
        }
    }
    import_text(data)
}

/// `import` of text: perf script or collapsed stacks.
fn import_text(data: &[u8]) -> Result<Imported, ProfileError> {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    if perf_text::looks_like_perf_script(text) {
        return Ok(Imported::perf_script(perf::read_perf_script(
            text.as_bytes(),
        )?));
    }
    detect::collapsed_evidence(text)?;
    let (folded, report) = Folded::parse_reader(data)?;
    Ok(Imported::collapsed(folded, report))
}

/// The profile formats pprof read before profile.proto (Go's `debug=1` text, gperftools'
/// binary CPU profile), named by their opening: read as collapsed stacks they printed
/// nonsense ("cycles/second =" at 99.5%) with exit 0.
fn legacy_pprof(head: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(&head[..head.len().min(256)]);
    let first = text.lines().next().unwrap_or("").trim();
    let named = [
        (
            "--- contention",
            "a legacy contention profile (Go's debug=1 text)",
        ),
        (
            "--- mutex",
            "a legacy contention profile (mutex; Go's debug=1 text)",
        ),
        ("heap profile:", "a legacy heap profile (Go's debug=1 text)"),
        ("goroutine profile:", "a goroutine dump (Go's debug=1 text)"),
        (
            "threadcreate profile:",
            "a legacy thread profile (Go's debug=1 text)",
        ),
        ("--- threadz", "a legacy thread profile"),
    ];
    if let Some((_, kind)) = named.iter().find(|(start, _)| first.starts_with(start)) {
        return Some(kind);
    }
    // gperftools' CPU profile opens with the words 0, 3, 0 (header count, version) in
    // 64- or 32-bit native words
    let words = |size: usize| -> Option<[u64; 3]> {
        let word = |i: usize| -> Option<u64> {
            let bytes = head.get(i * size..(i + 1) * size)?;
            Some(bytes.iter().rev().fold(0, |v, b| v << 8 | u64::from(*b)))
        };
        Some([word(0)?, word(1)?, word(2)?])
    };
    (words(8) == Some([0, 3, 0]) || words(4) == Some([0, 3, 0]))
        .then_some("a legacy binary CPU profile (gperftools' format)")
}

/// A legacy pprof profile is an error that says how to convert it.
fn refuse_legacy(head: &[u8]) -> Result<(), ProfileError> {
    match legacy_pprof(head) {
        Some(kind) => Err(ProfileError::Format(format!(
            "{kind}: kiln reads profile.proto; convert it with \
             `go tool pprof -proto FILE > FILE.pb.gz` (or google/pprof's `pprof -proto`) and \
             import that"
        ))),
        None => Ok(()),
    }
}

/// Protobuf (pprof) rather than text: gzip's magic, or NUL and other control bytes that text
/// profiles never hold. A stray invalid UTF-8 byte in a text file does not make it binary.
fn looks_binary(head: &[u8]) -> bool {
    if pprof::looks_like_gzip(head) {
        return true;
    }
    let control = head
        .iter()
        .filter(|&&b| b < 0x09 || (0x0e..0x20).contains(&b))
        .count();
    head.contains(&0) || control * 100 > head.len()
}

/// `import` of a file, streaming perf script text and collapsed stacks (files of hundreds of
/// MB stay out of memory); the format is told from the first 64 KiB.
pub fn import_file(path: &Path) -> Result<Imported, ProfileError> {
    import_file_with(path, &ImportOptions::default())
}

/// `import_file` with options.
pub fn import_file_with(path: &Path, options: &ImportOptions) -> Result<Imported, ProfileError> {
    use std::io::{BufRead, BufReader, Read};
    let file = std::fs::File::open(path).map_err(|e| ProfileError::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let head = reader
        .fill_buf()
        .map_err(|e| ProfileError::io(path, e))?
        .to_vec();
    refuse_legacy(&head)?;
    // containers, and what is refused by name, are read whole
    let whole = looks_binary(&head)
        || detect::unwrap_would(&head)
        || speedscope::looks_like_speedscope(&head)
        || detect::not_a_profile(&head).is_some();
    let text_head = (!whole).then(|| String::from_utf8_lossy(&head));
    match text_head.as_deref() {
        None => {
            // pprof is read whole; a binary file larger than this is not a profile.
            const MAX_BINARY_PROFILE: u64 = 1 << 30;
            let mut data = Vec::new();
            reader
                .take(MAX_BINARY_PROFILE + 1)
                .read_to_end(&mut data)
                .map_err(|e| ProfileError::io(path, e))?;
            if data.len() as u64 > MAX_BINARY_PROFILE {
                return Err(ProfileError::Format(format!(
                    "{}: a binary file over 1 GiB is not a profile kiln reads",
                    path.display()
                )));
            }
            import_with(&data, options)
        }
        Some(t) if perf_text::looks_like_perf_script(t) => {
            Ok(Imported::perf_script(perf::read_perf_script(reader)?))
        }
        Some(t) => {
            // the head's last line may be cut at 64 KiB
            detect::collapsed_evidence(t.rsplit_once('\n').map_or(t.as_ref(), |(whole, _)| whole))?;
            let (folded, report) = Folded::parse_reader(reader)?;
            Ok(Imported::collapsed(folded, report))
        }
    }
}

/// What one `profile_processes` produced.
#[derive(Debug)]
pub struct Profiled {
    pub folded: Folded,
    pub event: Event,
    pub pids: Vec<i32>,
    /// From perf's start to the stop (or the target's exit).
    pub duration: Duration,
    /// From the first sample to the last: the window perf really saw.
    pub sampled_s: Option<f64>,
    /// Whether the target exited before the end (what was taken until then is kept).
    pub target_exited: bool,
    pub jit: jit::JitReport,
    pub call_graph: CallGraph,
    /// perf record's CPU while sampling, percent of one core (None if perf had ended).
    pub perf_cpu_pct: Option<f64>,
    pub perf_said: String,
}

/// Profiles `pids` for `duration` (or until `stop` returns true, or every process exits):
/// perf record, then JIT maps, then perf script collapsed. `data` is perf's data file.
/// `attached` is called once perf is recording: threads the processes start from then on are
/// followed, while a thread started during perf's own attach can be missed, so a caller that
/// is about to cause new threads (a load phase opening connections) waits for it.
pub fn profile_processes(
    pids: &[i32],
    options: &RecordOptions,
    duration: Duration,
    data: &Path,
    stop: &dyn Fn() -> bool,
    attached: &dyn Fn(),
) -> Result<Profiled, ProfileError> {
    let Some(&root) = pids.first() else {
        return Err(ProfileError::NoProcess("no process to profile".into()));
    };
    // Children that ended since they were listed are left out; kiln itself (a child of the
    // target when a test profiles its own process) never profiles itself.
    let own = std::process::id() as i32;
    let proc = kiln_sample::ProcFs::default();
    let alive = |pids: &[i32]| -> Vec<i32> {
        pids.iter()
            .copied()
            .filter(|&p| p == root || (p != own && proc.process(p).is_some_and(|t| t.state != 'Z')))
            .collect()
    };
    let mut pids = alive(pids);
    let mut jit_report = jit::JitReport::default();
    let mut jit_runtime = false;
    for &pid in &pids {
        jit_runtime |= jit::runtime_of(pid) != jit::Runtime::Native;
        jit_report.advice.extend(jit::check_before(pid).advice);
    }
    let call_graph = options.call_graph.unwrap_or(if jit_runtime {
        CallGraph::Fp
    } else {
        CallGraph::Dwarf
    });
    // A child process, or a thread of any process, may end between perf's listing of them and
    // its attach ("No such process"): list again and retry, a few times.
    let mut attempt = 0;
    let mut recording = loop {
        attempt += 1;
        match perf::Recording::start(&pids, options, call_graph, data) {
            Err(ProfileError::NoProcess(_)) if attempt < 5 && proc.process(root).is_some() => {
                std::thread::sleep(Duration::from_millis(20 * attempt));
                pids = alive(&pids);
            }
            other => break other?,
        }
    };
    attached();
    let deadline = Instant::now() + duration;
    let mut target_exited = false;
    while Instant::now() < deadline && !stop() {
        // perf ends by itself when it attached to the processes and they all exited; when it
        // records every CPU, kiln notices their exit.
        let all_gone = pids
            .iter()
            .all(|&p| proc.process(p).is_none_or(|t| t.state == 'Z'));
        if !recording.running() || all_gone {
            target_exited = true;
            break;
        }
        std::thread::sleep(
            Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())),
        );
    }
    // Java writes its map only while alive: ask before perf script reads it.
    for &pid in &pids {
        jit::prepare_symbols(pid, &mut jit_report);
    }
    let recorded = recording.stop()?;
    target_exited |= pids
        .iter()
        .all(|&p| proc.process(p).is_none_or(|t| t.state == 'Z'));
    let collapsed = perf::collapse_recorded(
        &options.perf,
        &recorded.data,
        recorded.pid_filter.as_deref(),
    );
    jit_report.remove_written_maps();
    let (folded, sampled_s) = collapsed?;
    Ok(Profiled {
        folded,
        event: options.event,
        pids,
        duration: recorded.duration,
        sampled_s,
        target_exited,
        jit: jit_report,
        call_graph,
        perf_cpu_pct: recorded.perf_cpu_pct,
        perf_said: recorded.perf_said,
    })
}

/// [`summarize`] for a profile of `event`: an off-CPU one also says where its threads
/// blocked ([`Folded::blocked_in`]).
pub fn summarize_event(folded: &Folded, top: usize, event: Event) -> ProfileSummary {
    let mut summary = summarize(folded, top);
    if event == Event::Cswitch {
        summary.blocked_in = folded.blocked_in(top);
    }
    summary
}

/// async-profiler's names for a sample whose Java stack it could not walk, put where the
/// stack would be (its `asgctError`): a compiled frame it cannot step over (C2's rethrow
/// stub, when an exception unwinds through compiled frames), a deoptimization, a GC...
const UNWALKED: [&str; 9] = [
    "not_walkable_Java",
    "not_walkable_not_Java",
    "unknown_Java",
    "GC_active",
    "deoptimization",
    "safepoint",
    "skipped",
    "unknown_state",
    "unexpected_state",
];

/// [`summarize_event`] of async-profiler's CPU samples: also the samples it could not walk,
/// by why (their time is in no Java method's share).
pub fn summarize_async_cpu(folded: &Folded, top: usize) -> ProfileSummary {
    let mut summary = summarize_event(folded, top, Event::Cpu);
    summary.unwalked = folded.marked_by(&UNWALKED);
    summary
}

/// [`summarize`] for an allocation profile (leaves are the allocated types): also the bytes
/// by the method that allocated them ([`Folded::allocated_in`]).
pub fn summarize_alloc(folded: &Folded, top: usize) -> ProfileSummary {
    let mut summary = summarize(folded, top);
    summary.allocated_in = folded.allocated_in(top);
    summary
}

/// [`summarize`] for a JVM's wall-clock profile: its functions are the Java methods. A
/// waiting thread's leaf is a futex or a poll, the same native frame under every kind of
/// wait, and the JVM's own threads wait there too: 93% of a service's wall clock, saying
/// nothing of where its requests spent their time. Threads waiting for work to come (an idle
/// pool's, a selector's: [`is_waiting_for_work`]) are left out of the lists, whose shares
/// stay those of the whole profile (as the flame graph draws them): a busy host's idle
/// pool, parked for work, filled "Top total" before the request chain.
pub fn summarize_wall(folded: &Folded, top: usize) -> ProfileSummary {
    let working =
        folded.retain_stacks(|frames| !is_waiting_for_work(frames.filter_map(java_method)));
    let mut summary = summarize(&working, usize::MAX);
    let (all, busy) = (folded.total(), working.total());
    let scale = busy as f64 / all.max(1) as f64;
    for list in [&mut summary.top_self, &mut summary.top_total] {
        list.retain(|f| folded::is_java_frame(&f.name));
        for f in list.iter_mut() {
            f.self_pct *= scale;
            f.total_pct *= scale;
        }
        // rows of a few samples among millions, shown as 0.0%, say nothing
        list.retain(|f| f.self_pct.max(f.total_pct) >= 0.05);
        list.truncate(top);
    }
    summary.samples = all;
    summary.distinct_stacks = folded.distinct_stacks();
    summary.kernel_pct = 100.0 * folded.kernel_share();
    summary.waiting_for_work_pct = Some(100.0 * (all - busy) as f64 / all.max(1) as f64);
    summary
}

/// The summary of a profile with its `top` functions by self and by total samples.
pub fn summarize(folded: &Folded, top: usize) -> ProfileSummary {
    {
        let mut shares = folded.function_shares();
        let top_self = folded::top_self(&shares, top);
        // Frames that only pass samples on (thread entries) are on nearly every stack.
        folded.drop_pass_through(&mut shares);
        ProfileSummary {
            samples: folded.total(),
            distinct_stacks: folded.distinct_stacks(),
            kernel_pct: 100.0 * folded.kernel_share(),
            top_self,
            top_total: folded::top_total(&shares, top),
            blocked_in: Vec::new(),
            allocated_in: Vec::new(),
            unwalked: Vec::new(),
            waiting_for_work_pct: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_summary_names_java_methods_not_the_futex_every_wait_ends_in() {
        let folded = Folded::parse(
            "[request-1 tid=1];Thread.run_[j];Shop.handle_[j];Shop.reserve_[j];Thread.sleep_[j];__futex_wait 40\n\
             [request-1 tid=1];Thread.run_[j];Shop.handle_[j];Shop.reserve_[j];Object.wait_[j];__futex_wait 20\n\
             [request-1 tid=1];Thread.run_[j];Pool.getTask_[j];__futex_wait 30\n\
             [GC Thread tid=2];start_thread;__futex_wait 100\n\
             [request-1 tid=1];Thread.run_[j];Shop.handle_[j];Shop.render_[j] 10\n",
        )
        .unwrap()
        .0;
        let summary = summarize_wall(&folded, 3);
        let names =
            |list: &[FunctionShare]| list.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&summary.top_total),
            ["Thread.run_[j]", "Shop.handle_[j]", "Shop.reserve_[j]"]
        );
        assert_eq!(names(&summary.top_self), ["Shop.render_[j]"]);
        assert_eq!(summary.samples, 200);
    }

    /// Stacks as async-profiler's wall clock mode took them of a JDK 17 service
    /// (tests/apps/java_locks/LockShop beside its HTTP server's pool): threads waiting for
    /// work are left out of the lists, which keep the whole profile's shares; a handler that
    /// waits for another thread's answer is a request's time, not idle.
    #[test]
    fn a_wall_clock_summary_leaves_out_threads_waiting_for_work() {
        let pool =
            "java.lang.Thread.run_[j];java.util.concurrent.ThreadPoolExecutor$Worker.run_[j];\
                    java.util.concurrent.ThreadPoolExecutor.runWorker_[j]";
        let park =
            "java.util.concurrent.locks.LockSupport.park_[j];jdk.internal.misc.Unsafe.park_[j];\
                    __futex_abstimed_wait_common";
        let text = [
            // idle: the pool's workers, the cleaner, the finalizer, a timer, the selector
            format!("[pool-1 tid=1];{pool};java.util.concurrent.ThreadPoolExecutor.getTask_[j];\
                     java.util.concurrent.LinkedBlockingQueue.take_[j];{park} 300"),
            "[Common-Cleaner tid=2];jdk.internal.misc.InnocuousThread.run_[j];java.lang.Thread.run_[j];\
             jdk.internal.ref.CleanerImpl.run_[j];java.lang.ref.ReferenceQueue.remove_[j];\
             java.lang.Object.wait_[j];__futex_abstimed_wait_common 100".into(),
            "[Finalizer tid=3];java.lang.ref.Finalizer$FinalizerThread.run_[j];\
             java.lang.ref.ReferenceQueue.remove_[j];java.lang.ref.ReferenceQueue.remove_[j];\
             java.lang.Object.wait_[j];__futex_abstimed_wait_common 100".into(),
            "[idle-timeout-task tid=4];java.util.TimerThread.run_[j];java.util.TimerThread.mainLoop_[j];\
             java.lang.Object.wait_[j];__futex_abstimed_wait_common 100".into(),
            "[HTTP-Dispatcher tid=5];java.lang.Thread.run_[j];sun.net.httpserver.ServerImpl$Dispatcher.run_[j];\
             sun.nio.ch.SelectorImpl.select_[j];sun.nio.ch.SelectorImpl.lockAndDoSelect_[j];\
             sun.nio.ch.EPollSelectorImpl.doSelect_[j];sun.nio.ch.EPoll.wait_[j];epoll_wait 100".into(),
            // working: requests in reserve (waiting for its lock, holding it asleep), one in
            // its handler waiting for another thread's answer
            format!(
                "[pool-1 tid=6];{pool};LockShop.handle_[j];LockShop.reserve_[j];\
                 java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire_[j];{park} 100"
            ),
            format!(
                "[pool-1 tid=7];{pool};LockShop.handle_[j];LockShop.reserve_[j];\
                 java.lang.Thread.sleep_[j];__futex_abstimed_wait_common 50"
            ),
            format!(
                "[pool-1 tid=8];{pool};LockShop.handle_[j];\
                 java.util.concurrent.CompletableFuture.get_[j];{park} 50"
            ),
            // the JVM's own threads, no Java frame
            "[GC Thread#0 tid=8];thread_native_entry;GangWorker::loop;__futex_wait 100".into(),
        ]
        .join("\n");
        let folded = Folded::parse(&text).unwrap().0;
        let summary = summarize_wall(&folded, 10);
        assert_eq!(summary.samples, 1000);
        assert_eq!(summary.waiting_for_work_pct, Some(70.0));
        let total: Vec<(&str, f64)> = (summary.top_total.iter())
            .map(|f| (f.name.as_str(), f.total_pct))
            .collect();
        // (frames with one callee only pass their time on and are not listed)
        assert_eq!(
            total,
            [
                ("LockShop.handle_[j]", 20.0),
                ("LockShop.reserve_[j]", 15.0)
            ]
        );
    }

    /// Lines as async-profiler 4.1 wrote them for a JVM: a stack it could not walk is its
    /// reason at the root, and `[no_Java_frame]` (a thread outside Java) is no failure.
    #[test]
    fn samples_async_profiler_could_not_walk_are_counted_by_why() {
        let folded = Folded::parse(
            "[not_walkable_Java];Interpreter 3\n\
             [not_walkable_Java];OptoRuntime::rethrow_C 2\n\
             [deoptimization] 1\n\
             [no_Java_frame] 4\n\
             Thread.run_[j];Shop.handle_[j] 90\n",
        )
        .unwrap()
        .0;
        let summary = summarize_async_cpu(&folded, 5);
        let got: Vec<(String, u64, f64)> = (summary.unwalked.iter())
            .map(|s| (s.name.clone(), s.self_samples, s.self_pct))
            .collect();
        assert_eq!(
            got,
            [
                ("not_walkable_Java".to_string(), 5, 5.0),
                ("deoptimization".to_string(), 1, 1.0)
            ]
        );
        assert!(summarize(&folded, 5).unwalked.is_empty());
    }

    #[test]
    fn import_tells_the_formats_apart() {
        let collapsed = import(b"main;work 10\nmain;idle 5\n").unwrap();
        assert_eq!(collapsed.format, SourceFormat::Collapsed);
        assert_eq!(collapsed.folded.total(), 15);
        let script = "burn 1/1 1.0: 1 cpu-clock:\n\t    55d0c0a01130 hot+0x10 (/usr/bin/burn)\n\n";
        let imported = import(script.as_bytes()).unwrap();
        assert_eq!(imported.format, SourceFormat::PerfScript);
        assert_eq!(imported.folded.to_text(), "burn;hot 1\n");
        let err = import(b"\x00\x01\x02garbage").unwrap_err().to_string();
        assert!(err.contains("pprof"), "{err}");
    }

    /// perf script text with periods (`-F ...,period`) is weighted by them, as inferno,
    /// flamegraph.pl and perf report do; its counts are then nanoseconds of cpu-clock (the
    /// summary once said "316633264 samples" for 158), and the samples are counted apart.
    #[test]
    fn perf_script_with_periods_counts_nanoseconds_and_its_samples() {
        let script = "burn 1/1 [000] 1.000000:   10101010 cpu-clock:\n\t    55d0 hot+0x10 (/b)\n\n\
                      burn 1/1 [000] 1.010000:   10101010 cpu-clock:\n\t    55d0 hot+0x10 (/b)\n\n\
                      burn 1/1 [000] 1.020000:   20202020 cpu-clock:\n\t    55e0 cold+0x10 (/b)\n\n";
        let imported = import(script.as_bytes()).unwrap();
        assert_eq!(imported.value.as_deref(), Some("cpu-clock/nanoseconds"));
        assert_eq!(imported.samples, Some(3));
        assert_eq!(
            imported.folded.to_text(),
            "burn;cold 20202020\nburn;hot 20202020\n"
        );
        let cycles = script.replace("cpu-clock", "cycles");
        let imported = import(cycles.as_bytes()).unwrap();
        assert_eq!(imported.value.as_deref(), Some("cycles/count"));
        // without periods each sample counts once
        let plain = "burn 1/1 1.0: cpu-clock:\n\t    55d0c0a01130 hot+0x10 (/usr/bin/burn)\n\n";
        let imported = import(plain.as_bytes()).unwrap();
        assert_eq!((imported.value, imported.samples), (None, None));
    }

    /// Formats pprof read before profile.proto are refused by name, with the conversion.
    #[test]
    fn legacy_pprof_profiles_are_refused_by_name() {
        let mut gperftools = Vec::new();
        for word in [0u64, 3, 0, 10_000, 0] {
            gperftools.extend_from_slice(&word.to_ne_bytes());
        }
        gperftools.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        for data in [
            &gperftools[..],
            b"--- contention:\ncycles/second=2445405836\n5926 798 @ 0x4dd2cf 0x4dd2ce\n",
            b"heap profile: 1: 2 [3: 4] @ heap/1048576\n",
        ] {
            let err = import(data).unwrap_err().to_string();
            assert!(err.contains("legacy") && err.contains("-proto"), "{err}");
        }
    }

    #[test]
    fn a_collapsed_file_with_a_control_byte_is_still_collapsed_text() {
        // A frame name with a stray ESC byte, in a file short enough for it to be 1%.
        let imported = import(b"main;we\x1bird 7\n").unwrap();
        assert_eq!(imported.format, SourceFormat::Collapsed);
        assert_eq!(imported.folded.total(), 7);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.folded");
        std::fs::write(&path, b"main;\x01x 2\nmain;y 3\n").unwrap();
        assert_eq!(import_file(&path).unwrap().folded.total(), 5);
    }

    #[test]
    fn one_stack_half_a_million_frames_deep_is_summarised_in_linear_time() {
        let frames: Vec<String> = (0..500_000).map(|i| format!("f{i}")).collect();
        let mut folded = Folded::new();
        folded.add(&frames, 3);
        // Quadratic, this took minutes; the test would time out.
        let summary = summarize(&folded, 5);
        assert_eq!(summary.samples, 3);
        assert_eq!(summary.top_self[0].name, "f499999");
        assert_eq!(summary.top_total[0].total_samples, 3);
    }

    #[test]
    fn files_stream_through_the_same_readers() {
        let dir = tempfile::tempdir().unwrap();
        let collapsed = dir.path().join("c.folded");
        std::fs::write(&collapsed, b"main;work 10\nmain;\xff\xfe 3\nmain;idle 5\n").unwrap();
        let imported = import_file(&collapsed).unwrap();
        assert_eq!(imported.format, SourceFormat::Collapsed);
        assert_eq!(imported.folded.total(), 15);
        assert_eq!(
            imported.ignored_lines, 1,
            "the non-UTF-8 line is skipped, not fatal"
        );
        let script = dir.path().join("s.txt");
        std::fs::write(
            &script,
            "burn 1/1 1.0: cpu-clock:\n\t    55d0c0a01130 hot+0x10 (/usr/bin/burn)\n\n".repeat(3),
        )
        .unwrap();
        let imported = import_file(&script).unwrap();
        assert_eq!(imported.format, SourceFormat::PerfScript);
        assert_eq!(imported.folded.to_text(), "burn;hot 3\n");
        assert!(matches!(
            import_file(&dir.path().join("missing")),
            Err(ProfileError::Io { .. })
        ));
    }

    #[test]
    fn a_py_spy_raw_file_is_collapsed_text() {
        let text = "process 4242:\"python app.py\";<module> (app.py:10);handler (app.py:5) 42\n";
        let imported = import(text.as_bytes()).unwrap();
        assert_eq!(imported.format, SourceFormat::Collapsed);
        assert_eq!(imported.folded.top_self(1)[0].name, "handler (app.py:5)");
    }
}
