//! The real Claude Code and Codex CLIs (pinned, installed by `tests/rig.sh install`) in a
//! non-root box: a non-interactive run against the stand-in model server of
//! `tests/agents/standin.py` on node A, a migration, and the same conversations resumed on B.
//! The box has its own network: the CLIs reach the stand-in (on the node's rig address) only
//! through the egress proxy, and only while the box's allow-list names it. `ag-box cost` then
//! counts, from the transcripts the CLIs wrote, the tokens the stand-in reported.

mod common;

use std::collections::BTreeMap;

use common::{Checked, Cluster, Node, Target};

const AGENTS: &str = "/usr/local/lib/ag-box-test-agents/bin";
const PORT: u16 = 18481;
const HOMES: &str = "/var/lib/ag-box/homes";
/// The box whose agents run in its `main` window, driven through a terminal.
const TUI_BOX: &str = "agents-tui";
/// The box whose agent's state is watched from the other node.
const ATTENTION_BOX: &str = "agents-attn";
/// The box forked into `kid-1`, `kid-2` (on A) and `solo` (on B).
const FORK_PARENT: &str = "agents-fork";
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
             : > /root/standin.log
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

/// Both CLIs reach the stand-in without a login, and are on the boxes' PATH (`/usr/local/bin`):
/// Claude Code by its environment (the node's `~/.claude/settings.json`, bound read-only into
/// boxes), its onboarding flag and the projects it trusts (the node's `~/.claude.json`, seeded
/// into each box); Codex by its global config (bound read-only into boxes), which trusts the
/// projects too.
fn configure(n: &Node) -> Configured<'_> {
    let trusted = [
        TUI_BOX,
        ATTENTION_BOX,
        "agents-real",
        FORK_PARENT,
        "kid-1",
        "kid-2",
        "solo",
    ];
    let claude_projects: serde_json::Map<String, serde_json::Value> = trusted
        .iter()
        .map(|b| {
            (
                format!("/root/{b}"),
                serde_json::json!({"hasTrustDialogAccepted": true}),
            )
        })
        .collect();
    let claude_json = serde_json::json!({
        "hasCompletedOnboarding": true,
        "projects": claude_projects,
        "customApiKeyResponses": {"approved": ["sk-standin"], "rejected": []},
    });
    let settings = serde_json::json!({"env": {
        "ANTHROPIC_BASE_URL": format!("http://{}:{PORT}", ip(n)),
        "ANTHROPIC_API_KEY": "sk-standin",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }});
    let codex_trust = trusted
        .map(|b| format!("[projects.\"/root/{b}\"]\ntrust_level = \"trusted\"\n"))
        .join("");
    n.sh(&format!(
        "set -e; mkdir -p /root/.codex /root/.claude
         ln -sf {AGENTS}/claude {AGENTS}/codex /usr/local/bin/
         echo '{claude_json}' > /root/.claude.json
         echo '{settings}' > /root/.claude/settings.json
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
experimental_bearer_token = \"standin\"
{codex_trust}EOF",
        ip = ip(n)
    ))
    .ok();
    Configured(n)
}

/// Both nodes configured (`configure`), or None when the rig lacks the CLIs (the test then
/// fails as missing a prerequisite).
fn configure_both(c: &Cluster) -> Option<[Configured<'_>; 2]> {
    for n in [&c.a, &c.b] {
        if !n
            .sh(&format!(
                "test -x {AGENTS}/claude && test -x {AGENTS}/codex"
            ))
            .status
            .success()
        {
            common::missing("the agent CLIs (tests/rig.sh install)");
            return None;
        }
    }
    Some([configure(&c.a), configure(&c.b)])
}

/// Takes the CLIs off the boxes' PATH and Claude Code's settings off the node when the test
/// ends: a box of another test whose agent is Claude Code (any box tracked with a Claude
/// session) gets a shell, not a real Claude Code to type into.
struct Configured<'a>(&'a Node);

impl Drop for Configured<'_> {
    fn drop(&mut self) {
        self.0
            .sh("rm -f /usr/local/bin/claude /usr/local/bin/codex /root/.claude/settings.json");
    }
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

/// Requests, then tokens in, out, cache write and cache read, by agent and model.
type Usage = BTreeMap<(String, String), [u64; 5]>;

fn add(to: &mut Usage, agent: &str, model: &str, counts: [u64; 5]) {
    let row = to.entry((agent.into(), model.into())).or_default();
    for (sum, n) in row.iter_mut().zip(counts) {
        *sum += n;
    }
}

/// What the stand-in on a node reported in its replies, as `ag-box cost` counts it: Claude's
/// input apart from the cache's; the Responses API's input holds the cached tokens, counted as
/// cache reads.
fn reported(n: &Node, into: &mut Usage) {
    let log = n.sh("cat /root/standin.log").ok().stdout();
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (u, model) = (&v["usage"], v["model"].as_str().unwrap_or(""));
        let count = |key: &str| u[key].as_u64().unwrap();
        match v["summary"].as_str() {
            Some("anthropic.messages") => add(
                into,
                "claude-code",
                model,
                [
                    1,
                    count("input_tokens"),
                    count("output_tokens"),
                    count("cache_creation_input_tokens"),
                    count("cache_read_input_tokens"),
                ],
            ),
            Some("openai.responses") => {
                let cached = u["input_tokens_details"]["cached_tokens"].as_u64().unwrap();
                add(
                    into,
                    "codex",
                    model,
                    [
                        1,
                        count("input_tokens") - cached,
                        count("output_tokens"),
                        0,
                        cached,
                    ],
                );
            }
            _ => {}
        }
    }
}

/// What `ag-box cost <box> --json` counts on a node (its shape checked, no warning), and the
/// document's total.
fn counted(n: &Node, name: &str) -> (Usage, serde_json::Value) {
    let doc = n.sh(&format!("ag-box cost {name} --json")).ok().stdout();
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    common::assert_shape("cost", &doc);
    let the_box = &doc["boxes"][0];
    assert_eq!(
        (&the_box["box"], &the_box["warnings"]),
        (&serde_json::json!(name), &serde_json::json!([])),
        "{doc:#}"
    );
    let mut usage = Usage::new();
    for m in the_box["models"].as_array().unwrap() {
        let count = |key: &str| m[key].as_u64().unwrap();
        add(
            &mut usage,
            m["agent"].as_str().unwrap(),
            m["model"].as_str().unwrap(),
            [
                count("requests"),
                count("input_tokens"),
                count("output_tokens"),
                count("cache_write_tokens"),
                count("cache_read_tokens"),
            ],
        );
    }
    assert_eq!(doc["total"], the_box["total"], "{doc:#}");
    (usage, the_box.clone())
}

/// `cost` of the box on a node is what the stand-ins reported, model by model, and the
/// stand-in's Claude model (priced as Opus 4.8) costs what its tokens do; Codex's has no price.
fn cost_is_what_was_reported(n: &Node, name: &str, reported: &Usage) {
    let (usage, the_box) = counted(n, name);
    assert_eq!(&usage, reported, "{the_box:#}");
    let claude = reported
        .iter()
        .find(|((agent, _), _)| agent == "claude-code")
        .map(|(_, c)| *c)
        .unwrap();
    // Micro-dollars per million tokens: $5 in, $25 out, $6.25 cache write, $0.50 cache read.
    let pico = u128::from(claude[1]) * 5_000_000
        + u128::from(claude[2]) * 25_000_000
        + u128::from(claude[3]) * 6_250_000
        + u128::from(claude[4]) * 500_000;
    #[allow(clippy::cast_precision_loss)]
    let usd = ((pico + 500_000) / 1_000_000) as f64 / 1_000_000.0;
    let rows = the_box["models"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{the_box:#}");
    let cost_of = |agent: &str| {
        rows.iter()
            .find(|r| r["agent"] == agent)
            .map(|r| r["cost_usd"].clone())
            .unwrap()
    };
    assert_eq!(
        cost_of("claude-code"),
        serde_json::json!(usd),
        "{the_box:#}"
    );
    assert_eq!(cost_of("codex"), serde_json::Value::Null, "{the_box:#}");
    assert_eq!(the_box["total"]["cost_usd"], serde_json::json!(usd));
    assert_eq!(
        the_box["total"]["unpriced_models"],
        serde_json::json!(["gpt-standin"])
    );
}

fn codex(n: &Node, name: &str, args: &str) -> String {
    n.sh(&format!(
        "ag-box exec {name} -- timeout 120 {AGENTS}/codex exec \
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

/// After the first runs on A: Claude Code wrote a line per block of its response (a thinking
/// and a text block here), each with the whole response's usage, and `cost` counts it once.
fn cost_on_a(a: &Node, name: &str, session: &str) -> Usage {
    let mut on_a_reported = Usage::new();
    reported(a, &mut on_a_reported);
    assert_eq!(
        on_a_reported.values().map(|c| c[0]).collect::<Vec<_>>(),
        [1, 1],
        "{on_a_reported:?}"
    );
    let blocks = a
        .sh(&format!(
            "grep -c '\"type\":\"assistant\"' {HOMES}/{name}/.claude/projects/-root-{name}/{session}.jsonl"
        ))
        .ok()
        .stdout();
    assert_eq!(blocks.trim(), "2", "one line per block");
    cost_is_what_was_reported(a, name, &on_a_reported);
    on_a_reported
}

/// After the resumes on B, where the transcripts moved with the box.
fn cost_on_b(b: &Node, name: &str, on_a_reported: &Usage) {
    // The transcripts moved with the box: its cost on B is what both stand-ins reported;
    // since a time after both runs, nothing.
    let mut both = on_a_reported.clone();
    reported(b, &mut both);
    cost_is_what_was_reported(b, name, &both);
    let later = b
        .sh(&format!("ag-box cost {name} --since 2099-01-01 --json"))
        .ok()
        .stdout();
    let later: serde_json::Value = serde_json::from_str(&later).unwrap();
    assert_eq!(
        later["boxes"][0]["models"],
        serde_json::json!([]),
        "{later:#}"
    );
    assert_eq!(later["since"], "2099-01-01T00:00:00Z");
    // Every box here: this one's rows among them, the total at least its own.
    let all = b.sh("ag-box cost --json").ok().stdout();
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    common::assert_shape("cost", &all);
    let mine = all["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["box"] == name)
        .unwrap();
    assert_eq!(mine["total"], counted(b, name).1["total"]);
    assert!(
        all["total"]["requests"].as_u64() >= mine["total"]["requests"].as_u64(),
        "{all:#}"
    );
    let table = b.sh(&format!("ag-box cost {name}")).ok().stdout();
    assert!(
        table.starts_with("BOX ")
            && table.contains("claude-opus-4-8")
            && table.contains("gpt-standin"),
        "{table}"
    );
}

#[test]
fn claude_code_and_codex_run_in_a_non_root_box_and_resume_after_a_migration() {
    let Some(c) = Cluster::get() else { return };
    let Some(_configured) = configure_both(&c) else {
        return;
    };
    let name = "agents-real";
    c.parked_box(name);
    // Run by hand here, never in the box's window.
    c.a.sh(&format!(
        "ag-box set {name} agent=none network=allow allow={}",
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
    let on_a_reported = cost_on_a(&c.a, name, &session);
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
    cost_on_b(&c.b, name, &on_a_reported);
    c.b.sh(&format!("ag-box park {name}")).ok();
    common::whole_snapshot_done(&c.b, name);
    tokens_by_snapshot(&c.b, name);
}

/// `history` on the node holding the box's transcripts puts every token `cost` counts in the
/// span between snapshots it was written in: parked, the spans hold them all.
fn tokens_by_snapshot(n: &Node, name: &str) {
    let history: serde_json::Value =
        serde_json::from_str(&n.sh(&format!("ag-box history {name} --json")).ok().stdout())
            .unwrap();
    let spans: Vec<u64> = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["tokens"].as_u64().unwrap())
        .collect();
    let total = &counted(n, name).1["total"];
    let tokens: u64 = [
        "input_tokens",
        "output_tokens",
        "cache_write_tokens",
        "cache_read_tokens",
    ]
    .iter()
    .map(|k| total[*k].as_u64().unwrap())
    .sum();
    assert_eq!(spans.iter().sum::<u64>(), tokens, "{history:#}");
    assert!(
        spans.iter().filter(|t| **t > 0).count() >= 2,
        "the runs on A and on B fall in two spans: {history:#}"
    );
}

/// A parked box whose agent is Claude Code, reaching the stand-ins on A and B.
fn claude_box(c: &Cluster, name: &str) {
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box set {name} agent=claude network=allow allow={}",
        standin_entries()
    ))
    .ok();
}

/// `ag-box attach <box>` in a real terminal on a node (a pane of an outer tmux there), as a
/// person sees and types into it.
struct Terminal<'a> {
    n: &'a Node,
    server: String,
}

impl<'a> Terminal<'a> {
    fn attach(n: &'a Node, name: &str) -> Terminal<'a> {
        // A server of its own: one being torn down does not take the next with it.
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let server = format!(
            "term-{name}-{}",
            COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        n.sh(&format!(
            "tmux -L {server} kill-server 2>/dev/null || true
             tmux -L {server} new-session -d -s t -x 200 -y 50 \
               'ag-box attach {name}; echo attach-exit=$?; sleep 600'"
        ))
        .ok();
        Terminal { n, server }
    }

    fn screen(&self) -> String {
        self.n
            .sh(&format!("tmux -L {} capture-pane -p -t t", self.server))
            .ok()
            .stdout()
    }

    /// Waits until the screen shows `text`; fails the test with the screen when it never does.
    fn shows(&self, text: &str) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return;
            }
            assert!(
                std::time::Instant::now() < end,
                "the terminal never showed {text:?}:\n{screen}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Sends keys as tmux names them (`Enter`, `C-c`, `-l <text>`).
    fn send(&self, key: &str) {
        self.n
            .sh(&format!("tmux -L {} send-keys -t t {key}", self.server))
            .ok();
    }

    /// Types a line as a person would: the text, and once it shows, Enter. (Keys sent while a
    /// CLI still sets up its terminal can be lost: the caller first waits for its prompt. Codex
    /// 0.171 drops a `?` that ends a burst of keys into its empty prompt: none is typed there.)
    fn type_line(&self, text: &str) {
        self.send(&format!("-l '{text}'"));
        self.shows(text);
        std::thread::sleep(std::time::Duration::from_millis(300));
        self.send("Enter");
    }

    /// Detaches (`C-b d`): attach exits 0 and the box goes on.
    fn detach(self) {
        self.n
            .sh(&format!("tmux -L {} send-keys -t t C-b d", self.server))
            .ok();
        self.shows("attach-exit=0");
    }
}

impl Drop for Terminal<'_> {
    fn drop(&mut self) {
        self.n.sh(&format!(
            "tmux -L {} kill-server 2>/dev/null || true",
            self.server
        ));
    }
}

/// What each CLI shows once it takes keys: Claude Code's footer, Codex's empty prompt.
const CLAUDE_READY: &str = "? for shortcuts";
const CODEX_READY: &str = "Ask Codex to do anything";

/// What a person sees: a conversation with Claude Code started in the box's window on A goes
/// on in the window on B after park and up, nothing typed but the next message; Codex, once the
/// box's agent, resumes the conversation `codex exec` began (which its own `resume --last`
/// skips), and its hooks say when it is mid-turn and done; `up --fresh` starts a new one.
#[test]
fn the_agent_is_back_in_its_conversation_in_the_boxs_window_after_a_migration() {
    let Some(c) = Cluster::get() else { return };
    let Some(_configured) = configure_both(&c) else {
        return;
    };
    let name = TUI_BOX;
    claude_box(&c, name);
    {
        let _server = StandIn::start(&c.a);
        c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
        let t = Terminal::attach(&c.a, name);
        t.shows(CLAUDE_READY);
        t.type_line("What is the first question?");
        t.shows("STANDIN-REPLY turns=1 last=What is the first question?");
        t.detach();
        let codex_out = codex(&c.a, name, "'First for codex?'");
        assert!(
            codex_out.contains("STANDIN-REPLY turns=1 last=First for codex?"),
            "{codex_out}"
        );
        c.a.sh(&format!("ag-box park {name}")).ok();
    }

    let _server = StandIn::start(&c.b);
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    let t = Terminal::attach(&c.b, name);
    // The earlier turn is on the screen, and the stand-in sees it in the next request.
    t.shows(CLAUDE_READY);
    t.shows("STANDIN-REPLY turns=1 last=What is the first question?");
    t.type_line("And the second?");
    t.shows("STANDIN-REPLY turns=2 last=And the second?");
    t.detach();

    c.b.sh(&format!(
        "ag-box set {name} agent=codex && ag-box park {name} && ag-box up {name} --node nodeB"
    ))
    .ok();
    let t = Terminal::attach(&c.b, name);
    t.shows(CODEX_READY);
    t.shows("STANDIN-REPLY turns=1 last=First for codex?");
    t.type_line("Second for codex");
    t.shows("STANDIN-REPLY turns=2 last=Second for codex");
    // Codex's hooks, from the managed dir each box gets, tell its state: mid-turn (the
    // stand-in holds the turn open), then done.
    t.type_line("HOLD-5 Third for codex");
    let working = until_state(&c.b, name, "working");
    assert_eq!(working["agent"], "codex", "{working}");
    t.shows("STANDIN-REPLY turns=3 last=HOLD-5 Third for codex");
    until_state(&c.b, name, "idle");
    t.detach();

    c.b.sh(&format!(
        "ag-box park {name} && ag-box up {name} --node nodeB --fresh"
    ))
    .ok();
    let t = Terminal::attach(&c.b, name);
    t.shows(CODEX_READY);
    t.type_line("Fresh for codex");
    t.shows("STANDIN-REPLY turns=1 last=Fresh for codex");
    t.detach();
    c.b.sh(&format!("ag-box park {name}")).ok();
}

/// The box's agent state as `ls --json` on a node shows it.
fn state_on(n: &Node, name: &str) -> serde_json::Value {
    let ls: serde_json::Value =
        serde_json::from_str(&n.sh("ag-box ls --json").ok().stdout()).unwrap();
    ls["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .map(|b| b["agent_state"].clone())
        .unwrap_or_default()
}

/// Waits until `ls` on a node shows the box's agent in `state`; fails with what it showed.
fn until_state(n: &Node, name: &str, state: &str) -> serde_json::Value {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now = state_on(n, name);
        if now["state"] == state {
            return now;
        }
        assert!(
            std::time::Instant::now() < end,
            "ls on {} never showed {name} {state}: {now}",
            n.name
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Which box needs the operator, from another node: Claude Code in a box on A asks for a tool
/// permission, and `ls` on B shows the box `waiting` (with the question), `ls --waiting` lists
/// it and `wait` returns; the answer moves it to `working` (the stand-in holds the turn open),
/// then `idle`. `park` waits for a turn the stand-in holds open, and `park --now` does not.
#[test]
fn the_agents_state_reaches_the_other_node_and_park_waits_for_its_turn() {
    let Some(c) = Cluster::get() else { return };
    let Some(_configured) = configure_both(&c) else {
        return;
    };
    let name = ATTENTION_BOX;
    claude_box(&c, name);
    let _server = StandIn::start(&c.a);
    let hook = Webhook::start(&c.a);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    let t = Terminal::attach(&c.a, name);
    t.shows(CLAUDE_READY);
    t.type_line("USE-TOOL HOLD-6 then answer");
    t.shows("Do you want to proceed?");
    let waiting = until_state(&c.b, name, "waiting");
    assert_eq!(waiting["agent"], "claude", "{waiting}");
    assert!(
        waiting["detail"]
            .as_str()
            .is_some_and(|d| d.contains("permission")),
        "{waiting}"
    );
    let listed = c.b.sh("ag-box ls --waiting").ok().stdout();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(name) && l.contains(" waiting ")),
        "{listed}"
    );
    let waited = c.b.sh(&format!("ag-box wait {name}")).ok().stdout();
    assert!(
        waited.starts_with(&format!("{name} nodeA claude waiting: ")),
        "{waited}"
    );
    // The webhook was told once, with the question and the way there.
    let told = hook.received();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        [
            &told[0]["box"],
            &told[0]["node"],
            &told[0]["state"],
            &told[0]["question"],
            &told[0]["attach"]
        ],
        [
            &serde_json::json!(name),
            &serde_json::json!("nodeA"),
            &serde_json::json!("waiting"),
            &waiting["detail"],
            &serde_json::json!(format!("ag-box attach {name}"))
        ]
    );
    // Yes (the first choice): the tool runs, and the stand-in holds the rest of the turn.
    t.send("Enter");
    until_state(&c.b, name, "working");
    until_state(&c.b, name, "idle");
    t.shows("STANDIN-REPLY turns=1 last=USE-TOOL HOLD-6 then answer");
    c.a.sh(&format!("test -e /root/{name}/standin-tool-ran"))
        .ok();

    // A turn held open: park waits for it, and the answer is in what was parked.
    t.type_line("HOLD-5 a long turn");
    until_state(&c.a, name, "working");
    let parked = c.a.sh(&format!("ag-box park {name} 2>&1")).ok().stdout();
    assert!(
        parked.contains("claude is mid-turn; the park waits up to 2m for the turn to end")
            && parked.contains("claude ended its turn"),
        "{parked}"
    );
    c.a.sh(&format!(
        "grep -q 'STANDIN-REPLY turns=2 last=HOLD-5 a long turn' {HOMES}/{name}/.claude/projects/-root-{name}/*.jsonl || {{ tail -c 3000 {HOMES}/{name}/.claude/projects/-root-{name}/*.jsonl >&2; exit 1; }}"
    ))
    .ok();
    // --now does not wait.
    drop(t);
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    let t = Terminal::attach(&c.a, name);
    t.shows(CLAUDE_READY);
    t.type_line("HOLD-30 cut off");
    until_state(&c.a, name, "working");
    let parked =
        c.a.sh(&format!("ag-box park {name} --now 2>&1"))
            .ok()
            .stdout();
    assert!(!parked.contains("mid-turn"), "{parked}");
}

/// A webhook on a node's loopback that keeps what it is sent (`tests/agents/webhook.py`),
/// named in the node's `BOX_NOTIFY` while it lives.
struct Webhook<'a>(&'a Node);

const WEBHOOK_PORT: u16 = 18483;
const WEBHOOK_STOP: &str = "if [ -s /root/webhook.pid ]; then kill $(cat /root/webhook.pid) 2>/dev/null || true; fi; rm -f /root/webhook.pid; sed -i '/^BOX_NOTIFY=/d' /root/.config/box/env";

impl<'a> Webhook<'a> {
    fn start(n: &'a Node) -> Webhook<'a> {
        n.put_in_root("tests/agents/webhook.py", "webhook.py");
        n.sh(&format!(
            "{WEBHOOK_STOP}
             setsid -f sh -c 'echo $$ > /root/webhook.pid; \
               exec python3 /root/webhook.py {WEBHOOK_PORT} /root/webhook.log' </dev/null >/dev/null 2>&1
             for i in $(seq 100); do curl -sf http://127.0.0.1:{WEBHOOK_PORT}/ >/dev/null && break; sleep 0.05; done
             curl -sf http://127.0.0.1:{WEBHOOK_PORT}/ >/dev/null
             echo BOX_NOTIFY=http://127.0.0.1:{WEBHOOK_PORT}/hook >> /root/.config/box/env"
        ))
        .ok();
        Webhook(n)
    }

    /// What it was sent, one JSON document each.
    fn received(&self) -> Vec<serde_json::Value> {
        self.0
            .sh("cat /root/webhook.log")
            .ok()
            .stdout()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Webhook<'_> {
    fn drop(&mut self) {
        self.0.sh(WEBHOOK_STOP);
    }
}

/// `git` in a box's project, as the box user.
fn git(n: &Node, name: &str, args: &str) -> String {
    n.sh(&format!(
        "ag-box exec {name} -- git -C /root/{name} -c user.email=t@t -c user.name=t {args}"
    ))
    .ok()
    .stdout()
}

/// The rollout of Codex thread `thread` in a box's agent home on a node: its `session_meta` cwd.
fn rollout_cwd(n: &Node, name: &str, thread: &str) -> String {
    let line = n
        .sh(&format!(
            "head -n1 $(find {HOMES}/{name}/.codex/sessions -name '*-{thread}.jsonl')"
        ))
        .ok()
        .stdout();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    v["payload"]["cwd"].as_str().unwrap().to_string()
}

#[test]
fn forks_resume_the_parents_conversations_each_on_its_own_branch_uid_and_node() {
    let Some(c) = Cluster::get() else { return };
    let Some(_configured) = configure_both(&c) else {
        return;
    };
    let kids = ["kid-1", "kid-2", "solo"];
    for k in kids {
        c.forget(k);
    }
    let parent = FORK_PARENT;
    c.parked_box(parent);
    c.a.sh(&format!(
        "ag-box set {parent} agent=none network=allow allow={}",
        standin_entries()
    ))
    .ok();
    c.a.sh(&format!("ag-box up {parent} --node nodeA")).ok();
    git(&c.a, parent, "init -q -b main");
    git(&c.a, parent, "add -A");
    git(&c.a, parent, "commit -q -m first");
    let (session, thread) = {
        let _server = StandIn::start(&c.a);
        let out = claude(&c.a, parent, "'What is the parent question?'");
        assert!(
            out.contains("STANDIN-REPLY turns=1 last=What is the parent question?"),
            "{out}"
        );
        let session: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let out = codex(&c.a, parent, "'Parent for codex?'");
        let thread = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| v["thread_id"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no thread in {out}"));
        (session["session_id"].as_str().unwrap().to_string(), thread)
    };
    fork_the_running_parent(&c, parent);
    each_fork_is_its_own(&c, parent, &thread);
    conversations_go_on_in_each_fork(&c, &session, &thread);
    forks_outlive_each_other_and_their_parent(&c, parent);
    for k in kids {
        c.forget(k);
    }
}

/// Two forks on A, with branches of their own, and one from B (the parent is snapshotted on
/// A first, over ssh).
fn fork_the_running_parent(c: &Cluster, parent: &str) {
    // The parent runs: each fork snapshots it first (on A; from B, over ssh). Two forks on A.
    let forked =
        c.a.sh(&format!(
            "ag-box fork {parent} kid --count 2 --node nodeA --branch try --json"
        ))
        .ok()
        .stdout();
    let forked: serde_json::Value = serde_json::from_str(&forked).unwrap();
    common::assert_shape("fork", &forked);
    assert_eq!(forked["box"], parent, "{forked:#}");
    let rows: Vec<(String, String, String, String)> = forked["forks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("-").to_string();
            (s("box"), s("path"), s("node"), s("branch"))
        })
        .collect();
    let row = |b: &str, node: &str, branch: &str| {
        (
            b.to_string(),
            format!("/root/{b}"),
            node.to_string(),
            branch.to_string(),
        )
    };
    assert_eq!(
        rows,
        [
            row("kid-1", "nodeA", "try-1"),
            row("kid-2", "nodeA", "try-2")
        ]
    );
    // One more from B, where the parent does not run: it is snapshotted on A first.
    let before = common::box_row(&c.a, parent).unwrap()["last_snapshot"]["id"].clone();
    c.a.sh(&format!(
        "ag-box exec {parent} -- sh -c 'echo later > /root/{parent}/later.txt'"
    ))
    .ok();
    let solo =
        c.b.sh(&format!("ag-box fork {parent} solo --node nodeB"))
            .ok()
            .stdout();
    assert!(
        solo.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["solo", "nodeB", "solo", "/root/solo"]),
        "{solo}"
    );
    let after = common::box_row(&c.a, parent).unwrap()["last_snapshot"]["id"].clone();
    assert_ne!(
        before, after,
        "the running parent was snapshotted for the fork"
    );
    assert_eq!(
        c.b.sh("cat /root/solo/later.txt").ok().stdout().trim(),
        "later"
    );
}

/// Each fork: its own uid, its record naming the parent, its branch, the parent's commit, its
/// files its own, Codex's rollout naming its project.
fn each_fork_is_its_own(c: &Cluster, parent: &str, thread: &str) {
    // Each fork: its own uid, its record naming the parent, its branch, the parent's commit.
    let mut uids = vec![common::uid_of(&c.a, parent)];
    for (k, n, branch) in [
        ("kid-1", &c.a, "try-1"),
        ("kid-2", &c.a, "try-2"),
        ("solo", &c.b, "solo"),
    ] {
        let row = common::box_row(n, k).unwrap();
        assert_eq!(row["forked_from"]["box"], parent, "{row:#}");
        assert_eq!(row["lease"]["node"], n.name, "{row:#}");
        uids.push(common::uid_of(n, k));
        assert_eq!(git(n, k, "branch --show-current").trim(), branch);
        assert_eq!(git(n, k, "log --format=%s").trim(), "first");
        let owners = n
            .sh(&format!(
                "find /root/{k} {HOMES}/{k} -printf '%U\\n' | sort -u"
            ))
            .ok()
            .stdout();
        assert_eq!(owners.trim(), uids.last().unwrap().to_string(), "{k}");
        // Codex's rollout names the fork's project: `codex resume` there finds it.
        assert_eq!(rollout_cwd(n, k, thread), format!("/root/{k}"));
    }
    let mut distinct = uids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{uids:?}");
    let ls = c.a.sh("ag-box ls").ok().stdout();
    assert!(
        ls.lines()
            .any(|l| l.starts_with("kid-1 ") && l.contains(&format!(" {parent} "))),
        "{ls}"
    );
}

/// Each fork goes on with the parent's conversations, its own from there.
fn conversations_go_on_in_each_fork(c: &Cluster, session: &str, thread: &str) {
    // Each fork goes on with the parent's conversations, its own from there.
    for (k, n) in [("kid-1", &c.a), ("kid-2", &c.a), ("solo", &c.b)] {
        let _server = StandIn::start(n);
        let out = claude(n, k, &format!("'Next for {k}?' --continue"));
        assert!(
            out.contains(&format!("STANDIN-REPLY turns=2 last=Next for {k}?")),
            "{k}: {out}"
        );
        let out = codex(n, k, &format!("resume {thread} 'Codex next for {k}?'"));
        assert!(
            out.contains(&format!("STANDIN-REPLY turns=2 last=Codex next for {k}?")),
            "{k}: {out}"
        );
    }
    assert!(
        c.a.sh(&format!(
            "test -s {HOMES}/kid-1/.claude/projects/-root-kid-1/{session}.jsonl"
        ))
        .status
        .success()
    );
}

/// A commit in one is in no other; parking and dropping one leaves the others; dropping the
/// parent leaves its forks.
fn forks_outlive_each_other_and_their_parent(c: &Cluster, parent: &str) {
    // A commit in one is in no other; parking and dropping one leaves the others; dropping
    // the parent leaves its forks.
    git(&c.a, "kid-1", "commit -q --allow-empty -m only-in-kid-1");
    assert_eq!(
        git(&c.a, "kid-1", "log -1 --format=%s").trim(),
        "only-in-kid-1"
    );
    for (k, n) in [(parent, &c.a), ("kid-2", &c.a), ("solo", &c.b)] {
        assert_eq!(git(n, k, "log -1 --format=%s").trim(), "first", "{k}");
    }
    c.a.sh("ag-box park kid-2 && ag-box drop kid-2 --yes").ok();
    c.a.sh(&format!(
        "ag-box park {parent} && ag-box drop {parent} --yes"
    ))
    .ok();
    assert!(common::box_row(&c.a, "kid-2").is_none());
    c.a.sh("ag-box park kid-1").ok();
    common::whole_snapshot_done(&c.a, "kid-1");
    c.b.sh("ag-box up kid-1 --node nodeB").ok();
    assert_eq!(
        git(&c.b, "kid-1", "log --format=%s").trim(),
        "only-in-kid-1\nfirst"
    );
    assert_eq!(git(&c.b, "solo", "log -1 --format=%s").trim(), "first");
}
