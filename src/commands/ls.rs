//! `ls [--json]`: every box, who holds it, and whether it runs here.

use anyhow::Result;
use serde::Serialize;

use super::{Ctx, JSON_SCHEMA_VERSION};
use crate::plan::egress::Mode;
use crate::plan::text;
use crate::store::lease;
use crate::store::meta::Meta;

#[derive(Serialize)]
struct Row {
    #[serde(flatten)]
    meta: Meta,
    running_here: bool,
    lease_stale: bool,
    /// The mode in force (the record's, else this node's `BOX_NETWORK`).
    network_mode: Mode,
}

#[derive(Serialize)]
struct Listing<'a> {
    schema_version: u32,
    boxes: &'a [Row],
}

pub(crate) fn run(json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let now = ctx.now();
    let running = ctx.running_here();
    let rows: Vec<Row> = ctx
        .store
        .list()?
        .into_iter()
        .map(|meta| Row {
            running_here: running.contains(&meta.name),
            lease_stale: meta.lease.as_ref().is_some_and(|l| lease::is_stale(l, now)),
            network_mode: if running.contains(&meta.name) {
                ctx.spec_in_force(&meta).egress.mode
            } else {
                meta.network(ctx.config.network)
            },
            meta,
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
                *b = crate::plan::json::record(b.take());
            }
        }
        super::print_json(&v)?;
        return Ok(());
    }
    if rows.is_empty() {
        say!("no boxes yet; start with 'ag-box track <name> [path]'");
        return Ok(());
    }
    let mut table = vec![
        [
            "NAME", "HOLDER", "RENEWED", "SNAPSHOT", "HERE", "NETWORK", "AGENT", "PATH",
        ]
        .map(String::from)
        .to_vec(),
    ];
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
            m.path.display().to_string(),
        ]);
    }
    for line in text::table(&table) {
        out!("{line}");
    }
    Ok(())
}

/// How `ls` and `status` show a mode: `host` is said to be unguarded.
pub(crate) fn network_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Host => "host (unguarded)",
        m => m.label(),
    }
}
