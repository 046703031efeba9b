//! `wait <box>`: block until the box's agent needs the operator: it waits (a permission prompt
//! or a question) or is idle (its turn done). On the node running the box it reads the box's
//! state file; elsewhere the state its node published in the record.

use std::time::Duration;

use anyhow::Result;

use super::Ctx;
use crate::error::UserError;
use crate::plan::agents;
use crate::plan::attention::{AgentState, State};
use crate::plan::names::BoxName;
use crate::plan::text;

/// How often the state file (here) or the record (elsewhere) is read again.
const HERE_POLL: Duration = Duration::from_millis(250);
const STORE_POLL: Duration = Duration::from_secs(2);

pub(crate) fn run(name: &BoxName) -> Result<()> {
    let ctx = Ctx::load()?;
    let agent = ctx.tracked(name)?.meta.agent.clone();
    match agent.as_deref().and_then(agents::named) {
        Some(_) => {}
        _ => {
            return Err(UserError::failed(
                format!(
                    "box '{name}' has no agent that reports its state (agent={})",
                    agent.as_deref().unwrap_or(agents::NONE)
                ),
                format!(
                    "name the box's agent, one of {}: 'ag-box set {name} agent=claude'",
                    agents::names().join(", ")
                ),
            )
            .into());
        }
    }
    let mut told = false;
    loop {
        let meta = ctx.tracked(name)?.meta;
        let Some(lease) = &meta.lease else {
            return Err(UserError::failed(
                format!("box '{name}' is not up"),
                format!("'ag-box up {name}' starts it"),
            )
            .into());
        };
        let spec = ctx.spec(&meta);
        let held_here = lease.node == ctx.config.node;
        let here = held_here && ctx.runtime.is_active(&spec);
        if held_here && !here {
            return Err(UserError::failed(
                format!("box '{name}' is not running on {}", lease.node),
                format!("'ag-box up {name}' starts it again"),
            )
            .into());
        }
        let state = super::turn::state_seen(&ctx, &meta, here);
        if let Some(s) = state.as_ref().filter(|s| s.state != State::Working) {
            out!("{}", line(name, &lease.node, s));
            return Ok(());
        }
        if !told {
            say!(
                "waiting for box '{name}' on {} to need you ({})",
                lease.node,
                state.map_or("no state heard yet".to_string(), |s| format!(
                    "{} is {}",
                    s.agent,
                    s.state.label()
                ))
            );
            told = true;
        }
        std::thread::sleep(if here { HERE_POLL } else { STORE_POLL });
    }
}

/// `<box> <node> <agent> <state>[: <first line of the question>]`, escaped.
fn line(name: &str, node: &str, s: &AgentState) -> String {
    let detail = s
        .detail
        .as_deref()
        .map(|d| format!(": {}", text::escaped(d)))
        .unwrap_or_default();
    format!(
        "{name} {} {} {}{detail}",
        text::escaped(node),
        s.agent,
        s.state.label()
    )
}
