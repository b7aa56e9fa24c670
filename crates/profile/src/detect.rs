//! What an input to `kiln profile import` is, told by its content: containers unwrapped
//! (gzip, zip, UTF-16 text), and the formats kiln does not read named with the command that
//! converts them, so that nothing is read as collapsed stacks unless its lines are
//! collapsed stacks.

use std::io::Read;

use crate::ProfileError;

/// The most bytes a container may unwrap to (a gzip or zip bomb would fill memory).
const MAX_UNWRAPPED: u64 = 1 << 30;

/// An input's inner bytes when it is a container, and what it was; None when it is not one.
pub(crate) fn unwrap(data: &[u8]) -> Result<Option<(Vec<u8>, String)>, ProfileError> {
    if let Some(text) = utf16_text(data) {
        return Ok(Some((text.into_bytes(), "UTF-16 text".into())));
    }
    if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(data)
            .take(MAX_UNWRAPPED + 1)
            .read_to_end(&mut out)
            .map_err(|e| ProfileError::Format(format!("gzip that does not decompress: {e}")))?;
        return bounded(out, "gzip").map(Some);
    }
    if data.starts_with(b"PK\x03\x04") {
        return unzip(data).map(Some);
    }
    Ok(None)
}

/// Whether `unwrap` would open this input (by its first bytes alone).
pub(crate) fn unwrap_would(head: &[u8]) -> bool {
    [
        &[0xff, 0xfe][..],
        &[0xfe, 0xff],
        &[0x1f, 0x8b],
        b"PK\x03\x04",
    ]
    .iter()
    .any(|magic| head.starts_with(magic))
}

fn bounded(out: Vec<u8>, what: &str) -> Result<(Vec<u8>, String), ProfileError> {
    if out.len() as u64 > MAX_UNWRAPPED {
        return Err(ProfileError::Format(format!(
            "{what}: more than 1 GiB once unpacked; refused"
        )));
    }
    Ok((out, what.to_string()))
}

/// A zip archive's one file; an archive of more is refused with their names.
fn unzip(data: &[u8]) -> Result<(Vec<u8>, String), ProfileError> {
    let bad = |e: zip::result::ZipError| {
        ProfileError::Format(format!("a zip archive kiln cannot open: {e}"))
    };
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(data)).map_err(bad)?;
    let files: Vec<usize> = (0..archive.len())
        .filter(|&i| archive.by_index(i).is_ok_and(|f| f.is_file()))
        .collect();
    let [only] = files[..] else {
        let names: Vec<String> = (0..archive.len().min(10))
            .filter_map(|i| {
                archive
                    .by_index(i)
                    .ok()
                    .and_then(|f| f.name().ok().map(|n| n.to_string()))
            })
            .collect();
        return Err(ProfileError::Format(format!(
            "a zip archive of {} files ({}): unzip it and import the profile among them",
            files.len(),
            names.join(", ")
        )));
    };
    let mut file = archive.by_index(only).map_err(bad)?;
    let name = file
        .name()
        .map_or_else(|_| "(unnamed)".to_string(), |n| n.to_string());
    let mut out = Vec::new();
    std::io::Read::by_ref(&mut file)
        .take(MAX_UNWRAPPED + 1)
        .read_to_end(&mut out)
        .map_err(|e| ProfileError::Format(format!("zip entry {name}: {e}")))?;
    bounded(out, &format!("zip entry {name}"))
}

/// Text in UTF-16 with its byte order mark, as UTF-8 (what Windows' tools write).
fn utf16_text(data: &[u8]) -> Option<String> {
    let little = data.starts_with(&[0xff, 0xfe]);
    if !(little || data.starts_with(&[0xfe, 0xff])) {
        return None;
    }
    let units = data[2..].chunks_exact(2).map(|b| {
        if little {
            u16::from_le_bytes([b[0], b[1]])
        } else {
            u16::from_be_bytes([b[0], b[1]])
        }
    });
    Some(
        char::decode_utf16(units)
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
    )
}

/// A format kiln does not import, by its opening: what it is and how to convert it.
pub(crate) fn not_a_profile(head: &[u8]) -> Option<String> {
    if head.starts_with(b"FLR\0") {
        return Some(
            "a JFR recording (Java Flight Recorder): convert it to collapsed stacks with \
             async-profiler's `jfrconv -o collapsed FILE.jfr out.collapsed` and import that \
             (the JDK's `jfr print FILE.jfr` reads it as text)"
                .into(),
        );
    }
    if head.starts_with(&[0x04, 0x08]) {
        return Some(
            "a Ruby Marshal dump (stackprof's default): `stackprof --collapsed FILE > \
             out.collapsed` writes collapsed stacks"
                .into(),
        );
    }
    let text = String::from_utf8_lossy(&head[..head.len().min(1 << 16)]);
    let t = text.trim_start();
    if t.starts_with("# callgrind format") || (t.contains("\nevents:") && t.contains("\nfn=")) {
        return Some(
            "a callgrind profile (valgrind): it holds costs per function, not sampled stacks; \
             kiln reads collapsed stacks, perf script text and pprof"
                .into(),
        );
    }
    if looks_like_json(t) {
        if t.contains("\"traceEvents\"") || (t.starts_with('[') && t.contains("\"ph\"")) {
            return Some(
                "a Chrome trace (trace event format): a timeline, not sampled stacks; open it in \
                 Perfetto (ui.perfetto.dev) or chrome://tracing"
                    .into(),
            );
        }
        if t.contains("\"mode\"") && t.contains("\"frames\"") && t.contains("\"raw\"") {
            return Some(
                "stackprof JSON (Ruby): `stackprof --collapsed FILE > out.collapsed` writes \
                 collapsed stacks"
                    .into(),
            );
        }
        if !t.contains("speedscope.app/file-format-schema") {
            return Some("JSON that is no profile format kiln reads (speedscope's is)".into());
        }
    }
    None
}

/// Whether text opens as JSON does: an object or an array that reads on to its end or to the
/// end of the text given (a head cut short). Collapsed stacks with thread names open with `[`
/// too (`[main tid=1];Main.run 12`), and are not JSON.
fn looks_like_json(text: &str) -> bool {
    if !(text.starts_with('{') || text.starts_with('[')) {
        return false;
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>();
    match values.next() {
        Some(Ok(_)) => true,
        Some(Err(e)) => e.is_eof(),
        None => false,
    }
}

/// Collapsed stacks only on evidence: of the first 100 lines with content, most must be
/// stacks (flamegraph.pl skips the others, and kiln counts them as ignored); text that is
/// mostly something else is refused with its first line that is not a stack.
pub(crate) fn collapsed_evidence(head: &str) -> Result<(), ProfileError> {
    let mut content = 0usize;
    let mut other = Vec::new();
    for (n, line) in head.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        content += 1;
        if crate::folded::parse_line(line).is_none() {
            other.push((n + 1, line));
        }
        if content == 100 {
            break;
        }
    }
    match other.first() {
        Some(&(n, line)) if other.len() * 2 > content => Err(ProfileError::Format(format!(
            "{} of its first {content} lines are not collapsed stacks (`frame;frame;... COUNT`); \
             line {n} reads {:?}",
            other.len(),
            line.chars().take(80).collect::<String>()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_told_from_stacks_that_open_with_a_thread_name() {
        assert!(looks_like_json(r#"{"traceEvents": []}"#));
        assert!(looks_like_json(r#"[{"ph": "X"}, {"ph": "#));
        assert!(!looks_like_json("[main tid=1];Main.run;Main.work 12\n"));
        assert!(!looks_like_json("[GC Thread#0 tid=5];start_thread 3\n"));
        assert!(not_a_profile(b"[request-1 tid=7];Thread.run_[j];Shop.handle_[j] 40\n").is_none());
    }

    #[test]
    fn collapsed_needs_its_lines_to_be_collapsed() {
        assert!(collapsed_evidence("a;b 1\nnot a line\n\nnor this\n").is_err());
        // a stray line among stacks is skipped and counted, as flamegraph.pl does
        assert!(collapsed_evidence("a;b 1\na;c 2\n\nnot a line\n").is_ok());
        // gprof's flat profile: some of its lines end in a number, most do not
        let gprof = "Flat profile:\n\nEach sample counts as 0.01 seconds.\n  %   cumulative   self\n 50.00      0.01     0.01        1\n";
        let e = collapsed_evidence(gprof).unwrap_err().to_string();
        assert!(e.contains("line 1 reads \"Flat profile:\""), "{e}");
    }
}
