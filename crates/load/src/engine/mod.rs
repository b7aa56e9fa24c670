//! Running one load phase: generator threads (one single-threaded tokio runtime each, like
//! wrk's threads), a pacer thread for the open model, and the collector on the caller's
//! thread that merges the workers' seconds and hands them out in order.
//!
//! The open model never slows down to the target's pace: a late request still counts from
//! its scheduled time, and what could not be sent at all is counted as unsent.
//!
//! By job, from the phase down to one request:
//! - here: the phase (threads started, the collector's loop, how it ended);
//! - [`collector`]: the threads' seconds merged in order, a dead target noticed;
//! - [`pacer`]: the open model's arrivals released at their times;
//! - [`worker`]: one load thread and its connections' tasks, by model;
//! - [`sender`]: the closed model's back-to-back loop and the open model's arrival loop;
//! - [`vu`]: a plan's virtual users and their steps;
//! - [`streams`]: `--http2-streams`, several streams of one connection;
//! - [`hedged`]: `--hedge`'s race of two copies;
//! - [`request`]: one request on one connection (connect, time out, resend, record);
//! - [`local`]: what a thread's tasks share, and the waits every model uses.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use kiln_record::{ErrorKind, PhaseEnd, SecondRecord};
use tokio::sync::{watch, Notify};

use crate::connection::{ConnectionSetup, KeptConnections};
use crate::plan::{self, LoadPlan, Model, VuStage};
use crate::recorder::WorkerRecorder;
use crate::scenario::Workload;
use crate::schedule::ArrivalSchedule;
use crate::self_usage::SelfUsage;

mod collector;
mod hedged;
mod local;
mod pacer;
mod request;
mod sender;
mod streams;
mod vu;
mod worker;

use collector::Collector;
use pacer::run_pacer;
use worker::{run_worker, Connections};

/// One phase: a warm-up or a measured run.
#[derive(Clone, Debug)]
pub struct PhaseSpec {
    pub name: String,
    pub measured: bool,
    /// Start at this wall-clock time (`--start-at`: shards of one plan start together);
    /// `None`, or a time already past, starts at once.
    pub start_at: Option<SystemTime>,
}

/// Asks a running phase to stop early, from any thread (e.g. Ctrl-C).
#[derive(Clone, Default)]
pub struct StopSignal {
    flag: Arc<AtomicBool>,
    reason: Arc<Mutex<Option<String>>>,
    /// The signal that stopped the run (SIGINT, SIGTERM, SIGHUP), 0 when none did.
    signal: Arc<std::sync::atomic::AtomicI32>,
    /// Ends the running phase as if its time were up (not early, not interrupted): a
    /// warm-up that has settled. Cleared when a phase starts.
    phase_done: Arc<AtomicBool>,
}

impl StopSignal {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops with a reason; the first reason given is kept.
    pub fn stop(&self, reason: &str) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert_with(|| reason.to_string());
        }
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Stops because the user (or the system) sent `signal`.
    pub fn interrupt(&self, signal: i32, reason: &str) {
        let _ = self
            .signal
            .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
        self.stop(reason);
    }

    /// The signal that interrupted the run, if one did (a stop for another reason is not one).
    pub fn interrupted_by(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// Ends the phase that is running now as complete: the next phase runs as planned.
    pub fn end_phase(&self) {
        self.phase_done.store(true, Ordering::SeqCst);
    }

    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    pub fn reason(&self) -> Option<String> {
        self.reason.lock().ok().and_then(|r| r.clone())
    }
}

/// An error that prevents a phase from starting.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The plan cannot run here (a TLS name, the open-files limit).
    #[error(transparent)]
    Setup(#[from] crate::PlanError),
    #[error("cannot connect to {addr}: {kind}")]
    Unreachable {
        addr: String,
        kind: String,
        /// No answer at all within the time (not refused, nor a TLS or name error): the
        /// target may be there and overwhelmed, which a record of the run should show.
        timed_out: bool,
    },
    #[error("cannot start a load thread: {0}")]
    Thread(std::io::Error),
    #[error("a load thread failed ({0}); the phase's numbers are incomplete")]
    Panicked(String),
}

/// Opens one connection before any load, so a wrong port or a dead host is one clear error
/// instead of a run full of failures.
pub fn preflight(plan: &LoadPlan) -> Result<(), LoadError> {
    crate::limits::check_open_files(plan)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LoadError::Thread)?;
    // no connection kept: the check's own is closed
    let mut setups = vec![ConnectionSetup::new(plan, None)?];
    // A plan's other origins, each checked the same way.
    setups.extend(origin_setups(plan)?.into_iter().skip(1));
    // Hedging's replicas, each checked the same way.
    setups.extend(replica_setups(plan, None)?);
    for setup in &setups {
        preflight_one(plan, setup, &rt)?;
    }
    Ok(())
}

/// One connection to each origin of a plan's workload (none without one).
fn origin_setups(plan: &LoadPlan) -> Result<Vec<ConnectionSetup>, crate::PlanError> {
    plan.workload.as_ref().map_or(Ok(Vec::new()), |w| {
        w.origins
            .iter()
            .map(|t| {
                ConnectionSetup::for_origin(t, plan.insecure, plan.connect_timeout, plan.http2)
            })
            .collect()
    })
}

/// One connection setup per `--replica`: the URL's request, sent to another target.
fn replica_setups(
    plan: &LoadPlan,
    kept: Option<&KeptConnections>,
) -> Result<Vec<ConnectionSetup>, crate::PlanError> {
    let Some(hedge) = &plan.hedge else {
        return Ok(Vec::new());
    };
    hedge
        .replicas
        .iter()
        .map(|target| {
            let mut replica = plan.clone();
            replica.target = target.clone();
            ConnectionSetup::new(&replica, kept)
        })
        .collect()
}

fn preflight_one(
    plan: &LoadPlan,
    setup: &ConnectionSetup,
    rt: &tokio::runtime::Runtime,
) -> Result<(), LoadError> {
    let local = tokio::task::LocalSet::new();
    // no longer than the run: `-d 3s` against a listener whose accept queue is full waited
    // the whole --connect-timeout (5 s) before it said anything
    let bound = plan
        .connect_timeout
        .min(plan.duration.max(Duration::from_secs(1)));
    local
        .block_on(rt, async {
            match tokio::time::timeout(bound, setup.connect()).await {
                Ok(connected) => connected.map(drop),
                Err(_) => Err(ErrorKind::ConnectTimeout),
            }
        })
        .map_err(|kind| LoadError::Unreachable {
            addr: format!("{} ({})", setup.target.authority, setup.target.addr),
            timed_out: kind == ErrorKind::ConnectTimeout,
            kind: match (kind, setup.tls_failure()) {
                (ErrorKind::Tls, Some(why)) => {
                    let hint = if why.contains("certificate") && !plan.insecure {
                        " (-k accepts a self-signed certificate)"
                    } else {
                        ""
                    };
                    format!("TLS: {why}{hint}")
                }
                (ErrorKind::ConnectTimeout, _) => format!(
                    "{} (no connection within {}: the listener's accept queue may be full, or \
                     something drops the SYN)",
                    kind.label(),
                    kiln_record::text::us(bound.as_micros() as u64)
                ),
                _ => kind.label().to_string(),
            },
        })
}

/// State shared by the workers, the pacer and the collector of one phase.
struct PhaseShared {
    t0: Instant,
    deadline: Instant,
    stopped: AtomicBool,
    /// Stopped early (Ctrl-C, a dead target, a watched process gone): requests in flight are
    /// cut and counted as abandoned instead of waited for.
    stopped_early: AtomicBool,
    /// Connection tasks (open model) currently waiting for an arrival.
    idle: AtomicUsize,
    /// Connection tasks (open model) running, against `max_connections`.
    connection_tasks: AtomicUsize,
    unsent: AtomicU64,
    scheduled: AtomicU64,
    /// The open model's queue of intended send times.
    arrivals: Option<async_channel::Receiver<Instant>>,
    grow: Vec<Notify>,
    /// The plan's own end came before the deadline: its iterations are done, or its data
    /// ran out (`at_end: stop`). Not an early stop.
    finished: AtomicBool,
    /// Iterations begun (against a closed plan's `iterations`), and VUs made (their ids).
    iterations_begun: AtomicU64,
    vus_made: AtomicU64,
    /// Why a plan's workload could not go on (a data file that became unreadable).
    workload_failure: Mutex<Option<String>>,
}

impl PhaseShared {
    fn should_stop(&self) -> bool {
        self.should_stop_at(Instant::now())
    }

    fn should_stop_at(&self, now: Instant) -> bool {
        self.stopped.load(Ordering::Relaxed) || now >= self.deadline
    }

    fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
    }

    fn fail(&self, why: String) {
        if let Ok(mut f) = self.workload_failure.lock() {
            f.get_or_insert(why);
        }
    }

    fn workload_failure(&self) -> Option<String> {
        self.workload_failure.lock().ok().and_then(|f| f.clone())
    }

    /// Takes one of a closed plan's iterations; false when they are all taken.
    fn take_iteration(&self, workload: &Workload) -> bool {
        match workload.iterations {
            None => true,
            Some(n) => self.iterations_begun.fetch_add(1, Ordering::SeqCst) < n,
        }
    }

    /// A seed for VUs' generators that differs from run to run.
    fn t0_seed(&self) -> u64 {
        kiln_record::clock::unix_ns_now()
    }

    fn new_vu_id(&self) -> u64 {
        self.vus_made.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether closed-model VU `g` is within the stages' count now.
    fn vu_active(&self, stages: &[VuStage], g: usize) -> bool {
        plan::vus_at(stages, self.t0.elapsed()) > g as f64
    }
}

/// Runs one phase and calls `on_second` with each second's merged record, in order, as the
/// run goes. Returns how the phase ended. Stops early when `stop` is signalled or the target
/// stops answering (see `LoadPlan::dead_after`); the reason is in `PhaseEnd::stopped_early`.
/// `kept` carries idle connections from one phase of a run to the next: give each phase of a
/// run the same one.
pub fn run_phase(
    plan: &LoadPlan,
    phase: &PhaseSpec,
    kept: &KeptConnections,
    stop: &StopSignal,
    on_second: &mut dyn FnMut(&SecondRecord),
) -> Result<PhaseEnd, LoadError> {
    let setup = Arc::new(ConnectionSetup::new(plan, Some(kept))?);
    let origins = Arc::new(origin_setups(plan)?);
    let replicas = Arc::new(replica_setups(plan, Some(kept))?);
    stop.phase_done.store(false, Ordering::SeqCst);
    let usage_before = SelfUsage::now();
    let threads = plan.threads;
    let open = matches!(plan.model, Model::Open { .. });
    // Open-model connections are made before the start so the first arrivals are not late.
    let lead = if open {
        Duration::from_millis(300)
    } else {
        Duration::from_millis(20)
    };
    // a start time far enough ahead replaces the lead (the connections are made before it)
    let lead = phase
        .start_at
        .and_then(|at| at.duration_since(SystemTime::now()).ok())
        .map_or(lead, |until| until.max(lead));
    let t0 = Instant::now() + lead;
    let t0_unix_ms = SystemTime::now()
        .checked_add(lead)
        .map_or(0, kiln_record::clock::unix_ms);
    let (arrivals_tx, arrivals_rx) = if open {
        // unbounded, and bounded by the pacer: a bounded channel's million slots are
        // written when it is made (24 MB resident in every open-model run)
        let (tx, rx) = async_channel::unbounded();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let shared = Arc::new(PhaseShared {
        t0,
        deadline: t0 + plan.duration,
        stopped: AtomicBool::new(false),
        stopped_early: AtomicBool::new(false),
        idle: AtomicUsize::new(0),
        connection_tasks: AtomicUsize::new(0),
        unsent: AtomicU64::new(0),
        scheduled: AtomicU64::new(0),
        arrivals: arrivals_rx,
        grow: (0..threads).map(|_| Notify::new()).collect(),
        finished: AtomicBool::new(false),
        iterations_begun: AtomicU64::new(0),
        vus_made: AtomicU64::new(0),
        workload_failure: Mutex::new(None),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let (to_collector, from_workers) = mpsc::channel();

    let mut handles = Vec::new();
    for worker in 0..threads {
        let (shared, setup, origins, replicas, plan, stop_rx, tx) = (
            shared.clone(),
            setup.clone(),
            origins.clone(),
            replicas.clone(),
            plan.clone(),
            stop_rx.clone(),
            to_collector.clone(),
        );
        let name = phase.name.clone();
        let handle = thread::Builder::new()
            .name(format!("kiln-load-{worker}"))
            .spawn(move || {
                let mut recorder = WorkerRecorder::new(worker, &name, shared.t0, open, tx);
                if let Some(w) = &plan.workload {
                    recorder = recorder.with_names(w.names.clone());
                }
                if let Some(h) = &plan.hedge {
                    recorder = recorder.with_hedge(h.targets());
                }
                if let Some(sent) = plan.request.grpc_stream_sent {
                    recorder = recorder.with_grpc_stream(sent);
                }
                let connections = Connections {
                    setup,
                    origins,
                    replicas,
                };
                run_worker(worker, &plan, shared, connections, stop_rx, recorder)
            })
            .map_err(LoadError::Thread)?;
        handles.push(handle);
    }
    drop(to_collector);
    let mut pacer = match (&plan.model, arrivals_tx) {
        (
            Model::Open {
                stages, arrivals, ..
            },
            Some(tx),
        ) => {
            let schedule = ArrivalSchedule::new(0.0, stages).with_arrivals(*arrivals);
            // a shard releases only its own arrivals, at the whole schedule's times
            let shard = plan.shard;
            let schedule = schedule
                .enumerate()
                .filter(move |(j, _)| shard.is_none_or(|s| s.takes(*j as u64)))
                .map(|(_, due)| due);
            let shared = shared.clone();
            Some(
                thread::Builder::new()
                    .name("kiln-pacer".into())
                    .spawn(move || run_pacer(schedule, &shared, tx))
                    .map_err(LoadError::Thread)?,
            )
        }
        _ => None,
    };

    let mut collector = Collector::new(threads, plan.dead_after, t0_unix_ms);
    collector.hedge = plan.hedge.clone().map(|h| (h, plan.timeout));
    let mut stop_reason: Option<String> = None;
    let mut input_failed = false;
    let mut stopped_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if stopped_at.is_none() {
            let early = stop
                .reason()
                .or_else(|| setup.local_failure())
                .or_else(|| origins.iter().find_map(ConnectionSetup::local_failure))
                .or_else(|| shared.workload_failure())
                .or_else(|| collector.dead_reason.clone());
            let finished =
                shared.finished.load(Ordering::SeqCst) || stop.phase_done.load(Ordering::SeqCst);
            if early.is_some() || finished || now >= shared.deadline {
                shared
                    .stopped_early
                    .store(early.is_some(), Ordering::SeqCst);
                // the workload's failure is set once and kept: the reason is it, or came
                // before it
                let input_failure = shared.workload_failure();
                input_failed = input_failure.is_some() && early == input_failure;
                stop_reason = early;
                stopped_at = Some(now.min(shared.deadline));
                shared.stopped.store(true, Ordering::SeqCst);
                let _ = stop_tx.send(true);
                // The pacer's last count of scheduled arrivals must be in before the
                // workers' last second is emitted; it stops within one 50 ms nap.
                if let Some(pacer) = pacer.take() {
                    let _ = pacer.join();
                }
            }
        }
        let wait = match stopped_at {
            None => shared
                .deadline
                .saturating_duration_since(now)
                .min(Duration::from_millis(100)),
            Some(_) => Duration::from_millis(100),
        };
        match from_workers.recv_timeout(wait.max(Duration::from_millis(1))) {
            Ok(msg) => collector.take(msg),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        collector.emit_ready(&shared.scheduled, on_second);
    }
    if let Some(pacer) = pacer.take() {
        shared.stopped.store(true, Ordering::SeqCst);
        let _ = pacer.join();
    }
    collector.emit_ready(&shared.scheduled, on_second);
    // A worker that panicked took its requests with it: the phase cannot be reported whole.
    let mut panicked = None;
    for handle in handles {
        if let Err(payload) = handle.join() {
            panicked.get_or_insert_with(|| panic_message(payload.as_ref()));
        }
    }
    if let Some(message) = panicked {
        return Err(LoadError::Panicked(message));
    }
    let left_in_queue = shared.arrivals.as_ref().map_or(0, |q| q.len() as u64);
    let usage = SelfUsage::now().since(&usage_before);
    let stopped_at = stopped_at.unwrap_or(shared.deadline);
    let window_us = stopped_at.saturating_duration_since(t0).as_micros() as u64;
    Ok(PhaseEnd {
        phase: phase.name.clone(),
        measured: phase.measured,
        // the load window: responses that came in the grace after it were sent in it
        duration_us: window_us,
        unsent: shared.unsent.load(Ordering::SeqCst) + left_in_queue,
        abandoned: collector.abandoned,
        abandoned_connecting: collector.connecting,
        connections_opened: collector.connections_opened,
        connections_kept: collector.connections_kept,
        kiln_cpu_user_us: usage.user_us,
        kiln_cpu_system_us: usage.system_us,
        kiln_max_rss_kib: usage.max_rss_kib,
        stopped_early: stop_reason,
        input_failed,
        ended_because: None,
    })
}

/// The text a panic carried, when it carried one.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateStage;

    fn shared_for(
        t0: Instant,
        duration: Duration,
    ) -> (PhaseShared, async_channel::Sender<Instant>) {
        let (tx, rx) = async_channel::bounded(16);
        let shared = PhaseShared {
            t0,
            deadline: t0 + duration,
            stopped: AtomicBool::new(false),
            stopped_early: AtomicBool::new(false),
            idle: AtomicUsize::new(0),
            connection_tasks: AtomicUsize::new(0),
            unsent: AtomicU64::new(0),
            scheduled: AtomicU64::new(0),
            arrivals: Some(rx),
            grow: vec![Notify::new()],
            finished: AtomicBool::new(false),
            iterations_begun: AtomicU64::new(0),
            vus_made: AtomicU64::new(0),
            workload_failure: Mutex::new(None),
        };
        (shared, tx)
    }

    /// Feeds seconds of (sent, ended, responses, errors) to a collector with --dead-after 5s.
    fn dead_after_5s(seconds: &[(u64, u64, u64, u64)]) -> Option<String> {
        let mut c = Collector::new(1, Duration::from_secs(5), 0);
        for (i, &(sent, ended, responses, errors)) in seconds.iter().enumerate() {
            let mut s = SecondRecord {
                second: i as u32,
                sent,
                requests: ended,
                ..Default::default()
            };
            if responses > 0 {
                s.status.insert(200, responses);
            }
            if errors > 0 {
                s.errors.insert(ErrorKind::Timeout, errors);
            }
            c.watch_for_dead_target(&s);
        }
        c.dead_reason
    }

    #[test]
    fn a_target_that_accepts_and_never_answers_is_dead_after_the_quiet_time() {
        // 10 connections send at once and nothing comes back, not even a timeout yet.
        let mut seconds = vec![(10, 0, 0, 0)];
        seconds.extend([(0, 0, 0, 0); 4]);
        let reason = dead_after_5s(&seconds).expect("dead after 5 quiet seconds");
        assert!(reason.contains("10 waiting for an answer"), "{reason}");
        // Four quiet seconds are not five.
        assert_eq!(dead_after_5s(&seconds[..4]), None);
    }

    #[test]
    fn a_target_that_answers_is_never_dead_and_idle_is_not_dead() {
        // Answers every second.
        assert_eq!(dead_after_5s(&[(10, 10, 10, 0); 12]), None);
        // Nothing sent and nothing waiting (think time, a ramp): quiet but not dead.
        let mut seconds = vec![(3, 3, 3, 0)];
        seconds.extend([(0, 0, 0, 0); 10]);
        assert_eq!(dead_after_5s(&seconds), None);
        // A stall after answers: the requests sent before it wait, so it is dead.
        let mut seconds = vec![(3, 2, 2, 0)];
        seconds.extend([(0, 0, 0, 0); 5]);
        assert!(dead_after_5s(&seconds).is_some());
    }

    fn steady(rate: f64, secs: u64) -> ArrivalSchedule {
        ArrivalSchedule::new(0.0, &RateStage::steady(rate, Duration::from_secs(secs)))
    }

    #[test]
    fn a_pacer_starved_past_the_deadline_counts_every_arrival_as_unsent() {
        // The whole 2 s phase went by before the pacer ran at all.
        let (shared, tx) = shared_for(
            Instant::now() - Duration::from_secs(3),
            Duration::from_secs(2),
        );
        run_pacer(steady(100.0, 2), &shared, tx);
        assert_eq!(shared.scheduled.load(Ordering::SeqCst), 200);
        assert_eq!(shared.unsent.load(Ordering::SeqCst), 200);
    }

    #[test]
    fn a_pacer_stopped_early_counts_only_what_was_due_before_the_stop() {
        // Ctrl-C one second into a 10 s phase that the pacer has not served yet: the 100
        // arrivals due in that second were scheduled and not sent; the rest never were due.
        let (shared, tx) = shared_for(
            Instant::now() - Duration::from_secs(1),
            Duration::from_secs(10),
        );
        shared.stopped.store(true, Ordering::SeqCst);
        run_pacer(steady(100.0, 10), &shared, tx);
        let scheduled = shared.scheduled.load(Ordering::SeqCst);
        assert!((100..=102).contains(&scheduled), "{scheduled}");
        assert_eq!(shared.unsent.load(Ordering::SeqCst), scheduled);
    }

    #[test]
    fn an_unhurried_pacer_releases_every_arrival_into_the_queue() {
        let (shared, tx) = shared_for(Instant::now(), Duration::from_millis(100));
        let queue = shared.arrivals.clone().unwrap();
        run_pacer(
            ArrivalSchedule::new(
                0.0,
                &[RateStage {
                    duration: Duration::from_millis(100),
                    target_rate: 200.0,
                }],
            ),
            &shared,
            tx,
        );
        // 0 -> 200/s over 0.1 s: 10 arrivals.
        assert_eq!(queue.len(), 10);
        assert_eq!(shared.scheduled.load(Ordering::SeqCst), 10);
        assert_eq!(shared.unsent.load(Ordering::SeqCst), 0);
    }
}
