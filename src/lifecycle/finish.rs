//! After a quick park (`park::park`): the parking node takes the whole snapshot of its stopped
//! copy and, while the box's record still names the quick park's changes as its latest, puts
//! it in their place (`SnapshotRef::same_as` keeps every copy equal to the changes current).
//! Runs beside the command that parked, holding the box's lock; any other command on the box
//! here ends it (`sys::box_lock`), and the box's next park saves it whole instead.

use anyhow::Result;

use super::Ctx;
use crate::plan::names::BoxName;
use crate::plan::restic::BackupSpec;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::events;
use crate::store::meta::SnapshotRef;
use crate::store::{Step, update};
use crate::sys::box_lock::FINISH_VERB;
use crate::sys::copy_state::{CopyManifest, CopyState, Relation};
use crate::sys::{crash, digest, working_copy};

/// What became of a quick park's changes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Whole snapshot `0` replaced them as the box's latest.
    Replaced(SnapshotId),
    /// Nothing to do: the record names another latest, the copy here is not the changes, or
    /// the box runs here again.
    Moot(&'static str),
}

/// Take the whole snapshot of the quick park's copy and put it in the changes' place.
pub(crate) fn finish(ctx: &Ctx, name: &BoxName) -> Result<Finished> {
    let _lock = ctx.lock(name, FINISH_VERB)?;
    let meta = ctx.tracked(name)?.meta;
    let here = &ctx.config.node;
    let Some(latest) = meta.last_snapshot.clone().filter(|_| !meta.dropping) else {
        return Ok(Finished::Moot(
            "the box has no snapshot, or is being dropped",
        ));
    };
    let Some(whole) = latest.on.as_deref() else {
        return Ok(Finished::Moot("its latest is a whole snapshot"));
    };
    if latest.node != *here {
        return Ok(Finished::Moot("another node parked it"));
    }
    let spec = ctx.spec(&meta);
    if ctx.runtime.is_active(&spec) {
        return Ok(Finished::Moot("it runs here again"));
    }
    let copy = CopyState::load(&ctx.config.state_dir, name)?;
    let Relation::Equals(equal) = &copy.relation else {
        return Ok(Finished::Moot("the copy here is not the changes"));
    };
    if equal.snapshot != latest.id {
        return Ok(Finished::Moot("the copy here is not the changes"));
    }
    // Stopped and locked, the copy changes only by hand: as the park left it, it is the changes.
    let now = digest::of(&spec.local_copy())?;
    if !equal.still(&now) {
        return Ok(Finished::Moot("the copy here changed since the park"));
    }
    let backup = ctx.repo.backup(&BackupSpec {
        name: meta.name.clone(),
        node: here.clone(),
        epoch: latest.epoch,
        fork: false,
        parent: Some(whole.id.clone()),
        restored_from_parent: equal.restored,
        excludes: spec.agent_home.snapshot_excludes(),
        exclude_files: working_copy::exclude_files(),
        paths: latest.paths.clone(),
    })?;
    anyhow::ensure!(
        backup.unreadable.is_empty(),
        "restic could not read {}",
        backup.unreadable.join("; ")
    );
    crash::point("finish.after-backup");
    let id = backup.id;
    let replacement = SnapshotRef {
        id: id.clone(),
        on: None,
        same_as: Some(latest.id.clone()),
        ..latest.clone()
    };
    let replaced = update(ctx.store.as_ref(), name, |m| {
        Ok(match &m.last_snapshot {
            Some(l) if l.id == latest.id && l.on.is_some() && !m.dropping => {
                let mut next = m.clone();
                next.last_snapshot = Some(replacement.clone());
                Step::Write(next, true)
            }
            _ => Step::Keep(false),
        })
    });
    if matches!(replaced, Ok(false)) {
        // A snapshot no record names (the box moved on, or is dropped) is no state of it.
        // (After an error the write may have landed: then it is kept.)
        if let Err(e) = ctx.repo.forget(std::slice::from_ref(&id)) {
            tracing::warn!("box '{name}': forgetting snapshot {}: {e:#}", id.short());
        }
    }
    if !replaced? {
        return Ok(Finished::Moot("the box has a newer latest"));
    }
    // This copy, and the manifest kept of it, are the whole snapshot's now.
    let state_dir = &ctx.config.state_dir;
    CopyState::journal(state_dir, name)?.record(|c| c.replaced(&latest.id, &id, true))?;
    if let Some(kept) = CopyManifest::load(state_dir, name).filter(|k| k.snapshot == latest.id) {
        super::snapshot::keep_manifest(&ctx.config.state_dir, name, &id, Some(kept.entries));
    }
    ctx.record_event(
        name,
        events::Step {
            verb: "snapshot",
            epoch: Some(latest.epoch),
            snapshot: Some(&id),
            added: Some((backup.files_added, backup.bytes_added)),
            detail: Some(format!(
                "the whole snapshot of the quick park's changes {}",
                latest.id.short()
            )),
        },
    );
    Ok(Finished::Replaced(id))
}

/// `ag-box __finish-park <box>`: what `finish` did, in the log it runs with.
pub(crate) fn run(ctx: &Ctx, name: &BoxName) -> Result<()> {
    let finished = finish(ctx, name).inspect_err(|_| {
        // Ended by another command (`sys::box_lock`) while its restic started, that restic
        // may have left its lock behind: stale on this node, it goes now, not in 30 minutes.
        if let Err(e) = ctx.restic().and_then(crate::sys::restic::Restic::unlock) {
            tracing::warn!("removing restic's stale locks: {e:#}");
        }
    })?;
    match finished {
        Finished::Replaced(id) => tracing::info!(
            "box '{name}': whole snapshot {} replaced the quick park's changes",
            id.short()
        ),
        Finished::Moot(why) => tracing::info!("box '{name}': no whole snapshot taken: {why}"),
    }
    Ok(())
}
