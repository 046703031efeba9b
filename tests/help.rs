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
