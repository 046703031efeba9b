//! `diff <name> [<snapshot> [<snapshot>]]`: what changed between two snapshots, or between one
//! (default: the box's latest) and the working copy on this node.

use anyhow::Result;
use serde::Serialize;

use super::{Ctx, JSON_SCHEMA_VERSION, require_tools};
use crate::error::UserError;
use crate::plan::diff::{self, Change, What};
use crate::plan::history::size;
use crate::plan::names::BoxName;
use crate::plan::restic::{box_tag, find_snapshot};
use crate::plan::snapshot_id::SnapshotId;
use crate::plan::text::escaped;
use crate::sys::working_copy;

#[derive(Serialize)]
struct Report<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    /// Full snapshot ids; `to` is null for this node's working copy (then named by
    /// `working_copy_on`, null otherwise).
    from: &'a SnapshotId,
    to: Option<&'a SnapshotId>,
    working_copy_on: Option<&'a str>,
    changes: &'a [Change],
}

pub(crate) fn run(name: &BoxName, snapshots: &[String], json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["restic"])?;
    let restic = ctx.restic()?;
    restic.require_repo()?;
    // The box's snapshots, listed once for every id given.
    let listed = if snapshots.is_empty() {
        Vec::new()
    } else {
        restic.snapshots(Some(&box_tag(name)))?
    };
    let id_of = |prefix: &str| find_snapshot(&listed, name, prefix).map(|s| s.id.clone());
    let from = match snapshots.first() {
        Some(prefix) => id_of(prefix)?,
        // A quick park's changes are no whole tree: the snapshot they lie on is compared.
        None => meta
            .last_snapshot
            .as_ref()
            .map(|s| s.whole().id.clone())
            .ok_or_else(|| {
                UserError::failed(
                    format!("box '{name}' has no snapshot yet"),
                    format!("'ag-box snapshot {name}' takes one"),
                )
            })?,
    };
    let old = restic.files(&from)?;
    let (to_id, new) = if let Some(prefix) = snapshots.get(1) {
        let id = id_of(prefix)?;
        let files = restic.files(&id)?;
        (Some(id), files)
    } else {
        let spec = ctx.spec(&meta);
        if !spec.project.is_dir() {
            return Err(UserError::failed(
                format!("box '{name}' has no working copy on this node ({} is missing)", spec.project.display()),
                format!("run the diff on the node holding it, or give two snapshots ('ag-box history {name}')"),
            )
            .into());
        }
        (None, working_copy::files(&spec)?)
    };
    let changes = diff::compare(&old, &new);
    if json {
        let report = Report {
            schema_version: JSON_SCHEMA_VERSION,
            name,
            from: &from,
            to: to_id.as_ref(),
            working_copy_on: to_id.is_none().then_some(ctx.config.node.as_str()),
            changes: &changes,
        };
        super::print_json(&report)?;
        return Ok(());
    }
    for c in &changes {
        let (mark, sizes) = match c.what {
            What::Added => ("+", size(c.new_size.unwrap_or(0))),
            What::Removed => ("-", size(c.old_size.unwrap_or(0))),
            What::Modified => (
                "M",
                format!(
                    "{} -> {}",
                    size(c.old_size.unwrap_or(0)),
                    size(c.new_size.unwrap_or(0))
                ),
            ),
        };
        out!("{mark} {}  ({sizes})", escaped(&c.path.to_string_lossy()));
    }
    let to = to_id.map_or(format!("the working copy on {}", ctx.config.node), |id| {
        id.short().to_string()
    });
    let count = |w: What| changes.iter().filter(|c| c.what == w).count();
    say!(
        "box '{name}': from snapshot {} to {to}: {} added, {} removed, {} modified",
        from.short(),
        count(What::Added),
        count(What::Removed),
        count(What::Modified)
    );
    Ok(())
}
