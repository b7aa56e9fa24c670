//! Flame graphs (interactive SVG, by inferno) and differential flame graphs.

use std::collections::BTreeMap;

use inferno::flamegraph::{self, Options, Palette};

use crate::{Folded, ProfileError};

/// What a flame graph is titled and what its widths count.
pub struct FlameStyle<'a> {
    pub title: &'a str,
    pub subtitle: Option<&'a str>,
    /// "samples", "switches", "calls" ...
    pub count_name: &'a str,
    /// Colour per frame kind (kernel, JIT ...) as in flamegraph.pl's java palette, which
    /// colours by the `_[k]`/`_[j]` annotations for any language.
    pub palette: Palette,
}

impl Default for FlameStyle<'_> {
    fn default() -> Self {
        Self {
            title: "Flame Graph",
            subtitle: None,
            count_name: "samples",
            palette: Palette::Multi(flamegraph::color::MultiPalette::Java),
        }
    }
}

fn options<'a>(style: &FlameStyle<'_>) -> Options<'a> {
    let mut opt = Options::default();
    opt.title = style.title.to_string();
    opt.subtitle = style.subtitle.map(str::to_string);
    opt.count_name = style.count_name.to_string();
    opt.colors = style.palette;
    // Same input, same colours: two graphs of one program can be compared by eye.
    opt.hash = true;
    opt.deterministic = true;
    opt
}

/// An interactive SVG flame graph. Frame names are written as XML text by inferno (escaped),
/// so a frame named `<script>` stays a name.
pub fn svg(folded: &Folded, style: &FlameStyle<'_>) -> Result<Vec<u8>, ProfileError> {
    if folded.is_empty() {
        return Err(ProfileError::Empty);
    }
    let text = folded.to_text();
    let mut out = Vec::new();
    flamegraph::from_lines(&mut options(style), text.lines(), &mut out)
        .map_err(|e| ProfileError::Render(e.to_string()))?;
    Ok(out)
}

/// Before and after counts per stack, the `before` side scaled to the `after` total so that
/// a busier second run does not paint everything red (difffolded.pl -n).
#[derive(Clone, Debug, Default)]
pub struct FoldedDiff {
    pub stacks: BTreeMap<String, (u64, u64)>,
    pub before_total: u64,
    pub after_total: u64,
}

/// A function whose share of the samples changed between two profiles.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ShareChange {
    pub name: String,
    pub before_pct: f64,
    pub after_pct: f64,
}

impl FoldedDiff {
    pub fn new(before: &Folded, after: &Folded) -> Self {
        let before_total = before.total();
        let after_total = after.total();
        let scale = if before_total == 0 {
            1.0
        } else {
            after_total as f64 / before_total as f64
        };
        let mut stacks: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (stack, count) in before.lines() {
            stacks.entry(stack.to_string()).or_default().0 = (count as f64 * scale).round() as u64;
        }
        for (stack, count) in after.lines() {
            stacks.entry(stack.to_string()).or_default().1 = count;
        }
        Self {
            stacks,
            before_total,
            after_total,
        }
    }

    /// `stack before after` lines (sorted), the differential form flamegraph.pl reads.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (stack, (b, a)) in &self.stacks {
            out.push_str(&format!("{stack} {b} {a}\n"));
        }
        out
    }

    /// Functions whose self share (percent of all samples) moved most, largest move first.
    pub fn biggest_self_changes(
        &self,
        before: &Folded,
        after: &Folded,
        n: usize,
    ) -> Vec<ShareChange> {
        let b = before.function_shares();
        let a = after.function_shares();
        let mut changes: Vec<ShareChange> = b
            .keys()
            .chain(a.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|name| ShareChange {
                name: name.clone(),
                before_pct: b.get(name).map_or(0.0, |s| s.self_pct),
                after_pct: a.get(name).map_or(0.0, |s| s.self_pct),
            })
            .filter(|c| c.before_pct != c.after_pct)
            .collect();
        changes.sort_by(|x, y| {
            let dx = (x.after_pct - x.before_pct).abs();
            let dy = (y.after_pct - y.before_pct).abs();
            dy.total_cmp(&dx).then_with(|| x.name.cmp(&y.name))
        });
        changes.truncate(n);
        changes
    }

    /// A differential flame graph: widths from the `after` profile, red where a stack grew,
    /// blue where it shrank.
    pub fn svg(&self, style: &FlameStyle<'_>) -> Result<Vec<u8>, ProfileError> {
        if self.stacks.is_empty() {
            return Err(ProfileError::Empty);
        }
        let text = self.to_text();
        let mut opt = options(style);
        // The diff palette is chosen by inferno from the two counts.
        opt.colors = Palette::default();
        let mut out = Vec::new();
        flamegraph::from_lines(&mut opt, text.lines(), &mut out)
            .map_err(|e| ProfileError::Render(e.to_string()))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_svg_keeps_hostile_frame_names_as_text() {
        let (f, _) = Folded::parse("main;<script>alert(1)</script> 3\nmain;&amp 1\n").unwrap();
        let svg = String::from_utf8(svg(&f, &FlameStyle::default()).unwrap()).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(!svg.contains("<script>alert"), "frame name written raw");
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn an_empty_profile_is_an_error_not_an_empty_picture() {
        assert!(matches!(
            svg(&Folded::new(), &FlameStyle::default()),
            Err(ProfileError::Empty)
        ));
    }

    #[test]
    fn a_diff_normalizes_the_before_side_and_ranks_changes() {
        let (before, _) = Folded::parse("main;a 50\nmain;b 50\n").unwrap();
        let (after, _) = Folded::parse("main;a 150\nmain;b 50\n").unwrap();
        let diff = FoldedDiff::new(&before, &after);
        // before scaled by 200/100: a 100, b 100.
        assert_eq!(diff.stacks["main;a"], (100, 150));
        assert_eq!(diff.stacks["main;b"], (100, 50));
        let changes = diff.biggest_self_changes(&before, &after, 5);
        assert_eq!(changes[0].name, "a");
        assert!((changes[0].before_pct - 50.0).abs() < 1e-9);
        assert!((changes[0].after_pct - 75.0).abs() < 1e-9);
        let svg = String::from_utf8(diff.svg(&FlameStyle::default()).unwrap()).unwrap();
        assert!(svg.contains("main"));
    }
}
