//! The one context every verb and every sequence works with (docs/design.md, "Modules"): this
//! node's settings, the store, where its boxes run, the snapshot repository (opened only when
//! first used) and the clock. `Ctx::load` makes the real one; `lifecycle/tests.rs` puts
//! recording doubles behind the same ports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::SystemTime;

use anyhow::Result;

use super::{RUN_ROOT, spec_for};
use crate::config::Config;
use crate::error::UserError;
use crate::plan::names::{self, BoxName};
use crate::plan::sandbox::BoxSpec;
use crate::store::events::{self, Step};
use crate::store::local::LocalStore;
use crate::store::meta::Meta;
use crate::store::s3::S3Store;
use crate::store::{MetaStore, Stored, get_existing};
use crate::sys::box_lock::{self, BoxLock};
use crate::sys::copy_state::CopyState;
use crate::sys::ports::{BoxRuntime, Repo};
use crate::sys::repositories::Repositories;
use crate::sys::restic::Restic;
use crate::sys::runtime;
use crate::sys::runtime_kind::Runtime;

/// What every verb and sequence acts on.
pub(crate) struct Ctx {
    pub config: Config,
    pub store: Rc<dyn MetaStore>,
    pub runtime: Rc<dyn BoxRuntime>,
    /// The repository as the sequences see it: the real one opens (and adds this node's key)
    /// at its first use, so a sequence that refuses before that changes nothing there.
    pub repo: Rc<dyn Repo>,
    /// The real repository, for the verbs that read it beyond the port (history, diff,
    /// status...); the same one `repo` is outside tests, opened once.
    restic: Rc<Repositories>,
    /// The time records and leases are stamped with (a fixed one in tests). What is compared
    /// with files' ctimes reads the system clock itself, as the filesystem does.
    pub clock: fn() -> SystemTime,
}

impl Ctx {
    /// This node's context, from its env and nodes files.
    pub(crate) fn load() -> Result<Ctx> {
        let config = Config::load()?;
        let runtime = Runtime::select(config.runtime)?;
        let store: Rc<dyn MetaStore> = match (&config.s3, record_cache_dir(&config)) {
            (Some(s3), Some(cache)) => Rc::new(S3Store::new(s3, &cache)?),
            _ => Rc::new(LocalStore::new(&config.state_dir)),
        };
        let restic = Rc::new(Repositories::new(config.clone(), Rc::clone(&store)));
        Ok(Ctx {
            config,
            store,
            runtime: Rc::new(runtime),
            repo: restic.clone(),
            restic,
            clock: SystemTime::now,
        })
    }

    /// A context acting through these ports (recording doubles in tests).
    #[cfg(test)]
    pub(crate) fn with_ports(
        config: Config,
        store: Rc<dyn MetaStore>,
        runtime: Rc<dyn BoxRuntime>,
        repo: Rc<dyn Repo>,
        clock: fn() -> SystemTime,
    ) -> Ctx {
        let restic = Rc::new(Repositories::new(config.clone(), Rc::clone(&store)));
        Ctx {
            config,
            store,
            runtime,
            repo,
            restic,
            clock,
        }
    }

    /// The repository, opened (with this node's key, which it may add) at the first call.
    pub(crate) fn restic(&self) -> Result<&Restic> {
        self.restic.main()
    }

    pub(crate) fn now(&self) -> SystemTime {
        (self.clock)()
    }

    /// Append `step` to box `name`'s history, as this node's, at this context's time.
    pub(crate) fn record_event(&self, name: &str, step: Step) {
        events::record(
            self.store.as_ref(),
            &self.config.node,
            name,
            self.now(),
            step,
        );
    }

    /// This command alone on the box, on this node (see `sys::box_lock`).
    pub(crate) fn lock(&self, name: &str, verb: &str) -> Result<BoxLock> {
        box_lock::acquire(&self.config.state_dir, name, verb, self.config.lock_wait)
    }

    /// The record of a tracked box (its name checked as it became a `BoxName`).
    pub(crate) fn tracked(&self, name: &BoxName) -> Result<Stored> {
        get_existing(self.store.as_ref(), name)
    }

    pub(crate) fn spec(&self, meta: &Meta) -> BoxSpec {
        spec_for(&self.config, meta)
    }

    /// The box as it is here: a running one with the network it runs with, which its record
    /// may no longer say (`set network=host` takes effect at the next `up`).
    pub(crate) fn spec_in_force(&self, meta: &Meta) -> BoxSpec {
        let mut spec = self.spec(meta);
        if self.runtime.is_active(&spec) {
            spec.egress = runtime::egress_in_force(&spec);
        }
        spec
    }

    /// Does the store honour conditional writes? Probed once per store, cached in the state dir.
    pub(crate) fn conditional_writes(&self) -> Result<bool> {
        let cache = self.config.state_dir.join("store-probe.json");
        let store = self.store.describe();
        if let Ok(text) = std::fs::read_to_string(&cache)
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
            && v["store"] == store.as_str()
            && let Some(ok) = v["conditional_writes"].as_bool()
        {
            return Ok(ok);
        }
        let probe_key = format!("probe/{}-{}", self.config.node, std::process::id());
        let ok = self.store.conditional_writes(&probe_key)?;
        let saved = crate::atomic::write(
            &cache,
            serde_json::json!({"store": store, "conditional_writes": ok})
                .to_string()
                .as_bytes(),
            0o644,
        );
        if let Err(e) = saved {
            tracing::warn!(
                "could not cache the store probe in {}: {e:#}",
                cache.display()
            );
        }
        Ok(ok)
    }

    /// Leases are only as good as the store's compare-and-swap.
    pub(crate) fn require_safe_leases(&self) -> Result<()> {
        let opted_in = self.config.s3.as_ref().is_some_and(|s| s.unsafe_leases);
        if opted_in || self.conditional_writes()? {
            return Ok(());
        }
        Err(UserError::failed(
            format!(
                "store {} ignores conditional writes (If-None-Match/If-Match), so a box could run on two nodes at once",
                self.store.describe()
            ),
            "use an endpoint that supports them (Cloudflare R2, AWS S3), or set BOX_S3_UNSAFE_LEASES=1 to accept the risk",
        )
        .into())
    }

    /// Boxes whose process tree is running on this node.
    pub(crate) fn active_boxes(&self) -> Result<Vec<Meta>> {
        let running = self.running_here();
        Ok(self
            .store
            .list()?
            .into_iter()
            .filter(|m| running.contains(&m.name))
            .collect())
    }

    /// Names of this install's boxes running on this node, without reading the store when
    /// this node's state knows them all (it holds an epoch for each box up here). A box it
    /// does not know runs for another install on this machine (another `BOX_STATE_DIR`), or
    /// this state was lost: the store's records say which of those are ours.
    pub(crate) fn active_box_names(&self) -> Result<Vec<String>> {
        let running = self
            .running_here()
            .into_iter()
            .filter(|n| names::validate(n).is_ok());
        let (known, unknown): (Vec<String>, Vec<String>) = running.partition(|n| {
            CopyState::load(&self.config.state_dir, n).is_ok_and(|c| c.epoch.is_some())
        });
        if unknown.is_empty() {
            return Ok(known);
        }
        let tracked: BTreeSet<String> = self.store.list()?.into_iter().map(|m| m.name).collect();
        let mut names: Vec<String> = known
            .into_iter()
            .chain(unknown.into_iter().filter(|n| tracked.contains(n)))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Names of the boxes running on this node, asked once (not once per box).
    pub(crate) fn running_here(&self) -> BTreeSet<String> {
        self.runtime
            .running_boxes(Path::new(RUN_ROOT))
            .into_iter()
            .collect()
    }
}

/// Where this node keeps the records it last listed from the S3 store (None: the local store).
pub(crate) fn record_cache_dir(config: &Config) -> Option<PathBuf> {
    let bucket: String = config
        .s3
        .as_ref()?
        .bucket
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Some(config.state_dir.join("record-cache").join(bucket))
}
