//! One request on one connection: connect, send within its timeout, send once more when
//! refused unprocessed, record the outcome. Every model sends through here.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use kiln_record::ErrorKind;

use super::local::{connect_counted, ensure_connected, WorkerLocal};
use crate::connection::{Connection, ConnectionSetup};

/// A connection slot of one task: the connection (reopened when lost) and its request timer.
pub(super) struct Slot {
    pub(super) conn: Option<Connection>,
    pub(super) timer: RequestTimer,
}

impl Slot {
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            conn: None,
            timer: RequestTimer::new(timeout),
        }
    }
}

/// A connection task's slots: one, or with `--hedge` one per target for first copies and one
/// per target for second copies (a copy in flight needs a connection of its own).
pub(super) struct Slots(pub(super) Vec<Slot>);

impl Slots {
    pub(super) fn new(state: &WorkerLocal) -> Self {
        let n = 2 * state.hedge_targets();
        let n = if state.hedge.is_some() { n } else { 1 };
        Self((0..n).map(|_| Slot::new(state.plan.timeout)).collect())
    }

    /// Connects every slot before the first arrival, so none is charged a handshake.
    pub(super) async fn connect_all(&mut self, state: &WorkerLocal) {
        let targets = state.hedge_targets();
        for (i, slot) in self.0.iter_mut().enumerate() {
            let _ = ensure_connected(state, state.target_setup(i % targets), &mut slot.conn).await;
        }
    }

    /// Closes every connection (counted in the gauge).
    pub(super) fn close(&mut self, state: &WorkerLocal) {
        let open = self.0.iter_mut().filter_map(|s| s.conn.take()).count() as u64;
        state.recorder.borrow_mut().connections -= open;
    }

    /// At the phase's end: leaves the idle connections to the next phase (see
    /// `KeptConnections`), closing the rest.
    pub(super) fn keep(&mut self, state: &WorkerLocal) {
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
pub(super) struct RequestTimer {
    pub(super) timeout: Duration,
    pub(super) sleep: Pin<Box<tokio::time::Sleep>>,
    pub(super) armed_for: Instant,
}

impl RequestTimer {
    pub(super) fn new(timeout: Duration) -> Self {
        let far = Instant::now() + timeout;
        Self {
            timeout,
            sleep: Box::pin(tokio::time::sleep_until(far.into())),
            armed_for: far,
        }
    }

    /// Runs `work` until it finishes (`Some`) or `timeout` after `start` has passed (`None`).
    pub(super) async fn run<F: Future>(&mut self, start: Instant, work: F) -> Option<F::Output> {
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

    pub(super) fn rearm(&mut self, deadline: Instant) {
        self.sleep.as_mut().reset(deadline.into());
        self.armed_for = deadline;
    }
}

/// How a send ended: when, and whether it was the connection that failed.
pub(super) struct Sent {
    pub(super) done: Instant,
    pub(super) connect_failed: bool,
}

/// Connects `conn` for a request's first copy; on failure the request is counted (as the
/// target's error, or as unsent when kiln itself ran short) and `Err` says when it ended.
pub(super) async fn connect_for_request(
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

/// Sends the URL's request on `conn` (just connected, or a handle on a shared connection)
/// and records the outcome against `intended` (see [`send_and_record`]).
pub(super) async fn send_on(
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
pub(super) struct Delivered<T> {
    pub(super) start: Instant,
    pub(super) sent: Instant,
    pub(super) done: Instant,
    pub(super) outcome: Delivery<T>,
}

pub(super) enum Delivery<T> {
    /// The answer, or why none came on the connection.
    Answered(Result<T, ErrorKind>),
    /// Refused unprocessed, and no new connection could be opened for it: recorded as an
    /// error by [`deliver`].
    Lost(ErrorKind),
}

/// Sends on `conn` (which holds a connection) within `timer`, once more on a new connection
/// when refused unprocessed: counted as sent and in flight while it is, and timed against
/// `intended`. The URL's requests and a scenario's steps record the answer each their way.
pub(super) async fn deliver<T>(
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
pub(super) fn drop_connection(state: &WorkerLocal, conn: &mut Option<Connection>) {
    if conn.take().is_some_and(|c| !c.is_handle()) {
        state.recorder.borrow_mut().connections -= 1;
    }
}

/// Sends a request on `conn` (which holds a connection) within the timer, and once more when
/// the target refused it unprocessed: on the same connection, or a new one (`conn` is None
/// when none could be opened, and the outcome is the refusal).
pub(super) async fn send_once_more_if_refused<T>(
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
            rec.response(start, sent, done, &response);
            false
        }
        Err(kind) => {
            rec.error(done, kind);
            rec.connection_failed(done, kind);
            true
        }
    }
}
