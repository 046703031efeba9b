//! Who runs inside a box: the box's user, the operator's tmux client, and the passwd/group
//! files the box sees in place of the host's.
//!
//! The box user owns the project and the box's agent home. The tmux client of `attach` runs
//! inside the box too, but as a user of its own: box processes can neither signal nor ptrace
//! it, and it reaches the box's socket only through the box group.

use std::path::Path;

use crate::error::UserError;

/// The box's user when neither the record nor `BOX_UID`/`BOX_GID` say otherwise.
pub const DEFAULT_ID: u32 = 1000;
/// The user of `attach`'s tmux client inside a box; never a box's user.
pub const CLIENT_ID: u32 = 65533;
pub const BOX_USER: &str = "agent";
pub const CLIENT_USER: &str = "ag-box-client";

/// Numeric ids: the same numbers on every node, so ownership survives a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

impl Ids {
    pub const CLIENT: Ids = Ids {
        uid: CLIENT_ID,
        gid: CLIENT_ID,
    };
}

/// A uid or gid a box may run as: never root, never the client's.
pub fn check_id(key: &str, value: &str) -> Result<u32, String> {
    let n: u32 = value
        .parse()
        .map_err(|_| format!("{key} takes a number, e.g. {key}=1000"))?;
    match n {
        0 => Err(format!(
            "{key}=0 would run the box as root; pick a non-root id such as 1000"
        )),
        CLIENT_ID => Err(format!(
            "{key}={CLIENT_ID} is reserved for ag-box's tmux client; pick another id"
        )),
        n => Ok(n),
    }
}

pub fn parse_id(key: &str, value: &str) -> Result<u32, UserError> {
    check_id(key, value)
        .map_err(|hint| UserError::usage(format!("config key {key}='{value}' is invalid"), hint))
}

/// `/etc/passwd` as the box sees it: root, the box user, the client, nobody.
pub fn passwd(ids: Ids, home: &Path) -> String {
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

/// `/etc/group` as the box sees it; the client is a member of the box group (the socket's).
pub fn group(ids: Ids) -> String {
    format!(
        "root:x:0:\n\
         {BOX_USER}:x:{}:{CLIENT_USER}\n\
         {CLIENT_USER}:x:{CLIENT_ID}:\n\
         nogroup:x:65534:\n",
        ids.gid
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

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
            "root:x:0:\nagent:x:1600:ag-box-client\nag-box-client:x:65533:\nnogroup:x:65534:\n"
        );
    }

    #[test]
    fn ids_are_never_root_or_the_client() {
        assert_eq!(check_id("uid", "1001"), Ok(1001));
        for bad in ["0", "65533", "-1", "x", ""] {
            assert!(check_id("uid", bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_id("BOX_UID", "0").unwrap_err().message,
            "config key BOX_UID='0' is invalid"
        );
    }
}
