//! A digest of trees' metadata: every entry's path, type, size, mtime, ctime, inode, mode, owner
//! and link target (so it holds on this node only). Taken when a box's local copy is known to equal a snapshot (before a snapshot of the
//! stopped box, after a restore), it tells later whether the copy still does, without reading
//! file contents; a differing digest means the copy may hold work in no snapshot.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::plan::delta::Manifest;

/// An entry's metadata after its path, kind first, from what `fstatat` said of it.
fn stat_line(st: &Stat, target: &str) -> String {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Link,
        _ => Kind::File,
    };
    fields(
        kind,
        u64::try_from(st.st_size).unwrap_or(0),
        (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(0)),
        (st.st_ctime, i64::try_from(st.st_ctime_nsec).unwrap_or(0)),
        st.st_ino,
        st.st_mode,
        (st.st_uid, st.st_gid),
        target,
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    Link,
    File,
}

#[allow(clippy::too_many_arguments)]
fn fields(
    kind: Kind,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
    mode: u32,
    (uid, gid): (u32, u32),
    target: &str,
) -> String {
    let (kind, size) = match kind {
        Kind::Dir => ('d', 0),
        Kind::Link => ('l', size),
        Kind::File => ('f', size),
    };
    format!(
        "{kind}\0{size}\0{}.{}\0{}.{}\0{ino}\0{mode:o}\0{uid}:{gid}\0{target}",
        mtime.0, mtime.1, ctime.0, ctime.1
    )
}

/// The digest of `roots` (missing ones count as missing).
pub(crate) fn of(roots: &[PathBuf]) -> Result<String> {
    Ok(walk(roots)?.0)
}

/// The digest of `roots`, and the manifest it was made of (None when a path is not UTF-8,
/// which a manifest cannot name). The tree is read by a few threads: it is all `fstatat` and
/// `getdents`, and a copy of 20,000 files takes a tenth of a second on one core. Below each
/// root, every entry is read relative to its dir's handle with no link followed, so a box that
/// swaps a dir for a link mid-walk, or nests deeper than `PATH_MAX`, steers and stops nothing:
/// an entry that vanishes counts as missing, one that changes kind or cannot be read gets a
/// line of its own (the copy then differs, never an error).
pub(crate) fn walk(roots: &[PathBuf]) -> Result<(String, Option<Manifest>)> {
    let mut seen = Vec::new();
    // Breadth first until there is work enough to share out.
    let width = std::thread::available_parallelism()
        .map_or(2, usize::from)
        .min(4);
    let mut frontier = Vec::new();
    for root in roots {
        match Item::root(root)? {
            Some(item) => frontier.push(item),
            None => seen.push((root.clone(), None)),
        }
    }
    let mut rounds = 0;
    while !frontier.is_empty() && frontier.len() < 16 * width && rounds < 3 {
        let mut next = Vec::new();
        for item in frontier {
            visit(item, &mut seen, &mut next);
        }
        frontier = next;
        rounds += 1;
    }
    let mut shares: Vec<Vec<Item>> = (0..width).map(|_| Vec::new()).collect();
    for (i, item) in frontier.into_iter().enumerate() {
        shares[i % width].push(item);
    }
    let found: Vec<Result<Vec<Seen>>> = std::thread::scope(|s| {
        let workers: Vec<_> = shares
            .into_iter()
            .map(|share| s.spawn(move || walk_below(share)))
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| anyhow::anyhow!("a tree walk panicked"))
            })
            .collect()
    });
    for f in found {
        seen.extend(f?);
    }
    Ok(summed(seen))
}

/// The digest and manifest of `roots` as [`walk`] takes them, from `kept`, the manifest a
/// [`walk`] of them made before anything but `changed` was written there, and a walk of only
/// what changed since: every path of `changed` with all below it, and the dirs above each up
/// to its root. What is neither below nor above a changed path is as `kept` has it. For a
/// copy where a restore wrote only what changed: one walk of that, not of the whole tree, and
/// no second copy of the manifest in memory.
pub(crate) fn walk_changed(
    roots: &[PathBuf],
    mut kept: Manifest,
    changed: &[PathBuf],
) -> Result<(String, Option<Manifest>)> {
    if roots.iter().any(|r| r.to_str().is_none()) {
        return walk(roots);
    }
    let changed = Changed::new(changed);
    let mut seen = Vec::new();
    // Each item with whether it lies below a changed path (then all below it is read), and
    // whether it was named on the way to one rather than listed.
    let mut stack: Vec<(Item, bool, bool)> = Vec::new();
    for root in roots {
        match Item::root(root)? {
            Some(item) => stack.push((item, changed.at_or_below(root), false)),
            None => seen.push((root.clone(), None)),
        }
    }
    while let Some((item, below_changed, by_name)) = stack.pop() {
        let mut below = Vec::new();
        let at = seen.len();
        if below_changed {
            visit(item, &mut seen, &mut below);
            stack.extend(below.into_iter().map(|b| (b, true, false)));
        } else {
            // A dir above a changed path: only the entries on the way to one are read, by
            // name (its other thousands are as `kept` has them).
            let names = changed.on_the_way.get(&item.path);
            visit_with(item, &mut seen, &mut below, |dir| named(dir, names));
            for b in below {
                let under = changed.paths.contains(&b.path);
                stack.push((b, under, true));
            }
        }
        // A name on the way that is not there (a removed path) is absent, as a whole walk has
        // it; what was listed and then vanished is missing, as there.
        if by_name && seen.get(at).is_some_and(|(_, line)| line.is_none()) {
            seen.truncate(at);
        }
    }
    // What was walked takes the place of what the manifest had there.
    let (at, above) = changed.as_text();
    kept.retain(|p, _| {
        !(roots.iter().any(|r| r.as_os_str() == p.as_str())
            || above.contains(p.as_str())
            || text_ancestors(p).any(|a| at.contains(a)))
    });
    let mut missing = Vec::new();
    for (path, line) in seen {
        let Ok(path) = path.into_os_string().into_string() else {
            // A name a manifest cannot hold.
            return walk(roots);
        };
        match line {
            Some(line) => {
                kept.insert(path, line);
            }
            None => missing.push(path),
        }
    }
    Ok((hashed(&kept, missing), Some(kept)))
}

/// The paths a walk of what changed reads, looked up by path (a tree of 200,000 entries
/// against thousands of changed paths).
struct Changed {
    paths: HashSet<PathBuf>,
    /// Every dir above a changed path.
    above: HashSet<PathBuf>,
    /// Each dir above a changed path, with the names in it on the way to one.
    on_the_way: HashMap<PathBuf, HashSet<OsString>>,
}

impl Changed {
    fn new(changed: &[PathBuf]) -> Changed {
        let mut on_the_way: HashMap<PathBuf, HashSet<OsString>> = HashMap::new();
        let mut above = HashSet::new();
        for c in changed {
            let mut at = c.as_path();
            while let (Some(dir), Some(name)) = (at.parent(), at.file_name()) {
                on_the_way
                    .entry(dir.to_path_buf())
                    .or_default()
                    .insert(name.to_os_string());
                if !above.insert(dir.to_path_buf()) {
                    // What lies above was gone through from another changed path.
                    break;
                }
                at = dir;
            }
        }
        Changed {
            paths: changed.iter().cloned().collect(),
            above,
            on_the_way,
        }
    }

    /// `p` is a changed path or lies below one.
    fn at_or_below(&self, p: &Path) -> bool {
        p.ancestors().any(|a| self.paths.contains(a))
    }

    /// The changed paths and the dirs above them as text, which a manifest is keyed by
    /// (looked up by text, a manifest's 200,000 keys cost a tenth of looking them up by path).
    fn as_text(&self) -> (HashSet<&str>, HashSet<&str>) {
        (text(&self.paths), text(&self.above))
    }
}

fn text(set: &HashSet<PathBuf>) -> HashSet<&str> {
    set.iter().filter_map(|p| p.to_str()).collect()
}

/// `p` (an absolute path as text, no `.`, `..` or doubled `/`) and every dir above it.
fn text_ancestors(p: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(p), |a| match a.rfind('/') {
        Some(0) if a.len() > 1 => Some("/"),
        Some(i) if i > 0 => Some(&a[..i]),
        _ => None,
    })
}

/// The digest of a manifest's entries and the `missing` paths, as [`summed`] takes it.
fn hashed(manifest: &Manifest, mut missing: Vec<String>) -> String {
    missing.sort_unstable();
    let mut hash = Sha256::new();
    let mut line = |path: &str, entry: &str| {
        hash.update(path.as_bytes());
        hash.update(b"\0");
        hash.update(entry.as_bytes());
        hash.update(b"\n");
    };
    let mut gone = missing.iter().peekable();
    for (path, entry) in manifest {
        while let Some(m) = gone.next_if(|m| m.as_str() < path.as_str()) {
            line(m, "missing");
        }
        line(path, entry);
    }
    for m in gone {
        line(m, "missing");
    }
    crate::plan::text::hex(&hash.finalize())
}

/// The digest of what a walk saw (in any order), and its manifest. The digest is the SHA-256 of
/// every `path\0line\n` (or `path\0missing\n`) in byte order; sorting by path gives that order
/// (no path holds a NUL), without a string per line.
fn summed(seen: Vec<Seen>) -> (String, Option<Manifest>) {
    let utf8 = seen.iter().all(|(p, _)| p.to_str().is_some());
    let mut keyed: Vec<(String, Option<String>)> = seen
        .into_iter()
        .map(|(p, e)| (p.to_string_lossy().into_owned(), e))
        .collect();
    keyed.sort_unstable();
    let mut hash = Sha256::new();
    for (path, entry) in &keyed {
        hash.update(path.as_bytes());
        hash.update(b"\0");
        hash.update(entry.as_deref().unwrap_or("missing").as_bytes());
        hash.update(b"\n");
    }
    let digest = crate::plan::text::hex(&hash.finalize());
    let manifest = utf8.then(|| {
        keyed
            .into_iter()
            .filter_map(|(path, entry)| Some((path, entry?)))
            .collect()
    });
    (digest, manifest)
}

/// A path and its metadata line (None: it is missing).
type Seen = (PathBuf, Option<String>);

/// An entry to read: the handle of its dir and its name there; its path only names it.
struct Item {
    dir: Arc<OwnedFd>,
    name: OsString,
    path: PathBuf,
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::RDONLY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Item {
    /// A root: its dir is the host's, resolved by path; the root itself is not followed.
    /// None when that dir is missing (and so the root).
    fn root(path: &Path) -> Result<Option<Item>> {
        let parent = path.parent().unwrap_or(Path::new("/"));
        let name = path
            .file_name()
            .with_context(|| format!("{} names no entry", path.display()))?;
        let dir = match rustix::fs::open(
            parent,
            DIR_FLAGS.difference(OFlags::NOFOLLOW),
            Mode::empty(),
        ) {
            Ok(d) => d,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("opening {}", parent.display())),
        };
        Ok(Some(Item {
            dir: Arc::new(dir),
            name: name.to_os_string(),
            path: path.to_path_buf(),
        }))
    }
}

/// Record `item`; a dir's entries go onto `below`.
fn visit(item: Item, seen: &mut Vec<Seen>, below: &mut Vec<Item>) {
    visit_with(item, seen, below, list);
}

/// Record `item`; the entries `entries` gives of a dir go onto `below`.
fn visit_with(
    item: Item,
    seen: &mut Vec<Seen>,
    below: &mut Vec<Item>,
    entries: impl FnOnce(&Item) -> Result<Vec<Item>, Errno>,
) {
    let st = match rustix::fs::statat(&*item.dir, &item.name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => {
            seen.push((item.path, None));
            return;
        }
        Err(e) => {
            seen.push((item.path, Some(unknown("unreadable", e))));
            return;
        }
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    let mut target = String::new();
    if kind == FileType::Directory && item.path.as_os_str().len() > MAX_PATH_BYTES {
        // What lies deeper is not listed: a chain of dirs would cost root memory by the
        // square of its depth. The copy counts as changed, every time.
        seen.push((item.path, Some(unknown("too deep", Errno::NAMETOOLONG))));
        return;
    }
    if kind == FileType::Directory {
        match entries(&item) {
            Ok(entries) => below.extend(entries),
            // Gone, or swapped for something else, since the stat: changed.
            Err(Errno::NOENT) => {
                seen.push((item.path, None));
                return;
            }
            Err(e) => {
                seen.push((item.path, Some(unknown("changed", e))));
                return;
            }
        }
    } else if kind == FileType::Symlink {
        target = rustix::fs::readlinkat(&*item.dir, &item.name, Vec::new())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    seen.push((item.path, Some(stat_line(&st, &target))));
}

/// Below this length of path a walk lists a dir (twice `PATH_MAX`: deeper than any tool but a
/// box's own can reach).
const MAX_PATH_BYTES: usize = 8192;

/// The line of an entry the walk could not take whole: unlike every walk before and after
/// (a random part, new each process), so a copy holding one never counts as unchanged.
fn unknown(what: &str, e: Errno) -> String {
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let nonce = NONCE.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    format!("{what}\0{e}\0{nonce:x}")
}

/// The dir `item` names, opened below its handle with no link followed.
fn open_dir(item: &Item) -> Result<Arc<OwnedFd>, Errno> {
    Ok(Arc::new(rustix::fs::openat(
        &*item.dir,
        &item.name,
        DIR_FLAGS,
        Mode::empty(),
    )?))
}

/// The entries `names` of the dir `item` names, whether there or not (one that is not is
/// seen missing).
fn named(item: &Item, names: Option<&HashSet<OsString>>) -> Result<Vec<Item>, Errno> {
    let fd = open_dir(item)?;
    Ok(names
        .into_iter()
        .flatten()
        .map(|name| Item {
            dir: Arc::clone(&fd),
            path: item.path.join(name),
            name: name.clone(),
        })
        .collect())
}

/// The entries of the dir `item` names.
fn list(item: &Item) -> Result<Vec<Item>, Errno> {
    let fd = open_dir(item)?;
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(&*fd)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = OsStr::from_bytes(name).to_os_string();
        out.push(Item {
            dir: Arc::clone(&fd),
            path: item.path.join(&name),
            name,
        });
    }
    Ok(out)
}

fn walk_below(mut stack: Vec<Item>) -> Vec<Seen> {
    let mut seen = Vec::new();
    while let Some(item) = stack.pop() {
        visit(item, &mut seen, &mut stack);
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::fs;

    /// What one thread's walk of `roots` sees.
    fn one_walk(roots: &[PathBuf]) -> Vec<Seen> {
        let mut seen = Vec::new();
        let mut items = Vec::new();
        for r in roots {
            match Item::root(r).unwrap() {
                Some(i) => items.push(i),
                None => seen.push((r.clone(), None)),
            }
        }
        seen.extend(walk_below(items));
        seen
    }

    #[test]
    fn a_paths_ancestors_as_text_are_those_of_the_path() {
        for p in ["/", "/root", "/root/demo/src/f.txt"] {
            let by_path: Vec<&str> = Path::new(p)
                .ancestors()
                .map(|a| a.to_str().unwrap())
                .collect();
            assert_eq!(text_ancestors(p).collect::<Vec<_>>(), by_path);
        }
    }

    #[test]
    fn a_walk_of_what_changed_over_the_manifest_kept_is_a_whole_walk() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        let home = dir.path().join("home");
        for d in ["a/x", "a/y", "b/z", "c"] {
            fs::create_dir_all(root.join(d)).unwrap();
            fs::write(root.join(d).join("f"), d).unwrap();
        }
        fs::create_dir_all(home.join("s")).unwrap();
        let roots = vec![root.clone(), home.clone(), dir.path().join("absent")];
        let (_, kept) = walk(&roots).unwrap();
        let kept = kept.unwrap();
        // What a restore of only what changed does: a file replaced, a tree removed, one
        // added, a dir's mode changed; and something in the agent home.
        fs::remove_file(root.join("a/x/f")).unwrap();
        fs::write(root.join("a/x/f"), "new").unwrap();
        fs::remove_dir_all(root.join("b/z")).unwrap();
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::write(root.join("d/e/f"), "added").unwrap();
        fs::set_permissions(
            root.join("c"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        fs::write(home.join("s/t"), "session").unwrap();
        let changed = [
            root.join("a/x/f"),
            root.join("b/z"),
            root.join("d"),
            root.join("c"),
            home.clone(),
        ];
        let whole = walk(&roots).unwrap();
        assert_eq!(walk_changed(&roots, kept.clone(), &changed).unwrap(), whole);
        // Left out, a change is not seen: the walk is of what it is told alone.
        let partial = walk_changed(&roots, kept.clone(), &changed[..4]).unwrap();
        assert_ne!(partial.0, whole.0);
    }

    /// What a box planted at the paths a restore wrote is read as what it is: a link is a link
    /// (never followed out of the copy), an odd name a name.
    #[test]
    fn a_walk_of_what_changed_reads_planted_links_as_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        let outside = dir.path().join("outside");
        fs::create_dir_all(outside.join("deep")).unwrap();
        fs::write(outside.join("deep/secret"), "root's").unwrap();
        for d in ["a/x", "b"] {
            fs::create_dir_all(root.join(d)).unwrap();
            fs::write(root.join(d).join("f"), d).unwrap();
        }
        let roots = vec![root.clone()];
        let (_, kept) = walk(&roots).unwrap();
        // A changed dir, and the dir above a changed file, now links out; a changed name
        // holds escape bytes and a newline.
        fs::remove_dir_all(root.join("a/x")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/x")).unwrap();
        fs::remove_dir_all(root.join("b")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("b")).unwrap();
        let odd = root.join("c\x1b]52;c;\n");
        fs::write(&odd, "odd").unwrap();
        let changed = [root.join("a/x"), root.join("b/f"), odd];
        let got = walk_changed(&roots, kept.unwrap(), &changed).unwrap();
        assert_eq!(got, walk(&roots).unwrap());
        let manifest = got.1.unwrap();
        let outside_text = outside.display().to_string();
        assert!(
            manifest.keys().all(|p| !p.starts_with(&outside_text)
                && !p.ends_with("secret")
                && !p.starts_with(&root.join("b/").display().to_string())),
            "{manifest:?}"
        );
        assert_eq!(
            [
                manifest[&root.join("a/x").display().to_string()].starts_with('l'),
                manifest[&root.join("b").display().to_string()].starts_with('l'),
            ],
            [true, true],
            "{manifest:?}"
        );
    }

    #[test]
    fn threads_see_what_one_walk_sees() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        for d in 0..60 {
            fs::create_dir_all(root.join(format!("d{d}/sub"))).unwrap();
            fs::write(root.join(format!("d{d}/sub/f")), "x").unwrap();
        }
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        let roots = vec![root, dir.path().join("absent")];
        let (digest, manifest) = walk(&roots).unwrap();
        let (one, one_manifest) = summed(one_walk(&roots));
        assert_eq!((digest, manifest.unwrap().len()), (one, 182));
        assert!(one_manifest.is_some());
    }

    #[test]
    fn the_digest_is_the_hash_of_the_sorted_lines() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        for d in ["a", "a-b", "a/b", "ab", "a.b/c"] {
            fs::create_dir_all(root.join(d)).unwrap();
            fs::write(root.join(d).join("f"), d).unwrap();
        }
        let roots = vec![root, dir.path().join("absent")];
        let seen = one_walk(&roots);
        let mut lines: Vec<String> = seen
            .iter()
            .map(|(p, e)| format!("{}\0{}\n", p.display(), e.as_deref().unwrap_or("missing")))
            .collect();
        lines.sort();
        let defined = crate::plan::text::hex(&Sha256::digest(lines.concat().as_bytes()));
        assert_eq!(of(&roots).unwrap(), defined);
    }

    #[test]
    fn a_change_anywhere_changes_the_digest() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        fs::create_dir_all(root.join("src")).unwrap();
        fs::write(root.join("src/a"), "one").unwrap();
        let roots = vec![root.clone(), dir.path().join("absent")];
        let first = of(&roots).unwrap();
        assert_eq!(of(&roots).unwrap(), first, "stable");
        fs::write(root.join("src/a"), "second").unwrap();
        let edited = of(&roots).unwrap();
        assert_ne!(edited, first);
        fs::write(root.join("src/b"), "").unwrap();
        assert_ne!(of(&roots).unwrap(), edited);
        fs::create_dir(dir.path().join("absent")).unwrap();
        assert_ne!(of(&roots).unwrap(), edited);
    }

    #[test]
    fn a_tree_deeper_than_path_max_and_odd_entries_are_read_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        fs::create_dir_all(&root).unwrap();
        let mut deep = rustix::fs::open(&root, DIR_FLAGS, Mode::empty()).unwrap();
        for _ in 0..300 {
            let name = "dddddddddddddddddddd";
            rustix::fs::mkdirat(&deep, name, Mode::from_raw_mode(0o755)).unwrap();
            deep = rustix::fs::openat(&deep, name, DIR_FLAGS, Mode::empty()).unwrap();
        }
        rustix::fs::mkdirat(&deep, "leaf", Mode::from_raw_mode(0o755)).unwrap();
        // A link where a dir was is read as the link, never followed.
        std::os::unix::fs::symlink("/etc", root.join("was-a-dir")).unwrap();
        let roots = vec![root.clone(), dir.path().join("absent/below")];
        let (_, manifest) = walk(&roots).unwrap();
        let manifest = manifest.unwrap();
        assert_eq!(manifest.len(), 1 + 300 + 1 + 1);
        assert!(
            manifest
                .keys()
                .any(|p| p.ends_with("/leaf") && p.len() > 6000)
        );
        let link = &manifest[&root.join("was-a-dir").to_string_lossy().into_owned()];
        assert!(
            link.starts_with("l\0") && link.ends_with("\0/etc"),
            "{link:?}"
        );
        assert!(!manifest.keys().any(|p| p.contains("passwd")));
        // An entry gone between the listing and its stat counts as missing.
        let gone = Item {
            dir: Arc::new(rustix::fs::open(&root, DIR_FLAGS, Mode::empty()).unwrap()),
            name: "never-there".into(),
            path: root.join("never-there"),
        };
        let (mut seen, mut below) = (Vec::new(), Vec::new());
        visit(gone, &mut seen, &mut below);
        assert_eq!(seen, [(root.join("never-there"), None)]);
    }

    #[test]
    fn a_tree_deeper_than_twice_path_max_is_summed_up_where_it_gets_too_deep() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        fs::create_dir_all(&root).unwrap();
        let mut deep = rustix::fs::open(&root, DIR_FLAGS, Mode::empty()).unwrap();
        for _ in 0..500 {
            let name = "dddddddddddddddddddd";
            rustix::fs::mkdirat(&deep, name, Mode::from_raw_mode(0o755)).unwrap();
            deep = rustix::fs::openat(&deep, name, DIR_FLAGS, Mode::empty()).unwrap();
        }
        let (digest, manifest) = walk(std::slice::from_ref(&root)).unwrap();
        let manifest = manifest.unwrap();
        let longest = manifest.keys().map(String::len).max().unwrap();
        assert!(
            longest > MAX_PATH_BYTES && longest < MAX_PATH_BYTES + 22,
            "{longest}"
        );
        let summed: Vec<&String> = manifest
            .values()
            .filter(|v| v.starts_with("too deep\0"))
            .collect();
        // One line where it got too deep, with this process's random part.
        assert_eq!(summed, [&unknown("too deep", Errno::NAMETOOLONG)]);
        assert_ne!(
            unknown("too deep", Errno::NAMETOOLONG),
            "too deep\0File name too long (os error 36)\0"
        );
        assert_eq!(
            walk(std::slice::from_ref(&root)).unwrap().0,
            digest,
            "stable in one process"
        );
    }
}
