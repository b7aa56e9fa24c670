//! The same closed HTTP/1.1 loop on two kinds of I/O, to measure what io_uring saves a load
//! generator over epoll on this kernel, with nothing else of kiln's in the way:
//!
//!   uring-probe epoll|uring|uring-defer|uring-multi HOST:PORT PATH CONNECTIONS SECONDS
//!
//! - `epoll`: level-triggered epoll, one `send` and one `recv` a request, as kiln's tokio
//!   loop does (strace: 1 sendto, 1 recvfrom a request, epoll_wait amortised);
//! - `uring`: a send and a receive submitted per request, all of a loop turn's in one
//!   `io_uring_enter` that also waits for the next completion;
//! - `uring-defer`: the same with IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (completions
//!   run when the thread enters the ring, not by interrupting it);
//! - `uring-multi`: as `uring-defer`, with one multishot receive per connection for the whole
//!   run, into a ring of provided buffers (no receive submitted per request).
//!
//! Prints requests, wall seconds, CPU seconds (user + system of the process) and requests per
//! CPU-second.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    filled: usize,
}

impl Conn {
    /// Whether `buf[..filled]` holds a whole response; if so it is taken out.
    fn take_response(&mut self) -> bool {
        let data = &self.buf[..self.filled];
        let Some(head_end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = &data[..head_end];
        let mut length = 0usize;
        for line in head.split(|&b| b == b'\n') {
            let line = std::str::from_utf8(line).unwrap_or("").trim();
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let total = head_end + 4 + length;
        if self.filled < total {
            return false;
        }
        self.buf.copy_within(total..self.filled, 0);
        self.filled -= total;
        true
    }
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn connect(addr: SocketAddr, n: usize) -> Vec<Conn> {
    (0..n)
        .map(|_| {
            let stream = TcpStream::connect(addr).expect("connect");
            stream.set_nodelay(true).unwrap();
            stream.set_nonblocking(true).unwrap();
            Conn {
                stream,
                buf: vec![0; 4096],
                filled: 0,
            }
        })
        .collect()
}

fn send_all(fd: RawFd, request: &[u8]) {
    // SAFETY: send from a live buffer on an open socket.
    let n = unsafe { libc::send(fd, request.as_ptr().cast(), request.len(), 0) };
    assert_eq!(n as usize, request.len(), "a short send");
}

fn run_epoll(conns: &mut [Conn], request: &[u8], until: Instant) -> u64 {
    // SAFETY: plain epoll calls on descriptors this function owns for its duration.
    let ep = unsafe { libc::epoll_create1(0) };
    for (i, c) in conns.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, c.stream.as_raw_fd(), &mut ev) };
        send_all(c.stream.as_raw_fd(), request);
    }
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; conns.len()];
    let mut done = 0u64;
    while Instant::now() < until {
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 100) };
        for ev in &events[..n.max(0) as usize] {
            let c = &mut conns[ev.u64 as usize];
            let fd = c.stream.as_raw_fd();
            let room = c.buf.len() - c.filled;
            let got = unsafe { libc::recv(fd, c.buf[c.filled..].as_mut_ptr().cast(), room, 0) };
            if got <= 0 {
                continue;
            }
            c.filled += got as usize;
            if c.take_response() {
                done += 1;
                send_all(fd, request);
            }
        }
    }
    unsafe { libc::close(ep) };
    done
}

/// Queues `entry`, submitting what is queued when the ring is full.
fn push(ring: &mut io_uring::IoUring, entry: io_uring::squeue::Entry) {
    // SAFETY: the buffers named in the entries live until their completions (the request is
    // borrowed for the whole run, each connection's buffer and the pool are not moved).
    while unsafe { ring.submission().push(&entry) }.is_err() {
        ring.submit().expect("submit");
    }
}

/// A send of the whole request on connection `i`.
fn send_entry(request: &[u8], i: usize, fd: RawFd) -> io_uring::squeue::Entry {
    use io_uring::{opcode, types};
    opcode::Send::new(types::Fd(fd), request.as_ptr(), request.len() as u32)
        .build()
        .user_data((i as u64) << 1)
}

fn run_uring(conns: &mut [Conn], request: &[u8], until: Instant, defer: bool) -> u64 {
    use io_uring::{opcode, types, IoUring};
    let entries = (conns.len() * 2).next_power_of_two() as u32;
    let mut builder = IoUring::builder();
    if defer {
        builder.setup_single_issuer().setup_defer_taskrun();
    } else {
        builder.setup_coop_taskrun();
    }
    let mut ring = builder.build(entries).expect("io_uring");
    // user_data: connection index << 1 | (0 send, 1 receive)
    let send = |i: usize, fd: RawFd| send_entry(request, i, fd);
    let recv = |i: usize, c: &mut Conn| {
        let room = &mut c.buf[c.filled..];
        opcode::Recv::new(
            types::Fd(c.stream.as_raw_fd()),
            room.as_mut_ptr(),
            room.len() as u32,
        )
        .build()
        .user_data((i as u64) << 1 | 1)
    };
    for i in 0..conns.len() {
        let fd = conns[i].stream.as_raw_fd();
        push(&mut ring, send(i, fd));
        let e = recv(i, &mut conns[i]);
        push(&mut ring, e);
    }
    let mut done = 0u64;
    let mut completed = Vec::with_capacity(entries as usize);
    while Instant::now() < until {
        ring.submit_and_wait(1).expect("submit_and_wait");
        completed.clear();
        completed.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(data, result) in &completed {
            let i = (data >> 1) as usize;
            if data & 1 == 0 {
                assert_eq!(result as usize, request.len(), "send: {result}");
                continue;
            }
            if result <= 0 {
                panic!("recv: {result}");
            }
            let c = &mut conns[i];
            c.filled += result as usize;
            if c.take_response() {
                done += 1;
                push(&mut ring, send(i, c.stream.as_raw_fd()));
            }
            let e = recv(i, c);
            push(&mut ring, e);
        }
    }
    done
}

/// Multishot receives into a ring of provided buffers: one receive armed per connection for
/// the whole run, the kernel picking a buffer for each arrival.
fn run_uring_multi(conns: &mut [Conn], request: &[u8], until: Instant) -> u64 {
    use io_uring::{cqueue, opcode, types, IoUring};
    const BUFS: u16 = 256;
    const BUF_SIZE: usize = 4096;
    const GROUP: u16 = 7;
    let entries = (conns.len() * 2).next_power_of_two() as u32;
    let mut ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .expect("io_uring");
    let mut pool = vec![0u8; BUFS as usize * BUF_SIZE];
    let pool_base = pool.as_mut_ptr();
    // the ring of buffer entries: page aligned, as the kernel asks
    let layout = std::alloc::Layout::from_size_align(BUFS as usize * 16, 4096).unwrap();
    // SAFETY: a zeroed allocation of the layout, freed never (the process exits).
    let base = unsafe { std::alloc::alloc_zeroed(layout) } as *mut types::BufRingEntry;
    let mut tail: u16 = 0;
    let give = |bid: u16, tail: &mut u16| {
        // SAFETY: the entry at tail's slot is the application's until tail is published.
        unsafe {
            let e = &mut *base.add((*tail & (BUFS - 1)) as usize);
            e.set_addr(pool_base.add(bid as usize * BUF_SIZE) as u64);
            e.set_len(BUF_SIZE as u32);
            e.set_bid(bid);
            *tail = tail.wrapping_add(1);
            let t = types::BufRingEntry::tail(base) as *const std::sync::atomic::AtomicU16;
            (*t).store(*tail, std::sync::atomic::Ordering::Release);
        }
    };
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(base as u64, BUFS, GROUP, 0)
    }
    .expect("buf ring");
    for bid in 0..BUFS {
        give(bid, &mut tail);
    }
    let send = |i: usize, fd: RawFd| send_entry(request, i, fd);
    let recv = |i: usize, fd: RawFd| {
        opcode::RecvMulti::new(types::Fd(fd), GROUP)
            .build()
            .user_data((i as u64) << 1 | 1)
    };
    for (i, c) in conns.iter().enumerate() {
        push(&mut ring, send(i, c.stream.as_raw_fd()));
        push(&mut ring, recv(i, c.stream.as_raw_fd()));
    }
    let mut done = 0u64;
    let mut completed = Vec::with_capacity(entries as usize);
    while Instant::now() < until {
        ring.submit_and_wait(1).expect("submit_and_wait");
        completed.clear();
        completed.extend(
            ring.completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(data, result, flags) in &completed {
            let i = (data >> 1) as usize;
            if data & 1 == 0 {
                assert_eq!(result as usize, request.len(), "send: {result}");
                continue;
            }
            let c = &mut conns[i];
            let fd = c.stream.as_raw_fd();
            if result > 0 {
                let bid = cqueue::buffer_select(flags).expect("a buffer");
                let n = result as usize;
                // SAFETY: the kernel wrote n bytes into buffer bid, ours until given back.
                let data = unsafe {
                    std::slice::from_raw_parts(pool_base.add(bid as usize * BUF_SIZE), n)
                };
                c.buf[c.filled..c.filled + n].copy_from_slice(data);
                c.filled += n;
                give(bid, &mut tail);
                if c.take_response() {
                    done += 1;
                    push(&mut ring, send(i, fd));
                }
            } else if result != -libc::ENOBUFS {
                panic!("recv: {result}");
            }
            if !cqueue::more(flags) {
                push(&mut ring, recv(i, fd));
            }
        }
    }
    done
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, addr, path) = (&args[1], &args[2], &args[3]);
    let n: usize = args[4].parse().unwrap();
    let secs: u64 = args[5].parse().unwrap();
    let addr: SocketAddr = addr.parse().unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes();
    let mut conns = connect(addr, n);
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let until = t0 + Duration::from_secs(secs);
    let done = match mode.as_str() {
        "epoll" => run_epoll(&mut conns, &request, until),
        "uring" => run_uring(&mut conns, &request, until, false),
        "uring-defer" => run_uring(&mut conns, &request, until, true),
        "uring-multi" => run_uring_multi(&mut conns, &request, until),
        other => panic!("mode {other}"),
    };
    let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{mode} requests {done} wall {wall:.2} cpu {cpu:.2} per_cpu_s {:.0}",
        done as f64 / cpu
    )
    .unwrap();
    // in-flight operations refer to the connections: leave without dropping them
    std::process::exit(0);
}
