//! Inputs that are not what kiln reads are refused by what they are, containers are opened,
//! and collapsed stacks are claimed only on evidence. The inputs are written here.

use std::io::Write;

fn import(bytes: &[u8]) -> Result<kiln_profile::Imported, String> {
    kiln_profile::import(bytes).map_err(|e| e.to_string())
}

/// The same bytes as a file, streamed as `kiln profile import FILE` reads them.
fn import_file(bytes: &[u8]) -> Result<kiln_profile::Imported, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, bytes).unwrap();
    kiln_profile::import_file(&path).map_err(|e| e.to_string())
}

fn both(bytes: &[u8]) -> Result<String, String> {
    let whole = import(bytes).map(|i| i.folded.to_text());
    let streamed = import_file(bytes).map(|i| i.folded.to_text());
    assert_eq!(whole.is_ok(), streamed.is_ok(), "{whole:?} / {streamed:?}");
    if let (Ok(a), Ok(b)) = (&whole, &streamed) {
        assert_eq!(a, b);
    }
    whole
}

#[test]
fn formats_kiln_does_not_read_are_refused_by_name() {
    let cases: [(&[u8], &str); 7] = [
        (b"FLR\0\x00\x02\x00\x01JNI global refs: 28, weak refs: 3\n", "a JFR recording"),
        (br#"{"traceEvents": [{"ph": "X", "name": "main", "ts": 1}]}"#, "a Chrome trace"),
        (br#"[{"ph": "B", "name": "main", "ts": 1}]"#, "a Chrome trace"),
        (b"# callgrind format\nevents: Ir\nfn=main\n16 400\n", "a callgrind profile"),
        (br#"{"mode": "cpu", "frames": {}, "raw": [1, 2]}"#, "stackprof JSON"),
        (b"\x04\x08{\x06:\tmode:\x08cpu", "a Ruby Marshal dump"),
        (b"Flat profile:\n\nEach sample counts as 0.01 seconds.\n  %   cumulative   self\n 50.00  0.01  0.01  1\n", "not collapsed stacks"),
    ];
    for (bytes, named) in cases {
        let e = both(bytes).unwrap_err();
        assert!(e.contains(named), "{named}: {e}");
    }
}

/// async-profiler's collapsed stacks with thread names open with `[`, as JSON does: they are
/// stacks (a CI run read a wall-clock profile as "JSON of no known format").
#[test]
fn stacks_that_open_with_a_thread_name_are_stacks() {
    let text = b"[request-1 tid=7];Thread.run_[j];Shop.handle_[j] 40\n[GC Thread#0 tid=5];start_thread 3\n";
    assert_eq!(
        both(text).unwrap(),
        "[GC Thread#0 tid=5];start_thread 3\n[request-1 tid=7];Thread.run_[j];Shop.handle_[j] 40\n"
    );
}

#[test]
fn gzip_zip_and_utf16_are_opened_and_read_as_what_they_hold() {
    let collapsed = "main;work 3\nmain;idle 1\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(collapsed.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    assert_eq!(both(&gz).unwrap(), "main;idle 1\nmain;work 3\n");
    let le: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(collapsed.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let be: Vec<u8> = [0xfe, 0xff]
        .into_iter()
        .chain(collapsed.encode_utf16().flat_map(u16::to_be_bytes))
        .collect();
    for text in [le, be] {
        assert_eq!(both(&text).unwrap(), "main;idle 1\nmain;work 3\n");
    }
    let zip = |files: &[(&str, &str)]| {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, text) in files {
            w.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            w.write_all(text.as_bytes()).unwrap();
        }
        w.finish().unwrap().into_inner()
    };
    assert_eq!(
        both(&zip(&[("p.collapsed", collapsed)])).unwrap(),
        "main;idle 1\nmain;work 3\n"
    );
    let e = both(&zip(&[("a.txt", collapsed), ("b.txt", collapsed)])).unwrap_err();
    assert!(e.contains("a zip archive of 2 files (a.txt, b.txt)"), "{e}");
    // what a container holds is said as inside it
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(br#"{"traceEvents": []}"#).unwrap();
    let e = both(&gz.finish().unwrap()).unwrap_err();
    assert!(e.contains("in the gzip: a Chrome trace"), "{e}");
}

proptest::proptest! {
    /// Collapsed text with lines of something else among its stacks: imported with every
    /// stack's count (the others counted as ignored) while most lines are stacks, refused
    /// otherwise; never imported short.
    #[test]
    fn collapsed_text_is_imported_whole_or_refused(
        counts in proptest::collection::vec(1u64..1000, 1..50),
        junk in proptest::collection::vec(0usize..60, 0..50),
    ) {
        let mut lines: Vec<String> = counts.iter().enumerate().map(|(i, n)| format!("main;f{i} {n}")).collect();
        for (k, at) in junk.iter().enumerate() {
            lines.insert((*at).min(lines.len()), format!("not a stack line {k}:"));
        }
        let text = lines.join("\n") + "\n";
        match import(text.as_bytes()) {
            Ok(read) => {
                proptest::prop_assert!(junk.len() * 2 <= lines.len(), "{}", text);
                proptest::prop_assert_eq!(read.folded.total(), counts.iter().sum::<u64>());
                proptest::prop_assert_eq!(read.ignored_lines, junk.len());
            }
            Err(e) => {
                proptest::prop_assert!(junk.len() * 2 > lines.len(), "{e}\n{}", text);
                proptest::prop_assert!(e.contains("not collapsed stacks"), "{e}");
            }
        }
    }
}

/// A pprof sample without a stack stays in the total, as `go tool pprof -top` counts it
/// (tests/fixtures/pprof/README.md): main.hot is 70% of 10, not 100% of 7.
#[test]
fn a_pprof_sample_without_a_stack_is_in_the_total_as_pprof_says() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pprof/empty-stack.pb");
    let read = kiln_profile::import_file(&path).unwrap();
    assert_eq!(read.folded.total(), 10);
    let hot = read.folded.function_shares()["main.hot"].self_pct;
    assert!((hot - 70.0).abs() < 1e-9, "{hot}");
}
