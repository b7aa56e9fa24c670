//! A profile's summary as text: its samples and top functions by self and total share.

use kiln_record::schema::profile::{count_unit, FunctionShare, ProfileSummary};
use kiln_record::text::safe_text;

fn share_rows(
    label: &str,
    shares: &[FunctionShare],
    pct: impl Fn(&FunctionShare) -> f64,
) -> String {
    let mut out = String::new();
    for (i, s) in shares.iter().enumerate() {
        let head = if i == 0 { label } else { "" };
        out += &format!("{head:<11}{:>6.1}%  {}\n", pct(s), safe_text(&s.name));
    }
    out
}

/// The terminal summary: top functions by self and by total, and the kernel's share.
/// `samples` is the number of samples when each weighs a value in a unit (pprof's
/// `inuse_space/bytes`, perf script's periods in nanoseconds).
pub fn summary_text(summary: &ProfileSummary, count_name: &str, samples: Option<u64>) -> String {
    let (counted, unit) = count_unit(count_name);
    let in_samples = samples.map_or(String::new(), |n| format!(" in {n} samples"));
    let total = summary.samples;
    let head = match unit {
        Some("bytes") => format!(
            "Total      {} of {counted}{in_samples}",
            kiln_record::text::bytes(total)
        ),
        Some("nanoseconds") => format!(
            "Total      {:.3} s of {counted}{in_samples}",
            total as f64 / 1e9
        ),
        Some(unit) => format!("Total      {total} {unit} of {counted}{in_samples}"),
        None => format!("Samples    {total} {counted}"),
    };
    let mut out = format!(
        "{head}, {} distinct stacks, {:.1}% with a kernel frame on top\n",
        summary.distinct_stacks, summary.kernel_pct
    );
    if !summary.allocated_in.is_empty() {
        // async-profiler's allocation or lock profile: self is the allocated type or the
        // lock's class; the method under it allocated it or waited for it
        let (leaf, under) = match unit {
            Some("nanoseconds") => ("Locks", "Waited in"),
            _ => ("Types", "Alloc in"),
        };
        out += &share_rows(leaf, &summary.top_self, |s| s.self_pct);
        out += &share_rows(under, &summary.allocated_in, |s| s.self_pct);
    } else if count_name == kiln_record::parts::WALL_COUNT {
        // a waiting thread's self is its wait (a futex, a poll), the same for every wait:
        // the methods that took the time, waiting or running, say more
    } else if summary.blocked_in.is_empty() {
        out += &share_rows("Top self", &summary.top_self, |s| s.self_pct);
    } else {
        // off-CPU: self is all the scheduler; where the code blocked says what waited
        out += &share_rows("Blocked in", &summary.blocked_in, |s| s.self_pct);
    }
    out += &share_rows("Top total", &summary.top_total, |s| s.total_pct);
    if let Some(idle) = summary.waiting_for_work_pct.filter(|pct| *pct > 0.0) {
        out += &format!(
            "{:<11}{idle:>6.1}%  of the wall clock was threads waiting for work (an idle pool, \
             a selector), left out above\n",
            "Idle"
        );
    }
    let unwalked: f64 = summary.unwalked.iter().map(|s| s.self_pct).sum();
    if unwalked > 0.0 {
        let why: Vec<String> = (summary.unwalked.iter())
            .map(|s| format!("{} {:.1}%", safe_text(&s.name), s.self_pct))
            .collect();
        out += &format!(
            "{:<11}{unwalked:>6.1}%  of the samples async-profiler could not walk ({}): \
             their time is in no method's share\n",
            "Unwalked",
            why.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(name: &str, pct: f64) -> FunctionShare {
        FunctionShare {
            name: name.into(),
            self_samples: 0,
            total_samples: 0,
            self_pct: pct,
            total_pct: pct,
        }
    }

    #[test]
    fn a_lock_profile_names_the_locks_and_where_they_were_waited_for_an_alloc_profile_types() {
        let summary = ProfileSummary {
            samples: 2_500_000_000,
            distinct_stacks: 3,
            kernel_pct: 0.0,
            top_self: vec![share("LockShop$Inventory", 99.0)],
            top_total: vec![share("java.lang.Thread.run_[j]", 100.0)],
            blocked_in: Vec::new(),
            allocated_in: vec![share("LockShop.reserve_[j]", 99.0)],
            unwalked: Vec::new(),
            waiting_for_work_pct: None,
        };
        let locks = summary_text(&summary, "lock wait/nanoseconds", None);
        assert!(
            locks.starts_with("Total      2.500 s of lock wait, 3 distinct"),
            "{locks}"
        );
        assert!(
            locks.contains("Locks        99.0%  LockShop$Inventory"),
            "{locks}"
        );
        assert!(
            locks.contains("Waited in    99.0%  LockShop.reserve_[j]"),
            "{locks}"
        );
        let alloc = summary_text(&summary, "allocated/bytes", None);
        assert!(
            alloc.contains("Types        99.0%") && alloc.contains("Alloc in "),
            "{alloc}"
        );
    }

    #[test]
    fn samples_async_profiler_could_not_walk_are_said_with_why() {
        let mut summary = ProfileSummary {
            samples: 100,
            distinct_stacks: 4,
            kernel_pct: 0.0,
            top_self: vec![share("Shop.handle_[j]", 90.0)],
            top_total: vec![share("Shop.handle_[j]", 90.0)],
            blocked_in: Vec::new(),
            allocated_in: Vec::new(),
            unwalked: vec![
                share("not_walkable_Java", 5.0),
                share("deoptimization", 1.0),
            ],
            waiting_for_work_pct: None,
        };
        let text = summary_text(&summary, "samples", None);
        assert!(
            text.contains(
                "Unwalked      6.0%  of the samples async-profiler could not walk \
                 (not_walkable_Java 5.0%, deoptimization 1.0%)"
            ),
            "{text}"
        );
        summary.unwalked.clear();
        assert!(!summary_text(&summary, "samples", None).contains("Unwalked"));
    }

    #[test]
    fn a_wall_profile_says_how_much_was_threads_waiting_for_work() {
        let mut summary = ProfileSummary {
            samples: 4_000_000_000,
            distinct_stacks: 9,
            kernel_pct: 0.0,
            top_self: vec![share("Shop.render_[j]", 1.0)],
            top_total: vec![share("LockShop.reserve_[j]", 8.7)],
            blocked_in: Vec::new(),
            allocated_in: Vec::new(),
            unwalked: Vec::new(),
            waiting_for_work_pct: Some(26.6),
        };
        let text = summary_text(&summary, kiln_record::parts::WALL_COUNT, None);
        assert!(
            text.contains("Top total     8.7%  LockShop.reserve_[j]\nIdle         26.6%  of the wall clock was threads waiting for work"),
            "{text}"
        );
        assert!(!text.contains("Top self"), "{text}");
        summary.waiting_for_work_pct = None;
        let text = summary_text(&summary, kiln_record::parts::WALL_COUNT, None);
        assert!(!text.contains("Idle"), "{text}");
    }
}
