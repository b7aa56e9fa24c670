//! Rules over the off-CPU profile (every context switch with the stack the thread left the
//! CPU from): threads that wait for a lock another thread holds.

use std::collections::HashMap;

use kiln_record::text::safe_text;
use serde_json::json;

use super::profile::{plain_name, strip_mark, top};
use super::{Draft, Rule};
use crate::{RunRecord, Severity, Verdict};

/// Fewer switches than this and a share is noise.
const MIN_SWITCHES: u64 = 200;
/// Lock waits must be at least this share of all switches...
const MIN_SHARE: f64 = 0.10;
/// ...and this many per measured request (a lock met once in a while is not the problem).
const MIN_PER_REQUEST: f64 = 0.02;

/// Frames where a thread blocks because a lock is taken (matched with perf's `<...>` around
/// Rust types removed: `<std::sys::sync::mutex::futex::Mutex>::lock_contended`): the slow paths of mutexes and
/// read-write locks in Rust's std and parking_lot, glibc, the JVM (monitors and
/// java.util.concurrent locks), Go's sync package, and CPython's GIL. Condition variables
/// and thread-pool queues (a worker waiting for work) are not here: waiting for work is
/// not contention.
const LOCK_FRAMES: &[&str] = &[
    "Mutex::lock_contended",
    "RwLock::read_contended",
    "RwLock::write_contended",
    "RawMutex::lock_slow",
    "RawRwLock::lock_shared_slow",
    "RawRwLock::lock_exclusive_slow",
    "pthread_mutex_lock",
    "__lll_lock_wait",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "ObjectMonitor::enter",
    "ObjectMonitor::EnterI",
    "ObjectSynchronizer::enter",
    "AbstractQueuedSynchronizer.acquire",
    "ReentrantLock$Sync.lock",
    "ReentrantReadWriteLock$ReadLock.lock",
    "ReentrantReadWriteLock$WriteLock.lock",
    "sync.(*Mutex).lockSlow",
    "sync.(*RWMutex).RLock",
    "sync.(*RWMutex).Lock",
    "take_gil",
];

/// Whether a frame is one of `LOCK_FRAMES`.
fn is_lock_frame(frame: &str) -> bool {
    let plain = plain_name(frame);
    LOCK_FRAMES.iter().any(|l| plain.contains(l))
}

/// Frames of the lock machinery itself, passed over when naming who waits.
fn is_lock_glue(frame: &str) -> bool {
    let f = strip_mark(frame);
    kiln_profile::is_kernel_frame(frame)
        || is_lock_frame(f)
        || f.contains("::sync::")
        || f.contains("mutex")
        || f.contains("Mutex")
        || f.contains("futex")
        || matches!(f, "syscall" | "__syscall" | "[unknown]")
}

pub const LOCK_CONTENTION: Rule = Rule {
    id: "threads.lock-contention",
    judge: lock_contention,
};

/// Threads that left the CPU because a lock was held by another.
fn lock_contention(run: &RunRecord) -> Verdict {
    let Some(off_cpu) = &run.off_cpu else {
        return Verdict::Unjudged(run.not_recorded("--off-cpu", "no off-CPU profile"));
    };
    let total = off_cpu.folded.total();
    if total < MIN_SWITCHES {
        return Verdict::Unjudged(format!(
            "{total} context switches are too few to judge (at least {MIN_SWITCHES})"
        ));
    }
    let mut waits = 0u64;
    let mut locks: HashMap<String, u64> = HashMap::new();
    let mut waiters: HashMap<String, u64> = HashMap::new();
    let mut threads: HashMap<String, u64> = HashMap::new();
    for (stack, count) in off_cpu.folded.lines() {
        let frames: Vec<&str> = stack.split(';').collect();
        // the lock frame nearest the root: a lock's slow path calls further lock frames
        let Some(at) = frames.iter().position(|f| is_lock_frame(f)) else {
            continue;
        };
        waits += count;
        *locks.entry(frames[at].to_string()).or_default() += count;
        // who waits: the nearest caller that is not the lock's own code
        if let Some(caller) = frames[1..at].iter().rev().find(|f| !is_lock_glue(f)) {
            *waiters.entry(caller.to_string()).or_default() += count;
        }
        // perf puts the thread's name first
        *threads.entry(frames[0].to_string()).or_default() += count;
    }
    let share = waits as f64 / total as f64;
    let requests = run.measured().map_or(0, |m| m.totals.requests);
    let per_request = if requests > 0 {
        waits as f64 / requests as f64
    } else {
        f64::INFINITY // a profile without load (kiln watch): judged by the share alone
    };
    if share < MIN_SHARE || per_request < MIN_PER_REQUEST {
        return Verdict::Clear;
    }
    let callers = top(&waiters, total, 3);
    let lock_frames = top(&locks, total, 2);
    let thread_names = top(&threads, total, 3);
    let mut evidence = vec![format!(
        "{waits} of {total} context switches ({:.0}%) were threads blocking on a lock",
        100.0 * share
    )];
    if requests > 0 {
        evidence.push(format!(
            "{per_request:.2} lock waits per request ({requests} requests measured)"
        ));
    }
    evidence.extend(
        callers
            .iter()
            .map(|(f, s)| format!("{:5.1}%  waiting in {}", 100.0 * s, safe_text(f))),
    );
    evidence.extend(
        lock_frames
            .iter()
            .map(|(f, s)| format!("{:5.1}%  at {}", 100.0 * s, safe_text(f))),
    );
    let names: Vec<String> = thread_names
        .iter()
        .map(|(t, s)| format!("{} ({:.0}%)", safe_text(t), 100.0 * s))
        .collect();
    evidence.push(format!("threads: {}", names.join(", ")));
    let waiter = callers.first().map(|(f, _)| f.as_str());
    let flame = waiter.map(|frame| crate::FlameCite {
        event: kiln_record::schema::profile::Event::Cswitch,
        frame: frame.to_string(),
    });
    let gil = lock_frames.iter().any(|(f, _)| f.contains("take_gil"));
    Verdict::Found(vec![Draft {
        rule: LOCK_CONTENTION.id,
        key: waiter.unwrap_or(""),
        severity: if share >= 0.4 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "Threads wait for a lock: {:.0}% of the target's context switches{}",
            100.0 * share,
            waiter.map_or(String::new(), |w| format!(", in {}", safe_text(w)))
        ),
        evidence,
        window: run.window(),
        cause: if gil {
            "Python threads wait for the interpreter lock (GIL): only one runs Python code at \
             a time"
                .into()
        } else {
            "requests queue for a lock another thread holds while it works (slow work inside \
             the critical section, one lock for data every request touches)"
                .into()
        },
        fix: if gil {
            "run more processes instead of threads (gunicorn/uvicorn workers), move the CPU \
             work to a C extension that releases the GIL, or use the free-threaded build"
                .into()
        } else {
            "hold the lock only around the shared state, not around I/O or slow work; split \
             it (one lock per shard of the data); a read-write lock for read-mostly data; an \
             atomic or a lock-free structure for counters and caches"
                .into()
        },
        impact: (share, "the target's context switches"),
        data: json!({"profile": "off-cpu", "waits": waits, "total": total,
            "per_request": if per_request.is_finite() { json!(per_request) } else { json!(null) },
            "frames": callers, "locks": lock_frames, "threads": thread_names}),
    }
    .finish()
    .citing(flame)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Profile;
    use crate::rules::fixtures::{load_run, Second};
    use kiln_profile::Folded;

    fn with_off_cpu(requests: u64, folded: &str) -> RunRecord {
        let mut run = load_run(&vec![Second::ok(requests / 10); 10]);
        let folded = Folded::parse(folded).unwrap().0;
        run.off_cpu = Some(Profile::of(
            folded,
            kiln_record::schema::profile::Event::Cswitch,
        ));
        run
    }

    // as perf names Rust's frames
    const LOCK: &str = "worker;main;app::handle;app::cache::get;<std::sync::poison::mutex::Mutex<T>>::lock;\
<std::sys::sync::mutex::futex::Mutex>::lock_contended;syscall;entry_SYSCALL_64_[k];__x64_sys_futex_[k];schedule_[k]";
    const READ: &str =
        "worker;main;app::serve;std::net::TcpStream::read;recv;entry_SYSCALL_64_[k];schedule_[k]";
    const IDLE: &str = "worker;main;pool::next_job;std::sync::Condvar::wait;std::sys::sync::condvar::futex::Condvar::wait;syscall;schedule_[k]";

    #[test]
    fn threads_blocking_on_a_lock_fire_with_the_waiting_code() {
        let run = with_off_cpu(1000, &format!("{LOCK} 600\n{READ} 300\n{IDLE} 100\n"));
        let Verdict::Found(found) = lock_contention(&run) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert_eq!(f.severity, Severity::High);
        assert!(
            f.title.contains("60%") && f.title.contains("app::cache::get"),
            "{}",
            f.title
        );
        assert!(
            f.evidence[0].starts_with("600 of 1000 context switches (60%)"),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence[1].starts_with("0.60 lock waits per request"),
            "{:?}",
            f.evidence
        );
        assert_eq!(f.data["frames"][0][0], "app::cache::get");
        assert_eq!(f.data["profile"], "off-cpu");
        // the report links it to the off-CPU flame graph at the waiting frame
        let flame = f.flame.as_ref().expect("the frame it cites");
        assert_eq!(flame.event, kiln_record::schema::profile::Event::Cswitch);
        assert_eq!(flame.frame, "app::cache::get");
        assert!((f.impact.share - 0.6).abs() < 1e-9);
    }

    #[test]
    fn waiting_for_work_or_for_the_network_is_not_contention() {
        // the same switches without the lock: workers idle in their pool, reads
        let run = with_off_cpu(1000, &format!("{READ} 700\n{IDLE} 300\n"));
        assert!(matches!(lock_contention(&run), Verdict::Clear));
        // a lock met rarely: 5% of switches and 0.01 per request
        let run = with_off_cpu(5000, &format!("{LOCK} 50\n{READ} 950\n"));
        assert!(matches!(lock_contention(&run), Verdict::Clear));
    }

    #[test]
    fn without_an_off_cpu_profile_or_with_too_few_switches_it_says_why() {
        let mut run = with_off_cpu(100, &format!("{LOCK} 50\n"));
        assert!(matches!(lock_contention(&run), Verdict::Unjudged(r) if r.contains("too few")));
        run.off_cpu = None;
        assert!(matches!(lock_contention(&run), Verdict::Unjudged(r) if r.contains("--off-cpu")));
    }

    #[test]
    fn the_gil_gets_its_own_cause_and_fix() {
        let gil = "python3;_PyEval_EvalFrameDefault;app.view;take_gil;pthread_cond_timedwait;schedule_[k]";
        let run = with_off_cpu(1000, &format!("{gil} 500\n{READ} 500\n"));
        let Verdict::Found(found) = lock_contention(&run) else {
            panic!("no finding");
        };
        assert!(found[0].fix.contains("processes"), "{}", found[0].fix);
        assert_eq!(found[0].data["frames"][0][0], "app.view");
    }
}
