//! Bad input: a clear one-line error, a non-zero exit, and nothing created or changed.
//! Runs on a rig node with a state dir of its own.

mod common;

use common::{Checked, Node, Target, assert_code};

/// A rig node with a state dir of this test's own, so parallel tests do not see each other.
struct Bad {
    node: Node,
    state: String,
}

fn node(test: &str) -> Option<Bad> {
    let node = Node::local_store("nodeA")?;
    let state = format!("/var/lib/ag-box-{test}");
    node.sh_env(
        &[("BOX_STATE_DIR", &state)],
        &format!("for b in tooltest nixbox locktest; do ag-box park $b >/dev/null 2>&1 || true; done; rm -rf {state}"),
    )
    .ok();
    Some(Bad { node, state })
}

fn run(n: &Bad, script: &str) -> std::process::Output {
    n.node.sh_env(&[("BOX_STATE_DIR", &n.state)], script)
}

/// The store's records and their boxes' units, to compare before and after.
fn world(n: &Bad) -> String {
    let state = &n.state;
    // Units only of this test's own boxes: other tests run boxes on the same node meanwhile.
    run(
        n,
        &format!(
            "cat {state}/meta/*.json 2>/dev/null || true; ls -A {state}/meta 2>/dev/null || true
             for f in {state}/meta/*.json; do [ -e \"$f\" ] || continue; b=$(basename \"$f\" .json)
               echo \"boxrun-$b $(systemctl is-active boxrun-$b)\"; done"
        ),
    )
    .ok()
    .stdout()
}

#[test]
fn bad_names_and_paths_are_refused() {
    let Some(n) = node("names") else { return };
    let long = "a".repeat(64);
    for bad in ["a/b", "..", "../etc", "my proj", "MyProj", long.as_str()] {
        for verb in ["track", "up", "park", "attach"] {
            let out = run(&n, &format!("ag-box {verb} '{bad}'"));
            assert_code(&out, 2, "invalid box name");
            assert_eq!(out.stderr().lines().count(), 1, "{}", out.stderr());
        }
    }
    assert_code(
        &run(&n, "ag-box track ghost /root/does-not-exist"),
        2,
        "does not exist",
    );
    assert_code(
        &run(&n, "ag-box track nohome"),
        2,
        "path /root/nohome does not exist",
    );
    // Never the system, the home dir, ag-box's state, nor a dir around or inside another box.
    for (path, why) in [
        (
            "/",
            "cannot be a box's project: it holds the home directory /root",
        ),
        (
            "/root",
            "cannot be a box's project: it holds the home directory /root",
        ),
        (
            "/etc",
            "cannot be a box's project: /etc belongs to the system",
        ),
        (
            "/usr/local",
            "cannot be a box's project: /usr belongs to the system",
        ),
        (
            &format!("{}/sub", n.state),
            "cannot be a box's project: it overlaps ag-box's state dir",
        ),
    ] {
        run(&n, &format!("mkdir -p {}/sub", n.state)).ok();
        assert_code(&run(&n, &format!("ag-box track sys {path}")), 2, why);
    }
    run(&n, "mkdir -p /root/outer/inner && ag-box track outer").ok();
    assert_code(
        &run(&n, "ag-box track inner /root/outer/inner"),
        2,
        "it overlaps box 'outer' at /root/outer",
    );
    let before = world(&n);
    // A record nobody should act on is named and skipped, never used.
    let state = &n.state;
    run(
        &n,
        &format!("printf '{{\"rev\":1,\"version\":1,\"name\":\"evil\",\"path\":\"/etc\"}}' > {state}/meta/evil.json"),
    )
    .ok();
    let ls = run(&n, "ag-box ls");
    assert_code(&ls, 0, "skipping box record 'evil' is invalid");
    assert!(!ls.stdout().contains("evil"), "{}", ls.stdout());
    assert_code(
        &run(&n, "ag-box up evil"),
        1,
        "box record 'evil' is invalid",
    );
    assert_eq!(
        run(&n, "test -d /etc && echo still-there").ok().stdout(),
        "still-there\n"
    );
    run(&n, &format!("rm {state}/meta/evil.json")).ok();
    assert_code(
        &run(&n, "ag-box up nosuch"),
        1,
        "box 'nosuch' is not tracked",
    );
    assert_code(
        &run(&n, "ag-box park nosuch"),
        1,
        "box 'nosuch' is not tracked",
    );
    assert_code(
        &run(&n, "ag-box exec nosuch -- true"),
        1,
        "box 'nosuch' is not tracked",
    );
    assert_code(
        &run(&n, "ag-box snapshot nosuch"),
        1,
        "box 'nosuch' is not tracked",
    );
    assert_eq!(world(&n), before);
    run(&n, "ag-box park outer && ag-box drop outer --yes").ok();
}

#[test]
fn world_readable_env_is_refused() {
    let Some(n) = node("env") else { return };
    let out = run(
        &n,
        "rm -rf /root/cfg-bad && mkdir -p /root/cfg-bad && echo RESTIC_PASSWORD=x > /root/cfg-bad/env && chmod 644 /root/cfg-bad/env && \
         BOX_CONFIG_DIR=/root/cfg-bad ag-box ls",
    );
    assert_code(&out, 2, "chmod 600 /root/cfg-bad/env");
    assert!(!out.stderr().contains("RESTIC_PASSWORD=x"));
}

/// A PATH holding every tool of the node but one.
fn path_without(n: &Bad, tool: &str) -> String {
    let dir = format!("/root/nobin-{tool}");
    run(n, &format!("rm -rf {dir}")).ok();
    run(
        n,
        &format!(
            "mkdir -p {dir} && for f in /usr/local/bin/* /usr/bin/* /usr/sbin/*; do \
             b=${{f##*/}}; [ \"$b\" = {tool} ] || ln -sfn \"$f\" {dir}/$b; done"
        ),
    )
    .ok();
    format!("/opt/box/bin:{dir}")
}

#[test]
fn missing_tools_exit_4_and_change_nothing() {
    let Some(n) = node("tools") else { return };
    run(
        &n,
        "rm -rf /root/tooltest && mkdir -p /root/tooltest && echo x > /root/tooltest/f",
    )
    .ok();
    let before = world(&n);
    let out = run(
        &n,
        &format!("PATH={} ag-box track tooltest", path_without(&n, "restic")),
    );
    assert_code(&out, 4, "required tool 'restic' not found");
    assert_eq!(world(&n), before);

    run(&n, "ag-box track tooltest").ok();
    let tracked = world(&n);
    for tool in ["bwrap", "tmux"] {
        let out = run(
            &n,
            &format!("PATH={} ag-box up tooltest", path_without(&n, tool)),
        );
        assert_code(&out, 4, &format!("required tool '{tool}' not found"));
        assert_eq!(world(&n), tracked, "after up without {tool}");
    }

    // up twice: the second is a no-op; park twice: the second refuses and changes nothing
    run(&n, "ag-box up tooltest").ok();
    let up = world(&n);
    assert_code(&run(&n, "ag-box up tooltest"), 0, "already up");
    assert_eq!(world(&n), up);
    assert_code(
        &run(&n, "ag-box up tooltest --node elsewhere"),
        2,
        "is not this node",
    );
    run(&n, "ag-box park tooltest").ok();
    // The park's whole snapshot follows it: the record changes once more when it ends.
    common::whole_snapshot_done(&n.node, "tooltest");
    let parked = world(&n);
    assert_code(
        &run(&n, "ag-box park tooltest"),
        1,
        "box 'tooltest' is not up on this node",
    );
    for verb in ["exec tooltest -- true", "attach tooltest"] {
        assert_code(
            &run(&n, &format!("ag-box {verb}")),
            1,
            "box 'tooltest' is parked (no node runs it); hint: start it with 'ag-box up tooltest'",
        );
    }
    assert_eq!(world(&n), parked);
    assert_code(&run(&n, "ag-box track tooltest"), 2, "already tracked");
    assert_eq!(world(&n), parked);
}

#[test]
fn a_nix_box_on_a_node_without_nix_is_refused_and_settings_are_checked() {
    let Some(n) = node("nix") else { return };
    run(&n, "rm -rf /root/nixbox && mkdir -p /root/nixbox").ok();
    run(&n, "ag-box track nixbox --nix").ok();
    run(
        &n,
        "rm -rf /root/nixmate && mkdir -p /root/nixmate && ag-box track nixmate",
    )
    .ok();
    let listed: serde_json::Value =
        serde_json::from_str(&run(&n, "ag-box ls --json").ok().stdout()).unwrap();
    let mate_uid = listed["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "nixmate")
        .unwrap()["uid"]
        .as_u64()
        .unwrap();
    let before = world(&n);
    assert_code(
        &run(&n, "ag-box up nixbox"),
        4,
        "box 'nixbox' has nix: true, but nix is not installed on this node",
    );
    assert_code(
        &run(&n, "ag-box set nixbox memory_max=lots"),
        2,
        "invalid setting 'memory_max=lots'",
    );
    assert_code(
        &run(&n, "ag-box set nixbox nix=maybe"),
        2,
        "invalid setting 'nix=maybe'",
    );
    // Values that would make the next up fail are refused now, naming the key.
    for bad in [
        "uid=4294967295",
        "uid=1000",
        "memory_max=0",
        "memory_max=150%",
    ] {
        assert_code(
            &run(&n, &format!("ag-box set nixbox {bad}")),
            2,
            &format!("box 'nixbox': invalid setting '{bad}'; hint: "),
        );
    }
    // Another box's id would make the two boxes one user.
    assert_code(
        &run(&n, &format!("ag-box set nixbox uid={mate_uid}")),
        2,
        &format!(
            "box 'nixbox': invalid setting 'uid={mate_uid}': box 'nixmate' has that id; hint: "
        ),
    );
    assert_code(
        &run(&n, "ag-box set nixbox pin=nosuchnode"),
        2,
        "box 'nixbox': invalid setting 'pin=nosuchnode': no node 'nosuchnode' in the nodes file; hint: pin it to this node",
    );
    assert_eq!(world(&n), before);
    run(&n, "ag-box set nixbox nix=false memory_max=256M").ok();
    run(&n, "ag-box up nixbox").ok();
    let show = run(&n, "systemctl show boxrun-nixbox -p MemoryMax")
        .ok()
        .stdout();
    assert_eq!(show, "MemoryMax=268435456\n");
    run(&n, "ag-box park nixbox").ok();
}

#[test]
fn a_second_command_on_a_busy_box_waits_then_names_the_holder() {
    let Some(n) = node("lock") else { return };
    let state = n.state.clone();
    run(
        &n,
        "rm -rf /root/locktest && mkdir -p /root/locktest && echo x > /root/locktest/f && ag-box track locktest",
    )
    .ok();
    let before = world(&n);
    let out = run(
        &n,
        &format!(
            "printf \"'ag-box snapshot' (pid 42) since then\" > {state}/locks/locktest.lock
             flock {state}/locks/locktest.lock sleep 8 >/dev/null 2>&1 &
             sleep 0.5; BOX_LOCK_WAIT=1s ag-box up locktest"
        ),
    );
    assert_code(
        &out,
        1,
        "box 'locktest' is busy on this node: 'ag-box snapshot' (pid 42) since then holds it",
    );
    assert_eq!(world(&n), before);
    // Once the holder is gone, the same command goes through. (The holder holds long enough
    // for a loaded machine to reach the first up's wait; this up waits it out.)
    run(
        &n,
        "BOX_LOCK_WAIT=30s ag-box up locktest && ag-box park locktest",
    )
    .ok();
}

#[test]
fn bad_forks_are_refused_and_make_nothing() {
    let Some(n) = node("forks") else { return };
    run(
        &n,
        "rm -rf /root/forkee /root/taken /root/fresh; mkdir -p /root/forkee /root/taken
         echo v1 > /root/forkee/a.txt; ag-box track forkee >/dev/null 2>&1
         ag-box history forkee >/dev/null 2>&1",
    )
    .ok();
    let before = world(&n);
    for (args, code, says) in [
        ("nosuch fresh", 1, "box 'nosuch' is not tracked"),
        ("forkee Fresh", 2, "invalid box name 'Fresh'"),
        ("forkee fresh --count 0", 2, "invalid --count 0"),
        ("forkee fresh --count 17", 2, "invalid --count 17"),
        (
            "forkee fresh --branch=a..b",
            2,
            "invalid branch name 'a..b'",
        ),
        (
            "forkee taken",
            2,
            "/root/taken exists: box 'taken' needs a new dir there",
        ),
        ("forkee forkee", 2, "box 'forkee' is already tracked"),
        (
            "forkee fresh --from ffff",
            2,
            "box 'forkee' has no snapshot ffff",
        ),
    ] {
        let out = run(&n, &format!("ag-box fork {args}"));
        assert_code(&out, code, says);
        assert_eq!(out.stderr().lines().count(), 1, "{args}: {}", out.stderr());
    }
    assert_eq!(world(&n), before);
    assert_eq!(
        run(&n, "ls -d /root/fresh* 2>/dev/null || echo none")
            .ok()
            .stdout(),
        "none\n"
    );
    // A snapshot named by --from: the fork holds the project as that snapshot saved it.
    let first = run(&n, "ag-box history forkee --json").ok().stdout();
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    let first = first["entries"][0]["id"].as_str().unwrap().to_string();
    run(&n, "echo v2 > /root/forkee/a.txt && ag-box snapshot forkee").ok();
    let forked = run(
        &n,
        &format!("ag-box fork forkee fresh --from {} --json", &first[..8]),
    );
    let doc: serde_json::Value = serde_json::from_str(&forked.ok().stdout()).unwrap();
    assert_eq!(
        (&doc["snapshot"], &doc["forks"][0]["box"]),
        (&serde_json::json!(first), &serde_json::json!("fresh"))
    );
    assert_eq!(run(&n, "cat /root/fresh/a.txt").ok().stdout(), "v1\n");
    run(
        &n,
        "ag-box park fresh && ag-box drop fresh --yes; ag-box park forkee && ag-box drop forkee --yes; rm -rf /root/taken /root/fresh",
    )
    .ok();
}
