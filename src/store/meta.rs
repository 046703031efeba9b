//! `meta.json`: the per-box record (docs/design.md "Records and leases").

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::UserError;
use crate::plan::account::{self, Ids};
use crate::plan::attention::{AgentState, Heard, believable};
use crate::plan::egress::{self, Entry, Mode};
use crate::plan::snapshot_id::SnapshotId;
use crate::plan::unit::valid_memory_max;
use crate::plan::{agent_home, agents, names, project};

pub(crate) const META_VERSION: u32 = 1;
/// The version of a record whose latest is a quick park's changes ([`SnapshotRef::on`]): an
/// ag-box before them would restore the changes alone as the whole box, so it must refuse
/// such a record ("unknown version"); once the whole snapshot replaces them, the record is a
/// [`META_VERSION`] one again.
pub(crate) const META_VERSION_CHANGES: u32 = 2;
/// A record longer than this is not read.
pub(crate) const MAX_RECORD_BYTES: usize = 64 * 1024;
/// A box's own allow-list entries at most.
pub(crate) const MAX_ALLOW_ENTRIES: usize = 256;

/// A record that must not be acted on: reported by name, skipped by listings.
#[derive(Debug, thiserror::Error)]
#[error(
    "box record '{key}' is invalid ({why}); ag-box will not act on it: fix it or delete it from the store"
)]
pub(crate) struct BadRecord {
    pub key: String,
    pub why: String,
}

/// A stored record read back: size, JSON and [`Meta::problem`] checked. `T` is the backend's
/// record (the local store's carries a revision besides the meta).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(
    key: &str,
    bytes: &[u8],
    meta_of: impl Fn(&T) -> &Meta,
) -> Result<T, BadRecord> {
    let bad = |why: String| BadRecord {
        key: key.to_string(),
        why,
    };
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(bad(format!(
            "{} bytes, over the limit of {MAX_RECORD_BYTES}",
            bytes.len()
        )));
    }
    let record: T = serde_json::from_slice(bytes).map_err(|e| bad(format!("not a record: {e}")))?;
    match meta_of(&record).problem(key) {
        Some(why) => Err(bad(why)),
        None => Ok(record),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
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
    /// `network=`: records made before it follow the node's `BOX_NETWORK`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Mode>,
    /// The box's own allow-list entries, besides the node's list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// The agent the box holds (`plan::agents`), by name; none: absent. A name this version
    /// does not know (a newer ag-box's) is kept as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `creds=`: the node's logins the box is given (`plan::agent_home::LOGINS`); none: the
    /// default, its agent's and gh's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creds: Option<Vec<String>>,
    /// `gpu=true`: the node's GPU device nodes are bound into the box.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu: bool,
    /// The box and snapshot `fork` made it from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    pub lease: Option<Lease>,
    pub last_snapshot: Option<SnapshotRef>,
    /// What its agent was last heard doing, as the node holding its lease published it; it
    /// says nothing once the lease has moved on (`Meta::agent_state`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub attention: Option<Heard>,
    /// `drop` began: the box's snapshots are being deleted; nothing but `drop` acts on it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropping: bool,
    /// The operation that wrote this version: a write whose answer was lost is recognised on
    /// re-read as ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
}

/// What a newer ag-box may write in a shape this one does not know (a state it added): read as
/// nothing heard, never a reason to refuse the whole record.
fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Heard>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

/// Where a fork came from: its parent box (which may be dropped since) and the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkedFrom {
    #[serde(rename = "box")]
    pub parent: String,
    pub snapshot: SnapshotId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub node: String,
    pub epoch: u64,
    pub acquired_at: String,
    pub renewed_at: String,
    pub expires_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SnapshotRef {
    pub id: SnapshotId,
    pub at: String,
    pub node: String,
    pub epoch: u64,
    /// The paths it holds (records made before them: unknown, restored through a staging dir).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathBuf>,
    /// A quick park's changes: the box's latest is `on`, a whole snapshot, with what this one
    /// holds written over it (the list in it says which paths, and which are removed), until
    /// the parking node's whole snapshot of the same files replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<Box<SnapshotRef>>,
    /// The quick park's changes this whole snapshot replaced: a copy equal to them equals it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_as: Option<SnapshotId>,
}

impl SnapshotRef {
    /// Whether a copy equal to snapshot `id` is this state of the box: it is this snapshot,
    /// or the changes this whole one replaced.
    pub(crate) fn names(&self, id: &SnapshotId) -> bool {
        self.id == *id || self.same_as.as_ref() == Some(id)
    }

    /// The id a published delta leading to this state names as its `to`: the quick park's
    /// changes this whole snapshot replaced, else its own.
    pub(crate) fn published_as(&self) -> &SnapshotId {
        self.same_as.as_ref().unwrap_or(&self.id)
    }

    /// The whole snapshot this state is, or is built on (a quick park's `on`).
    pub(crate) fn whole(&self) -> &SnapshotRef {
        self.on.as_deref().unwrap_or(self)
    }
}

impl Meta {
    /// A fresh, unleased record for tests.
    #[cfg(test)]
    pub(crate) fn sample(name: &str) -> Meta {
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
            network: None,
            allow: vec![],
            agent: None,
            creds: None,
            gpu: false,
            lease: None,
            last_snapshot: None,
            attention: None,
            dropping: false,
            op: None,
            forked_from: None,
        }
    }

    /// Why this record, stored under `key`, must not be acted on (None: it may).
    pub(crate) fn problem(&self, key: &str) -> Option<String> {
        if self.version != self.wire_version() {
            return Some(format!("unknown version {}", self.version));
        }
        if let Some(on) = self.last_snapshot.as_ref().and_then(|s| s.on.as_deref())
            && on.on.is_some()
        {
            return Some("its latest is changes over changes".into());
        }
        if self.name != key {
            return Some(format!("it names box '{}'", self.name));
        }
        if names::validate(&self.name).is_err() {
            return Some(format!("invalid box name '{}'", self.name));
        }
        if let Some(why) = project::refusal(&self.path) {
            return Some(format!("path {}: {why}", self.path.display()));
        }
        if let Some(m) = &self.memory_max
            && !valid_memory_max(m)
        {
            return Some(format!("invalid memory_max '{m}'"));
        }
        for (key, id) in [("uid", self.uid), ("gid", self.gid)] {
            if let Some(id) = id
                && let Err(why) = account::check_id(key, &id.to_string())
            {
                return Some(why);
            }
        }
        if self.allow.len() > MAX_ALLOW_ENTRIES {
            return Some(format!(
                "{} allow-list entries, over the limit of {MAX_ALLOW_ENTRIES}",
                self.allow.len()
            ));
        }
        if let Some(why) = self.allow.iter().find_map(|e| Entry::parse(e).err()) {
            return Some(why);
        }
        if let Some(a) = &self.agent
            && !agents::plausible(a)
        {
            return Some(format!("invalid agent name {a:?}"));
        }
        let bad_node =
            |n: &str| n.is_empty() || n.chars().any(|c| c.is_whitespace() || c.is_control());
        if self.pinned_node.as_deref().is_some_and(bad_node)
            || self.lease.as_ref().is_some_and(|l| bad_node(&l.node))
        {
            return Some("invalid node name".into());
        }
        None
    }

    /// The version this record is written as: [`META_VERSION_CHANGES`] while its latest is a
    /// quick park's changes, else [`META_VERSION`].
    pub(crate) fn wire_version(&self) -> u32 {
        if self.last_snapshot.as_ref().is_some_and(|s| s.on.is_some()) {
            META_VERSION_CHANGES
        } else {
            META_VERSION
        }
    }

    /// The box user's ids: the record's (those of a record from before ids: the legacy 1000).
    pub(crate) fn ids(&self) -> Ids {
        Ids {
            uid: self.uid.unwrap_or(Ids::LEGACY.uid),
            gid: self.gid.unwrap_or(Ids::LEGACY.gid),
        }
    }

    /// What the box's agent is doing, as the node holding its lease last heard (None: nothing
    /// heard under this lease, or nothing to believe).
    pub(crate) fn agent_state(&self) -> Option<&AgentState> {
        let (lease, heard) = (self.lease.as_ref()?, self.attention.as_ref()?);
        (heard.node == lease.node && heard.epoch == lease.epoch && believable(&heard.state))
            .then_some(&heard.state)
    }

    /// The box's agent as `ls` and `set` show it: its name, or `none`.
    pub(crate) fn agent_label(&self) -> &str {
        self.agent.as_deref().unwrap_or(agents::NONE)
    }

    /// `creds=` as `set` shows it: the logins named, `none`, or `default`.
    pub(crate) fn creds_label(&self) -> String {
        match self.creds.as_deref() {
            None => "default".to_string(),
            Some([]) => "none".to_string(),
            Some(logins) => logins.join(","),
        }
    }

    /// The box's network mode: the record's, else the node's default.
    pub(crate) fn network(&self, default: Mode) -> Mode {
        self.network.unwrap_or(default)
    }

    /// `ag-box set`: one `key=value` applied to the record.
    pub(crate) fn with_setting(&self, assignment: &str) -> Result<Meta, UserError> {
        let bad = |hint: &str| {
            UserError::usage(
                format!("box '{}': invalid setting '{assignment}'", self.name),
                hint,
            )
        };
        let (key, value) = assignment.split_once('=').ok_or_else(|| {
            bad("use key=value with key memory_max, nix, pin, uid, gid, network, allow, agent, creds or gpu")
        })?;
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
            "gpu" => {
                next.gpu = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("gpu takes true or false")),
                }
            }
            "pin" if none => next.pinned_node = None,
            "pin" if !value.contains(char::is_whitespace) => {
                next.pinned_node = Some(value.to_string());
            }
            "uid" | "gid" => {
                let id = account::check_box_id(key, value).map_err(|h| bad(&h))?;
                match key {
                    "uid" => next.uid = Some(id),
                    _ => next.gid = Some(id),
                }
            }
            "network" => {
                next.network = Some(
                    Mode::parse(value).ok_or_else(|| bad("network takes allow, none or host"))?,
                );
            }
            "allow" => {
                next.allow = egress::parse_box_entries(value).map_err(|why| {
                    bad(&format!(
                        "{why}; entries are host, host:port, *.suffix, IP or CIDR, each optionally :port"
                    ))
                })?;
                if next.allow.len() > MAX_ALLOW_ENTRIES {
                    return Err(bad(&format!("at most {MAX_ALLOW_ENTRIES} entries per box")));
                }
            }
            "creds" => {
                next.creds = agent_home::parse_creds(value).map_err(|hint| bad(&hint))?;
            }
            "agent" => {
                next.agent = agents::parse(value)
                    .map_err(|hint| bad(&hint))?
                    .map(|a| a.name.to_string());
            }
            _ => {
                return Err(bad(&format!(
                    "keys: memory_max=<size|none>, nix=<true|false>, pin=<node|none>, uid=<n>, gid=<n>, \
                     network=<allow|none|host>, allow=<entry>,<entry>..., agent=<{}>, \
                     creds=<login>,<login>...|all|none|default, gpu=<true|false>",
                    agents::choices().join("|")
                )));
            }
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::attention::State;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_record_whose_latest_is_changes_is_of_a_version_older_ag_boxes_refuse() {
        let snap = |id: &str| SnapshotRef {
            id: id.into(),
            at: "t".into(),
            node: "a".into(),
            epoch: 1,
            paths: vec![],
            on: None,
            same_as: None,
        };
        let mut m = meta();
        m.last_snapshot = Some(SnapshotRef {
            on: Some(Box::new(snap("whole"))),
            ..snap("changes")
        });
        assert_eq!(m.wire_version(), META_VERSION_CHANGES);
        assert_eq!(m.problem("d"), Some("unknown version 1".into()));
        m.version = m.wire_version();
        assert_eq!(m.problem("d"), None);
        // Changes over a whole snapshot that replaced changes: the name is kept.
        m.last_snapshot = Some(SnapshotRef {
            on: Some(Box::new(SnapshotRef {
                same_as: Some("older".into()),
                ..snap("whole")
            })),
            ..snap("changes")
        });
        assert_eq!(m.problem("d"), None);
        // Never changes over changes.
        m.last_snapshot = Some(SnapshotRef {
            on: Some(Box::new(SnapshotRef {
                on: Some(Box::new(snap("whole"))),
                ..snap("older")
            })),
            ..snap("changes")
        });
        assert_eq!(
            m.problem("d"),
            Some("its latest is changes over changes".into())
        );
        // Once whole again, the version every ag-box reads.
        m.last_snapshot = Some(SnapshotRef {
            same_as: Some("changes".into()),
            ..snap("whole")
        });
        assert_eq!(m.wire_version(), META_VERSION);
        assert_eq!(m.problem("d"), Some("unknown version 2".into()));
    }

    fn meta() -> Meta {
        Meta::sample("d")
    }

    #[test]
    fn the_agents_state_is_believed_under_the_lease_that_published_it_and_never_refuses_a_record() {
        let heard = |state: &str, epoch: u64| {
            serde_json::json!({"node": "a", "epoch": epoch, "agent": "claude", "state": state,
                "since": 1_796_294_736_u64})
        };
        let with = |attention: serde_json::Value, lease_epoch: u64| {
            let mut v = serde_json::to_value(crate::store::lease::acquire(
                &meta(),
                "a",
                std::time::SystemTime::UNIX_EPOCH,
                std::time::Duration::from_mins(1),
            ))
            .unwrap();
            v["lease"]["epoch"] = lease_epoch.into();
            v["attention"] = attention;
            parse("d", &serde_json::to_vec(&v).unwrap(), |m: &Meta| m).unwrap()
        };
        let states: Vec<Option<State>> = [
            with(heard("waiting", 1), 1),
            with(heard("waiting", 1), 2),
            with(heard("asleep", 1), 1),
            with(serde_json::json!("garbage"), 1),
        ]
        .iter()
        .map(|m| m.agent_state().map(|s| s.state))
        .collect();
        assert_eq!(states, [Some(State::Waiting), None, None, None]);
    }

    #[test]
    fn bad_records_are_named_and_refused() {
        let good = serde_json::to_vec(&meta()).unwrap();
        assert_eq!(parse("d", &good, |m: &Meta| m).unwrap(), meta());
        let cases: Vec<(Vec<u8>, &str, &str)> = vec![
            (good.clone(), "e", "it names box 'd'"),
            (
                serde_json::to_vec(&Meta {
                    path: "/etc".into(),
                    ..meta()
                })
                .unwrap(),
                "d",
                "path /etc: /etc belongs to the system or to ag-box",
            ),
            (
                serde_json::to_vec(&Meta {
                    path: "/root/../etc".into(),
                    ..meta()
                })
                .unwrap(),
                "d",
                "path /root/../etc: it must be an absolute path",
            ),
            (
                serde_json::to_vec(&Meta {
                    version: 9,
                    ..meta()
                })
                .unwrap(),
                "d",
                "unknown version 9",
            ),
            (
                serde_json::to_vec(&Meta {
                    uid: Some(0),
                    ..meta()
                })
                .unwrap(),
                "d",
                "uid=0 would run the box as root",
            ),
            (b"{\"name\":".to_vec(), "d", "not a record"),
            (vec![b' '; MAX_RECORD_BYTES + 1], "d", "over the limit"),
        ];
        for (bytes, key, why) in cases {
            let e = parse(key, &bytes, |m: &Meta| m).unwrap_err();
            assert!(e.why.contains(why), "{key}: {e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("box record '{key}' is invalid"))
            );
        }
    }

    #[test]
    fn settings() {
        let m = meta()
            .with_setting("memory_max=2G")
            .and_then(|m| m.with_setting("nix=true"))
            .and_then(|m| m.with_setting("pin=node-a"))
            .and_then(|m| m.with_setting("uid=2000000001"))
            .and_then(|m| m.with_setting("gid=2000000002"))
            .unwrap();
        assert_eq!(
            m,
            Meta {
                memory_max: Some("2G".into()),
                nix: true,
                pinned_node: Some("node-a".into()),
                uid: Some(2_000_000_001),
                gid: Some(2_000_000_002),
                ..meta()
            }
        );
        assert_eq!(
            m.ids(),
            Ids {
                uid: 2_000_000_001,
                gid: 2_000_000_002
            }
        );
        assert_eq!(
            Meta {
                uid: None,
                gid: None,
                ..meta()
            }
            .ids(),
            Ids::LEGACY
        );
        assert!(meta().with_setting("uid=1001").is_err());
        let cleared = m
            .with_setting("memory_max=none")
            .and_then(|m| m.with_setting("pin=none"))
            .unwrap();
        assert_eq!(
            cleared,
            Meta {
                nix: true,
                uid: Some(2_000_000_001),
                gid: Some(2_000_000_002),
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
            "uid=1000",
            "uid=4294967295",
            "uid=me",
            "network=open",
            "agent=aider",
            "agent=Claude",
        ] {
            let e = meta().with_setting(bad).unwrap_err();
            assert!(e.message.contains("invalid setting"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_agent_is_set_shown_and_kept_across_versions() {
        let m = meta().with_setting("agent=grok").unwrap();
        assert_eq!(
            m,
            Meta {
                agent: Some("grok".into()),
                ..meta()
            }
        );
        assert_eq!((m.agent_label(), meta().agent_label()), ("grok", "none"));
        assert_eq!(m.with_setting("agent=none").unwrap(), meta());
        assert_eq!(m.with_setting("agent=").unwrap(), meta());
        // A record of an older ag-box has no agent; a box without one writes none, so older
        // versions read the same record they wrote.
        let older = serde_json::to_value(meta()).unwrap();
        assert_eq!(older.get("agent"), None);
        let read =
            |v: &serde_json::Value| parse("d", &serde_json::to_vec(v).unwrap(), |m: &Meta| m);
        assert_eq!(read(&older).unwrap(), meta());
        // An agent a newer ag-box knows is kept as it is; one no terminal shows as it is, refused.
        let mut newer = older.clone();
        newer["agent"] = "aider".into();
        let kept = read(&newer).unwrap();
        assert_eq!(kept.agent.as_deref(), Some("aider"));
        assert_eq!(serde_json::to_value(&kept).unwrap(), newer);
        newer["agent"] = "x\u{1b}[2J".into();
        assert_eq!(
            read(&newer).unwrap_err().why,
            "invalid agent name \"x\\u{1b}[2J\""
        );
        let e = meta().with_setting("agent=aider").unwrap_err();
        assert_eq!(
            e.to_string(),
            "box 'd': invalid setting 'agent=aider'; hint: agent takes claude, codex, gemini, grok, \
             opencode or none"
        );
    }

    #[test]
    fn network_settings_are_stored_checked_and_cleared() {
        let m = meta()
            .with_setting("network=none")
            .and_then(|m| m.with_setting("allow=api.example.com, 10.0.0.0/8:5432,*.npmjs.org"))
            .unwrap();
        assert_eq!(
            m,
            Meta {
                network: Some(Mode::None),
                allow: vec![
                    "api.example.com".into(),
                    "10.0.0.0/8:5432".into(),
                    "*.npmjs.org".into()
                ],
                ..meta()
            }
        );
        assert_eq!(m.network(Mode::Allow), Mode::None);
        assert_eq!(meta().network(Mode::Host), Mode::Host);
        assert_eq!(
            m.with_setting("allow=").unwrap().allow,
            Vec::<String>::new()
        );
        let e = meta().with_setting("allow=ok.com,not a host").unwrap_err();
        assert_eq!(
            e.to_string(),
            "box 'd': invalid setting 'allow=ok.com,not a host'; hint: allow-list entry 'not a host': \
             not a host name; entries are host, host:port, *.suffix, IP or CIDR, each optionally :port"
        );
        let stored = Meta {
            allow: vec!["10.0.0.0/99".into()],
            ..meta()
        };
        assert_eq!(
            stored.problem("d"),
            Some("allow-list entry '10.0.0.0/99': the prefix length must be 0 to 32".into())
        );
    }
}
