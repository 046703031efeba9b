//! The session slice of a box as it stands on disk.

use std::fs;
use std::path::{Path, PathBuf};

use crate::plan::slices;

/// Project dir first, then the agent session paths that exist on this node.
pub fn snapshot_paths(home: &Path, project: &Path) -> Vec<PathBuf> {
    snapshot_paths_under(Path::new("/"), home, project)
}

/// The same paths, looked up in a tree restored under `root` (a restore's staging dir).
pub fn snapshot_paths_under(root: &Path, home: &Path, project: &Path) -> Vec<PathBuf> {
    let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let claude_dir = slices::claude_project_dir(home, project);
    let transcripts: Vec<String> = fs::read_dir(under(&claude_dir))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    let ids = slices::session_ids(&transcripts);
    let mut paths = vec![project.to_path_buf(), claude_dir];
    paths.extend(slices::claude_session_dirs(home, &ids));
    paths.retain(|p| fs::symlink_metadata(under(p)).is_ok());
    paths
}
