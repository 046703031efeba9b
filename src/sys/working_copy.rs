//! A box's working copy on this node, listed as a snapshot of it would hold it (for `diff`,
//! and for what a park publishes as changed).

use std::fs;

use anyhow::{Context, Result};

use crate::plan::diff::{Excludes, FileEntry};
use crate::plan::restic::ALWAYS_EXCLUDED;
use crate::plan::sandbox::BoxSpec;

/// The operator's patterns of what no snapshot holds (`/opt/box/exclude.txt`).
const EXCLUDE_FILE: &str = "/opt/box/exclude.txt";

/// The exclude files this node's snapshots (and restores in place) follow.
pub(crate) fn exclude_files() -> Vec<std::path::PathBuf> {
    [std::path::PathBuf::from(EXCLUDE_FILE)]
        .into_iter()
        .filter(|p| p.exists())
        .collect()
}

/// What a snapshot of the box leaves out: ag-box's own names, the agent home's shared files,
/// and the exclude file's patterns that name no path.
pub(crate) fn excludes(spec: &BoxSpec) -> Result<Excludes> {
    let mut excludes = Excludes {
        names: ALWAYS_EXCLUDED
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
        paths: spec.agent_home.snapshot_excludes(),
        unfollowed: false,
    };
    for f in exclude_files() {
        excludes.add_file_lines(
            &fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?,
        );
    }
    Ok(excludes)
}

/// The files and symlinks a snapshot of the box here would hold (as its excludes say).
pub(crate) fn files(spec: &BoxSpec) -> Result<Vec<FileEntry>> {
    let excludes = excludes(spec)?;
    let mut out = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = spec
        .local_copy()
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
