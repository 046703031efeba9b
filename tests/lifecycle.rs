//! The whole box lifecycle with the real binary: on a booted systemd node of the rig, and on
//! the bare host with the direct runtime.
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::boxtest::{BoxTest, Exit, Project, command, restic};
use common::{Checked, Host, Node, Target};

fn slug(path: &str) -> String {
    path.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
}

fn lifecycle(t: &dyn Target, name: &str) {
    let home = t.home();
    let b = BoxTest::on(t, name);
    let proj = b.project();
    let sess = format!("{home}/.claude/projects/{}", slug(&proj));
    let fh = format!("{home}/.claude/file-history/s1-{name}");
    let state = t.state_dir();
    let own = format!("{state}/homes/{name}");
    let own_sess = format!("{own}/.claude/projects/{}", slug(&proj));
    let own_fh = format!("{own}/.claude/file-history/s1-{name}");
    // An earlier run's box of the name: parked if it is there, its local traces removed.
    b.park().either_way();
    for gone in [
        format!("{state}/meta/{name}.json"),
        format!("{state}/local/{name}.json"),
        own.clone(),
    ] {
        t.remove(&gone);
    }
    b.write(
        &Project::new(name)
            .file("src/main.txt", "v1\n")
            .file(".auth-secret", "node-secret\n"),
    );
    Project::at(&format!("other-{name}"))
        .file("private", "keep\n")
        .write_on(t);
    t.write(&format!("{home}/.ssh/id_test"), "key\n");
    Project::at(&sess)
        .file(&format!("s1-{name}.jsonl"), "{\"type\":\"user\"}\n")
        .write_on(t);
    Project::at(&fh).file("edit", "fh\n").write_on(t);

    // track: first snapshot, pinned because of .auth-secret
    b.track().ok();
    let row = b.row().unwrap();
    assert_eq!(row["path"], proj);
    assert!(row["pinned_node"].is_string(), "{row}");

    // A bwrap that fails at the start (a stand-in that says why, as bwrap does): the up says
    // what it said, and the box and its record stay as they were.
    let bad = Project::at(&format!("badbin-{name}")).executable(
        "bwrap",
        "#!/bin/sh\necho \"bwrap: Can not find source path /gone\" >&2\nexit 1\n",
    );
    let bad_dir = bad.write_on(t);
    let failed = b
        .up()
        .env("PATH", &format!("{bad_dir}:{}", t.search_path()))
        .cannot(
            Exit::Failure,
            &format!(
                "box '{name}' did not start (its tmux server or egress proxy never answered); \
                 it said: bwrap: Can not find source path /gone"
            ),
        );
    t.remove(&bad_dir);
    drop(failed);
    assert_eq!(b.row().unwrap(), row);

    // up: unit active, tmux answers with session main in the project
    b.up().env("BOX_MEMORY_MAX", "512M").ok();
    let unit = format!("boxrun-{name}");
    if t.systemd() {
        command(t, ["systemctl", "is-active", &unit])
            .ok()
            .stdout_is("active\n");
        command(
            t,
            [
                "systemctl",
                "show",
                &unit,
                "-p",
                "MemoryMax",
                "-p",
                "OOMPolicy",
            ],
        )
        .ok()
        .stdout_is("OOMPolicy=continue\nMemoryMax=536870912\n");
    }
    // attach the moment up returned, in a real terminal: what is typed runs in the box.
    let screen = common::attach_and_type(t, name);
    assert!(screen.contains("attach-exit=0"), "{screen}");
    // A box that shuts the client out of its tmux server: attach says so and fails.
    let sock = format!("/run/box/{name}/sock/tmux.sock");
    b.exec(["tmux", "-S", &sock, "server-access", "-d", "ag-box-client"])
        .ok();
    b.attach().cannot(
        Exit::Failure,
        &format!(
            "box '{name}': cannot attach: its tmux server did not let the client in \
             (tmux said: access not allowed); hint: restart it"
        ),
    );
    b.exec(["tmux", "-S", &sock, "server-access", "-a", "ag-box-client"])
        .ok();
    // The pane's shell may still be starting when `up` returns: ask until it answers.
    b.exec([
        "tmux",
        "-S",
        &sock,
        "display-message",
        "-p",
        "-t",
        "main",
        "#{pane_current_path}",
    ])
    .until(Duration::from_secs(5), |r| {
        r.code() == Some(0) && !r.stdout().trim().is_empty()
    })
    .stdout_is(&format!("{proj}\n"));
    b.up().ok().stderr_has("already up");
    let status = b.ag(["status", "--json", "--deep"]).ok().json();
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
    let cached = b.ag(["status", "--json"]).ok().json();
    assert_eq!(cached["snapshots"], status["snapshots"]);
    assert_eq!(
        cached["snapshots_counted_at"],
        status["snapshots_counted_at"]
    );
    assert!(cached["snapshots_counted_at"].is_string(), "{cached}");
    b.ag(["--version"])
        .ok()
        .stdout_is(&format!("ag-box {}\n", env!("CARGO_PKG_VERSION")));

    // The host's disks, timers and devices are not described to the box (what the node's
    // kernel has of them).
    assert_eq!(
        b.exec_sh(
            "for f in /proc/partitions /proc/interrupts /proc/timer_list; do \
             [ -e $f ] && echo \"$f $(head -c 1 $f | wc -c)\"; done; \
             [ -d /proc/acpi ] && ls -A /proc/acpi | wc -l; true"
        )
        .ok()
        .stdout(),
        {
            // What the node has of them, each empty in the box.
            let there = |test: &str, path: &str| {
                let ran = command(t, ["test", test, path]).either_way();
                match ran.code() {
                    Some(0) => true,
                    Some(1) => false,
                    _ => ran.fail("test -e said neither yes nor no"),
                }
            };
            let mut expected = String::new();
            for f in ["/proc/partitions", "/proc/interrupts", "/proc/timer_list"] {
                if there("-e", f) {
                    expected.push_str(f);
                    expected.push_str(" 0\n");
                }
            }
            if there("-d", "/proc/acpi") {
                expected += "0\n";
            }
            expected
        }
    );
    assert_eq!(
        command(t, ["head", "-c", "1", "/proc/partitions"])
            .ok()
            .output()
            .stdout
            .len(),
        1,
        "the node has partitions to hide"
    );

    // exec: writes through, runs in the project, passes exit codes
    b.exec_sh("echo made-inside > made.txt; pwd")
        .in_dir("/")
        .ok()
        .stdout_is(&format!("{proj}\n"));
    b.exec(["pwd"])
        .in_dir(&format!("{proj}/src"))
        .ok()
        .stdout_is(&format!("{proj}/src\n"));
    let uid = common::uid_of(t, name);
    let made = format!("{proj}/made.txt");
    assert_eq!(t.read(&made), "made-inside\n");
    assert_eq!(
        t.owner(&made),
        format!("{uid}:{uid}"),
        "files the box makes are the box user's"
    );
    b.exec_sh("exit 42").exits(42);
    // A command that is not there, or cannot run: 127 and 126, as sh and env say, naming the box.
    b.exec(["no-such-command"]).cannot(
        Exit::NoSuchCommand,
        &format!("ag-box: box '{name}': cannot run 'no-such-command': no such command there"),
    );
    b.exec(["/dev/null"]).cannot(
        Exit::CannotRun,
        &format!("ag-box: box '{name}': cannot run '/dev/null': Permission denied"),
    );
    b.exec_sh("kill -TERM $$").exits(143);
    if t.systemd() {
        // exec'd commands count against the box's MemoryMax (512M) like the rest of the box
        b.exec(["python3", "-c", "b = b'x' * (700 << 20)"])
            .exits(137);
        command(t, ["systemctl", "is-active", &unit])
            .ok()
            .stdout_is("active\n");
    }

    // network: the box's own, with only its proxy; the metadata address is refused there (no
    // packet leaves), and a killed proxy is started again by the unit or the supervisor
    let metadata = [
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "http://169.254.169.254/latest/",
    ];
    b.exec(metadata).ok().stdout_is("403");
    let egress = b.verb("egress", ["--json"]).ok().json();
    assert_eq!(egress["proxy_answers"], true, "{egress}");
    assert_eq!(
        egress["decisions"][0]["reason"], "cloud metadata address 169.254.169.254:80 is not listed",
        "{egress}"
    );
    command(
        t,
        [
            "pkill",
            "-KILL",
            "-f",
            "--",
            &format!("__proxy --box {name} "),
        ],
    )
    .ok();
    b.exec(metadata).until(Duration::from_secs(10), |r| {
        r.code() == Some(0) && r.stdout() == "403"
    });

    // isolation: other projects and ~/.ssh are invisible, home holds only the box's binds (each
    // "cannot" answered by the box, of what is there on the host, ag-box's exec itself succeeding)
    for path in [format!("{home}/other-{name}"), format!("{home}/.ssh")] {
        assert!(t.exists(&path), "{path} is there on the host");
        b.exec_sh(&format!("test -e {path} && echo present || echo absent"))
            .ok()
            .stdout_is("absent\n");
    }
    let listing = b.exec(["ls", "-A", home]).ok().stdout();
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
    b.exec_sh("touch /usr/x 2>/dev/null && echo wrote || echo refused")
        .ok()
        .stdout_is("refused\n");

    // the agent writes a new session inside the box
    b.exec_sh(&format!("echo {{}} > {sess}/s2-{name}.jsonl"))
        .ok();
    let taken = b.snapshot().ok().stdout();
    // Nothing new since: the same snapshot, and the line says so.
    b.snapshot()
        .ok()
        .stdout_is(&format!("{} unchanged\n", taken.trim_end()));

    // Another tool on the node makes a network namespace of its own while the box runs
    // (iproute2 then bind-mounts /run/netns over itself): the box parks, and comes up again.
    let other_tool = format!("other-tool-{name}");
    command(t, ["ip", "netns", "add", &other_tool]).ok();
    command(t, ["ip", "netns", "exec", &other_tool, "true"]).ok();

    // park: the unit is gone and the lease released
    b.park().ok();
    if t.systemd() {
        let active = command(t, ["systemctl", "is-active", &unit]).either_way();
        assert_ne!(active.stdout().trim(), "active");
    }
    b.exec(["true"])
        .cannot(Exit::Failure, "is parked (no node runs it)");
    b.ag(["ls", "--json"]).ok().stdout_has("\"lease\": null");
    // its network namespace is released with it
    assert!(!t.exists(&format!("/run/box/.netns/{name}")));

    // wipe the project and the box's agent home; up restores both (and starts it, the other
    // tool's namespace still there)
    t.remove(&proj);
    t.remove(&own);
    b.up().env("BOX_MEMORY_MAX", "512M").ok();
    command(t, ["ip", "netns", "del", &other_tool]).ok();
    let restored: String = [
        format!("{proj}/made.txt"),
        format!("{proj}/src/main.txt"),
        format!("{own_sess}/s1-{name}.jsonl"),
        format!("{own_sess}/s2-{name}.jsonl"),
        format!("{own_fh}/edit"),
    ]
    .iter()
    .map(|f| t.read(f))
    .collect();
    assert_eq!(restored, "made-inside\nv1\n{\"type\":\"user\"}\n{}\nfh\n");
    assert!(
        !t.exists(&format!("{proj}/.auth-secret")),
        "AUTH-SECRET-PRESENT"
    );
    if t.systemd() {
        command(t, ["systemctl", "is-active", &unit])
            .ok()
            .stdout_is("active\n");
    }
    b.park().ok();

    // nothing active: the timer's call succeeds
    b.ag(["snapshot", "--active"])
        .ok()
        .stderr_has("no active boxes on this node, skipping");

    // .auth-secret is in no snapshot of the box
    let snapshots = restic(t, ["snapshots", "--tag", &format!("box:{name}"), "--json"])
        .ok()
        .json();
    let ids: Vec<&str> = snapshots
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["short_id"].as_str().unwrap())
        .collect();
    assert!(!ids.is_empty(), "{snapshots}");
    let found: String = ids
        .iter()
        .map(|id| restic(t, ["ls", id]).ok().stdout())
        .collect();
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
    let b = BoxTest::on(&host, &name);
    let state = host.state_dir();
    let proj = b.write(&Project::new(&name).file("src/main.txt", "v1\n"));
    let sess = Project::at(&format!(".claude/projects/{}", slug(&proj)))
        .file("old.jsonl", "{\"old\":1}\n")
        .write_on(&host);
    // An older ag-box snapshotted the project and its sessions where they lie in the node's
    // home, and its record names neither uid nor gid.
    b.track().ok();
    b.park().ok();
    let backup = restic(
        &host,
        [
            "backup",
            "--json",
            "--host",
            &format!("ag-box-{name}"),
            "--tag",
            &format!("box:{name}"),
            "--tag",
            "node:host",
            "--tag",
            "epoch:1",
            "--",
            &proj,
            &sess,
        ],
    )
    .ok();
    let summary: serde_json::Value = backup
        .stdout()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|m| m["message_type"] == "summary")
        .unwrap_or_else(|| backup.fail("no summary"));
    let snap = summary["snapshot_id"].as_str().unwrap();
    assert!(!snap.is_empty(), "{summary}");
    let meta = format!("{state}/meta/{name}.json");
    let mut rec: serde_json::Value = serde_json::from_str(&host.read(&meta)).unwrap();
    rec["last_snapshot"]["id"] = snap.into();
    let fields = rec.as_object_mut().unwrap();
    assert!(fields.remove("uid").is_some() && fields.remove("gid").is_some());
    host.write(&meta, &rec.to_string());
    for gone in [
        proj.clone(),
        sess.clone(),
        format!("{state}/homes/{name}"),
        format!("{state}/local/{name}.json"),
    ] {
        host.remove(&gone);
    }
    b.up().ok();
    let own = format!("{state}/homes/{name}/.claude/projects/{}", slug(&proj));
    let uid = common::uid_of(&host, &name);
    assert_eq!(host.read(&format!("{proj}/src/main.txt")), "v1\n");
    assert_eq!(host.read(&format!("{own}/old.jsonl")), "{\"old\":1}\n");
    for file in [format!("{own}/old.jsonl"), format!("{proj}/src/main.txt")] {
        assert_eq!(host.owner(&file), format!("{uid}:{uid}"), "{file}");
    }
    b.exec(["cat", &format!("{sess}/old.jsonl")])
        .ok()
        .stdout_is("{\"old\":1}\n");
    b.park().ok();
}

/// How many boxes of the name were dropped on the host, their agent homes set aside.
fn set_aside(host: &Host, name: &str) -> usize {
    let homes = host.host_path(&format!("{}/homes", host.state_dir()));
    std::fs::read_dir(homes)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(&format!(".{name}.dropped-"))
        })
        .count()
}

#[test]
fn a_box_dropped_right_after_track_leaves_nothing_a_new_box_of_its_name_inherits() {
    let Some(host) = Host::new("drop") else {
        return;
    };
    let name = format!("drop-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    let proj = b.write(&Project::new(&name).file("f", "v1\n"));
    let own = format!("{}/homes/{name}", host.state_dir());
    let sess = Project::at(&format!(".claude/projects/{}", slug(&proj)))
        .file("s.jsonl", "{\"old\":1}\n")
        .write_on(&host);
    b.track().ok();
    let imported = format!("{own}/.claude/projects/{}/s.jsonl", slug(&proj));
    assert!(!host.read(&imported).is_empty(), "{imported} is empty");
    // Right after track this node holds the lease, and nothing runs: drop goes ahead.
    b.drop_box().ok().stderr_has(&format!(
        "dropped box '{name}': its record and 1 snapshot are deleted; the files at {proj} are kept, and its agent home (transcripts) is set aside at "
    ));
    assert_eq!(host.read(&format!("{proj}/f")), "v1\n");
    assert!(!host.exists(&own), "{own} is left");
    assert_eq!(set_aside(&host, &name), 1);
    assert!(
        !host.exists(&format!("/run/box/{name}")),
        "its run dir is left"
    );
    // A new box of the name starts with an empty home of its own (the node's sessions of the
    // project are imported again, as at any track).
    host.remove(&sess);
    b.track().ok();
    let projects = host.host_path(&format!("{own}/.claude/projects"));
    assert_eq!(
        std::fs::read_dir(&projects).map_or(0, Iterator::count),
        0,
        "{}",
        projects.display()
    );
    // Dropped again within the second: set aside beside the first, not over it.
    b.drop_box().ok();
    assert_eq!(set_aside(&host, &name), 2);
}

#[test]
fn an_up_after_the_project_was_deleted_restores_it_without_an_empty_fork() {
    let Some(host) = Host::new("gone") else {
        return;
    };
    let name = format!("gone-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    let proj = b.write(&Project::new(&name).file("f", "kept\n"));
    b.track().ok();
    b.up().ok();
    b.park().ok();
    host.remove(&proj);
    b.up()
        .ok()
        .stderr_has(&format!(
            "box '{name}': its project directory {proj} is gone on this node, its agent home as last saved; nothing here to keep"
        ))
        .stderr_lacks("fork snapshot");
    assert_eq!(host.read(&format!("{proj}/f")), "kept\n");
    let forks = restic(
        &host,
        ["snapshots", "--tag", &format!("box:{name},fork"), "--json"],
    )
    .ok()
    .json();
    assert_eq!(forks.as_array().map(Vec::len), Some(0), "{forks}");
    // The cgroups the box ran in go with it.
    let cgroups = host.read(&format!("/run/box/{name}/cgroups"));
    assert!(cgroups.contains(&format!("ag-box-{name}")), "{cgroups}");
    b.stop().ok();
    for dir in cgroups.lines() {
        assert!(!std::path::Path::new(dir).exists(), "{dir} is left");
    }
}

/// A box whose agent is Claude Code starts it back in the project's newest conversation: its
/// `main` window runs `claude --resume <id>` of the newest transcript by its last write (never a
/// subagent's), the box's shell once it exits; `up --fresh` starts a new one. Codex resumes the
/// newest rollout of the project (not another project's); `agent=none` keeps the shell alone.
/// The CLIs here are stand-ins on the node's `~/.local/bin` (bound into the box, first on its
/// PATH) that note their arguments in the project and exit.
#[test]
fn a_box_with_an_agent_starts_it_back_in_its_newest_conversation() {
    // Codex is told on its command line to report its turns (`plan::attention`).
    const NOTIFY: &str = "notify=[\"/run/ag-box\",\"__agent-state\",\"codex\"]";
    let Some(host) = Host::new("resume") else {
        return;
    };
    let name = format!("resume-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    let proj = b.write(&Project::new(&name).file("src/main.txt", "v1\n"));
    // The newer by its last write has the smaller name, and its times were set first.
    let newer = "0a1b2c3d-0000-4000-8000-00000000000a";
    let older = "0a1b2c3d-0000-4000-8000-00000000000b";
    Project::at(&format!(".claude/projects/{}", slug(&proj)))
        .file(&format!("{older}.jsonl"), "{}\n")
        .file(&format!("{newer}.jsonl"), "{}\n")
        .file("agent-5f2e.jsonl", "{}\n")
        .write_on(&host);
    let stand_in = |cli: &str| format!("#!/bin/sh\necho \"{cli} [$*]\" >> \"$PWD/.agent-runs\"\n");
    // Gemini CLI's `--resume latest` fails when the project has no conversation yet.
    let gemini = format!(
        "{}case \"$*\" in *--resume*) [ -e .gemini-chat ] || exit 1;; esac\ntouch .gemini-chat\n",
        stand_in("gemini")
    );
    Project::at(".local/bin")
        .executable("claude", stand_in("claude"))
        .executable("codex", stand_in("codex"))
        .executable("gemini", gemini)
        .write_on(&host);
    b.track().ok();
    b.set(["agent=claude"])
        .ok()
        .stderr_has("agent=claude")
        .stderr_has("agent takes effect at the next 'ag-box up'");
    // The box's own copies of the transcripts: the newer written in February, the older in
    // January (its times set last), the subagent's in March.
    let own = format!(
        "{}/homes/{name}/.claude/projects/{}",
        host.state_dir(),
        slug(&proj)
    );
    host.sh(&format!(
        "touch -d '2026-02-01 00:00' {own}/{newer}.jsonl
         touch -d '2026-01-01 00:00' {own}/{older}.jsonl
         touch -d '2026-03-01 00:00' {own}/agent-5f2e.jsonl"
    ))
    .ok();
    let runs = format!("{proj}/.agent-runs");
    let ran = |expected: &str| {
        let read = || std::fs::read_to_string(host.host_path(&runs)).unwrap_or_default();
        let end = std::time::Instant::now() + Duration::from_secs(20);
        while read() != expected && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(read(), expected, "how the agents were started");
    };
    b.up().ok();
    ran(&format!("claude [--resume {newer}]\n"));
    // The agent exited: the window is the box's shell, where a person types.
    common::attach_and_type(&host, &name);
    b.verb("up", ["--fresh"]).cannot(
        Exit::Usage,
        "--fresh starts a new conversation only as the box starts",
    );
    b.park().ok();
    b.verb("up", ["--fresh"]).ok();
    ran(&format!("claude [--resume {newer}]\nclaude []\n"));
    // Codex: the newest rollout whose cwd is the project, another project's newer one aside
    // (written as the box would, while it runs: park keeps them).
    let rollout = |id: &str, cwd: &str| {
        format!(
            "{}\n{{\"type\":\"response_item\"}}\n",
            serde_json::json!({"type": "session_meta", "payload": {"id": id, "cwd": cwd}})
        )
    };
    let codex_id = "01a23b81-b45a-75c3-a1b8-a49a092f81ad";
    let day = format!(
        "{}/homes/{name}/.codex/sessions/2026/12/01",
        host.state_dir()
    );
    let codex_older = "01a23b81-b45a-75c3-a1b8-a49a092f81a0";
    Project::at(&day)
        .file("rollout-0.jsonl", rollout(codex_id, &proj))
        .file("rollout-1.jsonl", rollout(codex_older, &proj))
        .file("rollout-2.jsonl", rollout(older, &format!("{proj}-2")))
        .write_on(&host);
    host.sh(&format!(
        "touch -d '2026-01-02 00:00' {day}/rollout-0.jsonl
         touch -d '2026-01-01 00:00' {day}/rollout-1.jsonl"
    ))
    .ok();
    b.park().ok();
    b.set(["agent=codex"]).ok();
    b.up().ok();
    ran(&format!(
        "claude [--resume {newer}]\nclaude []\ncodex [-c {NOTIFY} resume {codex_id}]\n"
    ));
    b.park().ok();
    // An agent that finds its latest conversation itself, and fails at once without one: a new
    // conversation starts; once there is one, it is resumed.
    let codex_run = format!("codex [-c {NOTIFY} resume {codex_id}]\n");
    b.set(["agent=gemini"]).ok();
    b.up().ok();
    ran(&format!(
        "claude [--resume {newer}]\nclaude []\n{codex_run}gemini [--resume latest]\ngemini []\n"
    ));
    b.park().ok();
    b.up().ok();
    ran(&format!(
        "claude [--resume {newer}]\nclaude []\n{codex_run}gemini [--resume latest]\ngemini []\n\
         gemini [--resume latest]\n"
    ));
    b.park().ok();
    b.set(["agent=none"])
        .ok()
        .stderr_has("agent takes effect at the next 'ag-box up'");
    b.up().ok();
    common::attach_and_type(&host, &name);
    assert_eq!(
        host.read(&runs),
        format!(
            "claude [--resume {newer}]\nclaude []\n{codex_run}gemini [--resume latest]\n\
             gemini []\ngemini [--resume latest]\n"
        ),
        "agent=none started no agent"
    );
    b.park().ok();
}

/// The agent's state, as its hooks report it from inside the box (`ag-box __agent-state`, which
/// Claude Code's hooks run): `ls` shows it, `wait` returns once the agent needs the operator,
/// and `park` waits for a turn to end (`--now` does not). A box that plants a link or a fifo
/// where its state file goes, or writes escape bytes into it, steers nothing.
#[test]
fn the_agents_state_shows_in_ls_wait_returns_and_park_waits_for_the_turn() {
    let Some(host) = Host::new("attention") else {
        return;
    };
    let name = format!("attention-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("src/main.txt", "v1\n"));
    b.track().ok();
    b.verb("wait", common::boxtest::NONE).cannot(
        Exit::Failure,
        "has no agent that reports its state (agent=none)",
    );
    b.set(["agent=claude"]).ok();
    b.up().ok();
    let hook = |event: &str| {
        b.exec_sh(&format!(
            "printf '%s' '{event}' | /run/ag-box __agent-state claude && cat /run/box/$BOX_NAME/sock/agent-state.json"
        ))
        .ok()
        .stdout()
    };
    // The box writing its state file itself, as any process in it may.
    let hook_raw = |content: &str| {
        b.exec_sh(&format!(
            "printf '%s' '{content}' > /run/box/$BOX_NAME/sock/agent-state.json"
        ))
        .ok();
    };
    let state = || b.row().unwrap()["agent_state"].clone();
    // Mid-turn: shown, and not among the boxes that need the operator.
    let written = hook(r#"{"hook_event_name":"UserPromptSubmit","prompt":"Fix the build"}"#);
    assert!(written.contains(r#""state":"working""#), "{written}");
    assert_eq!(state()["state"], "working");
    assert_eq!(state()["agent"], "claude");
    // What was typed stays in the box.
    assert_eq!(state()["detail"], serde_json::Value::Null);
    let waiting = b.ag(["ls", "--waiting"]).ok();
    assert!(!waiting.stdout().contains(&name), "{}", waiting.stdout());
    // Park waits for the turn, which a hook ends a second later.
    b.exec_sh(
        "(sleep 1; echo '{\"hook_event_name\":\"Stop\"}' | /run/ag-box __agent-state claude) >/dev/null 2>&1 &",
    )
    .ok();
    b.park()
        .env("BOX_PARK_WAIT", "60s")
        .ok()
        .stderr_has("claude is mid-turn; the park waits up to 1m for the turn to end")
        .stderr_has("claude ended its turn");
    // Mid-turn again: --now does not wait; with a short BOX_PARK_WAIT, park goes on after it.
    b.up().ok();
    hook(r#"{"hook_event_name":"PreToolUse","tool_name":"Bash"}"#);
    b.park().arg("--now").ok().stderr_lacks("mid-turn");
    b.up().ok();
    hook(r#"{"hook_event_name":"PreToolUse","tool_name":"Bash"}"#);
    b.park()
        .env("BOX_PARK_WAIT", "1s")
        .ok()
        .stderr_has("claude is still mid-turn after 1s; the park goes on");
    // BOX_NOTIFY a program: it is told once of the change into waiting, its JSON on stdin.
    let told = format!("{}/told.jsonl", host.base.display());
    let tell = format!("{}/tell", host.base.display());
    std::fs::write(&tell, format!("#!/bin/sh\ncat >> {told}\necho >> {told}\n")).unwrap();
    std::fs::set_permissions(&tell, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    b.up().env("BOX_NOTIFY", &tell).ok();
    // A question, its text with escape bytes: `wait` returns at once and prints it escaped.
    hook(
        r#"{"hook_event_name":"Notification","notification_type":"permission_prompt","message":"Allow \u001b[2J rm?\nsecond line"}"#,
    );
    let notices = || {
        std::fs::read_to_string(&told)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while notices().is_empty() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let since = notices().first().map(|n| n["since"].clone());
    assert_eq!(
        notices(),
        [
            serde_json::json!({"box": name, "node": "host", "agent": "claude", "state": "waiting",
            "since": since, "question": "Allow \u{1b}[2J rm?",
            "attach": format!("ag-box attach {name}")})
        ]
    );
    assert_eq!(state()["state"], "waiting");
    common::assert_shape("ls", &b.ag(["ls", "--json"]).ok().json());
    let waited = b.verb("wait", common::boxtest::NONE).ok();
    assert_eq!(
        waited.stdout(),
        format!("{name} host claude waiting: Allow \\x1b[2J rm?\n")
    );
    let listed = b.ag(["ls", "--waiting"]).ok().stdout();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&name) && l.contains(" waiting ")),
        "{listed}"
    );
    assert_eq!(notices().len(), 1, "one notice per change: {:?}", notices());
    // A `since` no clock can show, and a long detail: believed only within bounds.
    hook_raw(r#"{"agent":"claude","state":"idle","since":253402300800}"#);
    assert_eq!(state(), serde_json::Value::Null);
    // What the watcher published in the record for other nodes goes too.
    let record = format!("{}/meta/{name}.json", host.state_dir());
    let published = || {
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
        meta["attention"]["state"].clone()
    };
    common::boxtest::wait_for(
        "the unbelievable state unpublished",
        Duration::from_secs(10),
        || (published() == serde_json::Value::Null).then_some(()),
    );
    hook(r#"{"hook_event_name":"Stop"}"#);
    common::boxtest::wait_for("the state published", Duration::from_secs(10), || {
        (published() == "idle").then_some(())
    });
    // A link planted at the state file, to a host file that reads as a state: not followed.
    let lure = format!("{}/lure.json", host.base.display());
    std::fs::write(
        &lure,
        r#"{"agent":"claude","state":"idle","since":1,"detail":"HOST-SECRET"}"#,
    )
    .unwrap();
    b.exec_sh(&format!(
        "cd /run/box/$BOX_NAME/sock && rm agent-state.json && ln -s {lure} agent-state.json && test -L agent-state.json"
    ))
    .ok();
    let sock = host.host_path(&format!("/run/box/{name}/sock/agent-state.json"));
    assert!(
        std::fs::read_to_string(&sock).is_ok_and(|s| s.contains("HOST-SECRET")),
        "a reader that follows links would have read the lure"
    );
    assert_eq!(state(), serde_json::Value::Null);
    common::boxtest::wait_for(
        "the state unpublished once a link is planted",
        Duration::from_secs(10),
        || (published() == serde_json::Value::Null).then_some(()),
    );
    // A fifo there: read without waiting on it.
    b.exec_sh("cd /run/box/$BOX_NAME/sock && rm agent-state.json && mkfifo agent-state.json && test -p agent-state.json")
        .ok();
    assert_eq!(state(), serde_json::Value::Null);
    b.park().ok().stderr_lacks("mid-turn");
}

/// An agent whose own signals ag-box does not hear (Gemini CLI here, a stand-in on the node's
/// `~/.local/bin`) is known by its window's terminal: output says `working`, a bell `waiting`
/// (kept through the silence that follows, and through the prompt the bell comes with), output
/// after that `working` again, and ten seconds of silence `idle`. Output in another window
/// and a bell there say nothing.
#[test]
fn an_agent_without_signals_is_known_by_its_terminal() {
    let Some(host) = Host::new("terminal") else {
        return;
    };
    let name = format!("terminal-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("src/main.txt", "v1\n"));
    // Works for two seconds, asks (a bell, with its prompt drawn after it), waits for the
    // answer, works two seconds more, then sits quiet.
    Project::at(".local/bin")
        .executable(
            "gemini",
            "#!/bin/sh\n\
             for i in 1 2 3 4 5 6 7 8 9 10; do echo thinking $i; sleep 0.2; done\n\
             printf 'Allow rm? \\a'; sleep 0.3; echo '[y/n]'\n\
             while [ ! -e .answer ]; do sleep 0.2; done\n\
             for i in 1 2 3 4 5 6 7 8 9 10; do echo working $i; sleep 0.2; done\n\
             echo done; while :; do [ -e .chatter ] && echo tick; sleep 0.3; done\n",
        )
        .write_on(&host);
    b.track().ok();
    b.set(["agent=gemini"]).ok();
    b.up().ok();
    let state = || b.row().unwrap()["agent_state"]["state"].clone();
    let until = |want: &str| {
        common::boxtest::wait_for(
            &format!("the box's agent {want}"),
            Duration::from_secs(30),
            || (state() == want).then_some(()),
        );
    };
    until("working");
    until("waiting");
    assert_eq!(b.row().unwrap()["agent_state"]["agent"], "gemini");
    let waited = b.verb("wait", common::boxtest::NONE).ok();
    assert_eq!(waited.stdout(), format!("{name} host gemini waiting\n"));
    // Longer than the silence that means idle after work: still waiting.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(state(), "waiting");
    b.exec_sh("touch .answer").ok();
    until("working");
    until("idle");
    // Another window's output and bell change nothing.
    b.exec_sh(
        "tmux -S /run/box/$BOX_NAME/sock/tmux.sock new-window -d 'echo other; printf \"\\a\"; sleep 100' && sleep 2",
    )
    .ok();
    assert_eq!(state(), "idle");
    // Someone attached sees the agent write: no bell of the monitor's rings in their terminal
    // (a terminal of its own here, whose bell flag says whether one rang).
    b.exec_sh("touch .chatter").ok();
    let rung = host
        .sh(&format!(
            "o=bell-{name}; tmux -L $o kill-server 2>/dev/null || true
             tmux -L $o new-session -d -s $o -x 120 -y 30 'ag-box attach {name}'
             for i in $(seq 100); do tmux -L $o capture-pane -p -t $o | grep -q tick && break; sleep 0.1; done
             tmux -L $o capture-pane -p -t $o | grep -q tick
             sleep 3
             tmux -L $o display -p -t $o '#{{window_bell_flag}}'
             tmux -L $o kill-server"
        ))
        .ok()
        .stdout();
    assert_eq!(rung, "0\n", "a bell rang in the attached terminal");
    b.exec_sh("rm .chatter").ok();
    b.park().ok();
}

/// A process of the test's, ended with it.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `BOX_NOTIFY` an https webhook: the watcher posts the notice over TLS, trusting the server
/// as the system's roots do (here a certificate of the test's own, named by `SSL_CERT_FILE`).
#[test]
fn box_notify_posts_to_an_https_webhook_over_tls() {
    let Some(host) = Host::new("notify") else {
        return;
    };
    let name = format!("notify-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("src/main.txt", "v1\n"));
    b.track().ok();
    b.set(["agent=claude"]).ok();
    let base = host.base.display().to_string();
    // A CA of the test's own, and the webhook's certificate from it.
    host.sh(&format!(
        "cd {base}
         openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
           -out ca.pem -days 1 -subj /CN=ag-box-test-ca 2>/dev/null
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem \
           -out leaf.csr -subj /CN=localhost 2>/dev/null
         printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > leaf.ext
         openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem \
           -days 1 -extfile leaf.ext 2>/dev/null"
    ))
    .ok();
    let port = "18484";
    let log = format!("{base}/hook.log");
    let webhook = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/webhook.py");
    let server = std::process::Command::new("python3")
        .arg(&webhook)
        .args([
            port,
            &log,
            &format!("{base}/cert.pem"),
            &format!("{base}/key.pem"),
        ])
        .spawn()
        .unwrap();
    let _server = Killed(server);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
        assert!(
            std::time::Instant::now() < end,
            "the webhook never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    b.up()
        .env("BOX_NOTIFY", &format!("https://127.0.0.1:{port}/hook"))
        .env("SSL_CERT_FILE", &format!("{base}/ca.pem"))
        .ok();
    b.exec_sh(
        "printf '%s' '{\"hook_event_name\":\"Notification\",\"notification_type\":\"permission_prompt\",\"message\":\"May I?\"}' | /run/ag-box __agent-state claude",
    )
    .ok();
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let told = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if !text.is_empty() || std::time::Instant::now() >= end {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let told: Vec<serde_json::Value> = told
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        told.len(),
        1,
        "{told:?}; the watcher said: {}",
        std::fs::read_to_string(format!("/run/box/{name}/watch.log")).unwrap_or_default()
    );
    assert_eq!(
        (&told[0]["box"], &told[0]["state"], &told[0]["question"]),
        (
            &serde_json::json!(name),
            &serde_json::json!("waiting"),
            &serde_json::json!("May I?")
        )
    );
    b.park().ok();
}
