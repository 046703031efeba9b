//! Snapshot progress is drawn on stderr as a bar when it is a terminal; otherwise (the journal,
//! a timer) it is a line every few seconds.

mod common;

use common::{Checked, Host, Target};

#[test]
fn snapshot_progress_only_on_a_terminal() {
    let Some(host) = Host::new("progress") else {
        return;
    };
    let name = format!("prog-{}", std::process::id());
    host.sh(&format!(
        "mkdir -p home/{name} && for i in $(seq 200); do echo $i > home/{name}/f$i; done"
    ))
    .ok();
    host.sh(&format!("ag-box track {name}")).ok();
    // `script` gives the command a pseudo-terminal and records what it drew.
    let tty = host
        .sh(&format!(
            "echo changed > home/{name}/f1; TERM=xterm script -qec 'ag-box snapshot {name}' /dev/null"
        ))
        .ok()
        .stdout();
    assert!(
        tty.contains(&format!("snapshot {name} [")),
        "no progress bar on a terminal:\n{tty}"
    );
    // Off a terminal: lines, as often as AG_BOX_PROGRESS_EVERY allows (enough data to take a
    // while), and no bar.
    let piped = host.sh_env(
        &[("AG_BOX_PROGRESS_EVERY", "0")],
        &format!("head -c 150M /dev/urandom > home/{name}/big; ag-box snapshot {name} 2>&1 | cat"),
    );
    let said = piped.ok().stdout();
    assert!(!said.contains(&format!("snapshot {name} [")), "{said}");
    assert!(
        said.lines()
            .any(|l| l.starts_with(&format!("ag-box: snapshot {name}: ")) && l.contains("% (")),
        "no progress line off a terminal:\n{said}"
    );
}
