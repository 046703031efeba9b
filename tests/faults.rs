//! Nothing is lost and nothing runs twice: `up` and `park` cut off at each step (the binary's
//! crash points abort as a kill -9 would), a node whose lease was taken, partial snapshots.
//! After each cut, the operator's obvious next command succeeds, and every file is in the box's
//! last snapshot, on the holder's disk, or in a fork snapshot the tool named.

mod common;

use common::{Checked, Cluster, Host, Node, Target, assert_code, box_row, whole_snapshot_done};

const RESTIC_ENV: &str = "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/restic \
    RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test";

/// Run `script` on `n` with the crash point armed; it must die there.
fn cut_at(n: &Node, point: &str, script: &str) {
    use std::os::unix::process::ExitStatusExt;
    let out = n.sh_env(&[("AG_BOX_CRASH_AT", point)], script);
    // SIGABRT: seen as the signal itself, or as 134 through a shell.
    assert!(
        out.status.signal() == Some(6) || out.code() == 134,
        "{point}: expected an abort, got {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout(),
        out.stderr()
    );
    assert!(
        out.stderr().contains(&format!("crash point {point}")),
        "{}",
        out.stderr()
    );
}

/// Every fork snapshot's files of a box, as restic lists them.
fn fork_files(n: &Node, name: &str) -> String {
    n.sh(&format!(
        "{RESTIC_ENV}; for id in $(restic snapshots --tag box:{name},fork --json | grep -o '\"short_id\":\"[^\"]*\"' | cut -d'\"' -f4); do \
         restic ls $id; done"
    ))
    .ok()
    .stdout()
}

/// Box `name` up on nodeA with a change that only the next park can carry: `late.txt`
/// holding `text`.
fn up_on_a_with_late_change(c: &Cluster, name: &str, text: &str) {
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo {text} > late.txt'"
    ))
    .ok();
}

#[test]
fn an_up_cut_off_at_any_step_is_finished_by_the_next_up() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-up";
    for point in [
        "up.after-intent",
        "up.after-lease",
        "up.after-fork",
        "restore.after-staging",
        "restore.mid-swap",
        "up.before-start",
    ] {
        // B's work is the box's latest; A holds an older copy with an edit in no snapshot.
        c.parked_box(name);
        c.b.sh(&format!(
            "ag-box up {name} --node nodeB && ag-box exec {name} -- sh -c 'echo from-b > b.txt' && ag-box park {name}"
        ))
        .ok();
        c.a.sh(&format!("echo {point} > /root/{name}/a-edit.txt"))
            .ok();

        // The whole snapshot through a staging dir, even where a delta would do.
        cut_at(
            &c.a,
            point,
            &format!("AG_BOX_FULL_RESTORE=1 ag-box up {name} --node nodeA"),
        );
        assert!(
            !c.active("nodeA", name),
            "{point}: a cut-off up started the box"
        );
        if point != "up.after-intent" {
            // The cut-off up holds the lease: the other node is told so, and starts nothing.
            assert_code(
                &c.b.sh(&format!("ag-box up {name} --node nodeB")),
                3,
                "is up on node nodeA",
            );
        }

        let next = c.a.sh(&format!("ag-box up {name} --node nodeA"));
        next.ok();
        assert!(c.active("nodeA", name), "{point}: {}", next.stderr());
        assert_eq!(
            c.a.sh(&format!(
                "cat /root/{name}/b.txt /root/{name}/src/main.txt; test -e /root/{name}/a-edit.txt && echo EDIT-STILL-LIVE; \
                 ls -a /root | grep -c '^\\.{name}\\.ag-box-' || true"
            ))
            .ok()
            .stdout(),
            "from-b\nv1\n0\n",
            "{point}: the box's latest files, and no leftovers beside them"
        );
        assert!(
            fork_files(&c.a, name).contains(&format!("/root/{name}/a-edit.txt")),
            "{point}: A's edit is in no fork snapshot"
        );
        c.a.sh(&format!("ag-box park {name}")).ok();
    }
    c.a.sh(&format!("{RESTIC_ENV}; restic check")).ok();
}

#[test]
fn a_rollback_cut_off_leaves_the_box_at_one_state_or_the_other_and_the_next_up_starts_it() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-rollback";
    let first = |c: &Cluster| {
        common::box_row(&c.a, name).unwrap()["last_snapshot"]["id"]
            .as_str()
            .unwrap()[..8]
            .to_string()
    };
    // Before the record moved: the box keeps its work and starts as it was.
    c.parked_box(name);
    let s1 = first(&c);
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo work > src/main.txt'"
    ))
    .ok();
    cut_at(
        &c.a,
        "rollback.after-snapshot",
        &format!("ag-box rollback {name} {s1} --yes"),
    );
    assert!(!c.active("nodeA", name));
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(
        c.a.sh(&format!("cat /root/{name}/src/main.txt"))
            .ok()
            .stdout(),
        "work\n"
    );
    // After the record moved: the next up finishes the rollback.
    cut_at(
        &c.a,
        "rollback.after-point-back",
        &format!("ag-box rollback {name} {s1} --yes"),
    );
    assert!(!c.active("nodeA", name));
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(
        c.a.sh(&format!("cat /root/{name}/src/main.txt"))
            .ok()
            .stdout(),
        "v1\n"
    );
    c.a.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn a_delta_restore_cut_off_is_finished_by_the_next_up_without_a_fork() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-in-place";
    // B (restic 0.17+, rig.sh) holds an older copy; A's snapshot is the box's latest.
    c.parked_box(name);
    c.b.sh(&format!(
        "ag-box up {name} --node nodeB && ag-box exec {name} -- sh -c 'echo old > gone.txt' && ag-box park {name}"
    ))
    .ok();
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'rm gone.txt; echo from-a > a.txt' && ag-box park {name}"
    ))
    .ok();
    // B's copy equals its last snapshot: what A changed since is all B writes, cut midway.
    cut_at(
        &c.b,
        "restore.mid-delta",
        &format!("ag-box up {name} --node nodeB"),
    );
    assert!(!c.active("nodeB", name), "started on a half-restored copy");
    let next = c.b.sh(&format!("ag-box up {name} --node nodeB"));
    next.ok();
    assert!(
        next.stderr().contains("did not finish")
            && next.stderr().contains("in place")
            && !next.stderr().contains("fork snapshot"),
        "{}",
        next.stderr()
    );
    assert_eq!(
        c.b.sh(&format!(
            "cd /root/{name}; cat a.txt src/main.txt; test -e gone.txt && echo GONE-STILL-THERE; \
             ls -a /root | grep -c '^\\.{name}\\.ag-box-' || true"
        ))
        .ok()
        .stdout(),
        "from-a\nv1\n0\n"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn a_park_cut_off_at_any_step_is_finished_by_the_next_park() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-park";
    // A quick park (what changed alone, then release), and one that saves the box whole.
    for (quick, point) in [
        ("true", "park.after-stop"),
        ("true", "park.after-changes"),
        ("true", "park.before-release"),
        ("false", "park.after-snapshot"),
        ("false", "park.after-stop"),
        ("false", "park.before-release"),
    ] {
        c.parked_box(name);
        up_on_a_with_late_change(&c, name, point);
        cut_at(
            &c.a,
            point,
            &format!("BOX_QUICK_PARK={quick} ag-box park {name}"),
        );
        assert_eq!(c.holder(name).as_deref(), Some("nodeA"), "{point}");
        c.a.sh(&format!("ag-box park {name}")).ok();
        assert_eq!(c.holder(name), None, "{point}");
        assert!(!c.active("nodeA", name), "{point}");
        c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
        assert_eq!(
            c.b.sh(&format!("cat /root/{name}/late.txt")).ok().stdout(),
            format!("{point}\n")
        );
        c.b.sh(&format!("ag-box park {name}")).ok();
    }
}

/// A quick park killed after its release while the copy's manifest file is being put in
/// place (beside the rest of the park): the box is parked with its change, the next `up` here
/// and on the other node bring it, and the temp file the killed park left is swept.
#[test]
fn a_quick_park_killed_while_its_manifest_is_written_loses_nothing() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-manifest";
    c.parked_box(name);
    whole_snapshot_done(&c.a, name);
    up_on_a_with_late_change(&c, name, "late");
    cut_at(&c.a, "park.before-manifest", &format!("ag-box park {name}"));
    assert_eq!(c.holder(name), None);
    let temps = format!(
        "ls -a /var/lib/ag-box/local/manifest | grep -c '^\\.{name}\\.json\\..*\\.tmp$' || true"
    );
    assert_eq!(
        c.a.sh(&temps).ok().stdout(),
        "1\n",
        "no temp file: the cut came elsewhere"
    );
    whole_snapshot_done(&c.a, name);
    for (n, node) in [(&c.a, "nodeA"), (&c.b, "nodeB")] {
        n.sh(&format!("ag-box up {name} --node {node}")).ok();
        assert_eq!(
            n.sh(&format!("cat /root/{name}/late.txt")).ok().stdout(),
            "late\n",
            "{node}"
        );
        n.sh(&format!("ag-box park {name}")).ok();
        whole_snapshot_done(n, name);
    }
    assert_eq!(c.a.sh(&temps).ok().stdout(), "0\n");
}

/// A quick park's whole snapshot cut off after its backup: the record keeps naming the changes
/// over the snapshot before them, and another node gets them; that node's `up` cut off between
/// the snapshot before them and the changes is finished by the next `up`, without a fork.
#[test]
fn a_quick_parks_whole_snapshot_or_an_up_of_its_changes_cut_off_loses_nothing() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-finish";
    c.parked_box(name);
    whole_snapshot_done(&c.a, name);
    up_on_a_with_late_change(&c, name, "quick");
    let parked =
        c.a.sh_env(
            &[("AG_BOX_CRASH_AT", "finish.after-backup")],
            &format!("ag-box park {name} 2>&1"),
        )
        .ok()
        .stdout();
    assert!(parked.contains("what changed since snapshot"), "{parked}");
    whole_snapshot_done(&c.a, name);
    let finisher =
        c.a.sh(&format!("journalctl -q -u boxfinish-{name} --no-pager"))
            .ok()
            .stdout();
    assert!(
        finisher.contains("crash point finish.after-backup"),
        "{finisher}"
    );
    let latest = box_row(&c.b, name).unwrap()["last_snapshot"].clone();
    assert!(latest["on"]["id"].is_string(), "{latest}");
    assert_eq!(latest["same_as"], serde_json::Value::Null, "{latest}");
    // B has no copy: the snapshot before the changes first, cut off there.
    cut_at(
        &c.b,
        "up.after-whole",
        &format!("ag-box up {name} --node nodeB"),
    );
    assert_eq!(c.holder(name).as_deref(), Some("nodeB"));
    // The change reaches each node in turn, without a fork on the way.
    for (n, node) in [(&c.b, "nodeB"), (&c.a, "nodeA")] {
        n.sh(&format!("ag-box up {name} --node {node}")).ok();
        assert_eq!(
            n.sh(&format!("cat /root/{name}/late.txt")).ok().stdout(),
            "quick\n",
            "{node}"
        );
        n.sh(&format!("ag-box park {name}")).ok();
        whole_snapshot_done(n, name);
        assert_eq!(fork_files(n, name), "", "{node}");
    }
}

#[test]
fn a_node_whose_lease_was_taken_keeps_its_unsaved_work_as_a_fork() {
    let Some(c) = Cluster::get() else { return };
    let name = "taken";
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo unsaved > only-on-a.txt'"
    ))
    .ok();
    // A dies as a power cut would end it: the box gone, the lease still A's.
    c.a.sh(&format!("systemctl kill -s KILL boxrun-{name}; sleep 0.5; systemctl reset-failed boxrun-{name} 2>/dev/null || true"))
        .ok();
    c.b.sh(&format!(
        "ag-box up {name} --node nodeB --force && ag-box exec {name} -- sh -c 'echo from-b > b.txt' && ag-box park {name}"
    ))
    .ok();
    let up = c.a.sh(&format!("ag-box up {name} --node nodeA"));
    assert_code(&up, 0, "kept it as fork snapshot");
    assert_eq!(
        c.a.sh(&format!(
            "cat /root/{name}/b.txt; test -e /root/{name}/only-on-a.txt || echo replaced"
        ))
        .ok()
        .stdout(),
        "from-b\nreplaced\n"
    );
    assert!(fork_files(&c.a, name).contains(&format!("/root/{name}/only-on-a.txt")));
    c.a.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn an_emptied_project_is_not_counted_as_the_boxs_latest() {
    let Some(c) = Cluster::get() else { return };
    let name = "emptied";
    c.parked_box(name);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    let last = || common::box_row(&c.a, name).unwrap()["last_snapshot"]["id"].clone();
    let before = last();
    c.a.sh(&format!(
        "ag-box exec {name} -- sh -c 'rm -rf ./* ./.[!.]*'"
    ))
    .ok();
    assert_code(
        &c.a.sh(&format!("ag-box park {name}")),
        1,
        "is empty, but it held files at its last snapshot",
    );
    assert!(c.active("nodeA", name), "a refused park stopped the box");
    assert_eq!(c.holder(name).as_deref(), Some("nodeA"));
    assert_eq!(last(), before);
    c.a.sh(&format!("ag-box park {name} --accept-partial")).ok();
    assert_eq!(c.holder(name), None);
}

#[test]
fn a_snapshot_restic_could_not_read_whole_is_refused_unless_accepted() {
    let Some(host) = Host::new("partial") else {
        return;
    };
    let name = format!("partial-{}", std::process::id());
    let base = host.base.display().to_string();
    // restic as a node would run it, but reporting one unreadable file (its exit 3).
    host.sh(&format!(
        "set -e; mkdir -p shim home/{name}; echo data > home/{name}/f
         real=$(command -v restic)
         printf '#!/bin/sh\\n\"%s\" \"$@\" || exit $?\\ncase \"$1\" in backup) echo \"error: open {base}/home/{name}/secret.db: permission denied\" >&2; exit 3;; esac\\n' \"$real\" > shim/restic
         chmod +x shim/restic
         ag-box track {name} && ag-box up {name} && echo more >> home/{name}/f"
    ))
    .ok();
    // A whole snapshot: a quick park seals what changed without restic.
    let shimmed = format!("export PATH={base}/shim:$PATH BOX_QUICK_PARK=false; ");
    let out = host.sh(&format!("{shimmed}ag-box park {name}"));
    assert_code(&out, 1, "restic could not read open ");
    assert!(
        out.stderr().contains("secret.db: permission denied"),
        "{}",
        out.stderr()
    );
    assert!(
        host.sh(&format!("ag-box exec {name} -- true"))
            .status
            .success(),
        "a refused park stopped the box"
    );
    host.sh(&format!("{shimmed}ag-box park {name} --accept-partial"))
        .ok();
}

const PROXY: &str = "http://10.200.0.1:5002";

/// The fault rules of `tests/s3-fault-proxy.py` (a JSON list).
fn set_faults(n: &Node, rules: &str) {
    n.sh(&format!("curl -sf -X POST {PROXY}/__faults -d '{rules}'"))
        .ok();
}

/// How many faults of the current rules are still to fire (the proxy counts each one down).
fn faults_left(n: &Node) -> u64 {
    let rules = n.sh(&format!("curl -sf {PROXY}/__faults")).ok().stdout();
    let rules: serde_json::Value = serde_json::from_str(&rules).unwrap();
    rules
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .sum()
}

/// The proxy's added delay, each way, in ms (0 ends it).
fn set_latency(n: &Node, ms: u32) -> std::process::Output {
    n.sh(&format!(
        "curl -sf -X POST -d '{{\"ms\": {ms}}}' {PROXY}/__latency"
    ))
}

fn via_proxy(n: &Node, script: &str) -> std::process::Output {
    n.sh_env(&[("BOX_S3_ENDPOINT", PROXY)], script)
}

#[test]
fn record_writes_whose_answers_are_lost_are_recognised_as_ours() {
    let Some(c) = Cluster::get() else { return };
    let name = "lost";
    let rule = |method: &str, box_name: &str, action: &str, count: u32| {
        format!(
            r#"[{{"method":"{method}","path":"/agent-boxes/boxes/{box_name}/meta.json","action":"{action}","count":{count}}}]"#
        )
    };
    set_faults(&c.a, "[]");
    c.parked_box(name);

    // up: the lease write lands, its answer is lost.
    set_faults(&c.a, &rule("PUT", name, "drop_after", 1));
    via_proxy(&c.a, &format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(faults_left(&c.a), 0, "up's lease write was never cut off");
    assert!(c.active("nodeA", name));
    assert_eq!(c.holder(name).as_deref(), Some("nodeA"));

    // park: every record write (renew, renew, release) lands unanswered.
    c.a.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo kept > kept.txt'"
    ))
    .ok();
    set_faults(&c.a, &rule("PUT", name, "drop_after", 3));
    via_proxy(&c.a, &format!("ag-box park {name}")).ok();
    assert_eq!(faults_left(&c.a), 0, "park's writes were not all cut off");
    assert_eq!(c.holder(name), None);
    assert!(!c.active("nodeA", name));

    // Writes refused with 500, or cut before they reach the server: retried.
    set_faults(&c.a, &rule("PUT", name, "status500", 2));
    via_proxy(&c.a, &format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(faults_left(&c.a), 0, "up's writes were never refused");
    set_faults(&c.a, &rule("PUT", name, "drop_before", 1));
    via_proxy(&c.a, &format!("ag-box park {name}")).ok();
    assert_eq!(faults_left(&c.a), 0, "park's write was never cut");
    assert_eq!(c.holder(name), None);
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    assert_eq!(
        c.b.sh(&format!("cat /root/{name}/kept.txt")).ok().stdout(),
        "kept\n"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();

    // drop: the delete lands, its answer is lost.
    set_faults(&c.a, &rule("DELETE", name, "drop_after", 1));
    let out = via_proxy(&c.a, &format!("ag-box drop {name} --yes"));
    assert_code(&out, 0, &format!("dropped box '{name}'"));
    assert_eq!(faults_left(&c.a), 0, "drop's delete was never cut off");
    assert!(common::box_row(&c.a, name).is_none());

    // track: the create lands, its answer is lost.
    let fresh = "lost-new";
    c.a.sh(&format!(
        "rm -rf /root/{fresh} /var/lib/ag-box/local/{fresh}.json /var/lib/ag-box/homes/{fresh}; mkdir -p /root/{fresh}; echo x > /root/{fresh}/f"
    ))
    .ok();
    set_faults(&c.a, &rule("PUT", fresh, "drop_after", 1));
    via_proxy(&c.a, &format!("ag-box track {fresh}")).ok();
    assert_eq!(faults_left(&c.a), 0, "track's create was never cut off");
    assert_eq!(c.holder(fresh).as_deref(), Some("nodeA"));
    set_faults(&c.a, "[]");
    c.a.sh(&format!("ag-box park {fresh} && ag-box drop {fresh} --yes"))
        .ok();
}

/// Shell that waits (up to 10 s) until the command whose stderr goes to `log` has reached its
/// `AG_BOX_PAUSE_AT` point: a signal sent then lands in the pause, however slow the machine.
fn at_pause(log: &str) -> String {
    format!("for i in $(seq 200); do grep -qs 'pausing at' {log} && break; sleep 0.05; done")
}

#[test]
fn an_up_told_to_stop_hands_the_lease_back() {
    let Some(c) = Cluster::get() else { return };
    let name = "stopped-up";
    for signal in ["TERM", "INT", "HUP"] {
        c.parked_box(name);
        let out = c.a.sh_env(
            &[("AG_BOX_PAUSE_AT", "up.after-lease")],
            &format!(
                "set -m  # SIGINT not ignored, as a script's '&' has it
                 rm -f /tmp/stopped-up.err; ag-box up {name} --node nodeA 2>/tmp/stopped-up.err & pid=$!
                 {}
                 kill -{signal} $pid; rc=0; wait $pid || rc=$?; cat /tmp/stopped-up.err >&2; exit $rc",
                at_pause("/tmp/stopped-up.err")
            ),
        );
        assert_code(
            &out,
            1,
            &format!("interrupted by SIG{signal} before the restore"),
        );
        assert_eq!(
            c.holder(name),
            None,
            "SIG{signal}: the lease was not handed back"
        );
        assert!(!c.active("nodeA", name));
        // Nothing is left to finish: the next up is an ordinary one.
        let next = c.a.sh(&format!("ag-box up {name} --node nodeA"));
        assert!(
            !next.ok().stderr().contains("did not finish"),
            "{}",
            next.stderr()
        );
        c.a.sh(&format!("ag-box park {name}")).ok();
    }
    // Started under nohup, a hangup does not stop it.
    c.parked_box(name);
    c.a.sh_env(
        &[("AG_BOX_PAUSE_AT", "up.after-lease")],
        &format!(
            "set -m
             rm -f /tmp/nohup-up.log; nohup ag-box up {name} --node nodeA >/tmp/nohup-up.log 2>&1 & pid=$!
             {}
             kill -HUP $pid; wait $pid",
            at_pause("/tmp/nohup-up.log")
        ),
    )
    .ok();
    assert_eq!(c.holder(name).as_deref(), Some("nodeA"));
    assert!(c.active("nodeA", name));
    c.a.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn an_up_whose_caller_goes_away_still_finishes() {
    let Some(c) = Cluster::get() else { return };
    let name = "gone-caller";
    c.parked_box(name);
    // The reader of its output is gone (a dropped ssh connection) while it restores and starts.
    c.b.sh_env(
        &[("AG_BOX_PAUSE_AT", "up.after-lease")],
        &format!("ag-box up {name} --node nodeB 2>&1 | head -c 1 >/dev/null; sleep 6"),
    )
    .ok();
    assert!(c.active("nodeB", name));
    assert_eq!(c.holder(name).as_deref(), Some("nodeB"));
    assert_code(
        &c.b.sh(&format!("ag-box up {name} --node nodeB")),
        0,
        "is already up on nodeB",
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn a_project_that_is_a_mount_point_is_restored_inside_it() {
    let Some(c) = Cluster::get() else { return };
    let name = "mounted";
    let proj = format!("/root/{name}");
    let mount = format!(
        "umount {proj} 2>/dev/null || true; rm -rf {proj}; mkdir -p {proj} && mount -t tmpfs -o size=64m tmpfs {proj}"
    );
    c.c.sh(&format!("umount {proj} 2>/dev/null || true")).ok();
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo one > one.txt' && ag-box park {name}"
    ))
    .ok();
    // On C the project is a disk of its own, mounted there (empty).
    c.c.sh(&mount).ok();
    let up = c.c.sh(&format!("ag-box up {name} --node nodeC"));
    up.ok();
    let seen = c
        .c
        .sh(&format!(
            "mountpoint -q {proj} && echo mounted; cat {proj}/one.txt {proj}/src/main.txt; ls -A {proj} | grep -c ag-box || true"
        ))
        .ok()
        .stdout();
    assert_eq!(seen, "mounted\none\nv1\n0\n", "up said:\n{}", up.stderr());
    c.c.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo two > two.txt' && ag-box park {name}"
    ))
    .ok();
    // C's copy is older than the box's latest, and a restore into it (through a staging dir:
    // C's restic is 0.14) is cut half-way.
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo three > three.txt' && ag-box park {name}"
    ))
    .ok();
    cut_at(
        &c.c,
        "restore.mid-swap",
        &format!("AG_BOX_FULL_RESTORE=1 ag-box up {name} --node nodeC"),
    );
    c.c.sh(&format!("ag-box up {name} --node nodeC")).ok();
    assert_eq!(
        c.c.sh(&format!(
            "mountpoint -q {proj} && echo mounted; cat {proj}/one.txt {proj}/two.txt {proj}/three.txt; ls -A {proj} | grep -c ag-box || true"
        ))
        .ok()
        .stdout(),
        "mounted\none\ntwo\nthree\n0\n"
    );
    c.c.sh(&format!("ag-box park {name}; umount {proj}")).ok();
}

#[test]
fn a_node_that_loses_power_keeps_its_box_or_forks_it() {
    let Some(c) = Cluster::get_alone() else {
        return;
    };
    let name = "power";
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo unsaved > unsaved.txt'"
    ))
    .ok();
    c.power("power-off", "nodeA");
    assert_code(
        &c.b.sh(&format!("ag-box up {name} --node nodeB")),
        3,
        "is up on node nodeA",
    );
    c.power("power-on", "nodeA");
    // Back on its disks, A still holds the box and its copy is the newest: started as it is.
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(
        c.a.sh(&format!("cat /root/{name}/unsaved.txt"))
            .ok()
            .stdout(),
        "unsaved\n"
    );

    // Power lost again with work in no snapshot, and B takes the box over meanwhile.
    c.a.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo second > second.txt'"
    ))
    .ok();
    c.power("power-off", "nodeA");
    c.b.sh(&format!(
        "ag-box up {name} --node nodeB --force && ag-box exec {name} -- sh -c 'echo from-b > b.txt' && ag-box park {name}"
    ))
    .ok();
    c.power("power-on", "nodeA");
    let up = c.a.sh(&format!("ag-box up {name} --node nodeA"));
    assert_code(&up, 0, "kept it as fork snapshot");
    assert_eq!(
        c.a.sh(&format!("cat /root/{name}/b.txt")).ok().stdout(),
        "from-b\n"
    );
    // What A had in no snapshot, kept as the fork snapshot `up` named.
    let forks = fork_files(&c.a, name);
    for f in ["unsaved.txt", "second.txt"] {
        assert!(forks.contains(&format!("/root/{name}/{f}")), "{f}: {forks}");
    }
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// The snapshot timer's run (`snapshot --active --due`, every 5 minutes) bounds what a node
/// losing power costs: what changed after its last run, nothing before it.
#[test]
fn a_power_cut_loses_only_what_changed_since_the_timers_last_run() {
    let Some(c) = Cluster::get_alone() else {
        return;
    };
    let name = "cadence";
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo saved > by-the-timer.txt'
         BOX_SNAPSHOT_EVERY=5m ag-box snapshot --active --due
         ag-box exec {name} -- sh -c 'echo lost > after-the-timer.txt'"
    ))
    .ok();
    c.power("power-off", "nodeA");
    c.b.sh(&format!("ag-box up {name} --node nodeB --force"))
        .ok();
    let there = c.b.sh(&format!("ls /root/{name}")).ok().stdout();
    assert!(there.lines().any(|l| l == "by-the-timer.txt"), "{there}");
    assert!(
        !there.lines().any(|l| l == "after-the-timer.txt"),
        "{there}"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
    c.power("power-on", "nodeA");
    // A's copy held the lost file: its next up keeps it as a fork, not as the box's.
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box park {name}"
    ))
    .ok();
}

#[test]
fn a_drop_or_snapshot_cut_off_is_finished_by_the_next_one() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-other";
    for point in ["drop.after-mark", "drop.after-forget"] {
        c.parked_box(name);
        cut_at(&c.a, point, &format!("ag-box drop {name} --yes"));
        // Half-dropped: nothing but drop acts on it.
        assert_code(
            &c.b.sh(&format!("ag-box up {name} --node nodeB")),
            1,
            "is being dropped",
        );
        c.b.sh(&format!("ag-box drop {name} --yes")).ok();
        assert!(common::box_row(&c.a, name).is_none(), "{point}");
        let left =
            c.a.sh(&format!(
                "{RESTIC_ENV}; restic snapshots --tag box:{name} --json"
            ))
            .ok()
            .stdout();
        assert_eq!(left.trim(), "[]", "{point}: snapshots left");
    }

    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo s > s.txt'"
    ))
    .ok();
    cut_at(
        &c.a,
        "snapshot.after-backup",
        &format!("ag-box snapshot {name}"),
    );
    assert_eq!(c.holder(name).as_deref(), Some("nodeA"));
    c.a.sh(&format!("ag-box snapshot {name} && ag-box park {name}"))
        .ok();
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    assert_eq!(
        c.b.sh(&format!("cat /root/{name}/s.txt")).ok().stdout(),
        "s\n"
    );
    c.b.sh(&format!("ag-box park {name} && ag-box drop {name} --yes"))
        .ok();
}

#[test]
fn a_prune_or_a_globals_pull_cut_off_is_finished_by_the_next_one() {
    let Some(c) = Cluster::get() else { return };
    let name = "cut-prune";
    c.parked_box(name);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    for i in 0..3 {
        c.a.sh(&format!(
            "ag-box exec {name} -- sh -c 'echo {i} > n.txt' && ag-box snapshot {name}"
        ))
        .ok();
    }
    c.a.sh(&format!("ag-box park {name}")).ok();
    let keep = [
        ("BOX_KEEP_LAST", "1"),
        ("BOX_KEEP_DAILY", "0"),
        ("BOX_KEEP_WEEKLY", "0"),
    ];
    let cut = c.a.sh_env(
        &[
            keep[0],
            keep[1],
            keep[2],
            ("AG_BOX_CRASH_AT", "prune.after-forget"),
        ],
        "ag-box prune",
    );
    assert!(
        cut.stderr().contains("crash point prune.after-forget"),
        "{}",
        cut.stderr()
    );
    c.a.sh_env(&keep, "ag-box prune").ok();
    c.a.sh(&format!("{RESTIC_ENV}; restic check")).ok();
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    assert_eq!(
        c.b.sh(&format!("cat /root/{name}/n.txt")).ok().stdout(),
        "2\n"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();

    // A pull cut off after its first file: the next pull brings everything.
    let cred = "/root/.claude/.credentials.json";
    c.a.sh(&format!(
        "mkdir -p /root/.claude && echo '{{\"v\":7}}' > {cred} && printf '[user]\\n' > /root/.gitconfig && ag-box globals push"
    ))
    .ok();
    c.b.sh(&format!(
        "mkdir -p /root/.claude && echo '{{\"v\":0}}' > {cred}; rm -f /root/.gitconfig"
    ))
    .ok();
    cut_at(&c.b, "globals.mid-pull", "ag-box globals pull");
    c.b.sh("ag-box globals pull").ok();
    assert_eq!(
        c.b.sh(&format!(
            "cat {cred} /root/.gitconfig; ls -A /root | grep -c ag-box-globals || true"
        ))
        .ok()
        .stdout(),
        "{\"v\":7}\n[user]\n0\n"
    );
}

#[test]
fn a_record_write_whose_answer_stalls_past_the_timeout_is_ours() {
    let Some(c) = Cluster::get() else { return };
    let name = "stalled";
    set_faults(&c.a, "[]");
    c.parked_box(name);
    set_faults(
        &c.a,
        &format!(
            r#"[{{"method":"PUT","path":"/agent-boxes/boxes/{name}/meta.json","action":"stall_after","seconds":25,"count":1}}]"#
        ),
    );
    via_proxy(&c.a, &format!("ag-box up {name} --node nodeA")).ok();
    // The proxy counts the stall once it is over (after the up has moved on).
    let rules = c
        .a
        .sh(&format!(
            "for i in $(seq 150); do r=$(curl -sf {PROXY}/__faults || true); case $r in *'\"stalled\": 1'*) break;; esac; sleep 0.1; done; echo \"$r\""
        ))
        .ok()
        .stdout();
    assert!(
        rules.contains("\"stalled\": 1"),
        "the write was not stalled: {rules}"
    );
    set_faults(&c.a, "[]");
    assert!(c.active("nodeA", name));
    assert_eq!(c.holder(name).as_deref(), Some("nodeA"));
    c.a.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn a_node_that_loses_power_while_parking_parks_on_the_next_try() {
    let Some(c) = Cluster::get_alone() else {
        return;
    };
    let name = "power-park";
    c.parked_box(name);
    up_on_a_with_late_change(&c, name, "late");
    // The power goes while park waits between the stop and its final snapshot.
    c.a.sh_env(
        &[("AG_BOX_PAUSE_AT", "park.after-stop")],
        &format!("setsid -f ag-box park {name} </dev/null >/dev/null 2>&1"),
    )
    .ok();
    c.a.sh(&format!(
        "for i in $(seq 100); do systemctl is-active -q boxrun-{name} || exit 0; sleep 0.1; done; exit 1"
    ))
    .ok();
    c.power("power-off", "nodeA");
    c.power("power-on", "nodeA");
    c.a.sh(&format!("ag-box park {name}")).ok();
    assert_eq!(c.holder(name), None);
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    assert_eq!(
        c.b.sh(&format!("cat /root/{name}/late.txt")).ok().stdout(),
        "late\n"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn every_record_operation_survives_every_fault() {
    let Some(c) = Cluster::get() else { return };
    set_faults(&c.a, "[]");
    for fault in ["drop_after", "drop_before", "status500", "stall_after"] {
        let name = format!("op-{}", fault.replace('_', "-"));
        let rule = |method: &str| {
            format!(
                r#"[{{"method":"{method}","path":"/agent-boxes/boxes/{name}/meta.json","action":"{fault}","seconds":22,"count":1}}]"#
            )
        };
        // The fault met the operation (the rule's one use is spent).
        let fired = |op: &str| {
            let rules = c.a.sh(&format!("curl -sf {PROXY}/__faults")).ok().stdout();
            assert!(
                rules.contains("\"count\": 0"),
                "{fault}: {op} met no fault: {rules}"
            );
        };
        c.parked_box(&name);
        c.a.sh(&format!("ag-box drop {name} --yes")).ok();
        set_faults(&c.a, &rule("PUT"));
        via_proxy(&c.a, &format!("ag-box track {name}")).ok();
        fired("create");
        assert_eq!(c.holder(&name).as_deref(), Some("nodeA"), "{fault}: create");
        c.a.sh(&format!("ag-box park {name}")).ok();
        set_faults(&c.a, &rule("PUT"));
        via_proxy(&c.a, &format!("ag-box up {name} --node nodeA")).ok();
        fired("update");
        assert_eq!(c.holder(&name).as_deref(), Some("nodeA"), "{fault}: update");
        c.a.sh(&format!("ag-box park {name}")).ok();
        set_faults(&c.a, &rule("DELETE"));
        via_proxy(&c.a, &format!("ag-box drop {name} --yes")).ok();
        fired("delete");
        assert!(common::box_row(&c.a, &name).is_none(), "{fault}: delete");
    }
    set_faults(&c.a, "[]");
}

/// nodeB's `restic prune` (the daily timer's), held still while it holds the repository's
/// exclusive lock; let go (and ended) when dropped.
struct HeldPrune<'a>(&'a Node);

impl<'a> HeldPrune<'a> {
    fn start(n: &'a Node) -> HeldPrune<'a> {
        // Through the proxy, slowed, so its lock is seen before it is done; then stopped.
        set_latency(n, 150).ok();
        let held = HeldPrune(n);
        n.sh(&format!(
            "{RESTIC_ENV} RESTIC_REPOSITORY=s3:{PROXY}/agent-boxes/restic
             setsid -f sh -c 'echo $$ > /tmp/held-prune.pid; exec restic prune' </dev/null >/tmp/held-prune.log 2>&1
             {RESTIC_ENV}
             for i in $(seq 100); do
               test -n \"$(restic list locks --no-lock)\" && exec kill -STOP $(cat /tmp/held-prune.pid)
               sleep 0.1
             done
             echo no lock; cat /tmp/held-prune.log; exit 1"
        ))
        .ok();
        set_latency(n, 0).ok();
        held
    }

    /// Let it go on in `seconds`.
    fn go_on_in(&self, seconds: u32) {
        self.0
            .sh(&format!(
                "setsid -f sh -c 'sleep {seconds}; kill -CONT $(cat /tmp/held-prune.pid)' </dev/null >/dev/null 2>&1"
            ))
            .ok();
    }
}

impl Drop for HeldPrune<'_> {
    fn drop(&mut self) {
        // Unchecked: a panic here, while a failed test unwinds, would abort the run.
        set_latency(self.0, 0);
        self.0.sh("p=$(cat /tmp/held-prune.pid); kill -CONT $p
             for i in $(seq 100); do kill -0 $p 2>/dev/null || exit 0; sleep 0.1; done; kill $p");
    }
}

#[test]
fn a_snapshot_waits_for_another_nodes_prune_then_says_who_holds_the_repository() {
    let Some(c) = Cluster::get_alone() else {
        return;
    };
    let name = "lock-wait";
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'echo 1 > w.txt'"
    ))
    .ok();
    let prune = HeldPrune::start(&c.b);
    let out = c.a.sh_env(
        &[("BOX_LOCK_WAIT", "2s")],
        &format!("ag-box snapshot {name}"),
    );
    assert_code(&out, 1, "the repository is locked exclusively by PID");
    assert!(
        out.stderr().contains(" on nodeB by root")
            && out
                .stderr()
                .contains("waited 2s; BOX_LOCK_WAIT sets how long"),
        "{}",
        out.stderr()
    );
    // Waiting long enough, it goes on once the prune has ended.
    prune.go_on_in(3);
    let out = c.a.sh_env(
        &[("BOX_LOCK_WAIT", "2m")],
        &format!("ag-box snapshot {name}"),
    );
    assert_code(&out, 0, "waiting up to 2m for it");
    c.b.sh("test -z \"$(cat /tmp/held-prune.log | grep -i fatal)\"")
        .ok();
    drop(prune);
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// `ag-box snapshot` told to stop (by SIGINT or SIGTERM, sent to it alone) while its restic's
/// snapshot upload is held by the proxy: restic is told too and removes its lock before ag-box
/// goes (Debian 12's restic does so on SIGINT only, and dies if ag-box has gone first); the box,
/// its lease and last snapshot stay as they were.
#[test]
fn a_snapshot_told_to_stop_ends_its_restic_without_a_lock_left() {
    let Some(c) = Cluster::get() else { return };
    let name = "told-stop";
    c.parked_box(name);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    let row = || common::box_row(&c.a, name).unwrap();
    for signal in ["INT", "TERM"] {
        c.a.sh(&format!(
            "ag-box exec {name} -- sh -c 'date +%N > told.txt'"
        ))
        .ok();
        let before = row();
        let locks_before = common::restic_locks(&c.a);
        set_faults(
            &c.a,
            r#"[{"method":"PUT","path":"/agent-boxes/restic/snapshots/","action":"stall_after","seconds":25,"count":1}]"#,
        );
        let out = via_proxy(
            &c.a,
            &format!(
                "set -m  # its own process group, and SIGINT not ignored as a script's '&' has it
                 ag-box snapshot {name} & pid=$!
                 for i in $(seq 150); do curl -sf {PROXY}/__faults | grep -q '\"count\": 0' && break; sleep 0.1; done
                 {list_locks}; echo
                 kill -{signal} $pid; wait $pid",
                list_locks = common::LIST_LOCKS
            ),
        );
        set_faults(&c.a, "[]");
        // restic's lock, held while its upload stalls: the listing sees a lock when there is one.
        let during = common::lock_keys(&out.stdout());
        assert!(
            during.difference(&locks_before).count() > 0,
            "SIG{signal}: no restic lock was seen while the backup ran:\n{}",
            out.stdout()
        );
        assert_code(
            &out,
            1,
            &format!("interrupted by SIG{signal} before restic backup ended"),
        );
        let left = common::restic_locks_added(&c.a, &locks_before);
        assert!(left.is_empty(), "SIG{signal}: restic locks left: {left:?}");
        let after = row();
        assert_eq!(
            (&after["lease"], &after["last_snapshot"]),
            (&before["lease"], &before["last_snapshot"]),
            "SIG{signal}"
        );
        assert!(c.active("nodeA", name), "SIG{signal}: the box stopped");
    }
    c.a.sh(&format!("ag-box park {name}")).ok();
}
