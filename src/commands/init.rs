//! `init`: check the store and create the restic repositories (idempotent): the main one, and
//! the one for the changes parks save (`plan::restic::Repository`).

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::plan::restic::Repository;
use crate::sys::restic::Restic;

pub(crate) fn run() -> Result<()> {
    let ctx = Ctx::load()?;
    require_tools(&["restic"])?;
    ctx.store.check_reachable()?;
    let conditional = ctx.conditional_writes()?;
    out!(
        "store:      {} (conditional writes: {})",
        ctx.store.describe(),
        if conditional { "ok" } else { "IGNORED" }
    );
    for (label, which) in [
        ("repository:", Repository::Main),
        ("changes:   ", Repository::Changes),
    ] {
        // Opened afresh: the node's key can be added only once the repository exists.
        let mut restic = Restic::open(&ctx.config, which)?;
        let created = restic.init()?;
        restic.add_node_key(ctx.store.as_ref(), &ctx.config.node);
        out!(
            "{label} {} ({})",
            restic.describe(),
            if created { "created" } else { "already there" }
        );
    }
    if !conditional {
        tracing::warn!(
            "this endpoint ignores conditional writes: leases are refused unless BOX_S3_UNSAFE_LEASES=1"
        );
    }
    Ok(())
}
