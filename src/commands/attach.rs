//! `attach <name>`: the box's tmux session, created if needed (on the node running the box). The tmux client runs inside the
//! box as the client user, so nothing the box's server asks of it reaches the host.

use anyhow::{Context, Result};

use super::{Ctx, follow, require_tools};
use crate::error::{ChildExit, UserError};
use crate::plan::names::BoxName;
use crate::plan::term_filter::OutputFilter;
use crate::sys::enter::Sandbox;
use crate::sys::{cmd, pty};

pub(crate) fn run(name: &BoxName) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["nsenter"])?;
    let spec = ctx.spec(&meta);
    if !ctx.runtime.is_active(&spec) {
        return follow::to_holder(&ctx, &meta, "attach", &["attach", name]);
    }
    if std::env::var_os("TMUX").is_some() {
        tracing::warn!(
            "attaching from inside tmux: the box's green status bar marks the inner session"
        );
    }
    // tmux refuses a client with exit 0, on the terminal: ask first, where the answer is seen.
    ctx.runtime.kind().admits(&spec).map_err(|e| {
        UserError::failed(
            format!("box '{name}': cannot attach: {e:#}"),
            format!("restart it ('ag-box park {name}', then 'ag-box up {name}'), or run 'ag-box exec {name} -- bash' meanwhile"),
        )
    })?;
    let sandbox = Sandbox::open(&spec, ctx.runtime.kind())?;
    // The client counts as the box's (and pauses with it): the box's tmux server can make it
    // run a command of the box's choosing (`detach-client -E`).
    crate::sys::runtime::join_cgroups_of(sandbox.pid);
    let mut c = sandbox.command(&spec.attach_argv())?;
    c.env_clear().envs(spec.env()).envs(super::caller_term());
    // Through a terminal of ag-box's own, which drops what would act on the operator's
    // terminal beyond its screen (the clipboard, passthrough).
    let status = if pty::terminal_of_caller() == pty::Terminal::Foreground {
        pty::run_relayed(c, Some(OutputFilter::default()))?
    } else {
        c.status().context("running tmux attach")?
    };
    match cmd::exit_code(status) {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}
