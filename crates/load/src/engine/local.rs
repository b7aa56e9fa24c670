//! What the connection tasks of one load thread share: the plan, the connection setups, the
//! recorder; and the waits and connects every model uses.

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_record::ErrorKind;
use tokio::sync::watch;

use super::PhaseShared;
use crate::connection::{Connection, ConnectionSetup};
use crate::hedge::HedgeWorker;
use crate::plan::{self, LoadPlan, VuStage};
use crate::recorder::WorkerRecorder;

/// After a failed connect in the closed model, wait this long before the next attempt so a
/// dead target is not hammered by a busy loop.
pub(super) const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Worker-local state shared by the connection tasks of one thread.
pub(super) struct WorkerLocal {
    pub(super) plan: LoadPlan,
    pub(super) setup: Arc<ConnectionSetup>,
    pub(super) origins: Arc<Vec<ConnectionSetup>>,
    /// `--replica` targets: the URL's request to each.
    pub(super) replicas: Arc<Vec<ConnectionSetup>>,
    pub(super) shared: Arc<PhaseShared>,
    pub(super) recorder: RefCell<WorkerRecorder>,
    pub(super) in_flight: Cell<u64>,
    /// Requests waiting for their connection to open (a SYN unanswered while the target's
    /// accept queue is full): what is left of it when the phase ends was never sent.
    pub(super) connecting: Cell<u64>,
    pub(super) hedge: Option<RefCell<HedgeWorker>>,
}

impl WorkerLocal {
    /// Hedging's targets: the URL and the replicas (1 without hedging).
    pub(super) fn hedge_targets(&self) -> usize {
        1 + self.replicas.len()
    }

    /// Hedging's target `i`: the URL, then the replicas.
    pub(super) fn target_setup(&self, i: usize) -> &ConnectionSetup {
        match i {
            0 => &self.setup,
            _ => self.replicas.get(i - 1).unwrap_or(&self.setup),
        }
    }
}

/// Waits until closed-model VU `g` is within the stages' count again; false when it never
/// will be before the phase ends, or the phase stopped.
pub(super) async fn wait_until_active(
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

/// Sleeps unless the phase stops first; false when it stopped.
pub(super) async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let slept = tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stop.wait_for(|s| *s) => false,
    };
    slept && !*stop.borrow()
}

/// Connects, counting a failure as one failed request.
pub(super) async fn ensure_connected(
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
pub(super) async fn connect_counted(
    state: &WorkerLocal,
    setup: &ConnectionSetup,
    conn: &mut Option<Connection>,
) -> Result<(), ErrorKind> {
    state.connecting.set(state.connecting.get() + 1);
    let connected = ensure_connected(state, setup, conn).await;
    state.connecting.set(state.connecting.get() - 1);
    connected
}

/// Waits for the next arrival, counted idle meanwhile; None when the phase has ended (an
/// arrival taken after the stop is counted unsent).
pub(super) async fn next_arrival(
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
