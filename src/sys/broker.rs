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
    if rules.is_empty() {
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
    for rule in &rules {
        // One reader per login: gh's is the only one yet.
        if rule.login == "gh" {
            secrets.extend(copy_gh(spec, ca.secret())?);
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

/// The node's gh config dir as the box sees it: its files (no link, no subdir), `hosts.yml`'s
/// tokens replaced by placeholders; the tokens, with them.
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
    let Ok(entries) = fs::read_dir(&node) else {
        return Ok(vec![]);
    };
    let mut secrets = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", node.display()))?;
        let name = entry.file_name();
        let Some(text) = read_plain(&node.join(&name))? else {
            continue;
        };
        let shown = if name == "hosts.yml" {
            let (shown, found) = broker::gh_hosts_placeheld(&text, |real| {
                broker::placeholder(real, key, &spec.name, "gh")
            });
            secrets.extend(found.into_iter().map(|real| Secret {
                login: "gh".into(),
                placeholder: broker::placeholder(&real, key, &spec.name, "gh"),
                real,
            }));
            shown
        } else {
            text
        };
        atomic::write(&copy.join(&name), shown.as_bytes(), 0o644)?;
    }
    Ok(secrets)
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
