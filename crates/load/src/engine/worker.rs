//! One load thread: a single-threaded tokio runtime that runs its share of the connections'
//! tasks until the phase stops, then drains them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::local::{sleep_or_stop, WorkerLocal};
use super::request::Slots;
use super::sender::{send_arrivals, send_back_to_back};
use super::vu::{closed_vu, open_vu};
use super::{streams, PhaseShared};
use crate::connection::ConnectionSetup;
use crate::hedge::HedgeWorker;
use crate::plan::{IoPath, LoadPlan, Model};
use crate::recorder::WorkerRecorder;

/// The longest wait for in-flight requests once a phase stops, with
/// [`LoadPlan::wait_after_deadline`].
const MAX_DRAIN: Duration = Duration::from_secs(30);

/// How long requests in flight at the deadline are waited for: a run ends at `-d`, as wrk's
/// and oha's do, not `--timeout` later (a `-d 3s` run against a full listen backlog took 11 s
/// and its rate was taken over all of it). Responses that come in this time are counted;
/// requests still waiting after it are reported as such.
const DEADLINE_GRACE: Duration = Duration::from_millis(500);

/// The phase's connection setups: the plain request's, a plan's origins', the replicas'.
pub(super) struct Connections {
    pub(super) setup: Arc<ConnectionSetup>,
    pub(super) origins: Arc<Vec<ConnectionSetup>>,
    pub(super) replicas: Arc<Vec<ConnectionSetup>>,
}

/// Fault injection for the tests: a load thread that panics must fail the run, and no test
/// input is known to make one panic. Set to a worker's number to panic it at its start.
const INJECT_PANIC_ENV: &str = "KILN_FAULT_PANIC_LOAD_THREAD";

pub(super) fn run_worker(
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
