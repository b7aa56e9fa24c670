//! Per-worker recording: each generator thread fills the record of the current second and
//! hands it to the collector when the second is over. Nothing here is shared between
//! threads, so recording a request costs a few histogram increments and no locks.

use std::sync::mpsc::Sender;
use std::time::Instant;

use std::sync::Arc;

use kiln_record::{
    ErrorKind, HedgeSecond, LatencyHistogram, NameSecond, SecondRecord, TargetHedge,
};

/// One named request's outcome, for [`WorkerRecorder::named`].
pub(crate) struct NamedOutcome {
    pub result: Result<u16, ErrorKind>,
    pub failed: bool,
    pub checks: u64,
    pub checks_failed: u64,
    pub extraction_failed: bool,
    pub body_bytes: u64,
    pub latency_us: Option<u64>,
}

/// What a worker thread tells the collector.
pub(crate) enum WorkerMsg {
    /// The worker's figures for one second; every worker sends each second once, in order.
    Second {
        worker: usize,
        record: Box<SecondRecord>,
    },
    /// The worker has ended; it sends nothing more.
    Done {
        worker: usize,
        abandoned: u64,
        /// Requests still waiting for their connection to open.
        connecting: u64,
        connections_opened: u64,
        connections_kept: u64,
    },
}

pub(crate) struct WorkerRecorder {
    worker: usize,
    phase: String,
    t0: Instant,
    open_model: bool,
    current: SecondRecord,
    /// A plan's request names, and this second's figures for each (same order).
    names: Arc<[String]>,
    by_name: Vec<NameSecond>,
    /// Hedging's targets (0 without `--hedge`): each second then carries its hedge figures.
    hedge_targets: usize,
    /// A streaming gRPC method's messages sent per call: each second then carries its
    /// messages (see [`kiln_record::grpc::GrpcStreamSecond`]).
    grpc_stream_sent: Option<u32>,
    to_collector: Sender<WorkerMsg>,
    /// Live TCP connections of this worker (a gauge copied into each second).
    pub connections: u64,
    pub connections_opened: u64,
    /// Connections taken over from the phase before instead of opened.
    pub connections_kept: u64,
}

impl WorkerRecorder {
    pub fn new(
        worker: usize,
        phase: &str,
        t0: Instant,
        open_model: bool,
        to_collector: Sender<WorkerMsg>,
    ) -> Self {
        let mut rec = Self {
            worker,
            phase: phase.to_string(),
            t0,
            open_model,
            current: SecondRecord::default(),
            names: Arc::from(Vec::new()),
            by_name: Vec::new(),
            hedge_targets: 0,
            grpc_stream_sent: None,
            to_collector,
            connections: 0,
            connections_opened: 0,
            connections_kept: 0,
        };
        rec.current = rec.empty_second(0);
        rec
    }

    /// Records figures per request name too (a plan's steps).
    pub fn with_names(mut self, names: Arc<[String]>) -> Self {
        self.by_name = vec![NameSecond::default(); names.len()];
        self.names = names;
        self
    }

    /// Records hedging's figures (`--hedge` over `targets` targets).
    pub fn with_hedge(mut self, targets: usize) -> Self {
        self.hedge_targets = targets;
        self.current = self.empty_second(self.current.second);
        self
    }

    /// Records a streaming gRPC method's messages (`sent` a call).
    pub fn with_grpc_stream(mut self, sent: u32) -> Self {
        self.grpc_stream_sent = Some(sent);
        self.current = self.empty_second(self.current.second);
        self
    }

    fn empty_second(&self, second: u32) -> SecondRecord {
        SecondRecord {
            phase: self.phase.clone(),
            second,
            service: self.open_model.then(LatencyHistogram::new),
            hedge: (self.hedge_targets > 0).then(|| HedgeSecond {
                targets: vec![TargetHedge::default(); self.hedge_targets],
                ..Default::default()
            }),
            grpc_stream: self.grpc_stream_sent.map(|_| Default::default()),
            ..Default::default()
        }
    }

    /// This second's hedge figures (only called with hedging on).
    fn hedge_at(&mut self, at: Instant) -> Option<&mut HedgeSecond> {
        self.roll_to(at);
        self.current.hedge.as_mut()
    }

    /// A first copy went to target `target`.
    pub fn first_copy_sent(&mut self, target: usize, at: Instant) {
        if let Some(t) = self.hedge_at(at).and_then(|h| h.targets.get_mut(target)) {
            t.first += 1;
        }
    }

    /// A second copy went to target `target`.
    pub fn hedge_sent(&mut self, target: usize, at: Instant) {
        if let Some(h) = self.hedge_at(at) {
            h.sent += 1;
            if let Some(t) = h.targets.get_mut(target) {
                t.hedges += 1;
            }
        }
    }

    /// The second copy to `target` answered first.
    pub fn hedge_won(&mut self, target: usize, at: Instant) {
        if let Some(h) = self.hedge_at(at) {
            h.won += 1;
            if let Some(t) = h.targets.get_mut(target) {
                t.won += 1;
            }
        }
    }

    /// Copies cut: the other copy answered while they were out.
    pub fn hedge_cut(&mut self, copies: u64, at: Instant) {
        if let Some(h) = self.hedge_at(at) {
            h.cut += copies;
        }
    }

    /// A request was due a second copy and got none: over budget, or hedging paused.
    pub fn hedge_refused(&mut self, paused: bool, at: Instant) {
        if let Some(h) = self.hedge_at(at) {
            if paused {
                h.paused += 1;
            } else {
                h.over_budget += 1;
            }
        }
    }

    /// A first copy's own answer came, `latency_us` after the request's start.
    pub fn first_copy_answered(&mut self, latency_us: u64, at: Instant) {
        if let Some(h) = self.hedge_at(at) {
            h.first_copy.record_us(latency_us);
        }
    }

    fn second_of(&self, at: Instant) -> u32 {
        at.saturating_duration_since(self.t0).as_secs() as u32
    }

    /// Sends every finished second before the one containing `at`.
    pub fn roll_to(&mut self, at: Instant) {
        let second = self.second_of(at);
        while self.current.second < second {
            let next = self.empty_second(self.current.second + 1);
            self.send_current(next);
        }
    }

    fn send_current(&mut self, next: SecondRecord) {
        let mut done = std::mem::replace(&mut self.current, next);
        done.connections = self.connections;
        for (i, figures) in self.by_name.iter_mut().enumerate() {
            if figures.requests > 0 || figures.checks > 0 {
                done.names
                    .insert(self.names[i].clone(), std::mem::take(figures));
            }
        }
        // The collector outlives the workers; if it is gone there is no one to tell.
        let _ = self.to_collector.send(WorkerMsg::Second {
            worker: self.worker,
            record: Box::new(done),
        });
    }

    pub fn sent(&mut self, at: Instant) {
        self.roll_to(at);
        self.current.sent += 1;
    }

    /// A complete HTTP response. `intended` is the scheduled send time in an open model and
    /// the actual send time in a closed one.
    pub fn response(
        &mut self,
        intended: Instant,
        sent: Instant,
        done: Instant,
        response: &crate::http1::Response,
    ) {
        self.roll_to(done);
        let s = &mut self.current;
        s.requests += 1;
        *s.status.entry(response.status).or_default() += 1;
        if let Some(answer) = &response.grpc {
            *s.grpc.entry(answer.code).or_default() += 1;
            // a failed call's message (the connection keeps none for OK), the second's first
            if let Some(message) = &answer.message {
                (s.grpc_messages.entry(answer.code)).or_insert_with(|| message.to_string());
            }
            if let (Some(stream), Some(sent)) = (&mut s.grpc_stream, self.grpc_stream_sent) {
                stream.calls += 1;
                stream.messages_received += u64::from(answer.messages);
                stream.messages_sent += u64::from(sent);
                if let Some(first) = answer.first_message {
                    let us = first.saturating_duration_since(intended).as_micros() as u64;
                    stream.first_message.record_us(us);
                }
            }
        }
        s.body_bytes += response.body_bytes;
        s.latency
            .record_us(done.saturating_duration_since(intended).as_micros() as u64);
        if let Some(service) = &mut s.service {
            service.record_us(done.saturating_duration_since(sent).as_micros() as u64);
            let lag = sent.saturating_duration_since(intended).as_micros() as u64;
            s.send_lag_max_us = s.send_lag_max_us.max(lag);
        }
    }

    /// An HTTP/1.1 response's first bytes came at `first_byte`, its last at `done`, in
    /// `reads` socket reads.
    pub fn response_arrival(&mut self, first_byte: Instant, reads: u32, done: Instant) {
        self.roll_to(done);
        let gap = done.saturating_duration_since(first_byte).as_micros() as u64;
        self.current.wire.response(gap);
        self.current.wire.reads = self.current.wire.reads.saturating_add(u64::from(reads));
    }

    /// A new connection was opened (what it cost), now.
    pub fn connected(&mut self, times: crate::connection::ConnectTimes, at: Instant) {
        self.roll_to(at);
        let w = &mut self.current.wire;
        w.connects += 1;
        w.connect_us = w
            .connect_us
            .saturating_add(times.connect.as_micros() as u64);
        if let Some(tls) = times.tls {
            w.tls_handshakes += 1;
            w.tls_us = w.tls_us.saturating_add(tls.as_micros() as u64);
            w.tls_resumed += u64::from(times.tls_resumed);
        }
    }

    /// A request failed on an open connection, which is then dropped: the target reset it,
    /// or kiln closes it (a timeout, a response that is not HTTP).
    pub fn connection_failed(&mut self, at: Instant, kind: ErrorKind) {
        self.roll_to(at);
        let w = &mut self.current.wire;
        match kind {
            ErrorKind::Reset => w.reset += 1,
            _ => w.closed_by_kiln += 1,
        }
    }

    /// A request the target refused unprocessed, sent again.
    pub fn retried(&mut self, at: Instant) {
        self.roll_to(at);
        self.current.wire.retried += 1;
    }

    /// The target ended a connection: it said it closes, or closed while idle.
    pub fn closed_by_target(&mut self, at: Instant) {
        self.roll_to(at);
        self.current.wire.closed_by_target += 1;
    }

    /// A request that got no response.
    pub fn error(&mut self, done: Instant, kind: ErrorKind) {
        self.roll_to(done);
        self.current.requests += 1;
        *self.current.errors.entry(kind).or_default() += 1;
    }

    /// A plan's request, after `response` or `error` has counted it in the totals.
    /// `status` is `None` for a request without a response.
    pub fn named(&mut self, name: usize, outcome: NamedOutcome) {
        let s = &mut self.current;
        s.checks += outcome.checks;
        s.checks_failed += outcome.checks_failed;
        let Some(n) = self.by_name.get_mut(name) else {
            return;
        };
        n.requests += 1;
        n.failed += u64::from(outcome.failed);
        match outcome.result {
            Ok(status) => *n.status.entry(status).or_default() += 1,
            Err(kind) => *n.errors.entry(kind).or_default() += 1,
        }
        n.checks += outcome.checks;
        n.checks_failed += outcome.checks_failed;
        n.extractions_failed += u64::from(outcome.extraction_failed);
        n.body_bytes += outcome.body_bytes;
        if let Some(us) = outcome.latency_us {
            n.latency.record_us(us);
        }
    }

    /// A plan's request that could not be made (a variable unset, a header value that is
    /// not one): a failed check under its name, nothing sent, counted by `why`.
    pub fn not_sent(&mut self, name: usize, at: Instant, why: String) {
        self.roll_to(at);
        self.current.checks += 1;
        self.current.checks_failed += 1;
        if let Some(n) = self.by_name.get_mut(name) {
            n.checks += 1;
            n.checks_failed += 1;
            *n.not_sent.entry(why).or_default() += 1;
        }
    }

    /// A plan's iteration ended.
    pub fn iteration(&mut self, at: Instant) {
        self.roll_to(at);
        self.current.iterations += 1;
    }

    /// Sends the last (partial) second and says the worker is done.
    pub fn finish(mut self, abandoned: u64, connecting: u64) {
        let next = self.empty_second(u32::MAX);
        self.send_current(next);
        let _ = self.to_collector.send(WorkerMsg::Done {
            worker: self.worker,
            abandoned,
            connecting,
            connections_opened: self.connections_opened,
            connections_kept: self.connections_kept,
        });
    }
}
