//! `fork`: new boxes made on this node from one whole snapshot of another: each its own record
//! (naming where it came from), uid, lease and agent home, its project at its own path, the
//! parent's conversations made its own, and its first snapshot; then this node lets it go, for
//! `up` to start it where scheduling says (docs/design.md "Fork").

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::track::{Tracked, already_tracked, refuse_overlap, undo};
use super::{Ctx, free_ids, snapshot};
use crate::error::UserError;
use crate::plan::fork::Sibling;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::lease::{self, timestamp};
use crate::store::meta::{ForkedFrom, Meta};
use crate::store::{self, Step, events, update};
use crate::sys::box_tree::Tree;
use crate::sys::copy_state::{CopyJournal, CopyState};
use crate::sys::{agent_home, fork_files, interrupt, privs, restore};

/// Refuse the fork before anything is made: a sibling's name taken, its path or agent home
/// already there, or its path inside or around another box.
pub(crate) fn refuse(ctx: &Ctx, siblings: &[Sibling]) -> Result<()> {
    let existing = ctx.store.list()?;
    let mut others: Vec<(String, PathBuf)> = existing
        .iter()
        .map(|m| (m.name.clone(), m.path.clone()))
        .collect();
    for s in siblings {
        if existing.iter().any(|m| m.name == *s.name) {
            return Err(already_tracked(&s.name).into());
        }
        if std::fs::symlink_metadata(&s.path).is_ok() {
            return Err(UserError::usage(
                format!(
                    "{} exists: box '{}' needs a new dir there",
                    s.path.display(),
                    s.name
                ),
                "pick another name for the fork, or move that dir away",
            )
            .into());
        }
        let home = crate::plan::agent_home::root_for(&ctx.config.state_dir, &s.name);
        if std::fs::symlink_metadata(&home).is_ok() {
            return Err(UserError::usage(
                format!(
                    "an agent home for box '{}' is left on this node at {}",
                    s.name,
                    home.display()
                ),
                "pick another name for the fork, or remove that dir",
            )
            .into());
        }
        refuse_overlap(
            ctx,
            &s.name,
            &s.path,
            others.iter().map(|(n, p)| (n.as_str(), p.as_path())),
        )?;
        others.push((s.name.to_string(), s.path.clone()));
    }
    Ok(())
}

/// Make `siblings` of box `parent` from its whole snapshot `from`, on this node, each holding
/// this node's lease with its first snapshot taken. Those made before a failure stay (each is
/// whole); the failed one is undone.
pub(crate) fn fork(
    ctx: &Ctx,
    parent: &Meta,
    from: &SnapshotId,
    siblings: &[Sibling],
) -> Result<Vec<Tracked>> {
    let local = ctx.config.state_dir.join("local");
    std::fs::create_dir_all(&local).with_context(|| format!("creating {}", local.display()))?;
    // Only root may enter it (0700): nothing of a box reaches what is staged.
    let staging = tempfile::Builder::new()
        .prefix("fork-")
        .tempdir_in(&local)
        .with_context(|| format!("making a staging dir in {}", local.display()))?;
    ctx.repo.ensure_repo()?;
    ctx.repo.restore(from, staging.path()).with_context(|| {
        format!(
            "restoring snapshot {} of box '{}'",
            from.short(),
            parent.name
        )
    })?;
    let under = |p: &Path| staging.path().join(p.strip_prefix("/").unwrap_or(p));
    let staged = Staged {
        project: under(&parent.path),
        home: under(&ctx.spec(parent).agent_home.root),
    };
    if !staged.project.is_dir() {
        return Err(UserError::failed(
            format!(
                "snapshot {} of box '{}' holds no {}",
                from.short(),
                parent.name,
                parent.path.display()
            ),
            format!(
                "fork another snapshot: 'ag-box history {}' lists them",
                parent.name
            ),
        )
        .into());
    }
    let mut made: Vec<Tracked> = Vec::new();
    for (i, s) in siblings.iter().enumerate() {
        let keep = i + 1 < siblings.len();
        match make_one(ctx, parent, from, &staged, s, keep) {
            Ok(t) => made.push(t),
            Err(e) if made.is_empty() => return Err(e),
            Err(e) => {
                let names: Vec<&str> = made.iter().map(|t| t.meta.name.as_str()).collect();
                return Err(e.context(format!(
                    "forked {} before this failed (parked: 'ag-box up <box>' starts one)",
                    names.join(", ")
                )));
            }
        }
    }
    ctx.record_event(
        &parent.name,
        events::Step {
            verb: "fork",
            snapshot: Some(from),
            detail: Some(format!(
                "into {}",
                siblings
                    .iter()
                    .map(|s| s.name.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            ..Default::default()
        },
    );
    Ok(made)
}

/// The parent's project and agent home as restored in the staging dir.
struct Staged {
    project: PathBuf,
    home: PathBuf,
}

/// One sibling: its files (handed to its own uid), then its record (this node's lease), then
/// its first snapshot. `keep`: the staged files serve another sibling after it (copied, not
/// moved). Cut off before its record, a fork leaves files a new `fork` refuses to overwrite
/// (naming them); after it, a whole copy that `up` may start. A failure removes what this
/// made, and only that.
fn make_one(
    ctx: &Ctx,
    parent: &Meta,
    from: &SnapshotId,
    staged: &Staged,
    s: &Sibling,
    keep: bool,
) -> Result<Tracked> {
    let name = &s.name;
    let _lock = ctx.lock(name, "fork")?;
    let existing = ctx.store.list()?;
    if existing.iter().any(|m| m.name == **name) {
        return Err(already_tracked(name).into());
    }
    let ids = free_ids(name, &existing)?;
    let home = crate::plan::agent_home::root_for(&ctx.config.state_dir, name);
    let mut made = Vec::new();
    let placed = place_files(staged, parent, s, &home, keep, ids, &mut made)
        .and_then(|()| interrupt::check("the fork"));
    if let Err(e) = placed {
        remove_made(name, &made);
        return Err(e.context(format!("box '{name}': not forked; nothing of it is kept")));
    }
    let now = ctx.now();
    let fresh = Meta {
        name: name.to_string(),
        path: s.path.clone(),
        created_at: timestamp(now),
        pinned_node: None,
        uid: Some(ids.uid),
        gid: Some(ids.gid),
        lease: None,
        last_snapshot: None,
        attention: None,
        dropping: false,
        op: None,
        forked_from: Some(ForkedFrom {
            parent: parent.name.clone(),
            snapshot: from.clone(),
        }),
        ..parent.clone()
    };
    let meta = lease::acquire(&fresh, &ctx.config.node, now, ctx.config.lease_ttl);
    let created = match store::create(ctx.store.as_ref(), meta) {
        Ok(Some(meta)) => Ok(meta),
        Ok(None) => Err(already_tracked(name).into()),
        Err(e) => Err(e),
    };
    let meta = match created {
        Ok(meta) => meta,
        Err(e) => {
            remove_made(name, &made);
            return Err(e);
        }
    };
    let epoch = meta.lease.as_ref().map_or(1, |l| l.epoch);
    let spec = ctx.spec(&meta);
    let first = |copy: &mut CopyJournal| {
        agent_home::ensure(&spec)
            .and_then(|()| ctx.tracked(name))
            .and_then(|stored| snapshot::take_first(ctx, &stored, copy))
    };
    let started = CopyState {
        epoch: Some(epoch),
        ..CopyState::default()
    }
    .start_journal(&ctx.config.state_dir, name);
    let (taken, mut copy) = match started.and_then(|mut c| first(&mut c).map(|t| (t, c))) {
        Ok(done) => done,
        Err(e) => {
            undo(ctx, name);
            remove_made(name, &made);
            return Err(e.context(format!("box '{name}': not forked; nothing of it is kept")));
        }
    };
    let pinned = Tree::open(&s.path)
        .and_then(|t| t.kind(Path::new(".auth-secret")))
        .is_ok_and(|k| k.is_some());
    if pinned {
        tracing::warn!(
            "box '{name}': its project holds .auth-secret, which pins its parent to a node; the fork is not pinned"
        );
    }
    ctx.record_event(
        name,
        events::Step {
            verb: "fork",
            epoch: Some(epoch),
            snapshot: Some(&taken.snapshot.id),
            detail: Some(format!(
                "from box '{}' at snapshot {}, at {}",
                parent.name,
                from.short(),
                s.path.display()
            )),
            ..Default::default()
        },
    );
    let_go(ctx, name, epoch, &mut copy)?;
    Ok(Tracked {
        meta,
        snapshot: taken.snapshot.id,
    })
}

/// What a failed fork of `name` made, removed (never followed into: std's removal is
/// link-safe).
fn remove_made(name: &str, made: &[PathBuf]) {
    for path in made {
        if let Err(e) = restore::remove_any(path) {
            tracing::warn!("box '{name}': removing {}: {e}", path.display());
        }
    }
}

/// The staged project at the sibling's path, and the staged agent home (its conversations
/// made the sibling's) at `home`, through a dir beside it so a half-made one is never there;
/// both handed to `ids`. `made` names each path as this creates it.
fn place_files(
    staged: &Staged,
    parent: &Meta,
    s: &Sibling,
    home: &Path,
    keep: bool,
    ids: crate::plan::account::Ids,
    made: &mut Vec<PathBuf>,
) -> Result<()> {
    for path in [&s.path, home] {
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(UserError::usage(
                format!(
                    "{} exists: box '{}' needs a new dir there",
                    path.display(),
                    s.name
                ),
                "pick another name for the fork, or move that dir away",
            )
            .into());
        }
    }
    made.push(s.path.clone());
    fork_files::place(&staged.project, &s.path, keep)?;
    privs::give_copied_tree(&s.path, ids)?;
    if !staged.home.is_dir() {
        tracing::warn!(
            "box '{}': the snapshot holds no agent home of box '{}': it starts without its conversations",
            s.name,
            parent.name
        );
        return Ok(());
    }
    let homes = home.parent().unwrap_or(home);
    std::fs::create_dir_all(homes).with_context(|| format!("creating {}", homes.display()))?;
    std::fs::set_permissions(homes, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting the mode of {}", homes.display()))?;
    let incoming = homes.join(format!(".{}.new", s.name));
    restore::remove_any(&incoming).with_context(|| format!("removing {}", incoming.display()))?;
    made.push(incoming.clone());
    fork_files::place(&staged.home, &incoming, keep)?;
    // What the parent's box made of its home may stop this (a link where a dir was): the
    // fork is still whole, its agent then starts a new conversation.
    match fork_files::rekey_home(&incoming, &parent.path, &s.path) {
        Ok(n) => tracing::debug!("box '{}': {n} session store(s) made its project's", s.name),
        Err(e) => tracing::warn!(
            "box '{}': its parent's conversations were not all made its own ({e:#}); its agent may start afresh",
            s.name
        ),
    }
    privs::give_copied_tree(&incoming, ids)?;
    std::fs::rename(&incoming, home)
        .with_context(|| format!("moving {} into place", home.display()))?;
    made.pop();
    made.push(home.to_path_buf());
    Ok(())
}

/// This node lets the new box go (its copy stays, equal to its first snapshot), so `up`
/// schedules it like any parked box.
fn let_go(ctx: &Ctx, name: &str, epoch: u64, copy: &mut CopyJournal) -> Result<()> {
    let node = &ctx.config.node;
    let lost = update(ctx.store.as_ref(), name, |m| {
        Ok(match lease::release(m, node, epoch, None) {
            Ok(next) => Step::Write(next, None),
            Err(lost) => Step::Keep(Some(lost)),
        })
    })?;
    if let Some(lost) = lost {
        tracing::warn!(
            "box '{name}': its lease was taken by {} as it was forked",
            lost.now_held_by.map_or("nobody".into(), |l| l.node)
        );
        return Ok(());
    }
    copy.record(|c| c.epoch = None)
}
