//! `history <name> [--json] [--events]`: the box's snapshots, newest first, and with `--events`
//! who did what to it, when and where.

use anyhow::Result;
use serde::Serialize;

use super::{Ctx, JSON_SCHEMA_VERSION, require_tools};
use crate::plan::history::{self, Entry};
use crate::plan::names::BoxName;
use crate::plan::restic::box_tag;
use crate::plan::snapshot_id::SnapshotId;

#[derive(Serialize)]
struct Report<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    latest: Option<&'a SnapshotId>,
    entries: &'a [Entry],
}

pub(crate) fn run(name: &BoxName, json: bool, with_events: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["restic"])?;
    let restic = ctx.restic()?;
    restic.require_repo()?;
    let snapshots = restic.snapshots(Some(&box_tag(name)))?;
    let events: Vec<_> = ctx
        .store
        .events(name)?
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    let latest = meta.last_snapshot.as_ref().map(|s| &s.id);
    let mut entries = history::entries(&snapshots, &events, latest);
    if !with_events {
        entries.retain(|e| matches!(e, Entry::Snapshot(_)));
    }
    if json {
        let report = Report {
            schema_version: JSON_SCHEMA_VERSION,
            name,
            latest,
            entries: &entries,
        };
        let mut v = serde_json::to_value(&report)?;
        if let Some(entries) = v
            .get_mut("entries")
            .and_then(serde_json::Value::as_array_mut)
        {
            for e in entries.iter_mut().filter(|e| e["kind"] == "event") {
                *e = crate::plan::json::event(e.take());
            }
        }
        super::print_json(&v)?;
        return Ok(());
    }
    if entries.is_empty() {
        say!("box '{name}' has no snapshots yet");
        return Ok(());
    }
    out!(
        "{:<31} {:<10} {:>5} {:<9} {:>7} {:>10}  WHAT",
        "TIME",
        "NODE",
        "EPOCH",
        "SNAPSHOT",
        "FILES",
        "ADDED"
    );
    let dash = || "-".to_string();
    for e in &entries {
        match e {
            Entry::Snapshot(s) => out!(
                "{:<31} {:<10} {:>5} {:<9} {:>7} {:>10}  {}{}",
                s.time,
                s.node.as_deref().unwrap_or("-"),
                s.epoch.map_or_else(dash, |e| e.to_string()),
                s.id.short(),
                s.files_added.map_or_else(dash, |f| f.to_string()),
                s.bytes_added.map_or_else(dash, history::size),
                if s.fork { "fork snapshot" } else { "snapshot" },
                if s.latest {
                    " (latest: what 'up' restores)"
                } else {
                    ""
                }
            ),
            Entry::Event(ev) => out!(
                "{:<31} {:<10} {:>5} {:<9} {:>7} {:>10}  {} by {}{}",
                ev.time,
                ev.node,
                ev.epoch.map_or_else(dash, |e| e.to_string()),
                ev.snapshot.as_ref().map_or("-", SnapshotId::short),
                "",
                "",
                ev.verb,
                ev.operator,
                ev.detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
        }
    }
    Ok(())
}
