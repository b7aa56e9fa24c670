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

/// The flame graph's data: `{names, name, samples, depth, total, hidden}`; `Null` when the
/// profile is empty.
pub fn flame_data(folded: &Folded) -> Value {
    let total = folded.total();
    if total == 0 {
        return Value::Null;
    }
    let mut root = Node::default();
    for (stack, count) in folded.lines() {
        root.samples = root.samples.saturating_add(count);
        let mut node = &mut root;
        for frame in stack.split(';') {
            node = node.children.entry(frame.to_string()).or_default();
            node.samples = node.samples.saturating_add(count);
        }
    }
    let min = ((total as f64 * MIN_SHARE).ceil() as u64).max(1);
    let mut names: Vec<String> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let (mut name, mut samples, mut depth) = (Vec::new(), Vec::new(), Vec::new());
    let mut hidden = 0u64;
    // preorder, heaviest callee first, so the cap keeps what matters most
    let mut stack: Vec<(&str, &Node, usize)> = vec![("all", &root, 0)];
    while let Some((frame, node, d)) = stack.pop() {
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
        let mut children: Vec<(&String, &Node)> = node.children.iter().collect();
        children.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(b.0)));
        for (child, n) in children.into_iter().rev() {
            if n.samples < min {
                hidden += n.samples;
            } else {
                stack.push((child, n, d + 1));
            }
        }
    }
    json!({
        "names": names,
        "name": name,
        "samples": samples,
        "depth": depth,
        "total": total,
        "hidden": hidden,
    })
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
}
