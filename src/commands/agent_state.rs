//! `ag-box __agent-state <agent> [payload]` (hidden): inside a box, as the box user, run by the
//! agent's own signals (Claude Code's and Codex's hooks, their event on stdin; Codex's notify
//! program, its event as the last argument) or, for an agent without them, by its window's tmux monitor
//! (the state as the last argument). It writes the box's state file (`plan::attention`) and nothing
//! else: it prints nothing (a hook's output would reach the agent) and always exits 0 (a failed
//! hook must not stop the agent).

use std::io::Read;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::atomic;
use crate::lifecycle::RUN_ROOT;
use crate::plan::agents::{self, Signals};
use crate::plan::attention::{self, AgentState, STATE_FILE};
use crate::plan::names::BoxName;

/// A turn done reported this soon after the state turned idle is the same turn's.
const SAME_TURN_SECS: u64 = 5;

/// At most this much of a hook's input is read.
const INPUT_MAX: u64 = 1 << 20;

pub(crate) fn run(agent: &str, payload: Option<&str>) {
    if let Err(e) = record(agent, payload) {
        tracing::debug!("the agent's state was not recorded: {e:#}");
    }
}

/// A hook's input: its JSON on stdin.
fn hook_input() -> Result<serde_json::Value> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(INPUT_MAX)
        .read_to_end(&mut input)
        .context("reading the hook's input")?;
    Ok(serde_json::from_slice(&input)?)
}

fn record(agent: &str, payload: Option<&str>) -> Result<()> {
    let Some(known) = agents::named(agent) else {
        return Ok(());
    };
    let said = match (known.signals, payload) {
        (Signals::ClaudeHooks, _) => attention::from_claude_hook(&hook_input()?),
        // Codex's notify program is told its event as an argument; its hooks, on stdin.
        (Signals::CodexNotify, Some(event)) => {
            attention::from_codex_notify(&serde_json::from_str(event)?)
        }
        (Signals::CodexNotify, None) => attention::from_codex_hook(&hook_input()?),
        (Signals::Terminal, said) => said.and_then(attention::from_terminal),
    };
    let Some((state, detail)) = said else {
        return Ok(());
    };
    let name = BoxName::new(std::env::var("BOX_NAME").context("BOX_NAME is not set")?)?;
    let file: PathBuf = [RUN_ROOT, &name, "sock", STATE_FILE].iter().collect();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // In the same state since then: a tool call mid-turn changes nothing anyone is shown. But
    // a turn Codex's notify program reports done, other than the one its Stop hook just did, is
    // a turn of its own (its hooks may not run: then it reports nothing else).
    let notified = known.signals == Signals::CodexNotify && payload.is_some();
    let before = std::fs::read(&file)
        .ok()
        .and_then(|b| attention::parse(&b))
        .filter(|b| b.agent == agent && b.state == state)
        .filter(|b| !notified || now.saturating_sub(b.since) <= SAME_TURN_SECS);
    let since = before.map_or(now, |b| b.since);
    let state = AgentState {
        agent: agent.to_string(),
        state,
        since,
        detail,
    };
    atomic::write(&file, &serde_json::to_vec(&state)?, 0o644)
}
