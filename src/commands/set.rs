//! `set <name> key=value...`: per-box settings (`memory_max`, nix, pin, uid, gid, network, allow,
//! agent, creds).
//! The network policy applies to the running box at once; the rest at its next `up`.

use anyhow::Result;

use super::{Ctx, egress};
use crate::lifecycle;
use crate::plan::names::BoxName;

pub(crate) fn run(name: &BoxName, assignments: &[String]) -> Result<()> {
    let ctx = Ctx::load()?;
    ctx.tracked(name)?;
    let meta = lifecycle::set::set(&ctx, name, assignments)?;
    let network = meta.network(ctx.config.network);
    let allow = if meta.allow.is_empty() {
        "none".to_string()
    } else {
        meta.allow.join(",")
    };
    say!(
        "box '{name}': memory_max={} nix={} pin={} network={network} allow={allow} agent={} creds={} gpu={}",
        meta.memory_max.as_deref().unwrap_or("none"),
        meta.nix,
        meta.pinned_node.as_deref().unwrap_or("none"),
        meta.agent_label(),
        meta.creds_label(),
        meta.gpu,
    );
    let is_egress = |a: &&String| a.starts_with("network=") || a.starts_with("allow=");
    let egress_changed = assignments.iter().any(|a| is_egress(&a));
    let mut later: Vec<&str> = Vec::new();
    for key in assignments
        .iter()
        .filter(|a| !is_egress(a))
        .filter_map(|a| a.split_once('=').map(|(key, _)| key))
    {
        if !later.contains(&key) {
            later.push(key);
        }
    }
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
