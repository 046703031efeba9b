//! `up <name> [--node N] [--force]`: take the lease, restore if needed, start the box.

use anyhow::{Context, Result};

use super::{Ctx, probe, require_tools, snapshot};
use crate::error::{ChildExit, Code, UserError};
use crate::plan::{schedule, tmux};
use crate::store::lease::{self, UpPlan};
use crate::store::meta::{Lease, Meta};
use crate::store::{Step, Stored, update};
use crate::sys::copy_state::{CopyState, PendingUp};
use crate::sys::nodes::Nodes;
use crate::sys::restic::Restic;
use crate::sys::restic::short;
use crate::sys::{agent_home, cmd, restore};
use crate::sys::{crash, digest, interrupt};

fn held_elsewhere(name: &str, l: &Lease) -> UserError {
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

fn being_dropped(name: &str) -> UserError {
    UserError::failed(
        format!("box '{name}' is being dropped (a 'drop' of it did not finish)"),
        format!("run 'ag-box drop {name} --yes' to finish it"),
    )
}

/// How this run came to hold the lease, so a failure can hand it back.
enum Held {
    Fresh { epoch: u64, previous: Option<Lease> },
    Already { epoch: u64 },
}

pub fn run(name: &str, node: Option<&str>, force: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let stored = ctx.tracked(name)?;
    if stored.meta.dropping {
        return Err(being_dropped(name).into());
    }
    let here = ctx.config.node.clone();
    if let (Some(pin), Some(n)) = (&stored.meta.pinned_node, node)
        && pin != n
    {
        return Err(UserError::usage(
            format!("box '{name}' is pinned to node {pin} (it holds a node-specific .auth-secret)"),
            format!("run 'ag-box up {name}' without --node, or on {pin}"),
        )
        .into());
    }
    let target = match (node, &stored.meta.pinned_node) {
        (Some(n), _) => n.to_string(),
        (None, Some(pin)) => pin.clone(),
        (None, None) => match lease::plan_up(&stored.meta, &here, force) {
            UpPlan::HeldElsewhere(l) => return Err(held_elsewhere(name, &l).into()),
            UpPlan::AlreadyOurs { .. } => here.clone(),
            UpPlan::Acquire | UpPlan::TakeOver(_) => schedule(&ctx)?,
        },
    };
    if target != here {
        return remote_up(&ctx, name, &target, force);
    }
    up_here(&ctx, stored, force)
}

/// The node with the most memory among those that answer (this one alone without a nodes file).
fn schedule(ctx: &Ctx) -> Result<String> {
    let here = &ctx.config.node;
    if !ctx.config.nodes.iter().any(|n| n.ssh_alias.is_some()) {
        return Ok(here.clone());
    }
    let mut nodes = Nodes::new()?;
    let candidates = nodes.probe_all(&ctx.config.nodes, probe::reply(ctx)?);
    let choice = schedule::choose(&candidates, env!("CARGO_PKG_VERSION"), here).map_err(|why| {
        UserError::failed(
            format!("no node can take the box: {why}"),
            "check 'ag-box status' and ssh to the nodes",
        )
    })?;
    for line in &choice.skipped {
        tracing::warn!("{line}");
    }
    tracing::info!("scheduling on node {} (most memory available)", choice.node);
    Ok(choice.node)
}

fn remote_up(ctx: &Ctx, name: &str, target: &str, force: bool) -> Result<()> {
    if ctx.config.s3.is_none() {
        return Err(UserError::usage(
            format!(
                "node '{target}' is not this node ({}), and the local store is not shared",
                ctx.config.node
            ),
            format!("run 'ag-box up {name}' on {target}, or configure the S3 store on every node"),
        )
        .into());
    }
    let entry = ctx
        .config
        .nodes
        .iter()
        .find(|n| n.name == target && n.ssh_alias.is_some())
        .ok_or_else(|| {
            UserError::usage(
                format!("node '{target}' is not in the nodes file with an ssh alias"),
                "add '<node> <ssh-alias>' to ~/.config/box/nodes; see nodes.example",
            )
        })?;
    say!("starting box '{name}' on node {target}");
    match Nodes::new()?.remote_up(entry, name, force)? {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}

/// A `nix: true` box needs nix and the base flake on this node.
fn require_nix(name: &str) -> Result<()> {
    let fix = format!(
        "install Nix (https://install.determinate.systems/nix) and run install.sh, or 'ag-box set {name} nix=false'"
    );
    if cmd::which("nix").is_none() {
        return Err(UserError::new(
            Code::ToolMissing,
            format!("box '{name}' has nix: true, but nix is not installed on this node"),
            fix,
        )
        .into());
    }
    if !std::path::Path::new(tmux::BASE_FLAKE)
        .join("flake.nix")
        .exists()
    {
        return Err(UserError::new(
            Code::ToolMissing,
            format!(
                "box '{name}' has nix: true, but {} has no flake.nix",
                tmux::BASE_FLAKE
            ),
            fix,
        )
        .into());
    }
    Ok(())
}

fn up_here(ctx: &Ctx, stored: Stored, force: bool) -> Result<()> {
    let name = stored.meta.name.clone();
    let name = name.as_str();
    let _lock = ctx.lock_box(name, "up")?;
    interrupt::arm();
    // What another command changed while this one waited.
    let stored = ctx.tracked(name)?;
    let here = ctx.config.node.clone();
    require_tools(&["restic"])?;
    require_tools(ctx.runtime.required_tools())?;
    if stored.meta.nix {
        require_nix(name)?;
    }
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
                finish(ctx, name);
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
    ctx.require_safe_leases()?;
    // The intent first: an `up` cut off from here on is finished (or rolled back) by the next.
    let state_dir = &ctx.config.state_dir;
    let mut copy = CopyState::load(state_dir, name)?;
    let interrupted = copy.pending_up.is_some();
    if interrupted {
        say!("box '{name}': an earlier 'ag-box up' here did not finish; finishing it");
    } else {
        copy.pending_up = Some(PendingUp {
            previous: stored.meta.lease.clone(),
        });
        copy.save(state_dir, name)?;
    }
    crash::point("up.after-intent");
    let now = ctx.now();
    let ttl = ctx.config.lease_ttl;
    // A refusal (held elsewhere, being dropped) is decided on the record and takes nothing;
    // any other failure may hide a write that landed: then the intent stays for the next `up`.
    let taken = update(ctx.store.as_ref(), name, |m| {
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
            finish(ctx, name);
            return Err(refused.into());
        }
    };
    crash::point("up.after-lease");
    let started = interrupt::check("the restore")
        .and_then(|()| prepare_and_start(ctx, &meta, &held, interrupted));
    if let Err(e) = started {
        let give_back = match &held {
            Held::Fresh { epoch, previous } => Some((*epoch, previous.clone())),
            // The lease an interrupted `up` took goes back to whoever held it before.
            Held::Already { epoch } if interrupted => {
                Some((*epoch, copy.pending_up.and_then(|p| p.previous)))
            }
            Held::Already { .. } => None,
        };
        if let Some((epoch, previous)) = give_back {
            hand_back(ctx, name, epoch, previous);
        }
        return Err(e);
    }
    finish(ctx, name);
    say!("box '{name}' is up on {here}; attach with 'ag-box attach {name}'");
    Ok(())
}

/// The `up` under way here is over (done, or its lease handed back).
fn finish(ctx: &Ctx, name: &str) {
    let done = CopyState::load(&ctx.config.state_dir, name).and_then(|c| {
        CopyState {
            pending_up: None,
            ..c
        }
        .save(&ctx.config.state_dir, name)
    });
    if let Err(e) = done {
        tracing::error!("box '{name}': could not record that 'up' finished: {e:#}");
    }
}

fn prepare_and_start(ctx: &Ctx, meta: &Meta, held: &Held, interrupted: bool) -> Result<()> {
    let state_dir = &ctx.config.state_dir;
    let spec = ctx.spec(meta);
    let roots = snapshot::local_copy(&spec);
    restore::recover_leftovers(&roots)?;
    let mut copy = CopyState::load(state_dir, &meta.name)?;
    let copy_epoch = copy.epoch;
    let epoch = match held {
        Held::Fresh { epoch, .. } | Held::Already { epoch } => *epoch,
    };
    copy.epoch = Some(epoch);
    copy.save(state_dir, &meta.name)?;
    // The copy is the box's newest only if the box ran here since this node took the lease.
    let ran_here = matches!(held, Held::Already { .. }) && !interrupted;
    let restore_from = match &meta.last_snapshot {
        Some(s) if ran_here => (!meta.path.exists()).then(|| {
            say!(
                "box '{}': the local copy is gone; restoring snapshot {}",
                meta.name,
                short(&s.id)
            );
            s
        }),
        Some(s) => (!copy.is_current(&s.id)).then_some(s),
        None => None,
    };
    if let Some(s) = restore_from {
        let restic = ctx.restic()?;
        keep_local_work(ctx, &restic, meta, &copy, copy_epoch.unwrap_or(epoch))?;
        crash::point("up.after-fork");
        interrupt::check("the restore")?;
        say!(
            "restoring box '{}' from snapshot {} ({} by {})",
            meta.name,
            short(&s.id),
            s.at,
            s.node
        );
        let paths = restore::restore_in_place(&restic, &s.id, &meta.path, &|staging| {
            agent_home::restored_paths(staging, &spec)
        })?;
        copy.snapshot = Some(s.id.clone());
        copy.paths = paths;
        copy.digest = None;
        copy.project_had_files = std::fs::read_dir(&meta.path)
            .ok()
            .map(|mut e| e.next().is_some());
        copy.save(state_dir, &meta.name)?;
    } else if !meta.path.is_dir() {
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
    agent_home::ensure(&spec)?;
    agent_home::reown_project(&spec)?;
    if restore_from.is_some() {
        // As restored (and made ready): what the copy is when it equals that snapshot.
        copy.digest = Some(digest::of(&roots)?);
        copy.save(state_dir, &meta.name)?;
    }
    crash::point("up.before-start");
    interrupt::check("the start")?;
    let mounts = spec.mounts(|p| p.exists());
    let bwrap_args = spec.bwrap_args(&mounts, 3);
    let memory_max = meta
        .memory_max
        .as_deref()
        .or(ctx.config.memory_max.as_deref());
    ctx.runtime.start(&spec, &bwrap_args, memory_max, meta.nix)
}

/// Before a restore replaces this node's copy: unless it still is what this node last
/// snapshotted or restored, it may hold work in no snapshot, so it is kept as a fork snapshot.
fn keep_local_work(
    ctx: &Ctx,
    restic: &Restic,
    meta: &Meta,
    copy: &CopyState,
    epoch: u64,
) -> Result<()> {
    let roots = snapshot::local_copy(&ctx.spec(meta));
    if roots.iter().all(|p| std::fs::symlink_metadata(p).is_err()) {
        return Ok(());
    }
    if copy.digest.is_some() && copy.digest == Some(digest::of(&roots)?) {
        return Ok(());
    }
    restic.ensure_repo()?;
    let id = snapshot::keep_as_fork(ctx, restic, meta, epoch, copy.snapshot.clone())
        .with_context(|| {
            format!(
                "box '{}': keeping this node's copy before the restore failed; nothing was replaced",
                meta.name
            )
        })?;
    say!(
        "box '{}': this node's copy may hold work in no snapshot; kept it as fork snapshot {} before restoring",
        meta.name,
        short(&id)
    );
    Ok(())
}

/// A failed `up` must not leave the lease taken.
fn hand_back(ctx: &Ctx, name: &str, epoch: u64, previous: Option<Lease>) {
    let here = ctx.config.node.clone();
    let res = update(ctx.store.as_ref(), name, |m| {
        Ok(match &m.lease {
            Some(l) if l.node == here && l.epoch == epoch && m.lease != previous => Step::Write(
                Meta {
                    lease: previous.clone(),
                    ..m.clone()
                },
                (),
            ),
            _ => Step::Keep(()),
        })
    });
    let forget = CopyState::load(&ctx.config.state_dir, name).and_then(|c| {
        CopyState {
            epoch: previous
                .as_ref()
                .filter(|l| l.node == here)
                .map(|l| l.epoch),
            pending_up: None,
            ..c
        }
        .save(&ctx.config.state_dir, name)
    });
    if let Err(e) = res.and(forget) {
        tracing::error!(
            "box '{name}': could not hand back the lease after the failed start: {e:#}"
        );
    }
}
