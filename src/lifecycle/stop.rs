//! `stop`: end the box's processes without a snapshot, whatever its trees hold (a tree no
//! walk or restic can take whole must never keep a box running). The lease and the copy stay
//! with this node: `up` starts the copy again, `park` saves it and frees the node.

use anyhow::Result;

use super::{Ctx, not_up_here};
use crate::plan::names::BoxName;
use crate::store::meta::Meta;
use crate::store::{Step, events, update};

pub(crate) fn stop(ctx: &Ctx, name: &BoxName) -> Result<()> {
    let _lock = ctx.lock(name, "stop")?;
    let meta = ctx.tracked(name)?.meta;
    let spec = ctx.spec(&meta);
    if !ctx.runtime.is_active(&spec) {
        return Err(not_up_here(name).into());
    }
    ctx.runtime.stop(&spec)?;
    // Its agent no longer does what its node last published: `ls` and `wait` elsewhere would
    // believe it while the lease stays.
    let cleared = update(ctx.store.as_ref(), name, |m| {
        Ok(match &m.attention {
            Some(_) => Step::Write(
                Meta {
                    attention: None,
                    ..m.clone()
                },
                (),
            ),
            None => Step::Keep(()),
        })
    });
    if let Err(e) = cleared {
        tracing::warn!("box '{name}': clearing its agent's published state: {e:#}");
    }
    ctx.record_event(
        name,
        events::Step {
            verb: "stop",
            epoch: meta.lease.as_ref().map(|l| l.epoch),
            ..Default::default()
        },
    );
    say!(
        "stopped box '{name}' without a snapshot; its lease and its copy stay on {}: 'ag-box up {name}' starts it again, 'ag-box park {name}' saves it and frees the node",
        ctx.config.node
    );
    Ok(())
}
