//! `exec <name> -- <cmd...>`: one command inside the running box, exit code passed through.

use std::process::Command;

use anyhow::{Context, Result};

use super::{Ctx, not_up_here, require_tools};
use crate::error::ChildExit;
use crate::sys::{cmd, runtime};

pub fn run(name: &str, command: &[String]) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["nsenter"])?;
    let spec = ctx.spec(&meta);
    if !ctx.runtime.is_active(&spec) {
        return Err(not_up_here(name).into());
    }
    let pid = runtime::sandbox_pid(&spec)?;
    runtime::join_cgroups_of(pid);
    let cwd = std::env::current_dir().ok();
    let dir = spec.exec_dir(cwd.as_deref());
    let mut c = Command::new(cmd::require("nsenter")?);
    // nsenter's own --wd resolves the directory before entering the mount namespace.
    c.args(["-t", &pid.to_string(), "-a", "--", "/usr/bin/env", "-C"])
        .arg(&dir)
        .arg("--")
        .args(command)
        .env_clear()
        .envs(spec.env());
    if let Some(term) = std::env::var_os("TERM") {
        c.env("TERM", term);
    }
    let status = c.status().context("running nsenter")?;
    match cmd::exit_code(status) {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}
