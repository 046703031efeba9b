//! `track`: a directory becomes a box: its record (this node holding the lease, since the files
//! are here), its agent home and owner, and its first snapshot; all undone when that fails.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{Ctx, free_ids, snapshot};
use crate::error::UserError;
use crate::plan::agents::{self, Agent};
use crate::plan::names::BoxName;
use crate::plan::project;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::lease::{self, timestamp};
use crate::store::meta::{META_VERSION, Meta};
use crate::store::{self, events};
use crate::sys::copy_state::CopyState;
use crate::sys::{agent_home, slices};

/// A box just tracked.
#[derive(Debug)]
pub(crate) struct Tracked {
    /// Its record as written (with this node's lease).
    pub meta: Meta,
    /// The first snapshot's full id.
    pub snapshot: SnapshotId,
}

/// `track --agent`: the agent named (or none), else the one whose sessions the box imports.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AgentChoice {
    Named(Option<&'static Agent>),
    FromSessions,
}

impl AgentChoice {
    /// `--agent <value>` as given (absent: from the sessions), checked.
    pub(crate) fn parse(value: Option<&str>) -> Result<AgentChoice, UserError> {
        let Some(value) = value else {
            return Ok(AgentChoice::FromSessions);
        };
        agents::parse(value)
            .map(AgentChoice::Named)
            .map_err(|hint| UserError::usage(format!("invalid agent '{value}'"), hint))
    }
}

/// Track the directory `project` (canonical) as box `name`; `ready` checks the store and the
/// repository once every refusal is past, right before the record is written.
pub(crate) fn track(
    ctx: &Ctx,
    name: &BoxName,
    project: &Path,
    nix: bool,
    agent: AgentChoice,
    ready: impl FnOnce() -> Result<()>,
) -> Result<Tracked> {
    refuse_overlap(ctx, name, project, [])?;
    let _lock = ctx.lock(name, "track")?;
    let existing = ctx.store.list()?;
    if existing.iter().any(|m| m.name == **name) {
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
    refuse_overlap(ctx, name, project, others)?;
    let node = &ctx.config.node;
    let pinned = project.join(".auth-secret").exists().then(|| node.clone());
    let ids = free_ids(name, &existing)?;
    let agent = match agent {
        AgentChoice::Named(agent) => agent,
        // The sessions `agent_home::ensure` imports below: what the box will hold.
        AgentChoice::FromSessions => {
            let home = &ctx.config.home;
            agents::with_sessions(
                home,
                &slices::session_paths_under(Path::new("/"), home, project),
            )
        }
    };
    let now = ctx.now();
    let fresh = Meta {
        version: META_VERSION,
        name: name.to_string(),
        path: project.to_path_buf(),
        created_at: timestamp(now),
        pinned_node: pinned,
        memory_max: None,
        nix,
        uid: Some(ids.uid),
        gid: Some(ids.gid),
        network: Some(ctx.config.network),
        allow: vec![],
        agent: agent.map(|a| a.name.to_string()),
        creds: None,
        gpu: false,
        lease: None,
        last_snapshot: None,
        attention: None,
        dropping: false,
        op: None,
        forked_from: None,
    };
    // The files live here, so this node holds the box until it is parked.
    let meta = lease::acquire(&fresh, node, now, ctx.config.lease_ttl);
    ready()?;
    let Some(meta) = store::create(ctx.store.as_ref(), meta)? else {
        return Err(already_tracked(name).into());
    };
    let epoch = meta.lease.as_ref().map_or(1, |l| l.epoch);
    // Whatever a box of that name left here before, never read.
    let mut copy = CopyState {
        epoch: Some(epoch),
        ..CopyState::default()
    }
    .start_journal(&ctx.config.state_dir, name)?;
    // Handed to the box user before the first snapshot, which so holds the owner every later
    // one has (an `up` that did it would move every file's ctime: restic reads them all again).
    let spec = ctx.spec(&meta);
    let taken = agent_home::ensure(&spec)
        .and_then(|()| agent_home::reown_project(&spec))
        .and_then(|_| ctx.tracked(name))
        .and_then(|stored| snapshot::take_first(ctx, &stored, &mut copy));
    let taken = match taken {
        Ok(t) => t,
        Err(e) => {
            undo(ctx, name);
            return Err(e.context(format!(
                "box '{name}': first snapshot failed, nothing was tracked"
            )));
        }
    };
    ctx.record_event(
        name,
        events::Step {
            verb: "track",
            epoch: Some(epoch),
            snapshot: Some(&taken.snapshot.id),
            detail: Some(format!("at {}", project.display())),
            ..Default::default()
        },
    );
    Ok(Tracked {
        meta,
        snapshot: taken.snapshot.id,
    })
}

/// A project is a directory of its own: not the system, the home dir, ag-box's state, nor
/// inside or around another box.
pub(crate) fn refuse_overlap<'a>(
    ctx: &Ctx,
    name: &str,
    path: &Path,
    others: impl IntoIterator<Item = (&'a str, &'a Path)>,
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

/// The half-made box gone again: its record and its state on this node.
pub(crate) fn undo(ctx: &Ctx, name: &str) {
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

pub(crate) fn already_tracked(name: &str) -> UserError {
    UserError::usage(
        format!("box '{name}' is already tracked"),
        format!("use 'ag-box up {name}', or pick another name"),
    )
}

/// The directory a `track` names: the given path, or `~/<name>`, made canonical.
pub(crate) fn project_dir(home: &Path, name: &str, path: Option<PathBuf>) -> Result<PathBuf> {
    let given = path.unwrap_or_else(|| home.join(name));
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
    Ok(project)
}
