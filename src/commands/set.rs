//! `set <name> key=value...`: per-box settings (`memory_max`, nix, pin, uid, gid, network, allow).
//! The network policy applies to the running box at once; the rest at its next `up`.

use anyhow::Result;

use super::{Ctx, egress};
use crate::error::UserError;
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

pub(crate) fn run(name: &str, assignments: &[String]) -> Result<()> {
    let ctx = Ctx::load()?;
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
    refuse_taken_ids(&ctx, name, assignments)?;
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
    let network = meta.network(ctx.config.network);
    let allow = if meta.allow.is_empty() {
        "none".to_string()
    } else {
        meta.allow.join(",")
    };
    say!(
        "box '{name}': memory_max={} nix={} pin={} network={network} allow={allow}",
        meta.memory_max.as_deref().unwrap_or("none"),
        meta.nix,
        meta.pinned_node.as_deref().unwrap_or("none"),
    );
    let is_egress = |a: &&String| a.starts_with("network=") || a.starts_with("allow=");
    let egress_changed = assignments.iter().any(|a| is_egress(&a));
    let mut later: Vec<&str> = assignments
        .iter()
        .filter(|a| !is_egress(a))
        .filter_map(|a| a.split_once('=').map(|(key, _)| key))
        .collect();
    later.dedup();
    if !later.is_empty() {
        say!(
            "box '{name}': {} take{} effect at the next 'ag-box up'",
            later.join(", "),
            if later.len() == 1 { "s" } else { "" }
        );
    }
    if egress_changed {
        egress::apply_everywhere(&ctx, &meta);
    }
    Ok(())
}
