//! `attach` and `exec` follow the box: up on another node, they run there over ssh (with a
//! terminal when there is one here) and say so; parked, they say how to start it.

use std::io::IsTerminal;
use std::process::Command;

use anyhow::{Context, Result};

use super::{Ctx, not_up_here};
use crate::error::{ChildExit, UserError};
use crate::store::meta::Meta;
use crate::sys::cmd;

/// `ssh` running `ag-box <args>` on `alias`; `tty`: with a terminal (an attach, an interactive
/// exec). The remote shell reads one string, so every argument is quoted for it.
pub(crate) fn ssh_argv(alias: &str, tty: bool, args: &[&str]) -> Vec<String> {
    let remote: Vec<String> = std::iter::once("ag-box")
        .chain(args.iter().copied())
        .map(quote)
        .collect();
    vec![
        "ssh".into(),
        if tty { "-t" } else { "-T" }.into(),
        "-o".into(),
        "ConnectTimeout=10".into(),
        alias.into(),
        "--".into(),
        remote.join(" "),
    ]
}

fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The box is not running here: run `args` on the node holding its lease, or tell why not.
pub(crate) fn to_holder(ctx: &Ctx, meta: &Meta, verb: &str, args: &[&str]) -> Result<()> {
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
    let tty = std::io::stdin().is_terminal();
    say!(
        "box '{name}' is up on node {}; running '{verb}' there over ssh ({alias})",
        lease.node
    );
    let ssh = ssh_argv(alias, tty || verb == "attach", args);
    let status = Command::new(&ssh[0])
        .args(&ssh[1..])
        .status()
        .with_context(|| format!("running ssh {alias}"))?;
    match cmd::exit_code(status) {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_remote_command_reaches_ag_box_as_typed() {
        assert_eq!(
            ssh_argv("node-b", true, &["attach", "web"]),
            [
                "ssh",
                "-t",
                "-o",
                "ConnectTimeout=10",
                "node-b",
                "--",
                "ag-box attach web"
            ]
        );
        assert_eq!(
            ssh_argv(
                "b",
                false,
                &[
                    "exec",
                    "web",
                    "--",
                    "sh",
                    "-c",
                    "echo 'it''s' $HOME; rm -rf /"
                ]
            ),
            [
                "ssh",
                "-T",
                "-o",
                "ConnectTimeout=10",
                "b",
                "--",
                r"ag-box exec web -- sh -c 'echo '\''it'\'''\''s'\'' $HOME; rm -rf /'"
            ]
        );
        assert_eq!(quote(""), "''");
    }
}
