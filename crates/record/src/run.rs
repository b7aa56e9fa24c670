//! One run record, read: what every reader of a run starts from (the findings, compare, the
//! report, the summary, the hedging what-if).
//!
//! The load's seconds are read as the run is opened, once: its phases, and each measured
//! second reduced to the figures readers look at ([`LoadPoint`]; a long run's histograms are
//! not all kept in memory). Every other part is read the first time a reader asks for it and
//! kept for the next, so a command that judges, compares and draws a run reads each file
//! once. A part that cannot be read is a problem said once in [`Run::problems`], and the rest
//! still reads.
//!
//! The part types of the producers (the sampler's seconds, a runtime's figures, collapsed
//! stacks) are not known here: readers name them as type parameters, so this crate stays
//! independent of how a part was produced.

use std::any::Any;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::de::DeserializeOwned;

use crate::wire::WireSecond;
use crate::{
    LoadRecordLine, PhaseSummary, RecordError, RunDir, RunManifest, RunStatus, SecondRecord, Span,
    LOAD_SECONDS_PART,
};

/// One measured second of load, reduced to what readers look at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadPoint {
    /// The end of the second, ms since the Unix epoch.
    pub unix_ms: u64,
    pub requests: u64,
    pub failed: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub scheduled: u64,
    pub sent: u64,
    pub send_lag_max_us: u64,
    /// What the wire showed this second (connections opened, responses in two parts).
    pub wire: WireSecond,
}

impl LoadPoint {
    pub fn of(s: &SecondRecord) -> Self {
        Self {
            unix_ms: s.unix_ms,
            requests: s.requests,
            failed: s.failed(),
            p50_us: s.latency.quantile_us(0.5),
            p99_us: s.latency.quantile_us(0.99),
            max_us: s.latency.max_us(),
            scheduled: s.scheduled,
            sent: s.sent,
            send_lag_max_us: s.send_lag_max_us,
            wire: s.wire.clone(),
        }
    }
}

/// A part as read: absent (the run did not record it), read, or the problem in words.
type Read<T> = Result<Option<Arc<T>>, String>;

/// A run directory, read.
pub struct Run {
    dir: RunDir,
    /// The status a reader should believe (a `running` record whose writer is gone was
    /// interrupted).
    pub status: RunStatus,
    /// Every phase of the load, warm-ups too, in the order recorded.
    pub phases: Vec<PhaseSummary>,
    /// The measured phases' seconds, in the order recorded.
    pub seconds: Vec<LoadPoint>,
    /// Why the load's seconds stopped reading, when they did (the seconds before it are
    /// read); also the first of [`Run::problems`].
    pub load_problem: Option<String>,
    problems: Mutex<Vec<String>>,
    /// Parts read so far, by kind: each a `Read<T>` of the type its first reader asked for.
    kept: Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>,
}

/// The data behind a lock is still whole when another reader panicked: nothing is written
/// half-way under these locks.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Run {
    /// Opens and reads the run directory at `path`.
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        Ok(Self::read(RunDir::open(path)?))
    }

    /// Reads the load's seconds of `dir`; the other parts are read when asked for.
    pub fn read(dir: RunDir) -> Self {
        let mut run = Self {
            status: dir.effective_status(),
            dir,
            phases: Vec::new(),
            seconds: Vec::new(),
            load_problem: None,
            problems: Mutex::new(Vec::new()),
            kept: Mutex::new(HashMap::new()),
        };
        run.read_load();
        run
    }

    fn read_load(&mut self) {
        let lines = match self.dir.json_lines::<LoadRecordLine>(LOAD_SECONDS_PART) {
            Ok(lines) => lines,
            Err(e) => return self.load_problem(e.to_string()),
        };
        // Which phases are measured is known from each second's phase name until its end
        // line says otherwise; the points of a phase later found unmeasured are dropped.
        let mut points: Vec<(String, LoadPoint)> = Vec::new();
        for line in lines {
            match line {
                Ok(line) => {
                    if let LoadRecordLine::Second(s) = &line {
                        points.push((s.phase.clone(), LoadPoint::of(s)));
                    }
                    PhaseSummary::add_line(&mut self.phases, &line);
                }
                Err(e) => {
                    self.load_problem(e.to_string());
                    break;
                }
            }
        }
        let measured = PhaseSummary::measured_names(&self.phases);
        self.seconds = points
            .into_iter()
            .filter(|(phase, _)| measured.contains(&phase.as_str()))
            .map(|(_, p)| p)
            .collect();
    }

    fn load_problem(&mut self, problem: String) {
        self.problem(problem.clone());
        self.load_problem = Some(problem);
    }

    pub fn dir(&self) -> &RunDir {
        &self.dir
    }

    /// The directory, to add parts to (the findings, the page). What was read is forgotten:
    /// a part written now is read afresh.
    pub fn dir_mut(&mut self) -> &mut RunDir {
        locked(&self.kept).clear();
        &mut self.dir
    }

    pub fn into_dir(self) -> RunDir {
        self.dir
    }

    pub fn manifest(&self) -> &RunManifest {
        &self.dir.manifest
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Parts that could not be read, each said once, in the order found.
    pub fn problems(&self) -> Vec<String> {
        locked(&self.problems).clone()
    }

    fn problem(&self, problem: String) {
        locked(&self.problems).push(problem);
    }

    /// The measured phases merged.
    pub fn measured(&self) -> Option<PhaseSummary> {
        PhaseSummary::measured_total(&self.phases)
    }

    /// The measured load's wall-clock span: from the start of its first second to the end of
    /// its last.
    pub fn span(&self) -> Option<Span> {
        PhaseSummary::measured_span(&self.phases)
    }

    /// `f` of every second of the load, warm-ups too, in the order recorded: a pass over the
    /// load's seconds with their histograms (which are not kept). Stops at a line that does
    /// not read, which opening the run has said.
    pub fn each_second(&self, mut f: impl FnMut(&SecondRecord)) {
        let Ok(lines) = self.dir.json_lines::<LoadRecordLine>(LOAD_SECONDS_PART) else {
            return;
        };
        for line in lines.map_while(Result::ok) {
            if let LoadRecordLine::Second(s) = line {
                f(&s);
            }
        }
    }

    /// `f` of each measured second of the load, in the order recorded.
    pub fn each_measured_second<T>(&self, mut f: impl FnMut(&SecondRecord) -> T) -> Vec<T> {
        let measured = PhaseSummary::measured_names(&self.phases);
        let mut out = Vec::new();
        self.each_second(|s| {
            if measured.contains(&s.phase.as_str()) {
                out.push(f(s));
            }
        });
        out
    }

    /// What was read of `kind` the first time, or what `read` makes of it now (kept for the
    /// next reader, its problem said once).
    fn kept<T: Send + Sync + 'static>(
        &self,
        kind: &str,
        read: impl FnOnce() -> Read<T>,
    ) -> Read<T> {
        if let Some(read) = locked(&self.kept)
            .get(kind)
            .and_then(|any| any.downcast_ref::<Read<T>>())
        {
            return read.clone();
        }
        let value = read();
        if let Err(e) = &value {
            self.problem(e.clone());
        }
        locked(&self.kept).insert(kind.to_string(), Arc::new(value.clone()));
        value
    }

    /// A whole-file JSON part: `None` when the run has none or it cannot be read (the
    /// problem is in [`Run::problems`]).
    pub fn part<T: DeserializeOwned + Send + Sync + 'static>(&self, kind: &str) -> Option<Arc<T>> {
        self.part_or_problem(kind).ok().flatten()
    }

    /// A whole-file JSON part, or why it cannot be read.
    pub fn part_or_problem<T: DeserializeOwned + Send + Sync + 'static>(
        &self,
        kind: &str,
    ) -> Read<T> {
        self.kept(kind, || match self.dir.read_json_part::<T>(kind) {
            Ok(part) => Ok(part.map(Arc::new)),
            Err(e) => Err(e.to_string()),
        })
    }

    /// A whole-file part of another format, parsed by `parse` from its bytes (the problem
    /// said with the file's path).
    pub fn parsed<T: Send + Sync + 'static, E: std::fmt::Display>(
        &self,
        kind: &str,
        parse: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> Read<T> {
        self.kept(kind, || match self.dir.read_part(kind) {
            Ok(Some((path, bytes))) => parse(&bytes)
                .map(|t| Some(Arc::new(t)))
                .map_err(|e| format!("{}: {e}", path.display())),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        })
    }

    /// A JSON-lines part's records up to the first that does not read (a problem), none
    /// when the run has no such part.
    pub fn lines<T: DeserializeOwned + Send + Sync + 'static>(&self, kind: &str) -> Arc<Vec<T>> {
        let mut problem = None;
        let read = self.kept(kind, || {
            let mut out = Vec::new();
            match self.dir.json_lines::<T>(kind) {
                Ok(lines) => {
                    for line in lines {
                        match line {
                            Ok(t) => out.push(t),
                            Err(e) => {
                                problem = Some(e.to_string());
                                break;
                            }
                        }
                    }
                }
                Err(e) => problem = Some(e.to_string()),
            }
            Ok(Some(Arc::new(out)))
        });
        if let Some(problem) = problem {
            self.problem(problem);
        }
        read.ok().flatten().unwrap_or_default()
    }

    /// The records of a JSON-lines part whose second (each stamped at its end, by
    /// `end_unix_ms`) lies in the measured span; all of them when nothing was measured.
    pub fn lines_measured<T: DeserializeOwned + Clone + Send + Sync + 'static>(
        &self,
        kind: &str,
        end_unix_ms: impl Fn(&T) -> u64,
    ) -> Vec<T> {
        Span::keep(self.span(), &self.lines::<T>(kind), end_unix_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LatencyHistogram, PhaseEnd, RunLocation};
    use serde::{Deserialize, Serialize};

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        unix_ms: u64,
        value: u32,
    }

    fn second(phase: &str, second: u32, unix_ms: u64, latency_us: &[u64]) -> Box<SecondRecord> {
        let mut latency = LatencyHistogram::new();
        for us in latency_us {
            latency.record_us(*us);
        }
        Box::new(SecondRecord {
            phase: phase.into(),
            second,
            unix_ms,
            requests: latency_us.len() as u64,
            latency,
            ..Default::default()
        })
    }

    fn end(phase: &str, measured: bool) -> PhaseEnd {
        PhaseEnd {
            phase: phase.into(),
            measured,
            ..Default::default()
        }
    }

    /// A run of a two-second warm-up and three measured seconds, with samples every second
    /// from the warm-up's start.
    fn recorded(tmp: &Path) -> RunDir {
        let mut dir = RunDir::create(
            &RunLocation::Named(tmp.join("run")),
            "t",
            vec!["kiln".into()],
            crate::schema::plan::PlanRecord::Other(serde_json::Value::Null),
        )
        .unwrap();
        let mut load = dir
            .add_json_lines_part(LOAD_SECONDS_PART, "load-seconds.jsonl", 1)
            .unwrap();
        for (i, ms) in [1_000u64, 2_000].into_iter().enumerate() {
            load.write(&LoadRecordLine::Second(second(
                "warmup",
                i as u32,
                ms,
                &[50_000],
            )))
            .unwrap();
        }
        load.write(&LoadRecordLine::PhaseEnd(end("warmup", false)))
            .unwrap();
        for (i, ms) in [3_000u64, 4_000, 5_000].into_iter().enumerate() {
            let slow = 1_000 * (i as u64 + 1);
            load.write(&LoadRecordLine::Second(second(
                "main",
                i as u32,
                ms,
                &[slow],
            )))
            .unwrap();
        }
        load.write(&LoadRecordLine::PhaseEnd(end("main", true)))
            .unwrap();
        drop(load);
        let mut samples = dir
            .add_json_lines_part("samples", "samples.jsonl", 1)
            .unwrap();
        for (i, ms) in (1_000u64..=6_000).step_by(1_000).enumerate() {
            samples
                .write(&Sample {
                    unix_ms: ms,
                    value: i as u32,
                })
                .unwrap();
        }
        drop(samples);
        dir.write_file_part("numbers", "numbers.json", 1, b"[1, 2, 3]")
            .unwrap();
        dir.write_file_part("broken", "broken.json", 1, b"{")
            .unwrap();
        dir.finish(RunStatus::Complete, None).unwrap();
        dir
    }

    #[test]
    fn the_measured_seconds_and_their_span_leave_the_warm_up_out() {
        let tmp = tempfile::tempdir().unwrap();
        let run = Run::read(recorded(tmp.path()));
        assert_eq!(run.phases.len(), 2);
        let ends: Vec<u64> = run.seconds.iter().map(|s| s.unix_ms).collect();
        assert_eq!(ends, [3_000, 4_000, 5_000]);
        // stamped at their ends: the span starts a second before the first
        let span = run.span().unwrap();
        assert_eq!((span.from_unix_ms, span.to_unix_ms), (2_000, 5_000));
        assert_eq!(run.measured().unwrap().totals.requests, 3);
        let maxima = run.each_measured_second(|s| s.latency.max_us() / 1_000);
        assert_eq!(maxima, [1, 2, 3]);
        let mut every = 0;
        run.each_second(|_| every += 1);
        assert_eq!(every, 5);
        // the samples whose second lies in the span: those ending at 3, 4 and 5 s
        let kept = run.lines_measured::<Sample>("samples", |s| s.unix_ms);
        let values: Vec<u32> = kept.iter().map(|s| s.value).collect();
        assert_eq!(values, [2, 3, 4]);
        assert!(run.problems().is_empty(), "{:?}", run.problems());
    }

    #[test]
    fn a_part_is_read_once_and_its_problem_said_once() {
        let tmp = tempfile::tempdir().unwrap();
        let run = Run::read(recorded(tmp.path()));
        let first = run.part::<Vec<u32>>("numbers").unwrap();
        // the file changes under the reader: what was read is what every reader sees
        std::fs::write(run.path().join("numbers.json"), "[9]").unwrap();
        let again = run.part::<Vec<u32>>("numbers").unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(*again, [1, 2, 3]);
        assert!(run.part::<Vec<u32>>("not-recorded").is_none());
        for _ in 0..3 {
            assert!(run.part::<Vec<u32>>("broken").is_none());
        }
        let problems = run.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("broken.json"), "{problems:?}");
        assert!(run.part_or_problem::<Vec<u32>>("broken").is_err());
    }

    #[test]
    fn a_part_written_after_reading_is_read_afresh() {
        let tmp = tempfile::tempdir().unwrap();
        let mut run = Run::read(recorded(tmp.path()));
        assert!(run.part::<Vec<u32>>("later").is_none());
        run.dir_mut()
            .write_file_part("later", "later.json", 1, b"[7]")
            .unwrap();
        assert_eq!(*run.part::<Vec<u32>>("later").unwrap(), [7]);
    }

    #[test]
    fn lines_that_stop_reading_keep_what_came_before_and_say_where() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = recorded(tmp.path());
        let path = dir.path().join("samples.jsonl");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text = text.replacen("\"value\":2", "\"value\":\"two\"", 1);
        std::fs::write(&path, text).unwrap();
        let run = Run::read(dir);
        assert_eq!(run.lines::<Sample>("samples").len(), 2);
        assert_eq!(run.lines::<Sample>("samples").len(), 2);
        let problems = run.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("line 3"), "{problems:?}");
    }

    #[test]
    fn a_running_record_whose_writer_is_gone_reads_as_interrupted() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = recorded(tmp.path());
        dir.manifest.status = RunStatus::Running;
        assert_eq!(Run::read(dir).status, RunStatus::Interrupted);
    }
}
