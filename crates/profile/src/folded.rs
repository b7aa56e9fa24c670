//! Collapsed ("folded") stacks, the form every profile in kiln is turned into: one line per
//! distinct stack, frames root first joined by `;`, then a space and a sample count. It is
//! what FlameGraph, inferno, async-profiler (`-o collapsed`), py-spy (`--format raw`) and
//! speedscope read and write.

use kiln_record::schema::profile::FunctionShare;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::ProfileError;

/// Stacks (frames root first, joined by `;`) with their sample counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    stacks: BTreeMap<String, u64>,
}

/// What a lenient parse of collapsed text skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParseReport {
    pub lines: usize,
    pub ignored: usize,
    /// The first ignored line's number (1-based) and a short copy of it.
    pub first_ignored: Option<(usize, String)>,
}

impl Folded {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `count` samples of the stack whose frames are given root first.
    pub fn add<S: AsRef<str>>(&mut self, frames: &[S], count: u64) {
        if frames.is_empty() || count == 0 {
            return;
        }
        let mut key = String::new();
        for (i, frame) in frames.iter().enumerate() {
            if i > 0 {
                key.push(';');
            }
            // A `;` inside a name would split the frame in two when read back.
            key.push_str(&frame.as_ref().replace(';', ":"));
        }
        self.add_joined(key, count);
    }

    fn add_joined(&mut self, stack: String, count: u64) {
        let slot = self.stacks.entry(stack).or_insert(0);
        *slot = slot.saturating_add(count);
    }

    /// Reads collapsed text. Lines that are not `stack count` are skipped and reported, like
    /// flamegraph.pl's "Ignored N lines"; an input with no valid line at all is an error.
    pub fn parse(text: &str) -> Result<(Self, ParseReport), ProfileError> {
        Self::parse_reader(text.as_bytes())
    }

    /// A run record's collapsed-stacks part, from its bytes (lines that are not UTF-8 are
    /// left out): what the findings and the page both read.
    pub fn of_part(bytes: &[u8]) -> Result<Self, ProfileError> {
        Self::parse_reader(bytes).map(|(folded, _)| folded)
    }

    /// `parse` of a stream, line by line (a collapsed file of any size in little memory).
    /// Lines that are not UTF-8 are ignored like any other malformed line.
    pub fn parse_reader(
        mut reader: impl std::io::BufRead,
    ) -> Result<(Self, ParseReport), ProfileError> {
        let mut folded = Self::new();
        let mut report = ParseReport::default();
        let mut raw = Vec::new();
        let mut number = 0;
        loop {
            raw.clear();
            let n = reader
                .read_until(b'\n', &mut raw)
                .map_err(|e| ProfileError::Format(format!("reading collapsed stacks: {e}")))?;
            if n == 0 {
                break;
            }
            number += 1;
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            report.lines += 1;
            match std::str::from_utf8(&raw).ok().and(parse_line(line)) {
                Some((stack, count)) => folded.add_joined(stack.to_string(), count),
                None => {
                    report.ignored += 1;
                    if report.first_ignored.is_none() {
                        report.first_ignored = Some((number, line.chars().take(80).collect()));
                    }
                }
            }
        }
        if folded.stacks.is_empty() {
            return Err(ProfileError::Format(match &report.first_ignored {
                Some((n, l)) => format!(
                    "no collapsed stacks (`frame;frame;... COUNT`) found; line {n} reads {l:?}"
                ),
                None => "the input is empty".into(),
            }));
        }
        Ok((folded, report))
    }

    /// The collapsed text, one line per stack, sorted (what inferno's `from_lines` needs).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (stack, count) in &self.stacks {
            let _ = writeln!(out, "{stack} {count}");
        }
        out
    }

    pub fn lines(&self) -> impl Iterator<Item = (&str, u64)> {
        self.stacks.iter().map(|(s, &c)| (s.as_str(), c))
    }

    pub fn total(&self) -> u64 {
        self.stacks.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    pub fn merge(&mut self, other: &Folded) {
        for (stack, &count) in &other.stacks {
            self.add_joined(stack.clone(), count);
        }
    }

    /// Functions by self samples (the leaf), most first, at most `n`; never a function that
    /// was no sample's leaf.
    pub fn top_self(&self, n: usize) -> Vec<FunctionShare> {
        top_self(&self.function_shares(), n)
    }

    /// Functions by total samples (anywhere on the stack), most first, at most `n`; never a
    /// pass-through frame (see `pass_through`).
    pub fn top_total(&self, n: usize) -> Vec<FunctionShare> {
        let mut shares = self.function_shares();
        self.drop_pass_through(&mut shares);
        top_total(&shares, n)
    }

    /// `shares` without the pass-through frames (see `pass_through`).
    pub fn drop_pass_through(&self, shares: &mut BTreeMap<String, FunctionShare>) {
        for frame in self.pass_through() {
            shares.remove(&frame);
        }
    }

    /// Frames that only pass their samples on: never a leaf, and always followed by the same
    /// one callee (thread entry points, `start_thread -> JavaMain -> ...`, a server's chain of
    /// filters). On nearly every stack, they would fill "Top total" and say nothing.
    fn pass_through(&self) -> std::collections::HashSet<String> {
        // per frame: its one callee so far, or None once it had two or was a leaf
        let mut callee: BTreeMap<&str, Option<&str>> = BTreeMap::new();
        for stack in self.stacks.keys() {
            let frames: Vec<&str> = stack.split(';').collect();
            for (i, &frame) in frames.iter().enumerate() {
                let next = frames.get(i + 1).copied();
                match callee.get(frame) {
                    None => {
                        callee.insert(frame, next);
                    }
                    Some(Some(one)) if Some(*one) != next => {
                        callee.insert(frame, None);
                    }
                    _ => {}
                }
            }
        }
        callee
            .into_iter()
            .filter(|(_, one)| one.is_some())
            .map(|(frame, _)| frame.to_string())
            .collect()
    }

    /// Every function's self and total samples.
    pub fn function_shares(&self) -> BTreeMap<String, FunctionShare> {
        let total = self.total().max(1) as f64;
        let mut shares: BTreeMap<String, FunctionShare> = BTreeMap::new();
        // A set, not a list: a stack 500k frames deep made the list's lookups quadratic.
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (stack, &count) in &self.stacks {
            seen.clear();
            let frames: Vec<&str> = stack.split(';').collect();
            for (i, &frame) in frames.iter().enumerate() {
                let share = share_of(&mut shares, frame);
                if i + 1 == frames.len() {
                    share.self_samples += count;
                }
                if seen.insert(frame) {
                    share.total_samples += count;
                }
            }
        }
        set_percents(&mut shares, total);
        shares
    }

    /// Where the threads blocked, for an off-CPU profile: each stack counted at its first
    /// frame outside the kernel from the leaf (its leaf when all are the kernel's), at most
    /// `n`, most first. Self time there is ~all `schedule`/`__schedule`, which says nothing;
    /// the code that called into the wait does.
    pub fn blocked_in(&self, n: usize) -> Vec<FunctionShare> {
        self.counted_at(n, |mut frames, leaf| {
            std::iter::once(leaf)
                .chain(&mut frames)
                .find(|f| !is_kernel_frame(f))
                .unwrap_or(leaf)
        })
    }

    /// Where an allocation profile's bytes were allocated: each stack counted at the frame
    /// above its leaf (the leaf is the allocated type), at most `n`, most first.
    pub fn allocated_in(&self, n: usize) -> Vec<FunctionShare> {
        self.counted_at(n, |mut frames, leaf| frames.next().unwrap_or(leaf))
    }

    /// The samples whose stack holds one of the frames `[name]` for `names`, by that name,
    /// most first (async-profiler puts `[not_walkable_Java]` and the like where a stack it
    /// could not walk would be).
    pub fn marked_by(&self, names: &[&str]) -> Vec<FunctionShare> {
        let mut by: BTreeMap<String, FunctionShare> = BTreeMap::new();
        for (stack, &count) in &self.stacks {
            let mark = stack.split(';').find_map(|frame| {
                let name = frame.strip_prefix('[')?.strip_suffix(']')?;
                names.contains(&name).then_some(name)
            });
            if let Some(name) = mark {
                let share = share_of(&mut by, name);
                share.self_samples += count;
                share.total_samples += count;
            }
        }
        set_percents(&mut by, self.total().max(1) as f64);
        top_self(&by, usize::MAX)
    }

    /// Each stack's count given to the one frame `at` picks (from the frames below the leaf,
    /// leaf first, and the leaf itself), at most `n`, most first.
    fn counted_at<'a>(
        &'a self,
        n: usize,
        at: impl Fn(std::str::RSplit<'a, char>, &'a str) -> &'a str,
    ) -> Vec<FunctionShare> {
        let mut by: BTreeMap<String, FunctionShare> = BTreeMap::new();
        for (stack, &count) in &self.stacks {
            let mut frames = stack.rsplit(';');
            let leaf = frames.next().unwrap_or(stack);
            let share = share_of(&mut by, at(frames, leaf));
            share.self_samples += count;
            share.total_samples += count;
        }
        set_percents(&mut by, self.total().max(1) as f64);
        top_self(&by, n)
    }

    /// Share of samples (0..1) whose leaf is a kernel frame (annotated `_[k]`).
    pub fn kernel_share(&self) -> f64 {
        let kernel: u64 = self
            .stacks
            .iter()
            .filter(|(s, _)| s.rsplit(';').next().is_some_and(is_kernel_frame))
            .map(|(_, &c)| c)
            .sum();
        kernel as f64 / self.total().max(1) as f64
    }

    /// The same stacks with every frame renamed by `rename` (stacks that become equal merge).
    pub fn map_frames(&self, rename: impl Fn(&str) -> String) -> Folded {
        let mut out = Folded::new();
        for (stack, &count) in &self.stacks {
            let frames: Vec<String> = stack.split(';').map(&rename).collect();
            out.add(&frames, count);
        }
        out
    }

    /// Only the stacks for which `keep` is true (given the stack's frames, root first).
    pub fn retain_stacks(&self, keep: impl Fn(std::str::Split<'_, char>) -> bool) -> Folded {
        Folded {
            stacks: (self.stacks.iter())
                .filter(|(s, _)| keep(s.split(';')))
                .map(|(s, &c)| (s.clone(), c))
                .collect(),
        }
    }

    /// Only the stacks that contain a frame for which `keep` is true.
    pub fn filter(&self, keep: impl Fn(&str) -> bool) -> Folded {
        self.retain_stacks(|mut frames| frames.any(&keep))
    }
}

/// `frame`'s share in `shares`, added at zero when it is not there yet.
fn share_of<'a>(
    shares: &'a mut BTreeMap<String, FunctionShare>,
    frame: &str,
) -> &'a mut FunctionShare {
    shares
        .entry(frame.to_string())
        .or_insert_with(|| FunctionShare {
            name: frame.to_string(),
            self_samples: 0,
            total_samples: 0,
            self_pct: 0.0,
            total_pct: 0.0,
        })
}

/// Each share's percentages of `total` samples.
fn set_percents(shares: &mut BTreeMap<String, FunctionShare>, total: f64) {
    for share in shares.values_mut() {
        share.self_pct = 100.0 * share.self_samples as f64 / total;
        share.total_pct = 100.0 * share.total_samples as f64 / total;
    }
}

/// Whether a frame is the kernel's: perf script's collapsed stacks mark them `_[k]`.
pub fn is_kernel_frame(frame: &str) -> bool {
    frame.ends_with("_[k]")
}

/// Whether a frame is a Java method as async-profiler (`ann`) and the JVM's perf map mark
/// them: compiled `_[j]`, inlined `_[i]`, interpreted `_[0]`, C1 `_[1]`.
pub fn is_java_frame(frame: &str) -> bool {
    ["_[j]", "_[i]", "_[0]", "_[1]"]
        .iter()
        .any(|mark| frame.ends_with(mark))
}

/// A Java frame's method (`package.Class.method`) without its mark; None for other frames.
pub fn java_method(frame: &str) -> Option<&str> {
    is_java_frame(frame).then(|| frame.rsplit_once("_[").map_or(frame, |(method, _)| method))
}

/// Whether a Java stack (its methods, `package.Class.method`) is a thread waiting for work to
/// come, not for a lock or for a call it made: a pool's idle worker
/// (`ThreadPoolExecutor.getTask`, `ForkJoinPool.awaitWork`, Jetty's `idleJobPoll`), a queue's
/// consumer with nothing to take, a disruptor's consumer waiting for events, a timer's or a
/// reference queue's thread, a selector with nothing ready. A producer waiting for room
/// (`put`) is not: a full queue holds requests up.
pub fn is_waiting_for_work<'a>(methods: impl IntoIterator<Item = &'a str>) -> bool {
    methods.into_iter().any(|method| {
        let (class, name) = method.rsplit_once('.').unwrap_or(("", method));
        method.ends_with("ThreadPoolExecutor.getTask")
            || method.ends_with("ForkJoinPool.awaitWork")
            || method.ends_with("QueuedThreadPool$Runner.idleJobPoll")
            || method.ends_with("TimerThread.mainLoop")
            || (class.ends_with("WaitStrategy") && name == "waitFor")
            || (class.ends_with("ReferenceQueue") && name == "remove")
            || (class.ends_with("SelectorImpl") && name == "lockAndDoSelect")
            || ((class.ends_with("Queue") || class.ends_with("Deque"))
                && matches!(name, "take" | "poll" | "takeFirst" | "pollFirst"))
    })
}

/// The `n` functions of `shares` with the most self samples (none that was never a leaf).
pub fn top_self(shares: &BTreeMap<String, FunctionShare>, n: usize) -> Vec<FunctionShare> {
    let mut top = top_by(shares, n, |s| (s.self_samples, s.total_samples));
    top.retain(|s| s.self_samples > 0);
    top
}

/// The `n` functions of `shares` with the most total samples.
pub fn top_total(shares: &BTreeMap<String, FunctionShare>, n: usize) -> Vec<FunctionShare> {
    top_by(shares, n, |s| (s.total_samples, s.self_samples))
}

fn top_by(
    shares: &BTreeMap<String, FunctionShare>,
    n: usize,
    key: impl Fn(&FunctionShare) -> (u64, u64),
) -> Vec<FunctionShare> {
    let mut top: Vec<&FunctionShare> = shares.values().collect();
    top.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
    top.into_iter().take(n).cloned().collect()
}

/// The frame of samples recorded without a stack: py-spy's `--format raw` writes them as
/// ` COUNT`, and flamegraph.pl counts them in the total (leaving them out made every share
/// too high).
pub const NO_STACK: &str = "[no stack]";

/// `stack count`: the count is the last whitespace-separated field, an unsigned integer (a
/// fractional count, which flamegraph.pl allows, is rounded).
pub(crate) fn parse_line(line: &str) -> Option<(&str, u64)> {
    let (stack, count) = line.trim_end().rsplit_once([' ', '\t'])?;
    let stack = match stack.trim_end() {
        "" => NO_STACK,
        stack => stack,
    };
    let count = match count.parse::<u64>() {
        Ok(c) => c,
        Err(_) => {
            let f: f64 = count.parse().ok()?;
            if !(f.is_finite() && f >= 0.0) {
                return None;
            }
            f.round() as u64
        }
    };
    Some((stack, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_merges_and_writes_back_sorted() {
        let text = "main;b 3\nmain;a 2\n\nmain;a 1\n";
        let (f, report) = Folded::parse(text).unwrap();
        assert_eq!(report.ignored, 0);
        assert_eq!(f.to_text(), "main;a 3\nmain;b 3\n");
        assert_eq!(f.total(), 6);
    }

    #[test]
    fn bad_lines_are_skipped_and_reported_and_nothing_valid_is_an_error() {
        let (f, report) = Folded::parse("a;b 2\nnot a count\nc 1.6\n").unwrap();
        assert_eq!(f.total(), 4);
        assert_eq!(report.ignored, 1);
        assert_eq!(report.first_ignored.unwrap().0, 2);
        let err = Folded::parse("garbage\n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        assert!(Folded::parse("").is_err());
    }

    /// py-spy's `--format raw` writes samples without a stack as ` COUNT`: counted in the
    /// total as flamegraph.pl does (dropped, every share was ~5% too high).
    #[test]
    fn samples_without_a_stack_count_in_the_total() {
        let (f, report) = Folded::parse("main;a 19\n 1\n").unwrap();
        assert_eq!(report.ignored, 0);
        assert_eq!(f.total(), 20);
        let shares = f.function_shares();
        assert!((shares["a"].self_pct - 95.0).abs() < 1e-9);
        assert!((shares[NO_STACK].self_pct - 5.0).abs() < 1e-9);
    }

    #[test]
    fn self_and_total_shares_count_recursion_once() {
        let (f, _) = Folded::parse("main;work;work 6\nmain;idle 4\n").unwrap();
        let shares = f.function_shares();
        assert_eq!(shares["work"].self_samples, 6);
        assert_eq!(shares["work"].total_samples, 6);
        assert_eq!(shares["main"].total_samples, 10);
        assert_eq!(shares["main"].self_samples, 0);
        assert_eq!(f.top_self(1)[0].name, "work");
        assert_eq!(f.top_total(1)[0].name, "main");
        assert!((shares["idle"].self_pct - 40.0).abs() < 1e-9);
    }

    #[test]
    fn frames_that_only_pass_samples_on_are_not_top_total() {
        let text = "start_thread;JavaMain;call_helper;Hot.main;Hot.spin 90\n\
                    start_thread;JavaMain;call_helper;Hot.main;clock 7\n\
                    start_thread;GC Thread 3\n";
        let (f, _) = Folded::parse(text).unwrap();
        let names: Vec<String> = f.top_total(10).into_iter().map(|s| s.name).collect();
        // start_thread branches (JavaMain, GC); JavaMain and call_helper only pass on.
        assert_eq!(
            names,
            ["start_thread", "Hot.main", "Hot.spin", "clock", "GC Thread"]
        );
    }

    #[test]
    fn allocated_bytes_are_counted_at_the_method_above_the_type() {
        let (f, _) = Folded::parse(
            "main;Shop.render_[j];byte[] 640\nmain;Shop.render_[j];java.lang.String 40\nmain;Shop.sum_[i];byte[] 160\nbyte[] 5\n",
        )
        .unwrap();
        let top = f.allocated_in(5);
        let names: Vec<(&str, u64)> = top
            .iter()
            .map(|s| (s.name.as_str(), s.self_samples))
            .collect();
        assert_eq!(
            names,
            [
                ("Shop.render_[j]", 680),
                ("Shop.sum_[i]", 160),
                ("byte[]", 5)
            ]
        );
    }

    #[test]
    fn off_cpu_time_is_counted_where_the_code_blocked_not_in_schedule() {
        let (f, _) = Folded::parse(
            "main;lock;futex_wait_[k];schedule_[k] 6\nmain;read;sys_read_[k];schedule_[k] 3\nmain;lock;futex_wait_[k];schedule_[k];x_[k] 1\nidle_[k];schedule_[k] 2\n",
        )
        .unwrap();
        let top = f.blocked_in(5);
        let names: Vec<(&str, u64)> = top
            .iter()
            .map(|s| (s.name.as_str(), s.self_samples))
            .collect();
        assert_eq!(names, [("lock", 7), ("read", 3), ("schedule_[k]", 2)]);
        assert!((top[0].self_pct - 100.0 * 7.0 / 12.0).abs() < 1e-9);
        // the self table would say schedule for 11 of 12
        assert_eq!(f.top_self(1)[0].name, "schedule_[k]");
    }

    #[test]
    fn kernel_share_is_the_share_of_kernel_leaves() {
        let (f, _) = Folded::parse("main;read;sys_read_[k] 3\nmain;work 1\n").unwrap();
        assert!((f.kernel_share() - 0.75).abs() < 1e-9);
    }

    #[test]
    fn semicolons_inside_a_frame_do_not_split_it() {
        let mut f = Folded::new();
        f.add(&["main", "a;b"], 1);
        assert_eq!(f.to_text(), "main;a:b 1\n");
    }

    proptest! {
        #[test]
        fn any_text_parses_or_errors_without_panic(text in "\\PC{0,200}") {
            let _ = Folded::parse(&text);
        }

        #[test]
        fn written_text_reads_back_equal(
            stacks in proptest::collection::vec(
                (proptest::collection::vec("[a-zA-Z_:<>.]{1,8}", 1..5), 1u64..1000), 1..20)
        ) {
            let mut f = Folded::new();
            for (frames, count) in &stacks {
                f.add(frames, *count);
            }
            let (back, report) = Folded::parse(&f.to_text()).unwrap();
            prop_assert_eq!(report.ignored, 0);
            prop_assert_eq!(back, f);
        }
    }
}
