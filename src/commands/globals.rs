//! `globals push|pull|auto`: the global agent credentials and config, one way, as restic snapshots;
//! `globals adopt`: a login made inside a box becomes the node's.

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::error::UserError;
use crate::plan::agent_home::Adopted;
use crate::plan::globals::{self, PUSH_FROM_PULL_NODE, Role};
use crate::plan::names::BoxName;
use crate::plan::oauth::StoredLogin;
use crate::plan::restic::{GLOBALS_TAG, globals_backup_args};
use crate::plan::text::escaped;
use crate::sys::agent_home;
use crate::sys::{oauth_refresh, restore};

/// What `globals` is asked to do.
pub(crate) enum Action {
    Push,
    Pull,
    /// Push or pull, as `BOX_GLOBALS_ROLE` says.
    Auto,
    /// Make the logins made inside this box the node's.
    Adopt(BoxName),
}

pub(crate) fn run(action: Action) -> Result<()> {
    let ctx = Ctx::load()?;
    let role = ctx.config.globals_role;
    if !matches!(action, Action::Adopt(_)) {
        require_tools(&["restic"])?;
    }
    match action {
        Action::Adopt(name) => adopt(&ctx, &name),
        Action::Push => push(&ctx, role),
        Action::Pull => pull(&ctx),
        Action::Auto => match role {
            Some(Role::Push) => push(&ctx, role),
            Some(Role::Pull) => pull(&ctx),
            None => {
                say!("BOX_GLOBALS_ROLE is not set on this node: globals not synced");
                Ok(())
            }
        },
    }
}

fn push(ctx: &Ctx, role: Option<Role>) -> Result<()> {
    if role == Some(Role::Pull) {
        tracing::warn!("{PUSH_FROM_PULL_NODE}");
    }
    // An OAuth login the broker keeps travels through the store, sealed, never in a snapshot
    // (a pull of an older one would roll a spent refresh token back).
    let brokered = brokered_logins(ctx, |row, file| {
        oauth_refresh::read_login(file, crate::plan::broker::shape_of(row)).is_ok()
    });
    for (row, file) in &brokered {
        if let Some(shared) = super::refresh::shared(ctx)
            && oauth_refresh::offer(row, file, &crate::plan::broker::lock_file(row), &shared)?
        {
            say!(
                "the {row} login is in the store for the other nodes' brokers (sealed; no snapshot holds it)"
            );
        }
    }
    let paths: Vec<_> = globals::global_paths(&ctx.config.home)
        .into_iter()
        .filter(|p| p.exists() && !brokered.iter().any(|(_, f)| f == p))
        .collect();
    if paths.is_empty() {
        say!("no global agent files on this node: nothing to push");
        return Ok(());
    }
    let restic = ctx.restic()?;
    restic.ensure_repo()?;
    let id = restic
        .backup("globals", &globals_backup_args(&ctx.config.node, &paths))?
        .id;
    out!("globals {id}");
    say!(
        "pushed {} global files and dirs (snapshot {})",
        paths.len(),
        id.short()
    );
    Ok(())
}

fn pull(ctx: &Ctx) -> Result<()> {
    let restic = ctx.restic()?;
    let home = ctx.config.home.clone();
    // An older snapshot may hold one: it is not put back over what the store holds.
    let brokered = brokered_logins(ctx, |row, _| {
        super::refresh::shared(ctx).is_some_and(|s| {
            s.store
                .account(row)
                .ok()
                .flatten()
                .and_then(|(bytes, _)| serde_json::from_slice::<StoredLogin>(&bytes).ok())
                .is_some_and(|stored| stored.sealed.is_some())
        })
    });
    // The logins first: they need no snapshot (`ag-box login` puts one in the store alone).
    let mut took = 0;
    if let Some(shared) = super::refresh::shared(ctx) {
        for (row, file) in &brokered {
            if oauth_refresh::take(row, file, &crate::plan::broker::lock_file(row), &shared)? {
                say!("took the {row} login from the store (newer than this node's)");
                took += 1;
            }
        }
    }
    let Some(newest) = restic
        .snapshots(Some(GLOBALS_TAG))?
        .into_iter()
        .max_by(|a, b| a.time.cmp(&b.time))
    else {
        if took > 0 {
            say!("there is no globals snapshot yet: only the store's logins were pulled");
            return Ok(());
        }
        return Err(UserError::failed(
            "there is no globals snapshot yet",
            "run 'ag-box globals push' on the push node first",
        )
        .into());
    };
    let candidates: Vec<_> = globals::global_paths(&home)
        .into_iter()
        .filter(|p| !brokered.iter().any(|(_, f)| f == p))
        .collect();
    let placed = restore::restore_into_live(
        ctx.repo.as_ref(),
        &newest.id,
        &home.join(".ag-box-globals"),
        &candidates,
    )?;
    out!("globals {}", newest.id);
    say!(
        "pulled {} global files and dirs from snapshot {} ({})",
        placed.len(),
        newest.id.short(),
        newest.time
    );
    Ok(())
}

/// The OAuth logins the broker keeps in the store (where nodes share one) that `globals`
/// carries through it rather than in snapshots: those `through_store` picks.
fn brokered_logins(
    ctx: &Ctx,
    through_store: impl Fn(&str, &std::path::Path) -> bool,
) -> Vec<(&'static str, std::path::PathBuf)> {
    if super::refresh::shared(ctx).is_none() {
        return vec![];
    }
    super::refresh::oauth_files(ctx)
        .into_iter()
        .filter(|(row, file)| through_store(row, file))
        .collect()
}

fn adopt(ctx: &Ctx, name: &BoxName) -> Result<()> {
    ctx.tracked(name)?;
    // No `up` may start the box while its files move: its agent would refresh the old login.
    let _lock = ctx.lock(name, "globals adopt")?;
    let meta = ctx.tracked(name)?.meta;
    let spec = ctx.spec(&meta);
    if ctx.runtime.is_active(&spec) {
        return Err(UserError::failed(
            format!("box '{name}' is running here: its agent may still refresh the login it holds"),
            format!("'ag-box stop {name}' (or park it), then adopt"),
        )
        .into());
    }
    // Nothing moves unless every login can.
    crate::sys::broker::check_adoptable(&spec)?;
    let mut adopted = agent_home::adopt_logins(&spec)?;
    adopted.extend(crate::sys::broker::adopt_box_logins(&spec)?);
    if adopted.is_empty() {
        say!("box '{name}' holds no login of its own on this node: nothing to adopt");
        return Ok(());
    }
    for (rel, what) in &adopted {
        match what {
            Adopted::Moved(dest) => {
                out!("adopted {}", escaped(&dest.to_string_lossy()));
                say!("box '{name}': its ~/{rel} is now this node's");
            }
            Adopted::NodeHasOne(dest) => tracing::warn!(
                "box '{name}': this node has {} of its own meanwhile: both left as they are",
                escaped(&dest.to_string_lossy())
            ),
        }
    }
    if adopted.iter().any(|(_, a)| matches!(a, Adopted::Moved(_))) {
        // A broker's login goes into the store at once for the other nodes (sealed).
        if let Some(shared) = super::refresh::shared(ctx) {
            for (row, file) in super::refresh::oauth_files(ctx) {
                if oauth_refresh::offer(row, &file, &crate::plan::broker::lock_file(row), &shared)?
                {
                    say!("the {row} login is in the store for the other nodes' brokers");
                }
            }
        }
        say!(
            "every box on this node uses it from its next start; 'ag-box globals push' carries it to the other nodes"
        );
    }
    Ok(())
}
