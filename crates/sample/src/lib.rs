//! kiln's sampler: reads /proc (under a configurable root, so tests can use fixture trees)
//! and turns two readings into per-second figures: host CPU split per core, the target
//! process and each of its threads (CPU, context switches, RSS).
//!
//! `doctor` audits the host's settings the same way, under the same kind of root.
//!
//! It never panics on what the kernel writes: a missing, unreadable or malformed file makes
//! that figure `None` and the rest goes on.

pub mod cgroup;
pub mod clock;
pub mod counters;
pub mod doctor;
mod netlink;
pub mod noise;
pub mod procfs;
pub mod rates;
pub mod sampler;
pub mod sock_diag;
pub mod sockets;
pub mod target;
pub mod taskstats;
pub mod threads;

pub use cgroup::{CgroupReading, CgroupSecond};
pub use doctor::{Check, Doctor, DoctorRecord, Verdict, DOCTOR_FILE, DOCTOR_PART};
pub use noise::{NoiseProbe, NoiseSecond, NOISE_FILE, NOISE_PART, STARVED_MS};
pub use procfs::{CpuTimes, HostStat, ProcFs, SegmentsSeen, TaskStat};
pub use rates::{host_cpu_split, task_rates, CpuSplit, TaskRates};
pub use sampler::{
    thread_groups_mean, DroppingListener, HostMemory, KernelSecond, ProcessSecond, ResourceSecond,
    Sampler, ServingProcess, RESOURCES_PART,
};
pub use sockets::SocketSummary;
pub use target::TargetProcesses;
