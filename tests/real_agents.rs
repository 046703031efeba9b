//! The real Claude Code and Codex CLIs (pinned, installed by `tests/rig.sh install`) in a
//! non-root box: a non-interactive run against the stand-in model server of
//! `tests/agents/standin.py` on node A, a migration, and the same conversations resumed on B.
//! The box has its own network: the CLIs reach the stand-in (on the node's rig address) only
//! through the egress proxy, and only while the box's allow-list names it.

mod common;

use common::{Checked, Cluster, Node, Target};

const AGENTS: &str = "/usr/local/lib/ag-box-test-agents/bin";
const PORT: u16 = 18481;
const HOMES: &str = "/var/lib/ag-box/homes";
const STOP: &str = "if [ -s /root/standin.pid ]; then kill $(cat /root/standin.pid) 2>/dev/null || true; fi; rm -f /root/standin.pid";

/// The node's address on the rig's network.
fn ip(n: &Node) -> &'static str {
    match n.name {
        "nodeA" => "10.200.0.1",
        "nodeB" => "10.200.0.2",
        _ => "10.200.0.3",
    }
}

/// The box's allow-list entries for the stand-in on A and B.
fn standin_entries() -> String {
    format!("10.200.0.1:{PORT},10.200.0.2:{PORT}")
}

/// The stand-in model server on a node's rig address (outside every box).
struct StandIn<'a>(&'a Node);

impl<'a> StandIn<'a> {
    fn start(n: &'a Node) -> StandIn<'a> {
        n.put_in_root("tests/agents/standin.py", "standin.py");
        n.sh(&format!(
            "{STOP}
             setsid -f sh -c 'echo $$ > /root/standin.pid; \
               exec python3 /root/standin.py --port {PORT} --host {ip} --log /root/standin.log' \
               </dev/null >/dev/null 2>&1
             for i in $(seq 100); do curl -sf http://{ip}:{PORT}/v1/models >/dev/null && exit 0; sleep 0.05; done
             exit 1",
            ip = ip(n)
        ))
        .ok();
        StandIn(n)
    }
}

impl Drop for StandIn<'_> {
    fn drop(&mut self) {
        self.0.sh(STOP);
    }
}

/// Both CLIs reach the stand-in without a login: Claude Code by its environment (given at
/// each run) and onboarding flag (the node's `~/.claude.json`, seeded into each box), Codex
/// by its global config (bound read-only into boxes).
fn configure(n: &Node) {
    n.sh(&format!(
        "set -e; mkdir -p /root/.codex
         printf '{{\"hasCompletedOnboarding\": true}}\\n' > /root/.claude.json
         cat > /root/.codex/config.toml <<EOF
model = \"gpt-standin\"
model_provider = \"standin\"
approval_policy = \"never\"
sandbox_mode = \"read-only\"
check_for_update_on_startup = false
[analytics]
enabled = false
[features]
plugins = false
apps = false
[model_providers.standin]
name = \"Stand-in\"
base_url = \"http://{ip}:{PORT}/v1\"
wire_api = \"responses\"
env_key = \"STANDIN_API_KEY\"
EOF",
        ip = ip(n)
    ))
    .ok();
}

fn claude(n: &Node, name: &str, args: &str) -> String {
    n.sh(&format!(
        "ag-box exec {name} -- env ANTHROPIC_BASE_URL=http://{ip}:{PORT} ANTHROPIC_API_KEY=sk-standin \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
         DISABLE_ERROR_REPORTING=1 timeout 120 {AGENTS}/claude -p {args} --output-format json",
        ip = ip(n)
    ))
    .ok()
    .stdout()
}

/// Claude Code with the stand-in's address unlisted: the proxy refuses it, and says so.
fn claude_refused(n: &Node, name: &str) {
    n.sh(&format!("ag-box set {name} allow=")).ok();
    let out = n.sh(&format!(
        "ag-box exec {name} -- env ANTHROPIC_BASE_URL=http://{ip}:{PORT} ANTHROPIC_API_KEY=sk-standin \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
         DISABLE_ERROR_REPORTING=1 timeout 20 {AGENTS}/claude -p 'Refused?' --output-format json",
        ip = ip(n)
    ));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("STANDIN-REPLY"),
        "the stand-in answered through the proxy although it is not listed: {out:?}"
    );
    let log = n.sh(&format!("ag-box egress {name} --json")).ok().stdout();
    let log: serde_json::Value = serde_json::from_str(&log).unwrap();
    let refused = log["decisions"].as_array().unwrap().iter().any(|d| {
        d["allowed"] == false
            && d["host"] == ip(n)
            && d["port"] == PORT
            && d["reason"]
                .as_str()
                .is_some_and(|r| r.contains("private address"))
    });
    assert!(refused, "no refusal of {}:{PORT} logged: {log:#}", ip(n));
    n.sh(&format!("ag-box set {name} allow={}", standin_entries()))
        .ok();
}

fn codex(n: &Node, name: &str, args: &str) -> String {
    n.sh(&format!(
        "ag-box exec {name} -- env STANDIN_API_KEY=standin timeout 120 {AGENTS}/codex exec \
         --skip-git-repo-check --json {args} </dev/null"
    ))
    .ok()
    .stdout()
}

/// Owners, modes and contents of the project and the box's agent home, as a node has them.
fn listing(n: &Node, name: &str) -> String {
    n.sh(&format!(
        "cd {HOMES}/{name} && find .claude/projects .codex/sessions -type f -exec stat -c '%u:%g %a %n' {{}} + | sort
         find .claude/projects .codex/sessions -type f -exec md5sum {{}} + | sort
         cd /root/{name} && find . -exec stat -c '%u:%g %a %n' {{}} + | sort"
    ))
    .ok()
    .stdout()
}

#[test]
fn claude_code_and_codex_run_in_a_non_root_box_and_resume_after_a_migration() {
    let Some(c) = Cluster::get() else { return };
    for n in [&c.a, &c.b] {
        if !n
            .sh(&format!(
                "test -x {AGENTS}/claude && test -x {AGENTS}/codex"
            ))
            .status
            .success()
        {
            common::missing("the agent CLIs (tests/rig.sh install)");
            return;
        }
        configure(n);
    }
    let name = "agents-real";
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box set {name} network=allow allow={}",
        standin_entries()
    ))
    .ok();
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();

    let first = {
        let _server = StandIn::start(&c.a);
        let claude_out = claude(&c.a, name, "'What is the first question?'");
        assert!(
            claude_out.contains("STANDIN-REPLY turns=1 last=What is the first question?"),
            "{claude_out}"
        );
        let codex_out = codex(&c.a, name, "'First for codex?'");
        assert!(
            codex_out.contains("STANDIN-REPLY turns=1 last=First for codex?"),
            "{codex_out}"
        );
        claude_refused(&c.a, name);
        (claude_out, codex_out)
    };
    let session: serde_json::Value = serde_json::from_str(first.0.trim()).unwrap();
    let session = session["session_id"].as_str().unwrap().to_string();
    let thread = first
        .1
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["thread_id"].as_str().map(str::to_string))
        .unwrap();
    // Written as the box user, in the box's own agent home.
    let on_a = listing(&c.a, name);
    let uid = common::uid_of(&c.a, name);
    assert!(
        on_a.contains(&format!(
            "{uid}:{uid} 600 .claude/projects/-root-{name}/{session}.jsonl"
        )),
        "{on_a}"
    );
    assert!(
        on_a.lines()
            .any(|l| l.starts_with(&format!("{uid}:{uid} "))
                && l.ends_with(&format!("-{thread}.jsonl"))),
        "{on_a}"
    );

    c.a.sh(&format!("ag-box park {name}")).ok();
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    assert_eq!(
        listing(&c.b, name),
        on_a,
        "same files, owners and modes on B"
    );

    let _server = StandIn::start(&c.b);
    let resumed = claude(&c.b, name, &format!("'And the second?' --resume {session}"));
    assert!(
        resumed.contains("STANDIN-REPLY turns=2 last=And the second?"),
        "{resumed}"
    );
    let resumed = codex(&c.b, name, &format!("resume {thread} 'Second for codex?'"));
    assert!(
        resumed.contains("STANDIN-REPLY turns=2 last=Second for codex?"),
        "{resumed}"
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}
