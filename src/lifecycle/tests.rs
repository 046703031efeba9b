//! The sequences' failure paths against the local store, the node's files in a temp dir, a
//! runtime that records what it was asked, and a repository of plain directory copies.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::SystemTime;

use anyhow::Result;
use pretty_assertions::assert_eq;

use super::track::AgentChoice;
use super::up::How;
use super::{Ctx, drop, park, prune, rollback, snapshot, track, up};
use crate::config::{Config, Sources};
use crate::error::{Code, UserError};
use crate::plan::delta::{Change, DirAttrs, Listed, Published, PublishedRef};
use crate::plan::names::BoxName;
use crate::plan::restic::{
    BackupSpec, ChangesSpec, FORK_TAG, Repository, SnapshotInfo, box_tag, changes_tag,
};
use crate::plan::sandbox::BoxSpec;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::lease::timestamp;
use crate::store::local::LocalStore;
use crate::store::meta::{Lease, Meta, SnapshotRef};
use crate::store::{DeltaStore, EventLog, Records, RepositoryKeys, Step, update};
use crate::sys::changes_archive;
use crate::sys::copy_state::{CopyState, PendingUp, Relation};
use crate::sys::freezer::Paused;
use crate::sys::ports::{Backup, BoxRuntime, Feed, Repo};
use crate::sys::runtime_kind::Runtime;

/// A box name the sequences take (checked, as the verbs check what they are given).
fn named(name: &str) -> BoxName {
    BoxName::new(name).unwrap()
}

#[derive(Default)]
struct FakeRuntime {
    active: RefCell<BTreeSet<String>>,
    fail_start: Cell<bool>,
    /// A file the box writes as it is stopped (an agent saving its session).
    written_on_stop: RefCell<Option<PathBuf>>,
    /// The boxes whose quick park asked for the whole snapshot to follow.
    finish_later: RefCell<Vec<String>>,
    /// What happens elsewhere while the box stops (another node takes its lease).
    meanwhile_on_stop: RefCell<Option<Box<dyn Fn()>>>,
}

impl BoxRuntime for FakeRuntime {
    fn kind(&self) -> Runtime {
        Runtime::Direct
    }
    fn running_boxes(&self, _: &Path) -> Vec<String> {
        self.active.borrow().iter().cloned().collect()
    }
    fn is_active(&self, spec: &BoxSpec) -> bool {
        self.active.borrow().contains(&spec.name)
    }
    fn start(&self, spec: &BoxSpec, _: &[String], _: Option<&str>, _: bool) -> Result<()> {
        if self.fail_start.get() {
            anyhow::bail!("the box's tmux server never answered");
        }
        self.active.borrow_mut().insert(spec.name.clone());
        Ok(())
    }
    fn stop(&self, spec: &BoxSpec) -> Result<()> {
        let was_active = self.active.borrow_mut().remove(&spec.name);
        if was_active && let Some(f) = self.written_on_stop.borrow().as_ref() {
            fs::write(f, "saved while stopping")?;
        }
        if was_active && let Some(meanwhile) = self.meanwhile_on_stop.borrow().as_ref() {
            meanwhile();
        }
        Ok(())
    }
    fn pause(&self, _: &BoxSpec) -> Result<Option<Paused>> {
        Ok(None)
    }
    fn finish_later(&self, spec: &BoxSpec, _: &Path) -> Result<()> {
        self.finish_later.borrow_mut().push(spec.name.clone());
        Ok(())
    }
}

/// Snapshots as copies of the saved paths under `dir/<id>/`.
struct FakeRepo {
    dir: PathBuf,
    next: Cell<u32>,
    /// Reported as unreadable by the next backup.
    unreadable: RefCell<Vec<String>>,
    /// Listed by the next `listing` (entries a raced backup read from elsewhere).
    foreign_in_next: RefCell<Vec<Listed>>,
    forks: RefCell<Vec<String>>,
    /// Restores in place are available (restic 0.17+).
    in_place: Cell<bool>,
    /// The next restore in place writes the snapshot's files, then fails before its deletions.
    cut_in_place: Cell<bool>,
    /// The next in-place restore fails on the tree (the repository still answers).
    in_place_refused: Cell<bool>,
    /// (snapshot, path) of every restore in place.
    in_place_calls: RefCell<Vec<(String, PathBuf)>>,
    /// `restic diff` fails (then the restore takes restic's own ways).
    diff_fails: Cell<bool>,
    /// How often restic was asked what changed between two snapshots.
    listings: Cell<u32>,
    /// The next restore of only some paths fails.
    fetch_fails: Cell<bool>,
    /// (snapshot, paths) of every restore of only some paths.
    fetched: RefCell<Vec<(String, Vec<PathBuf>)>>,
    /// What the last backup was asked to take.
    last_backup: RefCell<Option<BackupSpec>>,
    /// Each snapshot's tags.
    tags: RefCell<BTreeMap<String, Vec<String>>>,
    /// The next deletion of snapshots fails.
    delete_fails: Cell<bool>,
    /// Each snapshot's time (RFC 3339), as `snapshots` lists it.
    times: RefCell<BTreeMap<String, String>>,
    /// How many prunes ran.
    prunes: Cell<u32>,
    /// The changes snapshots taken, in order.
    changes: RefCell<Vec<String>>,
    /// Every snapshot restored whole.
    restored: RefCell<Vec<String>>,
}

/// What differs from tree `a` to tree `b`, as `restic diff` names it below `at`.
/// Every file and dir under `tree`, as `restic ls` lists them (their paths under `at`).
fn list_tree(tree: &Path, at: &Path, out: &mut Vec<Listed>) {
    for entry in fs::read_dir(tree).unwrap() {
        let entry = entry.unwrap();
        let m = entry.path().symlink_metadata().unwrap();
        let path = at.join(entry.file_name());
        if m.is_dir() || m.is_file() {
            out.push(Listed {
                attrs: DirAttrs {
                    path: path.clone(),
                    mode: m.mode() & 0o7777,
                    uid: m.uid(),
                    gid: m.gid(),
                },
                dir: m.is_dir(),
            });
        }
        if m.is_dir() {
            list_tree(&entry.path(), &path, out);
        }
    }
}

fn diff_trees(a: &Path, b: &Path, at: &Path, out: &mut Vec<Change>) {
    let names = |d: &Path| -> BTreeSet<std::ffi::OsString> {
        fs::read_dir(d)
            .map(|r| r.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default()
    };
    for name in names(a).union(&names(b)) {
        let (pa, pb) = (a.join(name), b.join(name));
        let shown = |m: &fs::Metadata| {
            let p = at.join(name).to_string_lossy().into_owned();
            if m.is_dir() { format!("{p}/") } else { p }
        };
        match (
            fs::symlink_metadata(&pa).ok(),
            fs::symlink_metadata(&pb).ok(),
        ) {
            (Some(ma), None) => out.push(Change::new(&shown(&ma), "-")),
            (None, Some(mb)) => out.push(Change::new(&shown(&mb), "+")),
            (Some(ma), Some(mb)) if ma.is_dir() && mb.is_dir() => {
                diff_trees(&pa, &pb, &at.join(name), out);
            }
            (Some(ma), Some(mb)) if ma.is_dir() != mb.is_dir() => {
                out.push(Change::new(&shown(&mb), "T"));
            }
            (Some(_), Some(mb)) if fs::read(&pa).ok() != fs::read(&pb).ok() => {
                out.push(Change::new(&shown(&mb), "M"));
            }
            _ => {}
        }
    }
}

/// Remove what is under `live` but not under `snap`, as restic's `--delete` does, but for the
/// excluded `.auth-secret`.
fn delete_missing(snap: &Path, live: &Path) {
    for entry in fs::read_dir(live).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let there = snap.join(&name);
        if name == ".auth-secret" {
            continue;
        }
        match fs::symlink_metadata(&there) {
            Err(_) => crate::sys::restore::remove_any(&entry.path()).unwrap(),
            Ok(m) if m.is_dir() && entry.file_type().unwrap().is_dir() => {
                delete_missing(&there, &entry.path());
            }
            Ok(_) => {}
        }
    }
}

fn cp(from: &Path, to: &Path) {
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success(), "cp -a {} {}", from.display(), to.display());
}

impl FakeRepo {
    /// Where snapshot `id` (a `&str` or a `&SnapshotId`) is kept.
    fn tree(&self, id: impl std::fmt::Display) -> PathBuf {
        self.dir.join(id.to_string())
    }
    /// A file as snapshot `id` holds it.
    fn file(&self, id: impl std::fmt::Display, path: &Path) -> Option<String> {
        fs::read_to_string(self.tree(id).join(path.strip_prefix("/").unwrap())).ok()
    }

    /// Changes live in their own repository, as `backup_changes` said: looked up in the other,
    /// restic would not find them.
    fn in_repository(&self, repository: Repository, id: &SnapshotId) -> Result<()> {
        let held = if self.changes.borrow().iter().any(|c| c == id.as_str()) {
            Repository::Changes
        } else {
            Repository::Main
        };
        anyhow::ensure!(held == repository, "no snapshot {id} in {repository:?}");
        Ok(())
    }

    /// Snapshot `id`'s tree, copied under `target`.
    fn copy_out(&self, id: &SnapshotId, target: &Path) -> Result<()> {
        let id = id.as_str();
        self.restored.borrow_mut().push(id.to_string());
        if self.cut_in_place.get() {
            anyhow::bail!("the connection to the repository was lost");
        }
        fs::create_dir_all(target)?;
        let mut from = self.tree(id).into_os_string();
        from.push("/.");
        let ok = Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(target)
            .status()?;
        anyhow::ensure!(ok.success(), "restoring {id}");
        Ok(())
    }
}

impl Repo for FakeRepo {
    fn ensure_repo(&self) -> Result<()> {
        Ok(())
    }
    fn backup(&self, spec: &BackupSpec) -> Result<Backup> {
        let n = self.next.get() + 1;
        self.next.set(n);
        *self.last_backup.borrow_mut() = Some(spec.clone());
        let id = format!("snap{n}");
        for p in &spec.paths {
            cp(p, &self.tree(&id).join(p.strip_prefix("/").unwrap()));
        }
        let mut tags = vec![box_tag(&spec.name)];
        if spec.fork {
            self.forks.borrow_mut().push(id.clone());
            tags.push(FORK_TAG.to_string());
        }
        self.tags.borrow_mut().insert(id.clone(), tags);
        self.times
            .borrow_mut()
            .insert(id.clone(), timestamp(SystemTime::now()));
        Ok(Backup {
            id: id.into(),
            repository: Repository::Main,
            unreadable: self.unreadable.take(),
            files_added: 1,
            bytes_added: 10,
        })
    }
    fn backup_changes(&self, spec: &ChangesSpec, feed: &Feed<'_>) -> Result<Backup> {
        let id = format!("changes{}", self.changes.borrow().len() + 1);
        let mut archive = Vec::new();
        feed(&mut archive)?;
        fs::create_dir_all(self.tree(&id)).unwrap();
        changes_archive::unpack(&archive[..], &self.tree(&id))?;
        self.changes.borrow_mut().push(id.clone());
        self.tags.borrow_mut().insert(
            id.clone(),
            vec![changes_tag(&spec.name), format!("to:{}", spec.to)],
        );
        self.times
            .borrow_mut()
            .insert(id.clone(), timestamp(SystemTime::now()));
        Ok(Backup {
            id: id.into(),
            repository: Repository::Changes,
            unreadable: Vec::new(),
            files_added: 1,
            bytes_added: 10,
        })
    }
    fn restore(&self, id: &SnapshotId, target: &Path) -> Result<()> {
        self.in_repository(Repository::Main, id)?;
        self.copy_out(id, target)
    }
    fn restore_changes(&self, _: &str, published: &PublishedRef, target: &Path) -> Result<()> {
        self.in_repository(published.repository, &published.snapshot)?;
        self.copy_out(&published.snapshot, target)
    }
    fn box_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>> {
        let of = [box_tag(name), changes_tag(name)];
        Ok(self
            .tags
            .borrow()
            .iter()
            .filter(|(_, tags)| tags.iter().any(|t| of.contains(t)))
            .map(|(id, _)| id.as_str().into())
            .collect())
    }
    fn whole_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>> {
        let tag = box_tag(name);
        Ok(self
            .tags
            .borrow()
            .iter()
            .filter(|(_, tags)| tags.contains(&tag))
            .map(|(id, _)| id.as_str().into())
            .collect())
    }
    fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self
            .tags
            .borrow()
            .iter()
            .map(|(id, tags)| SnapshotInfo {
                id: id.as_str().into(),
                time: self.times.borrow().get(id).cloned().unwrap_or_default(),
                tags: tags.clone(),
                summary: None,
                paths: vec![],
            })
            .collect())
    }
    fn forget(&self, ids: &[SnapshotId]) -> Result<()> {
        if self.delete_fails.take() {
            anyhow::bail!("restic forget: the repository is locked");
        }
        for id in ids.iter().map(SnapshotId::as_str) {
            self.tags.borrow_mut().remove(id);
            fs::remove_dir_all(self.tree(id))?;
        }
        Ok(())
    }
    fn prune(&self) -> Result<()> {
        self.prunes.set(self.prunes.get() + 1);
        Ok(())
    }
    fn changes(&self, from: &SnapshotId, to: &SnapshotId) -> Result<(Vec<Change>, Vec<Listed>)> {
        // Counted asked, found or not.
        self.listings.set(self.listings.get() + 1);
        self.in_repository(Repository::Main, from)?;
        self.in_repository(Repository::Main, to)?;
        let (from, to) = (from.as_str(), to.as_str());
        anyhow::ensure!(
            !self.diff_fails.get(),
            "restic diff: the connection was lost"
        );
        let mut out = Vec::new();
        diff_trees(&self.tree(from), &self.tree(to), Path::new("/"), &mut out);
        let mut listed = Vec::new();
        list_tree(&self.tree(to), Path::new("/"), &mut listed);
        Ok((out, listed))
    }
    fn listing(&self, _: &SnapshotId) -> Result<Vec<Listed>> {
        Ok(self.foreign_in_next.take())
    }
    fn restore_only(&self, id: &SnapshotId, target: &Path, paths: &[PathBuf]) -> Result<()> {
        self.in_repository(Repository::Main, id)?;
        let id = id.as_str();
        self.fetched
            .borrow_mut()
            .push((id.to_string(), paths.to_vec()));
        anyhow::ensure!(
            !self.fetch_fails.take(),
            "restic restore: the connection was lost"
        );
        for p in paths {
            let rel = p.strip_prefix("/").unwrap();
            cp(&self.tree(id).join(rel), &target.join(rel));
        }
        Ok(())
    }
    fn restores_in_place(&self) -> bool {
        self.in_place.get()
    }
    fn restore_path(
        &self,
        id: &SnapshotId,
        path: &Path,
        _: &[PathBuf],
        _: &[PathBuf],
    ) -> Result<()> {
        self.in_repository(Repository::Main, id)?;
        let id = id.as_str();
        self.in_place_calls
            .borrow_mut()
            .push((id.to_string(), path.to_path_buf()));
        let snap = self.tree(id).join(path.strip_prefix("/").unwrap());
        fs::create_dir_all(path)?;
        let mut from = snap.clone().into_os_string();
        from.push("/.");
        let ok = Command::new("cp").arg("-a").arg(from).arg(path).status()?;
        anyhow::ensure!(ok.success(), "restoring {id} into {}", path.display());
        if self.cut_in_place.get() {
            anyhow::bail!("the connection to the repository was lost");
        }
        if self.in_place_refused.take() {
            anyhow::bail!("restic: cannot restore a symlink where a dir is");
        }
        delete_missing(&snap, path);
        Ok(())
    }
}

/// The local store, counting the reads of records (what a sequence costs in round trips).
struct CountingStore {
    inner: LocalStore,
    reads: Cell<usize>,
}

impl CountingStore {
    /// The records `run` read.
    fn reads_of<T>(&self, run: impl FnOnce() -> T) -> (T, usize) {
        let before = self.reads.get();
        let out = run();
        (out, self.reads.get() - before)
    }
}

impl Records for CountingStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn get(&self, name: &str) -> Result<Option<crate::store::Stored>> {
        self.reads.set(self.reads.get() + 1);
        self.inner.get(name)
    }
    fn put(
        &self,
        meta: &Meta,
        expected: Option<&crate::store::Version>,
    ) -> Result<crate::store::Cas> {
        self.inner.put(meta, expected)
    }
    fn delete(&self, name: &str, expected: &crate::store::Version) -> Result<crate::store::Cas> {
        self.inner.delete(name, expected)
    }
    fn list(&self) -> Result<Vec<Meta>> {
        self.inner.list()
    }
}

impl EventLog for CountingStore {
    fn put_event(&self, name: &str, event: &crate::plan::event::Event) -> Result<()> {
        self.inner.put_event(name, event)
    }
    fn events(&self, name: &str) -> Result<Vec<(String, crate::plan::event::Event)>> {
        self.inner.events(name)
    }
    fn delete_events(&self, name: &str, keys: &[String]) -> Result<()> {
        self.inner.delete_events(name, keys)
    }
}

impl DeltaStore for CountingStore {
    fn put_delta(&self, name: &str, published: Option<&PublishedRef>) -> Result<()> {
        self.inner.put_delta(name, published)
    }
    fn delta(&self, name: &str) -> Result<Option<PublishedRef>> {
        self.inner.delta(name)
    }
}

impl RepositoryKeys for CountingStore {}

impl crate::store::Accounts for CountingStore {}

/// One node: its files, state and config in a temp dir, its store local.
struct Node {
    _tmp: tempfile::TempDir,
    store: Rc<CountingStore>,
    runtime: Rc<FakeRuntime>,
    repo: Rc<FakeRepo>,
    /// The context the sequences get: this node's config, the ports above, the system clock.
    ctx: Ctx,
}

impl Node {
    fn new() -> Node {
        // Not under /tmp: that is no place for a project.
        let base = Path::new(crate::UNIT_TEST_DIR);
        fs::create_dir_all(base).unwrap();
        let tmp = tempfile::tempdir_in(base).unwrap();
        let state = tmp.path().join("state");
        let sources = Sources {
            file: [
                ("BOX_STATE_DIR", state.to_str().unwrap()),
                ("BOX_NODE", "here"),
                ("BOX_LOCK_WAIT", "1s"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            process: BTreeMap::default(),
            nodes: vec![],
            home: tmp.path().join("home"),
            hostname: "here".into(),
        };
        let config = Config::from_sources(&sources).unwrap();
        let store = Rc::new(CountingStore {
            inner: LocalStore::new(&state),
            reads: Cell::new(0),
        });
        let repo = Rc::new(FakeRepo {
            dir: tmp.path().join("repo"),
            next: Cell::new(0),
            unreadable: RefCell::default(),
            foreign_in_next: RefCell::default(),
            forks: RefCell::default(),
            in_place: Cell::new(false),
            cut_in_place: Cell::new(false),
            in_place_refused: Cell::new(false),
            in_place_calls: RefCell::default(),
            diff_fails: Cell::new(false),
            listings: Cell::new(0),
            fetch_fails: Cell::new(false),
            fetched: RefCell::default(),
            last_backup: RefCell::default(),
            tags: RefCell::default(),
            delete_fails: Cell::new(false),
            times: RefCell::default(),
            prunes: Cell::new(0),
            changes: RefCell::default(),
            restored: RefCell::default(),
        });
        let runtime = Rc::new(FakeRuntime::default());
        Node {
            ctx: Ctx::with_ports(
                config,
                store.clone(),
                runtime.clone(),
                repo.clone(),
                SystemTime::now,
            ),
            store,
            runtime,
            repo,
            _tmp: tmp,
        }
    }

    /// As a node that never held the box sees it: no copy, nothing known of one.
    fn without_a_copy(&self) {
        fs::remove_dir_all(self.project()).unwrap();
        CopyState::journal(&self.ctx.config.state_dir, "demo")
            .unwrap()
            .record(|c| *c = CopyState::default())
            .unwrap();
    }

    /// A node whose parks take the whole snapshot (`BOX_QUICK_PARK=false`).
    fn whole_parks() -> Node {
        let mut n = Node::new();
        n.ctx.config.quick_park = false;
        n
    }

    /// The box's latest snapshot (as the record names it) holds `text` at `file`.
    fn latest_holds(&self, file: &str, text: &str) {
        let latest = self.meta().last_snapshot.expect("a latest snapshot").id;
        assert_eq!(
            self.repo
                .file(&latest, &self.project().join(file))
                .as_deref(),
            Some(text),
            "in {latest:?}"
        );
    }

    /// This node's context with another clock.
    fn ctx_at(&self, clock: fn() -> SystemTime) -> Ctx {
        Ctx::with_ports(
            self.ctx.config.clone(),
            self.store.clone(),
            self.runtime.clone(),
            self.repo.clone(),
            clock,
        )
    }

    fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    fn project(&self) -> PathBuf {
        self.ctx.config.home.join("demo")
    }

    fn read(&self, file: &str) -> Option<String> {
        fs::read_to_string(self.project().join(file)).ok()
    }

    /// A file in the project before it is first parked.
    fn write_first(&self, file: &str, text: &str) {
        fs::create_dir_all(self.project()).unwrap();
        self.write(file, text);
    }

    fn write(&self, file: &str, text: &str) {
        fs::write(self.project().join(file), text).unwrap();
    }

    fn meta(&self) -> Meta {
        self.stored().meta
    }

    fn stored(&self) -> crate::store::Stored {
        self.store.get("demo").unwrap().unwrap()
    }

    /// A snapshot of the box as the `snapshot` verb takes it.
    fn take(&self, accept_partial: bool) -> Result<snapshot::Taken> {
        snapshot::take_alone(self.ctx(), &self.stored(), accept_partial)
    }

    fn copy(&self) -> CopyState {
        CopyState::load(&self.ctx.config.state_dir, "demo").unwrap()
    }

    /// The snapshot this node's copy equals (stale or not).
    fn equals(&self) -> Option<String> {
        self.copy().equal().map(|e| e.snapshot.to_string())
    }

    /// `track demo` and `park demo`: f.txt holds "v1".
    fn parked(&self) {
        fs::create_dir_all(self.project()).unwrap();
        self.write("f.txt", "v1");
        let ctx = self.ctx();
        track::track(
            ctx,
            &named("demo"),
            &self.project(),
            false,
            AgentChoice::FromSessions,
            || Ok(()),
        )
        .unwrap();
        park::park(ctx, &named("demo"), false).unwrap();
    }

    /// Another node parked the box meanwhile: its last snapshot has f.txt = "elsewhere".
    fn parked_elsewhere(&self) -> String {
        let id = "other".to_string();
        let tree = self
            .repo
            .tree(&id)
            .join(self.project().strip_prefix("/").unwrap());
        fs::create_dir_all(&tree).unwrap();
        fs::write(tree.join("f.txt"), "elsewhere").unwrap();
        self.point_at(&id);
        id
    }

    /// Another node took the box's latest snapshot "there" from this node's last one, with
    /// f.txt changed, old.txt removed and new/n.txt added.
    fn changed_elsewhere(&self) {
        self.changed_elsewhere_as("there");
    }

    fn changed_elsewhere_as(&self, id: &str) {
        let from = self.meta().last_snapshot.unwrap().id;
        let there = self.repo.tree(id);
        cp(&self.repo.tree(&from), &there);
        let project = there.join(self.project().strip_prefix("/").unwrap());
        fs::write(project.join("f.txt"), "elsewhere").unwrap();
        let _ = fs::remove_file(project.join("old.txt"));
        fs::create_dir_all(project.join("new")).unwrap();
        fs::write(project.join("new/n.txt"), "added").unwrap();
        self.point_at(id);
    }

    /// Publish `published` as the parking node would: a changes snapshot holding what it
    /// fetches (as its `to` holds it) and its list, and the store pointing at it.
    fn publish(&self, published: &Published) -> PublishedRef {
        let list = self.ctx.config.state_dir.join("published/demo.json");
        let id = format!("changes{}", self.repo.changes.borrow().len() + 1);
        let tree = self.repo.tree(&id);
        for p in &published.fetch {
            let rel = p.strip_prefix("/").unwrap();
            let from = self.repo.tree(&published.to).join(rel);
            if from.exists() {
                cp(&from, &tree.join(rel));
            }
        }
        let at = tree.join(list.strip_prefix("/").unwrap());
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        fs::write(at, serde_json::to_vec(published).unwrap()).unwrap();
        self.repo.changes.borrow_mut().push(id.clone());
        let r = PublishedRef {
            from: published.from.clone(),
            to: published.to.clone(),
            snapshot: id.into(),
            list,
            repository: Repository::Changes,
            // As versions before the archive saved it: the files themselves.
            archive: None,
        };
        self.store.put_delta("demo", Some(&r)).unwrap();
        r
    }

    /// What was published last: its changes snapshot, and the list in it.
    fn published(&self) -> (PublishedRef, Published) {
        let r = self.store.delta("demo").unwrap().expect("published");
        let list = self.repo.file(&r.snapshot, &r.list).expect("its list");
        (r.clone(), serde_json::from_str(&list).unwrap())
    }

    /// The box's latest snapshot is now `id`, taken elsewhere.
    fn point_at(&self, id: &str) {
        let snapshot = SnapshotRef {
            id: id.into(),
            at: timestamp(SystemTime::now()),
            node: "there".into(),
            epoch: 7,
            paths: vec![self.project()],
            on: None,
            same_as: None,
        };
        update(self.store.as_ref(), "demo", |m| {
            Ok(Step::Write(
                Meta {
                    last_snapshot: Some(snapshot.clone()),
                    lease: None,
                    ..m.clone()
                },
                (),
            ))
        })
        .unwrap();
    }

    /// An `up` killed while it restored snapshot `to`: its intent recorded, the lease taken,
    /// the copy part old, part new.
    fn cut_off_mid_restore(&self, to: &SnapshotId) {
        CopyState::journal(&self.ctx.config.state_dir, "demo")
            .unwrap()
            .record(|c| {
                c.pending_up = Some(PendingUp { previous: None });
                c.begin_restore(to);
            })
            .unwrap();
        self.set_lease(Some(&lease_of("here", 8)));
    }

    fn set_lease(&self, lease: Option<&Lease>) {
        update(self.store.as_ref(), "demo", |m| {
            Ok(Step::Write(
                Meta {
                    lease: lease.cloned(),
                    ..m.clone()
                },
                (),
            ))
        })
        .unwrap();
    }
}

fn lease_of(node: &str, epoch: u64) -> Lease {
    let now = timestamp(SystemTime::now());
    Lease {
        node: node.into(),
        epoch,
        acquired_at: now.clone(),
        renewed_at: now.clone(),
        expires_at: now,
    }
}

fn code(e: &anyhow::Error) -> Option<Code> {
    e.chain()
        .filter_map(|c| c.downcast_ref::<UserError>())
        .last()
        .map(|u| u.code)
}

#[test]
fn unsaved_work_is_kept_as_a_fork_before_another_nodes_snapshot_replaces_it() {
    let n = Node::new();
    n.parked();
    n.write("f.txt", "edited after the park");
    let other = n.parked_elsewhere();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    let forks = n.repo.forks.borrow().clone();
    assert_eq!(forks.len(), 1);
    assert_eq!(
        n.repo
            .file(&forks[0], &n.project().join("f.txt"))
            .as_deref(),
        Some("edited after the park")
    );
    assert_eq!(n.equals().as_deref(), Some(other.as_str()));
    assert_eq!(n.copy().pending_up, None);
    assert_eq!(n.meta().lease.map(|l| l.node), Some("here".into()));
}

#[test]
fn a_copy_equal_to_what_this_node_saved_is_replaced_without_a_fork() {
    let n = Node::new();
    n.parked();
    n.parked_elsewhere();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert!(n.repo.forks.borrow().is_empty());
}

#[test]
fn a_failed_start_hands_the_lease_back_and_leaves_nothing_to_finish() {
    let n = Node::new();
    n.parked();
    n.runtime.fail_start.set(true);
    let e = up::up_here(n.ctx(), &named("demo"), How::default()).unwrap_err();
    assert!(format!("{e:#}").contains("never answered"), "{e:#}");
    assert_eq!(n.meta().lease, None);
    assert_eq!(n.copy().pending_up, None);
    assert_eq!(n.copy().epoch, None);
}

#[test]
fn an_up_cut_off_after_the_lease_is_finished_not_started_stale() {
    let n = Node::new();
    n.parked();
    let other = n.parked_elsewhere();
    // The cut-off up: its intent recorded, the lease taken, nothing restored.
    CopyState::journal(&n.ctx.config.state_dir, "demo")
        .unwrap()
        .record(|c| c.pending_up = Some(PendingUp { previous: None }))
        .unwrap();
    n.set_lease(Some(&lease_of("here", 8)));
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.equals().as_deref(), Some(other.as_str()));
    assert_eq!(n.copy().pending_up, None);
    assert!(n.runtime.active.borrow().contains("demo"));
}

#[test]
fn a_half_restored_copy_is_never_saved_as_the_box_latest() {
    let n = Node::new();
    n.parked();
    let other = SnapshotId::from(n.parked_elsewhere().as_str());
    // An up killed mid-restore: the lease taken, the copy part old, part new.
    n.cut_off_mid_restore(&other);
    n.write("f.txt", "half old, half new");
    let before = n.meta();
    let snapshots = n.repo.box_snapshots("demo").unwrap();
    // The snapshot verb refuses it, and points to the up that finishes it.
    let e = n.take(true).err().expect("the snapshot verb refused");
    assert!(
        format!("{e:#}").contains("its copy on this node is half restored"),
        "{e:#}"
    );
    assert_eq!(n.meta(), before, "the record untouched");
    // Park frees the node and leaves the latest as it was: the next up anywhere restores it.
    // The copy is kept as a fork first (an older ag-box may have run it), never as the latest.
    assert_eq!(park::park(n.ctx(), &named("demo"), false).unwrap(), other);
    let forks = n.repo.forks.borrow().clone();
    assert_eq!(forks.len(), 1);
    assert_eq!(
        n.repo
            .file(&forks[0], &n.project().join("f.txt"))
            .as_deref(),
        Some("half old, half new")
    );
    assert_eq!(
        n.repo.box_snapshots("demo").unwrap().len(),
        snapshots.len() + 1,
        "the fork alone"
    );
    let after = n.meta();
    assert_eq!(
        after,
        Meta {
            lease: None,
            op: after.op.clone(),
            ..before
        },
        "the lease gone, the latest as it was"
    );
    assert_eq!(n.copy().relation, Relation::Restoring { to: other.clone() });
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
}

#[test]
fn a_running_box_whose_copy_an_older_ag_box_left_half_restored_is_saved_as_it_runs() {
    let n = Node::new();
    n.parked();
    let other = SnapshotId::from(n.parked_elsewhere().as_str());
    n.cut_off_mid_restore(&other);
    // An older ag-box started it anyway; the agent worked since.
    n.runtime.active.borrow_mut().insert("demo".into());
    n.write("f.txt", "the agent's work");
    n.take(false).unwrap();
    n.latest_holds("f.txt", "the agent's work");
}

#[test]
fn a_half_restored_copy_whose_lease_stayed_here_is_finished_not_started() {
    let n = Node::new();
    n.parked();
    let other = n.parked_elsewhere();
    // A restore cut off, its up over (a hand-back that could not write left the lease here).
    CopyState::journal(&n.ctx.config.state_dir, "demo")
        .unwrap()
        .record(|c| {
            c.begin_restore(&other.as_str().into());
            c.epoch = Some(8);
        })
        .unwrap();
    n.set_lease(Some(&lease_of("here", 8)));
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.equals().as_deref(), Some(other.as_str()));
    assert!(n.repo.forks.borrow().is_empty(), "nothing unsaved to keep");
    assert!(n.runtime.active.borrow().contains("demo"));
}

#[test]
fn the_history_is_stamped_by_the_context_clock() {
    let n = Node::new();
    n.parked();
    let at = || SystemTime::UNIX_EPOCH + std::time::Duration::from_hours(500_000);
    let ctx = n.ctx_at(at);
    up::up_here(&ctx, &named("demo"), How::default()).unwrap();
    let events = n.store.events("demo").unwrap();
    let (_, up) = events.last().unwrap();
    assert_eq!(
        (up.verb.as_str(), up.time.as_str()),
        ("up", "2027-01-15T08:00:00.000000000Z")
    );
}

#[test]
fn a_box_that_ran_here_starts_as_it_is() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "unsaved");
    // The node restarts: the box is gone, its lease still this node's.
    n.runtime.active.borrow_mut().clear();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("unsaved"));
    assert!(n.repo.forks.borrow().is_empty());
}

#[test]
fn a_partial_snapshot_leaves_the_lease_and_the_box_as_they_were() {
    let n = Node::whole_parks();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    // Changed since its last snapshot (an unchanged box takes none).
    n.write("g.txt", "new");
    let before = n.meta();
    *n.repo.unreadable.borrow_mut() = vec!["open /x: permission denied".into()];
    let e = park::park(n.ctx(), &named("demo"), false).unwrap_err();
    assert!(
        format!("{e:#}").contains("restic could not read open /x: permission denied"),
        "{e:#}"
    );
    assert_eq!(n.meta().lease, before.lease);
    assert_eq!(n.meta().last_snapshot, before.last_snapshot);
    assert!(n.runtime.active.borrow().contains("demo"));

    // An emptied project, likewise; --accept-partial counts it.
    for f in ["f.txt", "g.txt"] {
        fs::remove_file(n.project().join(f)).unwrap();
    }
    let e = park::park(n.ctx(), &named("demo"), false).unwrap_err();
    assert!(format!("{e:#}").contains("is empty"), "{e:#}");
    assert!(n.runtime.active.borrow().contains("demo"));
    park::park(n.ctx(), &named("demo"), true).unwrap();
    assert_eq!(n.meta().lease, None);
}

#[test]
fn a_snapshot_of_an_unpaused_box_holding_another_owner_is_not_its_latest() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "changed");
    let before = n.meta();
    let raced = n.project().join("link/secret");
    *n.repo.foreign_in_next.borrow_mut() = vec![Listed {
        attrs: DirAttrs {
            path: raced.clone(),
            mode: 0o600,
            uid: 0,
            gid: 0,
        },
        dir: false,
    }];
    let Err(e) = n.take(false) else {
        panic!("a snapshot holding a root-owned file was counted");
    };
    assert!(
        format!("{e:#}").contains(&format!(
            "holds 1 entry not owned by the box's user ({})",
            raced.display()
        )),
        "{e:#}"
    );
    assert_eq!(n.meta().last_snapshot, before.last_snapshot);
    assert_eq!(n.meta().lease, before.lease);
    // Listing only what the box's user owns, the next one is counted.
    n.take(false).unwrap();
    assert_ne!(n.meta().last_snapshot, before.last_snapshot);
}

#[test]
fn a_snapshot_above_the_bound_is_not_taken() {
    let mut n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.ctx.config.snapshot_add_max = Some(1 << 20);
    n.write("small.txt", "fits");
    n.take(false).unwrap();
    let before = n.meta();
    n.write("big.bin", &"x".repeat(2 << 20));
    let Err(e) = n.take(false) else {
        panic!("a snapshot above the bound was taken");
    };
    assert!(
        format!("{e:#}").contains(
            "not snapshotted: 2.0 MiB of its files are new or changed since its last snapshot here, above BOX_SNAPSHOT_ADD_MAX (1.0 MiB)"
        ),
        "{e:#}"
    );
    assert_eq!(n.meta().last_snapshot, before.last_snapshot);
    n.take(true).unwrap();
    assert_ne!(n.meta().last_snapshot, before.last_snapshot);
    // Once taken, the big file is no change to the next one.
    n.write("small.txt", "still fits");
    n.take(false).unwrap();
}

#[test]
fn an_up_after_the_project_was_deleted_restores_it_and_keeps_no_empty_fork() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    fs::remove_dir_all(n.project()).unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("v2"));
    assert!(
        n.repo.forks.borrow().is_empty(),
        "{:?}",
        n.repo.forks.borrow()
    );
    // With work in its agent home that no snapshot has, that is kept.
    park::park(n.ctx(), &named("demo"), false).unwrap();
    fs::remove_dir_all(n.project()).unwrap();
    let home = n.ctx().spec(&n.meta()).agent_home.root;
    fs::write(home.join("unsaved-session.jsonl"), "{}").unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.repo.forks.borrow().len(), 1);
}

#[test]
fn a_park_after_the_lease_was_taken_keeps_a_fork_and_frees_the_node() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "mine");
    let taker = lease_of("there", 9);
    n.set_lease(Some(&taker));
    let e = park::park(n.ctx(), &named("demo"), false).unwrap_err();
    assert_eq!(code(&e), Some(Code::LeaseHeld));
    assert!(!n.runtime.active.borrow().contains("demo"));
    assert_eq!(n.meta().lease, Some(taker));
    let forks = n.repo.forks.borrow().clone();
    assert_eq!(
        n.repo
            .file(&forks[0], &n.project().join("f.txt"))
            .as_deref(),
        Some("mine")
    );
}

#[test]
fn up_refuses_a_box_held_elsewhere_or_being_dropped_and_takes_nothing() {
    let n = Node::new();
    n.parked();
    n.set_lease(Some(&lease_of("there", 3)));
    let e = up::up_here(n.ctx(), &named("demo"), How::default()).unwrap_err();
    assert_eq!(code(&e), Some(Code::LeaseHeld));
    assert_eq!(n.copy().pending_up, None);
    n.set_lease(None);
    update(n.store.as_ref(), "demo", |m| {
        Ok(Step::Write(
            Meta {
                dropping: true,
                ..m.clone()
            },
            (),
        ))
    })
    .unwrap();
    let e = up::up_here(n.ctx(), &named("demo"), How::default()).unwrap_err();
    assert!(format!("{e:#}").contains("is being dropped"), "{e:#}");
    assert_eq!(n.meta().lease, None);
    assert!(n.runtime.active.borrow().is_empty());
}

#[test]
fn an_older_copy_is_brought_to_the_snapshot_in_place() {
    let n = Node::new();
    n.parked();
    n.write(".auth-secret", "this node's");
    let id = n.parked_elsewhere();
    n.write("gone-there.txt", "saved in the first snapshot only");
    n.repo.in_place.set(true);
    n.repo.diff_fails.set(true);
    // The copy differs from what this node saved (gone-there.txt): kept as a fork first.
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.repo.forks.borrow().len(), 1);
    assert_eq!(
        *n.repo.in_place_calls.borrow(),
        [(id.clone(), n.project())],
        "only the paths the snapshot holds"
    );
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.read("gone-there.txt"), None);
    assert_eq!(n.read(".auth-secret").as_deref(), Some("this node's"));
    let Relation::Equals(copy) = n.copy().relation else {
        panic!("the copy equals the snapshot restored")
    };
    assert_eq!((copy.snapshot, copy.paths), (id.into(), vec![n.project()]));
    assert!(copy.digest.is_some());
}

#[test]
fn a_copy_equal_to_a_snapshot_gets_only_what_changed() {
    let n = Node::new();
    fs::create_dir_all(n.project()).unwrap();
    n.write("same.txt", "unchanged");
    n.write("old.txt", "removed there");
    n.write(".auth-secret", "this node's");
    n.parked();
    n.changed_elsewhere();
    let same = fs::metadata(n.project().join("same.txt")).unwrap();
    // restic 0.14 (no restore in place), as on the rig's nodeA: restic lists what changed.
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        *n.repo.fetched.borrow(),
        [(
            "there".to_string(),
            vec![n.project().join("f.txt"), n.project().join("new")]
        )]
    );
    assert!(
        n.repo.forks.borrow().is_empty(),
        "the copy was what it saved"
    );
    assert!(n.repo.in_place_calls.borrow().is_empty());
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.read("new/n.txt").as_deref(), Some("added"));
    assert_eq!(n.read("old.txt"), None);
    assert_eq!(n.read(".auth-secret").as_deref(), Some("this node's"));
    let after = fs::metadata(n.project().join("same.txt")).unwrap();
    assert_eq!(
        (after.ino(), after.mtime_nsec()),
        (same.ino(), same.mtime_nsec()),
        "an unchanged file is not rewritten"
    );
    assert!(
        matches!(&n.copy().relation, Relation::Equals(e) if e.snapshot.as_str() == "there"),
        "{:?}",
        n.copy()
    );
    assert!(n.runtime.active.borrow().contains("demo"));
}

#[test]
fn a_park_publishes_what_changed_since_the_restore_in_a_snapshot_of_its_own() {
    let n = Node::whole_parks();
    n.parked();
    n.changed_elsewhere();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    let restored: SnapshotId = n.equals().unwrap().into();
    n.write("f.txt", "edited after the restore");
    n.write("made.txt", "new here");
    fs::remove_file(n.project().join("new/n.txt")).unwrap();
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let parked = n.meta().last_snapshot.unwrap().id;
    let (r, published) = n.published();
    assert_eq!(
        published,
        Published {
            from: restored.clone(),
            to: parked.clone(),
            fetch: vec![n.project().join("f.txt"), n.project().join("made.txt")],
            remove: vec![n.project().join("new/n.txt")],
            dirs: Vec::new(),
        }
    );
    assert_eq!((&r.from, &r.to), (&restored, &parked));
    // It holds what changed and nothing more, and is no state of the box.
    let held = n
        .repo
        .tree(&r.snapshot)
        .join(n.project().strip_prefix("/").unwrap());
    let mut names: Vec<String> = fs::read_dir(&held)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["f.txt", "made.txt"]);
    assert_eq!(
        n.repo
            .file(&r.snapshot, &n.project().join("f.txt"))
            .as_deref(),
        Some("edited after the restore")
    );
    assert_eq!(
        n.repo.tags.borrow()[r.snapshot.as_str()],
        [changes_tag("demo"), format!("to:{parked}")]
    );
    assert!(!r.list.exists(), "the list is not left on the node");
    // Up and parked again unchanged: what leads to that snapshot still serves.
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    park::park(n.ctx(), &named("demo"), false).unwrap();
    assert_eq!(n.published().0, r);
    assert_eq!(n.repo.changes.borrow().len(), 1);
}

#[test]
fn with_restic_017_and_nothing_published_the_copy_is_restored_in_place_never_listed() {
    let n = Node::new();
    fs::create_dir_all(n.project()).unwrap();
    n.write("old.txt", "removed there");
    n.parked();
    n.changed_elsewhere();
    // What the parking node published is lost: restic's listing or its restore in place.
    n.ctx.store.put_delta("demo", None).unwrap();
    n.repo.in_place.set(true);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        n.repo.listings.get(),
        0,
        "restic was not asked what changed"
    );
    assert!(n.repo.fetched.borrow().is_empty());
    assert_eq!(n.repo.in_place_calls.borrow().len(), 1);
    assert!(
        n.repo.forks.borrow().is_empty(),
        "the copy was what it saved"
    );
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.read("old.txt"), None);
}

#[test]
fn modes_changed_elsewhere_come_with_a_delta_from_restic_diff() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let n = Node::new();
    fs::create_dir_all(n.project().join("keys")).unwrap();
    n.write("run.sh", "#!/bin/sh");
    n.write("same.txt", "unchanged");
    n.parked();
    // Elsewhere, only modes changed: restic diff (without --metadata) says nothing of them.
    let from = n.meta().last_snapshot.unwrap().id;
    let there = n.repo.tree("there");
    cp(&n.repo.tree(&from), &there);
    let project = there.join(n.project().strip_prefix("/").unwrap());
    let chmod = |p: &Path, mode| fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    chmod(&project.join("run.sh"), 0o755);
    chmod(&project.join("keys"), 0o2700);
    // The node's dir above the project, as the snapshot holds it: not the box's to set.
    let above = n.project().parent().unwrap().to_path_buf();
    let above_mode = fs::metadata(&above).unwrap().mode() & 0o7777;
    chmod(&there.join(above.strip_prefix("/").unwrap()), 0o777);
    n.point_at("there");
    // restic 0.14: restic lists what changed (0.17+ restores in place instead).
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        *n.repo.fetched.borrow(),
        [("there".to_string(), vec![n.project().join("run.sh")])]
    );
    assert!(n.repo.in_place_calls.borrow().is_empty(), "a delta");
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(
        (
            mode(&n.project().join("run.sh")),
            mode(&n.project().join("keys")),
            mode(&above)
        ),
        (0o755, 0o2700, above_mode)
    );
}

/// What `changed_elsewhere` changed, as the parking node would publish it from `from`.
fn published_change(n: &Node, from: SnapshotId) -> Published {
    Published {
        from,
        to: "there".into(),
        fetch: vec![n.project().join("f.txt"), n.project().join("new")],
        remove: vec![n.project().join("old.txt")],
        dirs: Vec::new(),
    }
}

/// A box parked here with `old.txt`, then changed elsewhere (restic diff failing); what the
/// parking node would publish for it.
fn parked_then_changed_elsewhere(n: &Node) -> Published {
    n.write_first("old.txt", "removed there");
    n.parked();
    let from = n.meta().last_snapshot.unwrap().id;
    n.changed_elsewhere();
    n.repo.diff_fails.set(true);
    published_change(n, from)
}

#[test]
fn more_changes_than_restic_diff_serves_come_from_their_snapshot_alone() {
    let n = Node::new();
    n.parked();
    let from = n.meta().last_snapshot.unwrap().id;
    let many = crate::plan::delta::MAX_CHANGES + 1;
    cp(&n.repo.tree(&from), &n.repo.tree("there"));
    let there = n
        .repo
        .tree("there")
        .join(n.project().strip_prefix("/").unwrap());
    for i in 0..many {
        fs::write(there.join(format!("f{i}.txt")), format!("change {i}")).unwrap();
    }
    n.point_at("there");
    n.repo.diff_fails.set(true);
    let r = n.publish(&Published {
        from,
        to: "there".into(),
        fetch: (0..many)
            .map(|i| n.project().join(format!("f{i}.txt")))
            .collect(),
        remove: Vec::new(),
        dirs: Vec::new(),
    });
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        *n.repo.restored.borrow(),
        [r.snapshot.to_string()],
        "only the changes"
    );
    assert!(n.repo.fetched.borrow().is_empty(), "no includes");
    assert!(
        n.repo.in_place_calls.borrow().is_empty(),
        "no restore in place"
    );
    assert_eq!(n.read("f0.txt").as_deref(), Some("change 0"));
    assert_eq!(
        n.read(&format!("f{}.txt", many - 1)),
        Some(format!("change {}", many - 1))
    );
    assert_eq!(n.equals().as_deref(), Some("there"));
}

#[test]
fn an_up_takes_what_the_parking_node_published_without_asking_restic() {
    let n = Node::new();
    let published = parked_then_changed_elsewhere(&n);
    let r = n.publish(&published);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(*n.repo.restored.borrow(), [r.snapshot.to_string()]);
    assert!(n.repo.fetched.borrow().is_empty());
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.read("new/n.txt").as_deref(), Some("added"));
    assert_eq!(n.read("old.txt"), None);
    assert!(
        !n.project().with_file_name(".demo.ag-box-restore").exists(),
        "no staging left"
    );
    // Published for another copy: not used (and restic diff failing, restored in full).
    n.write("f.txt", "mine");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    n.changed_elsewhere_as("there-again");
    let other = n.publish(&published);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert!(
        !n.repo
            .restored
            .borrow()
            .contains(&other.snapshot.to_string())
    );
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
}

#[test]
fn a_dirs_published_mode_and_owner_are_set_but_not_through_a_symlink() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let n = Node::new();
    fs::create_dir_all(n.project().join("keys")).unwrap();
    let mut published = parked_then_changed_elsewhere(&n);
    let me = fs::metadata(n.project()).unwrap();
    let keys = DirAttrs {
        path: n.project().join("keys"),
        mode: 0o2750,
        uid: me.uid(),
        gid: me.gid(),
    };
    published.dirs = vec![keys.clone()];
    n.publish(&published);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"), "the delta");
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&n.project().join("keys")), 0o2750);
    // The box put a symlink to a node dir where the dir was, and parked; the next delta names
    // the dir again. Its mode lands nowhere; the up falls back to restoring the snapshot whole.
    let victim = n.project().parent().unwrap().join("victim");
    fs::create_dir_all(&victim).unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o700)).unwrap();
    fs::remove_dir(n.project().join("keys")).unwrap();
    std::os::unix::fs::symlink(&victim, n.project().join("keys")).unwrap();
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let from = n.meta().last_snapshot.unwrap().id;
    n.changed_elsewhere_as("there-again");
    n.publish(&Published {
        to: "there-again".into(),
        dirs: vec![DirAttrs {
            mode: 0o777,
            ..keys
        }],
        ..published_change(&n, from)
    });
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(mode(&victim), 0o700);
    assert_eq!(n.read("new/n.txt").as_deref(), Some("added"));
}

#[test]
fn a_published_list_outside_the_box_or_behind_a_link_is_not_used() {
    let n = Node::new();
    let published = parked_then_changed_elsewhere(&n);
    // A list that removes a node file: its snapshot is staged, the list refused, and the
    // snapshot restored whole instead.
    let victim = n.project().parent().unwrap().join("victim.txt");
    fs::write(&victim, "the node's").unwrap();
    let outside = n.publish(&Published {
        remove: vec![victim.clone()],
        ..published.clone()
    });
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        *n.repo.restored.borrow(),
        [outside.snapshot.to_string(), "there".to_string()]
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "the node's");
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert!(!n.project().with_file_name(".demo.ag-box-restore").exists());
    // The list's place in the snapshot is a link to a forged list that removes the victim:
    // it is not followed.
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let from = n.meta().last_snapshot.unwrap().id;
    n.changed_elsewhere_as("there-again");
    let forged = n.project().parent().unwrap().join("forged.json");
    let forged_list = Published {
        to: "there-again".into(),
        remove: vec![n.project().join("f.txt")],
        ..published_change(&n, from.clone())
    };
    fs::write(&forged, serde_json::to_vec(&forged_list).unwrap()).unwrap();
    let linked = n.publish(&Published {
        to: "there-again".into(),
        ..published_change(&n, from)
    });
    let at = n
        .repo
        .tree(&linked.snapshot)
        .join(linked.list.strip_prefix("/").unwrap());
    fs::remove_file(&at).unwrap();
    std::os::unix::fs::symlink(&forged, &at).unwrap();
    n.repo.restored.borrow_mut().clear();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        *n.repo.restored.borrow(),
        [linked.snapshot.to_string(), "there-again".to_string()],
        "staged, refused, restored whole"
    );
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.equals().as_deref(), Some("there-again"));
}

#[test]
fn an_unchanged_box_is_not_saved_again_but_its_lease_is_renewed() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    // The first up handed the project to the box user: that is a change.
    n.take(false).unwrap();
    let backups = n.repo.next.get();
    let last = n.meta().last_snapshot.unwrap().id;
    let renewed = n.meta().lease.unwrap().renewed_at;
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let taken = n.take(false).unwrap();
    assert_eq!((taken.snapshot.id, n.repo.next.get()), (last, backups));
    assert_ne!(n.meta().lease.unwrap().renewed_at, renewed, "renewed");
    // A change is saved; saved once, it is not saved again.
    n.write("f.txt", "v2");
    let taken = n.take(false).unwrap();
    assert_eq!(n.repo.next.get(), backups + 1);
    n.take(false).unwrap();
    assert_eq!(n.repo.next.get(), backups + 1, "unchanged since it began");
    assert_eq!(n.meta().last_snapshot.unwrap().id, taken.snapshot.id);
}

#[test]
fn a_copy_as_its_last_running_snapshot_began_needs_no_fork() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "work");
    n.take(false).unwrap();
    // The node went down with the box; another took it and parked a newer state.
    n.runtime.active.borrow_mut().clear();
    n.changed_elsewhere();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert!(
        n.repo.forks.borrow().is_empty(),
        "the copy is in a snapshot"
    );
    assert_eq!(n.repo.fetched.borrow().len(), 1, "only what changed");
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
}

#[test]
fn the_first_snapshot_after_a_restore_judges_files_by_size_and_time() {
    let n = Node::new();
    n.parked();
    n.changed_elsewhere();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    // What makes restic judge files by size and time (`--ignore-inode`).
    let ignores_inodes = || {
        n.repo
            .last_backup
            .borrow()
            .as_ref()
            .is_some_and(|b| b.parent.is_some() && b.restored_from_parent)
    };
    n.write("f.txt", "work");
    n.take(false).unwrap();
    assert!(ignores_inodes(), "restored files all have new inodes");
    n.write("f.txt", "more work");
    n.take(false).unwrap();
    assert!(
        !ignores_inodes(),
        "its parent was taken of these very files"
    );
}

#[test]
fn a_delta_whose_fetch_fails_becomes_a_full_restore() {
    let n = Node::new();
    n.parked();
    n.changed_elsewhere();
    n.repo.fetch_fails.set(true);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.repo.fetched.borrow().len(), 1, "tried");
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.read("new/n.txt").as_deref(), Some("added"));
    assert_eq!(n.equals().as_deref(), Some("there"));
    assert!(
        !n.project().with_file_name(".demo.ag-box-restore").exists(),
        "no staging left"
    );
}

#[test]
fn a_cut_off_restore_in_place_is_finished_by_the_next_up_without_a_fork() {
    let n = Node::new();
    n.parked();
    n.write("gone-there.txt", "in no snapshot of the box's latest");
    let id = n.parked_elsewhere();
    n.repo.in_place.set(true);
    n.repo.diff_fails.set(true);
    n.repo.cut_in_place.set(true);
    let e = up::up_here(n.ctx(), &named("demo"), How::default()).unwrap_err();
    assert!(
        format!("{e:#}").contains("the next 'ag-box up demo' finishes it"),
        "{e:#}"
    );
    assert!(
        n.runtime.active.borrow().is_empty(),
        "never started half restored"
    );
    assert_eq!(n.meta().lease, None, "the lease went back");
    assert_eq!(
        n.copy().relation,
        Relation::Restoring {
            to: id.as_str().into()
        }
    );
    let forks = n.repo.forks.borrow().len();
    n.repo.cut_in_place.set(false);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.repo.forks.borrow().len(), forks, "nothing new to keep");
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.read("gone-there.txt"), None);
    assert!(matches!(n.copy().relation, Relation::Equals(_)));
    assert!(n.runtime.active.borrow().contains("demo"));
}

#[test]
fn a_tree_restic_cannot_restore_in_place_is_restored_whole_beside_the_copy() {
    let n = Node::new();
    n.parked();
    n.write("gone-there.txt", "in no snapshot of the box's latest");
    n.parked_elsewhere();
    n.repo.in_place.set(true);
    n.repo.diff_fails.set(true);
    n.repo.in_place_refused.set(true);
    let forks = n.repo.forks.borrow().len();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.read("gone-there.txt"), None);
    assert!(matches!(n.copy().relation, Relation::Equals(_)));
    assert_eq!(
        n.repo.forks.borrow().len(),
        forks + 1,
        "the copy kept first, once"
    );
    assert!(n.runtime.active.borrow().contains("demo"));
    assert!(
        !n.project().with_file_name(".demo.ag-box-restore").exists(),
        "no staging left"
    );
}

#[test]
fn without_restic_017_or_a_record_of_the_paths_the_restore_goes_through_staging() {
    let n = Node::new();
    n.parked();
    n.parked_elsewhere();
    update(n.store.as_ref(), "demo", |m| {
        let mut next = m.clone();
        if let Some(s) = next.last_snapshot.as_mut() {
            s.paths.clear();
        }
        Ok(Step::Write(next, ()))
    })
    .unwrap();
    n.repo.in_place.set(true);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert!(n.repo.in_place_calls.borrow().is_empty());
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
}

#[test]
fn park_takes_one_snapshot_unless_the_box_wrote_meanwhile() {
    let n = Node::whole_parks();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("g.txt", "new");
    let before = n.repo.next.get();
    park::park(n.ctx(), &named("demo"), false).unwrap();
    assert_eq!(n.repo.next.get(), before + 1, "one scan");
    let copy = n.copy().equal().cloned().unwrap();
    assert_eq!(Some(copy.snapshot), n.meta().last_snapshot.map(|s| s.id));
    assert!(copy.digest.is_some(), "the copy is known to equal it");

    let flushed = n.project().join("flushed.txt");
    *n.runtime.written_on_stop.borrow_mut() = Some(flushed.clone());
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    let before = n.repo.next.get();
    park::park(n.ctx(), &named("demo"), false).unwrap();
    assert_eq!(
        n.repo.next.get(),
        before + 1,
        "the running copy was saved already: one final snapshot after the stop"
    );
    let last = n.meta().last_snapshot.unwrap().id;
    assert_eq!(
        n.repo.file(&last, &flushed).as_deref(),
        Some("saved while stopping")
    );
}

#[test]
fn up_and_park_each_read_the_record_once_and_write_on_the_version_they_read() {
    let n = Node::whole_parks();
    n.parked();
    let up = |n: &Node| {
        n.store
            .reads_of(|| up::up_here(n.ctx(), &named("demo"), How::default()).unwrap())
            .1
    };
    let park = |n: &Node| {
        n.store
            .reads_of(|| park::park(n.ctx(), &named("demo"), false).unwrap())
            .1
    };
    // Every write lands on the version read (a conflict would read again).
    assert_eq!(up(&n), 1, "an up of a copy that is current");
    n.write("g.txt", "new");
    assert_eq!(park(&n), 1, "a park of a changed copy");
    n.parked_elsewhere();
    assert_eq!(up(&n), 1, "an up that restores");
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    *n.runtime.written_on_stop.borrow_mut() = Some(n.project().join("flushed.txt"));
    let before = n.repo.next.get();
    assert_eq!(
        park(&n),
        2,
        "a park that takes a final snapshot after the stop reads it again first (a lease taken meanwhile makes that one a fork)"
    );
    assert_eq!(
        n.repo.next.get(),
        before + 1,
        "unchanged since its restore, the running copy needed none; the final one was taken"
    );
    assert_eq!(n.meta().lease, None, "and the lease released");
    *n.runtime.written_on_stop.borrow_mut() = None;
    up(&n);
    assert_eq!(park(&n), 1, "a park of an unchanged copy");
}

#[test]
fn a_rollback_of_a_running_box_is_undone_by_rolling_back_to_the_snapshot_it_names() {
    let n = Node::new();
    n.parked();
    let first = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2 by the agent");
    let replaced = rollback::rollback(n.ctx(), &named("demo"), &first)
        .unwrap()
        .expect("the state replaced is a snapshot");
    assert_eq!(n.read("f.txt").as_deref(), Some("v1"));
    assert!(n.runtime.active.borrow().contains("demo"), "started again");
    assert_eq!(n.meta().last_snapshot.unwrap().id, first.id);
    assert_eq!(
        n.repo
            .file(&replaced, &n.project().join("f.txt"))
            .as_deref(),
        Some("v2 by the agent")
    );
    assert!(n.repo.forks.borrow().is_empty());
    let undo = SnapshotRef {
        id: replaced,
        ..first
    };
    rollback::rollback(n.ctx(), &named("demo"), &undo).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("v2 by the agent"));
    assert!(matches!(n.copy().relation, Relation::Equals(_)));
}

#[test]
fn a_rollback_of_a_parked_box_is_what_the_next_up_restores() {
    let n = Node::new();
    n.parked();
    let first = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    super::finish::finish(n.ctx(), &named("demo")).unwrap();
    let second = n.meta().last_snapshot.unwrap().id;
    let replaced = rollback::rollback(n.ctx(), &named("demo"), &first).unwrap();
    assert_eq!(replaced, Some(second));
    let meta = n.meta();
    assert_eq!(
        (meta.lease, meta.last_snapshot.map(|s| s.id)),
        (None, Some(first.id))
    );
    assert_eq!(
        n.read("f.txt").as_deref(),
        Some("v2"),
        "nothing changes until an up"
    );
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("v1"));
    assert!(n.repo.forks.borrow().is_empty());
}

#[test]
fn a_park_after_a_rollback_of_a_box_stopped_here_keeps_the_rollback() {
    let n = Node::new();
    n.parked();
    let first = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    // Stopped here (the lease stays), then rolled back: the copy is still v2.
    n.runtime.active.borrow_mut().clear();
    let replaced = rollback::rollback(n.ctx(), &named("demo"), &first)
        .unwrap()
        .expect("the state it replaced, snapshotted");
    assert_eq!(n.read("f.txt").as_deref(), Some("v2"));
    // The snapshot verb refuses the copy; park frees the node and keeps the rollback.
    let e = n.take(false).err().expect("the snapshot verb refused");
    assert!(format!("{e:#}").contains("was rolled back"), "{e:#}");
    assert_eq!(
        park::park(n.ctx(), &named("demo"), false).unwrap(),
        first.id
    );
    let meta = n.meta();
    assert_eq!(
        (meta.lease, meta.last_snapshot.map(|s| s.id)),
        (None, Some(first.id.clone()))
    );
    assert!(n.repo.forks.borrow().is_empty(), "v2 is in {replaced:?}");
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("v1"));
}

#[test]
fn a_rollback_cut_off_before_it_moved_the_record_leaves_the_copy_the_latest() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.runtime.active.borrow_mut().clear();
    // As a rollback cut off after its snapshot left it: the copy stale, the record unmoved.
    CopyState::journal(&n.ctx.config.state_dir, "demo")
        .unwrap()
        .record(CopyState::rolled_back)
        .unwrap();
    n.write("f.txt", "edited after");
    n.take(false).unwrap();
    n.latest_holds("f.txt", "edited after");
    assert!(n.repo.forks.borrow().is_empty());
}

#[test]
fn what_a_rolled_back_copy_gained_is_kept_as_a_fork_when_parked() {
    let n = Node::new();
    n.parked();
    let first = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    n.runtime.active.borrow_mut().clear();
    rollback::rollback(n.ctx(), &named("demo"), &first).unwrap();
    // Written after the rollback (by the operator, say): in no snapshot yet.
    n.write("f.txt", "after the rollback");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let forks = n.repo.forks.borrow().clone();
    assert_eq!(forks.len(), 1);
    assert_eq!(
        n.repo
            .file(&forks[0], &n.project().join("f.txt"))
            .as_deref(),
        Some("after the rollback")
    );
    assert_eq!(n.meta().last_snapshot.map(|s| s.id), Some(first.id));
}

#[test]
fn a_half_restored_copy_held_here_can_be_rolled_back() {
    let n = Node::new();
    n.parked();
    let first = n.meta().last_snapshot.unwrap();
    let other = SnapshotId::from(n.parked_elsewhere().as_str());
    n.cut_off_mid_restore(&other);
    let snapshots = n.repo.box_snapshots("demo").unwrap();
    let replaced = rollback::rollback(n.ctx(), &named("demo"), &first).unwrap();
    assert_eq!(replaced, Some(other), "the latest it replaced");
    assert_eq!(
        n.repo.box_snapshots("demo").unwrap().len(),
        snapshots.len() + 1,
        "the copy kept as a fork alone"
    );
    assert_eq!(n.repo.forks.borrow().len(), 1);
    assert_eq!(n.meta().last_snapshot.map(|s| s.id), Some(first.id));
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("v1"));
}

#[test]
fn a_snapshot_a_record_comes_to_name_after_the_prune_plan_is_not_forgotten() {
    let mut n = Node::whole_parks();
    n.ctx.config.retention = crate::plan::retention::Policy {
        last: 1,
        daily: 0,
        weekly: 0,
    };
    n.parked();
    let first = n.meta().last_snapshot.unwrap();
    for text in ["v2", "v3"] {
        up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
        n.write("f.txt", text);
        park::park(n.ctx(), &named("demo"), false).unwrap();
    }
    let later = || SystemTime::now() + std::time::Duration::from_hours(24);
    let ctx = n.ctx_at(later);
    let plan = prune::plan(&ctx).unwrap();
    let all = n.repo.box_snapshots("demo").unwrap();
    let doomed = plan
        .forget()
        .into_iter()
        .find(|id| {
            all.contains(id)
                && !n
                    .repo
                    .changes
                    .borrow()
                    .iter()
                    .any(|c| c.as_str() == id.as_str())
        })
        .expect("a state of the box the keys forget");
    // Between the plan and the forget, a rollback points the record at it.
    let to = SnapshotRef {
        id: doomed.clone(),
        ..first
    };
    rollback::rollback(n.ctx(), &named("demo"), &to).unwrap();
    prune::execute(&ctx, &plan).unwrap();
    assert!(n.repo.box_snapshots("demo").unwrap().contains(&doomed));
    assert!(!n.repo.box_snapshots("demo").unwrap().is_empty());
}

#[test]
fn a_first_snapshot_that_fails_tracks_nothing() {
    let n = Node::new();
    n.write_first("f.txt", "v1");
    n.repo
        .unreadable
        .borrow_mut()
        .push("open /f.txt: permission denied".into());
    let e = track::track(
        n.ctx(),
        &named("demo"),
        &n.project(),
        false,
        AgentChoice::FromSessions,
        || Ok(()),
    )
    .err()
    .unwrap();
    assert!(
        format!("{e:#}").starts_with("box 'demo': first snapshot failed, nothing was tracked"),
        "{e:#}"
    );
    assert!(n.store.get("demo").unwrap().is_none(), "the record stayed");
    assert!(
        !n.ctx.config.state_dir.join("local/demo.json").exists(),
        "this node's state of it stayed"
    );
    // Nothing is left in the way of tracking it again.
    track::track(
        n.ctx(),
        &named("demo"),
        &n.project(),
        false,
        AgentChoice::FromSessions,
        || Ok(()),
    )
    .unwrap();
    assert_eq!(n.meta().lease.map(|l| l.node).as_deref(), Some("here"));
    assert_eq!(n.copy().epoch, Some(1));
}

#[test]
fn track_refuses_a_second_box_of_a_name_or_a_path() {
    let n = Node::new();
    n.parked();
    let again = |name: &str| {
        track::track(
            n.ctx(),
            &named(name),
            &n.project(),
            false,
            AgentChoice::FromSessions,
            || Ok(()),
        )
        .err()
        .map(|e| (code(&e), format!("{e:#}")))
    };
    assert_eq!(
        again("demo"),
        Some((
            Some(Code::Usage),
            "box 'demo' is already tracked; hint: use 'ag-box up demo', or pick another name"
                .to_string()
        ))
    );
    assert_eq!(
        again("other").map(|(c, e)| (c, e.split(';').next().map(str::to_string))),
        Some((
            Some(Code::Usage),
            Some(format!(
                "path {} is already tracked as box 'demo'",
                n.project().display()
            ))
        ))
    );
    assert!(n.store.get("other").unwrap().is_none());
}

#[test]
fn a_drop_deletes_the_snapshots_and_the_record_and_sets_the_agent_home_aside() {
    let n = Node::new();
    n.parked();
    let snapshots = n.repo.box_snapshots("demo").unwrap();
    assert!(!snapshots.is_empty());
    let home = n.ctx().spec(&n.meta()).agent_home.root;
    assert!(home.is_dir());
    let at = || SystemTime::UNIX_EPOCH + std::time::Duration::from_hours(500_000);
    let ctx = n.ctx_at(at);
    let dropped = drop::drop_box(&ctx, &named("demo"), || Ok(())).unwrap();
    assert_eq!(dropped.snapshots, snapshots);
    assert_eq!(
        dropped.home_kept_at,
        Some(home.with_file_name(".demo.dropped-2027-01-15T080000Z"))
    );
    assert!(dropped.home_kept_at.unwrap().is_dir() && !home.exists());
    assert!(n.store.get("demo").unwrap().is_none());
    assert!(n.repo.box_snapshots("demo").unwrap().is_empty());
    assert_eq!(
        n.read("f.txt").as_deref(),
        Some("v1"),
        "the project's files stay"
    );
}

#[test]
fn a_drop_cut_off_leaves_the_box_marked_and_the_next_drop_finishes_it() {
    let n = Node::new();
    n.parked();
    n.repo.delete_fails.set(true);
    let e = drop::drop_box(n.ctx(), &named("demo"), || Ok(())).unwrap_err();
    assert!(
        format!("{e:#}").starts_with(
            "box 'demo': deleting its snapshots failed; run 'ag-box drop demo --yes' again"
        ),
        "{e:#}"
    );
    let marked = n.meta();
    assert!(marked.dropping && marked.lease.is_none(), "{marked:?}");
    // Nothing but drop acts on a box being dropped.
    let up = up::up_here(n.ctx(), &named("demo"), How::default()).unwrap_err();
    assert!(format!("{up:#}").contains("being dropped"), "{up:#}");
    drop::drop_box(n.ctx(), &named("demo"), || Ok(())).unwrap();
    assert!(n.store.get("demo").unwrap().is_none());
}

#[test]
fn a_drop_refused_or_not_confirmed_changes_nothing() {
    let n = Node::new();
    n.parked();
    let before = n.stored();
    let snapshots = n.repo.box_snapshots("demo").unwrap();
    let no = || Err(UserError::failed("confirmation did not match", "type the name").into());
    drop::drop_box(n.ctx(), &named("demo"), no).unwrap_err();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    let running = drop::drop_box(n.ctx(), &named("demo"), || Ok(())).unwrap_err();
    assert_eq!(
        format!("{running:#}"),
        "box 'demo' is running on this node; hint: run 'ag-box park demo' first"
    );
    park::park(n.ctx(), &named("demo"), false).unwrap();
    n.set_lease(Some(&lease_of("there", 9)));
    let elsewhere = drop::drop_box(n.ctx(), &named("demo"), || Ok(())).unwrap_err();
    assert_eq!(code(&elsewhere), Some(Code::LeaseHeld));
    let after = n.meta();
    assert!(!after.dropping);
    assert_eq!(n.repo.box_snapshots("demo").unwrap(), snapshots);
    assert_eq!(before.meta.path, after.path);
}

#[test]
fn prune_forgets_what_the_keys_do_not_keep_but_never_a_boxs_last_snapshot() {
    let mut n = Node::new();
    n.ctx.config.retention = crate::plan::retention::Policy {
        last: 1,
        daily: 0,
        weekly: 0,
    };
    n.parked();
    for text in ["v2", "v3"] {
        up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
        n.write("f.txt", text);
        park::park(n.ctx(), &named("demo"), false).unwrap();
    }
    let all: BTreeSet<String> = n
        .repo
        .box_snapshots("demo")
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(all.len() >= 3, "{all:?}");
    let last = n.meta().last_snapshot.unwrap().id.to_string();
    // Pruned a day later.
    let later = || SystemTime::now() + std::time::Duration::from_hours(24);
    let ctx = n.ctx_at(later);
    let plan = prune::plan(&ctx).unwrap();
    let group = plan.groups.iter().find(|g| g.label == "demo").unwrap();
    let kept: BTreeSet<String> = group.keep.iter().map(|(id, _)| id.to_string()).collect();
    assert!(kept.contains(&last), "{group:?}");
    // Of the changes each park saved, only the one that leads to the latest stays.
    let changes = n.repo.changes.borrow().clone();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        group.keep.contains(&(
            changes[1].as_str().into(),
            crate::plan::retention::Reason::LeadsToLatest
        )) && group.forget.contains(&changes[0].as_str().into()),
        "{group:?}"
    );
    assert!(kept.len() <= 3, "{group:?}");
    let forgotten: BTreeSet<String> = group.forget.iter().map(ToString::to_string).collect();
    assert_eq!(
        forgotten,
        all.difference(&kept).cloned().collect::<BTreeSet<_>>()
    );
    assert_eq!(plan.boxes, ["demo"]);
    prune::execute(&ctx, &plan).unwrap();
    assert_eq!(
        n.repo
            .box_snapshots("demo")
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect::<BTreeSet<_>>(),
        kept
    );
    assert_eq!(n.repo.prunes.get(), 1);
    // The kept last snapshot still brings the box up.
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("v3"));
}

#[test]
fn set_writes_checked_settings_and_refuses_what_the_next_up_could_not_use() {
    let n = Node::new();
    n.parked();
    let set = |a: &[&str]| {
        let a: Vec<String> = a.iter().map(ToString::to_string).collect();
        super::set::set(n.ctx(), &named("demo"), &a)
    };
    let meta = set(&["memory_max=2G", "nix=true"]).unwrap();
    assert_eq!((meta.memory_max.as_deref(), meta.nix), (Some("2G"), true));
    // As written (each write carries an op id of its own).
    let written = || Meta {
        op: None,
        ..n.meta()
    };
    let meta = Meta { op: None, ..meta };
    assert_eq!(written(), meta);
    let version = n.stored().version;
    let e = set(&["pin=nosuchnode"]).unwrap_err();
    assert_eq!(code(&e), Some(Code::Usage));
    assert!(
        format!("{e:#}").starts_with(
            "box 'demo': invalid setting 'pin=nosuchnode': no node 'nosuchnode' in the nodes file"
        ),
        "{e:#}"
    );
    // Another box's id would make the two one user.
    let other = Meta {
        path: n.ctx.config.home.join("other"),
        uid: Some(2_000_000_123),
        gid: Some(2_000_000_123),
        ..Meta::sample("other")
    };
    crate::store::create(n.store.as_ref(), other)
        .unwrap()
        .unwrap();
    let e = set(&["uid=2000000123"]).unwrap_err();
    assert!(
        format!("{e:#}").contains("box 'other' has that id"),
        "{e:#}"
    );
    assert_eq!(n.stored().version, version, "a refused set wrote nothing");
}

#[test]
fn track_stores_the_agent_named_or_the_one_whose_sessions_it_imports() {
    let n = Node::new();
    let home = n.ctx.config.home.clone();
    let claude_session = |project: &Path| {
        let dir = crate::plan::slices::claude_project_dir(&home, project);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("s1.jsonl"), "{}\n").unwrap();
    };
    let codex_session = |project: &Path| {
        let day = home.join(".codex/sessions/2026/11/29");
        fs::create_dir_all(&day).unwrap();
        let name = project.file_name().unwrap().to_string_lossy();
        fs::write(
            day.join(format!("rollout-{name}.jsonl")),
            format!(
                "{{\"type\":\"session_meta\",\"payload\":{{\"cwd\":\"{}\"}}}}\n",
                project.display()
            ),
        )
        .unwrap();
    };
    let gemini = crate::plan::agents::named("gemini");
    let cases: [(&str, &[&str], AgentChoice); 5] = [
        ("bare", &[], AgentChoice::FromSessions),
        ("solo", &["claude"], AgentChoice::FromSessions),
        ("pair", &["claude", "codex"], AgentChoice::FromSessions),
        ("told", &["claude"], AgentChoice::Named(gemini)),
        ("plain", &["claude"], AgentChoice::Named(None)),
    ];
    let mut stored = Vec::new();
    for (name, sessions, choice) in cases {
        let project = home.join(name);
        fs::create_dir_all(&project).unwrap();
        fs::write(project.join("f.txt"), name).unwrap();
        for agent in sessions {
            match *agent {
                "claude" => claude_session(&project),
                _ => codex_session(&project),
            }
        }
        let tracked =
            track::track(n.ctx(), &named(name), &project, false, choice, || Ok(())).unwrap();
        let record = n.store.get(name).unwrap().unwrap().meta;
        assert_eq!(record.agent, tracked.meta.agent, "{name}");
        stored.push((name, record.agent));
    }
    assert_eq!(
        stored,
        [
            ("bare", None),
            ("solo", Some("claude".to_string())),
            ("pair", None),
            ("told", Some("gemini".to_string())),
            ("plain", None),
        ]
    );
}

#[test]
fn set_changes_the_agent_and_refuses_an_unknown_one_without_touching_the_record() {
    let n = Node::new();
    n.parked();
    let set = |a: &str| super::set::set(n.ctx(), &named("demo"), &[a.to_string()]);
    assert_eq!(n.meta().agent, None);
    let meta = set("agent=codex").unwrap();
    assert_eq!(meta.agent.as_deref(), Some("codex"));
    assert_eq!(n.meta().agent.as_deref(), Some("codex"));
    let version = n.stored().version;
    let e = set("agent=bogus").unwrap_err();
    assert_eq!(
        (code(&e), format!("{e:#}")),
        (
            Some(Code::Usage),
            "box 'demo': invalid setting 'agent=bogus'; hint: agent takes claude, codex, gemini, \
             grok, opencode or none"
                .to_string()
        )
    );
    assert_eq!(n.stored().version, version, "a refused set wrote nothing");
    assert_eq!(n.meta().agent.as_deref(), Some("codex"));
    assert_eq!(set("agent=none").unwrap().agent, None);
    assert_eq!(n.meta().agent, None);
}

/// A quick park's record, as the park left it: its changes snapshot over `whole`.
/// Parked, brought up, f.txt changed to "v2" and parked quickly: the whole snapshot and the
/// changes over it.
fn quick_parked(n: &Node) -> (SnapshotRef, SnapshotRef) {
    n.parked();
    let whole = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let changes = changes_over(n, &whole);
    (whole, changes)
}

fn changes_over(n: &Node, whole: &SnapshotRef) -> SnapshotRef {
    let latest = n.meta().last_snapshot.expect("a latest");
    assert_eq!(
        latest.on.as_deref(),
        Some(whole),
        "changes over the whole one"
    );
    assert_eq!(latest.same_as, None);
    assert!(n.repo.changes.borrow().contains(&latest.id.to_string()));
    latest
}

/// Names in the tree snapshot `id` holds of the project.
fn names_in(n: &Node, id: &SnapshotId) -> Vec<String> {
    let held = n.repo.tree(id).join(n.project().strip_prefix("/").unwrap());
    let mut names: Vec<String> = fs::read_dir(&held)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_quick_park_saves_only_what_changed_and_the_whole_snapshot_then_takes_its_place() {
    let n = Node::new();
    n.write_first("old.txt", "to be removed");
    n.parked();
    let whole = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    n.write("g.txt", "new");
    fs::remove_file(n.project().join("old.txt")).unwrap();
    let backups = n.repo.next.get();
    park::park(n.ctx(), &named("demo"), false).unwrap();
    assert_eq!(n.repo.next.get(), backups, "no whole snapshot in the park");
    assert_eq!(n.meta().lease, None);
    let changes = changes_over(&n, &whole);
    assert_eq!(names_in(&n, &changes.id), ["f.txt", "g.txt"]);
    assert_eq!(n.meta().version, crate::store::meta::META_VERSION_CHANGES);
    assert_eq!(*n.runtime.finish_later.borrow(), ["demo"]);
    assert_eq!(n.equals(), Some(changes.id.to_string()));
    let (r, published) = n.published();
    assert_eq!(
        (r.from, r.to, r.snapshot),
        (whole.id.clone(), changes.id.clone(), changes.id.clone())
    );
    assert_eq!(
        published,
        Published {
            from: whole.id.clone(),
            to: crate::plan::delta::QUICK_TO.into(),
            fetch: vec![n.project().join("f.txt"), n.project().join("g.txt")],
            remove: vec![n.project().join("old.txt")],
            dirs: vec![],
        }
    );

    // The whole snapshot follows, and takes the changes' place.
    let finished = super::finish::finish(n.ctx(), &named("demo")).unwrap();
    let super::finish::Finished::Replaced(t) = finished else {
        panic!("{finished:?}");
    };
    let latest = n.meta().last_snapshot.unwrap();
    assert_eq!(
        latest,
        SnapshotRef {
            id: t.clone(),
            on: None,
            same_as: Some(changes.id.clone()),
            ..changes.clone()
        }
    );
    assert_eq!(n.meta().version, crate::store::meta::META_VERSION);
    assert_eq!(names_in(&n, &t), ["f.txt", "g.txt"]);
    let spec = n.repo.last_backup.borrow().clone().unwrap();
    assert_eq!(spec.parent, Some(whole.id.clone()));
    // This copy, and its manifest, are the whole snapshot's now.
    assert_eq!(n.equals(), Some(t.to_string()));
    let kept = crate::sys::copy_state::CopyManifest::load(&n.ctx.config.state_dir, "demo");
    assert_eq!(kept.map(|k| k.snapshot), Some(t.clone()));
    // Done once: a second run finds nothing to do.
    assert_eq!(
        super::finish::finish(n.ctx(), &named("demo")).unwrap(),
        super::finish::Finished::Moot("its latest is a whole snapshot")
    );
    // The copy equal to the changes is the latest: it starts as it is.
    let restores = n.repo.restored.borrow().len();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.repo.restored.borrow().len(), restores);
    assert!(n.repo.forks.borrow().is_empty());
    // Its next quick park lies on the whole snapshot.
    n.write("f.txt", "v3");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let next = n.meta().last_snapshot.unwrap();
    assert_eq!(next.on.as_deref().map(|w| &w.id), Some(&t));
    assert_eq!(names_in(&n, &next.id), ["f.txt"]);
}

#[test]
fn a_copy_equal_to_the_whole_snapshot_gets_the_changes_and_a_copy_without_it_gets_both() {
    let n = Node::new();
    // A file no change touches: only a walk over the right manifest names it.
    n.write_first("same.txt", "as it was");
    n.parked();
    let whole = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    n.write("g.txt", "new");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let changes = changes_over(&n, &whole);
    // As a node whose copy is the whole snapshot sees it (its copy, its own state).
    let as_whole = || {
        let project = n.project();
        fs::remove_dir_all(&project).unwrap();
        cp(
            &n.repo
                .tree(&whole.id)
                .join(project.strip_prefix("/").unwrap()),
            &project,
        );
        let (digest, manifest) =
            crate::sys::digest::walk(&n.ctx().spec(&n.meta()).local_copy()).unwrap();
        crate::sys::copy_state::CopyManifest {
            snapshot: whole.id.clone(),
            entries: manifest.unwrap(),
        }
        .save(&n.ctx.config.state_dir, "demo")
        .unwrap();
        CopyState::journal(&n.ctx.config.state_dir, "demo")
            .unwrap()
            .record(|c| {
                *c = CopyState::default();
                c.restored(&whole.id, vec![project.clone()], Some(true));
                c.walked(digest);
            })
            .unwrap();
    };
    as_whole();
    assert_eq!(n.read("g.txt"), None);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        (n.read("f.txt").as_deref(), n.read("g.txt").as_deref()),
        (Some("v2"), Some("new"))
    );
    assert_eq!(*n.repo.restored.borrow(), [changes.id.to_string()]);
    assert_eq!(n.equals(), Some(changes.id.to_string()));
    assert!(n.repo.forks.borrow().is_empty());
    // What was walked of it (only what changed, over the manifest it had) is what a walk of
    // all of it finds.
    let walked_as_a_whole = || {
        let (digest, manifest) =
            crate::sys::digest::walk(&n.ctx().spec(&n.meta()).local_copy()).unwrap();
        assert_eq!(n.copy().equal().unwrap().digest, Some(digest));
        let kept =
            crate::sys::copy_state::CopyManifest::load(&n.ctx.config.state_dir, "demo").unwrap();
        assert_eq!(kept.snapshot, changes.id);
        assert_eq!(Some(kept.entries), manifest);
    };
    walked_as_a_whole();

    // A node without a copy: the whole snapshot, then the changes over it.
    n.runtime.active.borrow_mut().clear();
    n.set_lease(None);
    n.without_a_copy();
    n.repo.restored.borrow_mut().clear();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(
        (n.read("f.txt").as_deref(), n.read("g.txt").as_deref()),
        (Some("v2"), Some("new"))
    );
    assert_eq!(
        *n.repo.restored.borrow(),
        [whole.id.to_string(), changes.id.to_string()]
    );
    assert_eq!(n.equals(), Some(changes.id.to_string()));
    // Walked whole once, then what the changes wrote over that walk's manifest.
    walked_as_a_whole();
    // Parked unchanged, it is saved whole: changes are never kept as a latest but by a park.
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let latest = n.meta().last_snapshot.unwrap();
    assert_eq!((latest.on, latest.same_as), (None, None));
    n.latest_holds("g.txt", "new");
    n.latest_holds("f.txt", "v2");
}

#[test]
fn a_copy_equal_to_a_quick_parks_changes_is_not_diffed_from_them() {
    let n = Node::new();
    let (whole, changes) = quick_parked(&n);
    assert_eq!(n.equals(), Some(changes.id.to_string()));
    // Elsewhere the box moved on to a whole snapshot, publishing nothing for this copy.
    let there = n.repo.tree("there");
    cp(&n.repo.tree(&whole.id), &there);
    fs::write(
        there
            .join(n.project().strip_prefix("/").unwrap())
            .join("f.txt"),
        "elsewhere",
    )
    .unwrap();
    n.point_at("there");
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    // restic's diff from changes would list the rest of the box as removed.
    assert_eq!(n.repo.listings.get(), 0);
    assert_eq!(n.read("f.txt").as_deref(), Some("elsewhere"));
    assert_eq!(n.equals().as_deref(), Some("there"));
}

#[test]
fn a_box_whose_changes_cannot_be_written_stays_stopped_and_says_where_its_latest_is() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    n.without_a_copy();
    // What the park published is gone from the bucket.
    n.store.put_delta("demo", None).unwrap();
    let e = up::up_here(n.ctx(), &named("demo"), How::default()).unwrap_err();
    let shown = format!("{e:#}");
    assert!(
        shown.contains("its latest is what a quick park on here saved over snapshot")
            && shown.contains("run 'ag-box up demo' on here"),
        "{shown}"
    );
    assert!(!n.runtime.active.borrow().contains("demo"));
    assert_eq!(n.meta().lease, None, "the lease was handed back");
}

#[test]
fn a_whole_snapshot_is_not_put_in_place_of_changes_the_record_no_longer_names() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    // The copy here changed by hand since the park: it is not the changes any more.
    n.write("f.txt", "edited on the node");
    let backups = n.repo.next.get();
    assert_eq!(
        super::finish::finish(n.ctx(), &named("demo")).unwrap(),
        super::finish::Finished::Moot("the copy here changed since the park")
    );
    n.write("f.txt", "v2");
    // Another node ran the box and parked it whole meanwhile.
    n.parked_elsewhere();
    assert_eq!(
        super::finish::finish(n.ctx(), &named("demo")).unwrap(),
        super::finish::Finished::Moot("its latest is a whole snapshot")
    );
    assert_eq!(n.repo.next.get(), backups, "no snapshot taken");
    assert_eq!(n.meta().last_snapshot.unwrap().id.as_str(), "other");
}

#[test]
fn a_box_parked_again_before_its_whole_snapshot_is_saved_whole_on_the_one_under_its_changes() {
    let n = Node::new();
    n.parked();
    let whole = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    changes_over(&n, &whole);
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v3");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let latest = n.meta().last_snapshot.unwrap();
    assert_eq!(
        (latest.on, latest.same_as),
        (None, None),
        "changes never lie on changes"
    );
    assert_eq!(
        n.repo.last_backup.borrow().as_ref().unwrap().parent,
        Some(whole.id)
    );
    n.latest_holds("f.txt", "v3");
}

#[test]
fn prune_keeps_a_quick_parks_changes_and_the_snapshot_under_them() {
    let mut n = Node::new();
    n.ctx.config.retention = crate::plan::retention::Policy {
        last: 1,
        daily: 0,
        weekly: 0,
    };
    n.parked();
    for text in ["v2", "v3"] {
        up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
        n.write("f.txt", text);
        park::park(n.ctx(), &named("demo"), false).unwrap();
        super::finish::finish(n.ctx(), &named("demo")).unwrap();
    }
    let whole = n.meta().last_snapshot.unwrap();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v4");
    park::park(n.ctx(), &named("demo"), false).unwrap();
    let changes = changes_over(&n, &whole);
    let later = || SystemTime::now() + std::time::Duration::from_hours(24);
    let ctx = n.ctx_at(later);
    let plan = prune::plan(&ctx).unwrap();
    let forget = plan.forget();
    assert!(!forget.is_empty(), "the older states go");
    assert!(!forget.contains(&changes.id), "{forget:?}");
    assert!(!forget.contains(&whole.id), "{forget:?}");
    prune::execute(&ctx, &plan).unwrap();
    n.without_a_copy();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    assert_eq!(n.read("f.txt").as_deref(), Some("v4"));
}

#[test]
fn a_parked_box_is_rolled_back_only_once_its_changes_are_saved_whole() {
    let n = Node::new();
    let (first, changes) = quick_parked(&n);
    let e = rollback::rollback(n.ctx(), &named("demo"), &first).unwrap_err();
    assert!(
        format!("{e:#}").contains("its whole snapshot is not taken yet; it is not rolled back"),
        "{e:#}"
    );
    assert_eq!(n.meta().last_snapshot, Some(changes.clone()));
    // Up here, it is saved whole first, and that is what the rollback replaced.
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    let replaced = rollback::rollback(n.ctx(), &named("demo"), &first)
        .unwrap()
        .expect("the state replaced is a snapshot");
    assert!(!n.repo.changes.borrow().contains(&replaced.to_string()));
    assert_eq!(
        n.repo
            .file(&replaced, &n.project().join("f.txt"))
            .as_deref(),
        Some("v2")
    );
    assert_eq!(n.read("f.txt").as_deref(), Some("v1"));
}

#[test]
fn a_quick_park_whose_lease_is_taken_meanwhile_keeps_the_copy_whole_as_a_fork() {
    let n = Node::new();
    n.parked();
    up::up_here(n.ctx(), &named("demo"), How::default()).unwrap();
    n.write("f.txt", "v2");
    let store = n.store.clone();
    *n.runtime.meanwhile_on_stop.borrow_mut() = Some(Box::new(move || {
        update(store.as_ref(), "demo", |m| {
            Ok(Step::Write(
                Meta {
                    lease: Some(lease_of("there", 9)),
                    ..m.clone()
                },
                (),
            ))
        })
        .unwrap();
    }));
    let e = park::park(n.ctx(), &named("demo"), false).unwrap_err();
    assert_eq!(code(&e), Some(Code::LeaseHeld), "{e:#}");
    let fork = n
        .repo
        .forks
        .borrow()
        .last()
        .cloned()
        .expect("a fork snapshot");
    assert_eq!(
        n.repo.file(&fork, &n.project().join("f.txt")).as_deref(),
        Some("v2")
    );
    assert!(
        format!("{e:#}").contains(&format!("kept this node's files as snapshot {fork}")),
        "{e:#}"
    );
    assert_eq!(
        n.meta().lease.map(|l| (l.node, l.epoch)),
        Some(("there".to_string(), 9))
    );
}
