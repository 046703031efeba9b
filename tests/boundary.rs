//! The box as a boundary: what a prompt-injected agent tries from inside a box, on a booted
//! systemd node of the rig (and, for the direct runtime's supervisor, on the bare host).
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use common::{Checked, Host, Node, Target, assert_code};

/// A rig node with a state dir of the test's own, so parallel tests do not see each other.
struct Bnd {
    node: Node,
    state: String,
}

fn node(test: &str) -> Option<Bnd> {
    Some(Bnd {
        node: Node::local_store("nodeB")?,
        state: format!("/var/lib/ag-box-{test}"),
    })
}

fn run(n: &Bnd, script: &str) -> std::process::Output {
    n.node.sh_env(&[("BOX_STATE_DIR", &n.state)], script)
}

/// A fresh project `/root/<name>` made by root, tracked and up.
fn fresh_box(n: &Bnd, name: &str) {
    let state = &n.state;
    run(
        n,
        &format!(
            "ag-box park {name} >/dev/null 2>&1 || true; systemctl stop boxrun-{name} 2>/dev/null || true
             rm -rf /root/{name} {state}/meta/{name}.json {state}/local/{name}.json {state}/homes/{name}
             set -e; mkdir -p /root/{name}/src; echo v1 > /root/{name}/src/main.txt
             ag-box track {name} >/dev/null 2>&1"
        ),
    )
    .ok();
}

/// The box's own uid, from its record as this test's install holds it.
fn uid_of(n: &Bnd, name: &str) -> u64 {
    common::uid_of(&StateOf(n), name)
}

/// A test's node with its own state dir, as a target.
struct StateOf<'a>(&'a Bnd);

impl Target for StateOf<'_> {
    fn sh_env(&self, env: &[(&str, &str)], script: &str) -> std::process::Output {
        let mut all = vec![("BOX_STATE_DIR", self.0.state.as_str())];
        all.extend_from_slice(env);
        self.0.node.sh_env(&all, script)
    }
    fn run_env(
        &self,
        env: &[(&str, &str)],
        dir: Option<&str>,
        argv: &[&str],
    ) -> std::process::Output {
        let mut all = vec![("BOX_STATE_DIR", self.0.state.as_str())];
        all.extend_from_slice(env);
        self.0.node.run_env(&all, dir, argv)
    }
    fn home(&self) -> &str {
        self.0.node.home()
    }
    fn systemd(&self) -> bool {
        true
    }
    fn state_dir(&self) -> String {
        self.0.state.clone()
    }
    fn search_path(&self) -> String {
        self.0.node.search_path()
    }
    fn host_path(&self, path: &str) -> std::path::PathBuf {
        self.0.node.host_path(path)
    }
}

/// What `sh -c script` prints inside the box, as the box user.
fn inside(n: &Bnd, name: &str, script: &str) -> String {
    let quoted = script.replace('\'', r"'\''");
    run(n, &format!("ag-box exec {name} -- sh -c '{quoted}'"))
        .ok()
        .stdout()
}

#[test]
fn a_prompt_injected_agent_cannot_leave_its_box() {
    let Some(n) = node("boundary") else { return };
    let state = n.state.clone();
    let name = "bnd";
    fresh_box(&n, name);
    let up = run(&n, &format!("ag-box up {name}"));
    up.ok();
    let uid = uid_of(&n, name);
    // A root-made project was handed to the box user as it was tracked, before its first
    // snapshot: `up` has nothing to hand over.
    assert_eq!(
        run(&n, &format!("stat -c %u /root/{name}")).ok().stdout(),
        format!("{uid}\n")
    );
    assert!(!up.stderr().contains("handing"), "{}", up.stderr());
    run(&n, &format!("ag-box park {name}")).ok();
    let again = run(&n, &format!("ag-box up {name}"));
    assert!(
        !again.ok().stderr().contains("handing"),
        "{}",
        again.stderr()
    );

    // Who runs in the box: the box user, no capabilities, no_new_privs.
    let status = inside(
        &n,
        name,
        "id -un; id -u; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status",
    );
    assert_eq!(
        status,
        format!(
            "agent\n{uid}\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
             CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n\
             NoNewPrivs:\t1\n"
        )
    );
    // The anchor and the shells too, not only exec.
    let owners = inside(
        &n,
        name,
        "tmux -S /run/box/bnd/sock/tmux.sock list-panes >/dev/null
         for i in $(seq 50); do pgrep -x bash >/dev/null && break; sleep 0.1; done
         ps -eo pid=,user=,comm= | sed 1d",
    );
    let users: Vec<&str> = owners
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(
        users.len() >= 4 && users.iter().all(|u| *u == "agent") && owners.contains("bash"),
        "everything but bwrap's init runs as the box user:\n{owners}"
    );

    // What root could do, the box cannot.
    let tries = inside(
        &n,
        name,
        "mkdir -p /tmp/m; mount -t tmpfs none /tmp/m 2>/dev/null; echo mount=$?
         mknod /tmp/sda b 8 0 2>/dev/null; echo mknod=$?
         cat /etc/shadow >/dev/null 2>&1; echo shadow=$?
         ip link add d0 type dummy 2>/dev/null; echo iplink=$?
         test -e /run/box/bnd/info.json; echo info=$?
         touch /run/box/bnd/x 2>/dev/null; echo rundir=$?
         ls /var/lib/ag-box-boundary 2>/dev/null; echo state=$?
         test -e /root/.ssh; echo ssh=$?",
    );
    assert_eq!(
        tries,
        "mount=32\nmknod=1\nshadow=1\niplink=2\ninfo=1\nrundir=1\nstate=2\nssh=1\n"
    );

    // Files the agent makes are the box user's on the host.
    inside(&n, name, "echo made > made.txt");
    assert_eq!(
        run(&n, &format!("stat -c %u:%g /root/{name}/made.txt"))
            .ok()
            .stdout(),
        format!("{uid}:{uid}\n")
    );

    // The operator attaches (a terminal from an outer tmux), with a secret in the environment.
    let marker = format!("/root/HOST-MARKER-{name}");
    run(
        &n,
        &format!(
            "rm -f {marker}; tmux -L outer-{name} kill-server 2>/dev/null || true
             tmux -L outer-{name} new-session -d -x 120 -y 40 \
               'BOX_CONFIG_DIR=/root/.config/box-local BOX_STATE_DIR={state} OPERATOR_TOKEN=op-secret-42 ag-box attach {name}; sleep 30'
             for i in $(seq 100); do ag-box exec {name} -- tmux -S /run/box/{name}/sock/tmux.sock list-clients | grep -q . && exit 0; sleep 0.1; done
             exit 1"
        ),
    )
    .ok();
    let clients = inside(
        &n,
        name,
        "tmux -S /run/box/bnd/sock/tmux.sock list-clients -F '#{client_uid}'",
    );
    assert_eq!(clients, "65533\n", "the client runs as the client user");

    // Nothing of the operator's environment entered the box: not via exec, nor via attach.
    let env_of_box = n
        .node
        .sh_env(
            &[
                ("BOX_STATE_DIR", &state),
                ("OPERATOR_TOKEN", "op-secret-42"),
            ],
            &format!(
                "ag-box exec {name} -- env; for p in $(pgrep -u 65533); do \
                 echo client-env; tr '\\0' '\\n' < /proc/$p/environ; done"
            ),
        )
        .ok()
        .stdout();
    assert!(
        env_of_box.contains("BOX_NAME=bnd")
            && env_of_box.contains("client-env")
            && !env_of_box.contains("op-secret-42"),
        "{env_of_box}"
    );

    // The box can neither signal, trace nor read the operator's client.
    let poke = inside(
        &n,
        name,
        "c=$(pgrep -u ag-box-client); test -n \"$c\" || exit 9
         kill -0 $c 2>/dev/null; echo kill=$?
         cat /proc/$c/environ >/dev/null 2>&1; echo environ=$?
         python3 -c \"import ctypes,sys; print('ptrace=%d' % ctypes.CDLL(None).ptrace(16, int(sys.argv[1]), 0, 0))\" $c",
    );
    assert_eq!(poke, "kill=1\nenviron=1\nptrace=-1\n");

    // The box's tmux server tells the attached client to run a command: it runs in the box,
    // as the client user, and the host never sees it.
    inside(
        &n,
        name,
        &format!(
            "tmux -S /run/box/bnd/sock/tmux.sock detach-client -s main -E 'touch {marker}; id -un > /tmp/e-ran'"
        ),
    );
    assert_eq!(
        inside(
            &n,
            name,
            "for i in $(seq 100); do test -s /tmp/e-ran && break; sleep 0.1; done; cat /tmp/e-ran"
        ),
        "ag-box-client\n"
    );
    assert_code(&run(&n, &format!("test -e {marker}")), 1, "");
    run(&n, &format!("tmux -L outer-{name} kill-server || true")).ok();
    run(&n, &format!("ag-box park {name}")).ok();
}

#[test]
fn tampered_state_makes_exec_refuse_and_park_stop_only_the_box() {
    let Some(n) = node("tamper") else { return };
    let name = "tamper";
    fresh_box(&n, name);
    run(&n, &format!("ag-box up {name}")).ok();
    // As if the box could write its run dir: point bwrap's info at the node's PID 1, then at a
    // process outside the box.
    let sentinel = run(
        &n,
        // Its own pid (not the newest sleep: the host sees every node's processes).
        "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!",
    )
    .ok()
    .stdout();
    let sentinel = sentinel.trim();
    for pid in ["1", sentinel] {
        run(
            &n,
            &format!("echo '{{\"child-pid\":{pid}}}' > /run/box/{name}/info.json"),
        )
        .ok();
        let out = run(
            &n,
            &format!("ag-box exec {name} -- sh -c 'touch /root/EXEC-ESCAPED; id -u'"),
        );
        assert_code(&out, 1, "does not belong to the box; not entering it");
        assert!(out.stdout().is_empty(), "{}", out.stdout());
        assert_code(&run(&n, "test -e /root/EXEC-ESCAPED"), 1, "");
    }
    run(&n, &format!("ag-box park {name}")).ok();
    assert_eq!(
        run(&n, &format!("systemctl is-active boxrun-{name}")).stdout(),
        "inactive\n"
    );
    assert_eq!(
        run(
            &n,
            &format!("kill -0 {sentinel} && echo alive; kill {sentinel}")
        )
        .ok()
        .stdout(),
        "alive\n"
    );
}

#[test]
fn a_tampered_supervisor_pid_kills_nothing_else() {
    let Some(host) = Host::new("tamper") else {
        return;
    };
    let name = format!("tamper-{}", std::process::id());
    host.sh(&format!(
        "set -e; mkdir -p home/{name}; echo x > home/{name}/f; ag-box track {name}; ag-box up {name}"
    ))
    .ok();
    // The box's supervisor, and a process of another's in its place in the pid file.
    let out = host.sh(&format!(
        "set -e; real=$(cat /run/box/{name}/anchor.pid); kill -0 $real
         grep -q __anchor /proc/$real/cmdline
         setsid sleep 300 </dev/null >/dev/null 2>&1 & s=$!
         echo $s > /run/box/{name}/anchor.pid
         ag-box park {name} 2>&1
         echo; kill -0 $s && echo sentinel-alive; kill $s
         for _ in $(seq 100); do kill -0 $real 2>/dev/null || break; sleep 0.1; done
         kill -0 $real 2>/dev/null && echo box-runs-on || echo box-stopped"
    ));
    let said = out.ok().stdout();
    assert!(
        said.ends_with("\nsentinel-alive\nbox-stopped\n"),
        "park left the box running, or killed another's process:\n{said}"
    );
    assert!(
        said.contains("ran on without its known supervisor"),
        "{said}"
    );
    assert!(said.contains(&format!("parked box '{name}'")), "{said}");
    // The lease went only with the box.
    let row = common::box_row(&host, &name).unwrap();
    assert!(row["lease"].is_null(), "{row}");
}

#[test]
fn a_box_sees_only_its_own_transcripts() {
    let Some(n) = node("transcripts") else { return };
    let state = n.state.clone();
    let (a, b) = ("mine", "theirs");
    for name in [a, b] {
        fresh_box(&n, name);
        run(&n, &format!("ag-box up {name}")).ok();
        inside(
            &n,
            name,
            &format!(
                "mkdir -p ~/.claude/projects/-root-{name} ~/.codex/sessions/2026/11/30
                 echo secret-of-{name} > ~/.claude/projects/-root-{name}/s.jsonl
                 echo secret-of-{name} > ~/.codex/sessions/2026/11/30/rollout-{name}.jsonl
                 echo secret-of-{name} >> ~/.claude/history.jsonl"
            ),
        );
    }
    let seen = inside(
        &n,
        a,
        "ls ~/.claude/projects; grep -rl secret-of-theirs /root /tmp /run 2>/dev/null; ls /var/lib 2>&1 | grep -c ag-box || true",
    );
    assert_eq!(seen, "-root-mine\n0\n");
    // The other box's secret is there, and the same search finds it from inside that box.
    let theirs = inside(
        &n,
        b,
        "grep -rl secret-of-theirs /root /tmp /run 2>/dev/null | sort",
    );
    assert!(
        theirs.contains("/root/.claude/projects/-root-theirs/s.jsonl")
            && theirs.contains("/root/.claude/history.jsonl"),
        "{theirs}"
    );
    // Each box's own history stays in its own agent home on the host.
    assert_eq!(
        run(&n, &format!("cat {state}/homes/{a}/.claude/history.jsonl"))
            .ok()
            .stdout(),
        "secret-of-mine\n"
    );
    for name in [a, b] {
        run(&n, &format!("ag-box park {name}")).ok();
    }
}

#[test]
fn shared_credentials_are_the_box_users_and_never_snapshotted_and_uids_follow_the_record() {
    // The node's credential and config files are shared with the cluster tests.
    let _cluster = common::cluster_lock();
    let Some(n) = node("creds") else { return };
    let state = n.state.clone();
    let name = "creds";
    run(
        &n,
        "set -e; mkdir -p /root/.claude; umask 077; echo '{\"t\":1}' > /root/.claude/.credentials.json
         chown 0:0 /root/.claude/.credentials.json; umask 022; rm -f /root/.claude/settings.json; echo '{\"s\":1}' > /root/.claude/settings.json
         mkdir -p /root/.grok; rm -f /root/.grok/user-settings.json; umask 077; echo '{\"apiKey\":\"xai-BoundaryKeyBoundaryKey00\",\"baseURL\":\"https://api.x.ai\"}' > /root/.grok/user-settings.json",
    )
    .ok();
    fresh_box(&n, name);
    run(&n, &format!("ag-box up {name}")).ok();
    let tries = inside(
        &n,
        name,
        "cat ~/.claude/.credentials.json; echo '{\"t\":2}' > ~/.claude/.credentials.json; echo cred=$?
         cat ~/.claude/settings.json; echo x > ~/.claude/settings.json 2>/dev/null; echo config=$?",
    );
    assert_eq!(tries, "{\"t\":1}\ncred=0\n{\"s\":1}\nconfig=2\n");
    // A config that holds a key is the box user's to read (the key a placeholder of its shape:
    // the credential broker's), and no box's to repoint.
    let keyed = inside(
        &n,
        name,
        "cat ~/.grok/user-settings.json; echo; echo '{\"baseURL\":\"https://evil.example\"}' > ~/.grok/user-settings.json 2>/dev/null; echo keyed=$?",
    );
    let (seen, wrote) = keyed
        .rsplit_once('\n')
        .map_or((keyed.as_str(), ""), |(a, _)| {
            a.rsplit_once('\n').unwrap_or((a, ""))
        });
    let seen: serde_json::Value = serde_json::from_str(seen).unwrap();
    assert!(
        seen["apiKey"].as_str().is_some_and(|k| {
            // A placeholder of its shape (a one-letter key's would be the key itself one
            // time in 62).
            k.len() == "xai-BoundaryKeyBoundaryKey00".len()
                && k.starts_with("xai-")
                && k != "xai-BoundaryKeyBoundaryKey00"
        }) && seen["baseURL"] == "https://api.x.ai"
            && wrote == "keyed=2",
        "{keyed}"
    );
    let uid = uid_of(&n, name);
    // Root's, in the group every box user is in: each box on the node reads and refreshes
    // them, none owns them (or could chmod them). What the broker keeps (Grok's key) is
    // shared with no box: it stays as the operator left it.
    assert_eq!(
        run(&n, "stat -c '%u:%g %a' /root/.claude/.credentials.json /root/.grok/user-settings.json; cat /root/.claude/.credentials.json")
            .ok()
            .stdout(),
        "0:2000065535 660\n0:0 600\n{\"t\":2}\n"
    );
    assert_eq!(
        inside(
            &n,
            name,
            "chmod 666 ~/.claude/.credentials.json 2>/dev/null; echo chmod=$?; id -G"
        ),
        format!("chmod=1\n{uid} 2000065535\n")
    );
    run(&n, &format!("ag-box snapshot {name}")).ok();
    let listed = run(
        &n,
        &format!(
            "RESTIC_REPOSITORY={state}/restic RESTIC_PASSWORD_FILE={state}/restic-password restic ls latest"
        ),
    )
    .ok()
    .stdout();
    assert!(
        listed.contains(&format!("{state}/homes/{name}/.claude"))
            && !listed.contains("credentials")
            && !listed.contains("settings.json"),
        "{listed}"
    );

    // Another uid for this box: the record says so, and its files follow at the next up.
    run(
        &n,
        &format!("ag-box set {name} uid=2000065432 gid=2000065432 && ag-box park {name}"),
    )
    .ok();
    let up = run(&n, &format!("ag-box up {name}"));
    up.ok();
    // The shared credentials stay the shared group's, whichever box came up last.
    assert_eq!(
        run(&n, "stat -c %u:%g /root/.claude/.credentials.json")
            .ok()
            .stdout(),
        "0:2000065535\n"
    );
    assert_eq!(
        up.stderr()
            .matches(&format!(
                "belongs to uid {uid}; handing it to the box user (uid 2000065432, gid 2000065432)"
            ))
            .count(),
        1,
        "{}",
        up.stderr()
    );
    assert_eq!(
        inside(&n, name, "id -u; id -g; touch new"),
        "2000065432\n2000065432\n"
    );
    assert_eq!(
        run(
            &n,
            &format!(
                "stat -c %u:%g /root/{name}/src/main.txt /root/{name}/new {state}/homes/{name}/.claude"
            )
        )
        .ok()
        .stdout(),
        "2000065432:2000065432\n2000065432:2000065432\n2000065432:2000065432\n"
    );
    run(
        &n,
        &format!(
            "ag-box park {name}; rm -f /root/.claude/settings.json /root/.grok/user-settings.json"
        ),
    )
    .ok();
}

#[test]
fn each_box_runs_as_its_own_uid_and_one_of_the_shared_uid_gets_its_own_at_its_next_up() {
    let Some(n) = node("uids") else { return };
    let state = n.state.clone();
    let (a, b) = ("uida", "uidb");
    for name in [a, b] {
        fresh_box(&n, name);
        run(&n, &format!("ag-box up {name}")).ok();
    }
    let (ua, ub) = (uid_of(&n, a), uid_of(&n, b));
    assert_ne!(ua, ub, "two boxes, two uids");
    assert_eq!(inside(&n, a, "id -u; id -g"), format!("{ua}\n{ua}\n"));
    assert_eq!(inside(&n, b, "id -u"), format!("{ub}\n"));
    // Each box's files are its own uid's, no other box's.
    assert_eq!(
        run(&n, &format!("stat -c %u:%g /root/{b}/src/main.txt"))
            .ok()
            .stdout(),
        format!("{ub}:{ub}\n")
    );

    // A box tracked while every box ran as uid 1000: its record and its files say 1000.
    run(&n, &format!("ag-box park {a}")).ok();
    run(
        &n,
        &format!(
            "set -e; python3 -c \"
import json; p = '{state}/meta/{a}.json'; r = json.load(open(p))
r['uid'] = r['gid'] = 1000; r['rev'] += 1; json.dump(r, open(p, 'w'))
\"
             chown -R 1000:1000 /root/{a} {state}/homes/{a}"
        ),
    )
    .ok();
    let up = run(&n, &format!("ag-box up {a}"));
    let own = uid_of(&n, a);
    assert!((2_000_000_000..=2_000_065_535).contains(&own) && own != ub);
    assert_eq!(
        up.ok()
            .stderr()
            .matches(&format!(
                "box '{a}': now runs as its own uid {own} (it ran as uid 1000, like every box tracked before each had its own); its files are handed to it"
            ))
            .count(),
        1,
        "{}",
        up.stderr()
    );
    assert_eq!(inside(&n, a, "id -u; touch made"), format!("{own}\n"));
    assert_eq!(
        run(
            &n,
            &format!(
                "stat -c %u:%g /root/{a}/src/main.txt /root/{a}/made {state}/homes/{a}/.claude"
            )
        )
        .ok()
        .stdout(),
        format!("{own}:{own}\n").repeat(3)
    );
    // Said once: the next up has nothing to change.
    run(&n, &format!("ag-box park {a}")).ok();
    let again = run(&n, &format!("ag-box up {a}"));
    assert!(
        !again.ok().stderr().contains("own uid"),
        "{}",
        again.stderr()
    );
    assert_eq!(uid_of(&n, a), own);
    // No box takes an id outside the range, nor one of the node's accounts.
    common::assert_code(
        &run(&n, &format!("ag-box set {a} uid=1000")),
        2,
        "uid takes a number in ag-box's range 2000000000-2000065535",
    );
    for name in [a, b] {
        run(&n, &format!("ag-box park {name}")).ok();
    }
}
