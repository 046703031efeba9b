//! `init`: check the store and create the restic repository (idempotent).

use anyhow::Result;

use super::{Ctx, require_tools};

pub(crate) fn run() -> Result<()> {
    let ctx = Ctx::load()?;
    require_tools(&["restic"])?;
    ctx.store.check_reachable()?;
    let conditional = ctx.conditional_writes()?;
    // Opened afresh: the node's key can be added only once the repository exists.
    let mut restic = crate::sys::restic::Restic::new(&ctx.config)?;
    let created = restic.init()?;
    restic.add_node_key(ctx.store.as_ref(), &ctx.config.node);
    out!(
        "store:      {} (conditional writes: {})",
        ctx.store.describe(),
        if conditional { "ok" } else { "IGNORED" }
    );
    out!(
        "repository: {} ({})",
        restic.describe(),
        if created { "created" } else { "already there" }
    );
    if !conditional {
        tracing::warn!(
            "this endpoint ignores conditional writes: leases are refused unless BOX_S3_UNSAFE_LEASES=1"
        );
    }
    Ok(())
}
