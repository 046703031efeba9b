//! `up <name> [--node N] [--force] [--fresh]`: take the lease, restore if needed, start the box.

use anyhow::Result;

use super::{Ctx, probe, require_tools};
use crate::error::{ChildExit, Code, UserError};
use crate::lifecycle::{self, up::being_dropped, up::held_elsewhere};
use crate::plan::names::BoxName;
use crate::plan::snapshot_id::SnapshotId;
use crate::plan::{schedule, tmux};
use crate::store::lease::{self, UpPlan};
use crate::sys::nodes::Nodes;
use crate::sys::{cmd, interrupt};

/// `up --json`: the box as it now runs, from its record.
#[derive(serde::Serialize)]
struct Started<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    node: Option<&'a str>,
    epoch: Option<u64>,
    /// The snapshot it was last saved as (full id): what a restore brought, if one did.
    snapshot: Option<&'a SnapshotId>,
}

pub(crate) use lifecycle::up::How;

pub(crate) fn run(name: &BoxName, node: Option<&str>, how: How, json: bool) -> Result<()> {
    start(name, node, how)?;
    if json {
        let ctx = Ctx::load()?;
        let meta = ctx.tracked(name)?.meta;
        super::print_json(&Started {
            schema_version: super::JSON_SCHEMA_VERSION,
            name,
            node: meta.lease.as_ref().map(|l| l.node.as_str()),
            epoch: meta.lease.as_ref().map(|l| l.epoch),
            snapshot: meta.last_snapshot.as_ref().map(|s| &s.id),
        })?;
    }
    Ok(())
}

pub(crate) fn start(name: &BoxName, node: Option<&str>, how: How) -> Result<()> {
    let ctx = Ctx::load()?;
    let stored = ctx.tracked(name)?;
    if stored.meta.dropping {
        return Err(being_dropped(name).into());
    }
    let here = ctx.config.node.clone();
    if let (Some(pin), Some(n)) = (&stored.meta.pinned_node, node)
        && pin != n
    {
        return Err(UserError::usage(
            format!("box '{name}' is pinned to node {pin} (it holds a node-specific .auth-secret)"),
            format!("run 'ag-box up {name}' without --node, or on {pin}"),
        )
        .into());
    }
    let target = match (node, &stored.meta.pinned_node) {
        (Some(n), _) => n.to_string(),
        (None, Some(pin)) => pin.clone(),
        (None, None) => match lease::plan_up(&stored.meta, &here, how.force) {
            UpPlan::HeldElsewhere(l) => return Err(held_elsewhere(name, &l).into()),
            UpPlan::AlreadyOurs { .. } => here.clone(),
            UpPlan::Acquire | UpPlan::TakeOver(_) => schedule(&ctx)?,
        },
    };
    if target != here {
        return remote_up(&ctx, name, &target, how);
    }
    up_here(&ctx, name, stored.meta.nix, how)
}

/// `up` on this node, once its tools and the store's leases are known to be there.
fn up_here(ctx: &Ctx, name: &BoxName, nix: bool, how: How) -> Result<()> {
    require_tools(&["restic"])?;
    require_tools(ctx.runtime.kind().required_tools())?;
    if nix {
        require_nix(name)?;
    }
    ctx.require_safe_leases()?;
    interrupt::arm();
    ctx.restic()?;
    lifecycle::up::up_here(ctx, name, how)
}

/// The node with the most memory among those that answer (this one alone without a nodes file).
fn schedule(ctx: &Ctx) -> Result<String> {
    let here = &ctx.config.node;
    if !ctx.config.nodes.iter().any(|n| n.ssh_alias.is_some()) {
        return Ok(here.clone());
    }
    let mut nodes = Nodes::new()?;
    let candidates = nodes.probe_all(&ctx.config.nodes, probe::reply(ctx)?);
    let choice = schedule::choose(&candidates, env!("CARGO_PKG_VERSION"), here).map_err(|why| {
        UserError::failed(
            format!("no node can take the box: {why}"),
            "check 'ag-box status' and ssh to the nodes",
        )
    })?;
    for line in &choice.skipped {
        tracing::warn!("{line}");
    }
    tracing::info!("scheduling on node {} (most memory available)", choice.node);
    Ok(choice.node)
}

fn remote_up(ctx: &Ctx, name: &str, target: &str, how: How) -> Result<()> {
    if ctx.config.s3.is_none() {
        return Err(UserError::usage(
            format!(
                "node '{target}' is not this node ({}), and the local store is not shared",
                ctx.config.node
            ),
            format!("run 'ag-box up {name}' on {target}, or configure the S3 store on every node"),
        )
        .into());
    }
    let entry = ctx.config.reachable(target).ok_or_else(|| {
        UserError::usage(
            format!("node '{target}' is not in the nodes file with an ssh alias"),
            "add '<node> <ssh-alias>' to ~/.config/box/nodes; see nodes.example",
        )
    })?;
    say!("starting box '{name}' on node {target}");
    let flags: Vec<&str> = [(how.force, "--force"), (how.fresh, "--fresh")]
        .into_iter()
        .filter_map(|(on, flag)| on.then_some(flag))
        .collect();
    match Nodes::new()?.remote_up(entry, name, &flags)? {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}

/// A `nix: true` box needs nix and the base flake on this node.
fn require_nix(name: &str) -> Result<()> {
    let fix = format!(
        "install Nix (https://install.determinate.systems/nix) and run install.sh, or 'ag-box set {name} nix=false'"
    );
    if cmd::which("nix").is_none() {
        return Err(UserError::new(
            Code::ToolMissing,
            format!("box '{name}' has nix: true, but nix is not installed on this node"),
            fix,
        )
        .into());
    }
    if !std::path::Path::new(tmux::BASE_FLAKE)
        .join("flake.nix")
        .exists()
    {
        return Err(UserError::new(
            Code::ToolMissing,
            format!(
                "box '{name}' has nix: true, but {} has no flake.nix",
                tmux::BASE_FLAKE
            ),
            fix,
        )
        .into());
    }
    Ok(())
}
