//! `meta.json`: the per-box record (DESIGN.md "Records and leases").

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::UserError;
use crate::plan::account::{self, Ids};
use crate::plan::unit::valid_memory_max;

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
    /// The box user's ids, the same on every node (records made before them: the node's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
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

impl Meta {
    /// A fresh, unleased record for tests.
    #[cfg(test)]
    pub fn sample(name: &str) -> Meta {
        Meta {
            version: META_VERSION,
            name: name.into(),
            path: format!("/root/{name}").into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            pinned_node: None,
            memory_max: None,
            nix: false,
            uid: None,
            gid: None,
            lease: None,
            last_snapshot: None,
        }
    }

    /// The box user's ids: the record's, else the node's default.
    pub fn ids(&self, default: Ids) -> Ids {
        Ids {
            uid: self.uid.unwrap_or(default.uid),
            gid: self.gid.unwrap_or(default.gid),
        }
    }

    /// `ag-box set`: one `key=value` applied to the record.
    pub fn with_setting(&self, assignment: &str) -> Result<Meta, UserError> {
        let bad = |hint: &str| {
            UserError::usage(
                format!("box '{}': invalid setting '{assignment}'", self.name),
                hint,
            )
        };
        let (key, value) = assignment
            .split_once('=')
            .ok_or_else(|| bad("use key=value with key memory_max, nix, pin, uid or gid"))?;
        let none = value == "none" || value.is_empty();
        let mut next = self.clone();
        match key {
            "memory_max" if none => next.memory_max = None,
            "memory_max" if valid_memory_max(value) => next.memory_max = Some(value.to_string()),
            "memory_max" => {
                return Err(bad(
                    "memory_max takes e.g. 1500M, 4G, 50%, infinity or none",
                ));
            }
            "nix" => {
                next.nix = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("nix takes true or false")),
                }
            }
            "pin" if none => next.pinned_node = None,
            "pin" if !value.contains(char::is_whitespace) => {
                next.pinned_node = Some(value.to_string())
            }
            "uid" | "gid" => {
                let id = account::check_id(key, value).map_err(|h| bad(&h))?;
                match key {
                    "uid" => next.uid = Some(id),
                    _ => next.gid = Some(id),
                }
            }
            _ => {
                return Err(bad(
                    "keys: memory_max=<size|none>, nix=<true|false>, pin=<node|none>, uid=<n>, gid=<n>",
                ));
            }
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn meta() -> Meta {
        Meta::sample("d")
    }

    #[test]
    fn settings() {
        let m = meta()
            .with_setting("memory_max=2G")
            .and_then(|m| m.with_setting("nix=true"))
            .and_then(|m| m.with_setting("pin=node-a"))
            .and_then(|m| m.with_setting("uid=1001"))
            .and_then(|m| m.with_setting("gid=1002"))
            .unwrap();
        assert_eq!(
            m,
            Meta {
                memory_max: Some("2G".into()),
                nix: true,
                pinned_node: Some("node-a".into()),
                uid: Some(1001),
                gid: Some(1002),
                ..meta()
            }
        );
        assert_eq!(
            m.ids(Ids { uid: 1, gid: 2 }),
            Ids {
                uid: 1001,
                gid: 1002
            }
        );
        let cleared = m
            .with_setting("memory_max=none")
            .and_then(|m| m.with_setting("pin=none"))
            .unwrap();
        assert_eq!(
            cleared,
            Meta {
                nix: true,
                uid: Some(1001),
                gid: Some(1002),
                ..meta()
            }
        );
        for bad in [
            "memory_max=lots",
            "nix=yes",
            "color=red",
            "nix",
            "pin=a b",
            "uid=0",
            "gid=65533",
            "uid=me",
        ] {
            let e = meta().with_setting(bad).unwrap_err();
            assert!(e.message.contains("invalid setting"), "{bad}: {e}");
        }
    }
}
