//! What this node knows about its local copy of a box: which snapshot it equals, which lease
//! epoch it holds, and whether an `up` here is under way. Lives in
//! `$BOX_STATE_DIR/local/<name>.json`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::atomic;
use crate::plan::delta::Manifest;
use crate::store::meta::Lease;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CopyState {
    /// The local files equal this snapshot (as of the last snapshot or restore here).
    pub snapshot: Option<String>,
    /// The paths that snapshot holds.
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// The lease epoch this node acquired.
    pub epoch: Option<u64>,
    /// `sys::digest` of the copy when it last equalled `snapshot` (None: unknown, e.g. the
    /// snapshot of a running box). A copy whose digest differs may hold work in no snapshot.
    #[serde(default)]
    pub digest: Option<String>,
    /// `sys::digest` of the copy as the last snapshot of the running box began: the same now,
    /// the copy is what that snapshot saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_digest: Option<String>,
    /// The copy was written by a restore of `snapshot` here, so its files' inodes and ctimes
    /// are not those the snapshot recorded (the next snapshot compares size and mtime only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restored: bool,
    /// The project held files when it last equalled `snapshot` (an empty project then is a
    /// missing disk, not a project emptied on purpose). None: not known (older state).
    #[serde(default)]
    pub project_had_files: Option<bool>,
    /// An `up` began here and has not finished (it may hold the lease, its copy may be half
    /// restored): the next `up` finishes it, or hands the lease back to `previous`.
    #[serde(default)]
    pub pending_up: Option<PendingUp>,
    /// A restore in place toward this snapshot began and did not finish: the copy is part old,
    /// part new, and holds no unsaved work (it was kept as a fork first, or equalled a snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restoring_to: Option<String>,
    /// A rollback pointed the box's record at an earlier snapshot: the next `up` here restores
    /// it, even though the box ran here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
    /// When (nanoseconds since the Unix epoch) this node's last snapshot of the copy began to
    /// read it: a file whose ctime is older is in that snapshot (`BOX_SNAPSHOT_ADD_MAX` counts
    /// the newer ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_began: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingUp {
    /// The lease the record held before that `up`.
    pub previous: Option<Lease>,
}

/// The manifest of a box's copy when it equalled a snapshot restored (or parked) here: what
/// the next park compares the copy with to publish what changed.
#[derive(Serialize, Deserialize)]
pub(crate) struct CopyManifest {
    pub snapshot: String,
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

    pub(crate) fn save(&self, state_dir: &Path, name: &str) -> Result<()> {
        atomic::write(
            &Self::file(state_dir, name),
            &serde_json::to_vec(self)?,
            0o600,
        )
    }

    pub(crate) fn remove(state_dir: &Path, name: &str) -> Result<()> {
        atomic::remove(&Self::file(state_dir, name))
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

    /// The local copy is current for `snapshot` and still all there.
    pub(crate) fn is_current(&self, snapshot: &str) -> bool {
        self.snapshot.as_deref() == Some(snapshot) && self.paths.iter().all(|p| p.exists())
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
