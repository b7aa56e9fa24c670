//! The DB stack trie: every DB call's path (route, then its stack root first, then the
//! statement) merged into one tree whose nodes carry the calls and DB time below them. A
//! loop many layers above the store shows as a node whose calls dwarf its siblings'.
//! Exported as collapsed stacks, speedscope JSON (by calls and by time) and the nested JSON
//! the HTML treemap draws.

use foldhash::{HashMap, HashMapExt};
use std::fmt::Write as _;
use std::sync::Arc;

use kiln_profile::{speedscope_json_profiles, Folded, WeightedProfile};
use serde::Serialize;

use crate::analyze::{nearest_frame, site_frames, Analysis};
use crate::sql::Fingerprint;
use crate::stack::Frame;

/// Which frames of a stack go into the trie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frames {
    /// The application's own frames (framework, driver and runtime frames folded away).
    App,
    /// Every frame.
    All,
}

#[derive(Debug)]
struct Node {
    name: String,
    calls: u64,
    time_ns: u64,
    children: HashMap<String, usize>,
}

#[derive(Debug)]
pub struct StackTrie {
    nodes: Vec<Node>,
}

/// A node of the trie as the treemap reads it: `[name, calls, time_us, children]`.
#[derive(Serialize)]
pub struct TreeNode<'a>(pub &'a str, pub u64, pub u64, pub Vec<TreeNode<'a>>);

/// The statement node's label: `SQL` (or `DB` for a MongoDB or Redis command) and its shape,
/// cut for display.
fn statement_label(fingerprint: &crate::sql::Fingerprint) -> String {
    const MAX: usize = 160;
    let kind = match fingerprint.mode {
        crate::sql::Mode::Document | crate::sql::Mode::Command => "DB",
        crate::sql::Mode::Tokenizer | crate::sql::Mode::Fallback => "SQL",
    };
    let shape = &fingerprint.shape;
    if shape.len() <= MAX {
        return format!("{kind} {shape}");
    }
    let mut cut = MAX;
    while !shape.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{kind} {}…", &shape[..cut])
}

impl StackTrie {
    fn new() -> Self {
        Self {
            nodes: vec![Node {
                name: "all".into(),
                calls: 0,
                time_ns: 0,
                children: HashMap::new(),
            }],
        }
    }

    fn add(&mut self, path: &[&str], time_ns: u64) {
        self.add_n(path, 1, time_ns);
    }

    fn add_n(&mut self, path: &[&str], calls: u64, time_ns: u64) {
        let mut node = 0;
        self.nodes[0].calls += calls;
        // saturating: span times are an exporter's, untrusted
        self.nodes[0].time_ns = self.nodes[0].time_ns.saturating_add(time_ns);
        for &name in path {
            let next = match self.nodes[node].children.get(name) {
                Some(&n) => n,
                None => {
                    let n = self.nodes.len();
                    self.nodes.push(Node {
                        name: name.to_string(),
                        calls: 0,
                        time_ns: 0,
                        children: HashMap::new(),
                    });
                    self.nodes[node].children.insert(name.to_string(), n);
                    n
                }
            };
            self.nodes[next].calls += calls;
            self.nodes[next].time_ns = self.nodes[next].time_ns.saturating_add(time_ns);
            node = next;
        }
    }

    /// The trie again from its two collapsed exports (`folded()`: calls, and DB time in
    /// microseconds), as a run record keeps it.
    pub fn from_folded(calls: &Folded, time_us: &Folded) -> Self {
        let mut trie = Self::new();
        for (stack, n) in calls.lines() {
            trie.add_n(&stack.split(';').collect::<Vec<_>>(), n, 0);
        }
        for (stack, us) in time_us.lines() {
            trie.add_n(
                &stack.split(';').collect::<Vec<_>>(),
                0,
                us.saturating_mul(1000),
            );
        }
        trie
    }

    /// The trie of the calls of the requests the analysis selected (route, request id).
    pub fn build(analysis: &Analysis, frames: Frames) -> Self {
        let mut trie = Self::new();
        // one stack is shared by every call of a loop, one statement by many calls: label
        // each once
        let mut labels: HashMap<*const Vec<Frame>, Vec<String>> = HashMap::new();
        let mut statements: HashMap<*const Fingerprint, String> = HashMap::new();
        for &r in &analysis.matched {
            let request = &analysis.requests[r];
            for &c in &request.calls {
                let call = &analysis.calls[c];
                labels.entry(Arc::as_ptr(&call.frames)).or_insert_with(|| {
                    let chosen = match frames {
                        Frames::All => call.frames.to_vec(),
                        Frames::App => site_frames(&call.frames),
                    };
                    if call.frames.is_empty() {
                        vec!["(call site unknown: no stack on the span)".into()]
                    } else if chosen.is_empty() {
                        // Not 30 levels of server and filter frames: the nearest frame.
                        let nearest = nearest_frame(&call.frames)
                            .map(Frame::label)
                            .unwrap_or_default();
                        vec![format!("(no application frame) {nearest}")]
                    } else {
                        chosen.iter().map(Frame::label).collect()
                    }
                });
                statements
                    .entry(Arc::as_ptr(&call.fingerprint))
                    .or_insert_with(|| statement_label(&call.fingerprint));
                let stack = &labels[&Arc::as_ptr(&call.frames)];
                let mut path: Vec<&str> = Vec::with_capacity(stack.len() + 2);
                path.push(&request.route);
                path.extend(stack.iter().map(String::as_str));
                path.push(&statements[&Arc::as_ptr(&call.fingerprint)]);
                trie.add(&path, call.end_ns.saturating_sub(call.start_ns));
            }
        }
        trie
    }

    pub fn calls(&self) -> u64 {
        self.nodes[0].calls
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn sorted_children(&self, node: usize) -> Vec<usize> {
        let mut children: Vec<usize> = self.nodes[node].children.values().copied().collect();
        children.sort_by(|&a, &b| {
            self.nodes[b]
                .calls
                .cmp(&self.nodes[a].calls)
                .then(self.nodes[b].time_ns.cmp(&self.nodes[a].time_ns))
                .then(self.nodes[a].name.cmp(&self.nodes[b].name))
        });
        children
    }

    /// Collapsed stacks weighted by calls, and by DB time in microseconds.
    pub fn folded(&self) -> (Folded, Folded) {
        let mut calls = Folded::new();
        let mut time = Folded::new();
        let mut path: Vec<&str> = Vec::new();
        self.fold_into(0, &mut path, &mut calls, &mut time);
        (calls, time)
    }

    fn fold_into<'a>(
        &'a self,
        node: usize,
        path: &mut Vec<&'a str>,
        calls: &mut Folded,
        time: &mut Folded,
    ) {
        let n = &self.nodes[node];
        if node != 0 {
            path.push(&n.name);
        }
        let child_calls: u64 = n.children.values().map(|&c| self.nodes[c].calls).sum();
        let child_time: u64 = (n.children.values())
            .map(|&c| self.nodes[c].time_ns)
            .fold(0, u64::saturating_add);
        if node != 0 {
            calls.add(path, n.calls.saturating_sub(child_calls));
            time.add(path, n.time_ns.saturating_sub(child_time) / 1000);
        }
        for &c in n.children.values() {
            self.fold_into(c, path, calls, time);
        }
        if node != 0 {
            path.pop();
        }
    }

    pub fn speedscope(&self, name: &str) -> String {
        let (calls, time) = self.folded();
        speedscope_json_profiles(
            name,
            &[
                WeightedProfile {
                    name: "DB calls",
                    folded: &calls,
                    unit: "none",
                },
                WeightedProfile {
                    name: "DB time",
                    folded: &time,
                    unit: "microseconds",
                },
            ],
        )
    }

    /// The tree for the treemap, children heaviest first.
    pub fn tree(&self) -> TreeNode<'_> {
        self.tree_of(0)
    }

    fn tree_of(&self, node: usize) -> TreeNode<'_> {
        let n = &self.nodes[node];
        TreeNode(
            &n.name,
            n.calls,
            n.time_ns / 1000,
            self.sorted_children(node)
                .into_iter()
                .map(|c| self.tree_of(c))
                .collect(),
        )
    }

    /// The heaviest paths as an indented tree: children under `min_share` of all calls are
    /// left out, at most `max_lines` lines.
    pub fn text(&self, min_share: f64, max_lines: usize) -> String {
        let mut out = String::new();
        let total = self.calls().max(1);
        let mut lines = 0;
        let mut stack: Vec<(usize, usize)> = self
            .sorted_children(0)
            .into_iter()
            .rev()
            .map(|c| (c, 0))
            .collect();
        while let Some((node, depth)) = stack.pop() {
            let n = &self.nodes[node];
            if (n.calls as f64) < min_share * total as f64 {
                continue;
            }
            if lines == max_lines {
                let _ = writeln!(out, "  ...");
                break;
            }
            lines += 1;
            let _ = writeln!(
                out,
                "{:>8} {:>5.1}% {:>9.1} ms  {}{}",
                n.calls,
                100.0 * n.calls as f64 / total as f64,
                n.time_ns as f64 / 1e6,
                "  ".repeat(depth),
                n.name
            );
            for c in self.sorted_children(node).into_iter().rev() {
                stack.push((c, depth + 1));
            }
        }
        out
    }
}
