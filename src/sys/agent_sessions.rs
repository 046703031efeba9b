//! The conversation a box's agent resumes, found inside the box by the box user (`ag-box
//! __agent`): its own agent home, read without privilege; a link is not taken for a transcript
//! nor a rollout, and a fifo is never waited on.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::plan::agents::{self, Agent, Sessions};

/// How many of the newest Codex rollouts are opened, looking for one of the project.
const ROLLOUTS_READ: usize = 200;
/// How much of a rollout's first line is read (its `session_meta` holds the instructions).
const FIRST_LINE_MAX: u64 = 1 << 20;

/// The session to resume, where ag-box names it; None when there is none (or it cannot
/// tell: the agent then starts a new conversation).
pub(crate) fn newest_here(agent: &Agent) -> Option<String> {
    let home = std::env::var_os("HOME")?;
    let project = std::env::current_dir().ok()?;
    match agent.sessions(Path::new(&home), &project)? {
        (Sessions::ClaudeProject, dir) => {
            let files: Vec<(OsString, SystemTime)> = files_in(&dir)
                .into_iter()
                .map(|(path, written)| (path.file_name().unwrap_or_default().into(), written))
                .collect();
            agents::newest_session(&files)
        }
        (Sessions::CodexRollouts, dir) => {
            // sessions/YYYY/MM/DD/rollout-*.jsonl, newest first.
            let mut rollouts: Vec<(PathBuf, SystemTime)> = dirs_in(&dir)
                .iter()
                .flat_map(|year| dirs_in(year))
                .flat_map(|month| dirs_in(&month))
                .flat_map(|day| files_in(&day))
                .filter(|(path, _)| path.extension().is_some_and(|e| e == "jsonl"))
                .collect();
            rollouts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
            rollouts.iter().take(ROLLOUTS_READ).find_map(|(path, _)| {
                let mut line = Vec::new();
                // A link or fifo swapped in since the listing is not followed, nor waited on.
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                    .open(path)
                    .ok()?;
                BufReader::new(file.take(FIRST_LINE_MAX))
                    .read_until(b'\n', &mut line)
                    .ok()?;
                agents::rollout_session(&line, &project)
            })
        }
    }
}

/// The regular files in `dir` with their last writes (by the entries' own types: a link is
/// neither a file nor a dir here).
fn files_in(dir: &Path) -> Vec<(PathBuf, SystemTime)> {
    entries(dir)
        .filter_map(|(path, meta)| meta.is_file().then(|| Some((path, meta.modified().ok()?))))
        .flatten()
        .collect()
}

fn dirs_in(dir: &Path) -> Vec<PathBuf> {
    entries(dir)
        .filter_map(|(path, meta)| meta.is_dir().then_some(path))
        .collect()
}

fn entries(dir: &Path) -> impl Iterator<Item = (PathBuf, std::fs::Metadata)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            Some((entry.path(), entry.metadata().ok()?))
        })
}
