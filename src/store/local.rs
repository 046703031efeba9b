//! Embedded single-node store: `meta/<name>.json` files with a revision number,
//! written under an exclusive `flock` so concurrent ag-box processes cannot interleave.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::events::Event;
use super::meta::{self, BadRecord, Meta};
use super::{Cas, DeltaStore, EventLog, Records, RepositoryKeys, SealedObject, Stored, Version};
use crate::atomic;
use crate::plan::delta::PublishedRef;

pub(crate) struct LocalStore {
    dir: PathBuf,
    /// `<name>/<key>.json` per event.
    events: PathBuf,
    /// `<name>.json`: the published delta of each box.
    deltas: PathBuf,
    /// `<name>/<file>`: sealed changes objects (`plan::sealed`).
    sealed: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct Record {
    rev: u64,
    #[serde(flatten)]
    meta: Meta,
}

impl LocalStore {
    pub(crate) fn new(state_dir: &Path) -> Self {
        LocalStore {
            dir: state_dir.join("meta"),
            events: state_dir.join("events"),
            deltas: state_dir.join("deltas"),
            sealed: state_dir.join(super::SEALED_DIR),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    fn lock(&self) -> Result<Flock<File>> {
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let lock_path = self.dir.join(".lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening {}", lock_path.display()))?;
        Flock::lock(f, FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .with_context(|| format!("locking {}", lock_path.display()))
    }

    fn read(&self, name: &str) -> Result<Option<Record>> {
        let path = self.path(name);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(meta::parse(name, &bytes, |r: &Record| &r.meta)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn write(&self, record: &Record) -> Result<()> {
        let mut bytes = serde_json::to_vec_pretty(record)?;
        bytes.push(b'\n');
        atomic::write(&self.path(&record.meta.name), &bytes, 0o644)
    }
}

impl Records for LocalStore {
    fn describe(&self) -> String {
        format!("local {}", self.dir.display())
    }

    fn get(&self, name: &str) -> Result<Option<Stored>> {
        Ok(self.read(name)?.map(|r| Stored {
            meta: r.meta,
            version: Version(r.rev.to_string()),
        }))
    }

    fn put(&self, meta: &Meta, expected: Option<&Version>) -> Result<Cas> {
        let _lock = self.lock()?;
        let current = self.read(&meta.name)?;
        let rev = match (current, expected) {
            (None, None) => 1,
            (Some(r), Some(v)) if r.rev.to_string() == v.0 => r.rev + 1,
            _ => return Ok(Cas::Conflict),
        };
        self.write(&Record {
            rev,
            meta: meta.clone(),
        })?;
        Ok(Cas::Written(Some(Version(rev.to_string()))))
    }

    fn delete(&self, name: &str, expected: &Version) -> Result<Cas> {
        let _lock = self.lock()?;
        match self.read(name)? {
            Some(r) if r.rev.to_string() == expected.0 => {
                atomic::remove(&self.path(name))?;
                Ok(Cas::Written(None))
            }
            _ => Ok(Cas::Conflict),
        }
    }

    fn list(&self) -> Result<Vec<Meta>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e).with_context(|| format!("listing {}", self.dir.display())),
        };
        let mut out = Vec::new();
        for entry in entries {
            let file_name = entry?.file_name();
            let Some(name) = file_name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            match self.read(name) {
                Ok(Some(r)) => out.push(r.meta),
                Ok(None) => {}
                Err(e) if e.is::<BadRecord>() => tracing::warn!("skipping {e}"),
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

impl EventLog for LocalStore {
    fn put_event(&self, name: &str, event: &Event) -> Result<()> {
        let path = self.events.join(name).join(format!("{}.json", event.key()));
        atomic::write(&path, &serde_json::to_vec(event)?, 0o644)
    }

    fn events(&self, name: &str) -> Result<Vec<(String, Event)>> {
        let dir = self.events.join(name);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let Some(key) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            if let Ok(Ok(event)) = fs::read(&path).map(|b| serde_json::from_slice::<Event>(&b)) {
                out.push((key, event));
            } else {
                tracing::warn!("skipping the unreadable event {}", path.display());
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn delete_events(&self, name: &str, keys: &[String]) -> Result<()> {
        for key in keys {
            atomic::remove(&self.events.join(name).join(format!("{key}.json")))?;
        }
        Ok(())
    }
}

impl LocalStore {
    fn sealed_path(&self, name: &str, file: &str) -> PathBuf {
        self.sealed.join(name).join(file)
    }
}

impl DeltaStore for LocalStore {
    fn put_delta(&self, name: &str, published: Option<&PublishedRef>) -> Result<()> {
        let (current, earlier) = super::delta_names(name);
        let path = self.deltas.join(current);
        match published {
            Some(p) => atomic::write(&path, &serde_json::to_vec(p)?, 0o644)?,
            None => atomic::remove(&path)?,
        }
        earlier
            .iter()
            .try_for_each(|e| atomic::remove(&self.deltas.join(e)))
    }

    fn delta(&self, name: &str) -> Result<Option<PublishedRef>> {
        let path = self.deltas.join(super::delta_names(name).0);
        match fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .with_context(|| format!("parsing {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn put_sealed(&self, name: &str, file: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.sealed_path(name, file);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        atomic::write(&path, &bytes, 0o600)
    }

    fn sealed(&self, name: &str, file: &str, max: u64) -> Result<Option<Vec<u8>>> {
        use std::io::Read;
        let path = self.sealed_path(name, file);
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let mut bytes = Vec::new();
        f.take(max + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", path.display()))?;
        anyhow::ensure!(
            bytes.len() as u64 <= max,
            "{} is more than the {max} bytes it may be",
            path.display()
        );
        Ok(Some(bytes))
    }

    fn sealed_listing(&self) -> Result<Vec<SealedObject>> {
        let entries = |dir: &Path| -> Result<Vec<fs::DirEntry>> {
            match fs::read_dir(dir) {
                Ok(d) => d
                    .collect::<std::io::Result<_>>()
                    .with_context(|| format!("listing {}", dir.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(e) => Err(e).with_context(|| format!("listing {}", dir.display())),
            }
        };
        let mut out = Vec::new();
        for b in entries(&self.sealed)? {
            if !b.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = b.file_name().to_string_lossy().into_owned();
            for f in entries(&b.path())? {
                let written = f
                    .metadata()
                    .and_then(|m| m.modified())
                    .with_context(|| format!("reading {}", f.path().display()))?;
                out.push(SealedObject {
                    name: name.clone(),
                    file: f.file_name().to_string_lossy().into_owned(),
                    written: humantime::format_rfc3339_nanos(written).to_string(),
                });
            }
        }
        Ok(out)
    }

    fn delete_sealed(&self, name: &str, file: &str) -> Result<()> {
        atomic::remove(&self.sealed_path(name, file))
    }
}

impl RepositoryKeys for LocalStore {}

// One node: no other refresher, no accounts.
impl super::Accounts for LocalStore {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::restic::Repository;
    use crate::store::{Step, update};

    fn meta(name: &str) -> Meta {
        Meta::sample(name)
    }

    #[test]
    fn published_changes_replace_what_older_versions_published() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        let legacy = [store.deltas.join("b.bundle"), store.deltas.join("b.json")];
        let plant = || {
            for l in &legacy {
                fs::write(l, "sealed").unwrap();
            }
        };
        let published = PublishedRef {
            from: "a".into(),
            to: "b".into(),
            snapshot: "c".into(),
            list: "/var/lib/ag-box/published/b.json".into(),
            repository: Repository::Changes,
            archive: Some("/changes.tar".into()),
        };
        fs::create_dir_all(&store.deltas).unwrap();
        plant();
        store.put_delta("b", Some(&published)).unwrap();
        assert_eq!(store.delta("b").unwrap(), Some(published));
        assert!(legacy.iter().all(|l| !l.exists()));
        plant();
        store.put_delta("b", None).unwrap();
        assert_eq!(store.delta("b").unwrap(), None);
        assert!(legacy.iter().all(|l| !l.exists()));
        store.put_delta("b", None).unwrap();
    }

    #[test]
    fn compare_and_swap() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        let written = store.put(&meta("a"), None).unwrap();
        let v1 = store.get("a").unwrap().unwrap().version;
        assert_eq!(written, Cas::Written(Some(v1.clone())));
        assert_eq!(store.put(&meta("a"), None).unwrap(), Cas::Conflict);
        let changed = Meta {
            nix: true,
            ..meta("a")
        };
        let written = store.put(&changed, Some(&v1)).unwrap();
        assert_eq!(store.put(&meta("a"), Some(&v1)).unwrap(), Cas::Conflict);
        let now = store.get("a").unwrap().unwrap();
        assert_eq!(now.meta, changed);
        assert_eq!(written, Cas::Written(Some(now.version.clone())));
        assert_eq!(store.delete("a", &v1).unwrap(), Cas::Conflict);
        assert_eq!(store.delete("a", &now.version).unwrap(), Cas::Written(None));
        assert!(store.get("a").unwrap().is_none());
    }

    #[test]
    fn concurrent_updates_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        store.put(&meta("c"), None).unwrap();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let store = LocalStore::new(dir.path());
                    for _ in 0..10 {
                        update(&store, "c", |m| {
                            let n: u64 = m.created_at.parse().unwrap_or(0);
                            let next = Meta {
                                created_at: (n + 1).to_string(),
                                ..m.clone()
                            };
                            Ok(Step::Write(next, ()))
                        })
                        .unwrap();
                    }
                });
            }
        });
        assert_eq!(store.get("c").unwrap().unwrap().meta.created_at, "80");
    }

    #[test]
    fn list_is_sorted_and_skips_other_files_and_bad_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        store.put(&meta("b"), None).unwrap();
        store.put(&meta("a"), None).unwrap();
        fs::write(
            dir.path().join("meta/evil.json"),
            br#"{"rev":1,"path":"/etc"}"#,
        )
        .unwrap();
        fs::write(dir.path().join("meta/notes.txt"), b"x").unwrap();
        let e = store.get("evil").unwrap_err();
        assert!(e.is::<BadRecord>(), "{e}");
        let names: Vec<String> = store.list().unwrap().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["a", "b"]);
    }
}
