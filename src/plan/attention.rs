//! What a box's agent is doing, as its own signals say (docs/design.md "Attention"): `working`
//! (mid-turn), `waiting` (a permission prompt or a question for the operator) or `idle` (its
//! turn done). Claude Code's hooks (in the managed settings ag-box binds into the box) and
//! Codex's notify program run `ag-box __agent-state` inside the box, which writes the box's
//! state file; root reads it back as untrusted data. Pure: the signals and the file are values.

use serde::{Deserialize, Serialize};

use super::box_exe::BOX_EXE;

/// A dir of managed settings an agent reads from the node's `/etc`: each start writes the box's
/// own copy in its run dir (the node's files, the hooks added to its hooks file) and binds it
/// read-only over the node's. The agent runs managed hooks without asking anyone to trust them.
#[derive(Debug)]
pub(crate) struct Managed {
    /// The node's dir, which the box's copy is bound over.
    pub node_dir: &'static str,
    /// The copy's name in the box's run dir.
    pub run_name: &'static str,
    /// The file holding the hooks: JSON whose `hooks` maps each event to its groups.
    pub file: &'static str,
    /// The agent whose signals the hooks are (`__agent-state <agent>`).
    pub agent: &'static str,
    pub events: &'static [&'static str],
}

/// Claude Code's managed settings, and Codex's system hooks (Codex 0.124+).
pub(crate) const MANAGED: &[Managed] = &[
    Managed {
        node_dir: "/etc/claude-code",
        run_name: "claude-code",
        file: "managed-settings.json",
        agent: "claude",
        events: CLAUDE_EVENTS,
    },
    Managed {
        node_dir: "/etc/codex",
        run_name: "codex",
        file: "hooks.json",
        agent: "codex",
        events: CODEX_EVENTS,
    },
];
/// The state file, in the box's socket dir (the one dir of its run dir the box writes).
pub(crate) const STATE_FILE: &str = "agent-state.json";
/// At most this much of the file is read, and of a prompt's text kept.
pub(crate) const STATE_MAX: u64 = 4096;
const DETAIL_MAX: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum State {
    Working,
    Waiting,
    Idle,
}

impl State {
    pub(crate) fn label(self) -> &'static str {
        match self {
            State::Working => "working",
            State::Waiting => "waiting",
            State::Idle => "idle",
        }
    }
}

/// The box's state file: which agent said what, since when (Unix seconds), and the first line
/// of the question or prompt it waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AgentState {
    pub agent: String,
    pub state: State,
    pub since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A box's agent state as published in its record, by the node that holds its lease (at
/// that epoch): for `ls` and `wait` on any node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Heard {
    pub node: String,
    pub epoch: u64,
    #[serde(flatten)]
    pub state: AgentState,
}

/// The latest `since` believed: the last second a timestamp can show (9999-12-31).
const SINCE_MAX: u64 = 253_402_300_799;

/// A state file as the box left it: None unless it is one, its agent a plausible name and its
/// time one a clock can show; its detail cut to one line of [`DETAIL_MAX`] characters.
pub(crate) fn parse(bytes: &[u8]) -> Option<AgentState> {
    let s: AgentState = serde_json::from_slice(bytes).ok()?;
    believable(&s).then(|| AgentState {
        detail: s.detail.as_deref().and_then(first_line),
        ..s
    })
}

/// A state worth showing, wherever it was read: a plausible agent, a time a clock can show.
pub(crate) fn believable(s: &AgentState) -> bool {
    super::agents::plausible(&s.agent) && s.since <= SINCE_MAX
}

/// The first line of a message, at most [`DETAIL_MAX`] characters, none when empty.
fn first_line(text: &str) -> Option<String> {
    let line: String = text
        .lines()
        .next()?
        .trim()
        .chars()
        .take(DETAIL_MAX)
        .collect();
    (!line.is_empty()).then_some(line)
}

/// The state a Claude Code hook's input (its JSON on stdin) says, with its message.
/// Only a question is kept with the state (it is what the operator is asked); what the user
/// typed or the agent answered never leaves the box this way.
pub(crate) fn from_claude_hook(input: &serde_json::Value) -> Option<(State, Option<String>)> {
    let state = match input["hook_event_name"].as_str()? {
        "UserPromptSubmit" | "PreToolUse" | "PostToolUse" => State::Working,
        // A notification that the prompt has sat idle is no question; a login that went
        // through asks nothing.
        "Notification" if input["notification_type"] == "idle_prompt" => State::Idle,
        "Notification" if input["notification_type"] == "auth_success" => return None,
        "Notification" => State::Waiting,
        // A session starts anew after a compaction mid-turn too: only a start at the prompt
        // says idle.
        "SessionStart" if input["source"] == "compact" => return None,
        "Stop" | "SessionStart" | "SessionEnd" => State::Idle,
        _ => return None,
    };
    let detail = match state {
        State::Waiting => input["message"].as_str().and_then(first_line),
        State::Working | State::Idle => None,
    };
    Some((state, detail))
}

/// The state a Codex hook's input (its JSON on stdin) says. Codex's hooks name events as
/// Claude Code's do; its permission request carries no message, so the question is the tool's.
pub(crate) fn from_codex_hook(input: &serde_json::Value) -> Option<(State, Option<String>)> {
    let state = match input["hook_event_name"].as_str()? {
        "UserPromptSubmit" | "PreToolUse" | "PostToolUse" => State::Working,
        "PermissionRequest" => State::Waiting,
        "SessionStart" if input["source"] == "compact" => return None,
        "SessionStart" | "Stop" => State::Idle,
        _ => return None,
    };
    let detail = match state {
        State::Waiting => input["tool_name"]
            .as_str()
            .and_then(|tool| first_line(&format!("Codex asks to use {tool}"))),
        State::Working | State::Idle => None,
    };
    Some((state, detail))
}

/// The state Codex's notify program is told (its JSON as the last argument).
pub(crate) fn from_codex_notify(input: &serde_json::Value) -> Option<(State, Option<String>)> {
    match input["type"].as_str()? {
        "agent-turn-complete" => Some((State::Idle, None)),
        _ => None,
    }
}

/// The state an agent's terminal told (`plan::tmux`'s monitor names it).
pub(crate) fn from_terminal(said: &str) -> Option<(State, Option<String>)> {
    let state = match said {
        "working" => State::Working,
        "waiting" => State::Waiting,
        "idle" => State::Idle,
        _ => return None,
    };
    Some((state, None))
}

/// The Claude Code events ag-box hears, each running `__agent-state claude`.
const CLAUDE_EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Notification",
    "Stop",
    "SessionEnd",
];

/// The Codex events ag-box hears, each running `__agent-state codex`.
const CODEX_EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "Stop",
];

/// The managed file a box's agent reads: the node's own (if any) with ag-box's hooks added to
/// theirs, so no setting of the operator's is lost and none is written to their files.
pub(crate) fn with_hooks(managed: &Managed, node: Option<serde_json::Value>) -> serde_json::Value {
    let mut settings = match node {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let hooks = settings
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}));
    if !hooks.is_object() {
        *hooks = serde_json::json!({});
    }
    for event in managed.events {
        let ours = serde_json::json!({"hooks": [{
            "type": "command",
            "command": format!("{BOX_EXE} __agent-state {}", managed.agent),
        }]});
        match hooks.get_mut(*event) {
            Some(serde_json::Value::Array(theirs)) => theirs.push(ours),
            _ => {
                hooks[*event] = serde_json::json!([ours]);
            }
        }
    }
    serde_json::Value::Object(settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn claude_hooks_say_working_waiting_and_idle() {
        let said: Vec<Option<(State, Option<String>)>> = [
            json!({"hook_event_name": "UserPromptSubmit", "prompt": "Fix the build\nplease"}),
            json!({"hook_event_name": "PreToolUse", "tool_name": "Bash"}),
            json!({"hook_event_name": "Notification", "notification_type": "permission_prompt",
                   "message": "Claude needs your permission to use Bash"}),
            json!({"hook_event_name": "Notification", "message": ""}),
            json!({"hook_event_name": "Notification", "notification_type": "idle_prompt",
                   "message": "Claude is waiting for your input"}),
            json!({"hook_event_name": "PostToolUse"}),
            json!({"hook_event_name": "Stop", "last_assistant_message": "done"}),
            json!({"hook_event_name": "SubagentStop"}),
            json!({"prompt": "no event"}),
            json!({"hook_event_name": "SessionStart", "source": "compact"}),
            json!({"hook_event_name": "SessionStart", "source": "resume"}),
            json!({"hook_event_name": "Notification", "notification_type": "auth_success"}),
        ]
        .iter()
        .map(from_claude_hook)
        .collect();
        assert_eq!(
            said,
            [
                Some((State::Working, None)),
                Some((State::Working, None)),
                Some((
                    State::Waiting,
                    Some("Claude needs your permission to use Bash".into())
                )),
                Some((State::Waiting, None)),
                Some((State::Idle, None)),
                Some((State::Working, None)),
                Some((State::Idle, None)),
                None,
                None,
                None,
                Some((State::Idle, None)),
                None,
            ]
        );
        let long = "x".repeat(500);
        assert_eq!(
            from_claude_hook(&json!({"hook_event_name": "Notification", "message": long})),
            Some((State::Waiting, Some("x".repeat(200))))
        );
    }

    #[test]
    fn codex_hooks_say_working_waiting_and_idle_and_carry_no_text_typed() {
        assert_eq!(
            [
                json!({"hook_event_name": "SessionStart", "source": "startup"}),
                json!({"hook_event_name": "UserPromptSubmit", "prompt": "Fix it"}),
                json!({"hook_event_name": "PreToolUse", "tool_name": "Bash"}),
                json!({"hook_event_name": "PermissionRequest", "tool_name": "Bash",
                       "tool_input": {"command": "rm -rf /tmp/x"}}),
                json!({"hook_event_name": "PermissionRequest"}),
                json!({"hook_event_name": "PostToolUse"}),
                json!({"hook_event_name": "Stop", "last_assistant_message": "Done"}),
                json!({"hook_event_name": "SessionStart", "source": "compact"}),
                json!({"hook_event_name": "PreCompact"}),
            ]
            .iter()
            .map(from_codex_hook)
            .collect::<Vec<_>>(),
            [
                Some((State::Idle, None)),
                Some((State::Working, None)),
                Some((State::Working, None)),
                Some((State::Waiting, Some("Codex asks to use Bash".into()))),
                Some((State::Waiting, None)),
                Some((State::Working, None)),
                Some((State::Idle, None)),
                None,
                None,
            ]
        );
        let codex = with_hooks(&MANAGED[1], None);
        let hook =
            json!([{"hooks": [{"type": "command", "command": "/run/ag-box __agent-state codex"}]}]);
        assert_eq!(
            codex,
            json!({"hooks": {
                "SessionStart": hook, "UserPromptSubmit": hook, "PreToolUse": hook,
                "PermissionRequest": hook, "PostToolUse": hook, "Stop": hook,
            }})
        );
    }

    #[test]
    fn codex_says_idle_when_its_turn_is_done() {
        assert_eq!(
            [
                json!({"type": "agent-turn-complete", "last-assistant-message": "Done.\nMore"}),
                json!({"type": "something-else"}),
            ]
            .iter()
            .map(from_codex_notify)
            .collect::<Vec<_>>(),
            [Some((State::Idle, None)), None]
        );
    }

    #[test]
    fn a_terminal_says_the_state_it_names() {
        assert_eq!(
            ["working", "waiting", "idle", "quiet", ""].map(from_terminal),
            [
                Some((State::Working, None)),
                Some((State::Waiting, None)),
                Some((State::Idle, None)),
                None,
                None
            ]
        );
    }

    #[test]
    fn the_state_file_is_read_as_untrusted_data() {
        let ok = br#"{"agent":"claude","state":"waiting","since":1796294736,"detail":"Allow?"}"#;
        assert_eq!(
            parse(ok),
            Some(AgentState {
                agent: "claude".into(),
                state: State::Waiting,
                since: 1_796_294_736,
                detail: Some("Allow?".into()),
            })
        );
        // A detail cut to its first line, at most 200 characters.
        let long = format!(
            r#"{{"agent":"claude","state":"waiting","since":1,"detail":"{}\nmore"}}"#,
            "q".repeat(300)
        );
        assert_eq!(
            parse(long.as_bytes()).and_then(|s| s.detail),
            Some("q".repeat(200))
        );
        for bad in [
            &br#"{"agent":"claude","state":"asleep","since":1}"#[..],
            br#"{"agent":"claude","state":"idle","since":253402300800}"#,
            br#"{"agent":"claude","state":"idle","since":18446744073709551615}"#,
            br#"{"agent":"x\u001b[2J","state":"idle","since":1}"#,
            br#"{"agent":"claude","state":"idle","since":-1}"#,
            b"not json",
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn managed_settings_keep_the_nodes_own_and_add_the_hooks() {
        let hook =
            json!({"hooks": [{"type": "command", "command": "/run/ag-box __agent-state claude"}]});
        let theirs = json!({"hooks": [{"type": "command", "command": "/usr/local/bin/audit"}]});
        let node = json!({
            "permissions": {"deny": ["Bash(curl:*)"]},
            "hooks": {"Stop": [theirs.clone()]}
        });
        let merged = with_hooks(&MANAGED[0], Some(node));
        let mut expected_hooks = serde_json::Map::new();
        for event in CLAUDE_EVENTS {
            expected_hooks.insert((*event).to_string(), json!([hook.clone()]));
        }
        expected_hooks.insert("Stop".into(), json!([theirs, hook.clone()]));
        assert_eq!(
            merged,
            json!({"permissions": {"deny": ["Bash(curl:*)"]}, "hooks": expected_hooks})
        );
        assert_eq!(
            with_hooks(&MANAGED[0], Some(json!("not an object")))["hooks"]["Stop"],
            json!([hook])
        );
    }
}
