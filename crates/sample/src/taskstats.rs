//! A thread's context switches and runs from the kernel's taskstats (generic netlink), as
//! binary numbers: the same figures `/proc/.../status` gives after formatting some sixty
//! lines (signal masks, CPU lists ...) that the sampler would only parse away again. That
//! formatting was most of the sampler's CPU with hundreds of busy threads.
//!
//! Not its CPU times: taskstats' `ac_utime`/`ac_stime` are the raw tick samples, which on a
//! busy machine can be a small fraction of what the thread ran (the kernel scales them to the
//! scheduler's runtime for /proc/.../stat, which is where the sampler reads CPU).
//!
//! taskstats needs CAP_NET_ADMIN and the host's network namespace; without them
//! `Taskstats::open` fails and the sampler reads `status` instead.

use std::io;

use crate::netlink::{attribute, attributes, messages, Message, NetlinkSocket, NLM_F_REQUEST};

const NETLINK_GENERIC: i32 = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const TASKSTATS_CMD_GET: u8 = 1;
const TASKSTATS_CMD_ATTR_PID: u16 = 1;
const TASKSTATS_TYPE_STATS: u16 = 3;
const TASKSTATS_TYPE_AGGR_PID: u16 = 4;
/// Offsets in `struct taskstats` (linux/taskstats.h), stable since its version 1 layout
/// grew these fields; checked against /proc in the tests.
const NVCSW: usize = 272;
const NIVCSW: usize = 280;
/// `cpu_count`: how many times the task was put on a CPU (schedstat's third number).
const CPU_COUNT: usize = 16;

/// What taskstats says of one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCounters {
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub runs: u64,
}

/// An open taskstats channel.
pub struct Taskstats {
    socket: NetlinkSocket,
    family: u16,
    buf: Vec<u8>,
}

impl Taskstats {
    /// Finds the taskstats family; an error when the kernel has none here or refuses.
    pub fn open() -> io::Result<Self> {
        let mut socket = NetlinkSocket::open(NETLINK_GENERIC)?;
        let mut request = genl_header(CTRL_CMD_GETFAMILY);
        request.extend(attribute(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0"));
        socket.send(GENL_ID_CTRL, NLM_F_REQUEST, &request)?;
        let mut buf = vec![0u8; 8192];
        let n = socket.recv(&mut buf)?;
        let family = answer(&buf[..n], GENL_ID_CTRL)?
            .find(|(kind, _)| *kind == CTRL_ATTR_FAMILY_ID)
            .and_then(|(_, v)| Some(u16::from_ne_bytes(v.get(0..2)?.try_into().ok()?)))
            .ok_or_else(|| io::Error::other("no taskstats family"))?;
        let mut channel = Self {
            socket,
            family,
            buf,
        };
        // Refused (no CAP_NET_ADMIN) shows on the first real question, so ask it now.
        channel.thread(std::process::id() as i32)?;
        Ok(channel)
    }

    /// One thread's (or a single-threaded process's) counters.
    pub fn thread(&mut self, tid: i32) -> io::Result<ThreadCounters> {
        let mut request = genl_header(TASKSTATS_CMD_GET);
        request.extend(attribute(TASKSTATS_CMD_ATTR_PID, &tid.to_ne_bytes()));
        self.socket.send(self.family, NLM_F_REQUEST, &request)?;
        let n = self.socket.recv(&mut self.buf)?;
        let stats = answer(&self.buf[..n], self.family)?
            .filter(|(kind, _)| *kind == TASKSTATS_TYPE_AGGR_PID)
            .flat_map(|(_, nested)| attributes(nested))
            .find(|(kind, _)| *kind == TASKSTATS_TYPE_STATS)
            .map(|(_, stats)| stats)
            .ok_or_else(|| io::Error::other("taskstats answer without stats"))?;
        parse_stats(stats).ok_or_else(|| io::Error::other("taskstats answer too short"))
    }
}

/// The generic netlink header: command, version, reserved.
fn genl_header(command: u8) -> Vec<u8> {
    vec![command, 1, 0, 0]
}

/// The attributes of the one answer of `family` in a datagram.
fn answer(buf: &[u8], family: u16) -> io::Result<impl Iterator<Item = (u16, &[u8])>> {
    for message in messages(buf) {
        match message? {
            Message::Error(e) => return Err(e),
            Message::Data(kind, payload) if kind == family && payload.len() >= 4 => {
                return Ok(attributes(&payload[4..]));
            }
            _ => {}
        }
    }
    Err(io::Error::other("no netlink answer"))
}

fn parse_stats(stats: &[u8]) -> Option<ThreadCounters> {
    let u64_at = |at: usize| Some(u64::from_ne_bytes(stats.get(at..at + 8)?.try_into().ok()?));
    Some(ThreadCounters {
        voluntary_switches: u64_at(NVCSW)?,
        involuntary_switches: u64_at(NIVCSW)?,
        runs: u64_at(CPU_COUNT)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::{parse_status_switches, parse_task_stat};

    #[test]
    fn taskstats_agrees_with_proc_for_a_thread_that_sleeps_and_spins() {
        let Ok(mut channel) = Taskstats::open() else {
            // Without CAP_NET_ADMIN the sampler reads /proc; nothing to compare.
            eprintln!("taskstats not available here (needs CAP_NET_ADMIN)");
            return;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (parked_tx, parked_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions
            tx.send(unsafe { libc::gettid() }).unwrap();
            for _ in 0..20 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // 120 ms of this thread's own CPU, however long a busy machine makes that take
            // (at most 10 s)
            let cap = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while thread_cpu_us() < 120_000 && std::time::Instant::now() < cap {
                std::hint::spin_loop();
            }
            parked_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        parked_rx.recv().unwrap();
        let dir = format!("/proc/self/task/{tid}");
        // The worker blocks in recv now, or soon (a busy machine may take a while to get it
        // there): read /proc between two taskstats readings until nothing moved between them.
        let mut tries = 0;
        let (counters, stat, voluntary, involuntary, runs) = loop {
            let before = channel.thread(tid).unwrap();
            let stat =
                parse_task_stat(&std::fs::read_to_string(format!("{dir}/stat")).unwrap()).unwrap();
            let (voluntary, involuntary) =
                parse_status_switches(&std::fs::read_to_string(format!("{dir}/status")).unwrap());
            let runs: u64 = std::fs::read_to_string(format!("{dir}/schedstat"))
                .unwrap()
                .split_whitespace()
                .nth(2)
                .unwrap()
                .parse()
                .unwrap();
            let after = channel.thread(tid).unwrap();
            tries += 1;
            if before == after || tries == 100 {
                break (after, stat, voluntary, involuntary, runs);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        go_tx.send(()).unwrap();
        worker.join().unwrap();
        // The thread is parked on a channel: both sources count the same.
        assert_eq!(Some(counters.voluntary_switches), voluntary);
        assert_eq!(Some(counters.involuntary_switches), involuntary);
        assert_eq!(counters.runs, runs);
        assert!(counters.voluntary_switches >= 20, "{counters:?}");
        // the thread spun 120 ms of its own CPU: stat saw it, and it ran more than once
        assert!((stat.utime + stat.stime) * 10_000 >= 100_000, "{stat:?}");
        // every switch ended a run (a spin nothing preempted adds no involuntary switch)
        assert!(
            counters.runs >= counters.voluntary_switches + counters.involuntary_switches,
            "{counters:?}"
        );
    }

    /// The calling thread's CPU time so far, in µs.
    fn thread_cpu_us() -> u64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec we own
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
    }

    #[test]
    fn short_or_foreign_answers_are_errors() {
        assert!(parse_stats(&[0u8; 100]).is_none());
        assert!(answer(&[0u8; 10], 31).is_err());
    }
}
