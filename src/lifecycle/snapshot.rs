//! Snapshot a box's local copy and renew its lease, or keep it as a fork.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Result;

use super::{Ctx, not_up_here};
use crate::error::UserError;
use crate::plan::delta::{self, Manifest, Published, PublishedRef};
use crate::plan::restic::{BackupSpec, ChangesSpec};
use crate::plan::sandbox::BoxSpec;
use crate::plan::snapshot_id::SnapshotId;
use crate::plan::{account, history};
use crate::store::events;
use crate::store::lease::{self, LeaseLost, timestamp};
use crate::store::meta::{Meta, SnapshotRef};
use crate::store::{Step, Stored, update_record};
use crate::sys::copy_state::{CopyJournal, CopyManifest, CopyState, Equal, NextManifest, Relation};
use crate::sys::{changes_archive, crash, digest, working_copy};

pub(crate) struct Taken {
    pub snapshot: SnapshotRef,
    /// Another node took the lease: the snapshot is tagged `fork` and `last_snapshot` did not move.
    pub forked: Option<LeaseLost>,
    /// `sys::digest` of the copy as the snapshot began.
    pub digest_before: String,
    /// The lease epoch this node holds (the snapshot may be older, when nothing changed).
    pub epoch: u64,
    /// Nothing changed since the box's last snapshot: none was taken, the lease was renewed.
    pub unchanged: bool,
    /// The box's record as this snapshot left it, with its version: the sequence's next write
    /// goes on from it without reading it again.
    pub record: Stored,
}

fn backup_spec(
    ctx: &Ctx,
    box_spec: &BoxSpec,
    epoch: u64,
    fork: bool,
    parent: Option<SnapshotId>,
    restored_from_parent: bool,
) -> BackupSpec {
    BackupSpec {
        name: box_spec.name.clone(),
        node: ctx.config.node.clone(),
        epoch,
        fork,
        parent,
        restored_from_parent,
        excludes: box_spec.agent_home.snapshot_excludes(),
        exclude_files: working_copy::exclude_files(),
        paths: box_spec
            .local_copy()
            .into_iter()
            .filter(|p| p.exists())
            .collect(),
    }
}

/// Remember the manifest of the copy as it equals snapshot `id` (a walk that met a non-UTF-8
/// name has none: then nothing is remembered, and the next park publishes nothing).
pub(crate) fn keep_manifest(state: &Path, name: &str, id: &SnapshotId, manifest: Option<Manifest>) {
    let kept = match manifest {
        Some(entries) => CopyManifest {
            snapshot: id.clone(),
            entries,
        }
        .save(state, name),
        None => CopyManifest::remove(state, name),
    };
    warn_unkept(name, kept);
}

/// A manifest's file whose entries were written beforehand, put in place as of `id`.
pub(crate) fn keep_next_manifest(name: &str, id: &SnapshotId, next: Result<NextManifest>) {
    warn_unkept(name, next.and_then(|m| m.finish(id)));
}

fn warn_unkept(name: &str, kept: Result<()>) {
    if let Err(e) = kept {
        tracing::warn!("box '{name}': could not keep its copy's manifest: {e:#}");
    }
}

/// As a park ends with snapshot `to` of the stopped copy (`after`: its manifest), publish what
/// changed since the snapshot the copy last equalled here (`before`, as kept then), for the
/// next node that holds that one: the changed paths in a snapshot of their own, with the list
/// of them; then remember `after`. Only a warning when it fails: the next `up` diffs instead.
pub(crate) fn publish_changes(
    ctx: &Ctx,
    spec: &BoxSpec,
    to: &SnapshotId,
    before: Option<&CopyManifest>,
    after: Option<Manifest>,
) {
    let name = &spec.name;
    if before.is_some_and(|b| b.snapshot == *to) {
        // Nothing changed since: what was published up to `to` still serves.
        keep_manifest(&ctx.config.state_dir, name, to, after);
        return;
    }
    let published = save_changes(ctx, spec, to, before, after.as_ref()).and_then(|p| {
        ctx.store.put_delta(name, p.as_ref())?;
        Ok(p)
    });
    match published {
        Ok(Some(p)) => tracing::debug!(
            "box '{name}': what changed since snapshot {} is in snapshot {}",
            p.from.short(),
            p.snapshot.short()
        ),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!("box '{name}': could not publish what changed in this park: {e:#}");
            if let Err(e) = ctx.store.put_delta(name, None) {
                tracing::debug!("box '{name}': withdrawing what was published: {e:#}");
            }
        }
    }
    keep_manifest(&ctx.config.state_dir, name, to, after);
}

/// A snapshot of the paths that changed from `before` to `after` (snapshot `to`, or
/// `delta::QUICK_TO` for a quick park's, which is that state itself), holding the list of them
/// ([`Published`]) too; None when nothing can be said (no manifest of either, or
/// more changes than a published delta names).
pub(crate) fn save_changes(
    ctx: &Ctx,
    spec: &BoxSpec,
    to: &SnapshotId,
    before: Option<&CopyManifest>,
    after: Option<&Manifest>,
) -> Result<Option<PublishedRef>> {
    let (Some(b), Some(a)) = (before, after) else {
        return Ok(None);
    };
    // restic reads the listed paths by name: only a stopped box cannot swap one for a link
    // between the walk that listed them and the backup (park stops it first).
    if ctx.runtime.is_active(spec) {
        anyhow::bail!(
            "box '{}' is running: what changed is saved only once it is stopped",
            spec.name
        );
    }
    let excludes = working_copy::excludes(spec)?;
    if excludes.unfollowed {
        // A pattern with a '/' may leave out what the list would name (and remove): restic
        // diff, which sees only what the snapshots hold, tells the next node instead.
        return Ok(None);
    }
    let Some(d) = delta::between(&b.entries, a, &|p| excludes.matches(p)) else {
        return Ok(None);
    };
    let published = Published::new(b.snapshot.clone(), to.clone(), d);
    // The list travels in the snapshot, at a path of the node's own (root's, outside every
    // box), so the bucket learns no path the box's snapshots do not hide as well.
    let list = ctx
        .config
        .state_dir
        .join("published")
        .join(format!("{name}.json", name = spec.name));
    let text = serde_json::to_vec(&published)?;
    let roots = spec.local_copy();
    let left_out = |p: &Path| excludes.matches(p);
    let contents = changes_archive::Contents {
        roots: &roots,
        fetch: &published.fetch,
        excluded: &left_out,
        list: (&list, &text),
    };
    tracing::debug!(
        "box '{}': saving {} changed paths",
        spec.name,
        published.fetch.len()
    );
    let saved = ctx.repo.backup_changes(
        &changes_spec(ctx, &spec.name, &published.from, &published.to),
        &|out| changes_archive::write(out, &contents),
    )?;
    anyhow::ensure!(
        saved.unreadable.is_empty(),
        "restic could not read {}",
        saved.unreadable.join("; ")
    );
    tracing::debug!(
        "box '{}': {} changed and {} removed paths saved in snapshot {}",
        spec.name,
        published.fetch.len(),
        published.remove.len(),
        saved.id.short()
    );
    Ok(Some(PublishedRef {
        from: published.from,
        to: published.to,
        snapshot: saved.id,
        list,
        repository: saved.repository,
        archive: Some(PathBuf::from(changes_archive::IN_SNAPSHOT)),
    }))
}

/// The changes snapshot of box `spec` from snapshot `from` to `to`, as this node saves it.
pub(crate) fn changes_spec(
    ctx: &Ctx,
    name: &str,
    from: &SnapshotId,
    to: &SnapshotId,
) -> ChangesSpec {
    ChangesSpec {
        name: name.to_string(),
        node: ctx.config.node.clone(),
        from: from.clone(),
        to: to.clone(),
    }
}

/// Keep this node's copy as a fork snapshot (before a restore replaces it): whatever restic can
/// read of it is better kept than lost, so a partial one is kept too, with a warning.
pub(crate) fn keep_as_fork(
    ctx: &Ctx,
    meta: &Meta,
    epoch: u64,
    copy: &CopyState,
) -> Result<SnapshotId> {
    let spec = backup_spec(
        ctx,
        &ctx.spec(meta),
        epoch,
        true,
        copy.parent(meta.last_snapshot.as_ref()),
        copy.equal().is_some_and(|e| e.restored),
    );
    Ok(ctx.repo.backup(&spec)?.id)
}

/// Whether the project holds anything; an unreadable one is named.
pub(crate) fn project_has_files(meta: &Meta) -> Result<bool, String> {
    std::fs::read_dir(&meta.path)
        .map(|mut entries| entries.next().is_some())
        .map_err(|e| {
            format!(
                "its project directory {} cannot be read ({e})",
                meta.path.display()
            )
        })
}

/// Why a snapshot of the box's files now would be partial, before taking it: an unreadable
/// project, or an empty one that held files when this node last saw it equal a snapshot.
pub(crate) fn partial_before(meta: &Meta, copy: &CopyState) -> Option<String> {
    match project_has_files(meta) {
        Err(why) => Some(why),
        Ok(true) => None,
        Ok(false) => copy
            .project_had_files
            .unwrap_or(meta.last_snapshot.is_some())
            .then(|| {
                format!(
                    "its project directory {} is empty, but it held files at its last snapshot (an unmounted disk?)",
                    meta.path.display()
                )
            }),
    }
}

/// A copy part old, part new is never saved: the box's latest stays what the restore was
/// bringing, which is all the copy holds (nothing unsaved was in it when the restore began).
fn half_restored(name: &str, to: &SnapshotId) -> UserError {
    UserError::failed(
        format!(
            "box '{name}': not snapshotted: its copy on this node is half restored (an 'up' here was cut off while restoring snapshot {}), and holds nothing that snapshot lacks",
            to.short()
        ),
        format!(
            "run 'ag-box up {name}' to finish the restore; 'ag-box park {name}' then frees the node"
        ),
    )
}

/// A copy a rollback left behind (the box stopped here) is not the box's latest: saved as it,
/// it would undo the rollback.
fn rolled_back(meta: &Meta) -> UserError {
    let name = &meta.name;
    UserError::failed(
        format!(
            "box '{name}': not snapshotted: it was rolled back to snapshot {} while stopped here, and its copy here is still what it was before",
            meta.last_snapshot.as_ref().map_or("-", |s| s.id.short())
        ),
        format!(
            "run 'ag-box up {name}' to bring the copy to that snapshot (what changed since the rollback is kept as a fork), or 'ag-box park {name}' to free the node"
        ),
    )
}

/// A stopped copy that is not the box's latest ([`is_behind`]): a restore cut off (part old,
/// part new) or a rollback that pointed the record at an earlier snapshot. It is never saved
/// as the latest; what it may hold that no snapshot does is kept as a fork snapshot (returned),
/// so that the record can be left as it is: a rolled-back copy's changes since it was saved,
/// and a half-restored copy whole (this ag-box never starts one, an older one could have).
pub(crate) fn keep_what_is_behind(
    ctx: &Ctx,
    meta: &Meta,
    copy: &CopyState,
    epoch: u64,
) -> Result<Option<SnapshotId>> {
    let why = match &copy.relation {
        Relation::Stale(was) => {
            let now = digest::of(&ctx.spec(meta).local_copy())?;
            if was.still(&now) {
                return Ok(None);
            }
            "it changed after the rollback"
        }
        Relation::Restoring { .. } => "it is half restored (an older ag-box may have run it)",
        Relation::Unknown | Relation::Equals(_) => return Ok(None),
    };
    let fork = keep_as_fork(ctx, meta, epoch, copy)?;
    say!(
        "box '{}': its copy here is not its latest, and {why}; kept as fork snapshot {}",
        meta.name,
        fork.short()
    );
    Ok(Some(fork))
}

/// The copy here is not the box's latest: half restored, or stale after a rollback that
/// pointed the record at another snapshot (one cut off before it moved the record left the
/// copy the latest after all).
pub(crate) fn is_behind(copy: &CopyState, meta: &Meta) -> bool {
    match &copy.relation {
        Relation::Restoring { .. } => true,
        Relation::Stale(was) => meta.last_snapshot.as_ref().map(|s| &s.id) != Some(&was.snapshot),
        Relation::Unknown | Relation::Equals(_) => false,
    }
}

fn partial(name: &str, why: &str) -> UserError {
    UserError::failed(
        format!("box '{name}': not snapshotted as its latest: {why}"),
        format!(
            "fix that and run the command again, or add --accept-partial to count such a snapshot (e.g. 'ag-box park {name} --accept-partial')"
        ),
    )
}

/// A snapshot that would read in more changed bytes than `BOX_SNAPSHOT_ADD_MAX` is not taken:
/// a box filling its copy does not fill the store. Measured against the manifest this node
/// kept as the copy last equalled a snapshot (at its `up` or `park` here; every file counts when
/// it kept none), so it counts what changed since then, at least what this one adds.
fn refuse_above_bound(
    ctx: &Ctx,
    name: &str,
    copy: &CopyState,
    now: Option<&Manifest>,
    bound: u64,
) -> Result<()> {
    let Some(now) = now else {
        return Err(UserError::failed(
            format!("box '{name}': not snapshotted: a file name in it is not UTF-8, so what it adds cannot be measured against BOX_SNAPSHOT_ADD_MAX"),
            format!("rename that file, or add --accept-partial to take it (e.g. 'ag-box snapshot {name} --accept-partial')"),
        )
        .into());
    };
    let kept = CopyManifest::load(&ctx.config.state_dir, name);
    let changed = match copy.snapshot_began {
        Some(since) => delta::bytes_changed_since(now, since),
        None => delta::bytes_changed(kept.as_ref().map(|k| &k.entries), now),
    };
    if changed <= bound {
        return Ok(());
    }
    Err(UserError::failed(
        format!(
            "box '{name}': not snapshotted: {} of its files are new or changed{}, above BOX_SNAPSHOT_ADD_MAX ({})",
            history::size(changed),
            match (copy.snapshot_began, &kept) {
                (Some(_), _) => " since its last snapshot here".to_string(),
                (None, Some(k)) => format!(" since snapshot {}", k.snapshot.short()),
                (None, None) => String::new(),
            },
            history::size(bound)
        ),
        format!(
            "remove what should not be kept, raise BOX_SNAPSHOT_ADD_MAX, or add --accept-partial to take it (e.g. 'ag-box snapshot {name} --accept-partial')"
        ),
    )
    .into())
}

/// A snapshot read from a box that ran unpaused is counted only when all it holds is the box's
/// own: an entry of another owner means the box steered restic out of its trees mid-read.
fn refuse_foreign_owners(
    ctx: &Ctx,
    spec: &BoxSpec,
    roots: &[PathBuf],
    id: &SnapshotId,
    accept_partial: bool,
) -> Result<()> {
    let foreign = account::foreign_owned(&ctx.repo.listing(id)?, roots, spec.ids);
    if foreign.is_empty() || accept_partial {
        return Ok(());
    }
    // Printed escaped, as every error is.
    let shown: Vec<String> = foreign
        .iter()
        .take(3)
        .map(|p| p.display().to_string())
        .collect();
    let why = format!(
        "snapshot {} holds {} {} not owned by the box's user ({}{}); the box changed them while they were read",
        id.short(),
        foreign.len(),
        if foreign.len() == 1 {
            "entry"
        } else {
            "entries"
        },
        shown.join(", "),
        if foreign.len() > shown.len() {
            ", ..."
        } else {
            ""
        }
    );
    Err(partial(&spec.name, &why).into())
}

/// Snapshot the box's local files and renew its lease (or record a fork). A partial snapshot
/// (unreadable files, a missing or emptied project) never becomes the box's latest unless
/// `accept_partial`.
pub(crate) fn take(
    ctx: &Ctx,
    stored: &Stored,
    journal: &mut CopyJournal,
    accept_partial: bool,
) -> Result<Taken> {
    take_keeping(ctx, stored, journal, accept_partial, false)
}

/// A box's first snapshot (`track`, of its stopped copy), which also keeps the copy's
/// manifest as of it: the box's first park can then save only what changed since.
pub(crate) fn take_first(ctx: &Ctx, stored: &Stored, journal: &mut CopyJournal) -> Result<Taken> {
    take_keeping(ctx, stored, journal, false, true)
}

/// [`take`]; `keep`: the manifest of a stopped copy is kept as the snapshot's.
// One sequence, read top to bottom; each step names its failure and crash point.
#[allow(clippy::too_many_lines)]
fn take_keeping(
    ctx: &Ctx,
    stored: &Stored,
    journal: &mut CopyJournal,
    accept_partial: bool,
    keep: bool,
) -> Result<Taken> {
    let meta = &stored.meta;
    let node = &ctx.config.node;
    if let Relation::Stale(_) = journal.state().relation
        && !is_behind(journal.state(), meta)
    {
        // The record still names the snapshot the copy equals (a rollback cut off before it
        // moved the record): the copy is the latest after all.
        journal.record(CopyState::clear_stale)?;
    }
    if is_behind(journal.state(), meta) && ctx.runtime.is_active(&ctx.spec(meta)) {
        // Running, the box is what it is, whatever the state says (an older ag-box could start
        // a copy it had left half restored): what the snapshot saves is what runs.
        tracing::warn!(
            "box '{}': runs on a copy this node took for not its latest; saving it as it runs",
            meta.name
        );
        journal.record(|c| c.relation = Relation::Unknown)?;
    }
    let copy = journal.state().clone();
    match &copy.relation {
        Relation::Restoring { to } => return Err(half_restored(&meta.name, to).into()),
        Relation::Stale(_) => return Err(rolled_back(meta).into()),
        Relation::Unknown | Relation::Equals(_) => {}
    }
    if !accept_partial && let Some(why) = partial_before(meta, &copy) {
        return Err(partial(&meta.name, &why).into());
    }
    let had_files = project_has_files(meta).ok();
    let ours = meta
        .lease
        .as_ref()
        .filter(|l| &l.node == node)
        .map(|l| l.epoch);
    let Some(epoch) = copy.epoch.or(ours) else {
        return Err(not_up_here(&meta.name).into());
    };
    let holding = ours == Some(epoch);
    let box_spec = ctx.spec(meta);
    let roots = box_spec.local_copy();
    let running = ctx.runtime.is_active(&box_spec);
    // Paused, the box cannot swap what restic reads (nor what the walk reads) for a link.
    let paused = if running {
        ctx.runtime.pause(&box_spec).unwrap_or_else(|e| {
            tracing::warn!("box '{}': not paused for its snapshot: {e:#}", meta.name);
            None
        })
    } else {
        None
    };
    if paused.is_some() {
        crash::point("snapshot.paused");
    }
    // The system clock, not the world's: it is compared with the files' ctimes.
    let began = unix_nanos(SystemTime::now());
    // The manifest only where a bound asks what changed, or it is kept.
    let keep = keep && !running;
    let (digest_before, manifest) = if keep || ctx.config.snapshot_add_max.is_some() {
        digest::walk(&roots)?
    } else {
        (digest::of(&roots)?, None)
    };
    tracing::debug!("box '{}': walked its copy", meta.name);
    if holding && let Some(last) = unchanged_since_last(meta, &copy, &digest_before) {
        // Nothing to save: the lease is renewed with the snapshot it has.
        return renew_only(
            ctx,
            stored,
            journal,
            epoch,
            last,
            digest_before,
            accept_partial,
        );
    }
    // A stopped box does not change while it is saved: what is saved is what the digest says.
    let digest = (!running).then(|| digest_before.clone());
    let parent = copy.parent(meta.last_snapshot.as_ref());
    // (A box's first snapshot, at `track`, is the whole of it.)
    if let Some(bound) = ctx.config.snapshot_add_max
        && meta.last_snapshot.is_some()
        && !accept_partial
    {
        refuse_above_bound(ctx, &meta.name, &copy, manifest.as_ref(), bound)?;
    }
    // Tens of megabytes on a big tree, needed no more unless kept: not held through the backup
    // and the walks after it.
    let manifest = manifest.filter(|_| keep);
    let restored = copy.equal().is_some_and(|e| e.restored);
    let spec = backup_spec(ctx, &box_spec, epoch, !holding, parent, restored);
    let paths = spec.paths.clone();
    let backup = ctx.repo.backup(&spec)?;
    let raceable = running && paused.is_none();
    drop(paused);
    crash::point("snapshot.after-backup");
    let added = (backup.files_added, backup.bytes_added);
    let id = backup.id;
    if !backup.unreadable.is_empty() && !accept_partial {
        let why = format!(
            "restic could not read {} (snapshot {} holds the rest)",
            backup.unreadable.join("; "),
            id.short()
        );
        return Err(partial(&meta.name, &why).into());
    }
    if raceable {
        refuse_foreign_owners(ctx, &box_spec, &paths, &id, accept_partial)?;
    }
    let now = ctx.now();
    let snapshot = SnapshotRef {
        id,
        at: timestamp(now),
        node: node.clone(),
        epoch,
        paths: paths.clone(),
        on: None,
        same_as: None,
    };
    let (forked, record) = if holding {
        let ttl = ctx.config.lease_ttl;
        // The record as read before the backup: rewritten meanwhile, the write conflicts.
        update_record(ctx.store.as_ref(), &meta.name, Some(stored.clone()), |m| {
            Ok(
                match lease::renew(m, node, epoch, Some(snapshot.clone()), now, ttl) {
                    Ok(next) => Step::Write(next, None),
                    Err(lost) => Step::Keep(Some(lost)),
                },
            )
        })?
    } else {
        (
            Some(LeaseLost {
                now_held_by: meta.lease.clone(),
            }),
            stored.clone(),
        )
    };
    if let Some(lost) = &forked {
        let holder = lost.now_held_by.as_ref().map_or("nobody".to_string(), |l| {
            format!("node {} (epoch {})", l.node, l.epoch)
        });
        tracing::warn!(
            "box '{}': the lease is now held by {holder}; snapshot {} keeps this node's files as a fork and is not the box's latest",
            meta.name,
            snapshot.id.short()
        );
    }
    ctx.record_event(
        &meta.name,
        events::Step {
            verb: if forked.is_some() { "fork" } else { "snapshot" },
            epoch: Some(epoch),
            snapshot: Some(&snapshot.id),
            added: Some(added),
            ..Default::default()
        },
    );
    journal.record(|c| {
        c.epoch = Some(epoch);
        if forked.is_some() {
            c.forked();
        } else {
            let equal = Equal {
                snapshot: snapshot.id.clone(),
                paths,
                digest,
                running_digest: running.then(|| digest_before.clone()),
                restored: false,
            };
            c.saved(equal, had_files, began);
        }
    })?;
    if keep && forked.is_none() {
        keep_manifest(&ctx.config.state_dir, &meta.name, &snapshot.id, manifest);
    }
    Ok(Taken {
        snapshot,
        forked,
        digest_before,
        epoch,
        unchanged: false,
        record,
    })
}

/// A snapshot taken alone (the `snapshot` verb): the copy state loaded for it.
pub(crate) fn take_alone(ctx: &Ctx, stored: &Stored, accept_partial: bool) -> Result<Taken> {
    let mut copy = CopyState::journal(&ctx.config.state_dir, &stored.meta.name)?;
    take(ctx, stored, &mut copy, accept_partial)
}

/// Whether this node's copy of the box is still what its latest snapshot saved.
pub(crate) fn unchanged_since_latest(ctx: &Ctx, meta: &Meta) -> Result<bool> {
    let copy = CopyState::load(&ctx.config.state_dir, &meta.name)?;
    let digest = digest::of(&ctx.spec(meta).local_copy())?;
    Ok(unchanged_since_last(meta, &copy, &digest).is_some())
}

/// Nanoseconds since the Unix epoch (0 before it).
pub(crate) fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The box's last snapshot, when this copy is still what it saved: the copy equals it (as
/// restored, or saved stopped), or is what it was as that snapshot of it running began.
/// A quick park's changes are never kept as the latest by a snapshot: it takes the whole one.
fn unchanged_since_last(meta: &Meta, copy: &CopyState, now: &str) -> Option<SnapshotRef> {
    let last = meta.last_snapshot.as_ref().filter(|s| s.on.is_none())?;
    copy.equal()
        .is_some_and(|e| last.names(&e.snapshot) && e.still(now))
        .then(|| last.clone())
}

fn renew_only(
    ctx: &Ctx,
    stored: &Stored,
    journal: &mut CopyJournal,
    epoch: u64,
    last: SnapshotRef,
    digest_before: String,
    accept_partial: bool,
) -> Result<Taken> {
    let meta = &stored.meta;
    let node = &ctx.config.node;
    let at = ctx.now();
    let ttl = ctx.config.lease_ttl;
    let (forked, record) =
        update_record(ctx.store.as_ref(), &meta.name, Some(stored.clone()), |m| {
            Ok(
                match lease::renew(m, node, epoch, m.last_snapshot.clone(), at, ttl) {
                    Ok(next) => Step::Write(next, None),
                    Err(gone) => Step::Keep(Some(gone)),
                },
            )
        })?;
    if forked.is_some() {
        // Taken over meanwhile: a real snapshot keeps this node's files as a fork.
        journal.record(CopyState::distrust)?;
        return take(ctx, &record, journal, accept_partial);
    }
    tracing::info!(
        "box '{}': unchanged since snapshot {}; lease renewed",
        meta.name,
        last.id.short()
    );
    Ok(Taken {
        snapshot: last,
        forked: None,
        digest_before,
        epoch,
        unchanged: true,
        record,
    })
}
