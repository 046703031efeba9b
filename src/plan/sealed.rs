//! A park's changes as one sealed object (`changes/<box>/<id>.<to>` in the bucket,
//! `$BOX_STATE_DIR/changes/` with the local store) instead of a restic snapshot: restic's
//! backup of a few megabytes costs a third of a second before it reads a byte (it opens and
//! locks the repository, and its lock alone waits 0.2 s), more than moving the change. The
//! object is the changes archive (`sys::changes_archive`) behind a header that names its box
//! and id, sealed under the changes repository's master key as restic seals its own files
//! (`restic_key::seal_under`), under keys of ag-box's own derived from it: the bucket learns
//! the archive's size and no name in it, and an object altered, forged, or moved to another
//! name is refused.

use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};

use super::delta::QUICK_TO;
use super::restic::{CHANGES_KEY, SnapshotInfo, changes_tag};
use super::snapshot_id::SnapshotId;

/// Archives of more bytes than this go to restic: an object is held in memory whole as it is
/// sealed and opened (a park at 200,000 files peaks at 153 MiB with 20 MB of changes, and
/// memory is to stay under 200), and past some tens of megabytes restic's fixed cost matters
/// little. 1% of a 200,000-file tree of 10 KB files is 20 MB.
pub(crate) const MAX_ARCHIVE: usize = 32 << 20;

/// The most an object may be: the archive, its header, the IV and the MAC.
pub(crate) const MAX_OBJECT: u64 = MAX_ARCHIVE as u64 + 4096;

/// What the keys that seal changes are derived for (`restic_key::subkeys`).
pub(crate) const KEY_LABEL: &str = "ag-box sealed changes 1";

/// Its first line.
const MAGIC: &[u8] = b"ag-box sealed changes 1\n";

/// The second line, JSON: what the object must be to serve where it was found.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    #[serde(rename = "box")]
    name: String,
    id: String,
}

/// An object's name under its box's dir: its id (64 hex chars, as restic's) and the snapshot
/// its changes lead to (`delta::QUICK_TO` for a quick park's).
pub(crate) fn file_name(id: &SnapshotId, to: &SnapshotId) -> String {
    format!("{}.{}", id.as_str(), to.as_str())
}

/// What [`file_name`] made; None for any other name.
pub(crate) fn parse_file_name(file: &str) -> Option<(SnapshotId, SnapshotId)> {
    let (id, to) = file.split_once('.')?;
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id) && (hex(to) || to == QUICK_TO)).then(|| (id.into(), to.into()))
}

/// The listing entry of box `name`'s object `file`, written at `time` (RFC 3339), as restic
/// would list a changes snapshot: tagged with its box and what it leads to.
pub(crate) fn info(name: &str, file: &str, time: String) -> Option<SnapshotInfo> {
    let (id, to) = parse_file_name(file)?;
    Some(SnapshotInfo {
        id,
        time,
        tags: vec![changes_tag(name), format!("to:{}", to.as_str())],
        summary: None,
        paths: Vec::new(),
    })
}

/// What goes before the archive in box `name`'s object `id`.
pub(crate) fn header(name: &str, id: &SnapshotId) -> Result<Vec<u8>> {
    let mut out = MAGIC.to_vec();
    serde_json::to_writer(
        &mut out,
        &Header {
            name: name.into(),
            id: id.as_str().into(),
        },
    )?;
    out.push(b'\n');
    Ok(out)
}

/// The archive in an opened object, which must be box `name`'s object `id`.
pub(crate) fn archive<'a>(opened: &'a [u8], name: &str, id: &SnapshotId) -> Result<&'a [u8]> {
    let rest = opened
        .strip_prefix(MAGIC)
        .context("it is no sealed changes object of this version")?;
    let end = rest
        .iter()
        .position(|b| *b == b'\n')
        .context("its header is cut short")?;
    let header: Header = serde_json::from_slice(&rest[..end]).context("reading its header")?;
    // Sealed by a node, the header is no box's words; its id is shown short all the same.
    ensure!(
        header.name == name,
        "it holds box '{}''s changes, not box '{name}''s",
        header.name
    );
    let sealed_id = SnapshotId::from(header.id);
    ensure!(
        sealed_id.as_str() == id.as_str(),
        "it holds {CHANGES_KEY} {}, not {}",
        sealed_id.short(),
        id.short()
    );
    Ok(&rest[end + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const TO: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    #[test]
    fn names_say_the_id_and_what_the_changes_lead_to() {
        let quick = file_name(&ID.into(), &QUICK_TO.into());
        assert_eq!(quick, format!("{ID}.quick-park"));
        assert_eq!(
            parse_file_name(&quick).map(|(i, t)| (i.as_str().to_string(), t.as_str().to_string())),
            Some((ID.to_string(), QUICK_TO.to_string()))
        );
        let whole = file_name(&ID.into(), &TO.into());
        assert!(parse_file_name(&whole).is_some());
        for other in [
            "",
            ID,
            "x.quick-park",
            &format!("{ID}."),
            &format!("{ID}.{TO}.x"),
            &format!("{ID}.other"),
            &format!("{}.{TO}", &ID[1..]),
        ] {
            assert!(parse_file_name(other).is_none(), "{other}");
        }
    }

    #[test]
    fn listed_as_restic_lists_a_changes_snapshot() {
        let i = info("web", &file_name(&ID.into(), &TO.into()), "t".into()).unwrap();
        assert_eq!(
            (i.id.as_str(), i.time.as_str(), i.tags.clone(), i.tag("to")),
            (
                ID,
                "t",
                vec!["changes:web".to_string(), format!("to:{TO}")],
                Some(TO)
            )
        );
        assert!(info("web", "notes.txt", "t".into()).is_none());
    }

    #[test]
    fn the_archive_serves_only_the_box_and_id_it_was_sealed_for() {
        let mut object = header("web", &ID.into()).unwrap();
        assert_eq!(
            String::from_utf8(object.clone()).unwrap(),
            format!("ag-box sealed changes 1\n{{\"box\":\"web\",\"id\":\"{ID}\"}}\n")
        );
        object.extend_from_slice(b"tar\nbytes");
        assert_eq!(archive(&object, "web", &ID.into()).unwrap(), b"tar\nbytes");
        assert_eq!(
            archive(&object, "api", &ID.into()).unwrap_err().to_string(),
            "it holds box 'web''s changes, not box 'api''s"
        );
        assert_eq!(
            archive(&object, "web", &TO.into()).unwrap_err().to_string(),
            "it holds changes 01234567, not fedcba98"
        );
        assert!(archive(b"ag-box sealed changes 2\n{}\n", "web", &ID.into()).is_err());
        assert!(archive(&object[..30], "web", &ID.into()).is_err());
    }
}
