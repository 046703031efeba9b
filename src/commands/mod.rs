//! One thin file per verb: load, plan, print, execute.

pub mod attach;
pub mod exec;
pub mod ls;
pub mod park;
pub mod snapshot;
pub mod status;
pub mod track;
pub mod up;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Result;

use crate::config::Config;
use crate::error::UserError;
use crate::plan::names;
use crate::plan::sandbox::BoxSpec;
use crate::store::local::LocalStore;
use crate::store::meta::Meta;
use crate::store::{MetaStore, Stored, get_existing};
use crate::sys::restic::Restic;
use crate::sys::runtime::Runtime;
use crate::sys::{cmd, host};

pub const RUN_ROOT: &str = "/run/box";

/// What every verb works with on this node.
pub struct Ctx {
    pub config: Config,
    pub store: Box<dyn MetaStore>,
    pub runtime: Runtime,
}

impl Ctx {
    pub fn load() -> Result<Ctx> {
        let config = Config::load()?;
        let runtime = Runtime::select(config.runtime)?;
        let store = Box::new(LocalStore::new(&config.state_dir));
        Ok(Ctx {
            config,
            store,
            runtime,
        })
    }

    pub fn restic(&self) -> Result<Restic> {
        Restic::local(&self.config)
    }

    pub fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    /// The record of a tracked box, after checking the name.
    pub fn tracked(&self, name: &str) -> Result<Stored> {
        names::validate(name)?;
        get_existing(self.store.as_ref(), name)
    }

    pub fn spec(&self, meta: &Meta) -> BoxSpec {
        BoxSpec {
            name: meta.name.clone(),
            project: meta.path.clone(),
            home: self.config.home.clone(),
            run_dir: Path::new(RUN_ROOT).join(&meta.name),
            merged_usr: host::merged_usr(),
            tmux_bin: cmd::which("tmux").unwrap_or_else(|| PathBuf::from("/usr/bin/tmux")),
        }
    }

    /// Boxes whose process tree is running on this node.
    pub fn active_boxes(&self) -> Result<Vec<Meta>> {
        Ok(self
            .store
            .list()?
            .into_iter()
            .filter(|m| self.runtime.is_active(&self.spec(m)))
            .collect())
    }
}

pub fn not_up_here(name: &str) -> UserError {
    UserError::failed(
        format!("box '{name}' is not up on this node"),
        format!("run 'ag-box up {name}' first, or 'ag-box ls' to see where it is"),
    )
}

pub fn require_tools(tools: &[&str]) -> Result<()> {
    for t in tools {
        cmd::require(t)?;
    }
    Ok(())
}
