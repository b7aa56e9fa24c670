//! The live view while a phase runs on a terminal, as oha draws one: requests and failures
//! per second, the latency percentiles of the last second and of the phase so far, and a small
//! histogram, redrawn in place each second in a region below the command line (ratatui's
//! inline viewport: the terminal's scrollback is left alone). A narrow or short terminal gets
//! the one-line progress instead; logs get JMeter's lines (see `live`).

use std::io::{IsTerminal, Stderr};
use std::time::Duration;

use kiln_record::{LatencyStats, PhaseSummary, SecondRecord};
use ratatui::backend::{Backend, ClearType, CrosstermBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Constraint, Layout, Position, Size};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Bar, BarChart, BarGroup, Block, Paragraph, Sparkline};
use ratatui::{Terminal, TerminalOptions, Viewport};

use kiln_record::text as format;

/// Rows the view takes.
const HEIGHT: u16 = 14;
/// The narrowest terminal the view is drawn in.
pub const MIN_WIDTH: u16 = 80;

pub struct Dashboard {
    terminal: Terminal<PatientBackend>,
    /// Requests and failures of each second so far.
    requests: Vec<u64>,
    failed: Vec<u64>,
}

impl Dashboard {
    /// The view, when kiln runs on a terminal wide and tall enough for it: stdin, stdout and
    /// stderr all terminals (the cursor's position is asked on stdout and answered on stdin;
    /// a pipe would get the question in its output).
    pub fn open() -> Option<Self> {
        let terminals = std::io::stdin().is_terminal()
            && std::io::stdout().is_terminal()
            && std::io::stderr().is_terminal();
        let (width, height) = ratatui::crossterm::terminal::size().ok()?;
        if !terminals || width < MIN_WIDTH || height < HEIGHT + 6 {
            return None;
        }
        let terminal = Terminal::with_options(
            PatientBackend(CrosstermBackend::new(std::io::stderr())),
            TerminalOptions {
                viewport: Viewport::Inline(HEIGHT),
            },
        )
        .ok()?;
        Some(Self {
            terminal,
            requests: Vec::new(),
            failed: Vec::new(),
        })
    }

    /// Draws the view for the second `s` of `phase` (planned to last `planned_s`), with the
    /// latencies of the last second shown in `last` and the phase's figures so far in `total`.
    pub fn draw(
        &mut self,
        phase: &str,
        planned_s: u64,
        s: &SecondRecord,
        last: &LatencyStats,
        total: &PhaseSummary,
    ) {
        // the second after the deadline holds the last second's answers: its bar
        match (
            after_deadline(s, planned_s),
            self.requests.last_mut(),
            self.failed.last_mut(),
        ) {
            (true, Some(requests), Some(failed)) => {
                *requests += s.requests;
                *failed += s.failed();
            }
            _ => {
                self.requests.push(s.requests);
                self.failed.push(s.failed());
            }
        }
        let (requests, failed) = (&self.requests, &self.failed);
        let all = total.totals.latency.stats();
        let buckets = if total.totals.latency.is_empty() {
            Vec::new()
        } else {
            total.totals.latency.log_buckets(8)
        };
        let _ = self.terminal.draw(|frame| {
            let [head, middle, bottom] = Layout::vertical([
                Constraint::Length(1),
                Constraint::Length(5),
                Constraint::Min(6),
            ])
            .areas(frame.area());
            let bold = Style::default().add_modifier(Modifier::BOLD);
            let second = second_shown(s, planned_s);
            let failed_style = if total.failed() > 0 {
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
            } else {
                Style::default()
            };
            frame.render_widget(
                Paragraph::new(Line::from(vec![
                    Span::styled(format!("kiln · {phase} "), bold),
                    Span::raw(format!("{second}s/{planned_s}s  ")),
                    Span::styled(rate_shown(s, planned_s, total), bold),
                    Span::raw(format!(
                        "  total {}  conns {}  ",
                        total.totals.requests, s.connections
                    )),
                    Span::styled(
                        format!(
                            "failed {} ({:.2}%)",
                            total.failed(),
                            100.0 * total.failed_ratio()
                        ),
                        failed_style,
                    ),
                ])),
                head,
            );
            let [rate, table] =
                Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                    .areas(middle);
            // the newest seconds that fit, requests above failures
            let fit = |v: &[u64], width: u16| -> Vec<u64> {
                let n = usize::from(width.saturating_sub(2));
                v[v.len().saturating_sub(n)..].to_vec()
            };
            frame.render_widget(
                Sparkline::default()
                    .block(Block::bordered().title(format!(
                        "requests/s (peak {})",
                        requests.iter().max().unwrap_or(&0)
                    )))
                    .data(fit(requests, rate.width))
                    .style(Style::default().fg(Color::Cyan)),
                rate,
            );
            // 9 + 4 x 7 columns fit the half of an 80-column view inside its borders
            let cell = |us: u64| format!("{:>7}", format::us(us));
            let rows = vec![
                Line::from(format!(
                    "{:<9}{:>7}{:>7}{:>7}{:>7}",
                    "", "p50", "p90", "p99", "max"
                )),
                Line::from(format!(
                    "{:<9}{}{}{}{}",
                    "last 1 s",
                    cell(last.p50_us),
                    cell(last.p90_us),
                    cell(last.p99_us),
                    cell(last.max_us)
                )),
                Line::from(format!(
                    "{:<9}{}{}{}{}",
                    "so far",
                    cell(all.p50_us),
                    cell(all.p90_us),
                    cell(all.p99_us),
                    cell(all.max_us)
                )),
            ];
            frame.render_widget(
                Paragraph::new(rows).block(Block::bordered().title("latency")),
                table,
            );
            let [histogram, failures] =
                Layout::horizontal([Constraint::Percentage(75), Constraint::Percentage(25)])
                    .areas(bottom);
            let bars: Vec<Bar> = buckets
                .iter()
                .map(|(upper_us, count)| {
                    Bar::default()
                        .value(*count)
                        .label(Line::from(format!("≤{}", format::us(*upper_us))))
                        .text_value(String::new())
                })
                .collect();
            let bar_width = (histogram.width.saturating_sub(2) / bars.len().max(1) as u16)
                .saturating_sub(1)
                .max(1);
            frame.render_widget(
                BarChart::default()
                    .block(Block::bordered().title("latency so far"))
                    .data(BarGroup::default().bars(&bars))
                    .bar_width(bar_width)
                    .bar_gap(1)
                    .bar_style(Style::default().fg(Color::Blue)),
                histogram,
            );
            frame.render_widget(
                Sparkline::default()
                    .block(Block::bordered().title("failed/s"))
                    .data(fit(failed, failures.width))
                    .style(Style::default().fg(Color::Red)),
                failures,
            );
        });
    }

    /// Leaves the last view drawn and the cursor on the line below it.
    pub fn close(mut self) {
        let area = self.terminal.get_frame().area();
        let _ = self.terminal.show_cursor();
        let _ = self
            .terminal
            .set_cursor_position((0, area.bottom().saturating_sub(1)));
        eprintln!();
    }
}

/// Whether second `s` of a phase planned to last `planned_s` (0: not known) is the one after
/// its deadline, which holds the last answers coming in, not load.
pub(crate) fn after_deadline(s: &SecondRecord, planned_s: u64) -> bool {
    planned_s > 0 && u64::from(s.second) >= planned_s
}

/// Second `s` as the live lines count it, from 1: the second after the deadline is shown as
/// the last planned one.
pub(crate) fn second_shown(s: &SecondRecord, planned_s: u64) -> u64 {
    (u64::from(s.second) + 1).min(planned_s.max(1))
}

/// The rate the live lines show for second `s`: its requests, or for the second after the
/// deadline (the last answers coming in, not load) the phase's mean over its planned time.
/// That second's own few requests read as the load falling to "4 req/s" at the end.
pub(crate) fn rate_shown(s: &SecondRecord, planned_s: u64, total: &PhaseSummary) -> String {
    if after_deadline(s, planned_s) {
        let mean = total.totals.requests as f64 / planned_s as f64;
        format!("{mean:.0} req/s mean")
    } else {
        format!("{} req/s", s.requests)
    }
}

/// How long the terminal may take to say where its cursor is. crossterm waits 2 s, and a
/// terminal on a busy host answered later (tmux on a shared CI machine): the view then fell
/// back to the progress line for the whole phase.
const CURSOR_ANSWER_WITHIN: Duration = Duration::from_secs(8);

/// crossterm's backend, except that the cursor's position is waited for as long as
/// `CURSOR_ANSWER_WITHIN` (ratatui asks for it to place the inline view). A question is asked
/// once and its answer read: asking again after a late answer would leave an answer behind
/// for the next view to read as its position.
struct PatientBackend(CrosstermBackend<Stderr>);

impl Backend for PatientBackend {
    type Error = std::io::Error;

    fn draw<'a, I>(&mut self, content: I) -> std::io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.0.draw(content)
    }
    fn append_lines(&mut self, n: u16) -> std::io::Result<()> {
        self.0.append_lines(n)
    }
    fn hide_cursor(&mut self) -> std::io::Result<()> {
        self.0.hide_cursor()
    }
    fn show_cursor(&mut self) -> std::io::Result<()> {
        self.0.show_cursor()
    }
    fn get_cursor_position(&mut self) -> std::io::Result<Position> {
        self.0.flush()?;
        cursor_position(CURSOR_ANSWER_WITHIN)
    }
    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> std::io::Result<()> {
        self.0.set_cursor_position(position)
    }
    fn clear(&mut self) -> std::io::Result<()> {
        self.0.clear()
    }
    fn clear_region(&mut self, clear_type: ClearType) -> std::io::Result<()> {
        self.0.clear_region(clear_type)
    }
    fn size(&self) -> std::io::Result<Size> {
        self.0.size()
    }
    fn window_size(&mut self) -> std::io::Result<WindowSize> {
        self.0.window_size()
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Backend::flush(&mut self.0)
    }
}

/// The cursor's position, asked of the terminal on standard error (`ESC [ 6 n`) and read
/// from standard input in raw mode, waiting at most `within` for the answer
/// (`ESC [ row ; column R`, counted from 1).
fn cursor_position(within: Duration) -> std::io::Result<Position> {
    use ratatui::crossterm::terminal;
    use std::io::Write;
    let was_raw = terminal::is_raw_mode_enabled()?;
    if !was_raw {
        terminal::enable_raw_mode()?;
    }
    let answer = (|| {
        let mut stderr = std::io::stderr();
        stderr.write_all(b"\x1b[6n")?;
        stderr.flush()?;
        let deadline = std::time::Instant::now() + within;
        let mut read = Vec::new();
        loop {
            if let Some(position) = cursor_report(&read) {
                return Ok(position);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || !stdin_readable(left)? {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the terminal did not say where its cursor is within {within:?}"),
                ));
            }
            let mut chunk = [0u8; 64];
            let n = std::io::Read::read(&mut std::io::stdin().lock(), &mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            read.extend_from_slice(&chunk[..n]);
        }
    })();
    if !was_raw {
        terminal::disable_raw_mode()?;
    }
    answer
}

/// The position in the last complete cursor report (`ESC [ row ; column R`) in `bytes`, if
/// any; other input before it (keys the user pressed) is passed over.
fn cursor_report(bytes: &[u8]) -> Option<Position> {
    let text = std::str::from_utf8(bytes).ok().or_else(|| {
        // keys past ASCII cut mid-character: the report itself is ASCII
        let start = bytes.iter().rposition(|&b| b == 0x1b)?;
        std::str::from_utf8(&bytes[start..]).ok()
    })?;
    text.rmatch_indices("\x1b[").find_map(|(at, _)| {
        let body = text[at + 2..].split_once('R')?.0;
        let (row, column) = body.split_once(';')?;
        let (row, column) = (row.parse::<u16>().ok()?, column.parse::<u16>().ok()?);
        Some(Position::new(column.checked_sub(1)?, row.checked_sub(1)?))
    })
}

/// Whether standard input has bytes to read within `wait`.
fn stdin_readable(wait: Duration) -> std::io::Result<bool> {
    let mut fd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: one valid pollfd, and its count is 1
        let ready = unsafe { libc::poll(&mut fd, 1, ms) };
        match ready {
            0 => return Ok(false),
            n if n > 0 => return Ok(true),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_after_the_deadline_shows_the_phases_mean_rate() {
        let mut total = PhaseSummary::new("run");
        let second = |n: u32, requests: u64| SecondRecord {
            phase: "run".into(),
            second: n,
            requests,
            ..Default::default()
        };
        for s in [second(0, 900), second(1, 1100), second(2, 4)] {
            total.add_second(&s);
        }
        assert_eq!(rate_shown(&second(1, 1100), 2, &total), "1100 req/s");
        assert_eq!(rate_shown(&second(2, 4), 2, &total), "1002 req/s mean");
        // a phase of no planned length shows its seconds as they are
        assert_eq!(rate_shown(&second(2, 4), 0, &total), "4 req/s");
    }

    #[test]
    fn a_cursor_report_is_read_past_keys_and_a_partial_one_is_not() {
        assert_eq!(cursor_report(b"\x1b[12;1R"), Some(Position::new(0, 11)));
        assert_eq!(
            cursor_report(b"abc\x1b[A\x1b[3;40R"),
            Some(Position::new(39, 2))
        );
        assert_eq!(cursor_report(b"\xc3\x1b[5;7R"), Some(Position::new(6, 4)));
        for partial in [
            &b"\x1b[12;"[..],
            b"\x1b[12",
            b"",
            b"\x1b[0;0R",
            b"\x1b[a;bR",
        ] {
            assert_eq!(cursor_report(partial), None, "{partial:?}");
        }
    }
}
