//! A project's agent sessions in a shared home (the node's, or an old snapshot's): what is
//! imported into a box's own agent home at `track` and at the first `up` of an older box.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::plan::slices;

fn names_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|entries| {
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            names.sort();
            names
        })
        .unwrap_or_default()
}

fn first_line(path: &Path) -> Option<String> {
    let mut line = String::new();
    BufReader::new(fs::File::open(path).ok()?)
        .read_line(&mut line)
        .ok()?;
    Some(line)
}

/// The project's session paths in `home`, looked up in the tree under `root` (`/`, or a
/// restore's staging dir); only those that exist there.
pub(crate) fn session_paths_under(root: &Path, home: &Path, project: &Path) -> Vec<PathBuf> {
    let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let claude_dir = slices::claude_project_dir(home, project);
    let ids = slices::session_ids(&names_in(&under(&claude_dir)));
    let mut paths = vec![claude_dir];
    paths.extend(slices::claude_session_dirs(home, &ids));
    paths.extend(codex_rollouts(&under, home, project));
    paths.push(slices::grok_session_dir(home, project));
    paths.push(slices::gemini_hash_dir(home, project));
    let gemini = slices::gemini_tmp(home);
    for dir in names_in(&under(&gemini)) {
        let marker = under(&gemini.join(&dir).join(".project_root"));
        if fs::read_to_string(marker).is_ok_and(|p| Path::new(p.trim()) == project) {
            paths.push(gemini.join(dir));
        }
    }
    paths.retain(|p| fs::symlink_metadata(under(p)).is_ok());
    paths.dedup();
    paths
}

/// `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl` files that were started in the project.
fn codex_rollouts(under: &dyn Fn(&Path) -> PathBuf, home: &Path, project: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = slices::codex_sessions_root(home);
    for y in names_in(&under(&root)) {
        for m in names_in(&under(&root.join(&y))) {
            for d in names_in(&under(&root.join(&y).join(&m))) {
                let day = root.join(&y).join(&m).join(&d);
                for f in names_in(&under(&day))
                    .into_iter()
                    .filter(|f| slices::is_codex_rollout(f))
                {
                    let path = day.join(f);
                    let cwd = first_line(&under(&path)).and_then(|l| slices::codex_rollout_cwd(&l));
                    if cwd.is_some_and(|c| Path::new(&c) == project) {
                        out.push(path);
                    }
                }
            }
        }
    }
    out
}
