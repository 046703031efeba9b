//! One step of a box's history (`history --events`), as the store keeps it: the record's shape
//! and the key it sorts by (`store::events` writes and reads them).

use serde::{Deserialize, Serialize};

use crate::plan::snapshot_id::SnapshotId;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Event {
    pub time: String,
    pub node: String,
    /// Who ran the command: the login user, and where they came from over ssh.
    pub operator: String,
    pub verb: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// What else the operator should know (the node a lease was taken from, the settings set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// A snapshot's new and changed files, and the bytes they added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_added: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_added: Option<u64>,
}

impl Event {
    /// Sorts by time, unique per node and verb at nanosecond resolution.
    pub(crate) fn key(&self) -> String {
        let compact: String = self
            .time
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '.')
            .collect();
        format!("{compact}-{}-{}", self.node, self.verb)
    }
}
