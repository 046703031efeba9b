//! Conventional command-line behaviour: `-q` leaves only data and errors, `-v` adds debug
//! lines, and colour goes only to a terminal that wants it (`NO_COLOR`, `TERM=dumb`).

mod common;

use common::{Checked, Host, Target};

#[test]
fn quiet_leaves_data_and_errors_and_verbose_adds_debug_lines() {
    let Some(host) = Host::new("cli") else {
        return;
    };
    let name = format!("cli-{}", std::process::id());
    let home = host.home().to_string();
    host.sh(&format!(
        "mkdir -p {home}/{name} && echo v1 > {home}/{name}/f"
    ))
    .ok();
    // The repository's first making warns (its password): a warning -q does not hide.
    host.sh("ag-box init").ok();
    let tracked = host.sh(&format!("ag-box -q track {name}"));
    let tracked = tracked.ok();
    assert_eq!(tracked.stderr(), "", "-q track said something");
    let up = host.sh(&format!("ag-box up {name} -q"));
    let up = up.ok();
    assert_eq!(up.stderr(), "", "-q up said something");
    host.sh(&format!("echo v2 > {home}/{name}/f")).ok();
    let verbose = host.sh(&format!("ag-box -v snapshot {name}"));
    let verbose = verbose.ok();
    assert!(
        verbose.stderr().contains("DEBUG box '") && verbose.stderr().contains("': walked its copy"),
        "{}",
        verbose.stderr()
    );
    host.sh(&format!("echo v3 > {home}/{name}/f")).ok();
    let plain = host.sh(&format!("ag-box snapshot {name}"));
    assert!(!plain.ok().stderr().contains("DEBUG"));
    host.sh(&format!("echo v4 > {home}/{name}/f")).ok();
    let parked = host.sh(&format!("ag-box --quiet park {name}"));
    let parked = parked.ok();
    assert_eq!(parked.stderr(), "");
    assert!(
        parked.stdout().starts_with(&format!("{name} ")),
        "park's data line: {}",
        parked.stdout()
    );
    // Errors are said whatever -q says.
    common::assert_code(
        &host.sh("ag-box -q up no-such-box"),
        1,
        "ag-box: box 'no-such-box' is not tracked",
    );
    common::assert_code(&host.sh("ag-box -q -v ls"), 2, "cannot be used with");
}

/// What `init` of a fresh repository logs on a pseudo-terminal (`script`), with `env` before it.
fn on_a_terminal(host: &Host, env: &str, n: u32) -> String {
    host.sh(&format!(
        "s=$PWD/state-{n}; export BOX_STATE_DIR=$s RESTIC_REPOSITORY=$s/restic RESTIC_PASSWORD_FILE=$s/restic-password
         {env} script -qec 'ag-box init' /dev/null"
    ))
    .ok()
    .stdout()
}

#[test]
fn colour_only_where_the_terminal_wants_it() {
    let Some(host) = Host::new("colour") else {
        return;
    };
    let coloured = on_a_terminal(&host, "TERM=xterm", 0);
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    for (n, env) in [(1, "TERM=xterm NO_COLOR=1"), (2, "TERM=dumb")] {
        let out = on_a_terminal(&host, env, n);
        assert!(out.contains("INFO"), "{env}: {out:?}");
        assert!(!out.contains("\x1b["), "{env}: colour in {out:?}");
    }
}
