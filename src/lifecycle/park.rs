//! `park`: snapshot, stop the box, a final snapshot when the box wrote meanwhile, release the
//! lease.

use anyhow::Result;

use super::{Ctx, not_up_here, snapshot};
use crate::error::{Code, UserError};
use crate::plan::names::BoxName;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::lease::{self, LeaseLost};
use crate::store::meta::SnapshotRef;
use crate::store::{Step, Stored, events, update_from};
use crate::sys::copy_state::{CopyJournal, CopyManifest, CopyState};
use crate::sys::{agent_home, crash, digest};

/// Snapshot, stop, a final snapshot of what changed meanwhile (none when nothing did), release
/// the lease.
/// Returns the final snapshot's id.
// One sequence, read top to bottom; each step names its failure and crash point.
#[allow(clippy::too_many_lines)]
pub(crate) fn park(ctx: &Ctx, name: &BoxName, accept_partial: bool) -> Result<SnapshotId> {
    let _lock = ctx.lock(name, "park")?;
    let stored = ctx.tracked(name)?;
    let meta = &stored.meta;
    let here = ctx.config.node.clone();
    let spec = ctx.spec(meta);
    let running = ctx.runtime.is_active(&spec);
    let ours = meta.lease.as_ref().is_some_and(|l| l.node == here);
    if !running && !ours {
        return Err(not_up_here(name).into());
    }
    ctx.repo.ensure_repo()?;
    let roots = spec.local_copy();
    let mut copy = CopyState::journal(&ctx.config.state_dir, name)?;
    if !running && snapshot::is_behind(copy.state(), meta) {
        return release_behind(ctx, &stored, &mut copy);
    }
    // If this fails the lease stays ours and the box keeps running, untouched. The manifest
    // the copy had at its last snapshot here is read meanwhile (megabytes of JSON).
    let state_dir = &ctx.config.state_dir;
    let (taken, kept_manifest) = std::thread::scope(|s| {
        let kept = s.spawn(|| CopyManifest::load(state_dir, name));
        (
            snapshot::take(ctx, &stored, &mut copy, accept_partial),
            kept.join().ok().flatten(),
        )
    });
    let mut taken = taken.map_err(|e| {
        if running {
            e.context(format!(
                "box '{name}' keeps running: its snapshot failed ('ag-box stop {name}' stops it without one; the lease and the copy stay here)"
            ))
        } else {
            e
        }
    })?;
    // The running copy as the snapshot began: the same after the stop, it is all in the snapshot.
    let before = running.then(|| taken.digest_before.clone());
    // The stopped copy's manifest, as its final snapshot holds it.
    let mut final_manifest = None;
    crash::point("park.after-snapshot");
    if taken.forked.is_none() && running {
        ctx.runtime.stop(&spec)?;
        crash::point("park.after-stop");
        let (after, manifest) = digest::walk(&roots)?;
        tracing::debug!("box '{name}': walked its stopped copy");
        if before.as_ref() == Some(&after) {
            tracing::info!(
                "box '{name}': nothing changed during its snapshot; it is the final one"
            );
            copy.record(|c| c.walked(after))?;
            final_manifest = Some(manifest);
        } else {
            // A second, incremental snapshot keeps what the box wrote meanwhile or while stopping.
            // Read again: a lease taken by force during the stop makes it a fork, tagged so.
            let now = ctx.tracked(name)?;
            taken = snapshot::take(ctx, &now, &mut copy, accept_partial).map_err(|e| {
                e.context(format!(
                    "box '{name}' is stopped, but its final snapshot failed; nothing is lost: run 'ag-box park {name}' again"
                ))
            })?;
        }
    }
    if let Some(lost) = taken.forked {
        // Its work is safe in the fork snapshot; the node is freed as asked, the lease left alone.
        ctx.runtime.stop(&spec)?;
        copy.record(|c| *c = CopyState::default())?;
        return Err(taken_over(name, lost, &taken.snapshot.id).into());
    }
    let final_manifest = match final_manifest {
        Some(m) => m,
        None => digest::walk(&roots)?.1,
    };
    snapshot::publish_changes(
        ctx,
        &spec,
        &taken.snapshot.id,
        kept_manifest.as_ref(),
        final_manifest,
    );
    tracing::debug!("box '{name}': published what changed");
    crash::point("park.before-release");
    let epoch = taken.epoch;
    let snapshot = taken.snapshot;
    // On the record as the snapshot left it: the sequence read it once, at its start. The last
    // snapshot (and its digest) were recorded by `take`.
    if let Some(lost) = release(ctx, taken.record, epoch, Some(&snapshot), &mut copy)? {
        copy.record(|c| *c = CopyState::default())?;
        return Err(taken_over(name, lost, &snapshot.id).into());
    }
    ctx.record_event(
        name,
        events::Step {
            verb: "park",
            epoch: Some(epoch),
            snapshot: Some(&snapshot.id),
            ..Default::default()
        },
    );
    say!(
        "parked box '{name}' (snapshot {}); this node is free of it",
        snapshot.id.short()
    );
    match agent_home::own_logins(&spec) {
        Ok(logins) if !logins.is_empty() => tracing::warn!(
            "box '{name}' holds a login made inside it (~/{}) that no snapshot carries: it stays on this node; 'ag-box globals adopt {name}' makes it this node's",
            logins.join(", ~/")
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!("box '{name}': looking for logins made inside it: {e:#}"),
    }
    Ok(snapshot.id)
}

/// Park a stopped copy that is not the box's latest (`snapshot::is_behind`): nothing of it is
/// saved as the latest (what a rolled-back copy gained is kept as a fork); the lease goes, and
/// the record keeps the latest it names, which the next `up` anywhere restores.
fn release_behind(ctx: &Ctx, stored: &Stored, copy: &mut CopyJournal) -> Result<SnapshotId> {
    let meta = &stored.meta;
    let name = &meta.name;
    let (Some(lease), Some(latest)) = (&meta.lease, &meta.last_snapshot) else {
        return Err(not_up_here(name).into());
    };
    let epoch = lease.epoch;
    let fork = snapshot::keep_what_is_behind(ctx, meta, copy.state(), epoch)?;
    crash::point("park.before-release");
    if let Some(lost) = release(ctx, stored.clone(), epoch, None, copy)? {
        return Err(taken_over(name, lost, fork.as_ref().unwrap_or(&latest.id)).into());
    }
    ctx.record_event(
        name,
        events::Step {
            verb: "park",
            epoch: Some(epoch),
            snapshot: Some(&latest.id),
            detail: Some("the copy here was not the box's latest: none taken".into()),
            ..Default::default()
        },
    );
    say!(
        "parked box '{name}': its copy here is not its latest, which stays snapshot {} (the next 'ag-box up {name}' restores it); this node is free of it",
        latest.id.short()
    );
    Ok(latest.id.clone())
}

/// Release the lease this node holds at `epoch` on `record` (with `snapshot` as the box's
/// latest, when given); once released, the copy state holds no lease, nor whatever an `up` cut
/// off here had left to finish. The lease as another node took it meanwhile, if one did.
fn release(
    ctx: &Ctx,
    record: Stored,
    epoch: u64,
    snapshot: Option<&SnapshotRef>,
    copy: &mut CopyJournal,
) -> Result<Option<LeaseLost>> {
    let name = record.meta.name.clone();
    let lost = update_from(ctx.store.as_ref(), &name, Some(record), |m| {
        Ok(
            match lease::release(m, &ctx.config.node, epoch, snapshot.cloned()) {
                Ok(next) => Step::Write(next, None),
                Err(lost) => Step::Keep(Some(lost)),
            },
        )
    })?;
    if lost.is_none() {
        copy.record(|c| {
            c.epoch = None;
            c.pending_up = None;
        })?;
    }
    Ok(lost)
}

fn taken_over(name: &str, lost: LeaseLost, snapshot: &SnapshotId) -> UserError {
    let holder = lost.now_held_by.map_or("nobody".into(), |l| l.node);
    UserError::new(
        Code::LeaseHeld,
        format!(
            "box '{name}' was taken over by {holder}: stopped it here and kept this node's files as snapshot {}",
            snapshot.short()
        ),
        format!(
            "the box's latest state is on {holder}; 'ag-box rollback {name} {} --to <dir>' recovers this node's files beside it",
            snapshot.short()
        ),
    )
}
