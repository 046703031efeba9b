//! `ag-box __probe` (hidden): what the scheduler of another node needs to know about this one.

use std::path::Path;

use anyhow::{Context, Result};

use super::{Ctx, RUN_ROOT};
use crate::plan::schedule::ProbeReply;

pub(crate) fn reply(ctx: &Ctx) -> Result<ProbeReply> {
    let mut sys = sysinfo::System::new().context("reading memory figures")?;
    sys.refresh_memory();
    Ok(ProbeReply {
        node: ctx.config.node.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        mem_available_kb: sys.available_memory() / 1024,
        active_boxes: ctx.runtime.running_boxes(Path::new(RUN_ROOT)),
    })
}

pub(crate) fn run() -> Result<()> {
    let ctx = Ctx::load()?;
    out!("{}", serde_json::to_string(&reply(&ctx)?)?);
    Ok(())
}
