//! The command line lists every spec command, each with its own help, an example and its exit
//! status; arguments parse as documented. Help and parsing are checked in-process, through the
//! library's command; what needs a store runs the binary.

use std::process::Command;

use clap::error::ErrorKind;

const SPEC_COMMANDS: [&str; 19] = [
    "ls", "track", "up", "attach", "exec", "park", "snapshot", "globals", "prune", "drop",
    "status", "history", "diff", "rollback", "set", "egress", "init", "stop", "cost",
];

fn long_help(path: &[&str]) -> String {
    let mut cmd = ag_box::command();
    cmd.build();
    let mut at = &mut cmd;
    for name in path {
        at = at
            .find_subcommand_mut(name)
            .unwrap_or_else(|| panic!("no command {path:?}"));
    }
    at.render_long_help().to_string()
}

fn parse(args: &[&str]) -> Result<clap::ArgMatches, clap::Error> {
    ag_box::command().try_get_matches_from(std::iter::once("ag-box").chain(args.iter().copied()))
}

#[test]
fn help_lists_all_spec_commands_each_with_an_example_and_its_exit_status() {
    let top = long_help(&[]);
    for cmd in SPEC_COMMANDS {
        assert!(
            top.lines()
                .any(|l| l.trim_start().starts_with(&format!("{cmd} "))),
            "{cmd} missing:\n{top}"
        );
        let own = long_help(&[cmd]);
        assert!(
            own.contains(&format!("Example: ag-box {cmd}")),
            "{cmd} --help has no example:\n{own}"
        );
        assert!(
            own.contains("EXIT STATUS\n  0    "),
            "{cmd} --help has no exit status:\n{own}"
        );
    }
    for action in ["push", "pull", "auto", "adopt"] {
        assert!(long_help(&["globals", action]).contains("Example: ag-box globals"));
    }
    assert!(
        !top.contains("__probe") && !top.contains("__anchor") && !top.contains("__man"),
        "hidden commands shown:\n{top}"
    );
}

#[test]
fn the_binary_prints_the_same_help() {
    let out = Command::new(env!("CARGO_BIN_EXE_ag-box"))
        .args(["park", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), long_help(&["park"]));
}

#[test]
fn snapshot_takes_accept_partial_with_a_box_or_with_active_and_never_alone() {
    let named = parse(&["snapshot", "nosuch", "--accept-partial"]).unwrap();
    let named = named.subcommand_matches("snapshot").unwrap();
    assert_eq!(
        named.get_one::<String>("name").map(String::as_str),
        Some("nosuch")
    );
    assert!(named.get_flag("accept_partial"));
    assert!(parse(&["snapshot", "--active", "--accept-partial"]).is_ok());
    assert_eq!(
        parse(&["snapshot", "--accept-partial"]).unwrap_err().kind(),
        ErrorKind::MissingRequiredArgument
    );
    assert_eq!(
        parse(&["snapshot", "x", "--active"]).unwrap_err().kind(),
        ErrorKind::ArgumentConflict
    );
    assert_eq!(
        parse(&["-q", "-v", "ls"]).unwrap_err().kind(),
        ErrorKind::ArgumentConflict
    );
}

#[test]
fn exec_takes_its_command_with_or_without_a_double_dash() {
    for args in [
        &["exec", "b", "ls", "-la"][..],
        &["exec", "b", "--", "ls", "-la"],
    ] {
        let m = parse(args).unwrap();
        let command: Vec<&str> = m
            .subcommand_matches("exec")
            .unwrap()
            .get_many::<String>("command")
            .unwrap()
            .map(String::as_str)
            .collect();
        assert_eq!(command, ["ls", "-la"], "{args:?}");
    }
    assert_eq!(
        parse(&["exec", "b"]).unwrap_err().kind(),
        ErrorKind::MissingRequiredArgument
    );
}

/// `ag-box <args>` with a store of its own (nothing tracked): exit code and stderr.
fn run_alone(args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ag-box"))
        .args(args)
        .env("BOX_STATE_DIR", dir.path().join("state"))
        .env("BOX_CONFIG_DIR", dir.path().join("config"))
        .env("BOX_NODE", "alone")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_binary_exits_2_on_bad_usage_and_1_for_a_box_it_does_not_know() {
    // As snapshot's own error says to: the box is looked up (none is tracked here).
    let (code, err) = run_alone(&["snapshot", "nosuch", "--accept-partial"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("box 'nosuch' is not tracked"), "{err}");
    let (code, err) = run_alone(&["snapshot", "--active", "--accept-partial"]);
    assert_eq!(
        (code, err.as_str()),
        (0, "no active boxes on this node, skipping\n")
    );
    let (code, err) = run_alone(&["snapshot", "--accept-partial"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("required arguments were not provided"),
        "{err}"
    );
    let (code, err) = run_alone(&["exec", "no-such-box", "ls", "-la"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("box 'no-such-box' is not tracked"), "{err}");
}

#[test]
fn track_takes_an_agent_and_refuses_one_it_does_not_know_in_one_line() {
    let m = parse(&["track", "demo", "--agent", "codex"]).unwrap();
    let track = m.subcommand_matches("track").unwrap();
    assert_eq!(
        track.get_one::<String>("agent").map(String::as_str),
        Some("codex")
    );
    assert_eq!(
        parse(&["track", "demo", "--agent"]).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    // Refused before anything is looked at (the project does not exist either).
    let (code, err) = run_alone(&["track", "demo", "/nonexistent", "--agent", "bogus"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "ag-box: invalid agent 'bogus'; hint: agent takes claude, codex, gemini, grok, \
             opencode or none\n"
        )
    );
}
