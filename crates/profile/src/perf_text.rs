//! `perf script` text as perf writes it under any `-F` field set, rewritten line by line into
//! the one form inferno's collapser reads: a sample header `comm pid/tid [cpu] time: [period]
//! event:`, its frames indented, a blank line after. perf leaves out the time (`-F
//! comm,pid,event,ip,sym`), the indentation, or the call chain (`perf record` without `-g`
//! puts the one frame on the header line); an event may carry modifiers (`cpu-clock:uhH`).
//! Samples with an empty call chain are counted here under their command, as
//! stackcollapse-perf.pl keeps them (inferno drops them).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{BufRead, Read as _};
use std::rc::Rc;

/// A sample header's parts.
#[derive(Debug, PartialEq)]
pub(crate) struct Header<'a> {
    /// The command and the pid (or pid/tid), as written.
    pub head: &'a str,
    pub comm: &'a str,
    pub cpu: Option<&'a str>,
    pub time: Option<&'a str>,
    pub period: Option<u64>,
    /// Without modifiers: `cpu-clock` of `cpu-clock:uhH`; empty when perf wrote no event.
    pub event: &'a str,
    /// The one frame a header carries when the sample has no call chain.
    pub frame: Option<&'a str>,
}

/// The end of a header's pid word (`1234` or `1234/1235`, after the command), as inferno
/// finds it: the first all-digit word after the first.
fn pid_end(line: &str) -> Option<usize> {
    let mut start = line.find(' ')? + 1;
    loop {
        let end = start + line[start..].find(' ')?;
        let word = &line[start..end];
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let pid = match word.split_once('/') {
            Some((p, t)) => digits(p) && digits(t),
            None => digits(word),
        };
        if pid {
            return Some(end);
        }
        start = end + 1;
    }
}

/// perf's event modifiers (`u`, `k`, `h`, `H`, `G`, `I`, `p`, `P`, `S`, `D`, `W`, `e`).
fn is_modifiers(s: &str) -> bool {
    !s.is_empty() && s.len() <= 8 && s.bytes().all(|b| b"ukhHGIpPSDWe".contains(&b))
}

/// Parses a sample header; None for any other line.
pub(crate) fn parse_header(line: &str) -> Option<Header<'_>> {
    if line.starts_with([' ', '\t', '#']) {
        return None;
    }
    let end = pid_end(line)?;
    let (head, mut rest) = (&line[..end], line[end..].trim_start());
    let comm = line[..line[..end].rfind(' ')?].trim();
    let mut take = |ok: &dyn Fn(&str) -> bool| -> Option<&str> {
        let (word, after) = rest.split_once(' ').unwrap_or((rest, ""));
        ok(word).then(|| {
            rest = after.trim_start();
            word
        })
    };
    let cpu = take(&|w| w.starts_with('[') && w.ends_with(']'));
    let time = take(&|w| {
        w.strip_suffix(':')
            .is_some_and(|t| t.contains('.') && t.parse::<f64>().is_ok())
    })
    .map(|t| t.trim_end_matches(':'));
    let period = take(&|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse().ok());
    // `-F` without `event`: no event word, the header ends or its one frame follows
    let event_word = match take(&|w| w.len() > 1 && w.ends_with(':')) {
        Some(word) => word,
        None if rest.is_empty() || is_frame_line(rest) => ":",
        None => return None,
    };
    let mut event = &event_word[..event_word.len() - 1];
    if let Some((name, mods)) = event.rsplit_once(':') {
        if is_modifiers(mods) && !name.is_empty() {
            event = name;
        }
    }
    let frame = Some(rest.trim()).filter(|f| !f.is_empty());
    Some(Header {
        head,
        comm,
        cpu,
        time,
        period,
        event,
        frame,
    })
}

/// The event a header without one is given, for the collapser, which needs one.
const UNNAMED_EVENT: &str = "sample";

/// A frame line (`ADDRESS symbol (dso)`), indented or not.
pub(crate) fn is_frame_line(line: &str) -> bool {
    let t = line.trim();
    t.split_once(' ').is_some_and(|(addr, rest)| {
        !addr.is_empty() && addr.bytes().all(|b| b.is_ascii_hexdigit()) && rest.ends_with(')')
    })
}

/// Whether text is perf script's: a sample header with its frame on it or after it, or (when
/// no sample has a call chain) nothing but sample headers.
pub(crate) fn looks_like_perf_script(text: &str) -> bool {
    let lines: Vec<&str> = text.lines().take(200).collect();
    let with_frame = lines.iter().enumerate().any(|(i, line)| {
        parse_header(line).is_some_and(|h| {
            h.frame.is_some_and(is_frame_line)
                || lines.get(i + 1).is_some_and(|next| is_frame_line(next))
        })
    });
    let content = lines
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
    with_frame
        || (content.clone().count() > 0
            // (a header without an event, `comm pid`, would be a collapsed line too)
            && content
                .clone()
                .all(|l| parse_header(l).is_some_and(|h| !h.event.is_empty())))
}

/// What the rewrite saw that the collapser does not say.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// The first sample's event: the collapser keeps only its samples.
    pub event: Option<String>,
    /// Samples of that event with no frame, by command (spaces as `_`, as inferno names
    /// them), weighed by their period where they carry one.
    pub empty_chains: BTreeMap<String, u64>,
    /// A header without a time: the text has no sampled window.
    pub timeless: bool,
    /// Samples of the first event.
    pub samples: u64,
}

/// The rewriting reader.
pub(crate) struct Canonical<R> {
    inner: R,
    out: Vec<u8>,
    at: usize,
    line: Vec<u8>,
    /// Inside a sample: its header read, not yet its blank line.
    in_sample: bool,
    frames: usize,
    /// The open sample's command and weight, counted if it ends with no frame.
    open: Option<(String, u64, bool)>,
    pub seen: Rc<RefCell<Seen>>,
}

impl<R: BufRead> Canonical<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            out: Vec::new(),
            at: 0,
            line: Vec::new(),
            in_sample: false,
            frames: 0,
            open: None,
            seen: Rc::default(),
        }
    }

    /// Ends the open sample; one without frames is counted under its command.
    fn end_sample(&mut self) {
        if let Some((comm, weight, kept)) = self.open.take() {
            if self.frames == 0 && kept {
                let mut seen = self.seen.borrow_mut();
                let slot = seen.empty_chains.entry(comm).or_insert(0);
                *slot = slot.saturating_add(weight);
            }
        }
        self.in_sample = false;
        self.frames = 0;
    }

    fn rewrite(&mut self, raw: &[u8]) {
        // the common case, a frame already indented with a tab: as it is
        if self.in_sample && raw.first() == Some(&b'\t') && raw.len() > 2 && raw.ends_with(b")\n") {
            self.frames += 1;
            self.out.extend_from_slice(raw);
            return;
        }
        let text = String::from_utf8_lossy(raw);
        let line = text.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            self.end_sample();
            self.out.push(b'\n');
            return;
        }
        if line.starts_with('#') {
            self.out.extend_from_slice(raw);
            return;
        }
        let header = parse_header(line).filter(|_| !(self.in_sample && is_frame_line(line)));
        let Some(h) = header else {
            if self.in_sample && (line.starts_with([' ', '\t']) || is_frame_line(line)) {
                self.frames += 1;
                self.out.push(b'\t');
                self.out.extend_from_slice(line.trim_start().as_bytes());
                self.out.push(b'\n');
            } else {
                // not perf's: the collapser says what it makes of it
                self.out.extend_from_slice(raw);
            }
            return;
        };
        if self.in_sample {
            // a header right after a header: the last sample had no frame and no blank line
            self.end_sample();
            self.out.push(b'\n');
        }
        let kept = {
            let mut seen = self.seen.borrow_mut();
            seen.timeless |= h.time.is_none();
            let kept = seen.event.get_or_insert_with(|| h.event.to_string()) == h.event;
            seen.samples += u64::from(kept);
            kept
        };
        let mut canonical = String::with_capacity(line.len() + 16);
        canonical.push_str(h.head);
        if let Some(cpu) = h.cpu {
            canonical.push(' ');
            canonical.push_str(cpu);
        }
        canonical.push(' ');
        canonical.push_str(h.time.unwrap_or("0.000000"));
        canonical.push_str(": ");
        if let Some(p) = h.period {
            canonical.push_str(&p.to_string());
            canonical.push(' ');
        }
        canonical.push_str(if h.event.is_empty() {
            UNNAMED_EVENT
        } else {
            h.event
        });
        canonical.push_str(":\n");
        self.out.extend_from_slice(canonical.as_bytes());
        self.in_sample = true;
        self.frames = 0;
        self.open = Some((h.comm.replace(' ', "_"), h.period.unwrap_or(1), kept));
        if let Some(frame) = h.frame {
            self.frames = 1;
            self.out.push(b'\t');
            self.out.extend_from_slice(frame.as_bytes());
            self.out.extend_from_slice(b"\n\n");
            self.end_sample();
        }
    }
}

impl<R: BufRead> std::io::Read for Canonical<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        read_buffered(self, buf)
    }
}

/// `Read::read` of a reader that fills its own buffer (`BufRead`): what it holds, copied.
pub(crate) fn read_buffered(r: &mut impl BufRead, buf: &mut [u8]) -> std::io::Result<usize> {
    let available = r.fill_buf()?;
    let n = available.len().min(buf.len());
    buf[..n].copy_from_slice(&available[..n]);
    r.consume(n);
    Ok(n)
}

impl<R: BufRead> BufRead for Canonical<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at == self.out.len() {
            self.out.clear();
            self.at = 0;
            self.line.clear();
            // a line at most 1 MiB long: longer is no perf script line, and is cut
            let n = std::io::Read::by_ref(&mut self.inner)
                .take(1 << 20)
                .read_until(b'\n', &mut self.line)?;
            if n == 0 {
                self.end_sample();
                break;
            }
            let line = std::mem::take(&mut self.line);
            self.rewrite(&line);
            self.line = line;
        }
        Ok(&self.out[self.at..])
    }

    fn consume(&mut self, amt: usize) {
        self.at = (self.at + amt).min(self.out.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn canonical(text: &str) -> (String, Seen) {
        let mut c = Canonical::new(text.as_bytes());
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        let seen = std::mem::take(&mut *c.seen.borrow_mut());
        (out, seen)
    }

    #[test]
    fn headers_are_read_under_any_field_set() {
        let h =
            parse_header("burn 1234/1235 [000]  100.000000:     250000 cpu-clock:uhH:").unwrap();
        assert_eq!(
            (h.comm, h.cpu, h.time, h.period, h.event, h.frame),
            (
                "burn",
                Some("[000]"),
                Some("100.000000"),
                Some(250000),
                "cpu-clock",
                None
            )
        );
        let h = parse_header("V8 WorkerThread  1234 cpu-clock:").unwrap();
        assert_eq!(
            (h.comm, h.time, h.event),
            ("V8 WorkerThread", None, "cpu-clock")
        );
        let h = parse_header("false 64414 20110.539270:      34467 cycles:u:  ffffffff9aa3c8de [unknown] ([unknown])").unwrap();
        assert_eq!(
            (h.event, h.frame),
            ("cycles", Some("ffffffff9aa3c8de [unknown] ([unknown])"))
        );
        // a tracepoint's colon is its name's, not a modifier
        let h = parse_header("app 7/7 [001] 5.5: sched:sched_switch:").unwrap();
        assert_eq!(h.event, "sched:sched_switch");
        for not in [
            "\t 55d0 hot (/bin/x)",
            "a;b;c 12",
            "# comment 12 x:",
            "burn cpu-clock:",
        ] {
            assert!(parse_header(not).is_none(), "{not}");
        }
    }

    #[test]
    fn every_variant_comes_out_in_the_collapsers_form() {
        let (out, seen) =
            canonical("burn  1234 cpu-clock:\n\t 5a hot+0x1 (/b)\n\t 5b main (/b)\n\n");
        assert_eq!(
            out,
            // a tab-indented frame stays as it was
            "burn  1234 0.000000: cpu-clock:\n\t 5a hot+0x1 (/b)\n\t 5b main (/b)\n\n"
        );
        assert!(seen.timeless);
        let (out, _) = canonical("burn 1/1 1.5: cpu-clock:\n5a hot (/b)\n5b main (/b)\n\n");
        assert_eq!(
            out,
            "burn 1/1 1.5: cpu-clock:\n\t5a hot (/b)\n\t5b main (/b)\n\n"
        );
        // one frame on each header, no blank lines between
        let (out, seen) =
            canonical("b 1/1 1.0: cycles:u:  5a hot (/b)\nb 1/1 1.1: cycles:u:  5c cold (/b)\n");
        assert_eq!(
            out,
            "b 1/1 1.0: cycles:\n\t5a hot (/b)\n\nb 1/1 1.1: cycles:\n\t5c cold (/b)\n\n"
        );
        assert!(!seen.timeless && seen.empty_chains.is_empty());
    }

    #[test]
    fn empty_call_chains_are_counted_under_their_command_for_the_first_event_only() {
        let text = "my app 1/1 1.0: 10 cpu-clock:\n\nmy app 1/1 1.1: 20 cpu-clock:\nmy app 1/1 1.2: 5 cpu-clock:\n\t5a hot (/b)\n\nx 2/2 1.3: 7 cycles:\n\n";
        let (_, seen) = canonical(text);
        assert_eq!(
            seen.empty_chains,
            BTreeMap::from([("my_app".to_string(), 30)])
        );
        assert_eq!(seen.event.as_deref(), Some("cpu-clock"));
    }
}
