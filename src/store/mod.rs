//! Box records: the `MetaStore` trait, its backends, and the compare-and-swap loop.

pub(crate) mod events;
pub(crate) mod lease;
pub(crate) mod local;
pub(crate) mod meta;
pub(crate) mod s3;

use anyhow::{Result, bail};

use crate::error::UserError;
use crate::plan::delta::PublishedRef;
use crate::plan::restic::Repository;
use events::Event;
use meta::Meta;

/// Opaque token of one stored version (an `ETag` on S3, a revision number locally).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version(pub String);

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stored {
    pub meta: Meta,
    pub version: Version,
}

/// Outcome of a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cas {
    /// Done; a put says the version it made when the backend told it (a delete never does).
    Written(Option<Version>),
    /// Someone else wrote first: re-read and decide again.
    Conflict,
}

/// Box records, written by compare-and-swap (`update`): the leases live in them.
pub(crate) trait Records {
    /// Where records live, for `status`.
    fn describe(&self) -> String;
    fn get(&self, name: &str) -> Result<Option<Stored>>;
    /// Write `meta`; `expected` None means "create only if absent".
    fn put(&self, meta: &Meta, expected: Option<&Version>) -> Result<Cas>;
    fn delete(&self, name: &str, expected: &Version) -> Result<Cas>;
    fn list(&self) -> Result<Vec<Meta>>;
    /// Does the backend refuse a second create of `probe_key`? (Leases depend on it.)
    fn conditional_writes(&self, probe_key: &str) -> Result<bool> {
        let _ = probe_key;
        Ok(true)
    }
    /// The store's clock, as it stamps a write of `probe_key` (None: the store is this node).
    fn server_time(&self, probe_key: &str) -> Result<Option<std::time::SystemTime>> {
        let _ = probe_key;
        Ok(None)
    }
    /// The backend is there and our credentials work.
    fn check_reachable(&self) -> Result<()> {
        Ok(())
    }
}

/// Each box's history: events added, never rewritten (so they never conflict).
pub(crate) trait EventLog {
    /// Add a lifecycle event of box `name`.
    fn put_event(&self, name: &str, event: &Event) -> Result<()>;
    /// Box `name`'s events with their keys, oldest first.
    fn events(&self, name: &str) -> Result<Vec<(String, Event)>>;
    fn delete_events(&self, name: &str, keys: &[String]) -> Result<()>;
}

/// Where the last park of each box published what changed (`plan::delta::PublishedRef`).
pub(crate) trait DeltaStore {
    /// Point at what changed in box `name`'s copy up to its latest snapshot, or withdraw it
    /// (None). Either way, what earlier versions published in its place (`<name>.bundle`,
    /// `<name>.json`) goes.
    fn put_delta(&self, name: &str, published: Option<&PublishedRef>) -> Result<()> {
        let _ = (name, published);
        Ok(())
    }
    /// What box `name`'s last parking node published.
    fn delta(&self, name: &str) -> Result<Option<PublishedRef>> {
        let _ = name;
        Ok(None)
    }
    /// Keep box `name`'s sealed changes object `file` (`plan::sealed`).
    fn put_sealed(&self, name: &str, file: &str, bytes: Vec<u8>) -> Result<()> {
        let _ = (name, file, bytes);
        anyhow::bail!("this store keeps no sealed changes")
    }
    /// Box `name`'s sealed changes object `file` (None: there is none), refused unread when it
    /// is larger than `max` bytes.
    fn sealed(&self, name: &str, file: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let _ = (name, file, max);
        Ok(None)
    }
    /// Every box's sealed changes objects.
    fn sealed_listing(&self) -> Result<Vec<SealedObject>> {
        Ok(Vec::new())
    }
    fn delete_sealed(&self, name: &str, file: &str) -> Result<()> {
        let _ = (name, file);
        Ok(())
    }
}

/// restic's key files are a few hundred bytes: one read is never larger than this.
pub(crate) const KEY_FILE_MAX: u64 = 64 << 10;

/// Where sealed changes objects are, in the bucket (`changes/<box>/<file>`) and in
/// `$BOX_STATE_DIR` with the local store.
pub(crate) const SEALED_DIR: &str = "changes";

/// A sealed changes object as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SealedObject {
    pub name: String,
    pub file: String,
    /// When it was written, RFC 3339.
    pub written: String,
}

/// The names under `deltas/` of box `name`'s published changes, and of what earlier versions
/// published in their place.
fn delta_names(name: &str) -> (String, [String; 2]) {
    (
        format!("{name}.changes.json"),
        [format!("{name}.bundle"), format!("{name}.json")],
    )
}

/// The key files of the restic repositories that live beside the records (`restic/keys/`,
/// `restic-changes/keys/`).
pub(crate) trait RepositoryKeys: Records {
    fn put_repository_key(&self, repository: Repository, id: &str, bytes: &[u8]) -> Result<()> {
        let _ = (repository, id, bytes);
        anyhow::bail!("{} holds no restic repository", self.describe())
    }
    /// The key file `id` (None: there is none; one over [`KEY_FILE_MAX`] bytes is refused).
    fn repository_key(&self, repository: Repository, id: &str) -> Result<Option<Vec<u8>>> {
        let _ = (repository, id);
        anyhow::bail!("{} holds no restic repository", self.describe())
    }
    /// The key files, with their names and JSON (the metadata in them is plain text).
    fn repository_keys(&self, repository: Repository) -> Result<Vec<(String, Vec<u8>)>> {
        let _ = repository;
        anyhow::bail!("{} holds no restic repository", self.describe())
    }
    fn delete_repository_key(&self, repository: Repository, id: &str) -> Result<()> {
        let _ = (repository, id);
        anyhow::bail!("{} holds no restic repository", self.describe())
    }
}

/// The credential broker's OAuth logins, one object per login (`accounts/<row>.json`, a
/// `plan::oauth::StoredLogin`), written by compare-and-swap: the lease of the node redeeming
/// a refresh token lives in it. A local store serves one node, which has no other refresher:
/// it keeps none.
pub(crate) trait Accounts {
    /// Whether the store keeps accounts (it is shared by nodes).
    fn keeps_accounts(&self) -> bool {
        false
    }
    /// The object of the broker's row `row`, and its version.
    fn account(&self, row: &str) -> Result<Option<(Vec<u8>, Version)>> {
        let _ = row;
        Ok(None)
    }
    /// Write it only if it is still at `expected` (None: only if there is none).
    fn put_account(&self, row: &str, bytes: &[u8], expected: Option<&Version>) -> Result<Cas> {
        let _ = (row, bytes, expected);
        anyhow::bail!("{row}: this store keeps no accounts")
    }
}

/// All a node keeps in the store. Each use takes the narrowest part it needs.
pub(crate) trait MetaStore:
    Records + EventLog + DeltaStore + RepositoryKeys + Accounts
{
}

impl<T: Records + EventLog + DeltaStore + RepositoryKeys + Accounts> MetaStore for T {}

/// What a decision function wants done with the record it was shown.
#[allow(clippy::large_enum_variant)] // short-lived, one per CAS attempt
pub(crate) enum Step<T> {
    Write(Meta, T),
    Keep(T),
}

const MAX_ATTEMPTS: usize = 50;

pub(crate) fn unknown_box(name: &str) -> UserError {
    UserError::failed(
        format!("box '{name}' is not tracked"),
        format!("run 'ag-box track {name} [path]' first, or 'ag-box ls' to see the boxes"),
    )
}

/// A fresh operation id for one record write.
fn op_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    // Unique, not secret: std's hasher keys come from the OS's entropy, fresh per thread; this
    // process and instant are hashed in.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let high = hasher.finish();
    hasher.write_u8(1);
    let low = hasher.finish();
    let mut bytes = [0u8; 12];
    bytes[..8].copy_from_slice(&high.to_le_bytes());
    bytes[8..].copy_from_slice(&low.to_le_bytes()[..4]);
    crate::plan::text::hex(&bytes)
}

/// The record the write carrying `op` made, if it landed after all (its answer may have been
/// lost, and a retry then refused because the record had changed: by that very write).
fn landed(store: &dyn Records, name: &str, op: &str) -> Option<Stored> {
    store
        .get(name)
        .ok()
        .flatten()
        .filter(|s| s.meta.op.as_deref() == Some(op))
}

/// Create a record; None when one of that name exists (and is not this very write).
pub(crate) fn create(store: &dyn Records, mut meta: Meta) -> Result<Option<Meta>> {
    let op = op_id();
    meta.op = Some(op.clone());
    meta.version = meta.wire_version();
    match store.put(&meta, None) {
        Ok(Cas::Written(_)) => Ok(Some(meta)),
        Ok(Cas::Conflict) | Err(_) if landed(store, &meta.name, &op).is_some() => Ok(Some(meta)),
        Ok(Cas::Conflict) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Delete a record at `version`; false when it changed meanwhile. A record already gone counts
/// as deleted (a delete whose answer was lost, retried).
pub(crate) fn delete(store: &dyn Records, name: &str, version: &Version) -> Result<bool> {
    match store.delete(name, version) {
        Ok(Cas::Written(_)) => Ok(true),
        Ok(Cas::Conflict) => Ok(store.get(name)?.is_none()),
        Err(e) => match store.get(name) {
            Ok(None) => Ok(true),
            _ => Err(e),
        },
    }
}

/// Read-decide-write until the write lands on the version that was read. Every write carries a
/// fresh operation id, so one that landed but whose answer was lost is not decided again.
pub(crate) fn update<T>(
    store: &dyn Records,
    name: &str,
    decide: impl FnMut(&Meta) -> Result<Step<T>>,
) -> Result<T> {
    update_from(store, name, None, decide)
}

/// `update`, deciding first on `read`, a record read earlier: a write on a version that moved
/// on since conflicts and reads again, so it costs a round trip only when it changed.
pub(crate) fn update_from<T>(
    store: &dyn Records,
    name: &str,
    read: Option<Stored>,
    decide: impl FnMut(&Meta) -> Result<Step<T>>,
) -> Result<T> {
    update_record(store, name, read, decide).map(|(out, _)| out)
}

/// `update_from`, returning the record as it stands after (written, or kept as read) with its
/// version: the next write of the same sequence goes on from it without reading it again.
pub(crate) fn update_record<T>(
    store: &dyn Records,
    name: &str,
    mut read: Option<Stored>,
    mut decide: impl FnMut(&Meta) -> Result<Step<T>>,
) -> Result<(T, Stored)> {
    for _ in 0..MAX_ATTEMPTS {
        let stored = match read.take() {
            Some(s) => s,
            None => get_existing(store, name)?,
        };
        match decide(&stored.meta)? {
            Step::Keep(out) => return Ok((out, stored)),
            Step::Write(mut next, out) => {
                let op = op_id();
                next.op = Some(op.clone());
                next.version = next.wire_version();
                match store.put(&next, Some(&stored.version)) {
                    Ok(Cas::Written(Some(version))) => {
                        return Ok((
                            out,
                            Stored {
                                meta: next,
                                version,
                            },
                        ));
                    }
                    // Written, but the backend did not say as which version.
                    Ok(Cas::Written(None)) => return Ok((out, get_existing(store, name)?)),
                    Ok(Cas::Conflict) | Err(_) if let Some(now) = landed(store, name, &op) => {
                        return Ok((out, now));
                    }
                    Ok(Cas::Conflict) => {
                        tracing::debug!(box_name = name, "record changed under us; deciding again");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    bail!("box '{name}': gave up after {MAX_ATTEMPTS} conflicting writes to its record")
}

pub(crate) fn get_existing(store: &dyn Records, name: &str) -> Result<Stored> {
    store.get(name)?.ok_or_else(|| unknown_box(name).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::local::LocalStore;
    use std::cell::Cell;

    /// The local store behind a network that loses answers: the next `lose` writes land (or,
    /// with `applied: false`, do not) and their callers hear only an error.
    struct LossyStore {
        inner: LocalStore,
        lose: Cell<u32>,
        applied: bool,
    }

    impl LossyStore {
        fn lost(&self) -> Option<anyhow::Error> {
            let n = self.lose.get();
            (n > 0).then(|| {
                self.lose.set(n - 1);
                anyhow::anyhow!("connection closed before the answer")
            })
        }
    }

    impl Records for LossyStore {
        fn describe(&self) -> String {
            self.inner.describe()
        }

        fn get(&self, name: &str) -> Result<Option<Stored>> {
            self.inner.get(name)
        }

        fn put(&self, meta: &Meta, expected: Option<&Version>) -> Result<Cas> {
            if self.lose.get() > 0 && !self.applied {
                return Err(self.lost().unwrap());
            }
            let done = self.inner.put(meta, expected)?;
            self.lost().map_or(Ok(done), Err)
        }

        fn delete(&self, name: &str, expected: &Version) -> Result<Cas> {
            let done = self.inner.delete(name, expected)?;
            self.lost().map_or(Ok(done), Err)
        }

        fn list(&self) -> Result<Vec<Meta>> {
            self.inner.list()
        }
    }

    impl EventLog for LossyStore {
        fn put_event(&self, name: &str, event: &Event) -> Result<()> {
            self.inner.put_event(name, event)
        }

        fn events(&self, name: &str) -> Result<Vec<(String, Event)>> {
            self.inner.events(name)
        }

        fn delete_events(&self, name: &str, keys: &[String]) -> Result<()> {
            self.inner.delete_events(name, keys)
        }
    }

    impl DeltaStore for LossyStore {}

    impl RepositoryKeys for LossyStore {}

    fn lossy(dir: &std::path::Path, applied: bool) -> LossyStore {
        LossyStore {
            inner: LocalStore::new(dir),
            lose: Cell::new(0),
            applied,
        }
    }

    #[test]
    fn writes_that_landed_without_an_answer_are_ours() {
        let dir = tempfile::tempdir().unwrap();
        let store = lossy(dir.path(), true);
        store.lose.set(1);
        let made = create(&store, Meta::sample("b")).unwrap().unwrap();
        assert_eq!(store.get("b").unwrap().unwrap().meta, made);
        // A second create of the same name is someone else's box.
        assert_eq!(create(&store, Meta::sample("b")).unwrap(), None);

        let decided = Cell::new(0);
        store.lose.set(1);
        update(&store, "b", |m| {
            decided.set(decided.get() + 1);
            Ok(Step::Write(
                Meta {
                    nix: !m.nix,
                    ..m.clone()
                },
                (),
            ))
        })
        .unwrap();
        assert_eq!(decided.get(), 1, "a landed write is not decided again");
        assert!(store.get("b").unwrap().unwrap().meta.nix);

        let version = store.get("b").unwrap().unwrap().version;
        store.lose.set(1);
        assert!(delete(&store, "b", &version).unwrap());
        assert!(store.get("b").unwrap().is_none());
    }

    #[test]
    fn writes_that_never_landed_fail_and_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = lossy(dir.path(), false);
        store.lose.set(1);
        assert!(create(&store, Meta::sample("c")).is_err());
        assert!(store.get("c").unwrap().is_none());
        create(&store, Meta::sample("c")).unwrap().unwrap();
        let before = store.get("c").unwrap().unwrap().meta;
        store.lose.set(1);
        let out = update(&store, "c", |m| {
            Ok(Step::Write(
                Meta {
                    nix: true,
                    ..m.clone()
                },
                (),
            ))
        });
        assert!(out.is_err());
        assert_eq!(store.get("c").unwrap().unwrap().meta, before);
    }

    #[test]
    fn an_update_from_a_record_that_moved_on_decides_again_on_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        create(&store, Meta::sample("d")).unwrap().unwrap();
        let read = store.get("d").unwrap().unwrap();
        let flip = |m: &Meta| {
            Ok(Step::Write(
                Meta {
                    nix: !m.nix,
                    ..m.clone()
                },
                m.nix,
            ))
        };
        // Someone else wrote between our read and our write.
        update(&store, "d", flip).unwrap();
        let seen = update_from(&store, "d", Some(read.clone()), flip).unwrap();
        assert_eq!(
            (seen, store.get("d").unwrap().unwrap().meta.nix),
            (true, false),
            "decided on the record as it is now, not as it was read"
        );
        // Unchanged since the read, the write lands on it.
        let read = store.get("d").unwrap().unwrap();
        assert!(!update_from(&store, "d", Some(read), flip).unwrap());
        assert!(store.get("d").unwrap().unwrap().meta.nix);
    }

    #[test]
    fn an_update_hands_on_the_record_it_made_so_the_next_write_needs_no_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = lossy(dir.path(), true);
        create(&store, Meta::sample("e")).unwrap().unwrap();
        let flip = |m: &Meta| {
            Ok(Step::Write(
                Meta {
                    nix: !m.nix,
                    ..m.clone()
                },
                (),
            ))
        };
        let ((), made) = update_record(&store, "e", None, flip).unwrap();
        assert_eq!(made, store.get("e").unwrap().unwrap());
        // Written from the record handed on, not read again: it lands on the first try.
        let ((), again) = update_record(&store, "e", Some(made), flip).unwrap();
        assert_eq!(again, store.get("e").unwrap().unwrap());
        assert!(!again.meta.nix);
        // A write whose answer was lost hands on the record as it landed.
        store.lose.set(1);
        let ((), lost) = update_record(&store, "e", Some(again), flip).unwrap();
        assert_eq!(lost, store.get("e").unwrap().unwrap());
        assert!(lost.meta.nix);
        // Kept: the record as it was read.
        let (out, kept) =
            update_record(&store, "e", Some(lost.clone()), |_| Ok(Step::Keep(7))).unwrap();
        assert_eq!((out, kept), (7, lost));
    }
}
