//! The target's control group: its CPU use, quota and throttling, and its memory against
//! its limit -- the container's own figures, not the host's. cgroup v2 (one hierarchy) and
//! v1 (a hierarchy per controller, as on hybrid hosts) are both read; where /proc/PID/cgroup
//! names a v1 `cpu` or `memory` hierarchy, that is where the controller lives.

use serde::{Deserialize, Serialize};

use crate::procfs::ProcFs;

/// One reading of a process's cgroup. Absent files give None.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupReading {
    pub version: u8,
    /// The cgroup's path ("/" is the root: the host's own group, nothing of a container);
    /// with cgroup v1, the cpu controller's.
    pub path: String,
    /// The memory controller's path (cgroup v1 keeps one per controller; v2: the same).
    #[serde(default)]
    pub memory_path: String,
    /// CPU used by every task in the group, microseconds.
    pub cpu_usage_us: Option<u64>,
    pub nr_throttled: Option<u64>,
    pub throttled_us: Option<u64>,
    /// The CPU quota in CPUs (None: no quota).
    pub quota_cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
    /// The memory limit (None: no limit).
    pub memory_limit_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
}

/// The group's figures over one interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupSecond {
    pub version: u8,
    pub path: String,
    #[serde(default)]
    pub memory_path: String,
    /// Percent of one CPU used by the whole group.
    pub cpu_pct: Option<f64>,
    pub quota_cpus: Option<f64>,
    /// Periods in which the group hit its quota and was stopped, and for how long.
    pub throttled_periods: Option<u64>,
    pub throttled_ms: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
}

impl CgroupSecond {
    pub fn between(a: &CgroupReading, b: &CgroupReading, secs: f64) -> Self {
        let delta = |x: Option<u64>, y: Option<u64>| Some(y?.saturating_sub(x?));
        Self {
            version: b.version,
            path: b.path.clone(),
            memory_path: b.memory_path.clone(),
            cpu_pct: delta(a.cpu_usage_us, b.cpu_usage_us)
                .filter(|_| secs > 0.0)
                .map(|us| us as f64 / 1e6 / secs * 100.0),
            quota_cpus: b.quota_cpus,
            throttled_periods: delta(a.nr_throttled, b.nr_throttled),
            throttled_ms: delta(a.throttled_us, b.throttled_us).map(|us| us as f64 / 1e3),
            memory_bytes: b.memory_bytes,
            memory_limit_bytes: b.memory_limit_bytes,
            oom_kills: delta(a.oom_kills, b.oom_kills),
        }
    }
}

/// `key value` lines (cpu.stat, memory.events).
pub(crate) fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// A limit file's value: a number, or "max" / the v1 "no limit" sentinel (about 2^63) as None.
fn limit(text: &str) -> Option<u64> {
    let n: u64 = text.trim().parse().ok()?;
    (n < 1 << 62).then_some(n)
}

impl ProcFs {
    /// The cgroup of `pid` and its figures now.
    pub fn cgroup(&self, pid: i32) -> Option<CgroupReading> {
        self.cgroup_of(&pid.to_string())
    }

    /// As `cgroup`, for a /proc entry name (`self` included).
    pub(crate) fn cgroup_of(&self, pid: &str) -> Option<CgroupReading> {
        let text = self.read_file(&format!("proc/{pid}/cgroup"))?;
        // v1 lines name their controllers ("4:cpu,cpuacct:/path"); the v2 line has none.
        let v1 = |controller: &str| {
            text.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, list, path) = (f.next()?, f.next()?, f.next()?);
                list.split(',')
                    .any(|c| c == controller)
                    .then(|| (list.to_string(), path.to_string()))
            })
        };
        let v2_path = text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_string);
        let unified = if self.exists("sys/fs/cgroup/cgroup.controllers") {
            "sys/fs/cgroup"
        } else {
            "sys/fs/cgroup/unified"
        };
        match (v1("cpu"), v1("memory")) {
            (None, None) => {
                let path = v2_path?;
                let dir = format!("{unified}{}", path.trim_end_matches('/'));
                let cpu_stat = self
                    .read_file(&format!("{dir}/cpu.stat"))
                    .unwrap_or_default();
                let events = self
                    .read_file(&format!("{dir}/memory.events"))
                    .unwrap_or_default();
                let quota_cpus = self.read_file(&format!("{dir}/cpu.max")).and_then(|m| {
                    let mut p = m.split_whitespace();
                    let quota: f64 = p.next()?.parse().ok()?; // "max": no quota
                    let period: f64 = p.next().unwrap_or("100000").parse().ok()?;
                    (period > 0.0).then(|| quota / period)
                });
                Some(CgroupReading {
                    version: 2,
                    memory_path: path.clone(),
                    path,
                    cpu_usage_us: stat_value(&cpu_stat, "usage_usec"),
                    nr_throttled: stat_value(&cpu_stat, "nr_throttled"),
                    throttled_us: stat_value(&cpu_stat, "throttled_usec"),
                    quota_cpus,
                    memory_bytes: self
                        .read_file(&format!("{dir}/memory.current"))
                        .and_then(|t| t.trim().parse().ok()),
                    memory_limit_bytes: self
                        .read_file(&format!("{dir}/memory.max"))
                        .and_then(|t| limit(&t)),
                    oom_kills: stat_value(&events, "oom_kill"),
                })
            }
            (cpu, memory) => {
                let dir = |hierarchy: &Option<(String, String)>, controller: &str| {
                    hierarchy.as_ref().map(|(list, path)| {
                        // hybrid hosts mount "cpu,cpuacct" and link "cpu" to it
                        let mount = if self.exists(&format!("sys/fs/cgroup/{list}")) {
                            list.as_str()
                        } else {
                            controller
                        };
                        format!("sys/fs/cgroup/{mount}{}", path.trim_end_matches('/'))
                    })
                };
                let cpu_dir = dir(&cpu, "cpu");
                let acct_dir = dir(&v1("cpuacct"), "cpuacct");
                let mem_dir = dir(&memory, "memory");
                let read = |d: &Option<String>, f: &str| {
                    d.as_ref().and_then(|d| self.read_file(&format!("{d}/{f}")))
                };
                let cpu_stat = read(&cpu_dir, "cpu.stat").unwrap_or_default();
                let quota =
                    read(&cpu_dir, "cpu.cfs_quota_us").and_then(|t| t.trim().parse::<i64>().ok());
                let period =
                    read(&cpu_dir, "cpu.cfs_period_us").and_then(|t| t.trim().parse::<i64>().ok());
                let oom = read(&mem_dir, "memory.oom_control").unwrap_or_default();
                let memory_path = memory.as_ref().map(|(_, p)| p.clone()).unwrap_or_default();
                Some(CgroupReading {
                    version: 1,
                    path: cpu.or(memory).map(|(_, p)| p).unwrap_or_default(),
                    memory_path,
                    cpu_usage_us: read(&acct_dir, "cpuacct.usage")
                        .and_then(|t| t.trim().parse::<u64>().ok())
                        .map(|ns| ns / 1000),
                    nr_throttled: stat_value(&cpu_stat, "nr_throttled"),
                    throttled_us: stat_value(&cpu_stat, "throttled_time").map(|ns| ns / 1000),
                    quota_cpus: match (quota, period) {
                        (Some(q), Some(p)) if q > 0 && p > 0 => Some(q as f64 / p as f64),
                        _ => None,
                    },
                    memory_bytes: read(&mem_dir, "memory.usage_in_bytes")
                        .and_then(|t| t.trim().parse().ok()),
                    memory_limit_bytes: read(&mem_dir, "memory.limit_in_bytes")
                        .and_then(|t| limit(&t)),
                    oom_kills: stat_value(&oom, "oom_kill"),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn cgroup_v2_figures_and_limits() {
        let root = tree(&[
            ("proc/7/cgroup", "0::/kubepods/pod1/ctr\n"),
            ("sys/fs/cgroup/cgroup.controllers", "cpu memory\n"),
            (
                "sys/fs/cgroup/kubepods/pod1/ctr/cpu.stat",
                "usage_usec 5000000\nnr_periods 90\nnr_throttled 12\nthrottled_usec 340000\n",
            ),
            ("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "50000 100000\n"),
            (
                "sys/fs/cgroup/kubepods/pod1/ctr/memory.current",
                "104857600\n",
            ),
            ("sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n"),
            (
                "sys/fs/cgroup/kubepods/pod1/ctr/memory.events",
                "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
            ),
        ]);
        let c = ProcFs::new(root.path()).cgroup(7).unwrap();
        assert_eq!(c.version, 2);
        assert_eq!(c.path, "/kubepods/pod1/ctr");
        assert_eq!(
            (c.cpu_usage_us, c.nr_throttled, c.throttled_us),
            (Some(5_000_000), Some(12), Some(340_000))
        );
        assert_eq!(c.quota_cpus, Some(0.5));
        assert_eq!(
            (c.memory_bytes, c.memory_limit_bytes, c.oom_kills),
            (Some(104_857_600), None, Some(1))
        );
        let mut later = c.clone();
        later.cpu_usage_us = Some(5_500_000);
        later.nr_throttled = Some(17);
        later.throttled_us = Some(440_000);
        let s = CgroupSecond::between(&c, &later, 1.0);
        assert_eq!(
            (s.cpu_pct, s.throttled_periods, s.throttled_ms),
            (Some(50.0), Some(5), Some(100.0))
        );
    }

    #[test]
    fn cgroup_v1_hybrid_layout() {
        let root = tree(&[
            (
                "proc/7/cgroup",
                "4:memory:/app\n2:cpuacct:/app\n1:cpu:/app\n0::/\n",
            ),
            (
                "sys/fs/cgroup/cpu/app/cpu.stat",
                "nr_periods 30\nnr_throttled 4\nthrottled_time 80000000\n",
            ),
            ("sys/fs/cgroup/cpu/app/cpu.cfs_quota_us", "20000\n"),
            ("sys/fs/cgroup/cpu/app/cpu.cfs_period_us", "100000\n"),
            ("sys/fs/cgroup/cpuacct/app/cpuacct.usage", "3000000000\n"),
            ("sys/fs/cgroup/memory/app/memory.usage_in_bytes", "2048\n"),
            (
                "sys/fs/cgroup/memory/app/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "sys/fs/cgroup/memory/app/memory.oom_control",
                "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
            ),
        ]);
        let c = ProcFs::new(root.path()).cgroup(7).unwrap();
        assert_eq!(
            (c.version, c.path.as_str(), c.memory_path.as_str()),
            (1, "/app", "/app")
        );
        assert_eq!(
            (c.cpu_usage_us, c.nr_throttled, c.throttled_us),
            (Some(3_000_000), Some(4), Some(80_000))
        );
        assert_eq!(c.quota_cpus, Some(0.2));
        assert_eq!(
            (c.memory_bytes, c.memory_limit_bytes, c.oom_kills),
            (Some(2048), None, Some(2))
        );
    }

    #[test]
    fn missing_or_odd_files_give_none_not_a_panic() {
        let root = tree(&[("proc/7/cgroup", "garbage\n::\n0::\n")]);
        let c = ProcFs::new(root.path()).cgroup(7).unwrap();
        assert_eq!(c.cpu_usage_us, None);
        assert_eq!(ProcFs::new(root.path()).cgroup(8), None);
    }
}
