//! Lifecycle events of a box (track, up, park, fork, set, drop, rollback ...): one small object
//! each, beside the records (`events/<name>/<key>.json`), written without conditions. An event
//! is the operator's history, never a lease's truth: a lost one costs a line of `history`, so a
//! failed write is logged and the step goes on.

use std::time::SystemTime;

use super::EventLog;
use super::lease::timestamp;
pub(crate) use crate::plan::event::Event;
use crate::plan::snapshot_id::SnapshotId;

/// Events kept per box by `prune` (the newest).
pub(crate) const KEEP: usize = 500;

/// `user@address` from the login user and `$SSH_CONNECTION` ("client port server port").
pub(crate) fn operator_from(user: Option<&str>, ssh_connection: Option<&str>) -> String {
    let user = user.filter(|u| !u.is_empty()).unwrap_or("unknown");
    match ssh_connection.and_then(|c| c.split_whitespace().next()) {
        Some(addr) => format!("{user}@{addr}"),
        None => user.to_string(),
    }
}

fn operator() -> String {
    let user = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        });
    operator_from(
        user.as_deref(),
        std::env::var("SSH_CONNECTION").ok().as_deref(),
    )
}

/// What one step adds to a box's history.
#[derive(Default)]
pub(crate) struct Step<'a> {
    pub verb: &'a str,
    pub epoch: Option<u64>,
    pub snapshot: Option<&'a SnapshotId>,
    pub detail: Option<String>,
    /// A snapshot's (files, bytes) added.
    pub added: Option<(u64, u64)>,
}

/// Append an event for box `name`; a failure is a warning, never the step's.
pub(crate) fn record(store: &dyn EventLog, node: &str, name: &str, at: SystemTime, step: Step) {
    let event = Event {
        time: timestamp_nanos(at),
        node: node.to_string(),
        operator: operator(),
        verb: step.verb.to_string(),
        epoch: step.epoch,
        snapshot: step.snapshot.cloned(),
        detail: step.detail,
        files_added: step.added.map(|a| a.0),
        bytes_added: step.added.map(|a| a.1),
    };
    if let Err(e) = store.put_event(name, &event) {
        tracing::warn!(
            "box '{name}': the '{}' event was not recorded (history will miss it): {e:#}",
            step.verb
        );
    }
}

/// RFC 3339 with nanoseconds, so that events of one second keep their order.
fn timestamp_nanos(t: SystemTime) -> String {
    let nanos = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let whole = timestamp(t);
    match whole.strip_suffix('Z') {
        Some(s) => format!("{s}.{nanos:09}Z"),
        None => whole,
    }
}

/// The keys to delete so that the newest `keep` remain (keys sort by time).
pub(crate) fn beyond(mut keys: Vec<String>, keep: usize) -> Vec<String> {
    keys.sort();
    let extra = keys.len().saturating_sub(keep);
    keys.truncate(extra);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn keys_sort_by_time_and_name_node_and_verb() {
        let e = Event {
            time: "2026-11-30T10:00:00.000000001Z".into(),
            node: "nodeA".into(),
            operator: "root".into(),
            verb: "up".into(),
            epoch: Some(3),
            snapshot: None,
            detail: None,
            files_added: None,
            bytes_added: None,
        };
        assert_eq!(e.key(), "20261130T100000.000000001Z-nodeA-up");
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::new(86_400, 5);
        assert_eq!(timestamp_nanos(t), "1970-01-02T00:00:00.000000005Z");
    }

    #[test]
    fn operators_name_the_user_and_the_ssh_client() {
        assert_eq!(
            operator_from(Some("ana"), Some("10.0.0.9 51234 10.0.0.1 22")),
            "ana@10.0.0.9"
        );
        assert_eq!(operator_from(Some("root"), None), "root");
        assert_eq!(operator_from(None, None), "unknown");
    }

    #[test]
    fn the_oldest_beyond_the_bound_go() {
        let keys = ["3", "1", "4", "2"].map(String::from).to_vec();
        assert_eq!(beyond(keys.clone(), 2), ["1", "2"]);
        assert_eq!(beyond(keys, 10), Vec::<String>::new());
    }
}
