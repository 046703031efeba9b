//! `ag-box __agent <agent> [--fresh]` (hidden): what a box's `main` tmux window runs first,
//! inside the box as the box user. It finds the project's most recent conversation in the
//! box's own agent home (no privilege: nothing root resolves), then becomes the agent resuming
//! it (a new conversation with `--fresh`, or when there is none: an agent that finds its own
//! latest conversation and fails at once for want of one is started afresh). The window's
//! shell goes on when the agent exits.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::error::{Code, UserError};
use crate::plan::agents::{self, Resume};
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
    if fresh || !matches!(agent.resume, Resume::Latest(_)) {
        return become_agent(&argv);
    }
    if resumed_nothing(&argv)? {
        say!(
            "ag-box: {} found no conversation to resume here; starting a new one",
            agent.name
        );
        return become_agent(&agent.window_command(true, None));
    }
    Ok(())
}

/// A resume that fails sooner than this found no conversation (Gemini CLI's `--resume latest`
/// stops with an error when the project has none); a later failure is the agent's own end.
const NOTHING_TO_RESUME_WITHIN: Duration = Duration::from_secs(10);

/// Runs an agent's own "latest" resume to its end: true when it failed at once (and a new
/// conversation should start), false when it ran. An agent ended by a signal (Ctrl-C, its
/// window closed) did not fail for want of a conversation. Signals a
/// terminal sends are noted, not obeyed, meanwhile, so that this process outlives a Ctrl-C the
/// agent survives.
fn resumed_nothing(argv: &[String]) -> Result<bool> {
    let Some((program, rest)) = argv.split_first() else {
        return Ok(false);
    };
    crate::sys::interrupt::arm();
    let started = Instant::now();
    let status = Command::new(program)
        .args(rest)
        .status()
        .map_err(|e| cannot_start(program, &e))?;
    let signalled = crate::sys::interrupt::check("a new conversation").is_err();
    Ok(status.code().is_some_and(|c| c != 0)
        && !signalled
        && started.elapsed() < NOTHING_TO_RESUME_WITHIN)
}

/// Becomes the agent: the window's process from here on.
fn become_agent(argv: &[String]) -> Result<()> {
    let Some((program, rest)) = argv.split_first() else {
        return Ok(());
    };
    let failed = Command::new(program).args(rest).exec();
    Err(cannot_start(program, &failed))
}

fn cannot_start(program: &str, failed: &std::io::Error) -> anyhow::Error {
    UserError::new(
        Code::ToolMissing,
        format!("cannot start {program} in this box: {failed}"),
        format!(
            "install {program} on the node (the box sees its /usr and ~/.local/bin), or run 'ag-box set {} agent=none' there",
            std::env::var("BOX_NAME").unwrap_or_else(|_| "<box>".into())
        ),
    )
    .into()
}
