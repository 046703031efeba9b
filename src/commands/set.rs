//! `set <name> key=value...`: per-box settings (memory_max, nix, pin).

use anyhow::Result;

use super::Ctx;
use crate::store::{Step, update};

pub fn run(name: &str, assignments: &[String]) -> Result<()> {
    let ctx = Ctx::load()?;
    ctx.tracked(name)?;
    let meta = update(ctx.store.as_ref(), name, |m| {
        let mut next = m.clone();
        for a in assignments {
            next = next.with_setting(a)?;
        }
        Ok(Step::Write(next.clone(), next))
    })?;
    say!(
        "box '{name}': memory_max={} nix={} pin={} (takes effect at the next 'ag-box up')",
        meta.memory_max.as_deref().unwrap_or("none"),
        meta.nix,
        meta.pinned_node.as_deref().unwrap_or("none")
    );
    Ok(())
}
