//! Java thread dumps (`Thread.print`, JDK 17 to 25) read into threads, their states and locks,
//! and the question a user asks of them: who holds the lock that request threads wait for, and
//! where (Arthas's `thread -b`, on text, over every contended lock rather than the worst one).
//!
//! The format (verified on 17 and 25): a header line starting with the quoted thread name and
//! `nid=` (the Linux tid, hex before JDK 25 and decimal after), the state line
//! `java.lang.Thread.State: BLOCKED (on object monitor)`, frames `at pkg.Class.method(...)`,
//! and lock lines `- waiting to lock <addr> (a Class)`, `- locked <addr> (a Class)`,
//! `- parking to wait for  <addr> (a Class)`; with `-l`, after the frames,
//! `Locked ownable synchronizers:` and one `- <addr> (a Class)` line for each j.u.c. lock held.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One thread of a dump.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpedThread {
    pub name: String,
    /// The Linux thread id (`nid`).
    pub os_tid: Option<u32>,
    /// `RUNNABLE`, `BLOCKED`, `WAITING`, `TIMED_WAITING`; `None` for VM threads.
    pub state: Option<String>,
    /// `pkg.Class.method`, innermost first.
    pub frames: Vec<String>,
    /// The monitor this thread waits to enter.
    pub waiting_to_lock: Option<Lock>,
    /// The lock or condition it parks on (j.u.c.).
    pub parked_on: Option<Lock>,
    /// Monitors it holds, with the index of the frame that took each.
    pub locked: Vec<(usize, Lock)>,
    /// j.u.c. locks it holds (`Locked ownable synchronizers`, only in a dump taken with `-l`).
    pub owns: Vec<Lock>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lock {
    pub address: String,
    pub class: String,
}

/// Reads a `Thread.print` text. Lines it does not know are skipped: a dump from another JDK
/// gives fewer details, never an error.
pub fn parse(text: &str) -> Vec<DumpedThread> {
    let mut threads: Vec<DumpedThread> = Vec::new();
    let mut in_synchronizers = false;
    for line in text.lines() {
        if line.starts_with('"') {
            threads.push(header(line));
            in_synchronizers = false;
            continue;
        }
        let Some(thread) = threads.last_mut() else {
            continue;
        };
        let line = line.trim();
        if line == "Locked ownable synchronizers:" {
            in_synchronizers = true;
        } else if in_synchronizers {
            if let Some(lock) = line.strip_prefix("- ").and_then(lock) {
                thread.owns.push(lock);
            }
        } else if let Some(state) = line.strip_prefix("java.lang.Thread.State: ") {
            thread.state = state.split_whitespace().next().map(str::to_string);
        } else if let Some(frame) = line.strip_prefix("at ") {
            let method = frame.split('(').next().unwrap_or(frame).trim();
            thread.frames.push(method.to_string());
        } else if let Some(rest) = line.strip_prefix("- waiting to lock ") {
            thread.waiting_to_lock = lock(rest);
        } else if let Some(rest) = line.strip_prefix("- parking to wait for ") {
            thread.parked_on = lock(rest);
        } else if let Some(rest) = line.strip_prefix("- locked ") {
            if let Some(lock) = lock(rest) {
                thread
                    .locked
                    .push((thread.frames.len().saturating_sub(1), lock));
            }
        }
    }
    threads
}

fn header(line: &str) -> DumpedThread {
    let name = line[1..].rfind('"').map_or("", |end| &line[1..1 + end]);
    let os_tid = line.split_whitespace().find_map(|word| {
        let value = word.strip_prefix("nid=")?;
        match value.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => value.parse().ok(),
        }
    });
    DumpedThread {
        name: name.to_string(),
        os_tid,
        ..Default::default()
    }
}

/// `<0x0000000687400750> (a java.lang.Object)`.
fn lock(text: &str) -> Option<Lock> {
    let text = text.trim_start();
    let address = text.strip_prefix('<')?.split('>').next()?.to_string();
    let class = text
        .split_once("(a ")
        .map(|(_, rest)| rest.trim_end().trim_end_matches(')').to_string())
        .unwrap_or_default();
    Some(Lock { address, class })
}

/// One dump, summarised: thread states and the locks request threads wait for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadDump {
    /// When the dump was asked for (ms since the Unix epoch).
    pub unix_ms: u64,
    /// The round trip of the request: what one dump cost the watcher.
    pub took_ms: f64,
    /// The time the JVM stood at safepoints during the dump (from its own counters): what it
    /// cost the target. `None` when the JVM does not count safepoint time.
    #[serde(default)]
    pub safepoint_ms: Option<f64>,
    /// Java threads by state.
    pub states: BTreeMap<String, u32>,
    /// Locks with at least one thread waiting to take them, most waiters first.
    pub contended: Vec<Contention>,
    /// Taken with `-l`: the j.u.c. locks' holders are in it (a walk of the heap at a
    /// safepoint, so only now and then).
    #[serde(default)]
    pub with_holders: bool,
}

/// A lock that threads wait for in one dump, and who holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Contention {
    pub lock_class: String,
    pub waiters: u32,
    /// The waiters' names, a few.
    pub waiter_names: Vec<String>,
    /// Where the waiters wait: their innermost frame (the one that takes the lock).
    pub waiting_at: String,
    /// The holder's name and its innermost frames; `None`: not held by a Java thread the
    /// dump shows (a parked condition, or a lock taken between the dump's own snapshots).
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    pub holder_frames: Vec<String>,
    /// A known signature, named: `log4j2 async logger ring buffer full`.
    #[serde(default)]
    pub signature: Option<String>,
}

/// How many frames of a holder are kept.
const HOLDER_FRAMES: usize = 8;
/// How many waiter names are kept.
const WAITER_NAMES: usize = 5;

/// States counted and monitors contended in one parsed dump.
pub fn summarize(threads: &[DumpedThread], unix_ms: u64, took_ms: f64) -> ThreadDump {
    let mut states = BTreeMap::new();
    for thread in threads {
        if let Some(state) = &thread.state {
            *states.entry(state.clone()).or_insert(0) += 1;
        }
    }
    let holders: BTreeMap<&str, &DumpedThread> = threads
        .iter()
        .flat_map(|t| {
            (t.locked.iter().map(|(_, lock)| lock))
                .chain(&t.owns)
                .map(move |lock| (lock.address.as_str(), t))
        })
        .collect();
    let mut waiting: BTreeMap<&str, Vec<&DumpedThread>> = BTreeMap::new();
    for thread in threads {
        // monitors always; j.u.c. locks when they are locks (an idle pool's threads park on
        // conditions that nobody holds) or a thread is seen holding them
        let wanted = thread.waiting_to_lock.as_ref().or(thread
            .parked_on
            .as_ref()
            .filter(|lock| is_lock(lock) || holders.contains_key(lock.address.as_str())));
        if let Some(lock) = wanted {
            waiting
                .entry(lock.address.as_str())
                .or_default()
                .push(thread);
        }
    }
    let mut contended: Vec<Contention> = waiting
        .into_iter()
        .map(|(address, waiters)| {
            let holder = holders.get(address).copied();
            let lock_class = waiters[0]
                .waiting_to_lock
                .as_ref()
                .or(waiters[0].parked_on.as_ref())
                .map(|l| l.class.clone())
                .unwrap_or_default();
            let waiting_at = most_common(waiters.iter().filter_map(|t| waiting_frame(t)));
            let holder_frames = holder
                .map(|h| h.frames.iter().take(HOLDER_FRAMES).cloned().collect())
                .unwrap_or_default();
            let mut contention = Contention {
                lock_class,
                waiters: waiters.len() as u32,
                waiter_names: waiters
                    .iter()
                    .take(WAITER_NAMES)
                    .map(|t| t.name.clone())
                    .collect(),
                waiting_at,
                holder: holder.map(|h| h.name.clone()),
                holder_frames,
                signature: None,
            };
            contention.signature = signature(&contention, holder);
            contention
        })
        .collect();
    contended.sort_by(|a, b| {
        b.waiters
            .cmp(&a.waiters)
            .then(a.waiting_at.cmp(&b.waiting_at))
    });
    ThreadDump {
        unix_ms,
        took_ms,
        safepoint_ms: None,
        states,
        contended,
        with_holders: false,
    }
}

/// Whether a j.u.c. blocker is a lock that a thread holds, told by its class: the JDK's
/// exclusive and read-write locks and semaphores park their waiters on a `Sync`
/// (`ReentrantLock$NonfairSync`, `$FairSync`), while an idle pool's threads park on a
/// condition (`AbstractQueuedSynchronizer$ConditionObject`) or a queue, which nobody holds;
/// a CountDownLatch's `Sync` has no holder either.
fn is_lock(lock: &Lock) -> bool {
    lock.class.ends_with("Sync") && !lock.class.ends_with("CountDownLatch$Sync")
}

/// Whether a thread parks on a j.u.c. lock whose holder this dump does not show: a dump taken
/// without `-l` lists no ownable synchronizers.
pub fn waits_for_an_unseen_holder(threads: &[DumpedThread]) -> bool {
    let held: std::collections::BTreeSet<&str> = threads
        .iter()
        .flat_map(|t| &t.owns)
        .map(|lock| lock.address.as_str())
        .collect();
    threads
        .iter()
        .filter_map(|t| t.parked_on.as_ref())
        .any(|lock| is_lock(lock) && !held.contains(lock.address.as_str()))
}

/// Where a waiter waits: a monitor's, its innermost frame (the method that enters it); a
/// parked thread's, the first frame below the JDK's parking machinery (the caller of `lock()`).
fn waiting_frame(thread: &DumpedThread) -> Option<&String> {
    const PARKING: [&str; 3] = [
        "jdk.internal.misc.Unsafe.",
        "sun.misc.Unsafe.",
        "java.util.concurrent.locks.",
    ];
    if thread.waiting_to_lock.is_some() {
        return thread.frames.first();
    }
    (thread.frames.iter())
        .find(|frame| !PARKING.iter().any(|p| frame.starts_with(p)))
        .or(thread.frames.first())
}

fn most_common<'a>(frames: impl Iterator<Item = &'a String>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for frame in frames {
        *counts.entry(frame.as_str()).or_insert(0) += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(_, n)| n)
        .map(|(frame, _)| frame.to_string())
        .unwrap_or_default()
}

/// Known causes, recognised by their frames.
const SIGNATURES: &[(&str, &str)] = &[
    // log4j2's async loggers: callers serialise on queueFullEnqueueLock while the holder spins
    // in the disruptor's MultiProducerSequencer.next for a free slot
    (
        "AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull",
        "log4j2 async logger ring buffer full",
    ),
    (
        "AsyncLoggerConfigDisruptor.enqueue",
        "log4j2 async logger ring buffer full",
    ),
    // logback's AsyncAppender: a bounded ArrayBlockingQueue that put() blocks on
    ("AsyncAppenderBase.put", "logback AsyncAppender queue full"),
];

fn signature(contention: &Contention, holder: Option<&DumpedThread>) -> Option<String> {
    let frames = std::iter::once(&contention.waiting_at)
        .chain(holder.into_iter().flat_map(|h| h.frames.iter()));
    known_signature(frames.map(String::as_str)).map(str::to_string)
}

/// The known cause whose frame is among `frames` (`Class.method`, anything after a `(`
/// ignored), the first frame's first.
pub fn known_signature<'a>(frames: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    frames.into_iter().find_map(|frame| {
        let method = frame.split('(').next().unwrap_or(frame).trim();
        SIGNATURES
            .iter()
            .find(|(key, _)| method.ends_with(key))
            .map(|(_, name)| *name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A JDK 17 dump of tests/apps/java_logs/AsyncLogShop with its log destination too slow,
    /// cut to the threads that matter.
    const RING_FULL: &str = r#"2026-11-24 07:20:01
Full thread dump OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, sharing):

"request-18" #18 prio=5 os_prio=0 cpu=84.90ms elapsed=2.43s tid=0x00007f457401ccb0 nid=0x789f waiting for monitor entry  [0x00007f45e0d9b000]
   java.lang.Thread.State: BLOCKED (on object monitor)
	at org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull(AsyncLoggerDisruptor.java:273)
	- waiting to lock <0x0000000687400750> (a java.lang.Object)
	at org.apache.logging.log4j.core.async.AsyncLogger.handleRingBufferFull(AsyncLogger.java:291)

"request-19" #19 prio=5 os_prio=0 cpu=75.43ms elapsed=2.42s tid=0x00007f457401daa0 nid=0x78a0 runnable  [0x00007f45e0c9b000]
   java.lang.Thread.State: TIMED_WAITING (parking)
	at jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)
	at java.util.concurrent.locks.LockSupport.parkNanos(java.base@17.0.15/LockSupport.java:376)
	at com.lmax.disruptor.MultiProducerSequencer.next(MultiProducerSequencer.java:136)
	at org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull(AsyncLoggerDisruptor.java:274)
	- locked <0x0000000687400750> (a java.lang.Object)

"request-20" #20 prio=5 os_prio=0 cpu=81.20ms elapsed=2.42s tid=0x00007f457401eb30 nid=0x78a1 waiting for monitor entry  [0x00007f45e0b9b000]
   java.lang.Thread.State: BLOCKED (on object monitor)
	at org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull(AsyncLoggerDisruptor.java:273)
	- waiting to lock <0x0000000687400750> (a java.lang.Object)

"request-21" #21 prio=5 os_prio=0 cpu=90.50ms elapsed=2.42s tid=0x00007f457401fbc0 nid=0x78a2 waiting on condition  [0x00007f45e0a9c000]
   java.lang.Thread.State: WAITING (parking)
	at jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)
	- parking to wait for  <0x000000069e0134c0> (a java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject)
	at java.util.concurrent.LinkedBlockingQueue.take(java.base@17.0.15/LinkedBlockingQueue.java:435)

"GC Thread#0" os_prio=0 cpu=12.50ms elapsed=3.10s tid=0x00007f45f0029a40 nid=0x7890 runnable

"mon-worker-0" #21 [18744] prio=5 os_prio=0 cpu=1.00ms elapsed=1.00s tid=0x00007f457401fbc0 nid=18744 waiting on condition
   java.lang.Thread.State: RUNNABLE
"#;

    #[test]
    fn a_full_log4j2_ring_buffer_is_named_with_its_holder() {
        let threads = parse(RING_FULL);
        assert_eq!(threads.len(), 6);
        assert_eq!(threads[0].name, "request-18");
        assert_eq!(threads[0].os_tid, Some(0x789f));
        assert_eq!(
            threads[5].os_tid,
            Some(18744),
            "JDK 25 prints nid in decimal"
        );
        assert_eq!(threads[4].state, None, "a VM thread has no Java state");
        let dump = summarize(&threads, 1, 2.0);
        assert_eq!(dump.states["BLOCKED"], 2);
        assert_eq!(dump.states["WAITING"], 1);
        assert_eq!(dump.states["TIMED_WAITING"], 1);
        assert_eq!(
            dump.contended.len(),
            1,
            "an idle pool's park is no contention"
        );
        let c = &dump.contended[0];
        assert_eq!(c.waiters, 2);
        assert_eq!(c.lock_class, "java.lang.Object");
        assert_eq!(c.holder.as_deref(), Some("request-19"));
        assert!(c.waiting_at.ends_with("enqueueLogMessageWhenQueueFull"));
        assert_eq!(
            c.holder_frames[2],
            "com.lmax.disruptor.MultiProducerSequencer.next"
        );
        assert_eq!(
            c.signature.as_deref(),
            Some("log4j2 async logger ring buffer full")
        );
    }

    #[test]
    fn monitor_contention_without_a_known_cause_has_no_signature() {
        let text = RING_FULL
            .replace("org.apache.logging.log4j.core.async.AsyncLoggerDisruptor.enqueueLogMessageWhenQueueFull", "shop.Cache.get")
            .replace("com.lmax.disruptor.MultiProducerSequencer.next", "shop.Cache.load");
        let dump = summarize(&parse(&text), 1, 2.0);
        assert_eq!(dump.contended[0].waiters, 2);
        assert_eq!(dump.contended[0].waiting_at, "shop.Cache.get");
        assert_eq!(dump.contended[0].signature, None);
    }

    /// A JDK 17 dump of tests/apps/java_locks/LockShop in `parked` mode taken with `-l`, cut
    /// to the threads that matter and to their innermost frames, with an idle pool's thread
    /// and a latch's waiter added.
    const PARKED_WITH_HOLDERS: &str = r#"Full thread dump OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, sharing):

"request-16" #16 prio=5 os_prio=0 cpu=23.21ms elapsed=1.41s tid=0x00007fae70009ad0 nid=0x2378 waiting on condition  [0x00007faed5ffe000]
   java.lang.Thread.State: TIMED_WAITING (sleeping)
	at java.lang.Thread.sleep(java.base@17.0.15/Native Method)
	at LockShop.reserve(LockShop.java:56)
	at LockShop.lambda$main$2(LockShop.java:96)

   Locked ownable synchronizers:
	- <0x00000000ffc43c70> (a java.util.concurrent.ThreadPoolExecutor$Worker)
	- <0x00000000ffd1bc60> (a java.util.concurrent.locks.ReentrantLock$NonfairSync)

"request-17" #17 prio=5 os_prio=0 cpu=16.27ms elapsed=1.34s tid=0x00007fae7000a970 nid=0x238f waiting on condition  [0x00007faed5efe000]
   java.lang.Thread.State: WAITING (parking)
	at jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)
	- parking to wait for  <0x00000000ffd1bc60> (a java.util.concurrent.locks.ReentrantLock$NonfairSync)
	at java.util.concurrent.locks.LockSupport.park(java.base@17.0.15/LockSupport.java:211)
	at java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire(java.base@17.0.15/AbstractQueuedSynchronizer.java:715)
	at java.util.concurrent.locks.ReentrantLock.lock(java.base@17.0.15/ReentrantLock.java:322)
	at LockShop.reserve(LockShop.java:53)

   Locked ownable synchronizers:
	- <0x00000000ffc5d788> (a java.util.concurrent.ThreadPoolExecutor$Worker)

"request-18" #18 prio=5 os_prio=0 cpu=16.90ms elapsed=1.31s tid=0x00007fae7000b960 nid=0x2396 waiting on condition  [0x00007faed5dfe000]
   java.lang.Thread.State: WAITING (parking)
	at jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)
	- parking to wait for  <0x00000000ffd1bc60> (a java.util.concurrent.locks.ReentrantLock$NonfairSync)
	at java.util.concurrent.locks.LockSupport.park(java.base@17.0.15/LockSupport.java:211)
	at java.util.concurrent.locks.ReentrantLock.lock(java.base@17.0.15/ReentrantLock.java:322)
	at LockShop.reserve(LockShop.java:53)

   Locked ownable synchronizers:
	- <0x00000000ffc5e1e8> (a java.util.concurrent.ThreadPoolExecutor$Worker)

"pool-1-thread-1" #20 prio=5 os_prio=0 cpu=0.20ms elapsed=1.30s tid=0x00007fae7000c960 nid=0x2399 waiting on condition  [0x00007faed5cfe000]
   java.lang.Thread.State: WAITING (parking)
	at jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)
	- parking to wait for  <0x00000000ffd20000> (a java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject)
	at java.util.concurrent.LinkedBlockingQueue.take(java.base@17.0.15/LinkedBlockingQueue.java:435)

   Locked ownable synchronizers:
	- None

"main" #1 prio=5 os_prio=0 cpu=50.00ms elapsed=1.50s tid=0x00007fae7000d960 nid=0x2300 waiting on condition  [0x00007faed5bfe000]
   java.lang.Thread.State: WAITING (parking)
	at jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)
	- parking to wait for  <0x00000000ffd30000> (a java.util.concurrent.CountDownLatch$Sync)
	at java.util.concurrent.CountDownLatch.await(java.base@17.0.15/CountDownLatch.java:230)

   Locked ownable synchronizers:
	- None
"#;

    #[test]
    fn a_reentrant_locks_holder_is_named_from_a_dump_with_its_ownable_synchronizers() {
        let threads = parse(PARKED_WITH_HOLDERS);
        assert_eq!(threads[0].owns.len(), 2);
        assert!(threads[3].owns.is_empty(), "- None holds nothing");
        assert!(!waits_for_an_unseen_holder(&threads));
        let dump = summarize(&threads, 1, 2.0);
        assert_eq!(
            dump.contended.len(),
            1,
            "an idle pool's condition and a latch are no contention"
        );
        let c = &dump.contended[0];
        assert_eq!(
            c.lock_class,
            "java.util.concurrent.locks.ReentrantLock$NonfairSync"
        );
        assert_eq!(c.waiters, 2);
        assert_eq!(
            c.waiting_at, "LockShop.reserve",
            "below the parking machinery"
        );
        assert_eq!(c.holder.as_deref(), Some("request-16"));
        assert_eq!(
            c.holder_frames[..2],
            ["java.lang.Thread.sleep", "LockShop.reserve"]
        );
    }

    #[test]
    fn without_ownable_synchronizers_the_waiters_count_and_the_holder_is_asked_for() {
        let plain: String = PARKED_WITH_HOLDERS
            .split("\n\n")
            .map(|block| {
                block
                    .split("   Locked ownable synchronizers:")
                    .next()
                    .unwrap()
            })
            .collect::<Vec<_>>()
            .join("\n\n");
        let threads = parse(&plain);
        assert!(threads.iter().all(|t| t.owns.is_empty()));
        assert!(waits_for_an_unseen_holder(&threads));
        let dump = summarize(&threads, 1, 2.0);
        assert_eq!(dump.contended.len(), 1);
        assert_eq!(dump.contended[0].waiters, 2);
        assert_eq!(dump.contended[0].holder, None);
        // an idle pool alone asks for nothing
        let idle = parse(&PARKED_WITH_HOLDERS[PARKED_WITH_HOLDERS.find("\"pool-1").unwrap()..]);
        assert!(!waits_for_an_unseen_holder(&idle));
    }

    proptest! {
        #[test]
        fn any_text_parses_without_panic(text in "(\"[a-z\" ]{0,8}( nid=0x[0-9a-z]{0,4})?\n|   Locked ownable synchronizers:\n|\t- (locked|waiting to lock|parking to wait for |None) ?<?[0-9a-fx]{0,6}>? ?\\(?(a [A-Za-z.]{0,6})?\\)?\n|\tat [a-zA-Z.(]{0,12}\n|   java.lang.Thread.State: [A-Z_ ]{0,9}\n|.{0,20}\n){0,30}") {
            let threads = parse(&text);
            let _ = waits_for_an_unseen_holder(&threads);
            let _ = summarize(&threads, 0, 0.0);
        }
    }
}
