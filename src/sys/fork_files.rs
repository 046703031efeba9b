//! The files a fork makes on this node from a snapshot restored into a staging dir only root
//! may enter: each sibling's project and agent home put in place, and the agent home's
//! conversations made the new project's (docs/design.md "Fork").

use std::ffi::OsString;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::plan::fork;
use crate::plan::slices;
use crate::sys::box_tree::{Kind, Tree};
use crate::sys::cmd;

/// A Codex rollout's first line is read up to this many bytes.
const MAX_FIRST_LINE: u64 = 1 << 20;
/// Dirs listed per level of an agent home's session trees.
const MAX_NAMES: usize = 100_000;

/// Put the staged tree `from` at `to` (which must not exist): a copy when `keep` (another
/// sibling takes it next), else the tree itself. Nothing in it is followed (`cp -a`, rename).
pub(crate) fn place(from: &Path, to: &Path, keep: bool) -> Result<()> {
    if std::fs::symlink_metadata(to).is_ok() {
        bail!("{} exists", to.display());
    }
    let copy = || {
        cmd::output(
            Command::new("cp")
                .arg("-a")
                .arg("-T")
                .arg("--")
                .arg(from)
                .arg(to),
        )
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
    };
    if keep {
        return copy().map(|_| ());
    }
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EXDEV as i32) => copy().map(|_| ()),
        Err(e) => Err(e).with_context(|| format!("moving {} to {}", from.display(), to.display())),
    }
}

/// The dirs below `rel` in `tree` (none when it is missing or not a dir).
fn dirs_in(tree: &Tree, rel: &Path) -> Result<Vec<OsString>> {
    if tree.kind(rel)? != Some(Kind::Dir) {
        return Ok(Vec::new());
    }
    let (entries, _) = tree.entries(rel, MAX_NAMES)?;
    Ok(entries
        .into_iter()
        .filter(|(_, k)| *k == Kind::Dir)
        .map(|(n, _)| n)
        .collect())
}

/// What of the agent home at `home` was made for project `from` is made for `to`: the dirs
/// named for it renamed, Codex's rollouts and Gemini CLI's project markers naming it
/// rewritten (owner, mode and times kept). Returns how many were changed. `home` is a staged
/// tree no box runs on; no link in it is followed.
pub(crate) fn rekey_home(home: &Path, from: &Path, to: &Path) -> Result<usize> {
    let tree = Tree::open(home)?;
    let mut changed = 0;
    for (old, new) in fork::renamed_for(from, to) {
        if tree.kind(&old)? == Some(Kind::Dir) && tree.kind(&new)?.is_none() {
            tree.rename(&old, &new)?;
            changed += 1;
        }
    }
    changed += rekey_codex(&tree, from, to)?;
    let gemini = slices::gemini_tmp(Path::new(""));
    for dir in dirs_in(&tree, &gemini)? {
        let marker = gemini.join(dir).join(".project_root");
        let Ok(Some(bytes)) = tree.read_file(&marker, 4096) else {
            continue;
        };
        if Path::new(String::from_utf8_lossy(&bytes).trim()) == from {
            let to = to.display().to_string();
            tree.replace_head(&marker, bytes.len() as u64, to.as_bytes())?;
            changed += 1;
        }
    }
    Ok(changed)
}

/// `.codex/sessions/YYYY/MM/DD/rollout-*.jsonl` started in `from` name `to` as their cwd.
fn rekey_codex(tree: &Tree, from: &Path, to: &Path) -> Result<usize> {
    let root = slices::codex_sessions_root(Path::new(""));
    let mut changed = 0;
    for y in dirs_in(tree, &root)? {
        for m in dirs_in(tree, &root.join(&y))? {
            for d in dirs_in(tree, &root.join(&y).join(&m))? {
                let day: PathBuf = root.join(&y).join(&m).join(&d);
                let (files, _) = tree.entries(&day, MAX_NAMES)?;
                for (f, kind) in files {
                    let rollout = f.to_str().is_some_and(slices::is_codex_rollout);
                    if kind != Kind::File || !rollout {
                        continue;
                    }
                    let rel = day.join(&f);
                    let Some((file, _)) = tree.open_file(&rel)? else {
                        continue;
                    };
                    let mut line = Vec::new();
                    std::io::BufReader::new(std::io::Read::take(file, MAX_FIRST_LINE))
                        .read_until(b'\n', &mut line)
                        .with_context(|| {
                            format!(
                                "reading {}",
                                crate::plan::text::escaped(&rel.to_string_lossy())
                            )
                        })?;
                    let Ok(line) = String::from_utf8(line) else {
                        continue;
                    };
                    if let Some(head) = fork::codex_meta_for(&line, from, to) {
                        tree.replace_head(&rel, line.len() as u64, head.as_bytes())?;
                        changed += 1;
                    }
                }
            }
        }
    }
    Ok(changed)
}
