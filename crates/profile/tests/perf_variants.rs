//! perf script as perf writes it under other field sets and record options
//! (tests/fixtures/perf-script, README there): each imports with the stacks and totals the
//! reference collapser printed for it.

use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/perf-script")
        .join(name)
}

fn imported(name: &str) -> kiln_profile::Imported {
    kiln_profile::import_file(&fixture(&format!("{name}.txt")))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_variant_imports_with_the_reference_collapsers_stacks() {
    for name in [
        "no-time",
        "no-event",
        "no-indent",
        "no-call-chain",
        "modifiers-and-empty-chain",
    ] {
        let expected = std::fs::read_to_string(fixture(&format!("{name}.collapsed"))).unwrap();
        let read = imported(name);
        assert_eq!(
            read.format,
            kiln_profile::SourceFormat::PerfScript,
            "{name}"
        );
        assert_eq!(read.folded.to_text(), expected, "{name}");
        // the same bytes read whole, not streamed from the file, read the same
        let bytes = std::fs::read(fixture(&format!("{name}.txt"))).unwrap();
        assert_eq!(
            kiln_profile::import(&bytes).unwrap().folded.to_text(),
            expected,
            "{name}"
        );
    }
}

#[test]
fn a_clock_event_with_modifiers_is_still_counted_in_nanoseconds() {
    let read = imported("modifiers-and-empty-chain");
    assert_eq!(read.value.as_deref(), Some("cpu-clock/nanoseconds"));
    // the cpu-clock samples only: the task-clock one is another event's
    assert_eq!(read.samples, Some(2));
}

/// One sample as perf may write it: header fields present or not, frames indented or not,
/// the one frame on the header line, or no frame at all.
#[derive(Clone, Debug)]
struct Sample {
    time: bool,
    cpu: bool,
    modifiers: bool,
    indent: bool,
    frames: usize,
    on_header: bool,
    blank_after: bool,
}

fn sample() -> impl proptest::strategy::Strategy<Value = Sample> {
    use proptest::prelude::*;
    (any::<[bool; 6]>(), 0usize..4).prop_map(|(b, frames)| Sample {
        time: b[0],
        cpu: b[1],
        modifiers: b[2],
        indent: b[3],
        frames,
        on_header: b[4] && frames == 1,
        // without a blank line a header must follow a header-borne frame or end the text
        blank_after: b[5] || !(b[4] && frames == 1),
    })
}

fn write(samples: &[Sample]) -> String {
    let mut out = String::new();
    for (i, s) in samples.iter().enumerate() {
        out += "my app 4242/4243 ";
        if s.cpu {
            out += "[001] ";
        }
        if s.time {
            out += &format!("{}.{:06}: ", 100 + i, i);
        }
        out += if s.modifiers {
            "cpu-clock:uhH:"
        } else {
            "cpu-clock:"
        };
        let frame = |k: usize| format!("{:x} f{k}+0x1 (/usr/bin/app)", 0x55d0_0000 + k);
        if s.on_header {
            out += &format!("  {}\n", frame(0));
        } else {
            out += "\n";
            for k in 0..s.frames {
                out += if s.indent { "\t    " } else { "" };
                out += &frame(k);
                out += "\n";
            }
        }
        if s.blank_after {
            out += "\n";
        }
    }
    out
}

proptest::proptest! {
    /// However perf wrote them, every sample is counted once: the total is the samples'
    /// number, each with as many frames as it had under its command.
    #[test]
    fn any_mix_of_variants_counts_every_sample_once(samples in proptest::collection::vec(sample(), 1..30)) {
        let text = write(&samples);
        let read = kiln_profile::import(text.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{text}"));
        proptest::prop_assert_eq!(read.folded.total(), samples.len() as u64, "{}", text);
        let no_frames = samples.iter().filter(|s| s.frames == 0).count() as u64;
        let under_command = read.folded.lines().filter(|(stack, _)| *stack == "my_app").map(|(_, n)| n).sum::<u64>();
        proptest::prop_assert_eq!(under_command, no_frames, "{}", text);
    }
}

/// The no-call-chain fixture's expected stacks are what inferno's own collapser makes of the
/// text as perf wrote it (stackcollapse-perf.pl makes nothing of it).
#[test]
fn the_no_call_chain_truth_is_inferno_s_own_reading() {
    use inferno::collapse::Collapse;
    let raw = std::fs::read(fixture("no-call-chain.txt")).unwrap();
    let mut out = Vec::new();
    inferno::collapse::perf::Folder::default()
        .collapse(&raw[..], &mut out)
        .unwrap();
    let mut lines: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    let expected = std::fs::read_to_string(fixture("no-call-chain.collapsed")).unwrap();
    assert_eq!(lines.join("\n") + "\n", expected);
}
