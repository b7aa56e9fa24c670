//! A JVM's threads by what they do, from their names as the kernel keeps them (15 bytes:
//! `C2 CompilerThre`), so that a thread group's CPU says "JIT compilers" or "GC" rather than
//! a name. The names are HotSpot's, the same on JDK 17 and 25 (checked with G1, Parallel,
//! Serial, ZGC and Shenandoah), and the log4j2 and logback background threads'.

use serde::{Deserialize, Serialize};

/// What a JVM thread does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JvmThreadRole {
    /// The application's own threads (request pools, `main`).
    Application,
    /// C1 and C2 (and JVMCI) compiler threads, the code-cache sweeper.
    Compiler,
    /// Garbage-collector workers and concurrent threads (G1, Parallel, ZGC, Shenandoah).
    Gc,
    /// The VM thread (safepoint operations; Serial GC's collections) and its runtime workers.
    VmOperations,
    /// An asynchronous logger's consumer (log4j2 `Log4j2-TF-*`, logback `AsyncAppender-*`).
    Logging,
    /// The JVM's housekeeping: reference handling, finalizer, signal dispatcher, JFR.
    JvmService,
    /// Threads the sampler did not name one by one (`(other threads)`).
    Unnamed,
}

impl JvmThreadRole {
    pub fn label(self) -> &'static str {
        match self {
            Self::Application => "application",
            Self::Compiler => "JIT compilers",
            Self::Gc => "GC",
            Self::VmOperations => "VM thread",
            Self::Logging => "async logging",
            Self::JvmService => "JVM services",
            Self::Unnamed => "other threads",
        }
    }
}

const COMPILER: &[&str] = &["C1 Compiler", "C2 Compiler", "JVMCI", "Sweeper thread"];
const GC: &[&str] = &[
    "GC Thread",
    "G1 ",
    "ZDirector",
    "ZDriver",
    "ZWorker",
    "ZStat",
    "ZUncommitter",
    "ZUnmapper",
    "ZRelocate",
    "Shenandoah",
];
const VM_OPERATIONS: &[&str] = &["VM Thread", "RuntimeWorker"];
const LOGGING: &[&str] = &["Log4j2-TF", "AsyncAppender-", "logback-"];
const JVM_SERVICE: &[&str] = &[
    "Signal Dispatch",
    "Finalizer",
    "Reference Handl",
    "Common-Cleaner",
    "Notification Th",
    "Service Thread",
    "Monitor Deflati",
    "VM Periodic Tas",
    "Attach Listener",
    "JFR ",
    "process reaper",
];

/// The role of a thread (or of a thread group, `GC Thread#*`) by its name.
pub fn role_of(name: &str) -> JvmThreadRole {
    let has = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
    if name.starts_with('(') {
        JvmThreadRole::Unnamed
    } else if has(COMPILER) {
        JvmThreadRole::Compiler
    } else if has(GC) {
        JvmThreadRole::Gc
    } else if has(VM_OPERATIONS) {
        JvmThreadRole::VmOperations
    } else if has(LOGGING) {
        JvmThreadRole::Logging
    } else if has(JVM_SERVICE) {
        JvmThreadRole::JvmService
    } else {
        JvmThreadRole::Application
    }
}

/// CPU of one role's threads over a window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoleCpu {
    pub role: JvmThreadRole,
    /// Percent of one core, on average over the window.
    pub cpu_pct: f64,
}

/// Thread groups' CPU (`(name, percent of a core)`, every group of the process once) added
/// up by role, the busiest first; roles with no threads are left out.
pub fn cpu_by_role<'a>(groups: impl IntoIterator<Item = (&'a str, f64)>) -> Vec<RoleCpu> {
    let mut sums: std::collections::BTreeMap<JvmThreadRole, f64> = Default::default();
    for (name, pct) in groups {
        *sums.entry(role_of(name)).or_default() += pct;
    }
    let mut roles: Vec<RoleCpu> = sums
        .into_iter()
        .map(|(role, cpu_pct)| RoleCpu { role, cpu_pct })
        .collect();
    roles.sort_by(|a, b| b.cpu_pct.total_cmp(&a.cpu_pct));
    roles
}

#[cfg(test)]
mod tests {
    use super::*;
    use JvmThreadRole::*;

    #[test]
    fn hotspot_threads_on_jdk_17_and_25_have_their_roles() {
        // /proc/PID/task/*/comm of JDK 17 and 25 with each collector (15 bytes at most)
        let seen = [
            ("C1 CompilerThre", Compiler),
            ("C2 CompilerThre", Compiler),
            ("Sweeper thread", Compiler),
            ("GC Thread#*", Gc),
            ("G1 Conc#*", Gc),
            ("G1 Main Marker", Gc),
            ("G1 Refine#*", Gc),
            ("G1 Service", Gc),
            ("ZDirector", Gc),
            ("ZDriver", Gc),
            ("ZDriverMajor", Gc),
            ("ZWorkerYoung#*", Gc),
            ("ZWorkerOld#*", Gc),
            ("ZUncommitter#*", Gc),
            ("ZUnmapper", Gc),
            ("ZStat", Gc),
            ("Shenandoah Cont", Gc),
            ("Shenandoah GC T", Gc),
            ("VM Thread", VmOperations),
            ("RuntimeWorker#*", VmOperations),
            ("Log4j2-TF-1-Asy", Logging),
            ("AsyncAppender-W", Logging),
            ("Signal Dispatch", JvmService),
            ("Reference Handl", JvmService),
            ("Common-Cleaner", JvmService),
            ("VM Periodic Tas", JvmService),
            ("Monitor Deflati", JvmService),
            ("java", Application),
            ("http-nio-8080-e", Application),
            ("pool-1-thread-*", Application),
            ("(other threads)", Unnamed),
        ];
        for (name, role) in seen {
            assert_eq!(role_of(name), role, "{name}");
        }
    }

    #[test]
    fn groups_add_up_by_role_busiest_first() {
        let roles = cpu_by_role([
            ("http-nio-8080-e", 80.0),
            ("C2 CompilerThre", 30.0),
            ("C1 CompilerThre", 5.0),
            ("GC Thread#*", 12.0),
            ("java", 1.0),
        ]);
        assert_eq!(
            roles,
            vec![
                RoleCpu {
                    role: Application,
                    cpu_pct: 81.0
                },
                RoleCpu {
                    role: Compiler,
                    cpu_pct: 35.0
                },
                RoleCpu {
                    role: Gc,
                    cpu_pct: 12.0
                },
            ]
        );
        assert!(cpu_by_role([]).is_empty());
    }
}
