//! The sequences that move a box's state: `track` ([`track::track`]), a snapshot
//! ([`snapshot::take`]), `up` on this node ([`up::up_here`]), `park` ([`park::park`]), `stop`,
//! `rollback`, `drop`, `set` and `prune`, all with one context ([`Ctx`]). What they act on
//! beyond the store and the node's files (the box runtime, the restic repository) is behind
//! traits, so every failure path has a unit test against the local store that runs in
//! milliseconds (`tests.rs`).

mod context;
pub(crate) mod drop;
pub(crate) mod finish;
pub(crate) mod fork;
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
use crate::plan::agents;
use crate::plan::egress::BoxPolicy;
use crate::plan::sandbox::{BoxSpec, MainWindow};
use crate::store::meta::Meta;

use crate::sys::{cmd, host};
pub(crate) use context::{Ctx, record_cache_dir};

pub(crate) const RUN_ROOT: &str = "/run/box";

/// A box as this node runs it.
pub(crate) fn spec_for(config: &Config, meta: &Meta) -> BoxSpec {
    BoxSpec {
        name: meta.name.clone(),
        project: meta.path.clone(),
        agent_home: AgentHome {
            home: config.home.clone(),
            root: agent_home::root_for(&config.state_dir, &meta.name),
            logins: agent_home::logins_for(meta.agent.as_deref(), meta.creds.as_deref()),
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
        // An agent a newer ag-box knows and this one does not: the box's shell.
        main: meta
            .agent
            .as_deref()
            .and_then(agents::named)
            .map_or(MainWindow::Shell, |a| MainWindow::Agent {
                name: a.name,
                fresh: false,
            }),
        node_ca: config.state_dir.join("ca"),
        gpu: meta.gpu.then(|| host::gpu(Path::new("/dev"))),
        broker_held: crate::sys::broker::held_logins(&config.home),
        shared_store: config.s3.is_some(),
        broker_state: config.state_dir.join("broker"),
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
