//! `park`: snapshot, stop the box, a final snapshot when the box wrote meanwhile, release the
//! lease.

use anyhow::Result;

use super::{Ctx, not_up_here, snapshot, up};
use crate::error::{Code, UserError};
use crate::plan::delta::{self, Manifest, PublishedRef, QUICK_TO};
use crate::plan::names::BoxName;
use crate::plan::sandbox::BoxSpec;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::lease::timestamp;
use crate::store::lease::{self, LeaseLost};
use crate::store::meta::{Meta, SnapshotRef};
use crate::store::{Step, Stored, events, update_from};
use crate::sys::copy_state::{CopyJournal, CopyManifest, CopyState, Equal, NextManifest, Relation};
use crate::sys::{agent_home, crash, digest, threads, working_copy};

/// Snapshot, stop, a final snapshot of what changed meanwhile (none when nothing did), release
/// the lease.
/// Returns the final snapshot's id.
// One sequence, read top to bottom; each step names its failure and crash point.
#[allow(clippy::too_many_lines)]
pub(crate) fn park(ctx: &Ctx, name: &BoxName, accept_partial: bool) -> Result<SnapshotId> {
    let lock = ctx.lock(name, "park")?;
    let mut copy = CopyState::journal(&ctx.config.state_dir, name)?;
    let stored = ctx.tracked(name)?;
    let meta = &stored.meta;
    let here = ctx.config.node.clone();
    let spec = ctx.spec(meta);
    // Where a quick park applies, restic opens and locks the repository of changes from here
    // on, while the box is stopped and its copy walked.
    let quick = if accept_partial {
        None
    } else {
        quick_parkable(ctx, meta, copy.state(), &spec)?
            .map(|from| (Ahead::start(ctx, meta, from.0), from))
    };
    let running = ctx.runtime.is_active(&spec);
    let ours = meta.lease.as_ref().is_some_and(|l| l.node == here);
    if !running && !ours {
        return Err(not_up_here(name).into());
    }
    ctx.repo.ensure_repo()?;
    let roots = spec.local_copy();
    if !running && snapshot::is_behind(copy.state(), meta) {
        return release_behind(ctx, &stored, &mut copy);
    }
    if let Some((ahead, from)) = quick
        && let Some(id) = park_quickly(ctx, &stored, &mut copy, running, from, ahead)?
    {
        return Ok(id);
    }
    // A quick park that did not apply may have stopped the box.
    let stopped_quick = running && !ctx.runtime.is_active(&spec);
    let running = running && !stopped_quick;
    // If this fails the lease stays ours and the box keeps running, untouched (started again,
    // when the quick park stopped it). The manifest the copy had at its last snapshot here is
    // read meanwhile (megabytes of JSON).
    let state_dir = &ctx.config.state_dir;
    let (taken, kept_manifest) = std::thread::scope(|s| {
        let kept = s.spawn(|| CopyManifest::load(state_dir, name));
        (
            snapshot::take(ctx, &stored, &mut copy, accept_partial),
            kept.join().ok().flatten(),
        )
    });
    let taken = match taken {
        Err(e) if stopped_quick => {
            drop(lock);
            return Err(match up::up_here(ctx, name, up::How::default()) {
                Ok(()) => e.context(format!(
                    "box '{name}' keeps running: its snapshot failed ('ag-box stop {name}' stops it without one; the lease and the copy stay here; stopped for a quick park, it was started again)"
                )),
                Err(again) => e.context(format!(
                    "box '{name}' is stopped, its snapshot failed, and starting it again failed too ({again:#}); nothing is lost: the lease and the copy stay here"
                )),
            });
        }
        taken => taken,
    };
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
    parked(ctx, &spec, epoch, &snapshot.id, None);
    say!(
        "parked box '{name}' (snapshot {}); this node is free of it",
        snapshot.id.short()
    );
    Ok(snapshot.id)
}

/// The park is done: its event, and a word on a login made inside the box.
fn parked(ctx: &Ctx, spec: &BoxSpec, epoch: u64, id: &SnapshotId, detail: Option<String>) {
    let name = &spec.name;
    ctx.record_event(
        name,
        events::Step {
            verb: "park",
            epoch: Some(epoch),
            snapshot: Some(id),
            detail,
            ..Default::default()
        },
    );
    match agent_home::own_logins(spec) {
        Ok(logins) if !logins.is_empty() => tracing::warn!(
            "box '{name}' holds a login made inside it (~/{}) that no snapshot carries: it stays on this node; 'ag-box globals adopt {name}' makes it this node's",
            logins.join(", ~/")
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!("box '{name}': looking for logins made inside it: {e:#}"),
    }
    if crate::sys::broker::kept_box_logins(spec) {
        tracing::warn!(
            "box '{name}' holds a login made inside it, kept by the credential broker on this node (the box sees placeholders): it stays on this node; 'ag-box globals adopt {name}' makes it this node's"
        );
    }
}

/// Stop the box (when `running`), reading meanwhile the manifest kept as its copy last
/// equalled a snapshot here.
fn stop_reading_manifest(ctx: &Ctx, spec: &BoxSpec, running: bool) -> Result<Option<CopyManifest>> {
    let state_dir = &ctx.config.state_dir;
    let name = &spec.name;
    let (kept, stopped) = std::thread::scope(|s| {
        let kept = s.spawn(|| {
            let kept = CopyManifest::load(state_dir, name);
            if kept.is_some() {
                tracing::debug!("box '{name}': read the manifest its copy had");
            } else {
                tracing::debug!("box '{name}': no manifest of its copy is kept");
            }
            kept
        });
        let stopped = if running {
            ctx.runtime.stop(spec)
        } else {
            Ok(())
        };
        if running && stopped.is_ok() {
            tracing::debug!("box '{name}': stopped");
        }
        (kept.join().ok().flatten(), stopped)
    });
    stopped.map(|()| kept)
}

/// What changed since the manifest `kept`, saved and published for the next node (the list
/// it holds names `QUICK_TO`, the bucket's pointer the changes snapshot itself); None (with a
/// word) when that cannot be done, and the park goes the usual way. Beside it, the file that
/// keeps `manifest`, written while restic saves.
fn save_quick(
    ctx: &Ctx,
    spec: &BoxSpec,
    kept: &CopyManifest,
    manifest: &Manifest,
) -> (Option<PublishedRef>, Result<NextManifest>) {
    let (state_dir, name) = (&ctx.config.state_dir, &spec.name);
    std::thread::scope(|s| {
        let next = s.spawn(|| {
            let next = CopyManifest::begin(state_dir, name, manifest);
            tracing::debug!("box '{name}': its manifest's file is written");
            next
        });
        let published = save_and_publish(ctx, spec, kept, manifest);
        (
            published,
            threads::joined(next, "writing the manifest's file"),
        )
    })
}

fn save_and_publish(
    ctx: &Ctx,
    spec: &BoxSpec,
    kept: &CopyManifest,
    manifest: &Manifest,
) -> Option<PublishedRef> {
    let name = &spec.name;
    let quick = SnapshotId::from(QUICK_TO);
    let saved =
        snapshot::save_changes(ctx, spec, &quick, Some(kept), Some(manifest)).and_then(|p| {
            let Some(mut p) = p else { return Ok(None) };
            p.to = p.snapshot.clone();
            ctx.store.put_delta(name, Some(&p))?;
            Ok(Some(p))
        });
    saved.unwrap_or_else(|e| {
        tracing::warn!("box '{name}': a quick park failed ({e:#}); parking it the usual way");
        None
    })
}

/// The latest a quick park leads from, the copy's relation to it, and the lease epoch held.
type QuickFrom<'m> = (&'m SnapshotRef, Equal, u64);

/// What a quick park of the copy starts from, when one applies: the box's latest (a whole
/// snapshot the copy equals, as this node last saved or restored it), the copy's relation to
/// it, and the lease epoch held.
fn quick_parkable<'m>(
    ctx: &Ctx,
    meta: &'m Meta,
    copy: &CopyState,
    spec: &BoxSpec,
) -> Result<Option<QuickFrom<'m>>> {
    let (Some(latest), Relation::Equals(equal), Some(epoch)) =
        (&meta.last_snapshot, &copy.relation, copy.epoch)
    else {
        return Ok(None);
    };
    let here = &ctx.config.node;
    let holding = meta
        .lease
        .as_ref()
        .is_some_and(|l| l.node == *here && l.epoch == epoch);
    let applies = ctx.config.quick_park
        && latest.on.is_none()
        && latest.names(&equal.snapshot)
        && holding
        && ctx.config.snapshot_add_max.is_none()
        && snapshot::partial_before(meta, copy).is_none()
        && !working_copy::excludes(spec)?.unfollowed;
    Ok(applies.then(|| (latest, equal.clone(), epoch)))
}

/// A quick park: the box is stopped, only what changed since the whole snapshot its copy
/// equals is saved (one small snapshot instead of a walk of the whole tree by restic), and the
/// lease released with the box's latest as those changes over that snapshot
/// (`SnapshotRef::on`); the whole snapshot follows beside the command (`finish`). A copy
/// without what it needs (its manifest as of that snapshot, a latest that is whole, a copy
/// that equals it, every name UTF-8, no path-shaped exclude, no `BOX_SNAPSHOT_ADD_MAX`), or
/// a node where `BOX_QUICK_PARK=false`, parks the usual way: None, with the box as it was, or stopped.
fn park_quickly(
    ctx: &Ctx,
    stored: &Stored,
    copy: &mut CopyJournal,
    running: bool,
    (latest, equal, epoch): QuickFrom<'_>,
    // Ended with nothing saved wherever the park goes another way.
    _ahead: Ahead<'_>,
) -> Result<Option<SnapshotId>> {
    let meta = &stored.meta;
    let name = &meta.name;
    let here = &ctx.config.node;
    let spec = ctx.spec(meta);
    let kept = stop_reading_manifest(ctx, &spec, running)?;
    crash::point("park.after-stop");
    let Some(mut kept) = kept.filter(|k| latest.names(&k.snapshot)) else {
        return Ok(None);
    };
    // What it leads from is named as the record names it (a copy equal to changes a whole
    // snapshot replaced kept their name).
    kept.snapshot = latest.id.clone();
    let began = snapshot::unix_nanos(std::time::SystemTime::now());
    let (digest, manifest) = digest::walk(&spec.local_copy())?;
    tracing::debug!("box '{name}': walked its stopped copy");
    let Some(manifest) = manifest else {
        return Ok(None);
    };
    if equal.still(&digest) {
        // Nothing changed: the latest stays what it is.
        if let Some(lost) = release(ctx, stored.clone(), epoch, None, copy)? {
            copy.record(|c| *c = CopyState::default())?;
            return Err(taken_over(name, lost, &latest.id).into());
        }
        parked(ctx, &spec, epoch, &latest.id, None);
        say!(
            "parked box '{name}': unchanged since snapshot {}; this node is free of it",
            latest.id.short()
        );
        return Ok(Some(latest.id.clone()));
    }
    let whole = latest.whole().clone();
    let (published, next_manifest) = save_quick(ctx, &spec, &kept, &manifest);
    let Some(published) = published else {
        return Ok(None);
    };
    crash::point("park.after-changes");
    let changes = SnapshotRef {
        id: published.snapshot.clone(),
        at: timestamp(ctx.now()),
        node: here.clone(),
        epoch,
        paths: spec
            .local_copy()
            .into_iter()
            .filter(|p| p.exists())
            .collect(),
        on: Some(Box::new(whole.clone())),
        same_as: None,
    };
    crash::point("park.before-release");
    let had_files = snapshot::project_has_files(meta).ok();
    if let Some(lost) = release(ctx, stored.clone(), epoch, Some(&changes), copy)? {
        // The changes alone are no state a rollback can bring back: the copy is kept whole.
        let fork = snapshot::keep_as_fork(ctx, meta, epoch, copy.state())?;
        copy.record(|c| *c = CopyState::default())?;
        return Err(taken_over(name, lost, &fork).into());
    }
    tracing::debug!("box '{name}': released");
    std::thread::scope(|s| {
        // Put in place while the park ends.
        s.spawn(|| {
            crash::point("park.before-manifest");
            snapshot::keep_next_manifest(name, &changes.id, next_manifest);
        });
        // The whole snapshot that follows judges files by size and time alone (as the first one
        // after a restore does) unless a change kept them: then it reads every file.
        let restored =
            equal.restored && !delta::changed_keeping_size_and_time(&kept.entries, &manifest);
        copy.record(|c| {
            let now = Equal {
                snapshot: changes.id.clone(),
                paths: changes.paths.clone(),
                digest: Some(digest),
                running_digest: None,
                restored,
            };
            c.saved(now, had_files, began);
        })?;
        parked(
            ctx,
            &spec,
            epoch,
            &changes.id,
            Some(format!(
                "quick: what changed since snapshot {}; its whole snapshot follows",
                whole.id.short()
            )),
        );
        say!(
            "parked box '{name}' (snapshot {}: what changed since snapshot {}); this node is free of it",
            changes.id.short(),
            whole.id.short()
        );
        finish_later(ctx, &spec);
        Ok(Some(changes.id.clone()))
    })
}

/// restic started ahead for a changes snapshot (`Repo::prepare_changes`); what the park did
/// not use of it is ended as the park returns.
struct Ahead<'a>(&'a Ctx);

impl<'a> Ahead<'a> {
    /// Started for the changes since `latest`, the whole snapshot a quick park of `meta`'s
    /// box leads from (`quick_parkable`).
    fn start(ctx: &'a Ctx, meta: &Meta, latest: &SnapshotRef) -> Ahead<'a> {
        let to = SnapshotId::from(QUICK_TO);
        ctx.repo
            .prepare_changes(&snapshot::changes_spec(ctx, &meta.name, &latest.id, &to));
        Ahead(ctx)
    }
}

impl Drop for Ahead<'_> {
    fn drop(&mut self) {
        self.0.repo.abandon_changes();
    }
}

/// The whole snapshot that follows a quick park, started beside the command.
fn finish_later(ctx: &Ctx, spec: &BoxSpec) {
    let name = &spec.name;
    let log = ctx
        .config
        .state_dir
        .join("local/finish")
        .join(format!("{name}.log"));
    if let Err(e) = ctx.runtime.finish_later(spec, &log) {
        tracing::warn!(
            "box '{name}': its whole snapshot was not started ({e:#}); its next park takes one"
        );
    }
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
