//! `exec <name> -- <cmd...>`: one command inside the running box (on the node running it), as
//! its user, exit code passed through.

use anyhow::{Context, Result};

use super::{Ctx, follow, require_tools};
use crate::error::ChildExit;
use crate::plan::names::BoxName;
use crate::sys::enter::Sandbox;
use crate::sys::{cmd, pty, runtime};

pub(crate) fn run(name: &BoxName, command: &[String]) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["nsenter"])?;
    let mut spec = ctx.spec_in_force(&meta);
    if !ctx.runtime.is_active(&spec) {
        let args: Vec<&str> = ["exec", name, "--"]
            .into_iter()
            .chain(command.iter().map(String::as_str))
            .collect();
        return follow::to_holder(&ctx, &meta, "exec", &args);
    }
    let sandbox = Sandbox::open(&spec, ctx.runtime.kind())?;
    runtime::join_cgroups_of(sandbox.pid);
    // The bound the box started with, not what this node's config says now.
    if let Some(n) = runtime::task_limit(&spec) {
        spec.tasks_max = n;
    }
    let cwd = std::env::current_dir().ok();
    let mut c = sandbox.command(&spec.exec_argv(&spec.exec_dir(cwd.as_deref()), command))?;
    c.env_clear().envs(spec.env()).envs(super::caller_term());
    // From a terminal, through one of ag-box's own, hung up when the command ends: nothing
    // it leaves running in the box reads what the operator types next.
    // Run in the background of a shell, it may not take the terminal (the shell has it): the
    // box gets no input rather than the operator's.
    let status = match pty::terminal_of_caller() {
        pty::Terminal::Foreground => pty::run_relayed(c, None)?,
        pty::Terminal::Background => c
            .stdin(std::process::Stdio::null())
            .status()
            .context("running nsenter")?,
        pty::Terminal::None => c.status().context("running nsenter")?,
    };
    match cmd::exit_code(status) {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}
