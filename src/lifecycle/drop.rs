//! `drop`: a box's snapshots and record deleted (its project's files never), its agent home set
//! aside. Marked first, so that a drop cut off anywhere is finished by the next one.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};

use super::Ctx;
use crate::error::{Code, UserError};
use crate::plan::names::BoxName;
use crate::plan::sandbox::BoxSpec;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::meta::Meta;
use crate::store::{self, Step, events, update};
use crate::sys::copy_state::{CopyManifest, CopyState};
use crate::sys::{crash, restore};

/// A box just dropped.
#[derive(Debug)]
pub(crate) struct Dropped {
    /// Its record as it was.
    pub meta: Meta,
    /// The full ids of the snapshots deleted.
    pub snapshots: Vec<SnapshotId>,
    /// Where its agent home was set aside (None: it had none here).
    pub home_kept_at: Option<PathBuf>,
}

/// Drop box `name` once `confirm` agrees (asked after every refusal, before any change).
pub(crate) fn drop_box(
    ctx: &Ctx,
    name: &BoxName,
    confirm: impl FnOnce() -> Result<()>,
) -> Result<Dropped> {
    let _lock = ctx.lock(name, "drop")?;
    let stored = ctx.tracked(name)?;
    let spec = ctx.spec(&stored.meta);
    let here = ctx.config.node.clone();
    if ctx.runtime.is_active(&spec) {
        return Err(UserError::failed(
            format!("box '{name}' is running on this node"),
            format!("run 'ag-box park {name}' first"),
        )
        .into());
    }
    // A lease this node holds on a box that does not run (just tracked, or its node went down
    // with it) guards nothing a drop would lose.
    if let Some(l) = stored.meta.lease.as_ref().filter(|l| l.node != here) {
        return Err(UserError::new(
            Code::LeaseHeld,
            format!(
                "box '{name}' is up on node {} (or holds its lease there)",
                l.node
            ),
            format!("run 'ag-box park {name}' on {} first", l.node),
        )
        .into());
    }
    confirm()?;
    // Marked first, on a version with no lease: from here on nothing but `drop` acts on the box,
    // and a drop cut off anywhere is finished by the next one.
    update(ctx.store.as_ref(), name, |m| match &m.lease {
        Some(l) if l.node != here => Err(UserError::new(
            Code::LeaseHeld,
            format!(
                "box '{name}' was taken by node {} while dropping it; nothing was deleted",
                l.node
            ),
            format!("run 'ag-box park {name}' on {} first", l.node),
        )
        .into()),
        None if m.dropping => Ok(Step::Keep(())),
        _ => Ok(Step::Write(
            Meta {
                dropping: true,
                lease: None,
                ..m.clone()
            },
            (),
        )),
    })?;
    crash::point("drop.after-mark");
    let ids = ctx.repo.box_snapshots(name)?;
    if !ids.is_empty() {
        ctx.repo.forget(&ids).and_then(|()| ctx.repo.prune()).with_context(|| {
            format!(
                "box '{name}': deleting its snapshots failed; run 'ag-box drop {name} --yes' again"
            )
        })?;
    }
    crash::point("drop.after-forget");
    let marked = ctx.tracked(name)?;
    if !store::delete(ctx.store.as_ref(), name, &marked.version)? {
        return Err(UserError::failed(
            format!("box '{name}': its snapshots are deleted, but its record changed meanwhile"),
            format!("run 'ag-box drop {name} --yes' again"),
        )
        .into());
    }
    CopyState::remove(&ctx.config.state_dir, name)?;
    CopyManifest::remove(&ctx.config.state_dir, name)?;
    let home_kept_at = set_aside_home(&spec, ctx.now())?;
    // A login the box made through the broker is its own: a new box of the name starts without.
    match std::fs::remove_dir_all(spec.box_logins()) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => tracing::warn!(
            "box '{}': removing the logins the broker kept for it: {e}",
            spec.name
        ),
        _ => {}
    }
    restore::remove_any(&spec.run_dir)
        .with_context(|| format!("removing {}", spec.run_dir.display()))?;
    ctx.store.put_delta(name, None)?;
    // Its history goes with its snapshots; the one line left says who dropped it, and when.
    let history = ctx.store.events(name).and_then(|old| {
        let keys: Vec<String> = old.into_iter().map(|(k, _)| k).collect();
        ctx.store.delete_events(name, &keys)
    });
    if let Err(e) = history {
        tracing::warn!("box '{name}': its events were not all deleted: {e:#}");
    }
    ctx.record_event(
        name,
        events::Step {
            verb: "drop",
            detail: Some(format!(
                "{} deleted",
                crate::plan::text::count(ids.len(), "snapshot")
            )),
            ..Default::default()
        },
    );
    Ok(Dropped {
        meta: stored.meta,
        snapshots: ids,
        home_kept_at,
    })
}

/// The dropped box's agent home moves aside (named by the time), so a new box of the same name
/// starts with an empty one and nothing of the old conversations is lost by a typo.
fn set_aside_home(spec: &BoxSpec, now: SystemTime) -> Result<Option<PathBuf>> {
    let home: &Path = &spec.agent_home.root;
    if std::fs::symlink_metadata(home).is_err() {
        return Ok(None);
    }
    let stamp = humantime::format_rfc3339_seconds(now)
        .to_string()
        .replace(':', "");
    // A box of the name dropped before, within the same second, has the first name.
    let aside = (1..=u32::MAX)
        .map(|n| {
            let tail = if n == 1 {
                String::new()
            } else {
                format!("-{n}")
            };
            home.with_file_name(format!(".{}.dropped-{stamp}{tail}", spec.name))
        })
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .unwrap_or_else(|| home.with_file_name(format!(".{}.dropped", spec.name)));
    std::fs::rename(home, &aside).with_context(|| format!("moving {} aside", home.display()))?;
    Ok(Some(aside))
}
