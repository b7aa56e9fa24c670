//! k6-style pass/fail thresholds: `--threshold 'p99<250ms' --threshold 'failed<1%'`.
//! Evaluated on the measured results (warm-up excluded); any failure exits with 99, as k6
//! does, so CI can gate on latency. Stored in the plan so `kiln report` re-checks them.

use kiln_record::schema::plan::PlanRecord;
use std::fmt;

use kiln_load::plan::parse_duration;
use kiln_record::{PhaseSummary, SecondRecord};

/// What a threshold measures.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Metric {
    /// Latency quantile (0..=1).
    Quantile(f64),
    Max,
    Min,
    Mean,
    /// Share of requests that failed (no response, or status >= 400), 0..=1.
    FailedRatio,
    /// Completed requests per second.
    Throughput,
    /// Open model: arrivals never sent.
    Unsent,
    /// A plan's checks: the share that passed, 0..=1.
    Checks,
    /// A gRPC run (`grpc{status:UNAVAILABLE}<0.1%`): the share of calls that ended with this
    /// status code, 0..=1.
    GrpcStatus(u8),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

/// One parsed threshold, e.g. `p99<250ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    pub text: String,
    metric: Metric,
    op: Op,
    /// In the metric's unit: microseconds, a ratio, requests/s or a count.
    limit: f64,
    /// `p99{name:login}<300ms`: only the requests of one name (a plan step's).
    name: Option<String>,
}

/// A threshold checked against results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThresholdResult {
    pub threshold: String,
    pub ok: bool,
    /// The measured value in the metric's unit (us for latencies).
    pub actual: f64,
    pub actual_text: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("bad threshold '{text}': {why} (e.g. 'p99<250ms', 'p(99.9)<1s', 'max<2s', 'failed<1%', 'rate>=1000', 'checks>99%', 'p95{{name:login}}<300ms', 'grpc{{status:UNAVAILABLE}}<0.1%')")]
pub struct ThresholdError {
    text: String,
    why: String,
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn parse_metric(name: &str) -> Option<Metric> {
    let name = name.trim().to_ascii_lowercase();
    let quantile = |pct: &str| {
        pct.parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
            .map(|p| Metric::Quantile(p / 100.0))
    };
    match name.as_str() {
        "max" => Some(Metric::Max),
        "min" => Some(Metric::Min),
        "mean" | "avg" => Some(Metric::Mean),
        "med" | "median" => Some(Metric::Quantile(0.5)),
        "failed" | "errors" | "error_rate" | "http_req_failed" => Some(Metric::FailedRatio),
        "rate" | "rps" | "throughput" => Some(Metric::Throughput),
        "unsent" => Some(Metric::Unsent),
        "checks" => Some(Metric::Checks),
        _ => {
            if let Some(inner) = name.strip_prefix("p(").and_then(|r| r.strip_suffix(')')) {
                quantile(inner)
            } else {
                name.strip_prefix('p').and_then(quantile)
            }
        }
    }
}

/// A plan file's threshold that is wrong, at its line and column.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{at}: {why}")]
pub struct PlanThresholdError {
    /// `file:line:column`.
    at: String,
    why: String,
}

/// A plan file's thresholds, each parsed and, when it names requests (`p95{name:login}`),
/// checked against the plan's request names: a name no step has is an error at its line
/// before anything is sent (it once failed only after the run).
pub fn check_plan_thresholds(
    file: &str,
    thresholds: &[kiln_plan::Located],
    names: &[String],
) -> Result<Vec<String>, PlanThresholdError> {
    let mut texts = Vec::new();
    for t in thresholds {
        let at = format!("{file}:{}:{}", t.line, t.column);
        let parsed = Threshold::parse(&t.text).map_err(|e| PlanThresholdError {
            at: at.clone(),
            why: e.to_string(),
        })?;
        if let Some(name) = parsed
            .name
            .as_deref()
            .filter(|n| !names.iter().any(|m| m == n))
        {
            let mut known: Vec<&str> = names.iter().map(String::as_str).collect();
            known.truncate(12);
            return Err(PlanThresholdError {
                at,
                why: format!(
                    "threshold '{}' is on the name '{}', which no step has (the names: {})",
                    kiln_record::text::safe_text(&t.text),
                    kiln_record::text::safe_text(name),
                    kiln_record::text::safe_text(&known.join(", "))
                ),
            });
        }
        texts.push(t.text.clone());
    }
    Ok(texts)
}

/// A share: `1%` or a ratio (`0.01`).
fn parse_share(value: &str) -> Result<f64, String> {
    match value.strip_suffix('%') {
        Some(pct) => pct
            .trim()
            .parse::<f64>()
            .map(|p| p / 100.0)
            .map_err(|_| "the limit is not a percentage".into()),
        None => value
            .parse::<f64>()
            .map_err(|_| "the limit is not a ratio".into()),
    }
}

impl Threshold {
    pub fn parse(text: &str) -> Result<Self, ThresholdError> {
        let err = |why: &str| ThresholdError {
            text: text.to_string(),
            why: why.to_string(),
        };
        // `METRIC{name:NAME}`: the comparison comes after the braces (a name may hold `<`).
        let (metric_text, name, rest_at) = match text.find('{') {
            Some(open) => {
                let close = text[open..]
                    .find('}')
                    .map(|c| open + c)
                    .ok_or_else(|| err("'{' is not closed"))?;
                let tag = &text[open + 1..close];
                if let Some(code) = tag.strip_prefix("status:") {
                    return Self::parse_grpc_status(text, &text[..open], code, &text[close + 1..])
                        .map_err(|why| err(&why));
                }
                let name = tag
                    .strip_prefix("name:")
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| err("the tags are {name:NAME}, and {status:CODE} for grpc"))?;
                (&text[..open], Some(name.to_string()), close + 1)
            }
            None => (text, None, 0),
        };
        let search = if name.is_some() {
            &text[rest_at..]
        } else {
            text
        };
        let (at, op, len) = [("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)]
            .iter()
            .find_map(|(sym, op)| search.find(sym).map(|i| (i, *op, sym.len())))
            .ok_or_else(|| err("no comparison (<, <=, >, >=)"))?;
        let metric_text = if name.is_some() {
            metric_text
        } else {
            &text[..at]
        };
        if metric_text.trim().eq_ignore_ascii_case("grpc") {
            return Err(err("grpc is by status: grpc{status:UNAVAILABLE}<0.1%"));
        }
        let metric = parse_metric(metric_text).ok_or_else(|| err("unknown metric"))?;
        if name.is_some() && metric == Metric::Unsent {
            return Err(err("unsent has no figure per name"));
        }
        let value = search[at + len..].trim();
        let limit = match metric {
            Metric::Quantile(_) | Metric::Max | Metric::Min | Metric::Mean => {
                // A bare number is milliseconds, as in k6.
                match value.parse::<f64>() {
                    Ok(ms) if ms.is_finite() && ms >= 0.0 => ms * 1000.0,
                    _ => parse_duration(value)
                        .map_err(|_| err("the limit is not a duration"))?
                        .as_micros() as f64,
                }
            }
            Metric::FailedRatio | Metric::Checks | Metric::GrpcStatus(_) => {
                parse_share(value).map_err(|why| err(&why))?
            }
            Metric::Throughput | Metric::Unsent => value
                .parse::<f64>()
                .map_err(|_| err("the limit is not a number"))?,
        };
        if !limit.is_finite() || limit < 0.0 {
            return Err(err("the limit must be a non-negative number"));
        }
        Ok(Self {
            text: text.trim().to_string(),
            metric,
            op,
            limit,
            name,
        })
    }

    /// `grpc{status:CODE}` and what follows the braces (`<0.1%`).
    fn parse_grpc_status(text: &str, metric: &str, code: &str, rest: &str) -> Result<Self, String> {
        if !metric.trim().eq_ignore_ascii_case("grpc") {
            return Err("{status:CODE} is a tag of grpc (grpc{status:UNAVAILABLE}<0.1%)".into());
        }
        let code = kiln_record::grpc::grpc_code_of(code).ok_or_else(|| {
            format!(
                "'{}' is no gRPC status (OK, UNAVAILABLE, 14...)",
                code.trim()
            )
        })?;
        let (at, op, len) = [("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)]
            .iter()
            .find_map(|(sym, op)| rest.find(sym).map(|i| (i, *op, sym.len())))
            .ok_or("no comparison (<, <=, >, >=)")?;
        if !rest[..at].trim().is_empty() {
            return Err("the comparison comes right after the tag".into());
        }
        let limit = parse_share(rest[at + len..].trim())?;
        if !limit.is_finite() || limit < 0.0 {
            return Err("the limit must be a non-negative number".into());
        }
        Ok(Self {
            text: text.trim().to_string(),
            metric: Metric::GrpcStatus(code),
            op,
            limit,
            name: None,
        })
    }

    pub fn check(&self, results: &PhaseSummary) -> ThresholdResult {
        let t = &results.totals;
        let (h, requests, failed, checks, checks_failed) = match &self.name {
            None => (
                &t.latency,
                t.requests,
                results.failed(),
                t.checks,
                t.checks_failed,
            ),
            Some(name) => match t.names.get(name) {
                Some(n) => (&n.latency, n.requests, n.failed, n.checks, n.checks_failed),
                None => {
                    return ThresholdResult {
                        threshold: self.text.clone(),
                        ok: false,
                        actual: f64::NAN,
                        actual_text: format!("no requests named '{name}'"),
                    }
                }
            },
        };
        let ratio = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 / whole as f64
            }
        };
        let actual = match self.metric {
            Metric::Quantile(q) => h.quantile_us(q) as f64,
            Metric::Max => h.max_us() as f64,
            Metric::Min => h.min_us() as f64,
            Metric::Mean => h.mean_us(),
            Metric::FailedRatio => ratio(failed, requests),
            Metric::Throughput => {
                let secs = results.duration_secs();
                if secs > 0.0 {
                    requests as f64 / secs
                } else {
                    0.0
                }
            }
            Metric::Unsent => results.unsent() as f64,
            Metric::Checks => 1.0 - ratio(checks_failed, checks),
            Metric::GrpcStatus(code) => ratio(t.grpc.get(&code).copied().unwrap_or(0), requests),
        };
        let ok = match self.op {
            Op::Lt => actual < self.limit,
            Op::Le => actual <= self.limit,
            Op::Gt => actual > self.limit,
            Op::Ge => actual >= self.limit,
        };
        let actual_text = match self.metric {
            Metric::FailedRatio | Metric::Checks | Metric::GrpcStatus(_) => {
                format!("{:.2}%", actual * 100.0)
            }
            Metric::Throughput => format!("{actual:.1}/s"),
            Metric::Unsent => format!("{actual}"),
            _ => kiln_record::text::us_f(actual),
        };
        ThresholdResult {
            threshold: self.text.clone(),
            ok,
            actual,
            actual_text,
        }
    }
}

/// The fewest samples beyond a percentile for it to be judged: with fewer, one slow request
/// more or less moves it past its limit.
pub const BEYOND_TO_JUDGE: u64 = 10;

impl Threshold {
    /// Whether this can be a service level objective of `kiln capacity`: a limit on the
    /// latency or on failures that holds at low rates and breaks at high ones (a throughput
    /// or an unsent count is what the search measures, not what it keeps).
    pub fn is_slo(&self) -> bool {
        matches!(
            (self.metric, self.op),
            (
                Metric::Quantile(_)
                    | Metric::Max
                    | Metric::Mean
                    | Metric::FailedRatio
                    | Metric::GrpcStatus(_),
                Op::Lt | Op::Le
            ) | (Metric::Checks, Op::Gt | Op::Ge)
        )
    }

    /// A latency limit's value in ms (`p99<50ms`: 50), for a line drawn at it; none for
    /// other metrics.
    pub fn latency_limit_ms(&self) -> Option<f64> {
        matches!(
            self.metric,
            Metric::Quantile(_) | Metric::Mean | Metric::Max
        )
        .then_some(self.limit / 1000.0)
    }

    /// Requests a run needs for this to be judged on more than a handful: ten beyond a
    /// percentile (1,000 for p99), ten failures at a failed-ratio limit; 100 otherwise.
    pub fn requests_to_judge(&self) -> u64 {
        let beyond = |share: f64| {
            if share > 0.0 {
                // less a hair: 1 - 0.999 is not exactly 0.001
                (BEYOND_TO_JUDGE as f64 / share * (1.0 - 1e-9)).ceil() as u64
            } else {
                u64::MAX
            }
        };
        match self.metric {
            Metric::Quantile(q) => beyond(1.0 - q),
            Metric::FailedRatio | Metric::GrpcStatus(_) => beyond(self.limit),
            _ => 100,
        }
        .max(100)
    }

    /// Whether a run of `planned` requests already breaks this, however its rest goes:
    /// more than the quantile's share of the planned requests above its limit, more failures
    /// than the limit allows of them, one answer above a `max`. Said with the counts; `None`
    /// while it could still hold (a mean can always recover; a name's figures are not judged
    /// early). What a step of `kiln capacity` that clearly breaks its SLO ends on.
    pub fn broken_already(&self, so_far: &SecondRecord, planned: u64) -> Option<String> {
        if self.name.is_some() || !matches!(self.op, Op::Lt | Op::Le) || planned == 0 {
            return None;
        }
        // values that read as the limit break a `<` (as `check` reads the quantile)
        let above = |limit_us: f64| {
            so_far
                .latency
                .count_reading_above(limit_us.ceil() as u64, self.op == Op::Lt)
        };
        match self.metric {
            Metric::Quantile(q) => {
                let allowed = ((1.0 - q) * planned as f64).floor() as u64;
                let n = above(self.limit);
                (n > allowed).then(|| {
                    format!(
                        "{n} answers took {} or more, more than the {allowed} of the {planned} \
                         planned that {} allows",
                        kiln_record::text::us_f(self.limit),
                        self.text
                    )
                })
            }
            Metric::Max => {
                let n = above(self.limit);
                (n > 0).then(|| {
                    format!(
                        "{n} answers took {} or more",
                        kiln_record::text::us_f(self.limit)
                    )
                })
            }
            Metric::FailedRatio => {
                // the final share is at least n / planned (fewer may end than were planned)
                let n = so_far.failed();
                let allowed = self.limit * planned as f64;
                let over = match self.op {
                    Op::Lt => n > 0 && n as f64 >= allowed,
                    _ => n as f64 > allowed,
                };
                over.then(|| {
                    format!(
                        "{n} requests failed, more than {} allows of the {planned} planned",
                        self.text
                    )
                })
            }
            _ => None,
        }
    }
}

/// Whether a `--threshold` recorded in the plan fails on the measured phases.
pub fn thresholds_failed(manifest: &kiln_record::RunManifest, phases: &[PhaseSummary]) -> bool {
    PhaseSummary::measured_total(phases)
        .is_some_and(|total| check_all(&manifest.plan, &total).iter().any(|t| !t.ok))
}

/// Checks every threshold stored in a plan record against the results.
pub fn check_all(plan: &PlanRecord, results: &PhaseSummary) -> Vec<ThresholdResult> {
    plan.load()
        .into_iter()
        .flat_map(|p| &p.thresholds)
        .filter_map(|t| Threshold::parse(t).ok())
        .map(|t| t.check(results))
        .collect()
}

#[cfg(test)]
mod tests {
    /// `p95{name:ordr}` passed `kiln plan check` and failed only after the run.
    #[test]
    fn a_plan_threshold_on_a_name_no_step_has_is_refused_at_its_line() {
        let located = |text: &str| kiln_plan::Located {
            text: text.into(),
            line: 7,
            column: 5,
        };
        let names = ["login".to_string(), "order".to_string()];
        let ok = check_plan_thresholds("p.yaml", &[located("p95{name:order}<1s")], &names);
        assert_eq!(ok.unwrap(), ["p95{name:order}<1s"]);
        let typo = check_plan_thresholds("p.yaml", &[located("p95{name:ordr}<1s")], &names)
            .unwrap_err()
            .to_string();
        assert!(typo.starts_with("p.yaml:7:5: "), "{typo}");
        assert!(
            typo.contains("'ordr', which no step has (the names: login, order)"),
            "{typo}"
        );
        let bad = check_plan_thresholds("p.yaml", &[located("p95<<1s")], &names).unwrap_err();
        assert!(
            bad.to_string().starts_with("p.yaml:7:5: bad threshold"),
            "{bad}"
        );
    }

    use super::*;
    use kiln_record::ErrorKind;

    fn results() -> PhaseSummary {
        let mut s = SecondRecord {
            requests: 100,
            ..Default::default()
        };
        s.status.insert(200, 98);
        s.status.insert(503, 2);
        for us in 1..=100u64 {
            s.latency.record_us(us * 1_000);
        }
        let mut p = PhaseSummary::new("run");
        p.add_second(&s);
        p
    }

    /// A gRPC run's calls by status: 97 OK, 3 UNAVAILABLE (all HTTP 200) are 3% failed, and
    /// a threshold on one status reads its share.
    #[test]
    fn grpc_statuses_are_failures_and_thresholds_by_name_or_number() {
        let mut s = SecondRecord {
            requests: 100,
            ..Default::default()
        };
        s.status.insert(200, 100);
        s.grpc.insert(0, 97);
        s.grpc.insert(14, 3);
        let mut p = PhaseSummary::new("run");
        p.add_second(&s);
        assert_eq!(p.failed(), 3);
        let check = |t: &str| Threshold::parse(t).unwrap().check(&p);
        assert!(!check("grpc{status:UNAVAILABLE}<1%").ok);
        assert!(check("grpc{status:unavailable}<5%").ok);
        assert!(check("grpc{status:14}<=0.03").ok);
        assert!(check("grpc{status:DEADLINE_EXCEEDED}<0.1%").ok);
        assert!(!check("failed<1%").ok);
        assert_eq!(check("grpc{status:UNAVAILABLE}<1%").actual_text, "3.00%");
        for bad in [
            "grpc{status:NOPE}<1%",
            "grpc<1%",
            "p99{status:OK}<1s",
            "grpc{status:OK}",
            "grpc{status:OK}x<1%",
        ] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
        assert!(Threshold::parse("grpc{status:UNAVAILABLE}<1%")
            .unwrap()
            .is_slo());
    }

    /// A step of `kiln capacity` ends early only when no way its rest could go keeps the
    /// SLO: 1,000 requests planned allow 10 above a p99's limit, never 11.
    #[test]
    fn a_threshold_is_broken_already_only_when_its_rest_cannot_mend_it() {
        let p99 = Threshold::parse("p99<50ms").unwrap();
        let mut s = SecondRecord::default();
        for _ in 0..500 {
            s.latency.record_us(10_000);
        }
        for _ in 0..10 {
            s.latency.record_us(50_000);
        }
        assert_eq!(
            p99.broken_already(&s, 1_000),
            None,
            "10 of 1,000 may be above"
        );
        s.latency.record_us(80_000);
        let why = p99
            .broken_already(&s, 1_000)
            .expect("11 of 1,000 cannot be");
        assert!(why.starts_with("11 answers took 50.0ms or more"), "{why}");
        // and the full run of the same requests does break it
        let mut full = s.clone();
        for _ in 0..489 {
            full.latency.record_us(10_000);
        }
        let mut phase = PhaseSummary::new("run");
        phase.add_second(&full);
        assert!(!p99.check(&phase).ok);
        // `<=` lets an answer at the limit hold
        let le = Threshold::parse("p99<=80ms").unwrap();
        assert_eq!(le.broken_already(&s, 1_000), None);

        let failed = Threshold::parse("failed<1%").unwrap();
        let mut f = SecondRecord::default();
        f.errors.insert(ErrorKind::Timeout, 9);
        assert_eq!(failed.broken_already(&f, 1_000), None);
        f.errors.insert(ErrorKind::Timeout, 10);
        assert!(failed.broken_already(&f, 1_000).is_some());
        assert!(Threshold::parse("max<60ms")
            .unwrap()
            .broken_already(&s, 1_000)
            .is_some());
        // a mean can come back; a name's figures are not judged early
        assert_eq!(
            Threshold::parse("mean<1ms")
                .unwrap()
                .broken_already(&s, 1_000),
            None
        );
        assert_eq!(
            Threshold::parse("p99{name:a}<1ms")
                .unwrap()
                .broken_already(&s, 1_000),
            None
        );
    }

    #[test]
    fn slos_are_limits_on_latency_and_failures_judged_on_enough_requests() {
        for slo in [
            "p99<50ms",
            "p(99.9)<=1s",
            "mean<20ms",
            "max<2s",
            "failed<1%",
            "checks>99%",
        ] {
            assert!(Threshold::parse(slo).unwrap().is_slo(), "{slo}");
        }
        for not in ["rate>=1000", "unsent<1", "p99>10ms", "min<1ms"] {
            assert!(!Threshold::parse(not).unwrap().is_slo(), "{not}");
        }
        let to_judge = |t: &str| Threshold::parse(t).unwrap().requests_to_judge();
        assert_eq!(to_judge("p99<50ms"), 1_000);
        assert_eq!(to_judge("p(99.9)<50ms"), 10_000);
        assert_eq!(to_judge("p50<50ms"), 100);
        assert_eq!(to_judge("failed<1%"), 1_000);
        assert_eq!(to_judge("mean<5ms"), 100);
    }

    #[test]
    fn thresholds_parse_in_k6_and_short_forms() {
        assert_eq!(Threshold::parse("p99<250ms").unwrap().limit, 250_000.0);
        assert_eq!(Threshold::parse("p(99.9) < 1s").unwrap().limit, 1_000_000.0);
        assert_eq!(Threshold::parse("p95<200").unwrap().limit, 200_000.0);
        assert_eq!(Threshold::parse("failed<1%").unwrap().limit, 0.01);
        assert_eq!(Threshold::parse("rate>=1000").unwrap().op, Op::Ge);
        for bad in [
            "p99",
            "p101<1s",
            "latency<1s",
            "failed<lots",
            "max<-1",
            "p99<soon",
        ] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn thresholds_pass_and_fail_on_known_results() {
        let r = results();
        let check = |t: &str| Threshold::parse(t).unwrap().check(&r).ok;
        assert!(check("p50<=51ms"));
        assert!(!check("p99<90ms"));
        assert!(check("p99<101ms"));
        assert!(check("failed<3%"));
        assert!(!check("failed<2%"));
        assert!(check("max<=101ms"));
        assert!(!check("rate>1000"));
    }

    #[test]
    fn thresholds_per_name_and_on_checks() {
        let mut r = results();
        let mut login = kiln_record::NameSecond {
            requests: 10,
            failed: 1,
            checks: 20,
            checks_failed: 2,
            ..Default::default()
        };
        for ms in 1..=10u64 {
            login.latency.record_us(ms * 100_000);
        }
        let mut s = SecondRecord {
            second: 1,
            ..Default::default()
        };
        s.checks = 40;
        s.checks_failed = 2;
        s.names.insert("log<in".into(), login);
        r.add_second(&s);
        let check = |t: &str| Threshold::parse(t).unwrap().check(&r);
        let p50 = check("p50{name:log<in}<=501ms");
        assert!(p50.ok, "{p50:?}");
        assert!(!check("p99{name:log<in}<900ms").ok);
        assert!(check("failed{name:log<in}<=10%").ok);
        assert!(!check("failed{name:log<in}<10%").ok);
        assert!(check("checks>=95%").ok);
        assert!(!check("checks{name:log<in}>=95%").ok);
        let missing = check("p99{name:nope}<1s");
        assert!(!missing.ok && missing.actual_text.contains("no requests named"));
        for bad in [
            "p99{name:}<1s",
            "p99{scenario:a}<1s",
            "p99{name:a<1s",
            "unsent{name:a}<1",
        ] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        /// Ending a step early is never wrong: whatever answers would have come after the
        /// point it was judged broken (up to the planned count), the whole run breaks the
        /// threshold too.
        #[test]
        fn broken_already_means_broken_however_the_run_ends(
            first in proptest::collection::vec(1u64..200_000, 1..300),
            rest in proptest::collection::vec(1u64..200_000, 0..300),
            extra_planned in 0u64..300,
            slo in proptest::sample::select(vec!["p99<50ms", "p90<=20ms", "p50<10ms", "max<150ms"]),
        ) {
            let t = Threshold::parse(slo).unwrap();
            let mut so_far = SecondRecord::default();
            for us in &first {
                so_far.latency.record_us(*us);
            }
            let planned = (first.len() + rest.len()) as u64 + extra_planned;
            if t.broken_already(&so_far, planned).is_some() {
                let mut whole = so_far.clone();
                for us in &rest {
                    whole.latency.record_us(*us);
                }
                let mut phase = PhaseSummary::new("run");
                phase.add_second(&whole);
                proptest::prop_assert!(!t.check(&phase).ok, "{slo}: {first:?} then {rest:?}");
            }
        }

        #[test]
        fn no_text_panics_the_threshold_parser(text in ".{0,40}") {
            let _ = Threshold::parse(&text);
        }
    }
}
