//! Parsers for the /proc files the sampler reads. Each returns `None` for input it cannot
//! understand instead of failing the whole sample.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::counters::{
    parse_interrupts, parse_meminfo, parse_paired_counters, parse_pressure, parse_softirqs,
    parse_vmstat, Interrupts, Pressure,
};
use crate::sockets::{parse_tcp_table, SocketSummary};

/// Cumulative CPU time of one CPU (or all), in clock ticks, from a `cpu` line of /proc/stat.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
}

/// What /proc/stat says about the host.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostStat {
    pub all: CpuTimes,
    /// Indexed by CPU number as the kernel names it (`cpu0`, `cpu1`, ...).
    pub per_cpu: Vec<(u32, CpuTimes)>,
    pub context_switches: Option<u64>,
    pub procs_running: Option<u64>,
    pub procs_blocked: Option<u64>,
}

/// Parses one `cpuN user nice system idle iowait irq softirq steal ...` line. Older kernels
/// have fewer columns (missing ones read as 0); newer ones more (ignored). Guest time is
/// already included in user and nice, so it is not added again.
fn parse_cpu_line(rest: &str) -> Option<CpuTimes> {
    let v: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(CpuTimes {
        user: at(0),
        nice: at(1),
        system: at(2),
        idle: at(3),
        iowait: at(4),
        irq: at(5),
        softirq: at(6),
        steal: at(7),
    })
}

pub fn parse_host_stat(text: &str) -> Option<HostStat> {
    let mut stat = HostStat::default();
    let mut saw_all = false;
    for line in text.lines() {
        let mut parts = line.splitn(2, char::is_whitespace);
        let key = parts.next().unwrap_or("");
        let rest = parts.next().unwrap_or("");
        if key == "cpu" {
            stat.all = parse_cpu_line(rest)?;
            saw_all = true;
        } else if let Some(n) = key.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) {
            if let Some(times) = parse_cpu_line(rest) {
                stat.per_cpu.push((n, times));
            }
        } else {
            let value = rest.split_whitespace().next().and_then(|v| v.parse().ok());
            match key {
                "ctxt" => stat.context_switches = value,
                "procs_running" => stat.procs_running = value,
                "procs_blocked" => stat.procs_blocked = value,
                _ => {}
            }
        }
    }
    saw_all.then_some(stat)
}

/// One process or thread, from its `stat` and `status` files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskStat {
    pub id: i32,
    pub name: String,
    pub state: char,
    /// The parent process (0 for the kernel's own).
    pub ppid: i32,
    /// Clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Clock ticks of its children that it waited for (a pre-fork master's reaped workers).
    pub cutime: u64,
    pub cstime: u64,
    pub num_threads: u64,
    /// When it started, in clock ticks since boot (a pid reused is another process).
    pub starttime: u64,
    /// Resident pages.
    pub rss_pages: u64,
    pub voluntary_switches: Option<u64>,
    pub involuntary_switches: Option<u64>,
    /// Nanoseconds it waited on a run queue for a CPU since it started (`schedstat`'s
    /// second field); None where it was not read.
    pub run_delay_ns: Option<u64>,
}

/// Parses `/proc/PID/stat`. The name sits in parentheses and may itself hold spaces and
/// parentheses, so the fields are counted from the last `)`.
pub fn parse_task_stat(text: &str) -> Option<TaskStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let id = text[..open].trim().parse().ok()?;
    let name = text[open + 1..close].to_string();
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // fields[0] is field 3 (state) of proc(5).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(TaskStat {
        id,
        name,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1).and_then(|f| f.parse().ok()).unwrap_or(0),
        utime: field(14)?,
        stime: field(15)?,
        cutime: field(16).unwrap_or(0),
        cstime: field(17).unwrap_or(0),
        num_threads: field(20).unwrap_or(1),
        starttime: field(22).unwrap_or(0),
        rss_pages: field(24).unwrap_or(0),
        voluntary_switches: None,
        involuntary_switches: None,
        run_delay_ns: None,
    })
}

/// Reads the context-switch counts from `/proc/PID/status`.
pub fn parse_status_switches(text: &str) -> (Option<u64>, Option<u64>) {
    let mut voluntary = None;
    let mut involuntary = None;
    for line in text.lines() {
        let value = || line.split(':').nth(1).and_then(|v| v.trim().parse().ok());
        if line.starts_with("voluntary_ctxt_switches:") {
            voluntary = value();
        } else if line.starts_with("nonvoluntary_ctxt_switches:") {
            involuntary = value();
        }
    }
    (voluntary, involuntary)
}

/// How many CPUs a process may run on, from `Cpus_allowed_list:` in `/proc/PID/status`
/// (`0-3,6`: five): `taskset` or a cpuset pins it to fewer than the host has.
pub fn parse_cpus_allowed(text: &str) -> Option<usize> {
    let list = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut count = 0usize;
    for range in list.split(',').filter(|r| !r.is_empty()) {
        let (from, to) = match range.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let one = range.trim().parse::<usize>().ok()?;
                (one, one)
            }
        };
        count = count.checked_add(to.checked_sub(from)? + 1)?;
    }
    (count > 0).then_some(count)
}

/// The kernel's counters at one moment; whatever could not be read is empty or None.
#[derive(Clone, Debug, Default)]
pub struct KernelReading {
    /// /proc/net/netstat and /proc/net/snmp, as `Group.Name`.
    pub net: BTreeMap<String, u64>,
    pub softirqs: BTreeMap<String, Vec<u64>>,
    pub vmstat: BTreeMap<String, u64>,
    pub psi_cpu: Option<Pressure>,
    pub psi_memory: Option<Pressure>,
    pub psi_io: Option<Pressure>,
    pub interrupts: Option<Interrupts>,
    /// /proc/meminfo in kB.
    pub meminfo: BTreeMap<String, u64>,
}

/// /proc under a root: `/` on the live host, a fixture tree in tests.
#[derive(Clone, Debug)]
pub struct ProcFs {
    root: PathBuf,
}

/// Where each connection's segment counters stood at the last reading (by inode), for
/// [`ProcFs::count_segments`]; empty before the first.
#[derive(Debug, Default)]
pub struct SegmentsSeen(Option<HashMap<u64, crate::sock_diag::SegmentCounts>>);

impl Default for ProcFs {
    fn default() -> Self {
        Self::new("/")
    }
}

impl ProcFs {
    pub fn new(root: impl AsRef<Path>) -> Self {
        Self {
            root: root.as_ref().to_path_buf(),
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        use std::io::Read;
        /// Far above any real /proc file (the TCP table of 400k connections).
        const MAX_PROC_FILE_BYTES: u64 = 64 << 20;
        // Not fs::read_to_string: it stats each file for a size hint, and /proc files say 0.
        // The sampler reads two files per thread every second, so the syscall counts.
        // Capped: under a --root tree a file may be a link to /dev/zero.
        let file = fs::File::open(self.root.join(rel)).ok()?;
        let mut text = String::with_capacity(4096);
        file.take(MAX_PROC_FILE_BYTES)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    }

    /// A path under the root.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A file under the root, as text (for the other readers of this crate).
    pub(crate) fn read_file(&self, rel: &str) -> Option<String> {
        self.read(rel)
    }

    pub(crate) fn exists(&self, rel: &str) -> bool {
        self.root.join(rel).exists()
    }

    pub fn host_stat(&self) -> Option<HostStat> {
        parse_host_stat(&self.read("proc/stat")?)
    }

    fn task(&self, dir: &str) -> Option<TaskStat> {
        let mut task = parse_task_stat(&self.read(&format!("{dir}/stat"))?)?;
        if let Some(status) = self.read(&format!("{dir}/status")) {
            (task.voluntary_switches, task.involuntary_switches) = parse_status_switches(&status);
        }
        Some(task)
    }

    pub fn kernel_reading(&self) -> KernelReading {
        let mut net = BTreeMap::new();
        for file in ["proc/net/netstat", "proc/net/snmp"] {
            if let Some(text) = self.read(file) {
                net.extend(parse_paired_counters(&text));
            }
        }
        let pressure = |kind: &str| {
            self.read(&format!("proc/pressure/{kind}"))
                .map(|t| parse_pressure(&t))
        };
        KernelReading {
            net,
            softirqs: self
                .read("proc/softirqs")
                .map(|t| parse_softirqs(&t))
                .unwrap_or_default(),
            vmstat: self
                .read("proc/vmstat")
                .map(|t| parse_vmstat(&t))
                .unwrap_or_default(),
            psi_cpu: pressure("cpu"),
            psi_memory: pressure("memory"),
            psi_io: pressure("io"),
            interrupts: self.read("proc/interrupts").map(|t| parse_interrupts(&t)),
            meminfo: self
                .read("proc/meminfo")
                .map(|t| parse_meminfo(&t))
                .unwrap_or_default(),
        }
    }

    /// Open file descriptors of a process (entries of /proc/PID/fd); None when they cannot
    /// be listed (another user's process without privilege, or gone).
    pub fn open_fds(&self, pid: i32) -> Option<u64> {
        self.descriptors(pid).map(|(count, _)| count)
    }

    /// The process as a whole (all its threads' times summed by the kernel).
    pub fn process(&self, pid: i32) -> Option<TaskStat> {
        self.task(&format!("proc/{pid}"))
    }

    /// The CPUs the process may run on (its affinity), counted.
    pub fn cpus_allowed(&self, pid: i32) -> Option<usize> {
        parse_cpus_allowed(&self.read(&format!("proc/{pid}/status"))?)
    }

    /// The process's state letter (R, S, D, Z ...) from its `stat` alone.
    pub fn state(&self, pid: i32) -> Option<char> {
        parse_task_stat(&self.read(&format!("proc/{pid}/stat"))?).map(|t| t.state)
    }

    /// The process that owns a socket listening on TCP `port`, if one is visible (the
    /// lowest pid: a pre-fork server's master, whose workers inherit the socket).
    pub fn pid_listening_on(&self, port: u16) -> Option<i32> {
        self.holder_of(&self.listening_inodes(port))
    }

    /// Every process holding a socket listening on TCP `port` (a pre-fork master and its
    /// workers, or an SO_REUSEPORT group of unrelated processes), lowest pid first.
    pub fn processes_listening_on(&self, port: u16) -> Vec<i32> {
        self.holders_of(&self.listening_inodes(port), usize::MAX)
    }

    /// The inodes of the sockets listening on TCP `port`, IPv4 and IPv6.
    fn listening_inodes(&self, port: u16) -> Vec<u64> {
        let mut inodes: Vec<u64> = ["proc/net/tcp", "proc/net/tcp6"]
            .iter()
            .filter_map(|f| self.read(f))
            .flat_map(|text| parse_listening_inodes(&text, port))
            .collect();
        inodes.retain(|i| *i != 0);
        inodes
    }

    /// The first process (lowest pid) holding any of the socket `inodes` among its open
    /// descriptors, as `ss -p` finds a socket's owner: every process's fd links are read
    /// until one names it. None when none is visible (another user's process, without root).
    pub fn holder_of(&self, inodes: &[u64]) -> Option<i32> {
        self.holders_of(inodes, 1).first().copied()
    }

    /// Up to `most` processes holding any of the socket `inodes`, lowest pid first.
    fn holders_of(&self, inodes: &[u64], most: usize) -> Vec<i32> {
        if inodes.is_empty() {
            return Vec::new();
        }
        let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
        let Ok(entries) = fs::read_dir(self.root.join("proc")) else {
            return Vec::new();
        };
        let mut pids: Vec<i32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .collect();
        pids.sort_unstable();
        pids.into_iter()
            .filter(|pid| {
                let Ok(fds) = fs::read_dir(self.root.join(format!("proc/{pid}/fd"))) else {
                    return false;
                };
                fds.filter_map(|fd| fs::read_link(fd.ok()?.path()).ok())
                    .any(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
            })
            .take(most)
            .collect()
    }

    /// The processes forked by `pid`'s main thread (`/proc/PID/task/PID/children`), or None
    /// where the kernel does not keep those lists (CONFIG_PROC_CHILDREN) or `pid` is gone. The
    /// main thread's list is the one a pre-fork master's fork() lands in: one read where a
    /// process of 500 threads would need 500 (a child of another thread is found by a scan
    /// of the process table, `process_tree`).
    pub fn children(&self, pid: i32) -> Option<Vec<i32>> {
        let text = self.read(&format!("proc/{pid}/task/{pid}/children"))?;
        let mut children: Vec<i32> = text
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect();
        children.sort_unstable();
        Some(children)
    }

    /// A process's command name (its `comm`, as `ps` and `ss -p` show it).
    pub fn command(&self, pid: i32) -> Option<String> {
        Some(
            self.read(&format!("proc/{pid}/comm"))?
                .trim_end()
                .to_string(),
        )
    }

    /// `pid` and all its descendants (a server's worker processes), parents first.
    pub fn process_tree(&self, pid: i32) -> Vec<i32> {
        let parents: Vec<(i32, i32)> = fs::read_dir(self.root.join("proc"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(|p| {
                Some((
                    p,
                    self.read(&format!("proc/{p}/stat"))
                        .and_then(|t| parse_task_stat(&t))?
                        .ppid,
                ))
            })
            .collect();
        let mut tree = vec![pid];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            let mut children: Vec<i32> = parents
                .iter()
                .filter(|&&(p, pp)| pp == parent && !tree.contains(&p))
                .map(|&(p, _)| p)
                .collect();
            children.sort_unstable();
            tree.extend(children);
            i += 1;
        }
        tree
    }

    /// What the kernel counted so far for `pid` and every process it forked, in clock ticks:
    /// its own times, those of the children it reaped, and those of its descendants alive
    /// now. The truth a process tree's sampled CPU is held to; None when `pid` is gone.
    pub fn tree_cpu_ticks(&self, pid: i32) -> Option<u64> {
        let own = self.process(pid)?;
        let alive: u64 = self.process_tree(pid)[1..]
            .iter()
            .filter_map(|&p| self.process(p))
            .map(|t| t.utime + t.stime)
            .sum();
        Some(own.utime + own.stime + own.cutime + own.cstime + alive)
    }

    /// The socket inodes a process holds (its fd links read `socket:[N]`).
    /// The process's open descriptors: how many, and the inodes of its sockets (one listing
    /// of /proc/PID/fd for both); None when they cannot be listed.
    pub fn descriptors(&self, pid: i32) -> Option<(u64, std::collections::HashSet<u64>)> {
        let fds = fs::read_dir(self.root.join(format!("proc/{pid}/fd"))).ok()?;
        let mut count = 0;
        let mut sockets = std::collections::HashSet::new();
        for fd in fds.filter_map(|fd| fd.ok()) {
            count += 1;
            let Ok(target) = fs::read_link(fd.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok());
            if let Some(inode) = inode {
                sockets.insert(inode);
            }
        }
        Some((count, sockets))
    }

    /// The process's TCP sockets by state, its deepest queues, and its listeners' backlogs;
    /// None when its fds cannot be read (another user's process without privilege).
    pub fn process_sockets(&self, pid: i32) -> Option<SocketSummary> {
        let (_, inodes) = self.descriptors(pid)?;
        Some(self.sockets_of(&inodes))
    }

    /// The TCP sockets among `inodes`. The socket tables are not read at all when there are
    /// none: each read of /proc/net/tcp walks the kernel's whole connection hash table (a
    /// millisecond or more), whatever the process owns.
    pub fn sockets_of(&self, inodes: &HashSet<u64>) -> SocketSummary {
        self.sockets_with(inodes, None)
    }

    /// `sockets_of`, with the host's listen queues when they were read already this tick
    /// (the sampler asks sock_diag for them once a second; asked again when not given).
    pub fn sockets_with(
        &self,
        inodes: &HashSet<u64>,
        listeners: Option<&HashMap<u64, crate::sock_diag::ListenQueue>>,
    ) -> SocketSummary {
        if inodes.is_empty() {
            return SocketSummary::default();
        }
        self.sockets_in_tables(inodes, listeners)
    }

    /// True when this reads the live host's /proc (not a fixture tree), whose kernel can be
    /// asked over netlink too.
    pub(crate) fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Sets the segments the connections among `inodes` sent again and sent since the last
    /// reading in `seen` (a connection first seen counts from its opening). The first
    /// reading only sets where each connection stood: a connection opened long before the
    /// run would put its whole history into the run's first second.
    pub fn count_segments(
        &self,
        summary: &mut SocketSummary,
        inodes: &HashSet<u64>,
        seen: &mut SegmentsSeen,
    ) {
        let connected = summary.by_state.keys().any(|state| state != "LISTEN");
        let Some(all) = (self.is_live() && connected)
            .then(crate::sock_diag::connection_counters)
            .and_then(Result::ok)
        else {
            return;
        };
        let (mut retrans, mut out) = (0u64, 0u64);
        let mut now = HashMap::new();
        let before = seen.0.take();
        for (inode, c) in all.into_iter().filter(|(i, _)| inodes.contains(i)) {
            let was = before
                .as_ref()
                .and_then(|b| b.get(&inode))
                .copied()
                .unwrap_or_default();
            retrans = retrans.saturating_add(c.retrans.saturating_sub(was.retrans));
            out = out.saturating_add(c.out.saturating_sub(was.out));
            now.insert(inode, c);
        }
        if before.is_some() {
            summary.retrans_segs = Some(retrans);
            summary.out_segs = Some(out);
        }
        seen.0 = Some(now);
    }

    fn sockets_in_tables(
        &self,
        inodes: &HashSet<u64>,
        listeners: Option<&HashMap<u64, crate::sock_diag::ListenQueue>>,
    ) -> SocketSummary {
        let sockets: Vec<_> = ["proc/net/tcp", "proc/net/tcp6"]
            .iter()
            .filter_map(|f| self.read(f))
            .flat_map(|text| parse_tcp_table(&text))
            .filter(|s| inodes.contains(&s.inode))
            .collect();
        let mut summary = SocketSummary::of(&sockets);
        // the backlog limits are not in /proc: ask sock_diag, only when there are listeners
        // (and only on the live host: a fixture root has no kernel to ask)
        if self.is_live() && sockets.iter().any(|s| s.state == "LISTEN") {
            let asked;
            let queues = match listeners {
                Some(queues) => Some(queues),
                None => {
                    asked = crate::sock_diag::listen_queues().ok();
                    asked.as_ref()
                }
            };
            if let Some(queues) = queues {
                for s in sockets.iter().filter(|s| s.state == "LISTEN") {
                    let Some(q) = queues.get(&s.inode) else {
                        continue;
                    };
                    let addr = s.local.to_string();
                    if let Some(drops) = q.drops {
                        summary
                            .listen_dropped
                            .push((addr.clone(), u64::from(drops)));
                    }
                    let (queued, limit) = (u64::from(q.queued), u64::from(q.limit));
                    summary.listen_backlog.push((addr, queued, limit));
                }
            }
        }
        summary
    }

    /// The ids of the process's threads, sorted; None when the process cannot be listed.
    pub fn thread_ids(&self, pid: i32) -> Option<Vec<i32>> {
        let entries = fs::read_dir(self.root.join(format!("proc/{pid}/task"))).ok()?;
        let mut ids: Vec<i32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        ids.sort_unstable();
        Some(ids)
    }
}

/// Socket inodes listening on TCP `port`, from the lines of /proc/net/tcp or tcp6
/// (`sl local_address rem_address st ... inode`, addresses as hex `IP:PORT`, LISTEN = 0A).
pub fn parse_listening_inodes(text: &str, port: u16) -> Vec<u64> {
    parse_tcp_table(text)
        .into_iter()
        .filter(|s| s.state == "LISTEN" && s.local.port() == port)
        .map(|s| s.inode)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 1000 10 1 2 3 0 0\n\
cpu0 60 5 30 500 5 1 1 2 0 0\n\
cpu1 40 0 20 500 5 0 1 1 0 0\n\
intr 12345 1 2\n\
ctxt 987654\n\
btime 1700000000\n\
procs_running 3\n\
procs_blocked 1\n";

    #[test]
    fn host_stat_reads_every_cpu_and_the_counters() {
        let s = parse_host_stat(STAT).unwrap();
        assert_eq!(s.all.user, 100);
        assert_eq!(s.all.steal, 3);
        assert_eq!(s.per_cpu.len(), 2);
        assert_eq!(s.per_cpu[1].0, 1);
        assert_eq!(s.per_cpu[0].1.system, 30);
        assert_eq!(s.context_switches, Some(987654));
        assert_eq!((s.procs_running, s.procs_blocked), (Some(3), Some(1)));
    }

    #[test]
    fn an_old_kernel_with_four_cpu_columns_still_parses() {
        let s = parse_host_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!((s.all.idle, s.all.steal), (4, 0));
        assert!(parse_host_stat("cpu 1 2\n").is_none());
        assert!(parse_host_stat("").is_none());
    }

    #[test]
    fn a_task_name_with_spaces_and_parentheses_is_read_whole() {
        let line = "4242 (my (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
250 75 0 0 20 0 7 0 12345 1000000 321 18446744073709551615";
        let t = parse_task_stat(line).unwrap();
        assert_eq!(
            (t.id, t.name.as_str(), t.state),
            (4242, "my (weird) name", 'S')
        );
        assert_eq!(t.ppid, 1);
        assert_eq!(
            (t.utime, t.stime, t.num_threads, t.rss_pages),
            (250, 75, 7, 321)
        );
        assert_eq!((t.cutime, t.cstime, t.starttime), (0, 0, 12345));
        assert!(parse_task_stat("4242 (cut").is_none());
        assert!(parse_task_stat("4242 (short) S 1 2").is_none());
    }

    #[test]
    fn a_process_tree_is_the_process_and_its_descendants() {
        let root = tempfile::tempdir().unwrap();
        for (pid, ppid) in [(10, 1), (11, 10), (12, 11), (13, 1), (14, 10)] {
            let dir = root.path().join(format!("proc/{pid}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("stat"),
                format!("{pid} (p) S {ppid} 0 0 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 0 0 0"),
            )
            .unwrap();
        }
        assert_eq!(ProcFs::new(root.path()).process_tree(10), [10, 11, 14, 12]);
        assert_eq!(ProcFs::new(root.path()).process_tree(99), [99]);
    }

    #[test]
    fn the_cpus_a_process_may_use_are_counted_from_its_list() {
        let status =
            |list: &str| format!("Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t{list}\n");
        assert_eq!(parse_cpus_allowed(&status("0-1")), Some(2));
        assert_eq!(parse_cpus_allowed(&status("1")), Some(1));
        assert_eq!(parse_cpus_allowed(&status("0-3,6,8-9")), Some(7));
        for bad in ["", "3-1", "x", "0-"] {
            assert_eq!(parse_cpus_allowed(&status(bad)), None, "{bad}");
        }
        assert_eq!(parse_cpus_allowed("Name: x\n"), None);
        let me = ProcFs::default().cpus_allowed(std::process::id() as i32);
        assert!(me.is_some_and(|n| n >= 1), "{me:?}");
    }

    #[test]
    fn context_switches_come_from_status() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t12\n";
        assert_eq!(parse_status_switches(status), (Some(150), Some(12)));
        assert_eq!(parse_status_switches("Name: x\n"), (None, None));
    }

    #[test]
    fn the_live_host_and_this_process_are_readable() {
        let proc = ProcFs::default();
        let host = proc.host_stat().expect("/proc/stat");
        assert!(!host.per_cpu.is_empty());
        let me = proc.process(std::process::id() as i32).expect("own stat");
        assert!(me.voluntary_switches.is_some());
        let pid = std::process::id() as i32;
        assert!(!crate::threads::ThreadReader::new(pid)
            .read(&proc)
            .is_empty());
    }

    #[test]
    fn listening_sockets_are_found_by_port() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 5555 1 0\n\
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0\n";
        assert_eq!(parse_listening_inodes(tcp, 8080), vec![4242]);
        assert_eq!(parse_listening_inodes(tcp, 80), vec![777]);
        assert!(parse_listening_inodes(tcp, 9).is_empty());
        assert!(parse_listening_inodes("garbage\nmore garbage", 80).is_empty());
    }

    #[test]
    fn the_process_listening_on_a_port_is_this_one() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pid = ProcFs::default().pid_listening_on(port);
        assert_eq!(pid, Some(std::process::id() as i32));
    }

    proptest::proptest! {
        #[test]
        fn no_text_panics_the_parsers(text in "(cpu[0-9]? [0-9 ]{0,30}\n|ctxt [0-9]{0,5}\n|[ -~]{0,40}\n){0,6}") {
            let _ = parse_host_stat(&text);
            let _ = parse_task_stat(&text);
            let _ = parse_status_switches(&text);
        }
    }
}
