//! restic argvs and the parsing of its `--json` output.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::UserError;
use crate::plan::snapshot_id::{IdPrefix, SnapshotId};

/// Excluded by the binary itself, whatever any exclude file says (with what an interrupted
/// restore into a mount point may have left in it).
pub(crate) const ALWAYS_EXCLUDED: &[&str] =
    &[".auth-secret", INSIDE_RESTORE, INSIDE_PREVIOUS, INCOMING];

/// ag-box's own work names inside a box's tree: a restore's staging and aside dirs inside a
/// project that is a mount point, and where a move across filesystems copies first.
pub(crate) const INSIDE_RESTORE: &str = ".ag-box-restore";
pub(crate) const INSIDE_PREVIOUS: &str = ".ag-box-previous";
pub(crate) const INCOMING: &str = ".ag-box-incoming";

pub(crate) const FORK_TAG: &str = "fork";
/// The tag key of the snapshots that hold what changed in a park (`plan::delta::Published`).
pub(crate) const CHANGES_KEY: &str = "changes";
const CHANGES_HOST: &str = "ag-box-changes";
pub(crate) const GLOBALS_TAG: &str = "globals";
const GLOBALS_HOST: &str = "ag-box-globals";

/// The two repositories a node uses: the main one holds every whole snapshot (and the
/// globals); the changes one only the changes snapshots parks save (made by `ag-box init`
/// beside it), so restoring or saving a few thousand changed files does not first load the
/// index of every box's whole history (restic reads the whole index before any command).
/// A park's changes may also lie in no restic repository at all: sealed, under the changes
/// repository's master key, in one object of their own (`plan::sealed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Repository {
    #[default]
    Main,
    Changes,
    Sealed,
}

impl Repository {
    /// The restic repository it is, or (sealed changes) whose key seals it.
    pub(crate) fn restic(self) -> Repository {
        match self {
            Repository::Main => Repository::Main,
            Repository::Changes | Repository::Sealed => Repository::Changes,
        }
    }

    /// Its restic repository's dir in the bucket, and in `$BOX_STATE_DIR` with the local store.
    pub(crate) fn dir(self) -> &'static str {
        match self.restic() {
            Repository::Main => "restic",
            _ => "restic-changes",
        }
    }

    /// Where a node keeps its own key of its restic repository, in `$BOX_STATE_DIR`.
    pub(crate) fn node_key_file(self) -> &'static str {
        match self.restic() {
            Repository::Main => "restic-node-key.json",
            _ => "restic-changes-node-key.json",
        }
    }

    // By reference: serde's `skip_serializing_if` passes one.
    #[allow(clippy::trivially_copy_pass_by_ref)]
    pub(crate) fn is_main(&self) -> bool {
        *self == Repository::Main
    }
}

pub(crate) fn box_tag(name: &str) -> String {
    format!("box:{name}")
}

/// The tag of box `name`'s changes snapshots ([`ChangesSpec`]).
pub(crate) fn changes_tag(name: &str) -> String {
    format!("{CHANGES_KEY}:{name}")
}

/// One `--host` per box so restic finds the parent from any node.
pub(crate) fn host_for(name: &str) -> String {
    format!("ag-box-{name}")
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BackupSpec {
    pub name: String,
    pub node: String,
    pub epoch: u64,
    pub fork: bool,
    pub parent: Option<SnapshotId>,
    /// The copy was restored from `parent` on this node: every inode and ctime differs from
    /// the parent's, so only size and mtime tell a changed file (as rsync judges).
    pub restored_from_parent: bool,
    /// Paths never snapshotted (the shared agent files' mount points in the agent home).
    pub excludes: Vec<PathBuf>,
    pub exclude_files: Vec<PathBuf>,
    pub paths: Vec<PathBuf>,
}

/// `restic backup` of a box; `version`: the restic that runs it. With a parent (the box's
/// snapshots after its first) restic's scanner is left out where it can be (0.15+): it walks
/// the whole tree a second time only to show a percentage, a fifth of an incremental backup's
/// time at 200,000 files (measured with restic 0.18).
pub(crate) fn backup_args(spec: &BackupSpec, version: Option<Version>) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "backup".into(),
        "--json".into(),
        "--host".into(),
        host_for(&spec.name),
        "--tag".into(),
        box_tag(&spec.name),
        "--tag".into(),
        format!("node:{}", spec.node),
        "--tag".into(),
        format!("epoch:{}", spec.epoch),
    ];
    if spec.fork {
        a.extend(["--tag".into(), FORK_TAG.into()]);
    }
    if let Some(p) = &spec.parent {
        a.extend(["--parent".into(), p.to_string()]);
        if spec.restored_from_parent {
            a.push("--ignore-inode".into());
        }
        if version.is_some_and(Version::backs_up_without_scan) {
            a.push("--no-scan".into());
        }
    }
    push_excludes(&mut a, &spec.excludes, &spec.exclude_files);
    a.push("--".into());
    a.extend(spec.paths.iter().map(|p| p.to_string_lossy().into_owned()));
    a
}

/// What a box's snapshot leaves out, as restic is told.
fn push_excludes(a: &mut Vec<String>, excludes: &[PathBuf], exclude_files: &[PathBuf]) {
    for pattern in ALWAYS_EXCLUDED {
        a.extend(["--exclude".into(), (*pattern).into()]);
    }
    for path in excludes {
        a.extend(["--exclude".into(), path.to_string_lossy().into_owned()]);
    }
    for f in exclude_files {
        a.extend(["--exclude-file".into(), f.to_string_lossy().into_owned()]);
    }
}

/// A snapshot of only what changed in box `name` from snapshot `from` to `to`: the archive
/// of it (`sys::changes_archive`, which leaves out what the box's snapshots leave out) that
/// restic reads on its stdin. Tagged `changes:<name>`, never `box:<name>`: it is no state of
/// the box, and retention keeps it only while it leads to the box's latest.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChangesSpec {
    pub name: String,
    pub node: String,
    pub from: SnapshotId,
    pub to: SnapshotId,
}

impl ChangesSpec {
    /// `restic backup --stdin`, the archive named as `sys::changes_archive::IN_SNAPSHOT`.
    /// `--force`: no parent is looked for (a changes snapshot with the very same archive
    /// hardly ever exists, and the search reads every snapshot the repository lists).
    pub(crate) fn args(&self) -> Vec<String> {
        let name = crate::sys::changes_archive::IN_SNAPSHOT.trim_start_matches('/');
        [
            "backup",
            "--json",
            "--force",
            "--host",
            CHANGES_HOST,
            "--tag",
            &changes_tag(&self.name),
            "--tag",
            &format!("from:{}", self.from),
            "--tag",
            &format!("to:{}", self.to),
            "--tag",
            &format!("node:{}", self.node),
            "--stdin",
            "--stdin-filename",
            name,
        ]
        .map(String::from)
        .to_vec()
    }
}

/// `restic dump` of the file at `path` in a snapshot, to stdout (no lock: it only reads).
pub(crate) fn dump_args(snapshot_id: &SnapshotId, path: &Path) -> Vec<String> {
    vec![
        "dump".into(),
        "--no-lock".into(),
        snapshot_id.to_string(),
        path.to_string_lossy().into_owned(),
    ]
}

/// What restic's stderr says it could not read during a backup (exit 3): its `error: ...`
/// lines, at most a few, and how many more.
pub(crate) fn unreadable_items(stderr: &str) -> Vec<String> {
    const SHOWN: usize = 5;
    let all: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("error: "))
        .filter(|l| !l.is_empty())
        .collect();
    let mut out: Vec<String> = all
        .iter()
        .take(SHOWN)
        .map(std::string::ToString::to_string)
        .collect();
    if all.len() > SHOWN {
        out.push(format!("and {} more", all.len() - SHOWN));
    }
    if out.is_empty() && !stderr.trim().is_empty() {
        out.push(stderr.trim().lines().last().unwrap_or("").to_string());
    }
    out
}

/// Who holds the repository's lock, when restic could not take it: from its error, "locked
/// exclusively by PID 11 on nodeB by root (UID 0, GID 0), since 2026-11-30 18:40:00".
pub(crate) fn lock_holder(stderr: &str) -> Option<String> {
    let mut lines = stderr
        .lines()
        .skip_while(|l| !l.contains("repository is already locked"));
    let first = lines.next()?;
    let who = first[first.find("locked ")?..].trim_end();
    let since = lines
        .next()
        .and_then(|l| l.strip_prefix("lock was created at "))
        .and_then(|l| l.split(" (").next());
    Some(match since {
        Some(t) => format!("{who}, since {t}"),
        None => who.to_string(),
    })
}

/// The global agent files of the push node; `paths` are those that exist.
pub(crate) fn globals_backup_args(node: &str, paths: &[PathBuf]) -> Vec<String> {
    let mut a: Vec<String> = [
        "backup",
        "--json",
        "--host",
        GLOBALS_HOST,
        "--tag",
        GLOBALS_TAG,
        "--tag",
    ]
    .map(String::from)
    .to_vec();
    a.push(format!("node:{node}"));
    a.push("--".into());
    a.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
    a
}

/// Snapshot ids per `restic forget`, at most: 200 boxes snapshotted hourly add about 5,000 a
/// day, and a prune that missed a week would pass past the kernel's 2 MB of arguments.
const FORGET_PER_RUN: usize = 1000;

/// Forget the given snapshots (the space is freed by a later `prune`): the argv of each run.
pub(crate) fn forget_runs(ids: &[SnapshotId]) -> Vec<Vec<String>> {
    ids.chunks(FORGET_PER_RUN)
        .map(|chunk| {
            let mut a = vec!["forget".to_string()];
            a.extend(chunk.iter().map(ToString::to_string));
            a
        })
        .collect()
}

/// `--json`: restic 0.16+ reports progress like backup does; 0.14 accepts it and stays quiet.
/// `sparse` (restic 0.15+): runs of zeros stay holes, so a sparse file takes no more disk on the
/// node it is restored to than on the one it was saved on. `--no-lock`: restic waits 0.2 s
/// after taking its lock (most of what a restore of a few changes costs), and a restore into a
/// dir of its own only reads (a prune that removes what it reads fails it, as a lock would).
pub(crate) fn restore_args(snapshot_id: &SnapshotId, target: &Path, sparse: bool) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "restore".into(),
        "--json".into(),
        "--no-lock".into(),
        snapshot_id.to_string(),
        "--target".into(),
        target.to_string_lossy().into_owned(),
    ];
    if sparse {
        a.push("--sparse".into());
    }
    a
}

/// restic 0.17+: bring `path` (a dir the snapshot holds) to what snapshot `id` holds there,
/// rewriting only files whose size or time differ and deleting what the snapshot lacks. What
/// the backup excluded is neither restored nor deleted, so its patterns come along: the
/// absolute ones under `path` rewritten relative to it, as restic matches them below a subfolder.
pub(crate) fn restore_in_place_args(
    snapshot_id: &SnapshotId,
    path: &Path,
    excludes: &[PathBuf],
    exclude_files: &[PathBuf],
) -> Vec<String> {
    let shown = path.to_string_lossy().into_owned();
    let mut a: Vec<String> = vec![
        "restore".into(),
        "--json".into(),
        format!("{snapshot_id}:{shown}"),
        "--target".into(),
        shown,
        "--overwrite".into(),
        "if-changed".into(),
        "--delete".into(),
        // 0.17+, so 0.15+.
        "--sparse".into(),
    ];
    for pattern in ALWAYS_EXCLUDED {
        a.extend(["--exclude".into(), (*pattern).into()]);
    }
    for rel in excludes.iter().filter_map(|e| e.strip_prefix(path).ok()) {
        a.extend(["--exclude".into(), format!("/{}", rel.to_string_lossy())]);
    }
    for f in exclude_files {
        a.extend(["--exclude-file".into(), f.to_string_lossy().into_owned()]);
    }
    a
}

/// A restic release, as `restic version` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `restore --overwrite if-changed --delete` came with 0.17.
    pub(crate) fn restores_in_place(self) -> bool {
        self >= Version(0, 17, 0)
    }

    /// `backup --no-scan` came with 0.15.
    pub(crate) fn backs_up_without_scan(self) -> bool {
        self >= Version(0, 15, 0)
    }

    /// `restore --sparse` came with 0.15.
    pub(crate) fn restores_sparse(self) -> bool {
        self >= Version(0, 15, 0)
    }

    /// Before 0.18, restic retried for up to a minute to load a lock that another restic had
    /// removed between listing and loading it (restic #1523): restic runs side by side stall.
    pub(crate) fn runs_side_by_side(self) -> bool {
        self >= Version(0, 18, 0)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// `restic 0.18.0 compiled with go1.24.4 on linux/amd64` (or `0.18.1-dev (compiled manually)`).
pub(crate) fn parse_version(text: &str) -> Option<Version> {
    let word = text.split_whitespace().nth(1)?;
    let numbers = word
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()?;
    let mut parts = numbers.split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c))) => Some(Version(a, b, c)),
        _ => None,
    }
}

/// All snapshots, or those of one tag. Listings take no lock: they change nothing, and the
/// lock costs restic a fixed 200 ms wait.
pub(crate) fn snapshots_args(tag: Option<&str>) -> Vec<String> {
    let mut a = ["snapshots", "--json", "--no-lock"]
        .map(String::from)
        .to_vec();
    if let Some(t) = tag {
        a.extend(["--tag".into(), t.into()]);
    }
    a
}

/// The snapshots that hold any of `tags`.
pub(crate) fn snapshots_of_args(tags: &[String]) -> Vec<String> {
    let mut a = snapshots_args(None);
    for t in tags {
        a.extend(["--tag".into(), t.clone()]);
    }
    a
}

/// `restic snapshots --json <id>`: the one snapshot a (short) id names.
pub(crate) fn snapshot_named_args(id: &SnapshotId) -> Vec<String> {
    ["snapshots", "--json", "--no-lock", id.as_str()]
        .map(String::from)
        .to_vec()
}

/// A line of `restic backup --json` (and `restore --json` on restic 0.16+).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "message_type", rename_all = "snake_case")]
pub(crate) enum ProgressMessage {
    Status {
        #[serde(default)]
        percent_done: f64,
        #[serde(default)]
        files_done: u64,
        #[serde(default)]
        bytes_done: u64,
        #[serde(default)]
        total_bytes: u64,
    },
    Summary {
        snapshot_id: SnapshotId,
        #[serde(default)]
        files_new: u64,
        #[serde(default)]
        files_changed: u64,
        #[serde(default)]
        data_added: u64,
    },
    #[serde(other)]
    Other,
}

pub(crate) fn parse_progress_line(line: &str) -> Option<ProgressMessage> {
    serde_json::from_str(line).ok()
}

/// One entry of `restic snapshots --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SnapshotInfo {
    pub id: SnapshotId,
    pub time: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// What the backup added (restic 0.17+).
    #[serde(default)]
    pub summary: Option<SnapshotSummary>,
    #[serde(default)]
    pub paths: Vec<PathBuf>,
}

impl SnapshotInfo {
    /// The value of its `key:value` tag (`node`, `epoch`).
    pub(crate) fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find_map(|t| t.strip_prefix(key).and_then(|v| v.strip_prefix(':')))
    }
}

/// The one of `snaps` (a box's) whose id starts with `prefix`, or why there is none.
pub(crate) fn find_snapshot<'a>(
    snaps: &'a [SnapshotInfo],
    name: &str,
    prefix: &str,
) -> Result<&'a SnapshotInfo, UserError> {
    let hint = format!("'ag-box history {name}' lists its snapshots");
    let Some(typed) = IdPrefix::parse(prefix) else {
        return Err(UserError::usage(
            format!("'{prefix}' is not a snapshot id (at least 4 hex digits)"),
            hint,
        ));
    };
    let found: Vec<&SnapshotInfo> = snaps.iter().filter(|s| typed.matches(&s.id)).collect();
    match found[..] {
        [one] => Ok(one),
        [] => Err(UserError::usage(
            format!("box '{name}' has no snapshot {prefix}"),
            hint,
        )),
        _ => Err(UserError::usage(
            format!(
                "{} snapshots of box '{name}' start with {prefix}",
                found.len()
            ),
            "give more of the id",
        )),
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SnapshotSummary {
    #[serde(default)]
    pub files_new: u64,
    #[serde(default)]
    pub files_changed: u64,
    #[serde(default)]
    pub data_added: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    #[rustfmt::skip]
    fn backup_argv_with_parent_and_fork() {
        let spec = BackupSpec {
            name: "demo".into(),
            node: "nodeA".into(),
            epoch: 4,
            fork: true,
            parent: Some("abc123".into()),
            restored_from_parent: true,
            excludes: vec!["/var/lib/ag-box/homes/demo/.codex/auth.json".into()],
            exclude_files: vec!["/opt/box/exclude.txt".into()],
            paths: vec!["/root/demo".into(), "/var/lib/ag-box/homes/demo".into()],
        };
        assert_eq!(
            backup_args(&spec, Some(Version(0, 14, 0))),
            [
                "backup", "--json", "--host", "ag-box-demo",
                "--tag", "box:demo", "--tag", "node:nodeA", "--tag", "epoch:4", "--tag", "fork",
                "--parent", "abc123", "--ignore-inode", "--exclude", ".auth-secret",
                "--exclude", ".ag-box-restore", "--exclude", ".ag-box-previous",
                "--exclude", ".ag-box-incoming",
                "--exclude", "/var/lib/ag-box/homes/demo/.codex/auth.json",
                "--exclude-file", "/opt/box/exclude.txt",
                "--", "/root/demo", "/var/lib/ag-box/homes/demo",
            ]
        );
        // A restic that can skip its scanner does, for a backup with a parent.
        assert_eq!(
            backup_args(&spec, Some(Version(0, 15, 0))),
            [
                "backup", "--json", "--host", "ag-box-demo",
                "--tag", "box:demo", "--tag", "node:nodeA", "--tag", "epoch:4", "--tag", "fork",
                "--parent", "abc123", "--ignore-inode", "--no-scan", "--exclude", ".auth-secret",
                "--exclude", ".ag-box-restore", "--exclude", ".ag-box-previous",
                "--exclude", ".ag-box-incoming",
                "--exclude", "/var/lib/ag-box/homes/demo/.codex/auth.json",
                "--exclude-file", "/opt/box/exclude.txt",
                "--", "/root/demo", "/var/lib/ag-box/homes/demo",
            ]
        );
    }

    #[test]
    #[rustfmt::skip]
    fn the_changes_of_a_park_are_saved_from_an_archive_on_stdin() {
        let spec = ChangesSpec {
            name: "demo".into(),
            node: "nodeB".into(),
            from: "aaa".into(),
            to: "bbb".into(),
        };
        assert_eq!(
            spec.args(),
            [
                "backup", "--json", "--force", "--host", "ag-box-changes",
                "--tag", "changes:demo", "--tag", "from:aaa", "--tag", "to:bbb", "--tag", "node:nodeB",
                "--stdin", "--stdin-filename", "changes.tar",
            ]
        );
        assert_eq!(
            dump_args(&"ccc".into(), Path::new("/changes.tar")),
            ["dump", "--no-lock", "ccc", "/changes.tar"]
        );
    }

    #[test]
    fn first_backup_has_no_parent_and_still_excludes_auth_secret() {
        let spec = BackupSpec {
            name: "x".into(),
            node: "n".into(),
            epoch: 1,
            fork: false,
            parent: None,
            restored_from_parent: true,
            excludes: vec![],
            exclude_files: vec![],
            paths: vec!["/p".into()],
        };
        assert_eq!(
            backup_args(&spec, Some(Version(0, 18, 0))),
            [
                "backup",
                "--json",
                "--host",
                "ag-box-x",
                "--tag",
                "box:x",
                "--tag",
                "node:n",
                "--tag",
                "epoch:1",
                "--exclude",
                ".auth-secret",
                "--exclude",
                ".ag-box-restore",
                "--exclude",
                ".ag-box-previous",
                "--exclude",
                ".ag-box-incoming",
                "--",
                "/p"
            ]
        );
    }

    #[test]
    fn unreadable_items_from_restic_stderr() {
        let stderr = "repository 1234 opened\nerror: open /root/p/a: permission denied\n\
                      error: lstat /root/p/b: input/output error\nWarning: at least one source file could not be read\n";
        assert_eq!(
            unreadable_items(stderr),
            [
                "open /root/p/a: permission denied",
                "lstat /root/p/b: input/output error"
            ]
        );
        let many = (0..7)
            .map(|i| format!("error: open /f{i}: denied\n"))
            .collect::<Vec<_>>()
            .concat();
        assert_eq!(unreadable_items(&many).last().unwrap(), "and 2 more");
        assert_eq!(unreadable_items(""), Vec::<String>::new());
    }

    #[test]
    fn parses_backup_json_lines() {
        assert_eq!(
            parse_progress_line(
                r#"{"message_type":"status","percent_done":0.5,"total_files":4,"files_done":2,"bytes_done":10,"total_bytes":20}"#
            ),
            Some(ProgressMessage::Status {
                percent_done: 0.5,
                files_done: 2,
                bytes_done: 10,
                total_bytes: 20
            })
        );
        assert_eq!(
            parse_progress_line(
                r#"{"message_type":"summary","files_new":3,"files_changed":0,"data_added":99,"snapshot_id":"deadbeef"}"#
            ),
            Some(ProgressMessage::Summary {
                snapshot_id: "deadbeef".into(),
                files_new: 3,
                files_changed: 0,
                data_added: 99
            })
        );
        assert_eq!(
            parse_progress_line(r#"{"message_type":"verbose_status"}"#),
            Some(ProgressMessage::Other)
        );
        assert_eq!(parse_progress_line("not json"), None);
    }

    #[test]
    fn globals_and_forget_argvs() {
        assert_eq!(
            globals_backup_args("node-a", &["/root/.gitconfig".into()]),
            [
                "backup",
                "--json",
                "--host",
                "ag-box-globals",
                "--tag",
                "globals",
                "--tag",
                "node:node-a",
                "--",
                "/root/.gitconfig"
            ]
        );
        assert_eq!(
            forget_runs(&["a1".into(), "b2".into()]),
            [["forget", "a1", "b2"]]
        );
        let many: Vec<SnapshotId> = (0..2500).map(|i| format!("{i:064x}").into()).collect();
        let runs = forget_runs(&many);
        assert_eq!(
            runs.iter().map(Vec::len).collect::<Vec<_>>(),
            [1001, 1001, 501]
        );
        assert_eq!(
            runs.concat().iter().filter(|a| *a != "forget").count(),
            2500
        );
        assert_eq!(runs[2][500], many[2499].as_str());
    }

    #[test]
    #[rustfmt::skip]
    fn in_place_restore_argv_keeps_what_the_backup_excluded() {
        let root = Path::new("/var/lib/ag-box/homes/demo");
        assert_eq!(
            restore_in_place_args(
                &"abc".into(),
                root,
                &[root.join(".codex/auth.json"), "/elsewhere/x".into()],
                &["/opt/box/exclude.txt".into()],
            ),
            [
                "restore", "--json", "abc:/var/lib/ag-box/homes/demo",
                "--target", "/var/lib/ag-box/homes/demo",
                "--overwrite", "if-changed", "--delete", "--sparse",
                "--exclude", ".auth-secret", "--exclude", ".ag-box-restore",
                "--exclude", ".ag-box-previous", "--exclude", ".ag-box-incoming",
                "--exclude", "/.codex/auth.json",
                "--exclude-file", "/opt/box/exclude.txt",
            ]
        );
    }

    #[test]
    fn who_holds_the_lock_restic_could_not_take() {
        let refused = "unable to create lock in backend: repository is already locked exclusively by PID 11 on nodeB by root (UID 0, GID 0)\nlock was created at 2026-11-30 18:40:00 (5.2s ago)\nstorage ID 1a2b3c4d\nthe `unlock` command can be used to remove stale locks\n";
        assert_eq!(
            lock_holder(refused).as_deref(),
            Some(
                "locked exclusively by PID 11 on nodeB by root (UID 0, GID 0), since 2026-11-30 18:40:00"
            )
        );
        assert_eq!(
            lock_holder("Fatal: repository is already locked by PID 7 on a by b (UID 1, GID 1)")
                .as_deref(),
            Some("locked by PID 7 on a by b (UID 1, GID 1)")
        );
        assert_eq!(lock_holder("Fatal: wrong password or no key found\n"), None);
    }

    #[test]
    fn versions_and_what_they_can_do() {
        assert!(!Version(0, 17, 3).runs_side_by_side() && Version(0, 18, 0).runs_side_by_side());
        let v = |t| parse_version(t);
        assert_eq!(
            v("restic 0.14.0 compiled with go1.19.8 on linux/amd64"),
            Some(Version(0, 14, 0))
        );
        assert_eq!(
            v("restic 0.18.1-dev (compiled manually) compiled with go1.24 on linux/amd64"),
            Some(Version(0, 18, 1))
        );
        assert_eq!(v("restic"), None);
        assert_eq!(v("restic x.y"), None);
        assert!(!Version(0, 14, 0).restores_sparse() && Version(0, 15, 0).restores_sparse());
        assert!(!Version(0, 16, 5).restores_in_place());
        assert!(Version(0, 17, 0).restores_in_place());
        assert!(Version(1, 0, 0).restores_in_place());
        assert_eq!(Version(0, 18, 0).to_string(), "0.18.0");
    }

    #[test]
    fn other_argvs() {
        assert_eq!(
            restore_args(&"ab".into(), Path::new("/s"), false),
            ["restore", "--json", "--no-lock", "ab", "--target", "/s"]
        );
        assert_eq!(
            restore_args(&"ab".into(), Path::new("/s"), true),
            [
                "restore",
                "--json",
                "--no-lock",
                "ab",
                "--target",
                "/s",
                "--sparse"
            ]
        );
        assert_eq!(
            snapshots_args(Some("box:x")),
            ["snapshots", "--json", "--no-lock", "--tag", "box:x"]
        );
        assert_eq!(snapshots_args(None), ["snapshots", "--json", "--no-lock"]);
        assert_eq!(
            snapshots_of_args(&[box_tag("x"), changes_tag("x")]),
            [
                "snapshots",
                "--json",
                "--no-lock",
                "--tag",
                "box:x",
                "--tag",
                "changes:x"
            ]
        );
        assert_eq!(
            snapshot_named_args(&"ab12cd34".into()),
            ["snapshots", "--json", "--no-lock", "ab12cd34"]
        );
    }
}
