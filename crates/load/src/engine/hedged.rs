//! `--hedge`: a request's first copy, a second copy to the next target after the delay, and
//! the race between them.

use std::cell::RefCell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::time::Instant;

use kiln_record::ErrorKind;

use super::local::{ensure_connected, WorkerLocal};
use super::request::{connect_for_request, send_once_more_if_refused, RequestTimer, Sent, Slots};
use crate::connection::Connection;
use crate::hedge::{HedgeWorker, Refused};

/// One copy's end: its answer (or why none) and when.
type CopyEnd = (Result<crate::http1::Response, ErrorKind>, Instant);

/// Sends a request with `--hedge`: its first copy to the next target; if no answer came
/// after the delay and the budget and throttle allow, a second copy to the target after it.
/// The first answer is the request's (latency from the first copy's scheduled time); the
/// other copy is cut when it comes (see `race`). A first copy that answers is timed on its
/// own too, for the side-by-side figures.
pub(super) async fn send_hedged(
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
            rec.response(start, sent, done, response);
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
                    rec.response(start, sent, done, response);
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
