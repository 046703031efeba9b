//! The agent's turn as this node sees it (`plan::attention`), for `ls` and `wait`; and before
//! `park` or `rollback` stops a box running here, the wait, up to `BOX_PARK_WAIT`, for its agent
//! to finish the turn it is in, so that nothing is cut off mid-turn. Ctrl-C ends the wait, and
//! the verb, which has changed nothing yet.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Ctx;
use crate::plan::attention::{AgentState, State};
use crate::plan::sandbox::BoxSpec;
use crate::store::meta::Meta;
use crate::sys::attention;

/// What the box's agent is doing, as this node sees it: its state file when the box runs here
/// (`running_here`); nothing when its lease is here but it is stopped, whatever was published
/// before; else what the node holding it published.
pub(crate) fn state_seen(ctx: &Ctx, meta: &Meta, running_here: bool) -> Option<AgentState> {
    let held_here = meta
        .lease
        .as_ref()
        .is_some_and(|l| l.node == ctx.config.node);
    match (running_here, held_here) {
        (true, _) => attention::read(&ctx.spec(meta)),
        (false, true) => None,
        (false, false) => meta.agent_state().cloned(),
    }
}

/// How often the state file is read while waiting.
const POLL: Duration = Duration::from_millis(250);

pub(crate) fn wait_for_turn(ctx: &Ctx, meta: &Meta, verb: &str) {
    let spec = ctx.spec(meta);
    let name = &meta.name;
    let working = || attention::read(&spec).filter(|s| s.state == State::Working);
    if !ctx.runtime.is_active(&spec) {
        return;
    }
    let Some(now) = working() else {
        settle(&spec);
        return;
    };
    let limit = ctx.config.park_wait;
    say!(
        "box '{name}': {} is mid-turn; the {verb} waits up to {} for the turn to end ('--now' does not wait)",
        now.agent,
        humantime::format_duration(limit)
    );
    let end = Instant::now() + limit;
    while Instant::now() < end {
        std::thread::sleep(POLL);
        if working().is_none() {
            say!("box '{name}': {} ended its turn", now.agent);
            settle(&spec);
            return;
        }
    }
    tracing::warn!(
        "box '{name}': {} is still mid-turn after {}; the {verb} goes on",
        now.agent,
        humantime::format_duration(limit)
    );
}

/// An agent writes the last of a turn (Claude Code: its transcript's answer) just after it says
/// the turn ended; a box stopped in that moment loses it (seen: one park in two). A turn that
/// ended less than this ago is given the rest, at most this long whatever the box's file says.
const SETTLE: Duration = Duration::from_secs(2);

fn settle(spec: &BoxSpec) {
    let Some(idle) = attention::read(spec).filter(|s| s.state == State::Idle) else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let ago = Duration::from_secs(now.saturating_sub(idle.since));
    if let Some(rest) = SETTLE.checked_sub(ago).filter(|r| !r.is_zero()) {
        std::thread::sleep(rest);
    }
}
