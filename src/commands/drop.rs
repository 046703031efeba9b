//! `drop <name> [--yes]`: delete a box's snapshots and record after confirmation; never local files
//! (`lifecycle::drop`).

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result};

use super::{Ctx, require_tools};
use crate::error::UserError;
use crate::lifecycle::drop;
use crate::plan::names::BoxName;
use crate::plan::snapshot_id::SnapshotId;

fn confirm(name: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(UserError::usage(
            format!("refusing to drop box '{name}' without confirmation"),
            format!(
                "run it in a terminal to type the name, or 'ag-box drop {name} --yes' in scripts"
            ),
        )
        .into());
    }
    eprint!(
        "This deletes every snapshot and the record of box '{name}' (local files stay).\nType the box name to confirm: "
    );
    std::io::stderr().flush()?;
    let mut typed = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut typed)
        .context("reading the confirmation")?;
    if typed.trim() != name {
        return Err(UserError::failed(
            "confirmation did not match; nothing was deleted",
            "type the box name exactly",
        )
        .into());
    }
    Ok(())
}

/// `drop --json`.
#[derive(serde::Serialize)]
struct Dropped<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    /// The full ids of the snapshots deleted.
    snapshots_deleted: &'a [SnapshotId],
    /// The project, left as it was.
    path: &'a std::path::Path,
    /// Where its agent home was set aside (null: it had none here).
    agent_home_kept_at: Option<&'a std::path::Path>,
}

pub(crate) fn run(name: &BoxName, yes: bool, json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    ctx.tracked(name)?;
    require_tools(&["restic"])?;
    // The repository opens only once the drop is confirmed.
    let confirmed = || if yes { Ok(()) } else { confirm(name) };
    let dropped = drop::drop_box(&ctx, name, confirmed)?;
    say!(
        "dropped box '{name}': its record and {} are deleted; the files at {} are kept{}",
        crate::plan::text::count(dropped.snapshots.len(), "snapshot"),
        dropped.meta.path.display(),
        dropped
            .home_kept_at
            .as_ref()
            .map(|p| format!(
                ", and its agent home (transcripts) is set aside at {}",
                p.display()
            ))
            .unwrap_or_default()
    );
    if json {
        super::print_json(&Dropped {
            schema_version: super::JSON_SCHEMA_VERSION,
            name,
            snapshots_deleted: &dropped.snapshots,
            path: &dropped.meta.path,
            agent_home_kept_at: dropped.home_kept_at.as_deref(),
        })?;
    }
    Ok(())
}
