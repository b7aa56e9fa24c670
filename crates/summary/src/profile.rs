//! A profile's summary as text: its samples and top functions by self and total share.

use kiln_record::schema::profile::{FunctionShare, ProfileSummary};
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
pub fn summary_text(summary: &ProfileSummary, count_name: &str) -> String {
    let mut out = format!(
        "Samples    {} {count_name}, {} distinct stacks, {:.1}% with a kernel frame on top\n",
        summary.samples, summary.distinct_stacks, summary.kernel_pct
    );
    out += &share_rows("Top self", &summary.top_self, |s| s.self_pct);
    out += &share_rows("Top total", &summary.top_total, |s| s.total_pct);
    out
}
