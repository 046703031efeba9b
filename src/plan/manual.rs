//! What every verb's long help and man page says beyond its options: its exit status, the
//! environment and files it reads, and where to read on.
use std::fmt::Write as _;

/// The exit codes every verb shares.
const COMMON: [(&str, &str); 5] = [
    ("0", "done"),
    ("1", "failed: the one-line message says why, with a hint"),
    ("2", "bad usage: an unknown option, a bad value or setting"),
    ("3", "the box is held by another node (its lease)"),
    (
        "4",
        "a tool ag-box needs is missing here (bwrap, tmux, restic, ...)",
    ),
];

/// The exit codes of `verb` (a subcommand's name; "" for ag-box itself).
pub(crate) fn exit_status(verb: &str) -> Vec<(&'static str, &'static str)> {
    let mut codes = COMMON.to_vec();
    let own: &[(&str, &str)] = match verb {
        "exec" => &[
            (
                "n",
                "otherwise the command's own exit code (128+n after signal n)",
            ),
            ("126", "the box has the command but cannot run it"),
            ("127", "the box has no such command"),
        ],
        "attach" => &[("n", "otherwise tmux's own exit code")],
        "up" => &[(
            "3",
            "the box is up on another node: park it there, or --force",
        )],
        "snapshot" => &[(
            "3",
            "a box's lease was taken by another node: its snapshot was kept as a fork",
        )],
        "doctor" => &[("1", "a check failed (each names its fix)")],
        _ => &[],
    };
    for (code, meaning) in own {
        match codes.iter_mut().find(|(c, _)| c == code) {
            Some(entry) => entry.1 = meaning,
            None => codes.push((code, meaning)),
        }
    }
    codes
}

/// The EXIT STATUS part of a verb's long help.
pub(crate) fn exit_status_text(verb: &str) -> String {
    let lines: Vec<String> = exit_status(verb)
        .iter()
        .map(|(code, meaning)| format!("  {code:<4} {meaning}"))
        .collect();
    format!("EXIT STATUS\n{}", lines.join("\n"))
}

pub(crate) const ENVIRONMENT: [(&str, &str); 8] = [
    (
        "BOX_CONFIG_DIR",
        "where the env and nodes files are (default ~/.config/box); the env file's keys may also be set in the environment, which wins",
    ),
    (
        "BOX_STATE_DIR",
        "this node's state (default /var/lib/ag-box): records of the embedded store, the restic repository, agent homes",
    ),
    (
        "BOX_S3_ENDPOINT, BOX_BUCKET",
        "the shared store; unset: one node, the embedded store",
    ),
    ("BOX_NODE", "this node's name (default: the hostname)"),
    ("RESTIC_PASSWORD", "the repository's password"),
    (
        "BOX_MEMORY_MAX, BOX_TASKS_MAX, BOX_TMPFS_MAX, BOX_SNAPSHOT_ADD_MAX",
        "the bounds of every box (docs/operations.md lists every key)",
    ),
    (
        "AG_BOX_LOG",
        "a standing log filter (debug, ag_box=debug); -v and -q override it",
    ),
    ("NO_COLOR", "set: no colour in the log lines"),
];

pub(crate) const FILES: [(&str, &str); 6] = [
    (
        "~/.config/box/env",
        "KEY=VALUE settings and secrets (mode 600, else refused)",
    ),
    (
        "~/.config/box/nodes",
        "one line per node: <node> <ssh-alias|local>",
    ),
    (
        "/var/lib/ag-box",
        "records (meta/), the repository (restic/), agent homes (homes/) and this node's state (local/)",
    ),
    (
        "/run/box/<name>",
        "a running box's run dir (root's alone): bwrap's info, the proxy's decisions",
    ),
    (
        "/etc/box/egress-allow.txt",
        "what every box on this node may reach with network=allow",
    ),
    ("/opt/box/exclude.txt", "what no snapshot holds"),
];

/// The SEE ALSO line of a page.
pub(crate) fn see_also(verb: &str) -> String {
    let mut pages: Vec<String> = ["ag-box", "ag-box-status", "ag-box-doctor"]
        .iter()
        .filter(|p| **p != format!("ag-box-{verb}") && !(verb.is_empty() && **p == "ag-box"))
        .map(|p| format!("{p}(1)"))
        .collect();
    pages.extend(["restic(1)", "bwrap(1)", "tmux(1)"].map(String::from));
    format!(
        "{}; docs/reference.md, docs/operations.md and docs/security.md in the source tree",
        pages.join(", ")
    )
}

/// Text made safe for roff: backslashes doubled, no line starting as a request.
fn roff_text(text: &str) -> String {
    text.replace('\\', "\\e")
        .lines()
        .map(|l| {
            if l.starts_with(['.', '\'']) {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A section of tagged paragraphs (`.TP`).
fn tagged(heading: &str, items: &[(&str, &str)]) -> String {
    let mut out = format!(".SH \"{heading}\"\n");
    for (tag, text) in items {
        let _ = write!(
            out,
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_text(tag),
            roff_text(text)
        );
    }
    out
}

/// The sections a man page has after its options: EXAMPLES (the help's), EXIT STATUS,
/// ENVIRONMENT, FILES and SEE ALSO.
pub(crate) fn man_sections(verb: &str, examples: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(text) = examples {
        let _ = write!(out, ".SH EXAMPLES\n{}\n", roff_text(text));
    }
    out.push_str(&tagged("EXIT STATUS", &exit_status(verb)));
    out.push_str(&tagged("ENVIRONMENT", &ENVIRONMENT));
    out.push_str(&tagged("FILES", &FILES));
    let _ = write!(out, ".SH \"SEE ALSO\"\n{}\n", roff_text(&see_also(verb)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_verb_adds_and_replaces_codes_of_its_own() {
        assert_eq!(
            exit_status("exec")
                .iter()
                .map(|(c, _)| *c)
                .collect::<Vec<_>>(),
            ["0", "1", "2", "3", "4", "n", "126", "127"]
        );
        assert_eq!(
            exit_status("up")[3],
            (
                "3",
                "the box is up on another node: park it there, or --force"
            )
        );
        assert_eq!(exit_status("ls"), COMMON.to_vec());
        assert_eq!(
            exit_status_text("ls").lines().take(2).collect::<Vec<_>>(),
            ["EXIT STATUS", "  0    done"]
        );
    }

    #[test]
    fn man_sections_are_roff_and_escaped() {
        let roff = man_sections("up", Some(".dangerous\nExample: ag-box up a\\b"));
        assert!(roff.starts_with(".SH EXAMPLES\n\\&.dangerous\nExample: ag-box up a\\eb\n"));
        for heading in [
            ".SH \"EXIT STATUS\"",
            ".SH \"ENVIRONMENT\"",
            ".SH \"FILES\"",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(roff.contains(heading), "{heading} missing:\n{roff}");
        }
        assert!(roff.contains(".TP\n\\fB3\\fR\nthe box is up on another node"));
        assert_eq!(
            see_also("status"),
            "ag-box(1), ag-box-doctor(1), restic(1), bwrap(1), tmux(1); docs/reference.md, docs/operations.md and docs/security.md in the source tree"
        );
    }
}
