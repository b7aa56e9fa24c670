//! Running one load phase: generator threads (one single-threaded tokio runtime each, like
//! wrk's threads), a pacer thread for the open model, and the collector on the caller's
//! thread that merges the workers' seconds and hands them out in order.
//!
//! The open model never slows down to the target's pace: a late request still counts from
//! its scheduled time, and what could not be sent at all is counted as unsent.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use std::thread;
use std::time::{Duration, Instant, SystemTime};

use kiln_record::{ErrorKind, PhaseEnd, SecondRecord};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use crate::connection::{Connection, ConnectionSetup, KeptConnections};
use crate::hedge::{HedgePlan, HedgeWorker, Refused};
use crate::plan::{self, IoPath, LoadPlan, Model, VuStage};
use crate::recorder::{NamedOutcome, WorkerMsg, WorkerRecorder};
use crate::scenario::{self, VuState, Workload};
use crate::schedule::ArrivalSchedule;
use crate::self_usage::SelfUsage;

mod streams;

/// Queued arrivals per phase before further ones are dropped and counted as unsent; bounds
/// memory when the target stalls for long.
const MAX_QUEUED_ARRIVALS: usize = 1_000_000;
/// After a failed connect in the closed model, wait this long before the next attempt so a
/// dead target is not hammered by a busy loop.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);
/// The longest wait for in-flight requests once a phase stops, with
/// [`LoadPlan::wait_after_deadline`].
const MAX_DRAIN: Duration = Duration::from_secs(30);
/// How long requests in flight at the deadline are waited for: a run ends at `-d`, as wrk's
/// and oha's do, not `--timeout` later (a `-d 3s` run against a full listen backlog took 11 s
/// and its rate was taken over all of it). Responses that come in this time are counted;
/// requests still waiting after it are reported as such.
const DEADLINE_GRACE: Duration = Duration::from_millis(500);

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

/// Waits until closed-model VU `g` is within the stages' count again; false when it never
/// will be before the phase ends, or the phase stopped.
async fn wait_until_active(
    state: &WorkerLocal,
    stages: &[VuStage],
    g: usize,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let Some(at) = plan::vu_active_from(stages, g, state.shared.t0.elapsed()) else {
        return false;
    };
    let at = state.shared.t0 + at;
    at < state.shared.deadline
        && sleep_or_stop(at.saturating_duration_since(Instant::now()), stop).await
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

/// Merges the workers' seconds; a second is handed out once every worker has sent it or
/// ended. Also watches for a target that stopped answering.
struct Collector {
    t0_unix_ms: u64,
    workers: usize,
    pending: BTreeMap<u32, SecondRecord>,
    last_second: Vec<Option<u32>>,
    done: Vec<bool>,
    scheduled_seen: u64,
    abandoned: u64,
    connecting: u64,
    connections_opened: u64,
    connections_kept: u64,
    dead_after_s: u32,
    /// The first second after the last one that had a response.
    quiet_since: u32,
    errors_while_quiet: BTreeMap<ErrorKind, u64>,
    /// Requests sent and not yet ended (answered or failed), as of the last emitted second.
    outstanding: u64,
    dead_reason: Option<String>,
    /// `--hedge`: a percentile delay is kept up to date from each merged second (bounded by
    /// the request timeout).
    hedge: Option<(HedgePlan, Duration)>,
}

impl Collector {
    fn new(workers: usize, dead_after: Duration, t0_unix_ms: u64) -> Self {
        Self {
            t0_unix_ms,
            workers,
            pending: BTreeMap::new(),
            last_second: vec![None; workers],
            done: vec![false; workers],
            scheduled_seen: 0,
            abandoned: 0,
            connecting: 0,
            connections_opened: 0,
            connections_kept: 0,
            dead_after_s: dead_after.as_secs().max(1) as u32,
            quiet_since: 0,
            errors_while_quiet: BTreeMap::new(),
            outstanding: 0,
            dead_reason: None,
            hedge: None,
        }
    }

    fn take(&mut self, msg: WorkerMsg) {
        match msg {
            WorkerMsg::Second { worker, record } => {
                self.last_second[worker] = Some(record.second);
                if record.second == u32::MAX {
                    return;
                }
                match self.pending.get_mut(&record.second) {
                    Some(merged) => merged.merge(&record),
                    None => {
                        self.pending.insert(record.second, *record);
                    }
                }
            }
            WorkerMsg::Done {
                worker,
                abandoned,
                connecting,
                connections_opened,
                connections_kept,
            } => {
                self.done[worker] = true;
                self.abandoned += abandoned;
                self.connecting += connecting;
                self.connections_opened += connections_opened;
                self.connections_kept += connections_kept;
            }
        }
    }

    fn emit_ready(&mut self, scheduled: &AtomicU64, on_second: &mut dyn FnMut(&SecondRecord)) {
        while let Some((&second, _)) = self.pending.first_key_value() {
            let complete = (0..self.workers)
                .all(|w| self.done[w] || self.last_second[w].is_some_and(|s| s >= second));
            if !complete {
                break;
            }
            let Some(mut record) = self.pending.remove(&second) else {
                break;
            };
            let scheduled_now = scheduled.load(Ordering::SeqCst);
            record.scheduled = scheduled_now - self.scheduled_seen;
            record.fill_percentiles();
            record.unix_ms = self.t0_unix_ms + (u64::from(second) + 1) * 1000;
            self.scheduled_seen = scheduled_now;
            self.watch_for_dead_target(&record);
            if let Some((hedge, max)) = &self.hedge {
                hedge.observe(&mut record, *max);
            }
            on_second(&record);
        }
    }

    /// The target is dead when nothing answered for `dead_after` seconds while requests failed
    /// or waited: a target that accepts and never answers is as dead as one that refuses.
    fn watch_for_dead_target(&mut self, s: &SecondRecord) {
        self.outstanding = (self.outstanding + s.sent).saturating_sub(s.requests);
        if s.responses() > 0 {
            self.quiet_since = s.second + 1;
            self.errors_while_quiet.clear();
            return;
        }
        for (kind, n) in &s.errors {
            *self.errors_while_quiet.entry(*kind).or_default() += n;
        }
        let quiet = (s.second + 1).saturating_sub(self.quiet_since);
        if quiet >= self.dead_after_s
            && (!self.errors_while_quiet.is_empty() || self.outstanding > 0)
            && self.dead_reason.is_none()
        {
            let mut errors: Vec<String> = self
                .errors_while_quiet
                .iter()
                .map(|(k, n)| format!("{n} {}", k.label()))
                .collect();
            if self.outstanding > 0 {
                errors.push(format!("{} waiting for an answer", self.outstanding));
            }
            self.dead_reason = Some(format!(
                "the target stopped answering: no response for {quiet} s ({})",
                errors.join(", ")
            ));
        }
    }
}

/// Pushes each arrival into the queue at its due time. A sleeping thread wakes within tens
/// of microseconds on Linux, far closer than an async timer's millisecond tick.
fn run_pacer(
    schedule: impl Iterator<Item = Duration>,
    shared: &PhaseShared,
    tx: async_channel::Sender<Instant>,
) {
    let mut next_worker = 0usize;
    let mut arrivals = schedule.map(|offset| shared.t0 + offset);
    while let Some(due) = arrivals.next() {
        if !sleep_until(due, shared) {
            // Arrivals due before the stop were scheduled even if this thread was too late
            // to release them (a starved CPU at the end of a phase): they count as unsent.
            let stopped = Instant::now().min(shared.deadline);
            let missed = std::iter::once(due)
                .chain(arrivals)
                .take_while(|&d| d < stopped)
                .count() as u64;
            shared.scheduled.fetch_add(missed, Ordering::SeqCst);
            shared.unsent.fetch_add(missed, Ordering::SeqCst);
            return;
        }
        shared.scheduled.fetch_add(1, Ordering::Relaxed);
        if tx.len() >= MAX_QUEUED_ARRIVALS || tx.try_send(due).is_err() {
            shared.unsent.fetch_add(1, Ordering::Relaxed);
        }
        if tx.len() > shared.idle.load(Ordering::Relaxed) {
            shared.grow[next_worker % shared.grow.len()].notify_one();
            next_worker += 1;
        }
    }
}

/// Sleeps until `due`; false if the phase stopped first.
fn sleep_until(due: Instant, shared: &PhaseShared) -> bool {
    loop {
        if shared.should_stop() {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        thread::sleep((due - now).min(Duration::from_millis(50)));
    }
}

/// The phase's connection setups: the plain request's, a plan's origins', the replicas'.
struct Connections {
    setup: Arc<ConnectionSetup>,
    origins: Arc<Vec<ConnectionSetup>>,
    replicas: Arc<Vec<ConnectionSetup>>,
}

/// Worker-local state shared by the connection tasks of one thread.
struct WorkerLocal {
    plan: LoadPlan,
    setup: Arc<ConnectionSetup>,
    origins: Arc<Vec<ConnectionSetup>>,
    /// `--replica` targets: the URL's request to each.
    replicas: Arc<Vec<ConnectionSetup>>,
    shared: Arc<PhaseShared>,
    recorder: RefCell<WorkerRecorder>,
    in_flight: Cell<u64>,
    /// Requests waiting for their connection to open (a SYN unanswered while the target's
    /// accept queue is full): what is left of it when the phase ends was never sent.
    connecting: Cell<u64>,
    hedge: Option<RefCell<HedgeWorker>>,
}

impl WorkerLocal {
    /// Hedging's targets: the URL and the replicas (1 without hedging).
    fn hedge_targets(&self) -> usize {
        1 + self.replicas.len()
    }

    /// Hedging's target `i`: the URL, then the replicas.
    fn target_setup(&self, i: usize) -> &ConnectionSetup {
        match i {
            0 => &self.setup,
            _ => self.replicas.get(i - 1).unwrap_or(&self.setup),
        }
    }
}

/// Fault injection for the tests: a load thread that panics must fail the run, and no test
/// input is known to make one panic. Set to a worker's number to panic it at its start.
const INJECT_PANIC_ENV: &str = "KILN_FAULT_PANIC_LOAD_THREAD";

fn run_worker(
    worker: usize,
    plan: &LoadPlan,
    shared: Arc<PhaseShared>,
    connections: Connections,
    stop_rx: watch::Receiver<bool>,
    recorder: WorkerRecorder,
) {
    if std::env::var(INJECT_PANIC_ENV).is_ok_and(|w| w == worker.to_string()) {
        panic!("fault injected by {INJECT_PANIC_ENV}");
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => {
            recorder.finish(0, 0);
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let worker_state = Rc::new(WorkerLocal {
        plan: plan.clone(),
        setup: connections.setup,
        origins: connections.origins,
        replicas: connections.replicas,
        shared: shared.clone(),
        recorder: RefCell::new(recorder),
        in_flight: Cell::new(0),
        connecting: Cell::new(0),
        hedge: plan
            .hedge
            .as_ref()
            .map(|h| RefCell::new(HedgeWorker::new(h, worker))),
    });
    let state = worker_state.clone();
    local.block_on(&rt, async move {
        // --io uring: this thread's plain connections go through a ring of its own, made
        // here, in the runtime its readiness is registered with. The probe at start said
        // rings can be made; one that cannot (a limit reached since) stops the run rather
        // than let the summary say io_uring over connections on epoll.
        let ring = match state.plan.io {
            IoPath::Uring => {
                match crate::uring::Ring::install(connections_per_thread(&state.plan)) {
                    Ok(driver) => Some(driver),
                    Err(e) => {
                        state.shared.fail(format!(
                            "--io uring: load thread {worker} could not make its ring ({e}); \
                             --io epoll does without"
                        ));
                        return;
                    }
                }
            }
            IoPath::Epoll => None,
        };
        let mut tasks = JoinSet::new();
        match &state.plan.model {
            Model::Closed { connections, .. } => {
                // Connection g of c goes to worker g % threads, like wrk's split.
                for global in (worker..*connections).step_by(state.plan.threads) {
                    tasks.spawn_local(closed_connection(state.clone(), global, stop_rx.clone()));
                }
            }
            Model::Open { connections, .. } => {
                for _ in (worker..*connections).step_by(state.plan.threads) {
                    spawn_open_connection(&mut tasks, &state, usize::MAX, &stop_rx);
                }
            }
        }
        let ticker = tokio::task::spawn_local(tick_seconds(state.clone()));
        let max_connections = match state.plan.model {
            Model::Open {
                max_connections, ..
            } => max_connections,
            Model::Closed { .. } => 0,
        };
        let mut stop = stop_rx.clone();
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                // Open more connections while arrivals wait and every connection is busy.
                _ = state.shared.grow[worker].notified(), if max_connections > 0 => {
                    let waiting = || state.shared.arrivals.as_ref().map_or(0, |q| q.len());
                    while waiting() > state.shared.idle.load(Ordering::Relaxed)
                        && spawn_open_connection(&mut tasks, &state, max_connections, &stop_rx) {}
                }
            }
        }
        // At the planned end, requests in flight are waited for a moment (up to their
        // timeout with --wait-ongoing-requests-after-deadline); when the run was stopped early
        // they are cut now. Either way, those cut are counted as abandoned.
        let drain = if state.shared.stopped_early.load(Ordering::SeqCst) {
            Duration::ZERO
        } else if state.plan.wait_after_deadline {
            state.plan.timeout.min(MAX_DRAIN)
        } else {
            state.plan.timeout.min(DEADLINE_GRACE)
        };
        let _ =
            tokio::time::timeout(drain, async { while tasks.join_next().await.is_some() {} }).await;
        tasks.abort_all();
        ticker.abort();
        if let Some(ring) = ring {
            ring.abort();
        }
    });
    // the tasks (and their connections) are dropped with the set, then the ring
    drop(local);
    crate::uring::Ring::uninstall();
    let state = match Rc::try_unwrap(worker_state) {
        Ok(state) => state,
        Err(_) => return,
    };
    let abandoned = state.in_flight.get();
    let connecting = state.connecting.get();
    state.recorder.into_inner().finish(abandoned, connecting);
}

/// A load thread's share of the connections the plan may hold open at once.
fn connections_per_thread(plan: &LoadPlan) -> usize {
    (crate::limits::connections_needed(plan) as usize).div_ceil(plan.threads.max(1))
}

/// Rolls the recorder at each second boundary so idle workers still report every second.
async fn tick_seconds(state: Rc<WorkerLocal>) {
    let mut next = state.shared.t0 + Duration::from_secs(1);
    loop {
        tokio::time::sleep_until((next + Duration::from_millis(2)).into()).await;
        state.recorder.borrow_mut().roll_to(Instant::now());
        next += Duration::from_secs(1);
    }
}

/// Sleeps unless the phase stops first; false when it stopped.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let slept = tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stop.wait_for(|s| *s) => false,
    };
    slept && !*stop.borrow()
}

/// Connects, counting a failure as one failed request.
async fn ensure_connected(
    state: &WorkerLocal,
    setup: &ConnectionSetup,
    conn: &mut Option<Connection>,
) -> Result<(), ErrorKind> {
    if let Some(c) = conn {
        if c.ready().await {
            return Ok(());
        }
        // a handle's connection is counted lost by its owner
        if !conn.take().is_some_and(|c| c.is_handle()) {
            let mut rec = state.recorder.borrow_mut();
            rec.connections -= 1;
            rec.closed_by_target(Instant::now());
        }
    }
    let (mut c, kept) = match setup.take_kept() {
        Some(c) => (c, true),
        None => (setup.connect().await?, false),
    };
    let mut rec = state.recorder.borrow_mut();
    if let Some(times) = c.take_connect_times() {
        rec.connected(times, Instant::now());
    }
    rec.connections += 1;
    if kept {
        rec.connections_kept += 1;
    } else {
        rec.connections_opened += 1;
    }
    *conn = Some(c);
    Ok(())
}

/// [`ensure_connected`] for a request about to be sent, counted in `connecting` while it
/// waits: a task cut at the phase's end leaves its count behind (as `in_flight` does).
async fn connect_counted(
    state: &WorkerLocal,
    setup: &ConnectionSetup,
    conn: &mut Option<Connection>,
) -> Result<(), ErrorKind> {
    state.connecting.set(state.connecting.get() + 1);
    let connected = ensure_connected(state, setup, conn).await;
    state.connecting.set(state.connecting.get() - 1);
    connected
}

/// A connection slot of one task: the connection (reopened when lost) and its request timer.
struct Slot {
    conn: Option<Connection>,
    timer: RequestTimer,
}

impl Slot {
    fn new(timeout: Duration) -> Self {
        Self {
            conn: None,
            timer: RequestTimer::new(timeout),
        }
    }
}

/// A connection task's slots: one, or with `--hedge` one per target for first copies and one
/// per target for second copies (a copy in flight needs a connection of its own).
struct Slots(Vec<Slot>);

impl Slots {
    fn new(state: &WorkerLocal) -> Self {
        let n = 2 * state.hedge_targets();
        let n = if state.hedge.is_some() { n } else { 1 };
        Self((0..n).map(|_| Slot::new(state.plan.timeout)).collect())
    }

    /// Connects every slot before the first arrival, so none is charged a handshake.
    async fn connect_all(&mut self, state: &WorkerLocal) {
        let targets = state.hedge_targets();
        for (i, slot) in self.0.iter_mut().enumerate() {
            let _ = ensure_connected(state, state.target_setup(i % targets), &mut slot.conn).await;
        }
    }

    /// Closes every connection (counted in the gauge).
    fn close(&mut self, state: &WorkerLocal) {
        let open = self.0.iter_mut().filter_map(|s| s.conn.take()).count() as u64;
        state.recorder.borrow_mut().connections -= open;
    }

    /// At the phase's end: leaves the idle connections to the next phase (see
    /// `KeptConnections`), closing the rest.
    fn keep(&mut self, state: &WorkerLocal) {
        let targets = state.hedge_targets();
        for (i, slot) in self.0.iter_mut().enumerate() {
            if let Some(conn) = slot.conn.take() {
                state.recorder.borrow_mut().connections -= 1;
                state.target_setup(i % targets).keep(conn);
            }
        }
    }
}

/// The per-request timeout, armed lazily: its timer is moved only when it fires before the
/// current request's deadline, about once per timeout period rather than once per request
/// (a timer-wheel insert and remove per request was a visible share of kiln's own CPU).
struct RequestTimer {
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed_for: Instant,
}

impl RequestTimer {
    fn new(timeout: Duration) -> Self {
        let far = Instant::now() + timeout;
        Self {
            timeout,
            sleep: Box::pin(tokio::time::sleep_until(far.into())),
            armed_for: far,
        }
    }

    /// Runs `work` until it finishes (`Some`) or `timeout` after `start` has passed (`None`).
    async fn run<F: Future>(&mut self, start: Instant, work: F) -> Option<F::Output> {
        let deadline = start + self.timeout;
        if self.armed_for > deadline {
            self.rearm(deadline);
        }
        let mut work = pin!(work);
        poll_fn(|cx| {
            if let Poll::Ready(out) = work.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            while self.sleep.as_mut().poll(cx).is_ready() {
                if Instant::now() >= deadline {
                    return Poll::Ready(None);
                }
                self.rearm(deadline);
            }
            Poll::Pending
        })
        .await
    }

    fn rearm(&mut self, deadline: Instant) {
        self.sleep.as_mut().reset(deadline.into());
        self.armed_for = deadline;
    }
}

/// How a send ended: when, and whether it was the connection that failed.
struct Sent {
    done: Instant,
    connect_failed: bool,
}

/// Connects `conn` for a request's first copy; on failure the request is counted (as the
/// target's error, or as unsent when kiln itself ran short) and `Err` says when it ended.
async fn connect_for_request(
    state: &WorkerLocal,
    setup: &ConnectionSetup,
    conn: &mut Option<Connection>,
    intended: Option<Instant>,
) -> Result<(), Sent> {
    if let Err(kind) = connect_counted(state, setup, conn).await {
        let now = Instant::now();
        // kiln's own shortage is not the target's failure: the phase stops, nothing counted.
        if setup.local_failure().is_none() {
            state.recorder.borrow_mut().error(now, kind);
        } else if intended.is_some() {
            state.shared.unsent.fetch_add(1, Ordering::Relaxed);
        }
        return Err(Sent {
            done: now,
            connect_failed: true,
        });
    }
    Ok(())
}

/// Sends one request and records the outcome against `intended` (the open model's
/// scheduled time; `None` in the closed model, where it is the send time).
async fn send_and_record(
    state: &WorkerLocal,
    slots: &mut Slots,
    intended: Option<Instant>,
) -> Sent {
    if let Some(hedge) = &state.hedge {
        // boxed: inline, the hedged race made every connection's task 6 KiB instead of 2
        // (at 10,000 connections, most of kiln's memory), hedging or not
        return Box::pin(send_hedged(state, hedge, slots, intended)).await;
    }
    let slot = &mut slots.0[0];
    if let Err(sent) = connect_for_request(state, &state.setup, &mut slot.conn, intended).await {
        return sent;
    }
    send_on(state, &mut slot.conn, &mut slot.timer, intended).await
}

/// Sends the URL's request on `conn` (just connected, or a handle on a shared connection)
/// and records the outcome against `intended` (see [`send_and_record`]).
async fn send_on(
    state: &WorkerLocal,
    conn: &mut Option<Connection>,
    timer: &mut RequestTimer,
    intended: Option<Instant>,
) -> Sent {
    if conn.is_none() {
        return Sent {
            done: Instant::now(),
            connect_failed: true,
        };
    }
    let setup = &state.setup;
    let Delivered {
        start,
        sent,
        done,
        outcome,
    } = deliver(
        state,
        setup,
        conn,
        timer,
        intended,
        async move |c: &mut Connection| c.send(setup).await,
    )
    .await;
    let (Delivery::Answered(outcome), Some(c)) = (outcome, conn.as_ref()) else {
        return Sent {
            done,
            connect_failed: true,
        };
    };
    if let (Ok(_), Some(first_byte)) = (&outcome, c.first_byte()) {
        state
            .recorder
            .borrow_mut()
            .response_arrival(first_byte, c.response_reads(), done);
    }
    if record_outcome(state, start, sent, done, outcome) {
        drop_connection(state, conn);
    }
    Sent {
        done,
        connect_failed: false,
    }
}

/// A request [`deliver`] sent: when it was due (the open model's scheduled time, else the
/// send), sent and done, and its outcome.
struct Delivered<T> {
    start: Instant,
    sent: Instant,
    done: Instant,
    outcome: Delivery<T>,
}

enum Delivery<T> {
    /// The answer, or why none came on the connection.
    Answered(Result<T, ErrorKind>),
    /// Refused unprocessed, and no new connection could be opened for it: recorded as an
    /// error by [`deliver`].
    Lost(ErrorKind),
}

/// Sends on `conn` (which holds a connection) within `timer`, once more on a new connection
/// when refused unprocessed: counted as sent and in flight while it is, and timed against
/// `intended`. The URL's requests and a scenario's steps record the answer each their way.
async fn deliver<T>(
    state: &WorkerLocal,
    setup: &ConnectionSetup,
    conn: &mut Option<Connection>,
    timer: &mut RequestTimer,
    intended: Option<Instant>,
    send: impl AsyncFnMut(&mut Connection) -> Result<T, ErrorKind>,
) -> Delivered<T> {
    let sent = Instant::now();
    state.recorder.borrow_mut().sent(sent);
    state.in_flight.set(state.in_flight.get() + 1);
    let outcome = send_once_more_if_refused(state, setup, conn, timer, sent, send).await;
    state.in_flight.set(state.in_flight.get() - 1);
    let done = Instant::now();
    let outcome = if conn.is_none() {
        let kind = outcome.and_then(Result::err).unwrap_or(ErrorKind::Timeout);
        state.recorder.borrow_mut().error(done, kind);
        Delivery::Lost(kind)
    } else {
        Delivery::Answered(outcome.unwrap_or(Err(ErrorKind::Timeout)))
    };
    Delivered {
        start: intended.map_or(sent, |i| i.min(sent)),
        sent,
        done,
        outcome,
    }
}

/// Closes `conn`'s connection, taking it off the gauge unless it is a handle on another's.
fn drop_connection(state: &WorkerLocal, conn: &mut Option<Connection>) {
    if conn.take().is_some_and(|c| !c.is_handle()) {
        state.recorder.borrow_mut().connections -= 1;
    }
}

/// Sends a request on `conn` (which holds a connection) within the timer, and once more when
/// the target refused it unprocessed: on the same connection, or a new one (`conn` is None
/// when none could be opened, and the outcome is the refusal).
async fn send_once_more_if_refused<T>(
    state: &WorkerLocal,
    setup: &ConnectionSetup,
    conn: &mut Option<Connection>,
    timer: &mut RequestTimer,
    sent: Instant,
    mut send: impl AsyncFnMut(&mut Connection) -> Result<T, ErrorKind>,
) -> Option<Result<T, ErrorKind>> {
    let c = conn.as_mut()?;
    let outcome = timer.run(sent, send(c)).await;
    if !refused_unprocessed(&outcome, c) {
        return outcome;
    }
    match resend(state, setup, conn).await {
        Some(c) => timer.run(sent, send(c)).await,
        None => outcome,
    }
}

/// Whether a request failed because the target refused it before processing it: HTTP/2's
/// REFUSED_STREAM, or a stream past a GOAWAY's last one. RFC 9113 8.7 says such a request may
/// be sent again; it was never seen by the application.
fn refused_unprocessed<T>(outcome: &Option<Result<T, ErrorKind>>, c: &mut Connection) -> bool {
    matches!(outcome, Some(Err(_))) && c.take_refused_unprocessed()
}

/// Readies a connection to send a refused request again, once, counting the retry: the same
/// connection when it still takes requests (a refused stream), a new one when the target
/// ended it (GOAWAY). None when no connection could be opened.
async fn resend<'a>(
    state: &WorkerLocal,
    setup: &ConnectionSetup,
    conn: &'a mut Option<Connection>,
) -> Option<&'a mut Connection> {
    state.recorder.borrow_mut().retried(Instant::now());
    connect_counted(state, setup, conn).await.ok()?;
    conn.as_mut()
}

/// Records a request's answer or error; true when it failed (its connection is lost).
fn record_outcome(
    state: &WorkerLocal,
    start: Instant,
    sent: Instant,
    done: Instant,
    outcome: Result<crate::http1::Response, ErrorKind>,
) -> bool {
    let mut rec = state.recorder.borrow_mut();
    match outcome {
        Ok(response) => {
            rec.response(start, sent, done, response.status, response.body_bytes);
            false
        }
        Err(kind) => {
            rec.error(done, kind);
            rec.connection_failed(done, kind);
            true
        }
    }
}

/// One copy's end: its answer (or why none) and when.
type CopyEnd = (Result<crate::http1::Response, ErrorKind>, Instant);

/// Sends a request with `--hedge`: its first copy to the next target; if no answer came
/// after the delay and the budget and throttle allow, a second copy to the target after it.
/// The first answer is the request's (latency from the first copy's scheduled time); the
/// other copy is cut when it comes (see `race`). A first copy that answers is timed on its
/// own too, for the side-by-side figures.
async fn send_hedged(
    state: &WorkerLocal,
    hedge: &RefCell<HedgeWorker>,
    slots: &mut Slots,
    intended: Option<Instant>,
) -> Sent {
    let targets = state.hedge_targets();
    let (first_target, second_target) = hedge.borrow_mut().first_copy();
    let (firsts, seconds) = slots.0.split_at_mut(targets);
    let (Some(first_slot), Some(second_slot)) =
        (firsts.get_mut(first_target), seconds.get_mut(second_target))
    else {
        return Sent {
            done: Instant::now(),
            connect_failed: false,
        };
    };
    let first_setup = state.target_setup(first_target);
    if let Err(sent) = connect_for_request(state, first_setup, &mut first_slot.conn, intended).await
    {
        hedge.borrow_mut().copy_ended(None);
        return sent;
    }
    if first_slot.conn.is_none() {
        return Sent {
            done: Instant::now(),
            connect_failed: true,
        };
    }
    let sent = Instant::now();
    let start = intended.map_or(sent, |i| i.min(sent));
    {
        let mut rec = state.recorder.borrow_mut();
        rec.sent(sent);
        rec.first_copy_sent(first_target, sent);
    }
    state.in_flight.set(state.in_flight.get() + 1);
    let delay = state.plan.hedge.as_ref().and_then(|h| h.delay_now());
    let (first_conn, first_timer) = (&mut first_slot.conn, &mut first_slot.timer);
    let second_conn = &mut second_slot.conn;
    let second_timer = &mut second_slot.timer;
    let (first_end, winner, second_cut) = {
        let mut first = pin!(async {
            let outcome =
                send_once_more_if_refused(state, first_setup, first_conn, first_timer, sent, {
                    async move |c: &mut Connection| c.send(first_setup).await
                })
                .await;
            (outcome.unwrap_or(Err(ErrorKind::Timeout)), Instant::now())
        });
        let early = match delay {
            None => Some(first.as_mut().await),
            Some(d) => tokio::select! {
                biased;
                end = first.as_mut() => Some(end),
                _ = tokio::time::sleep_until((sent + d).into()) => None,
            },
        };
        match early {
            Some(end) => (Some(end), Winner::First, false),
            None => {
                let due = Instant::now();
                let taken = hedge.borrow_mut().take_hedge();
                match taken {
                    Err(why) => {
                        let paused = why == Refused::Paused;
                        state.recorder.borrow_mut().hedge_refused(paused, due);
                        (Some(first.await), Winner::First, false)
                    }
                    Ok(()) => {
                        let second =
                            send_second_copy(state, second_target, second_conn, second_timer);
                        race(state, hedge, start, sent, first, second, second_target).await
                    }
                }
            }
        }
    };
    state.in_flight.set(state.in_flight.get() - 1);
    // a cut exchange leaves its connection mid-response: it cannot carry another
    if second_cut && second_slot.conn.take().is_some() {
        state.recorder.borrow_mut().connections -= 1;
    }
    let Some((outcome, done)) = first_end else {
        // the first copy was cut after the second answered: nothing else of it is counted
        // (no error, no latency of its own, no failure for the throttle)
        if first_slot.conn.take().is_some() {
            state.recorder.borrow_mut().connections -= 1;
        }
        return Sent {
            done: Instant::now(),
            connect_failed: false,
        };
    };
    hedge
        .borrow_mut()
        .copy_ended(outcome.as_ref().ok().map(|r| r.status));
    if let Ok(response) = &outcome {
        let latency_us = done.saturating_duration_since(start).as_micros() as u64;
        let mut rec = state.recorder.borrow_mut();
        rec.first_copy_answered(latency_us, done);
        if winner == Winner::First {
            rec.response(start, sent, done, response.status, response.body_bytes);
        }
        return Sent {
            done,
            connect_failed: false,
        };
    }
    if winner == Winner::First {
        let mut rec = state.recorder.borrow_mut();
        if let Err(kind) = &outcome {
            rec.error(done, *kind);
        }
    }
    // (gone already when a refused copy found no connection to be sent again on)
    if first_slot.conn.take().is_some() {
        state.recorder.borrow_mut().connections -= 1;
    }
    Sent {
        done,
        connect_failed: false,
    }
}

/// Which copy's end is the request's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Winner {
    First,
    /// The second copy answered first (already recorded).
    Second,
}

/// Sends the second copy on its own connection to `target`; drops the connection on failure.
async fn send_second_copy(
    state: &WorkerLocal,
    target: usize,
    conn: &mut Option<Connection>,
    timer: &mut RequestTimer,
) -> CopyEnd {
    let setup = state.target_setup(target);
    if let Err(kind) = ensure_connected(state, setup, conn).await {
        return (Err(kind), Instant::now());
    }
    if conn.is_none() {
        return (Err(ErrorKind::Other), Instant::now());
    }
    let sent = Instant::now();
    state.recorder.borrow_mut().hedge_sent(target, sent);
    let outcome = send_once_more_if_refused(state, setup, conn, timer, sent, {
        async move |c: &mut Connection| c.send(setup).await
    })
    .await
    .unwrap_or(Err(ErrorKind::Timeout));
    let done = Instant::now();
    if outcome.is_err() && conn.take().is_some() {
        state.recorder.borrow_mut().connections -= 1;
    }
    (outcome, done)
}

/// Runs both copies until the request is decided: the first answer is recorded as the
/// request's when it comes. A second copy still out when the first copy answered is cut (its
/// connection closed). A first copy that lost is the unhedged request, timed on its own for
/// the side-by-side figures: it is read until it ends or the run's time is up, then cut. A
/// copy that failed wins only when the other failed too. A target that never answered once
/// kept every loser to the timeout, past the run's end (a 4 s run took 14 s). Returns the
/// first copy's end (`None`: cut at the run's end after the second copy answered), which
/// copy's end was (or is to be) the request's, and whether the second copy was cut.
async fn race(
    state: &WorkerLocal,
    hedge: &RefCell<HedgeWorker>,
    start: Instant,
    sent: Instant,
    mut first: Pin<&mut impl Future<Output = CopyEnd>>,
    second: impl Future<Output = CopyEnd>,
    second_target: usize,
) -> (Option<CopyEnd>, Winner, bool) {
    let mut second = pin!(second);
    let mut first_end: Option<CopyEnd> = None;
    let mut second_done = false;
    let mut winner: Option<Winner> = None;
    while winner.is_none() && (first_end.is_none() || !second_done) {
        tokio::select! {
            end = first.as_mut(), if first_end.is_none() => {
                if end.0.is_ok() {
                    winner = Some(Winner::First);
                }
                first_end = Some(end);
            }
            (outcome, done) = second.as_mut(), if !second_done => {
                second_done = true;
                hedge.borrow_mut().copy_ended(outcome.as_ref().ok().map(|r| r.status));
                if let Ok(response) = &outcome {
                    winner = Some(Winner::Second);
                    let mut rec = state.recorder.borrow_mut();
                    rec.hedge_won(second_target, done);
                    rec.response(start, sent, done, response.status, response.body_bytes);
                }
            }
        }
    }
    if winner == Some(Winner::Second) && first_end.is_none() {
        tokio::select! {
            end = first.as_mut() => first_end = Some(end),
            _ = tokio::time::sleep_until(state.shared.deadline.into()) => {}
        }
    }
    let now = Instant::now();
    let cut = usize::from(first_end.is_none()) + usize::from(!second_done);
    if cut > 0 {
        state.recorder.borrow_mut().hedge_cut(cut as u64, now);
    }
    // Both failed: the request failed as its first copy did.
    (first_end, winner.unwrap_or(Winner::First), !second_done)
}

async fn closed_connection(state: Rc<WorkerLocal>, global: usize, mut stop: watch::Receiver<bool>) {
    let Model::Closed {
        connections,
        ramp_up,
        ..
    } = state.plan.model
    else {
        return;
    };
    let start_at = state.shared.t0 + ramp_up.mul_f64(global as f64 / connections as f64);
    if !sleep_or_stop(
        start_at.saturating_duration_since(Instant::now()),
        &mut stop,
    )
    .await
    {
        return;
    }
    if let Some(workload) = state.plan.workload.clone() {
        return closed_vu(state, workload, global, stop).await;
    }
    if state.plan.http2_streams > 1 {
        // boxed: inline, its streams' state would grow every connection's task
        return Box::pin(streams::closed(state, global, stop)).await;
    }
    let slots = Slots::new(&state);
    send_back_to_back(&state, global, stop, slots).await;
}

/// The closed model's loop: sends on `sender` back to back (after the think time) until the
/// phase ends, out of the stages' count closed and waiting.
async fn send_back_to_back(
    state: &WorkerLocal,
    global: usize,
    mut stop: watch::Receiver<bool>,
    mut sender: impl Sender,
) {
    let Model::Closed {
        think_time,
        ref stages,
        ..
    } = state.plan.model
    else {
        return;
    };
    let mut stop_now = state.shared.should_stop();
    while !stop_now {
        if !stages.is_empty() && !state.shared.vu_active(stages, global) {
            // Out of the stages' count: leave (closing the connection) until back in.
            sender.close(state);
            if !wait_until_active(state, stages, global, &mut stop).await {
                break;
            }
        }
        let Sent {
            done,
            connect_failed,
        } = sender.send(state, None).await;
        let pause = if connect_failed {
            RECONNECT_BACKOFF.max(think_time)
        } else {
            think_time
        };
        // Back to back, the end of one request is the clock reading for the next check.
        stop_now = if pause.is_zero() {
            state.shared.should_stop_at(done)
        } else {
            !sleep_or_stop(pause, &mut stop).await || state.shared.should_stop()
        };
    }
    sender.keep(state);
}

/// How a connection's task sends the URL's request: on connections of its own ([`Slots`]),
/// or as one stream of an HTTP/2 connection that others share ([`streams::Stream`]).
trait Sender {
    /// Opens the connection before the first arrival, so none is charged a handshake.
    async fn connect(&mut self, state: &WorkerLocal);
    /// Sends one request and records it (see [`send_and_record`]).
    async fn send(&mut self, state: &WorkerLocal, intended: Option<Instant>) -> Sent;
    /// Closes the connection (counted in the gauge).
    fn close(&mut self, state: &WorkerLocal);
    /// At the phase's end: leaves an idle connection to the next phase, closing the rest.
    fn keep(&mut self, state: &WorkerLocal);
}

impl Sender for Slots {
    async fn connect(&mut self, state: &WorkerLocal) {
        self.connect_all(state).await;
    }

    async fn send(&mut self, state: &WorkerLocal, intended: Option<Instant>) -> Sent {
        send_and_record(state, self, intended).await
    }

    fn close(&mut self, state: &WorkerLocal) {
        Slots::close(self, state);
    }

    fn keep(&mut self, state: &WorkerLocal) {
        Slots::keep(self, state);
    }
}

/// An open-model connection: takes the next due arrival from the shared queue, sends it,
/// repeats. The spawner counts it as idle until it has connected.
async fn open_connection(state: Rc<WorkerLocal>, stop: watch::Receiver<bool>) {
    let Some(arrivals) = state.shared.arrivals.clone() else {
        return;
    };
    if let Some(workload) = state.plan.workload.clone() {
        return open_vu(state, workload, arrivals, stop).await;
    }
    if state.plan.http2_streams > 1 {
        Box::pin(streams::open(&state, &arrivals, &stop)).await;
    } else {
        send_arrivals(&state, &arrivals, stop, Slots::new(&state)).await;
    }
    state.shared.connection_tasks.fetch_sub(1, Ordering::SeqCst);
}

/// Waits for the next arrival, counted idle meanwhile; None when the phase has ended (an
/// arrival taken after the stop is counted unsent).
async fn next_arrival(
    state: &WorkerLocal,
    arrivals: &async_channel::Receiver<Instant>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Instant> {
    let next = tokio::select! {
        next = arrivals.recv() => next.ok(),
        _ = stop.wait_for(|s| *s) => None,
    };
    state.shared.idle.fetch_sub(1, Ordering::Relaxed);
    let intended = next?;
    if state.shared.should_stop() {
        state.shared.unsent.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    Some(intended)
}

/// The open model's loop: connects `sender`, then sends each arrival it takes from the
/// queue until the phase ends; counted idle while it waits for one.
async fn send_arrivals(
    state: &WorkerLocal,
    arrivals: &async_channel::Receiver<Instant>,
    mut stop: watch::Receiver<bool>,
    mut sender: impl Sender,
) {
    sender.connect(state).await;
    loop {
        let Some(intended) = next_arrival(state, arrivals, &mut stop).await else {
            break;
        };
        sender.send(state, Some(intended)).await;
        state.shared.idle.fetch_add(1, Ordering::Relaxed);
    }
    sender.keep(state);
}

/// A plan's virtual user: its own state, one connection per origin, its request timer.
struct Vu {
    state: VuState,
    conns: Vec<Option<Connection>>,
    timer: RequestTimer,
}

impl Vu {
    /// A VU numbered `id` (from 1, `$vu`): a closed model's VU keeps its place; an open
    /// model's are numbered as made (`None`).
    fn new(state: &WorkerLocal, workload: &Workload, id: Option<u64>) -> Self {
        let made = state.shared.new_vu_id();
        let id = id.unwrap_or(made);
        Self {
            state: VuState::new(id, workload, state.shared.t0_seed()),
            conns: workload.origins.iter().map(|_| None).collect(),
            timer: RequestTimer::new(state.plan.timeout),
        }
    }

    /// Closes the VU's connections (counted in the gauge); its cookies and data stay.
    fn close_connections(&mut self, state: &WorkerLocal) {
        let open = self.conns.iter_mut().filter_map(Option::take).count() as u64;
        state.recorder.borrow_mut().connections -= open;
    }
}

/// How an iteration ended.
enum IterationEnd {
    /// Every step ran (or the iteration was cut short by a failed request or extraction,
    /// which is counted where it happened).
    Done {
        connect_failed: bool,
    },
    /// The scenario's data has no more rows.
    DataEnded,
    /// The phase stopped during the iteration.
    Stopped,
    Failed(String),
}

/// Closed model with a plan: a VU runs iterations back to back until the phase ends, its
/// iterations are all taken, or its data runs out.
async fn closed_vu(
    state: Rc<WorkerLocal>,
    workload: Arc<Workload>,
    global: usize,
    mut stop: watch::Receiver<bool>,
) {
    let mut vu = Vu::new(&state, &workload, Some(global as u64 + 1));
    let stages = match &state.plan.model {
        Model::Closed { stages, .. } => stages.as_slice(),
        Model::Open { .. } => &[],
    };
    while !state.shared.should_stop() {
        if !stages.is_empty() && !state.shared.vu_active(stages, global) {
            vu.close_connections(&state);
            if !wait_until_active(&state, stages, global, &mut stop).await {
                break;
            }
        }
        if !state.shared.take_iteration(&workload) {
            state.shared.finish();
            break;
        }
        match run_iteration(&state, &workload, &mut vu, None, &mut stop).await {
            IterationEnd::Done { connect_failed } => {
                if connect_failed && !sleep_or_stop(RECONNECT_BACKOFF, &mut stop).await {
                    break;
                }
            }
            IterationEnd::DataEnded => {
                state.shared.finish();
                break;
            }
            IterationEnd::Stopped => break,
            IterationEnd::Failed(why) => {
                state.shared.fail(why);
                break;
            }
        }
    }
    vu.close_connections(&state);
}

/// Open model with a plan: each arrival starts one iteration on this VU; its first request's
/// latency counts from the arrival's scheduled time.
async fn open_vu(
    state: Rc<WorkerLocal>,
    workload: Arc<Workload>,
    arrivals: async_channel::Receiver<Instant>,
    mut stop: watch::Receiver<bool>,
) {
    let mut vu = Vu::new(&state, &workload, None);
    // Connect before the first arrival so it is not charged for the handshake.
    if let (Some(setup), Some(conn)) = (state.origins.first(), vu.conns.first_mut()) {
        let _ = ensure_connected(&state, setup, conn).await;
    }
    loop {
        let Some(intended) = next_arrival(&state, &arrivals, &mut stop).await else {
            break;
        };
        match run_iteration(&state, &workload, &mut vu, Some(intended), &mut stop).await {
            IterationEnd::Done { .. } => {}
            IterationEnd::DataEnded => {
                state.shared.unsent.fetch_add(1, Ordering::Relaxed);
                state.shared.finish();
                break;
            }
            IterationEnd::Stopped => break,
            IterationEnd::Failed(why) => {
                state.shared.fail(why);
                break;
            }
        }
        state.shared.idle.fetch_add(1, Ordering::Relaxed);
    }
    vu.close_connections(&state);
    state.shared.connection_tasks.fetch_sub(1, Ordering::SeqCst);
}

/// One iteration: a scenario picked by weight, a row of its data, its steps in order.
async fn run_iteration(
    state: &WorkerLocal,
    workload: &Workload,
    vu: &mut Vu,
    intended: Option<Instant>,
    stop: &mut watch::Receiver<bool>,
) -> IterationEnd {
    let scenario = workload.pick(&mut vu.state.rng);
    let mut values = match vu.state.start_iteration(workload, scenario) {
        Ok(Some(values)) => values,
        Ok(None) => return IterationEnd::DataEnded,
        Err(why) => return IterationEnd::Failed(why.to_string()),
    };
    let mut first = intended;
    let mut connect_failed = false;
    for step in &scenario.steps {
        if state.shared.should_stop() {
            return IterationEnd::Stopped;
        }
        match run_step(state, workload, vu, step, &mut values, first.take()).await {
            StepEnd::Next => {}
            StepEnd::CutShort { connect } => {
                connect_failed = connect;
                break;
            }
        }
        let pause = step.think.sample(&mut vu.state.rng);
        if !pause.is_zero() && !sleep_or_stop(pause, stop).await {
            return IterationEnd::Stopped;
        }
    }
    vu.state.iteration += 1;
    state.recorder.borrow_mut().iteration(Instant::now());
    IterationEnd::Done { connect_failed }
}

enum StepEnd {
    Next,
    /// The iteration cannot go on: no response, a variable not extracted, a request that
    /// could not be rendered. `connect`: it was the connection that failed.
    CutShort {
        connect: bool,
    },
}

/// Sends one step and records it in the totals and under its name.
async fn run_step(
    state: &WorkerLocal,
    workload: &Workload,
    vu: &mut Vu,
    step: &scenario::Step,
    values: &mut [Option<String>],
    intended: Option<Instant>,
) -> StepEnd {
    let origin = &workload.origins[step.origin];
    let rendered = {
        let mut cx = crate::template::RenderContext {
            values,
            vu: vu.state.id,
            iteration: vu.state.iteration,
            rng: &mut vu.state.rng,
        };
        scenario::render_request(step, origin, &vu.state.jars[step.origin], &mut cx)
    };
    let rendered = match rendered {
        Ok(rendered) => rendered,
        Err(e) => {
            state
                .recorder
                .borrow_mut()
                .not_sent(step.name, Instant::now(), e.why());
            return StepEnd::CutShort { connect: false };
        }
    };
    let setup = &state.origins[step.origin];
    let conn = &mut vu.conns[step.origin];
    if let Err(kind) = connect_counted(state, setup, conn).await {
        let now = Instant::now();
        if setup.local_failure().is_none() {
            let mut rec = state.recorder.borrow_mut();
            rec.error(now, kind);
            rec.named(step.name, failed_outcome(kind));
        } else if intended.is_some() {
            state.shared.unsent.fetch_add(1, Ordering::Relaxed);
        }
        return StepEnd::CutShort { connect: true };
    }
    if conn.is_none() {
        return StepEnd::CutShort { connect: true };
    }
    let (rendered, authority) = (&rendered, &origin.authority);
    let Delivered {
        start,
        sent,
        done,
        outcome,
    } = deliver(state, setup, conn, &mut vu.timer, intended, {
        async move |c: &mut Connection| c.send_request(rendered, authority, true).await
    })
    .await;
    let outcome = match outcome {
        Delivery::Answered(outcome) => outcome,
        Delivery::Lost(kind) => {
            let mut rec = state.recorder.borrow_mut();
            rec.named(step.name, failed_outcome(kind));
            return StepEnd::CutShort { connect: true };
        }
    };
    match outcome {
        Ok((response, captured)) => {
            let set = vu.state.jars[step.origin].take_response(&captured);
            let checked = {
                let mut cx = crate::template::RenderContext {
                    values,
                    vu: vu.state.id,
                    iteration: vu.state.iteration,
                    rng: &mut vu.state.rng,
                };
                scenario::run_checks(step, response.status, &captured, &mut cx)
            };
            let extracted = scenario::run_extractions(step, &captured, &set, values);
            let extract_failed = extracted.is_err();
            let bad_status = !step.checks_status() && response.status >= 400;
            let mut rec = state.recorder.borrow_mut();
            rec.response(start, sent, done, response.status, response.body_bytes);
            let arrived = conn
                .as_ref()
                .and_then(|c| Some((c.first_byte()?, c.response_reads())));
            if let Some((first_byte, reads)) = arrived {
                rec.response_arrival(first_byte, reads, done);
            }
            rec.named(
                step.name,
                NamedOutcome {
                    result: Ok(response.status),
                    failed: bad_status || checked.failed > 0 || extract_failed,
                    checks: checked.run,
                    checks_failed: checked.failed,
                    extraction_failed: extract_failed,
                    body_bytes: response.body_bytes,
                    latency_us: Some(done.saturating_duration_since(start).as_micros() as u64),
                },
            );
            if extract_failed {
                return StepEnd::CutShort { connect: false };
            }
            StepEnd::Next
        }
        Err(kind) => {
            let mut rec = state.recorder.borrow_mut();
            rec.error(done, kind);
            rec.connection_failed(done, kind);
            rec.named(step.name, failed_outcome(kind));
            rec.connections -= 1;
            *conn = None;
            StepEnd::CutShort { connect: false }
        }
    }
}

fn failed_outcome(kind: ErrorKind) -> NamedOutcome {
    NamedOutcome {
        result: Err(kind),
        failed: true,
        checks: 0,
        checks_failed: 0,
        extraction_failed: false,
        body_bytes: 0,
        latency_us: None,
    }
}

/// Spawns one more open-model connection unless the cap is reached; false when it is.
fn spawn_open_connection(
    tasks: &mut JoinSet<()>,
    state: &Rc<WorkerLocal>,
    max: usize,
    stop: &watch::Receiver<bool>,
) -> bool {
    let counter = &state.shared.connection_tasks;
    let n = counter.load(Ordering::SeqCst);
    if n >= max
        || counter
            .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    {
        return false;
    }
    // each of the connection's streams waits for an arrival
    (state.shared.idle).fetch_add(state.plan.http2_streams, Ordering::Relaxed);
    tasks.spawn_local(open_connection(state.clone(), stop.clone()));
    true
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
