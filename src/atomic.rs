//! Writing a state file so that a crash or a power loss leaves the old content or the new one,
//! never a torn or empty file: a temp file of a unique name beside it, fsync, rename, fsync of
//! the directory. Every state file ag-box writes goes through here.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A state file's next content, written in pieces into a temp file beside it (a big file as it
/// is made); `commit` puts it in place as [`write`] does, and dropping it leaves the old file.
pub(crate) struct Replacement {
    path: PathBuf,
    tmp: BufWriter<tempfile::NamedTempFile>,
}

impl Replacement {
    pub(crate) fn new(path: &Path, mode: u32) -> Result<Replacement> {
        let dir = parent(path)?;
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .with_context(|| format!("creating a temp file in {}", dir.display()))?;
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", tmp.path().display()))?;
        Ok(Replacement {
            path: path.to_path_buf(),
            tmp: BufWriter::new(tmp),
        })
    }

    /// What was written so far, on disk: a large file synced while its writer waits on
    /// something else leaves its `commit` little to sync.
    pub(crate) fn sync_so_far(&mut self) -> Result<()> {
        self.tmp
            .flush()
            .and_then(|()| self.tmp.get_ref().as_file().sync_data())
            .with_context(|| format!("writing the next {}", self.path.display()))
    }

    /// What was written, put in place.
    pub(crate) fn commit(self) -> Result<()> {
        let (tmp, path) = self.synced()?;
        tmp.persist(&path)
            .map_err(|e| e.error)
            .with_context(|| format!("replacing {}", path.display()))?;
        sync_dir(parent(&path)?)
    }

    /// What was written, on disk.
    fn synced(self) -> Result<(tempfile::NamedTempFile, PathBuf)> {
        let Replacement { path, tmp } = self;
        let tmp = tmp
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)
            .and_then(|tmp| tmp.as_file().sync_all().map(|()| tmp))
            .with_context(|| format!("writing the next {}", path.display()))?;
        Ok((tmp, path))
    }
}

impl Write for Replacement {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tmp.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tmp.flush()
    }
}

/// Remove the temp files a process killed while it replaced `path` left beside it (as
/// [`Replacement`] names them: `.<name>.<6 letters or digits>.tmp`). Only while nothing else
/// replaces `path`.
pub(crate) fn sweep_unfinished(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    for entry in entries.flatten() {
        let left = entry.file_name();
        let unfinished = left
            .to_str()
            .and_then(|l| l.strip_prefix(&prefix))
            .and_then(|l| l.strip_suffix(".tmp"))
            .is_some_and(|random| {
                random.len() == 6 && random.bytes().all(|b| b.is_ascii_alphanumeric())
            });
        if unfinished && let Err(e) = fs::remove_file(entry.path()) {
            tracing::debug!("removing {}: {e}", entry.path().display());
        }
    }
}

fn parent(path: &Path) -> Result<&Path> {
    path.parent()
        .with_context(|| format!("{} has no directory", path.display()))
}

fn temp_beside<'a>(
    path: &'a Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(tempfile::NamedTempFile, &'a Path)> {
    let mut next = Replacement::new(path, mode)?;
    next.write_all(bytes)
        .with_context(|| format!("writing the next {}", path.display()))?;
    Ok((next.synced()?.0, parent(path)?))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

/// Replace `path` with `bytes` (mode `mode`).
pub(crate) fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut next = Replacement::new(path, mode)?;
    next.write_all(bytes)
        .with_context(|| format!("writing the next {}", path.display()))?;
    next.commit()
}

/// Create `path` with `bytes` unless it exists; Ok(false) when it did.
pub(crate) fn create_new(path: &Path, bytes: &[u8], mode: u32) -> Result<bool> {
    let (tmp, dir) = temp_beside(path, bytes, mode)?;
    match tmp.persist_noclobber(path) {
        Ok(_) => {}
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e.error).with_context(|| format!("creating {}", path.display())),
    }
    sync_dir(dir)?;
    Ok(true)
}

/// Remove `path` (if there) durably.
pub(crate) fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", path.display()));
        }
        _ => {}
    }
    match path.parent() {
        Some(dir) if dir.exists() => sync_dir(dir),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write(&path, b"one", 0o600).unwrap();
        write(&path, b"two", 0o644).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert!(!create_new(&path, b"three", 0o600).unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let fresh = dir.path().join("fresh");
        assert!(create_new(&fresh, b"new", 0o600).unwrap());
        assert_eq!(fs::read(&fresh).unwrap(), b"new");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        remove(&fresh).unwrap();
        remove(&fresh).unwrap();
        assert!(!fresh.exists());
    }
}
