//! Text for a terminal: long summary lines wrapped at words to the window's width, with the
//! hanging indent of their label column ("18.\n8ms" broke a table mid-number under 100
//! columns), and the words a reader looks for first in colour (HIGH, MEDIUM, FAIL). Piped
//! output is left as it is: long lines for log parsers, no colour (the colour is written
//! through anstream, which drops it for a pipe or when NO_COLOR is set).

use anstyle::{AnsiColor, Style};

/// The width of the terminal standard output is, or None when it is not one.
pub fn stdout_width() -> Option<usize> {
    terminal_size::terminal_size_of(std::io::stdout()).map(|(w, _)| usize::from(w.0))
}

/// The width of the terminal standard error is (the progress line's), or None.
pub fn stderr_width() -> Option<usize> {
    terminal_size::terminal_size_of(std::io::stderr()).map(|(w, _)| usize::from(w.0))
}

/// `text` as a terminal of `width` columns shows it: lines longer than the width wrapped at
/// words, each continuation under the line's text column; then the severity and FAIL words
/// styled.
pub fn fit(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if textwrap::core::display_width(body) <= width {
            out += &styled(body);
        } else {
            let indent = " ".repeat(hanging_indent(body).min(width / 2));
            let options = textwrap::Options::new(width)
                .subsequent_indent(&indent)
                .break_words(false);
            let wrapped: Vec<String> = textwrap::wrap(body, options)
                .iter()
                .map(|l| styled(l))
                .collect();
            out += &wrapped.join("\n");
        }
        out += newline;
    }
    out
}

/// Where a line's text starts: after its label column ("Generator  kiln CPU ...",
/// "  1. HIGH   The accept queue ...": the first gap of two spaces within the first 28
/// columns), else after its leading spaces.
fn hanging_indent(line: &str) -> usize {
    let lead = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[lead..];
    match rest.find("  ") {
        Some(gap) if lead + gap < 28 => {
            let after = &rest[gap..];
            lead + gap + (after.len() - after.trim_start_matches(' ').len())
        }
        _ => lead,
    }
}

const HIGH: Style = AnsiColor::Red.on_default().bold();
const MEDIUM: Style = AnsiColor::Yellow.on_default().bold();
const LOW: Style = AnsiColor::Cyan.on_default();

/// A line with its severity word (a finding's first line: "  1. HIGH ...") and every FAIL
/// in colour.
fn styled(line: &str) -> String {
    let mut line = line.to_string();
    let trimmed = line.trim_start();
    if let Some((number, rest)) = trimmed.split_once(". ") {
        if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
            for (word, style) in [("HIGH", HIGH), ("MEDIUM", MEDIUM), ("LOW", LOW)] {
                if rest.starts_with(word) {
                    let at = line.len() - rest.len();
                    line.replace_range(at..at + word.len(), &paint(word, style));
                    break;
                }
            }
        }
    }
    if line.contains("FAIL") {
        line = replace_word(&line, "FAIL", &paint("FAIL", HIGH));
    }
    line
}

fn paint(word: &str, style: Style) -> String {
    format!("{style}{word}{style:#}")
}

/// `line` with each whole-word `word` replaced.
fn replace_word(line: &str, word: &str, with: &str) -> String {
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut out = String::with_capacity(line.len() + 16);
    let mut rest = line;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        out += &rest[..at];
        if is_word(before) || is_word(after) {
            out += word;
        } else {
            out += with;
        }
        rest = &rest[at + word.len()..];
    }
    out + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(text: &str) -> String {
        let mut out = Vec::new();
        let mut stream = anstream::StripStream::new(&mut out);
        std::io::Write::write_all(&mut stream, text.as_bytes()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn long_lines_wrap_at_words_under_their_label_column_and_short_ones_stay() {
        let text = "Generator  kiln CPU 1.20 s (user 0.40 s, system 0.80 s) = 5000 requests per CPU-second; max RSS 9.1 MiB\nshort line\n";
        let fitted = plain(&fit(text, 40));
        for line in fitted.lines() {
            assert!(line.len() <= 40, "{line:?} in\n{fitted}");
        }
        let lines: Vec<&str> = fitted.lines().collect();
        assert!(lines[0].starts_with("Generator  kiln CPU"), "{fitted}");
        assert!(
            lines[1].starts_with("           ") && !lines[1].starts_with("            "),
            "{fitted}"
        );
        assert_eq!(*lines.last().unwrap(), "short line");
        // nothing lost: the same words in the same order
        let words = |t: &str| t.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(words(&fitted), words(text));
    }

    #[test]
    fn severities_and_fail_are_coloured_and_plain_text_is_the_same_without_colour() {
        let text = "  1. HIGH   The accept queue overflowed\n  2. MEDIUM Page faults\nThreshold  p99<250ms FAIL (measured 300ms)\nFAILED words and HIGHWAY stay\n";
        let fitted = fit(text, 200);
        assert!(fitted.contains(&paint("HIGH", HIGH)), "{fitted:?}");
        assert!(fitted.contains(&paint("MEDIUM", MEDIUM)), "{fitted:?}");
        assert!(fitted.contains(&paint("FAIL", HIGH)), "{fitted:?}");
        assert!(
            fitted.contains("FAILED words and HIGHWAY stay\n"),
            "{fitted:?}"
        );
        assert_eq!(plain(&fitted), text);
    }
}
