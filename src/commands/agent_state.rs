//! `ag-box __agent-state <agent> [payload]` (hidden): inside a box, as the box user, run by the
//! agent's own signals (Claude Code's hooks, its event on stdin; Codex's notify program, its
//! event as the last argument) or, for an agent without them, by its window's tmux monitor
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

/// At most this much of a hook's input is read.
const INPUT_MAX: u64 = 1 << 20;

pub(crate) fn run(agent: &str, payload: Option<&str>) {
    if let Err(e) = record(agent, payload) {
        tracing::debug!("the agent's state was not recorded: {e:#}");
    }
}

fn record(agent: &str, payload: Option<&str>) -> Result<()> {
    let Some(known) = agents::named(agent) else {
        return Ok(());
    };
    let said = match known.signals {
        Signals::ClaudeHooks => {
            let mut input = Vec::new();
            std::io::stdin()
                .take(INPUT_MAX)
                .read_to_end(&mut input)
                .context("reading the hook's input")?;
            attention::from_claude_hook(&serde_json::from_slice(&input)?)
        }
        Signals::CodexNotify => payload
            .map(serde_json::from_str)
            .transpose()?
            .and_then(|v| attention::from_codex_notify(&v)),
        Signals::Terminal => payload.and_then(attention::from_terminal),
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
    // each report of Codex's (it reports nothing but turns done) is a turn of its own.
    let before = std::fs::read(&file)
        .ok()
        .and_then(|b| attention::parse(&b))
        .filter(|b| b.agent == agent && b.state == state && agent != "codex");
    let since = before.map_or(now, |b| b.since);
    let state = AgentState {
        agent: agent.to_string(),
        state,
        since,
        detail,
    };
    atomic::write(&file, &serde_json::to_vec(&state)?, 0o644)
}
