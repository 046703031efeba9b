//! Text that came from a box (file names, what its tmux server or proxy said) made safe for a
//! terminal: control and bidi characters are shown as escapes, so nothing a box names can move
//! the cursor, retitle a window, write the clipboard or forge a line. `--json` output stays
//! exact and never goes through here.

use std::fmt::Write;

/// `s` with every C0/C1 control, DEL, bidi control and backslash escaped (`\n`, `\x1b`,
/// `\u{202e}`, `\\`); everything else as it is.
pub fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
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
    use pretty_assertions::assert_eq;

    #[test]
    fn controls_bidi_and_backslash_are_escaped_the_rest_kept() {
        assert_eq!(
            escaped("a\u{1b}]52;c;eA==\u{7}\nparked box 'x'\r\t\u{7f}\u{9b}\u{202e}é\\"),
            "a\\x1b]52;c;eA==\\x07\\nparked box 'x'\\r\\t\\x7f\\u{9b}\\u{202e}é\\\\"
        );
        assert_eq!(escaped("src/main.rs"), "src/main.rs");
    }
}
