//! `history <name> [--json] [--events]`: the box's snapshots, newest first, and with `--events`
//! who did what to it, when and where.

use anyhow::Result;
use serde::Serialize;

use super::{Ctx, JSON_SCHEMA_VERSION, require_tools};
use crate::plan::agent_home;
use crate::plan::cost::Intervals;
use crate::plan::history::{self, Entry, SnapshotRow};
use crate::plan::names::BoxName;
use crate::plan::restic::box_tag;
use crate::plan::snapshot_id::SnapshotId;
use crate::sys::transcripts;

/// The tokens of each span between snapshots, where this node holds the box's agent home (the
/// transcripts as they stand here: a span whose lines are gone counts what is left).
fn count_tokens(ctx: &Ctx, name: &BoxName, entries: &mut [Entry]) {
    let root = agent_home::root_for(&ctx.config.state_dir, name);
    if !root.is_dir() {
        return;
    }
    let time = |s: &SnapshotRow| humantime::parse_rfc3339_weak(&s.time).ok();
    let ends: Vec<_> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Snapshot(s) => time(s),
            Entry::Event(_) => None,
        })
        .collect();
    let mut spans = Intervals::new(ends);
    match transcripts::read(name, &root, transcripts::LIMITS, &mut |e| spans.add(&e)) {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!("{w}");
            }
        }
        Err(e) => {
            tracing::warn!("box '{name}': its transcripts were not read: {e:#}");
            return;
        }
    }
    for e in entries {
        if let Entry::Snapshot(s) = e {
            s.tokens = time(s).and_then(|t| spans.tokens_until(t));
        }
    }
}

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
    count_tokens(&ctx, name, &mut entries);
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
        "{:<31} {:<10} {:>5} {:<9} {:>7} {:>10} {:>10}  WHAT",
        "TIME",
        "NODE",
        "EPOCH",
        "SNAPSHOT",
        "FILES",
        "ADDED",
        "TOKENS"
    );
    let dash = || "-".to_string();
    for e in &entries {
        match e {
            Entry::Snapshot(s) => out!(
                "{:<31} {:<10} {:>5} {:<9} {:>7} {:>10} {:>10}  {}{}",
                s.time,
                s.node.as_deref().unwrap_or("-"),
                s.epoch.map_or_else(dash, |e| e.to_string()),
                s.id.short(),
                s.files_added.map_or_else(dash, |f| f.to_string()),
                s.bytes_added.map_or_else(dash, history::size),
                s.tokens.map_or_else(dash, |t| t.to_string()),
                if s.fork { "fork snapshot" } else { "snapshot" },
                if s.latest {
                    " (latest: what 'up' restores)"
                } else {
                    ""
                }
            ),
            Entry::Event(ev) => out!(
                "{:<31} {:<10} {:>5} {:<9} {:>7} {:>10} {:>10}  {} by {}{}",
                ev.time,
                ev.node,
                ev.epoch.map_or_else(dash, |e| e.to_string()),
                ev.snapshot.as_ref().map_or("-", SnapshotId::short),
                "",
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
