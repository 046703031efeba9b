//! A box's history: its snapshots (newest first) from restic's listing, with what each added
//! (restic 0.17+ keeps it in the snapshot; else the box's `snapshot` events recorded it), and
//! optionally its lifecycle events interleaved by time.

use serde::Serialize;

use super::event::Event;
use crate::plan::restic::{FORK_TAG, SnapshotInfo};
use crate::plan::snapshot_id::SnapshotId;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SnapshotRow {
    pub id: SnapshotId,
    pub time: String,
    pub node: Option<String>,
    pub epoch: Option<u64>,
    pub fork: bool,
    pub files_added: Option<u64>,
    pub bytes_added: Option<u64>,
    /// The snapshot the box's record points to (what the next `up` restores).
    pub latest: bool,
    /// The agents' tokens written since the snapshot before it, up to it (`plan::cost`); None
    /// where this node holds no agent home of the box.
    pub tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Entry {
    Snapshot(SnapshotRow),
    Event(Event),
}

impl Entry {
    fn time(&self) -> &str {
        match self {
            Entry::Snapshot(s) => &s.time,
            Entry::Event(e) => &e.time,
        }
    }
}

/// Newest first; events (when given) interleaved by time.
pub(crate) fn entries(
    snapshots: &[SnapshotInfo],
    events: &[Event],
    latest: Option<&SnapshotId>,
) -> Vec<Entry> {
    let recorded = |id: &SnapshotId| {
        events
            .iter()
            .find(|e| e.files_added.is_some() && e.snapshot.as_ref() == Some(id))
    };
    let mut out: Vec<Entry> = snapshots
        .iter()
        .map(|s| {
            let added = match (&s.summary, recorded(&s.id)) {
                (Some(sum), _) => (
                    Some(sum.files_new + sum.files_changed),
                    Some(sum.data_added),
                ),
                (None, Some(e)) => (e.files_added, e.bytes_added),
                (None, None) => (None, None),
            };
            Entry::Snapshot(SnapshotRow {
                id: s.id.clone(),
                time: s.time.clone(),
                node: s.tag("node").map(str::to_string),
                epoch: s.tag("epoch").and_then(|e| e.parse().ok()),
                fork: s.tags.iter().any(|t| t == FORK_TAG),
                files_added: added.0,
                bytes_added: added.1,
                latest: latest == Some(&s.id),
                tokens: None,
            })
        })
        .collect();
    out.extend(events.iter().cloned().map(Entry::Event));
    // RFC 3339 in UTC (restic runs with TZ=UTC) sorts as text once the fraction is padded.
    out.sort_by_key(|e| std::cmp::Reverse(sortable(e.time())));
    out
}

/// `2026-11-30T10:00:00Z` and `2026-11-30T10:00:00.5Z` as comparable text (nanoseconds).
fn sortable(time: &str) -> String {
    let t = time.trim_end_matches('Z');
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    let whole = whole.get(..19).unwrap_or(whole);
    format!("{whole}.{frac:0<9}")
}

/// `1.5 MiB`, `340 B`.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    // Shown to one decimal.
    #[allow(clippy::cast_precision_loss)]
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::restic::SnapshotSummary;
    use pretty_assertions::assert_eq;

    fn snap(id: &str, time: &str, tags: &[&str], summary: Option<(u64, u64)>) -> SnapshotInfo {
        SnapshotInfo {
            id: id.into(),
            time: time.into(),
            tags: tags.iter().map(std::string::ToString::to_string).collect(),
            summary: summary.map(|(files_new, data_added)| SnapshotSummary {
                files_new,
                files_changed: 1,
                data_added,
            }),
            paths: vec![],
        }
    }

    fn event(time: &str, verb: &str, snapshot: Option<&str>, added: Option<(u64, u64)>) -> Event {
        Event {
            time: time.into(),
            node: "nodeA".into(),
            operator: "root".into(),
            verb: verb.into(),
            epoch: Some(2),
            snapshot: snapshot.map(SnapshotId::from),
            detail: None,
            files_added: added.map(|a| a.0),
            bytes_added: added.map(|a| a.1),
        }
    }

    #[test]
    fn snapshots_newest_first_with_what_they_added_and_events_between() {
        let snaps = [
            snap(
                "s1000000ffff",
                "2026-11-30T09:00:00.25Z",
                &["box:x", "node:nodeA", "epoch:1"],
                None,
            ),
            snap(
                "s2",
                "2026-11-30T10:00:00Z",
                &["box:x", "node:nodeB", "epoch:2", "fork"],
                Some((3, 4096)),
            ),
        ];
        // restic before 0.17 names a backup by its short id.
        let park = event(
            "2026-11-30T09:00:01.000000001Z",
            "park",
            Some("s1000000"),
            None,
        );
        let taken = event(
            "2026-11-30T09:00:00.5Z",
            "snapshot",
            Some("s1000000"),
            Some((7, 900)),
        );
        let rows = entries(
            &snaps,
            &[park.clone(), taken.clone()],
            Some(&"s1000000".into()),
        );
        assert_eq!(
            rows,
            [
                Entry::Snapshot(SnapshotRow {
                    id: "s2".into(),
                    time: "2026-11-30T10:00:00Z".into(),
                    node: Some("nodeB".into()),
                    epoch: Some(2),
                    fork: true,
                    files_added: Some(4),
                    bytes_added: Some(4096),
                    latest: false,
                    tokens: None,
                }),
                Entry::Event(park),
                Entry::Event(taken),
                Entry::Snapshot(SnapshotRow {
                    id: "s1000000ffff".into(),
                    time: "2026-11-30T09:00:00.25Z".into(),
                    node: Some("nodeA".into()),
                    epoch: Some(1),
                    fork: false,
                    files_added: Some(7),
                    bytes_added: Some(900),
                    latest: true,
                    tokens: None,
                }),
            ]
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(
            [0, 1023, 1536, 5 * 1024 * 1024].map(size),
            ["0 B", "1023 B", "1.5 KiB", "5.0 MiB"]
        );
    }
}
