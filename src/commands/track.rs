//! `track <name> [path]`: register a directory as a box and take its first snapshot.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{Ctx, require_tools};
use crate::error::UserError;
use crate::plan::{names, project};
use crate::store::lease::{self, timestamp};
use crate::store::meta::{META_VERSION, Meta};
use crate::store::{self, events};
use crate::sys::copy_state::CopyState;
use crate::sys::restic::short;

/// `track --json`.
#[derive(serde::Serialize)]
struct Tracked<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    path: &'a std::path::Path,
    /// The node that holds it now (its files are here).
    node: &'a str,
    uid: u32,
    gid: u32,
    pinned_node: Option<&'a str>,
    /// The first snapshot's full id.
    snapshot: &'a str,
}

// One sequence, read top to bottom; each step names its failure and crash point.
#[allow(clippy::too_many_lines)]
pub(crate) fn run(name: &str, path: Option<PathBuf>, nix: bool, json: bool) -> Result<()> {
    names::validate(name)?;
    let ctx = Ctx::load()?;
    let given = path.unwrap_or_else(|| ctx.config.home.join(name));
    let project = given.canonicalize().map_err(|_| {
        UserError::usage(
            format!("path {} does not exist", given.display()),
            format!(
                "create it first, or pass the project's directory: 'ag-box track {name} <path>'"
            ),
        )
    })?;
    if !project.is_dir() {
        return Err(UserError::usage(
            format!("path {} is not a directory", project.display()),
            "pass the project's directory",
        )
        .into());
    }
    refuse_overlap(&ctx, name, &project, [])?;
    require_tools(&["restic"])?;
    let _lock = ctx.lock_box(name, "track")?;
    let existing = ctx.store.list()?;
    if existing.iter().any(|m| m.name == name) {
        return Err(already_tracked(name).into());
    }
    if let Some(other) = existing.iter().find(|m| m.path == project) {
        return Err(UserError::usage(
            format!(
                "path {} is already tracked as box '{}'",
                project.display(),
                other.name
            ),
            format!("use 'ag-box up {}'", other.name),
        )
        .into());
    }
    let others = existing.iter().map(|m| (m.name.as_str(), m.path.as_path()));
    refuse_overlap(&ctx, name, &project, others)?;
    let node = &ctx.config.node;
    let pinned = project.join(".auth-secret").exists().then(|| node.clone());
    let ids = crate::lifecycle::free_ids(name, &existing)?;
    let now = ctx.now();
    let fresh = Meta {
        version: META_VERSION,
        name: name.to_string(),
        path: project.clone(),
        created_at: timestamp(now),
        pinned_node: pinned.clone(),
        memory_max: None,
        nix,
        uid: Some(ids.uid),
        gid: Some(ids.gid),
        network: Some(ctx.config.network),
        allow: vec![],
        lease: None,
        last_snapshot: None,
        dropping: false,
        op: None,
    };
    // The files live here, so this node holds the box until it is parked.
    let meta = lease::acquire(&fresh, node, now, ctx.config.lease_ttl);
    ctx.require_safe_leases()?;
    let restic = ctx.restic()?;
    restic.require_repo()?;
    let Some(meta) = store::create(ctx.store.as_ref(), meta)? else {
        return Err(already_tracked(name).into());
    };
    let epoch = meta.lease.as_ref().map_or(1, |l| l.epoch);
    CopyState {
        epoch: Some(epoch),
        ..CopyState::default()
    }
    .save(&ctx.config.state_dir, name)?;
    // Handed to the box user before the first snapshot, which so holds the owner every later
    // one has (an `up` that did it would move every file's ctime: restic reads them all again).
    let spec = ctx.spec(&meta);
    let taken = crate::sys::agent_home::ensure(&spec)
        .and_then(|()| crate::sys::agent_home::reown_project(&spec))
        .and_then(|()| ctx.tracked(name))
        .and_then(|stored| crate::lifecycle::snapshot::take(&ctx.world(&restic), &stored, false));
    match taken {
        Ok(t) => {
            ctx.record_event(
                name,
                events::Step {
                    verb: "track",
                    epoch: Some(epoch),
                    snapshot: Some(&t.snapshot.id),
                    detail: Some(format!("at {}", project.display())),
                    ..Default::default()
                },
            );
            let pin = pinned
                .map(|n| format!(", pinned to {n} (.auth-secret present)"))
                .unwrap_or_default();
            say!(
                "tracked box '{name}' at {}{pin}; first snapshot {}",
                project.display(),
                short(&t.snapshot.id)
            );
            if json {
                super::print_json(&Tracked {
                    schema_version: super::JSON_SCHEMA_VERSION,
                    name,
                    path: &project,
                    node,
                    uid: ids.uid,
                    gid: ids.gid,
                    pinned_node: meta.pinned_node.as_deref(),
                    snapshot: &t.snapshot.id,
                })?;
            }
            Ok(())
        }
        Err(e) => {
            undo_track(&ctx, name);
            Err(e.context(format!(
                "box '{name}': first snapshot failed, nothing was tracked"
            )))
        }
    }
}

/// A project is a directory of its own: not the system, the home dir, ag-box's state, nor
/// inside or around another box.
fn refuse_overlap<'a>(
    ctx: &Ctx,
    name: &str,
    path: &std::path::Path,
    others: impl IntoIterator<Item = (&'a str, &'a std::path::Path)>,
) -> Result<()> {
    match project::refusal_here(path, &ctx.config.home, &ctx.config.state_dir, others) {
        None => Ok(()),
        Some(why) => Err(UserError::usage(
            format!("path {} cannot be a box's project: {why}", path.display()),
            format!("track the project's own directory, e.g. 'ag-box track {name} ~/{name}'"),
        )
        .into()),
    }
}

fn undo_track(ctx: &Ctx, name: &str) {
    let removed = ctx
        .store
        .get(name)
        .and_then(|s| {
            s.map(|s| store::delete(ctx.store.as_ref(), name, &s.version))
                .transpose()
        })
        .and_then(|_| {
            CopyState::remove(&ctx.config.state_dir, name).context("removing local state")
        });
    if let Err(e) = removed {
        tracing::error!("box '{name}': could not undo the half-made record: {e:#}");
    }
}

fn already_tracked(name: &str) -> UserError {
    UserError::usage(
        format!("box '{name}' is already tracked"),
        format!("use 'ag-box up {name}', or pick another name"),
    )
}
