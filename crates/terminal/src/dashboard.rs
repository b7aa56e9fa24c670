//! The live view while a phase runs on a terminal, as oha draws one: requests and failures
//! per second, the latency percentiles of the last second and of the phase so far, and a small
//! histogram, redrawn in place each second in a region below the command line (ratatui's
//! inline viewport: the terminal's scrollback is left alone). A narrow or short terminal gets
//! the one-line progress instead; logs get JMeter's lines (see `live`).

use std::io::{IsTerminal, Stderr};

use kiln_record::{PhaseSummary, SecondRecord};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::{Constraint, Layout};
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
    terminal: Terminal<CrosstermBackend<Stderr>>,
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
            CrosstermBackend::new(std::io::stderr()),
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
    /// phase's figures so far in `total`.
    pub fn draw(&mut self, phase: &str, planned_s: u64, s: &SecondRecord, total: &PhaseSummary) {
        self.requests.push(s.requests);
        self.failed.push(s.failed());
        let (requests, failed) = (&self.requests, &self.failed);
        let last = s.latency.stats();
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
            let second = (u64::from(s.second) + 1).min(planned_s.max(1));
            let failed_style = if total.failed() > 0 {
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
            } else {
                Style::default()
            };
            frame.render_widget(
                Paragraph::new(Line::from(vec![
                    Span::styled(format!("kiln · {phase} "), bold),
                    Span::raw(format!("{second}s/{planned_s}s  ")),
                    Span::styled(format!("{} req/s", s.requests), bold),
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
            let cell = |us: u64| format!("{:>8}", format::us(us));
            let rows = vec![
                Line::from(format!(
                    "{:<10}{:>8}{:>8}{:>8}{:>8}",
                    "", "p50", "p90", "p99", "max"
                )),
                Line::from(format!(
                    "{:<10}{}{}{}{}",
                    "last 1 s",
                    cell(last.p50_us),
                    cell(last.p90_us),
                    cell(last.p99_us),
                    cell(last.max_us)
                )),
                Line::from(format!(
                    "{:<10}{}{}{}{}",
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
