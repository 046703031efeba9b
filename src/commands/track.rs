//! `track <name> [path]`: register a directory as a box and take its first snapshot
//! (`lifecycle::track`).

use std::path::PathBuf;

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::lifecycle::track::{self, AgentChoice};
use crate::plan::names::BoxName;
use crate::plan::snapshot_id::SnapshotId;

/// `track --json`.
#[derive(serde::Serialize)]
struct Tracked<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    path: &'a std::path::Path,
    /// The node that holds it now (its files are here).
    node: &'a str,
    uid: u32,
    gid: u32,
    pinned_node: Option<&'a str>,
    /// Its agent (`--agent`, else the one whose sessions it imported), null for none.
    agent: Option<&'a str>,
    /// The first snapshot's full id.
    snapshot: &'a SnapshotId,
}

pub(crate) fn run(
    name: &BoxName,
    path: Option<PathBuf>,
    nix: bool,
    agent: AgentChoice,
    json: bool,
) -> Result<()> {
    let ctx = Ctx::load()?;
    let project = track::project_dir(&ctx.config.home, name, path)?;
    require_tools(&["restic"])?;
    // The repository opens only once every refusal is past.
    let ready = || {
        ctx.require_safe_leases()?;
        ctx.restic()?.require_repo()
    };
    let tracked = track::track(&ctx, name, &project, nix, agent, ready)?;
    let meta = &tracked.meta;
    let pin = meta
        .pinned_node
        .as_ref()
        .map(|n| format!(", pinned to {n} (.auth-secret present)"))
        .unwrap_or_default();
    say!(
        "tracked box '{name}' at {}{pin}, agent {}; first snapshot {}",
        project.display(),
        meta.agent_label(),
        tracked.snapshot.short()
    );
    if json {
        let ids = meta.ids();
        super::print_json(&Tracked {
            schema_version: super::JSON_SCHEMA_VERSION,
            name,
            path: &project,
            node: &ctx.config.node,
            uid: ids.uid,
            gid: ids.gid,
            pinned_node: meta.pinned_node.as_deref(),
            agent: meta.agent.as_deref(),
            snapshot: &tracked.snapshot,
        })?;
    }
    Ok(())
}
