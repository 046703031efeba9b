//! `meta.json`: the per-box record (DESIGN.md "Records and leases").

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub const META_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub version: u32,
    pub name: String,
    pub path: PathBuf,
    pub created_at: String,
    pub pinned_node: Option<String>,
    pub memory_max: Option<String>,
    #[serde(default)]
    pub nix: bool,
    pub lease: Option<Lease>,
    pub last_snapshot: Option<SnapshotRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub node: String,
    pub epoch: u64,
    pub acquired_at: String,
    pub renewed_at: String,
    pub expires_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    pub id: String,
    pub at: String,
    pub node: String,
    pub epoch: u64,
}
