//! Two capacity searches side by side: did the change move the highest rate kept within the
//! SLOs, and by how much. Each search brackets its capacity in `[max_rate, first_broken_rate)`;
//! the ratio's interval is what the two brackets allow (the new one's low end over the base's
//! high end, up to its high end over the base's low end), and the verdict is improved or
//! regressed only when the brackets do not overlap.

use kiln_record::schema::capacity::{CapacityRecord, Limit, SearchStatus};
use serde::Serialize;

/// One side's capacity as compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacitySide {
    pub dir: String,
    pub status: SearchStatus,
    /// The highest rate kept (none: no rate tried kept the SLOs).
    pub max_rate: Option<f64>,
    /// The lowest broken (none: every step up to `--max-rate` kept them).
    pub first_broken_rate: Option<f64>,
    pub limit: Option<Limit>,
    pub concurrency_at_knee: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityVerdict {
    /// The new bracket lies above the base's.
    Improved,
    /// Below it.
    Regressed,
    /// They overlap: no change the searches' precision can tell.
    NoChange,
}

impl CapacityVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Improved => "improved",
            Self::Regressed => "regressed",
            Self::NoChange => "no change within the searches' precision",
        }
    }
}

/// The comparison, as `kiln compare --json` prints it for two capacity directories.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacityComparison {
    pub version: u32,
    pub kind: &'static str,
    pub base: CapacitySide,
    pub new: CapacitySide,
    /// The SLOs both kept (the same ones, or the comparison says so in `notes`).
    pub slos: Vec<String>,
    /// new max_rate / base max_rate.
    pub ratio: Option<f64>,
    /// What the brackets allow of the ratio (`None` high: unbounded, a side above its
    /// `--max-rate`).
    pub ratio_low: Option<f64>,
    pub ratio_high: Option<f64>,
    pub verdict: CapacityVerdict,
    pub notes: Vec<String>,
}

fn side(dir: &str, r: &CapacityRecord) -> CapacitySide {
    CapacitySide {
        dir: dir.to_string(),
        status: r.status,
        max_rate: r.max_rate,
        first_broken_rate: r.first_broken_rate,
        limit: r.knee.as_ref().map(|k| k.limit),
        concurrency_at_knee: r.concurrency_at_knee,
    }
}

/// Compares two searches.
pub fn compare_capacity(
    base_dir: &str,
    base: &CapacityRecord,
    new_dir: &str,
    new: &CapacityRecord,
) -> CapacityComparison {
    let mut notes = Vec::new();
    if base.slos != new.slos {
        notes.push(format!(
            "the searches kept different SLOs ({} and {}): their capacities answer different \
             questions",
            base.slos.join(", "),
            new.slos.join(", ")
        ));
    }
    for (label, r) in [("base", base), ("new", new)] {
        match r.status {
            SearchStatus::Complete | SearchStatus::AboveMaxRate | SearchStatus::NothingKept => {}
            other => notes.push(format!(
                "the {label} search ended {}: its bracket is as far as it got",
                other.as_str()
            )),
        }
    }
    // each capacity lies in [lo, hi): nothing kept is a low end of 0, nothing broken no high
    let bracket = |r: &CapacityRecord| (r.max_rate.unwrap_or(0.0), r.first_broken_rate);
    let ((b_lo, b_hi), (n_lo, n_hi)) = (bracket(base), bracket(new));
    let ratio = match (new.max_rate, base.max_rate) {
        (Some(n), Some(b)) if b > 0.0 => Some(n / b),
        _ => None,
    };
    let ratio_low = b_hi.filter(|h| *h > 0.0).map(|h| n_lo / h);
    let ratio_high = match (n_hi, b_lo) {
        (Some(h), lo) if lo > 0.0 => Some(h / lo),
        _ => None,
    };
    let verdict = if b_hi.is_some_and(|h| n_lo >= h) {
        CapacityVerdict::Improved
    } else if n_hi.is_some_and(|h| h <= b_lo) {
        CapacityVerdict::Regressed
    } else {
        CapacityVerdict::NoChange
    };
    CapacityComparison {
        version: crate::COMPARE_VERSION,
        kind: "capacity",
        base: side(base_dir, base),
        new: side(new_dir, new),
        slos: new.slos.clone(),
        ratio,
        ratio_low,
        ratio_high,
        verdict,
        notes,
    }
}

fn rate(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 100.0 => format!("{r:.0}"),
        Some(r) => format!("{r:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string(),
        None => "?".into(),
    }
}

fn bracket_text(s: &CapacitySide) -> String {
    match (s.max_rate, s.first_broken_rate) {
        (Some(_), Some(hi)) => format!("{} req/s (broke at {})", rate(s.max_rate), rate(Some(hi))),
        (Some(_), None) => format!("above {} req/s", rate(s.max_rate)),
        (None, Some(hi)) => format!("below {} req/s", rate(Some(hi))),
        (None, None) => "not found".into(),
    }
}

/// The comparison as text.
pub fn capacity_text(c: &CapacityComparison) -> String {
    use kiln_record::text::safe_text;
    let mut out = format!(
        "Capacity keeping {}\n  base  {}  {}\n  new   {}  {}\n",
        safe_text(&c.slos.join(", ")),
        bracket_text(&c.base),
        safe_text(&c.base.dir),
        bracket_text(&c.new),
        safe_text(&c.new.dir),
    );
    let factor = |r: Option<f64>| r.map_or("unbounded".to_string(), |r| format!("x{r:.2}"));
    let change = match c.ratio {
        Some(r) => format!(
            "{} -> {} req/s: x{r:.2} ({} to {}), {}",
            rate(c.base.max_rate),
            rate(c.new.max_rate),
            factor(c.ratio_low),
            factor(c.ratio_high),
            c.verdict.as_str()
        ),
        None => c.verdict.as_str().to_string(),
    };
    out.push_str(&format!("Change     {change}\n"));
    let knee = |s: &CapacitySide| match (s.limit, s.concurrency_at_knee) {
        (Some(Limit::Concurrency), Some(n)) => format!("about {n:.0} at once"),
        (Some(l), _) => l.as_str().to_string(),
        (None, _) => "-".into(),
    };
    out.push_str(&format!(
        "Knee       {} -> {}\n",
        knee(&c.base),
        knee(&c.new)
    ));
    for note in &c.notes {
        out.push_str(&format!("Note       {}\n", safe_text(note)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_record::schema::capacity::CAPACITY_VERSION;

    fn record(lo: Option<f64>, hi: Option<f64>) -> CapacityRecord {
        CapacityRecord {
            version: CAPACITY_VERSION,
            mode: Default::default(),
            name: "t".into(),
            target: "http://x/".into(),
            slos: vec!["p99<50ms".into()],
            precision: 0.05,
            max_rate_asked: None,
            status: SearchStatus::Complete,
            status_reason: None,
            started: String::new(),
            ended: None,
            elapsed_s: 30.0,
            max_rate: lo,
            first_broken_rate: hi,
            broken_by: Vec::new(),
            concurrency_at_knee: None,
            knee: None,
            usl: None,
            requests_total: 0,
            steps: Vec::new(),
        }
    }

    #[test]
    fn brackets_apart_are_a_change_and_overlapping_ones_are_not() {
        // the Java study's headline: 6,033 -> 18,499
        let c = compare_capacity(
            "a",
            &record(Some(6033.0), Some(6300.0)),
            "b",
            &record(Some(18_499.0), Some(19_300.0)),
        );
        assert_eq!(c.verdict, CapacityVerdict::Improved);
        assert!((c.ratio.unwrap() - 3.066).abs() < 0.001);
        assert!((c.ratio_low.unwrap() - 18_499.0 / 6300.0).abs() < 1e-9);
        assert!((c.ratio_high.unwrap() - 19_300.0 / 6033.0).abs() < 1e-9);
        let text = capacity_text(&c);
        assert!(
            text.contains("6033 -> 18499 req/s: x3.07 (x2.94 to x3.20), improved"),
            "{text}"
        );

        let back = compare_capacity(
            "b",
            &record(Some(790.0), Some(810.0)),
            "a",
            &record(Some(384.0), Some(398.0)),
        );
        assert_eq!(back.verdict, CapacityVerdict::Regressed);
        let same = compare_capacity(
            "a",
            &record(Some(384.0), Some(398.0)),
            "b",
            &record(Some(392.0), Some(405.0)),
        );
        assert_eq!(same.verdict, CapacityVerdict::NoChange);
        assert!(same.notes.is_empty());
    }

    #[test]
    fn open_ended_brackets_and_different_slos_are_said() {
        // the new side kept everything up to its --max-rate
        let c = compare_capacity(
            "a",
            &record(Some(384.0), Some(398.0)),
            "b",
            &record(Some(1000.0), None),
        );
        assert_eq!(c.verdict, CapacityVerdict::Improved);
        assert_eq!(c.ratio_high, None);
        assert!(capacity_text(&c).contains("(x2.51 to unbounded)"));
        // nothing kept on the new side: a low end of 0
        let c = compare_capacity(
            "a",
            &record(Some(384.0), Some(398.0)),
            "b",
            &record(None, Some(50.0)),
        );
        assert_eq!(c.verdict, CapacityVerdict::Regressed);
        assert_eq!(c.ratio, None);
        let mut other = record(Some(384.0), Some(398.0));
        other.slos = vec!["p99<10ms".into()];
        other.status = SearchStatus::BudgetSpent;
        let c = compare_capacity("a", &record(Some(384.0), Some(398.0)), "b", &other);
        assert_eq!(c.notes.len(), 2, "{:?}", c.notes);
    }
}
