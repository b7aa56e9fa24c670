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
        // an allocation profile: self is the allocated type; the method that allocated
        out += &share_rows("Types", &summary.top_self, |s| s.self_pct);
        out += &share_rows("Alloc in", &summary.allocated_in, |s| s.self_pct);
    } else if summary.blocked_in.is_empty() {
        out += &share_rows("Top self", &summary.top_self, |s| s.self_pct);
    } else {
        // off-CPU: self is all the scheduler; where the code blocked says what waited
        out += &share_rows("Blocked in", &summary.blocked_in, |s| s.self_pct);
    }
    out += &share_rows("Top total", &summary.top_total, |s| s.total_pct);
    out
}
