//! The node's restic repositories behind the sequences' port (`ports::Repo`): the main one,
//! and the changes one (`plan::restic::Repository`) where `ag-box init` made it, each opened
//! (with this node's key, which it may add) at its first use, so a sequence that refuses
//! before that changes nothing there.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result};

use crate::config::Config;
use crate::plan::delta::{Change, Listed};
use crate::plan::restic::{BackupSpec, ChangesSpec, Repository, SnapshotInfo, box_tag};
use crate::plan::snapshot_id::SnapshotId;
use crate::store::MetaStore;
use crate::sys::ports::{Backup, Feed, Repo};
use crate::sys::restic::{Ahead, Restic};

pub(crate) struct Repositories {
    config: Config,
    store: Rc<dyn MetaStore>,
    main: OnceCell<Restic>,
    changes: OnceCell<Restic>,
    /// Whether the changes repository exists, once asked.
    changes_exist: OnceCell<bool>,
    /// The snapshots listed so far (by full id), each with the repository that holds it: what
    /// `prune` and `drop` forget comes from their listing, so it is forgotten without listing
    /// again.
    listed: RefCell<HashMap<String, Repository>>,
    /// restic started ahead for a changes snapshot (`Repo::prepare_changes`), and its spec.
    ahead: RefCell<Option<(ChangesSpec, Ahead)>>,
}

impl Repositories {
    pub(crate) fn new(config: Config, store: Rc<dyn MetaStore>) -> Repositories {
        Repositories {
            config,
            store,
            main: OnceCell::new(),
            changes: OnceCell::new(),
            changes_exist: OnceCell::new(),
            listed: RefCell::new(HashMap::new()),
            ahead: RefCell::new(None),
        }
    }

    /// The main repository, opened at the first call.
    pub(crate) fn main(&self) -> Result<&Restic> {
        self.opened(&self.main, Repository::Main)
    }

    fn opened<'a>(&self, cell: &'a OnceCell<Restic>, which: Repository) -> Result<&'a Restic> {
        if let Some(r) = cell.get() {
            return Ok(r);
        }
        let mut r = Restic::open(&self.config, which)?;
        // A local changes repository, like the main one, is made at its first use.
        if which == Repository::Changes && self.config.s3.is_none() {
            r.init()?;
        }
        r.add_node_key(self.store.as_ref(), &self.config.node);
        Ok(cell.get_or_init(|| r))
    }

    fn changes(&self) -> Result<&Restic> {
        self.opened(&self.changes, Repository::Changes)
    }

    fn of(&self, which: Repository) -> Result<&Restic> {
        match which {
            Repository::Main => self.main(),
            Repository::Changes => self.changes(),
        }
    }

    /// Where a park's changes go: the changes repository once this node holds a key of its
    /// own there (so it exists: `ag-box init` made it), else the main one, as before it.
    fn for_changes(&self) -> Result<&Restic> {
        match self.changes() {
            Ok(r) if r.node_key_id().is_some() => Ok(r),
            Ok(_) => self.main(),
            Err(e) => {
                tracing::warn!("the changes repository cannot serve ({e:#}); using the main one");
                self.main()
            }
        }
    }

    /// The changes repository, when it exists (asked of restic once: a key file of this node's
    /// may outlive the repository).
    fn changes_there(&self) -> Result<Option<&Restic>> {
        let r = self.changes()?;
        let exists = if let Some(known) = self.changes_exist.get() {
            *known
        } else {
            let known = r.exists()?;
            *self.changes_exist.get_or_init(|| known)
        };
        Ok(exists.then_some(r))
    }

    /// `ids`, listed in repository `which`: noted, and given back.
    fn noting<T>(&self, which: Repository, ids: Vec<T>, id: fn(&T) -> &SnapshotId) -> Vec<T> {
        self.listed
            .borrow_mut()
            .extend(ids.iter().map(|t| (id(t).as_str().to_string(), which)));
        ids
    }

    /// Where each of `ids` is, when every one of them was listed (by its full id).
    fn where_listed(&self, ids: &[SnapshotId]) -> Option<Vec<Repository>> {
        let listed = self.listed.borrow();
        ids.iter()
            .map(|id| listed.get(id.as_str()).copied())
            .collect()
    }
}

impl Repo for Repositories {
    fn ensure_repo(&self) -> Result<()> {
        self.main()?.ensure_repo()
    }
    fn backup(&self, spec: &BackupSpec) -> Result<Backup> {
        self.main()?.backup_box(spec)
    }
    fn prepare_changes(&self, spec: &ChangesSpec) {
        self.abandon_changes();
        match self.for_changes().and_then(|repo| repo.start_changes(spec)) {
            Ok(ahead) => *self.ahead.borrow_mut() = Some((spec.clone(), ahead)),
            Err(e) => tracing::debug!("restic not started ahead: {e:#}"),
        }
    }
    fn abandon_changes(&self) {
        drop(self.ahead.borrow_mut().take());
    }
    fn backup_changes(&self, spec: &ChangesSpec, feed: &Feed<'_>) -> Result<Backup> {
        let repo = self.for_changes()?;
        // Started ahead for another spec, it is no use: ended here.
        let ahead = self
            .ahead
            .borrow_mut()
            .take()
            .and_then(|(s, ahead)| (s == *spec).then_some(ahead));
        let saved = repo.backup_changes(spec, ahead, feed);
        // A key file of this node's may outlive the changes repository: gone, the main one
        // serves, as before it was made.
        if saved.is_err()
            && repo.which() == Repository::Changes
            && matches!(repo.exists(), Ok(false))
        {
            tracing::warn!(
                "{} does not exist (run 'ag-box init'); saving the changes in the main repository",
                repo.describe()
            );
            return self.main()?.backup_changes(spec, None, feed);
        }
        saved
    }
    fn restore(&self, snapshot_id: &SnapshotId, target: &Path) -> Result<()> {
        self.main()?.restore(snapshot_id, target)
    }
    fn restore_changes(
        &self,
        repository: Repository,
        snapshot_id: &SnapshotId,
        archive: Option<&Path>,
        target: &Path,
    ) -> Result<()> {
        let repo = self.of(repository)?;
        match archive {
            Some(archive) => repo.unpack_changes(snapshot_id, archive, target),
            None => repo.restore(snapshot_id, target),
        }
    }
    fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let mut all = self.noting(Repository::Main, self.main()?.snapshots(None)?, |s| &s.id);
        if let Some(changes) = self.changes_there()? {
            all.extend(self.noting(Repository::Changes, changes.snapshots(None)?, |s| &s.id));
        }
        Ok(all)
    }
    fn box_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>> {
        let mut all = self.noting(Repository::Main, self.main()?.box_snapshots(name)?, |s| s);
        if let Some(changes) = self.changes_there()? {
            all.extend(self.noting(Repository::Changes, changes.box_snapshots(name)?, |s| s));
        }
        Ok(all)
    }
    fn whole_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>> {
        let whole = self.main()?.snapshots(Some(&box_tag(name)))?;
        Ok(whole.into_iter().map(|s| s.id).collect())
    }
    fn forget(&self, ids: &[SnapshotId]) -> Result<()> {
        let Some(changes) = self.changes_there()? else {
            return self.main()?.forget(ids);
        };
        let wheres = if let Some(wheres) = self.where_listed(ids) {
            wheres
        } else {
            let there: Vec<SnapshotId> = changes
                .snapshots(None)
                .context("listing the changes repository")?
                .into_iter()
                .map(|s| s.id)
                .collect();
            let which = |id: &SnapshotId| {
                if there.contains(id) {
                    Repository::Changes
                } else {
                    Repository::Main
                }
            };
            ids.iter().map(which).collect()
        };
        let (mut in_main, mut in_changes) = (Vec::new(), Vec::new());
        for (id, which) in ids.iter().zip(wheres) {
            match which {
                Repository::Main => in_main.push(id.clone()),
                Repository::Changes => in_changes.push(id.clone()),
            }
        }
        if !in_main.is_empty() {
            self.main()?.forget(&in_main)?;
        }
        if !in_changes.is_empty() {
            changes.forget(&in_changes)?;
        }
        Ok(())
    }
    fn prune(&self) -> Result<()> {
        self.main()?.prune()?;
        if let Some(changes) = self.changes_there()? {
            changes.prune()?;
        }
        Ok(())
    }
    fn changes(&self, from: &SnapshotId, to: &SnapshotId) -> Result<(Vec<Change>, Vec<Listed>)> {
        self.main()?.changes(from, to)
    }
    fn listing(&self, snapshot_id: &SnapshotId) -> Result<Vec<Listed>> {
        self.main()?.listing(snapshot_id)
    }
    fn restore_only(
        &self,
        snapshot_id: &SnapshotId,
        target: &Path,
        paths: &[PathBuf],
    ) -> Result<()> {
        self.main()?.restore_only(snapshot_id, target, paths)
    }
    fn restores_in_place(&self) -> bool {
        self.main().is_ok_and(Restic::restores_in_place)
    }
    fn restore_path(
        &self,
        snapshot_id: &SnapshotId,
        path: &Path,
        excludes: &[PathBuf],
        exclude_files: &[PathBuf],
    ) -> Result<()> {
        self.main()?
            .restore_path(snapshot_id, path, excludes, exclude_files)
    }
}
