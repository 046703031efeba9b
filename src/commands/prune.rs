//! `prune [--dry-run]`: retention per box and for globals, then one `restic prune`; each box's
//! history trimmed to its newest events.

use std::time::SystemTime;

use anyhow::Result;

use crate::plan::text;

use super::{Ctx, require_tools};
use crate::plan::restic::{FORK_TAG, GLOBALS_TAG, SnapshotInfo, box_tag, forget_runs};
use crate::plan::retention::{self, Snap};
use crate::store::events;
use crate::sys::crash;
use crate::sys::restic::short;

fn snaps(infos: &[SnapshotInfo]) -> Vec<Snap> {
    infos
        .iter()
        .filter_map(|i| {
            if let Ok(time) = humantime::parse_rfc3339_weak(&i.time) {
                Some(Snap {
                    id: i.id.clone(),
                    time,
                    fork: i.tags.iter().any(|t| t == FORK_TAG),
                })
            } else {
                tracing::warn!(
                    "snapshot {} has an unreadable time '{}'; kept",
                    short(&i.id),
                    i.time
                );
                None
            }
        })
        .collect()
}

pub(crate) fn run(dry_run: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    require_tools(&["restic"])?;
    let restic = ctx.restic()?;
    let all = restic.snapshots(None)?;
    let policy = ctx.config.retention;
    let now = SystemTime::now();
    let records = ctx.store.list()?;
    let boxes: Vec<String> = records.iter().map(|m| m.name.clone()).collect();
    let mut groups: Vec<(String, String, Option<String>)> = records
        .into_iter()
        .map(|m| {
            (
                m.name.clone(),
                box_tag(&m.name),
                m.last_snapshot.map(|s| s.id),
            )
        })
        .collect();
    groups.push(("(globals)".into(), GLOBALS_TAG.into(), None));
    let mut forget = Vec::new();
    for (label, tag, pinned) in groups {
        let infos: Vec<SnapshotInfo> = all
            .iter()
            .filter(|s| s.tags.contains(&tag))
            .cloned()
            .collect();
        let plan = retention::plan(&snaps(&infos), policy, pinned.as_deref(), now);
        for (id, reason) in &plan.keep {
            out!("keep   {label} {} ({reason})", short(id));
        }
        for id in &plan.forget {
            out!("forget {label} {}", short(id));
        }
        forget.extend(plan.forget);
    }
    say!(
        "retention: last {}, daily {}, weekly {}; {} of {} to forget",
        policy.last,
        policy.daily,
        policy.weekly,
        forget.len(),
        text::count(all.len(), "snapshot")
    );
    if dry_run {
        say!("dry run: nothing was removed");
        return Ok(());
    }
    if !forget.is_empty() {
        for args in forget_runs(&forget) {
            restic.forget(&args)?;
        }
        crash::point("prune.after-forget");
    }
    restic.prune()?;
    say!("pruned the repository");
    trim_events(&ctx, &boxes);
    Ok(())
}

/// Each box keeps its newest [`events::KEEP`] events.
fn trim_events(ctx: &Ctx, boxes: &[String]) {
    for name in boxes {
        let trimmed = ctx.store.events(name).and_then(|all| {
            let old = events::beyond(all.into_iter().map(|(k, _)| k).collect(), events::KEEP);
            ctx.store.delete_events(name, &old).map(|()| old.len())
        });
        match trimmed {
            Ok(0) => {}
            Ok(n) => tracing::info!("box '{name}': removed its {n} oldest events"),
            Err(e) => tracing::warn!("box '{name}': its old events were not trimmed: {e:#}"),
        }
    }
}
