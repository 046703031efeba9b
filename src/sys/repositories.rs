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
use crate::plan::delta::{Change, Listed, PublishedRef};
use crate::plan::restic::{
    BackupSpec, ChangesSpec, Repository, SnapshotInfo, box_tag, changes_tag,
};
use crate::plan::restic_key::{self, Keys};
use crate::plan::sealed;
use crate::plan::snapshot_id::SnapshotId;
use crate::plan::text::hex;
use crate::store::{MetaStore, SealedObject};
use crate::sys::ports::{Backup, Feed, Repo};
use crate::sys::restic::{Ahead, Restic};
use crate::sys::{changes_archive, host};

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
    /// The changes repository's master key, which seals changes (`plan::sealed`), once read.
    sealing: OnceCell<Keys>,
    /// The sealed changes listed so far (by full id; more than one only if one was copied
    /// under another name): what `forget` deletes.
    sealed_objects: RefCell<HashMap<String, Vec<SealedObject>>>,
}

/// A writer into `buf` that takes no more than `max` bytes in all.
struct Capped<'a> {
    buf: &'a mut Vec<u8>,
    max: usize,
}

impl std::io::Write for Capped<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + bytes.len() > self.max {
            self.buf.resize(self.max, 0);
            return Err(std::io::Error::other("over the bound"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
            sealing: OnceCell::new(),
            sealed_objects: RefCell::new(HashMap::new()),
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
        match which.restic() {
            Repository::Main => self.main(),
            _ => self.changes(),
        }
    }

    /// The key that seals changes: the changes repository's master key, read from this
    /// node's own key of it; None where it holds none (with `or_restic`, restic is asked for
    /// it then: opening what another node sealed needs it).
    fn sealing_keys(&self, or_restic: bool) -> Result<Option<&Keys>> {
        if let Some(keys) = self.sealing.get() {
            return Ok(Some(keys));
        }
        let Some(master) = self
            .changes()?
            .master_keys(self.store.as_ref(), or_restic)?
        else {
            return Ok(None);
        };
        let keys = restic_key::subkeys(&master, sealed::KEY_LABEL)?;
        Ok(Some(self.sealing.get_or_init(|| keys)))
    }

    /// The archive `feed` writes, sealed in an object of box `spec.name`'s own; None (nothing
    /// kept) where this node holds no key to seal it with, or it is larger than
    /// `sealed::MAX_ARCHIVE`.
    fn seal_changes(&self, spec: &ChangesSpec, feed: &Feed<'_>) -> Result<Option<Backup>> {
        let keys = match self.sealing_keys(false) {
            Ok(Some(keys)) => keys,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::debug!("changes not sealed: {e:#}");
                return Ok(None);
            }
        };
        let mut id = [0u8; 32];
        host::random_bytes(&mut id)?;
        let id = SnapshotId::from(hex(&id));
        let mut plain = sealed::header(&spec.name, &id)?;
        let header = plain.len();
        // Room for the IV and the MAC too: the bytes are sealed where they lie, never moved
        // to a larger buffer (pages are only touched as the archive fills them).
        plain.reserve_exact(sealed::MAX_ARCHIVE + 32);
        let mut out = Capped {
            buf: &mut plain,
            max: header + sealed::MAX_ARCHIVE,
        };
        if let Err(e) = feed(&mut out) {
            if out.buf.len() >= out.max {
                tracing::debug!(
                    "changes not sealed: their archive is larger than {} MiB",
                    sealed::MAX_ARCHIVE >> 20
                );
                return Ok(None);
            }
            return Err(e);
        }
        let bytes = (plain.len() - header) as u64;
        let mut iv = [0u8; 16];
        host::random_bytes(&mut iv)?;
        let object = restic_key::seal_under(keys, &iv, plain)?;
        self.store
            .put_sealed(&spec.name, &sealed::file_name(&id, &spec.to), object)
            .context("keeping the sealed changes")?;
        tracing::info!(
            "changes {} of {} (what changed): {} sealed",
            id.short(),
            spec.name,
            crate::plan::history::size(bytes)
        );
        Ok(Some(Backup {
            id,
            repository: Repository::Sealed,
            unreadable: Vec::new(),
            files_added: 1,
            bytes_added: bytes,
        }))
    }

    /// Box `name`'s sealed changes `published` names, unpacked under `target`.
    fn unseal_changes(&self, name: &str, published: &PublishedRef, target: &Path) -> Result<()> {
        let id = &published.snapshot;
        let file = sealed::file_name(id, &published.list_to());
        let object = self
            .store
            .sealed(name, &file, sealed::MAX_OBJECT)?
            .with_context(|| format!("its sealed changes {} are gone", id.short()))?;
        let keys = self
            .sealing_keys(true)?
            .context("no key of the changes repository opens them")?;
        let opened = restic_key::open_under(keys, object)
            .with_context(|| format!("opening the sealed changes {}", id.short()))?;
        changes_archive::unpack(sealed::archive(&opened, name, id)?, target)
    }

    /// Every box's sealed changes, listed as restic lists a changes snapshot.
    fn sealed_snapshots(&self) -> Result<Vec<(SnapshotInfo, SealedObject)>> {
        Ok(self
            .store
            .sealed_listing()?
            .into_iter()
            .filter_map(|o| Some((sealed::info(&o.name, &o.file, o.written.clone())?, o)))
            .collect())
    }

    /// `listed`, noted as sealed (with where each is), and given back.
    fn noting_sealed(&self, listed: Vec<(SnapshotInfo, SealedObject)>) -> Vec<SnapshotInfo> {
        let mut objects = self.sealed_objects.borrow_mut();
        listed
            .into_iter()
            .map(|(info, o)| {
                self.listed
                    .borrow_mut()
                    .insert(info.id.as_str().to_string(), Repository::Sealed);
                let same = objects.entry(info.id.as_str().to_string()).or_default();
                if !same.contains(&o) {
                    same.push(o);
                }
                info
            })
            .collect()
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
        // Sealed, the changes need no restic.
        if matches!(self.sealing_keys(false), Ok(Some(_))) {
            return;
        }
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
        if repo.which() == Repository::Changes
            && let Some(saved) = self.seal_changes(spec, feed)?
        {
            return Ok(saved);
        }
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
    fn restore_changes(&self, name: &str, published: &PublishedRef, target: &Path) -> Result<()> {
        if published.repository == Repository::Sealed {
            return self.unseal_changes(name, published, target);
        }
        let repo = self.of(published.repository)?;
        match &published.archive {
            Some(archive) => repo.unpack_changes(&published.snapshot, archive, target),
            None => repo.restore(&published.snapshot, target),
        }
    }
    fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let mut all = self.noting(Repository::Main, self.main()?.snapshots(None)?, |s| &s.id);
        if let Some(changes) = self.changes_there()? {
            all.extend(self.noting(Repository::Changes, changes.snapshots(None)?, |s| &s.id));
        }
        all.extend(self.noting_sealed(self.sealed_snapshots()?));
        Ok(all)
    }
    fn box_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>> {
        let mut all = self.noting(Repository::Main, self.main()?.box_snapshots(name)?, |s| s);
        if let Some(changes) = self.changes_there()? {
            all.extend(self.noting(Repository::Changes, changes.box_snapshots(name)?, |s| s));
        }
        let tag = changes_tag(name);
        let own = self
            .sealed_snapshots()?
            .into_iter()
            .filter(|(i, _)| i.tags.contains(&tag))
            .collect();
        all.extend(self.noting_sealed(own).into_iter().map(|i| i.id));
        Ok(all)
    }
    fn whole_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>> {
        let whole = self.main()?.snapshots(Some(&box_tag(name)))?;
        Ok(whole.into_iter().map(|s| s.id).collect())
    }
    fn forget(&self, ids: &[SnapshotId]) -> Result<()> {
        let wheres = if let Some(wheres) = self.where_listed(ids) {
            wheres
        } else {
            self.snapshots().context("listing the snapshots")?;
            let listed = self.listed.borrow();
            // One no listing names is left to the main repository, which names it in its error.
            ids.iter()
                .map(|id| listed.get(id.as_str()).copied().unwrap_or_default())
                .collect()
        };
        let (mut in_main, mut in_changes) = (Vec::new(), Vec::new());
        for (id, which) in ids.iter().zip(wheres) {
            match which {
                Repository::Main => in_main.push(id.clone()),
                Repository::Changes => in_changes.push(id.clone()),
                Repository::Sealed => {
                    let objects = self.sealed_objects.borrow();
                    let listed = objects
                        .get(id.as_str())
                        .with_context(|| format!("sealed changes {} are not listed", id.short()))?;
                    for o in listed {
                        self.store.delete_sealed(&o.name, &o.file)?;
                    }
                }
            }
        }
        if !in_main.is_empty() {
            self.main()?.forget(&in_main)?;
        }
        if !in_changes.is_empty() {
            self.changes()?.forget(&in_changes)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_capped_writer_takes_up_to_its_bound_and_refuses_the_write_past_it() {
        let mut buf = b"head".to_vec();
        let mut out = Capped {
            buf: &mut buf,
            max: 10,
        };
        out.write_all(b"abc").unwrap();
        out.write_all(b"def").unwrap();
        let past = out.write_all(b"g").unwrap_err();
        // Filled to the bound: what sealing reads as "too large for an object".
        assert_eq!(
            (past.to_string(), out.buf.len()),
            ("over the bound".into(), 10)
        );
        assert_eq!(buf, b"headabcdef");
    }
}
