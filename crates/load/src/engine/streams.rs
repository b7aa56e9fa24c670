//! `--http2-streams N`: N requests in flight at once on each HTTP/2 connection, as h2load's
//! `-m` keeps them. Each stream is a task that loops as a connection's task does without
//! streams (back to back in the closed model, an arrival at a time in the open one); the
//! streams of one connection share it through [`Multiplexed`], which opens it (counted once,
//! in the gauge and as opened) and opens it again when the target ends it. Each stream sends
//! on a handle of the connection ([`Connection::share`]), so its requests go out beside the
//! other streams' and h2 interleaves their frames on the one socket.

use std::rc::Rc;
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::local::{ensure_connected, WorkerLocal};
use super::request::{connect_for_request, drop_connection, send_on, RequestTimer, Sent};
use super::sender::{send_arrivals, send_back_to_back, Sender};
use crate::connection::Connection;

/// One connection that several streams share. Locked while it is (re)opened; over HTTP/1.1
/// (a TLS server that declined h2) also while its one request is sent, so the streams take
/// turns on it as HTTP/1.1 requires.
#[derive(Default)]
struct Multiplexed(tokio::sync::Mutex<Option<Connection>>);

/// One of a connection's streams: the shared connection and this stream's request timer.
pub(super) struct Stream {
    shared: Rc<Multiplexed>,
    timer: RequestTimer,
}

impl Stream {
    fn new(state: &WorkerLocal, shared: &Rc<Multiplexed>) -> Self {
        Self {
            shared: shared.clone(),
            timer: RequestTimer::new(state.plan.timeout),
        }
    }
}

impl Sender for Stream {
    async fn connect(&mut self, state: &WorkerLocal) {
        let mut conn = self.shared.0.lock().await;
        let _ = ensure_connected(state, &state.setup, &mut conn).await;
    }

    async fn send(&mut self, state: &WorkerLocal, intended: Option<Instant>) -> Sent {
        let mut conn = self.shared.0.lock().await;
        if let Err(sent) = connect_for_request(state, &state.setup, &mut conn, intended).await {
            return sent;
        }
        match conn.as_ref().and_then(Connection::share) {
            Some(handle) => {
                drop(conn);
                let mut handle = Some(handle);
                let sent = send_on(state, &mut handle, &mut self.timer, intended).await;
                // a handle is not counted; a connection opened to resend a refused request is
                drop_connection(state, &mut handle);
                sent
            }
            None => send_on(state, &mut conn, &mut self.timer, intended).await,
        }
    }

    fn close(&mut self, state: &WorkerLocal) {
        // the first of the streams to leave closes it; a stream sending over HTTP/1.1 holds
        // the lock and closes it when it leaves in turn
        if let Ok(mut conn) = self.shared.0.try_lock() {
            drop_connection(state, &mut conn);
        }
    }

    fn keep(&mut self, state: &WorkerLocal) {
        if let Ok(mut conn) = self.shared.0.try_lock() {
            if let Some(c) = conn.take() {
                state.recorder.borrow_mut().connections -= 1;
                state.setup.keep(c);
            }
        }
    }
}

/// A closed-model connection of `--http2-streams` streams, each sending back to back.
pub(super) async fn closed(state: Rc<WorkerLocal>, global: usize, stop: watch::Receiver<bool>) {
    let shared = Rc::new(Multiplexed::default());
    let mut others = JoinSet::new();
    for _ in 1..state.plan.http2_streams {
        let (state, stream, stop) = (state.clone(), Stream::new(&state, &shared), stop.clone());
        others.spawn_local(async move { send_back_to_back(&state, global, stop, stream).await });
    }
    send_back_to_back(&state, global, stop, Stream::new(&state, &shared)).await;
    while others.join_next().await.is_some() {}
}

/// An open-model connection of `--http2-streams` streams, each taking the next arrival
/// (the spawner counted every stream idle).
pub(super) async fn open(
    state: &Rc<WorkerLocal>,
    arrivals: &async_channel::Receiver<Instant>,
    stop: &watch::Receiver<bool>,
) {
    let shared = Rc::new(Multiplexed::default());
    let mut others = JoinSet::new();
    for _ in 1..state.plan.http2_streams {
        let (state, stream) = (state.clone(), Stream::new(state, &shared));
        let (arrivals, stop) = (arrivals.clone(), stop.clone());
        others.spawn_local(async move { send_arrivals(&state, &arrivals, stop, stream).await });
    }
    send_arrivals(state, arrivals, stop.clone(), Stream::new(state, &shared)).await;
    while others.join_next().await.is_some() {}
}
