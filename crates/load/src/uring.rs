//! The io_uring path (`--io uring`): a load thread's plain TCP connections send and receive
//! through one ring instead of a `send` and a `recv` system call each.
//!
//! - Each connection keeps one multishot receive armed for its whole life; the kernel picks a
//!   buffer from a ring of provided buffers for each arrival, and the bytes are copied out to
//!   the connection at once, so the buffers are never short for long.
//! - A send is queued, not made, and counts as written (as bytes in a socket's buffer do):
//!   every send and receive queued during a turn of the thread's tasks goes to the kernel in
//!   one `io_uring_enter`, from the ring's driver task, which runs after the tasks that woke
//!   it (tokio's local queue is first in, first out). A failed send fails the connection's
//!   next read or write.
//! - Completions wait for the thread to enter the ring (deferred task work), which signals an
//!   eventfd on tokio's reactor when they do, so timers, the pacer's queue and the ring share
//!   one wait. No socket is polled for readiness.
//!
//! The engine above it is the same as on the epoll path: [`UringStream`] is an `AsyncRead` and
//! `AsyncWrite`, so the latency's clock, the recording and the HTTP/1.1 reader do not change.
//! TLS stays on epoll (rustls over a ring would copy every record twice more and save nothing
//! measured). A ring is the thread's: connections made outside a load thread with a ring
//! installed use epoll.
//!
//! Hand-written on the `io-uring` crate rather than a runtime: tokio-uring, monoio and compio
//! each bring a runtime of their own, and kiln's engine runs on tokio's timers and tasks
//! (docs/benchmarks.md, issue 35).

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::IoUringUnavailable;

/// Provided buffers: bytes are copied out of one as soon as its completion is read, so a
/// few suffice for a turn's arrivals; a receive that finds none ends and is armed again.
const BUFFERS: u16 = 64;
const BUFFER_SIZE: usize = 1024;
const BUFFER_GROUP: u16 = 1;
/// A connection's received bytes above this are not kept once read (a large body's burst).
const RECEIVED_KEPT: usize = 16 * 1024;

/// What a completion is for: the low two bits of its user data (the connection's slot above).
const SEND: u64 = 0;
const RECV: u64 = 1;
const CANCEL: u64 = 2;

thread_local! {
    static CURRENT: RefCell<Option<Rc<Ring>>> = const { RefCell::new(None) };
}

/// Whether io_uring can be used here, and if not why: a ring made and dropped once at start.
/// A kernel before 6.1 (no deferred task work), `kernel.io_uring_disabled` or a seccomp
/// profile that refuses `io_uring_setup` (Docker's default does) all say no.
pub fn probe() -> Result<(), IoUringUnavailable> {
    Buffers::new()
        .and_then(|buffers| {
            let ring = new_ring(8)?;
            buffers.register(&ring)
        })
        .map_err(|source| IoUringUnavailable { source })
}

/// A ring whose completions are posted only when this thread enters it (deferred task work):
/// the kernel neither interrupts the thread for each arrival nor, with the interrupt, makes
/// the receive spin on a socket lock the sender's CPU still holds (perf, by default: half of
/// kiln's CPU went there, and the path made half the requests of epoll per CPU-second).
/// Needs Linux 6.1; one thread submits.
fn new_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .build(entries)
}

/// The ring of provided buffers: the entries the kernel reads, and the memory they point to.
/// Both are raw allocations: the kernel writes to the pool behind Rust's back, so no Rust
/// reference to it is held beyond reading a buffer it has finished with.
struct Buffers {
    /// `BUFFERS` entries, page aligned as the kernel asks.
    entries: *mut types::BufRingEntry,
    pool: *mut u8,
    tail: Cell<u16>,
}

impl Buffers {
    fn entries_layout() -> std::alloc::Layout {
        // a power of two entries of 16 bytes, aligned to the page
        std::alloc::Layout::from_size_align(usize::from(BUFFERS) * 16, 4096)
            .expect("a valid layout")
    }

    fn pool_layout() -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(usize::from(BUFFERS) * BUFFER_SIZE, 64)
            .expect("a valid layout")
    }

    fn new() -> io::Result<Self> {
        // SAFETY: non-zero sizes; both are freed in Drop with the same layouts.
        let (entries, pool) = unsafe {
            (
                std::alloc::alloc_zeroed(Self::entries_layout()),
                std::alloc::alloc_zeroed(Self::pool_layout()),
            )
        };
        let buffers = Self {
            entries: entries.cast(),
            pool,
            tail: Cell::new(0),
        };
        if entries.is_null() || pool.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(buffers)
    }

    fn register(&self, ring: &IoUring) -> io::Result<()> {
        // SAFETY: the entries live until the ring is dropped (Ring drops the ring first).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                self.entries as u64,
                BUFFERS,
                BUFFER_GROUP,
                0,
            )
        }?;
        for id in 0..BUFFERS {
            self.give_back(id);
        }
        Ok(())
    }

    fn buffer(&self, id: u16) -> *mut u8 {
        // SAFETY: id < BUFFERS (the kernel hands back the ids it was given), so the offset
        // lies in the pool.
        unsafe { self.pool.add(usize::from(id % BUFFERS) * BUFFER_SIZE) }
    }

    /// Buffer `id`'s first `len` bytes, which the kernel wrote and, until the buffer is given
    /// back, leaves alone.
    fn bytes(&self, id: u16, len: usize) -> &[u8] {
        // SAFETY: inside the pool (see `buffer`), initialised (zeroed at allocation), and not
        // written by the kernel while it is not the kernel's.
        unsafe { std::slice::from_raw_parts(self.buffer(id), len.min(BUFFER_SIZE)) }
    }

    /// Hands buffer `id` back to the kernel.
    fn give_back(&self, id: u16) {
        let tail = self.tail.get();
        // SAFETY: the entry at the tail's slot is ours until the new tail is published, and
        // the tail is published with release ordering after it is written.
        unsafe {
            let entry = &mut *self.entries.add(usize::from(tail & (BUFFERS - 1)));
            entry.set_addr(self.buffer(id) as u64);
            entry.set_len(BUFFER_SIZE as u32);
            entry.set_bid(id);
            let published = types::BufRingEntry::tail(self.entries).cast_mut()
                as *const std::sync::atomic::AtomicU16;
            (*published).store(tail.wrapping_add(1), std::sync::atomic::Ordering::Release);
        }
        self.tail.set(tail.wrapping_add(1));
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: allocated in new with these layouts (null ones were never allocated).
        unsafe {
            if !self.entries.is_null() {
                std::alloc::dealloc(self.entries.cast(), Self::entries_layout());
            }
            if !self.pool.is_null() {
                std::alloc::dealloc(self.pool, Self::pool_layout());
            }
        }
    }
}

/// One connection's state, kept by the ring until its last operation has completed.
#[derive(Default)]
struct Slot {
    fd: Option<OwnedFd>,
    received: Vec<u8>,
    /// Read up to here.
    read: usize,
    eof: bool,
    error: Option<i32>,
    recv_armed: bool,
    reader: Option<Waker>,
    /// The bytes of the send in flight (the kernel reads them until it completes).
    sending: Vec<u8>,
    send_in_flight: bool,
    writer: Option<Waker>,
    cancel_in_flight: bool,
    /// Its stream was dropped: the fd closes and the slot frees when nothing is in flight.
    dropped: bool,
}

impl Slot {
    fn idle(&self) -> bool {
        !self.recv_armed && !self.send_in_flight && !self.cancel_in_flight
    }
}

struct State {
    ring: IoUring,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Entries queued since the last `io_uring_enter`.
    queued: usize,
    driver: Option<Waker>,
    driver_woken: bool,
}

/// A load thread's ring (see the module's doc).
pub struct Ring {
    /// The eventfd the ring signals, on tokio's reactor (dropped first: the ring holds a
    /// reference of its own to it).
    readiness: AsyncFd<OwnedFd>,
    /// Dropped before `buffers`: the ring is closed before the buffers it writes are freed.
    state: RefCell<State>,
    buffers: Buffers,
}

impl Ring {
    /// Makes this thread's ring for about `connections` connections and drives it on the
    /// current `LocalSet`; connections made on this thread from now on use it. Call inside
    /// the thread's runtime.
    pub fn install(connections: usize) -> io::Result<tokio::task::JoinHandle<()>> {
        let entries = (2 * connections).next_power_of_two().clamp(64, 4096) as u32;
        let ring = new_ring(entries)?;
        let buffers = Buffers::new()?;
        buffers.register(&ring)?;
        // The ring signals this eventfd when completions wait to be posted, and tokio's
        // reactor watches it, so one wait serves timers, the pacer's queue and the ring.
        // SAFETY: eventfd makes a new descriptor, owned from here by the OwnedFd.
        let eventfd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if eventfd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just made, and owned by nothing else.
        let eventfd = unsafe { OwnedFd::from_raw_fd(eventfd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        // SAFETY: the registration owns the descriptor and nothing else closes it.
        let readiness =
            unsafe { AsyncFd::register_with_interest(eventfd, tokio::io::Interest::READABLE) }?;
        let ring = Rc::new(Ring {
            state: RefCell::new(State {
                ring,
                slots: Vec::new(),
                free: Vec::new(),
                queued: 0,
                driver: None,
                driver_woken: false,
            }),
            buffers,
            readiness,
        });
        CURRENT.with_borrow_mut(|current| *current = Some(ring.clone()));
        Ok(tokio::task::spawn_local(ring.drive()))
    }

    /// This thread's ring, if one is installed.
    pub fn current() -> Option<Rc<Ring>> {
        CURRENT.with_borrow(Clone::clone)
    }

    /// Takes this thread's ring away: its connections' in-flight receives are cancelled and
    /// waited for (a moment at most), so no completion writes to freed memory.
    pub fn uninstall() {
        let Some(ring) = CURRENT.with_borrow_mut(Option::take) else {
            return;
        };
        {
            let mut state = ring.state.borrow_mut();
            for i in 0..state.slots.len() {
                state.cancel_receive(i);
            }
        }
        let until = Instant::now() + Duration::from_millis(200);
        loop {
            let busy = ring.state.borrow().slots.iter().any(|s| !s.idle());
            if !busy || Instant::now() >= until {
                break;
            }
            {
                let mut state = ring.state.borrow_mut();
                state.queued = 0;
                let ten_ms = types::Timespec::new().nsec(10_000_000);
                let wait = types::SubmitArgs::new().timespec(&ten_ms);
                let _ = state.ring.submitter().submit_with_args(1, &wait);
            }
            ring.reap();
        }
        if ring.state.borrow().slots.iter().any(|s| !s.idle()) {
            // the kernel may still write to the buffers: leave them (and the ring) be
            std::mem::forget(ring);
        }
    }

    /// Takes a connected socket onto the ring and arms its receive.
    pub fn stream(self: &Rc<Self>, socket: std::net::TcpStream) -> UringStream {
        // a blocking socket's receive would be handed to the kernel's worker threads; the
        // sockets here come from tokio and are non-blocking already
        let _ = socket.set_nonblocking(true);
        let fd = OwnedFd::from(socket);
        let mut state = self.state.borrow_mut();
        let slot = state.free.pop().unwrap_or_else(|| {
            state.slots.push(Slot::default());
            state.slots.len() - 1
        });
        state.slots[slot] = Slot {
            fd: Some(fd),
            ..Slot::default()
        };
        state.arm_receive(slot);
        drop(state);
        self.wake_driver();
        UringStream {
            ring: self.clone(),
            slot,
        }
    }

    /// The driver: submits what the tasks queued and reads completions, forever (the load
    /// thread aborts it at the phase's end).
    async fn drive(self: Rc<Self>) {
        std::future::poll_fn(|cx| {
            self.turn(cx);
            Poll::<()>::Pending
        })
        .await
    }

    fn turn(&self, cx: &mut Context<'_>) {
        // Bounded: a turn that keeps finding work comes back after the other tasks ran.
        let mut again = true;
        for _ in 0..64 {
            {
                let mut state = self.state.borrow_mut();
                state.driver_woken = false;
                // entries to submit, or completions waiting to be posted (deferred to this
                // thread's next enter, or kept by the kernel while the completion queue was
                // full: a burst at 10,000 connections)
                if state.queued > 0 || state.completions_held() {
                    match state.ring.submit() {
                        Ok(_) => state.queued = 0,
                        // EBUSY, EAGAIN, EINTR: the entries stay queued and go with the next
                        // turn, after the completions below are read
                        Err(e) if is_transient(&e) => {}
                        Err(e) => state.fail_all(e.raw_os_error().unwrap_or(libc::EIO)),
                    }
                }
            }
            self.reap();
            if self.state.borrow_mut().completions_held() {
                continue;
            }
            match self.readiness.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => guard.clear_ready(),
                Poll::Ready(Err(_)) | Poll::Pending => {
                    again = false;
                    break;
                }
            }
        }
        let mut state = self.state.borrow_mut();
        if again || state.queued > 0 {
            // work left (or entries a busy ring refused): come back at once
            cx.waker().wake_by_ref();
        }
        match &state.driver {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => state.driver = Some(cx.waker().clone()),
        }
    }

    /// Reads every completion waiting: bytes to their connections, results to their senders.
    fn reap(&self) {
        let mut guard = self.state.borrow_mut();
        let state = &mut *guard;
        let mut wakers: Vec<Waker> = Vec::new();
        loop {
            let Some(cqe) = state.ring.completion().next() else {
                break;
            };
            let (data, result, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            let (index, kind) = ((data >> 2) as usize, data & 3);
            let Some(slot) = state.slots.get_mut(index) else {
                continue;
            };
            match kind {
                RECV => {
                    if let Some(id) = cqueue::buffer_select(flags) {
                        if result > 0 {
                            let bytes = self.buffers.bytes(id, result as usize);
                            if !slot.dropped {
                                slot.received.extend_from_slice(bytes);
                            }
                        }
                        self.buffers.give_back(id);
                    }
                    let more = cqueue::more(flags);
                    if !more {
                        slot.recv_armed = false;
                    }
                    match result {
                        0 => slot.eof = true,
                        r if r == -libc::ENOBUFS || r == -libc::ECANCELED => {}
                        r if r < 0 => slot.error = Some(-r),
                        _ => {}
                    }
                    // a receive that ended for want of buffers (or for the kernel's own
                    // reasons) is armed again, so a close while idle is still seen
                    let rearm = !more
                        && !slot.dropped
                        && !slot.eof
                        && slot.error.is_none()
                        && !slot.cancel_in_flight
                        && result != -libc::ECANCELED;
                    wakers.extend(slot.reader.take());
                    if rearm {
                        state.arm_receive(index);
                    }
                }
                SEND => {
                    slot.send_in_flight = false;
                    let short = result >= 0 && (result as usize) < slot.sending.len();
                    if result < 0 || short {
                        let errno = if short { libc::EIO } else { -result };
                        slot.error.get_or_insert(errno);
                        wakers.extend(slot.reader.take());
                    }
                    wakers.extend(slot.writer.take());
                }
                _ => slot.cancel_in_flight = false,
            }
            state.free_if_done(index);
        }
        // entries queued while reading (receives armed again) go with the driver's next turn
        let queued = state.queued > 0;
        drop(guard);
        for w in wakers {
            w.wake();
        }
        if queued {
            self.wake_driver();
        }
    }

    fn wake_driver(&self) {
        let mut state = self.state.borrow_mut();
        if !state.driver_woken {
            state.driver_woken = true;
            if let Some(w) = &state.driver {
                w.wake_by_ref();
            }
        }
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)
    )
}

fn user_data(slot: usize, kind: u64) -> u64 {
    (slot as u64) << 2 | kind
}

impl State {
    /// Queues `entry`, submitting what is queued first when the submission queue is full;
    /// false if the kernel would take none for a while (its completions not read).
    #[must_use]
    fn push(&mut self, entry: &io_uring::squeue::Entry) -> bool {
        for _ in 0..100 {
            // SAFETY: every buffer an entry names outlives its completion: received bytes
            // land in the provided buffers (freed after the ring), a send's bytes are its
            // slot's, and a slot is neither freed nor its send buffer touched while its send
            // is in flight.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                self.queued += 1;
                return true;
            }
            match self.ring.submit() {
                Ok(_) => self.queued = 0,
                Err(_) => std::thread::yield_now(),
            }
        }
        false
    }

    fn arm_receive(&mut self, index: usize) {
        let Some(fd) = self.slots[index].fd.as_ref().map(AsRawFd::as_raw_fd) else {
            return;
        };
        let entry = opcode::RecvMulti::new(types::Fd(fd), BUFFER_GROUP)
            .build()
            .user_data(user_data(index, RECV));
        let armed = self.push(&entry);
        let slot = &mut self.slots[index];
        slot.recv_armed = armed;
        if !armed {
            slot.error.get_or_insert(libc::EBUSY);
        }
    }

    /// Cancels slot `index`'s receive, which holds its socket open (the socket closes, or
    /// can be handed over, with the receive's last completion).
    fn cancel_receive(&mut self, index: usize) {
        if !self.slots[index].recv_armed || self.slots[index].cancel_in_flight {
            return;
        }
        let cancel = opcode::AsyncCancel::new(user_data(index, RECV))
            .build()
            .user_data(user_data(index, CANCEL));
        // not queued: the ring's teardown cancels what is left
        self.slots[index].cancel_in_flight = self.push(&cancel);
    }

    /// Completions the kernel holds until this thread enters the ring: deferred task work,
    /// or an overflow of the completion queue.
    fn completions_held(&mut self) -> bool {
        let sq = self.ring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// A dropped stream's slot with nothing in flight: its socket closes, the slot is free.
    fn free_if_done(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if slot.dropped && slot.idle() {
            *slot = Slot::default();
            self.free.push(index);
        }
    }

    /// The ring refused a submission for good: every connection on it fails with `errno`
    /// (its requests are counted as the errors they are).
    fn fail_all(&mut self, errno: i32) {
        self.queued = 0;
        let mut wakers = Vec::new();
        for slot in &mut self.slots {
            // what is in flight stays so until it completes: its buffers stay too
            slot.error.get_or_insert(errno);
            wakers.extend(slot.reader.take());
            wakers.extend(slot.writer.take());
        }
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// A plain TCP connection on the thread's ring (see the module's doc).
pub struct UringStream {
    ring: Rc<Ring>,
    slot: usize,
}

impl UringStream {
    /// The socket, for a connection left to the next phase: its receive is cancelled (the
    /// cancel completes at once for a receive waiting on a socket). None when the
    /// connection is not clean: bytes or a close arrived, or the receive would not end.
    pub fn into_std(self) -> Option<std::net::TcpStream> {
        let index = self.slot;
        {
            let mut state = self.ring.state.borrow_mut();
            let slot = &mut state.slots[index];
            if slot.read < slot.received.len() || slot.eof || slot.error.is_some() {
                return None;
            }
            if slot.recv_armed {
                state.cancel_receive(index);
                if state.ring.submit_and_wait(1).is_ok() {
                    state.queued = 0;
                }
            }
        }
        self.ring.reap();
        let mut state = self.ring.state.borrow_mut();
        let slot = &mut state.slots[index];
        let clean = !slot.recv_armed && slot.received.len() == slot.read && !slot.eof;
        if !clean || slot.send_in_flight {
            return None;
        }
        let fd = slot.fd.take()?;
        // the stream's drop frees the slot, its fd gone
        Some(std::net::TcpStream::from(fd))
    }

    fn with_slot<T>(&self, f: impl FnOnce(&mut Slot) -> T) -> T {
        f(&mut self.ring.state.borrow_mut().slots[self.slot])
    }
}

impl Drop for UringStream {
    fn drop(&mut self) {
        let mut state = self.ring.state.borrow_mut();
        let index = self.slot;
        let slot = &mut state.slots[index];
        slot.dropped = true;
        slot.reader = None;
        slot.writer = None;
        state.cancel_receive(index);
        state.free_if_done(index);
        drop(state);
        self.ring.wake_driver();
    }
}

impl AsyncRead for UringStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut rearm = false;
        let ready = this.with_slot(|slot| {
            let waiting = slot.received.len() - slot.read;
            if waiting > 0 {
                let n = waiting.min(buf.remaining());
                buf.put_slice(&slot.received[slot.read..slot.read + n]);
                slot.read += n;
                if slot.read == slot.received.len() {
                    slot.read = 0;
                    slot.received.clear();
                    if slot.received.capacity() > RECEIVED_KEPT {
                        slot.received = Vec::new();
                    }
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(errno) = slot.error {
                return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
            }
            if slot.eof {
                return Poll::Ready(Ok(()));
            }
            rearm = !slot.recv_armed && !slot.cancel_in_flight;
            match &slot.reader {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => slot.reader = Some(cx.waker().clone()),
            }
            Poll::Pending
        });
        if rearm {
            this.ring.state.borrow_mut().arm_receive(this.slot);
            this.ring.wake_driver();
        }
        ready
    }
}

impl AsyncWrite for UringStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let index = this.slot;
        let mut state = this.ring.state.borrow_mut();
        let slot = &mut state.slots[index];
        if let Some(errno) = slot.error {
            return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
        }
        if slot.send_in_flight {
            // the last bytes are still the kernel's: these wait for them
            match &slot.writer {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => slot.writer = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        let Some(fd) = slot.fd.as_ref().map(AsRawFd::as_raw_fd) else {
            return Poll::Ready(Err(io::Error::from(io::ErrorKind::NotConnected)));
        };
        // Written as soon as queued, as a socket write is once its bytes are in the socket's
        // buffer: the send goes with the turn's other entries, all of it (MSG_WAITALL), and a
        // failure is the connection's, read by its next read or write.
        slot.sending.clear();
        slot.sending.extend_from_slice(buf);
        slot.send_in_flight = true;
        let entry = opcode::Send::new(
            types::Fd(fd),
            slot.sending.as_ptr(),
            slot.sending.len() as u32,
        )
        .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
        .build()
        .user_data(user_data(index, SEND));
        if !state.push(&entry) {
            state.slots[index].send_in_flight = false;
            return Poll::Ready(Err(io::Error::from_raw_os_error(libc::EBUSY)));
        }
        drop(state);
        this.ring.wake_driver();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let fd = self.with_slot(|slot| slot.fd.as_ref().map(AsRawFd::as_raw_fd));
        if let Some(fd) = fd {
            // SAFETY: shutdown on an open socket of this slot's.
            unsafe { libc::shutdown(fd, libc::SHUT_WR) };
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Runs `body` on a current-thread runtime with this thread's ring installed, as a load
    /// thread does, then takes the ring away.
    fn on_a_ring(body: impl AsyncFnOnce(Rc<Ring>)) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let driver = Ring::install(4).expect("io_uring on the test machine");
            body(Ring::current().unwrap()).await;
            driver.abort();
        });
        drop(local);
        Ring::uninstall();
        assert!(Ring::current().is_none());
    }

    fn listener() -> (std::net::TcpListener, std::net::SocketAddr) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        (l, addr)
    }

    #[test]
    fn bytes_go_both_ways_and_a_dropped_stream_closes_its_socket() {
        let (l, addr) = listener();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut got = [0u8; 4];
            s.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"ping");
            // more than one provided buffer's worth, so the answer spans completions
            s.write_all(&vec![b'x'; 3 * BUFFER_SIZE + 5]).unwrap();
            // the client's drop reaches the server as an end of stream
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).map(|_| rest.len())
        });
        on_a_ring(async |ring| {
            let mut stream = ring.stream(std::net::TcpStream::connect(addr).unwrap());
            stream.write_all(b"ping").await.unwrap();
            let mut answer = vec![0u8; 3 * BUFFER_SIZE + 5];
            stream.read_exact(&mut answer).await.unwrap();
            assert!(answer.iter().all(|&b| b == b'x'));
            drop(stream);
            // the cancel goes with the driver's next turn, and the socket closes after it
            tokio::time::sleep(Duration::from_millis(50)).await;
            let state = ring.state.borrow();
            assert!(
                state.slots.iter().all(|s| s.fd.is_none()),
                "a socket left open"
            );
        });
        assert_eq!(server.join().unwrap().unwrap(), 0);
    }

    #[test]
    fn a_clean_socket_is_handed_over_and_one_with_bytes_waiting_is_not() {
        let (l, addr) = listener();
        let server = std::thread::spawn(move || {
            let (mut quiet, _) = l.accept().unwrap();
            let (mut chatty, _) = l.accept().unwrap();
            chatty.write_all(b"unasked").unwrap();
            quiet
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut got = [0u8; 5];
            quiet.read_exact(&mut got).unwrap();
            quiet.write_all(b"there").unwrap();
            got
        });
        let mut handed = None;
        on_a_ring(async |ring| {
            let quiet = ring.stream(std::net::TcpStream::connect(addr).unwrap());
            let mut chatty = ring.stream(std::net::TcpStream::connect(addr).unwrap());
            let mut first = [0u8; 1];
            chatty.read_exact(&mut first).await.unwrap();
            assert!(chatty.into_std().is_none(), "bytes were waiting");
            handed = quiet.into_std();
        });
        // after the ring is gone the socket is whole and nothing of it was read
        let mut socket = handed.expect("the quiet socket handed over");
        socket.set_nonblocking(false).unwrap();
        socket.write_all(b"hello").unwrap();
        let mut answer = [0u8; 5];
        socket.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"there");
        assert_eq!(&server.join().unwrap(), b"hello");
    }

    /// A keep-alive connection is checked before reuse with a poll that must not wait (see
    /// `H1Connection::ready`): a close that came while it was idle is seen then, from the
    /// receive armed all along.
    #[test]
    fn a_close_while_idle_is_seen_without_waiting() {
        let (l, addr) = listener();
        let server = std::thread::spawn(move || drop(l.accept().unwrap()));
        on_a_ring(async |ring| {
            let mut stream = ring.stream(std::net::TcpStream::connect(addr).unwrap());
            let mut cx = Context::from_waker(Waker::noop());
            let mut byte = [0u8; 1];
            let mut buf = ReadBuf::new(&mut byte);
            let open = Pin::new(&mut stream).poll_read(&mut cx, &mut buf);
            assert!(open.is_pending() || buf.filled().is_empty());
            server.join().unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut buf = ReadBuf::new(&mut byte);
            let closed = Pin::new(&mut stream).poll_read(&mut cx, &mut buf);
            assert!(
                matches!(closed, Poll::Ready(Ok(()))) && buf.filled().is_empty(),
                "{closed:?}"
            );
        });
    }

    #[test]
    fn a_refused_io_uring_is_said_and_not_used() {
        probe().expect("io_uring on the test machine");
        let refused = std::thread::spawn(|| {
            kiln_targets::refuse_io_uring().unwrap();
            probe()
        })
        .join()
        .unwrap();
        let why = refused.unwrap_err().to_string();
        assert_eq!(
            why,
            "io_uring is unavailable: Operation not permitted (os error 1), refused by a \
             seccomp profile or kernel.io_uring_disabled"
        );
    }
}
