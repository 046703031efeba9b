//! Two booted systemd nodes sharing the S3 store: migration, leases, races, scheduling, outages.

mod common;

use common::{Checked, Cluster, Node, Target, assert_code};

/// Where each node keeps the boxes' agent homes.
const HOMES: &str = "/var/lib/ag-box/homes";

/// The rig's restic repository, for checks behind ag-box's back.
const RESTIC_ENV: &str = "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/restic \
    RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test";
/// The rig's repository of changes alone.
const CHANGES_RESTIC_ENV: &str = "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/restic-changes \
    RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test";

#[test]
fn park_on_a_up_on_b_then_leases_remote_up_and_force() {
    let Some(c) = Cluster::get() else { return };
    let name = "mig";
    c.parked_box(name);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    c.a.sh(&format!("ag-box exec {name} -- sh -c 'echo from-a > made.txt; echo {{}} > /root/.claude/projects/-root-{name}/s2.jsonl'")).ok();
    c.a.sh(&format!("ag-box park {name}")).ok();

    // up on B: files and the Claude session arrived, unit active
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    let got = c
        .b
        .sh(&format!("cat /root/{name}/made.txt /root/{name}/src/main.txt {HOMES}/{name}/.claude/projects/-root-{name}/s1.jsonl {HOMES}/{name}/.claude/projects/-root-{name}/s2.jsonl"))
        .ok()
        .stdout();
    assert_eq!(got, "from-a\nv1\n{\"session\":1}\n{}\n");
    assert!(c.active("nodeB", name));
    assert_eq!(c.holder(name).as_deref(), Some("nodeB"));

    // while B holds it, A cannot start it: exit 3 naming nodeB, nothing started on A
    assert_code(
        &c.a.sh(&format!("ag-box up {name} --node nodeA")),
        3,
        "is up on node nodeB",
    );
    assert_code(
        &c.a.sh(&format!("ag-box up {name}")),
        3,
        "is up on node nodeB",
    );
    assert!(!c.active("nodeA", name));

    // remote up: from A, start it on B
    c.b.sh(&format!("ag-box park {name}")).ok();
    let out = c.a.sh(&format!("ag-box up {name} --node nodeB"));
    assert_code(&out, 0, "is up on nodeB");
    assert!(c.active("nodeB", name));
    assert!(!c.active("nodeA", name));

    // --force from A while B holds it: A gets the newest parked content, B's later work forks
    c.b.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo only-on-b > b-only.txt'"
    ))
    .ok();
    let out = c.a.sh(&format!("ag-box up {name} --node nodeA --force"));
    assert_code(&out, 0, "by force");
    assert_eq!(
        c.a.sh(&format!("cat /root/{name}/made.txt")).ok().stdout(),
        "from-a\n"
    );
    assert_ne!(
        c.a.sh(&format!("test -e /root/{name}/b-only.txt")).code(),
        0
    );
    assert_eq!(c.holder(name).as_deref(), Some("nodeA"));

    let out = c.b.sh("ag-box snapshot --active");
    assert_code(&out, 3, "keeps this node's files as a fork");
    assert!(
        out.stderr().contains("was taken over by another node"),
        "{}",
        out.stderr()
    );
    assert!(
        out.stdout().contains(&format!("{name} ")) && out.stdout().contains(" fork"),
        "{}",
        out.stdout()
    );
    assert_eq!(
        c.b.sh(&format!("cat /root/{name}/b-only.txt"))
            .ok()
            .stdout(),
        "only-on-b\n"
    );
    assert_eq!(
        c.holder(name).as_deref(),
        Some("nodeA"),
        "B took the lease back"
    );
    let forks =
        c.b.sh(&format!(
            "{RESTIC_ENV}
             restic snapshots --tag box:{name} --tag fork --json | grep -c '\"fork\"'; \
             restic ls latest --tag box:{name},fork | grep b-only.txt"
        ))
        .ok()
        .stdout();
    assert!(
        forks.contains(&format!("/root/{name}/b-only.txt")),
        "{forks}"
    );

    // park on the old holder stops its copy, says who holds the box, leaves the lease alone
    assert_code(
        &c.b.sh(&format!("ag-box park {name}")),
        3,
        "taken over by nodeA",
    );
    assert!(!c.active("nodeB", name));
    assert_eq!(c.holder(name).as_deref(), Some("nodeA"));
    c.a.sh(&format!("ag-box park {name}")).ok();
    assert_eq!(c.holder(name), None);
}

#[test]
fn simultaneous_up_on_three_nodes_has_exactly_one_winner() {
    let Some(c) = Cluster::get() else { return };
    let name = "race";
    c.parked_box(name);
    let nodes = ["nodeA", "nodeB", "nodeC"];
    let c = &c;
    for round in 1..=50 {
        let outs: Vec<_> = std::thread::scope(|s| {
            let runs: Vec<_> = nodes
                .iter()
                .map(|n| s.spawn(move || c.node(n).sh(&format!("ag-box up {name} --node {n}"))))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let codes: Vec<i32> = outs.iter().map(common::Checked::code).collect();
        let winners: Vec<usize> = (0..3).filter(|i| codes[*i] == 0).collect();
        assert!(
            winners.len() == 1 && codes.iter().filter(|c| **c == 3).count() == 2,
            "round {round}: want one 0 and two 3, got {codes:?}\n{}",
            outs.iter()
                .map(common::Checked::stderr)
                .collect::<Vec<_>>()
                .join("\n")
        );
        let winner = nodes[winners[0]];
        for (i, n) in nodes.iter().enumerate() {
            if i == winners[0] {
                assert!(
                    c.active(n, name),
                    "round {round}: winner {n} has no running box"
                );
                continue;
            }
            assert!(
                outs[i]
                    .stderr()
                    .contains(&format!("is up on node {winner}")),
                "round {round}: {}",
                outs[i].stderr()
            );
            assert!(
                !c.active(n, name),
                "round {round}: {winner} and {n} both run the box"
            );
        }
        assert_eq!(c.holder(name).as_deref(), Some(winner), "round {round}");
        c.node(winner).sh(&format!("ag-box park {name}")).ok();
    }
}

#[test]
fn up_without_node_schedules_on_exactly_one_node_and_skips_unreachable_ones() {
    let Some(c) = Cluster::get() else { return };
    let name = "sched";
    c.parked_box(name);
    let out = c.b.sh(&format!("ag-box up {name}"));
    out.ok();
    let on: Vec<&str> = ["nodeA", "nodeB", "nodeC"]
        .into_iter()
        .filter(|n| c.active(n, name))
        .collect();
    assert_eq!(on.len(), 1, "running on {on:?}\n{}", out.stderr());
    assert_eq!(c.holder(name).as_deref(), Some(on[0]));
    c.node(on[0]).sh(&format!("ag-box park {name}")).ok();

    // B's and C's links are cut: A skips them with a warning and starts the box itself
    let rig = common::repo_root().join("tests/rig.sh");
    let link = |how: &str| {
        for n in ["nodeB", "nodeC"] {
            let done = std::process::Command::new(&rig)
                .args([how, n])
                .status()
                .unwrap();
            assert!(done.success());
        }
    };
    link("link-down");
    let out = c.a.sh(&format!("ag-box up {name}"));
    link("link-up");
    assert_code(&out, 0, "node nodeB is unreachable, skipped");
    assert!(c.active("nodeA", name));
    c.a.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn s3_outage_during_park_keeps_the_lease_and_the_box() {
    let Some(c) = Cluster::get() else { return };
    let name = "outage";
    c.parked_box(name);
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    c.b.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo late > late.txt'"
    ))
    .ok();
    let rig = common::repo_root().join("tests/rig.sh");
    assert!(
        std::process::Command::new(&rig)
            .args(["link-down", "nodeB"])
            .status()
            .unwrap()
            .success()
    );
    let out = c.b.sh(&format!("ag-box park {name}"));
    let still_active = c.active("nodeB", name);
    assert!(
        std::process::Command::new(&rig)
            .args(["link-up", "nodeB"])
            .status()
            .unwrap()
            .success()
    );
    assert_ne!(
        out.code(),
        0,
        "park succeeded without S3:\n{}",
        out.stderr()
    );
    assert!(out.stderr().contains("S3"), "{}", out.stderr());
    assert!(still_active, "the box was stopped by a failed park");
    assert_eq!(c.holder(name).as_deref(), Some("nodeB"));

    // after recovery the retry parks it, and A gets the late file
    c.b.sh(&format!("ag-box park {name}")).ok();
    assert_eq!(c.holder(name), None);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(
        c.a.sh(&format!("cat /root/{name}/late.txt")).ok().stdout(),
        "late\n"
    );
    c.a.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn a_missing_repository_or_bucket_is_reported_with_the_fix() {
    let Some(c) = Cluster::get() else { return };
    let bucket = format!("fresh-{}", std::process::id());
    c.a.sh(&format!("curl -sf -X PUT http://10.200.0.1:5001/{bucket}"))
        .ok();
    let env = [("BOX_BUCKET", bucket.as_str())];
    c.a.sh("rm -rf /root/norepo && mkdir -p /root/norepo && echo x > /root/norepo/f")
        .ok();

    let status = c.a.sh_env(&env, "ag-box status --deep").ok().stdout();
    assert!(
        status.contains("no repository yet (run 'ag-box init')"),
        "{status}"
    );
    let out = c.a.sh_env(&env, "ag-box track norepo");
    assert_code(&out, 1, "does not exist; hint: run 'ag-box init'");
    assert_eq!(
        c.a.sh_env(&env, "ag-box ls --json").ok().stdout(),
        "{\n  \"schema_version\": 1,\n  \"boxes\": []\n}\n",
        "a failed track left a record"
    );

    let made = c.a.sh_env(&env, "ag-box init").ok().stdout();
    assert!(
        made.contains(&format!(
            "repository: s3:http://10.200.0.1:5001/{bucket}/restic (created)"
        )) && made.contains(&format!(
            "changes:    s3:http://10.200.0.1:5001/{bucket}/restic-changes (created)"
        )),
        "{made}"
    );
    let again = c.a.sh_env(&env, "ag-box init").ok().stdout();
    assert_eq!(again.matches("(already there)").count(), 2, "{again}");
    // a lease not renewed within BOX_LEASE_TTL shows as stale (track takes the first lease)
    let stale = [("BOX_BUCKET", bucket.as_str()), ("BOX_LEASE_TTL", "1s")];
    c.a.sh_env(
        &stale,
        "ag-box track norepo && ag-box up norepo --node nodeA",
    )
    .ok();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let ls: serde_json::Value =
        serde_json::from_str(&c.b.sh_env(&env, "ag-box ls --json").ok().stdout()).unwrap();
    assert_eq!(ls["boxes"][0]["lease"]["node"], "nodeA");
    assert_eq!(ls["boxes"][0]["lease_stale"], true);
    assert!(
        c.b.sh_env(&env, "ag-box ls")
            .ok()
            .stdout()
            .contains("nodeA(stale)")
    );
    c.a.sh_env(&env, "ag-box park norepo").ok();

    let out =
        c.a.sh_env(&[("BOX_BUCKET", "no-such-bucket")], "ag-box init");
    assert_code(&out, 1, "bucket 'no-such-bucket' does not exist");
}

/// A bucket as `ag-box init` made it before the repository of changes: a park's changes go to
/// the main repository and come back from there, until `ag-box init` makes the other; a box
/// dropped then leaves nothing in either.
#[test]
fn a_bucket_without_a_changes_repository_serves_until_init_makes_one() {
    let Some(c) = Cluster::get() else { return };
    let name = "legacyrepo";
    c.forget(name);
    let bucket = format!("legacy-{}", std::process::id());
    c.a.sh(&format!("curl -sf -X PUT http://10.200.0.1:5001/{bucket}"))
        .ok();
    let env = [("BOX_BUCKET", bucket.as_str())];
    let restic = |repo: &str, cmd: &str| restic_in(&bucket, repo, cmd);
    let changes_in = |repo: &str| -> usize {
        let tag = format!("changes:{name}");
        let listed = c.a.sh(&restic(
            repo,
            &format!("restic snapshots --tag {tag} --json"),
        ));
        serde_json::from_str::<Vec<serde_json::Value>>(&listed.ok().stdout())
            .unwrap()
            .len()
    };
    let pointer = || bucket_object(&c.a, &bucket, &format!("deltas/{name}.changes.json"));
    c.a.sh(&restic("restic", "restic init")).ok();
    let line = changes_check(&c.a, &env);
    assert!(
        line.starts_with("warn") && line.contains("does not exist"),
        "{line}"
    );
    // Parked on A, changed on B: what B's park saved comes to A from the main repository.
    c.a.sh_env(
        &env,
        &format!(
            "set -e; mkdir -p /root/{name}/src; echo v1 > /root/{name}/src/main.txt
             ag-box track {name}; ag-box park {name}"
        ),
    )
    .ok();
    c.b.sh_env(
        &env,
        &format!(
            "set -e; ag-box up {name} --node nodeB
             ag-box exec {name} -- sh -c 'echo v2 > src/main.txt'; ag-box park {name}"
        ),
    )
    .ok();
    // (Each node's whole snapshot taken beside its park is done before the next step.)
    common::whole_snapshot_done(&c.b, name);
    // `to` brings the box up with what `from` published as it parked, and holds `text` then.
    let comes_to = |to: &Node, from: &Node, text: &str| {
        let up = to.sh_env(&env, &format!("ag-box up {name} --node {}", to.name));
        let published = format!("as {} published them", from.name);
        assert!(up.ok().stderr().contains(&published), "{}", up.stderr());
        let held = to.sh(&format!("cat /root/{name}/src/main.txt"));
        assert_eq!(held.ok().stdout(), text);
    };
    comes_to(&c.a, &c.b, "v2\n");
    assert!(!pointer().contains("repository"), "{}", pointer());
    assert_eq!(changes_in("restic"), 1);
    // Once init made it, changes go there, and come back from there.
    c.a.sh_env(&env, "ag-box init").ok();
    c.a.sh_env(
        &env,
        &format!(
            "set -e; ag-box exec {name} -- sh -c 'echo v3 > src/main.txt'; ag-box park {name}"
        ),
    )
    .ok();
    common::whole_snapshot_done(&c.a, name);
    comes_to(&c.b, &c.a, "v3\n");
    assert!(
        pointer().contains(r#""repository":"sealed""#),
        "{}",
        pointer()
    );
    assert_eq!(
        (
            changes_in("restic"),
            changes_in("restic-changes"),
            sealed_count(&c.a, &bucket, name)
        ),
        (1, 0, 1)
    );
    let line = changes_check(&c.b, &env);
    assert!(line.starts_with("ok"), "{line}");
    // Dropped: none of its snapshots is left in either.
    c.b.sh_env(&env, &format!("ag-box park {name}")).ok();
    common::whole_snapshot_done(&c.b, name);
    c.a.sh_env(&env, &format!("ag-box drop {name} --yes")).ok();
    for repo in ["restic", "restic-changes"] {
        assert_eq!(
            c.a.sh(&restic(repo, "restic snapshots --json --no-lock"))
                .ok()
                .stdout()
                .trim(),
            "[]",
            "{repo}"
        );
    }
    assert_eq!(sealed_count(&c.a, &bucket, name), 0);
    c.forget(name);
}

/// How many sealed changes objects of box `name` the rig's `bucket` holds.
fn sealed_count(n: &common::Node, bucket: &str, name: &str) -> usize {
    n.sh(&format!(
        "curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user test:test 'http://10.200.0.1:5001/{bucket}?list-type=2&prefix=changes/{name}/'"
    ))
    .ok()
    .stdout()
    .matches("<Key>")
    .count()
}

/// What box `name`'s `src/main.txt` holds on node `n`.
fn main_txt(n: &common::Node, name: &str) -> String {
    n.sh(&format!("cat /root/{name}/src/main.txt"))
        .ok()
        .stdout()
}

/// `cmd` with restic's environment set for repository `repo` in the rig's `bucket`.
fn restic_in(bucket: &str, repo: &str, cmd: &str) -> String {
    format!(
        "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/{bucket}/{repo} RESTIC_PASSWORD=rig-password \
         AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test; {cmd}"
    )
}

/// An object of the rig's S3 server, as it is.
fn bucket_object(n: &common::Node, bucket: &str, key: &str) -> String {
    n.sh(&format!(
        "curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user test:test http://10.200.0.1:5001/{bucket}/{key}"
    ))
    .ok()
    .stdout()
}

/// `ag-box doctor`'s line on the changes repository.
fn changes_check(n: &common::Node, env: &[(&str, &str)]) -> String {
    let doctor = n.sh_env(env, "ag-box doctor").stdout();
    doctor
        .lines()
        .find(|l| l.contains("changes repository"))
        .unwrap_or_else(|| panic!("no changes repository check:\n{doctor}"))
        .to_string()
}

#[test]
fn agent_sessions_of_the_project_move_and_others_stay() {
    let Some(c) = Cluster::get() else { return };
    let name = "agents";
    let codex_day = "/root/.codex/sessions/2026/11/29";
    let mine = format!("{codex_day}/rollout-2026-11-29T10-00-00-{name}.jsonl");
    let theirs = format!("{codex_day}/rollout-2026-11-29T11-00-00-other.jsonl");
    let grok_mine = format!("/root/.grok/sessions/%2Froot%2F{name}");
    let grok_theirs = "/root/.grok/sessions/%2Froot%2Fsomething-else";
    let gemini = format!("/root/.gemini/tmp/{}", sha256_hex(&format!("/root/{name}")));
    for n in [&c.a, &c.b] {
        n.sh(&format!("rm -rf {mine} {theirs} {grok_mine} {grok_theirs} {gemini} /root/.gemini/tmp/{name}-slug /root/.codex/auth.json")).ok();
    }
    c.a.sh(&format!(
        "set -e; mkdir -p {codex_day} {grok_mine} {grok_theirs} {gemini}/chats /root/.gemini/tmp/{name}-slug/chats
         printf '%s\\n%s\\n' '{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"c1\",\"cwd\":\"/root/{name}\"}}}}' '{{\"type\":\"event\"}}' > {mine}
         printf '%s\\n' '{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"c2\",\"cwd\":\"/root/other\"}}}}' > {theirs}
         echo grok-mine > {grok_mine}/chat.json; echo grok-theirs > {grok_theirs}/chat.json
         echo gemini-old > {gemini}/chats/s.json
         echo /root/{name} > /root/.gemini/tmp/{name}-slug/.project_root; echo gemini-new > /root/.gemini/tmp/{name}-slug/chats/s.jsonl
         echo '{{\"token\":\"secret\"}}' > /root/.codex/auth.json"
    ))
    .ok();
    c.parked_box(name);
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    // On B they are in the box's own agent home, at the places the agents look for them.
    let h = format!("{HOMES}/{name}");
    let rel = |p: &str| p.trim_start_matches("/root/").to_string();
    let (r_mine, r_theirs, r_grok_mine, r_grok_theirs, r_gemini) = (
        rel(&mine),
        rel(&theirs),
        rel(&grok_mine),
        rel(grok_theirs),
        rel(&gemini),
    );
    let moved = c
        .b
        .sh(&format!(
            "cd {h}; tail -1 {r_mine}; cat {r_grok_mine}/chat.json {r_gemini}/chats/s.json .gemini/tmp/{name}-slug/chats/s.jsonl; \
             for p in {theirs} {grok_theirs} /root/.codex/auth.json {r_theirs} {r_grok_theirs}; do test -e $p && echo LEAKED $p; done
             grep -qs secret .codex/auth.json && echo LEAKED auth.json; true"
        ))
        .ok()
        .stdout();
    assert_eq!(
        moved,
        "{\"type\":\"event\"}\ngrok-mine\ngemini-old\ngemini-new\n"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}

fn sha256_hex(s: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(s.as_bytes())
        .iter()
        .fold(String::new(), |mut out, b| {
            use std::fmt::Write as _;
            let _ = write!(out, "{b:02x}");
            out
        })
}

#[test]
fn globals_push_on_a_and_pull_on_b_keep_modes_and_follow_roles() {
    // Alone: any box's up on the nodes shares the credentials with the boxes (mode 0660).
    let Some(c) = Cluster::get_alone() else {
        return;
    };
    let cred = "/root/.claude/.credentials.json";
    c.b.sh(&format!("rm -f {cred} /root/.gitconfig")).ok();
    c.a.sh(&format!(
        "set -e; mkdir -p /root/.claude; umask 077; echo '{{\"v\":1}}' > {cred}; chmod 600 {cred}
         printf '[user]\\n\\tname = A\\n' > /root/.gitconfig; chmod 644 /root/.gitconfig"
    ))
    .ok();
    c.a.sh("ag-box globals push").ok();
    c.b.sh("ag-box globals pull").ok();
    let got =
        c.b.sh(&format!(
            "stat -c '%a %n' {cred} /root/.gitconfig; cat {cred}"
        ))
        .ok()
        .stdout();
    assert_eq!(
        got,
        format!("600 {cred}\n644 /root/.gitconfig\n{{\"v\":1}}\n")
    );

    // auto follows BOX_GLOBALS_ROLE on each node
    c.a.sh(&format!("echo '{{\"v\":2}}' > {cred}")).ok();
    let out =
        c.a.sh_env(&[("BOX_GLOBALS_ROLE", "push")], "ag-box globals auto");
    assert!(
        out.ok().stdout().starts_with("globals "),
        "{}",
        out.stderr()
    );
    let out =
        c.b.sh_env(&[("BOX_GLOBALS_ROLE", "pull")], "ag-box globals auto");
    assert!(out.ok().stderr().contains("pulled"), "{}", out.stderr());
    assert_eq!(
        c.b.sh(&format!("cat {cred}; stat -c %a {cred}"))
            .ok()
            .stdout(),
        "{\"v\":2}\n600\n"
    );
    assert_code(
        &c.b.sh("ag-box globals auto"),
        0,
        "BOX_GLOBALS_ROLE is not set",
    );

    // push on a pull node says what it does and does not do
    let out =
        c.b.sh_env(&[("BOX_GLOBALS_ROLE", "pull")], "ag-box globals push");
    assert_code(&out, 0, "does not write them to the push node's disk");

    // A box running on B binds the very file: it sees what the next pull brings.
    let name = "glob";
    c.parked_box(name);
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    c.a.sh(&format!(
        "echo '{{\"v\":3}}' > {cred} && ag-box globals push"
    ))
    .ok();
    c.b.sh("ag-box globals pull").ok();
    assert_eq!(
        c.b.sh(&format!("ag-box exec {name} -- cat {cred}"))
            .ok()
            .stdout(),
        "{\"v\":3}\n"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}

/// How many snapshots have `tag`; a box's changes are in the repository of changes alone.
fn snapshot_count(n: &common::Node, tag: &str) -> usize {
    let out = n
        .sh(&format!(
            "{RESTIC_ENV}; restic snapshots --tag {tag} --json"
        ))
        .ok()
        .stdout();
    serde_json::from_str::<serde_json::Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn prune_follows_retention_and_boxes_still_move() {
    let Some(c) = Cluster::get() else { return };
    let name = "pr";
    c.parked_box(name);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    for i in 0..4 {
        c.a.sh(&format!(
            "ag-box exec {name} -- sh -c 'echo {i} > n.txt' && ag-box snapshot {name}"
        ))
        .ok();
    }
    c.a.sh(&format!("ag-box exec {name} -- sh -c 'echo final > n.txt'"))
        .ok();
    c.a.sh(&format!("ag-box park {name}")).ok();
    let before = snapshot_count(&c.a, &format!("box:{name}"));
    assert!(before >= 6, "{before}");
    // The park sealed what changed since the first park in an object of its own.
    assert_eq!(sealed_count(&c.a, "agent-boxes", name), 1);
    let keep = [
        ("BOX_KEEP_LAST", "2"),
        ("BOX_KEEP_DAILY", "0"),
        ("BOX_KEEP_WEEKLY", "0"),
    ];

    let dry = c.a.sh_env(&keep, "ag-box prune --dry-run");
    assert_code(&dry, 0, "dry run: nothing was removed");
    let forget_lines = dry
        .stdout()
        .lines()
        .filter(|l| l.starts_with(&format!("forget {name} ")))
        .count();
    assert_eq!(forget_lines, before - 2, "{}", dry.stdout());
    // Each kept one says why, in words; the changes that lead to the latest stay with it.
    let dry_out = dry.stdout();
    let kept: Vec<&str> = dry_out
        .lines()
        .filter(|l| l.starts_with(&format!("keep   {name} ")))
        .collect();
    assert_eq!(kept.len(), 3, "{dry_out}");
    assert!(
        kept.iter().all(|l| l.ends_with("(one of the last)")
            || l.ends_with("(the box's latest)")
            || l.ends_with("(what changed up to the box's latest)")),
        "{kept:?}"
    );
    assert_eq!(
        kept.iter()
            .filter(|l| l.ends_with("(what changed up to the box's latest)"))
            .count(),
        1,
        "{kept:?}"
    );
    assert_eq!(snapshot_count(&c.a, &format!("box:{name}")), before);

    c.a.sh_env(&keep, "ag-box prune").ok();
    assert_eq!(snapshot_count(&c.a, &format!("box:{name}")), 2);
    assert_eq!(sealed_count(&c.a, "agent-boxes", name), 1);

    // the parked snapshot survived: the box still moves
    c.b.sh(&format!(
        "rm -rf /root/{name}; ag-box up {name} --node nodeB"
    ))
    .ok();
    assert_eq!(
        c.b.sh(&format!("cat /root/{name}/n.txt")).ok().stdout(),
        "final\n"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}

/// A snapshot whose parent is gone from the repository (forgotten behind ag-box's back; or a
/// quick park's changes, kept in the repository of changes) is taken with the parent restic
/// picks itself, never refused.
#[test]
fn a_snapshot_whose_parent_is_gone_is_taken_all_the_same() {
    let Some(c) = Cluster::get() else { return };
    let name = "noparent";
    c.parked_box(name);
    let taken =
        |out: &std::process::Output| out.stdout().split_whitespace().nth(1).unwrap().to_string();
    // nodeA runs restic 0.14 and nodeB a current one (rig.sh): they name a missing snapshot in
    // other words.
    for n in [&c.a, &c.b] {
        let first = n.sh(&format!(
            "ag-box up {name} --node {} >/dev/null && ag-box exec {name} -- sh -c 'echo {0} > before.txt' \
             && ag-box snapshot {name}",
            n.name
        ));
        assert!(
            !first.ok().stderr().contains("is not in"),
            "{}",
            first.stderr()
        );
        let first = taken(&first);
        n.sh(&format!("{RESTIC_ENV}; restic forget {first}")).ok();
        let next = n.sh(&format!(
            "ag-box exec {name} -- sh -c 'echo {} > after.txt' && ag-box snapshot {name}",
            n.name
        ));
        let warned = format!("its parent snapshot {} is not in", &first[..8]);
        assert!(next.ok().stderr().contains(&warned), "{}", next.stderr());
        let listed = n.sh(&format!(
            "{RESTIC_ENV}; restic dump --no-lock {} /root/{name}/after.txt",
            taken(&next)
        ));
        assert_eq!(listed.ok().stdout(), format!("{}\n", n.name));
        n.sh(&format!("ag-box park {name}")).ok();
    }
}

#[test]
fn drop_needs_confirmation_and_a_parked_box_and_keeps_local_files() {
    let Some(c) = Cluster::get() else { return };
    let name = "dr";
    c.parked_box(name);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    // Running here: park it first (1); up on another node: that node holds it (3).
    assert_code(
        &c.a.sh(&format!("ag-box drop {name} --yes")),
        1,
        &format!("box '{name}' is running on this node; hint: run 'ag-box park {name}' first"),
    );
    assert_code(
        &c.b.sh(&format!("ag-box drop {name} --yes")),
        3,
        "is up on node nodeA",
    );
    c.a.sh(&format!("ag-box park {name}")).ok();
    assert_code(
        &c.a.sh(&format!("ag-box drop {name} < /dev/null")),
        2,
        "without confirmation",
    );
    assert!(c.holder(name).is_none() && snapshot_count(&c.a, &format!("box:{name}")) > 0);

    c.b.sh(&format!("ag-box drop {name} --yes")).ok();
    let ls = c.a.sh("ag-box ls --json").ok().stdout();
    assert!(!ls.contains(&format!("\"name\": \"{name}\"")), "{ls}");
    assert_eq!(snapshot_count(&c.a, &format!("box:{name}")), 0);
    assert_eq!(main_txt(&c.a, name), "v1\n");
    assert_code(&c.a.sh(&format!("ag-box up {name}")), 1, "is not tracked");
}

#[test]
fn snapshot_active_takes_every_box_at_once_and_still_reports_a_fork() {
    let Some(c) = Cluster::get() else { return };
    let (kept, taken) = ("par-kept", "par-taken");
    for name in [kept, taken] {
        c.parked_box(name);
        c.a.sh(&format!("ag-box up {name} --node nodeB")).ok();
    }
    // A box of another install on nodeB (a state dir and store of its own), as the boundary
    // tests run: not this install's to snapshot.
    let other = "BOX_CONFIG_DIR=/root/.config/box-local BOX_STATE_DIR=/var/lib/ag-box-par-other";
    c.b.sh(&format!(
        "export {other}; ag-box park par-other >/dev/null 2>&1 || true; rm -rf /var/lib/ag-box-par-other
         set -e; mkdir -p /root/par-other; ag-box track par-other /root/par-other >/dev/null 2>&1
         ag-box up par-other >/dev/null 2>&1"
    ))
    .ok();
    c.a.sh(&format!("ag-box up {taken} --node nodeA --force"))
        .ok();
    let renewed = |name: &str| {
        common::box_row(&c.a, name).unwrap()["lease"]["renewed_at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = renewed(kept);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // nodeB's state of one box lost: the store's records say it is this install's.
    c.b.sh(&format!("rm /var/lib/ag-box/local/{kept}.json"))
        .ok();
    let out = c.b.sh("ag-box snapshot --active");
    assert_code(
        &out,
        3,
        &format!("box {taken} runs here but was taken over"),
    );
    let lines: Vec<String> = out.stdout().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{kept} ")) && !l.ends_with(" fork")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{taken} ")) && l.ends_with(" fork")),
        "{lines:?}"
    );
    assert_ne!(renewed(kept), before, "the kept box's lease was renewed");
    assert_eq!(c.holder(taken).as_deref(), Some("nodeA"));
    // What the run measured, for the next to plan by and for `status`: each box's seconds, the
    // most memory one of its processes took (an ag-box or a restic), how many ran at once and
    // how busy the cores were.
    let status: serde_json::Value =
        serde_json::from_str(&c.b.sh("ag-box status --json").ok().stdout()).unwrap();
    let last = &status["last_active_run"];
    assert_eq!(last["boxes"], 2, "{last}");
    assert!(
        [kept, taken].contains(&last["longest_box"].as_str().unwrap())
            && last["longest_seconds"].as_f64().unwrap() > 0.0
            && last["peak_memory"].as_u64().unwrap() > 16 << 20
            && last["at_once"] == 2
            && (0.0..=1.0).contains(&last["cores_busy"].as_f64().unwrap()),
        "{last}"
    );
    assert!(
        c.b.sh("ag-box status")
            .ok()
            .stdout()
            .contains("last --active: "),
        "status does not show the last run"
    );
    for (node, name) in [(&c.b, kept), (&c.b, taken), (&c.a, taken)] {
        node.sh(&format!("ag-box park {name} >/dev/null 2>&1 || true"))
            .ok();
    }
    c.b.sh(&format!(
        "export {other}; ag-box park par-other >/dev/null 2>&1 || true; rm -rf /var/lib/ag-box-par-other /root/par-other"
    ))
    .ok();
}

#[test]
fn symlinks_a_box_planted_in_its_copy_do_not_lead_a_restore_in_place_out_of_it() {
    let Some(c) = Cluster::get() else { return };
    let name = "planted";
    c.parked_box(name);
    // On B (restic 0.17+), the agent plants symlinks to node paths where the box's next
    // state has a dir and a file; B's copy keeps them when the box leaves.
    c.b.sh(&format!(
        "set -e; mkdir -p /root/victim-dir; echo victim > /root/victim-file; rm -f /root/victim-dir/f
         ag-box up {name} --node nodeB
         ag-box exec {name} -- sh -c 'ln -s /root/victim-dir sub; ln -s /root/victim-file file2'
         ag-box park {name}"
    ))
    .ok();
    c.a.sh(&format!(
        "ag-box up {name} --node nodeA && ag-box exec {name} -- sh -c 'rm sub file2; mkdir sub; echo new > sub/f; echo x > file2' && ag-box park {name}"
    ))
    .ok();
    let up = c.b.sh(&format!("ag-box up {name} --node nodeB"));
    assert!(up.ok().stderr().contains("in place"), "{}", up.stderr());
    assert_eq!(
        c.b.sh(&format!(
            "cat /root/victim-file; ls -A /root/victim-dir; cd /root/{name}; \
             test -L sub || test -L file2 && echo STILL-LINKS; cat sub/f file2"
        ))
        .ok()
        .stdout(),
        "victim\nnew\nx\n"
    );
    c.b.sh(&format!(
        "ag-box park {name}; rm -rf /root/victim-dir /root/victim-file"
    ))
    .ok();
}

/// What each park published is sealed in an object of its own (`changes/<box>/`), whichever
/// restic the node runs: no restic repository holds it, and the pointer names it so.
fn changes_are_sealed_apart(n: &common::Node, name: &str) {
    for env in [CHANGES_RESTIC_ENV, RESTIC_ENV] {
        let listed = n.sh(&format!(
            "{env}; restic snapshots --tag changes:{name} --json --no-lock"
        ));
        assert_eq!(listed.ok().stdout().trim(), "[]", "{env}");
    }
    let pointer = bucket_object(n, "agent-boxes", &format!("deltas/{name}.changes.json"));
    assert!(pointer.contains(r#""repository":"sealed""#), "{pointer}");
    assert!(sealed_count(n, "agent-boxes", name) >= 2);
}

#[test]
fn a_box_coming_back_to_a_node_gets_only_what_changed_with_either_restic() {
    let Some(c) = Cluster::get() else { return };
    // rig.sh gives nodeB Debian 13's restic and nodeA Debian 12's 0.14.
    let minor = |n: &Node| -> u32 {
        let v = n.sh("restic version").ok().stdout();
        v.split(['.', ' '])
            .nth(2)
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!((minor(&c.a), minor(&c.b) >= 17), (14, true));
    let name = "delta";
    let sessions = format!("{HOMES}/{name}/.claude/projects/-root-{name}");
    c.parked_box(name);
    // B's first copy (restored whole), with files of its own that no snapshot holds.
    c.b.sh(&format!(
        "set -e; ag-box up {name} --node nodeB
         mkdir -p /root/{name}/__pycache__; echo b-own > /root/{name}/__pycache__/c.pyc
         echo b-secret > /root/{name}/.auth-secret; echo old-session > {sessions}/old.jsonl
         ag-box exec {name} -- sh -c 'echo doomed > doomed.txt; echo kept > kept.txt'
         ag-box park {name}"
    ))
    .ok();
    // A (0.14) held the box's first snapshot: it writes only what B changed (B published it
    // as it parked), and changes the box.
    let up_a = c.a.sh(&format!("ag-box up {name} --node nodeA"));
    up_a.ok();
    assert!(
        up_a.stderr().contains(" changed since snapshot")
            && up_a.stderr().contains("as nodeB published them")
            && !up_a.stderr().contains("fork snapshot"),
        "{}",
        up_a.stderr()
    );
    c.a.sh(&format!(
        "set -e; ag-box exec {name} -- sh -c 'rm doomed.txt; echo v2 > src/main.txt; echo new > added.txt; chmod 700 src'
         rm {sessions}/old.jsonl; echo '{{\"session\":2}}' >> {sessions}/s1.jsonl
         ag-box park {name}"
    ))
    .ok();
    // B brings its older copy to A's snapshot in place: only what differs, nothing kept aside.
    let up_b = c.b.sh(&format!("ag-box up {name} --node nodeB"));
    up_b.ok();
    assert!(
        up_b.stderr().contains("in place")
            && up_b.stderr().contains("1 dir with another mode or owner")
            && up_b.stderr().contains("as nodeA published them")
            && !up_b.stderr().contains("fork snapshot"),
        "{}",
        up_b.stderr()
    );
    changes_are_sealed_apart(&c.a, name);
    assert_eq!(
        c.b.sh(&format!(
            "cd /root/{name}; cat src/main.txt added.txt kept.txt .auth-secret __pycache__/c.pyc {sessions}/s1.jsonl
             for f in doomed.txt {sessions}/old.jsonl; do test -e $f && echo STILL-THERE $f; done
             ls -a /root | grep -c '^\\.{name}\\.ag-box-' || true; stat -c %a src"
        ))
        .ok()
        .stdout(),
        "v2\nnew\nkept\nb-secret\nb-own\n{\"session\":1}\n{\"session\":2}\n0\n700\n"
    );
    // And back to 0.14 the same way, but through restic, what B published being lost (a park
    // cut off before it published): a hard link travels only there, and modes changed alone
    // come by `restic ls` (restic diff says nothing of them). The node's dirs above the box's
    // keep theirs.
    let root_mode = c.a.sh("stat -c %a /root").ok().stdout().trim().to_string();
    c.b.sh(&format!(
        "set -e; chmod 751 /root
         ag-box exec {name} -- sh -c 'echo v3 > src/main.txt; ln src/main.txt hard.txt; chmod 640 kept.txt; chmod 750 src'
         ag-box park {name}; chmod {root_mode} /root"
    ))
    .ok();
    // Once B's whole snapshot took the place of its changes (until then, they are the box's
    // latest and the pointer to them is all there is).
    common::whole_snapshot_done(&c.b, name);
    c.b.sh(&format!(
        "curl -sf -X DELETE --aws-sigv4 aws:amz:us-east-1:s3 --user test:test http://10.200.0.1:5001/agent-boxes/deltas/{name}.changes.json"
    ))
    .ok();
    let up_a = c.a.sh(&format!("ag-box up {name} --node nodeA"));
    assert!(
        up_a.ok().stderr().contains(" changed since snapshot")
            && !up_a.stderr().contains("as nodeB published them"),
        "{}",
        up_a.stderr()
    );
    assert_eq!(
        c.a.sh(&format!(
            "cd /root/{name}; cat src/main.txt hard.txt; stat -c %h hard.txt; stat -c %a kept.txt src /root"
        ))
        .ok()
        .stdout(),
        format!("v3\nv3\n2\n640\n750\n{root_mode}\n")
    );
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// What a park sealed is refused when the bucket changed it: a bit flipped, or another box's
/// object put in its place. The next node says so, takes another way to the box's latest,
/// and holds it.
#[test]
fn sealed_changes_altered_or_swapped_in_the_bucket_are_refused() {
    let Some(c) = Cluster::get() else { return };
    let (flipped, swapped) = ("sealflip", "sealswap");
    let s3 = "curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user test:test";
    let bucket = "http://10.200.0.1:5001/agent-boxes";
    let object = |name: &str| -> String {
        let listed = c.a.sh(&format!(
            "{s3} '{bucket}?list-type=2&prefix=changes/{name}/'"
        ));
        let listed = listed.ok().stdout();
        let keys: Vec<&str> = listed
            .split("<Key>")
            .skip(1)
            .filter_map(|k| k.split("</Key>").next())
            .collect();
        assert_eq!(keys.len(), 1, "{listed}");
        keys[0].to_string()
    };
    // Each box's copy on A is its first snapshot; B changes it and parks: sealed changes.
    for name in [flipped, swapped] {
        c.parked_box(name);
        c.b.sh(&format!(
            "set -e; ag-box up {name} --node nodeB
             ag-box exec {name} -- sh -c 'echo v2 > src/main.txt'; ag-box park {name}"
        ))
        .ok();
        common::whole_snapshot_done(&c.b, name);
    }
    let (flip_key, swap_key) = (object(flipped), object(swapped));
    c.a.sh(&format!(
        "set -e; {s3} -o /root/sealed.orig {bucket}/{flip_key}
         python3 -c 'import sys; b = bytearray(open(sys.argv[1], \"rb\").read()); b[40] ^= 1; open(sys.argv[2], \"wb\").write(b)' /root/sealed.orig /root/sealed.bad
         ! cmp -s /root/sealed.orig /root/sealed.bad
         {s3} -T /root/sealed.bad {bucket}/{flip_key}
         {s3} -T /root/sealed.orig {bucket}/{swap_key}
         rm /root/sealed.orig /root/sealed.bad"
    ))
    .ok();
    for (name, why) in [
        (flipped, "opening the sealed changes"),
        (
            swapped,
            &format!("it holds box '{flipped}''s changes, not box '{swapped}''s"),
        ),
    ] {
        let up = c.a.sh(&format!("ag-box up {name} --node nodeA"));
        let err = up.ok().stderr();
        assert!(
            err.contains("is not used") && err.contains(why) && !err.contains("published them"),
            "{err}"
        );
        assert_eq!(main_txt(&c.a, name), "v2\n");
        c.a.sh(&format!("ag-box park {name}")).ok();
    }
}

/// What another node sealed opens on a node whose own key of the repository of changes no
/// longer does (the operator's password serves), and a change larger than a sealed object may
/// be goes to that repository as a snapshot, and comes back from there.
#[test]
fn sealed_changes_open_without_this_nodes_key_and_a_large_change_goes_to_restic() {
    let Some(c) = Cluster::get() else { return };
    let name = "sealbig";
    let key_file = "/var/lib/ag-box/restic-changes-node-key.json";
    let pointer = || bucket_object(&c.a, "agent-boxes", &format!("deltas/{name}.changes.json"));
    c.parked_box(name);
    c.a.sh(&format!(
        "set -e; cp {key_file} /root/sealbig-key.keep
         python3 -c 'import json, sys; k = json.load(open(sys.argv[1])); k[\"password\"] = \"0\" * 64; json.dump(k, open(sys.argv[1], \"w\"))' {key_file}"
    ))
    .ok();
    c.b.sh(&format!(
        "set -e; ag-box up {name} --node nodeB
         ag-box exec {name} -- sh -c 'echo v2 > src/main.txt'; ag-box park {name}"
    ))
    .ok();
    common::whole_snapshot_done(&c.b, name);
    assert!(
        pointer().contains(r#""repository":"sealed""#),
        "{}",
        pointer()
    );
    let up_a = c.a.sh(&format!("ag-box up {name} --node nodeA"));
    let err = up_a.ok().stderr();
    c.a.sh(&format!("mv /root/sealbig-key.keep {key_file}"))
        .ok();
    assert!(
        err.contains("as nodeB published them") && err.contains("did not open"),
        "{err}"
    );
    assert_eq!(main_txt(&c.a, name), "v2\n");
    c.a.sh(&format!(
        "set -e; ag-box exec {name} -- sh -c 'head -c 70000000 /dev/urandom > big.bin; echo v3 > src/main.txt'
         ag-box park {name}"
    ))
    .ok();
    assert!(
        pointer().contains(r#""repository":"changes""#),
        "{}",
        pointer()
    );
    assert_eq!(sealed_count(&c.a, "agent-boxes", name), 1);
    common::whole_snapshot_done(&c.a, name);
    let up_b = c.b.sh(&format!("ag-box up {name} --node nodeB"));
    assert!(
        up_b.ok().stderr().contains("as nodeA published them"),
        "{}",
        up_b.stderr()
    );
    let sums = |n: &Node| {
        n.sh(&format!("cd /root/{name}; sha256sum big.bin src/main.txt"))
            .ok()
            .stdout()
    };
    assert_eq!(sums(&c.b), sums(&c.a));
    c.b.sh(&format!("ag-box park {name}")).ok();
}

/// `prune` deletes the sealed changes that no longer lead to a box's latest, and keeps the
/// ones that do.
#[test]
fn prune_deletes_sealed_changes_that_lead_nowhere() {
    let Some(c) = Cluster::get() else { return };
    let name = "sealprune";
    c.parked_box(name);
    for v in ["v2", "v3"] {
        c.b.sh(&format!(
            "set -e; ag-box up {name} --node nodeB
             ag-box exec {name} -- sh -c 'echo {v} > src/main.txt'; ag-box park {name}"
        ))
        .ok();
        common::whole_snapshot_done(&c.b, name);
    }
    assert_eq!(sealed_count(&c.a, "agent-boxes", name), 2);
    let dry = c.a.sh("ag-box prune --dry-run");
    assert!(
        dry.ok()
            .stdout()
            .lines()
            .any(|l| l.starts_with(&format!("keep   {name} "))
                && l.ends_with("(what changed up to the box's latest)")),
        "{}",
        dry.stdout()
    );
    c.a.sh("ag-box prune").ok();
    assert_eq!(sealed_count(&c.a, "agent-boxes", name), 1);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(main_txt(&c.a, name), "v3\n");
    c.a.sh(&format!("ag-box park {name}")).ok();
}

#[test]
fn each_node_opens_the_repository_with_a_key_of_its_own_and_a_reinstall_replaces_it() {
    const KEY_FILE: &str = "/var/lib/ag-box/restic-node-key.json";
    const CHANGES_KEY_FILE: &str = "/var/lib/ag-box/restic-changes-node-key.json";
    const MASTER_KEY_FILE: &str = "/var/lib/ag-box/restic-master-key.json";
    const BY_PROXY: &str = "BOX_S3_ENDPOINT=http://10.200.0.1:5002";
    let Some(c) = Cluster::get() else { return };
    // nodeC's keys in the repository, as the operator's password lists them.
    let keys = || -> Vec<String> {
        let listed =
            c.c.sh(&format!("{RESTIC_ENV}; restic key list --json --no-lock"))
                .ok()
                .stdout();
        let all: Vec<serde_json::Value> = serde_json::from_str(&listed).unwrap();
        all.iter()
            .filter(|k| k["userName"] == "ag-box" && k["hostName"] == "nodeC")
            .map(|k| k["id"].as_str().unwrap()[..8].to_string())
            .collect()
    };
    let own = || -> String {
        let text = c.c.sh(&format!("cat {KEY_FILE}")).ok().stdout();
        let file: serde_json::Value = serde_json::from_str(&text).unwrap();
        file["id"].as_str().unwrap()[..8].to_string()
    };
    c.c.sh("ag-box init").ok();
    let first = own();
    assert_eq!(keys(), vec![first.clone()]);
    // And a key of its own for the repository of changes, kept beside.
    let changes_key = c.c.sh(&format!("cat {CHANGES_KEY_FILE}")).ok().stdout();
    let changes_key: serde_json::Value = serde_json::from_str(&changes_key).unwrap();
    let listed =
        c.c.sh(&format!(
            "{CHANGES_RESTIC_ENV}; restic key list --json --no-lock"
        ))
        .ok()
        .stdout();
    assert!(
        listed.contains(&format!(
            "\"id\":\"{}\"",
            &changes_key["id"].as_str().unwrap()[..8]
        )),
        "{listed}"
    );
    // Reinstalled (its state lost): a new key, and the old one is gone.
    c.c.sh(&format!("rm {KEY_FILE}; ag-box init")).ok();
    let second = own();
    assert_ne!(second, first);
    assert_eq!(keys(), vec![second.clone()]);
    // Its key removed from the repository: the operator's password serves, then a new key.
    c.c.sh(&format!("{RESTIC_ENV}; restic key remove {second}"))
        .ok();
    let init = c.c.sh("ag-box init");
    assert!(
        init.ok().stderr().contains("refused this node's key"),
        "{}",
        init.stderr()
    );
    c.c.sh("ag-box init").ok();
    assert_eq!(keys(), [own()]);
    // The master key an earlier version kept beside the node key is removed by the next
    // command: nothing reads it now.
    let kept = || {
        c.c.sh(&format!("test -e {MASTER_KEY_FILE}"))
            .status
            .success()
    };
    c.c.sh(&format!(
        "echo '{{}}' > {MASTER_KEY_FILE}; chmod 600 {MASTER_KEY_FILE}"
    ))
    .ok();
    assert!(kept(), "planted");
    c.c.sh("ag-box init").ok();
    assert!(!kept());
    // The same repository at another address (the fault proxy in front of the S3 server): one
    // new key replaces the old, and the next command opens with it.
    let before = own();
    c.c.sh(&format!("{BY_PROXY} ag-box init")).ok();
    let by_proxy = own();
    assert_ne!(by_proxy, before);
    assert_eq!(keys(), vec![by_proxy.clone()]);
    let again = c.c.sh(&format!("{BY_PROXY} ag-box init"));
    assert!(
        !again.ok().stderr().contains("added this node's key"),
        "{}",
        again.stderr()
    );
    assert_eq!((own(), keys()), (by_proxy.clone(), vec![by_proxy]));
    c.c.sh("ag-box init").ok();
}

/// The Gemini login a box makes in its own home (the broker answers no sign-in for Gemini).
const ACCESS: &str = "ya29.FromABoxFromABoxFromABoxFromABox00";
const REFRESH: &str = "1//FromABoxRefreshFromABoxRefresh00";

/// A login made inside a box on a node without that agent's credentials moves, once adopted,
/// with `globals` to the next node, where the box comes up logged in (through the broker: it
/// sees placeholders).
#[test]
fn a_login_made_inside_a_box_reaches_the_next_node_once_adopted() {
    let Some(c) = Cluster::get() else {
        return;
    };
    let name = "adoptlogin";
    let cred = "/root/.gemini/oauth_creds.json";
    for n in c.all() {
        n.sh(&format!("rm -f {cred}")).ok();
    }
    c.parked_box(name);
    // Whatever agent the box holds, it is given Gemini's login.
    c.a.sh(&format!("ag-box set {name} creds=gemini")).ok();
    c.a.sh(&format!(
        "set -e; ag-box up {name} --node nodeA
         ag-box exec {name} -- sh -c 'echo {{\\\"access_token\\\":\\\"{ACCESS}\\\",\\\"refresh_token\\\":\\\"{REFRESH}\\\",\\\"expiry_date\\\":4102444800000}} > ~/.gemini/oauth_creds.json'"
    ))
    .ok();
    let out = c.a.sh(&format!("ag-box park {name}"));
    assert_code(
        &out,
        0,
        "holds a login made inside it (~/.gemini/oauth_creds.json)",
    );
    assert_eq!(
        c.a.sh(&format!("ag-box globals adopt {name}"))
            .ok()
            .stdout(),
        format!("adopted {cred}\n")
    );
    c.a.sh("ag-box globals push").ok();
    c.b.sh("ag-box globals pull").ok();
    // Node B holds it; its box, given Gemini's login, sees the broker's placeholders of it.
    assert!(c.b.read(cred).contains(REFRESH));
    let out = c.b.sh(&format!(
        "set -e; ag-box up {name} --node nodeB >/dev/null; ag-box exec {name} -- cat ~/.gemini/oauth_creds.json"
    ));
    let seen: serde_json::Value = serde_json::from_str(&out.ok().stdout()).unwrap();
    let token = |k: &str| seen[k].as_str().unwrap().to_string();
    assert!(
        token("access_token").starts_with("ya29.")
            && token("access_token") != ACCESS
            && token("refresh_token").starts_with("1//")
            && token("refresh_token") != REFRESH,
        "{seen}"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
    for n in c.all() {
        n.sh(&format!("rm -f {cred}")).ok();
    }
}

#[test]
fn a_quick_park_frees_the_node_at_once_and_its_whole_snapshot_follows() {
    let Some(c) = Cluster::get() else { return };
    let name = "quick";
    c.parked_box(name);
    let latest = || common::box_row(&c.a, name).unwrap()["last_snapshot"].clone();
    let first = latest()["id"].as_str().unwrap().to_string();
    let finished = |n: &Node| common::whole_snapshot_done(n, name);
    // A's copy is the box's first snapshot (track kept its manifest): its park saves only
    // what changed, and frees the node.
    let park = c.a.sh(&format!(
        "set -e; ag-box up {name} --node nodeA
         ag-box exec {name} -- sh -c 'echo v2 > src/main.txt; echo new > added.txt'
         ag-box park {name}"
    ));
    assert!(
        park.ok()
            .stderr()
            .contains(&format!("what changed since snapshot {}", &first[..8])),
        "{}",
        park.stderr()
    );
    let changes = latest();
    assert_eq!(changes["on"]["id"], first.as_str(), "{changes}");
    assert_eq!(c.holder(name), None);
    // B, without a copy, restores the whole snapshot and writes the changes over it while A
    // is still taking the whole one; once A has, B restores that one alone. (Which one B
    // meets is A's race: either way B gets the latest.)
    let up_b = c.b.sh(&format!("ag-box up {name} --node nodeB"));
    let after = latest();
    assert!(
        up_b.ok().stderr().contains("as nodeA published them")
            || (after["on"].is_null() && after["same_as"] == changes["id"]),
        "{}\n{after}",
        up_b.stderr()
    );
    assert_eq!(
        c.b.sh(&format!("cd /root/{name}; cat src/main.txt added.txt"))
            .ok()
            .stdout(),
        "v2\nnew\n"
    );
    // A's whole snapshot takes the changes' place, B holding the lease meanwhile.
    finished(&c.a);
    let whole = latest();
    assert_eq!(
        (whole["on"].clone(), whole["same_as"].clone()),
        (serde_json::Value::Null, changes["id"].clone()),
        "{whole}"
    );
    assert_eq!(c.holder(name).as_deref(), Some("nodeB"));
    let listed = c.a.sh(&format!(
        "{RESTIC_ENV}; restic ls --no-lock {} /root/{name}/added.txt",
        whole["id"].as_str().unwrap()
    ));
    assert!(
        listed.ok().stdout().contains("added.txt"),
        "{}",
        listed.stdout()
    );
    // B's copy, equal to the changes, is the box's latest: parked unchanged, it stays so.
    c.b.sh(&format!("ag-box park {name}")).ok();
    assert_eq!(latest(), whole);
    // Changed on B and parked: changes over that whole snapshot.
    c.b.sh(&format!(
        "set -e; ag-box up {name} --node nodeB
         ag-box exec {name} -- sh -c 'echo v3 > src/main.txt'
         ag-box park {name}"
    ))
    .ok();
    assert_eq!(latest()["on"]["id"], whole["id"]);
    finished(&c.b);
    // A's copy is that whole snapshot: it gets only the changes (fetched while its copy is
    // walked) and walks only them again, which a park right after finds unchanged.
    let up_a = c.a.sh(&format!("ag-box up {name} --node nodeA"));
    assert!(
        up_a.ok().stderr().contains("as nodeB published them"),
        "{}",
        up_a.stderr()
    );
    assert_eq!(main_txt(&c.a, name), "v3\n");
    let park_a = c.a.sh(&format!("ag-box park {name}"));
    assert!(
        park_a.ok().stderr().contains("unchanged since snapshot"),
        "{}",
        park_a.stderr()
    );
    // B's next up right after a quick park ends the whole snapshot under way (it never waits
    // for it), and its next park saves the box whole.
    c.b.sh(&format!(
        "set -e; ag-box up {name} --node nodeB
         ag-box exec {name} -- sh -c 'echo v4 > src/main.txt'
         ag-box park {name}"
    ))
    .ok();
    let again = c.b.sh(&format!("ag-box up {name} --node nodeB"));
    assert!(!again.ok().stderr().contains("busy"), "{}", again.stderr());
    finished(&c.b);
    c.b.sh(&format!("ag-box park {name}")).ok();
    // Whole either way: saved by this park, or by the whole snapshot had it ended first.
    let last = latest();
    assert_eq!(last["on"], serde_json::Value::Null, "{last}");
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    assert_eq!(main_txt(&c.a, name), "v4\n");
    c.a.sh(&format!("ag-box park {name}")).ok();
}
