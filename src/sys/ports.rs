//! The ports the sequences (`lifecycle`) act through: where a box's processes run, and the
//! snapshot repositories, each with the types it returns; `runtime::Runtime` and
//! `repositories::Repositories` are the real ones, `lifecycle/tests.rs` holds recording doubles.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::plan::delta::{Change, Listed, PublishedRef};
use crate::plan::restic::{BackupSpec, ChangesSpec, Repository, SnapshotInfo};
use crate::plan::sandbox::BoxSpec;
use crate::plan::snapshot_id::SnapshotId;
use crate::sys::freezer::Paused;
use crate::sys::runtime_kind::Runtime;

/// A snapshot taken; `unreadable` names what restic could not read (a partial snapshot).
pub(crate) struct Backup {
    pub id: SnapshotId,
    /// Where it is: changes go to their own repository where there is one.
    pub repository: Repository,
    pub unreadable: Vec<String>,
    /// New and changed files, and the bytes they added to the repository.
    pub files_added: u64,
    pub bytes_added: u64,
}

/// What writes a changes archive on restic's stdin (again, if restic is run again).
pub(crate) type Feed<'a> = dyn Fn(&mut dyn std::io::Write) -> Result<()> + Sync + 'a;

/// Where a box's process tree runs (`sys::runtime_kind::Runtime`, implemented in
/// `sys::runtime`).
pub(crate) trait BoxRuntime {
    /// Which runtime this is: how `attach`, `exec` and the egress policy find a running box.
    fn kind(&self) -> Runtime;
    /// Names of the boxes whose process tree runs on this node (`run_root` holds their run dirs).
    fn running_boxes(&self, run_root: &Path) -> Vec<String>;
    fn is_active(&self, spec: &BoxSpec) -> bool;
    fn start(
        &self,
        spec: &BoxSpec,
        bwrap_args: &[String],
        memory_max: Option<&str>,
        nix: bool,
    ) -> Result<()>;
    fn stop(&self, spec: &BoxSpec) -> Result<()>;
    /// Pause the running box's processes until the guard is dropped; None where they cannot
    /// be paused here.
    fn pause(&self, spec: &BoxSpec) -> Result<Option<Paused>>;
    /// Start `ag-box __finish-park <box>` beside this command, to outlive it (`log`: where a
    /// detached one writes).
    fn finish_later(&self, spec: &BoxSpec, log: &Path) -> Result<()>;
}

/// The snapshot repositories (`sys::repositories::Repositories`).
pub(crate) trait Repo {
    fn ensure_repo(&self) -> Result<()>;
    /// Take a snapshot as `spec` says.
    fn backup(&self, spec: &BackupSpec) -> Result<Backup>;
    /// Start restic for the changes snapshot `spec` describes before its archive is ready,
    /// so it opens and locks the repository meanwhile: [`Repo::backup_changes`] of the same
    /// spec uses it (nothing is started where it cannot be).
    fn prepare_changes(&self, _spec: &ChangesSpec) {}
    /// What [`Repo::prepare_changes`] started and nothing used: ended, with nothing saved.
    fn abandon_changes(&self) {}
    /// Keep the archive of what changed in a park that `feed` writes, as `spec` says: sealed
    /// in an object of its own where this node holds a key of the changes repository and it
    /// is small enough, else as a snapshot in the changes repository where there is one, else
    /// in the main one ([`Backup::repository`] says which).
    fn backup_changes(&self, spec: &ChangesSpec, feed: &Feed<'_>) -> Result<Backup>;
    /// Restore a whole snapshot under `target` (an empty staging dir).
    fn restore(&self, snapshot_id: &SnapshotId, target: &Path) -> Result<()>;
    /// Restore box `name`'s changes `published` names under `target` (an empty staging
    /// dir): the archive they hold unpacked there, or (what versions before the archive
    /// saved) the files their snapshot holds.
    fn restore_changes(&self, name: &str, published: &PublishedRef, target: &Path) -> Result<()>;
    /// Every snapshot in the repositories (of every box, and the globals).
    fn snapshots(&self) -> Result<Vec<SnapshotInfo>>;
    /// The full ids of every snapshot of box `name`, changes included.
    fn box_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>>;
    /// The full ids of box `name`'s whole snapshots (the main repository's, no changes).
    fn whole_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>>;
    /// Forget these snapshots, in whichever repository holds each (their data stays until
    /// [`Repo::prune`]).
    fn forget(&self, ids: &[SnapshotId]) -> Result<()>;
    /// Free the space that only forgotten snapshots held.
    fn prune(&self) -> Result<()>;
    /// What changed from snapshot `from` to `to` (`restic diff`), and every file and dir of
    /// `to` with its mode and owner (`restic ls`).
    fn changes(&self, from: &SnapshotId, to: &SnapshotId) -> Result<(Vec<Change>, Vec<Listed>)>;
    /// Every file and dir of a snapshot with its mode and owner (`restic ls`).
    fn listing(&self, snapshot_id: &SnapshotId) -> Result<Vec<Listed>>;
    /// Restore only `paths` (and what is below them) of a snapshot under `target`.
    fn restore_only(
        &self,
        snapshot_id: &SnapshotId,
        target: &Path,
        paths: &[PathBuf],
    ) -> Result<()>;
    /// Whether [`Repo::restore_path`] is available (restic 0.17+).
    fn restores_in_place(&self) -> bool;
    /// Bring `path` to what the snapshot holds there, changing only what differs; what the
    /// backup excluded stays as it is.
    fn restore_path(
        &self,
        snapshot_id: &SnapshotId,
        path: &Path,
        excludes: &[PathBuf],
        exclude_files: &[PathBuf],
    ) -> Result<()>;
}
