//! The session slice of a box as it stands on this node's disk.

use std::fs;
use std::path::{Path, PathBuf};

use crate::plan::slices;

/// Project dir first, then the agent session paths that exist.
pub fn snapshot_paths(home: &Path, project: &Path) -> Vec<PathBuf> {
    let claude_dir = slices::claude_project_dir(home, project);
    let transcripts: Vec<String> = fs::read_dir(&claude_dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    let ids = slices::session_ids(&transcripts);
    let mut paths = vec![project.to_path_buf(), claude_dir];
    paths.extend(slices::claude_session_dirs(home, &ids));
    paths.retain(|p| p.exists());
    paths
}
