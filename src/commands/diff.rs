//! `diff <name> [<snapshot> [<snapshot>]]`: what changed between two snapshots, or between one
//! (default: the box's latest) and the working copy on this node.

use std::fs;

use anyhow::{Context, Result};
use serde::Serialize;

use super::{Ctx, JSON_SCHEMA_VERSION, require_tools};
use crate::error::UserError;
use crate::lifecycle::snapshot;
use crate::plan::diff::{self, Change, Excludes, FileEntry, What};
use crate::plan::history::size;
use crate::plan::restic::ALWAYS_EXCLUDED;
use crate::plan::sandbox::BoxSpec;
use crate::sys::restic::short;

#[derive(Serialize)]
struct Report<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    from: &'a str,
    to: &'a str,
    changes: &'a [Change],
}

pub fn run(name: &str, snapshots: &[String], json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["restic"])?;
    let restic = ctx.restic()?;
    restic.require_repo()?;
    let from = match snapshots.first() {
        Some(prefix) => restic.find(name, prefix)?.id,
        None => meta
            .last_snapshot
            .as_ref()
            .map(|s| s.id.clone())
            .ok_or_else(|| {
                UserError::failed(
                    format!("box '{name}' has no snapshot yet"),
                    format!("'ag-box snapshot {name}' takes one"),
                )
            })?,
    };
    let old = restic.files(&from)?;
    let (to, new) = match snapshots.get(1) {
        Some(prefix) => {
            let id = restic.find(name, prefix)?.id;
            let files = restic.files(&id)?;
            (short(&id).to_string(), files)
        }
        None => {
            let spec = ctx.spec(&meta);
            if !spec.project.is_dir() {
                return Err(UserError::failed(
                    format!("box '{name}' has no working copy on this node ({} is missing)", spec.project.display()),
                    format!("run the diff on the node holding it, or give two snapshots ('ag-box history {name}')"),
                )
                .into());
            }
            (
                format!("the working copy on {}", ctx.config.node),
                working_copy(&spec)?,
            )
        }
    };
    let changes = diff::compare(&old, &new);
    if json {
        let from = short(&from);
        let report = Report {
            schema_version: JSON_SCHEMA_VERSION,
            name,
            from,
            to: &to,
            changes: &changes,
        };
        out!("{}", serde_json::to_string_pretty(&report)?);
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
        out!("{mark} {}  ({sizes})", c.path.display());
    }
    let count = |w: What| changes.iter().filter(|c| c.what == w).count();
    say!(
        "box '{name}': from snapshot {} to {to}: {} added, {} removed, {} modified",
        short(&from),
        count(What::Added),
        count(What::Removed),
        count(What::Modified)
    );
    Ok(())
}

/// The files and symlinks a snapshot of the box here would hold (as its excludes say).
fn working_copy(spec: &BoxSpec) -> Result<Vec<FileEntry>> {
    let mut excludes = Excludes {
        names: ALWAYS_EXCLUDED.iter().map(|s| s.to_string()).collect(),
        paths: spec.agent_home.snapshot_excludes(),
    };
    for f in snapshot::exclude_files() {
        excludes.add_file_lines(
            &fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?,
        );
    }
    let mut out = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = snapshot::local_copy(spec)
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    while let Some(path) = stack.pop() {
        if excludes.matches(&path) {
            continue;
        }
        let meta =
            fs::symlink_metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if meta.is_dir() {
            for entry in
                fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))?
            {
                stack.push(entry?.path());
            }
        } else if meta.is_file() || meta.is_symlink() {
            out.push(FileEntry {
                size: if meta.is_symlink() { 0 } else { meta.len() },
                mtime: meta.modified().ok(),
                path,
            });
        }
    }
    Ok(out)
}
