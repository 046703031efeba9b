//! `attach` and `exec` follow the box: up on another node, they run there over ssh (with a
//! terminal when there is one here) and say so; parked, they say how to start it.

use std::io::IsTerminal;

use anyhow::Result;

use super::{Ctx, not_up_here};
use crate::error::{ChildExit, UserError};
use crate::store::meta::Meta;
use crate::sys::nodes;

/// The node holding the box's lease and its ssh alias, when that is another node this one
/// reaches; else why `verb` cannot follow it there.
pub(crate) fn holder<'c>(ctx: &'c Ctx, meta: &Meta, verb: &str) -> Result<(String, &'c str)> {
    let name = &meta.name;
    let Some(lease) = &meta.lease else {
        return Err(UserError::failed(
            format!("box '{name}' is parked (no node runs it)"),
            format!("start it with 'ag-box up {name}' (here) or 'ag-box up {name} --node <node>', then '{verb}' again"),
        )
        .into());
    };
    if lease.node == ctx.config.node {
        return Err(not_up_here(name).into());
    }
    let Some(alias) = ctx
        .config
        .nodes
        .iter()
        .find(|n| n.name == lease.node)
        .and_then(|n| n.ssh_alias.as_deref())
    else {
        return Err(UserError::failed(
            format!(
                "box '{name}' is up on node {}, which is not in this node's nodes file",
                lease.node
            ),
            format!(
                "run 'ag-box {verb} {name}' on {}, or add '{} <ssh-alias>' to ~/.config/box/nodes",
                lease.node, lease.node
            ),
        )
        .into());
    };
    Ok((lease.node.clone(), alias))
}

/// The box is not running here: run `args` on the node holding its lease, or tell why not.
pub(crate) fn to_holder(ctx: &Ctx, meta: &Meta, verb: &str, args: &[&str]) -> Result<()> {
    let name = &meta.name;
    let (node, alias) = holder(ctx, meta, verb)?;
    let tty = std::io::stdin().is_terminal();
    say!("box '{name}' is up on node {node}; running '{verb}' there over ssh ({alias})");
    match nodes::on_terminal(alias, tty || verb == "attach", args)? {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}
