//! `prune [--dry-run]`: print the retention plan (`lifecycle::prune`), then carry it out.

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::lifecycle::prune;
use crate::plan::text;

pub(crate) fn run(dry_run: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    require_tools(&["restic"])?;
    ctx.restic()?;
    let plan = prune::plan(&ctx)?;
    for group in &plan.groups {
        for (id, reason) in &group.keep {
            out!("keep   {} {} ({reason})", group.label, id.short());
        }
        for id in &group.forget {
            out!("forget {} {}", group.label, id.short());
        }
    }
    let policy = ctx.config.retention;
    say!(
        "retention: last {}, daily {}, weekly {}; {} of {} to forget",
        policy.last,
        policy.daily,
        policy.weekly,
        plan.forget().len(),
        text::count(plan.snapshots, "snapshot")
    );
    if dry_run {
        say!("dry run: nothing was removed");
        return Ok(());
    }
    prune::execute(&ctx, &plan)?;
    say!("pruned the repository");
    Ok(())
}
