//! The profile as data for the page's flame graph: the collapsed stacks merged into one tree,
//! frames too small to see left out, flattened in preorder (name, samples, depth) with the
//! names in one table. The page lays it out and draws it (zoom on click, search).

use std::collections::BTreeMap;

use kiln_profile::Folded;
use serde_json::{json, Value};

/// A frame thinner than this share of all samples is left out with its callees (a
/// 1300-pixel-wide graph draws nothing thinner than 0.05% of it anyway).
const MIN_SHARE: f64 = 0.0005;
/// At most this many frames are drawn (the heaviest kept).
const MAX_NODES: usize = 30_000;

#[derive(Default)]
struct Node {
    samples: u64,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn of(folded: &Folded) -> Self {
        let mut root = Node::default();
        for (stack, count) in folded.lines() {
            root.samples = root.samples.saturating_add(count);
            let mut node = &mut root;
            for frame in stack.split(';') {
                node = node.children.entry(frame.to_string()).or_default();
                node.samples = node.samples.saturating_add(count);
            }
        }
        root
    }
}

/// The flame graph's data: `{names, name, samples, depth, total, hidden}`; `Null` when the
/// profile is empty.
pub fn flame_data(folded: &Folded) -> Value {
    flatten(&Node::of(folded), None)
}

/// A differential flame graph's two views: `new` (NEW's stacks as widths) and `base` (BASE's
/// stacks: what a change removed is visible only there), each frame with the other run's
/// samples on the same stack in `other` and that run's total in `other_total` (shares
/// compare, not counts: the runs took different numbers of samples). `Null` when either
/// profile is empty.
pub fn diff_flame_data(base: &Folded, new: &Folded) -> Value {
    if base.total() == 0 || new.total() == 0 {
        return Value::Null;
    }
    let (base, new) = (Node::of(base), Node::of(new));
    let view = |mine: &Node, theirs: &Node| {
        let mut v = flatten(mine, Some(theirs));
        v["other_total"] = json!(theirs.samples);
        v
    };
    json!({
        "new": view(&new, &base),
        "base": view(&base, &new),
    })
}

/// `root` in preorder, heaviest callee first; with `other`, each frame's samples in it too.
fn flatten(root: &Node, other: Option<&Node>) -> Value {
    let total = root.samples;
    if total == 0 {
        return Value::Null;
    }
    let min = ((total as f64 * MIN_SHARE).ceil() as u64).max(1);
    let mut names: Vec<String> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let (mut name, mut samples, mut depth, mut others) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut hidden = 0u64;
    // preorder, heaviest callee first, so the cap keeps what matters most
    let mut stack: Vec<(&str, &Node, Option<&Node>, usize)> = vec![("all", root, other, 0)];
    while let Some((frame, node, twin, d)) = stack.pop() {
        if name.len() >= MAX_NODES {
            hidden += node.samples;
            continue;
        }
        let at = *index.entry(frame.to_string()).or_insert_with(|| {
            names.push(frame.to_string());
            names.len() - 1
        });
        name.push(at);
        samples.push(node.samples);
        depth.push(d);
        others.push(twin.map_or(0, |t| t.samples));
        let mut children: Vec<(&String, &Node)> = node.children.iter().collect();
        children.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(b.0)));
        for (child, n) in children.into_iter().rev() {
            if n.samples < min {
                hidden += n.samples;
            } else {
                let twin_child = twin.and_then(|t| t.children.get(child));
                stack.push((child, n, twin_child, d + 1));
            }
        }
    }
    let mut data = json!({
        "names": names,
        "name": name,
        "samples": samples,
        "depth": depth,
        "total": total,
        "hidden": hidden,
    });
    if other.is_some() {
        data["other"] = json!(others);
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_become_a_tree_in_preorder_heaviest_first() {
        let mut folded = Folded::new();
        folded.add(&["main", "serve", "parse"], 60);
        folded.add(&["main", "serve", "log"], 30);
        folded.add(&["main", "gc"], 10);
        folded.add(&["main", "tiny"], 0); // nothing
        let v = flame_data(&folded);
        let names: Vec<&str> = v["name"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| v["names"][i.as_u64().unwrap() as usize].as_str().unwrap())
            .collect();
        assert_eq!(names, ["all", "main", "serve", "parse", "log", "gc"]);
        assert_eq!(v["samples"], json!([100, 100, 90, 60, 30, 10]));
        assert_eq!(v["depth"], json!([0, 1, 2, 3, 3, 2]));
        assert_eq!(v["total"], 100);
    }

    #[test]
    fn thin_frames_are_left_out_and_counted() {
        let mut folded = Folded::new();
        folded.add(&["main", "hot"], 100_000);
        folded.add(&["main", "cold"], 3);
        let v = flame_data(&folded);
        assert_eq!(v["hidden"], 3);
        assert_eq!(v["name"].as_array().unwrap().len(), 3);
        assert_eq!(flame_data(&Folded::new()), Value::Null);
    }

    #[test]
    fn a_diff_has_both_runs_on_each_frame_and_keeps_what_only_base_had() {
        let mut base = Folded::new();
        base.add(&["main", "parse"], 150);
        base.add(&["main", "serve"], 50);
        let mut new = Folded::new();
        new.add(&["main", "serve"], 100);
        let v = diff_flame_data(&base, &new);
        let names = |v: &Value| -> Vec<String> {
            (v["name"].as_array().unwrap().iter())
                .map(|i| {
                    v["names"][i.as_u64().unwrap() as usize]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(names(&v["new"]), ["all", "main", "serve"]);
        assert_eq!(v["new"]["samples"], json!([100, 100, 100]));
        assert_eq!(v["new"]["other"], json!([200, 200, 50]));
        assert_eq!(v["new"]["other_total"], 200);
        // BASE's view shows parse, which NEW no longer has
        assert_eq!(names(&v["base"]), ["all", "main", "parse", "serve"]);
        assert_eq!(v["base"]["samples"], json!([200, 200, 150, 50]));
        assert_eq!(v["base"]["other"], json!([100, 100, 0, 100]));
        assert_eq!(v["base"]["other_total"], 100);
        assert_eq!(diff_flame_data(&Folded::new(), &new), Value::Null);
    }
}
