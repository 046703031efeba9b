//! `status [--json]`: this node's view in one place.

use std::process::Command;

use anyhow::Result;
use serde::Serialize;

use super::ls::network_label;
use super::{Ctx, JSON_SCHEMA_VERSION};
use crate::atomic;
use crate::plan::egress::Mode;
use crate::plan::{history, text};
use crate::store::lease;
use crate::sys::restic::Restic;
use crate::sys::runtime_kind::Runtime;
use crate::sys::{cmd, egress_log, freezer};

#[derive(Serialize)]
struct Status {
    schema_version: u32,
    node: String,
    version: &'static str,
    store: String,
    /// None when the store could not be probed.
    conditional_writes: Option<bool>,
    repository: String,
    snapshots: Option<usize>,
    /// When `snapshots` was counted (`status --deep`); the figure is cached in the state dir.
    snapshots_counted_at: Option<String>,
    snapshots_error: Option<String>,
    memory_max: Option<String>,
    /// The bounds of every box started here from now on (`BOX_TASKS_MAX`, `BOX_TMPFS_MAX`).
    tasks_max: u64,
    tmpfs_max: u64,
    /// `BOX_SNAPSHOT_ADD_MAX` in bytes; null: no bound.
    snapshot_add_max: Option<u64>,
    /// The hourly snapshot timer's state; null without systemd.
    timer: Option<String>,
    /// What the last `snapshot --active` here measured (the hourly timer runs it).
    last_active_run: Option<ActiveRun>,
    runtime: &'static str,
    nodes: Vec<String>,
    active_boxes: Vec<String>,
    /// Each active box's network mode and the refusals its proxy logged here.
    egress: Vec<BoxEgress>,
}

#[derive(Serialize)]
struct ActiveRun {
    at: String,
    boxes: usize,
    longest_box: Option<String>,
    longest_seconds: Option<f64>,
    /// Bytes: the most one of its processes (an ag-box or a restic) took.
    peak_memory: u64,
    /// The most snapshots that ran at once, and how busy all cores were meanwhile (0 to 1):
    /// the next run plans its width by them.
    at_once: usize,
    cores_busy: f64,
}

fn last_active_run(ctx: &Ctx) -> Option<ActiveRun> {
    let (run, at) = super::snapshot::last_run(&ctx.config.state_dir)?;
    let longest = run.longest();
    Some(ActiveRun {
        at: lease::timestamp(at),
        boxes: run.seconds.len(),
        longest_box: longest.map(|l| l.0.to_string()),
        longest_seconds: longest.map(|l| l.1),
        peak_memory: run.peak_memory,
        at_once: run.width,
        cores_busy: run.busy,
    })
}

#[derive(Serialize)]
struct BoxEgress {
    #[serde(rename = "box")]
    name: String,
    network: Mode,
    refused: usize,
    /// Set while a snapshot has the box's processes paused (they resume when it is read).
    paused_since: Option<String>,
}

/// What `systemctl is-active box-snapshot.timer` says (`active`, `inactive`, ...); None without
/// systemd (the direct runtime has no timer).
fn timer_state(runtime: Runtime) -> Option<String> {
    if runtime != Runtime::Systemd {
        return None;
    }
    let said = cmd::which("systemctl").and_then(|sc| {
        Command::new(sc)
            .args(["is-active", "box-snapshot.timer"])
            .output()
            .ok()
    });
    Some(said.map_or("unknown".into(), |o| {
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }))
}

/// The last count of the repository's snapshots, and when it was made.
#[derive(Serialize, serde::Deserialize)]
struct Counted {
    snapshots: usize,
    at: String,
}

fn count_file(ctx: &Ctx) -> std::path::PathBuf {
    ctx.config.state_dir.join("snapshot-count.json")
}

/// (count, counted at, error): counted now with `deep` (and cached), else from the cache.
fn snapshot_count(
    ctx: &Ctx,
    deep: bool,
) -> Result<(Option<usize>, Option<String>, Option<String>)> {
    if !deep {
        let cached = std::fs::read(count_file(ctx))
            .ok()
            .and_then(|b| serde_json::from_slice::<Counted>(&b).ok());
        return Ok(match cached {
            Some(c) => (Some(c.snapshots), Some(c.at), None),
            None => (
                None,
                None,
                Some("not counted yet: run 'ag-box status --deep'".into()),
            ),
        });
    }
    let restic = ctx.restic()?;
    Ok(match restic.exists() {
        Ok(false) => (
            None,
            None,
            Some("no repository yet (run 'ag-box init')".to_string()),
        ),
        Ok(true) => match restic.snapshots(None) {
            Ok(s) => {
                let counted = Counted {
                    snapshots: s.len(),
                    at: lease::timestamp(ctx.now()),
                };
                if let Err(e) =
                    atomic::write(&count_file(ctx), &serde_json::to_vec(&counted)?, 0o644)
                {
                    tracing::warn!("not caching the snapshot count: {e:#}");
                }
                (Some(counted.snapshots), Some(counted.at), None)
            }
            Err(e) => (None, None, Some(format!("{e:#}"))),
        },
        Err(e) => (None, None, Some(format!("{e:#}"))),
    })
}

// One report, gathered in the order it prints.
#[allow(clippy::too_many_lines)]
pub(crate) fn run(json: bool, deep: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let (snapshots, snapshots_counted_at, snapshots_error) = snapshot_count(&ctx, deep)?;
    let conditional_writes = match ctx.conditional_writes() {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!("store probe failed: {e:#}");
            None
        }
    };
    let active = ctx.active_boxes()?;
    let s = Status {
        schema_version: JSON_SCHEMA_VERSION,
        node: ctx.config.node.clone(),
        version: env!("CARGO_PKG_VERSION"),
        store: ctx.store.describe(),
        conditional_writes,
        // Named only: no need to open it (or to give this node a key of its own).
        repository: Restic::new(&ctx.config)?.describe().to_string(),
        snapshots,
        snapshots_counted_at,
        snapshots_error,
        memory_max: ctx.config.memory_max.clone(),
        tasks_max: ctx.config.tasks_max,
        tmpfs_max: ctx.config.tmpfs_max,
        snapshot_add_max: ctx.config.snapshot_add_max,
        timer: timer_state(ctx.runtime.kind()),
        last_active_run: last_active_run(&ctx),
        runtime: ctx.runtime.kind().label(),
        nodes: ctx.config.nodes.iter().map(|n| n.name.clone()).collect(),
        active_boxes: active.iter().map(|m| m.name.clone()).collect(),
        egress: active
            .iter()
            .map(|m| {
                let spec = ctx.spec_in_force(m);
                freezer::resume_orphaned(&spec);
                BoxEgress {
                    name: m.name.clone(),
                    network: spec.egress.mode,
                    refused: egress_log::read(&spec.egress_log())
                        .iter()
                        .filter(|r| !r.allowed)
                        .count(),
                    paused_since: freezer::paused_since(&spec),
                }
            })
            .collect(),
    };
    if json {
        super::print_json(&s)?;
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
        (Some(n), _) if deep => out!("snapshots:     {n}"),
        (Some(n), _) => out!(
            "snapshots:     {n} (counted {}, cached in {}; 'ag-box status --deep' counts now)",
            s.snapshots_counted_at.as_deref().unwrap_or("?"),
            count_file(&ctx).display()
        ),
        (None, Some(e)) => out!("snapshots:     {e}"),
        (None, None) => out!("snapshots:     unknown"),
    }
    out!(
        "memory max:    {}",
        s.memory_max
            .as_deref()
            .unwrap_or("none (BOX_MEMORY_MAX=infinity)")
    );
    out!(
        "box bounds:    {} tasks, /tmp and HOME {} MiB each",
        s.tasks_max,
        s.tmpfs_max >> 20
    );
    out!(
        "snapshot bound: {}",
        s.snapshot_add_max
            .map_or("none (BOX_SNAPSHOT_ADD_MAX)".to_string(), |b| format!(
                "{} of new or changed files at most",
                history::size(b)
            ))
    );
    out!(
        "snapshot timer: {}",
        s.timer
            .as_deref()
            .unwrap_or("none (no systemd: the direct runtime)")
    );
    if let Some(r) = &s.last_active_run {
        out!(
            "last --active: {}, {} boxes, {} at once (cores {:.0}% busy){}, at most {} MiB per process",
            r.at,
            r.boxes,
            r.at_once,
            r.cores_busy * 100.0,
            match (&r.longest_box, r.longest_seconds) {
                (Some(b), Some(t)) => format!(", longest {b} ({t:.1} s)"),
                _ => String::new(),
            },
            r.peak_memory >> 20
        );
    }
    out!("runtime:       {}", s.runtime);
    if !s.nodes.is_empty() {
        out!("nodes:         {}", s.nodes.join(" "));
    }
    out!("active boxes:");
    if s.active_boxes.is_empty() {
        out!("  (none)");
    }
    let mut rows = Vec::new();
    for e in &s.egress {
        let refused = match e.network {
            Mode::Host => String::new(),
            _ => format!(", {} refused", e.refused),
        };
        let paused = e.paused_since.as_ref().map_or(String::new(), |t| {
            format!(", paused for a snapshot since {t}")
        });
        rows.push(vec![
            format!("  {}", e.name),
            format!("network {}{refused}{paused}", network_label(e.network)),
        ]);
    }
    for line in text::table(&rows) {
        out!("{line}");
    }
    Ok(())
}
