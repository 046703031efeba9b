//! `ag-box __agent <agent> [--fresh]` (hidden): what a box's `main` tmux window runs first,
//! inside the box as the box user. It finds the project's most recent conversation in the
//! box's own agent home (no privilege: nothing root resolves), then becomes the agent resuming
//! it (a new conversation with `--fresh`, or when there is none). The window's shell goes on
//! when the agent exits.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use anyhow::Result;

use crate::error::{Code, UserError};
use crate::plan::agents::{self, Agent};

pub(crate) fn run(agent: &str, fresh: bool) -> Result<()> {
    let agent = agents::named(agent).ok_or_else(|| {
        UserError::usage(
            format!("this ag-box knows no agent '{agent}'"),
            format!("the agents it knows: {}", agents::choices().join(", ")),
        )
    })?;
    let session = if fresh { None } else { newest_here(agent) };
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
            "install {program} on the node (the box sees /usr and ~/.local/bin), or 'ag-box set $BOX_NAME agent=none'"
        ),
    )
    .into())
}

/// The session of the project's newest transcript, where ag-box names the one to resume; None
/// when there is none (or it cannot tell: the agent then starts a new conversation).
fn newest_here(agent: &Agent) -> Option<String> {
    let home = std::env::var_os("HOME")?;
    let project = std::env::current_dir().ok()?;
    let dir = agent.sessions_dir(Path::new(&home), &project)?;
    let files: Vec<(OsString, SystemTime)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            // The entry's own type and times: a link is not a transcript.
            let meta = entry.metadata().ok()?;
            meta.is_file()
                .then(|| Some((entry.file_name(), meta.modified().ok()?)))
                .flatten()
        })
        .collect();
    agents::newest_session(&files)
}
