//! `up` on this node: intent, lease, the restore it needs (keeping unsaved work as a fork
//! first), the start; a failure hands the lease back, a cut-off one is finished by the next.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};

use super::{Ctx, snapshot};
use crate::error::{Code, UserError};
use crate::plan::delta::{self, Delta, Manifest, PublishedRef};
use crate::plan::names::BoxName;
use crate::plan::sandbox::MainWindow;
use crate::plan::snapshot_id::SnapshotId;
use crate::plan::up::{self as plan, CopyFacts, CopyPlan, Known, RestoreFacts, Shortcut, Why};
use crate::plan::{account, text};
use crate::store::lease::{self, UpPlan};
use crate::store::meta::{Lease, Meta, SnapshotRef};
use crate::store::{Step, events, update, update_record};
use crate::sys::copy_state::{self, CopyJournal, CopyManifest, CopyState, PendingUp, Relation};
use crate::sys::restore::Clearing;
use crate::sys::{
    agent_home, crash, digest, host, interrupt, node_ca, restore, threads, working_copy,
};

pub(crate) fn held_elsewhere(name: &str, l: &Lease) -> UserError {
    UserError::new(
        Code::LeaseHeld,
        format!(
            "box '{name}' is up on node {} (lease epoch {}, last renewed {})",
            l.node, l.epoch, l.renewed_at
        ),
        format!(
            "run 'ag-box park {name}' on {}, or 'ag-box up {name} --force' if {} is gone",
            l.node, l.node
        ),
    )
}

pub(crate) fn being_dropped(name: &str) -> UserError {
    UserError::failed(
        format!("box '{name}' is being dropped (a 'drop' of it did not finish)"),
        format!("run 'ag-box drop {name} --yes' to finish it"),
    )
}

/// How `up` goes about it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct How {
    /// Take the lease from the node that holds it.
    pub force: bool,
    /// The agent starts a new conversation (`up --fresh`).
    pub fresh: bool,
}

/// How this run came to hold the lease, so a failure can hand it back.
enum Held {
    Fresh { epoch: u64, previous: Option<Lease> },
    Already { epoch: u64 },
}

impl Held {
    fn epoch(&self) -> u64 {
        match self {
            Held::Fresh { epoch, .. } | Held::Already { epoch } => *epoch,
        }
    }
}

/// `up` on this node: the lease, the restore it needs, the start. The caller checked the
/// tools and the store's leases.
// One sequence, read top to bottom; each step names its failure and crash point.
#[allow(clippy::too_many_lines)]
pub(crate) fn up_here(ctx: &Ctx, name: &BoxName, how: How) -> Result<()> {
    let How { force, fresh } = how;
    let _lock = ctx.lock(name, "up")?;
    // What another command changed while this one waited.
    let stored = ctx.tracked(name)?;
    let here = ctx.config.node.clone();
    let spec = ctx.spec(&stored.meta);
    if ctx.runtime.is_active(&spec) {
        let stray = |holder: &str, code| {
            UserError::new(
                code,
                format!("box '{name}' is running here, but {holder}"),
                format!(
                    "run 'ag-box park {name}' here to stop this copy (its files are kept as a fork snapshot), then 'ag-box up {name}'"
                ),
            )
        };
        return match &stored.meta.lease {
            Some(l) if l.node == here => {
                if let Ok(mut copy) = CopyState::journal(&ctx.config.state_dir, name) {
                    finish(name, &mut copy);
                }
                if fresh && spec.main != MainWindow::Shell {
                    return Err(UserError::usage(
                        format!("box '{name}' is already up on {here}: --fresh starts a new conversation only as the box starts"),
                        format!("start one in 'ag-box attach {name}', or 'ag-box park {name}' then 'ag-box up {name} --fresh'"),
                    )
                    .into());
                }
                say!("box '{name}' is already up on {here}");
                Ok(())
            }
            Some(l) => Err(stray(
                &format!("its lease is held by node {} (epoch {})", l.node, l.epoch),
                Code::LeaseHeld,
            )
            .into()),
            None => Err(stray("nobody holds its lease", Code::Failure).into()),
        };
    }
    // The intent first: an `up` cut off from here on is finished (or rolled back) by the next.
    let mut copy = CopyState::journal(&ctx.config.state_dir, name)?;
    let interrupted = copy.state().pending_up.is_some();
    if interrupted {
        say!("box '{name}': an earlier 'ag-box up' here did not finish; finishing it");
    } else {
        copy.record(|c| {
            c.pending_up = Some(PendingUp {
                previous: stored.meta.lease.clone(),
            });
        })?;
    }
    // The lease an interrupted `up` took goes back to whoever held it before.
    let previous = copy.state().pending_up.clone().and_then(|p| p.previous);
    crash::point("up.after-intent");
    let now = ctx.now();
    let ttl = ctx.config.lease_ttl;
    // A refusal (held elsewhere, being dropped) is decided on the record and takes nothing;
    // any other failure may hide a write that landed: then the intent stays for the next `up`.
    // Decided first on the record as read above, and written on its version.
    let (taken, _) = update_record(ctx.store.as_ref(), name, Some(stored), |m| {
        if m.dropping {
            return Ok(Step::Keep(Err(being_dropped(name))));
        }
        match lease::plan_up(m, &here, force) {
            UpPlan::HeldElsewhere(l) => Ok(Step::Keep(Err(held_elsewhere(name, &l)))),
            UpPlan::AlreadyOurs { epoch } => {
                Ok(Step::Keep(Ok((Held::Already { epoch }, m.clone()))))
            }
            plan => {
                if let UpPlan::TakeOver(l) = &plan {
                    tracing::warn!(
                        "taking box '{name}' from node {} by force: work there since its last snapshot forks and is not carried here",
                        l.node
                    );
                }
                let next = lease::acquire(m, &here, now, ttl);
                let epoch = next.lease.as_ref().map_or(0, |l| l.epoch);
                Ok(Step::Write(
                    next.clone(),
                    Ok((
                        Held::Fresh {
                            epoch,
                            previous: m.lease.clone(),
                        },
                        next,
                    )),
                ))
            }
        }
    })?;
    let (held, meta) = match taken {
        Ok(t) => t,
        Err(refused) => {
            finish(name, &mut copy);
            return Err(refused.into());
        }
    };
    crash::point("up.after-lease");
    if spec.egress.mode.isolated() {
        // For the credential broker's certificate, made as the box starts.
        node_ca::make_key_ahead();
    }
    let started = interrupt::check("the restore")
        .and_then(|()| own_ids(ctx, name, &meta))
        .and_then(|meta| prepare_and_start(ctx, &meta, &held, interrupted, fresh, &mut copy));
    if let Err(e) = started {
        let give_back = match &held {
            Held::Fresh { epoch, previous } => Some((*epoch, previous.clone())),
            Held::Already { epoch } if interrupted => Some((*epoch, previous)),
            Held::Already { .. } => None,
        };
        if let Some((epoch, previous)) = give_back {
            hand_back(ctx, name, epoch, previous.as_ref(), &mut copy);
        }
        return Err(e);
    }
    finish(name, &mut copy);
    let (epoch, taken_from) = match &held {
        Held::Fresh { epoch, previous } => (*epoch, previous.as_ref().filter(|l| l.node != here)),
        Held::Already { epoch } => (*epoch, None),
    };
    ctx.record_event(
        name,
        events::Step {
            verb: if taken_from.is_some() {
                "take-over"
            } else {
                "up"
            },
            epoch: Some(epoch),
            snapshot: meta.last_snapshot.as_ref().map(|s| &s.id),
            detail: taken_from.map(|l| {
                format!(
                    "took the lease from node {} (epoch {}) by force",
                    l.node, l.epoch
                )
            }),
            ..Default::default()
        },
    );
    say!("box '{name}' is up on {here}; attach with 'ag-box attach {name}'");
    Ok(())
}

/// The box's own ids, never an account of this node. A box tracked before each box had its
/// own uid (all ran as 1000, and so could reach each other's files and share per-uid limits)
/// gets one now, in its record, so every node agrees; its files are handed to it as it
/// starts. Done once this node holds the lease, so no node runs the box as the old ids.
fn own_ids(ctx: &Ctx, name: &str, meta: &Meta) -> Result<Meta> {
    let here = &ctx.config.node;
    let old = meta.ids();
    let meta = if old.own() {
        meta.clone()
    } else {
        let ids = super::free_ids(name, &ctx.store.list()?)?;
        let next = update(ctx.store.as_ref(), name, |m| {
            Ok(match &m.lease {
                Some(l) if l.node != *here => Step::Keep(Err(held_elsewhere(name, l))),
                _ if m.ids().own() => Step::Keep(Ok(m.clone())),
                _ => {
                    let next = Meta {
                        uid: Some(ids.uid),
                        gid: Some(ids.gid),
                        ..m.clone()
                    };
                    Step::Write(next.clone(), Ok(next))
                }
            })
        })??;
        if next.ids() == ids {
            say!(
                "box '{name}': now runs as its own uid {} (it ran as uid {}, like every box tracked before each had its own); its files are handed to it",
                ids.uid,
                old.uid
            );
        }
        next
    };
    let ids = meta.ids();
    if host::has_account(ids.uid) || host::has_account(ids.gid) {
        return Err(UserError::failed(
            format!(
                "box '{name}': its uid {} or gid {} is an account of this node; no box runs as one",
                ids.uid, ids.gid
            ),
            format!(
                "give it a free pair of {}-{}: 'ag-box set {name} uid=<n>' and 'gid=<n>'",
                account::BOX_IDS.start(),
                account::BOX_IDS.end()
            ),
        )
        .into());
    }
    Ok(meta)
}

/// The `up` under way here is over (done, or its lease handed back).
fn finish(name: &str, copy: &mut CopyJournal) {
    if let Err(e) = copy.record(|c| c.pending_up = None) {
        tracing::error!("box '{name}': could not record that 'up' finished: {e:#}");
    }
}

fn prepare_and_start(
    ctx: &Ctx,
    meta: &Meta,
    held: &Held,
    interrupted: bool,
    fresh: bool,
    copy: &mut CopyJournal,
) -> Result<()> {
    let state_dir = &ctx.config.state_dir;
    let mut spec = ctx.spec(meta);
    match &mut spec.main {
        MainWindow::Agent { fresh: new, .. } => *new = fresh,
        MainWindow::Shell if fresh => tracing::warn!(
            "box '{}' has no agent ('ag-box set {} agent=<agent>'): --fresh changes nothing",
            meta.name,
            meta.name
        ),
        MainWindow::Shell => {}
    }
    let roots = spec.local_copy();
    restore::recover_leftovers(&roots, &copy_state::swap_journal(state_dir, &meta.name))?;
    let copy_epoch = copy.state().epoch;
    let epoch = held.epoch();
    copy.record(|c| c.epoch = Some(epoch))?;
    let latest = meta.last_snapshot.as_ref();
    let facts = CopyFacts {
        held: matches!(held, Held::Already { .. }) && !interrupted,
        copy: known(copy.state(), latest),
        project_exists: meta.path.exists(),
        project_is_dir: meta.path.is_dir(),
    };
    let mut clearing = Clearing::done();
    let restored = match plan::copy(facts, latest) {
        CopyPlan::Start { clear_stale } => {
            if clear_stale {
                copy.record(CopyState::clear_stale)?;
            }
            if let Some(l) = latest.filter(|l| l.on.is_none())
                && let Some(changes) = &l.same_as
            {
                // Equal to the changes a whole snapshot replaced: equal to it.
                copy.record(|c| c.replaced(changes, &l.id, false))?;
            }
            None
        }
        CopyPlan::Missing => {
            return Err(UserError::failed(
                format!(
                    "box '{}': project directory {} is missing and there is no snapshot to restore",
                    meta.name,
                    meta.path.display()
                ),
                "recreate the directory, or 'ag-box track' it again",
            )
            .into());
        }
        CopyPlan::Restore {
            snapshot: s,
            why,
            keep_local_work: keep,
        } => {
            if why == Why::CopyGone {
                say!(
                    "box '{}': the local copy is gone; restoring snapshot {}",
                    meta.name,
                    s.id.short()
                );
            }
            let (over, cleared) = restore_for_up(
                ctx,
                meta,
                copy,
                s,
                &roots,
                keep.then_some(copy_epoch.unwrap_or(epoch)),
            )?;
            clearing = cleared;
            Some((s, over))
        }
    };
    agent_home::ensure(&spec)?;
    let reowned = agent_home::reown_project(&spec)?;
    tracing::debug!("box '{}': its agent home is ready", meta.name);
    let mut to_keep = None;
    if let Some((s, over)) = restored {
        // As restored (and made ready): what the copy is when it equals that snapshot. Where
        // only what changed was written, that is walked (and the agent home, which `ensure`
        // may touch), over the manifest the copy had.
        let (digest, manifest) = match over {
            Some((kept, mut written)) if !reowned => {
                written.push(spec.agent_home.root.clone());
                digest::walk_changed(&roots, kept, &written)?
            }
            _ => digest::walk(&roots)?,
        };
        tracing::debug!("box '{}': walked its restored copy", meta.name);
        // Its files' ctimes are the restore's: none of them is new to the snapshot.
        let began = snapshot::unix_nanos(SystemTime::now());
        copy.record(|c| {
            c.walked(digest);
            c.snapshot_began = Some(began);
        })?;
        to_keep = Some((s.id.clone(), manifest));
    }
    crash::point("up.before-start");
    interrupt::check("the start")?;
    start(ctx, meta, &spec, to_keep, clearing)
}

/// Start the box; meanwhile the manifest of its copy as restored (`to_keep`: tens of MB at
/// 200,000 files) is written to its file, and the restore's staging dir removed (`clearing`).
fn start(
    ctx: &Ctx,
    meta: &Meta,
    spec: &crate::plan::sandbox::BoxSpec,
    to_keep: Option<(SnapshotId, Option<Manifest>)>,
    clearing: Clearing,
) -> Result<()> {
    let mounts = spec.mounts(std::path::Path::exists);
    let bwrap_args = spec.bwrap_args(&mounts, crate::plan::sandbox::INFO_FD);
    let memory_max = meta
        .memory_max
        .as_deref()
        .or(ctx.config.memory_max.as_deref());
    let state_dir = &ctx.config.state_dir;
    std::thread::scope(|scope| {
        let keeping = to_keep.map(|(id, manifest)| {
            scope.spawn(move || {
                snapshot::keep_manifest(state_dir, &meta.name, &id, manifest);
                Ok(())
            })
        });
        let started = ctx.runtime.start(spec, &bwrap_args, memory_max, meta.nix);
        // The staging dir's removal, done.
        drop(clearing);
        // A manifest file not kept (only said) costs the next park its shortcut, not the box.
        if let Some(Err(e)) = keeping.map(|k| threads::joined(k, "writing the manifest's file")) {
            tracing::warn!("box '{}': {e:#}", meta.name);
        }
        started
    })
}

/// The manifest of a copy as walked before a restore wrote only what changed over it, and the
/// paths it wrote.
type WrittenOver = (Manifest, Vec<PathBuf>);

/// Restore `s` over this node's copy for `up`, keeping what may be unsaved in it first (as of
/// lease epoch `keep`, when it may hold any). Where only what changed was written over it:
/// the manifest of the copy as walked before, and the paths written; and the removal of the
/// staging dir under way.
fn restore_for_up(
    ctx: &Ctx,
    meta: &Meta,
    copy: &mut CopyJournal,
    s: &SnapshotRef,
    roots: &[PathBuf],
    keep: Option<u64>,
) -> Result<(Option<WrittenOver>, Clearing)> {
    let mut kept = None;
    let (equals, mut prestaged) = if let Some(epoch) = keep {
        // The copy is walked while what changed is fetched beside it, from the snapshot the
        // copy was last known to equal (used only if the walk says it still does); the walk's
        // manifest is kept for a walk of only what that restore changes.
        let guess = published_guess(ctx, meta, copy.state(), s, roots);
        let walking = {
            let roots = roots.to_vec();
            let keep_manifest = guess.is_some();
            std::thread::spawn(move || {
                digest::walk(&roots).map(|(digest, manifest)| {
                    tracing::debug!("walked the copy as it was");
                    (digest, manifest.filter(|_| keep_manifest))
                })
            })
        };
        let prestaged = guess.map(|(from, p)| Prestaged {
            staged: stage_published(ctx, meta, &from, s, roots, &p).map(|(dir, delta)| Staged {
                dir,
                delta,
                published: true,
            }),
            from,
        });
        let walked = || {
            let (digest, manifest) = walking
                .join()
                .map_err(|_| anyhow::anyhow!("the walk of the copy panicked"))??;
            kept = manifest;
            Ok(digest)
        };
        let found = keep_local_work(ctx, meta, copy.state(), epoch, walked);
        let (equals, found_equal) = found
            .inspect_err(|_| discard_prestaged(prestaged.as_ref()))?
            .map_or((None, false), |(e, equal)| (Some(e), equal));
        if !found_equal {
            // Kept as a fork (or no copy): its walk is no base for what the restore writes.
            kept = None;
        }
        // Not what the copy equals after all: gone before anything else is staged.
        let from = match (s.on.as_deref(), &equals) {
            (Some(whole), Some(e)) if whole.names(e) => Some(&whole.id),
            (Some(_), _) => None,
            (None, e) => e.as_ref(),
        };
        let prestaged = prestaged.filter(|p| {
            let serves = Some(&p.from) == from;
            if !serves {
                discard_prestaged(Some(p));
            }
            serves
        });
        (equals, prestaged)
    } else {
        (None, None)
    };
    crash::point("up.after-fork");
    let brought = interrupt::check("the restore")
        .and_then(|()| restore_copy(ctx, meta, copy, s, roots, equals.as_ref(), &mut prestaged));
    discard_prestaged(prestaged.as_ref());
    let brought = brought?;
    let had_files = std::fs::read_dir(&meta.path)
        .ok()
        .map(|mut e| e.next().is_some());
    copy.record(|c| c.restored(&s.id, brought.paths.clone(), had_files))?;
    // The walk's manifest serves where only what changed was written over the copy it walked:
    // this restore's own walk of the whole snapshot it wrote first, else the walk before it.
    let base = if brought.walked.is_some() {
        brought.walked
    } else {
        kept
    };
    let over = brought
        .over
        .zip(base)
        .map(|(written, base)| (base, written));
    Ok((over, brought.clearing))
}

/// What the plan reads of the copy's relation to the box's snapshots.
fn known(copy: &CopyState, latest: Option<&SnapshotRef>) -> Known {
    let current = latest.is_some_and(|s| copy.is_current(s));
    match copy.relation {
        Relation::Unknown => Known::Nothing,
        Relation::Equals(_) => Known::Equals { current },
        Relation::Stale(_) => Known::Stale { current },
        Relation::Restoring { .. } => Known::Restoring,
    }
}

/// What a restore left in place: the paths the snapshot holds, and, when only what changed
/// was written over a copy equal to a snapshot, the paths written (the rest of the copy is as
/// it was); and the removal of its staging dir, which the box's start need not wait for.
struct Brought {
    paths: Vec<PathBuf>,
    over: Option<Vec<PathBuf>>,
    /// The manifest of the copy as this restore walked it before writing `over` (a whole
    /// snapshot restored first); None: as walked before the restore began, if at all.
    walked: Option<Manifest>,
    clearing: Clearing,
}

impl Brought {
    fn whole(paths: Vec<PathBuf>) -> Brought {
        Brought {
            paths,
            over: None,
            walked: None,
            clearing: Clearing::done(),
        }
    }

    fn clearing(self, clearing: Clearing) -> Brought {
        Brought { clearing, ..self }
    }

    /// `delta` written over a copy equal to the snapshot it leads from.
    fn over(s: &SnapshotRef, delta: &Delta) -> Brought {
        let written = delta
            .fetch
            .iter()
            .chain(&delta.remove)
            .chain(delta.dirs.iter().map(|d| &d.path))
            .cloned()
            .collect();
        Brought {
            paths: s.paths.clone(),
            over: Some(written),
            walked: None,
            clearing: Clearing::done(),
        }
    }
}

/// Bring this node's copy to the box's latest, `s`. A quick park's changes are written over
/// the whole snapshot they lie on, once the copy is that snapshot (brought to it first when
/// it is not). Returns the paths now in place.
fn restore_copy(
    ctx: &Ctx,
    meta: &Meta,
    copy: &mut CopyJournal,
    s: &SnapshotRef,
    roots: &[PathBuf],
    equals: Option<&SnapshotId>,
    prestaged: &mut Option<Prestaged>,
) -> Result<Brought> {
    let Some(whole) = s.on.as_deref() else {
        return restore_whole(ctx, meta, copy, s, roots, equals, prestaged);
    };
    let name = &meta.name;
    // Restored here first: the manifest of the copy as that whole snapshot (None when a name
    // is not UTF-8), the base of the walk of what the changes then write.
    let mut whole_walked = None;
    if full_restore_asked() || !equals.is_some_and(|e| whole.names(e)) {
        let paths = restore_whole(ctx, meta, copy, whole, roots, equals, &mut None)?.paths;
        let had_files = std::fs::read_dir(&meta.path)
            .ok()
            .map(|mut e| e.next().is_some());
        // Walked: an `up` cut off before the changes are written finds the copy equal to the
        // snapshot they lie on, not work of its own to keep as a fork (that `up` walks it
        // again, so its manifest need not be kept on disk).
        let (digest, manifest) = digest::walk(roots)?;
        copy.record(|c| {
            c.restored(&whole.id, paths, had_files);
            c.walked(digest);
        })?;
        whole_walked = Some(manifest);
        crash::point("up.after-whole");
    }
    let staged = published_staged(ctx, meta, &whole.id, s, roots, prestaged);
    if let Some(staged) = staged
        && let Some(clearing) = restore_changes(meta, copy, s, roots, &whole.id, &staged)?
    {
        let brought = match whole_walked {
            // Walked whole once: what the changes wrote is walked over that.
            Some(Some(manifest)) => Brought {
                walked: Some(manifest),
                ..Brought::over(s, &staged.delta)
            },
            Some(None) => Brought::whole(s.paths.clone()),
            None => Brought::over(s, &staged.delta),
        };
        return Ok(brought.clearing(clearing));
    }
    Err(UserError::failed(
        format!(
            "box '{name}': its latest is what a quick park on {} saved over snapshot {} (changes snapshot {}), and they could not be written here; the copy holds snapshot {} or part of the changes, nothing unsaved",
            s.node,
            whole.id.short(),
            s.id.short(),
            whole.id.short()
        ),
        format!(
            "run 'ag-box up {name}' on {} (whose copy is the latest), or 'ag-box rollback {name} {} --to <dir>' to see that snapshot",
            s.node,
            whole.id.short()
        ),
    )
    .into())
}

/// Bring this node's copy to whole snapshot `s` by the cheapest way open
/// (`plan::up::shortcuts`: write what changed since `equals`, the snapshot the copy is known
/// to equal, or let restic 0.17+ restore in place), else restore into a staging dir and swap.
/// Returns the paths now in place.
fn restore_whole(
    ctx: &Ctx,
    meta: &Meta,
    copy: &mut CopyJournal,
    s: &SnapshotRef,
    roots: &[PathBuf],
    equals: Option<&SnapshotId>,
    prestaged: &mut Option<Prestaged>,
) -> Result<Brought> {
    let name = &meta.name;
    let published = equals.and_then(|from| published_from(ctx, meta, from, s, roots));
    let shortcuts = plan::shortcuts(RestoreFacts {
        equals_a_snapshot: equals.is_some(),
        published: published.is_some(),
        full: full_restore_asked(),
        fits_roots: fits_roots(s, roots),
        restores_in_place: ctx.repo.restores_in_place(),
    });
    // What a way that failed part-way wrote, the next one's list may not name: the copy is
    // then walked whole.
    let mut part_written = false;
    for way in shortcuts {
        let staged = match (way, equals, &published) {
            (Shortcut::Published, Some(from), Some(_)) => {
                published_staged(ctx, meta, from, s, roots, prestaged)
            }
            (Shortcut::Listed, Some(from), _) => {
                stage_listed(ctx, meta, from, s, roots).map(|(dir, delta)| Staged {
                    dir,
                    delta,
                    published: false,
                })
            }
            (Shortcut::Published | Shortcut::Listed, ..) => None,
            (Shortcut::InPlace, ..) => {
                say!(
                    "restoring box '{name}' from snapshot {} ({} by {}) in place: only what differs is written",
                    s.id.short(),
                    s.at,
                    s.node
                );
                copy.record(|c| c.begin_restore(&s.id))?;
                match restore_over(ctx, meta, s) {
                    Ok(()) => return Ok(Brought::whole(s.paths.clone())),
                    // A tree restic cannot bring over in place (a dir that became a link, say)
                    // is restored whole: the copy held nothing unsaved before this restore began.
                    Err(e) => {
                        interrupt::check("the restore").with_context(|| {
                            format!(
                                "the box stays stopped, and the next 'ag-box up {name}' finishes it"
                            )
                        })?;
                        tracing::warn!(
                            "box '{name}': {e:#}; restoring all of it beside the copy instead"
                        );
                    }
                }
                None
            }
        };
        if let (Some(staged), Some(from)) = (staged, equals) {
            if let Some(clearing) = restore_changes(meta, copy, s, roots, from, &staged)? {
                let brought = if part_written {
                    Brought::whole(s.paths.clone())
                } else {
                    Brought::over(s, &staged.delta)
                };
                return Ok(brought.clearing(clearing));
            }
            part_written = true;
        }
    }
    say!(
        "restoring box '{name}' from snapshot {} ({} by {})",
        s.id.short(),
        s.at,
        s.node
    );
    let spec = ctx.spec(meta);
    let journal = copy_state::swap_journal(&ctx.config.state_dir, name);
    restore::restore_in_place(ctx.repo.as_ref(), &s.id, &meta.path, &journal, &|staging| {
        agent_home::restored_paths(staging, &spec)
    })
    .map(Brought::whole)
    .with_context(|| format!("the box stays stopped, and the next 'ag-box up {name}' finishes it"))
}

/// `AG_BOX_FULL_RESTORE=1`: a copy the operator distrusts is replaced whole.
fn full_restore_asked() -> bool {
    std::env::var_os("AG_BOX_FULL_RESTORE").is_some_and(|v| v == "1")
}

/// What changed from the snapshot the copy equals, restored into a staging dir, and where it
/// goes.
struct Staged {
    dir: PathBuf,
    delta: Delta,
    /// As the parking node published it (else as restic listed it).
    published: bool,
}

/// Write only what changed from snapshot `from` to `s`, as `staged`; the staging dir is then
/// being removed. None: writing it failed (the copy is then a mix, nothing unsaved).
fn restore_changes(
    meta: &Meta,
    copy: &mut CopyJournal,
    s: &SnapshotRef,
    roots: &[PathBuf],
    from: &SnapshotId,
    staged: &Staged,
) -> Result<Option<Clearing>> {
    let name = &meta.name;
    let Staged {
        dir: staging,
        delta,
        published,
    } = staged;
    say!(
        "restoring box '{name}' from snapshot {} ({} by {}) in place: {} changed since snapshot {}, {} removed{}{}",
        s.id.short(),
        s.at,
        s.node,
        text::count(delta.fetch.len(), "path"),
        from.short(),
        delta.remove.len(),
        match delta.dirs.len() {
            0 => String::new(),
            1 => ", 1 dir with another mode or owner".to_string(),
            n => format!(", {n} dirs with another mode or owner"),
        },
        if *published {
            format!(", as {} published them", s.node)
        } else {
            String::new()
        }
    );
    copy.record(|c| c.begin_restore(&s.id))?;
    match restore::apply_delta(staging, roots, delta) {
        Ok(clearing) => Ok(Some(clearing)),
        Err(e) => {
            tracing::warn!(
                "box '{name}': restoring only what changed failed ({e:#}); restoring all of it"
            );
            Ok(None)
        }
    }
}

/// A staging dir for what changed; None (with a warning) when it cannot be made.
fn staging(meta: &Meta) -> Option<PathBuf> {
    restore::fresh_staging(&meta.path)
        .map_err(|e| tracing::warn!("box '{}': {e:#}", meta.name))
        .ok()
}

/// Drop what was staged of a delta that is not used.
fn discard(staging: &Path) {
    if let Err(e) = restore::remove_any(staging) {
        tracing::warn!("removing {}: {e}", staging.display());
    }
}

/// What changed up to the box's latest as its parking node published it, restored into a
/// staging dir while the copy is walked, from `from`: the snapshot the copy was last known to
/// equal (or, for changes over a whole snapshot, that one).
struct Prestaged {
    from: SnapshotId,
    /// None: staged, and found not to serve.
    staged: Option<Staged>,
}

/// What the box's parking node published as changed since the snapshot the copy was last
/// known to equal (or, for changes over a whole snapshot, that one), to fetch while the copy is
/// walked; None where nothing was published from there.
fn published_guess(
    ctx: &Ctx,
    meta: &Meta,
    copy: &CopyState,
    s: &SnapshotRef,
    roots: &[PathBuf],
) -> Option<(SnapshotId, PublishedRef)> {
    // Staged inside the project (a mount point), it would change what the walk reads.
    if full_restore_asked() || restore::stages_inside(&meta.path) {
        return None;
    }
    let guess = &copy.equal()?.snapshot;
    let from = match s.on.as_deref() {
        Some(whole) if whole.names(guess) => whole.id.clone(),
        Some(_) => return None,
        None => guess.clone(),
    };
    let p = published_from(ctx, meta, &from, s, roots)?;
    Some((from, p))
}

/// What changed since `from` as published, staged: fetched beforehand (or found not to serve
/// then), else now.
fn published_staged(
    ctx: &Ctx,
    meta: &Meta,
    from: &SnapshotId,
    s: &SnapshotRef,
    roots: &[PathBuf],
    prestaged: &mut Option<Prestaged>,
) -> Option<Staged> {
    if let Some(p) = prestaged.take_if(|p| p.from == *from) {
        return p.staged;
    }
    let p = published_from(ctx, meta, from, s, roots)?;
    stage_published(ctx, meta, from, s, roots, &p).map(|(dir, delta)| Staged {
        dir,
        delta,
        published: true,
    })
}

/// What was fetched beforehand and not used.
fn discard_prestaged(prestaged: Option<&Prestaged>) {
    if let Some(staged) = prestaged.and_then(|p| p.staged.as_ref()) {
        discard(&staged.dir);
    }
}

/// What the node that parked `s` published as changed since `from`, when that is the snapshot
/// this node's copy equals: its changes snapshot restored into a staging dir, and the list of
/// what changed that it holds.
fn published_from(
    ctx: &Ctx,
    meta: &Meta,
    from: &SnapshotId,
    s: &SnapshotRef,
    roots: &[PathBuf],
) -> Option<PublishedRef> {
    if !fits_roots(s, roots) {
        return None;
    }
    let published = match ctx.store.delta(&meta.name) {
        Ok(p) => p?,
        Err(e) => {
            tracing::warn!(
                "box '{}': could not read what changed up to snapshot {}: {e:#}",
                meta.name,
                s.id.short()
            );
            return None;
        }
    };
    published
        .leads(from, s.published_as(), roots)
        .then_some(published)
}

/// The changes snapshot `published` names, restored into a staging dir, and the list of what
/// changed that it holds, checked; None (staging removed) when it cannot serve.
fn stage_published(
    ctx: &Ctx,
    meta: &Meta,
    from: &SnapshotId,
    s: &SnapshotRef,
    roots: &[PathBuf],
    published: &PublishedRef,
) -> Option<(PathBuf, Delta)> {
    let name = &meta.name;
    let staging = staging(meta)?;
    let staged = ctx
        .repo
        .restore_changes(name, published, &staging)
        .and_then(|()| {
            tracing::debug!("the changes are restored into staging");
            restore::read_published(&staging, &published.list)
        })
        .and_then(|list| {
            delta::usable(&list, from, &published.list_to(), roots)
                .context("its list names another snapshot, or paths outside the box")
        });
    match staged {
        Ok(delta) => Some((staging, delta)),
        Err(e) => {
            tracing::warn!(
                "box '{name}': what was published as changed up to snapshot {} is not used: {e:#}",
                s.id.short()
            );
            discard(&staging);
            None
        }
    }
}

/// What changed from snapshot `from` to `s` as restic lists it, fetched into a staging dir;
/// None when restic's own restore must do (too many changes, restic failed).
fn stage_listed(
    ctx: &Ctx,
    meta: &Meta,
    from: &SnapshotId,
    s: &SnapshotRef,
    roots: &[PathBuf],
) -> Option<(PathBuf, Delta)> {
    if is_changes(ctx, &meta.name, from) {
        // A quick park's changes hold only what changed: restic's diff from them lists the
        // rest of the box as removed.
        return None;
    }
    let listed = match ctx.repo.changes(from, &s.id) {
        Ok((changes, listed)) => delta::plan(&changes, roots)
            .and_then(|d| delta::with_attrs(d, &listed, roots, &restore::mode_and_owner)),
        Err(e) => {
            tracing::warn!(
                "could not list what changed from snapshot {} to {}: {e:#}",
                from.short(),
                s.id.short()
            );
            None
        }
    };
    let delta = listed?;
    let staging = staging(meta)?;
    if delta.fetch.is_empty() {
        return Some((staging, delta));
    }
    match ctx.repo.restore_only(&s.id, &staging, &delta.fetch) {
        Ok(()) => Some((staging, delta)),
        Err(e) => {
            tracing::warn!(
                "box '{}': fetching what changed in snapshot {} failed ({e:#}); restoring all of it",
                meta.name,
                s.id.short()
            );
            discard(&staging);
            None
        }
    }
}

/// Whether snapshot `id` of box `name` is a changes snapshot (or cannot be told apart from
/// one): whatever is none of the box's whole snapshots.
fn is_changes(ctx: &Ctx, name: &str, id: &SnapshotId) -> bool {
    match ctx.repo.whole_snapshots(name) {
        Ok(whole) => !whole.contains(id),
        Err(e) => {
            tracing::warn!("could not list the snapshots of box '{name}': {e:#}");
            true
        }
    }
}

/// restic brings each path of `s` over the copy in place.
fn restore_over(ctx: &Ctx, meta: &Meta, s: &SnapshotRef) -> Result<()> {
    let excludes = ctx.spec(meta).agent_home.snapshot_excludes();
    s.paths.iter().try_for_each(|path| {
        ctx.repo
            .restore_path(&s.id, path, &excludes, &working_copy::exclude_files())
            .with_context(|| format!("restoring {} in place", path.display()))?;
        crash::point("restore.mid-in-place");
        Ok(())
    })
}

/// The snapshot holds exactly paths this node keeps, the project among them (held here).
fn fits_roots(s: &SnapshotRef, roots: &[PathBuf]) -> bool {
    roots.first().is_some_and(|project| {
        s.paths.contains(project) && s.paths.iter().all(|p| roots.contains(p)) && project.is_dir()
    })
}

/// Before a restore replaces this node's copy: unless it still is what this node last
/// snapshotted or restored, it may hold work in no snapshot, so it is kept as a fork snapshot.
/// Returns the snapshot the copy now equals (None: there is no copy), and whether it was found
/// equal to it as this node last saw it (false: it was kept as that fork snapshot).
fn keep_local_work(
    ctx: &Ctx,
    meta: &Meta,
    copy: &CopyState,
    epoch: u64,
    walked: impl FnOnce() -> Result<String>,
) -> Result<Option<(SnapshotId, bool)>> {
    let roots = ctx.spec(meta).local_copy();
    if roots.iter().all(|p| std::fs::symlink_metadata(p).is_err()) {
        return Ok(None);
    }
    let spec = ctx.spec(meta);
    if std::fs::symlink_metadata(&spec.project).is_err()
        && agent_home_as_kept(ctx, &meta.name, &spec.agent_home.root)
    {
        say!(
            "box '{}': its project directory {} is gone on this node, its agent home as last saved; nothing here to keep",
            meta.name,
            spec.project.display()
        );
        return Ok(None);
    }
    // As last saved stopped or restored, or as the last snapshot of it running began.
    let now = walked()?;
    tracing::debug!("box '{}': walked its copy", meta.name);
    if let Some(e) = copy.equal().filter(|e| e.still(&now)) {
        return Ok(Some((e.snapshot.clone(), true)));
    }
    ctx.repo.ensure_repo()?;
    let id = snapshot::keep_as_fork(ctx, meta, epoch, copy).with_context(|| {
        format!(
            "box '{}': keeping this node's copy before the restore failed; nothing was replaced",
            meta.name
        )
    })?;
    say!(
        "box '{}': this node's copy may hold work in no snapshot; kept it as fork snapshot {} before restoring",
        meta.name,
        id.short()
    );
    Ok(Some((id, false)))
}

/// Whether the agent home at `root` is entry for entry as the manifest this node kept at the
/// box's last `up` or `park` here says (so it holds nothing a snapshot lacks).
fn agent_home_as_kept(ctx: &Ctx, name: &str, root: &Path) -> bool {
    let Some(kept) = CopyManifest::load(&ctx.config.state_dir, name) else {
        return false;
    };
    let Ok((_, Some(now))) = digest::walk(&[root.to_path_buf()]) else {
        return false;
    };
    let before: Vec<(&String, &String)> = kept
        .entries
        .iter()
        .filter(|(p, _)| Path::new(p.as_str()).starts_with(root))
        .collect();
    before.len() == now.len() && before.into_iter().eq(now.iter())
}

/// A failed `up` must not leave the lease taken.
fn hand_back(ctx: &Ctx, name: &str, epoch: u64, previous: Option<&Lease>, copy: &mut CopyJournal) {
    let here = ctx.config.node.clone();
    let res = update(ctx.store.as_ref(), name, |m| {
        Ok(match &m.lease {
            Some(l) if l.node == here && l.epoch == epoch && m.lease.as_ref() != previous => {
                Step::Write(
                    Meta {
                        lease: previous.cloned(),
                        ..m.clone()
                    },
                    (),
                )
            }
            _ => Step::Keep(()),
        })
    });
    let forget = copy.record(|c| {
        c.epoch = previous.filter(|l| l.node == here).map(|l| l.epoch);
        c.pending_up = None;
    });
    if let Err(e) = res.and(forget) {
        tracing::error!(
            "box '{name}': could not hand back the lease after the failed start: {e:#}"
        );
    }
}
