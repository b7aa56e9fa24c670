//! The two loops every model runs on a connection, and the [`Sender`] they send through:
//! back to back (closed model), or an arrival at a time (open model).

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::watch;

use super::hedged::send_hedged;
use super::local::{
    next_arrival, sleep_or_stop, wait_until_active, WorkerLocal, RECONNECT_BACKOFF,
};
use super::request::{connect_for_request, send_on, Sent, Slots};
use crate::plan::Model;

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

/// The closed model's loop: sends on `sender` back to back (after the think time) until the
/// phase ends, out of the stages' count closed and waiting.
pub(super) async fn send_back_to_back(
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
pub(super) trait Sender {
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

/// The open model's loop: connects `sender`, then sends each arrival it takes from the
/// queue until the phase ends; counted idle while it waits for one.
pub(super) async fn send_arrivals(
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
