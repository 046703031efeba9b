//! install.sh on booted systemd nodes of the rig: files, units and timers, the snapshot unit with
//! and without an active box, `--to` over ssh, and a damaged bundle refused before installing.
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{Checked, Cluster, Node, Target, assert_code, repo_root};

/// What install.sh ships next to itself (besides bin/ag-box).
const SHIPPED: &[&str] = &[
    "install.sh",
    "tmux-inner.conf",
    "egress-allow.txt",
    "exclude.txt",
    "env.example",
    "nodes.example",
    "systemd",
    "base-flake",
];

fn node_dir(node: &str) -> PathBuf {
    let out = Command::new(repo_root().join("tests/rig.sh"))
        .args(["dir", node])
        .output()
        .unwrap();
    PathBuf::from(out.stdout().trim())
}

/// The repo's shipped files plus this build as bin/ag-box, in the node's `/root/<sub>`
/// (nodes have a private /root). Returns the path inside the node.
fn stage(node: &str, sub: &str) -> String {
    let dir = node_dir(node).join("root").join(sub);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for f in SHIPPED {
        let st = Command::new("cp")
            .arg("-R")
            .arg(repo_root().join(f))
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "cp -R {f}");
    }
    std::fs::copy(env!("CARGO_BIN_EXE_ag-box"), dir.join("bin/ag-box")).unwrap();
    format!("/root/{sub}")
}

fn local_version() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ag-box"))
        .arg("--version")
        .output()
        .unwrap();
    out.ok().stdout().trim().to_string()
}

/// The timers must not fire (snapshots, hourly globals, daily prunes) during other tests on the rig.
struct TimersOff<'a>(&'a Node);

impl Drop for TimersOff<'_> {
    fn drop(&mut self) {
        self.0.sh(
            "systemctl disable --now box-snapshot.timer box-globals.timer box-prune.timer >/dev/null 2>&1 || true",
        );
    }
}

/// Parks a box even when the test fails half-way.
struct Parks<'a>(&'a Node, &'a str);

impl Drop for Parks<'_> {
    fn drop(&mut self) {
        self.0.sh(&format!(
            "! systemctl is-active -q boxrun-{0} || ag-box park {0} || true",
            self.1
        ));
    }
}

/// The box's lease `renewed_at`, from `ag-box ls --json` on node A.
fn renewed_at(c: &Cluster, name: &str) -> String {
    let row = common::box_row(&c.a, name).unwrap_or_else(|| panic!("box {name} not in ls --json"));
    row["lease"]["renewed_at"]
        .as_str()
        .unwrap_or_else(|| panic!("box {name} has no lease: {row}"))
        .to_string()
}

/// Starts box-snapshot.service (waits for the oneshot to finish) and returns that run's journal
/// once it holds `expect` (stdout and stderr reach the journal asynchronously), or after 5 s.
fn run_snapshot_unit(n: &Node, expect: &str) -> String {
    n.sh("systemctl start box-snapshot.service").ok();
    n.sh_env(
        &[("EXPECT", expect)],
        "id=$(systemctl show -p InvocationID --value box-snapshot.service)
         for i in $(seq 50); do
           journalctl _SYSTEMD_INVOCATION_ID=$id --no-pager -o cat | grep -qF -- \"$EXPECT\" && break
           sleep 0.1
         done
         journalctl _SYSTEMD_INVOCATION_ID=$id --no-pager -o cat",
    )
    .ok()
    .stdout()
}

#[test]
fn install_on_a_node_enables_the_timers_and_the_snapshot_unit_renews_leases() {
    let Some(c) = Cluster::get() else { return };
    let a = &c.a;
    let src = stage("nodeA", "ag-box-src-local");
    let _off = TimersOff(a);
    // The staged binary made unlike the rig's (bytes after an ELF image are never read), and
    // the rig's link noted: what is there afterwards is install.sh's doing.
    let before = a
        .sh(&format!(
            "set -e; printf 'staged-by-the-install-test' >> {src}/bin/ag-box
             sha256sum < {src}/bin/ag-box; sha256sum < /opt/box/bin/ag-box; stat -c %i /usr/local/bin/ag-box"
        ))
        .ok()
        .stdout();
    let [staged, rigs, link_inode] = before.lines().collect::<Vec<_>>()[..] else {
        panic!("{before}");
    };
    assert_ne!(staged, rigs);

    let out = a.sh(&format!("bash {src}/install.sh"));
    assert_code(&out, 0, "installed ag-box");
    let after = a
        .sh("set -e; sha256sum < /opt/box/bin/ag-box; stat -c %i /usr/local/bin/ag-box; readlink /usr/local/bin/ag-box")
        .ok()
        .stdout();
    let [installed, new_link_inode, target] = after.lines().collect::<Vec<_>>()[..] else {
        panic!("{after}");
    };
    assert_eq!(
        (installed, target),
        (staged, "/opt/box/bin/ag-box"),
        "install.sh did not install the staged binary"
    );
    assert_ne!(new_link_inode, link_inode, "install.sh made no link");
    let timers = a.sh("systemctl list-timers --all --no-pager").ok().stdout();
    for t in ["box-snapshot.timer", "box-globals.timer", "box-prune.timer"] {
        assert!(timers.contains(t), "{t} not listed:\n{timers}");
    }
    a.sh(
        "systemctl is-enabled -q box-snapshot.timer box-globals.timer box-prune.timer && \
          systemctl is-active -q box-snapshot.timer box-globals.timer box-prune.timer",
    )
    .ok();
    // systemd took the cadence and the spread (a misspelt key is only a warning in the journal).
    assert_eq!(
        a.sh("systemctl show -p TimersCalendar -p RandomizedDelayUSec -p FixedRandomDelay box-snapshot.timer box-globals.timer | sed 's/ ; next_elapse=[^}]*//'")
            .ok()
            .stdout(),
        "TimersCalendar={ OnCalendar=*-*-* *:00/5:00}\nRandomizedDelayUSec=4min\nFixedRandomDelay=yes\n\n\
         TimersCalendar={ OnCalendar=*-*-* *:00:00}\nRandomizedDelayUSec=15min\nFixedRandomDelay=yes\n"
    );
    for (unit, timeout) in [
        ("box-snapshot.service", "50min"),
        ("box-globals.service", "20min"),
        ("box-prune.service", "6h"),
    ] {
        assert_eq!(
            a.sh(&format!(
                "systemctl show -p Nice -p OOMScoreAdjust -p IOSchedulingPriority -p TimeoutStartUSec -p KillSignal {unit}"
            ))
            .ok()
            .stdout(),
            format!("TimeoutStartUSec={timeout}\nOOMScoreAdjust=500\nNice=10\nIOSchedulingPriority=7\nKillSignal=2\n"),
            "{unit}"
        );
    }
    a.sh("test -f /etc/box/tmux-inner.conf && test -f /etc/base-flake/flake.nix && \
          { grep -qx api.anthropic.com /etc/box/egress-allow.txt || \
            grep -qx api.anthropic.com /etc/box/egress-allow.txt.dist; } && \
          test -L /usr/local/bin/ag-box && test -x /usr/local/bin/ag-box && \
          test -f /opt/box/exclude.txt && test -f /opt/box/env.example && \
          test -f /opt/box/nodes.example && grep -qx 'dev.tty.legacy_tiocsti = 0' /etc/sysctl.d/90-ag-box.conf")
        .ok();
    assert_eq!(
        a.sh("/usr/local/bin/ag-box --version").ok().stdout().trim(),
        local_version()
    );
    // idempotent
    a.sh(&format!("bash {src}/install.sh")).ok();

    // No box of the cluster up here (leftovers of a failed test are parked first): the unit
    // succeeds and says why it did nothing.
    let ls = a.sh("ag-box ls --json").ok().stdout();
    let boxes: serde_json::Value = serde_json::from_str(&ls).unwrap();
    for row in boxes["boxes"].as_array().unwrap() {
        if row["running_here"] == true {
            a.sh(&format!("ag-box park {}", row["name"].as_str().unwrap()))
                .ok();
        }
    }
    let skip = "no active boxes on this node, skipping";
    let journal = run_snapshot_unit(a, skip);
    assert!(
        journal.contains(skip),
        "journal of box-snapshot.service:\n{journal}"
    );

    // One active box: the unit snapshots it and renews its lease.
    let name = "inst";
    c.parked_box(name);
    let _park = Parks(a, name);
    // Completion in bash: verbs, then box names from the store; the man pages are there.
    let complete_with = |env: &[(&str, &str)], words: &str| {
        a.sh_env(env, &format!(
            "source /usr/share/bash-completion/completions/ag-box
             COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_TYPE=9
             _clap_complete_ag_box ag-box \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        ))
        .ok()
        .stdout()
    };
    let complete = |words: &str| complete_with(&[], words);
    assert_eq!(complete("ag-box pa"), "park\n");
    assert!(
        complete("ag-box attach ''").lines().any(|l| l == name),
        "{name} not completed"
    );
    // The store out of reach: the names this node last listed, at once.
    let offline = complete_with(
        &[("BOX_S3_ENDPOINT", "http://10.200.0.1:5999")],
        "ag-box up ''",
    );
    assert!(
        offline.lines().any(|l| l == name),
        "{name} not completed offline: {offline}"
    );
    a.sh(
        "grep -q '^.TH ag-box-up 1' /usr/local/share/man/man1/ag-box-up.1 && \
          test -s /usr/share/zsh/vendor-completions/_ag-box && \
          test -s /usr/share/fish/vendor_completions.d/ag-box.fish",
    )
    .ok();
    // Every man page has the sections a man page has.
    let sections = a
        .sh("for f in /usr/local/share/man/man1/ag-box*.1; do for s in 'EXIT STATUS' ENVIRONMENT FILES 'SEE ALSO' EXAMPLES; do grep -q \"^.SH \\\"*$s\" $f || echo \"$f lacks $s\"; done; done; ls /usr/local/share/man/man1/ag-box*.1 | wc -l")
        .ok()
        .stdout();
    assert!(
        sections.trim().parse::<u32>().is_ok_and(|n| n > 20),
        "{sections}"
    );
    // In an interactive bash (a login shell in a terminal, as over ssh), <Tab> completes a
    // verb, a box name, a `set` key and a snapshot id.
    let tab = |line: &str, expect: &str| {
        let screen = a
            .sh(&format!(
                "tmux -L tabs kill-server 2>/dev/null || true; tmux -L tabs new-session -d -x 200 -y 10 'bash -l'
                 sleep 1; tmux -L tabs send-keys '{line}' Tab
                 for i in $(seq 100); do tmux -L tabs capture-pane -p | grep -qF -- '{expect}' && break; sleep 0.1; done
                 tmux -L tabs capture-pane -p; tmux -L tabs kill-server"
            ))
            .ok()
            .stdout();
        assert!(
            screen.contains(expect),
            "{line:?} + Tab did not become {expect:?}:\n{screen}"
        );
    };
    // (The screen keeps no trailing space: each expectation is longer than what was typed.)
    tab("ag-box snaps", "ag-box snapshot");
    tab(
        &format!("ag-box attach {}", &name[..3]),
        &format!("ag-box attach {name}"),
    );
    tab(
        &format!("ag-box set {name} netw"),
        &format!("ag-box set {name} network="),
    );
    let snap = common::box_row(a, name).unwrap()["last_snapshot"]["id"]
        .as_str()
        .unwrap()[..8]
        .to_string();
    tab(
        &format!("ag-box rollback {name} {}", &snap[..6]),
        &format!("ag-box rollback {name} {snap}"),
    );
    a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    let before = renewed_at(&c, name);
    std::thread::sleep(Duration::from_millis(2100));
    let journal = run_snapshot_unit(a, &format!("{name} "));
    assert!(
        journal.lines().any(|l| l.starts_with(&format!("{name} "))),
        "no snapshot line for {name} in the journal:\n{journal}"
    );
    let after = renewed_at(&c, name);
    assert!(after > before, "renewed_at {before} -> {after}");
    // The timer's next run, 5 minutes on: the box is not due (BOX_SNAPSHOT_EVERY, 15 min), so
    // no restic and no store write; once its last turn is 20 minutes old, it is.
    let skip = "no active box is due for a snapshot (every 15m, BOX_SNAPSHOT_EVERY), skipping";
    let journal = run_snapshot_unit(a, skip);
    assert!(journal.contains(skip), "{journal}");
    assert_eq!(renewed_at(&c, name), after);
    a.sh(&format!(
        "touch -d '20 minutes ago' /var/lib/ag-box/local/snapshot-turns/{name}"
    ))
    .ok();
    a_stuck_snapshot_is_ended_and_the_next_hour_takes_it(&c, name);
    a.sh(&format!("ag-box park {name}")).ok();
}

/// Ends the drop-in and the fault rule `stuck_snapshot_unit` sets, even when the test fails.
struct Unstuck<'a>(&'a Node);

impl Drop for Unstuck<'_> {
    fn drop(&mut self) {
        self.0.sh(&format!(
            "rm -rf {DROP_IN}; systemctl daemon-reload; systemctl reset-failed box-snapshot.service
             curl -sf -X POST http://10.200.0.1:5002/__faults -d '[]' >/dev/null || true"
        ));
    }
}

const DROP_IN: &str = "/run/systemd/system/box-snapshot.service.d";

/// box-snapshot.service whose snapshot hangs (its restic's snapshot upload is held by the fault
/// proxy, and the unit's start timeout is 3 s instead of 50 min): systemd ends it, the box runs
/// on with its lease and last snapshot as they were, no restic lock is left, and the next run
/// snapshots it.
fn a_stuck_snapshot_is_ended_and_the_next_hour_takes_it(c: &Cluster, name: &str) {
    let a = &c.a;
    let unstuck = Unstuck(a);
    a.sh(&format!(
        "mkdir -p {DROP_IN} && printf '[Service]\nTimeoutStartSec=3s\nTimeoutStopSec=20s\nEnvironment=BOX_S3_ENDPOINT=http://10.200.0.1:5002\n' \
           > {DROP_IN}/stuck.conf && systemctl daemon-reload
         curl -sf -X POST http://10.200.0.1:5002/__faults -d \
           '[{{\"method\":\"PUT\",\"path\":\"/agent-boxes/restic/snapshots/\",\"action\":\"stall_after\",\"seconds\":25,\"count\":1}}]' >/dev/null
         ag-box exec {name} -- sh -c 'date > stuck.txt'"
    ))
    .ok();
    let row = || common::box_row(a, name).unwrap_or_else(|| panic!("box {name} not in ls --json"));
    let before = row();
    let locks_before = common::restic_locks(a);
    let start = a.sh("systemctl start box-snapshot.service");
    assert_ne!(start.code(), 0, "{}", start.stdout());
    assert_eq!(
        a.sh("systemctl show -p Result --value box-snapshot.service")
            .ok()
            .stdout()
            .trim(),
        "timeout"
    );
    let after = row();
    assert_eq!(
        (&after["lease"], &after["last_snapshot"]),
        (&before["lease"], &before["last_snapshot"])
    );
    a.sh(&format!("systemctl is-active -q boxrun-{name}")).ok();
    let left = common::restic_locks_added(a, &locks_before);
    assert!(left.is_empty(), "restic locks left: {left:?}");
    drop(unstuck);
    let journal = run_snapshot_unit(a, &format!("{name} "));
    assert!(
        journal.lines().any(|l| l.starts_with(&format!("{name} "))),
        "no snapshot line for {name} in the journal after the stuck one:\n{journal}"
    );
    assert_ne!(row()["last_snapshot"], before["last_snapshot"]);
}

#[test]
fn install_to_another_node_over_ssh_and_a_damaged_bundle_is_refused() {
    // Whatever happens, node B keeps the ag-box on PATH the rig gave it (remote up needs it).
    struct Relink<'a>(&'a Node);
    impl Drop for Relink<'_> {
        fn drop(&mut self) {
            self.0
                .sh("ln -sfn /opt/box/bin/ag-box /usr/local/bin/ag-box");
        }
    }
    let Some(c) = Cluster::get() else { return };
    let b = &c.b;
    let _off = TimersOff(b);
    let _relink = Relink(b);
    // Node B as if nothing had been installed by install.sh (the rig's binary stays).
    b.sh(
        "systemctl disable --now box-snapshot.timer box-globals.timer box-prune.timer >/dev/null 2>&1 || true
          rm -f /etc/systemd/system/box-snapshot.* /etc/systemd/system/box-globals.* /etc/systemd/system/box-prune.* \
                /usr/local/bin/ag-box /etc/sysctl.d/90-ag-box.conf
          rm -rf /etc/base-flake /tmp/ag-box-install.*
          systemctl daemon-reload",
    )
    .ok();
    let inode = |n: &Node| n.sh("stat -c %i /opt/box/bin/ag-box").ok().stdout();
    let before = inode(b);

    // A bundle whose binary was damaged after SHA256SUMS was made: refused, nothing installed.
    let bad = stage("nodeB", "ag-box-bad");
    let host_bad = node_dir("nodeB").join("root/ag-box-bad");
    let st = Command::new("sh")
        .arg("-c")
        .arg("sha256sum bin/ag-box > SHA256SUMS && printf x >> bin/ag-box")
        .current_dir(&host_bad)
        .status()
        .unwrap();
    assert!(st.success());
    let out = b.sh(&format!("bash {bad}/install.sh"));
    assert_code(&out, 1, "checksum mismatch");
    assert_eq!(inode(b), before, "/opt/box/bin/ag-box was replaced");
    b.sh("test ! -e /usr/local/bin/ag-box && test ! -e /etc/base-flake && \
          test ! -e /etc/systemd/system/box-snapshot.timer && test ! -e /etc/sysctl.d/90-ag-box.conf")
        .ok();
    let _ = std::fs::remove_dir_all(&host_bad);

    // install.sh --to nodeB, run on node A over the rig's ssh.
    let src = stage("nodeA", "ag-box-src-to");
    let out = c.a.sh(&format!("bash {src}/install.sh --to nodeB"));
    out.ok();
    let err = out.stderr();
    let version = local_version();
    assert!(
        err.contains(&format!("nodeB: {version} installed")),
        "stderr:\n{err}"
    );
    assert!(err.contains("bundle checksum ok"), "stderr:\n{err}");
    let bundle = err
        .lines()
        .find_map(|l| l.split_once("installing the bundle in ").map(|(_, d)| d))
        .unwrap_or_else(|| panic!("no bundle dir in stderr:\n{err}"))
        .trim()
        .to_string();
    assert!(bundle.contains("/ag-box-install."), "{bundle}");
    b.sh(&format!(
        "test ! -e {bundle} && ! ls -d /tmp/ag-box-install.* 2>/dev/null"
    ))
    .ok();
    assert_ne!(inode(b), before, "/opt/box/bin/ag-box was not reinstalled");
    assert_eq!(
        b.sh("/usr/local/bin/ag-box --version").ok().stdout().trim(),
        version
    );
    assert_eq!(b.sh("ag-box --version").ok().stdout().trim(), version);
    b.sh(
        "test -f /etc/base-flake/flake.nix && test -f /etc/box/tmux-inner.conf && \
          systemctl is-enabled -q box-snapshot.timer box-globals.timer box-prune.timer",
    )
    .ok();
    // the bundle that --to made locally is gone too
    c.a.sh("! ls -d /tmp/ag-box-bundle.* 2>/dev/null").ok();
}
