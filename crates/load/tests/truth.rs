//! The load engine against targets whose behaviour is known by construction: the numbers
//! kiln reports must match what the target imposed (and counted).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use kiln_load::{
    run_phase, Arrivals, IoPath, KeptConnections, LoadPlan, Model, PhaseSpec, RateStage,
    StopSignal, Target,
};
use kiln_record::{ErrorKind, PhaseEnd, PhaseSummary};
use kiln_targets::{ensure, timing_attempts, Behavior, Stall, TargetServer};

fn closed(connections: usize) -> Model {
    Model::Closed {
        connections,
        think_time: Duration::ZERO,
        ramp_up: Duration::ZERO,
        stages: Vec::new(),
    }
}

fn open(rate: f64, secs: u64, connections: usize, max_connections: usize) -> Model {
    open_for(
        rate,
        Duration::from_secs(secs),
        connections,
        max_connections,
    )
}

/// [`open`] for a length that need not be whole seconds.
fn open_for(rate: f64, length: Duration, connections: usize, max_connections: usize) -> Model {
    Model::Open {
        stages: RateStage::steady(rate, length),
        connections,
        max_connections,
        arrivals: Arrivals::Uniform,
    }
}

fn plan(target: &TargetServer, model: Model, secs: u64) -> LoadPlan {
    plan_on(IoPath::Epoll, target, model, secs)
}

/// [`plan`] on an I/O path: `--io uring` must be available on the machines the tests run on.
fn plan_on(io: IoPath, target: &TargetServer, model: Model, secs: u64) -> LoadPlan {
    if io == IoPath::Uring {
        kiln_load::probe_io_uring().expect("io_uring on the test machine");
    }
    LoadPlan {
        io,
        connect_timeout: Duration::from_secs(2),
        threads: 2,
        timeout: Duration::from_secs(5),
        ..LoadPlan::new(
            Target::parse(&target.url("/")).unwrap(),
            model,
            Duration::from_secs(secs),
        )
    }
}

/// Answers in 2 ms, but the whole server pauses 100 ms every second (like a GC pause).
fn pausing_target() -> TargetServer {
    TargetServer::start(Behavior {
        service_time: Duration::from_millis(2),
        stall: Some(Stall {
            every: Duration::from_secs(1),
            length: Duration::from_millis(100),
        }),
        ..Default::default()
    })
    .unwrap()
}

/// Timing truth needs the machine to itself: these tests run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(plan: &LoadPlan) -> (PhaseSummary, PhaseEnd) {
    let (summary, end, _) = run_timed(plan);
    (summary, end)
}

/// As [`run`], with how long the phase took (its turn on the machine, without the wait for it).
fn run_timed(plan: &LoadPlan) -> (PhaseSummary, PhaseEnd, Duration) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let mut summary = PhaseSummary::new("run");
    let end = run_phase(
        plan,
        &PhaseSpec {
            name: "run".into(),
            measured: true,
            start_at: None,
        },
        &KeptConnections::default(),
        &StopSignal::new(),
        &mut |s| summary.add_second(s),
    )
    .unwrap();
    summary.set_end(&end);
    (summary, end, started.elapsed())
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn near(what: &str, got_ms: f64, want_ms: f64, tolerance_ms: f64) -> Result<(), String> {
    ensure!(
        (got_ms - want_ms).abs() <= tolerance_ms,
        "{what}: got {got_ms:.2} ms, expected {want_ms:.2} ± {tolerance_ms} ms"
    );
    Ok(())
}

/// An open-model phase kept its schedule: every scheduled arrival was sent or reported unsent
/// and every answer the target wrote was counted (always); none was left unsent (a timing
/// check: a pacer starved of CPU at the very end of a phase leaves its last arrival unsent).
fn kept_schedule(
    s: &PhaseSummary,
    end: &PhaseEnd,
    target: &TargetServer,
    scheduled: u64,
) -> Result<(), String> {
    assert_eq!(s.totals.scheduled, scheduled);
    assert_eq!(s.totals.sent + end.unsent, scheduled, "{end:?}");
    assert_eq!(s.responses(), target.answered());
    assert_eq!(s.error_count(), 0, "{:?}", s.totals.errors);
    ensure!(
        end.unsent == 0,
        "{} of {scheduled} arrivals unsent",
        end.unsent
    );
    Ok(())
}

/// A test of the engine on both I/O paths, as `NAME::epoll` and `NAME::uring`: the same
/// truths hold whichever way the sockets are read.
macro_rules! on_both_io_paths {
    ($name:ident) => {
        mod $name {
            #[test]
            fn epoll() {
                super::$name(kiln_load::IoPath::Epoll)
            }
            #[test]
            fn uring() {
                super::$name(kiln_load::IoPath::Uring)
            }
        }
    };
}

/// Timing checks get three attempts (see `timing_attempts`); counts are checked every time.
const ATTEMPTS: usize = 3;

/// Requests slower than `threshold_us`, from the histogram.
fn slower_than(s: &PhaseSummary, threshold_us: u64) -> f64 {
    (s.totals.latency.count() as f64 * (1.0 - s.totals.latency.fraction_at_or_below(threshold_us)))
        .round()
}

/// The target's own view of its answer times (read to written) at quantile `q`, in ms.
fn target_quantile_ms(target: &TargetServer, q: f64) -> f64 {
    let times = target.handling_times_us();
    ms(times[((times.len() - 1) as f64 * q).round() as usize])
}

/// kiln's latency percentiles lie at or above the target's own (a client cannot see an
/// answer before it was written) and at most `slack_ms` above it: loopback plus wake-ups,
/// about 0.2 ms at p50 on a quiet 2-CPU VM, seen near 1 ms at p50 and 3 ms at p99 when the
/// VM is noisy.
fn tracks_target(
    s: &PhaseSummary,
    target: &TargetServer,
    checks: &[(f64, f64)],
) -> Result<(), String> {
    let times = target.handling_times_us();
    for &(q, slack_ms) in checks {
        let kiln = ms(s.totals.latency.quantile_us(q));
        let own = target_quantile_ms(target, q);
        // Below the target's own figure is a defect whatever the machine does; but the two
        // rank their answers apart: the target also counts answers kiln stopped waiting for
        // at the deadline, and rounds its rank where the histogram takes the next. Where 10%
        // of the answers spread over 100 ms a rank is 0.6 ms (a CI run: kiln's p95 52.51 ms,
        // the target's 52.57 ms), so kiln's figure is held to the target's as many ranks
        // lower as the counts differ, and one more.
        let ranks_apart = times.len().abs_diff(s.totals.latency.count() as usize) + 1;
        let rank = ((times.len() - 1) as f64 * q).round() as usize;
        let own_lowest = ms(times[rank.saturating_sub(ranks_apart)]);
        assert!(
            kiln >= own_lowest - 0.01,
            "p{}: kiln {kiln:.2} ms is below the target's own {own:.2} ms ({own_lowest:.2} ms \
             {ranks_apart} ranks lower)",
            q * 100.0
        );
        ensure!(
            kiln <= own + slack_ms,
            "p{}: kiln {kiln:.2} ms, the target's own {own:.2} ms (+{slack_ms} ms allowed)",
            q * 100.0
        );
    }
    Ok(())
}

on_both_io_paths!(closed_model_request_count_equals_what_the_target_answered);
fn closed_model_request_count_equals_what_the_target_answered(io: IoPath) {
    timing_attempts(ATTEMPTS, || {
        let target = TargetServer::start(Behavior {
            service_time: Duration::from_millis(1),
            ..Default::default()
        })
        .unwrap();
        let (s, end) = run(&plan_on(io, &target, closed(8), 2));
        assert_eq!(s.error_count(), 0, "{:?}", s.totals.errors);
        assert_eq!(s.responses(), target.answered());
        assert_eq!(s.totals.status.get(&200), Some(&target.answered()));
        assert_eq!(end.abandoned, 0);
        assert_eq!(end.connections_opened, 8);
        assert!(
            s.totals.latency.min_us() >= 1_000,
            "faster than the 1 ms service time"
        );
        ensure!(s.responses() > 2_000, "only {} responses", s.responses());
        tracks_target(&s, &target, &[(0.5, 1.0), (0.9, 1.5)])
    });
}

/// Phases of one plan run back to back, as a warm-up and the measured run do.
fn run_phases(plan: &LoadPlan, names: &[&str]) -> Vec<(PhaseSummary, PhaseEnd)> {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stop = StopSignal::new();
    // the phases of one run: each leaves its idle connections to the next
    let kept = KeptConnections::default();
    names
        .iter()
        .map(|name| {
            let mut summary = PhaseSummary::new(name);
            let spec = PhaseSpec {
                name: name.to_string(),
                measured: *name != "warmup",
                start_at: None,
            };
            let end = run_phase(plan, &spec, &kept, &stop, &mut |s| summary.add_second(s)).unwrap();
            summary.set_end(&end);
            (summary, end)
        })
        .collect()
}

on_both_io_paths!(the_measured_run_takes_over_the_warm_ups_connections_and_opens_none);
fn the_measured_run_takes_over_the_warm_ups_connections_and_opens_none(io: IoPath) {
    let target = TargetServer::start(Behavior {
        service_time: Duration::from_millis(1),
        ..Default::default()
    })
    .unwrap();
    // phases of 400 ms: what is counted here is connections, not time
    let phase = Duration::from_millis(400);
    for (model, name) in [
        (closed(4), "closed"),
        (open_for(200.0, phase, 3, 10), "open"),
    ] {
        let (before, answered_before) = (target.connections(), target.answered());
        let plan = LoadPlan {
            duration: phase,
            ..plan_on(io, &target, model, 1)
        };
        let phases = run_phases(&plan, &["warmup", "run", "run"]);
        let (warmup, run, last) = (&phases[0].1, &phases[1].1, &phases[2].1);
        assert!(warmup.connections_opened >= 1, "{name}: {warmup:?}");
        assert_eq!(warmup.connections_kept, 0, "{name}: {warmup:?}");
        let opened_later = run.connections_opened + last.connections_opened;
        if name == "closed" {
            // every connection the warm-up opened was idle at its end and went on in the
            // run, and so on to the last; four in all, whichever phase opened them (a
            // starved thread may connect late)
            assert_eq!(
                run.connections_kept, warmup.connections_opened,
                "{phases:?}"
            );
            assert_eq!(
                last.connections_kept,
                run.connections_kept + run.connections_opened,
                "{phases:?}"
            );
            assert_eq!(warmup.connections_opened + opened_later, 4, "{phases:?}");
        } else {
            // the open model starts on the warm-up's connections and opens more only when
            // arrivals find them all busy
            assert!(
                (1..=warmup.connections_opened).contains(&run.connections_kept),
                "{phases:?}"
            );
        }
        // kiln's count of what it opened is what the target accepted
        assert_eq!(
            target.connections() - before,
            warmup.connections_opened + opened_later,
            "{name}"
        );
        for (summary, _) in &phases {
            assert_eq!(summary.error_count(), 0, "{:?}", summary.totals.errors);
        }
        let answered: u64 = phases.iter().map(|(s, _)| s.responses()).sum();
        assert_eq!(answered, target.answered() - answered_before);
    }
}

on_both_io_paths!(open_model_at_a_fixed_rate_sees_a_periodic_stall_as_arriving_users_do);
fn open_model_at_a_fixed_rate_sees_a_periodic_stall_as_arriving_users_do(io: IoPath) {
    // 2 ms service; the whole server pauses 100 ms every second. At a steady rate 10% of
    // arrivals land in a pause and wait for its end: uniformly 0..100 ms more. So
    // P(latency > 2 ms + x) = 0.1 * (1 - x / 100 ms): p95 = 52 ms, p99 = 92 ms, p99.9 = 101 ms.
    timing_attempts(ATTEMPTS, || {
        let target = pausing_target();
        let (s, end) = run(&plan_on(io, &target, open(400.0, 4, 8, 200), 4));
        kept_schedule(&s, &end, &target, 1_600)?;
        // The target did what it was built to do (a disturbed machine can spoil that)...
        near("target p95", target_quantile_ms(&target, 0.95), 52.0, 3.0)?;
        near("target p99", target_quantile_ms(&target, 0.99), 92.0, 3.0)?;
        // ...and kiln reports it: the analytic figures, and the target's own to within slack.
        let l = s.totals.latency.stats();
        near("p95", ms(l.p95_us), 52.0, 4.0)?;
        near("p99", ms(l.p99_us), 92.0, 4.0)?;
        tracks_target(
            &s,
            &target,
            &[(0.5, 1.0), (0.95, 2.0), (0.99, 3.0), (0.999, 4.0)],
        )?;
        // Slower than 50 ms: arrivals that wait more than 48 ms, i.e. in the first 52 ms of
        // a pause: 1600 * 0.052 = 83.
        let slow = slower_than(&s, 50_000);
        ensure!(
            (slow - 83.0).abs() <= 8.0,
            "{slow} requests slower than 50 ms, expected 83"
        );
        Ok(())
    });
}

#[test]
fn closed_model_samples_each_stall_once_per_connection() {
    // The coordinated-omission effect, measured: each of the 4 connections waits out each of
    // the ~4 pauses once, so only ~16 of thousands of samples see the pause and p99 hides it.
    timing_attempts(ATTEMPTS, || {
        let target = pausing_target();
        let (s, _) = run(&plan(&target, closed(4), 4));
        let slow = slower_than(&s, 40_000);
        ensure!(
            (8.0..=24.0).contains(&slow),
            "{slow} samples slower than 40 ms; expected ~16 (4 connections x 4 pauses)"
        );
        let p99 = ms(s.totals.latency.quantile_us(0.99));
        ensure!(
            p99 < 20.0,
            "closed-model p99 {p99:.2} ms should miss the pause"
        );
        Ok(())
    });
}

#[test]
fn every_nth_slow_request_appears_at_exactly_its_share() {
    timing_attempts(ATTEMPTS, || {
        let target = TargetServer::start(Behavior {
            service_time: Duration::from_millis(1),
            slow_every: Some((10, Duration::from_millis(50))),
            ..Default::default()
        })
        .unwrap();
        let (s, end) = run(&plan(&target, open(300.0, 3, 4, 100), 3));
        kept_schedule(&s, &end, &target, 900)?;
        let slow = slower_than(&s, 25_000);
        ensure!(
            slow == 90.0,
            "{slow} requests slower than 25 ms; every 10th of 900 is"
        );
        near("p95", ms(s.totals.latency.quantile_us(0.95)), 51.3, 1.5)?;
        near("p50", ms(s.totals.latency.quantile_us(0.5)), 1.3, 0.7)
    });
}

on_both_io_paths!(a_fixed_service_time_is_reported_within_a_fraction_of_a_millisecond);
fn a_fixed_service_time_is_reported_within_a_fraction_of_a_millisecond(io: IoPath) {
    timing_attempts(ATTEMPTS, || {
        let target = TargetServer::start(Behavior {
            service_time: Duration::from_millis(5),
            ..Default::default()
        })
        .unwrap();
        let (s, end) = run(&plan_on(io, &target, open(200.0, 3, 4, 50), 3));
        kept_schedule(&s, &end, &target, 600)?;
        let l = s.totals.latency.stats();
        assert!(
            l.min_us >= 5_000,
            "min {} us is below the service time",
            l.min_us
        );
        // The target's own clock (sleep overshoot and scheduling on a busy 2-core machine
        // included) is the ground truth; kiln may add only loopback and client time to it.
        tracks_target(&s, &target, &[(0.5, 1.0), (0.9, 1.5), (0.99, 3.0)])
    });
}

on_both_io_paths!(connection_resets_are_counted_as_resets_and_the_rest_as_answers);
fn connection_resets_are_counted_as_resets_and_the_rest_as_answers(io: IoPath) {
    let target = TargetServer::start(Behavior {
        reset_every: Some(5),
        ..Default::default()
    })
    .unwrap();
    let (s, _) = run(&plan_on(io, &target, closed(2), 1));
    assert!(target.resets() > 10);
    assert_eq!(
        s.totals.errors.get(&ErrorKind::Reset).copied().unwrap_or(0),
        target.resets()
    );
    assert_eq!(s.responses(), target.answered());
    assert_eq!(s.error_count(), target.resets(), "{:?}", s.totals.errors);
}

on_both_io_paths!(a_target_that_stops_answering_ends_the_phase_early_with_a_reason);
fn a_target_that_stops_answering_ends_the_phase_early_with_a_reason(io: IoPath) {
    let target = TargetServer::start(Behavior {
        hang_after: Some(200),
        ..Default::default()
    })
    .unwrap();
    let mut p = plan_on(io, &target, closed(4), 60);
    p.timeout = Duration::from_secs(1);
    p.dead_after = Duration::from_secs(2);
    let started = Instant::now();
    let (s, end) = run(&p);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let reason = end.stopped_early.expect("the phase should stop early");
    assert!(reason.contains("stopped answering"), "{reason}");
    // Connections answering concurrently may slip a few answers past the limit.
    assert_eq!(s.responses(), target.answered());
    assert!((200..=204).contains(&target.answered()));
    assert!(
        s.totals
            .errors
            .get(&ErrorKind::Timeout)
            .copied()
            .unwrap_or(0)
            >= 4
    );
}

/// A target whose accept queue is full: connections wait in SYN retries, the two it let in
/// get no answer. wrk and oha end at the deadline; so does kiln (it took 11 s of a 3 s run
/// when it waited for them up to --timeout), and it says what it cut.
#[test]
fn the_run_ends_at_its_deadline_and_counts_what_was_still_waiting() {
    let (_listener, addr) = kiln_targets::idle_listener(0);
    let mut p = LoadPlan {
        connect_timeout: Duration::from_secs(10),
        threads: 2,
        timeout: Duration::from_secs(10),
        ..LoadPlan::new(
            Target::parse(&format!("http://{addr}/")).unwrap(),
            closed(8),
            Duration::from_secs(2),
        )
    };
    p.dead_after = Duration::from_secs(30);
    let (s, end, took) = run_timed(&p);
    assert!(took < Duration::from_secs(3), "a 2 s run took {took:?}");
    assert_eq!(s.totals.requests, 0, "{:?}", s.totals);
    // every connection is cut: its request sent and unanswered, or never connected
    assert_eq!(end.abandoned + end.abandoned_connecting, 8, "{end:?}");
    assert!(end.abandoned_connecting >= 1, "{end:?}");
    // the window is the run's, not the wait after it
    assert!((2_000_000..2_300_000).contains(&end.duration_us), "{end:?}");
}

#[test]
fn ramping_stages_send_the_integral_of_the_rate() {
    let model = Model::Open {
        stages: vec![
            RateStage {
                duration: Duration::from_secs(2),
                target_rate: 400.0,
            },
            RateStage {
                duration: Duration::from_secs(1),
                target_rate: 400.0,
            },
        ],
        connections: 2,
        max_connections: 50,
        arrivals: Arrivals::Uniform,
    };
    timing_attempts(ATTEMPTS, || {
        let target = TargetServer::start(Behavior::default()).unwrap();
        let (s, end) = run(&plan(&target, model.clone(), 3));
        // 0 -> 400/s over 2 s is 400 arrivals; 1 s at 400/s is 400 more.
        kept_schedule(&s, &end, &target, 800)
    });
}

#[test]
fn when_the_connection_cap_is_reached_queueing_is_charged_and_unsent_is_counted() {
    // Two connections of a 20 ms target carry at most 100/s; 200/s are asked for. The
    // schedule is kept: requests wait in kiln's queue, latency counts that wait, the service
    // time does not, and what never left the queue is reported as unsent.
    let target = TargetServer::start(Behavior {
        service_time: Duration::from_millis(20),
        ..Default::default()
    })
    .unwrap();
    let (s, end) = run(&plan(&target, open(200.0, 2, 1, 2), 2));
    assert_eq!(s.totals.scheduled, 400);
    // Service time: the target's 20 ms and loopback, never less.
    let service_p50 = ms(s.totals.service.as_ref().unwrap().quantile_us(0.5));
    assert!(
        (20.0..=23.0).contains(&service_p50),
        "service p50 {service_p50:.2} ms"
    );
    let latency_p50 = ms(s.totals.latency.quantile_us(0.5));
    assert!(
        latency_p50 > 200.0,
        "latency p50 {latency_p50} ms should include the queueing"
    );
    assert!(end.unsent > 100, "unsent {}", end.unsent);
    assert_eq!(s.totals.sent + end.unsent, 400);
    assert!(s.max_connections <= 2);
}

/// `--http2-streams` over h2c to hyper's HTTP/2 server, each request held 50 ms.
fn streams_plan(target: &kiln_targets::h2::H2Target, model: Model, streams: usize) -> LoadPlan {
    LoadPlan {
        http2: true,
        http2_streams: streams,
        threads: 1,
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(5),
        ..LoadPlan::new(
            Target::parse(&target.url(false, "/sleep/50")).unwrap(),
            model,
            Duration::from_secs(2),
        )
    }
}

#[test]
fn http2_streams_keep_that_many_requests_in_flight_on_each_connection() {
    // Two connections of five streams hold ten requests at once (five on each), never more;
    // one stream per connection holds two. The server counts what it held.
    for (streams, most) in [(5, (10, 5)), (1, (2, 1))] {
        timing_attempts(ATTEMPTS, || {
            let target = kiln_targets::h2::H2Target::start(false).unwrap();
            let (s, end) = run(&streams_plan(&target, closed(2), streams));
            assert_eq!(s.error_count(), 0, "{:?}", s.totals.errors);
            assert_eq!(target.connections(), 2, "{streams} streams");
            assert_eq!(end.connections_opened, 2);
            // every answer counted; those cut at the deadline were not answered to kiln
            assert_eq!(s.responses() + end.abandoned, target.total());
            assert!(
                s.totals.latency.min_us() >= 50_000,
                "faster than the server's 50 ms"
            );
            let (all, on_one) = target.most_at_once();
            assert!(
                all <= most.0 && on_one <= most.1,
                "{streams} streams: {all}, {on_one}"
            );
            // 2 s of 2 x streams requests each held 50 ms: at most 80 x streams
            let most_sent = 2 * 2 * streams as u64 * 20;
            assert!(s.responses() <= most_sent, "{}", s.responses());
            // every stream in flight at once at some moment, and most of the time
            ensure!(
                (all, on_one) == most,
                "{streams} streams: at most {all} at once, {on_one} on one connection"
            );
            ensure!(
                s.responses() >= most_sent / 2,
                "{streams} streams: {} responses of {most_sent} at most",
                s.responses()
            );
            Ok(())
        });
    }
}

#[test]
fn an_open_model_sends_its_arrivals_on_the_streams_of_the_connections_it_has() {
    // 100/s of 50 ms requests keep five in flight: one connection of eight streams carries
    // them, and no second one is opened although four are allowed (a starved pacer that
    // releases a burst of arrivals may need one: a timing check).
    timing_attempts(ATTEMPTS, || {
        let target = kiln_targets::h2::H2Target::start(false).unwrap();
        let (s, end) = run(&streams_plan(&target, open(100.0, 2, 1, 4), 8));
        assert_eq!(s.totals.scheduled, 200);
        assert_eq!(s.error_count(), 0, "{:?}", s.totals.errors);
        assert_eq!(s.totals.sent + end.unsent, 200);
        assert_eq!(s.responses() + end.abandoned, target.total());
        let (most, on_one) = target.most_at_once();
        assert!(on_one <= 8 && target.connections() <= 4, "{on_one}");
        ensure!(end.unsent == 0, "{} unsent", end.unsent);
        ensure!(
            target.connections() == 1 && (4..=8).contains(&most) && on_one == most,
            "{} connections, {most} at once, {on_one} on one",
            target.connections()
        );
        Ok(())
    });
}
