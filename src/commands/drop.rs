//! `drop <name> [--yes]`: delete a box's snapshots and record after confirmation; never local files.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result};

use super::{Ctx, require_tools};
use crate::error::{Code, UserError};
use crate::plan::restic::{box_tag, forget_runs};
use crate::store::meta::Meta;
use crate::store::{self, Step, events, update};
use crate::sys::copy_state::{CopyManifest, CopyState};
use crate::sys::crash;

fn confirm(name: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(UserError::usage(
            format!("refusing to drop box '{name}' without confirmation"),
            format!(
                "run it in a terminal to type the name, or 'ag-box drop {name} --yes' in scripts"
            ),
        )
        .into());
    }
    eprint!(
        "This deletes every snapshot and the record of box '{name}' (local files stay).\nType the box name to confirm: "
    );
    std::io::stderr().flush()?;
    let mut typed = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut typed)
        .context("reading the confirmation")?;
    if typed.trim() != name {
        return Err(UserError::failed(
            "confirmation did not match; nothing was deleted",
            "type the box name exactly",
        )
        .into());
    }
    Ok(())
}

/// `drop --json`.
#[derive(serde::Serialize)]
struct Dropped<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    /// The full ids of the snapshots deleted.
    snapshots_deleted: &'a [String],
    /// The project, left as it was.
    path: &'a std::path::Path,
    /// Where its agent home was set aside (null: it had none here).
    agent_home_kept_at: Option<&'a std::path::Path>,
}

// One sequence, read top to bottom; each step names its failure and crash point.
#[allow(clippy::too_many_lines)]
pub(crate) fn run(name: &str, yes: bool, json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    ctx.tracked(name)?;
    require_tools(&["restic"])?;
    let _lock = ctx.lock_box(name, "drop")?;
    let stored = ctx.tracked(name)?;
    let spec = ctx.spec(&stored.meta);
    let up_here = ctx.runtime.is_active(&spec);
    let here = ctx.config.node.clone();
    if up_here {
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
    if !yes {
        confirm(name)?;
    }
    let restic = ctx.restic()?;
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
    let ids: Vec<String> = restic
        .snapshots(Some(&box_tag(name)))?
        .into_iter()
        .map(|s| s.id)
        .collect();
    if !ids.is_empty() {
        forget_runs(&ids)
            .iter()
            .try_for_each(|args| restic.forget(args))
            .and_then(|()| restic.prune())
            .with_context(|| {
                format!("box '{name}': deleting its snapshots failed; run 'ag-box drop {name} --yes' again")
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
    let kept_home = set_aside_home(&spec)?;
    crate::sys::restore::remove_any(&spec.run_dir)
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
    say!(
        "dropped box '{name}': its record and {} are deleted; the files at {} are kept{}",
        crate::plan::text::count(ids.len(), "snapshot"),
        stored.meta.path.display(),
        kept_home
            .as_ref()
            .map(|p| format!(
                ", and its agent home (transcripts) is set aside at {}",
                p.display()
            ))
            .unwrap_or_default()
    );
    if json {
        super::print_json(&Dropped {
            schema_version: super::JSON_SCHEMA_VERSION,
            name,
            snapshots_deleted: &ids,
            path: &stored.meta.path,
            agent_home_kept_at: kept_home.as_deref(),
        })?;
    }
    Ok(())
}

/// The dropped box's agent home moves aside (named by the time), so a new box of the same name
/// starts with an empty one and nothing of the old conversations is lost by a typo.
fn set_aside_home(spec: &crate::plan::sandbox::BoxSpec) -> Result<Option<std::path::PathBuf>> {
    let home = &spec.agent_home.root;
    if std::fs::symlink_metadata(home).is_err() {
        return Ok(None);
    }
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
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
