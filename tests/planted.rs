//! What a prompt-injected agent plants in the trees its box owns (links where ag-box does its
//! own work, links at the points bwrap binds onto) steers nothing ag-box does there as root:
//! on a booted systemd node and on the bare host with the direct runtime.

mod common;

use common::{Checked, Host, Node, Target};

/// Runs `script` on `t` after `pre` (the target's own state dir, where it needs one).
fn sh(t: &dyn Target, pre: &str, script: &str) -> std::process::Output {
    t.sh(&format!("{pre}\n{script}"))
}

fn inside(t: &dyn Target, pre: &str, name: &str, script: &str) -> String {
    let quoted = script.replace('\'', r"'\''");
    sh(t, pre, &format!("ag-box exec {name} -- sh -c '{quoted}'"))
        .ok()
        .stdout()
}

/// A fresh box `name` over a project `~/<name>` holding `keep.txt`, tracked and up; `up_env`
/// goes before its `up` (a bound, say).
fn fresh_box(t: &dyn Target, pre: &str, name: &str, up_env: &str) {
    let home = t.home();
    sh(
        t,
        pre,
        &format!(
            "ag-box stop {name} >/dev/null 2>&1 || true; s=$BOX_STATE_DIR
             rm -rf $s/meta/{name}.json $s/local/{name}.json $s/homes/{name} {home}/{name}
             set -e; mkdir -p {home}/{name}; echo v1 > {home}/{name}/keep.txt
             ag-box track {name} 2>&1; {up_env} ag-box up {name} 2>&1"
        ),
    )
    .ok();
}

fn links_a_box_plants_steer_nothing(t: &dyn Target, pre: &str, name: &str) {
    let home = t.home();
    let proj = format!("{home}/{name}");
    let victim = format!("{home}/victim-{name}");
    sh(
        t,
        pre,
        &format!(
            "ag-box park {name} >/dev/null 2>&1 || true; s=$BOX_STATE_DIR
             rm -rf $s/meta/{name}.json $s/local/{name}.json $s/homes/{name} {proj} {victim} {home}/planted-*-{name}
             rm -rf {home}/.codex/AGENTS.md {home}/.claude/agents
             set -e; mkdir -p {proj}/src {victim}; echo v1 > {proj}/src/main.txt
             echo root-only > {victim}/secret; chmod 700 {victim}
             ag-box track {name} >/dev/null 2>&1; ag-box up {name} >/dev/null 2>&1"
        ),
    )
    .ok();

    // The agent plants links where ag-box does its own work in the project, and at points
    // bwrap binds the node's files onto once the node has them (the host is /oldroot to bwrap
    // as it sets the box up).
    assert_eq!(
        inside(
            t,
            pre,
            name,
            &format!(
                "ln -s {victim} .ag-box-previous && ln -s {victim} .ag-box-restore &&
                 ln -s /oldroot{home}/planted-a-{name} ~/.codex/AGENTS.md &&
                 ln -s {home}/planted-b-{name} ~/.claude/agents && echo planted"
            )
        ),
        "planted\n"
    );
    sh(
        t,
        pre,
        &format!(
            "set -e; ag-box park {name} >/dev/null 2>&1
             mkdir -p {home}/.codex {home}/.claude/agents; echo node-agents > {home}/.codex/AGENTS.md
             echo node-agent > {home}/.claude/agents/a.md
             ag-box up {name}"
        ),
    )
    .ok();

    // The host dir kept its file and owner; nothing was made on the host; the project holds
    // its own files and none of the planted names; the node's files are bound where planned.
    assert_eq!(
        sh(
            t,
            pre,
            &format!(
                "stat -c '%U %a' {victim} {victim}/secret; cat {victim}/secret
                 ls -d {home}/planted-*-{name} 2>/dev/null || true; ls -A {proj}"
            )
        )
        .ok()
        .stdout(),
        "root 700\nroot 644\nroot-only\nsrc\n"
    );
    assert_eq!(
        inside(
            t,
            pre,
            name,
            "cat ~/.codex/AGENTS.md ~/.claude/agents/a.md; test -L ~/.codex/AGENTS.md; echo link=$?"
        ),
        "node-agents\nnode-agent\nlink=1\n"
    );

    // A name made of escape sequences, a newline and a bidi control reaches the terminal
    // escaped: no clipboard write, no forged line, no reordered text.
    inside(
        t,
        pre,
        name,
        "printf x > \"$(printf 'evil\\033]52;c;aGk=\\007\\nparked box x\\342\\200\\256.txt')\"",
    );
    let diff = sh(t, pre, &format!("ag-box diff {name}"));
    let seen = format!("{}{}", diff.ok().stdout(), diff.stderr());
    assert!(
        seen.contains(&format!(
            "+ {proj}/evil\\x1b]52;c;aGk=\\x07\\nparked box x\\u{{202e}}.txt  (1 B)\n"
        )) && !seen.contains(['\u{1b}', '\u{7}', '\u{202e}'])
            && !seen.lines().any(|l| l.starts_with("parked box")),
        "{seen:?}"
    );
    sh(
        t,
        pre,
        &format!(
            "ag-box park {name} >/dev/null 2>&1 || true; rm -rf {home}/.codex/AGENTS.md {home}/.claude/agents {victim}"
        ),
    )
    .ok();
}

/// A box that nests its tree deeper than `PATH_MAX` (with a name full of escapes) can still be
/// stopped, and parked once what restic could not read is accepted.
fn a_box_deeper_than_path_max_is_stopped_and_parked(t: &dyn Target, pre: &str, name: &str) {
    let home = t.home();
    fresh_box(t, pre, name, "");
    // 300 levels of 20 bytes: 6,000 bytes of path, made one level at a time.
    assert_eq!(
        inside(
            t,
            pre,
            name,
            "python3 -c \"
import os
os.mkdir('deep'); os.chdir('deep')
for i in range(300):
    os.mkdir('d' * 20); os.chdir('d' * 20)
open('f\\x1b[2J', 'w').write('bottom')
print('deep', len(os.getcwd()))
\""
        ),
        format!(
            "deep {}\n",
            home.len() + 1 + name.len() + "/deep".len() + 300 * 21
        )
    );
    let park = sh(t, pre, &format!("ag-box park {name}"));
    assert_eq!(park.code(), 1, "{}", park.stderr());
    assert!(
        park.stderr().contains(&format!(
            "box '{name}' keeps running: its snapshot failed ('ag-box stop {name}' stops it without one"
        )) && !park.stderr().contains('\u{1b}'),
        "{}",
        park.stderr()
    );
    let stop = sh(t, pre, &format!("ag-box stop {name}"));
    assert_eq!(
        stop.ok().stderr(),
        format!(
            "stopped box '{name}' without a snapshot; its lease and its copy stay on {node}: 'ag-box up {name}' starts it again, 'ag-box park {name}' saves it and frees the node\n",
            node = if t.systemd() { "nodeB" } else { "host" }
        )
    );
    common::assert_code(
        &sh(t, pre, &format!("ag-box stop {name}")),
        1,
        &format!("box '{name}' is not up on this node"),
    );
    let parked = sh(t, pre, &format!("ag-box park {name} --accept-partial"));
    assert!(
        parked
            .ok()
            .stderr()
            .contains(&format!("parked box '{name}'")),
        "{}",
        parked.stderr()
    );
    sh(t, pre, &format!("rm -rf {home}/{name}")).ok();
}

#[test]
fn a_box_deeper_than_path_max_is_stopped_and_parked_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    a_box_deeper_than_path_max_is_stopped_and_parked(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "deep",
    );
}

#[test]
fn a_box_deeper_than_path_max_is_stopped_and_parked_with_the_direct_runtime() {
    let Some(host) = Host::new("deep") else {
        return;
    };
    let name = format!("deep-{}", std::process::id());
    a_box_deeper_than_path_max_is_stopped_and_parked(&host, "", &name);
}

#[test]
fn links_a_box_plants_steer_nothing_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    links_a_box_plants_steer_nothing(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "plnt",
    );
}

#[test]
fn links_a_box_plants_steer_nothing_with_the_direct_runtime() {
    let Some(host) = Host::new("planted") else {
        return;
    };
    let name = format!("plnt-{}", std::process::id());
    links_a_box_plants_steer_nothing(&host, "", &name);
}

/// What the agent writes in its transcripts is all `ag-box cost` reads: a link it plants at a
/// transcript's place or a dir's (to a root-only transcript of the host's) is not followed and
/// is named, a line past the bound is skipped and said, and a model name of escapes reaches the
/// terminal escaped.
fn what_a_box_plants_in_its_transcripts_counts_nothing_of_the_hosts(
    t: &dyn Target,
    pre: &str,
    name: &str,
) {
    let home = t.home();
    let victim = format!("{home}/victim-cost-{name}");
    fresh_box(t, pre, name, "");
    let secret = r#"{"type":"assistant","requestId":"host","timestamp":"2026-12-03T09:00:00Z","message":{"model":"claude-opus-4-8","usage":{"input_tokens":1000000,"output_tokens":1}}}"#;
    sh(
        t,
        pre,
        &format!(
            "set -e; rm -rf {victim}; mkdir -p {victim}/dir
             echo '{secret}' > {victim}/secret.jsonl; cp {victim}/secret.jsonl {victim}/dir/s.jsonl
             chmod 700 {victim} {victim}/dir; chmod 600 {victim}/secret.jsonl {victim}/dir/s.jsonl"
        ),
    )
    .ok();
    let own = r#"{"type":"assistant","requestId":"r1","timestamp":"2026-12-03T09:00:00Z","message":{"model":"evil\u001b]52;c;aGk=\u0007\nforged line\u202e","usage":{"input_tokens":7,"output_tokens":1}}}"#;
    assert_eq!(
        inside(
            t,
            pre,
            name,
            &format!(
                "set -e; d=~/.claude/projects/-planted; mkdir -p $d
                 cat > $d/own.jsonl <<EOF\n{own}\nEOF
                 ln -s {victim}/secret.jsonl $d/planted.jsonl; ln -s {victim}/dir ~/.claude/projects/-dir
                 head -c 17000000 /dev/zero | tr '\\0' x > $d/big.jsonl; echo planted"
            )
        ),
        "planted\n"
    );
    // The links are there, and what they name would count: the host's transcript.
    let h = format!("$BOX_STATE_DIR/homes/{name}/.claude/projects");
    assert_eq!(
        sh(
            t,
            pre,
            &format!(
                "test -L {h}/-planted/planted.jsonl && test -L {h}/-dir && cat {h}/-dir/s.jsonl"
            )
        )
        .ok()
        .stdout()
        .trim(),
        secret
    );
    let doc = sh(t, pre, &format!("ag-box cost {name} --json"))
        .ok()
        .stdout();
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    let the_box = &doc["boxes"][0];
    assert_eq!(
        the_box["models"],
        serde_json::json!([{"agent": "claude-code", "model": "evil\u{1b}]52;c;aGk=\u{7}\nforged line\u{202e}",
            "requests": 1, "input_tokens": 7, "output_tokens": 1, "cache_write_tokens": 0,
            "cache_read_tokens": 0, "cost_usd": null}]),
        "{doc:#}"
    );
    assert_eq!(
        the_box["warnings"],
        serde_json::json!([
            format!(
                "box '{name}': 2 links not followed (a box's links are never read): .claude/projects/-dir, .claude/projects/-planted/planted.jsonl"
            ),
            format!("box '{name}': skipped 1 line longer than 16 MiB"),
        ]),
        "{doc:#}"
    );
    let table = sh(t, pre, &format!("ag-box cost {name}"));
    let seen = format!("{}{}", table.ok().stdout(), table.stderr());
    assert!(
        seen.contains("evil\\x1b]52;c;aGk=\\x07\\nforged line\\u{202e}")
            && !seen.contains(['\u{1b}', '\u{7}', '\u{202e}'])
            && !seen.lines().any(|l| l.starts_with("forged")),
        "{seen:?}"
    );
    sh(
        t,
        pre,
        &format!("ag-box park {name} >/dev/null 2>&1 || true; rm -rf {victim}"),
    )
    .ok();
}

#[test]
fn what_a_box_plants_in_its_transcripts_counts_nothing_of_the_hosts_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    what_a_box_plants_in_its_transcripts_counts_nothing_of_the_hosts(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "plcost",
    );
}

#[test]
fn what_a_box_plants_in_its_transcripts_counts_nothing_of_the_hosts_with_the_direct_runtime() {
    let Some(host) = Host::new("planted") else {
        return;
    };
    let name = format!("plcost-{}", std::process::id());
    what_a_box_plants_in_its_transcripts_counts_nothing_of_the_hosts(&host, "", &name);
}

/// A box that forks without end meets its own bound, and another box forks on; a box's
/// memory-backed dirs are bounded too.
fn a_fork_bomb_stays_in_its_box(t: &dyn Target, pre: &str, names: [&str; 2]) {
    let home = t.home();
    for name in names {
        fresh_box(t, pre, name, "BOX_TASKS_MAX=64 BOX_TMPFS_MAX=16M");
    }
    let [bomb, other] = names;
    // With no BOX_MEMORY_MAX, a box may take three quarters of the node's memory.
    if t.systemd() {
        let (max, total) = {
            let out = sh(
                t,
                pre,
                &format!(
                    "systemctl show boxrun-{bomb} -p MemoryMax --value; awk '/MemTotal/ {{print $2 * 1024}}' /proc/meminfo"
                ),
            )
            .ok()
            .stdout();
            let mut n = out.lines().map(|l| l.trim().parse::<f64>().unwrap());
            (n.next().unwrap(), n.next().unwrap())
        };
        assert!(
            (max / total - 0.75).abs() < 0.01,
            "MemoryMax {max} of {total}"
        );
    }
    // Children that hold no descriptor of exec's, so exec returns while they live.
    let forks = |count: u32, hold: u32| {
        format!(
            "python3 -c \"
import os, time
n = 0
for i in range({count}):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.closerange(0, 3); time.sleep({hold}); os._exit(0)
    n += 1
print(n)
\""
        )
    };
    let made: u32 = inside(t, pre, bomb, &forks(10_000, 40))
        .trim()
        .parse()
        .unwrap();
    assert!((10..64).contains(&made), "the bomb made {made} processes");
    let theirs: u32 = inside(t, pre, other, &forks(20, 1)).trim().parse().unwrap();
    assert_eq!(theirs, 20, "the other box forks on");
    // Its memory-backed dirs hold what they were sized for, no more.
    assert_eq!(
        inside(
            t,
            pre,
            other,
            "for d in /tmp $HOME; do head -c 8M /dev/zero > $d/fits && echo fits; \
             head -c 20M /dev/zero > $d/over 2>/dev/null || echo full; rm -f $d/fits $d/over; done"
        ),
        "fits\nfull\nfits\nfull\n"
    );
    for name in names {
        sh(t, pre, &format!("ag-box stop {name}; rm -rf {home}/{name}")).ok();
    }
}

#[test]
fn a_fork_bomb_stays_in_its_box_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    a_fork_bomb_stays_in_its_box(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        ["bomb", "bystander"],
    );
}

#[test]
fn a_fork_bomb_stays_in_its_box_with_the_direct_runtime() {
    let Some(host) = Host::new("bomb") else {
        return;
    };
    let pid = std::process::id();
    a_fork_bomb_stays_in_its_box(
        &host,
        "",
        [&format!("bomb-{pid}"), &format!("bystander-{pid}")],
    );
}

/// The operator's terminal is ag-box's to relay, never the box's to hold: a process an exec
/// leaves behind reads nothing typed after it returns, and what the box's tmux server passes
/// through (a clipboard write wrapped for the terminal) never reaches the operator's terminal.
fn a_box_holds_no_terminal_of_the_operators(t: &dyn Target, pre: &str, name: &str) {
    let home = t.home();
    fresh_box(t, pre, name, "");
    let o = format!("outer-{name}");
    let script = format!(
        "{pre}
         o={o}; tmux -L $o kill-server 2>/dev/null || true
         tmux -L $o new-session -d -s $o -x 160 -y 40 'bash --norc --noprofile' || exit 9
         tmux -L $o set -g set-clipboard on
         screen() {{ tmux -L $o capture-pane -p -t $o; }}
         until_shown() {{ for i in $(seq 200); do screen | grep -Eq -- \"$1\" && return 0; sleep 0.1; done; screen >&2; return 1; }}
         type() {{ tmux -L $o send-keys -t $o \"$1\" Enter; }}
         # exec from a terminal: the command's terminal is a pty of ag-box's, its code passed on.
         type \"ag-box exec {name} -- sh -c 'tty; exec 3<&0; (sleep 2; setsid cat <&3 > stolen) & exit 3'; echo exec-rc=\\$?\"
         until_shown '^exec-rc=3' || exit 1
         sleep 3
         type 'echo typed-after-$((6*7))'
         until_shown '^typed-after-42' || exit 2
         # exec as a job in the shell's background neither stops nor takes the terminal.
         type \"ag-box exec {name} -- sh -c 'echo bg-ran-\\$((6*7))' > bg-{name}.out & sleep 4; cat bg-{name}.out; rm -f bg-{name}.out\"
         until_shown '^bg-ran-42' || exit 5
         sleep 1
         echo \"stolen=$(ag-box exec {name} -- cat stolen)\"
         # attach: the box's server passes a clipboard write through to its client.
         sock=/run/box/{name}/sock/tmux.sock
         ag-box exec {name} -- tmux -S $sock set -g allow-passthrough on
         tty=$(ag-box exec {name} -- tmux -S $sock display -p -t main '#{{pane_tty}}')
         type 'ag-box attach {name}'
         until_shown '\\[(box:|main\\])' || exit 3
         ag-box exec {name} -- sh -c \"printf '\\033Ptmux;\\033\\033]52;c;aGVsbG8=\\007\\033\\\\\\\\' > $tty; echo marker-\\$((6*7)) > $tty\"
         until_shown 'marker-42' || exit 4
         sleep 1
         echo \"buffers=$(tmux -L $o list-buffers | wc -l)\"
         tmux -L $o send-keys -t $o C-b d
         tmux -L $o kill-server"
    );
    let out = t.sh(&script);
    assert_eq!(out.code(), 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), "stolen=\nbuffers=0\n", "{}", out.stderr());
    sh(t, pre, &format!("ag-box stop {name}; rm -rf {home}/{name}")).ok();
}

#[test]
fn a_box_holds_no_terminal_of_the_operators_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    a_box_holds_no_terminal_of_the_operators(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "tty",
    );
}

#[test]
fn a_box_holds_no_terminal_of_the_operators_with_the_direct_runtime() {
    let Some(host) = Host::new("tty") else {
        return;
    };
    let name = format!("tty-{}", std::process::id());
    a_box_holds_no_terminal_of_the_operators(&host, "", &name);
}

/// A box that swaps a dir of its project for a link to a host dir and back without pause
/// (`renameat2(RENAME_EXCHANGE)`) while snapshots read it: no snapshot holds what the link
/// names (a root-only dir, and one of another box's user), and none fails.
fn a_box_racing_links_under_its_snapshots_keeps_them_its_own(
    t: &dyn Target,
    pre: &str,
    name: &str,
) {
    let home = t.home();
    let proj = format!("{home}/{name}");
    let (host_dir, other_dir) = (
        format!("{home}/race-host-{name}"),
        format!("{home}/race-other-{name}"),
    );
    fresh_box(t, pre, name, "");
    sh(
        t,
        pre,
        &format!(
            "set -e; rm -rf {host_dir} {other_dir}; mkdir -p {host_dir} {other_dir}
             echo root-only > {host_dir}/only-on-the-host; chmod 700 {host_dir}
             echo other-box > {other_dir}/only-in-another-box
             chown -R 2000009999:2000009999 {other_dir}; chmod 700 {other_dir}"
        ),
    )
    .ok();
    let racer = format!(
        r#"python3 -c "
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
for i, target in ((1, '{host_dir}'), (2, '{other_dir}')):
    os.makedirs(f'race/d{{i}}', exist_ok=True)
    open(f'race/d{{i}}/own', 'w').write('mine')
    os.symlink(target, f'race/l{{i}}')
if os.fork() == 0:
    os.setsid(); os.closerange(0, 3)
    n = 0
    while not os.path.exists('race/stop'):
        for i in (1, 2):
            libc.renameat2(-100, f'race/d{{i}}'.encode(), -100, f'race/l{{i}}'.encode(), 2)
        n += 1
    # Whole or not at all: a reader that sees the file reads the count.
    open('race/swaps.tmp', 'w').write(str(n))
    os.rename('race/swaps.tmp', 'race/swaps')
    os._exit(0)
print('racing')
""#
    );
    assert_eq!(inside(t, pre, name, &racer), "racing\n");
    let rounds = 50;
    for round in 0..rounds {
        let out = sh(t, pre, &format!("ag-box snapshot {name} 2>&1"));
        assert!(
            out.status.success(),
            "snapshot {round} of a racing box failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let swaps: u64 = inside(
        t,
        pre,
        name,
        "touch race/stop; while [ ! -e race/swaps ]; do sleep 0.1; done; cat race/swaps",
    )
    .trim()
    .parse()
    .unwrap();
    assert!(swaps > 1000, "the box swapped only {swaps} times");
    // Every snapshot of the box, listed: the box's own files are there, the linked ones never.
    let listed = sh(
        t,
        pre,
        &format!(
            "set -e; export RESTIC_REPOSITORY=$BOX_STATE_DIR/restic RESTIC_PASSWORD_FILE=$BOX_STATE_DIR/restic-password
             ids=$(restic snapshots --tag box:{name} --json | grep -o '\"short_id\":\"[^\"]*\"' | cut -d'\"' -f4)
             n=0; for id in $ids; do n=$((n+1)); restic ls --no-lock --recursive $id {proj}/race; done; echo snapshots=$n"
        ),
    )
    .ok()
    .stdout();
    assert!(
        !listed.contains("only-on-the-host") && !listed.contains("only-in-another-box"),
        "{listed}"
    );
    let counted: usize = listed
        .lines()
        .find_map(|l| l.strip_prefix("snapshots="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(counted > rounds, "{counted} snapshots listed");
    assert!(
        listed.contains("/race/d1/own") || listed.contains("/race/l1/own"),
        "{listed}"
    );
    sh(
        t,
        pre,
        &format!("ag-box stop {name}; rm -rf {proj} {host_dir} {other_dir}"),
    )
    .ok();
}

#[test]
fn a_box_racing_links_under_its_snapshots_keeps_them_its_own_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    a_box_racing_links_under_its_snapshots_keeps_them_its_own(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "racer",
    );
}

#[test]
fn a_box_racing_links_under_its_snapshots_keeps_them_its_own_with_the_direct_runtime() {
    let Some(host) = Host::new("racer") else {
        return;
    };
    let name = format!("racer-{}", std::process::id());
    a_box_racing_links_under_its_snapshots_keeps_them_its_own(&host, "", &name);
}

/// A box paused for a snapshot says so in `status`, and one whose snapshot died mid-pause (a
/// kill -9) is resumed by the next command that looks at it.
fn a_pause_never_outlives_its_snapshot(t: &dyn Target, pre: &str, name: &str) {
    let proj = format!("{}/{name}", t.home());
    fresh_box(t, pre, name, "");
    let ticker = "sh -c 'exec 0<&- 1>&- 2>&-; while :; do date +%s%N > tick; sleep 0.05; done' & echo ticking";
    assert_eq!(inside(t, pre, name, ticker), "ticking\n");
    let tick = || {
        sh(t, pre, &format!("cat {proj}/tick"))
            .ok()
            .stdout()
            .trim()
            .to_string()
    };
    // While a snapshot holds the box paused, status says so.
    let watched = sh(
        t,
        pre,
        &format!(
            "AG_BOX_PAUSE_AT=snapshot.paused ag-box snapshot {name} 2>/dev/null & s=$!
             sleep 1.5; ag-box status; wait $s"
        ),
    )
    .ok()
    .stdout();
    assert!(
        watched
            .lines()
            .any(|l| l.contains(name) && l.contains("paused for a snapshot since")),
        "{watched}"
    );
    // Killed while the box is paused: the box stays paused...
    let crashed = sh(
        t,
        pre,
        &format!("AG_BOX_CRASH_AT=snapshot.paused ag-box snapshot {name}"),
    );
    assert!(
        !crashed.status.success(),
        "the crash point was never reached"
    );
    let frozen_at = tick();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(tick(), frozen_at, "the box ran on while paused");
    // ...until `status` resumes it, and says so.
    let status = sh(t, pre, "ag-box status 2>&1").ok().stdout();
    assert!(status.contains("resuming it"), "{status}");
    assert!(!status.contains("paused for a snapshot since"), "{status}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_ne!(tick(), frozen_at, "the box stayed paused");
    sh(t, pre, &format!("ag-box stop {name}; rm -rf {proj}")).ok();
}

#[test]
fn a_pause_never_outlives_its_snapshot_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    a_pause_never_outlives_its_snapshot(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "paused",
    );
}

#[test]
fn a_pause_never_outlives_its_snapshot_with_the_direct_runtime() {
    let Some(host) = Host::new("paused") else {
        return;
    };
    let name = format!("paused-{}", std::process::id());
    a_pause_never_outlives_its_snapshot(&host, "", &name);
}

/// Trees that a restore must bring over whole, on restic 0.18 (nodeB's): a dir that became a
/// link since the copy was saved (restic cannot restore that in place: the restore falls back
/// to a staging one), and a sparse file, which stays sparse.
#[test]
fn odd_trees_restore_on_restic_0_18() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    let pre = "export BOX_STATE_DIR=/var/lib/ag-box-planted";
    let name = "oddtree";
    let proj = format!("{}/{name}", node.home());
    fresh_box(&node, pre, name, "");
    let snap = |script: &str| {
        inside(&node, pre, name, script);
        sh(&node, pre, &format!("ag-box snapshot {name}"))
            .ok()
            .stdout()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    };
    snap("mkdir x && echo in-a-dir > x/f && truncate -s 512M sparse.bin");
    // The box's latest becomes a snapshot where the dir is a link (as another node would
    // leave it), while this node's copy has the dir, edited since it was parked: `up` keeps
    // the copy as a fork and restores in place (more changed since the fork than a delta
    // restore takes), which restic cannot do over a dir.
    let as_link =
        snap("rm -r x && ln -s keep.txt x && mkdir many && cd many && seq 1200 | xargs touch");
    inside(
        &node,
        pre,
        name,
        "rm x && mkdir x && echo a-dir-again > x/f",
    );
    let up = sh(
        &node,
        pre,
        &format!(
            "set -e; ag-box park {name} >/dev/null 2>&1; ag-box rollback {name} {as_link} >/dev/null 2>&1
             echo edited > {proj}/x/f; cd {proj}/many; for i in $(seq 1200); do echo e > $i; done
             ag-box up {name} 2>&1"
        ),
    )
    .ok()
    .stdout();
    assert!(
        up.contains("restoring all of it beside the copy instead"),
        "the in-place restore did not meet the link: {up}"
    );
    assert_eq!(
        inside(&node, pre, name, "readlink x; cat x"),
        "keep.txt\nv1\n"
    );
    // Moved to a node with no copy of it (its copy and its record of it gone), the sparse file
    // takes no more disk than it did.
    let kib: u64 = sh(
        &node,
        pre,
        &format!(
            "set -e; ag-box park {name} >/dev/null 2>&1; rm -rf {proj} $BOX_STATE_DIR/local/{name}.json $BOX_STATE_DIR/homes/{name}
             ag-box up {name} >/dev/null 2>&1; test $(stat -c %s {proj}/sparse.bin) = 536870912; du -k {proj}/sparse.bin | cut -f1"
        ),
    )
    .ok()
    .stdout()
    .trim()
    .parse()
    .unwrap();
    assert!(kib < 1024, "the restored sparse file takes {kib} KiB");
    // A bound on what one snapshot reads in: above it, none is taken (the sparse file is no
    // change since this up), and status shows it.
    inside(&node, pre, name, "head -c 3M /dev/urandom > big.bin");
    let bound = "export BOX_SNAPSHOT_ADD_MAX=2M";
    common::assert_code(
        &sh(
            &node,
            &format!("{pre}; {bound}"),
            &format!("ag-box snapshot {name}"),
        ),
        1,
        &format!(
            "box '{name}': not snapshotted: 3.0 MiB of its files are new or changed since its last snapshot here, above BOX_SNAPSHOT_ADD_MAX (2.0 MiB)"
        ),
    );
    let status = sh(&node, &format!("{pre}; {bound}"), "ag-box status")
        .ok()
        .stdout();
    assert!(
        status.contains("snapshot bound: 2.0 MiB of new or changed files at most"),
        "{status}"
    );
    sh(
        &node,
        &format!("{pre}; {bound}"),
        &format!("ag-box snapshot {name} --accept-partial"),
    )
    .ok();
    sh(&node, pre, &format!("ag-box stop {name}; rm -rf {proj}")).ok();
}

/// A box that opens 5000 connections to its proxy and sends each half a request: the proxy
/// stays under its memory bound and answers again once they are gone, and another box's proxy
/// answers throughout.
fn a_flood_of_half_requests_costs_only_its_proxy(t: &dyn Target, pre: &str, names: [&str; 2]) {
    let [flood, other] = names;
    for name in names {
        fresh_box(t, pre, name, "");
    }
    let flooder = r#"python3 -c "
import os, resource, socket, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
if os.fork() == 0:
    os.setsid(); os.closerange(0, 3)
    socks = []
    for i in range(5000):
        s = socket.socket(); s.setblocking(False); s.connect_ex(('127.0.0.1', 3128)); socks.append(s)
    time.sleep(2)
    sent = 0
    for s in socks:
        try:
            s.send(b'GET http://x.invalid/ HTTP/1.1\r\nHost: x.invalid\r\nX-Pad: ' + b'a' * 2000); sent += 1
        except OSError:
            pass
    open('flood.tmp', 'w').write(f'{len(socks)} {sent}')
    os.rename('flood.tmp', 'flood.out')
    time.sleep(12)
    os._exit(0)
print('flooding')
""#;
    assert_eq!(inside(t, pre, flood, flooder), "flooding\n");
    let answer = |name: &str| {
        inside(
            t,
            pre,
            name,
            "curl -s -m 20 -o /dev/null -w %{http_code} http://x.invalid/ || true",
        )
    };
    let out = inside(
        t,
        pre,
        flood,
        "while [ ! -e flood.out ]; do sleep 0.2; done; cat flood.out",
    );
    let (opened, sent) = out.split_once(' ').unwrap();
    assert_eq!(opened, "5000");
    let sent: u32 = sent.parse().unwrap();
    assert!(sent >= 512, "only {sent} half requests reached the proxy");
    // The other box's proxy answers meanwhile (a refusal: its policy allows nothing).
    assert_eq!(answer(other), "403");
    // The flooded proxy's memory, and its bound.
    let find_proxy = if t.systemd() {
        format!("systemctl show -p MainPID --value boxnet-{flood}")
    } else {
        format!("pgrep -P $(cat /run/box/{flood}/anchor.pid) -f __proxy")
    };
    let measured = sh(
        t,
        pre,
        &format!(
            "set -e; pid=$({find_proxy}); grep VmRSS /proc/$pid/status | tr -s ' ' | cut -d' ' -f2
             if [ -n \"$(command -v systemctl)\" ] && systemctl is-active -q boxnet-{flood}; then
               systemctl show -p MemoryMax --value boxnet-{flood}
             else
               cg=$(grep ':memory:' /proc/$pid/cgroup | cut -d: -f3); cat /sys/fs/cgroup/memory$cg/memory.limit_in_bytes
             fi"
        ),
    )
    .ok()
    .stdout();
    let mut figures = measured.lines().map(|l| l.trim().parse::<u64>().unwrap());
    let (rss_kib, bound) = (figures.next().unwrap(), figures.next().unwrap());
    eprintln!("the flooded proxy holds {rss_kib} KiB (bound {bound} bytes)");
    assert_eq!(bound, 256 << 20);
    assert!(rss_kib * 1024 < bound, "{rss_kib} KiB");
    // Once the half requests time out or go, the flooded proxy answers again.
    assert_eq!(answer(flood), "403");
    for name in names {
        sh(
            t,
            pre,
            &format!("ag-box stop {name}; rm -rf {}/{name}", t.home()),
        )
        .ok();
    }
}

#[test]
fn a_flood_of_half_requests_costs_only_its_proxy_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    a_flood_of_half_requests_costs_only_its_proxy(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        ["flood", "calm"],
    );
}

#[test]
fn a_flood_of_half_requests_costs_only_its_proxy_with_the_direct_runtime() {
    let Some(host) = Host::new("flood") else {
        return;
    };
    let pid = std::process::id();
    a_flood_of_half_requests_costs_only_its_proxy(
        &host,
        "",
        [&format!("flood-{pid}"), &format!("calm-{pid}")],
    );
}

/// An `attach` ended by a signal (the SIGTERM of its box's unit stopping, `attach` being in
/// the box's cgroups; a hangup) gives the operator's terminal back as it was, not raw. (Run by
/// `sh`, which, unlike an interactive bash, does not put a killed job's terminal mode back.)
fn an_attach_ended_by_a_signal_gives_the_terminal_back(t: &dyn Target, pre: &str, name: &str) {
    let home = t.home();
    fresh_box(t, pre, name, "");
    let out = sh(
        t,
        pre,
        &format!(
            "o=stopped-{name}; tmux -L $o kill-server 2>/dev/null || true
             tmux -L $o new-session -d -s $o -x 160 -y 40 'bash --norc --noprofile' || exit 9
             screen() {{ tmux -L $o capture-pane -p -t $o; }}
             until_shown() {{ for i in $(seq 300); do screen | grep -Eq -- \"$1\" && return 0; sleep 0.1; done; return 1; }}
             tmux -L $o send-keys -t $o \"sh -c 'stty -g > {home}/tty-before; ag-box attach {name}; stty -g > {home}/tty-after'; echo back-\\$((2*3))\" Enter
             until_shown '\\[(box:|main\\])' || {{ screen; exit 8; }}
             pkill -TERM -f '^ag-box attach {name}$' || exit 7
             until_shown 'back-6' || {{ screen; exit 6; }}
             tmux -L $o kill-server
             cmp {home}/tty-before {home}/tty-after && echo same-mode"
        ),
    );
    assert_eq!(
        out.stdout().trim_end(),
        "same-mode",
        "exit {}: {}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr)
    );
    sh(
        t,
        pre,
        &format!("ag-box stop {name}; rm -rf {home}/{name} {home}/tty-before {home}/tty-after"),
    )
    .ok();
}

#[test]
fn an_attach_ended_by_a_signal_gives_the_terminal_back_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    an_attach_ended_by_a_signal_gives_the_terminal_back(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "attached",
    );
}

#[test]
fn an_attach_ended_by_a_signal_gives_the_terminal_back_with_the_direct_runtime() {
    let Some(host) = Host::new("attached") else {
        return;
    };
    let name = format!("attached-{}", std::process::id());
    an_attach_ended_by_a_signal_gives_the_terminal_back(&host, "", &name);
}

/// A box's row of `ag-box ls --json` on a target (with its state dir, `pre`).
fn row_of(t: &dyn Target, pre: &str, name: &str) -> serde_json::Value {
    let ls: serde_json::Value =
        serde_json::from_str(&sh(t, pre, "ag-box ls --json").ok().stdout()).unwrap();
    ls["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap()
        .clone()
}

/// Claude Code's dir name for a project path.
fn slug(path: &str) -> String {
    path.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// What a box plants in its agent home (links where a fork renames or rewrites, a link at the
/// name a rewrite writes first, names of escapes) steers nothing a `fork` of it does as root:
/// the host's files keep their contents and owners, the fork's files are all its own, its
/// conversations name its project, and nothing reaches the terminal unescaped.
fn what_a_box_plants_steers_nothing_of_its_forks(t: &dyn Target, pre: &str, name: &str) {
    let home = t.home();
    let kid = format!("{name}-kid");
    let victim = format!("{home}/victim-fork-{name}");
    let (proj, kid_proj) = (format!("{home}/{name}"), format!("{home}/{kid}"));
    sh(
        t,
        pre,
        &format!(
            "ag-box park {kid} >/dev/null 2>&1 || true; s=$BOX_STATE_DIR
             rm -rf $s/meta/{kid}.json $s/local/{kid}.json $s/homes/{kid} {kid_proj} {victim}
             set -e; mkdir -p {victim}; echo root-only > {victim}/secret; echo host > {victim}/marker
             chmod 700 {victim}"
        ),
    )
    .ok();
    fresh_box(t, pre, name, "");
    let meta = format!(
        r#"{{"timestamp":"t","type":"session_meta","payload":{{"id":"1","cwd":"{proj}"}}}}"#
    );
    let (from_slug, to_slug) = (slug(&proj), slug(&kid_proj));
    assert_eq!(
        inside(
            t,
            pre,
            name,
            &format!(
                "set -e
                 mkdir -p ~/.claude/projects/{from_slug} && echo '{{}}' > ~/.claude/projects/{from_slug}/c1.jsonl
                 d=~/.codex/sessions/2026/12/04; mkdir -p $d
                 echo '{meta}' > $d/rollout-own.jsonl; echo turn >> $d/rollout-own.jsonl
                 ln -s {victim}/secret $d/.rollout-own.jsonl.ag-box-new
                 ln -s {victim}/secret $d/rollout-link.jsonl
                 mkfifo $d/rollout-fifo.jsonl
                 ln -s {victim} ~/.codex/sessions/2027
                 mkdir -p ~/.gemini/tmp/own ~/.gemini/tmp/link
                 printf '{proj}' > ~/.gemini/tmp/own/.project_root
                 ln -s {victim}/marker ~/.gemini/tmp/link/.project_root
                 mkdir -p ~/.grok/sessions && ln -s {victim} \"$(printf 'evil\\033]52;c;aGk=\\007\\nforked box x')\"
                 ln {proj}/keep.txt {proj}/keep-hard.txt
                 mkdir -p {proj}/.git && mkfifo {proj}/.git/HEAD
                 echo planted"
            )
        ),
        "planted\n"
    );
    // A fifo where git reads holds its branch up a minute at most; the fork is made.
    let fork = sh(t, pre, &format!("ag-box fork {name} {kid}"));
    let seen = format!("{}{}", fork.ok().stdout(), fork.stderr());
    assert!(
        !seen.contains(['\u{1b}', '\u{7}'])
            && !seen.lines().any(|l| l.starts_with("forked box x"))
            && seen.contains("git did not finish within a minute"),
        "{seen:?}"
    );
    // The host's files as they were; the fork's own, its conversations naming its project,
    // the links kept as links and the fifo as a fifo.
    let h = format!("$BOX_STATE_DIR/homes/{kid}");
    assert_eq!(
        sh(
            t,
            pre,
            &format!(
                "stat -c '%U %a' {victim} {victim}/secret {victim}/marker; cat {victim}/secret {victim}/marker
                 d={h}/.codex/sessions/2026/12/04
                 cat $d/rollout-own.jsonl; cat {h}/.gemini/tmp/own/.project_root; echo
                 test -L $d/rollout-link.jsonl && test -p $d/rollout-fifo.jsonl && test -L {h}/.codex/sessions/2027
                 test -L {h}/.gemini/tmp/link/.project_root && test ! -e $d/.rollout-own.jsonl.ag-box-new
                 test -p {kid_proj}/.git/HEAD && test {kid_proj}/keep.txt -ef {kid_proj}/keep-hard.txt
                 ls {h}/.claude/projects
                 find {kid_proj} {h} -printf '%U\\n' | sort -u | wc -l"
            )
        )
        .ok()
        .stdout(),
        format!(
            "root 700\nroot 644\nroot 644\nroot-only\nhost\n{}\nturn\n{kid_proj}\n{to_slug}\n1\n",
            meta.replace(&proj, &kid_proj)
        )
    );
    let row = row_of(t, pre, &kid);
    assert_eq!(row["forked_from"]["box"], name, "{row:#}");
    let uid = row["uid"].clone();
    assert_eq!(
        sh(
            t,
            pre,
            &format!("stat -c %u {kid_proj}/keep.txt {h}/.claude/projects/{to_slug}/c1.jsonl")
        )
        .ok()
        .stdout(),
        format!("{uid}\n{uid}\n")
    );
    sh(
        t,
        pre,
        &format!(
            "ag-box park {kid} >/dev/null 2>&1 || true; ag-box park {name} >/dev/null 2>&1 || true; rm -rf {victim}"
        ),
    )
    .ok();
}

#[test]
fn what_a_box_plants_steers_nothing_of_its_forks_on_a_systemd_node() {
    let Some(node) = Node::local_store("nodeB") else {
        return;
    };
    what_a_box_plants_steers_nothing_of_its_forks(
        &node,
        "export BOX_STATE_DIR=/var/lib/ag-box-planted",
        "plfork",
    );
}

#[test]
fn what_a_box_plants_steers_nothing_of_its_forks_with_the_direct_runtime() {
    let Some(host) = Host::new("planted") else {
        return;
    };
    let name = format!("plfork-{}", std::process::id());
    what_a_box_plants_steers_nothing_of_its_forks(&host, "", &name);
}
