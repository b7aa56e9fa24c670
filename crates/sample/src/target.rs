//! The target as what serves its port: the process given, or every process that holds the
//! port's listening socket (an SO_REUSEPORT group too), with every process forked from them
//! (a pre-fork server's master and its workers: gunicorn, uwsgi, puma, php-fpm, nginx, Node's
//! cluster), followed as workers come and go. A process that leaves the tree (re-parented to
//! init) is no longer the target's: membership is never guessed from a name.

use crate::procfs::ProcFs;

/// Every this many calls the whole process table is scanned for descendants, not only the
/// main threads' children lists (a worker forked by another thread is found within it).
const FULL_SCAN_EVERY: u32 = 5;
/// How far up a parent chain to look when judging whether a holder descends from another.
const MAX_ANCESTRY: usize = 64;

/// The processes of one target: its roots and, at each call of `members`, their descendants.
#[derive(Clone, Debug)]
pub struct TargetProcesses {
    roots: Vec<i32>,
    calls: u32,
}

impl TargetProcesses {
    /// The process `pid` and what it forks.
    pub fn of_pid(pid: i32) -> Self {
        Self {
            roots: vec![pid],
            calls: 0,
        }
    }

    /// Every process holding a socket listening on TCP `port` and what they fork; None when
    /// no process visible to kiln listens there. A holder forked from another holder (a
    /// worker that inherited the master's socket) is that one's descendant, not a root.
    pub fn of_port(proc: &ProcFs, port: u16) -> Option<Self> {
        let holders = proc.processes_listening_on(port);
        let descends_from_another = |pid: i32| {
            let mut at = pid;
            for _ in 0..MAX_ANCESTRY {
                match proc.process(at).map(|t| t.ppid) {
                    Some(parent) if parent > 1 => {
                        if holders.contains(&parent) {
                            return true;
                        }
                        at = parent;
                    }
                    _ => return false,
                }
            }
            false
        };
        let roots: Vec<i32> = holders
            .iter()
            .copied()
            .filter(|&pid| !descends_from_another(pid))
            .collect();
        (!roots.is_empty()).then_some(Self { roots, calls: 0 })
    }

    /// The first root: the process a single-process tool (a JVM's attach, `perf -p`) is
    /// pointed at when the target has no workers, and the master when it has.
    pub fn main_pid(&self) -> i32 {
        self.roots[0]
    }

    pub fn roots(&self) -> &[i32] {
        &self.roots
    }

    /// True while any root still runs (a zombie counts as gone).
    pub fn alive(&self, proc: &ProcFs) -> bool {
        self.roots.iter().any(|&p| {
            proc.state(p)
                .is_some_and(|state| !matches!(state, 'Z' | 'X'))
        })
    }

    /// The target's processes now: the roots that still exist, then their descendants,
    /// parents before children, each once. Cheap on most calls (a children list per process);
    /// the whole process table every `FULL_SCAN_EVERY` calls and where the kernel keeps no
    /// children lists.
    pub fn members(&mut self, proc: &ProcFs) -> Vec<i32> {
        let full_scan = self.calls.is_multiple_of(FULL_SCAN_EVERY);
        self.calls = self.calls.wrapping_add(1);
        let mut members: Vec<i32> = Vec::new();
        for &root in &self.roots {
            if proc.state(root).is_none() || members.contains(&root) {
                continue;
            }
            let tree = match full_scan {
                false => tree_by_children_lists(proc, root),
                true => None,
            }
            .unwrap_or_else(|| proc.process_tree(root));
            for pid in tree {
                if !members.contains(&pid) {
                    members.push(pid);
                }
            }
        }
        members
    }

    /// The processes that do the target's work: its members other than the roots when it
    /// has any (a pre-fork server's workers), else the roots.
    pub fn workers(&mut self, proc: &ProcFs) -> Vec<i32> {
        let members = self.members(proc);
        let workers: Vec<i32> = members
            .iter()
            .copied()
            .filter(|p| !self.roots.contains(p))
            .collect();
        if workers.is_empty() {
            members
        } else {
            workers
        }
    }

    /// The process a runtime reader looks into (py-spy, a JVM's counters, a Go target's
    /// pages): the first worker running the master's own executable (a pre-fork server's
    /// workers, where the requests run), else the main process (a launcher's child runs
    /// another program, and a single process is its own worker).
    pub fn runtime_process(&mut self, proc: &ProcFs) -> i32 {
        let main = self.main_pid();
        let exe = |pid: i32| std::fs::read_link(proc.path(&format!("proc/{pid}/exe"))).ok();
        let Some(main_exe) = exe(main) else {
            return main;
        };
        self.workers(proc)
            .into_iter()
            .find(|&w| w != main && exe(w).as_ref() == Some(&main_exe))
            .unwrap_or(main)
    }
}

/// `root` and its descendants by the main threads' children lists, breadth first; None
/// where the kernel keeps no such lists.
fn tree_by_children_lists(proc: &ProcFs, root: i32) -> Option<Vec<i32>> {
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let children = proc.children(tree[i]);
        if i == 0 {
            // the root's list missing means the kernel has none (or the root just exited)
            children.as_ref()?;
        }
        for child in children.unwrap_or_default() {
            if !tree.contains(&child) {
                tree.push(child);
            }
        }
        i += 1;
    }
    Some(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A /proc of `(pid, ppid, listening socket inode or 0)` with children lists.
    fn fake_proc(processes: &[(i32, i32, u64)], children_lists: bool) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for &(pid, ppid, inode) in processes {
            let dir = root.path().join(format!("proc/{pid}"));
            std::fs::create_dir_all(dir.join(format!("task/{pid}"))).unwrap();
            std::fs::create_dir_all(dir.join("fd")).unwrap();
            std::fs::write(
                dir.join("stat"),
                format!("{pid} (p) S {ppid} 0 0 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 0 0 0"),
            )
            .unwrap();
            if children_lists {
                let kids: Vec<String> = processes
                    .iter()
                    .filter(|p| p.1 == pid)
                    .map(|p| p.0.to_string())
                    .collect();
                std::fs::write(dir.join(format!("task/{pid}/children")), kids.join(" ")).unwrap();
            }
            if inode != 0 {
                std::os::unix::fs::symlink(format!("socket:[{inode}]"), dir.join("fd/3")).unwrap();
            }
        }
        // one listener on port 8000 (0x1F40) with inode 77
        std::fs::create_dir_all(root.path().join("proc/net")).unwrap();
        std::fs::write(
            root.path().join("proc/net/tcp"),
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0\n",
        )
        .unwrap();
        root
    }

    #[test]
    fn a_pre_fork_master_and_its_workers_are_one_target_rooted_at_the_master() {
        // master 10 and workers 11, 12 all hold the socket; 13 is the host's, 14 a worker's child
        let table = [
            (1, 0, 0),
            (10, 1, 77),
            (11, 10, 77),
            (12, 10, 77),
            (13, 1, 0),
            (14, 12, 0),
        ];
        for children_lists in [true, false] {
            let dir = fake_proc(&table, children_lists);
            let proc = ProcFs::new(dir.path());
            let mut target = TargetProcesses::of_port(&proc, 8000).unwrap();
            assert_eq!(target.roots(), [10]);
            for _ in 0..FULL_SCAN_EVERY + 1 {
                assert_eq!(target.members(&proc), [10, 11, 12, 14]);
            }
            assert_eq!(target.workers(&proc), [11, 12, 14]);
        }
    }

    #[test]
    fn unrelated_processes_sharing_a_port_are_each_a_root() {
        // an SO_REUSEPORT group: two servers started apart, each holding its own socket
        let dir = fake_proc(&[(1, 0, 0), (20, 1, 77), (30, 1, 77), (31, 30, 0)], true);
        let proc = ProcFs::new(dir.path());
        let mut target = TargetProcesses::of_port(&proc, 8000).unwrap();
        assert_eq!(target.roots(), [20, 30]);
        assert_eq!(target.members(&proc), [20, 30, 31]);
        assert_eq!(target.workers(&proc), [31]);
        assert!(TargetProcesses::of_port(&proc, 8001).is_none());
    }

    #[test]
    fn a_single_process_is_its_own_worker() {
        let dir = fake_proc(&[(1, 0, 0), (40, 1, 77)], true);
        let proc = ProcFs::new(dir.path());
        let mut target = TargetProcesses::of_pid(40);
        assert_eq!(target.members(&proc), [40]);
        assert_eq!(target.workers(&proc), [40]);
        assert_eq!(
            TargetProcesses::of_pid(99).members(&proc),
            Vec::<i32>::new()
        );
    }
}
