//! The operator's day on the rig: a box's history and events seen from any node, attach and exec
//! that follow the box to the node it runs on.
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use common::boxtest::{BoxTest, Exit, parked_box};
use common::{Cluster, Target};
use serde_json::Value;

fn history(b: &BoxTest) -> Value {
    b.verb("history", ["--events", "--json"]).ok().json()
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
    let a = parked_box(&c, name);
    let b = BoxTest::on(&c.b, name);
    a.verb("up", ["--node", "nodeA"]).ok();
    b.verb("up", ["--node", "nodeB", "--force"]).ok();
    // A's box runs on, its lease gone: its snapshot is a fork, and so is the one its park takes.
    a.snapshot().cannot(Exit::LeaseHeld, "fork");
    a.park().cannot(Exit::LeaseHeld, "taken over");
    b.exec_sh("echo b > b.txt").ok();
    b.park().ok();
    common::whole_snapshot_done(&c.b, name);

    let (ha, hb) = (history(&a), history(&b));
    assert_eq!(ha, hb, "the same history from both nodes");
    assert_eq!(ha["schema_version"], 1);
    let mut seen = verbs(&ha);
    if seen.last().map(String::as_str) == Some("drop") {
        seen.pop(); // an earlier run's box of this name, dropped by `parked_box`
    }
    assert_eq!(
        seen,
        [
            // B's quick park, then the whole snapshot that took its changes' place
            "snapshot",
            "park",
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
    let record = a.row().unwrap();
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
    let text = a.verb("history", ["--events"]).ok().stdout();
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
    let a = parked_box(&c, name);
    let b = BoxTest::on(&c.b, name);
    b.attach().cannot(
        Exit::Failure,
        &format!(
            "box '{name}' is parked (no node runs it); hint: start it with 'ag-box up {name}'"
        ),
    );
    a.verb("up", ["--node", "nodeA"]).ok();

    // attach on B, in a real terminal there, the moment up returned: what is typed runs in
    // the box on A.
    let screen = common::attach_and_type(&c.b, name);
    assert!(
        screen.contains("running 'attach' there over ssh") && screen.contains("attach-exit=0"),
        "{screen}"
    );

    // exec on B runs in the box on A: arguments as typed, output and exit code passed back.
    b.exec_sh("echo \"a  b\" > from-b.txt; cat src/main.txt; exit 7")
        .exits(7)
        .stderr_has(&format!(
            "box '{name}' is up on node nodeA; running 'exec' there over ssh (nodeA)"
        ))
        .stdout_is("v1\n");
    assert_eq!(c.a.read(&format!("/root/{name}/from-b.txt")), "a  b\n");

    a.park().ok();
}

/// The id a `snapshot` or `park` printed (`<name> <id>`).
fn printed_id(out: &common::boxtest::Ran) -> String {
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
    let b = parked_box(&c, name);
    let a = &c.a;
    let s1 = b.row().unwrap()["last_snapshot"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let exec = |script: &str| b.exec_sh(script).ok().stdout();
    b.verb("up", ["--node", "nodeA"]).ok();
    exec("echo v2 > src/main.txt; echo new > added.txt");
    let s2 = printed_id(&b.snapshot().ok());
    exec("rm added.txt; echo v3 > src/main.txt; echo big > big.txt");
    let s3 = printed_id(&b.snapshot().ok());

    let p = b.project();
    b.verb("diff", [&s1[..8], &s2[..8]])
        .ok()
        .stdout_is(&format!(
            "+ {p}/added.txt  (4 B)\nM {p}/src/main.txt  (3 B -> 3 B)\n"
        ))
        .stderr_has("1 added, 0 removed, 1 modified");
    exec("echo wip > wip.txt");
    let wip = b
        .verb("diff", common::boxtest::NONE)
        .ok()
        .stderr_has("to the working copy on nodeA")
        .stdout_lacks(&format!("{p}/src/main.txt"));
    assert!(
        wip.stdout()
            .lines()
            .any(|l| l == format!("+ {p}/wip.txt  (4 B)")),
        "{}",
        wip.stdout()
    );

    // A running box is not restarted unasked: without a terminal to ask on, --yes says so.
    let main_txt = format!("{p}/src/main.txt");
    let before = a.read(&main_txt);
    b.verb("rollback", [&s1[..8]]).cannot(
        Exit::Usage,
        &format!(
            "box '{name}' is running: a rollback stops it and starts it again at snapshot {}; hint: add --yes",
            &s1[..8]
        ),
    );
    assert!(c.active("nodeA", name));
    assert_eq!(a.read(&main_txt), before);
    // The holder rolls the running box back to the first snapshot...
    let back = b.verb("rollback", [&s1[..8], "--yes"]).ok();
    let undo_id = back
        .stderr()
        .split("'ag-box rollback undo ")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .unwrap_or_else(|| back.fail("no undo named"))
        .to_string();
    assert!(c.active("nodeA", name), "started again");
    assert_eq!(
        exec("cat src/main.txt; ls"),
        "v1\nsrc\n",
        "the first snapshot's files, and only them"
    );
    // ... and undoes it: the state it replaced, work in no snapshot then included.
    b.verb("rollback", [undo_id.as_str(), "--yes"]).ok();
    assert_eq!(
        exec("cat src/main.txt wip.txt; ls"),
        "v3\nwip\nbig.txt\nsrc\nwip.txt\n"
    );
    // Rolling back to where the box already is does nothing: no restart, no undo.
    let sleeper = exec("sleep 600 </dev/null >/dev/null 2>&1 & echo $!");
    b.verb("rollback", [undo_id.as_str(), "--yes"])
        .ok()
        .stderr_has(&format!(
            "box '{name}' is already at snapshot {undo_id}, and its copy here has not changed since; nothing to roll back"
        ))
        .stderr_lacks("undoes this");
    assert_eq!(
        exec(&format!("kill -0 {} && echo same-box", sleeper.trim())),
        "same-box\n",
        "the box was restarted"
    );

    // --to: a copy elsewhere, the box untouched.
    let copy = format!("/root/{name}-s2");
    a.remove(&copy);
    b.verb("rollback", [&s2[..8], "--to", &copy]).ok();
    assert_eq!(
        [
            format!("{copy}{p}/src/main.txt"),
            format!("{copy}{p}/added.txt"),
            main_txt,
        ]
        .iter()
        .map(|f| a.read(f))
        .collect::<String>(),
        "v2\nnew\nv3\n"
    );
    b.verb("rollback", [&s3[..8], "--to", &copy])
        .cannot(Exit::Usage, "is not an empty directory");
    let events = b.verb("history", ["--events"]).ok().stdout();
    assert_eq!(events.matches(" rollback by ").count(), 2, "{events}");
    b.park().ok();
    a.remove(&copy);
}
