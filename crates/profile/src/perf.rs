//! Drives the real `perf`: `perf record` on the target's processes, then `perf script`
//! streamed into inferno's perf collapser.

pub use kiln_record::schema::profile::{CallGraph, Event};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use inferno::collapse::perf::{Folder, Options as CollapseOptions};
use inferno::collapse::Collapse;

use crate::{Folded, ProfileError};

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub event: Event,
    /// None: fp for JIT runtimes, dwarf for native processes.
    pub call_graph: Option<CallGraph>,
    /// Samples per second per CPU for `Event::Cpu`.
    pub frequency_hz: u32,
    /// The perf binary (default `perf`; the PERF environment variable overrides, as in
    /// cargo-flamegraph).
    pub perf: PathBuf,
}

impl Default for RecordOptions {
    fn default() -> Self {
        Self {
            event: Event::Cpu,
            call_graph: None,
            frequency_hz: 99,
            perf: std::env::var_os("PERF").map_or_else(|| PathBuf::from("perf"), PathBuf::from),
        }
    }
}

/// `perf --version`, or why perf cannot be used at all.
pub fn perf_version(perf: &Path) -> Result<String, ProfileError> {
    let out = Command::new(perf)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ProfileError::PerfMissing(format!("{}: {e}", perf.display())))?;
    if !out.status.success() {
        // Debian's /usr/bin/perf is a wrapper that fails when no perf matches the kernel.
        return Err(ProfileError::PerfMissing(
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// kernel.perf_event_paranoid, if readable.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A `perf record` in progress.
pub struct Recording {
    child: Child,
    data: PathBuf,
    stderr: PathBuf,
    started: Instant,
    pub pids: Vec<i32>,
    pub event: Event,
    pub call_graph: CallGraph,
    /// `--pid` for perf script when perf recorded every CPU.
    pid_filter: Option<String>,
}

/// Whether perf may record every CPU (`-a`): as root, or with perf_event_paranoid <= 0.
fn may_record_system_wide() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root || perf_event_paranoid().is_some_and(|p| p <= 0)
}

/// What a finished recording left behind.
#[derive(Debug)]
pub struct Recorded {
    pub data: PathBuf,
    /// The processes to keep when the data holds every CPU's samples.
    pub pid_filter: Option<String>,
    pub duration: Duration,
    /// perf record's own CPU time while sampling, in percent of one core: its cost on the
    /// machine (the target pays for the sampling interrupts besides).
    /// None when perf had already ended (its target exited).
    pub perf_cpu_pct: Option<f64>,
    /// perf's own lines (e.g. "[ perf record: Captured and wrote 0.1 MB ... (312 samples) ]").
    pub perf_said: String,
}

impl Recording {
    /// Starts `perf record` on `pids` (all their threads), writing to `data`.
    pub fn start(
        pids: &[i32],
        options: &RecordOptions,
        call_graph: CallGraph,
        data: &Path,
    ) -> Result<Self, ProfileError> {
        if pids.is_empty() {
            return Err(ProfileError::NoProcess("no process to profile".into()));
        }
        for &pid in pids {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(ProfileError::NoProcess(format!(
                    "no process with pid {pid}"
                )));
            }
        }
        perf_version(&options.perf)?;
        let stderr = data.with_file_name("perf-record.log");
        let pid_list = pids
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = Command::new(&options.perf);
        cmd.arg("record").arg("-e").arg(options.event.perf_name());
        match options.event {
            Event::Cpu => cmd.arg("-F").arg(options.frequency_hz.max(1).to_string()),
            // Every switch: the count is the number of times a thread left the CPU there.
            Event::Cswitch => cmd.arg("-c").arg("1"),
        };
        match call_graph {
            CallGraph::Fp => cmd.arg("--call-graph").arg("fp"),
            // 16 KiB of stack per sample reaches main() in deep server stacks.
            CallGraph::Dwarf => cmd.arg("--call-graph").arg("dwarf,16384"),
        };
        // On-CPU samples are taken on every CPU and kept for the pids at `perf script` time,
        // when perf may (root, or perf_event_paranoid <= 0): `-p` attaches thread by thread and
        // misses threads born during its attach, which a server starts for each new connection.
        // Context switches are too many system-wide; they attach with `-p`.
        let system_wide = options.event == Event::Cpu && may_record_system_wide();
        if system_wide {
            cmd.arg("-a");
        } else {
            cmd.arg("-p").arg(&pid_list);
        }
        cmd.arg("-o")
            .arg(data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).map_err(|e| ProfileError::io(&stderr, e))?);
        stop_when_parent_dies(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| ProfileError::PerfMissing(format!("{}: {e}", options.perf.display())))?;
        let mut recording = Self {
            child,
            data: data.to_path_buf(),
            stderr,
            started: Instant::now(),
            pids: pids.to_vec(),
            event: options.event,
            call_graph,
            pid_filter: system_wide.then_some(pid_list),
        };
        // perf refuses at once when it may not open the event: say so now, not after -d.
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = recording.child.try_wait() {
                if !status.success() {
                    return Err(recording.refusal());
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // perf has attached by now: the sampled window starts here, not at the spawn.
        recording.started = Instant::now();
        Ok(recording)
    }

    /// Whether perf is still recording (it stops by itself when every target process exits).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops perf (SIGINT, as Ctrl-C would) and waits for it to write its data.
    pub fn stop(mut self) -> Result<Recorded, ProfileError> {
        // The window sampled ends now, not when perf has finished writing its file.
        let duration = self.started.elapsed();
        let perf_cpu_pct = kiln_sample::ProcFs::default()
            .process(self.child.id() as i32)
            .filter(|p| p.state != 'Z')
            .map(|p| {
                // USER_HZ is 100: a tick is 10 ms.
                (p.utime + p.stime) as f64 / 100.0 / duration.as_secs_f64().max(1e-3) * 100.0
            });
        if self.running() {
            // SAFETY: kill(2) on our own child's pid; no memory is involved.
            unsafe {
                libc::kill(self.child.id() as i32, libc::SIGINT);
            }
        }
        let status = self
            .child
            .wait()
            .map_err(|e| ProfileError::Perf(format!("waiting for perf record: {e}")))?;
        let perf_said = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let has_data = std::fs::metadata(&self.data).is_ok_and(|m| m.len() > 0);
        if !has_data {
            return Err(self.refusal());
        }
        // perf exits non-zero after SIGINT on some versions; the data file is what counts.
        let _ = status;
        Ok(Recorded {
            data: self.data.clone(),
            pid_filter: self.pid_filter.clone(),
            duration,
            perf_cpu_pct,
            perf_said: perf_said.trim().to_string(),
        })
    }

    /// perf's reason for not recording, with the fix when it is a permission.
    fn refusal(&self) -> ProfileError {
        let said = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        explain_refusal(&said, &self.pids, perf_event_paranoid())
    }
}

impl Drop for Recording {
    /// A recording dropped without `stop` (an error or a panic in kiln) stops perf, so that no
    /// `perf record -a` goes on filling the run directory.
    fn drop(&mut self) {
        if self.running() {
            // SAFETY: kill(2) on our own child's pid; no memory is involved.
            unsafe {
                libc::kill(self.child.id() as i32, libc::SIGINT);
            }
            let _ = self.child.wait();
        }
    }
}

/// perf is told by the kernel to stop (SIGTERM: it writes its data and exits) when the thread
/// that started it ends, however kiln ends: SIGKILL, the OOM killer, a panic. The thread that
/// starts a recording holds it until `stop`, so it never ends while perf should run.
fn stop_when_parent_dies(cmd: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: getpid is async-signal-safe; it is read before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: only async-signal-safe calls (prctl, getppid, kill) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // kiln died between fork and prctl: nobody is left to stop perf.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
}

/// The user of the first of `pids` that kiln's user is not (nor root), if any.
fn another_users(pids: &[i32]) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    // SAFETY: geteuid has no preconditions and cannot fail
    let kiln = unsafe { libc::geteuid() };
    if kiln == 0 {
        return None;
    }
    pids.iter()
        .filter_map(|pid| std::fs::metadata(format!("/proc/{pid}")).ok())
        .map(|m| m.uid())
        .find(|&uid| uid != kiln)
}

/// What perf record's error output means for the user.
fn explain_refusal(said: &str, pids: &[i32], paranoid: Option<i32>) -> ProfileError {
    if said.contains("perf_event_paranoid") || said.contains("Permission denied") {
        return ProfileError::PerfForbidden {
            paranoid,
            owner: another_users(pids),
        };
    }
    if said.contains("No such process") || said.contains("Couldn't create thread") {
        return ProfileError::NoProcess(format!("pid {pids:?} exited before perf could attach"));
    }
    let said: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    ProfileError::Perf(format!("perf record failed: {}", said.join(" / ")))
}

/// Options for turning perf script text into collapsed stacks.
fn collapse_options() -> CollapseOptions {
    let mut options = CollapseOptions::default();
    options.annotate_kernel = true;
    options.annotate_jit = true;
    options
}

/// Runs `perf script` on recorded data and collapses its output as it streams; also the
/// seconds between the first and the last sample.
pub fn collapse_recorded(
    perf: &Path,
    data: &Path,
    pid_filter: Option<&str>,
) -> Result<(Folded, Option<f64>), ProfileError> {
    let mut command = Command::new(perf);
    if let Some(pids) = pid_filter {
        command.arg("script").arg(format!("--pid={pids}"));
    } else {
        command.arg("script");
    }
    stop_when_parent_dies(&mut command);
    let mut child = command
        .arg("-i")
        .arg(data)
        // stackcollapse-perf.pl's fields less `cpu` (absent when recording -p). Without
        // `period` each sample counts once (with it, inferno weights cpu-clock samples by
        // their nanoseconds).
        .arg("-F")
        .arg("comm,pid,tid,time,event,ip,sym,dso")
        // addr2line for inlined frames can take minutes on big binaries (inferno's and
        // cargo-flamegraph's documented pitfall); function names are what kiln shows.
        .arg("--no-inline")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ProfileError::PerfMissing(format!("{}: {e}", perf.display())))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    // Drain stderr beside stdout so that neither pipe fills and blocks perf.
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let folded = collapse_perf_script_timed(BufReader::with_capacity(1 << 20, stdout));
    let status = child
        .wait()
        .map_err(|e| ProfileError::Perf(format!("waiting for perf script: {e}")))?;
    let said = stderr_reader.join().unwrap_or_default();
    match folded {
        Ok(f) => Ok(f),
        Err(e) if !status.success() => Err(ProfileError::Perf(format!(
            "perf script failed: {} ({e})",
            said.lines().next().unwrap_or("")
        ))),
        Err(e) => Err(e),
    }
}

/// The times of the first and last sample in `perf script` text, seen as the text streams
/// past on its way to the collapser: the window perf really sampled (it attaches some time
/// after it starts, and keeps writing after it is told to stop).
struct SampleClock<R> {
    inner: R,
    at_line_start: bool,
    header: Vec<u8>,
    in_header: bool,
    first: Option<f64>,
    last: Option<f64>,
    /// The event of the first sample whose header carries a period (`perf script -F
    /// ...,period`): the collapser then weighs each sample by it.
    period_event: Option<String>,
}

impl<R> SampleClock<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            at_line_start: true,
            header: Vec::new(),
            in_header: false,
            first: None,
            last: None,
            period_event: None,
        }
    }

    fn observe(&mut self, bytes: &[u8]) {
        // Jump from line start to line start (memchr), looking only at the first byte of each
        // line and collecting only header lines: hundreds of MB pass by at memory speed.
        let mut start = 0;
        while start < bytes.len() {
            let end = memchr::memchr(b'\n', &bytes[start..]).map(|i| start + i);
            let piece = &bytes[start..end.unwrap_or(bytes.len())];
            if self.at_line_start {
                self.header.clear();
                self.in_header = piece
                    .first()
                    .is_some_and(|&b| !b.is_ascii_whitespace() && b != b'#');
            }
            if self.in_header && self.header.len() < 512 {
                let room = 512 - self.header.len();
                self.header
                    .extend_from_slice(&piece[..piece.len().min(room)]);
            }
            match end {
                Some(e) => {
                    if self.in_header {
                        self.header_done();
                    }
                    self.at_line_start = true;
                    start = e + 1;
                }
                None => {
                    // The line goes on in the next chunk.
                    self.at_line_start = piece.is_empty() && self.at_line_start;
                    break;
                }
            }
        }
    }

    /// `comm pid/tid [cpu] 12345.678901: [period] event:` -> 12345.678901, and the event
    /// when a period follows the time.
    fn header_done(&mut self) {
        let line = String::from_utf8_lossy(&self.header);
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let time = tokens.iter().enumerate().find_map(|(i, t)| {
            let t = t.strip_suffix(':')?;
            t.contains('.')
                .then(|| t.parse::<f64>().ok().map(|t| (i, t)))
                .flatten()
        });
        if let Some((i, t)) = time {
            self.first.get_or_insert(t);
            self.last = Some(t);
            if let (None, Some(period), Some(event)) =
                (&self.period_event, tokens.get(i + 1), tokens.get(i + 2))
            {
                let event = event.strip_suffix(':').filter(|e| !e.is_empty());
                if let (true, Some(event)) = (period.bytes().all(|b| b.is_ascii_digit()), event) {
                    self.period_event = Some(event.to_string());
                }
            }
        }
        self.in_header = false;
    }

    /// Seconds from the first sample to the last.
    fn window(&self) -> Option<f64> {
        Some(self.last? - self.first?).filter(|w| *w >= 0.0)
    }
}

impl<R: std::io::Read> std::io::Read for SampleClock<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.observe(&buf[..n]);
        Ok(n)
    }
}

impl<R: std::io::BufRead> std::io::BufRead for SampleClock<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        let seen = self
            .inner
            .fill_buf()
            .map(|b| b[..amt.min(b.len())].to_vec())
            .unwrap_or_default();
        self.observe(&seen);
        self.inner.consume(amt);
    }
}

/// `perf script` text with every character past ASCII written as `\u{..}` (a byte that is
/// no UTF-8 as `\x..`), but in comments. inferno's collapser cuts Rust symbols at a byte
/// offset and panics when a wider character straddles it (found by fuzzing, in frame lines
/// and in a header's one-frame stack); written out, a name stays readable and whole.
struct AsciiFrames<R> {
    inner: R,
    out: Vec<u8>,
    at: usize,
    /// At a line's start: its kind is not known yet.
    line_start: bool,
    in_frame: bool,
    /// The bytes of a character cut at the end of the last chunk.
    pending: Vec<u8>,
}

impl<R: std::io::BufRead> AsciiFrames<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            out: Vec::new(),
            at: 0,
            line_start: true,
            in_frame: false,
            pending: Vec::new(),
        }
    }

    fn convert(&mut self, chunk: &[u8]) {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(chunk);
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if self.line_start {
                // a header line may hold a frame too (a one-frame stack), and its command
                self.in_frame = b != b'#';
                self.line_start = false;
            }
            if b == b'\n' {
                self.line_start = true;
            }
            if b < 0x80 || !self.in_frame {
                self.out.push(b);
                i += 1;
                continue;
            }
            let width = match b {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            if i + width > bytes.len() {
                // the rest of the character comes with the next chunk
                self.pending = bytes[i..].to_vec();
                return;
            }
            match std::str::from_utf8(&bytes[i..i + width]) {
                Ok(c) => {
                    for c in c.chars() {
                        self.out
                            .extend_from_slice(format!("\\u{{{:x}}}", c as u32).as_bytes());
                    }
                    i += width;
                }
                Err(_) => {
                    self.out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                    i += 1;
                }
            }
        }
    }
}

impl<R: std::io::BufRead> std::io::Read for AsciiFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        crate::perf_text::read_buffered(self, buf)
    }
}

impl<R: std::io::BufRead> std::io::BufRead for AsciiFrames<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at == self.out.len() {
            self.out.clear();
            self.at = 0;
            let chunk = self.inner.fill_buf()?.to_vec();
            if chunk.is_empty() {
                // a character cut by the end of the text: its bytes, written out
                let rest = std::mem::take(&mut self.pending);
                for b in rest {
                    self.out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                }
                break;
            }
            self.inner.consume(chunk.len());
            self.convert(&chunk);
        }
        Ok(&self.out[self.at..])
    }

    fn consume(&mut self, amt: usize) {
        self.at = (self.at + amt).min(self.out.len());
    }
}

/// Collapses `perf script` text (from kiln's own run or a file made elsewhere).
pub fn collapse_perf_script(reader: impl std::io::BufRead) -> Result<Folded, ProfileError> {
    Ok(read_perf_script(reader)?.folded)
}

/// `collapse_perf_script`, and the seconds from the first sample to the last.
pub fn collapse_perf_script_timed(
    reader: impl std::io::BufRead,
) -> Result<(Folded, Option<f64>), ProfileError> {
    let read = read_perf_script(reader)?;
    Ok((read.folded, read.window))
}

/// `perf script` text collapsed, with what its counts are.
pub struct PerfScript {
    pub folded: Folded,
    /// Seconds from the first sample to the last.
    pub window: Option<f64>,
    pub samples: u64,
    /// When the text carries periods, each sample weighs its period (as in `perf report`
    /// and flame graphs): the value counted, pprof-style (`cpu-clock/nanoseconds`,
    /// `cycles/count`).
    pub value: Option<String>,
}

/// The event of the first sample header (the first line that is not blank, a comment or a
/// stack frame), read as inferno's collapser reads it: the text after the first all-digit
/// word (the pid or pid/tid) up to the next colon ends with the event's name. The lines read
/// to find it come back in front of the rest. None when that header names no event or none
/// comes in the first [`MAX_HEAD`] bytes.
fn first_event<R: std::io::BufRead>(mut reader: R) -> (Option<String>, impl std::io::BufRead) {
    use std::io::{BufRead, Read};
    let mut head = Vec::new();
    let mut event = None;
    while head.len() < MAX_HEAD {
        let start = head.len();
        let room = (MAX_HEAD - start) as u64;
        match (&mut reader).take(room).read_until(b'\n', &mut head) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&head[start..]);
        if !line.trim().is_empty() && !line.starts_with(['#', ' ', '\t']) {
            event = event_of_header(&line);
            break;
        }
    }
    (event, std::io::Cursor::new(head).chain(reader))
}

/// How far [`first_event`] reads for the first sample header.
const MAX_HEAD: usize = 1 << 20;

/// A sample header's event (see [`first_event`]).
fn event_of_header(header: &str) -> Option<String> {
    // inferno's event_line_parts: the end of the first all-digit word (pid, or pid/tid)
    let (mut all_digits, mut last_was_space) = (false, false);
    let mut end = None;
    for (i, c) in header.char_indices() {
        if c == ' ' {
            if all_digits && !last_was_space {
                end = Some(i + 1);
                break;
            }
            all_digits = true;
        } else if !(c.is_ascii_digit() || c == '/') {
            all_digits = false;
        }
        last_was_space = c == ' ';
    }
    let event = header[end?..].split(':').nth(1)?.rsplit(' ').next()?;
    (!event.is_empty()).then(|| event.to_string())
}

/// Reads `perf script` text: stacks, window, samples and what the counts are.
pub fn read_perf_script(reader: impl std::io::BufRead) -> Result<PerfScript, ProfileError> {
    let mut out = Vec::new();
    let canonical = crate::perf_text::Canonical::new(AsciiFrames::new(reader));
    let seen = canonical.seen.clone();
    // The collapser keeps the first sample's event and asserts (panics) when that sample's
    // header names none (found by fuzzing): the event is read first, and named to it.
    let (event, reader) = first_event(canonical);
    let mut options = collapse_options();
    options.event_filter = Some(event.ok_or_else(|| {
        ProfileError::Format("perf script text whose first sample names no event".into())
    })?);
    let mut clock = SampleClock::new(reader);
    Folder::from(options)
        .collapse(&mut clock, &mut out)
        .map_err(|e| ProfileError::Format(format!("perf script text: {e}")))?;
    let seen = seen.take();
    let window = if seen.timeless { None } else { clock.window() };
    // the software clocks' periods are nanoseconds; other events' are event counts
    let value = clock.period_event.as_deref().map(|event| match event {
        "cpu-clock" | "task-clock" => format!("{event}/nanoseconds"),
        _ => format!("{event}/count"),
    });
    let text = String::from_utf8_lossy(&out);
    // samples with an empty call chain, under their command (as stackcollapse-perf.pl)
    let mut folded = Folded::new();
    for (comm, weight) in &seen.empty_chains {
        folded.add(&[comm], *weight);
    }
    if !text.trim().is_empty() {
        folded.merge(&Folded::parse(&text)?.0);
    }
    if folded.is_empty() {
        return Err(ProfileError::Empty);
    }
    // inferno marks every `[...]` module as kernel, the vDSO's too; its code runs in user mode
    // (a clock read that does enter the kernel shows as a syscall frame beneath it).
    if text.contains("__vdso_") {
        folded = folded.map_frames(|frame| match frame.strip_suffix("_[k]") {
            Some(name) if name.starts_with("__vdso_") => name.to_string(),
            _ => frame.to_string(),
        });
    }
    if text.contains("_[j]") {
        folded = folded.map_frames(crate::jit::without_return_type);
    }
    Ok(PerfScript {
        folded,
        window,
        samples: seen.samples,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
burn 1234/1234 [000]  100.000000: cpu-clock:
\t    55d0c0a01130 hot+0x10 (/usr/bin/burn)
\t    55d0c0a01200 main+0x20 (/usr/bin/burn)
\t    7f0000029d90 __libc_start_call_main+0x80 (/usr/lib/x86_64-linux-gnu/libc.so.6)

burn 1234/1234 [001]  100.010000: cpu-clock:
\tffffffff81000000 do_syscall_64+0x5 ([kernel.kallsyms])
\t    55d0c0a01300 cold+0x10 (/usr/bin/burn)
\t    55d0c0a01200 main+0x20 (/usr/bin/burn)
\t    7f0000029d90 __libc_start_call_main+0x80 (/usr/lib/x86_64-linux-gnu/libc.so.6)

";

    #[test]
    fn perf_script_text_collapses_root_first_with_kernel_frames_marked() {
        let folded = collapse_perf_script(SCRIPT.as_bytes()).unwrap();
        assert_eq!(
            folded.to_text(),
            "burn;__libc_start_call_main;main;cold;do_syscall_64_[k] 1\n\
             burn;__libc_start_call_main;main;hot 1\n"
        );
        assert!((folded.kernel_share() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_sampled_window_runs_from_the_first_sample_to_the_last() {
        let (_, window) = collapse_perf_script_timed(SCRIPT.as_bytes()).unwrap();
        assert!((window.unwrap() - 0.01).abs() < 1e-9, "{window:?}");
    }

    #[test]
    fn the_window_is_the_same_when_lines_arrive_in_small_pieces() {
        let reader = std::io::BufReader::with_capacity(7, SCRIPT.as_bytes());
        let (folded, window) = collapse_perf_script_timed(reader).unwrap();
        assert!((window.unwrap() - 0.01).abs() < 1e-9, "{window:?}");
        assert_eq!(folded.total(), 2);
    }

    /// A symbol with a character past ASCII where inferno cuts a Rust hash off (17 bytes from
    /// its end) panicked the collapser (found by fuzzing); it is written out instead, in
    /// pieces of any size, and a byte that is no UTF-8 too.
    #[test]
    fn symbols_past_ascii_are_written_out_not_panicked_on() {
        let script = "app 1/1 1.0: cpu-clock:\n\t    55d0c0a01200 aaaa\u{e9}0123456789abcdef+0x20 (/usr/bin/app)\n\n";
        for capacity in [1, 3, 7, 4096] {
            let reader = std::io::BufReader::with_capacity(capacity, script.as_bytes());
            let folded = collapse_perf_script(reader).unwrap();
            assert_eq!(
                folded.to_text(),
                "app;aaaa\\u{e9}0123456789abcdef 1\n",
                "{capacity}"
            );
        }
        let mut bad = script.as_bytes().to_vec();
        let at = bad.iter().position(|&b| b == 0xC3).unwrap();
        bad[at] = 0xFF;
        let folded = collapse_perf_script(&bad[..]).unwrap();
        assert!(
            folded.to_text().starts_with("app;aaaa\\xff\\xa9"),
            "{}",
            folded.to_text()
        );
    }

    #[test]
    fn vdso_frames_are_user_space_not_kernel() {
        let script = "app 1/1 1.0: cpu-clock:\n\t    7ffc1234 __vdso_clock_gettime+0x5 ([vdso])\n\t    55d0c0a01200 main+0x20 (/usr/bin/app)\n\n";
        let folded = collapse_perf_script(script.as_bytes()).unwrap();
        assert_eq!(folded.to_text(), "app;main;__vdso_clock_gettime 1\n");
        assert_eq!(folded.kernel_share(), 0.0);
    }

    #[test]
    fn text_that_is_not_perf_script_is_empty_not_a_panic() {
        assert!(collapse_perf_script("hello\nworld\n".as_bytes()).is_err());
    }

    #[test]
    fn a_forbidding_perf_event_paranoid_says_what_to_set() {
        // perf 6.1's words when an unprivileged user may not watch another process.
        let said =
            "Error:\nAccess to performance monitoring and observability operations is limited.\n\
                    Consider adjusting /proc/sys/kernel/perf_event_paranoid setting to open\n";
        let message = explain_refusal(said, &[42], Some(3)).to_string();
        assert!(message.contains("perf_event_paranoid = 3"), "{message}");
        assert!(
            message.contains("sysctl -w kernel.perf_event_paranoid=1"),
            "{message}"
        );
        let gone = explain_refusal("Error: No such process\n", &[42], Some(2)).to_string();
        assert!(gone.contains("exited before perf could attach"), "{gone}");
        let other =
            explain_refusal("Error: event syntax error: 'bogus'\n", &[42], None).to_string();
        assert!(
            other.contains("perf record failed: Error: event syntax error"),
            "{other}"
        );
    }

    #[test]
    fn a_missing_perf_binary_says_so() {
        let err = perf_version(Path::new("/nonexistent/perf")).unwrap_err();
        assert!(matches!(err, ProfileError::PerfMissing(_)));
    }
}
