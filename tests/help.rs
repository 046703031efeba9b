//! The command line lists every spec command, each with its own help and an example.

use std::process::Command;

const SPEC_COMMANDS: [&str; 18] = [
    "ls", "track", "up", "attach", "exec", "park", "snapshot", "globals", "prune", "drop",
    "status", "history", "diff", "rollback", "set", "egress", "init", "stop",
];

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ag-box"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_lists_all_spec_commands_each_with_an_example() {
    let top = help(&[]);
    for cmd in SPEC_COMMANDS {
        assert!(
            top.lines()
                .any(|l| l.trim_start().starts_with(&format!("{cmd} "))),
            "{cmd} missing:\n{top}"
        );
        let own = help(&[cmd]);
        assert!(
            own.contains(&format!("Example: ag-box {cmd}")),
            "{cmd} --help has no example:\n{own}"
        );
    }
    for action in ["push", "pull", "auto"] {
        assert!(help(&["globals", action]).contains("Example: ag-box globals"));
    }
    assert!(
        !top.contains("__probe") && !top.contains("__anchor") && !top.contains("__man"),
        "hidden commands shown:\n{top}"
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
fn snapshot_takes_accept_partial_with_a_box_or_with_active() {
    // As snapshot's own error says to: the box is looked up (none is tracked here).
    let (code, err) = run_alone(&["snapshot", "nosuch", "--accept-partial"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("box 'nosuch' is not tracked"), "{err}");
    let (code, err) = run_alone(&["snapshot", "--active", "--accept-partial"]);
    assert_eq!(
        (code, err.as_str()),
        (0, "no active boxes on this node, skipping\n")
    );
    // Alone it names no box: a usage error, not a snapshot of every active box.
    let (code, err) = run_alone(&["snapshot", "--accept-partial"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("required arguments were not provided"),
        "{err}"
    );
    let (code, _) = run_alone(&["snapshot", "x", "--active"]);
    assert_eq!(code, 2);
}

#[test]
fn exec_takes_its_command_with_or_without_a_double_dash() {
    for args in [
        &["exec", "no-such-box", "ls", "-la"][..],
        &["exec", "no-such-box", "--", "ls", "-la"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ag-box"))
            .args(args)
            .env("BOX_STATE_DIR", "/nonexistent/ag-box-help-test")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(1) && err.contains("box 'no-such-box' is not tracked"),
            "{args:?}: {err}"
        );
    }
}
