//! What to load and how: the target, the request, the workload model. Built from flags or
//! YAML by the binary; validated here so every front end gives the same clear errors.

pub use kiln_record::schema::plan::{
    Arrivals, HedgePlanRecord, IoPath, LoadPlanRecord, Model, RateStage, Shard, VuStage,
};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::Method;

pub use crate::error::PlanError;
pub use crate::target::{redact_password, Target};

/// The longest duration kiln takes (about 31 years): anything longer is a typo, and would
/// overflow the clock when added to now.
pub const MAX_DURATION: Duration = Duration::from_secs(1_000_000_000);

/// A `--start-at` time: RFC 3339 in UTC (`2026-12-01T10:00:00Z`), as shards take it.
pub fn parse_start_at(text: &str) -> Result<std::time::SystemTime, PlanError> {
    humantime::parse_rfc3339_weak(text.trim_end_matches('Z'))
        .map_err(|_| PlanError::BadStartAt(text.to_string()))
}

/// A duration given on the command line, checked once as the flags are parsed (clap takes it
/// through `FromStr`): its value, and the text as given (a plan file takes `-d` as its own
/// `duration` setting, in the user's words).
#[derive(Clone, Debug, PartialEq)]
pub struct DurationArg {
    pub value: Duration,
    pub text: String,
}

impl std::str::FromStr for DurationArg {
    type Err = PlanError;

    fn from_str(text: &str) -> Result<Self, PlanError> {
        Ok(Self {
            value: parse_duration(text)?,
            text: text.to_string(),
        })
    }
}

impl DurationArg {
    /// The value of an optional flag, `default` (a valid duration) when it was not given.
    pub fn or(arg: Option<&Self>, default: Duration) -> Duration {
        arg.map_or(default, |a| a.value)
    }
}

/// Parses `500ms`, `30s`, `3m`, `1h`, `1m30s`; a bare number means seconds.
pub fn parse_duration(text: &str) -> Result<Duration, PlanError> {
    let t = text.trim();
    let bad = |why: String| PlanError::BadDuration {
        text: text.to_string(),
        why,
    };
    let parsed = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Duration::try_from_secs_f64(secs).map_err(|e| bad(e.to_string()))?
        }
        Ok(_) => return Err(bad("not a positive number of seconds".into())),
        Err(_) => humantime::parse_duration(t).map_err(|e| bad(e.to_string()))?,
    };
    if parsed > MAX_DURATION {
        return Err(bad(format!(
            "longer than {} s (about 31 years)",
            MAX_DURATION.as_secs()
        )));
    }
    Ok(parsed)
}

/// The request every connection sends.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub method: Method,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    /// A streaming gRPC method's call: the messages its body carries (a client stream's
    /// lines; 1 for a server stream). Each call's received messages and its first message's
    /// latency are then recorded.
    pub grpc_stream_sent: Option<u32>,
}

impl Default for RequestSpec {
    fn default() -> Self {
        Self {
            method: Method::GET,
            headers: Vec::new(),
            body: Bytes::new(),
            grpc_stream_sent: None,
        }
    }
}

impl RequestSpec {
    pub fn parse_method(text: &str) -> Result<Method, PlanError> {
        Method::from_bytes(text.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| PlanError::BadMethod(text.to_string()))
    }

    /// Parses a curl-style `Name: value` header.
    pub fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), PlanError> {
        let bad = || PlanError::BadHeader {
            header: text.to_string(),
        };
        let (name, value) = text.split_once(':').ok_or_else(bad)?;
        let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
        let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
        Ok((name, value))
    }
}

/// The VU count the stages give at `elapsed` (from 0 before the first stage).
pub fn vus_at(stages: &[VuStage], elapsed: Duration) -> f64 {
    let mut from = 0.0;
    let mut start = Duration::ZERO;
    for s in stages {
        let to = s.target_vus as f64;
        if elapsed < start + s.duration {
            let part = (elapsed - start).as_secs_f64() / s.duration.as_secs_f64();
            return from + (to - from) * part;
        }
        start += s.duration;
        from = to;
    }
    from
}

/// The first time at or after `elapsed`, within the stages, when VU `g` runs (the count is
/// above `g`); `None` when it never runs again.
pub fn vu_active_from(stages: &[VuStage], g: usize, elapsed: Duration) -> Option<Duration> {
    let g = g as f64;
    let mut from = 0.0;
    let mut start = Duration::ZERO;
    for s in stages {
        let to = s.target_vus as f64;
        let end = start + s.duration;
        if end >= elapsed {
            let at = elapsed.max(start);
            if s.duration.is_zero() {
                if to > g {
                    return Some(at);
                }
            } else if vus_at(stages, at) > g && at < end {
                return Some(at);
            } else if to > g && to > from {
                // Rising through g: the count passes g just after start + d (g - from) / (to - from).
                let cross = s
                    .duration
                    .mul_f64(((g - from) / (to - from)).clamp(0.0, 1.0));
                let cross = (start + cross + Duration::from_micros(1)).min(end);
                if cross >= at {
                    return Some(cross);
                }
            }
        }
        start = end;
        from = to;
    }
    None
}

/// Parses `30s:100,60s:2000,30s:0`.
pub fn parse_stages(text: &str) -> Result<Vec<RateStage>, PlanError> {
    let bad = |why: String| PlanError::BadStages {
        text: text.to_string(),
        why,
    };
    let mut stages = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (d, r) = part
            .split_once(':')
            .ok_or_else(|| bad(format!("'{part}' is not DURATION:RATE")))?;
        let duration = parse_duration(d).map_err(|e| bad(e.to_string()))?;
        let target_rate: f64 = r
            .trim()
            .parse()
            .map_err(|_| bad(format!("'{r}' is not a rate")))?;
        if !(0.0..=10_000_000.0).contains(&target_rate) {
            return Err(bad(format!(
                "rate {target_rate} must be between 0 and 10000000"
            )));
        }
        stages.push(RateStage {
            duration,
            target_rate,
        });
    }
    if stages.is_empty() {
        return Err(bad("no stages".into()));
    }
    if stages
        .iter()
        .map(|s| s.duration)
        .sum::<Duration>()
        .is_zero()
    {
        return Err(bad("the stages last no time".into()));
    }
    Ok(stages)
}

/// The most `--http2-streams` a connection takes. Servers allow about 100 streams at once
/// (SETTINGS_MAX_CONCURRENT_STREAMS: nginx 128, Go 250); beyond theirs, h2 waits for room.
pub const MAX_HTTP2_STREAMS: usize = 1024;

/// Everything one load phase needs.
#[derive(Clone, Debug)]
pub struct LoadPlan {
    pub target: Target,
    pub request: RequestSpec,
    pub model: Model,
    /// How long each phase offers load (open model: the stages' total).
    pub duration: Duration,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Load generator threads.
    pub threads: usize,
    /// Accept any TLS certificate.
    pub insecure: bool,
    /// Stop the run as interrupted when no response at all came for this long while
    /// requests failed.
    pub dead_after: Duration,
    /// Wait for requests in flight at the deadline up to their timeout (oha's
    /// `--wait-ongoing-requests-after-deadline`), not only a moment.
    pub wait_after_deadline: bool,
    /// Speak HTTP/2 (ALPN `h2` over TLS, prior knowledge on plain TCP).
    pub http2: bool,
    /// `--http2-streams`: requests in flight at once on each HTTP/2 connection (h2load's
    /// `-m`); 1 sends one at a time, as over HTTP/1.1. Over HTTP/1.1 (a TLS server that did
    /// not choose h2) a connection still carries one at a time.
    pub http2_streams: usize,
    /// `--io`: the load threads' plain connections on epoll or on an io_uring each (see
    /// `uring`); set to io_uring only where [`crate::probe_io_uring`] said yes.
    pub io: IoPath,
    /// Why io_uring was asked for and not used.
    pub io_uring_refused: Option<String>,
    /// A plan's scenarios: each VU (closed) or arrival (open) runs iterations of these
    /// instead of sending `request` to `target`.
    pub workload: Option<std::sync::Arc<crate::scenario::Workload>>,
    /// `--hedge`: second copies of slow requests (the URL's request only, not a plan's).
    pub hedge: Option<crate::HedgePlan>,
    /// `--shard i/N`: this process runs its share of the plan (see [`Shard`]).
    pub shard: Option<Shard>,
}

impl LoadPlan {
    /// A GET of `target` with `model` for `duration`, everything else as `kiln run`'s
    /// defaults: 10 s timeout, 5 s to connect, one thread per CPU, HTTP/1.1, certificates
    /// checked, a run ended after 5 s without any response while requests fail.
    pub fn new(target: Target, model: Model, duration: Duration) -> Self {
        Self {
            target,
            request: RequestSpec::default(),
            model,
            duration,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            insecure: false,
            dead_after: Duration::from_secs(5),
            wait_after_deadline: false,
            http2: false,
            http2_streams: 1,
            io: IoPath::Epoll,
            io_uring_refused: None,
            workload: None,
            hedge: None,
            shard: None,
        }
    }

    /// Checks ranges; call before running.
    pub fn validate(&self) -> Result<(), PlanError> {
        let range = |what, ok: bool, why: String| {
            if ok {
                Ok(())
            } else {
                Err(PlanError::OutOfRange { what, why })
            }
        };
        range(
            "--threads",
            (1..=1024).contains(&self.threads),
            format!("{} (1 to 1024)", self.threads),
        )?;
        range(
            "--duration",
            !self.duration.is_zero(),
            "it must be more than 0".into(),
        )?;
        range(
            "--timeout",
            !self.timeout.is_zero(),
            "it must be more than 0".into(),
        )?;
        range(
            "--http2-streams",
            (1..=MAX_HTTP2_STREAMS).contains(&self.http2_streams),
            format!("{} (1 to {MAX_HTTP2_STREAMS})", self.http2_streams),
        )?;
        if self.http2_streams > 1 {
            let needs = |needs| {
                let what = format!("--http2-streams {}", self.http2_streams);
                Err(PlanError::Needs { what, needs })
            };
            if !self.http2 {
                return needs("--http2");
            }
            if self.workload.is_some() {
                return needs("a URL's request, not a plan's scenarios");
            }
            if self.hedge.is_some() {
                return needs("no --hedge (a hedged copy takes a connection of its own)");
            }
        }
        match &self.model {
            Model::Closed { connections, .. } => range(
                "--connections",
                (1..=100_000).contains(connections),
                format!("{connections} (1 to 100000)"),
            ),
            Model::Open {
                connections,
                max_connections,
                ..
            } => {
                range(
                    "--connections",
                    (1..=100_000).contains(connections),
                    format!("{connections} (1 to 100000)"),
                )?;
                range(
                    "--max-connections",
                    max_connections >= connections && *max_connections <= 100_000,
                    format!("{max_connections} (from --connections to 100000)"),
                )
            }
        }
    }

    /// Makes this process shard `shard` of the plan: a closed model's connections (and its
    /// stages' VU counts) divided; an open model keeps its schedule (the engine releases only
    /// the shard's arrivals) and divides its connections. A plan's shared iterations are
    /// divided and its shared data rows dealt (every Nth row). Fails when a shard would get
    /// none.
    pub fn into_shard(mut self, shard: Shard) -> Result<Self, PlanError> {
        let none = |what: &str, total: usize| PlanError::OutOfRange {
            what: "--shard",
            why: format!(
                "shard {} of {} would get none of the {total} {what}",
                shard.index, shard.count
            ),
        };
        match &mut self.model {
            Model::Closed {
                connections,
                stages,
                ..
            } => {
                let total = *connections;
                *connections = shard.part_of(total);
                if *connections == 0 {
                    return Err(none("connections", total));
                }
                for stage in stages.iter_mut() {
                    stage.target_vus = shard.part_of(stage.target_vus);
                }
            }
            Model::Open {
                connections,
                max_connections,
                ..
            } => {
                *connections = shard.part_of(*connections).max(1);
                *max_connections = shard.part_of(*max_connections).max(*connections);
            }
        }
        if let Some(workload) = self.workload.as_mut() {
            let shared = || PlanError::OutOfRange {
                what: "--shard",
                why: "the plan's workload is already in use".into(),
            };
            let workload = std::sync::Arc::get_mut(workload).ok_or_else(shared)?;
            if let Some(iterations) = workload.iterations.as_mut() {
                let total = *iterations;
                *iterations = shard.part_of(total as usize) as u64;
                if *iterations == 0 {
                    return Err(none("iterations", total as usize));
                }
            }
            for feeder in &mut workload.feeders {
                std::sync::Arc::get_mut(feeder)
                    .ok_or_else(shared)?
                    .deal_rows(shard.index, shard.count);
            }
        }
        self.shard = Some(shard);
        Ok(self)
    }

    /// The plan as recorded in `run.json`. Header values are left out: they may be secrets.
    pub fn to_record(&self) -> LoadPlanRecord {
        let mut record = LoadPlanRecord::new(
            &self.target.url,
            self.model.clone(),
            self.duration.as_secs_f64(),
            self.threads,
        );
        record.method = self.request.method.as_str().to_string();
        record.headers = (self.request.headers.iter())
            .map(|(n, _)| n.as_str().to_string())
            .collect();
        record.body_bytes = self.request.body.len();
        record.timeout_s = self.timeout.as_secs_f64();
        record.insecure = self.insecure;
        record.http2 = self.http2;
        record.http2_streams = self.http2_streams;
        record.io = self.io;
        record.io_uring_refused = self.io_uring_refused.clone();
        record.shard = self.shard;
        record.hedge = self.hedge.as_ref().map(|h| HedgePlanRecord {
            delay: h.delay.to_string(),
            cap: h.cap,
            replicas: h.replicas.iter().map(|t| t.url.clone()).collect(),
        });
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_connections_by_largest_remainder_and_parse_as_indexed_jobs_do() {
        let parts: Vec<usize> = (0..3)
            .map(|i| Shard { index: i, count: 3 }.part_of(10))
            .collect();
        assert_eq!(parts, vec![4, 3, 3]);
        assert_eq!(Shard::parse("2/8", None), Ok(Shard { index: 2, count: 8 }));
        assert_eq!(
            Shard::parse("auto/4", Some("3")),
            Ok(Shard { index: 3, count: 4 })
        );
        assert!(Shard::parse("8/8", None).is_err());
        assert!(Shard::parse("auto/4", None)
            .unwrap_err()
            .to_string()
            .contains("JOB_COMPLETION_INDEX"));
        assert!(Shard::parse("1", None).is_err());
        let taken: Vec<u64> = (0..10)
            .filter(|j| Shard { index: 1, count: 4 }.takes(*j))
            .collect();
        assert_eq!(taken, vec![1, 5, 9]);
    }

    #[test]
    fn http2_streams_need_http2_and_a_urls_request_and_are_counted_in_range() {
        let closed = Model::Closed {
            connections: 2,
            think_time: Duration::ZERO,
            ramp_up: Duration::ZERO,
            stages: Vec::new(),
        };
        let target = Target::parse("http://127.0.0.1:8080/").unwrap();
        let mut plan = LoadPlan::new(target, closed, Duration::from_secs(1));
        plan.http2_streams = 10;
        let said = |plan: &LoadPlan| plan.validate().map_err(|e| e.to_string());
        assert_eq!(said(&plan), Err("--http2-streams 10 needs --http2".into()));
        plan.http2 = true;
        assert_eq!(said(&plan), Ok(()));
        for n in [0, MAX_HTTP2_STREAMS + 1] {
            plan.http2_streams = n;
            assert!(said(&plan).unwrap_err().contains("out of range"), "{n}");
        }
        plan.http2_streams = 1;
        plan.http2 = false;
        assert_eq!(
            said(&plan),
            Ok(()),
            "one stream is HTTP/1.1's one request at a time"
        );
    }

    #[test]
    fn a_start_time_or_a_limit_that_does_not_fit_says_what_to_give() {
        assert_eq!(
            parse_start_at("soon").unwrap_err().to_string(),
            "--start-at \"soon\" is not a time such as 2026-12-01T10:00:00Z (UTC)"
        );
        assert!(parse_start_at("2026-12-01T10:00:00Z").is_ok());
        let too_few = PlanError::TooFewOpenFiles {
            flag: "-c",
            needed: 5000,
            files: 5064,
            limit: 1024,
            most: 960,
        };
        assert_eq!(
            too_few.to_string(),
            "-c 5000 needs about 5064 open files and kiln may open 1024 (its hard limit): \
             lower -c to at most 960, or raise the limit (ulimit -Hn / LimitNOFILE)"
        );
    }

    #[test]
    fn durations_in_the_forms_users_type() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("3m").unwrap(), Duration::from_secs(180));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("-3s").is_err());
    }

    #[test]
    fn urls_parse_with_defaults_and_bad_ones_say_why() {
        let t = Target::parse("http://127.0.0.1:8080/api/items?x=1").unwrap();
        assert_eq!(
            (t.port, t.tls, t.path_and_query.as_str()),
            (8080, false, "/api/items?x=1")
        );
        let t = Target::parse("https://127.0.0.1").unwrap();
        assert_eq!((t.port, t.tls, t.path_and_query.as_str()), (443, true, "/"));
        for bad in [
            "127.0.0.1:8080",
            "ftp://x/",
            "http://",
            "http://exa mple/",
            "",
        ] {
            let err = Target::parse(bad).unwrap_err().to_string();
            assert!(
                err.contains("URL") || err.contains("resolve"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_port_out_of_range_is_refused_not_taken_for_the_default() {
        // `:99999` once loaded port 80 while the summary said 99999.
        for bad in [
            "http://127.0.0.1:99999/",
            "http://127.0.0.1:80800/",
            "http://127.0.0.1:0/",
            "http://127.0.0.1:+80/",
        ] {
            let err = Target::parse(bad).unwrap_err().to_string();
            assert!(err.contains("1 to 65535"), "{bad}: {err}");
        }
        assert_eq!(
            Target::parse("http://127.0.0.1:65535/").unwrap().port,
            65535
        );
    }

    #[test]
    fn a_query_without_a_path_asks_for_the_root() {
        let t = Target::parse("http://127.0.0.1?q=1").unwrap();
        assert_eq!(t.path_and_query, "/?q=1");
        assert_eq!(t.authority, "127.0.0.1");
    }

    #[test]
    fn user_and_password_become_basic_auth_and_never_the_host_header() {
        let t = Target::parse("http://al%40ice:p%3Ass@127.0.0.1:8080/x").unwrap();
        assert_eq!(t.authority, "127.0.0.1:8080");
        // base64("al@ice:p:ss")
        assert_eq!(t.basic_auth.unwrap(), "Basic YWxAaWNlOnA6c3M=");
        assert_eq!(t.url, "http://al%40ice:***@127.0.0.1:8080/x");
        assert!(Target::parse("http://127.0.0.1/")
            .unwrap()
            .basic_auth
            .is_none());
        assert_eq!(redact_password("-c"), "-c");
        assert_eq!(redact_password("http://u@h/x:y@z"), "http://u@h/x:y@z");
        assert_eq!(
            redact_password("https://u:p@[::1]:9/"),
            "https://u:***@[::1]:9/"
        );
    }

    #[test]
    fn durations_that_would_overflow_the_clock_are_refused() {
        for bad in ["500000000000y", "1e300", "inf", "NaN", "40years"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_duration("1000000000").unwrap(),
            Duration::from_secs(1_000_000_000)
        );
    }

    #[test]
    fn stages_parse_and_reject_nonsense() {
        let s = parse_stages("30s:100, 60s:2000,30s:0").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].target_rate, 2000.0);
        assert!(parse_stages("30s").is_err());
        assert!(parse_stages("30s:-1").is_err());
        assert!(parse_stages("0s:10").is_err());
        assert!(parse_stages("").is_err());
    }

    #[test]
    fn headers_parse_like_curl() {
        let (n, v) = RequestSpec::parse_header("Content-Type: application/json").unwrap();
        assert_eq!(
            (n.as_str(), v.to_str().unwrap()),
            ("content-type", "application/json")
        );
        assert!(RequestSpec::parse_header("no colon").is_err());
        assert!(RequestSpec::parse_header("bad name: x").is_err());
    }

    fn vu_stages(list: &[(u64, usize)]) -> Vec<VuStage> {
        list.iter()
            .map(|&(ms, n)| VuStage {
                duration: Duration::from_millis(ms),
                target_vus: n,
            })
            .collect()
    }

    #[test]
    fn vus_ramp_hold_and_leave_in_order() {
        // 0 -> 4 over 2 s, 4 for 1 s, 4 -> 0 over 1 s.
        let s = vu_stages(&[(2000, 4), (1000, 4), (1000, 0)]);
        let ms = Duration::from_millis;
        assert_eq!(vus_at(&s, ms(0)), 0.0);
        assert_eq!(vus_at(&s, ms(1000)), 2.0);
        assert_eq!(vus_at(&s, ms(2500)), 4.0);
        assert_eq!(vus_at(&s, ms(3500)), 2.0);
        // VU g starts as the count passes g: VU 0 at once, VU 3 at 1.5 s.
        let start = |g| vu_active_from(&s, g, Duration::ZERO).unwrap().as_millis();
        assert_eq!(start(0), 0);
        assert_eq!(start(1), 500);
        assert_eq!(start(3), 1500);
        assert_eq!(vu_active_from(&s, 4, Duration::ZERO), None);
        // On the way down VU 3 leaves first (at 3.25 s) and does not come back.
        assert_eq!(vu_active_from(&s, 3, ms(3200)), Some(ms(3200)));
        assert_eq!(vu_active_from(&s, 3, ms(3300)), None);
        assert_eq!(vu_active_from(&s, 0, ms(3900)), Some(ms(3900)));
        // A jump to 2 VUs up front, down to 0, back up to 3.
        let s = vu_stages(&[(0, 2), (1000, 0), (1000, 3)]);
        assert_eq!(vu_active_from(&s, 1, Duration::ZERO), Some(Duration::ZERO));
        let back = vu_active_from(&s, 1, ms(600)).unwrap();
        assert!(back > ms(1333) && back < ms(1334), "{back:?}");
        assert_eq!(vu_active_from(&s, 2, ms(0)).unwrap().as_millis(), 1666);
    }

    proptest::proptest! {
        /// The first time VU g runs is when the count is above g, and never before.
        #[test]
        fn a_vu_runs_exactly_while_the_count_is_above_it(
            list in proptest::collection::vec((0u64..3000, 0usize..8), 1..5),
            g in 0usize..8,
            from_ms in 0u64..8000,
        ) {
            let s = vu_stages(&list);
            let total: Duration = s.iter().map(|s| s.duration).sum();
            let from = Duration::from_millis(from_ms);
            let found = vu_active_from(&s, g, from);
            let until = found.unwrap_or(total).min(total);
            let mut t = from;
            while t + Duration::from_millis(5) < until {
                proptest::prop_assert!(vus_at(&s, t) <= g as f64 + 1e-9, "{t:?} before {found:?}");
                t += Duration::from_millis(5);
            }
            if let Some(at) = found {
                proptest::prop_assert!(at >= from && at <= total);
                let after = (at + Duration::from_micros(1)).min(total);
                let up = vus_at(&s, at).max(vus_at(&s, after));
                proptest::prop_assert!(up > g as f64 - 1e-6, "at {at:?}: {up}");
            }
        }

        #[test]
        fn no_text_panics_the_parsers(text in ".{0,60}") {
            let _ = parse_duration(&text);
            let _ = parse_stages(&text);
            let _ = RequestSpec::parse_header(&text);
            let _ = RequestSpec::parse_method(&text);
        }

        #[test]
        // Numeric hosts only, so the test never waits on DNS.
        fn no_url_text_panics_the_url_parser(text in "(http|https|ftp)?(://)?[0-9.:/?=\\[\\]%@ -]{0,30}") {
            let _ = Target::parse(&text);
        }
    }
}
