//! A Python target's threads queueing for the GIL (py-spy dumps with native frames, under
//! `--runtime deep`): threads ready to run Python code wait while one holds the interpreter's
//! lock, so adding threads adds no throughput for CPU-bound work.

use kiln_record::text::safe_text;
use serde_json::json;

use super::{Draft, Rule};
use crate::{RunRecord, Severity, Verdict};

pub const GIL_CONTENTION: Rule = Rule {
    id: "runtime.gil-contention",
    judge: gil_contention,
};

/// Threads waiting for the GIL on average from which it is a finding: one thread always
/// ready and held back.
const MIN_WAITING: f64 = 1.0;
/// Dumps needed to judge (one every 2 s).
const MIN_DUMPS: u32 = 3;

fn gil_contention(run: &RunRecord) -> Verdict {
    let Some(runtime) = &run.runtime else {
        return Verdict::Unjudged(super::NO_PROCESS.into());
    };
    // only CPython has a GIL to queue for
    if runtime.info.runtime != "python" {
        return Verdict::Clear;
    }
    let Some(py) = &runtime.python else {
        return Verdict::Unjudged(
            "no py-spy dumps were taken (run with --runtime deep, with py-spy installed)".into(),
        );
    };
    if py.dumps < MIN_DUMPS {
        return Verdict::Unjudged(format!(
            "{} py-spy dumps are too few to judge (at least {MIN_DUMPS}: a longer run)",
            py.dumps
        ));
    }
    let Some(waiting) = py.gil_waiters_mean else {
        return Verdict::Unjudged(
            "py-spy could not read native frames here (--native), which tell a thread \
             waiting for the GIL"
                .into(),
        );
    };
    if waiting < MIN_WAITING {
        return Verdict::Clear;
    }
    let mut evidence = vec![format!(
        "in {} py-spy dumps, {waiting:.1} threads on average (up to {}) were waiting to take \
         the GIL, held in {:.0}% of the dumps",
        py.dumps,
        py.gil_waiters_max,
        100.0 * py.gil_held_share
    )];
    if let Some(holder) = py.gil_holders.first() {
        evidence.push(format!(
            "the holder was at {} in {:.0}% of the dumps ({})",
            safe_text(&holder.frame),
            100.0 * holder.share,
            safe_text(&holder.threads.join(", "))
        ));
    }
    if !py.gil_waiter_names.is_empty() {
        evidence.push(format!(
            "waiting: {}",
            safe_text(&py.gil_waiter_names.join(", "))
        ));
    }
    let share = if py.threads_mean > 0.0 {
        waiting / py.threads_mean
    } else {
        0.0
    };
    Verdict::Found(vec![Draft {
        rule: GIL_CONTENTION.id,
        key: "",
        severity: if waiting >= 2.0 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "Python threads queue for the GIL: {waiting:.1} on average ready to run while one \
             holds it"
        ),
        evidence,
        window: run.window(),
        cause: "CPython runs Python code in one thread at a time (the global interpreter \
                lock): CPU-bound work in several threads takes turns, so more threads add \
                waiting, not throughput"
            .into(),
        fix: "run CPU-bound work in processes rather than threads (more worker processes, \
              e.g. gunicorn -w N with one thread each, or a ProcessPoolExecutor), move the hot \
              loop into native code that releases the GIL (NumPy, a C/Rust extension), or try \
              a free-threaded build (Python 3.13t)"
            .into(),
        impact: (share, "the Python threads"),
        data: json!({"gil_waiters_mean": waiting, "gil_waiters_max": py.gil_waiters_max,
            "dumps": py.dumps, "gil_held_share": py.gil_held_share}),
    }
    .finish()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};
    use kiln_runtime::summary::{GilHolder, PythonSummary, RuntimeSummary};

    fn run_with(python: Option<PythonSummary>) -> RunRecord {
        let mut run = load_run(&vec![Second::ok(100); 10]);
        let mut runtime = RuntimeSummary::default();
        runtime.info.runtime = "python".into();
        runtime.python = python;
        run.runtime = Some(runtime);
        run
    }

    fn dumps(waiting: Option<f64>) -> PythonSummary {
        PythonSummary {
            dumps: 4,
            threads_mean: 5.0,
            active_mean: 1.0,
            gil_held_share: 1.0,
            gil_holders: vec![GilHolder {
                frame: "spin_forever (spin.py:4)".into(),
                share: 1.0,
                threads: vec!["worker-1".into()],
            }],
            gil_waiters_mean: waiting,
            gil_waiters_max: 2,
            gil_waiter_names: vec!["worker-0".into(), "worker-2".into()],
            ..Default::default()
        }
    }

    #[test]
    fn threads_waiting_for_the_gil_are_found_with_the_holder() {
        let Verdict::Found(found) = gil_contention(&run_with(Some(dumps(Some(2.0))))) else {
            panic!("no finding");
        };
        let f = &found[0];
        assert_eq!(f.severity, Severity::High);
        assert!(f.title.contains("2.0 on average"), "{}", f.title);
        assert!(
            f.evidence[1].contains("spin_forever (spin.py:4)"),
            "{:?}",
            f.evidence
        );
        assert!(f.fix.contains("processes"), "{}", f.fix);
        assert!((f.impact.share - 0.4).abs() < 1e-9);
    }

    #[test]
    fn no_waiters_is_clear_and_what_cannot_tell_says_so() {
        assert!(matches!(
            gil_contention(&run_with(Some(dumps(Some(0.2))))),
            Verdict::Clear
        ));
        assert!(matches!(
            gil_contention(&run_with(Some(dumps(None)))),
            Verdict::Unjudged(r) if r.contains("native frames")
        ));
        assert!(matches!(
            gil_contention(&run_with(None)),
            Verdict::Unjudged(r) if r.contains("--runtime deep")
        ));
        let mut few = dumps(Some(3.0));
        few.dumps = 1;
        assert!(matches!(
            gil_contention(&run_with(Some(few))),
            Verdict::Unjudged(r) if r.contains("too few")
        ));
        // a JVM has no GIL
        let mut jvm = run_with(None);
        jvm.runtime.as_mut().unwrap().info.runtime = "jvm".into();
        assert!(matches!(gil_contention(&jvm), Verdict::Clear));
    }
}
