//! `rollback <name> <snapshot> [--to <dir>]`: make an earlier snapshot the box's latest (the
//! state it replaces is kept as a snapshot first), or restore a copy of it elsewhere.

use std::path::Path;

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::error::UserError;
use crate::lifecycle;
use crate::plan::restic::SnapshotInfo;
use crate::store::meta::SnapshotRef;
use crate::sys::restic::{Restic, short};

pub fn run(name: &str, snapshot: &str, to: Option<&Path>) -> Result<()> {
    let ctx = Ctx::load()?;
    ctx.tracked(name)?;
    require_tools(&["restic"])?;
    let restic = ctx.restic()?;
    restic.require_repo()?;
    let target = restic.find(name, snapshot)?;
    if let Some(dir) = to {
        return restore_elsewhere(&restic, name, &target, dir);
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
    };
    let replaced = lifecycle::rollback::rollback(&ctx.world(&restic), name, &to)?;
    say!(
        "box '{name}' is back at snapshot {} ({}); the state it replaced is snapshot {}: 'ag-box rollback {name} {}' undoes this",
        short(&to.id),
        to.at,
        short(&replaced),
        short(&replaced)
    );
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
        short(&s.id),
        s.time,
        dir.display()
    );
    Ok(())
}
