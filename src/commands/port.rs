//! `port <box> <port> [--local <port>] [--bind <addr>]`: a TCP port a process in the box
//! listens on, reachable here on 127.0.0.1 (or `--bind`) while the command runs: relayed into
//! the box's network namespace on its node, and from another node through one ssh connection.
//! `--list`: what listens in the box.

use std::io::Read;
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result};

use super::{Ctx, follow};
use crate::error::{ChildExit, UserError};
use crate::plan::names::BoxName;
use crate::plan::ports;
use crate::sys::{cmd, port_forward};

/// What a `port` serving for another node says once it serves.
const READY: &str = "ready";

/// What `port` was asked.
pub(crate) struct Ask {
    pub port: Option<u16>,
    pub local: Option<u16>,
    pub bind: IpAddr,
    pub list: bool,
    /// On the box's node, for a `port` run on another: serve on this Unix socket.
    pub serve_unix: Option<PathBuf>,
    /// End when stdin ends (the ssh that started this is gone).
    pub while_stdin: bool,
}

pub(crate) fn run(name: &BoxName, ask: &Ask) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    let spec = ctx.spec_in_force(&meta);
    let here = ctx.runtime.is_active(&spec);
    let netns = spec.netns();
    if ask.list {
        if !here {
            return follow::to_holder(&ctx, &meta, "port", &["port", name, "--list"]);
        }
        for (addr, port) in port_forward::listening_in(netns.as_deref())? {
            println!("{}", std::net::SocketAddr::new(addr, port));
        }
        return Ok(());
    }
    let Some(port) = ask.port else {
        return Err(UserError::usage(
            format!("'ag-box port {name}' needs the box's port"),
            format!("'ag-box port {name} <port>', or 'ag-box port {name} --list' to see what listens in it"),
        )
        .into());
    };
    let connect = move || port_forward::connect_into(netns.as_deref(), port);
    if let Some(sock) = &ask.serve_unix {
        if !here {
            return Err(crate::commands::not_up_here(name).into());
        }
        let listener = port_forward::unix_listener(sock)?;
        if ask.while_stdin {
            println!("{READY}");
            let gone = sock.clone();
            std::thread::spawn(move || {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
                let _ = std::fs::remove_file(&gone);
                std::process::exit(0);
            });
        }
        port_forward::serve(listener.incoming(), connect);
        return Ok(());
    }
    let local = ask.local.unwrap_or(port);
    if !here {
        return remote(&ctx, &meta, name, port, local, ask.bind);
    }
    if spec.netns().is_none() && local == port && ask.bind.is_loopback() {
        say!(
            "box '{name}' runs on this node's network: its port {port} is at 127.0.0.1:{port} already"
        );
        return Ok(());
    }
    let listener = TcpListener::bind((ask.bind, local)).map_err(|e| {
        UserError::failed(
            format!(
                "cannot listen on {}:{local}: {e}",
                ports::address_shown(ask.bind)
            ),
            format!("choose another port here: 'ag-box port {name} {port} --local <port>'"),
        )
    })?;
    say!(
        "box '{name}': its port {port} is at {}:{local} here; Ctrl-C ends it",
        ports::address_shown(ask.bind)
    );
    port_forward::serve(listener.incoming(), connect);
    Ok(())
}

/// The box runs on another node: one ssh forwards `bind:local` here to a socket that a `port`
/// there serves, for as long as this runs.
fn remote(
    ctx: &Ctx,
    meta: &crate::store::meta::Meta,
    name: &str,
    port: u16,
    local: u16,
    bind: IpAddr,
) -> Result<()> {
    let (node, alias) = follow::holder(ctx, meta, "port")?;
    cmd::require("ssh")?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let sock = port_forward::socket_dir()
        .join(format!("{name}.{port}.{}.{nanos}.sock", std::process::id()));
    let argv = ports::forward_argv(alias, bind, local, &sock, name, port);
    // Its stdin stays open while this runs: the `port` on the other end ends with it.
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running ssh {alias}"))?;
    let held = child.stdin.take();
    // The other end says `ready` once it serves: a connection before that would find nothing.
    let mut said = String::new();
    if let Some(out) = child.stdout.take() {
        let mut lines = std::io::BufReader::new(out);
        let _ = std::io::BufRead::read_line(&mut lines, &mut said);
    }
    if said.trim() == READY {
        say!(
            "box '{name}' is up on node {node}: its port {port} is at {}:{local} here, through ssh ({alias}); Ctrl-C ends it",
            ports::address_shown(bind)
        );
    }
    let status = child.wait().context("waiting for ssh")?;
    drop(held);
    match cmd::exit_code(status) {
        0 => Ok(()),
        code => Err(ChildExit(code).into()),
    }
}
