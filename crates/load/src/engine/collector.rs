//! The collector: merges the load threads' seconds and hands each out once every thread has
//! sent it, and watches for a target that stopped answering.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kiln_record::{ErrorKind, SecondRecord};

use crate::hedge::HedgePlan;
use crate::recorder::WorkerMsg;

/// Merges the workers' seconds; a second is handed out once every worker has sent it or
/// ended. Also watches for a target that stopped answering.
pub(super) struct Collector {
    pub(super) t0_unix_ms: u64,
    pub(super) workers: usize,
    pub(super) pending: BTreeMap<u32, SecondRecord>,
    pub(super) last_second: Vec<Option<u32>>,
    pub(super) done: Vec<bool>,
    pub(super) scheduled_seen: u64,
    pub(super) abandoned: u64,
    pub(super) connecting: u64,
    pub(super) connections_opened: u64,
    pub(super) connections_kept: u64,
    pub(super) dead_after_s: u32,
    /// The first second after the last one that had a response.
    pub(super) quiet_since: u32,
    pub(super) errors_while_quiet: BTreeMap<ErrorKind, u64>,
    /// Requests sent and not yet ended (answered or failed), as of the last emitted second.
    pub(super) outstanding: u64,
    pub(super) dead_reason: Option<String>,
    /// `--hedge`: a percentile delay is kept up to date from each merged second (bounded by
    /// the request timeout).
    pub(super) hedge: Option<(HedgePlan, Duration)>,
}

impl Collector {
    pub(super) fn new(workers: usize, dead_after: Duration, t0_unix_ms: u64) -> Self {
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

    pub(super) fn take(&mut self, msg: WorkerMsg) {
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

    pub(super) fn emit_ready(
        &mut self,
        scheduled: &AtomicU64,
        on_second: &mut dyn FnMut(&SecondRecord),
    ) {
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
    pub(super) fn watch_for_dead_target(&mut self, s: &SecondRecord) {
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
