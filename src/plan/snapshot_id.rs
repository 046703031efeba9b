//! A snapshot's id as restic gives it, and the prefix of one an operator types.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The id of a snapshot as restic reports it: 64 hex chars, stored as is (records, the copy
/// state, published deltas), so its JSON is the bare string.
///
/// One rule for equality: the same id, or one a prefix of the other with the shorter at least
/// 8 chars. Full ids are thus equal only when identical; the prefix half is for a short id
/// restic before 0.17 named a backup by (its summary line), kept as is when restic could not
/// say the full one (`sys::restic::Restic::full_id`) and so in older records and events.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct SnapshotId(String);

impl SnapshotId {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as shown to people: its first 8 chars, as restic shows it.
    pub(crate) fn short(&self) -> &str {
        self.0.get(..8).unwrap_or(&self.0)
    }
}

impl PartialEq for SnapshotId {
    fn eq(&self, other: &SnapshotId) -> bool {
        let (short, long) = if self.0.len() <= other.0.len() {
            (&self.0, &other.0)
        } else {
            (&other.0, &self.0)
        };
        short == long || (short.len() >= 8 && long.starts_with(short.as_str()))
    }
}

impl From<String> for SnapshotId {
    fn from(id: String) -> SnapshotId {
        SnapshotId(id)
    }
}

impl From<&str> for SnapshotId {
    fn from(id: &str) -> SnapshotId {
        SnapshotId(id.to_string())
    }
}

/// An equivalence among full ids, and the records that hold them derive `Eq`; a short id is
/// equal to each full id it starts (never used as a key, so no `Hash`).
impl Eq for SnapshotId {}

/// The full id: what restic's argv and tags take.
impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an operator typed to name a snapshot: at least 4 hex digits of its id. Never equal to
/// an id; it [`matches`](IdPrefix::matches) the ids it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdPrefix(String);

impl IdPrefix {
    /// `text` as a prefix, or `None` when it is no id's (under 4 chars, or not hex).
    pub(crate) fn parse(text: &str) -> Option<IdPrefix> {
        (text.len() >= 4 && text.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| IdPrefix(text.to_string()))
    }

    pub(crate) fn matches(&self, id: &SnapshotId) -> bool {
        id.as_str().starts_with(&self.0)
    }
}

impl fmt::Display for IdPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "3f2a9c1b7e4d5a6f8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a";

    #[test]
    fn serde_is_the_bare_string_both_ways() {
        let id = SnapshotId::from(FULL);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{FULL}\""));
        let back: SnapshotId = serde_json::from_str(&json).unwrap();
        assert_eq!(back.as_str(), FULL);
        let many: Vec<SnapshotId> = serde_json::from_str(&format!("[\"{FULL}\"]")).unwrap();
        assert_eq!(
            serde_json::to_string(&many).unwrap(),
            format!("[\"{FULL}\"]")
        );
    }

    #[test]
    fn full_ids_are_equal_only_when_identical() {
        let other = format!("{}0", &FULL[..63]);
        assert_eq!(SnapshotId::from(FULL), SnapshotId::from(FULL));
        assert_ne!(SnapshotId::from(FULL), SnapshotId::from(other));
    }

    #[test]
    fn a_short_id_of_8_or_more_is_the_full_one_it_starts() {
        assert_eq!(SnapshotId::from(&FULL[..8]), SnapshotId::from(FULL));
        assert_eq!(SnapshotId::from(FULL), SnapshotId::from(&FULL[..8]));
        assert_ne!(SnapshotId::from(&FULL[..7]), SnapshotId::from(FULL));
        assert_ne!(SnapshotId::from("4f2a9c1b"), SnapshotId::from(FULL));
        assert_ne!(SnapshotId::from(""), SnapshotId::from(FULL));
    }

    #[test]
    fn shown_short() {
        assert_eq!(SnapshotId::from(FULL).short(), "3f2a9c1b");
        assert_eq!(SnapshotId::from("abc").short(), "abc");
        assert_eq!(SnapshotId::from(FULL).to_string(), FULL);
    }

    #[test]
    fn a_prefix_is_4_or_more_hex_digits() {
        assert_eq!(IdPrefix::parse("3f2a"), Some(IdPrefix("3f2a".into())));
        assert_eq!(IdPrefix::parse(FULL), Some(IdPrefix(FULL.into())));
        for bad in ["", "3f2", "3f2g", "../x", "3f2a 9"] {
            assert_eq!(IdPrefix::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_prefix_matches_the_ids_it_starts() {
        let ids = [
            SnapshotId::from(FULL),
            SnapshotId::from(format!("3f2a00{}", &FULL[6..])),
            SnapshotId::from(format!("aaaa{}", &FULL[4..])),
        ];
        let matching = |p: &str| -> Vec<&str> {
            let prefix = IdPrefix::parse(p).unwrap();
            ids.iter()
                .filter(|id| prefix.matches(id))
                .map(SnapshotId::as_str)
                .collect()
        };
        assert_eq!(matching("3f2a"), vec![ids[0].as_str(), ids[1].as_str()]);
        assert_eq!(matching("3f2a9c1b"), vec![FULL]);
        assert_eq!(matching("bbbb"), Vec::<&str>::new());
        assert_eq!(matching(FULL), vec![FULL]);
    }
}
