//! `park <name>`: snapshot, stop the box, release the lease.

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::lifecycle;

pub fn run(name: &str, accept_partial: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    ctx.tracked(name)?;
    require_tools(&["restic"])?;
    let restic = ctx.restic()?;
    lifecycle::park::park(&ctx.world(&restic), name, accept_partial)
}
