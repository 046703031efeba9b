//! What changed between two listings of a box's files (two snapshots, or a snapshot and the
//! working copy): files and symlinks added, removed, or modified (size or time differs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileEntry {
    pub path: PathBuf,
    pub size: u64,
    pub mtime: Option<SystemTime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum What {
    Added,
    Removed,
    Modified,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Change {
    pub what: What,
    pub path: PathBuf,
    pub old_size: Option<u64>,
    pub new_size: Option<u64>,
}

/// A node of `restic ls --json` (other lines, and directories, are not files to compare).
#[derive(Deserialize)]
struct LsNode {
    #[serde(rename = "type")]
    kind: String,
    path: PathBuf,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    mtime: Option<String>,
}

pub(crate) fn parse_ls_line(line: &str) -> Option<FileEntry> {
    let node: LsNode = serde_json::from_str(line).ok()?;
    // A symlink counts 0 bytes, in a snapshot as in a working copy.
    (node.kind == "file" || node.kind == "symlink").then(|| FileEntry {
        size: if node.kind == "file" { node.size } else { 0 },
        path: node.path,
        mtime: node
            .mtime
            .and_then(|t| humantime::parse_rfc3339_weak(&t).ok()),
    })
}

/// Sorted by path: every change from `old` to `new`.
pub(crate) fn compare(old: &[FileEntry], new: &[FileEntry]) -> Vec<Change> {
    let before: BTreeMap<&Path, &FileEntry> = old.iter().map(|e| (e.path.as_path(), e)).collect();
    let after: BTreeMap<&Path, &FileEntry> = new.iter().map(|e| (e.path.as_path(), e)).collect();
    let mut out = Vec::new();
    for (path, o) in &before {
        match after.get(path) {
            None => out.push(change(What::Removed, path, Some(o.size), None)),
            Some(n) if n.size != o.size || n.mtime != o.mtime => {
                out.push(change(What::Modified, path, Some(o.size), Some(n.size)));
            }
            Some(_) => {}
        }
    }
    for (path, n) in &after {
        if !before.contains_key(path) {
            out.push(change(What::Added, path, None, Some(n.size)));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn change(what: What, path: &Path, old_size: Option<u64>, new_size: Option<u64>) -> Change {
    Change {
        what,
        path: path.to_path_buf(),
        old_size,
        new_size,
    }
}

/// What a snapshot never holds, for listing a working copy: name patterns (a name, or a
/// `*` wildcard, matched against every path component: restic's patterns without a `/`) and
/// whole paths. Patterns with a `/`, or with more of restic's syntax than `*` (`?`, `[...]`,
/// `\` escapes, `$VAR`), in an exclude file are not followed here.
#[derive(Debug, Clone, Default)]
pub(crate) struct Excludes {
    pub names: Vec<String>,
    pub paths: Vec<PathBuf>,
    /// An exclude file had patterns [`Excludes::matches`] does not follow (see above).
    pub unfollowed: bool,
}

impl Excludes {
    /// The lines of an exclude file (comments and blank lines skipped).
    pub(crate) fn add_file_lines(&mut self, text: &str) {
        let patterns = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        for pattern in patterns {
            if pattern.contains(['/', '?', '[', '\\', '$']) {
                self.unfollowed = true;
            } else {
                self.names.push(pattern.to_string());
            }
        }
    }

    pub(crate) fn matches(&self, path: &Path) -> bool {
        self.paths.iter().any(|p| path.starts_with(p))
            || path.components().any(|c| {
                let name = c.as_os_str().to_string_lossy();
                self.names.iter().any(|pat| wildcard(pat, &name))
            })
    }
}

/// `*` matches any run of characters; everything else itself.
fn wildcard(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(tail) = text.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|&i| tail.is_char_boundary(i))
                .any(|i| wildcard(rest, &tail[i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::time::Duration;

    fn entry(path: &str, size: u64, secs: u64) -> FileEntry {
        FileEntry {
            path: path.into(),
            size,
            mtime: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)),
        }
    }

    #[test]
    fn added_removed_and_modified_by_size_or_time() {
        let old = [
            entry("/p/a", 1, 1),
            entry("/p/b", 2, 1),
            entry("/p/c", 3, 1),
            entry("/p/d", 4, 1),
        ];
        let new = [
            entry("/p/a", 1, 1),
            entry("/p/b", 5, 1),
            entry("/p/c", 3, 9),
            entry("/p/e", 6, 1),
        ];
        assert_eq!(
            compare(&old, &new),
            [
                change(What::Modified, Path::new("/p/b"), Some(2), Some(5)),
                change(What::Modified, Path::new("/p/c"), Some(3), Some(3)),
                change(What::Removed, Path::new("/p/d"), Some(4), None),
                change(What::Added, Path::new("/p/e"), None, Some(6)),
            ]
        );
    }

    #[test]
    fn restic_ls_lines() {
        assert_eq!(
            parse_ls_line(
                r#"{"name":"a","type":"file","path":"/p/a","size":3,"mtime":"1970-01-01T00:00:02.5Z","struct_type":"node"}"#
            ),
            Some(FileEntry {
                path: "/p/a".into(),
                size: 3,
                mtime: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(2500)),
            })
        );
        assert_eq!(parse_ls_line(r#"{"type":"dir","path":"/p"}"#), None);
        assert_eq!(
            parse_ls_line(r#"{"time":"x","paths":["/p"],"struct_type":"snapshot"}"#),
            None
        );
    }

    #[test]
    fn excludes_by_name_wildcard_and_path() {
        let mut ex = Excludes {
            names: vec![".auth-secret".into()],
            paths: vec!["/h/.codex/auth.json".into()],
            unfollowed: false,
        };
        ex.add_file_lines("# comment\n__pycache__\n*.pyc\n\n");
        assert!(!ex.unfollowed);
        for unfollowed in ["sub/dir", "id_??a", "secret[0-9]*", "a\\*b", "$HOME"] {
            let mut one = ex.clone();
            one.add_file_lines(unfollowed);
            assert!(one.unfollowed, "{unfollowed}");
            assert_eq!(one.names, ex.names, "{unfollowed}");
        }
        ex.add_file_lines("sub/dir\n");
        assert_eq!(ex.names, [".auth-secret", "__pycache__", "*.pyc"]);
        assert!(ex.unfollowed, "a pattern with a '/'");
        let m = |p: &str| ex.matches(Path::new(p));
        assert_eq!(
            [
                m("/p/.auth-secret"),
                m("/p/x/__pycache__/y"),
                m("/p/m.pyc"),
                m("/h/.codex/auth.json"),
                m("/p/m.py"),
                m("/p/sub/dir")
            ],
            [true, true, true, true, false, false]
        );
    }
}
