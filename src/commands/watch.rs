//! `ag-box __watch <box>` (hidden): beside a box running on this node, for as long as it runs
//! under the lease it started with. It reads the box's agent state file (`sys::attention`)
//! every quarter second and, when it changes, publishes it in the box's record for `ls` and
//! `wait` on every node, and tells `BOX_NOTIFY` of a change into waiting or idle. It writes only through conditional writes on the lease it started
//! under, so it can never undo a lease change; on a store without them the state stays here.

use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::Ctx;
use crate::plan::attention::{AgentState, Heard, State};
use crate::plan::names::BoxName;
use crate::plan::notify::{self, Notice, Target};
use crate::store::meta::{Lease, Meta};
use crate::store::{Step, update};
use crate::sys::attention;
use crate::sys::notify as sys_notify;

const POLL: Duration = Duration::from_millis(250);
/// How often it asks whether the box still runs (a process or two each time).
const ALIVE_CHECK: Duration = Duration::from_secs(5);
/// How soon a failed write of the record is tried again.
const RETRY: Duration = Duration::from_secs(5);

pub(crate) fn run(name: &BoxName) -> Result<()> {
    let ctx = Ctx::load()?;
    let stored = ctx.tracked(name)?;
    let Some(lease) = stored
        .meta
        .lease
        .clone()
        .filter(|l| l.node == ctx.config.node)
    else {
        return Ok(());
    };
    let spec = ctx.spec(&stored.meta);
    let publish = match ctx.conditional_writes() {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(
                "box '{name}': the store takes no conditional writes: its agent's state is shown on this node only"
            );
            false
        }
        Err(e) => {
            tracing::warn!(
                "box '{name}': cannot tell whether the store takes conditional writes ({e:#}): its agent's state is shown on this node only"
            );
            false
        }
    };
    // What the file said last, and what the record holds; a failed write is tried again.
    let mut last: Option<AgentState> = None;
    let mut published: Option<AgentState> = None;
    let mut retry_at = Instant::now();
    // A notice due but held back by the gap since the last, and the last sent (watcher's clock).
    let mut pending: Option<AgentState> = None;
    let mut sent: Option<(State, Instant)> = None;
    let teller = ctx.config.notify.clone().map(teller);
    let mut checked = Instant::now();
    loop {
        std::thread::sleep(POLL);
        if checked.elapsed() >= ALIVE_CHECK {
            if !ctx.runtime.is_active(&spec) {
                return Ok(());
            }
            checked = Instant::now();
        }
        // Nothing believable there (none yet, or what the box planted): nothing is published.
        let now = attention::read(&spec);
        if let Some(said) = now.as_ref().filter(|s| last.as_ref() != Some(*s)) {
            // A question answered, or a turn begun, before its notice went: no longer news.
            pending = notify::news(last.as_ref(), said).then(|| said.clone());
            last = Some(said.clone());
        }
        if let (Some(tx), Some(due)) = (&teller, &pending)
            && notify::may_send(sent.map(|(s, at)| (s, at.elapsed())), due.state)
        {
            if tx.try_send(Notice::of(name, &lease.node, due)).is_err() {
                tracing::warn!("box '{name}': BOX_NOTIFY is behind: a notice was dropped");
            }
            sent = Some((due.state, Instant::now()));
            pending = None;
        }
        if publish && published != now && Instant::now() >= retry_at {
            match publish_state(&ctx, name, &lease, now.as_ref()) {
                Ok(true) => published = now,
                // The lease moved on: this box is no longer this watcher's.
                Ok(false) => return Ok(()),
                Err(e) => {
                    tracing::warn!("box '{name}': publishing its agent's state: {e:#}");
                    retry_at = Instant::now() + RETRY;
                }
            }
        }
    }
}

/// The thread that sends notices, one at a time, from a short queue: a slow or failing target
/// never holds the watch up, and never gathers threads.
fn teller(target: Target) -> SyncSender<Notice> {
    let (tx, rx) = sync_channel::<Notice>(4);
    std::thread::spawn(move || {
        for notice in rx {
            if let Err(e) = sys_notify::send(&target, &notice) {
                tracing::warn!("box '{}': BOX_NOTIFY: {e:#}", notice.name);
            }
        }
    });
    tx
}

/// Write `state` (None: none known) into the record while it still holds `lease`; false when
/// it no longer does.
fn publish_state(ctx: &Ctx, name: &str, lease: &Lease, state: Option<&AgentState>) -> Result<bool> {
    update(ctx.store.as_ref(), name, |m| match &m.lease {
        Some(l) if l.node == lease.node && l.epoch == lease.epoch => Ok(Step::Write(
            Meta {
                attention: state.map(|s| Heard {
                    node: lease.node.clone(),
                    epoch: lease.epoch,
                    state: s.clone(),
                }),
                ..m.clone()
            },
            true,
        )),
        _ => Ok(Step::Keep(false)),
    })
}
