//! Snapshot progress is drawn on stderr as a bar when it is a terminal; otherwise (the journal,
//! a timer) it is a line every few seconds.

mod common;

use std::io::Read as _;

use common::boxtest::{BoxTest, Project};
use common::{Host, Target};

#[test]
fn snapshot_progress_only_on_a_terminal() {
    let Some(host) = Host::new("progress") else {
        return;
    };
    let name = format!("prog-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    let proj = b.write(&(1..=200).fold(Project::new(&name), |p, i| {
        p.file(&format!("f{i}"), format!("{i}\n"))
    }));
    b.track().ok();
    // `script` gives the command a pseudo-terminal and records what it drew.
    host.write(&format!("{proj}/f1"), "changed\n");
    let tty = b
        .snapshot()
        .env("TERM", "xterm")
        .on_a_terminal()
        .ok()
        .stdout();
    assert!(
        tty.contains(&format!("snapshot {name} [")),
        "no progress bar on a terminal:\n{tty}"
    );
    // Off a terminal (a pipe): lines, as often as AG_BOX_PROGRESS_EVERY allows (enough data to
    // take a while), and no bar.
    let mut big = vec![0; 150 << 20];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut big)
        .unwrap();
    std::fs::write(host.host_path(&format!("{proj}/big")), &big).unwrap();
    let piped = b.snapshot().env("AG_BOX_PROGRESS_EVERY", "0").ok();
    let said = piped.stderr();
    let all = piped.stdout() + &said;
    assert!(!all.contains(&format!("snapshot {name} [")), "{all}");
    assert!(
        said.lines()
            .any(|l| l.starts_with(&format!("ag-box: snapshot {name}: ")) && l.contains("% (")),
        "no progress line off a terminal:\n{said}"
    );
    // A restic that runs without its scanner (0.15+: Debian 13's, as tests/rig.sh installs
    // it) knows no total for a backup with a parent: the line says what is done so far.
    let newer = "/opt/restic-trixie/usr/bin";
    assert!(
        std::path::Path::new(newer).join("restic").exists(),
        "{newer}/restic is missing: run 'tests/rig.sh install'"
    );
    big.reverse();
    std::fs::write(host.host_path(&format!("{proj}/big")), big).unwrap();
    let unscanned = b
        .snapshot()
        .env("PATH", &format!("{newer}:{}", host.search_path()))
        .env("AG_BOX_PROGRESS_EVERY", "0")
        .ok()
        .stderr();
    assert!(
        unscanned.lines().any(|l| {
            l.starts_with(&format!("ag-box: snapshot {name}: "))
                && l.contains(" files, ")
                && l.ends_with(" so far")
        }),
        "no progress line without a total:\n{unscanned}"
    );
    assert!(!unscanned.contains("% ("), "restic scanned:\n{unscanned}");
}
