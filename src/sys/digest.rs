//! A digest of trees' metadata: every entry's path, type, size, mtime, ctime, inode, mode, owner
//! and link target (so it holds on this node only). Taken when a box's local copy is known to equal a snapshot (before a snapshot of the
//! stopped box, after a restore), it tells later whether the copy still does, without reading
//! file contents; a differing digest means the copy may hold work in no snapshot.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::plan::delta::Manifest;

/// An entry's metadata after its path: kind first.
fn line(path: &Path, meta: &fs::Metadata) -> String {
    let kind = if meta.is_dir() {
        'd'
    } else if meta.is_symlink() {
        'l'
    } else {
        'f'
    };
    let target = if meta.is_symlink() {
        fs::read_link(path)
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        String::new()
    };
    let size = if meta.is_dir() { 0 } else { meta.size() };
    format!(
        "{kind}\0{size}\0{}.{}\0{}.{}\0{}\0{:o}\0{}:{}\0{target}",
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
        meta.ino(),
        meta.mode(),
        meta.uid(),
        meta.gid()
    )
}

/// The digest of `roots` (missing ones count as missing).
pub fn of(roots: &[PathBuf]) -> Result<String> {
    Ok(walk(roots)?.0)
}

/// The digest of `roots`, and the manifest it was made of (None when a path is not UTF-8,
/// which a manifest cannot name).
pub fn walk(roots: &[PathBuf]) -> Result<(String, Option<Manifest>)> {
    let mut lines = Vec::new();
    let mut manifest = Some(Manifest::new());
    for root in roots {
        let mut stack = vec![root.clone()];
        while let Some(path) = stack.pop() {
            let meta = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    lines.push(format!("{}\0missing\n", path.display()));
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
            };
            let entry = line(&path, &meta);
            lines.push(format!("{}\0{entry}\n", path.display()));
            manifest = manifest.and_then(|mut m| {
                m.insert(path.to_str()?.to_string(), entry);
                Some(m)
            });
            if meta.is_dir() {
                for entry in
                    fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))?
                {
                    stack.push(entry?.path());
                }
            }
        }
    }
    lines.sort();
    let mut hash = Sha256::new();
    for l in &lines {
        hash.update(l.as_bytes());
    }
    let digest = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((digest, manifest))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
