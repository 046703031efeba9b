//! What of a box's terminal output may reach the operator's terminal through `attach`: all of
//! it, but for the strings a terminal acts on beyond the screen. OSC 52 writes the operator's
//! clipboard; DCS (tmux's passthrough among them), APC and PM strings hand the terminal
//! commands of their own. They are dropped whole; everything else passes as it came, split
//! across reads or not.

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After an ESC.
    Esc,
    /// After `ESC ]`, reading the first bytes of the command (held in `held`).
    OscStart,
    /// An OSC string that passes, until BEL or ST.
    OscPass,
    OscPassEsc,
    /// An OSC 52 string, dropped until BEL or ST.
    OscDrop,
    OscDropEsc,
    /// A DCS, APC or PM string, dropped until ST (an ESC in it comes doubled, as tmux writes).
    Drop,
    DropEsc,
}

/// Carries its state from one read to the next.
#[derive(Debug)]
pub(crate) struct OutputFilter {
    state: State,
    held: Vec<u8>,
}

impl Default for OutputFilter {
    fn default() -> Self {
        OutputFilter {
            state: State::Ground,
            held: Vec::new(),
        }
    }
}

/// The OSC command that writes the clipboard.
const CLIPBOARD: &[u8] = b"52;";

impl OutputFilter {
    /// What of `input` goes on, appended to `out`.
    pub(crate) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.state = match (self.state, b) {
                (State::Ground, ESC) => State::Esc,
                (State::Ground, _) => {
                    out.push(b);
                    State::Ground
                }
                (State::Esc, b']') => {
                    self.held.clear();
                    State::OscStart
                }
                (State::Esc, b'P' | b'_' | b'^') => State::Drop,
                (State::Esc, ESC) => {
                    out.push(ESC);
                    State::Esc
                }
                (State::Esc, _) => {
                    out.extend([ESC, b]);
                    State::Ground
                }
                (State::OscStart, _) => {
                    self.held.push(b);
                    if self.held == CLIPBOARD {
                        State::OscDrop
                    } else if CLIPBOARD.starts_with(&self.held) {
                        State::OscStart
                    } else {
                        // Not the clipboard: what was held goes out, and the rest follows it.
                        out.extend([ESC, b']']);
                        self.held.pop();
                        out.append(&mut self.held);
                        pass_osc(b, out)
                    }
                }
                (State::OscPass, _) => pass_osc(b, out),
                (State::OscPassEsc, _) => {
                    out.push(b);
                    if b == b'\\' {
                        State::Ground
                    } else {
                        State::OscPass
                    }
                }
                (State::OscDrop, BEL) | (State::OscDropEsc | State::DropEsc, b'\\') => {
                    State::Ground
                }
                (State::OscDrop, ESC) => State::OscDropEsc,
                (State::OscDrop | State::OscDropEsc, _) => State::OscDrop,
                (State::Drop, ESC) => State::DropEsc,
                (State::Drop | State::DropEsc, _) => State::Drop,
            };
        }
    }
}

/// One byte of an OSC string that passes.
fn pass_osc(b: u8, out: &mut Vec<u8>) -> State {
    out.push(b);
    match b {
        BEL => State::Ground,
        ESC => State::OscPassEsc,
        _ => State::OscPass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn filtered(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = OutputFilter::default();
        let mut out = Vec::new();
        for c in chunks {
            f.feed(c, &mut out);
        }
        out
    }

    #[test]
    fn the_clipboard_and_terminal_commands_are_dropped_the_screen_kept() {
        let input: &[u8] = b"a\x1b[31mred\x1b[0m\x1b]52;c;aGk=\x07b\x1b]52;p;eA==\x1b\\c\
            \x1b]0;title\x07\x1b]8;;http://x\x1b\\link\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\d\
            \x1b_kitty\x1b\\e\x1b^pm\x1b\\f\x1b\x1b[1m";
        assert_eq!(
            String::from_utf8_lossy(&filtered(&[input])),
            "a\x1b[31mred\x1b[0mbc\x1b]0;title\x07\x1b]8;;http://x\x1b\\linkdef\x1b\x1b[1m"
        );
    }

    #[test]
    fn a_sequence_split_across_reads_is_judged_whole() {
        let input: &[u8] = b"x\x1b]52;c;aGk=\x07y\x1b]5;z\x07\x1bPq\x1b\\w";
        let one = filtered(&[input]);
        for cut in 1..input.len() {
            let (a, b) = input.split_at(cut);
            assert_eq!(filtered(&[a, b]), one, "cut at {cut}");
        }
        assert_eq!(String::from_utf8_lossy(&one), "xy\x1b]5;z\x07w");
        // Byte by byte too.
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(filtered(&bytes), one);
    }
}
