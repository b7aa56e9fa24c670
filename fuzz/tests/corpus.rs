//! The committed corpus of every fuzz target, replayed: each input must go through its target
//! without a panic, within a bound of time. The corpus holds the seeds (real files from kiln's
//! tests and tools) and what `cargo fuzz run` found that reached new code, minimised
//! (`cargo fuzz cmin`); an input that once crashed a target stays in it as a regression test.

use std::time::{Duration, Instant};

/// One input taking longer than this (in a debug build) is a hang to look at.
const SLOWEST_INPUT: Duration = Duration::from_secs(5);

#[test]
fn every_corpus_input_goes_through_its_target() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, target) in kiln_fuzz::TARGETS {
        let dir = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{name} has no corpus");
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            let started = Instant::now();
            target(&data);
            assert!(
                started.elapsed() < SLOWEST_INPUT,
                "{} took {:?}",
                input.display(),
                started.elapsed()
            );
        }
    }
}

/// Every target has its libFuzzer binary, and every binary is a target of the list.
#[test]
fn every_target_has_its_fuzz_binary() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for (name, _) in kiln_fuzz::TARGETS {
        let bin = root.join("fuzz_targets").join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&bin).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains(&format!("kiln_fuzz::{name}(data)")), "{name}");
        assert!(manifest.contains(&format!("name = \"{name}\"")), "{name}");
    }
    let bins = std::fs::read_dir(root.join("fuzz_targets"))
        .unwrap()
        .count();
    assert_eq!(bins, kiln_fuzz::TARGETS.len());
}
