//! A delta restore: bring a copy known to equal snapshot A to snapshot B by writing only what
//! changed, as rsync would, instead of letting restic look at every file. What changed comes
//! from the node that made B ([`Published`]: it compared its copy's metadata when it restored
//! A and when it parked B, ctimes cannot be forged from inside a box, and it saved the changed
//! paths in a small snapshot of their own, [`PublishedRef`]), else from `restic diff A B`
//! (which reads both trees whole: a second or so for 20,000 files).
//!
//! The changes become two lists of subtrees: those to remove, and those to fetch from B whole
//! (restic restores a path's subtree when the path is included). A path whose ancestor is in
//! either list is covered by it. A directory whose own mode or owner changed gets them set
//! where the parking node published them ([`Published::dirs`]). `restic diff` says nothing of
//! modes and owners (its `--metadata` flags every file saved on another node, whose inode and
//! ctime differ), so a delta from it also compares `restic ls` of the snapshot with the copy
//! ([`with_attrs`]): a file whose mode or owner differs is fetched, a dir gets them set.

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::restic::Repository;
use crate::plan::snapshot_id::SnapshotId;

/// One change `restic diff --json` prints; dirs end with `/`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct Change {
    pub path: String,
    pub modifier: String,
}

#[cfg(test)]
impl Change {
    pub(crate) fn new(path: &str, modifier: &str) -> Change {
        Change {
            path: path.into(),
            modifier: modifier.into(),
        }
    }
}

/// The `change` lines of `restic diff --json`; other lines are statistics.
pub(crate) fn parse_diff_line(line: &str) -> Option<Change> {
    #[derive(Deserialize)]
    struct Line {
        message_type: String,
        #[serde(flatten)]
        change: Option<Change>,
    }
    let l: Line = serde_json::from_str(line).ok()?;
    (l.message_type == "change").then_some(l.change).flatten()
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Delta {
    /// Removed in B: deleted from the copy.
    pub remove: Vec<PathBuf>,
    /// New, changed, or of another type in B: replaced by B's subtree.
    pub fetch: Vec<PathBuf>,
    /// Dirs in both whose mode or owner changed (outside what is fetched): set as in B.
    pub dirs: Vec<DirAttrs>,
}

/// A dir's mode (permission bits) and owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DirAttrs {
    pub path: PathBuf,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// More changes than this and restic's own restore is as quick: restic matches every include
/// against every entry it walks (a few milliseconds per include on 20,000 files).
pub(crate) const MAX_CHANGES: usize = 1000;

/// A published delta is restored whole from a snapshot of its own (no includes to match), so it
/// is bounded by what its list costs to hold: about 150 bytes a path. 1% of a 200,000-file
/// tree is 2,000 paths.
pub(crate) const MAX_PUBLISHED: usize = 50_000;

/// The most a published delta's list may take as JSON (50,000 paths of 600 bytes).
pub(crate) const MAX_PUBLISHED_BYTES: u64 = 32 << 20;

/// Includes per restic process, at most: restic matches each against every entry it walks, and
/// past about 200 a process costs more than two of half the size (measured: 0.12 s for one
/// include, 0.36 s for 200, 0.75 s for 400).
const INCLUDES_PER_FETCH: usize = 200;

/// The paths to fetch (sorted) in consecutive runs, one restic process each, run side by side
/// `width` at a time. Up to [`INCLUDES_PER_FETCH`] paths go in one run: two processes load the
/// repository's index twice, and only paths one process restores keep their hard links. Past
/// that, as many runs as fill every wave (a wave of fewer runs than cores leaves cores idle
/// while the run length is the same), each with at most that many includes. Consecutive paths
/// share their dirs, so each process walks only its part of the tree.
pub(crate) fn fetch_batches(fetch: &[PathBuf], width: usize) -> Vec<Vec<PathBuf>> {
    if fetch.is_empty() {
        return Vec::new();
    }
    if fetch.len() <= INCLUDES_PER_FETCH {
        return vec![fetch.to_vec()];
    }
    let width = width.max(1);
    let waves = fetch.len().div_ceil(INCLUDES_PER_FETCH * width);
    let runs = (waves * width).min(fetch.len());
    fetch
        .chunks(fetch.len().div_ceil(runs))
        .map(<[PathBuf]>::to_vec)
        .collect()
}

/// What to do with the copy for `changes`; None when a change falls outside `roots` (the
/// snapshots hold paths this node does not keep) or there are too many.
pub(crate) fn plan(changes: &[Change], roots: &[PathBuf]) -> Option<Delta> {
    let mut delta = Delta::default();
    for c in changes {
        let is_dir = c.path.ends_with('/');
        let m = c.modifier.as_str();
        if is_dir && m == "U" {
            continue;
        }
        let path = PathBuf::from(c.path.trim_end_matches('/'));
        if !roots.iter().any(|r| path.starts_with(r)) {
            return None;
        }
        if m == "-" {
            delta.remove.push(path);
        } else if m.contains(['+', 'M', 'T']) || (m.contains('U') && !is_dir) {
            delta.fetch.push(path);
        }
    }
    bounded(delta.fetch, delta.remove, Vec::new(), MAX_CHANGES)
}

/// A file or dir of a snapshot, as `restic ls --json` lists it (symlinks and the rest are left
/// out: their mode is not set apart from them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub attrs: DirAttrs,
    pub dir: bool,
}

/// `restic ls --json <snapshot>`: every entry of it, with its mode and owner.
pub(crate) fn ls_args(snapshot: &SnapshotId) -> Vec<String> {
    ["ls", "--json", "--no-lock", snapshot.as_str()]
        .map(String::from)
        .to_vec()
}

/// A file or dir of a `restic ls --json` line; its mode as `stat` has it (Go keeps the set-id
/// and sticky bits apart from the permission bits).
pub(crate) fn parse_ls_line(line: &str) -> Option<Listed> {
    #[derive(Deserialize)]
    struct Node {
        struct_type: String,
        #[serde(rename = "type")]
        kind: String,
        path: PathBuf,
        mode: u32,
        uid: u32,
        gid: u32,
    }
    const GO_SETUID: u32 = 1 << 23;
    const GO_SETGID: u32 = 1 << 22;
    const GO_STICKY: u32 = 1 << 20;
    let n: Node = serde_json::from_str(line).ok()?;
    let dir = match n.kind.as_str() {
        "dir" => true,
        "file" => false,
        _ => return None,
    };
    if n.struct_type != "node" {
        return None;
    }
    let special = [
        (GO_SETUID, 0o4000),
        (GO_SETGID, 0o2000),
        (GO_STICKY, 0o1000),
    ]
    .iter()
    .filter(|(go, _)| n.mode & go != 0)
    .fold(0, |acc, (_, unix)| acc | unix);
    Some(Listed {
        attrs: DirAttrs {
            path: n.path,
            mode: (n.mode & 0o777) | special,
            uid: n.uid,
            gid: n.gid,
        },
        dir,
    })
}

/// An entry's mode (permission bits as `stat` has them), uid and gid.
pub(crate) type ModeAndOwner = (u32, u32, u32);

/// `delta`, plus what `listed` (every file and dir of the snapshot) holds inside `roots` with
/// another mode or owner than the copy has (`ours`: mode, uid, gid; None where the copy has
/// nothing): such a file is fetched, such a dir gets them set. The dirs above the roots are
/// the node's, not the box's. What `delta` fetches or removes is left to it. None past
/// [`MAX_CHANGES`].
pub(crate) fn with_attrs(
    delta: Delta,
    listed: &[Listed],
    roots: &[PathBuf],
    ours: &dyn Fn(&Path) -> Option<ModeAndOwner>,
) -> Option<Delta> {
    let Delta {
        mut fetch,
        remove,
        mut dirs,
    } = delta;
    let left: std::collections::BTreeSet<&Path> =
        fetch.iter().chain(&remove).map(PathBuf::as_path).collect();
    let mut found = Vec::new();
    for l in listed {
        let a = &l.attrs;
        if !roots.iter().any(|r| a.path.starts_with(r))
            || a.path.ancestors().any(|p| left.contains(p))
        {
            continue;
        }
        match ours(&a.path) {
            Some(o) if o != (a.mode, a.uid, a.gid) => found.push(l),
            _ => {}
        }
        if fetch.len() + dirs.len() + found.len() > MAX_CHANGES {
            return None;
        }
    }
    for l in found {
        if l.dir {
            dirs.push(l.attrs.clone());
        } else {
            fetch.push(l.attrs.path.clone());
        }
    }
    bounded(fetch, remove, dirs, MAX_CHANGES)
}

/// The outermost of `fetch` and of `remove` (less what a fetch covers), and the `dirs` no fetch
/// covers; None past `max` paths.
fn bounded(
    fetch: Vec<PathBuf>,
    remove: Vec<PathBuf>,
    mut dirs: Vec<DirAttrs>,
    max: usize,
) -> Option<Delta> {
    let fetch = outermost(fetch, &[]);
    let remove = outermost(remove, &fetch);
    let fetched: HashSet<&Path> = fetch.iter().map(PathBuf::as_path).collect();
    dirs.retain(|d| !d.path.ancestors().any(|a| fetched.contains(a)));
    dirs.sort_by(|a, b| a.path.cmp(&b.path));
    (fetch.len() + remove.len() + dirs.len() <= max).then_some(Delta {
        remove,
        fetch,
        dirs,
    })
}

/// `paths` without those below another of them or below one of `covered`, sorted.
fn outermost(mut paths: Vec<PathBuf>, covered: &[PathBuf]) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    // By set, ancestor by ancestor: tens of thousands of paths cost a moment, not minutes.
    let covered: HashSet<&Path> = covered.iter().map(PathBuf::as_path).collect();
    let mut kept: HashSet<PathBuf> = HashSet::new();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        // Sorted, so every ancestor of `p` in `paths` was seen before it.
        if !p
            .ancestors()
            .any(|a| kept.contains(a) || covered.contains(a))
        {
            kept.insert(p.clone());
            out.push(p);
        }
    }
    out
}

/// A copy's entries by path with their metadata, as `sys::digest` reads them; each value
/// starts with the entry's kind (`d` dir, `f` file, `l` symlink).
pub(crate) type Manifest = BTreeMap<String, String>;

/// The bytes of the files of `now` that are new or differ from `before` (None: every file),
/// by their size: at most what a snapshot of `now` reads in over the one `before` was kept for.
pub(crate) fn bytes_changed(before: Option<&Manifest>, now: &Manifest) -> u64 {
    now.iter()
        .filter(|(path, line)| {
            line.starts_with('f') && before.is_none_or(|b| b.get(*path) != Some(*line))
        })
        .filter_map(|(_, line)| line.split('\0').nth(1)?.parse::<u64>().ok())
        .sum()
}

/// The bytes of the files of `now` changed (their ctime) at or after `since` (nanoseconds
/// since the Unix epoch): at most what a snapshot of `now` reads in over one that began then.
pub(crate) fn bytes_changed_since(now: &Manifest, since: i64) -> u64 {
    now.values()
        .filter(|line| line.starts_with('f'))
        .filter_map(|line| {
            let mut fields = line.split('\0').skip(1);
            let size = fields.next()?.parse::<u64>().ok()?;
            let (secs, nanos) = fields.nth(1)?.split_once('.')?;
            let ctime = secs
                .parse::<i64>()
                .ok()?
                .checked_mul(1_000_000_000)?
                .checked_add(nanos.parse::<i64>().ok()?)?;
            (ctime >= since).then_some(size)
        })
        .sum()
}

/// Whether a file of `after` changed from `before` with its size and modification time kept
/// (written with `touch -r`, `cp -p`, `tar x`, or only its mode or owner changed): a backup
/// that judges files by size and time alone (restic's `--ignore-inode`) would keep its old
/// contents.
pub(crate) fn changed_keeping_size_and_time(before: &Manifest, after: &Manifest) -> bool {
    after.iter().any(|(path, now)| {
        now.starts_with('f')
            && before
                .get(path)
                .is_some_and(|was| was != now && judged(was).eq(judged(now)))
    })
}

/// A manifest line's kind, size and modification time: its first three fields.
fn judged(line: &str) -> impl Iterator<Item = &str> {
    line.splitn(4, '\0').take(3)
}

/// What a node publishes as it parks: its copy went from snapshot `from` to `to` by `delta`.
/// It travels as a file in the snapshot of the changed paths ([`PublishedRef::list`]), so the
/// bucket learns no more of the box than restic's own snapshots tell it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Published {
    pub from: SnapshotId,
    pub to: SnapshotId,
    pub fetch: Vec<PathBuf>,
    pub remove: Vec<PathBuf>,
    /// Absent in what versions before it published.
    #[serde(default)]
    pub dirs: Vec<DirAttrs>,
}

impl Published {
    /// The paths it names, each way.
    pub(crate) fn path_count(&self) -> usize {
        self.fetch.len() + self.remove.len() + self.dirs.len()
    }
}

/// Where a published delta is: snapshot `snapshot` holds the paths that changed from `from` to
/// `to` and, at `list`, the [`Published`] that names them. Kept in the bucket beside the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PublishedRef {
    pub from: SnapshotId,
    pub to: SnapshotId,
    pub snapshot: SnapshotId,
    pub list: PathBuf,
    /// Which repository holds `snapshot`; absent (the main one) in what versions before the
    /// changes repository published, and where none was made.
    #[serde(default, skip_serializing_if = "Repository::is_main")]
    pub repository: Repository,
    /// Where in `snapshot` the archive of the paths and the list is
    /// (`sys::changes_archive`); absent in what versions before it published, whose
    /// snapshot holds the paths and the list themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<PathBuf>,
}

impl PublishedRef {
    /// It leads from `from` (what the copy here equals) to `to`, and its list is a plain
    /// absolute path (it is read inside the dir the snapshot is restored into) outside the
    /// box's `roots`: a parking node writes it in its own state dir, so a list inside a box's
    /// tree is one the box wrote.
    pub(crate) fn leads(&self, from: &SnapshotId, to: &SnapshotId, roots: &[PathBuf]) -> bool {
        self.from == *from
            && self.to == *to
            && self.list.is_absolute()
            && plain(&self.list)
            && !roots.iter().any(|r| self.list.starts_with(r))
    }
}

/// Only the root and names: no `..`, no `.`.
fn plain(path: &Path) -> bool {
    path.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// What a quick park's list names as its `to`: it lies in the changes snapshot that is the
/// box's new state, whose id is not known while the list is written.
pub(crate) const QUICK_TO: &str = "quick-park";

impl PublishedRef {
    /// A quick park's: its changes snapshot is the state it leads to.
    pub(crate) fn is_quick(&self) -> bool {
        self.snapshot == self.to
    }

    /// What its list must name as `to`.
    pub(crate) fn list_to(&self) -> SnapshotId {
        if self.is_quick() {
            SnapshotId::from(QUICK_TO)
        } else {
            self.to.clone()
        }
    }
}

impl Published {
    pub(crate) fn new(from: SnapshotId, to: SnapshotId, delta: Delta) -> Published {
        Published {
            from,
            to,
            fetch: delta.fetch,
            remove: delta.remove,
            dirs: delta.dirs,
        }
    }
}

/// What changed in a copy from manifest `before` to `after`: entries added, removed, of
/// another kind, files and symlinks whose metadata differ, and dirs whose mode or owner differ
/// (a dir's times change as children come and go: its children tell). `excluded` paths are in
/// no snapshot. None when there are too many changes.
pub(crate) fn between(
    before: &Manifest,
    after: &Manifest,
    excluded: &dyn Fn(&Path) -> bool,
) -> Option<Delta> {
    let kind = |v: &str| v.chars().next();
    let mut delta = Delta::default();
    for (path, new) in after {
        match before.get(path) {
            Some(old) if old == new => {}
            Some(old) if kind(old) == Some('d') && kind(new) == Some('d') => {
                if let Some(d) = dir_attrs(path, new)
                    && dir_attrs(path, old).as_ref() != Some(&d)
                {
                    delta.dirs.push(d);
                }
            }
            _ => delta.fetch.push(PathBuf::from(path)),
        }
    }
    delta.remove = before
        .keys()
        .filter(|p| !after.contains_key(*p))
        .map(PathBuf::from)
        .collect();
    let kept = |paths: Vec<PathBuf>| -> Vec<PathBuf> {
        paths.into_iter().filter(|p| !excluded(p)).collect()
    };
    delta.dirs.retain(|d| !excluded(&d.path));
    bounded(
        kept(delta.fetch),
        kept(delta.remove),
        delta.dirs,
        MAX_PUBLISHED,
    )
}

/// A dir's mode and owner from its manifest value (`sys::digest::stat_line`: kind, size, mtime,
/// ctime, inode, mode in octal, uid:gid, ...).
fn dir_attrs(path: &str, value: &str) -> Option<DirAttrs> {
    let fields: Vec<&str> = value.split('\0').collect();
    let (uid, gid) = fields.get(6)?.split_once(':')?;
    Some(DirAttrs {
        path: PathBuf::from(path),
        mode: u32::from_str_radix(fields.get(5)?, 8).ok()? & 0o7777,
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
    })
}

/// A published delta, when it leads from `from` (what the copy here equals) to `to`, touches
/// only `roots` and names at most [`MAX_PUBLISHED`] paths.
pub(crate) fn usable(
    p: &Published,
    from: &SnapshotId,
    to: &SnapshotId,
    roots: &[PathBuf],
) -> Option<Delta> {
    let inside = |x: &PathBuf| plain(x) && roots.iter().any(|r| x.starts_with(r));
    (p.from == *from
        && p.to == *to
        && p.fetch.iter().all(inside)
        && p.remove.iter().all(inside)
        && p.dirs.iter().all(|d| inside(&d.path))
        && p.path_count() <= MAX_PUBLISHED)
        // As a plan makes it (sorted, each path once, none below another): a list read from a
        // snapshot that names a path twice would have the moves put its old entry back.
        .then(|| {
            bounded(
                p.fetch.clone(),
                p.remove.clone(),
                p.dirs.clone(),
                MAX_PUBLISHED,
            )
        })
        .flatten()
}

/// `restic restore <to> --target <staging> --include ...`: only the paths to fetch. No lock:
/// the copy is not touched by it, so a concurrent prune can only make it fail.
pub(crate) fn fetch_args(
    to: &SnapshotId,
    staging: &Path,
    fetch: &[PathBuf],
    sparse: bool,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "restore".into(),
        "--json".into(),
        "--no-lock".into(),
        to.to_string(),
        "--target".into(),
        staging.to_string_lossy().into_owned(),
    ];
    if sparse {
        a.push("--sparse".into());
    }
    for p in fetch {
        a.extend(["--include".into(), pattern(p)]);
    }
    a
}

/// `restic diff --json <from> <to>`: content, type, added and removed. (Not `--metadata`: it
/// flags every file saved on another node, whose inode and ctime differ.)
pub(crate) fn diff_args(from: &SnapshotId, to: &SnapshotId) -> Vec<String> {
    ["diff", "--json", "--no-lock", from.as_str(), to.as_str()]
        .map(String::from)
        .to_vec()
}

/// A path as a restic pattern that matches it alone (and what is below it).
fn pattern(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, '\\' | '*' | '?' | '[') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_changed_with_its_size_and_time_kept_is_told_from_one_changed_otherwise() {
        // As `sys::digest` writes a line: kind, size, mtime, ctime, inode, mode, owner, target.
        let line = |kind: &str, size: &str, mtime: &str, ctime: &str| {
            [kind, size, mtime, ctime, "12", "100644", "1000:1000", ""].join("\0")
        };
        let before: Manifest = [
            ("/p/a".to_string(), line("f", "3", "1.0", "1.0")),
            ("/p/d".to_string(), line("d", "0", "1.0", "1.0")),
        ]
        .into();
        let with = |path: &str, l: String| -> Manifest {
            let mut m = before.clone();
            m.insert(path.into(), l);
            m
        };
        assert!(!changed_keeping_size_and_time(&before, &before));
        let changed = |l: String| changed_keeping_size_and_time(&before, &with("/p/a", l));
        assert!(!changed(line("f", "4", "1.0", "2.0")));
        assert!(!changed(line("f", "3", "2.0", "2.0")));
        assert!(changed(line("f", "3", "1.0", "2.0")));
        // A dir's times say nothing of a file's contents.
        let dir = with("/p/d", line("d", "0", "1.0", "2.0"));
        assert!(!changed_keeping_size_and_time(&before, &dir));
    }

    use super::*;
    use pretty_assertions::assert_eq;

    fn paths(p: &[&str]) -> Vec<PathBuf> {
        p.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn changes_become_outermost_subtrees() {
        let changes = [
            Change::new("/", "U"),
            Change::new("/p/", "U"),
            Change::new("/p/a", "M"),
            Change::new("/p/mode-only", "U"),
            Change::new("/p/d/", "U"),
            Change::new("/p/gone/", "-"),
            Change::new("/p/gone/g", "-"),
            Change::new("/p/link/", "TU"),
            Change::new("/p/link/x", "-"),
            Change::new("/p/new/", "+"),
            Change::new("/p/new/f", "+"),
            Change::new("/h/.claude/s.jsonl", "M"),
        ];
        assert_eq!(
            plan(&changes, &paths(&["/p", "/h"])),
            Some(Delta {
                dirs: Vec::new(),
                remove: paths(&["/p/gone"]),
                fetch: paths(&[
                    "/h/.claude/s.jsonl",
                    "/p/a",
                    "/p/link",
                    "/p/mode-only",
                    "/p/new"
                ]),
            })
        );
    }

    #[test]
    fn a_change_outside_the_roots_or_too_many_refuse_the_delta() {
        assert_eq!(
            plan(&[Change::new("/elsewhere/f", "+")], &paths(&["/p"])),
            None
        );
        let many: Vec<Change> = (0..=MAX_CHANGES)
            .map(|i| Change::new(&format!("/p/f{i}"), "M"))
            .collect();
        assert_eq!(plan(&many, &paths(&["/p"])), None);
        assert_eq!(
            plan(&many[1..], &paths(&["/p"])).map(|d| d.fetch.len()),
            Some(MAX_CHANGES)
        );
        // A root that is a prefix of another path's name is not its ancestor.
        assert_eq!(plan(&[Change::new("/pp/f", "+")], &paths(&["/p"])), None);
    }

    fn manifest(entries: &[(&str, &str)]) -> Manifest {
        entries
            .iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_copy_compared_with_itself_at_its_restore() {
        let before = manifest(&[
            ("/p", "d 1"),
            ("/p/a", "f 1"),
            ("/p/same", "f 1"),
            ("/p/gone", "d 1"),
            ("/p/gone/x", "f 1"),
            ("/p/link", "l 1"),
            ("/p/.auth-secret", "f 1"),
            ("/p/__pycache__/c.pyc", "f 1"),
        ]);
        let after = manifest(&[
            ("/p", "d 2"),
            ("/p/a", "f 2"),
            ("/p/same", "f 1"),
            ("/p/link", "d 2"),
            ("/p/link/in", "f 2"),
            ("/p/new", "d 2"),
            ("/p/new/f", "f 2"),
            ("/p/.auth-secret", "f 2"),
        ]);
        let excluded = |p: &Path| {
            p.components()
                .any(|c| c.as_os_str() == ".auth-secret" || c.as_os_str() == "__pycache__")
        };
        assert_eq!(
            between(&before, &after, &excluded),
            Some(Delta {
                remove: paths(&["/p/gone"]),
                fetch: paths(&["/p/a", "/p/link", "/p/new"]),
                dirs: Vec::new(),
            })
        );
        let many: Manifest = (0..=MAX_PUBLISHED)
            .map(|i| (format!("/p/{i}"), "f".into()))
            .collect();
        assert_eq!(between(&Manifest::new(), &many, &|_| false), None);
    }

    /// A dir's manifest value as `sys::digest::stat_line` writes it.
    fn dir(time: u32, mode: &str, owner: &str) -> String {
        format!("d\x000\x00{time}.0\x00{time}.0\x007\x00{mode}\x00{owner}\x00")
    }

    #[test]
    fn a_dirs_mode_or_owner_travels_and_its_times_do_not() {
        let before = manifest(&[
            ("/p", &dir(1, "40755", "1000:1000")),
            ("/p/keys", &dir(1, "40755", "1000:1000")),
            ("/p/theirs", &dir(1, "40755", "1000:1000")),
            ("/p/touched", &dir(1, "40755", "1000:1000")),
            ("/p/swapped", &dir(1, "40755", "1000:1000")),
            ("/p/swapped/sub", &dir(1, "40755", "1000:1000")),
            ("/p/.auth-secret", &dir(1, "40700", "0:0")),
        ]);
        let after = manifest(&[
            ("/p", &dir(2, "40755", "1000:1000")),
            ("/p/keys", &dir(2, "42700", "1000:1000")),
            ("/p/theirs", &dir(1, "40755", "1001:1000")),
            ("/p/touched", &dir(3, "40755", "1000:1000")),
            ("/p/swapped", "f\x001"),
            ("/p/.auth-secret", &dir(1, "40755", "0:0")),
        ]);
        let excluded = |p: &Path| p.ends_with(".auth-secret");
        let attrs = |path: &str, mode, uid| DirAttrs {
            path: path.into(),
            mode,
            uid,
            gid: 1000,
        };
        assert_eq!(
            between(&before, &after, &excluded),
            Some(Delta {
                remove: paths(&[]),
                fetch: paths(&["/p/swapped"]),
                dirs: vec![
                    attrs("/p/keys", 0o2700, 1000),
                    attrs("/p/theirs", 0o755, 1001)
                ],
            })
        );
    }

    /// A list that names a path twice, or one below another, is taken as a plan makes it.
    #[test]
    fn a_published_list_is_taken_sorted_with_each_path_once_and_none_below_another() {
        let keys = DirAttrs {
            path: "/p/keys".into(),
            mode: 0o700,
            uid: 0,
            gid: 0,
        };
        let repeated = Published {
            from: "aaaa1111bbbb".into(),
            to: "cccc2222dddd".into(),
            fetch: paths(&["/p/b/c", "/p/a", "/p/b", "/p/a"]),
            remove: paths(&["/p/b/old", "/h/x"]),
            dirs: vec![
                DirAttrs {
                    path: "/p/b/d".into(),
                    ..keys.clone()
                },
                keys.clone(),
            ],
        };
        assert_eq!(
            usable(
                &repeated,
                &"aaaa1111".into(),
                &"cccc2222dddd".into(),
                &paths(&["/p", "/h"])
            ),
            Some(Delta {
                remove: paths(&["/h/x"]),
                fetch: paths(&["/p/a", "/p/b"]),
                dirs: vec![keys],
            })
        );
    }

    #[test]
    fn a_published_delta_serves_only_the_copy_it_starts_from() {
        let keys = DirAttrs {
            path: "/p/keys".into(),
            mode: 0o700,
            uid: 0,
            gid: 0,
        };
        let p = Published {
            from: "aaaa1111bbbb".into(),
            to: "cccc2222dddd".into(),
            fetch: paths(&["/p/a"]),
            remove: paths(&["/h/x"]),
            dirs: vec![keys.clone()],
        };
        let roots = paths(&["/p", "/h"]);
        let delta = Delta {
            remove: paths(&["/h/x"]),
            fetch: paths(&["/p/a"]),
            dirs: vec![keys.clone()],
        };
        assert_eq!(
            usable(&p, &"aaaa1111".into(), &"cccc2222dddd".into(), &roots),
            Some(delta)
        );
        let big = Published {
            fetch: (0..=MAX_PUBLISHED)
                .map(|i| PathBuf::from(format!("/p/{i}")))
                .collect(),
            ..p.clone()
        };
        assert_eq!(
            usable(&big, &"aaaa1111".into(), &"cccc2222dddd".into(), &roots),
            None
        );
        // With the one removal and the one dir, as many paths as it may name.
        let most = Published {
            fetch: big.fetch[3..].to_vec(),
            ..p.clone()
        };
        assert_eq!(
            usable(&most, &"aaaa1111".into(), &"cccc2222dddd".into(), &roots)
                .map(|d| d.fetch.len()),
            Some(MAX_PUBLISHED - 2)
        );
        assert_eq!(
            usable(&p, &"ffff1111".into(), &"cccc2222dddd".into(), &roots),
            None,
            "another copy"
        );
        assert_eq!(
            usable(&p, &"aaaa1111".into(), &"eeee3333".into(), &roots),
            None,
            "another target"
        );
        assert_eq!(
            usable(&p, &"aaaa1111".into(), &"cccc2222".into(), &paths(&["/p"])),
            None,
            "outside"
        );
        let dir_outside = Published {
            dirs: vec![DirAttrs {
                path: "/etc".into(),
                ..keys
            }],
            ..p.clone()
        };
        assert_eq!(
            usable(&dir_outside, &"aaaa1111".into(), &"cccc2222".into(), &roots),
            None,
            "a dir outside"
        );
        let dir_above = Published {
            dirs: vec![DirAttrs {
                path: "/p/../etc".into(),
                mode: 0o777,
                uid: 0,
                gid: 0,
            }],
            ..p
        };
        assert_eq!(
            usable(&dir_above, &"aaaa1111".into(), &"cccc2222".into(), &roots),
            None,
            "a dir named through .."
        );
    }

    #[test]
    fn a_pointer_names_the_changes_repository_and_one_that_does_not_means_the_main_one() {
        let older =
            r#"{"from":"aa","to":"bb","snapshot":"cc","list":"/var/lib/ag-box/published/d.json"}"#;
        let main: PublishedRef = serde_json::from_str(older).unwrap();
        assert_eq!(
            main,
            PublishedRef {
                from: "aa".into(),
                to: "bb".into(),
                snapshot: "cc".into(),
                list: "/var/lib/ag-box/published/d.json".into(),
                repository: Repository::Main,
                archive: None,
            }
        );
        // What the main one holds is written as before, for versions that know no other.
        assert_eq!(serde_json::to_string(&main).unwrap(), older);
        let changes = PublishedRef {
            repository: Repository::Changes,
            ..main
        };
        assert_eq!(
            serde_json::to_string(&changes).unwrap(),
            r#"{"from":"aa","to":"bb","snapshot":"cc","list":"/var/lib/ag-box/published/d.json","repository":"changes"}"#
        );
        // An archive of the paths and the list, where the snapshot holds one.
        let archived = PublishedRef {
            archive: Some("/changes.tar".into()),
            ..changes
        };
        let text = serde_json::to_string(&archived).unwrap();
        assert_eq!(
            text,
            r#"{"from":"aa","to":"bb","snapshot":"cc","list":"/var/lib/ag-box/published/d.json","repository":"changes","archive":"/changes.tar"}"#
        );
        assert_eq!(
            serde_json::from_str::<PublishedRef>(&text).unwrap(),
            archived
        );
    }

    #[test]
    fn a_published_snapshot_is_restored_only_for_the_copy_it_starts_from() {
        let r = PublishedRef {
            from: "aaaa1111bbbb".into(),
            to: "cccc2222dddd".into(),
            snapshot: "eeee".into(),
            list: "/var/lib/ag-box/published/demo.json".into(),
            repository: Repository::Changes,
            archive: None,
        };
        let roots = [
            PathBuf::from("/root/demo"),
            PathBuf::from("/var/lib/ag-box/homes/demo"),
        ];
        assert!(r.leads(&"aaaa1111".into(), &"cccc2222dddd".into(), &roots));
        assert!(
            !r.leads(&"ffff1111".into(), &"cccc2222dddd".into(), &roots),
            "another copy"
        );
        assert!(
            !r.leads(&"aaaa1111".into(), &"cccc3333".into(), &roots),
            "another target"
        );
        for list in [
            "var/lib/x.json",
            "/var/../etc/shadow",
            "/root/demo/published/demo.json",
            "/var/lib/ag-box/homes/demo/x.json",
        ] {
            let r = PublishedRef {
                list: list.into(),
                ..r.clone()
            };
            assert!(
                !r.leads(&"aaaa1111".into(), &"cccc2222dddd".into(), &roots),
                "{list}"
            );
        }
    }

    #[test]
    fn up_to_two_hundred_fetches_in_one_run_past_that_every_core_in_every_wave() {
        let p: Vec<PathBuf> = (0..450)
            .map(|i| PathBuf::from(format!("/p/{i:03}")))
            .collect();
        let sizes = |b: Vec<Vec<PathBuf>>| b.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(fetch_batches(&p, 2)), [113, 113, 113, 111]);
        assert_eq!(sizes(fetch_batches(&p[..201], 2)), [101, 100]);
        assert_eq!(sizes(fetch_batches(&p[..400], 2)), [200, 200]);
        assert_eq!(sizes(fetch_batches(&p[..201], 4)), [51, 51, 51, 48]);
        assert_eq!(sizes(fetch_batches(&p[..201], 0)), [101, 100]);
        assert_eq!(sizes(fetch_batches(&p[..200], 2)), [200]);
        assert_eq!(sizes(fetch_batches(&[], 4)), Vec::<usize>::new());
        assert_eq!(fetch_batches(&p[..3], 2), [p[..3].to_vec()]);
    }

    #[test]
    fn parses_restic_diff_json() {
        let lines = [
            r#"{"message_type":"change","path":"/src/we[i]rd*?/x\\y","modifier":"M"}"#,
            r#"{"message_type":"statistics","source_snapshot":"a","target_snapshot":"b","changed_files":2}"#,
            "not json",
        ];
        let parsed: Vec<Change> = lines.iter().filter_map(|l| parse_diff_line(l)).collect();
        assert_eq!(parsed, [Change::new("/src/we[i]rd*?/x\\y", "M")]);
    }

    #[test]
    fn parses_restic_ls_json_with_set_id_and_sticky_bits_as_stat_has_them() {
        // As restic 0.18 printed them (0.14 prints the same, without message_type and inode).
        let lines = [
            r#"{"time":"2026-12-01T02:32:55Z","paths":["/p"],"id":"27","short_id":"27","message_type":"snapshot","struct_type":"snapshot"}"#,
            r#"{"name":"g","type":"dir","path":"/p/g","uid":1000,"gid":1000,"mode":2152727032,"permissions":"dgtrwxrwx---","message_type":"node","struct_type":"node"}"#,
            r#"{"name":"l","type":"symlink","path":"/p/g/l","uid":0,"gid":1000,"mode":134218239,"permissions":"Lrwxrwxrwx","struct_type":"node"}"#,
            r#"{"name":"x","type":"file","path":"/p/g/x","uid":0,"gid":1000,"size":2,"mode":8389101,"permissions":"urwxr-xr-x","struct_type":"node"}"#,
        ];
        let parsed: Vec<Listed> = lines.iter().filter_map(|l| parse_ls_line(l)).collect();
        let attrs = |path: &str, mode, uid, gid| DirAttrs {
            path: PathBuf::from(path),
            mode,
            uid,
            gid,
        };
        assert_eq!(
            parsed,
            [
                Listed {
                    attrs: attrs("/p/g", 0o3770, 1000, 1000),
                    dir: true
                },
                Listed {
                    attrs: attrs("/p/g/x", 0o4755, 0, 1000),
                    dir: false
                },
            ]
        );
        assert_eq!(ls_args(&"abc".into()), ["ls", "--json", "--no-lock", "abc"]);
    }

    #[test]
    fn modes_and_owners_that_differ_inside_the_roots_are_fetched_or_set() {
        let entry = |path: &str, mode, dir| Listed {
            attrs: DirAttrs {
                path: PathBuf::from(path),
                mode,
                uid: 1000,
                gid: 1000,
            },
            dir,
        };
        let listed = [
            entry("/srv", 0o755, true),
            entry("/srv/p", 0o750, true),
            entry("/srv/p/run.sh", 0o755, false),
            entry("/srv/p/same.txt", 0o644, false),
            entry("/srv/p/keys", 0o700, true),
            entry("/srv/p/new", 0o700, true),
            entry("/srv/p/new/a", 0o600, false),
            entry("/srv/p/only-there", 0o600, false),
        ];
        // The copy: everything 0o755 for dirs and 0o644 for files, owned by 1000; nothing of
        // `only-there`. /srv is the node's, above the root.
        let ours = |p: &Path| -> Option<ModeAndOwner> {
            match p.to_str()? {
                "/srv/p/only-there" => None,
                "/srv/p/run.sh" | "/srv/p/same.txt" | "/srv/p/new/a" => Some((0o644, 1000, 1000)),
                "/srv" => Some((0o711, 0, 0)),
                _ => Some((0o755, 1000, 1000)),
            }
        };
        let delta = Delta {
            fetch: paths(&["/srv/p/new"]),
            remove: paths(&["/srv/p/gone"]),
            dirs: Vec::new(),
        };
        let roots = paths(&["/srv/p"]);
        assert_eq!(
            with_attrs(delta.clone(), &listed, &roots, &ours),
            Some(Delta {
                fetch: paths(&["/srv/p/new", "/srv/p/run.sh"]),
                remove: paths(&["/srv/p/gone"]),
                dirs: vec![listed[1].attrs.clone(), listed[4].attrs.clone()],
            })
        );
        let many: Vec<Listed> = (0..=MAX_CHANGES)
            .map(|i| entry(&format!("/srv/p/f{i}"), 0o600, false))
            .collect();
        assert_eq!(with_attrs(delta, &many, &roots, &ours), None);
    }

    #[test]
    fn bytes_changed_count_new_and_changed_files_only() {
        let m = |entries: &[(&str, &str)]| -> Manifest {
            entries
                .iter()
                .map(|(p, l)| ((*p).to_string(), (*l).to_string()))
                .collect()
        };
        let before = m(&[
            ("/p/same", "f\x0010\x001.0"),
            ("/p/changed", "f\x0020\x001.0"),
            ("/p/gone", "f\x00999\x001.0"),
        ]);
        let now = m(&[
            ("/p", "d\x000\x001.0"),
            ("/p/same", "f\x0010\x001.0"),
            ("/p/changed", "f\x0030\x002.0"),
            ("/p/new", "f\x00400\x001.0"),
            ("/p/link", "l\x005000\x001.0"),
        ]);
        assert_eq!(bytes_changed(Some(&before), &now), 430);
        assert_eq!(bytes_changed(None, &now), 440);
        let timed = m(&[
            ("/p/old", "f\x00100\x0090.0\x0099.999\x001"),
            ("/p/new", "f\x0020\x0090.0\x00100.500000000\x002"),
            ("/p/dir", "d\x000\x0090.0\x00150.0\x003"),
        ]);
        assert_eq!(bytes_changed_since(&timed, 100_000_000_000), 20);
        assert_eq!(bytes_changed_since(&timed, 100_500_000_000), 20);
        assert_eq!(bytes_changed_since(&timed, 100_500_000_001), 0);
        assert_eq!(bytes_changed_since(&timed, 0), 120);
    }

    #[test]
    fn fetch_argv_escapes_pattern_characters() {
        assert_eq!(
            fetch_args(
                &"abc".into(),
                Path::new("/s"),
                &paths(&["/p/we[i]rd*?/x\\y", "/p/a"]),
                true
            ),
            [
                "restore",
                "--json",
                "--no-lock",
                "abc",
                "--target",
                "/s",
                "--sparse",
                "--include",
                "/p/we\\[i]rd\\*\\?/x\\\\y",
                "--include",
                "/p/a",
            ]
        );
        assert_eq!(
            diff_args(&"a".into(), &"b".into()),
            ["diff", "--json", "--no-lock", "a", "b"]
        );
    }
}
