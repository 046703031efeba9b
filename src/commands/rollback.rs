//! `rollback <name> <snapshot> [--to <dir>]`: make an earlier snapshot the box's latest (the
//! state it replaces is kept as a snapshot first), or restore a copy of it elsewhere.

use std::path::Path;

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::error::UserError;
use crate::lifecycle;
use crate::plan::names::BoxName;
use crate::plan::restic::SnapshotInfo;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::meta::SnapshotRef;
use crate::sys::restic::Restic;

/// `rollback --json`.
#[derive(serde::Serialize)]
struct RolledBack<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    /// The full id of the snapshot the box is now at.
    snapshot: &'a SnapshotId,
    /// The snapshot that keeps the state it replaced: `rollback <box> <it>` undoes this (null:
    /// nothing was replaced).
    undo: Option<&'a SnapshotId>,
    /// Where a copy was restored instead (`--to`), the box untouched.
    restored_to: Option<&'a Path>,
}

/// What the operator settled on the command line: go ahead without asking (`--yes`), without
/// waiting for the agent's turn (`--now`).
#[derive(Clone, Copy)]
pub(crate) struct Asked {
    pub yes: bool,
    pub now: bool,
}

pub(crate) fn run(
    name: &BoxName,
    snapshot: &str,
    to: Option<&Path>,
    asked: Asked,
    json: bool,
) -> Result<()> {
    let done = |snapshot: &SnapshotId, undo: Option<&SnapshotId>, restored_to: Option<&Path>| {
        if json {
            super::print_json(&RolledBack {
                schema_version: super::JSON_SCHEMA_VERSION,
                name,
                snapshot,
                undo,
                restored_to,
            })
        } else {
            Ok(())
        }
    };
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["restic"])?;
    let restic = ctx.restic()?;
    restic.require_repo()?;
    let target = restic.find(name, snapshot)?;
    if let Some(dir) = to {
        restore_elsewhere(restic, name, &target, dir)?;
        return done(&target.id, None, Some(dir));
    }
    let to = SnapshotRef {
        id: target.id.clone(),
        at: target.time.clone(),
        node: target.tag("node").unwrap_or("?").to_string(),
        epoch: target
            .tag("epoch")
            .and_then(|e| e.parse().ok())
            .unwrap_or(0),
        paths: target.paths.clone(),
        on: None,
        same_as: None,
    };
    let here = meta
        .lease
        .as_ref()
        .is_some_and(|l| l.node == ctx.config.node);
    let at_latest = meta.last_snapshot.as_ref().is_some_and(|l| l.names(&to.id));
    let parked = meta.lease.is_none();
    if at_latest && (parked || (here && lifecycle::snapshot::unchanged_since_latest(&ctx, &meta)?))
    {
        say!(
            "box '{name}' is already at snapshot {}{}; nothing to roll back",
            to.id.short(),
            if here {
                ", and its copy here has not changed since"
            } else {
                ""
            }
        );
        return done(&to.id, None, None);
    }
    let running_here = here && ctx.runtime.is_active(&ctx.spec(&meta));
    if running_here && !asked.yes {
        confirm_restart(name, &to.id)?;
    }
    if running_here && !asked.now {
        super::turn::wait_for_turn(&ctx, &meta, "rollback");
    }
    let replaced = lifecycle::rollback::rollback(&ctx, name, &to)?;
    say!(
        "box '{name}' is back at snapshot {} ({}); the state it replaced is snapshot {}: 'ag-box rollback {name} {}' undoes this",
        to.id.short(),
        to.at,
        replaced.as_ref().map_or("", SnapshotId::short),
        replaced.as_ref().map_or("", SnapshotId::short)
    );
    done(&to.id, replaced.as_ref(), None)
}

/// A running box is stopped (its sessions end) and started again: asked on a terminal, else
/// `--yes` says so.
fn confirm_restart(name: &str, to: &SnapshotId) -> Result<()> {
    use std::io::{IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(UserError::usage(
            format!("box '{name}' is running: a rollback stops it and starts it again at snapshot {}", to.short()),
            format!("add --yes to go ahead (e.g. 'ag-box rollback {name} {} --yes'), or park the box first", to.short()),
        )
        .into());
    }
    eprint!(
        "Box '{name}' is running: the rollback stops it (its sessions end) and starts it again at snapshot {}. Go ahead? [y/N] ",
        to.short()
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if !matches!(answer.trim(), "y" | "Y" | "yes") {
        return Err(UserError::failed("nothing was rolled back", "answer y to roll back").into());
    }
    Ok(())
}

fn restore_elsewhere(restic: &Restic, name: &str, s: &SnapshotInfo, dir: &Path) -> Result<()> {
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut e| e.next().is_some());
    if occupied || dir.is_file() {
        return Err(UserError::usage(
            format!("{} is not an empty directory", dir.display()),
            "give a new directory to --to",
        )
        .into());
    }
    restic.restore(&s.id, dir)?;
    let first = s.paths.first().map_or(String::new(), |p| {
        format!(
            " (e.g. {})",
            dir.join(p.strip_prefix("/").unwrap_or(p)).display()
        )
    });
    say!(
        "restored snapshot {} of box '{name}' ({}) under {}{first}; the box is unchanged",
        s.id.short(),
        s.time,
        dir.display()
    );
    Ok(())
}
