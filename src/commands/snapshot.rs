//! `snapshot [<name>|--active]`: snapshot boxes running here, renewing their leases.

use anyhow::Result;

use super::Ctx;
use crate::cli::SnapshotArgs;
use crate::error::{Code, UserError};
use crate::lifecycle::snapshot::take;

pub fn run(args: SnapshotArgs) -> Result<()> {
    let ctx = Ctx::load()?;
    let restic = ctx.restic()?;
    let boxes = match &args.name {
        Some(name) => vec![ctx.tracked(name)?.meta],
        None => ctx.active_boxes()?,
    };
    if boxes.is_empty() {
        say!("no active boxes on this node, skipping");
        return Ok(());
    }
    restic.ensure_repo()?;
    let world = ctx.world(&restic);
    let mut failed = 0;
    let mut forked = Vec::new();
    for meta in &boxes {
        let taken = ctx
            .lock_box(&meta.name, "snapshot")
            .and_then(|_lock| take(&world, &ctx.tracked(&meta.name)?.meta, args.accept_partial));
        match taken {
            Ok(t) => {
                out!(
                    "{} {}{}",
                    meta.name,
                    t.snapshot.id,
                    if t.forked.is_some() { " fork" } else { "" }
                );
                if t.forked.is_some() {
                    forked.push(meta.name.clone());
                }
            }
            Err(e) if boxes.len() > 1 => {
                failed += 1;
                tracing::error!("box '{}': snapshot failed: {e:#}", meta.name);
            }
            Err(e) => return Err(e),
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} snapshots failed", boxes.len());
    }
    // A split brain must show: the hourly timer's unit fails.
    if !forked.is_empty() {
        return Err(UserError::new(
            Code::LeaseHeld,
            format!(
                "box(es) {} run here but were taken over by another node; their snapshots here are forks",
                forked.join(", ")
            ),
            "'ag-box park <box>' here stops this copy; its files stay in the fork snapshot",
        )
        .into());
    }
    Ok(())
}
