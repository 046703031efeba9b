//! `ag-box __refresh --login <row>`: what a box's proxy runs to make an OAuth login of the node
//! fresh where nodes share a store (`sys::oauth_refresh`). A process of its own, so that the
//! store's credentials and `RESTIC_PASSWORD` never enter the proxy, which faces the box.

use anyhow::{Context, Result};

use super::Ctx;
use crate::plan::broker::RULES;
use crate::store::Accounts;
use crate::sys::oauth_refresh::{self, Login, Shared};

/// Where this node shares the broker's logins with others: a store that keeps them, and the
/// password that seals them there.
pub(crate) fn shared(ctx: &Ctx) -> Option<Shared<'_>> {
    let store: &dyn Accounts = ctx.store.as_ref();
    ctx.config
        .restic_password
        .as_ref()
        .filter(|_| store.keeps_accounts())
        .map(|password| Shared {
            store,
            node: &ctx.config.node,
            password: password.expose().as_bytes(),
        })
}

/// The broker's OAuth logins, by row, and their node files.
pub(crate) fn oauth_files(ctx: &Ctx) -> Vec<(&'static str, std::path::PathBuf)> {
    RULES
        .iter()
        .filter(|r| r.oauth.is_some())
        .map(|r| (r.name, ctx.config.home.join(r.copied)))
        .collect()
}

pub(crate) fn run(row: &str, expect_shared: bool, box_name: Option<&str>) -> Result<()> {
    // A refresh under way is not cut short by the stop of the box whose proxy started it: the
    // refresh token it redeems is spent, and only this process can keep the new one.
    let heard = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, heard.clone())
            .context("keeping the refresh from being cut short")?;
    }
    let ctx = Ctx::load()?;
    let (rule, endpoint) = RULES
        .iter()
        .find_map(|r| Some((r, r.oauth?)).filter(|(r, _)| r.name == row))
        .with_context(|| format!("{row} is no OAuth login of the broker"))?;
    // A box's own login: the broker's file of it, a lock of its own, never shared.
    let (file, lock) = match box_name {
        Some(name) => (
            crate::plan::broker::box_login_file(&ctx.config.state_dir.join("broker"), name, row),
            crate::plan::broker::lock_file(&format!("{row}.{name}")),
        ),
        None => (
            ctx.config.home.join(rule.copied),
            crate::plan::broker::lock_file(row),
        ),
    };
    let login = Login {
        row,
        file: &file,
        lock: &lock,
        token_host: endpoint.host,
        token_path: endpoint.path,
        client_id: endpoint.client_id,
    };
    let shared = shared(&ctx).filter(|_| box_name.is_none());
    anyhow::ensure!(
        shared.is_some() || !expect_shared,
        "this node's config names no store shared by nodes (or no RESTIC_PASSWORD), but the box's start found one: refusing to refresh the {row} login without the store's lease"
    );
    oauth_refresh::refresh(&login, shared.as_ref(), &*oauth_refresh::blocking_post()?)
}
