//! What this node knows about its local copy of a box: how it stands to the box's snapshots
//! (`Relation`), which lease epoch it holds, and whether an `up` here is under way. Lives in
//! `$BOX_STATE_DIR/local/<name>.json`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::atomic;
use crate::plan::delta::Manifest;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::meta::{Lease, SnapshotRef};

/// Changed only through a [`CopyJournal`]'s steps, named for the transitions they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WireCopyState", into = "WireCopyState")]
pub(crate) struct CopyState {
    /// How the copy stands to the box's snapshots.
    pub relation: Relation,
    /// The lease epoch this node acquired.
    pub epoch: Option<u64>,
    /// The project held files when the copy last equalled a snapshot here (an empty project
    /// then is a missing disk, not a project emptied on purpose). None: not known (older
    /// state). Kept through a fork or a restore begun: it is what the copy last was.
    pub project_had_files: Option<bool>,
    /// An `up` began here and has not finished (it may hold the lease, its copy may be half
    /// restored): the next `up` finishes it, or hands the lease back to `previous`.
    pub pending_up: Option<PendingUp>,
    /// When (nanoseconds since the Unix epoch) this node's last snapshot of the copy began to
    /// read it: a file whose ctime is older is in that snapshot (`BOX_SNAPSHOT_ADD_MAX` counts
    /// the newer ones).
    pub snapshot_began: Option<i64>,
}

/// How this node's copy stands to the box's snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Relation {
    /// Nothing known: never saved or restored here, or kept only as a fork.
    #[default]
    Unknown,
    /// The copy equals a snapshot (as of the last snapshot or restore here).
    Equals(Equal),
    /// As `Equals`, but a rollback pointed the box's record at an earlier snapshot since: the
    /// next `up` here restores the record's latest, even though the box ran here.
    Stale(Equal),
    /// A restore in place toward snapshot `to` began and did not finish: the copy is part old,
    /// part new, and holds no unsaved work (it was kept as a fork first, or equalled a
    /// snapshot). Never the box's newest: it is not started before the restore is finished.
    Restoring { to: SnapshotId },
}

/// What is known of a copy equal to a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Equal {
    pub snapshot: SnapshotId,
    /// The paths that snapshot holds.
    pub paths: Vec<PathBuf>,
    /// `sys::digest` of the copy as it equalled `snapshot` (None: unknown, e.g. the snapshot
    /// of a running box). A copy whose digest differs may hold work in no snapshot.
    pub digest: Option<String>,
    /// `sys::digest` of the copy as the snapshot of the running box began: the same now, the
    /// copy is what that snapshot saved.
    pub running_digest: Option<String>,
    /// The copy was written by a restore of `snapshot` here, so its files' inodes and ctimes
    /// are not those the snapshot recorded (the next snapshot compares size and mtime only).
    pub restored: bool,
}

impl Equal {
    /// The copy, whose digest is `now`, is still what it was as it equalled the snapshot (as
    /// saved stopped or restored, or as the snapshot of it running began).
    pub(crate) fn still(&self, now: &str) -> bool {
        self.digest.as_deref() == Some(now) || self.running_digest.as_deref() == Some(now)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingUp {
    /// The lease the record held before that `up`.
    pub previous: Option<Lease>,
}

/// The file as every ag-box wrote it, flat, and as this one still writes it: a node of a
/// cluster not yet upgraded, or a downgraded ag-box, reads it with the same meaning.
#[derive(Serialize, Deserialize)]
struct WireCopyState {
    snapshot: Option<SnapshotId>,
    #[serde(default)]
    paths: Vec<PathBuf>,
    epoch: Option<u64>,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    running_digest: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    restored: bool,
    #[serde(default)]
    project_had_files: Option<bool>,
    #[serde(default)]
    pending_up: Option<PendingUp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    restoring_to: Option<SnapshotId>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    stale: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_began: Option<i64>,
}

impl From<WireCopyState> for CopyState {
    fn from(w: WireCopyState) -> Self {
        let relation = match (w.snapshot, w.restoring_to) {
            // An older ag-box kept `restoring_to` through a snapshot of the half-restored
            // copy: the copy equals that snapshot, and may hold work since.
            (Some(snapshot), _) => {
                let equal = Equal {
                    snapshot,
                    paths: w.paths,
                    digest: w.digest,
                    running_digest: w.running_digest,
                    restored: w.restored,
                };
                if w.stale {
                    Relation::Stale(equal)
                } else {
                    Relation::Equals(equal)
                }
            }
            // Stale or not, never started before the restore is finished.
            (None, Some(to)) => Relation::Restoring { to },
            // What a fork left (paths, restored, stale) says nothing of the copy.
            (None, None) => Relation::Unknown,
        };
        CopyState {
            relation,
            epoch: w.epoch,
            project_had_files: w.project_had_files,
            pending_up: w.pending_up,
            snapshot_began: w.snapshot_began,
        }
    }
}

impl From<CopyState> for WireCopyState {
    fn from(c: CopyState) -> Self {
        let mut w = WireCopyState {
            snapshot: None,
            paths: Vec::new(),
            epoch: c.epoch,
            digest: None,
            running_digest: None,
            restored: false,
            project_had_files: c.project_had_files,
            pending_up: c.pending_up,
            restoring_to: None,
            stale: false,
            snapshot_began: c.snapshot_began,
        };
        let (equal, stale) = match c.relation {
            Relation::Unknown => (None, false),
            Relation::Equals(e) => (Some(e), false),
            Relation::Stale(e) => (Some(e), true),
            // Stale too: an older ag-box then never takes a half-restored copy for the box's
            // newest, even where the lease stayed here.
            Relation::Restoring { to } => {
                w.restoring_to = Some(to);
                (None, true)
            }
        };
        w.stale = stale;
        if let Some(e) = equal {
            w.snapshot = Some(e.snapshot);
            w.paths = e.paths;
            w.digest = e.digest;
            w.running_digest = e.running_digest;
            w.restored = e.restored;
        }
        w
    }
}

/// The manifest of a box's copy when it equalled a snapshot restored (or parked) here: what
/// the next park compares the copy with to publish what changed.
#[derive(Serialize, Deserialize)]
pub(crate) struct CopyManifest {
    pub snapshot: SnapshotId,
    pub entries: Manifest,
}

impl CopyManifest {
    /// A dir of its own: `<name>.manifest.json` beside the copy states is box
    /// `<name>.manifest`'s (a manifest kept there by an older ag-box is left; the next park
    /// writes a new one).
    fn file(state_dir: &Path, name: &str) -> PathBuf {
        state_dir
            .join("local/manifest")
            .join(format!("{name}.json"))
    }

    pub(crate) fn load(state_dir: &Path, name: &str) -> Option<CopyManifest> {
        // Read as it is parsed: the file of a big tree is tens of megabytes.
        let file = fs::File::open(Self::file(state_dir, name)).ok()?;
        serde_json::from_reader(std::io::BufReader::new(file)).ok()
    }

    /// Begin the file of a manifest with its `entries` (a park writes them while restic saves
    /// the snapshot they are as of: at 200,000 entries that takes a tenth of a second); the
    /// snapshot comes last, once known.
    pub(crate) fn begin(state_dir: &Path, name: &str, entries: &Manifest) -> Result<NextManifest> {
        let file = Self::file(state_dir, name);
        // Called under the box's lock: no other writer of this box's manifest runs.
        atomic::sweep_unfinished(&file);
        let mut next = atomic::Replacement::new(&file, 0o600)?;
        next.write_all(b"{\"entries\":")
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(serde_json::to_writer(&mut next, entries)?))
            .with_context(|| format!("writing the next {}", file.display()))?;
        // Tens of MB at 200,000 entries: synced now, while restic saves the changes, not
        // once the snapshot is known.
        next.sync_so_far()?;
        Ok(NextManifest(next))
    }

    pub(crate) fn save(&self, state_dir: &Path, name: &str) -> Result<()> {
        Self::begin(state_dir, name, &self.entries)?.finish(&self.snapshot)
    }

    pub(crate) fn remove(state_dir: &Path, name: &str) -> Result<()> {
        atomic::remove(&Self::file(state_dir, name))
    }
}

/// A manifest's file with its entries written, not yet in place.
pub(crate) struct NextManifest(atomic::Replacement);

impl NextManifest {
    /// The file, as of `snapshot`, put in place.
    pub(crate) fn finish(mut self, snapshot: &SnapshotId) -> Result<()> {
        self.0.write_all(b",\"snapshot\":")?;
        serde_json::to_writer(&mut self.0, snapshot)?;
        self.0.write_all(b"}")?;
        self.0.commit()
    }
}

fn file(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join("local").join(format!("{name}.json"))
}

/// Where a restore records the swap it has under way inside the box's project (root's alone,
/// outside every box), so that only a swap this node made is ever undone.
pub(crate) fn swap_journal(state_dir: &Path, name: &str) -> PathBuf {
    // A dir of its own: `<name>.swap.json` beside the copy states is box `<name>.swap`'s.
    state_dir.join("local/swap").join(format!("{name}.json"))
}

impl CopyState {
    pub(crate) fn load(state_dir: &Path, name: &str) -> Result<CopyState> {
        let path = file(state_dir, name);
        match fs::read(&path) {
            Ok(b) => {
                serde_json::from_slice(&b).with_context(|| format!("parsing {}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CopyState::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn write(&self, path: &Path) -> Result<()> {
        atomic::write(path, &serde_json::to_vec_pretty(self)?, 0o644)
    }

    pub(crate) fn remove(state_dir: &Path, name: &str) -> Result<()> {
        atomic::remove(&file(state_dir, name))
    }

    /// A journal that begins with `self`, whatever the file held (a box tracked anew).
    pub(crate) fn start_journal(self, state_dir: &Path, name: &str) -> Result<CopyJournal> {
        let file = file(state_dir, name);
        self.write(&file)?;
        Ok(CopyJournal { state: self, file })
    }

    /// Loaded once by a sequence, which then changes it only through the journal.
    pub(crate) fn journal(state_dir: &Path, name: &str) -> Result<CopyJournal> {
        Ok(CopyJournal {
            state: CopyState::load(state_dir, name)?,
            file: file(state_dir, name),
        })
    }

    /// The snapshot the copy equals, stale or not.
    pub(crate) fn equal(&self) -> Option<&Equal> {
        match &self.relation {
            Relation::Equals(e) | Relation::Stale(e) => Some(e),
            Relation::Unknown | Relation::Restoring { .. } => None,
        }
    }

    /// The local copy is current for `latest` (it equals it, or the changes it replaced) and
    /// still all there.
    pub(crate) fn is_current(&self, latest: &SnapshotRef) -> bool {
        self.equal()
            .is_some_and(|e| latest.names(&e.snapshot) && e.paths.iter().all(|p| p.exists()))
    }

    /// The whole snapshot a backup of the copy takes as its parent: the one the copy equals,
    /// or, when that is a quick park's changes, the whole one they are (or lie over) in `latest`.
    pub(crate) fn parent(&self, latest: Option<&SnapshotRef>) -> Option<SnapshotId> {
        match (self.equal(), latest) {
            (Some(e), Some(l)) if l.names(&e.snapshot) => Some(l.whole().id.clone()),
            (Some(e), _) => Some(e.snapshot.clone()),
            (None, l) => l.map(|l| l.whole().id.clone()),
        }
    }

    /// A snapshot of the copy (`equal`) became the box's latest; a stale copy stays so until
    /// the next `up` (which starts it as it is when the record still names it).
    pub(crate) fn saved(&mut self, equal: Equal, had_files: Option<bool>, began: i64) {
        self.relation = match self.relation {
            Relation::Stale(_) => Relation::Stale(equal),
            _ => Relation::Equals(equal),
        };
        self.project_had_files = had_files;
        self.snapshot_began = Some(began);
    }

    /// A snapshot of the copy was kept as a fork: the copy equals no snapshot of the box's
    /// line (a restore under way stays under way).
    pub(crate) fn forked(&mut self) {
        if self.equal().is_some() {
            self.relation = Relation::Unknown;
        }
    }

    /// A rollback is about to point the box's record at an earlier snapshot.
    pub(crate) fn rolled_back(&mut self) {
        if let Relation::Equals(e) = &self.relation {
            self.relation = Relation::Stale(e.clone());
        }
    }

    /// The record still names the snapshot the stale copy equals: it is current after all.
    pub(crate) fn clear_stale(&mut self) {
        if let Relation::Stale(e) = &self.relation {
            self.relation = Relation::Equals(e.clone());
        }
    }

    /// From here the copy may be part old, part new, with nothing unsaved in it.
    pub(crate) fn begin_restore(&mut self, to: &SnapshotId) {
        self.relation = Relation::Restoring { to: to.clone() };
    }

    /// A restore of `snapshot` (holding `paths`) is done; its digest is not known yet.
    pub(crate) fn restored(
        &mut self,
        snapshot: &SnapshotId,
        paths: Vec<PathBuf>,
        had_files: Option<bool>,
    ) {
        self.relation = Relation::Equals(Equal {
            snapshot: snapshot.clone(),
            paths,
            digest: None,
            running_digest: None,
            restored: true,
        });
        self.project_had_files = had_files;
    }

    /// The copy, still equal to its snapshot, was walked: `digest` is what it is as that.
    pub(crate) fn walked(&mut self, digest: String) {
        if let Relation::Equals(e) | Relation::Stale(e) = &mut self.relation {
            e.digest = Some(digest);
        }
    }

    /// A whole snapshot `to` took the place of quick park changes `from` the copy equals: it
    /// equals `to` (which restic can diff against). `read`: restic read this copy for it, so
    /// its files' inodes are those `to` recorded.
    pub(crate) fn replaced(&mut self, from: &SnapshotId, to: &SnapshotId, read: bool) {
        if let Relation::Equals(e) | Relation::Stale(e) = &mut self.relation
            && e.snapshot == *from
        {
            e.snapshot = to.clone();
            e.restored &= !read;
        }
    }

    /// The copy is no longer taken to be what it was as it equalled its snapshot.
    pub(crate) fn distrust(&mut self) {
        if let Relation::Equals(e) | Relation::Stale(e) = &mut self.relation {
            e.digest = None;
            e.running_digest = None;
        }
    }
}

/// A sequence's copy state: read once, and every step it records saved before it counts, so
/// what the sequence holds is always what the file says (a step whose save failed is not
/// taken, not even in memory).
pub(crate) struct CopyJournal {
    state: CopyState,
    file: PathBuf,
}

impl CopyJournal {
    pub(crate) fn state(&self) -> &CopyState {
        &self.state
    }

    /// Record one step: `change` applied, saved, and only then held.
    pub(crate) fn record(&mut self, change: impl FnOnce(&mut CopyState)) -> Result<()> {
        let mut next = self.state.clone();
        change(&mut next);
        next.write(&self.file)?;
        self.state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    fn equal(snapshot: &str) -> Equal {
        Equal {
            snapshot: snapshot.into(),
            paths: vec![PathBuf::from("/root/demo")],
            digest: None,
            running_digest: None,
            restored: false,
        }
    }

    /// A manifest's file, written entries first and its snapshot once known, loads back
    /// whole, odd names included; one not finished leaves the last one in place.
    #[test]
    fn a_manifest_written_in_two_steps_loads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let entries: Manifest = [
            ("/root/demo".to_string(), "d\u{0}0".to_string()),
            (
                "/root/demo/a \"b\"\n\u{1b}".to_string(),
                "f\u{0}3".to_string(),
            ),
        ]
        .into_iter()
        .collect();
        let first = CopyManifest {
            snapshot: "ab12cd34".into(),
            entries: entries.clone(),
        };
        first.save(dir.path(), "demo").unwrap();
        let next = CopyManifest::begin(dir.path(), "demo", &Manifest::new()).unwrap();
        drop(next);
        // What a killed park left is swept by the next; another box's is not touched.
        let manifests = dir.path().join("local/manifest");
        fs::write(manifests.join(".demo.json.Ab12Cd.tmp"), "torn").unwrap();
        fs::write(manifests.join(".demo.json.json.Ab12Cd.tmp"), "other box").unwrap();
        drop(CopyManifest::begin(dir.path(), "demo", &Manifest::new()).unwrap());
        let loaded = CopyManifest::load(dir.path(), "demo").unwrap();
        assert_eq!((loaded.snapshot, loaded.entries), (first.snapshot, entries));
        CopyManifest::begin(dir.path(), "demo", &Manifest::new())
            .unwrap()
            .finish(&"ef56".into())
            .unwrap();
        let loaded = CopyManifest::load(dir.path(), "demo").unwrap();
        assert_eq!(
            (loaded.snapshot, loaded.entries),
            (SnapshotId::from("ef56"), Manifest::new())
        );
        let mut names: Vec<_> = fs::read_dir(manifests)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [".demo.json.json.Ab12Cd.tmp", "demo.json"]);
    }

    fn state(relation: Relation) -> CopyState {
        CopyState {
            relation,
            epoch: Some(3),
            project_had_files: Some(true),
            pending_up: None,
            snapshot_began: Some(7),
        }
    }

    fn load(v: &Value) -> CopyState {
        serde_json::from_value(v.clone()).unwrap()
    }

    /// Each combination of the flat fields an older ag-box wrote, what it means now, and
    /// whether this one writes it back the same (it leaves out what says nothing).
    // One table, each file beside its meaning.
    #[allow(clippy::too_many_lines)]
    fn older_files() -> Vec<(Value, CopyState, bool)> {
        let lease = Lease {
            node: "b".into(),
            epoch: 2,
            acquired_at: "t0".into(),
            renewed_at: "t1".into(),
            expires_at: "t2".into(),
        };
        vec![
            // As `track` began it.
            (
                json!({"snapshot": null, "paths": [], "epoch": 1, "digest": null,
                       "project_had_files": null, "pending_up": null}),
                CopyState {
                    epoch: Some(1),
                    ..CopyState::default()
                },
                true,
            ),
            // Saved stopped (a park).
            (
                json!({"snapshot": "s1", "paths": ["/root/demo"], "epoch": 3, "digest": "d",
                       "project_had_files": true, "pending_up": null, "snapshot_began": 7}),
                state(Relation::Equals(Equal {
                    digest: Some("d".into()),
                    ..equal("s1")
                })),
                true,
            ),
            // Saved running, an `up` here under way.
            (
                json!({"snapshot": "s1", "paths": ["/root/demo"], "epoch": 3, "digest": null,
                       "running_digest": "r", "project_had_files": true,
                       "pending_up": {"previous": lease}, "snapshot_began": 7}),
                CopyState {
                    pending_up: Some(PendingUp {
                        previous: Some(lease.clone()),
                    }),
                    ..state(Relation::Equals(Equal {
                        running_digest: Some("r".into()),
                        ..equal("s1")
                    }))
                },
                true,
            ),
            // Restored here.
            (
                json!({"snapshot": "s1", "paths": ["/root/demo"], "epoch": 3, "digest": "d",
                       "restored": true, "project_had_files": true, "pending_up": null,
                       "snapshot_began": 7}),
                state(Relation::Equals(Equal {
                    digest: Some("d".into()),
                    restored: true,
                    ..equal("s1")
                })),
                true,
            ),
            // Saved before a rollback.
            (
                json!({"snapshot": "s1", "paths": ["/root/demo"], "epoch": 3, "digest": "d",
                       "project_had_files": true, "pending_up": null, "stale": true,
                       "snapshot_began": 7}),
                state(Relation::Stale(Equal {
                    digest: Some("d".into()),
                    ..equal("s1")
                })),
                true,
            ),
            // A restore in place cut off: what the copy equalled before is left in the file.
            (
                json!({"snapshot": null, "paths": ["/root/demo"], "epoch": 3, "digest": null,
                       "running_digest": "r", "restored": true, "project_had_files": true,
                       "pending_up": null, "restoring_to": "s2", "snapshot_began": 7}),
                state(Relation::Restoring { to: "s2".into() }),
                false,
            ),
            // The same after a rollback (as this ag-box writes it, too).
            (
                json!({"snapshot": null, "paths": [], "epoch": 3, "digest": null,
                       "project_had_files": true, "pending_up": null, "restoring_to": "s2",
                       "stale": true, "snapshot_began": 7}),
                state(Relation::Restoring { to: "s2".into() }),
                true,
            ),
            // A snapshot of a half-restored copy: it equals that snapshot.
            (
                json!({"snapshot": "s3", "paths": ["/root/demo"], "epoch": 3, "digest": "d",
                       "project_had_files": true, "pending_up": null, "restoring_to": "s2",
                       "snapshot_began": 7}),
                state(Relation::Equals(Equal {
                    digest: Some("d".into()),
                    ..equal("s3")
                })),
                false,
            ),
            // Kept as a fork (after a rollback): what is left says nothing of the copy.
            (
                json!({"snapshot": null, "paths": ["/root/demo"], "epoch": 3, "digest": null,
                       "restored": true, "project_had_files": true, "pending_up": null,
                       "stale": true, "snapshot_began": 7}),
                state(Relation::Unknown),
                false,
            ),
            // The oldest files, before digests, paths and the project's files were kept.
            (
                json!({"snapshot": "s1", "epoch": null}),
                CopyState {
                    relation: Relation::Equals(Equal {
                        paths: vec![],
                        ..equal("s1")
                    }),
                    ..CopyState::default()
                },
                false,
            ),
        ]
    }

    #[test]
    fn files_an_older_ag_box_wrote_load_with_the_same_meaning() {
        for (file, expected, _) in older_files() {
            assert_eq!(load(&file), expected, "{file}");
        }
    }

    #[test]
    fn every_state_round_trips_in_the_flat_format() {
        for (file, loaded, same) in older_files() {
            let written = serde_json::to_value(&loaded).unwrap();
            assert_eq!(load(&written), loaded, "{file}");
            if same {
                assert_eq!(written, file);
            }
        }
    }

    #[test]
    fn steps_move_the_copy_between_relations() {
        let mut c = state(Relation::Equals(equal("s1")));
        c.rolled_back();
        assert_eq!(c, state(Relation::Stale(equal("s1"))));
        c.saved(equal("s2"), Some(false), 9);
        assert_eq!(
            c,
            CopyState {
                project_had_files: Some(false),
                snapshot_began: Some(9),
                ..state(Relation::Stale(equal("s2")))
            }
        );
        c.begin_restore(&"s0".into());
        c.forked();
        assert_eq!(c.relation, Relation::Restoring { to: "s0".into() });
        c.saved(equal("s3"), Some(true), 7);
        assert_eq!(c, state(Relation::Equals(equal("s3"))));
        c.forked();
        assert_eq!(c, state(Relation::Unknown));
    }
}
