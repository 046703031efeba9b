//! `set`: a box's settings written into its record, each checked first (a pin to a node the
//! install knows, ids no other box has, values the next `up` can use).

use anyhow::Result;

use super::Ctx;
use crate::error::UserError;
use crate::plan::names::BoxName;
use crate::store::meta::Meta;
use crate::store::{Step, events, update};

/// A uid or gid another box's record holds would make the two boxes one user.
fn refuse_taken_ids(ctx: &Ctx, name: &str, assignments: &[String]) -> Result<()> {
    let asked: Vec<(&str, u32)> = assignments
        .iter()
        .filter_map(|a| {
            let (key, value) = a.split_once('=')?;
            matches!(key, "uid" | "gid")
                .then(|| Some((a.as_str(), value.parse().ok()?)))
                .flatten()
        })
        .collect();
    if asked.is_empty() {
        return Ok(());
    }
    for other in ctx.store.list()?.iter().filter(|m| m.name != name) {
        if let Some((a, _)) = asked
            .iter()
            .find(|(_, id)| [other.uid, other.gid].contains(&Some(*id)))
        {
            return Err(UserError::usage(
                format!(
                    "box '{name}': invalid setting '{a}': box '{}' has that id",
                    other.name
                ),
                "each box has ids of its own: pick another in ag-box's range, or leave the one it has",
            )
            .into());
        }
    }
    Ok(())
}

/// Write `assignments` (`key=value`) into box `name`'s record, each checked; the record as
/// written.
pub(crate) fn set(ctx: &Ctx, name: &BoxName, assignments: &[String]) -> Result<Meta> {
    ctx.tracked(name)?;
    // A pin to a node this install does not know would make every later `up` fail.
    for a in assignments {
        if let Some(node) = a.strip_prefix("pin=")
            && !matches!(node, "" | "none")
            && node != ctx.config.node
            && !ctx.config.nodes.iter().any(|n| n.name == node)
        {
            return Err(UserError::usage(
                format!("box '{name}': invalid setting '{a}': no node '{node}' in the nodes file"),
                format!(
                    "pin it to this node ('pin={}') or one of the nodes file's, or 'pin=none'",
                    ctx.config.node
                ),
            )
            .into());
        }
    }
    refuse_taken_ids(ctx, name, assignments)?;
    let meta = update(ctx.store.as_ref(), name, |m| {
        let mut next = m.clone();
        for a in assignments {
            next = next.with_setting(a)?;
        }
        Ok(Step::Write(next.clone(), next))
    })?;
    ctx.record_event(
        name,
        events::Step {
            verb: "set",
            detail: Some(assignments.join(" ")),
            ..Default::default()
        },
    );
    Ok(meta)
}
