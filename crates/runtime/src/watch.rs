//! Watching a process's runtime beside a run: detect it, say what can be read, and for a JVM
//! poll its counters every few milliseconds (to see each GC pause) and write a
//! [`RuntimeSecond`] every second.

use crate::RuntimeError;

use kiln_record::clock::unix_ms_now;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attach::Attach;
use crate::detect::{detect, Runtime};
use crate::expvar::ExpvarReader;
use crate::go::{GcTraceFeed, GoSecond};
use crate::goroutines::{GoroutineDump, GoroutineReader};
use crate::jfr;
use crate::jvm::JvmReader;
use crate::pyspy::PySpy;
use crate::threads::{self, ThreadDump};
use crate::{RuntimeInfo, RuntimeSecond};

/// How often the JVM's counters are read: often enough to see GC pauses one by one (two of
/// one collector within this time show as one; their count and time stay exact).
pub const POLL: Duration = Duration::from_millis(10);

/// What kiln does not read yet, per runtime, in the user's words.
fn not_read_yet(runtime: Runtime) -> Option<&'static str> {
    match runtime {
        Runtime::Jvm => None,
        Runtime::Go => None,
        Runtime::Python => Some("Python's GC is not read yet"),
        Runtime::Node => Some("Node.js's GC and event-loop delay are not read yet"),
        Runtime::Native => None,
    }
}

/// How often `--runtime deep` takes a thread dump: each costs the JVM a few milliseconds at
/// safepoints (measured and recorded with it), so a few seconds apart.
pub const DUMP_EVERY: Duration = Duration::from_secs(2);

/// How deep to look: the default layer costs nothing the target notices; `Deep` also speaks
/// to the JVM over its attach socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Depth {
    #[default]
    Default,
    /// A JVM's thread dumps and no JFR: what `--off-cpu` adds to its lock profile, whose
    /// stacks are the waiters' (the dumps name who holds the lock, and where).
    Dumps,
    Deep,
}

/// Starts watching `pid`: what runtime it is, and for a JVM its counters open.
pub struct RuntimeWatch {
    pub info: RuntimeInfo,
    jvm: Option<JvmReader>,
    attach: Option<Attach>,
    /// py-spy for a Python target under `--runtime deep`.
    pyspy: Option<PySpy>,
    /// A Go target's GC cycles: parsed from its stderr by whoever started it, or read from
    /// its expvar page.
    go: Option<GoSource>,
    /// A Go target's goroutine dumps (`--runtime deep`, net/http/pprof).
    goroutines: Option<GoroutineReader>,
    /// Where to take a Go target's execution traces, and the helper that reads them.
    go_traces: Option<(std::net::SocketAddr, std::path::PathBuf)>,
    proc_root: std::path::PathBuf,
    depth: Depth,
    /// Set when the measured load starts: the next dump may walk the heap for the holders
    /// again at once (see [`RuntimeWatch::measuring_started`]).
    measuring: Arc<AtomicBool>,
}

impl RuntimeWatch {
    /// A flag to set as the measured load starts. A JVM's dump with `-l` (a heap walk) is
    /// taken at most every [`HOLDERS_EVERY`]; spent in the warm-up, it left a 5 s measured
    /// run with its waiters counted and their holder unnamed. The flag lets the first dump
    /// of the measurement take one again (one more heap walk a run at most).
    pub fn measuring_started(&self) -> Arc<AtomicBool> {
        self.measuring.clone()
    }

    pub fn start(pid: i32, proc_root: &Path, depth: Depth) -> Self {
        Self::start_with(pid, proc_root, depth, None, &[])
    }

    /// As [`RuntimeWatch::start`], with what else kiln knows of the target: the GC cycles of
    /// a Go target it started with `GODEBUG=gctrace=1`, the addresses it listens on (where a
    /// Go target's expvar page may be).
    pub fn start_with(
        pid: i32,
        proc_root: &Path,
        depth: Depth,
        gctrace: Option<GcTraceFeed>,
        listening: &[std::net::SocketAddr],
    ) -> Self {
        let runtime = detect(pid, proc_root);
        let mut info = RuntimeInfo {
            pid,
            runtime: runtime.name().to_string(),
            ..Default::default()
        };
        let mut jvm = None;
        if runtime == Runtime::Jvm {
            match JvmReader::open(pid, proc_root) {
                Ok(reader) => {
                    info.version = reader.version();
                    info.details = reader.details();
                    info.read.push(format!(
                        "GC pauses, safepoints, JIT compilation, classes, threads and heap from \
                         hsperfdata ({})",
                        reader.path().display()
                    ));
                    jvm = Some(reader);
                }
                Err(why) => info
                    .not_read
                    .push(format!("GC, safepoints, JIT and heap: {why}")),
            }
        }
        let mut attach = None;
        if runtime == Runtime::Jvm && depth != Depth::Default {
            match Attach::open(pid, proc_root) {
                Ok(line) => {
                    info.read.push(format!(
                        "thread states and contended locks with their holders from a thread \
                         dump every {}s over the attach socket{}",
                        DUMP_EVERY.as_secs(),
                        if depth == Depth::Deep {
                            "; exceptions thrown per second from a JFR recording"
                        } else {
                            " (--off-cpu)"
                        }
                    ));
                    attach = Some(line);
                }
                Err(why) => info.not_read.push(format!("thread dumps: {why}")),
            }
            if depth == Depth::Dumps {
                info.not_read.push(
                    "exceptions thrown and lock waits with their stacks (JFR): not asked for \
                     (--runtime deep)"
                        .to_string(),
                );
            }
        } else if runtime == Runtime::Jvm {
            info.not_read.push(
                "thread states, lock waits with their stacks and exceptions thrown: not \
                 asked for (--runtime deep takes thread dumps and a JFR recording)"
                    .to_string(),
            );
        }
        let mut pyspy = None;
        if runtime == Runtime::Python && depth == Depth::Deep {
            match PySpy::find() {
                Ok(spy) => {
                    info.read.push(format!(
                        "threads and the GIL's holder from a py-spy dump every {}s ({})",
                        DUMP_EVERY.as_secs(),
                        spy.path().display()
                    ));
                    pyspy = Some(spy);
                }
                Err(why) => info
                    .not_read
                    .push(format!("threads and the GIL's holder: {why}")),
            }
        } else if runtime == Runtime::Python {
            info.not_read.push(
                "threads and the GIL's holder: not asked for (--runtime deep runs py-spy dump)"
                    .to_string(),
            );
        }
        let mut go = None;
        if runtime == Runtime::Go {
            go = match gctrace {
                Some(feed) => {
                    info.read.push(
                        "GC cycles (pauses, mark assist, heap) from GODEBUG=gctrace=1 on the \
                         stderr of the process kiln started"
                            .to_string(),
                    );
                    Some(GoSource::Trace(feed))
                }
                None => match ExpvarReader::probe(listening) {
                    Ok(reader) => {
                        info.read.push(format!(
                            "GC cycles (pauses, when each ended) from expvar's memstats at \
                             http://{}/debug/vars, once a second",
                            reader.addr()
                        ));
                        info.not_read.push(
                            "mark assist and mark time: expvar does not have them \
                             (kiln run --spawn CMD reads them from GODEBUG=gctrace=1)"
                                .to_string(),
                        );
                        Some(GoSource::Expvar(reader))
                    }
                    Err(why) => {
                        info.not_read.push(format!(
                            "GC cycles: no expvar page ({why}); kiln reads them from \
                             GODEBUG=gctrace=1 when it starts the target itself (kiln run \
                             --spawn CMD), or from /debug/vars when the program imports expvar"
                        ));
                        None
                    }
                },
            };
        }
        let mut goroutines = None;
        let mut go_traces = None;
        if runtime == Runtime::Go && depth == Depth::Deep {
            match GoroutineReader::probe(listening) {
                Ok(reader) => {
                    info.read.push(format!(
                        "goroutines by state and where they wait for locks from a dump every \
                         {}s (http://{}/debug/pprof/goroutine?debug=2; each stops the world \
                         for its length)",
                        DUMP_EVERY.as_secs(),
                        reader.addr()
                    ));
                    match crate::gotrace::helper() {
                        Ok(helper) => {
                            info.read.push(format!(
                                "mark assist per second and per function from execution \
                                 traces ({} s each, one after another, \
                                 http://{}/debug/pprof/trace)",
                                crate::gotrace::CHUNK_S,
                                reader.addr()
                            ));
                            go_traces = Some((reader.addr(), helper));
                        }
                        Err(why) => info.not_read.push(format!(
                            "mark assist per function (execution traces): {why}"
                        )),
                    }
                    goroutines = Some(reader);
                }
                Err(why) => info.not_read.push(format!(
                    "goroutines: no pprof goroutine dump ({why}); the program serves one when \
                     it imports net/http/pprof"
                )),
            }
        } else if runtime == Runtime::Go {
            info.not_read.push(
                "goroutines: not asked for (--runtime deep takes goroutine dumps from \
                 net/http/pprof)"
                    .to_string(),
            );
        }
        if runtime == Runtime::Native {
            info.not_read.push(
                "no managed runtime found (no libjvm, Go build information, Python or Node.js): \
                 the process's own figures are in the resources"
                    .to_string(),
            );
        }
        info.not_read
            .extend(not_read_yet(runtime).map(str::to_string));
        Self {
            info,
            jvm,
            attach,
            pyspy,
            go,
            goroutines,
            go_traces,
            proc_root: proc_root.to_path_buf(),
            depth,
            measuring: Arc::default(),
        }
    }

    /// Whether there is anything to read every second.
    pub fn has_series(&self) -> bool {
        self.jvm.is_some() || self.pyspy.is_some() || self.go.is_some() || self.goroutines.is_some()
    }

    /// Polls until `stop` says so (or the JVM's counters go away), calling `on_second` once a
    /// second. Returns why it stopped early, if it did.
    pub fn run(
        &mut self,
        stop: &dyn Fn() -> bool,
        on_second: &mut dyn FnMut(RuntimeSecond),
    ) -> Option<String> {
        if let (None, Some(spy)) = (&self.jvm, self.pyspy.clone()) {
            return self.run_python(&spy, stop, on_second);
        }
        if self.go.is_some() || self.goroutines.is_some() {
            let mut go = self.go.take();
            let tracer = self
                .go_traces
                .take()
                .map(|(addr, helper)| crate::gotrace::GoTracer::start(addr, helper));
            let stopped = run_go(go.as_mut(), self.goroutines.as_ref(), stop, on_second);
            if let Some(why) = &stopped {
                self.info.not_read.push(format!("GC cycles stopped: {why}"));
            }
            match tracer {
                Some(Ok(tracer)) => {
                    let (record, why) = tracer.finish();
                    if let Some(why) = why {
                        self.info
                            .not_read
                            .push(format!("execution traces stopped: {why}"));
                    }
                    self.info.go_trace = (record.traces > 0).then_some(record);
                }
                Some(Err(why)) => self.info.not_read.push(format!("execution traces: {why}")),
                None => {}
            }
            return stopped;
        }
        let jvm = self.jvm.as_mut()?;
        // the first JFR start in a JVM takes a second or two: on its own thread, so that the
        // counters are polled meanwhile
        let starting = (self.attach.clone())
            .filter(|_| self.depth == Depth::Deep)
            .map(|attach| {
                std::thread::Builder::new()
                    .name("kiln-jfr".into())
                    .spawn(move || jfr::Recording::start(&attach))
            });
        let started = Instant::now();
        let mut last = started;
        let mut next_second = started + Duration::from_secs(1);
        let mut before = jvm.totals();
        let mut pauses = Vec::new();
        let mut second = 0u32;
        let mut next_dump = started + DUMP_EVERY;
        let mut holders = HoldersBudget::from(started);
        let mut thread_dump = None;
        while !stop() {
            std::thread::sleep(POLL);
            if self.measuring.swap(false, Ordering::Relaxed) {
                holders = HoldersBudget::from(Instant::now());
            }
            if let Err(why) = jvm.refresh() {
                self.info.not_read.push(format!("stopped reading: {why}"));
                return Some(why.to_string());
            }
            pauses.extend(jvm.new_pauses());
            if let Some(attach) = self.attach.as_ref().filter(|_| Instant::now() >= next_dump) {
                next_dump += DUMP_EVERY;
                match take_dump(attach, jvm, &mut holders) {
                    Ok(dump) => thread_dump = Some(dump),
                    Err(why) => {
                        self.info
                            .not_read
                            .push(format!("thread dumps stopped: {why}"));
                        self.attach = None;
                    }
                }
                pauses.extend(jvm.new_pauses());
            }
            let now = Instant::now();
            if now >= next_second {
                let totals = jvm.totals();
                second += 1;
                on_second(RuntimeSecond {
                    second,
                    unix_ms: unix_ms_now(),
                    interval_s: (now - last).as_secs_f64(),
                    jvm: Some(jvm.second(&before, &totals, std::mem::take(&mut pauses))),
                    thread_dump: thread_dump.take(),
                    python: None,
                    go: None,
                });
                before = totals;
                last = now;
                next_second += Duration::from_secs(1);
            }
        }
        // no recording was asked for (not --runtime deep): nothing to read, nothing to say
        let starting = starting?;
        let recording = match starting {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|_| Err("the JFR start failed".into())),
            Err(e) => Err(crate::error::io("cannot start a thread")(e)),
        };
        let read = recording.and_then(|recording| {
            self.info.not_read.extend(recording.threshold_note.clone());
            match self.attach.as_ref() {
                Some(attach) => recording.finish(attach, self.info.pid, &self.proc_root),
                None => Err("the attach socket went away".into()),
            }
        });
        match read {
            Ok(read) => {
                self.info.throwable_counts = read.throwables;
                self.info.lock_waits = read.lock_waits;
            }
            Err(why) => self
                .info
                .not_read
                .push(format!("exceptions and lock waits (JFR): {why}")),
        }
        None
    }
}

impl RuntimeWatch {
    /// A Python target: a py-spy dump every `DUMP_EVERY`, each its own record line.
    fn run_python(
        &mut self,
        spy: &PySpy,
        stop: &dyn Fn() -> bool,
        on_second: &mut dyn FnMut(RuntimeSecond),
    ) -> Option<String> {
        let started = Instant::now();
        let mut last = started;
        let mut next_dump = started + DUMP_EVERY;
        let mut second = 0u32;
        while !stop() {
            std::thread::sleep(Duration::from_millis(50));
            let now = Instant::now();
            if now < next_dump {
                continue;
            }
            next_dump += DUMP_EVERY;
            match spy.dump(self.info.pid) {
                Ok(dump) => {
                    second += DUMP_EVERY.as_secs() as u32;
                    on_second(RuntimeSecond {
                        second,
                        unix_ms: unix_ms_now(),
                        interval_s: (now - last).as_secs_f64(),
                        python: Some(dump),
                        ..Default::default()
                    });
                    last = now;
                }
                Err(why) => {
                    self.info
                        .not_read
                        .push(format!("py-spy dumps stopped: {why}"));
                    return Some(why.to_string());
                }
            }
        }
        None
    }
}

/// Where a Go target's GC cycles come from.
enum GoSource {
    Trace(GcTraceFeed),
    Expvar(ExpvarReader),
}

/// A Go target: a line a second with the GC cycles reported meanwhile. Returns why it
/// stopped early (the expvar page went away).
fn run_go(
    mut source: Option<&mut GoSource>,
    goroutines: Option<&GoroutineReader>,
    stop: &dyn Fn() -> bool,
    on_second: &mut dyn FnMut(RuntimeSecond),
) -> Option<String> {
    let started = Instant::now();
    let mut last = started;
    let mut next_second = started + Duration::from_secs(1);
    let mut next_dump = started + DUMP_EVERY;
    let mut second = 0u32;
    while !stop() {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if now < next_second {
            continue;
        }
        let go = match source.as_deref_mut() {
            None => None,
            Some(GoSource::Trace(feed)) => Some(GoSecond::of(feed.take())),
            Some(GoSource::Expvar(reader)) => match reader.poll() {
                Ok((cycles, lost)) => {
                    let mut go = GoSecond::of(cycles);
                    go.cycles_lost = lost;
                    Some(go)
                }
                Err(why) => return Some(why.to_string()),
            },
        };
        let dump = match goroutines.filter(|_| now >= next_dump) {
            Some(reader) => {
                next_dump += DUMP_EVERY;
                match reader.dump() {
                    Ok(dump) => Some(dump),
                    Err(why) => return Some(format!("goroutine dumps: {why}")),
                }
            }
            None => None,
        };
        second += 1;
        on_second(RuntimeSecond {
            second,
            unix_ms: unix_ms_now(),
            interval_s: (now - last).as_secs_f64(),
            go,
            thread_dump: dump.map(GoroutineDump::into_thread_dump),
            ..Default::default()
        });
        last = now;
        next_second += Duration::from_secs(1);
    }
    None
}

/// How often a dump may be taken again with `-l` for the holders of j.u.c. locks: the JVM
/// finds them by walking its heap at a safepoint, a pause that grows with the heap in use
/// (JDK 17, G1, 16-byte arrays: 21-23 ms at 81 MiB used, 83-91 ms at 307 MiB; a plain dump
/// 0.4 ms; bench/thread_dump_holders.sh).
const HOLDERS_EVERY: Duration = Duration::from_secs(5);
/// Above this much heap in use the walk is not asked for (a pause of 70 ms or more would be
/// the target's problem, not kiln's finding); the waiters are still counted, their holder
/// unnamed.
const HOLDERS_HEAP_MAX_BYTES: u64 = 256 << 20;

/// A walk that named no holder is taken again after this gap, when it was quick: a
/// ReentrantLock handed to a waiter that waits for a CPU is nobody's until it runs, which on
/// a busy host lasts milliseconds (beside the noisy neighbour and a second JVM, LockShop's
/// 10 ms holds were caught unowned by both walks of a 5 s run).
const HANDOFF_GAP: Duration = Duration::from_millis(30);
/// A walk whose safepoint took under this (a small heap) may be taken again at once, up to
/// [`WALKS_AT_ONCE`] in one dump; a larger heap's pause is the target's cost, and its walk
/// waits for the next dump.
const QUICK_WALK: Duration = Duration::from_millis(10);
const WALKS_AT_ONCE: u32 = 3;

/// Whether the `walks`-th walk of one dump, which cost the target `took` and did or did not
/// name the holder, is taken again at once.
fn walk_again_at_once(walks: u32, took: Duration, holder_unseen: bool) -> bool {
    holder_unseen && walks < WALKS_AT_ONCE && took < QUICK_WALK
}

/// When a dump may walk the heap for the holders of j.u.c. locks again.
struct HoldersBudget {
    due: Instant,
    /// The last walk was taken again at once because it named no holder.
    retried: bool,
}

impl HoldersBudget {
    /// A walk allowed from `due` on.
    fn from(due: Instant) -> Self {
        Self {
            due,
            retried: false,
        }
    }

    fn allow(&self) -> bool {
        Instant::now() >= self.due
    }

    /// After a walk: the next is due in [`HOLDERS_EVERY`], or with the next dump, once, when
    /// this one still saw waiters with no holder. A ReentrantLock is nobody's for the moment
    /// it is handed from its holder to a waiter (unparked, not yet running), and a dump that
    /// falls there names no holder: LockShop, holding 10 ms, lost one in about 30 runs so.
    fn spent(&mut self, holder_unseen: bool) {
        if holder_unseen && !self.retried {
            self.retried = true;
        } else {
            self.retried = false;
            self.due = Instant::now() + HOLDERS_EVERY;
        }
    }
}

/// One thread dump, with what it cost: the round trip, and the JVM's safepoint time over it.
/// When threads park on a j.u.c. lock, whose holder a plain dump does not show, it is taken
/// again at once with `-l` (with a heap small enough, as [`HoldersBudget`] allows: at most
/// every [`HOLDERS_EVERY`], and once more at the next dump when it named no holder) and that
/// dump is the one kept, its cost counted with the first's.
fn take_dump(
    attach: &Attach,
    jvm: &mut JvmReader,
    holders: &mut HoldersBudget,
) -> Result<ThreadDump, RuntimeError> {
    let safepoints_before = jvm.safepoint_ms_total();
    let unix_ms = unix_ms_now();
    let (asked, mut waited) = (Instant::now(), Duration::ZERO);
    let mut dumped = threads::parse(&attach.jcmd("Thread.print")?);
    let with_holders = threads::waits_for_an_unseen_holder(&dumped)
        && holders.allow()
        && jvm
            .heap_used_bytes()
            .is_some_and(|used| used <= HOLDERS_HEAP_MAX_BYTES);
    if with_holders {
        let mut walks = 0;
        loop {
            jvm.refresh()?;
            let (before, walk) = (jvm.safepoint_ms_total(), Instant::now());
            dumped = threads::parse(&attach.jcmd("Thread.print -l")?);
            walks += 1;
            jvm.refresh()?;
            // what the walk cost the target: its safepoint's time (the heap walked), or the
            // round trip where the JVM publishes none (a counter that makes no duration, as a
            // hostile hsperfdata file's, counts as costly)
            let cost = (jvm.safepoint_ms_total().zip(before))
                .map(|(after, before)| {
                    Duration::try_from_secs_f64((after - before).max(0.0) / 1e3)
                        .unwrap_or(Duration::MAX)
                })
                .unwrap_or_else(|| walk.elapsed());
            let unseen = threads::waits_for_an_unseen_holder(&dumped);
            if !walk_again_at_once(walks, cost, unseen) {
                holders.spent(unseen);
                break;
            }
            std::thread::sleep(HANDOFF_GAP);
            waited += HANDOFF_GAP;
        }
    }
    // the round trips, not kiln's waits between walks
    let took_ms = asked.elapsed().saturating_sub(waited).as_secs_f64() * 1e3;
    jvm.refresh()?;
    let mut dump = threads::summarize(&dumped, unix_ms, took_ms);
    dump.with_holders = with_holders;
    dump.safepoint_ms = jvm
        .safepoint_ms_total()
        .zip(safepoints_before)
        .map(|(after, before)| (after - before).max(0.0));
    Ok(dump)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_that_names_no_holder_is_taken_again_once_and_then_waits_its_turn() {
        let mut holders = HoldersBudget::from(Instant::now());
        assert!(holders.allow());
        // a lock caught between its holder and the next: the next dump walks again
        holders.spent(true);
        assert!(holders.allow());
        // and again no holder (a lock nobody owns, as a read lock): now it waits
        holders.spent(true);
        assert!(!holders.allow());
        assert!(holders.due > Instant::now() + HOLDERS_EVERY - Duration::from_secs(1));
        // a walk that named the holder waits its turn too
        let mut named = HoldersBudget::from(Instant::now());
        named.spent(false);
        assert!(!named.allow());
        // the measurement's start allows one at once whatever was spent
        assert!(HoldersBudget::from(Instant::now()).allow());
    }

    #[test]
    fn a_quick_walk_that_names_no_holder_is_taken_again_at_once_a_slow_one_is_not() {
        let quick = Duration::from_millis(2);
        assert!(walk_again_at_once(1, quick, true));
        assert!(walk_again_at_once(2, quick, true));
        assert!(!walk_again_at_once(3, quick, true), "three walks at most");
        assert!(!walk_again_at_once(1, quick, false), "the holder was named");
        // a large heap's pause is the target's cost: one walk, then the next dump's
        assert!(!walk_again_at_once(1, Duration::from_millis(25), true));
    }
}
