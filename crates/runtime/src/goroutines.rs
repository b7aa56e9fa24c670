//! A Go target's goroutines, from `net/http/pprof`'s full dump
//! (`GET /debug/pprof/goroutine?debug=2`): how many, in which state or wait reason, and where
//! the ones waiting for a lock wait. Its stanzas read
//!
//! ```text
//! goroutine 42 [sync.Mutex.Lock, 2 minutes]:
//! sync.runtime_SemacquireMutex(...)
//!     /usr/lib/go/src/runtime/sema.go:95 +0x25 (a tab before each file line)
//! main.handler(...)
//!     /app/main.go:61 +0x4a
//! ```
//!
//! The dump stops the world for its length (it grows with the goroutines), so kiln takes one
//! every few seconds, only under `--runtime deep`, and records what each took.

use crate::RuntimeError;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::debug_http::{first_serving, get};

/// Wait reasons that mean waiting for a lock another goroutine holds.
const LOCK_WAITS: &[&str] = &[
    "sync.Mutex.Lock",
    "sync.RWMutex.Lock",
    "sync.RWMutex.RLock",
    "semacquire",
];

/// Frames of the lock itself, not of the program waiting for it.
const LOCK_FRAMES: &[&str] = &["runtime.", "sync.", "internal/"];

/// One dump, summarised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoroutineDump {
    pub unix_ms: u64,
    /// The dump's round trip.
    pub took_ms: f64,
    pub goroutines: u32,
    /// Goroutines by state or wait reason (`running`, `IO wait`, `sync.Mutex.Lock` ...).
    pub states: BTreeMap<String, u32>,
    /// Goroutines waiting for a lock, by where they wait (the first frame outside the
    /// runtime and sync), the most first.
    pub lock_waits: Vec<LockWait>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockWait {
    pub reason: String,
    pub waiting_at: String,
    pub goroutines: u32,
}

impl GoroutineDump {
    /// The dump in a thread dump's terms, so that the summary and the findings read both
    /// alike: goroutines by state, and each lock wait as a contended lock (whose holder a
    /// goroutine dump does not show).
    pub fn into_thread_dump(self) -> crate::threads::ThreadDump {
        crate::threads::ThreadDump {
            unix_ms: self.unix_ms,
            took_ms: self.took_ms,
            safepoint_ms: None,
            states: self.states,
            contended: self
                .lock_waits
                .into_iter()
                .map(|w| crate::threads::Contention {
                    lock_class: w.reason,
                    waiters: w.goroutines,
                    waiting_at: w.waiting_at,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// Summarises a debug=2 dump.
pub fn parse(text: &str, unix_ms: u64, took_ms: f64) -> GoroutineDump {
    let mut dump = GoroutineDump {
        unix_ms,
        took_ms,
        ..Default::default()
    };
    let mut waits: BTreeMap<(String, String), u32> = BTreeMap::new();
    for stanza in text.split("\n\n") {
        let mut lines = stanza.lines().skip_while(|l| l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        let Some(state) = head
            .strip_prefix("goroutine ")
            .and_then(|rest| rest.split_once('['))
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(inside, _)| {
                inside
                    .split(',')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            })
        else {
            continue;
        };
        dump.goroutines += 1;
        if LOCK_WAITS.contains(&state.as_str()) {
            // functions are the lines not indented; the first of the program's own
            let at = lines
                .filter(|l| !l.starts_with('\t') && !l.starts_with("created by"))
                .map(|l| l.split('(').next().unwrap_or(l).trim())
                .find(|f| !f.is_empty() && !LOCK_FRAMES.iter().any(|p| f.starts_with(p)))
                .unwrap_or("?")
                .to_string();
            *waits.entry((state.clone(), at)).or_default() += 1;
        }
        *dump.states.entry(state).or_default() += 1;
    }
    dump.lock_waits = waits
        .into_iter()
        .map(|((reason, waiting_at), goroutines)| LockWait {
            reason,
            waiting_at,
            goroutines,
        })
        .collect();
    dump.lock_waits.sort_by(|a, b| {
        b.goroutines
            .cmp(&a.goroutines)
            .then(a.waiting_at.cmp(&b.waiting_at))
    });
    dump
}

/// Takes goroutine dumps from a Go target's pprof handlers.
#[derive(Debug)]
pub struct GoroutineReader {
    addr: SocketAddr,
}

const PATH: &str = "/debug/pprof/goroutine?debug=2";

impl GoroutineReader {
    /// The first of `addrs` that serves pprof's goroutine dump; why none did, otherwise.
    pub fn probe(addrs: &[SocketAddr]) -> Result<Self, RuntimeError> {
        first_serving(addrs, PATH, |addr, body| {
            if body.starts_with(b"goroutine ") {
                Ok(Self { addr })
            } else {
                Err(format!("{addr}{PATH} is not a goroutine dump").into())
            }
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn dump(&self) -> Result<GoroutineDump, RuntimeError> {
        let unix_ms = kiln_record::clock::unix_ms_now();
        let asked = std::time::Instant::now();
        let body = get(self.addr, PATH)?;
        let took_ms = asked.elapsed().as_secs_f64() * 1e3;
        Ok(parse(&String::from_utf8_lossy(&body), unix_ms, took_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "goroutine 1 [IO wait]:
internal/poll.runtime_pollWait(0x7f, 0x72)
\t/usr/lib/go/src/runtime/netpoll.go:351 +0x85
net/http.(*Server).Serve(0xc0001)
\t/usr/lib/go/src/net/http/server.go:3454 +0x485

goroutine 35 [sync.Mutex.Lock, 2 minutes]:
internal/sync.runtime_SemacquireMutex(0xc000, 0x0, 0x1)
\t/usr/lib/go/src/runtime/sema.go:95 +0x25
sync.(*Mutex).Lock(...)
\t/usr/lib/go/src/sync/mutex.go:46
main.audited(0xc0002)
\t/app/main.go:88 +0x4a
created by net/http.(*Server).Serve in goroutine 1
\t/usr/lib/go/src/net/http/server.go:3454 +0x485

goroutine 36 [sync.Mutex.Lock]:
internal/sync.runtime_SemacquireMutex(0xc000, 0x0, 0x1)
\t/usr/lib/go/src/runtime/sema.go:95 +0x25
main.audited(0xc0002)
\t/app/main.go:88 +0x4a

goroutine 37 [sleep]:
time.Sleep(0x1c9c380)
\t/usr/lib/go/src/runtime/time.go:338 +0x165
main.audited(0xc0002)
\t/app/main.go:90 +0x4a

goroutine 40 [running]:
main.work()
";

    #[test]
    fn a_dump_gives_states_and_where_goroutines_wait_for_locks() {
        let d = parse(DUMP, 7, 1.5);
        assert_eq!(d.goroutines, 5);
        assert_eq!(d.states["sync.Mutex.Lock"], 2);
        assert_eq!(d.states["IO wait"], 1);
        assert_eq!(d.states["sleep"], 1);
        assert_eq!(
            d.lock_waits,
            [LockWait {
                reason: "sync.Mutex.Lock".into(),
                waiting_at: "main.audited".into(),
                goroutines: 2
            }]
        );
    }

    proptest::proptest! {
        #[test]
        fn no_text_panics_the_parser(text in "(goroutine [0-9]+ \\[[a-z .,]{0,20}\\]:\n([a-z.()]{0,20}\n\t[a-z/:0-9 +]{0,20}\n){0,3}\n){0,4}") {
            let _ = parse(&text, 0, 0.0);
        }
    }
}
