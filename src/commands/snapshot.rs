//! `snapshot [<name>|--active]`, and the snapshot step that `track` and `park` share.

use std::path::PathBuf;

use anyhow::Result;

use super::{Ctx, not_up_here};
use crate::cli::SnapshotArgs;
use crate::error::{Code, UserError};
use crate::plan::restic::{BackupSpec, backup_args};
use crate::store::lease::{self, LeaseLost, timestamp};
use crate::store::meta::{Meta, SnapshotRef};
use crate::store::{Step, update};
use crate::sys::copy_state::CopyState;
use crate::sys::restic::{Restic, short};

pub struct Taken {
    pub snapshot: SnapshotRef,
    pub paths: Vec<PathBuf>,
    /// Another node took the lease: the snapshot is tagged `fork` and `last_snapshot` did not move.
    pub forked: Option<LeaseLost>,
}

const EXCLUDE_FILE: &str = "/opt/box/exclude.txt";

/// Snapshot the box's local files and renew its lease (or record a fork).
pub fn take(ctx: &Ctx, restic: &Restic, meta: &Meta) -> Result<Taken> {
    let node = &ctx.config.node;
    let copy = CopyState::load(&ctx.config.state_dir, &meta.name)?;
    let ours = meta
        .lease
        .as_ref()
        .filter(|l| &l.node == node)
        .map(|l| l.epoch);
    let Some(epoch) = copy.epoch.or(ours) else {
        return Err(not_up_here(&meta.name).into());
    };
    let holding = ours == Some(epoch);
    let ah = ctx.spec(meta).agent_home;
    let paths: Vec<PathBuf> = [meta.path.clone(), ah.root.clone()]
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    let exclude_files = [PathBuf::from(EXCLUDE_FILE)]
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    let spec = BackupSpec {
        name: meta.name.clone(),
        node: node.clone(),
        epoch,
        fork: !holding,
        parent: copy
            .snapshot
            .clone()
            .or_else(|| meta.last_snapshot.as_ref().map(|s| s.id.clone())),
        excludes: ah.snapshot_excludes(),
        exclude_files,
        paths: paths.clone(),
    };
    let id = restic.backup(&meta.name, &backup_args(&spec))?;
    let now = ctx.now();
    let snapshot = SnapshotRef {
        id,
        at: timestamp(now),
        node: node.clone(),
        epoch,
    };
    let forked = if holding {
        let ttl = ctx.config.lease_ttl;
        update(ctx.store.as_ref(), &meta.name, |m| {
            Ok(
                match lease::renew(m, node, epoch, Some(snapshot.clone()), now, ttl) {
                    Ok(next) => Step::Write(next, None),
                    Err(lost) => Step::Keep(Some(lost)),
                },
            )
        })?
    } else {
        Some(LeaseLost {
            now_held_by: meta.lease.clone(),
        })
    };
    if let Some(lost) = &forked {
        let holder = lost.now_held_by.as_ref().map_or("nobody".to_string(), |l| {
            format!("node {} (epoch {})", l.node, l.epoch)
        });
        tracing::warn!(
            "box '{}': the lease is now held by {holder}; snapshot {} keeps this node's files as a fork and is not the box's latest",
            meta.name,
            short(&snapshot.id)
        );
    }
    CopyState {
        snapshot: forked.is_none().then(|| snapshot.id.clone()),
        paths: paths.clone(),
        epoch: Some(epoch),
    }
    .save(&ctx.config.state_dir, &meta.name)?;
    Ok(Taken {
        snapshot,
        paths,
        forked,
    })
}

pub fn run(args: SnapshotArgs) -> Result<()> {
    let ctx = Ctx::load()?;
    let restic = ctx.restic()?;
    let boxes = match &args.name {
        Some(name) => vec![ctx.tracked(name)?.meta],
        None => ctx.active_boxes()?,
    };
    if boxes.is_empty() {
        eprintln!("no active boxes on this node, skipping");
        return Ok(());
    }
    restic.ensure_repo()?;
    let mut failed = 0;
    let mut forked = Vec::new();
    for meta in &boxes {
        let taken = ctx
            .lock_box(&meta.name, "snapshot")
            .and_then(|_lock| take(&ctx, &restic, &ctx.tracked(&meta.name)?.meta));
        match taken {
            Ok(t) => {
                println!(
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
