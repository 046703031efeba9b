//! The whole box lifecycle with the real binary: on a booted systemd node of the rig, and on
//! the bare host with the direct runtime.
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use std::collections::BTreeSet;

use common::{Checked, Host, Node, Target, assert_code};

fn slug(path: &str) -> String {
    path.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
}

fn lifecycle(t: &dyn Target, name: &str) {
    let home = t.home();
    let proj = format!("{home}/{name}");
    let sess = format!("{home}/.claude/projects/{}", slug(&proj));
    let fh = format!("{home}/.claude/file-history/s1-{name}");
    let own = format!("${{BOX_STATE_DIR:-/var/lib/ag-box}}/homes/{name}");
    let own_sess = format!("{own}/.claude/projects/{}", slug(&proj));
    let own_fh = format!("{own}/.claude/file-history/s1-{name}");
    let mem = [("BOX_MEMORY_MAX", "512M")];
    let restic = "RESTIC_REPOSITORY=${BOX_STATE_DIR:-/var/lib/ag-box}/restic \
                  RESTIC_PASSWORD_FILE=${BOX_STATE_DIR:-/var/lib/ag-box}/restic-password restic";
    t.sh(&format!(
        "ag-box park {name} >/dev/null 2>&1 || true; state=${{BOX_STATE_DIR:-/var/lib/ag-box}}
         rm -rf $state/meta/{name}.json $state/local/{name}.json $state/homes/{name}
         set -e; rm -rf {proj} {sess} {fh} {home}/other-{name}
         mkdir -p {proj}/src {home}/other-{name} {home}/.ssh {sess} {fh}
         echo v1 > {proj}/src/main.txt; echo node-secret > {proj}/.auth-secret
         echo keep > {home}/other-{name}/private; echo key > {home}/.ssh/id_test
         echo '{{\"type\":\"user\"}}' > {sess}/s1-{name}.jsonl; echo fh > {fh}/edit"
    ))
    .ok();

    // track: first snapshot, pinned because of .auth-secret
    t.sh(&format!("ag-box track {name}")).ok();
    let row = common::box_row(t, name).unwrap();
    assert_eq!(row["path"], proj);
    assert!(row["pinned_node"].is_string(), "{row}");

    // A bwrap that fails at the start (a stand-in that says why, as bwrap does): the up says
    // what it said, and the box and its record stay as they were.
    let bad = format!("{home}/badbin-{name}");
    let failed = t.sh(&format!(
        "mkdir -p {bad} && printf '#!/bin/sh\\necho \"bwrap: Can not find source path /gone\" >&2\\nexit 1\\n' > {bad}/bwrap
         chmod +x {bad}/bwrap; rc=0; PATH={bad}:$PATH ag-box up {name} || rc=$?; rm -rf {bad}; exit $rc"
    ));
    assert_code(
        &failed,
        1,
        &format!(
            "box '{name}' did not start (its tmux server or egress proxy never answered); \
             it said: bwrap: Can not find source path /gone"
        ),
    );
    assert_eq!(common::box_row(t, name).unwrap(), row);

    // up: unit active, tmux answers with session main in the project
    t.sh_env(&mem, &format!("ag-box up {name}")).ok();
    if t.systemd() {
        let show = t
            .sh(&format!("systemctl is-active boxrun-{name}; systemctl show boxrun-{name} -p MemoryMax -p OOMPolicy"))
            .ok()
            .stdout();
        assert_eq!(show, "active\nOOMPolicy=continue\nMemoryMax=536870912\n");
    }
    // attach the moment up returned, in a real terminal: what is typed runs in the box.
    let screen = common::attach_and_type(t, name);
    assert!(screen.contains("attach-exit=0"), "{screen}");
    // A box that shuts the client out of its tmux server: attach says so and fails.
    let sock = format!("/run/box/{name}/sock/tmux.sock");
    t.sh(&format!(
        "ag-box exec {name} -- tmux -S {sock} server-access -d ag-box-client"
    ))
    .ok();
    assert_code(
        &t.sh(&format!("ag-box attach {name}")),
        1,
        &format!(
            "box '{name}': cannot attach: its tmux server did not let the client in \
             (tmux said: access not allowed); hint: restart it"
        ),
    );
    t.sh(&format!(
        "ag-box exec {name} -- tmux -S {sock} server-access -a ag-box-client"
    ))
    .ok();
    // The pane's shell may still be starting when `up` returns: ask until it answers.
    let pane = t
        .sh(&format!(
            "for i in $(seq 50); do p=$(ag-box exec {name} -- tmux -S /run/box/{name}/sock/tmux.sock display-message -p -t main '#{{pane_current_path}}' || true); \
             [ -n \"$p\" ] && break; sleep 0.1; done; echo \"$p\""
        ))
        .ok()
        .stdout();
    assert_eq!(pane.trim(), proj);
    assert_code(&t.sh(&format!("ag-box up {name}")), 0, "already up");
    let status: serde_json::Value =
        serde_json::from_str(&t.sh("ag-box status --json --deep").ok().stdout()).unwrap();
    assert_eq!(status["schema_version"], 1);
    assert_eq!(
        (&status["tasks_max"], &status["tmpfs_max"]),
        (
            &serde_json::json!(4096),
            &serde_json::json!(2_147_483_648_u64)
        ),
        "the bounds boxes start with here"
    );
    assert_eq!(status["snapshot_add_max"], serde_json::Value::Null);
    assert_eq!(
        status["runtime"],
        if t.systemd() { "systemd" } else { "direct" }
    );
    assert!(
        status["active_boxes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b == name),
        "{status}"
    );
    assert!(status["snapshots"].as_u64().unwrap() >= 1, "{status}");
    // Without --deep, the count --deep cached, and when it was made; the repository untouched.
    let cached: serde_json::Value =
        serde_json::from_str(&t.sh("ag-box status --json").ok().stdout()).unwrap();
    assert_eq!(cached["snapshots"], status["snapshots"]);
    assert_eq!(
        cached["snapshots_counted_at"],
        status["snapshots_counted_at"]
    );
    assert!(cached["snapshots_counted_at"].is_string(), "{cached}");
    assert_eq!(
        t.sh("ag-box --version").ok().stdout(),
        format!("ag-box {}\n", env!("CARGO_PKG_VERSION"))
    );

    // The host's disks, timers and devices are not described to the box (what the node's
    // kernel has of them).
    assert_eq!(
        t.sh(&format!(
            "ag-box exec {name} -- sh -c 'for f in /proc/partitions /proc/interrupts /proc/timer_list; do \
             [ -e $f ] && echo \"$f $(head -c 1 $f | wc -c)\"; done; \
             [ -d /proc/acpi ] && ls -A /proc/acpi | wc -l; true'"
        ))
        .ok()
        .stdout(),
        t.sh(
            "for f in /proc/partitions /proc/interrupts /proc/timer_list; do [ -e $f ] && echo \"$f 0\"; done; \
             [ -d /proc/acpi ] && echo 0; true"
        )
        .ok()
        .stdout()
    );
    assert!(
        t.sh("head -c 1 /proc/partitions | wc -c").ok().stdout() == "1\n",
        "the node has partitions to hide"
    );

    // exec: writes through, runs in the project, passes exit codes
    let out = t.sh(&format!(
        "cd / && ag-box exec {name} -- sh -c 'echo made-inside > made.txt; pwd'"
    ));
    assert_eq!(out.ok().stdout(), format!("{proj}\n"));
    let out = t.sh(&format!("cd {proj}/src && ag-box exec {name} -- pwd"));
    assert_eq!(out.ok().stdout(), format!("{proj}/src\n"));
    let uid = common::uid_of(t, name);
    assert_eq!(
        t.sh(&format!(
            "cat {proj}/made.txt; stat -c %u:%g {proj}/made.txt"
        ))
        .ok()
        .stdout(),
        format!("made-inside\n{uid}:{uid}\n"),
        "files the box makes are the box user's"
    );
    assert_eq!(
        t.sh(&format!("ag-box exec {name} -- sh -c 'exit 42'"))
            .code(),
        42
    );
    // A command that is not there, or cannot run: 127 and 126, as sh and env say, naming the box.
    assert_code(
        &t.sh(&format!("ag-box exec {name} -- no-such-command")),
        127,
        &format!("ag-box: box '{name}': cannot run 'no-such-command': no such command there"),
    );
    assert_code(
        &t.sh(&format!("ag-box exec {name} -- /dev/null")),
        126,
        &format!("ag-box: box '{name}': cannot run '/dev/null': Permission denied"),
    );
    assert_eq!(
        t.sh(&format!("ag-box exec {name} -- sh -c 'kill -TERM $$'"))
            .code(),
        143
    );
    if t.systemd() {
        // exec'd commands count against the box's MemoryMax (512M) like the rest of the box
        let hog = t.sh(&format!(
            "ag-box exec {name} -- python3 -c 'b = b\"x\" * (700 << 20)'"
        ));
        assert_eq!(hog.code(), 137, "{}", hog.stderr());
        assert_eq!(
            t.sh(&format!("systemctl is-active boxrun-{name}")).stdout(),
            "active\n"
        );
    }

    // network: the box's own, with only its proxy; the metadata address is refused there (no
    // packet leaves), and a killed proxy is started again by the unit or the supervisor
    let metadata = format!(
        "ag-box exec {name} -- curl -s -o /dev/null -w '%{{http_code}}' http://169.254.169.254/latest/"
    );
    assert_eq!(t.sh(&metadata).ok().stdout(), "403");
    let egress: serde_json::Value =
        serde_json::from_str(&t.sh(&format!("ag-box egress {name} --json")).ok().stdout()).unwrap();
    assert_eq!(egress["proxy_answers"], true, "{egress}");
    assert_eq!(
        egress["decisions"][0]["reason"], "cloud metadata address 169.254.169.254:80 is not listed",
        "{egress}"
    );
    t.sh(&format!("pkill -KILL -f -- '__proxy --box {name} '"))
        .ok();
    assert_eq!(
        t.sh(&format!(
            "for i in $(seq 200); do c=$({metadata} || true); [ \"$c\" = 403 ] && break; sleep 0.05; done; echo $c"
        ))
        .ok()
        .stdout()
        .trim(),
        "403",
        "the proxy came back"
    );

    // isolation: other projects and ~/.ssh are invisible, home holds only the box's binds (each
    // "cannot" answered by the box, of what is there on the host, ag-box's exec itself succeeding)
    let absent = |path: &str| {
        t.sh(&format!(
            "test -e {path} && ag-box exec {name} -- sh -c 'test -e {path} && echo present || echo absent'"
        ))
        .ok()
        .stdout()
    };
    assert_eq!(absent(&format!("{home}/other-{name}")), "absent\n");
    assert_eq!(absent(&format!("{home}/.ssh")), "absent\n");
    let listing = t
        .sh(&format!("ag-box exec {name} -- ls -A {home}"))
        .ok()
        .stdout();
    let seen: BTreeSet<&str> = listing.lines().collect();
    // The box's own binds, plus the read-only agent config the host happens to have.
    let allowed = BTreeSet::from([
        ".claude",
        ".codex",
        ".grok",
        ".gemini",
        name,
        ".local",
        ".gitconfig",
        ".config",
        ".claude.json",
    ]);
    assert!(
        seen.is_subset(&allowed) && seen.contains(name) && seen.contains(".claude"),
        "{seen:?}"
    );
    assert_eq!(
        t.sh(&format!(
            "ag-box exec {name} -- sh -c 'touch /usr/x 2>/dev/null && echo wrote || echo refused'"
        ))
        .ok()
        .stdout(),
        "refused\n"
    );

    // the agent writes a new session inside the box
    t.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo {{}} > {sess}/s2-{name}.jsonl'"
    ))
    .ok();
    let taken = t.sh(&format!("ag-box snapshot {name}")).ok().stdout();
    // Nothing new since: the same snapshot, and the line says so.
    let again = t.sh(&format!("ag-box snapshot {name}")).ok().stdout();
    assert_eq!(again, format!("{} unchanged\n", taken.trim_end()));

    // Another tool on the node makes a network namespace of its own while the box runs
    // (iproute2 then bind-mounts /run/netns over itself): the box parks, and comes up again.
    t.sh(&format!(
        "ip netns add other-tool-{name} && ip netns exec other-tool-{name} true"
    ))
    .ok();

    // park: the unit is gone and the lease released
    t.sh(&format!("ag-box park {name}")).ok();
    if t.systemd() {
        assert_ne!(
            t.sh(&format!("systemctl is-active boxrun-{name}"))
                .stdout()
                .trim(),
            "active"
        );
    }
    assert_code(
        &t.sh(&format!("ag-box exec {name} -- true")),
        1,
        "is parked (no node runs it)",
    );
    let ls = t.sh("ag-box ls --json").ok().stdout();
    assert!(ls.contains("\"lease\": null"), "{ls}");
    // its network namespace is released with it
    t.sh(&format!("test ! -e /run/box/.netns/{name}")).ok();

    // wipe the project and the box's agent home; up restores both (and starts it, the other
    // tool's namespace still there)
    t.sh(&format!("rm -rf {proj} {own}")).ok();
    t.sh_env(&mem, &format!("ag-box up {name}")).ok();
    t.sh(&format!("ip netns del other-tool-{name}")).ok();
    let restored = t
        .sh(&format!(
            "cat {proj}/made.txt {proj}/src/main.txt {own_sess}/s1-{name}.jsonl {own_sess}/s2-{name}.jsonl {own_fh}/edit; \
             test -e {proj}/.auth-secret && echo AUTH-SECRET-PRESENT; true"
        ))
        .ok()
        .stdout();
    assert_eq!(restored, "made-inside\nv1\n{\"type\":\"user\"}\n{}\nfh\n");
    if t.systemd() {
        assert_eq!(
            t.sh(&format!("systemctl is-active boxrun-{name}")).stdout(),
            "active\n"
        );
    }
    t.sh(&format!("ag-box park {name}")).ok();

    // nothing active: the hourly timer's call succeeds
    assert_code(
        &t.sh("ag-box snapshot --active"),
        0,
        "no active boxes on this node, skipping",
    );

    // .auth-secret is in no snapshot of the box
    let found = t
        .sh(&format!(
            "set -e; ids=$({restic} snapshots --tag box:{name} --json | grep -o '\"short_id\":\"[^\"]*\"' | cut -d'\"' -f4)
             test -n \"$ids\"; for id in $ids; do {restic} ls $id; done"
        ))
        .ok()
        .stdout();
    assert!(found.contains(&format!("{proj}/src/main.txt")), "{found}");
    assert!(!found.contains(".auth-secret"), "{found}");
}

#[test]
fn lifecycle_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeA") else {
        return;
    };
    lifecycle(&node, "life");
}

#[test]
fn lifecycle_with_the_direct_runtime_on_the_bare_host() {
    let Some(host) = Host::new("direct") else {
        return;
    };
    let name = format!("direct-{}", std::process::id());
    lifecycle(&host, &name);
}

#[test]
fn a_box_snapshotted_before_agent_homes_brings_its_sessions_into_its_own_home() {
    let Some(host) = Host::new("legacy") else {
        return;
    };
    let name = format!("legacy-{}", std::process::id());
    let home = host.home().to_string();
    let proj = format!("{home}/{name}");
    let sess = format!("{home}/.claude/projects/{}", slug(&proj));
    // An older ag-box snapshotted the project and its sessions where they lie in the node's
    // home, and its record names neither uid nor gid.
    host.sh(&format!(
        "set -e; mkdir -p {proj}/src {sess}; echo v1 > {proj}/src/main.txt; echo '{{\"old\":1}}' > {sess}/old.jsonl
         ag-box track {name} && ag-box park {name}
         id=$(restic backup --json --host ag-box-{name} --tag box:{name} --tag node:host --tag epoch:1 -- {proj} {sess} \
              | grep '\"message_type\":\"summary\"' | sed 's/.*\"snapshot_id\":\"\\([0-9a-f]*\\)\".*/\\1/')
         test -n \"$id\"
         python3 - state/meta/{name}.json $id <<'PY'
import json, sys
path, snap = sys.argv[1], sys.argv[2]
rec = json.load(open(path))
rec['last_snapshot']['id'] = snap
rec.pop('uid'); rec.pop('gid')
json.dump(rec, open(path, 'w'))
PY
         rm -rf {proj} {sess} state/homes/{name} state/local/{name}.json"
    ))
    .ok();
    let up = host.sh(&format!("ag-box up {name}"));
    up.ok();
    let own = format!("state/homes/{name}/.claude/projects/{}", slug(&proj));
    assert_eq!(
        host.sh(&format!(
            "cat {proj}/src/main.txt {own}/old.jsonl; stat -c %u:%g {own}/old.jsonl {proj}/src/main.txt"
        ))
        .ok()
        .stdout(),
        {
            let uid = common::uid_of(&host, &name);
            format!("v1\n{{\"old\":1}}\n{uid}:{uid}\n{uid}:{uid}\n")
        }
    );
    assert_eq!(
        host.sh(&format!("ag-box exec {name} -- cat {sess}/old.jsonl"))
            .ok()
            .stdout(),
        "{\"old\":1}\n"
    );
    host.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn a_box_dropped_right_after_track_leaves_nothing_a_new_box_of_its_name_inherits() {
    let Some(host) = Host::new("drop") else {
        return;
    };
    let name = format!("drop-{}", std::process::id());
    let home = host.home().to_string();
    let proj = format!("{home}/{name}");
    let own = format!("state/homes/{name}");
    let sess = format!("{home}/.claude/projects/{}", slug(&proj));
    host.sh(&format!(
        "set -e; mkdir -p {proj} {sess}; echo v1 > {proj}/f; echo '{{\"old\":1}}' > {sess}/s.jsonl
         ag-box track {name}"
    ))
    .ok();
    host.sh(&format!(
        "test -s {own}/.claude/projects/{}/s.jsonl",
        slug(&proj)
    ))
    .ok();
    // Right after track this node holds the lease, and nothing runs: drop goes ahead.
    let dropped = host.sh(&format!("ag-box drop {name} --yes"));
    let said = dropped.ok().stderr();
    assert!(
        said.contains(&format!(
            "dropped box '{name}': its record and 1 snapshot are deleted; the files at {proj} are kept, and its agent home (transcripts) is set aside at "
        )),
        "{said}"
    );
    assert_eq!(
        host.sh(&format!(
            "cat {proj}/f; test -e {own} || echo no-home; ls -d state/homes/.{name}.dropped-* | wc -l; test -e /run/box/{name} || echo no-run-dir"
        ))
        .ok()
        .stdout(),
        "v1\nno-home\n1\nno-run-dir\n"
    );
    // A new box of the name starts with an empty home of its own (the node's sessions of the
    // project are imported again, as at any track).
    host.sh(&format!("rm -rf {sess}; ag-box track {name}")).ok();
    assert_eq!(
        host.sh(&format!("ls -A {own}/.claude/projects | wc -l"))
            .ok()
            .stdout(),
        "0\n"
    );
    // Dropped again within the second: set aside beside the first, not over it.
    host.sh(&format!("ag-box drop {name} --yes")).ok();
    assert_eq!(
        host.sh(&format!("ls -d state/homes/.{name}.dropped-* | wc -l"))
            .ok()
            .stdout(),
        "2\n"
    );
}

#[test]
fn an_up_after_the_project_was_deleted_restores_it_without_an_empty_fork() {
    let Some(host) = Host::new("gone") else {
        return;
    };
    let name = format!("gone-{}", std::process::id());
    let proj = format!("{}/{name}", host.home());
    host.sh(&format!(
        "set -e; mkdir -p {proj}; echo kept > {proj}/f; ag-box track {name}; ag-box up {name}; ag-box park {name}; rm -rf {proj}"
    ))
    .ok();
    let up = host.sh(&format!("ag-box up {name}"));
    let up = up.ok();
    assert!(
        up.stderr().contains(&format!(
            "box '{name}': its project directory {proj} is gone on this node, its agent home as last saved; nothing here to keep"
        )) && !up.stderr().contains("fork snapshot"),
        "{}",
        up.stderr()
    );
    assert_eq!(host.sh(&format!("cat {proj}/f")).ok().stdout(), "kept\n");
    let forks = host
        .sh(&format!(
            "restic snapshots --tag box:{name},fork --json | grep -c '\"id\"' || true"
        ))
        .stdout();
    assert_eq!(forks.trim(), "0");
    // The cgroups the box ran in go with it.
    let cgroups = host
        .sh(&format!("cat /run/box/{name}/cgroups"))
        .ok()
        .stdout();
    assert!(cgroups.contains(&format!("ag-box-{name}")), "{cgroups}");
    host.sh(&format!("ag-box stop {name}")).ok();
    for dir in cgroups.lines() {
        assert!(!std::path::Path::new(dir).exists(), "{dir} is left");
    }
}
