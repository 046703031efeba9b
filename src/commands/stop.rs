//! `stop <name>`: stop the box without a snapshot (on the node running it).

use anyhow::Result;

use super::{Ctx, follow};
use crate::lifecycle;
use crate::plan::names::BoxName;

pub(crate) fn run(name: &BoxName) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    if !ctx.runtime.is_active(&ctx.spec(&meta)) {
        return follow::to_holder(&ctx, &meta, "stop", &["stop", name]);
    }
    lifecycle::stop::stop(&ctx, name)
}
