//! `creds [--json]`: the node's logins the credential broker stands in for, the accounts and
//! tokens it holds of each, the hosts those tokens go to, the boxes that may use them (through
//! the broker, or as the node's own files on the host's network), and the node's CA.

use anyhow::Result;
use serde::Serialize;

use super::{Ctx, JSON_SCHEMA_VERSION};
use crate::plan::broker::RULES;
use crate::plan::doctor;
use crate::plan::oauth::StoredLogin;
use crate::plan::text::escaped;
use crate::store::Accounts;
use crate::sys::{broker, node_ca};

#[derive(Serialize)]
struct Report {
    schema_version: u32,
    node: String,
    logins: Vec<Held>,
    ca: Ca,
}

#[derive(Serialize)]
struct Held {
    login: &'static str,
    /// The node's file (or dir) of HOME the tokens are in.
    file: &'static str,
    /// An OAuth login (refreshed by the broker), not a key.
    oauth: bool,
    /// An OAuth login's access token expires then (RFC 3339); refreshed by the broker when due.
    expires: Option<String>,
    /// Where nodes share a store: the node that last refreshed an OAuth login, and when.
    refreshed_by: Option<String>,
    refreshed_at: Option<String>,
    /// `user@host`, as the node's login files name them.
    accounts: Vec<String>,
    /// Distinct tokens the broker holds of this login.
    tokens: usize,
    hosts: Vec<&'static str>,
    /// Boxes given this login through the broker (they see placeholders).
    brokered_for: Vec<String>,
    /// Boxes given the node's own files (on the host's network: no proxy to stand in).
    unbrokered_for: Vec<String>,
}

#[derive(Serialize)]
struct Ca {
    path: String,
    status: doctor::Status,
    detail: String,
}

/// The store's copy of an OAuth login, where the store keeps one (a store that cannot be read
/// is said, and the row shown without it).
fn stored_login(store: &dyn Accounts, row: &str) -> Option<StoredLogin> {
    let (bytes, _) = store
        .account(row)
        .map_err(|e| tracing::warn!("reading the store's {row} login: {e:#}"))
        .ok()??;
    serde_json::from_slice(&bytes).ok()
}

pub(crate) fn run(json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let records = ctx.store.list()?;
    let logins: Vec<Held> = RULES
        .iter()
        .map(|rule| {
            let held = broker::held(&ctx.config.home, rule);
            let stored = rule
                .oauth
                .and_then(|_| stored_login(ctx.store.as_ref(), rule.name));
            let mut login = Held {
                login: rule.login,
                file: rule.copied,
                oauth: rule.oauth.is_some(),
                expires: held.expires_at_ms.map(crate::plan::text::rfc3339_ms),
                refreshed_by: stored.as_ref().and_then(|s| s.refreshed_by.clone()),
                refreshed_at: stored
                    .as_ref()
                    .and_then(|s| s.refreshed_at_ms)
                    .map(crate::plan::text::rfc3339_ms),
                accounts: held.accounts,
                tokens: held.tokens,
                hosts: rule.hosts.to_vec(),
                brokered_for: vec![],
                unbrokered_for: vec![],
            };
            // A row the node's files hold nothing of concerns no box.
            for meta in records.iter().filter(|_| login.tokens > 0) {
                let spec = ctx.spec(meta);
                if !spec.agent_home.logins.contains(&rule.login) {
                    continue;
                }
                if spec.broker_rules().iter().any(|r| r.login == rule.login)
                    && spec.broker_held.contains(&rule.name)
                {
                    login.brokered_for.push(meta.name.clone());
                } else {
                    login.unbrokered_for.push(meta.name.clone());
                }
            }
            login
        })
        .collect();
    let dir = ctx.config.state_dir.join("ca");
    let check = node_ca::check(&dir);
    let report = Report {
        schema_version: JSON_SCHEMA_VERSION,
        node: ctx.config.node.clone(),
        logins,
        ca: Ca {
            path: dir.display().to_string(),
            status: check.status,
            detail: check.detail,
        },
    };
    if json {
        return super::print_json(&report);
    }
    for l in &report.logins {
        let accounts = if l.accounts.is_empty() {
            "no account on this node".to_string()
        } else {
            l.accounts.join(", ")
        };
        let none = || "none".to_string();
        // Accounts come from the node's files, as whatever wrote them wrote them.
        let refreshed = match (&l.refreshed_by, &l.refreshed_at) {
            (Some(by), Some(at)) => format!(", refreshed by {} at {at}", escaped(by)),
            _ => String::new(),
        };
        let expires = l
            .expires
            .as_ref()
            .map(|e| format!(", expires {e}{refreshed}"))
            .unwrap_or_default();
        let kind = if l.oauth { " OAuth" } else { "" };
        println!(
            "{}{kind}: {} ({} held{expires}), for {}",
            l.login,
            escaped(&accounts),
            crate::plan::text::count(l.tokens, "token"),
            l.hosts.join(", ")
        );
        println!(
            "  brokered for: {}",
            Some(l.brokered_for.join(", "))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(none)
        );
        if !l.unbrokered_for.is_empty() {
            println!(
                "  the node's own files, unbrokered (network=host): {}",
                l.unbrokered_for.join(", ")
            );
        }
    }
    println!("node CA: {}", report.ca.detail);
    Ok(())
}
