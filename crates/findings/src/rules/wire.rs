//! Rules over what kiln saw on its side of the socket: responses held back behind their
//! headers by a delayed ACK, and connections that carry one request each.

use kiln_record::wire::WireSecond;
use serde_json::json;

use super::{duration_us, Draft, Rule};
use crate::{RunRecord, Severity, Verdict};

/// Fewer responses than this say nothing about how they arrive.
const MIN_RESPONSES: u64 = 50;

/// The measured phases' wire figures, their requests, and all the time requests took.
struct Measured {
    wire: WireSecond,
    requests: u64,
    mean_us: f64,
    latency_total_us: f64,
    /// The open model counts latency from the scheduled time, so a request's connect is in
    /// it; the closed model times from the send, after the connect (as wrk does).
    connect_in_latency: bool,
}

impl Measured {
    fn of(run: &RunRecord) -> Option<Self> {
        let total = run.measured()?;
        let stats = total.totals.latency.stats();
        Some(Self {
            wire: total.totals.wire.clone(),
            requests: total.totals.requests,
            mean_us: stats.mean_us,
            latency_total_us: stats.mean_us * stats.count as f64,
            connect_in_latency: run.open_model(),
        })
    }

    /// What `us` microseconds of waiting are of all the time requests took.
    fn share_of_latency(&self, us: f64) -> f64 {
        if self.latency_total_us > 0.0 {
            (us / self.latency_total_us).min(1.0)
        } else {
            0.0
        }
    }

    /// What `us` microseconds of connecting are of all the time requests took, connects
    /// included: outside the closed model's latency, inside the open model's.
    fn share_with_connects(&self, us: f64) -> f64 {
        let outside = if self.connect_in_latency { 0.0 } else { us };
        let total = self.latency_total_us + outside;
        if total > 0.0 {
            (us / total).min(1.0)
        } else {
            0.0
        }
    }
}

pub const DELAYED_ACK: Rule = Rule {
    id: "net.delayed-ack",
    judge: delayed_ack,
};

/// A share of responses this large, with their last byte 30-60 ms (or ~200 ms) after their
/// first, is the pattern, not chance.
const DELAYED_ACK_SHARE: f64 = 0.10;

/// Responses whose body arrives ~40 ms after their headers: the server wrote the two in two
/// writes, Nagle's algorithm held the second until the first was acknowledged, and the client
/// delayed its ACK (Linux: 40 ms at least; 200 ms on other stacks).
fn delayed_ack(run: &RunRecord) -> Verdict {
    let Some(measured) = Measured::of(run) else {
        return Verdict::Unjudged("no measured load".into());
    };
    let (wire, mean_us) = (&measured.wire, measured.mean_us);
    let responses = wire.responses();
    if responses < MIN_RESPONSES {
        return Verdict::Unjudged(format!(
            "{responses} HTTP/1.1 responses timed on the wire (HTTP/2, or too few to judge)"
        ));
    }
    let band = wire.delayed_ack_band();
    let share = band as f64 / responses as f64;
    if share < DELAYED_ACK_SHARE {
        return Verdict::Clear;
    }
    let mean_gap_us = wire.two_part_mean_us().unwrap_or(0.0);
    // what the held-back bodies cost, of all the time requests took
    let cost = measured.share_of_latency(wire.gap_us_over_30ms as f64);
    let (linux, other) = (wire.gaps[3], wire.gaps[5]);
    let timer = if linux >= other {
        "Linux's 40 ms minimum delayed-ACK time"
    } else {
        "the 200 ms delayed ACK of other TCP stacks"
    };
    Verdict::Found(vec![Draft {
        rule: DELAYED_ACK.id,
        key: "",
        severity: if share >= 0.5 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "{:.0}% of responses arrived in two parts {} apart: a delayed-ACK stall",
            share * 100.0,
            duration_us(mean_gap_us.round() as u64)
        ),
        evidence: vec![
            format!(
                "{band} of {responses} responses had their last byte {} after their first \
                 on average ({linux} at 30-60 ms, {other} at 180-260 ms): {timer}",
                duration_us(mean_gap_us.round() as u64)
            ),
            format!(
                "the waits add up to {:.0}% of all the time requests took (mean latency {})",
                cost * 100.0,
                duration_us(mean_us.round() as u64)
            ),
        ]
        .into_iter()
        .chain(
            wire.reads_per_response()
                .filter(|_| wire.reads > 0)
                .map(|r| {
                    format!(
                        "kiln read each response in {r:.2} socket reads on average (one piece: 1)"
                    )
                }),
        )
        .collect(),
        window: None,
        cause: "the target writes a response's headers and its body in two writes; Nagle's \
                algorithm holds the second until the first is acknowledged, and the client \
                delays that ACK, so each response waits out the client's delayed-ACK timer \
                with the target's CPU idle"
            .into(),
        fix: "write headers and body in one write (a buffered response), or set TCP_NODELAY \
              on the server's sockets: the JDK's HttpServer -Dsun.net.httpserver.nodelay=true, \
              Tomcat's tcpNoDelay (on by default), Python's http.server a buffered wfile \
              (wbufsize = -1 on the handler), Node's socket.setNoDelay()"
            .into(),
        impact: (cost, "latency"),
        data: json!({"responses": responses, "in_band": band, "gaps": wire.gaps,
            "mean_gap_us": mean_gap_us.round(), "share": share, "latency_share": cost}),
    }
    .finish()])
}

pub const CONNECTION_CHURN: Rule = Rule {
    id: "net.connection-churn",
    judge: connection_churn,
};

/// Requests per connection below this, over many connections, is a connection a request.
const CHURN_REQUESTS_PER_CONNECTION: f64 = 1.5;
const CHURN_MIN_CONNECTS: u64 = 50;

/// The target closes its connection after each response (or nearly): every request pays a
/// connect (and a TLS handshake), and the host fills with TIME_WAIT sockets.
fn connection_churn(run: &RunRecord) -> Verdict {
    let Some(measured) = Measured::of(run) else {
        return Verdict::Unjudged("no measured load".into());
    };
    let (wire, requests) = (&measured.wire, measured.requests);
    if wire.connects < CHURN_MIN_CONNECTS || requests == 0 {
        return Verdict::Clear;
    }
    // at least CHURN_MIN_CONNECTS: some were opened
    let per_connection = wire.requests_per_connection(requests).unwrap_or(0.0);
    if per_connection >= CHURN_REQUESTS_PER_CONNECTION {
        return Verdict::Clear;
    }
    // Churn is connections the target ended and kiln had to open again. An overloaded target
    // in the open model has kiln open connections for requests waiting (251 for 53 answered,
    // 46 ended by the target): that is the backlog, not churn.
    if wire.closed_by_target.saturating_mul(2) < wire.connects {
        return Verdict::Clear;
    }
    let connect_mean_us = wire.connect_us as f64 / wire.connects as f64;
    let tls_mean_us = match wire.tls_handshakes {
        0 => 0.0,
        n => wire.tls_us as f64 / n as f64,
    };
    let cost = measured.share_with_connects(wire.connect_us.saturating_add(wire.tls_us) as f64);
    let mut evidence = vec![
        format!(
            "{} connections opened for {requests} requests: {per_connection:.2} requests a \
             connection",
            wire.connects
        ),
        format!(
            "the target ended {} of them (it said Connection: close, or closed after the \
             response); kiln keeps every connection open",
            wire.closed_by_target
        ),
        format!(
            "each new connection cost {} to connect{}: {:.0}% of all the time requests took",
            duration_us(connect_mean_us.round() as u64),
            if wire.tls_handshakes > 0 {
                format!(
                    " and {} of TLS handshake ({} of {} resumed a session)",
                    duration_us(tls_mean_us.round() as u64),
                    wire.tls_resumed,
                    wire.tls_handshakes
                )
            } else {
                String::new()
            },
            cost * 100.0
        ),
    ];
    evidence.push(
        "every closed connection leaves a TIME_WAIT socket for 60 s on the side that closed \
         it: at this rate the host's ports and conntrack entries run low"
            .into(),
    );
    Verdict::Found(vec![Draft {
        rule: CONNECTION_CHURN.id,
        key: "",
        severity: if cost >= 0.2 {
            Severity::High
        } else {
            Severity::Medium
        },
        title: format!(
            "A new connection{} for every request ({per_connection:.2} requests a connection)",
            if wire.tls_handshakes > 0 {
                " and TLS handshake"
            } else {
                ""
            }
        ),
        evidence,
        window: None,
        cause: "the target closes each connection after its response (HTTP/1.0 without \
                keep-alive, a Connection: close it sends, or a keep-alive limit of one \
                request), so every request pays for a new connection"
            .into(),
        fix: match sync_workers(run) {
            // gunicorn's sync workers close every connection by design: keep-alive settings
            // cannot change that, their worker class can
            Some(master) => format!(
                "the target is gunicorn's master ({master}) and workers, whose default sync \
                 worker closes every connection and serves one at a time: a threaded or async \
                 worker class keeps connections alive (gunicorn -k gthread --threads N, -k \
                 gevent, or uvicorn's workers), or a proxy in front (nginx) keeps the clients' \
                 connections while it forwards to the workers"
            ),
            None => "keep connections alive on the server: HTTP/1.1 persistent connections (no \
                     Connection: close), a keep-alive timeout and request limit above the \
                     client's pace (nginx keepalive_timeout and keepalive_requests, Tomcat \
                     maxKeepAliveRequests, Python's http.server protocol_version = \
                     \"HTTP/1.1\"); and a proxy in between keeping its upstream connections \
                     (nginx upstream keepalive)"
                .into(),
        },
        impact: (cost, "latency"),
        data: json!({"connects": wire.connects, "requests": requests,
            "requests_per_connection": per_connection, "closed_by_target": wire.closed_by_target,
            "connect_mean_us": connect_mean_us.round(), "tls_mean_us": tls_mean_us.round(),
            "latency_share": cost}),
    }
    .finish()])
}

/// The pid of the target's gunicorn master when the target is one with workers (the
/// sampler names each process of a pre-fork target).
fn sync_workers(run: &RunRecord) -> Option<i32> {
    run.resources
        .iter()
        .filter_map(|s| s.process.as_ref())
        .flat_map(|p| p.processes.first())
        .find(|master| master.name == "gunicorn")
        .map(|master| master.pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{load_run, Second};

    /// A run of 10 seconds of 100 responses, each second's wire figures set by `wire`.
    fn run_with(wire: impl Fn(&mut WireSecond)) -> RunRecord {
        let mut run = load_run(&vec![Second::latencies(&[(44_000, 100)]); 10]);
        let totals = &mut run.phases[0].totals.wire;
        for _ in 0..10 {
            let mut w = WireSecond::default();
            wire(&mut w);
            totals.merge(&w);
        }
        run
    }

    #[test]
    fn bodies_held_40_ms_behind_their_headers_are_a_delayed_ack_stall() {
        let run = run_with(|w| {
            for _ in 0..90 {
                w.response(42_000);
            }
            for _ in 0..10 {
                w.response(100);
            }
        });
        let Verdict::Found(found) = delayed_ack(&run) else {
            panic!("not found")
        };
        let f = &found[0];
        assert_eq!(f.severity, Severity::High);
        assert!(f.title.starts_with("90% of responses"), "{}", f.title);
        assert!(f.evidence[0].contains("Linux's 40 ms"), "{:?}", f.evidence);
        // 900 waits of 42 ms in 1000 requests of 44 ms
        assert!((f.impact.share - 900.0 * 42.0 / (1000.0 * 44.0)).abs() < 0.01);
    }

    #[test]
    fn responses_in_one_piece_or_slow_in_one_write_are_clear() {
        // a target slow for 40 ms of real work writes its response at once: no gap
        let run = run_with(|w| {
            for _ in 0..100 {
                w.response(200);
            }
        });
        assert!(matches!(delayed_ack(&run), Verdict::Clear));
    }

    #[test]
    fn a_connection_per_request_is_churn_and_kept_connections_are_not() {
        let churn = run_with(|w| {
            w.connects = 100;
            w.connect_us = 100 * 150;
            w.closed_by_target = 100;
        });
        let Verdict::Found(found) = connection_churn(&churn) else {
            panic!("not found")
        };
        assert!(
            found[0].title.contains("1.00 requests a connection"),
            "{}",
            found[0].title
        );
        assert!(
            found[0].evidence[1].contains("ended 1000"),
            "{:?}",
            found[0].evidence
        );
        let kept = run_with(|w| {
            if w.connects == 0 {
                w.connects = 1;
            }
        });
        assert!(matches!(connection_churn(&kept), Verdict::Clear));
        // connections opened for a backlog of requests, few of them ended by the target
        let grown = run_with(|w| {
            w.connects = 100;
            w.connect_us = 100 * 300_000;
            w.closed_by_target = 20;
        });
        assert!(matches!(connection_churn(&grown), Verdict::Clear));
    }

    #[test]
    fn gunicorns_churn_is_fixed_by_its_worker_class_not_keep_alive_settings() {
        let churned = || {
            run_with(|w| {
                w.connects = 100;
                w.connect_us = 100 * 150;
                w.closed_by_target = 100;
            })
        };
        let fix_of = |run: &RunRecord| match connection_churn(run) {
            Verdict::Found(found) => found[0].fix.clone(),
            _ => panic!("not found"),
        };
        let serving = |names: [&str; 3]| kiln_sample::ProcessSecond {
            processes: names
                .iter()
                .enumerate()
                .map(|(i, name)| kiln_sample::ServingProcess {
                    pid: 100 + i as i32,
                    name: name.to_string(),
                    ppid: if i == 0 { 1 } else { 100 },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let mut gunicorn = churned();
        gunicorn.resources = vec![kiln_sample::ResourceSecond {
            process: Some(serving(["gunicorn"; 3])),
            ..Default::default()
        }];
        let fix = fix_of(&gunicorn);
        assert!(
            fix.contains("gunicorn's master (100)") && fix.contains("-k gthread"),
            "{fix}"
        );
        // nginx's workers keep connections alive when told: the keep-alive advice stands
        let mut nginx = churned();
        nginx.resources = vec![kiln_sample::ResourceSecond {
            process: Some(serving(["nginx"; 3])),
            ..Default::default()
        }];
        assert!(fix_of(&nginx).starts_with("keep connections alive"));
        assert!(fix_of(&churned()).starts_with("keep connections alive"));
    }

    /// Connecting as long as the request takes is half of a closed-model request's time (its
    /// latency starts at the send, after the connect) and all of an open-model one's (its
    /// latency counts from the schedule, the connect inside it).
    #[test]
    fn the_connect_share_counts_connects_where_the_model_puts_them() {
        let churn = |open: bool| {
            let mut run = run_with(|w| {
                w.connects = 100;
                w.connect_us = 100 * 44_000;
                w.closed_by_target = 100;
            });
            if !open {
                let kiln_record::schema::plan::PlanRecord::Load(plan) = &mut run.manifest.plan
                else {
                    unreachable!()
                };
                plan.workload = kiln_record::schema::plan::Model::Closed {
                    connections: 1,
                    think_time: std::time::Duration::ZERO,
                    ramp_up: std::time::Duration::ZERO,
                    stages: Vec::new(),
                };
            }
            let Verdict::Found(found) = connection_churn(&run) else {
                panic!("not found")
            };
            found[0].impact.share
        };
        assert!((churn(false) - 0.5).abs() < 1e-3, "{}", churn(false));
        assert!((churn(true) - 1.0).abs() < 1e-3, "{}", churn(true));
    }
}
