//! `egress <box> [--json] [--follow]`: the box's network policy in force and its proxy's recent
//! decisions on this node; `--apply`: hand the record's policy to the running proxy.

use anyhow::Result;
use serde::Serialize;

use super::ls::network_label;
use super::{Ctx, JSON_SCHEMA_VERSION};
use crate::plan::egress::{self, Mode, NODE_LIST, PROXY_PORT};
use crate::plan::names::BoxName;
use crate::plan::text::escaped;
use crate::plan::{sandbox::BoxSpec, unit};
use crate::store::meta::Meta;
use crate::sys::egress_log::{self, Record};
use crate::sys::nodes::Nodes;
use crate::sys::runtime;
use crate::sys::runtime_kind::Runtime;
use crate::sys::{host, netns};

#[derive(Serialize)]
struct Report {
    schema_version: u32,
    #[serde(rename = "box")]
    name: String,
    network: Mode,
    node_list: NodeList,
    box_entries: Vec<String>,
    /// Where the box is up (None: parked).
    held_by: Option<String>,
    running_here: bool,
    /// Does the proxy answer inside the box (None: not up here, or no proxy).
    proxy_answers: Option<bool>,
    decisions: Vec<Record>,
}

#[derive(Serialize)]
struct NodeList {
    path: &'static str,
    entries: Vec<String>,
    /// Lines that are no entry; the proxy skips them.
    invalid: Vec<String>,
}

fn node_list() -> NodeList {
    let (entries, invalid) = match std::fs::read_to_string(NODE_LIST) {
        Ok(text) => egress::parse_list(&text),
        Err(e) => (vec![], vec![format!("unreadable: {e}")]),
    };
    NodeList {
        path: NODE_LIST,
        entries: entries.iter().map(|e| e.text().to_string()).collect(),
        invalid,
    }
}

fn line(r: &Record) -> String {
    let verdict = if r.allowed { "allowed" } else { "REFUSED" };
    let why = match (&r.rule, &r.reason) {
        (_, Some(reason)) => reason.clone(),
        (Some(rule), None) => format!("by {rule}"),
        (None, None) => String::new(),
    };
    let error = r
        .error
        .as_deref()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    let path = r.path.as_deref().unwrap_or_default();
    // Method, host, path and reason come from what the box sent.
    escaped(&format!(
        "{}  {verdict:<8} {:<8} {}:{}{path}  {why}{error}  out {} B, in {} B",
        r.time, r.method, r.host, r.port, r.bytes_out, r.bytes_in
    ))
}

pub(crate) fn run(name: &BoxName, json: bool, follow: bool, last: usize) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    let spec = ctx.spec_in_force(&meta);
    let running_here = ctx.runtime.is_active(&spec);
    let all = if running_here {
        egress_log::read(&spec.egress_log())
    } else {
        vec![]
    };
    let report = Report {
        schema_version: JSON_SCHEMA_VERSION,
        name: name.to_string(),
        network: spec.egress.mode,
        node_list: node_list(),
        box_entries: meta.allow.clone(),
        held_by: meta.lease.as_ref().map(|l| l.node.clone()),
        running_here,
        proxy_answers: (running_here && host::is_mount_point(&spec.netns_pin()))
            .then(|| netns::answers(&spec.netns_pin(), PROXY_PORT)),
        decisions: all[all.len().saturating_sub(last)..].to_vec(),
    };
    if json && !follow {
        super::print_json(&report)?;
        return Ok(());
    }
    if !json {
        print_report(&report);
    }
    if follow {
        if !running_here {
            return Err(super::not_up_here(name).into());
        }
        egress_log::follow(&spec.egress_log(), |r| {
            if json {
                if let Ok(l) = serde_json::to_string(r) {
                    out!("{l}");
                }
            } else {
                out!("{}", line(r));
            }
        })?;
    }
    Ok(())
}

fn print_report(r: &Report) {
    let how = match r.network {
        Mode::Allow => format!(
            "own network; the proxy at 127.0.0.1:{PROXY_PORT} in the box admits what the lists below name"
        ),
        Mode::None => "own network; the proxy refuses everything".into(),
        Mode::Host => "the node's network: NOT guarded".into(),
    };
    out!(
        "box '{}': network {} ({how})",
        r.name,
        network_label(r.network)
    );
    out!(
        "node list {}: {} entries{}",
        r.node_list.path,
        r.node_list.entries.len(),
        if r.node_list.invalid.is_empty() {
            String::new()
        } else {
            format!("; skipped: {}", r.node_list.invalid.join("; "))
        }
    );
    if r.box_entries.is_empty() {
        out!(
            "box entries: none (add with 'ag-box set {} allow=<entry>,...')",
            r.name
        );
    } else {
        out!("box entries: {}", r.box_entries.join(", "));
    }
    match (&r.held_by, r.running_here, r.proxy_answers) {
        (None, _, _) => out!("parked: no proxy runs"),
        (Some(node), false, _) => out!(
            "up on {node}, not here: its decisions are there ('ag-box egress {}' on {node})",
            r.name
        ),
        (_, true, Some(true)) => out!("proxy: answering"),
        (_, true, Some(false)) => out!(
            "proxy: NOT answering (it restarts by itself; see 'journalctl -u {}')",
            unit::proxy_unit_name(&r.name)
        ),
        (_, true, None) => {}
    }
    if r.running_here && r.network != Mode::Host {
        out!("recent decisions ({}, oldest first):", r.decisions.len());
        for d in &r.decisions {
            out!("  {}", line(d));
        }
    }
}

/// What became of a policy change for a box that may be running.
pub(crate) enum Applied {
    Live,
    /// The box runs with the other kind of network; the change waits for its next `up`.
    AtNextUp,
    NotRunning,
}

/// Hand the record's policy to the box's proxy on this node.
pub(crate) fn apply_here(runtime: Runtime, spec: &BoxSpec) -> Result<Applied> {
    if !runtime.is_active(spec) {
        return Ok(Applied::NotRunning);
    }
    let isolated_now = host::is_mount_point(&spec.netns_pin());
    if isolated_now && spec.egress.mode.isolated() {
        runtime::write_policy(spec)?;
        return Ok(Applied::Live);
    }
    Ok(Applied::AtNextUp)
}

/// `egress <box> --apply`.
pub(crate) fn apply(name: &BoxName) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    let spec = ctx.spec(&meta);
    match apply_here(ctx.runtime.kind(), &spec)? {
        Applied::Live => say!(
            "box '{name}': network {} applied to its running proxy",
            spec.egress.mode
        ),
        Applied::AtNextUp => say!(
            "box '{name}': network {} takes effect at its next up (park, then up): the running box has the other kind of network",
            spec.egress.mode
        ),
        Applied::NotRunning => return Err(super::not_up_here(name).into()),
    }
    Ok(())
}

/// After `set` changed the policy: apply it where the box runs, here or over ssh.
pub(crate) fn apply_everywhere(ctx: &Ctx, meta: &Meta) {
    let name = &meta.name;
    let Some(holder) = meta.lease.as_ref().map(|l| l.node.clone()) else {
        say!("box '{name}': the network policy takes effect at its next 'ag-box up'");
        return;
    };
    if holder == ctx.config.node {
        match apply_here(ctx.runtime.kind(), &ctx.spec(meta)) {
            Ok(Applied::Live) => say!("box '{name}': applied to its running proxy"),
            Ok(Applied::AtNextUp) => say!(
                "box '{name}': the network mode takes effect at its next up (park, then up); entries already stored"
            ),
            Ok(Applied::NotRunning) => {
                say!("box '{name}': the network policy takes effect at its next 'ag-box up'");
            }
            Err(e) => say!("box '{name}': stored, but not applied here: {e:#}"),
        }
        return;
    }
    let entry = ctx.config.nodes.iter().find(|n| n.name == holder);
    let applied = match entry {
        Some(e) if e.ssh_alias.is_some() => {
            Nodes::new().and_then(|mut n| n.remote(e, &["egress", name, "--apply"]))
        }
        _ => Err(anyhow::anyhow!("node {holder} is not in the nodes file")),
    };
    match applied {
        Ok(0) => {}
        Ok(code) => say!(
            "box '{name}': stored, but applying it on {holder} failed (exit {code}); run 'ag-box egress {name} --apply' there"
        ),
        Err(e) => say!(
            "box '{name}': stored, but {holder} was not reached ({e:#}); run 'ag-box egress {name} --apply' there"
        ),
    }
}
