//! A bundle's contents ([`crate::plan::bundle`]): read from a stopped copy as its box parks,
//! and written into a staging dir by the next node's `up`.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nix::fcntl::AT_FDCWD;
use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;

use crate::plan::bundle::{Contents, Item, Kind, MAX_CONTENT_BYTES};
use crate::plan::delta::Manifest;
use crate::sys::digest;

/// `fetch` (and what is below each, less what `excluded` names) as the copy holds it, which
/// must be as `manifest` says. None when something cannot travel in a bundle as restic would
/// restore it: a special file, a hard link, extended attributes, more than
/// [`MAX_CONTENT_BYTES`], or an entry that differs from the manifest.
pub(crate) fn collect(
    fetch: &[PathBuf],
    manifest: &Manifest,
    excluded: &dyn Fn(&Path) -> bool,
) -> Result<Option<Contents>> {
    let mut contents = Contents::default();
    for path in fetch {
        if !add(path, manifest, excluded, &mut contents)? {
            return Ok(None);
        }
    }
    Ok(Some(contents))
}

/// Whether `path` is as the manifest says.
fn as_in(manifest: &Manifest, path: &Path, meta: &fs::Metadata) -> bool {
    path.to_str()
        .and_then(|p| manifest.get(p))
        .is_some_and(|line| *line == digest::line(path, meta))
}

fn add(
    path: &Path,
    manifest: &Manifest,
    excluded: &dyn Fn(&Path) -> bool,
    c: &mut Contents,
) -> Result<bool> {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return Ok(false);
    };
    if !as_in(manifest, path, &meta) || has_xattrs(path)? {
        return Ok(false);
    }
    let kind = if meta.is_dir() {
        Kind::Dir
    } else if meta.is_symlink() {
        let target = fs::read_link(path).with_context(|| format!("reading {}", path.display()))?;
        if target.to_str().is_none() {
            // A bundle's header is JSON: names must be UTF-8.
            return Ok(false);
        }
        Kind::Symlink { target }
    } else if meta.is_file() && meta.nlink() == 1 {
        Kind::File { size: meta.len() }
    } else {
        return Ok(false);
    };
    if let Kind::File { size } = kind {
        if c.data.len() as u64 + size > MAX_CONTENT_BYTES {
            return Ok(false);
        }
        // Not through a symlink planted meanwhile; and still the manifest's file once read.
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("reading {}", path.display()))?;
        file.read_to_end(&mut c.data)
            .with_context(|| format!("reading {}", path.display()))?;
        let after = fs::symlink_metadata(path)?;
        if !as_in(manifest, path, &after) || c.data.len() as u64 > MAX_CONTENT_BYTES {
            return Ok(false);
        }
    }
    c.items.push(Item {
        path: path.to_path_buf(),
        kind: kind.clone(),
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: meta.mtime(),
        mtime_nsec: u32::try_from(meta.mtime_nsec()).unwrap_or(0),
    });
    if kind == Kind::Dir {
        let mut below: Vec<PathBuf> = fs::read_dir(path)
            .with_context(|| format!("listing {}", path.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        below.sort();
        for p in below.iter().filter(|p| !excluded(p)) {
            if !add(p, manifest, excluded, c)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Extended attributes (ACLs, `SELinux` labels among them) travel only through restic.
fn has_xattrs(path: &Path) -> Result<bool> {
    match rustix::fs::llistxattr_query(path) {
        Ok(size) => Ok(size > 0),
        Err(rustix::io::Errno::NOTSUP) => Ok(false),
        Err(e) => Err(std::io::Error::from(e))
            .with_context(|| format!("listing the attributes of {}", path.display())),
    }
}

/// Write `contents` under `staging` (a path `/x/y` at `staging/x/y`), with their owners, modes
/// and times. `staging` holds nothing of them yet.
pub(crate) fn unpack(staging: &Path, contents: &Contents) -> Result<()> {
    let at = |p: &Path| staging.join(p.strip_prefix("/").unwrap_or(p));
    let mut offset = 0usize;
    for item in &contents.items {
        let target = at(&item.path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        match &item.kind {
            Kind::Dir => fs::create_dir(&target),
            Kind::Symlink { target: to } => std::os::unix::fs::symlink(to, &target),
            Kind::File { size } => {
                let end = usize::try_from(*size)
                    .ok()
                    .and_then(|s| offset.checked_add(s))
                    .filter(|end| *end <= contents.data.len())
                    .context("the bundle's data is cut short")?;
                let bytes = &contents.data[offset..end];
                offset = end;
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&target)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
            }
        }
        .with_context(|| format!("writing {}", target.display()))?;
    }
    // Owners before modes (a chown clears setuid), and a dir's time after what went into it.
    for item in contents.items.iter().rev() {
        let target = at(&item.path);
        set_metadata(&target, item).with_context(|| format!("setting {}", target.display()))?;
    }
    if offset != contents.data.len() {
        bail!("the bundle holds bytes no file claims");
    }
    Ok(())
}

fn set_metadata(target: &Path, item: &Item) -> Result<()> {
    std::os::unix::fs::lchown(target, Some(item.uid), Some(item.gid))?;
    if !matches!(item.kind, Kind::Symlink { .. }) {
        fs::set_permissions(target, fs::Permissions::from_mode(item.mode))?;
    }
    let time = TimeSpec::new(item.mtime, i64::from(item.mtime_nsec));
    utimensat(
        AT_FDCWD,
        target,
        &time,
        &time,
        UtimensatFlags::NoFollowSymlink,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;

    /// A copy with a changed file, a new dir (an excluded name inside), a symlink; its manifest.
    fn copy() -> (tempfile::TempDir, PathBuf, Manifest) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p");
        fs::create_dir_all(p.join("new/sub")).unwrap();
        fs::write(p.join("a.txt"), "changed").unwrap();
        fs::write(p.join("new/sub/b"), "bee").unwrap();
        fs::write(p.join("new/.auth-secret"), "no").unwrap();
        fs::set_permissions(p.join("new/sub/b"), fs::Permissions::from_mode(0o750)).unwrap();
        symlink("../a.txt", p.join("new/link")).unwrap();
        let manifest = digest::walk(std::slice::from_ref(&p)).unwrap().1.unwrap();
        (dir, p, manifest)
    }

    fn secret(p: &Path) -> bool {
        p.file_name().is_some_and(|n| n == ".auth-secret")
    }

    #[test]
    fn what_is_collected_unpacks_as_it_was() {
        let (dir, p, manifest) = copy();
        let fetch = vec![p.join("a.txt"), p.join("new")];
        let contents = collect(&fetch, &manifest, &secret).unwrap().unwrap();
        let kinds: Vec<(PathBuf, Kind)> = contents
            .items
            .iter()
            .map(|i| {
                (
                    i.path.strip_prefix(&p).unwrap().to_path_buf(),
                    i.kind.clone(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("a.txt".into(), Kind::File { size: 7 }),
                ("new".into(), Kind::Dir),
                (
                    "new/link".into(),
                    Kind::Symlink {
                        target: "../a.txt".into()
                    }
                ),
                ("new/sub".into(), Kind::Dir),
                ("new/sub/b".into(), Kind::File { size: 3 }),
            ]
        );
        let staging = dir.path().join("staging");
        unpack(&staging, &contents).unwrap();
        let unpacked = staging.join(p.strip_prefix("/").unwrap());
        for rel in ["a.txt", "new", "new/link", "new/sub", "new/sub/b"] {
            let (was, now) = (
                fs::symlink_metadata(p.join(rel)).unwrap(),
                fs::symlink_metadata(unpacked.join(rel)).unwrap(),
            );
            assert_eq!(
                (
                    was.mode(),
                    was.uid(),
                    was.mtime(),
                    was.mtime_nsec(),
                    was.len()
                ),
                (
                    now.mode(),
                    now.uid(),
                    now.mtime(),
                    now.mtime_nsec(),
                    now.len()
                ),
                "{rel}"
            );
        }
        assert_eq!(fs::read(unpacked.join("new/sub/b")).unwrap(), b"bee");
        assert!(!unpacked.join("new/.auth-secret").exists(), "excluded");
    }

    #[test]
    fn what_cannot_travel_as_restic_restores_it_is_left_to_restic() {
        let (_dir, p, manifest) = copy();
        let none = |fetch: &[PathBuf], manifest: &Manifest| {
            collect(fetch, manifest, &secret).unwrap().is_none()
        };
        fs::hard_link(p.join("a.txt"), p.join("hard")).unwrap();
        let linked = digest::walk(std::slice::from_ref(&p)).unwrap().1.unwrap();
        assert!(none(&[p.join("hard")], &linked), "a hard link");
        fs::write(p.join("new/sub/b"), "written after the manifest").unwrap();
        assert!(
            none(&[p.join("new")], &manifest),
            "differs from the manifest"
        );
        assert!(none(&[p.join("absent")], &manifest), "gone");
        let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
        symlink(odd, p.join("odd-link")).unwrap();
        let odd_manifest = digest::walk(std::slice::from_ref(&p)).unwrap().1.unwrap();
        assert!(
            none(&[p.join("odd-link")], &odd_manifest),
            "a target not UTF-8"
        );
    }

    #[test]
    fn a_file_with_extended_attributes_is_left_to_restic() {
        let (_dir, p, _) = copy();
        rustix::fs::lsetxattr(
            p.join("a.txt"),
            "user.origin",
            b"web",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let manifest = digest::walk(std::slice::from_ref(&p)).unwrap().1.unwrap();
        assert!(
            collect(&[p.join("a.txt")], &manifest, &secret)
                .unwrap()
                .is_none()
        );
        assert!(
            collect(&[p.join("new")], &manifest, &secret)
                .unwrap()
                .is_some()
        );
    }
}
