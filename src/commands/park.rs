//! `park <name>`: snapshot, stop the box, release the lease.

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::lifecycle;
use crate::plan::names::BoxName;
use crate::plan::snapshot_id::SnapshotId;

/// `park --json`.
#[derive(serde::Serialize)]
struct Parked<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    name: &'a str,
    /// The node it was parked on, now free of it.
    node: &'a str,
    /// The final snapshot's full id: what the next `up` restores.
    snapshot: &'a SnapshotId,
}

pub(crate) fn run(name: &BoxName, accept_partial: bool, now: bool, json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let meta = ctx.tracked(name)?.meta;
    require_tools(&["restic"])?;
    ctx.restic()?;
    if !now {
        super::turn::wait_for_turn(&ctx, &meta, "park");
    }
    let snapshot = lifecycle::park::park(&ctx, name, accept_partial)?;
    if json {
        super::print_json(&Parked {
            schema_version: super::JSON_SCHEMA_VERSION,
            name,
            node: &ctx.config.node,
            snapshot: &snapshot,
        })
    } else {
        out!("{name} {snapshot}");
        Ok(())
    }
}
