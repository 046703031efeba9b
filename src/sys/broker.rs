//! What a box start prepares for the credential broker (docs/design.md "Credential broker"):
//! the copies of the node's brokered login files the box sees (tokens replaced by
//! placeholders), the CA bundle it trusts, and the file its proxy reads (the real tokens and a
//! certificate by the node's CA for the ruled hosts), root's alone in the run dir.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, Result};

use crate::atomic;
use crate::plan::broker::{self, BrokerFile, Secret};
use crate::plan::sandbox::{BoxSpec, SYSTEM_CA_BUNDLE};
use crate::sys::node_ca;

/// The most of a login file read (gh's files are a few hundred bytes).
const MAX_FILE: u64 = 1 << 20;

/// Write what the box's start needs for the logins the broker stands in for (none: nothing).
pub(crate) fn prepare(spec: &BoxSpec) -> Result<()> {
    let rules = spec.broker_rules();
    let copies = broker::copies_seen(
        &spec.agent_home.logins,
        spec.egress.mode.isolated(),
        &spec.broker_held,
        crate::plan::agent_home::is_login_file,
    );
    if copies.is_empty() {
        return Ok(());
    }
    let ca_hosts = broker::ruled_hosts();
    let ca = node_ca::ensure(&spec.node_ca, &ca_hosts)?;
    let dir = spec.broker_dir();
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let mut secrets = Vec::new();
    for row in copies {
        let found = match row.login {
            "gh" => copy_gh(spec, ca.secret())?,
            login => copy_file(spec, row, ca.secret())?
                .into_iter()
                .map(|(placeholder, real)| Secret {
                    login: login.into(),
                    placeholder,
                    real,
                })
                .collect(),
        };
        // A login the box is not given: its copy holds placeholders that go nowhere.
        if rules.iter().any(|r| r.login == row.login) {
            secrets.extend(found);
        }
    }
    // Only logins with a token to stand in for: no other host is terminated.
    let rules: Vec<_> = rules
        .into_iter()
        .filter(|r| secrets.iter().any(|s| s.login == r.login))
        .collect();
    let mut bundle = fs::read(SYSTEM_CA_BUNDLE).unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(ca.cert_pem.as_bytes());
    atomic::write(&spec.ca_bundle(), &bundle, 0o644)?;
    if rules.is_empty() {
        return Ok(());
    }
    let hosts: Vec<String> = rules.iter().flat_map(|r| r.hosts.clone()).collect();
    let (cert_pem, key_pem) = ca.issue(&ca_hosts, &hosts)?;
    let file = BrokerFile {
        rules,
        secrets,
        cert_pem,
        key_pem,
        port: broker::TLS_PORT,
    };
    atomic::write(&spec.broker_file(), &serde_json::to_vec(&file)?, 0o600)
}

/// The node's file of a key login (Claude Code's settings, Codex's `auth.json`), read with no
/// link followed, with its keys and what the box sees instead (keys replaced); None when it
/// holds no key the broker stands in for.
fn placeheld(
    home: &Path,
    row: &broker::LoginRule,
    placeholder: impl FnMut(&str) -> String,
) -> Result<Option<(String, Vec<String>)>> {
    let Some(text) = read_plain(&home.join(row.copied))? else {
        return Ok(None);
    };
    Ok(match row.login {
        "claude" => broker::claude_settings_placeheld(&text, placeholder),
        "codex" => broker::codex_auth_placeheld(&text, placeholder),
        _ => None,
    })
}

/// The brokered logins whose files on the node (HOME `home`) hold a token the broker stands in
/// for: gh's config dir, a key in Claude Code's settings or in Codex's `auth.json`.
pub(crate) fn held_logins(home: &Path) -> Vec<&'static str> {
    broker::RULES
        .iter()
        .filter(|row| match row.login {
            "gh" => home.join(row.copied).is_dir(),
            _ => placeheld(home, row, str::to_string).is_ok_and(|p| p.is_some()),
        })
        .map(|row| row.login)
        .collect()
}

/// The copy the box sees of a key login's file, written into the broker dir; its
/// (placeholder, key) pairs.
fn copy_file(spec: &BoxSpec, row: &broker::LoginRule, key: &[u8]) -> Result<Vec<(String, String)>> {
    let shown = |real: &str| broker::placeholder(real, key, &spec.name, row.login);
    let Some((text, reals)) = placeheld(&spec.agent_home.home, row, shown)? else {
        // Changed since the box's plan was made: it binds an empty copy, never the node's.
        atomic::write(&spec.broker_copy(row.login), b"{}", 0o644)?;
        return Ok(vec![]);
    };
    atomic::write(&spec.broker_copy(row.login), text.as_bytes(), 0o644)?;
    Ok(reals.into_iter().map(|real| (shown(&real), real)).collect())
}

/// What of gh's config dir a box sees: its settings and its logins (no backup or other file
/// that may hold a token in a shape this does not read).
const GH_FILES: &[&str] = &["config.yml", "hosts.yml"];

/// The node's gh config dir as the box sees it: `GH_FILES` (no link followed), `hosts.yml`'s
/// tokens replaced by placeholders; github.com's tokens, with theirs. A file that would still
/// hold a token is left out, and said.
fn copy_gh(spec: &BoxSpec, key: &[u8]) -> Result<Vec<Secret>> {
    let node = spec
        .agent_home
        .home
        .join(broker::copied("gh").unwrap_or(".config/gh"));
    let copy = spec.broker_copy("gh");
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&copy)
        .with_context(|| format!("creating {}", copy.display()))?;
    let mut secrets = Vec::new();
    let mut shown_all = Vec::new();
    for name in GH_FILES {
        let Some(text) = read_plain(&node.join(name))? else {
            continue;
        };
        let (shown, found) = if *name == "hosts.yml" {
            broker::gh_hosts_placeheld(&text, |real| {
                broker::placeholder(real, key, &spec.name, "gh")
            })
        } else {
            (text, vec![])
        };
        for (host, real) in found {
            let placeholder = broker::placeholder(&real, key, &spec.name, "gh");
            shown_all.push(placeholder.clone());
            if host == broker::GH_HOST {
                secrets.push(Secret {
                    login: "gh".into(),
                    placeholder,
                    real,
                });
            }
        }
        if broker::holds_a_token(&shown, &shown_all) {
            tracing::warn!(
                "box '{}': {} holds a token in a shape the credential broker does not read; the box does not see that file",
                spec.name,
                node.join(name).display()
            );
            continue;
        }
        atomic::write(&copy.join(name), shown.as_bytes(), 0o644)?;
    }
    Ok(secrets)
}

/// The accounts and distinct tokens of `login` in the node's files.
pub(crate) fn held(home: &Path, login: &str) -> (Vec<String>, usize) {
    let Some(row) = broker::RULES.iter().find(|r| r.login == login) else {
        return (vec![], 0);
    };
    if login != "gh" {
        // An API key names no account.
        let keys =
            placeheld(home, row, str::to_string)
                .ok()
                .flatten()
                .map_or(0, |(_, mut keys)| {
                    keys.sort();
                    keys.dedup();
                    keys.len()
                });
        return (vec![], keys);
    }
    let hosts = home.join(row.copied).join("hosts.yml");
    let Ok(text) = std::fs::read_to_string(&hosts) else {
        return (vec![], 0);
    };
    // github.com's alone: another host's token goes nowhere (a placeholder in the box).
    let (_, found) = broker::gh_hosts_placeheld(&text, str::to_string);
    let mut tokens: Vec<String> = found
        .into_iter()
        .filter(|(host, _)| host == broker::GH_HOST)
        .map(|(_, token)| token)
        .collect();
    tokens.sort();
    tokens.dedup();
    let at = format!("@{}", broker::GH_HOST);
    let accounts = broker::gh_accounts(&text)
        .into_iter()
        .filter(|a| a.ends_with(&at))
        .collect();
    (accounts, tokens.len())
}

/// A regular file's text, read with no link followed; None for anything else (or too big).
fn read_plain(path: &Path) -> Result<Option<String>> {
    let Ok(file) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(no_follow())
        .open(path)
    else {
        return Ok(None);
    };

    let meta = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Ok(None);
    }
    let mut text = String::new();
    match file.take(MAX_FILE).read_to_string(&mut text) {
        Ok(_) => Ok(Some(text)),
        Err(_) => Ok(None),
    }
}

/// Open flags: a link is not followed, a fifo does not block.
fn no_follow() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK)
        .bits()
        .cast_signed()
}
