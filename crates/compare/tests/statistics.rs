//! The comparison's statistics against records whose truth is known by construction: run
//! sets drawn from one process must not differ (the false-positive rate is measured, not
//! assumed), and a stall that shrinks must show in p99 and not in p50.
//!
//! The synthetic process has what real runs have: a service time with a slow tail, a
//! per-run offset (restarts, placement), and stalls that last several seconds (so seconds
//! are correlated and a per-request test would be overconfident).

use kiln_compare::{compare_sides, Options, Repeat, Second, Side, Verdict};
use kiln_findings::{Report, RunRecord};
use kiln_record::{LatencyHistogram, RunManifest, RunStatus, SecondRecord};

struct Process {
    base_us: f64,
    /// Run-to-run spread of the service time (a fraction).
    run_spread: f64,
    /// Share of requests in the slow tail, and how slow.
    tail_share: f64,
    tail_us: f64,
    /// A stall regime: entered with this chance per second, lasting 1-5 seconds, in which
    /// every request takes this much longer.
    stall_chance: f64,
    stall_us: f64,
    rate: u64,
}

impl Process {
    fn run(&self, rng: &mut fastrand::Rng, seconds: usize) -> Repeat {
        let offset = 1.0 + self.run_spread * (2.0 * rng.f64() - 1.0);
        let mut stall_left = 0;
        let seconds = (0..seconds)
            .map(|_| {
                if stall_left == 0 && rng.f64() < self.stall_chance {
                    stall_left = rng.usize(1..=5);
                }
                let stalled = stall_left > 0;
                stall_left = stall_left.saturating_sub(1);
                let mut h = LatencyHistogram::new();
                for _ in 0..self.rate {
                    // exponential around the base, like a queue's service
                    let mut us = self.base_us * offset * (0.5 - 0.5 * (1.0 - rng.f64()).ln());
                    if rng.f64() < self.tail_share {
                        us += self.tail_us * (0.8 + 0.4 * rng.f64());
                    }
                    if stalled {
                        us += self.stall_us * rng.f64();
                    }
                    h.record_us(us as u64);
                }
                Second::of(&SecondRecord {
                    requests: self.rate,
                    latency: h,
                    ..Default::default()
                })
            })
            .collect();
        Repeat {
            phase: "run".into(),
            seconds,
        }
    }

    fn side(&self, rng: &mut fastrand::Rng, repeats: usize, seconds: usize) -> Side {
        let mut repeats: Vec<Repeat> = (0..repeats).map(|_| self.run(rng, seconds)).collect();
        for (i, r) in repeats.iter_mut().enumerate() {
            r.phase = format!("run {}", i + 1);
        }
        Side {
            dir: "synthetic".into(),
            record: RunRecord::empty(RunManifest {
                schema_version: 1,
                kiln_version: "test".into(),
                id: "synthetic".into(),
                name: "synthetic".into(),
                command: vec![],
                plan: kiln_record::schema::plan::PlanRecord::Other(
                    serde_json::json!({"rate": self.rate}),
                ),
                started_at: String::new(),
                ended_at: None,
                status: RunStatus::Complete,
                status_reason: None,
                parts: vec![],
                not_recorded: Default::default(),
            }),
            repeats,
            problems: vec![],
        }
    }
}

fn service() -> Process {
    Process {
        base_us: 2000.0,
        run_spread: 0.01,
        tail_share: 0.02,
        tail_us: 100_000.0,
        stall_chance: 0.03,
        stall_us: 20_000.0,
        rate: 200,
    }
}

fn options() -> Options {
    Options {
        resamples: 1000,
        ..Options::default()
    }
}

#[test]
fn run_sets_of_one_process_show_no_change_in_at_least_19_of_20_trials() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(20261123);
    let mut false_positives = Vec::new();
    for trial in 0..20 {
        let a = service().side(&mut rng, 3, 30);
        let b = service().side(&mut rng, 3, 30);
        let c = compare_sides(&a, &b, (&empty, &empty), &options());
        let judged: Vec<String> = c
            .rows
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Improved | Verdict::Regressed))
            .map(|r| format!("{} {} {:?}", r.metric, r.verdict.as_str(), r.interval))
            .collect();
        if !judged.is_empty() {
            false_positives.push(format!("trial {trial}: {}", judged.join(", ")));
        }
    }
    assert!(false_positives.len() <= 1, "{false_positives:#?}");
}

#[test]
fn a_stall_that_shrinks_improves_p99_and_leaves_p50_alone() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(7);
    let before = service().side(&mut rng, 3, 30);
    let after = Process {
        tail_us: 50_000.0,
        ..service()
    }
    .side(&mut rng, 3, 30);
    let c = compare_sides(&before, &after, (&empty, &empty), &options());
    let row = |m: &str| c.rows.iter().find(|r| r.metric == m).unwrap();
    let p99 = row("p99");
    assert_eq!(p99.verdict, Verdict::Improved, "{p99:?}");
    let [lo, hi] = p99.interval.unwrap();
    assert!(lo < hi && hi < 0.0, "{p99:?}");
    // the truth: the tail halves
    assert!((p99.change + 0.5).abs() < 0.1, "{p99:?}");
    assert_eq!(row("p50").verdict, Verdict::Same, "{:?}", row("p50"));
    assert_eq!(row("throughput").verdict, Verdict::Same);
    // and the other way round it is a regression
    let back = compare_sides(&after, &before, (&empty, &empty), &options());
    let p99 = back.rows.iter().find(|r| r.metric == "p99").unwrap();
    assert_eq!(p99.verdict, Verdict::Regressed, "{p99:?}");
}

#[test]
fn the_same_records_and_seed_give_the_same_table() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(3);
    let a = service().side(&mut rng, 2, 20);
    let b = service().side(&mut rng, 2, 20);
    let one = compare_sides(&a, &b, (&empty, &empty), &options());
    let two = compare_sides(&a, &b, (&empty, &empty), &options());
    assert_eq!(
        serde_json::to_string(&one).unwrap(),
        serde_json::to_string(&two).unwrap()
    );
    // two repeats a side: benchstat's small-sample warning is given
    assert!(
        one.warnings
            .iter()
            .any(|w| w.contains("cannot go below p=0.333")),
        "{:?}",
        one.warnings
    );
}

#[test]
fn a_thin_tail_gets_no_verdict() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(5);
    let thin = Process {
        rate: 20,
        ..service()
    };
    let a = thin.side(&mut rng, 1, 30);
    let b = thin.side(&mut rng, 1, 30);
    let c = compare_sides(&a, &b, (&empty, &empty), &options());
    // 600 requests a side: enough for p95 (400), not for p99 (2000) or p99.9
    let row = |m: &str| c.rows.iter().find(|r| r.metric == m).unwrap();
    assert_ne!(row("p95").verdict, Verdict::NotJudged);
    for m in ["p99", "p99.9"] {
        assert_eq!(row(m).verdict, Verdict::NotJudged);
        assert!(row(m).note.as_deref().unwrap().contains("too few requests"));
    }
    assert!(c.warnings.iter().any(|w| w.contains("one run on a side")));
}

#[test]
fn the_profiles_and_the_db_calls_per_route_are_set_side_by_side() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(11);
    let mut a = service().side(&mut rng, 1, 10);
    let mut b = service().side(&mut rng, 1, 10);
    let profile = |hot: u64| {
        let mut folded = kiln_profile::Folded::new();
        folded.add(&["main", "handle", "fillInStackTrace"], hot);
        folded.add(&["main", "handle", "work"], 100);
        kiln_findings::record::Profile::of(folded, kiln_record::schema::profile::Event::Cpu)
    };
    a.record.profile = Some(profile(300));
    b.record.profile = Some(profile(0));
    let queries = |calls: u64| {
        serde_json::from_value(serde_json::json!({"analysis": {"routes": [
            {"route": "GET /owners", "requests": 40, "calls_median": calls, "db_time_median_ms": 2.5}
        ]}}))
        .unwrap()
    };
    a.record.queries = Some(queries(9));
    b.record.queries = Some(queries(1));
    let c = compare_sides(&a, &b, (&empty, &empty), &options());
    let first = &c.profile[0];
    assert_eq!(first.name, "fillInStackTrace");
    assert!((first.before_pct - 75.0).abs() < 0.01, "{first:?}");
    assert_eq!(first.after_pct, 0.0);
    let route = &c.db_routes[0];
    assert_eq!(route.route, "GET /owners");
    assert_eq!(route.base_calls_per_request, Some(9.0));
    assert_eq!(route.new_calls_per_request, Some(1.0));
    let text = kiln_compare::to_text(&c);
    assert!(
        text.contains("75.0% ->    0.0%  fillInStackTrace"),
        "{text}"
    );
    assert!(text.contains("9 -> 1      GET /owners"), "{text}");
}

#[test]
fn a_short_runs_cut_last_second_does_not_make_a_rate_of_zero() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(13);
    let short = |rng: &mut fastrand::Rng| {
        let mut side = service().side(rng, 1, 2);
        // the phase's last second holds the few requests that ended after the load stopped
        let last = side.repeats[0].seconds.last_mut().unwrap();
        last.requests = 3;
        last.partial = true;
        side
    };
    let (a, b) = (short(&mut rng), short(&mut rng));
    let c = compare_sides(&a, &b, (&empty, &empty), &options());
    let row = c.rows.iter().find(|r| r.metric == "throughput").unwrap();
    assert_eq!(row.base, 200.0);
    let [lo, hi] = row.interval.unwrap();
    // a resample of nothing but the cut second has no rate: it is left out, not read as 0/s
    assert!(lo > -0.5 && hi < 0.5, "{row:?}");
}

/// A side whose target used `ms_per_request` of CPU per request (a fifth of it system time),
/// with the sampler's per-second noise: each second's reading is off by up to `noise`.
fn with_cpu(mut side: Side, ms_per_request: f64, noise: f64, rng: &mut fastrand::Rng) -> Side {
    use kiln_findings::record::LoadPoint;
    use kiln_sample::{ProcessSecond, ResourceSecond, TaskRates};
    let t0 = 1_795_428_000_000u64;
    let rate = 200u64;
    for i in 0..30u64 {
        let unix_ms = t0 + 1000 * (i + 1);
        side.record.seconds.push(LoadPoint {
            unix_ms,
            requests: rate,
            ..Default::default()
        });
        let cores = ms_per_request * rate as f64 / 1000.0 * (1.0 + noise * (2.0 * rng.f64() - 1.0));
        side.record.resources.push(ResourceSecond {
            unix_ms: unix_ms + 37, // the sampler's second ends a little off the load's
            interval_s: 1.0,
            process: Some(ProcessSecond {
                rates: TaskRates {
                    cpu_user_pct: 80.0 * cores,
                    cpu_system_pct: 20.0 * cores,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    side
}

#[test]
fn cpu_per_request_gets_an_interval_and_a_verdict() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(11);
    let cpu_row = |c: &kiln_compare::Comparison| {
        c.resources
            .iter()
            .find(|r| r.metric == "target CPU per request")
            .cloned()
            .expect("a CPU row")
    };
    // 4 ms -> 0.4 ms per request: improved, the interval around -90%
    let before = with_cpu(service().side(&mut rng, 1, 30), 4.0, 0.2, &mut rng);
    let after = with_cpu(service().side(&mut rng, 1, 30), 0.4, 0.2, &mut rng);
    let row = cpu_row(&compare_sides(
        &before,
        &after,
        (&empty, &empty),
        &options(),
    ));
    assert_eq!(row.verdict, Verdict::Improved, "{row:?}");
    assert!(
        (row.base - 4.0).abs() < 0.3 && (row.new - 0.4).abs() < 0.03,
        "{row:?}"
    );
    let [lo, hi] = row.interval.unwrap();
    assert!(lo < row.change && row.change < hi && hi < -0.85, "{row:?}");
    // the same CPU per request with noisy seconds: no change in 19 of 20 trials
    let mut judged = 0;
    for _ in 0..20 {
        let a = with_cpu(service().side(&mut rng, 1, 30), 2.0, 0.3, &mut rng);
        let b = with_cpu(service().side(&mut rng, 1, 30), 2.0, 0.3, &mut rng);
        let row = cpu_row(&compare_sides(&a, &b, (&empty, &empty), &options()));
        judged += usize::from(row.verdict != Verdict::Same);
    }
    assert!(judged <= 1, "{judged} of 20 judged a change");
}

/// A side whose seconds carry the wire's counts: 200 requests a second, each second opening
/// `connects` connections (binomially around the share) and timing 200 responses of which
/// about `two_part` (a share) came in two parts.
fn with_wire(mut side: Side, connects: f64, two_part: f64, rng: &mut fastrand::Rng) -> Side {
    use kiln_findings::record::LoadPoint;
    let t0 = 1_795_428_000_000u64;
    for i in 0..30u64 {
        let mut point = LoadPoint {
            unix_ms: t0 + 1000 * (i + 1),
            requests: 200,
            ..Default::default()
        };
        for _ in 0..200 {
            point.wire.connects += u64::from(rng.f64() < connects);
            point
                .wire
                .response(if rng.f64() < two_part { 41_000 } else { 200 });
        }
        side.record.seconds.push(point);
    }
    side
}

#[test]
fn the_wire_shares_get_intervals_and_verdicts_in_points() {
    let empty = Report::default();
    let mut rng = fastrand::Rng::with_seed(12);
    let row = |c: &kiln_compare::Comparison, metric: &str| {
        c.rows
            .iter()
            .find(|r| r.metric == metric)
            .cloned()
            .unwrap_or_else(|| panic!("no {metric} row"))
    };
    // churn and a delayed-ACK stall fixed: both shares fall, both improved
    let before = with_wire(service().side(&mut rng, 1, 30), 1.0, 0.9, &mut rng);
    let after = with_wire(service().side(&mut rng, 1, 30), 0.0, 0.01, &mut rng);
    let c = compare_sides(&before, &after, (&empty, &empty), &options());
    let churn = row(&c, "requests on a new connection");
    assert_eq!(
        (churn.verdict, churn.base, churn.new),
        (Verdict::Improved, 100.0, 0.0),
        "{churn:?}"
    );
    let split = row(&c, "responses in two parts");
    assert_eq!(split.verdict, Verdict::Improved, "{split:?}");
    assert!(
        (split.base - 90.0).abs() < 2.0 && split.new < 2.0,
        "{split:?}"
    );
    let [lo, hi] = split.interval.unwrap();
    assert!(
        lo < split.change && split.change < hi && hi < -85.0,
        "{split:?}"
    );
    // the two figures count toward the simultaneous intervals
    let without = compare_sides(
        &service().side(&mut rng, 1, 30),
        &service().side(&mut rng, 1, 30),
        (&empty, &empty),
        &options(),
    );
    assert_eq!(c.figures_judged, without.figures_judged + 2);
    // the same shares, drawn again: no change in 19 of 20 trials
    let mut judged = 0;
    for _ in 0..20 {
        let a = with_wire(service().side(&mut rng, 1, 30), 0.3, 0.3, &mut rng);
        let b = with_wire(service().side(&mut rng, 1, 30), 0.3, 0.3, &mut rng);
        let c = compare_sides(&a, &b, (&empty, &empty), &options());
        for metric in ["requests on a new connection", "responses in two parts"] {
            judged += usize::from(row(&c, metric).verdict != Verdict::Same);
        }
    }
    assert!(judged <= 2, "{judged} of 40 judged a change");
}
