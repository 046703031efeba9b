//! `status [--json]`: this node's view in one place.

use std::process::Command;

use anyhow::Result;
use serde::Serialize;

use super::Ctx;
use super::ls::network_label;
use crate::plan::egress::Mode;
use crate::sys::runtime::Runtime;
use crate::sys::{cmd, egress_log};

#[derive(Serialize)]
struct Status {
    node: String,
    version: &'static str,
    store: String,
    /// None when the store could not be probed.
    conditional_writes: Option<bool>,
    repository: String,
    snapshots: Option<usize>,
    snapshots_error: Option<String>,
    memory_max: Option<String>,
    timer: String,
    runtime: &'static str,
    nodes: Vec<String>,
    active_boxes: Vec<String>,
    /// Each active box's network mode and the refusals its proxy logged here.
    egress: Vec<BoxEgress>,
}

#[derive(Serialize)]
struct BoxEgress {
    #[serde(rename = "box")]
    name: String,
    network: Mode,
    refused: usize,
}

fn timer_state(runtime: Runtime) -> String {
    if runtime != Runtime::Systemd {
        return "n/a (no systemd)".into();
    }
    match cmd::which("systemctl") {
        Some(sc) => Command::new(sc)
            .args(["is-active", "box-snapshot.timer"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|e| format!("unknown ({e})")),
        None => "unknown (no systemctl)".into(),
    }
}

pub fn run(json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let restic = ctx.restic()?;
    let (snapshots, snapshots_error) = match restic.exists() {
        Ok(false) => (
            None,
            Some("no repository yet (run 'ag-box init')".to_string()),
        ),
        Ok(true) => match restic.snapshots(None) {
            Ok(s) => (Some(s.len()), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        },
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let conditional_writes = match ctx.conditional_writes() {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!("store probe failed: {e:#}");
            None
        }
    };
    let active = ctx.active_boxes()?;
    let s = Status {
        node: ctx.config.node.clone(),
        version: env!("CARGO_PKG_VERSION"),
        store: ctx.store.describe(),
        conditional_writes,
        repository: restic.describe().to_string(),
        snapshots,
        snapshots_error,
        memory_max: ctx.config.memory_max.clone(),
        timer: timer_state(ctx.runtime),
        runtime: ctx.runtime.label(),
        nodes: ctx.config.nodes.iter().map(|n| n.name.clone()).collect(),
        active_boxes: active.iter().map(|m| m.name.clone()).collect(),
        egress: active
            .iter()
            .map(|m| {
                let spec = ctx.spec(m);
                BoxEgress {
                    name: m.name.clone(),
                    network: spec.egress.mode,
                    refused: egress_log::read(&spec.egress_log())
                        .iter()
                        .filter(|r| !r.allowed)
                        .count(),
                }
            })
            .collect(),
    };
    if json {
        out!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    out!("node:          {} (ag-box {})", s.node, s.version);
    let cas = match s.conditional_writes {
        Some(true) => "conditional writes ok",
        Some(false) => "IGNORES conditional writes: leases refused unless BOX_S3_UNSAFE_LEASES=1",
        None => "unreachable",
    };
    out!("store:         {} ({cas})", s.store);
    out!("repository:    {}", s.repository);
    match (&s.snapshots, &s.snapshots_error) {
        (Some(n), _) => out!("snapshots:     {n}"),
        (None, Some(e)) => out!("snapshots:     error: {e}"),
        (None, None) => out!("snapshots:     unknown"),
    }
    out!(
        "memory max:    {}",
        s.memory_max
            .as_deref()
            .unwrap_or("none (BOX_MEMORY_MAX unset)")
    );
    out!("snapshot timer: {}", s.timer);
    out!("runtime:       {}", s.runtime);
    if !s.nodes.is_empty() {
        out!("nodes:         {}", s.nodes.join(" "));
    }
    out!("active boxes:");
    if s.active_boxes.is_empty() {
        out!("  (none)");
    }
    for e in &s.egress {
        let refused = match e.network {
            Mode::Host => String::new(),
            _ => format!(", {} refused", e.refused),
        };
        out!(
            "  {:<20} network {}{refused}",
            e.name,
            network_label(e.network)
        );
    }
    Ok(())
}
