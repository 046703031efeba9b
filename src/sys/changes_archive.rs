//! What a changes snapshot holds: one archive (tar) of the paths that changed in a box's
//! trees, read with no link followed, and the list of what changed, last. It is streamed into
//! `restic backup --stdin`, so restic opens and locks the repository while the box stops and
//! its copy is walked (that lock alone waits 0.2 s), and unpacked from `restic dump` into a
//! staging dir that is root's own, each entry made through that dir's handle.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::plan::text::escaped;
use crate::sys::box_tree::{self, Attrs, Kind, New, Tree};

/// The archive's path in a changes snapshot (`--stdin-filename`).
pub(crate) const IN_SNAPSHOT: &str = "/changes.tar";

/// What goes into the archive.
pub(crate) struct Contents<'a> {
    /// The box's trees (its project and agent home), each read through a handle on it.
    pub roots: &'a [PathBuf],
    /// The changed paths, each under one of `roots`: a dir with all below it.
    pub fetch: &'a [PathBuf],
    /// What no snapshot holds, left out below a fetched dir.
    pub excluded: &'a (dyn Fn(&Path) -> bool + Sync),
    /// The list of what changed, and the node path it is read from: last, so an archive cut
    /// short holds none and is never used.
    pub list: (&'a Path, &'a [u8]),
}

/// Write the archive of `contents` to `out`.
pub(crate) fn write(out: &mut dyn Write, contents: &Contents<'_>) -> Result<()> {
    let mut archive = tar::Builder::new(out);
    let mut trees: Vec<(&Path, Tree)> = Vec::new();
    for path in contents.fetch {
        let Some(root) = contents.roots.iter().find(|r| path.starts_with(r)) else {
            bail!("{} is in none of the box's trees", show(path));
        };
        if !trees.iter().any(|(r, _)| r == root) {
            trees.push((root, Tree::open(root)?));
        }
        let tree = trees
            .iter()
            .find_map(|(r, t)| (r == root).then_some(t))
            .context("a box tree just opened")?;
        let rel = path.strip_prefix(root)?;
        add_below(&mut archive, tree, root, rel, contents.excluded)?;
    }
    let (list, text) = contents.list;
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o600);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_size(text.len() as u64);
    archive.append_data(&mut header, in_archive(list), text)?;
    archive.finish()?;
    Ok(())
}

/// The entry at `rel` in `tree` (at `root`) and, for a dir, all below it that no exclude
/// names; deep trees with no recursion.
fn add_below(
    archive: &mut tar::Builder<&mut dyn Write>,
    tree: &Tree,
    root: &Path,
    rel: &Path,
    excluded: &(dyn Fn(&Path) -> bool + Sync),
) -> Result<()> {
    let mut pending = vec![rel.to_path_buf()];
    while let Some(rel) = pending.pop() {
        let path = root.join(&rel);
        if excluded(&path) {
            continue;
        }
        let Some(st) = tree.stat(&rel)? else {
            bail!("{} is gone", show(&path));
        };
        let name = in_archive(&path);
        let mut header = tar::Header::new_gnu();
        header.set_mode(st.st_mode & 0o7777);
        header.set_uid(st.st_uid.into());
        header.set_gid(st.st_gid.into());
        header.set_size(0);
        header.set_mtime(u64::try_from(st.st_mtime).unwrap_or(0));
        let mtime = pax_time(st.st_mtime, st.st_mtime_nsec);
        let fail = || format!("archiving {}", show(&path));
        match box_tree::kind_of(&st) {
            Kind::File => {
                let Some((file, st)) = tree.open_file(&rel)? else {
                    bail!("{} is gone", show(&path));
                };
                let size = u64::try_from(st.st_size).unwrap_or(0);
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                archive.append_pax_extensions([("mtime", mtime.as_bytes())])?;
                let exact = Exact {
                    file: file.take(size),
                    left: size,
                };
                archive
                    .append_data(&mut header, name, exact)
                    .with_context(fail)?;
            }
            Kind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                archive.append_pax_extensions([("mtime", mtime.as_bytes())])?;
                archive
                    .append_data(&mut header, name, std::io::empty())
                    .with_context(fail)?;
                let (entries, _) = tree.entries(&rel, usize::MAX)?;
                pending.extend(entries.into_iter().map(|(n, _)| rel.join(n)));
            }
            Kind::Link => {
                let target = tree.read_link(&rel)?;
                header.set_entry_type(tar::EntryType::Symlink);
                archive.append_pax_extensions([("mtime", mtime.as_bytes())])?;
                if target.len() < 100 {
                    // As it is: `append_link` would tidy a short one ("a//b" -> "a/b").
                    header.set_link_name_literal(target.as_bytes())?;
                    archive.append_data(&mut header, name, std::io::empty())
                } else {
                    archive.append_link(&mut header, name, Path::new(&target))
                }
                .with_context(fail)?;
            }
            Kind::Other if rustix::fs::FileType::from_raw_mode(st.st_mode).is_fifo() => {
                header.set_entry_type(tar::EntryType::Fifo);
                archive.append_pax_extensions([("mtime", mtime.as_bytes())])?;
                archive
                    .append_data(&mut header, name, std::io::empty())
                    .with_context(fail)?;
            }
            // A socket or a device: no snapshot's business (restic restores neither usefully).
            Kind::Other => {
                tracing::debug!("{}: not a file, dir, link or fifo; left out", show(&path));
            }
        }
    }
    Ok(())
}

/// A node path as the archive names it: relative to `/`.
fn in_archive(path: &Path) -> &Path {
    path.strip_prefix("/").unwrap_or(path)
}

/// A file's bytes, exactly as many as its header says: a file that came up short would leave
/// the archive's next header inside what it held.
struct Exact {
    file: std::io::Take<std::fs::File>,
    left: u64,
}

impl Read for Exact {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file is shorter than it was",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A time as pax writes it: decimal seconds, negative before 1970 (-0.5, not -1.5).
fn pax_time(secs: i64, nanos: u64) -> String {
    if secs < 0 && nanos > 0 {
        format!("-{}.{:09}", -(secs + 1), 1_000_000_000 - nanos)
    } else {
        format!("{secs}.{nanos:09}")
    }
}

/// Unpack an archive from `input` into `staging` (an empty dir of root's own), each entry at
/// its node path below it with its owner, mode and time; dirs get theirs last, deepest first
/// (an entry made inside one changes its time).
pub(crate) fn unpack(input: impl Read, staging: &Path) -> Result<()> {
    let tree = Tree::open(staging)?;
    let mut archive = tar::Archive::new(input);
    let mut dirs = Vec::new();
    for entry in archive
        .entries()
        .context("reading the archive of what changed")?
    {
        let mut entry = entry.context("reading the archive of what changed")?;
        let rel = PathBuf::from(OsStr::from_bytes(&entry.path_bytes()));
        let fail = || format!("unpacking {}", show(&rel));
        let mtime = pax_mtime(&mut entry).with_context(fail)?;
        let h = entry.header();
        let attrs = Attrs {
            mode: Some(h.mode().with_context(fail)? & 0o7777),
            uid: u32::try_from(h.uid().with_context(fail)?).with_context(fail)?,
            gid: u32::try_from(h.gid().with_context(fail)?).with_context(fail)?,
            mtime: match mtime {
                Some(t) => t,
                None => (i64::try_from(h.mtime().with_context(fail)?)?, 0),
            },
        };
        match h.entry_type() {
            tar::EntryType::Regular => {
                let mut file = tree.create(&rel, New::File)?.context("a file just made")?;
                std::io::copy(&mut entry, &mut file).with_context(fail)?;
                drop(file);
                tree.set_attrs(&rel, &attrs)?;
            }
            tar::EntryType::Directory => {
                tree.create(&rel, New::Dir)?;
                dirs.push((rel, attrs));
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .with_context(|| format!("{}: a link with no target", show(&rel)))?
                    .into_owned();
                tree.create(&rel, New::Link(OsStr::from_bytes(&target)))?;
                tree.set_attrs(
                    &rel,
                    &Attrs {
                        mode: None,
                        ..attrs
                    },
                )?;
            }
            tar::EntryType::Fifo => {
                tree.create(&rel, New::Fifo)?;
                tree.set_attrs(&rel, &attrs)?;
            }
            other => bail!("{}: an entry of kind {other:?} in the archive", show(&rel)),
        }
    }
    dirs.sort_by_key(|(rel, _)| std::cmp::Reverse(rel.components().count()));
    for (rel, attrs) in &dirs {
        tree.set_attrs(rel, attrs)?;
    }
    Ok(())
}

/// The modification time an entry's pax header gives (seconds and nanoseconds).
fn pax_mtime<R: Read>(entry: &mut tar::Entry<'_, R>) -> Result<Option<(i64, u32)>> {
    let Some(extensions) = entry.pax_extensions()? else {
        return Ok(None);
    };
    for extension in extensions {
        let extension = extension?;
        if extension.key_bytes() != b"mtime" {
            continue;
        }
        let text = std::str::from_utf8(extension.value_bytes())?;
        let (secs, frac) = text.split_once('.').unwrap_or((text, "0"));
        let nanos: u32 = format!("{frac:0<9}").get(..9).unwrap_or("0").parse()?;
        let secs: i64 = secs.parse()?;
        return Ok(Some(if text.starts_with('-') && nanos > 0 {
            (secs - 1, 1_000_000_000 - nanos)
        } else {
            (secs, nanos)
        }));
    }
    Ok(None)
}

fn show(p: &Path) -> String {
    escaped(&p.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

    /// A box's project and agent home under `base`, and a staging dir beside them.
    fn trees(base: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let (project, home, staging) = (base.join("p"), base.join("h"), base.join("staging"));
        for d in [&project, &home, &staging] {
            fs::create_dir_all(d).unwrap();
        }
        (project, home, staging)
    }

    /// A dir of the host's beside the box's trees.
    fn host_dir(base: &Path) -> PathBuf {
        let outside = base.join("host");
        fs::create_dir_all(&outside).unwrap();
        outside
    }

    fn archive(
        roots: &[PathBuf],
        fetch: &[PathBuf],
        excluded: &(dyn Fn(&Path) -> bool + Sync),
    ) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let contents = Contents {
            roots,
            fetch,
            excluded,
            list: (
                Path::new("/var/lib/ag-box/published/demo.json"),
                b"{\"list\":1}",
            ),
        };
        write(&mut out, &contents)?;
        Ok(out)
    }

    /// An entry as [`listing`] sees it.
    type Seen = (Vec<u8>, String, u32, u32, u32, i64, i64);

    /// Every entry below `dir`: its path, kind and what it holds (a file's bytes, a link's
    /// target), owner, mode and modification time.
    fn listing(dir: &Path) -> Vec<Seen> {
        let mut out = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(d) = pending.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let m = fs::symlink_metadata(&p).unwrap();
                let what = if m.file_type().is_symlink() {
                    format!("link {:?}", fs::read_link(&p).unwrap().as_os_str())
                } else if m.is_dir() {
                    pending.push(p.clone());
                    "dir".into()
                } else if m.is_file() {
                    format!("file {}", String::from_utf8_lossy(&fs::read(&p).unwrap()))
                } else {
                    "fifo".into()
                };
                let mode = if m.file_type().is_symlink() {
                    0
                } else {
                    m.mode() & 0o7777
                };
                let rel = p.strip_prefix(dir).unwrap().as_os_str().as_bytes().to_vec();
                out.push((rel, what, m.uid(), m.gid(), mode, m.mtime(), m.mtime_nsec()));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn what_changed_comes_back_as_it_was_with_names_of_any_bytes() {
        let base = tempfile::tempdir().unwrap();
        let (project, home, staging) = trees(base.path());
        let odd = "new\nline \x1b[31mred";
        let long = "d".repeat(120);
        fs::create_dir_all(project.join(&long).join(odd)).unwrap();
        fs::write(project.join(&long).join(odd).join("f"), "deep").unwrap();
        fs::write(project.join(odd), "odd").unwrap();
        fs::set_permissions(project.join(odd), fs::Permissions::from_mode(0o4750)).unwrap();
        std::os::unix::fs::chown(project.join(odd), Some(1000), Some(1001)).unwrap();
        symlink("/etc/shadow", project.join("to-host")).unwrap();
        // Names and targets of any bytes, kept as they are ("a//b" is no "a/b").
        let raw = OsStr::from_bytes(b"\xff\xfe not utf-8 \\ back");
        fs::write(project.join(raw), "raw").unwrap();
        symlink("a//b/./c", project.join("untidy")).unwrap();
        symlink(raw, project.join("to-raw")).unwrap();
        // Before 1970, to the nanosecond.
        let before_1970 = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: -2,
                tv_nsec: 250_000_000,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: -2,
                tv_nsec: 250_000_000,
            },
        };
        rustix::fs::utimensat(
            rustix::fs::CWD,
            project.join(raw),
            &before_1970,
            rustix::fs::AtFlags::empty(),
        )
        .unwrap();
        symlink(&long, project.join("x".repeat(150))).unwrap();
        nix::unistd::mkfifo(
            &project.join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o640),
        )
        .unwrap();
        fs::create_dir(project.join("new")).unwrap();
        fs::write(project.join("new/secret.json"), "left out").unwrap();
        fs::write(project.join("new/kept"), "kept").unwrap();
        fs::write(home.join("session.jsonl"), "talk").unwrap();
        let mtime = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: 1_000_000_000,
                tv_nsec: 123_456_789,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: 1_000_000_000,
                tv_nsec: 123_456_789,
            },
        };
        rustix::fs::utimensat(
            rustix::fs::CWD,
            home.join("session.jsonl"),
            &mtime,
            rustix::fs::AtFlags::empty(),
        )
        .unwrap();
        let roots = [project.clone(), home.clone()];
        let fetch: Vec<PathBuf> = [
            project.join(&long),
            project.join(odd),
            project.join("to-host"),
            project.join(raw),
            project.join("untidy"),
            project.join("to-raw"),
            project.join("x".repeat(150)),
            project.join("pipe"),
            project.join("new"),
            home.join("session.jsonl"),
        ]
        .into();
        let excluded = |p: &Path| p.ends_with("secret.json");
        let bytes = archive(&roots, &fetch, &excluded).unwrap();
        unpack(&bytes[..], &staging).unwrap();

        let list = staging.join("var/lib/ag-box/published/demo.json");
        assert_eq!(fs::read(&list).unwrap(), b"{\"list\":1}");
        fs::remove_dir_all(staging.join("var")).unwrap();
        let staged_project = staging.join(project.strip_prefix("/").unwrap());
        let staged_home = staging.join(home.strip_prefix("/").unwrap());
        let mut expected = listing(&project);
        expected.retain(|e| !e.0.ends_with(b"secret.json"));
        assert_eq!(expected.len(), 12, "{expected:?}");
        assert_eq!(listing(&staged_project), expected);
        assert_eq!(listing(&staged_home), listing(&home));
        assert_eq!(
            fs::symlink_metadata(staged_home.join("session.jsonl"))
                .unwrap()
                .mtime_nsec(),
            123_456_789
        );
    }

    #[test]
    fn a_file_shorter_than_its_header_says_is_an_error_not_a_shifted_archive() {
        let base = tempfile::tempdir().unwrap();
        fs::write(base.path().join("f"), "abc").unwrap();
        let file = fs::File::open(base.path().join("f")).unwrap();
        let mut short = Exact {
            file: file.take(5),
            left: 5,
        };
        let mut out = Vec::new();
        let err = std::io::copy(&mut short, &mut out).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(out, b"abc");
    }

    #[test]
    fn times_before_1970_are_written_as_pax_means_them() {
        assert_eq!(
            [pax_time(-2, 250_000_000), pax_time(-2, 0), pax_time(5, 7)],
            ["-1.750000000", "-2.000000000", "5.000000007"]
        );
    }

    #[test]
    fn a_link_planted_on_the_way_to_a_changed_path_is_refused_not_followed() {
        let base = tempfile::tempdir().unwrap();
        let (project, home, _) = trees(base.path());
        let outside = host_dir(base.path());
        fs::write(outside.join("key"), "host secret").unwrap();
        // The box made `src` a link to a host dir after its walk named src/key.
        symlink(&outside, project.join("src")).unwrap();
        let roots = [project.clone(), home];
        let refused = archive(&roots, &[project.join("src/key")], &|_| false).unwrap_err();
        assert!(
            format!("{refused:#}").contains("src (every component a dir, no link)"),
            "{refused:#}"
        );
        // Named itself, the link is saved as a link: what it names is not read.
        let bytes = archive(&roots, &[project.join("src")], &|_| false).unwrap();
        assert!(!bytes.windows(11).any(|w| w == b"host secret"));
        // A path outside the box's trees is no changed path of it.
        let outside_box = archive(&roots, &[outside.join("key")], &|_| false).unwrap_err();
        assert!(format!("{outside_box:#}").contains("none of the box's trees"));
    }

    #[test]
    fn an_archive_that_would_write_through_a_link_or_outside_the_staging_dir_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let (_, _, staging) = trees(base.path());
        let outside = host_dir(base.path());
        let entry = |path: &str, kind: tar::EntryType, link: Option<&str>| {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_size(u64::from(link.is_none()));
            // Set raw, past the checks a builder makes.
            h.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(l) = link {
                h.set_link_name(l).unwrap();
            }
            h.set_cksum();
            b.append(&h, if link.is_some() { &b""[..] } else { &b"x"[..] })
                .unwrap();
            b.into_inner().unwrap()
        };
        let mut linked = entry(
            "a",
            tar::EntryType::Symlink,
            Some(outside.to_str().unwrap()),
        );
        linked.truncate(linked.len() - 1024);
        linked.extend(entry("a/f", tar::EntryType::Regular, None));
        assert!(unpack(&linked[..], &staging).is_err());
        assert!(unpack(&entry("../up", tar::EntryType::Regular, None)[..], &staging).is_err());
        assert!(unpack(&entry("/abs", tar::EntryType::Regular, None)[..], &staging).is_err());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
        assert!(!base.path().join("up").exists());
    }
}
