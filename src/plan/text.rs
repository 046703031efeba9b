//! Text that came from a box (file names, what its tmux server or proxy said) made safe for a
//! terminal: control and bidi characters are shown as escapes, so nothing a box names can move
//! the cursor, retitle a window, write the clipboard or forge a line. `--json` output stays
//! exact and never goes through here.

use std::fmt::Write;

/// `s` with every C0/C1 control, DEL and bidi control escaped (`\n`, `\x1b`, `\u{202e}`);
/// everything else as it is.
/// Lower-case hex of `bytes` (digests, ids, keys).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

pub(crate) fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_c1(c) || is_bidi(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A line for the terminal (an error, a message, a log line, ending in one newline or not):
/// as [`escaped`], but for that final newline and the colour codes (`ESC [ digits ; m`) the
/// log formatter adds (it escapes the ESC of what it prints itself).
pub(crate) fn terminal_line(s: &str) -> String {
    let (body, newline) = match s.strip_suffix('\n') {
        Some(b) => (b, "\n"),
        None => (s, ""),
    };
    let mut out = String::with_capacity(s.len());
    let mut rest = body;
    while let Some(at) = rest.find('\u{1b}') {
        out.push_str(&escaped(&rest[..at]));
        let after = &rest[at + 1..];
        let sgr = after.strip_prefix('[').and_then(|p| {
            let end = p.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
            (p[end..].starts_with('m')).then_some(end + 2)
        });
        if let Some(len) = sgr {
            out.push('\u{1b}');
            out.push_str(&after[..len]);
            rest = &after[len..];
        } else {
            out.push_str("\\x1b");
            rest = after;
        }
    }
    out.push_str(&escaped(rest));
    out.push_str(newline);
    out
}

/// `n` and the noun, plural when `n` is not 1 (`1 snapshot`, `2 snapshots`).
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Milliseconds since the epoch (none before it), as RFC 3339 to the second.
pub(crate) fn rfc3339_ms(ms: i64) -> String {
    let at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A span of seconds as a person reads an age: `42s`, `5m`, `3h`, `2d`.
pub(crate) fn age(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

/// Rows as lines of columns each as wide as its widest cell (two spaces apart; the last
/// column is not padded).
pub(crate) fn table(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, cell) in r.iter().enumerate() {
                if i + 1 == r.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            line
        })
        .collect()
}

fn is_c1(c: char) -> bool {
    ('\u{80}'..='\u{9f}').contains(&c)
}

/// The characters that reorder text on screen (Trojan Source).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_as_wide_as_their_cells() {
        let row = |cells: &[&str]| cells.iter().map(|c| (*c).to_string()).collect::<Vec<_>>();
        assert_eq!(
            table(&[
                row(&["NAME", "HOLDER", "PATH"]),
                row(&["a-rather-long-box-name-of-thirty", "-", "/p/a"]),
                row(&["b", "nodeA", "/p/b"]),
            ]),
            [
                "NAME                              HOLDER  PATH",
                "a-rather-long-box-name-of-thirty  -       /p/a",
                "b                                 nodeA   /p/b",
            ]
        );
        assert_eq!(table(&[]), Vec::<String>::new());
    }
    use pretty_assertions::assert_eq;

    #[test]
    fn controls_and_bidi_are_escaped_the_rest_kept() {
        assert_eq!(
            escaped("a\u{1b}]52;c;eA==\u{7}\nparked box 'x'\r\t\u{7f}\u{9b}\u{202e}é\\"),
            "a\\x1b]52;c;eA==\\x07\\nparked box 'x'\\r\\t\\x7f\\u{9b}\\u{202e}é\\"
        );
        assert_eq!(escaped("src/main.rs"), "src/main.rs");
    }

    #[test]
    fn counts_say_one_or_many() {
        assert_eq!(
            [
                count(0, "snapshot"),
                count(1, "snapshot"),
                count(2, "snapshot")
            ],
            ["0 snapshots", "1 snapshot", "2 snapshots"]
        );
    }

    #[test]
    fn a_terminal_line_keeps_its_newline_and_colours_only() {
        assert_eq!(
            terminal_line("\u{1b}[33m WARN\u{1b}[0m moved \u{1b}[2J\u{1b}]0;x\u{7}a\nb\n"),
            "\u{1b}[33m WARN\u{1b}[0m moved \\x1b[2J\\x1b]0;x\\x07a\\nb\n"
        );
        assert_eq!(terminal_line("plain"), "plain");
        assert_eq!(terminal_line("\u{1b}"), "\\x1b");
    }
}
