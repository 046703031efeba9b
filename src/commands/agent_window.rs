//! `ag-box __agent <agent> [--fresh]` (hidden): what a box's `main` tmux window runs first,
//! inside the box as the box user. It finds the project's most recent conversation in the
//! box's own agent home (no privilege: nothing root resolves), then becomes the agent resuming
//! it (a new conversation with `--fresh`, or when there is none). The window's shell goes on
//! when the agent exits.

use std::os::unix::process::CommandExt;
use std::process::Command;

use anyhow::Result;

use crate::error::{Code, UserError};
use crate::plan::agents;
use crate::sys::agent_sessions;

pub(crate) fn run(agent: &str, fresh: bool) -> Result<()> {
    let agent = agents::named(agent).ok_or_else(|| {
        UserError::usage(
            format!("this ag-box knows no agent '{agent}'"),
            format!("the agents it knows: {}", agents::choices().join(", ")),
        )
    })?;
    let session = if fresh {
        None
    } else {
        agent_sessions::newest_here(agent)
    };
    if let Some(id) = &session {
        say!("ag-box: resuming {} conversation {id}", agent.name);
    }
    let argv = agent.window_command(fresh, session.as_deref());
    let Some((program, rest)) = argv.split_first() else {
        return Ok(());
    };
    let failed = Command::new(program).args(rest).exec();
    Err(UserError::new(
        Code::ToolMissing,
        format!("cannot start {program} in this box: {failed}"),
        format!(
            "install {program} on the node (the box sees its /usr and ~/.local/bin), or run 'ag-box set {} agent=none' there",
            std::env::var("BOX_NAME").unwrap_or_else(|_| "<box>".into())
        ),
    )
    .into())
}
