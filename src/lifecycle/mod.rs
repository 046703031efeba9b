//! The sequences that move a box's state: `track` ([`track::track`]), a snapshot
//! ([`snapshot::take`]), `up` on this node ([`up::up_here`]) and `park` ([`park::park`]). What they act on beyond the store and the
//! node's files (the box runtime, the restic repository) is behind traits, so every failure
//! path has a unit test against the local store that runs in milliseconds (`tests.rs`).

pub(crate) mod drop;
pub(crate) mod park;
pub(crate) mod prune;
pub(crate) mod rollback;
pub(crate) mod set;
pub(crate) mod snapshot;
pub(crate) mod stop;
#[cfg(test)]
mod tests;
pub(crate) mod track;
pub(crate) mod up;

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::config::Config;
use crate::error::UserError;
use crate::plan::account::{self, Ids};
use crate::plan::agent_home::{self, AgentHome};
use crate::plan::delta::{Change, Listed};
use crate::plan::egress::BoxPolicy;
use crate::plan::restic::SnapshotInfo;
use crate::plan::sandbox::BoxSpec;
use crate::store::meta::Meta;
use crate::store::{MetaStore, Stored, get_existing};
use crate::sys::box_lock::{self, BoxLock};
use crate::sys::freezer::Paused;
use crate::sys::restic::Backup;
use crate::sys::{cmd, host};

/// Where a box's process tree runs (`sys::runtime::Runtime`).
pub(crate) trait BoxRuntime {
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
}

/// The snapshot repository (`sys::restic::Restic`).
pub(crate) trait Repo {
    fn ensure_repo(&self) -> Result<()>;
    fn backup(&self, label: &str, args: &[String]) -> Result<Backup>;
    /// Restore a whole snapshot under `target` (an empty staging dir).
    fn restore(&self, snapshot_id: &str, target: &Path) -> Result<()>;
    /// Every snapshot in the repository (of every box, and the globals).
    fn snapshots(&self) -> Result<Vec<SnapshotInfo>>;
    /// The full ids of every snapshot of box `name`.
    fn box_snapshots(&self, name: &str) -> Result<Vec<String>>;
    /// Forget these snapshots (their data stays until [`Repo::prune`]).
    fn forget(&self, ids: &[String]) -> Result<()>;
    /// Free the space that only forgotten snapshots held.
    fn prune(&self) -> Result<()>;
    /// What changed from snapshot `from` to `to` (`restic diff`), and every file and dir of
    /// `to` with its mode and owner (`restic ls`).
    fn changes(&self, from: &str, to: &str) -> Result<(Vec<Change>, Vec<Listed>)>;
    /// Every file and dir of a snapshot with its mode and owner (`restic ls`).
    fn listing(&self, snapshot_id: &str) -> Result<Vec<Listed>>;
    /// Restore only `paths` (and what is below them) of a snapshot under `target`.
    fn restore_only(&self, snapshot_id: &str, target: &Path, paths: &[PathBuf]) -> Result<()>;
    /// The repository's master key, as `plan::restic_key::master_keys` holds it.
    fn master_key(&self) -> Result<[u8; 64]>;
    /// Whether [`Repo::restore_path`] is available (restic 0.17+).
    fn restores_in_place(&self) -> bool;
    /// Bring `path` to what the snapshot holds there, changing only what differs; what the
    /// backup excluded stays as it is.
    fn restore_path(
        &self,
        snapshot_id: &str,
        path: &Path,
        excludes: &[PathBuf],
        exclude_files: &[PathBuf],
    ) -> Result<()>;
}

/// The repository of a sequence that uses none (`set`, `stop`): every call is an error.
pub(crate) struct NoRepo;

impl NoRepo {
    fn refuse<T>() -> Result<T> {
        anyhow::bail!("this command opens no snapshot repository")
    }
}

impl Repo for NoRepo {
    fn ensure_repo(&self) -> Result<()> {
        Self::refuse()
    }
    fn backup(&self, _: &str, _: &[String]) -> Result<Backup> {
        Self::refuse()
    }
    fn restore(&self, _: &str, _: &Path) -> Result<()> {
        Self::refuse()
    }
    fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Self::refuse()
    }
    fn box_snapshots(&self, _: &str) -> Result<Vec<String>> {
        Self::refuse()
    }
    fn forget(&self, _: &[String]) -> Result<()> {
        Self::refuse()
    }
    fn prune(&self) -> Result<()> {
        Self::refuse()
    }
    fn changes(&self, _: &str, _: &str) -> Result<(Vec<Change>, Vec<Listed>)> {
        Self::refuse()
    }
    fn listing(&self, _: &str) -> Result<Vec<Listed>> {
        Self::refuse()
    }
    fn restore_only(&self, _: &str, _: &Path, _: &[PathBuf]) -> Result<()> {
        Self::refuse()
    }
    fn master_key(&self) -> Result<[u8; 64]> {
        Self::refuse()
    }
    fn restores_in_place(&self) -> bool {
        false
    }
    fn restore_path(&self, _: &str, _: &Path, _: &[PathBuf], _: &[PathBuf]) -> Result<()> {
        Self::refuse()
    }
}

/// What the sequences act on.
pub(crate) struct World<'a> {
    pub config: &'a Config,
    pub store: &'a dyn MetaStore,
    pub runtime: &'a dyn BoxRuntime,
    pub repo: &'a dyn Repo,
}

impl World<'_> {
    pub(crate) fn spec(&self, meta: &Meta) -> BoxSpec {
        spec_for(self.config, meta)
    }

    pub(crate) fn tracked(&self, name: &str) -> Result<Stored> {
        get_existing(self.store, name)
    }

    /// This command alone on the box, on this node.
    pub(crate) fn lock(&self, name: &str, verb: &str) -> Result<BoxLock> {
        box_lock::acquire(&self.config.state_dir, name, verb, self.config.lock_wait)
    }
}

pub(crate) const RUN_ROOT: &str = "/run/box";

/// A box as this node runs it.
pub(crate) fn spec_for(config: &Config, meta: &Meta) -> BoxSpec {
    BoxSpec {
        name: meta.name.clone(),
        project: meta.path.clone(),
        agent_home: AgentHome {
            home: config.home.clone(),
            root: agent_home::root_for(&config.state_dir, &meta.name),
        },
        run_dir: Path::new(RUN_ROOT).join(&meta.name),
        merged_usr: host::merged_usr(),
        tmux_bin: cmd::which("tmux").unwrap_or_else(|| PathBuf::from("/usr/bin/tmux")),
        exe: host::own_exe(),
        ids: meta.ids(),
        tasks_max: config.tasks_max,
        tmpfs_max: config.tmpfs_max,
        egress: BoxPolicy {
            mode: meta.network(config.network),
            allow: meta.allow.clone(),
        },
    }
}

/// Ids for box `name` that no record of `records` holds and no account of this node has.
pub(crate) fn free_ids(name: &str, records: &[Meta]) -> Result<Ids, UserError> {
    let taken = records
        .iter()
        .flat_map(|m| [m.uid, m.gid])
        .flatten()
        .collect();
    account::allocate(name, &taken, host::has_account).ok_or_else(|| {
        UserError::failed(
            "every uid of ag-box's range is taken",
            "drop boxes no longer needed ('ag-box drop <box>')",
        )
    })
}

pub(crate) fn not_up_here(name: &str) -> UserError {
    UserError::failed(
        format!("box '{name}' is not up on this node"),
        format!("run 'ag-box up {name}' first, or 'ag-box ls' to see where it is"),
    )
}
