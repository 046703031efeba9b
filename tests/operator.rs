//! The operator's day on the rig: a box's history and events seen from any node, attach and exec
//! that follow the box to the node it runs on.
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use common::{Checked, Cluster, Node, Target, assert_code};
use serde_json::Value;

fn history(n: &Node, name: &str) -> Value {
    let out = n.sh(&format!("ag-box history {name} --events --json"));
    serde_json::from_str(&out.ok().stdout()).unwrap()
}

/// The verbs of the events, newest first, repeats of one verb in a row counted once (a `park`
/// takes one snapshot or two).
fn verbs(h: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in h["entries"].as_array().unwrap() {
        if e["kind"] == "event" {
            let v = e["verb"].as_str().unwrap().to_string();
            if out.last() != Some(&v) {
                out.push(v);
            }
        }
    }
    out
}

#[test]
fn history_shows_snapshots_and_a_force_take_over_from_both_nodes() {
    let Some(c) = Cluster::get() else { return };
    let name = "hist";
    c.parked_box(name);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    c.b.sh(&format!("ag-box up {name} --node nodeB --force"))
        .ok();
    // A's box runs on, its lease gone: its snapshot is a fork, and so is the one its park takes.
    assert_code(&c.a.sh(&format!("ag-box snapshot {name}")), 3, "fork");
    assert_code(&c.a.sh(&format!("ag-box park {name}")), 3, "taken over");
    c.b.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo b > b.txt' && ag-box park {name}"
    ))
    .ok();

    let (ha, hb) = (history(&c.a, name), history(&c.b, name));
    assert_eq!(ha, hb, "the same history from both nodes");
    assert_eq!(ha["schema_version"], 1);
    let mut seen = verbs(&ha);
    if seen.last().map(String::as_str) == Some("drop") {
        seen.pop(); // an earlier run's box of this name, dropped by `parked_box`
    }
    assert_eq!(
        seen,
        [
            "park",
            "snapshot",
            "fork",
            "take-over",
            "up",
            // parked as tracked: nothing changed, so no second snapshot
            "park",
            "track",
            "snapshot"
        ]
    );
    let entries = ha["entries"].as_array().unwrap();
    let take_over = entries.iter().find(|e| e["verb"] == "take-over").unwrap();
    assert_eq!(take_over["node"], "nodeB");
    assert!(
        take_over["detail"]
            .as_str()
            .unwrap()
            .contains("from node nodeA"),
        "{take_over}"
    );
    let snaps: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "snapshot").collect();
    let latest: Vec<&&Value> = snaps.iter().filter(|s| s["latest"] == true).collect();
    let record = common::box_row(&c.a, name).unwrap();
    let short = |v: &Value| v.as_str().unwrap()[..8].to_string();
    assert_eq!(latest.len(), 1);
    assert_eq!(
        short(&latest[0]["id"]),
        short(&record["last_snapshot"]["id"])
    );
    assert_eq!(
        (
            latest[0]["node"].as_str(),
            snaps[0]["id"] == latest[0]["id"]
        ),
        (Some("nodeB"), true),
        "the newest snapshot is B's park"
    );
    let forks: Vec<&&Value> = snaps.iter().filter(|s| s["fork"] == true).collect();
    assert_eq!(forks.len(), 2, "{snaps:?}");
    assert!(forks.iter().all(|f| f["node"] == "nodeA"));
    assert!(
        snaps
            .iter()
            .all(|s| s["files_added"].is_u64() && s["bytes_added"].is_u64()),
        "what every snapshot added, on restic 0.14 too: {snaps:?}"
    );
    let text =
        c.a.sh(&format!("ag-box history {name} --events"))
            .ok()
            .stdout();
    assert!(
        text.contains("take-over by root: took the lease from node nodeA (epoch")
            && text.contains("(latest: what 'up' restores)"),
        "{text}"
    );
}

#[test]
fn attach_and_exec_follow_the_box_to_the_node_running_it() {
    let Some(c) = Cluster::get() else { return };
    let name = "follow";
    c.parked_box(name);
    assert_code(
        &c.b.sh(&format!("ag-box attach {name}")),
        1,
        &format!(
            "box '{name}' is parked (no node runs it); hint: start it with 'ag-box up {name}'"
        ),
    );
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();

    // attach on B, in a real terminal there, the moment up returned: what is typed runs in
    // the box on A.
    let screen = common::attach_and_type(&c.b, name);
    assert!(
        screen.contains("running 'attach' there over ssh") && screen.contains("attach-exit=0"),
        "{screen}"
    );

    // exec on B runs in the box on A: arguments as typed, output and exit code passed back.
    let out = c.b.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo \"a  b\" > from-b.txt; cat src/main.txt; exit 7'"
    ));
    assert_code(
        &out,
        7,
        &format!("box '{name}' is up on node nodeA; running 'exec' there over ssh (nodeA)"),
    );
    assert_eq!(out.stdout(), "v1\n");
    assert_eq!(
        c.a.sh(&format!("cat /root/{name}/from-b.txt"))
            .ok()
            .stdout(),
        "a  b\n"
    );

    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// The id a `snapshot` or `park` printed (`<name> <id>`).
fn printed_id(out: &std::process::Output) -> String {
    out.stdout()
        .split_whitespace()
        .nth(1)
        .expect("a snapshot id on stdout")
        .to_string()
}

#[test]
fn diff_and_rollback_of_a_running_box_and_the_undo_of_the_rollback() {
    let Some(c) = Cluster::get() else { return };
    let name = "undo";
    let a = &c.a;
    c.parked_box(name);
    let s1 = common::box_row(a, name).unwrap()["last_snapshot"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let exec = |script: &str| {
        a.sh(&format!("ag-box exec {name} -- sh -c '{script}'"))
            .ok()
            .stdout()
    };
    a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    exec("echo v2 > src/main.txt; echo new > added.txt");
    let s2 = printed_id(a.sh(&format!("ag-box snapshot {name}")).ok());
    exec("rm added.txt; echo v3 > src/main.txt; echo big > big.txt");
    let s3 = printed_id(a.sh(&format!("ag-box snapshot {name}")).ok());

    let p = format!("/root/{name}");
    let diff = a.sh(&format!("ag-box diff {name} {} {}", &s1[..8], &s2[..8]));
    assert_eq!(
        diff.ok().stdout(),
        format!("+ {p}/added.txt  (4 B)\nM {p}/src/main.txt  (3 B -> 3 B)\n")
    );
    assert!(
        diff.stderr().contains("1 added, 0 removed, 1 modified"),
        "{}",
        diff.stderr()
    );
    exec("echo wip > wip.txt");
    let wip = a.sh(&format!("ag-box diff {name}"));
    assert!(
        wip.ok()
            .stdout()
            .lines()
            .any(|l| l == format!("+ {p}/wip.txt  (4 B)"))
            && wip.stderr().contains("to the working copy on nodeA"),
        "{}{}",
        wip.stdout(),
        wip.stderr()
    );
    assert!(
        !wip.stdout().contains(&format!("{p}/src/main.txt")),
        "{}",
        wip.stdout()
    );

    // A running box is not restarted unasked: without a terminal to ask on, --yes says so.
    let before = a.sh(&format!("cat {p}/src/main.txt")).ok().stdout();
    assert_code(
        &a.sh(&format!("ag-box rollback {name} {}", &s1[..8])),
        2,
        &format!(
            "box '{name}' is running: a rollback stops it and starts it again at snapshot {}; hint: add --yes",
            &s1[..8]
        ),
    );
    assert!(c.active("nodeA", name));
    assert_eq!(a.sh(&format!("cat {p}/src/main.txt")).ok().stdout(), before);
    // The holder rolls the running box back to the first snapshot...
    let back = a.sh(&format!("ag-box rollback {name} {} --yes", &s1[..8]));
    back.ok();
    let undo_id = back
        .stderr()
        .split("'ag-box rollback undo ")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .unwrap_or_else(|| panic!("no undo named:\n{}", back.stderr()))
        .to_string();
    assert!(c.active("nodeA", name), "started again");
    assert_eq!(
        exec("cat src/main.txt; ls"),
        "v1\nsrc\n",
        "the first snapshot's files, and only them"
    );
    // ... and undoes it: the state it replaced, work in no snapshot then included.
    a.sh(&format!("ag-box rollback {name} {undo_id} --yes"))
        .ok();
    assert_eq!(
        exec("cat src/main.txt wip.txt; ls"),
        "v3\nwip\nbig.txt\nsrc\nwip.txt\n"
    );
    // Rolling back to where the box already is does nothing: no restart, no undo.
    let sleeper = exec("sleep 600 </dev/null >/dev/null 2>&1 & echo $!");
    let again = a.sh(&format!("ag-box rollback {name} {undo_id} --yes"));
    assert_code(
        &again,
        0,
        &format!(
            "box '{name}' is already at snapshot {undo_id}, and its copy here has not changed since; nothing to roll back"
        ),
    );
    assert!(
        !again.stderr().contains("undoes this"),
        "{}",
        again.stderr()
    );
    assert_eq!(
        exec(&format!("kill -0 {} && echo same-box", sleeper.trim())),
        "same-box\n",
        "the box was restarted"
    );

    // --to: a copy elsewhere, the box untouched.
    a.sh(&format!(
        "rm -rf /root/{name}-s2; ag-box rollback {name} {} --to /root/{name}-s2",
        &s2[..8]
    ))
    .ok();
    assert_eq!(
        a.sh(&format!(
            "cat /root/{name}-s2{p}/src/main.txt /root/{name}-s2{p}/added.txt; cat {p}/src/main.txt"
        ))
        .ok()
        .stdout(),
        "v2\nnew\nv3\n"
    );
    assert_code(
        &a.sh(&format!(
            "ag-box rollback {name} {} --to /root/{name}-s2",
            &s3[..8]
        )),
        2,
        "is not an empty directory",
    );
    let events = a
        .sh(&format!("ag-box history {name} --events"))
        .ok()
        .stdout();
    assert_eq!(events.matches(" rollback by ").count(), 2, "{events}");
    a.sh(&format!("ag-box park {name}; rm -rf /root/{name}-s2"))
        .ok();
}
