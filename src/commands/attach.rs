//! `attach <name>`: the box's tmux session, created if needed.

use std::process::Command;

use anyhow::{Context, Result};

use super::{Ctx, not_up_here, require_tools};
use crate::error::ChildExit;
use crate::plan::tmux;
use crate::sys::cmd;

pub fn run(name: &str) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["tmux"])?;
    let spec = ctx.spec(&meta);
    if !ctx.runtime.is_active(&spec) {
        return Err(not_up_here(name).into());
    }
    if std::env::var_os("TMUX").is_some() {
        tracing::warn!(
            "attaching from inside tmux: the box's green status bar marks the inner session"
        );
    }
    let status = Command::new(cmd::require("tmux")?)
        .args(tmux::attach_args(&spec.socket()))
        .env_remove("TMUX")
        .status()
        .context("running tmux attach")?;
    match cmd::exit_code(status) {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}
