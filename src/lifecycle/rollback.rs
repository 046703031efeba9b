//! `rollback`: make an earlier snapshot the box's latest. The state it replaces is a snapshot
//! first (named, so a rollback is undone by rolling back to it). A parked box's record points
//! at the earlier snapshot, which the next `up` anywhere restores; a box held here is stopped,
//! snapshotted, pointed back, and started again on the restored copy.

use anyhow::Result;

use super::{Ctx, snapshot, up};
use crate::error::{Code, UserError};
use crate::plan::names::BoxName;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::lease::{self, LeaseLost};
use crate::store::meta::SnapshotRef;
use crate::store::{Step, events, update};
use crate::sys::copy_state::CopyState;
use crate::sys::crash;

/// Roll box `name` back to `to`; returns the snapshot of the state it replaced (None: the box
/// had none).
pub(crate) fn rollback(ctx: &Ctx, name: &BoxName, to: &SnapshotRef) -> Result<Option<SnapshotId>> {
    let lock = ctx.lock(name, "rollback")?;
    let stored = ctx.tracked(name)?;
    let meta = &stored.meta;
    let here = ctx.config.node.clone();
    let replaced = match &meta.lease {
        None if let Some(latest) = meta.last_snapshot.as_ref().filter(|s| s.on.is_some()) => {
            // The state it would replace is no snapshot a rollback can name, to undo it.
            return Err(UserError::failed(
                format!(
                    "box '{name}': its latest is what a quick park on {} saved (snapshot {}), and its whole snapshot is not taken yet; it is not rolled back",
                    latest.node,
                    latest.id.short()
                ),
                format!(
                    "try again in a minute ({} takes it after the park), or run 'ag-box up {name}' first: a box up here is saved whole before it is rolled back",
                    latest.node
                ),
            )
            .into());
        }
        None => {
            let replaced = meta.last_snapshot.clone().map(|s| s.id);
            point_back(ctx, name, to, None)?;
            replaced
        }
        Some(l) if l.node == here => {
            let spec = ctx.spec(meta);
            let running = ctx.runtime.is_active(&spec);
            ctx.repo.ensure_repo()?;
            if running {
                ctx.runtime.stop(&spec)?;
            }
            let mut copy = CopyState::journal(&ctx.config.state_dir, name)?;
            if !running && snapshot::is_behind(copy.state(), meta) {
                // A copy that is not the box's latest replaces nothing: the latest is what the
                // rollback replaces (what a rolled-back copy gained is kept as a fork).
                snapshot::keep_what_is_behind(ctx, meta, copy.state(), l.epoch)?;
                crash::point("rollback.after-snapshot");
                point_back(ctx, name, to, Some(l.epoch))?;
                crash::point("rollback.after-point-back");
                meta.last_snapshot.clone().map(|s| s.id)
            } else {
                // Stopped, so the snapshot is all of it and the copy is known to equal it.
                let taken = snapshot::take(ctx, &stored, &mut copy, false).map_err(|e| {
                e.context(format!(
                    "box '{name}': the snapshot before the rollback failed; nothing was rolled back{}",
                    if running { format!(" (the box is stopped: 'ag-box up {name}' starts it again)") } else { String::new() }
                ))
            })?;
                if let Some(lost) = taken.forked {
                    return Err(lost_lease(name, &lost).into());
                }
                copy.record(CopyState::rolled_back)?;
                crash::point("rollback.after-snapshot");
                point_back(ctx, name, to, Some(taken.epoch))?;
                crash::point("rollback.after-point-back");
                if running {
                    drop(lock);
                    up::up_here(ctx, name, up::How::default())?;
                }
                Some(taken.snapshot.id)
            }
        }
        Some(l) => {
            return Err(UserError::new(
                Code::LeaseHeld,
                format!("box '{name}' is up on node {}", l.node),
                format!("run the rollback on {}, or park the box first", l.node),
            )
            .into());
        }
    };
    let undo = replaced.as_ref().map_or(String::new(), |id| {
        format!("; undo with 'ag-box rollback {name} {}'", id.short())
    });
    ctx.record_event(
        name,
        events::Step {
            verb: "rollback",
            snapshot: Some(&to.id),
            detail: Some(format!(
                "to {} from {}{undo}",
                to.id.short(),
                replaced.as_ref().map_or("nothing", SnapshotId::short)
            )),
            ..Default::default()
        },
    );
    Ok(replaced)
}

/// The record's latest snapshot becomes `to`: on a parked box (`held` None) only while it stays
/// parked, on a box held here only while this node holds it.
fn point_back(ctx: &Ctx, name: &str, to: &SnapshotRef, held: Option<u64>) -> Result<()> {
    let here = &ctx.config.node;
    let now = ctx.now();
    let refused = update(ctx.store.as_ref(), name, |m| {
        Ok(match (held, &m.lease) {
            (None, None) => Step::Write(
                crate::store::meta::Meta {
                    last_snapshot: Some(to.clone()),
                    ..m.clone()
                },
                None,
            ),
            (None, Some(l)) => Step::Keep(Some(format!("node {} took it meanwhile", l.node))),
            (Some(epoch), _) => {
                match lease::renew(m, here, epoch, Some(to.clone()), now, ctx.config.lease_ttl) {
                    Ok(next) => Step::Write(next, None),
                    Err(lost) => Step::Keep(Some(lost_lease(name, &lost).to_string())),
                }
            }
        })
    })?;
    match refused {
        None => Ok(()),
        Some(why) => Err(UserError::new(
            Code::LeaseHeld,
            format!("box '{name}' was not rolled back: {why}"),
            "see 'ag-box ls', then run the rollback where the box is",
        )
        .into()),
    }
}

fn lost_lease(name: &str, lost: &LeaseLost) -> UserError {
    let holder = lost
        .now_held_by
        .as_ref()
        .map_or("nobody".into(), |l| l.node.clone());
    UserError::new(
        Code::LeaseHeld,
        format!(
            "box '{name}' was taken over by {holder}; this node's files are kept as a fork snapshot"
        ),
        format!("run the rollback on {holder}"),
    )
}
