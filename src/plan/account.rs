//! Who runs inside a box: the box's user, the operator's tmux client, and the passwd/group
//! files the box sees in place of the host's.
//!
//! The box user owns the project and the box's agent home. The tmux client of `attach` runs
//! inside the box too, but as a user of its own: box processes can neither signal nor ptrace
//! it, and it reaches the box's socket only through the box group.

use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use crate::plan::delta::Listed;

/// The ids ag-box gives boxes, one per box (uid and gid the same number): above the accounts a
/// distribution makes (1000-59999), the system ranges and the subordinate ranges rootless
/// containers take (from 100000, 65536 each), and below 2^31.
pub(crate) const BOX_IDS: RangeInclusive<u32> = 2_000_000_000..=2_000_065_535;
/// The range's last id is no box's: the group every box user is also in, which the node's
/// shared credential files belong to (mode 0660), so each box reads and refreshes them as when
/// all boxes shared one uid (until a credential broker keeps them out of boxes).
pub(crate) const SHARED_GID: u32 = *BOX_IDS.end();
pub(crate) const SHARED_GROUP: &str = "ag-box-shared";
/// The user of boxes tracked before each box had its own (and of records without ids); such a
/// box gets its own at its next `up`.
pub(crate) const LEGACY_ID: u32 = 1000;
/// The user of `attach`'s tmux client inside a box; never a box's user.
pub(crate) const CLIENT_ID: u32 = 65533;
pub(crate) const BOX_USER: &str = "agent";
pub(crate) const CLIENT_USER: &str = "ag-box-client";

/// Numeric ids: the same numbers on every node, so ownership survives a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ids {
    pub uid: u32,
    pub gid: u32,
}

impl Ids {
    pub(crate) const CLIENT: Ids = Ids {
        uid: CLIENT_ID,
        gid: CLIENT_ID,
    };
    pub(crate) const LEGACY: Ids = Ids {
        uid: LEGACY_ID,
        gid: LEGACY_ID,
    };

    /// Both in ag-box's range: the box's own, no other box's.
    pub(crate) fn own(self) -> bool {
        BOX_IDS.contains(&self.uid) && BOX_IDS.contains(&self.gid)
    }
}

/// A uid or gid a record may hold: never root, never the client's (a legacy box's 1000 too).
pub(crate) fn check_id(key: &str, value: &str) -> Result<u32, String> {
    let n: u32 = value.parse().map_err(|_| {
        format!(
            "{key} takes a number in {}-{}",
            BOX_IDS.start(),
            BOX_IDS.end()
        )
    })?;
    match n {
        0 => Err(format!("{key}=0 would run the box as root")),
        CLIENT_ID => Err(format!(
            "{key}={CLIENT_ID} is reserved for ag-box's tmux client; pick another id"
        )),
        n => Ok(n),
    }
}

/// A uid or gid `set` may give a box: one of ag-box's range.
pub(crate) fn check_box_id(key: &str, value: &str) -> Result<u32, String> {
    let n = check_id(key, value)?;
    if n == SHARED_GID {
        Err(format!(
            "{key}={n} is the group of the node's shared credentials; pick another id"
        ))
    } else if BOX_IDS.contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{key} takes a number in ag-box's range {}-{} (never an account of a node)",
            BOX_IDS.start(),
            BOX_IDS.end()
        ))
    }
}

/// The ids for box `name`: the first free one from a point its name picks (so boxes tracked
/// at once on two nodes rarely meet), held by no record (`taken`) and no account of this node.
/// None when the range is full.
pub(crate) fn allocate(
    name: &str,
    taken: &BTreeSet<u32>,
    node_has: impl Fn(u32) -> bool,
) -> Option<Ids> {
    // Every id of the range but the shared group's.
    let len = BOX_IDS.end() - BOX_IDS.start();
    // FNV-1a: a spread, not a secret.
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (0..len)
        .map(|i| BOX_IDS.start() + (hash.wrapping_add(i)) % len)
        .find(|id| !taken.contains(id) && !node_has(*id))
        .map(|id| Ids { uid: id, gid: id })
}

/// `/etc/passwd` as the box sees it: root, the box user, the client, nobody.
pub(crate) fn passwd(ids: Ids, home: &Path) -> String {
    format!(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n\
         {BOX_USER}:x:{}:{}:ag-box box user:{}:/bin/bash\n\
         {CLIENT_USER}:x:{CLIENT_ID}:{CLIENT_ID}:ag-box tmux client:/nonexistent:/usr/sbin/nologin\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        ids.uid,
        ids.gid,
        home.display()
    )
}

/// `/etc/group` as the box sees it; the client is a member of the box group (the socket's),
/// the box user of the shared one.
pub(crate) fn group(ids: Ids) -> String {
    format!(
        "root:x:0:\n\
         {BOX_USER}:x:{}:{CLIENT_USER}\n\
         {CLIENT_USER}:x:{CLIENT_ID}:\n\
         {SHARED_GROUP}:x:{SHARED_GID}:{BOX_USER}\n\
         nogroup:x:65534:\n",
        ids.gid
    )
}

/// The entries at or below `roots` of a snapshot listing that the box's user could not have made:
/// owned by another user, or by a group the box user is not in. Only a snapshot that read the
/// box while it ran can hold them (a dir swapped for a link mid-read steers restic elsewhere).
pub(crate) fn foreign_owned(listed: &[Listed], roots: &[PathBuf], ids: Ids) -> Vec<PathBuf> {
    listed
        .iter()
        .map(|l| &l.attrs)
        .filter(|a| roots.iter().any(|r| a.path.starts_with(r)))
        .filter(|a| a.uid != ids.uid || (a.gid != ids.gid && a.gid != SHARED_GID))
        .map(|a| a.path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::delta::DirAttrs;
    use pretty_assertions::assert_eq;

    #[test]
    fn foreign_owners_below_the_roots_are_named() {
        let ids = Ids {
            uid: 2_000_000_007,
            gid: 2_000_000_007,
        };
        let entry = |path: &str, uid, gid| Listed {
            attrs: DirAttrs {
                path: PathBuf::from(path),
                mode: 0o644,
                uid,
                gid,
            },
            dir: false,
        };
        let listed = [
            entry("/srv", 0, 0),
            entry("/srv/p", ids.uid, ids.gid),
            entry("/srv/p/own", ids.uid, ids.gid),
            entry("/srv/p/shared-group", ids.uid, SHARED_GID),
            entry("/srv/p/other-box", 2_000_000_008, 2_000_000_008),
            entry("/srv/p/host-secret", 0, 0),
            entry("/srv/p/odd-group", ids.uid, 0),
            entry("/srv/pp/beside", 0, 0),
            entry("/home/h", ids.uid, ids.gid),
        ];
        assert_eq!(
            foreign_owned(
                &listed,
                &[PathBuf::from("/srv/p"), PathBuf::from("/home/h")],
                ids
            ),
            ["/srv/p/other-box", "/srv/p/host-secret", "/srv/p/odd-group"]
                .map(PathBuf::from)
                .to_vec()
        );
    }

    #[test]
    fn passwd_and_group_name_the_box_user_and_the_client() {
        let ids = Ids {
            uid: 1500,
            gid: 1600,
        };
        assert_eq!(
            passwd(ids, Path::new("/root")),
            "root:x:0:0:root:/root:/usr/sbin/nologin\n\
             agent:x:1500:1600:ag-box box user:/root:/bin/bash\n\
             ag-box-client:x:65533:65533:ag-box tmux client:/nonexistent:/usr/sbin/nologin\n\
             nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        );
        assert_eq!(
            group(ids),
            "root:x:0:\nagent:x:1600:ag-box-client\nag-box-client:x:65533:\n\
             ag-box-shared:x:2000065535:agent\nnogroup:x:65534:\n"
        );
    }

    #[test]
    fn ids_are_never_root_or_the_client_and_set_keeps_to_the_range() {
        assert_eq!(check_id("uid", "1001"), Ok(1001));
        for bad in ["0", "65533", "-1", "x", "", "4294967296"] {
            assert!(check_id("uid", bad).is_err(), "{bad}");
        }
        assert_eq!(check_box_id("uid", "2000000007"), Ok(2_000_000_007));
        assert_eq!(
            check_box_id("gid", "1000"),
            Err("gid takes a number in ag-box's range 2000000000-2000065535 (never an account of a node)".into())
        );
        assert!(check_box_id("uid", "4294967295").is_err());
        assert!(
            check_box_id("gid", "2000065535").is_err(),
            "the shared group"
        );
        assert!(
            Ids {
                uid: 2_000_000_000,
                gid: 2_000_065_535
            }
            .own()
        );
        assert!(!Ids::LEGACY.own());
    }

    #[test]
    fn each_box_gets_a_free_id_of_its_own() {
        let none = BTreeSet::new();
        let a = allocate("demo", &none, |_| false).unwrap();
        assert!(a.own() && a.uid == a.gid, "{a:?}");
        assert_eq!(
            allocate("demo", &none, |_| false),
            Some(a),
            "the same name, the same start"
        );
        assert_ne!(allocate("other", &none, |_| false), Some(a));
        // Held by a record, or an account of this node: the next one.
        let taken: BTreeSet<u32> = [a.uid].into();
        let next = allocate("demo", &taken, |_| false).unwrap();
        let after = if a.uid == *BOX_IDS.end() {
            *BOX_IDS.start()
        } else {
            a.uid + 1
        };
        assert_eq!(next.uid, after);
        assert_eq!(allocate("demo", &none, |id| id == a.uid), Some(next));
        assert_eq!(allocate("demo", &none, |_| true), None);
        let all_but_one: BTreeSet<u32> = (*BOX_IDS.start()..SHARED_GID - 1).collect();
        assert_eq!(
            allocate("demo", &all_but_one, |_| false).map(|i| i.uid),
            Some(SHARED_GID - 1),
            "never the shared group's id"
        );
    }
}
