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
use std::time::SystemTime;

use anyhow::Result;

use crate::config::Config;
use crate::error::UserError;
use crate::plan::account::{self, Ids};
use crate::plan::agent_home::{self, AgentHome};
use crate::plan::egress::BoxPolicy;
use crate::plan::sandbox::BoxSpec;
use crate::store::meta::Meta;
use crate::store::{MetaStore, Stored, get_existing};
use crate::sys::box_lock::{self, BoxLock};
pub(crate) use crate::sys::ports::{BoxRuntime, NoRepo, Repo};
use crate::sys::{cmd, host};

/// What the sequences act on.
pub(crate) struct World<'a> {
    pub config: &'a Config,
    pub store: &'a dyn MetaStore,
    pub runtime: &'a dyn BoxRuntime,
    pub repo: &'a dyn Repo,
    /// The time records and leases are stamped with (a fixed one in tests). What is compared
    /// with files' ctimes reads the system clock itself, as the filesystem does.
    pub clock: fn() -> SystemTime,
}

impl World<'_> {
    pub(crate) fn spec(&self, meta: &Meta) -> BoxSpec {
        spec_for(self.config, meta)
    }

    pub(crate) fn tracked(&self, name: &str) -> Result<Stored> {
        get_existing(self.store, name)
    }

    pub(crate) fn now(&self) -> SystemTime {
        (self.clock)()
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
