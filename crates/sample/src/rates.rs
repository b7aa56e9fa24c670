//! From two readings to rates: the share of CPU time per category, a task's CPU use in
//! cores and its context switches per second.

use serde::{Deserialize, Serialize};

use crate::procfs::{CpuTimes, TaskStat};

/// Percent of one CPU's (or all CPUs') time spent in each state between two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSplit {
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub idle: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
}

/// `None` when no time passed or a counter went backwards (CPU hot-unplug, wrap).
pub fn host_cpu_split(before: &CpuTimes, after: &CpuTimes) -> Option<CpuSplit> {
    let total = after.total().checked_sub(before.total())?;
    if total == 0 {
        return None;
    }
    let pct = |a: u64, b: u64| a.saturating_sub(b) as f64 * 100.0 / total as f64;
    Some(CpuSplit {
        user: pct(after.user, before.user),
        nice: pct(after.nice, before.nice),
        system: pct(after.system, before.system),
        idle: pct(after.idle, before.idle),
        iowait: pct(after.iowait, before.iowait),
        irq: pct(after.irq, before.irq),
        softirq: pct(after.softirq, before.softirq),
        steal: pct(after.steal, before.steal),
    })
}

/// A process's or thread's use between two readings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskRates {
    pub id: i32,
    pub name: String,
    /// CPU in percent of one core (200 = two cores busy).
    pub cpu_user_pct: f64,
    pub cpu_system_pct: f64,
    pub voluntary_switches_per_s: Option<f64>,
    pub involuntary_switches_per_s: Option<f64>,
    /// Time its threads waited on a run queue for a CPU, in percent of one core (the
    /// kernel's schedstat; 100 = one thread runnable and not running all the time). None
    /// where schedstat was not read (and in records from before it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait_pct: Option<f64>,
}

/// Rates of one task over `seconds`, with `ticks_per_second` clock ticks (USER_HZ, 100 on
/// Linux). `None` when the readings are not of the same task or no time passed.
pub fn task_rates(
    before: &TaskStat,
    after: &TaskStat,
    seconds: f64,
    ticks_per_second: f64,
) -> Option<TaskRates> {
    if before.id != after.id || seconds <= 0.0 {
        return None;
    }
    let cpu = |a: u64, b: u64| a.saturating_sub(b) as f64 / ticks_per_second / seconds * 100.0;
    let per_s = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?) as f64 / seconds);
    Some(TaskRates {
        id: after.id,
        name: after.name.clone(),
        cpu_user_pct: cpu(after.utime, before.utime),
        cpu_system_pct: cpu(after.stime, before.stime),
        voluntary_switches_per_s: per_s(after.voluntary_switches, before.voluntary_switches),
        involuntary_switches_per_s: per_s(after.involuntary_switches, before.involuntary_switches),
        cpu_wait_pct: per_s(after.run_delay_ns, before.run_delay_ns).map(|ns| ns / 1e7),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_adds_up_to_one_hundred() {
        let a = CpuTimes {
            user: 100,
            system: 50,
            idle: 850,
            ..Default::default()
        };
        let b = CpuTimes {
            user: 160,
            system: 70,
            idle: 870,
            ..Default::default()
        };
        let s = host_cpu_split(&a, &b).unwrap();
        assert_eq!((s.user, s.system, s.idle), (60.0, 20.0, 20.0));
        assert!(host_cpu_split(&b, &a).is_none(), "counters went backwards");
        assert!(host_cpu_split(&a, &a).is_none(), "no time passed");
    }

    #[test]
    fn task_rates_are_per_second_in_percent_of_a_core() {
        let a = TaskStat {
            id: 7,
            utime: 100,
            stime: 10,
            voluntary_switches: Some(5),
            run_delay_ns: Some(1_000_000_000),
            ..Default::default()
        };
        let b = TaskStat {
            id: 7,
            utime: 250,
            stime: 60,
            voluntary_switches: Some(505),
            run_delay_ns: Some(1_500_000_000),
            ..Default::default()
        };
        let r = task_rates(&a, &b, 2.0, 100.0).unwrap();
        assert_eq!((r.cpu_user_pct, r.cpu_system_pct), (75.0, 25.0));
        assert_eq!(r.voluntary_switches_per_s, Some(250.0));
        assert_eq!(r.involuntary_switches_per_s, None);
        // 0.5 s waited for a CPU over 2 s: a quarter of a core's time
        assert_eq!(r.cpu_wait_pct, Some(25.0));
        assert!(task_rates(&a, &TaskStat { id: 8, ..b }, 2.0, 100.0).is_none());
    }
}
