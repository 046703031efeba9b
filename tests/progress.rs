//! Snapshot progress is drawn on stderr when it is a terminal, and only then.

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
            "TERM=xterm script -qec 'ag-box snapshot {name}' /dev/null"
        ))
        .ok()
        .stdout();
    assert!(
        tty.contains(&format!("snapshot {name} [")),
        "no progress bar on a terminal:\n{tty}"
    );
    let piped = host.sh(&format!("ag-box snapshot {name} 2>&1 | cat"));
    assert!(
        !piped.ok().stdout().contains(&format!("snapshot {name} [")),
        "{}",
        piped.stdout()
    );
}
