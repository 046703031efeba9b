//! What a parking node publishes for the next node that holds an older copy of the box: the
//! paths that changed since the snapshot that copy equals ([`Published`]) and, when they are
//! plain files, dirs and symlinks of modest size, their contents as the new snapshot holds them.
//! With the contents, the next `up` writes the change from one object instead of running
//! restic, whose every process loads the repository's whole index first.
//!
//! The bundle is sealed with the restic repository's master key, as restic seals its own files
//! (`restic_key::seal`): the bucket learns nothing restic would not tell it, and a bundle
//! altered or forged by anyone without the key is refused, removals included.
//!
//! Layout before sealing: the header's length (8 bytes, little-endian), the header (JSON),
//! then every file's bytes in the header's order.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};

use crate::plan::delta::Published;
use crate::plan::restic_key;

/// Contents of more bytes than this are left to restic: a bundle is held in memory (twice at
/// the most, as it is sealed or opened where it lies), and past some tens of megabytes restic's
/// fixed cost matters little. 1% of a 200,000-file tree of 10 KB files is 20 MB.
pub(crate) const MAX_CONTENT_BYTES: u64 = 32 << 20;

/// One entry of the contents, with the metadata restic would restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Item {
    pub path: PathBuf,
    pub kind: Kind,
    /// Permission bits, with setuid, setgid and sticky.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    pub mtime_nsec: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Kind {
    File { size: u64 },
    Dir,
    Symlink { target: PathBuf },
}

/// The fetched paths' entries, every dir before what is in it, and the files' bytes in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Contents {
    pub items: Vec<Item>,
    pub data: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    published: Published,
    /// None: the contents are not in the bundle (fetched through restic).
    items: Option<Vec<Item>>,
}

/// The bundle of `published` (with `contents`, if any), sealed under `keys` with `iv`.
/// The contents' bytes are sealed where they lie: a bundle of megabytes is never held twice.
pub(crate) fn seal(
    keys: &[u8; 64],
    iv: &[u8; 16],
    published: &Published,
    contents: Option<Contents>,
) -> Result<Vec<u8>> {
    let (items, mut plain) = match contents {
        Some(c) => (Some(c.items), c.data),
        None => (None, Vec::new()),
    };
    let header = serde_json::to_vec(&Header {
        published: published.clone(),
        items,
    })?;
    // Room for the header, the IV and the MAC, so the bytes move once, in place.
    plain.reserve_exact(16 + 8 + header.len() + 16);
    let mut head = (header.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(&header);
    plain.splice(..0, head);
    restic_key::seal(keys, iv, plain)
}

/// A bundle opened with `keys`: what changed, and the contents when they came along and every
/// entry lies under a path to fetch, plainly named, in order.
pub(crate) fn open(keys: &[u8; 64], sealed: Vec<u8>) -> Result<(Published, Option<Contents>)> {
    let mut plain = restic_key::open(keys, sealed)?;
    ensure!(plain.len() >= 8, "the bundle has no header");
    let len = usize::try_from(u64::from_le_bytes(plain[..8].try_into()?))?;
    ensure!(len <= plain.len() - 8, "the bundle's header is cut short");
    let header: Header =
        serde_json::from_slice(&plain[8..8 + len]).context("reading the bundle's header")?;
    let Some(items) = header.items else {
        return Ok((header.published, None));
    };
    // The files' bytes stay where they are: the header goes from the front.
    plain.drain(..8 + len);
    check(&header.published.fetch, &items, plain.len())?;
    Ok((header.published, Some(Contents { items, data: plain })))
}

/// Every item is a path to fetch or lies in a dir item before it; names are plain; the files'
/// sizes add up to the data.
fn check(fetch: &[PathBuf], items: &[Item], data_len: usize) -> Result<()> {
    let plain = |p: &Path| {
        p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
            && p.is_absolute()
    };
    let fetched: HashSet<&Path> = fetch.iter().map(PathBuf::as_path).collect();
    let mut dirs: HashSet<&Path> = HashSet::new();
    let mut others: HashSet<&Path> = HashSet::new();
    let mut size: u64 = 0;
    for item in items {
        let p = item.path.as_path();
        ensure!(plain(p), "the bundle names {}", p.display());
        let placed = fetched.contains(p) || p.parent().is_some_and(|d| dirs.contains(d));
        // Nothing is written through a file or symlink the bundle itself made.
        let through = p.ancestors().skip(1).any(|a| others.contains(a));
        ensure!(
            placed && !through,
            "the bundle holds {}, which is not below a path to fetch",
            p.display()
        );
        match &item.kind {
            Kind::Dir => {
                dirs.insert(p);
            }
            Kind::File { size: s } => {
                size = size.saturating_add(*s);
                others.insert(p);
            }
            Kind::Symlink { .. } => {
                others.insert(p);
            }
        }
    }
    ensure!(
        size == data_len as u64,
        "the bundle's files add up to {size} bytes, but it holds {data_len}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: [u8; 64] = [5; 64];

    fn item(path: &str, kind: Kind) -> Item {
        Item {
            path: path.into(),
            kind,
            mode: 0o644,
            uid: 1000,
            gid: 1000,
            mtime: 1_700_000_000,
            mtime_nsec: 123,
        }
    }

    fn published(fetch: &[&str]) -> Published {
        Published {
            from: "aaaa".into(),
            to: "bbbb".into(),
            fetch: fetch.iter().map(PathBuf::from).collect(),
            remove: vec!["/p/gone".into()],
            dirs: Vec::new(),
        }
    }

    #[test]
    fn a_bundle_opens_as_sealed() {
        let contents = Contents {
            items: vec![
                item("/p/a.txt", Kind::File { size: 3 }),
                item("/p/new", Kind::Dir),
                item("/p/new/b", Kind::File { size: 2 }),
                item(
                    "/p/new/link",
                    Kind::Symlink {
                        target: "../a.txt".into(),
                    },
                ),
            ],
            data: b"onetw".to_vec(),
        };
        let p = published(&["/p/a.txt", "/p/new"]);
        let sealed = seal(&KEYS, &[1; 16], &p, Some(contents.clone())).unwrap();
        assert_eq!(open(&KEYS, sealed).unwrap(), (p.clone(), Some(contents)));
        let bare = seal(&KEYS, &[1; 16], &p, None).unwrap();
        assert_eq!(open(&KEYS, bare).unwrap(), (p, None));
    }

    #[test]
    fn contents_outside_the_paths_to_fetch_are_refused() {
        let refused = |fetch: &[&str], items: Vec<Item>, data: &[u8]| {
            let contents = Contents {
                items,
                data: data.to_vec(),
            };
            let sealed = seal(&KEYS, &[1; 16], &published(fetch), Some(contents.clone())).unwrap();
            open(&KEYS, sealed).unwrap_err().to_string()
        };
        assert_eq!(
            [
                refused(&["/p/a"], vec![item("/p/b", Kind::Dir)], b""),
                refused(&["/p/a"], vec![item("/p/a/../../etc/x", Kind::Dir)], b""),
                refused(&["/p/a"], vec![item("/p/a/x", Kind::File { size: 0 })], b""),
                refused(
                    &["/p/a"],
                    vec![
                        item("/p/a", Kind::File { size: 0 }),
                        item("/p/a/x", Kind::Dir)
                    ],
                    b""
                ),
                refused(
                    &["/p/a"],
                    vec![item("/p/a", Kind::File { size: 4 })],
                    b"abc"
                ),
                refused(
                    &["/p/a", "/p/a/x"],
                    vec![
                        item(
                            "/p/a",
                            Kind::Symlink {
                                target: "/etc".into()
                            }
                        ),
                        item("/p/a/x", Kind::File { size: 0 })
                    ],
                    b""
                ),
            ],
            [
                "the bundle holds /p/b, which is not below a path to fetch",
                "the bundle names /p/a/../../etc/x",
                "the bundle holds /p/a/x, which is not below a path to fetch",
                "the bundle holds /p/a/x, which is not below a path to fetch",
                "the bundle's files add up to 4 bytes, but it holds 3",
                "the bundle holds /p/a/x, which is not below a path to fetch",
            ]
        );
    }

    #[test]
    fn a_bundle_sealed_under_another_key_is_refused() {
        let sealed = seal(&KEYS, &[1; 16], &published(&[]), None).unwrap();
        assert!(open(&[6; 64], sealed).is_err());
    }
}
