//! A standalone known-behaviour target for benchmarks and manual experiments:
//! `kiln-target --port 8080 --service-ms 2 --stall-every-ms 1000 --stall-ms 100`, or
//! `kiln-target --workers 4 --service-ms 10` (4 workers of 10 ms: 400 requests/s at most).
//! Prints `listening on ADDR` and serves until killed.

use std::time::Duration;

use kiln_targets::{Behavior, Stall, TargetServer};

const USAGE: &str =
    "usage: kiln-target [--port N] [--service-ms MS] [--stall-every-ms MS --stall-ms MS] \
[--slow-every N --slow-ms MS] [--slow-permille N --slow-ms MS] [--reset-every N] [--cpu-us US] [--workers N] [--lock-us US [--crosstalk-us US]] [--tls]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut behavior = Behavior::default();
    let (mut port, mut stall_every, mut stall_ms, mut slow_every, mut slow_ms) =
        (0u16, 0u64, 0u64, 0u64, 0u64);
    let mut slow_permille = 0u64;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if flag == "--tls" {
            behavior.tls = true;
            i += 1;
            continue;
        }
        let Some(value) = args.get(i + 1).and_then(|v| v.parse::<u64>().ok()) else {
            eprintln!("kiln-target: '{flag}' needs a whole number\n{USAGE}");
            std::process::exit(2);
        };
        match flag {
            "--port" => port = value.min(u16::MAX as u64) as u16,
            "--service-ms" => behavior.service_time = Duration::from_millis(value),
            "--stall-every-ms" => stall_every = value,
            "--stall-ms" => stall_ms = value,
            "--slow-every" => slow_every = value,
            "--slow-ms" => slow_ms = value,
            "--slow-permille" => slow_permille = value.min(1000),
            "--reset-every" => behavior.reset_every = Some(value),
            "--cpu-us" => behavior.cpu_per_request = Duration::from_micros(value),
            // a pool of N workers serves the requests (a connection waits for a free one)
            "--workers" => behavior.planted.workers = Some(value.max(1) as usize),
            // a lock every request holds this long, and longer by --crosstalk-us for every
            // other request waiting for it
            "--lock-us" => behavior.planted.lock_hold = Duration::from_micros(value),
            "--crosstalk-us" => behavior.planted.lock_crosstalk = Duration::from_micros(value),
            _ => {
                eprintln!("kiln-target: unknown flag '{flag}'\n{USAGE}");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    if stall_every > 0 && stall_ms > 0 {
        behavior.stall = Some(Stall {
            every: Duration::from_millis(stall_every),
            length: Duration::from_millis(stall_ms),
        });
    }
    if slow_every > 0 {
        behavior.slow_every = Some((slow_every, Duration::from_millis(slow_ms)));
    }
    if slow_permille > 0 {
        behavior.slow_chance = Some((
            slow_permille as f64 / 1000.0,
            Duration::from_millis(slow_ms),
        ));
    }
    match TargetServer::start_on(&format!("127.0.0.1:{port}"), behavior) {
        Ok(server) => {
            println!("listening on {}", server.addr());
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Err(e) => {
            eprintln!("kiln-target: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(1);
        }
    }
}
