//! Numbers and outside text as kiln shows them, the same in every command and report:
//! latencies with a unit that fits, bytes, clock times, text from outside made harmless.

/// `850us`, `1.23ms`, `12.3ms`, `1.20s`.
pub fn us(us: u64) -> String {
    let v = us as f64;
    if us < 1_000 {
        format!("{us}us")
    } else if us < 10_000 {
        format!("{:.2}ms", v / 1e3)
    } else if us < 1_000_000 {
        format!("{:.1}ms", v / 1e3)
    } else {
        format!("{:.2}s", v / 1e6)
    }
}

pub fn us_f(v: f64) -> String {
    us(v.max(0.0).round() as u64)
}

pub fn bytes(n: u64) -> String {
    let v = n as f64;
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", v / 1024.0)
    } else if n < 1024 * 1024 * 1024 {
        format!("{:.1} MiB", v / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", v / (1024.0 * 1024.0 * 1024.0))
    }
}

/// `HH:MM:SS`, as JMeter prints elapsed times.
pub fn hms(secs: u64) -> String {
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Replaces control characters so text from the outside (URLs, reasons) cannot move the
/// cursor or recolour the terminal.
pub fn safe_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}

/// Escapes text for HTML element content and attribute values.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// JSON that is safe inside a `<script>` element: it cannot end the element or, read as
/// JavaScript, a line.
pub fn script_json(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_pick_a_readable_unit() {
        assert_eq!(us(850), "850us");
        assert_eq!(us(1_234), "1.23ms");
        assert_eq!(us(12_345), "12.3ms");
        assert_eq!(us(1_200_000), "1.20s");
        assert_eq!(hms(3_725), "01:02:05");
        assert_eq!(bytes(2048), "2.0 KiB");
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(safe_text("a\x1b[31mb\n"), "a\u{FFFD}[31mb\u{FFFD}");
    }
}
