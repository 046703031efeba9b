//! Restore a snapshot next to the live files, then swap each path into place by rename.
//! The previous local copy is moved aside and deleted only after every swap succeeded.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::atomic;
use crate::plan::delta::{Delta, MAX_PUBLISHED_BYTES, ModeAndOwner, Published};
use crate::plan::snapshot_id::SnapshotId;
use crate::sys::box_tree::Tree;
use crate::sys::ports::Repo;
use crate::sys::{cmd, crash, host};

fn sibling(path: &Path, tag: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.ag-box-{tag}"))
}

pub(crate) fn remove_any(path: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Move `from` to `to`; across filesystems, copy next to `to` first so the last step is a rename.
fn move_into(from: &Path, to: &Path) -> Result<()> {
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EXDEV as i32) => {
            let tmp = sibling(to, "incoming");
            remove_any(&tmp)?;
            cmd::output(Command::new("cp").arg("-a").arg(from).arg(&tmp))?;
            fs::rename(&tmp, to).with_context(|| format!("moving {} into place", to.display()))
        }
        Err(e) => Err(e).with_context(|| format!("moving {} to {}", from.display(), to.display())),
    }
}

use crate::plan::restic::{INCOMING, INSIDE_PREVIOUS, INSIDE_RESTORE};

/// Where the previous copy of a path went during a swap.
enum Aside {
    None,
    /// Renamed to a sibling.
    Sibling(PathBuf),
    /// A mount point's contents, moved into a dir inside it.
    Inside,
}

/// The swap of a mount point's contents under way: the aside dir ag-box made inside it, as
/// recorded in this node's state before anything moved into it. A dir of that name that does
/// not match (a box may make one, or a link of that name) is never acted on.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
struct SwapRecord {
    live: PathBuf,
    dev: u64,
    ino: u64,
}

/// The names in a mount point's dir, but for ag-box's own work names.
fn own_entries(tree: &Tree, rel: &Path) -> Result<Vec<OsString>> {
    Ok(tree
        .names(rel)?
        .into_iter()
        .filter(|n| n != INSIDE_PREVIOUS && n != INSIDE_RESTORE)
        .collect())
}

/// Replace the contents of mount point `live` with those of `staged` (a dir below it): the
/// old entries go into `live/.ag-box-previous` first (made by root, recorded in `journal`
/// before anything moves), then the new ones move in. Every step is fd-relative in `live`.
fn swap_contents(staged: &Path, live: &Path, journal: &Path) -> Result<()> {
    let tree = Tree::open(live)?;
    let staged = staged
        .strip_prefix(live)
        .with_context(|| format!("{} is not staged inside it", live.display()))?;
    let aside = Path::new(INSIDE_PREVIOUS);
    tree.remove(aside)?;
    let made = tree.make_private_dir(aside)?;
    let record = SwapRecord {
        live: live.to_path_buf(),
        dev: made.st_dev,
        ino: made.st_ino,
    };
    atomic::write(journal, &serde_json::to_vec(&record)?, 0o600)?;
    for name in own_entries(&tree, Path::new(""))? {
        tree.rename(Path::new(&name), &aside.join(&name))?;
    }
    crash::point("restore.mid-swap");
    for name in own_entries(&tree, staged)? {
        tree.rename(&staged.join(&name), Path::new(&name))?;
    }
    let staged_mode = tree.stat(staged)?.map_or(0o755, |st| st.st_mode & 0o7777);
    tree.set_root_mode(staged_mode)
}

/// Undo a cut-off [`swap_contents`]: every old entry goes back; the new entries (all moved in
/// after every old one went aside) are removed, since the snapshot holds them.
fn put_contents_back(live: &Path) -> Result<()> {
    let tree = Tree::open(live)?;
    let aside = Path::new(INSIDE_PREVIOUS);
    let old = own_entries(&tree, aside)?;
    for name in own_entries(&tree, Path::new(""))? {
        if !old.contains(&name) {
            tree.remove(Path::new(&name))?;
        }
    }
    for name in &old {
        tree.remove(Path::new(name))?;
        tree.rename(&aside.join(name), Path::new(name))?;
    }
    tree.remove(aside)
}

/// The aside dir inside `path` is the one `journal` recorded: a real dir, root's, same inode.
fn recorded_aside(tree: &Tree, path: &Path, journal: &Path) -> Result<bool> {
    let Some(st) = tree.stat(Path::new(INSIDE_PREVIOUS))? else {
        return Ok(false);
    };
    let record: Option<SwapRecord> = match fs::read(journal) {
        Ok(b) => serde_json::from_slice(&b).ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", journal.display())),
    };
    let is_dir = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
    Ok(record.is_some_and(|r| {
        r.live == path && r.dev == st.st_dev && r.ino == st.st_ino && is_dir && st.st_uid == 0
    }))
}

/// What a restore that was cut off left beside `paths`: a previous copy moved aside and not
/// yet replaced goes back; one already replaced is removed (before every restore, the copy
/// was known to equal a snapshot or was kept as a fork snapshot); half-moved copies are removed.
/// Inside a path (a box's tree), only an aside dir that `journal` recorded is acted on; any
/// other entry of ag-box's work names there is removed without being followed.
pub(crate) fn recover_leftovers(paths: &[PathBuf], journal: &Path) -> Result<()> {
    for path in paths {
        if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            let tree = Tree::open(path)?;
            if recorded_aside(&tree, path, journal)? {
                tracing::warn!(
                    "putting back the contents of {} left aside by an interrupted restore",
                    show(path)
                );
                put_contents_back(path)?;
            }
            for name in [INSIDE_PREVIOUS, INSIDE_RESTORE, INCOMING] {
                if tree.kind(Path::new(name))?.is_some() {
                    tracing::warn!(
                        "removing {}/{name}, which no restore of this node made",
                        show(path)
                    );
                    tree.remove(Path::new(name))?;
                }
            }
        }
        let aside = sibling(path, "previous");
        if fs::symlink_metadata(&aside).is_ok() {
            if fs::symlink_metadata(path).is_err() {
                tracing::warn!(
                    "putting back {} left aside by an interrupted restore",
                    show(path)
                );
                fs::rename(&aside, path)
                    .with_context(|| format!("moving {} back", aside.display()))?;
            } else {
                remove_any(&aside).with_context(|| format!("removing {}", aside.display()))?;
            }
        }
        let staging = sibling(path, "restore");
        remove_any(&staging).with_context(|| format!("removing {}", staging.display()))?;
        let incoming = sibling(path, "incoming");
        remove_any(&incoming).with_context(|| format!("removing {}", incoming.display()))?;
    }
    remove_any(journal).with_context(|| format!("removing {}", journal.display()))
}

fn show(p: &Path) -> String {
    crate::plan::text::escaped(&p.to_string_lossy())
}

/// Where a restore stages its tree: inside a project that is a mount point (so it keeps its
/// filesystem), else beside it.
/// The staging dir beside `anchor` lies inside it (a mount point: a rename out of it would
/// cross filesystems).
pub(crate) fn stages_inside(anchor: &Path) -> bool {
    host::is_mount_point(anchor)
}

fn staging_for(anchor: &Path) -> PathBuf {
    if stages_inside(anchor) {
        anchor.join(INSIDE_RESTORE)
    } else {
        sibling(anchor, "restore")
    }
}

/// The tree of `trees` (root, handle) that holds `p`, and `p` below it.
fn locate<'a>(trees: &'a [(&Path, Tree)], p: &'a Path) -> Result<(&'a Tree, &'a Path)> {
    trees
        .iter()
        .find_map(|(root, tree)| Some((tree, p.strip_prefix(root).ok()?)))
        .with_context(|| format!("{} is outside the box's copy", show(p)))
}

/// An empty staging dir beside `anchor` for what changed (what an earlier restore left there
/// is removed first), root's alone: it holds the box's changed files, then what they replaced.
pub(crate) fn fresh_staging(anchor: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let staging = staging_for(anchor);
    remove_any(&staging).with_context(|| format!("clearing {}", staging.display()))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&staging)
        .with_context(|| format!("creating {}", staging.display()))?;
    Ok(staging)
}

/// The list of what changed that a changes snapshot holds at `list`, as restored under
/// `staging` (read with no link followed, at most `MAX_PUBLISHED_BYTES`).
pub(crate) fn read_published(staging: &Path, list: &Path) -> Result<Published> {
    let rel = list.strip_prefix("/").unwrap_or(list);
    let bytes = Tree::open(staging)?
        .read_file(rel, MAX_PUBLISHED_BYTES)?
        .with_context(|| format!("the changes snapshot holds no list at {}", show(list)))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", show(list)))
}

/// Bring a copy that equals one snapshot to another by changing only `delta` (see
/// `plan::delta`), what it fetches already restored under `staging`: removed paths go,
/// fetched ones move in, dirs get their mode and owner. The staging dir goes either way: once
/// all moved in, beside what follows where it lies outside `roots` (what is left of it, a
/// dir for each changed path's, takes a few tenths of a second at 200,000 files), else now.
pub(crate) fn apply_delta(staging: &Path, roots: &[PathBuf], delta: &Delta) -> Result<Clearing> {
    crash::point("restore.delta-staged");
    let applied = move_changes_in(staging, roots, delta);
    if applied.is_ok() && !roots.iter().any(|r| staging.starts_with(r)) {
        return Ok(Clearing::start(staging.to_path_buf()));
    }
    let removed = remove_any(staging).with_context(|| format!("removing {}", staging.display()));
    applied.and(removed).map(|()| Clearing::done())
}

/// A staging dir being removed by a thread of its own, or nothing to remove. Dropped, it waits
/// for the removal: nothing stages at that path again while it runs.
#[must_use]
#[derive(Debug)]
pub(crate) struct Clearing(Option<std::thread::JoinHandle<std::io::Result<()>>>);

impl Clearing {
    pub(crate) fn done() -> Clearing {
        Clearing(None)
    }

    fn start(dir: PathBuf) -> Clearing {
        Clearing(Some(std::thread::spawn(move || remove_any(&dir))))
    }
}

/// Waits for the removal. One that failed is only said: what is left goes before the next
/// restore stages (`fresh_staging`, `recover_leftovers`).
impl Drop for Clearing {
    fn drop(&mut self) {
        let Some(handle) = self.0.take() else {
            return;
        };
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("removing a staging dir: {e}"),
            Err(_) => tracing::warn!("the removal of a staging dir panicked"),
        }
    }
}

fn move_changes_in(staging: &Path, roots: &[PathBuf], delta: &Delta) -> Result<()> {
    // What changed is taken from the staging dir through a handle, too: a snapshot holds the
    // links a box made, and no link there is followed on the way to a listed path.
    let staged = Tree::open(staging)?;
    let staged_at = |p: &'_ Path| p.strip_prefix("/").unwrap_or(p).to_path_buf();
    // Every change is made through a handle on its root, no link followed below it.
    let trees = roots
        .iter()
        .filter(|r| fs::symlink_metadata(r).is_ok())
        .map(|r| Ok((r.as_path(), Tree::open(r)?)))
        .collect::<Result<Vec<_>>>()?;
    for p in &delta.remove {
        let (tree, rel) = locate(&trees, p)?;
        tree.remove(rel)?;
    }
    for p in &delta.fetch {
        let new = staged_at(p);
        let Some(incoming) = staged.kind(&new)? else {
            // restic restored all it was asked: the snapshot does not hold it (excluded).
            tracing::debug!("{} is in no snapshot; left as it is", show(p));
            continue;
        };
        let (tree, rel) = locate(&trees, p)?;
        let replace_in_one_step = incoming != crate::sys::box_tree::Kind::Dir
            && tree
                .kind(rel)?
                .is_some_and(|k| k != crate::sys::box_tree::Kind::Dir);
        if replace_in_one_step {
            tree.swap_in(&staged, &new, rel)?;
        } else {
            tree.remove(rel)?;
            tree.take_in(&staged, &new, rel)?;
        }
        crash::point("restore.mid-delta");
    }
    for d in &delta.dirs {
        let (tree, rel) = locate(&trees, &d.path)?;
        tree.set_dir_attrs(rel, d.mode, d.uid, d.gid)?;
    }
    tracing::debug!("moved what changed into place");
    Ok(())
}

/// A copy's entry's mode (as `stat` has it) and owner; None when it has none there.
pub(crate) fn mode_and_owner(path: &Path) -> Option<ModeAndOwner> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(path).ok()?;
    Some((m.mode() & 0o7777, m.uid(), m.gid()))
}

/// Restore snapshot `id` into a staging dir beside `anchor`, then swap into place the paths that
/// `paths_in(staging)` finds there; returns the paths now in place.
pub(crate) fn restore_in_place(
    restic: &dyn Repo,
    id: &SnapshotId,
    anchor: &Path,
    journal: &Path,
    paths_in: &dyn Fn(&Path) -> Result<Vec<PathBuf>>,
) -> Result<Vec<PathBuf>> {
    let staging = staging_for(anchor);
    if let Some(parent) = staging.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    remove_any(&staging).with_context(|| format!("clearing {}", staging.display()))?;
    restic.restore(id, &staging)?;
    crash::point("restore.after-staging");
    let paths = match paths_in(&staging) {
        Ok(p) => p,
        Err(e) => {
            let _ = remove_any(&staging);
            return Err(e.context(format!("restoring snapshot {id}")));
        }
    };
    let mut swapped: Vec<(PathBuf, Aside)> = Vec::new();
    let result = (|| -> Result<()> {
        for path in &paths {
            let staged = staging.join(path.strip_prefix("/").unwrap_or(path));
            if fs::symlink_metadata(&staged).is_err() {
                continue;
            }
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            if staged.is_dir() && host::is_mount_point(path) {
                swap_contents(&staged, path, journal)?;
                swapped.push((path.clone(), Aside::Inside));
                continue;
            }
            let both_files =
                !staged.is_dir() && fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir());
            if both_files {
                // A file is replaced atomically: readers see the old or the new one, never none.
                move_into(&staged, path)?;
                swapped.push((path.clone(), Aside::None));
                continue;
            }
            let aside = if fs::symlink_metadata(path).is_ok() {
                let aside = sibling(path, "previous");
                remove_any(&aside)?;
                fs::rename(path, &aside)
                    .with_context(|| format!("moving {} aside", path.display()))?;
                crash::point("restore.mid-swap");
                Aside::Sibling(aside)
            } else {
                Aside::None
            };
            swapped.push((path.clone(), aside));
            move_into(&staged, path)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        // Put every previous copy back where it was.
        for (path, aside) in swapped.iter().rev() {
            match aside {
                Aside::Sibling(aside) => {
                    let _ = remove_any(path);
                    let _ = fs::rename(aside, path);
                }
                Aside::Inside => {
                    let _ = put_contents_back(path);
                }
                Aside::None => {}
            }
        }
        let _ = remove_any(&staging);
        return Err(e.context(format!("restoring snapshot {id}")));
    }
    for (path, aside) in &swapped {
        match aside {
            Aside::Sibling(aside) => {
                remove_any(aside).with_context(|| format!("removing {}", aside.display()))?;
            }
            Aside::Inside => Tree::open(path)?.remove(Path::new(INSIDE_PREVIOUS))?,
            Aside::None => {}
        }
    }
    remove_any(&staging).with_context(|| format!("removing {}", staging.display()))?;
    remove_any(journal).with_context(|| format!("removing {}", journal.display()))?;
    Ok(swapped.into_iter().map(|(p, _)| p).collect())
}

/// Restore snapshot `id` and put `candidates` found in it in place *without replacing what is
/// there*: running boxes bind these files (by inode), so an existing file gets the new content
/// written into it and keeps its owner; an existing dir gets the snapshot's entries copied in
/// (nothing is removed from under a box); only what is missing is moved in. Returns what was
/// placed.
pub(crate) fn restore_into_live(
    restic: &dyn Repo,
    id: &SnapshotId,
    anchor: &Path,
    candidates: &[PathBuf],
) -> Result<Vec<PathBuf>> {
    let staging = sibling(anchor, "restore");
    if let Some(parent) = staging.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    remove_any(&staging).with_context(|| format!("clearing {}", staging.display()))?;
    restic.restore(id, &staging)?;
    let result = (|| -> Result<Vec<PathBuf>> {
        let mut placed = Vec::new();
        for path in candidates {
            let staged = staging.join(path.strip_prefix("/").unwrap_or(path));
            let Ok(new) = fs::symlink_metadata(&staged) else {
                continue;
            };
            match fs::symlink_metadata(path) {
                Ok(old) if old.is_file() && new.is_file() => {
                    let bytes = fs::read(&staged)?;
                    let mut f = fs::OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(path)
                        .with_context(|| format!("opening {}", path.display()))?;
                    std::io::Write::write_all(&mut f, &bytes)
                        .and_then(|()| f.sync_all())
                        .with_context(|| format!("writing {}", path.display()))?;
                    // A file shared with the boxes keeps the mode that shares it (the running
                    // boxes read and refresh it); the others take the snapshot's.
                    if !shared_with_boxes(&old) {
                        fs::set_permissions(path, new.permissions())?;
                    }
                }
                Ok(old) if old.is_dir() && new.is_dir() => {
                    let mut from = staged.clone().into_os_string();
                    from.push("/.");
                    cmd::output(Command::new("cp").arg("-a").arg(&from).arg(path))
                        .with_context(|| format!("copying into {}", path.display()))?;
                }
                Ok(_) => {
                    tracing::warn!(
                        "{} is not what the snapshot holds there (file or dir): left as it is",
                        path.display()
                    );
                    continue;
                }
                Err(_) => {
                    if let Some(parent) = path.parent() {
                        fs::create_dir_all(parent)
                            .with_context(|| format!("creating {}", parent.display()))?;
                    }
                    move_into(&staged, path)?;
                }
            }
            placed.push(path.clone());
            crash::point("globals.mid-pull");
        }
        Ok(placed)
    })();
    let _ = remove_any(&staging);
    result.with_context(|| format!("placing snapshot {id}"))
}

/// A node file ag-box shares with every box (root's, in their shared group).
fn shared_with_boxes(m: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (m.uid(), m.gid()) == (0, crate::plan::account::SHARED_GID)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::delta::{Change, Listed};
    use std::os::unix::fs::MetadataExt;

    /// A repository whose only snapshot is the tree under `dir`.
    struct OneTree(PathBuf);

    impl Repo for OneTree {
        fn ensure_repo(&self) -> Result<()> {
            Ok(())
        }
        fn backup(&self, _: &crate::plan::restic::BackupSpec) -> Result<crate::sys::ports::Backup> {
            anyhow::bail!("not used")
        }
        fn backup_changes(
            &self,
            _: &crate::plan::restic::ChangesSpec,
            _: &crate::sys::ports::Feed<'_>,
        ) -> Result<crate::sys::ports::Backup> {
            anyhow::bail!("not used")
        }
        fn restore(&self, _: &SnapshotId, target: &Path) -> Result<()> {
            let mut from = self.0.clone().into_os_string();
            from.push("/.");
            fs::create_dir_all(target)?;
            cmd::output(Command::new("cp").arg("-a").arg(from).arg(target))?;
            Ok(())
        }
        fn restore_changes(
            &self,
            _: &str,
            _: &crate::plan::delta::PublishedRef,
            _: &Path,
        ) -> Result<()> {
            anyhow::bail!("not used")
        }
        fn box_snapshots(&self, _: &str) -> Result<Vec<SnapshotId>> {
            anyhow::bail!("not used")
        }
        fn whole_snapshots(&self, _: &str) -> Result<Vec<SnapshotId>> {
            anyhow::bail!("not used")
        }
        fn snapshots(&self) -> Result<Vec<crate::plan::restic::SnapshotInfo>> {
            anyhow::bail!("not used")
        }
        fn forget(&self, _: &[SnapshotId]) -> Result<()> {
            anyhow::bail!("not used")
        }
        fn prune(&self) -> Result<()> {
            anyhow::bail!("not used")
        }
        fn changes(&self, _: &SnapshotId, _: &SnapshotId) -> Result<(Vec<Change>, Vec<Listed>)> {
            anyhow::bail!("not used")
        }
        fn listing(&self, _: &SnapshotId) -> Result<Vec<Listed>> {
            anyhow::bail!("not used")
        }
        fn restore_only(&self, _: &SnapshotId, _: &Path, _: &[PathBuf]) -> Result<()> {
            anyhow::bail!("not used")
        }
        fn restores_in_place(&self) -> bool {
            false
        }
        fn restore_path(
            &self,
            _: &SnapshotId,
            _: &Path,
            _: &[PathBuf],
            _: &[PathBuf],
        ) -> Result<()> {
            anyhow::bail!("not used")
        }
    }

    fn base() -> tempfile::TempDir {
        fs::create_dir_all(crate::UNIT_TEST_DIR).unwrap();
        tempfile::tempdir_in(crate::UNIT_TEST_DIR).unwrap()
    }

    #[test]
    fn a_cut_off_swap_is_put_back() {
        let dir = base();
        let journal = dir.path().join("swap.json");
        let p = dir.path().join("proj");
        // Moved aside, the new copy never came in.
        fs::create_dir_all(sibling(&p, "previous")).unwrap();
        fs::write(sibling(&p, "previous").join("f"), "old").unwrap();
        // Swapped, the old copy not yet removed.
        let q = dir.path().join("home");
        fs::create_dir_all(&q).unwrap();
        fs::write(q.join("f"), "new").unwrap();
        fs::create_dir_all(sibling(&q, "previous")).unwrap();
        // A mount point's contents half-swapped: a aside (as recorded), b new.
        let m = dir.path().join("mnt");
        fs::create_dir_all(&m).unwrap();
        let made = Tree::open(&m)
            .unwrap()
            .make_private_dir(Path::new(INSIDE_PREVIOUS))
            .unwrap();
        let record = SwapRecord {
            live: m.clone(),
            dev: made.st_dev,
            ino: made.st_ino,
        };
        fs::write(&journal, serde_json::to_vec(&record).unwrap()).unwrap();
        fs::write(m.join(INSIDE_PREVIOUS).join("a"), "old-a").unwrap();
        fs::write(m.join("b"), "new-b").unwrap();
        fs::create_dir_all(m.join(INSIDE_RESTORE)).unwrap();
        recover_leftovers(&[p.clone(), q.clone(), m.clone()], &journal).unwrap();
        assert_eq!(fs::read_to_string(p.join("f")).unwrap(), "old");
        assert_eq!(fs::read_to_string(q.join("f")).unwrap(), "new");
        assert!(!sibling(&q, "previous").exists());
        assert_eq!(names(&m), ["a"]);
        assert!(!journal.exists());
    }

    fn names(d: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// What is left of a staging dir beside the copy goes while the up goes on; one inside
    /// the copy (a project that is a mount point) goes before anything walks the copy.
    #[test]
    fn a_staging_dir_goes_after_the_moves_beside_the_copy_or_at_once_inside_it() {
        fs::create_dir_all(crate::UNIT_TEST_DIR).unwrap();
        let dir = tempfile::tempdir_in(crate::UNIT_TEST_DIR).unwrap();
        let proj = dir.path().join("proj");
        for staging in [dir.path().join("staging"), proj.join(INSIDE_RESTORE)] {
            fs::create_dir_all(proj.join("a/b")).unwrap();
            let staged = staging.join(proj.strip_prefix("/").unwrap());
            fs::create_dir_all(staged.join("a/b")).unwrap();
            fs::write(staged.join("a/b/f"), "new").unwrap();
            let delta = Delta {
                remove: vec![],
                fetch: vec![proj.join("a/b/f")],
                dirs: vec![],
            };
            let clearing = apply_delta(&staging, std::slice::from_ref(&proj), &delta).unwrap();
            let inside = staging.starts_with(&proj);
            assert_eq!(clearing.0.is_some(), !inside);
            if inside {
                assert!(!staging.exists());
            }
            drop(clearing);
            assert!(!staging.exists());
            assert_eq!(fs::read_to_string(proj.join("a/b/f")).unwrap(), "new");
        }
    }

    /// A dir for a test, with a host dir holding a file of root's (`secret`: "root only"), and
    /// the path of a project beside it.
    fn host_file_and_project() -> (tempfile::TempDir, PathBuf, PathBuf) {
        fs::create_dir_all(crate::UNIT_TEST_DIR).unwrap();
        let dir = tempfile::tempdir_in(crate::UNIT_TEST_DIR).unwrap();
        let host = dir.path().join("host");
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("secret"), "root only").unwrap();
        let proj = dir.path().join("proj");
        (dir, host, proj)
    }

    /// Whatever an earlier restore left goes, and the dir made is root's alone.
    #[test]
    fn a_fresh_staging_dir_is_empty_and_roots_alone() {
        use std::os::unix::fs::PermissionsExt;
        fs::create_dir_all(crate::UNIT_TEST_DIR).unwrap();
        let dir = tempfile::tempdir_in(crate::UNIT_TEST_DIR).unwrap();
        let proj = dir.path().join("proj");
        fs::create_dir_all(&proj).unwrap();
        let staging = fresh_staging(&proj).unwrap();
        fs::write(staging.join("left"), "x").unwrap();
        assert_eq!(fresh_staging(&proj).unwrap(), staging);
        assert_eq!(names(&staging), Vec::<String>::new());
        let mode = fs::metadata(&staging).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    /// A changed file takes the place of the copy's, or of a link a box planted there, by
    /// exchange: what stood there goes with the staging dir, beside the copy or inside it, and
    /// no link is followed.
    #[test]
    fn a_changed_file_takes_the_place_of_the_old_one_or_of_a_planted_link() {
        let (dir, host, proj) = host_file_and_project();
        let d = dir.path();
        for staging in [d.join("staging"), proj.join(INSIDE_RESTORE)] {
            fs::create_dir_all(proj.join("a")).unwrap();
            fs::write(proj.join("a/f"), "old").unwrap();
            let _ = fs::remove_file(proj.join("a/l"));
            std::os::unix::fs::symlink(host.join("secret"), proj.join("a/l")).unwrap();
            let staged = staging.join(proj.strip_prefix("/").unwrap());
            fs::create_dir_all(staged.join("a")).unwrap();
            fs::write(staged.join("a/f"), "new").unwrap();
            fs::write(staged.join("a/l"), "new in the link's place").unwrap();
            let delta = Delta {
                remove: vec![],
                fetch: vec![proj.join("a/f"), proj.join("a/l")],
                dirs: vec![],
            };
            drop(apply_delta(&staging, std::slice::from_ref(&proj), &delta).unwrap());
            assert!(!staging.exists());
            assert_eq!(fs::read_to_string(proj.join("a/f")).unwrap(), "new");
            assert!(fs::symlink_metadata(proj.join("a/l")).unwrap().is_file());
            assert_eq!(
                fs::read_to_string(proj.join("a/l")).unwrap(),
                "new in the link's place"
            );
            assert_eq!(
                fs::read_to_string(host.join("secret")).unwrap(),
                "root only"
            );
            assert_eq!(names(&host), ["secret"]);
        }
    }

    /// A changes snapshot is a box's work: one (forged, or read from a box's snapshot) whose
    /// staged tree holds a link where the copy has a dir moves nothing through that link.
    #[test]
    fn a_link_staged_above_a_listed_path_is_not_followed() {
        let (dir, host, proj) = host_file_and_project();
        let d = dir.path();
        fs::create_dir_all(proj.join("lnk")).unwrap();
        let staging = d.join("staging");
        let staged_proj = staging.join(proj.strip_prefix("/").unwrap());
        fs::create_dir_all(&staged_proj).unwrap();
        std::os::unix::fs::symlink(&host, staged_proj.join("lnk")).unwrap();
        // The attack is in place: through the staged link, the listed path is the host's file.
        assert_eq!(
            fs::read_to_string(staged_proj.join("lnk/secret")).unwrap(),
            "root only"
        );
        let delta = Delta {
            remove: vec![],
            fetch: vec![proj.join("lnk/secret")],
            dirs: vec![],
        };
        let refused = apply_delta(&staging, std::slice::from_ref(&proj), &delta).unwrap_err();
        assert!(format!("{refused:#}").contains("no link"), "{refused:#}");
        assert_eq!(
            fs::read_to_string(host.join("secret")).unwrap(),
            "root only"
        );
        assert!(!proj.join("lnk/secret").exists());
        assert!(!staging.exists());
    }

    #[test]
    fn work_names_a_box_planted_are_removed_never_followed() {
        let dir = base();
        let journal = dir.path().join("swap.json");
        let host = dir.path().join("host-dir");
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("secret"), "s").unwrap();
        // A link to a host dir, a real dir of the box's making (no journal), a link as staging.
        let links = dir.path().join("links");
        fs::create_dir_all(&links).unwrap();
        fs::write(links.join("mine"), "m").unwrap();
        std::os::unix::fs::symlink(&host, links.join(INSIDE_PREVIOUS)).unwrap();
        std::os::unix::fs::symlink(&host, links.join(INSIDE_RESTORE)).unwrap();
        let made = dir.path().join("made");
        fs::create_dir_all(made.join(INSIDE_PREVIOUS)).unwrap();
        fs::write(made.join(INSIDE_PREVIOUS).join("x"), "x").unwrap();
        fs::write(made.join("mine"), "m").unwrap();
        // A journal naming another dir's aside does not vouch for this one.
        let other = SwapRecord {
            live: dir.path().join("elsewhere"),
            dev: 0,
            ino: 0,
        };
        fs::write(&journal, serde_json::to_vec(&other).unwrap()).unwrap();
        recover_leftovers(&[links.clone(), made.clone()], &journal).unwrap();
        assert_eq!(names(&host), ["secret"]);
        assert_eq!(names(&links), ["mine"]);
        assert_eq!(names(&made), ["mine"]);
    }

    #[test]
    fn a_pull_writes_into_the_files_boxes_bind() {
        let dir = base();
        let live = dir.path().join("home");
        let snap = dir.path().join("snap");
        let rel = live.strip_prefix("/").unwrap();
        fs::create_dir_all(&live).unwrap();
        fs::write(live.join("cred"), "old").unwrap();
        let shared = crate::plan::account::SHARED_GID;
        std::os::unix::fs::chown(live.join("cred"), Some(0), Some(shared)).unwrap();
        fs::set_permissions(
            live.join("cred"),
            std::os::unix::fs::PermissionsExt::from_mode(0o660),
        )
        .unwrap();
        fs::write(live.join("config"), "old").unwrap();
        fs::create_dir_all(live.join("skills")).unwrap();
        fs::write(live.join("skills/mine"), "kept").unwrap();
        fs::create_dir_all(snap.join(rel).join("skills")).unwrap();
        fs::write(snap.join(rel).join("cred"), "new").unwrap();
        fs::write(snap.join(rel).join("config"), "new").unwrap();
        for f in ["cred", "config"] {
            fs::set_permissions(
                snap.join(rel).join(f),
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .unwrap();
        }
        fs::write(snap.join(rel).join("skills/theirs"), "added").unwrap();
        fs::write(snap.join(rel).join("fresh"), "moved in").unwrap();
        let inode = fs::metadata(live.join("cred")).unwrap().ino();
        let candidates = ["cred", "config", "skills", "fresh", "absent"].map(|n| live.join(n));
        let placed = restore_into_live(
            &OneTree(snap),
            &"s1".into(),
            &live.join(".globals"),
            &candidates,
        )
        .unwrap();
        assert_eq!(placed, candidates[..4].to_vec());
        let cred = fs::metadata(live.join("cred")).unwrap();
        assert_eq!(
            (cred.ino(), cred.uid(), cred.gid(), cred.mode() & 0o777),
            (inode, 0, shared, 0o660),
            "the same file, still shared with the boxes"
        );
        assert_eq!(
            fs::metadata(live.join("config")).unwrap().mode() & 0o777,
            0o600,
            "the snapshot's mode"
        );
        assert_eq!(fs::read_to_string(live.join("cred")).unwrap(), "new");
        assert_eq!(
            fs::read_to_string(live.join("skills/mine")).unwrap(),
            "kept"
        );
        assert_eq!(
            fs::read_to_string(live.join("skills/theirs")).unwrap(),
            "added"
        );
        assert_eq!(fs::read_to_string(live.join("fresh")).unwrap(), "moved in");
        assert!(!sibling(&live.join(".globals"), "restore").exists());
    }
}
