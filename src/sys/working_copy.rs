//! A box's working copy on this node, listed as a snapshot of it would hold it (for `diff`).

use std::fs;

use anyhow::{Context, Result};

use crate::lifecycle::snapshot;
use crate::plan::diff::{Excludes, FileEntry};
use crate::plan::restic::ALWAYS_EXCLUDED;
use crate::plan::sandbox::BoxSpec;

/// The files and symlinks a snapshot of the box here would hold (as its excludes say).
pub fn files(spec: &BoxSpec) -> Result<Vec<FileEntry>> {
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
