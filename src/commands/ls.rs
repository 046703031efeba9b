//! `ls [--json]`: every box, who holds it, and whether it runs here.

use anyhow::Result;
use serde::Serialize;

use std::time::{Duration, UNIX_EPOCH};

use super::{Ctx, JSON_SCHEMA_VERSION};
use crate::plan::attention::{AgentState, State};
use crate::plan::egress::Mode;
use crate::plan::text;
use crate::store::lease::{self, timestamp};
use crate::store::meta::Meta;

#[derive(Serialize)]
struct Row {
    #[serde(flatten)]
    meta: Meta,
    running_here: bool,
    lease_stale: bool,
    /// The mode in force (the record's, else this node's `BOX_NETWORK`).
    network_mode: Mode,
    /// What its agent is doing: here, from its state file; elsewhere, as its node published.
    agent_state: Option<Shown>,
}

/// An agent state as `ls --json` shows it.
#[derive(Serialize)]
struct Shown {
    agent: String,
    state: State,
    since: String,
    detail: Option<String>,
}

impl Shown {
    fn of(s: &AgentState) -> Shown {
        Shown {
            agent: s.agent.clone(),
            state: s.state,
            since: timestamp(UNIX_EPOCH + Duration::from_secs(s.since)),
            detail: s.detail.clone(),
        }
    }
}

#[derive(Serialize)]
struct Listing<'a> {
    schema_version: u32,
    boxes: &'a [Row],
}

pub(crate) fn run(waiting: bool, json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let now = ctx.now();
    let running = ctx.running_here();
    let rows: Vec<Row> = ctx
        .store
        .list()?
        .into_iter()
        .map(|meta| {
            let here = running.contains(&meta.name);
            let state = super::turn::state_seen(&ctx, &meta, here);
            Row {
                running_here: here,
                lease_stale: meta.lease.as_ref().is_some_and(|l| lease::is_stale(l, now)),
                network_mode: if here {
                    ctx.spec_in_force(&meta).egress.mode
                } else {
                    meta.network(ctx.config.network)
                },
                agent_state: state.as_ref().map(Shown::of),
                meta,
            }
        })
        .filter(|r| {
            !waiting
                || r.agent_state
                    .as_ref()
                    .is_some_and(|s| s.state != State::Working)
        })
        .collect();
    if json {
        let listing = Listing {
            schema_version: JSON_SCHEMA_VERSION,
            boxes: &rows,
        };
        let mut v = serde_json::to_value(&listing)?;
        if let Some(boxes) = v.get_mut("boxes").and_then(serde_json::Value::as_array_mut) {
            for b in boxes.iter_mut() {
                // What the record says of its agent is shown as it stands (`agent_state`).
                if let Some(fields) = b.as_object_mut() {
                    fields.remove("attention");
                }
                *b = crate::plan::json::record(b.take());
            }
        }
        super::print_json(&v)?;
        return Ok(());
    }
    print_table(&rows, waiting, now);
    Ok(())
}

fn print_table(rows: &[Row], waiting: bool, now: std::time::SystemTime) {
    if rows.is_empty() {
        if waiting {
            say!("no box waits for you");
        } else {
            say!("no boxes yet; start with 'ag-box track <name> [path]'");
        }
        return;
    }
    let mut table = vec![
        [
            "NAME", "HOLDER", "RENEWED", "SNAPSHOT", "HERE", "NETWORK", "AGENT", "STATE", "SINCE",
            "FORK OF", "PATH",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for r in rows {
        let m = &r.meta;
        let holder = m.lease.as_ref().map_or("-".to_string(), |l| {
            format!("{}{}", l.node, if r.lease_stale { "(stale)" } else { "" })
        });
        let renewed = m.lease.as_ref().map_or("-", |l| l.renewed_at.as_str());
        let snap = m.last_snapshot.as_ref().map_or("-", |s| s.id.short());
        let here = if r.running_here { "running" } else { "-" };
        table.push(vec![
            m.name.clone(),
            holder,
            renewed.to_string(),
            snap.to_string(),
            here.to_string(),
            network_label(r.network_mode).to_string(),
            m.agent.as_deref().unwrap_or("-").to_string(),
            r.agent_state
                .as_ref()
                .map_or("-", |s| s.state.label())
                .to_string(),
            r.agent_state.as_ref().map_or("-".to_string(), |s| {
                let since = humantime::parse_rfc3339(&s.since)
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(now_secs, |d| d.as_secs());
                text::age(now_secs.saturating_sub(since))
            }),
            m.forked_from
                .as_ref()
                .map_or("-".to_string(), |f| f.parent.clone()),
            m.path.display().to_string(),
        ]);
    }
    for line in text::table(&table) {
        out!("{line}");
    }
}

/// How `ls` and `status` show a mode: `host` is said to be unguarded.
pub(crate) fn network_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Host => "host (unguarded)",
        m => m.label(),
    }
}
