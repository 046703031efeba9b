//! `prune`: which snapshots the retention keys keep, per box and for the globals (a plan, printed
//! before anything is removed), then forgetting the rest, one `restic prune`, and each box's
//! history trimmed to its newest events.

use anyhow::Result;

use super::Ctx;
use crate::plan::delta::QUICK_TO;
use crate::plan::restic::{FORK_TAG, GLOBALS_TAG, SnapshotInfo, box_tag, changes_tag};
use crate::plan::retention::{self, Reason, Snap};
use crate::plan::snapshot_id::SnapshotId;
use crate::store::events;
use crate::store::meta::SnapshotRef;
use crate::sys::crash;

/// What the retention keys keep and forget of one box (or of the globals).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// The box's name, or `(globals)`.
    pub label: String,
    pub keep: Vec<(SnapshotId, Reason)>,
    pub forget: Vec<SnapshotId>,
}

/// The whole plan: every group, and how many snapshots the repository holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub groups: Vec<Group>,
    pub snapshots: usize,
    /// The boxes whose history is trimmed.
    pub boxes: Vec<String>,
}

impl Plan {
    pub(crate) fn forget(&self) -> Vec<SnapshotId> {
        self.groups
            .iter()
            .flat_map(|g| g.forget.iter().cloned())
            .collect()
    }
}

/// The plan as of now: each box's last snapshot is kept whatever the keys say.
pub(crate) fn plan(ctx: &Ctx) -> Result<Plan> {
    let all = ctx.repo.snapshots()?;
    let records = ctx.store.list()?;
    let boxes: Vec<String> = records.iter().map(|m| m.name.clone()).collect();
    // Each box's latest: the whole snapshot it is or lies on, and the changes that lead to it.
    let mut sources: Vec<(String, String, Option<String>, Option<SnapshotRef>)> = records
        .into_iter()
        .map(|m| {
            (
                m.name.clone(),
                box_tag(&m.name),
                Some(changes_tag(&m.name)),
                m.last_snapshot,
            )
        })
        .collect();
    sources.push(("(globals)".into(), GLOBALS_TAG.into(), None, None));
    let tagged = |tag: &String| -> Vec<&SnapshotInfo> {
        all.iter().filter(|s| s.tags.contains(tag)).collect()
    };
    let groups = sources
        .into_iter()
        .map(|(label, tag, changes, latest)| {
            let pinned = latest.as_ref().map(|l| l.whole().id.clone());
            let own = snaps(&tagged(&tag));
            let mut kept = match changes {
                Some(_) => {
                    retention::box_plan(&own, ctx.config.retention, pinned.as_ref(), ctx.now())
                }
                None => retention::plan(&own, ctx.config.retention, None, ctx.now()),
            };
            if let Some(changes) = &changes {
                let latest_time = own
                    .iter()
                    .find(|s| pinned.as_ref() == Some(&s.id))
                    .map(|s| s.time);
                // Each with the state it leads to (one without is forgotten with the rest): a
                // quick park's changes are that state themselves.
                let leading: Vec<(Snap, SnapshotId)> = tagged(changes)
                    .into_iter()
                    .filter_map(|i| {
                        let to = match i.tag("to").unwrap_or_default() {
                            QUICK_TO => i.id.clone(),
                            to => SnapshotId::from(to),
                        };
                        Some((snaps(&[i]).pop()?, to))
                    })
                    .collect();
                let c = retention::changes_plan(
                    &leading,
                    latest.as_ref().map(SnapshotRef::published_as),
                    latest_time,
                );
                kept.keep.extend(c.keep);
                kept.forget.extend(c.forget);
            }
            Group {
                label,
                keep: kept.keep,
                forget: kept.forget,
            }
        })
        .collect();
    Ok(Plan {
        groups,
        snapshots: all.len(),
        boxes,
    })
}

/// Forget what the plan forgets, prune, trim the histories.
pub(crate) fn execute(ctx: &Ctx, plan: &Plan) -> Result<()> {
    // A record may have come to name one of them since the plan was made (a rollback): read
    // again, what a record names is never forgotten.
    let named: Vec<SnapshotId> = ctx
        .store
        .list()?
        .into_iter()
        .filter_map(|m| m.last_snapshot)
        .flat_map(|s| {
            let whole = s.whole().id.clone();
            [Some(s.id), Some(whole), s.same_as].into_iter().flatten()
        })
        .collect();
    let forget: Vec<SnapshotId> = plan
        .forget()
        .into_iter()
        .filter(|id| !named.contains(id))
        .collect();
    if !forget.is_empty() {
        ctx.repo.forget(&forget)?;
        crash::point("prune.after-forget");
    }
    ctx.repo.prune()?;
    trim_events(ctx, &plan.boxes);
    Ok(())
}

fn snaps(infos: &[&SnapshotInfo]) -> Vec<Snap> {
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
                    i.id.short(),
                    i.time
                );
                None
            }
        })
        .collect()
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
