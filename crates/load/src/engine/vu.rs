//! A plan's virtual users: iterations of a scenario's steps, with their own cookies, data
//! rows and connections, in the closed and open models.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kiln_record::ErrorKind;
use tokio::sync::watch;

use super::local::{
    connect_counted, ensure_connected, next_arrival, sleep_or_stop, wait_until_active, WorkerLocal,
    RECONNECT_BACKOFF,
};
use super::request::{deliver, Delivered, Delivery, RequestTimer};
use crate::connection::Connection;
use crate::plan::Model;
use crate::recorder::NamedOutcome;
use crate::scenario::{self, VuState, Workload};

/// A plan's virtual user: its own state, one connection per origin, its request timer.
struct Vu {
    pub(super) state: VuState,
    pub(super) conns: Vec<Option<Connection>>,
    pub(super) timer: RequestTimer,
}

impl Vu {
    /// A VU numbered `id` (from 1, `$vu`): a closed model's VU keeps its place; an open
    /// model's are numbered as made (`None`).
    pub(super) fn new(state: &WorkerLocal, workload: &Workload, id: Option<u64>) -> Self {
        let made = state.shared.new_vu_id();
        let id = id.unwrap_or(made);
        Self {
            state: VuState::new(id, workload, state.shared.t0_seed()),
            conns: workload.origins.iter().map(|_| None).collect(),
            timer: RequestTimer::new(state.plan.timeout),
        }
    }

    /// Closes the VU's connections (counted in the gauge); its cookies and data stay.
    pub(super) fn close_connections(&mut self, state: &WorkerLocal) {
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
pub(super) async fn closed_vu(
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
pub(super) async fn open_vu(
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
            rec.response(start, sent, done, &response);
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
