//! Problems planted in a target for the findings' end-to-end tests, each with its fix: the
//! same work done the way that does not cost what the finding names.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;

/// Per-request work with a known cost in the kernel or in a peer.
#[derive(Clone, Debug, Default)]
pub struct Planted {
    /// Bytes of memory mapped, touched page by page and unmapped on every request (as a
    /// large buffer the allocator returns to the kernel on free): system time in page faults.
    pub fresh_memory: usize,
    /// The fix: the same bytes written into one buffer kept for the thread's life.
    pub reuse_memory: bool,
    /// Clock reads per request through the system call (`syscall(SYS_clock_gettime)`).
    pub clock_reads: u32,
    /// The fix: the same reads through libc, which stays in the vDSO.
    pub clock_via_vdso: bool,
    /// A peer each request writes this many bytes to without waiting for it (a log server).
    pub log_peer: Option<(SocketAddr, usize)>,
    /// Requests wait out a stall at the start of some wall-clock seconds (a cache expiring).
    pub wall_stall: Option<WallStall>,
    /// Every request takes one lock shared by all and holds it this long while it sleeps
    /// (a slow call made inside the critical section): requests queue for the lock.
    pub lock_hold: std::time::Duration,
    /// The fix: the same sleep outside the lock, which is then held only to update the count.
    pub lock_outside: bool,
    /// The lock's hold grows by this much for every other request waiting for it when it is
    /// taken (a contended lock handed around, a cache line bouncing between cores): each
    /// request pays for the others in flight, so throughput falls past a peak.
    pub lock_crosstalk: std::time::Duration,
    /// A JSON document of about this many bytes parsed on every request (configuration read
    /// again each time).
    pub json_bytes: usize,
    /// The fix: the document parsed once and kept.
    pub json_parsed_once: bool,
    /// The listening socket's accept backlog (the kernel's default: net.core.somaxconn).
    pub listen_backlog: Option<i32>,
    /// The acceptor waits this long after each accepted connection (an acceptor thread that
    /// also does work): connections that arrive together overflow a small backlog.
    pub accept_delay: std::time::Duration,
    /// A pool of this many workers serves the requests: a connection with a request waits
    /// (unread, in its socket) until a worker is free to read it, as Tomcat's NIO connector
    /// does with its executor.
    pub workers: Option<usize>,
    /// CPU time (the thread's own clock, not the wall's) each request burns: on a core it
    /// shares with other requests it takes longer, as real computation does, so the target
    /// serves at most cores / this per second.
    pub cpu_time: std::time::Duration,
    /// A target that warms up (a JIT, caches filling): from its first request, each request
    /// waits `extra * (1 - t / over)` more, fading to nothing after `over`.
    pub warm_up: Option<WarmUp>,
}

/// How a warming target's extra latency fades.
#[derive(Clone, Copy, Debug)]
pub struct WarmUp {
    pub extra: std::time::Duration,
    pub over: std::time::Duration,
}

/// A stall of `length` at the start of a wall-clock second: every `period_s` seconds at
/// phase 0 (second 0, `period_s`, ... of the Unix clock), or, with `random`, at uneven gaps
/// (the control: no period to find).
#[derive(Clone, Copy, Debug)]
pub struct WallStall {
    pub period_s: u64,
    pub length: std::time::Duration,
    pub random: bool,
}

/// The control's stalls: 7 in every 40 s, at gaps of 2, 9, 3, 10, 4, 7 and 5 s. Not drawn at
/// random: random seconds fold on some period about once in a hundred runs, which is what
/// the rule's p-value bound allows but a test cannot; no window of these folds
/// (kiln-findings' `stalls_at_uneven_gaps_are_no_period_wherever_a_run_begins`).
const UNEVEN_STALLS: [u64; 7] = [0, 2, 11, 14, 24, 28, 35];
const UNEVEN_CYCLE_S: u64 = 40;

impl WallStall {
    /// Whether this wall-clock second stalls.
    pub fn stalls(&self, unix_second: u64) -> bool {
        if self.random {
            UNEVEN_STALLS.contains(&(unix_second % UNEVEN_CYCLE_S))
        } else {
            unix_second.is_multiple_of(self.period_s.max(1))
        }
    }

    /// Sleeps out the stall when now is inside one.
    fn wait(&self) {
        let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
            return;
        };
        let into_second = std::time::Duration::from_nanos(now.subsec_nanos().into());
        if self.stalls(now.as_secs()) && into_second < self.length {
            std::thread::sleep(self.length - into_second);
        }
    }
}

/// The planted work's state in a running target.
pub struct PlantedState {
    planted: Planted,
    log: Option<Mutex<TcpStream>>,
    /// The lock every request takes (`lock_hold`), and what it guards.
    shared: Mutex<u64>,
    /// Requests waiting for the lock or holding it.
    at_lock: std::sync::atomic::AtomicU64,
    /// When the first request came (the warm-up's start).
    first_request: std::sync::OnceLock<std::time::Instant>,
    /// The JSON document (`json_bytes`), and the fix's parsed copy.
    json_doc: String,
    json_parsed: std::sync::OnceLock<serde_json::Value>,
    /// Free workers of the pool (`workers`), and the signal that one was freed.
    free_workers: Mutex<usize>,
    worker_freed: std::sync::Condvar,
}

/// A worker of the pool, given back when dropped.
pub struct Worker<'a>(&'a PlantedState);

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        *self
            .0
            .free_workers
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.worker_freed.notify_one();
    }
}

impl PlantedState {
    pub fn start(planted: Planted) -> std::io::Result<Self> {
        let log = match planted.log_peer {
            Some((addr, _)) => {
                let stream = TcpStream::connect(addr)?;
                // a full socket buffer drops the line: the request never waits on the peer
                stream.set_nonblocking(true)?;
                Some(Mutex::new(stream))
            }
            None => None,
        };
        let workers = planted.workers;
        Ok(Self {
            json_doc: json_document(planted.json_bytes),
            json_parsed: std::sync::OnceLock::new(),
            free_workers: Mutex::new(workers.unwrap_or(0)),
            worker_freed: std::sync::Condvar::new(),
            planted,
            log,
            shared: Mutex::new(0),
            at_lock: Default::default(),
            first_request: std::sync::OnceLock::new(),
        })
    }

    /// Whether requests are served by a pool of workers.
    pub fn has_pool(&self) -> bool {
        self.planted.workers.is_some()
    }

    /// Waits for a free worker of the pool (none without one).
    pub fn worker(&self) -> Option<Worker<'_>> {
        self.planted.workers?;
        let mut free = self.free_workers.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self
                .worker_freed
                .wait(free)
                .unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Some(Worker(self))
    }

    /// Does the request's planted work.
    pub fn on_request(&self) {
        let p = &self.planted;
        if !p.cpu_time.is_zero() {
            burn_thread_cpu(p.cpu_time);
        }
        if p.fresh_memory > 0 {
            if p.reuse_memory {
                touch_kept_buffer(p.fresh_memory);
            } else {
                touch_fresh_mapping(p.fresh_memory);
            }
        }
        if p.clock_reads > 0 {
            read_clock(p.clock_reads, p.clock_via_vdso);
        }
        if let Some(stall) = p.wall_stall {
            stall.wait();
        }
        if let Some(warm) = p.warm_up {
            let since = self
                .first_request
                .get_or_init(std::time::Instant::now)
                .elapsed();
            let left = 1.0 - since.as_secs_f64() / warm.over.as_secs_f64().max(1e-3);
            if left > 0.0 {
                std::thread::sleep(warm.extra.mul_f64(left));
            }
        }
        if p.json_bytes > 0 {
            let price = if p.json_parsed_once {
                let doc = self
                    .json_parsed
                    .get_or_init(|| parse_catalog(&self.json_doc));
                doc[0]["price"].as_u64()
            } else {
                parse_catalog(&self.json_doc)[0]["price"].as_u64()
            };
            std::hint::black_box(price);
        }
        if !p.lock_hold.is_zero() {
            use std::sync::atomic::Ordering::SeqCst;
            self.at_lock.fetch_add(1, SeqCst);
            let crosstalk = || {
                let others = self.at_lock.load(SeqCst).saturating_sub(1);
                p.lock_crosstalk * others as u32
            };
            update_shared_count(&self.shared, p.lock_hold, p.lock_outside, crosstalk);
            self.at_lock.fetch_sub(1, SeqCst);
        }
        if let (Some(log), Some((_, bytes))) = (&self.log, p.log_peer) {
            let line = vec![b'x'; bytes];
            if let Ok(mut stream) = log.lock() {
                let _ = stream.write(&line);
            }
        }
    }
}

/// A catalogue of items as JSON, about `bytes` long.
fn json_document(bytes: usize) -> String {
    let mut doc = String::from("[");
    let mut i = 0;
    while doc.len() < bytes {
        if i > 0 {
            doc.push(',');
        }
        doc.push_str(&format!(
            r#"{{"sku":"item-{i}","price":{},"tags":["fresh","local"],"stock":{{"here":{},"there":{}}}}}"#,
            100 + i % 17,
            i % 7,
            i % 5
        ));
        i += 1;
    }
    doc + "]"
}

#[inline(never)]
fn parse_catalog(doc: &str) -> serde_json::Value {
    serde_json::from_str(doc).unwrap_or_default()
}

/// Sleeps `hold` and counts the request in state shared by all: inside the lock (every
/// other request waits), or, the fix, before taking it.
#[inline(never)]
fn update_shared_count(
    shared: &Mutex<u64>,
    hold: std::time::Duration,
    outside: bool,
    crosstalk: impl Fn() -> std::time::Duration,
) {
    if outside {
        std::thread::sleep(hold);
    }
    let mut count = shared.lock().unwrap_or_else(|e| e.into_inner());
    if !outside {
        // the others waiting when it was taken
        std::thread::sleep(hold + crosstalk());
    }
    *count += 1;
}

const PAGE: usize = 4096;

/// mmap, write one byte per page (each a fault and a zeroed page), munmap.
#[inline(never)]
fn touch_fresh_mapping(bytes: usize) {
    // SAFETY: an anonymous private mapping of `bytes`, written only inside its bounds and
    // unmapped before return.
    unsafe {
        let ptr = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if ptr == libc::MAP_FAILED {
            return;
        }
        let base = ptr as *mut u8;
        for offset in (0..bytes).step_by(PAGE) {
            std::ptr::write_volatile(base.add(offset), 1);
        }
        libc::munmap(ptr, bytes);
    }
}

thread_local! {
    static KEPT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The fix: the same bytes written into a buffer the thread keeps (faulted in once).
#[inline(never)]
fn touch_kept_buffer(bytes: usize) {
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.len() < bytes {
            kept.resize(bytes, 0);
        }
        kept[..bytes].fill(1);
        std::hint::black_box(&kept[..bytes]);
    });
}

/// Reads the monotonic clock `n` times, through the system call or through libc (vDSO).
#[inline(never)]
fn read_clock(n: u32, via_vdso: bool) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    for _ in 0..n {
        // SAFETY: `ts` is a valid timespec for the kernel or libc to fill.
        unsafe {
            if via_vdso {
                libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
            } else {
                libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts);
            }
        }
        std::hint::black_box(&ts);
    }
}

/// The calling thread's CPU time so far.
fn thread_cpu_now() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Computes until the calling thread has used `d` more CPU time.
pub fn burn_thread_cpu(d: std::time::Duration) {
    let until = thread_cpu_now() + d;
    let mut x = 0u64;
    while thread_cpu_now() < until {
        for i in 0..500 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}
