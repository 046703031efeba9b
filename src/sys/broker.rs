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
use crate::error::UserError;
use crate::plan::broker::{self, BrokerFile, Secret};
use crate::plan::oauth::{self, Shape};
use crate::plan::sandbox::{BoxSpec, SYSTEM_CA_BUNDLE};
use crate::sys::box_tree::{Entry, Tree};
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
    let mut oauth = Vec::new();
    for row in copies {
        if let Some(endpoint) = row.oauth {
            let given = rules.iter().any(|r| r.login == row.login);
            if given && let Some(account) = copy_oauth(spec, row, &endpoint, ca.secret())? {
                oauth.push(account);
            }
            if given && row.copy_in_home() {
                put_in_home(spec, row)?;
            }
            continue;
        }
        let found = match row.login {
            "gh" => copy_gh(spec, ca.secret())?,
            login => copy_file(
                spec,
                row,
                ca.secret(),
                spec.agent_home.logins.contains(&login),
            )?,
        };
        // A login the box is not given: its copy holds placeholders that go nowhere.
        if rules.iter().any(|r| r.login == row.login) {
            secrets.extend(found);
        }
    }
    // Only logins with a token to stand in for: no other host is terminated (of a login whose
    // tokens are each for some of its hosts, OpenCode's, only those).
    let rules: Vec<_> = rules
        .into_iter()
        .filter(|r| {
            secrets.iter().any(|s| s.login == r.login) || oauth.iter().any(|a| a.login == r.login)
        })
        .map(|mut r| {
            let own: Vec<&Secret> = secrets.iter().filter(|s| s.login == r.login).collect();
            if own.iter().all(|s| !s.hosts.is_empty()) && !oauth.iter().any(|a| a.login == r.login)
            {
                r.hosts.retain(|h| own.iter().any(|s| s.hosts.contains(h)));
            }
            r
        })
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
    announce_once(spec, &rules);
    let hosts: Vec<String> = rules
        .iter()
        .flat_map(|r| r.hosts.clone())
        .chain(oauth.iter().map(|a| a.token_host.clone()))
        .collect();
    let (cert_pem, key_pem) = ca.issue(&ca_hosts, &hosts)?;
    let file = BrokerFile {
        rules,
        secrets,
        cert_pem,
        key_pem,
        port: broker::TLS_PORT,
        oauth,
    };
    atomic::write(&spec.broker_file(), &serde_json::to_vec(&file)?, 0o600)
}

/// The node's file of a key login (Claude Code's settings, Codex's `auth.json`: the operator's
/// own, so a link is followed), its text without a byte-order mark and its mode; None when
/// the node has none. Err: it cannot be read as text of at most 1 MiB.
fn node_file(home: &Path, row: &broker::LoginRule) -> Result<Option<(String, u32)>, String> {
    let path = home.join(row.copied);
    let file = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Err(format!("{} is no file of at most 1 MiB", path.display()));
    }
    let mut text = String::new();
    file.take(MAX_FILE)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text).to_string();
    Ok(Some((
        text,
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()),
    )))
}

/// The keys of a key login's file the broker stands in for (Claude Code's `env` keys for
/// api.anthropic.com, Codex's `OPENAI_API_KEY`); None where it stands in for none (no such key,
/// a gateway of the operator's, a file it does not parse).
fn brokered_keys(row: &broker::LoginRule, text: &str) -> Option<Vec<String>> {
    placeheld(row, text, str::to_string).map(|(_, keys)| keys.into_iter().map(|k| k.key).collect())
}

/// A key the broker stands in for: the hosts it alone is for (none: all its login's), and its
/// own key header (none: its login's).
struct HeldKey {
    key: String,
    hosts: Vec<String>,
    key_header: Option<String>,
}

/// A key login's file with the keys the broker stands in for replaced by `placeholder(key)`,
/// and those keys.
fn placeheld(
    row: &broker::LoginRule,
    text: &str,
    placeholder: impl FnMut(&str) -> String,
) -> Option<(String, Vec<HeldKey>)> {
    let for_all = |found: Option<(String, Vec<String>)>| {
        found.map(|(text, keys)| {
            let keys = keys
                .into_iter()
                .map(|key| HeldKey {
                    key,
                    hosts: Vec::new(),
                    key_header: None,
                })
                .collect();
            (text, keys)
        })
    };
    match row.login {
        "claude" => for_all(broker::claude_settings_placeheld(text, placeholder)),
        "codex" => for_all(broker::codex_auth_placeheld(text, placeholder)),
        "grok" => for_all(broker::grok_settings_placeheld(text, placeholder)),
        "opencode" => broker::opencode_auth_placeheld(text, placeholder).map(|(text, keys)| {
            let keys = keys
                .into_iter()
                .map(|(key, provider)| HeldKey {
                    key,
                    hosts: vec![provider.host.to_string()],
                    key_header: provider.key_header.map(String::from),
                })
                .collect();
            (text, keys)
        }),
        _ => None,
    }
}

/// The brokered logins a guarded box sees as copies on this node (HOME `home`): gh's config
/// dir; Claude Code's settings whenever the node has them (whatever they hold: a copy with
/// every token of a key's shape a placeholder, so a file this cannot read never reaches a box
/// as it is); Codex's `auth.json` where it holds an API key, or its `ChatGPT` login (one row or
/// the other: a file with a login is the login's).
pub(crate) fn held_logins(home: &Path) -> Vec<&'static str> {
    broker::RULES
        .iter()
        .filter(|row| match row.login {
            "gh" => home.join(row.copied).is_dir(),
            // The node's login, or none (a box may log in through the broker); a file that
            // holds something else is seen as before.
            _ if row.oauth.is_some() => {
                let shape = broker::shape_of(row.name);
                match node_file(home, row) {
                    Ok(None) => shape.captures(),
                    Ok(Some((text, _))) if shape == Shape::Claude => shape.tokens(&text).is_some(),
                    // Codex's and Gemini's files are the login's whatever they hold (one the
                    // broker cannot read is an empty copy in the box, never the node's file),
                    // but for Codex's API key alone, which is its key's row.
                    Ok(Some((text, _))) => !broker::RULES.iter().any(|key| {
                        key.login == row.login
                            && key.oauth.is_none()
                            && brokered_keys(key, &text).is_some()
                    }),
                    Err(_) => shape != Shape::Claude,
                }
            }
            // Only a box given the login sees its file: as before unless the broker holds its key.
            "codex" | "grok" => node_file(home, row)
                .ok()
                .flatten()
                .is_some_and(|(text, _)| brokered_keys(row, &text).is_some()),
            _ => !matches!(node_file(home, row), Ok(None)),
        })
        .map(|row| row.name)
        .collect()
}

/// The copy the box sees of a key login's file, written into the broker dir; its
/// (placeholder, key) pairs for the keys the broker stands in for. Every other token of a key's
/// shape is a placeholder that goes nowhere, and a file that cannot be read is an empty
/// object; a box given the login whose key is for a gateway of the operator's gets the file
/// as it is (the broker has no rule for that host).
fn copy_file(
    spec: &BoxSpec,
    row: &broker::LoginRule,
    key: &[u8],
    given: bool,
) -> Result<Vec<Secret>> {
    let shown = |real: &str| broker::placeholder(real, key, &spec.name, row.login);
    let dest = spec.broker_copy(row.login);
    let (text, mode) = match node_file(&spec.agent_home.home, row) {
        Ok(Some(found)) => found,
        Ok(None) => (String::from("{}"), 0o644),
        Err(why) => {
            tracing::warn!("box '{}': {why}; it sees an empty copy of it", spec.name);
            (String::from("{}"), 0o644)
        }
    };
    // A login's copy is its box's to read (only a box given the login sees it); the settings
    // every box sees, only where the node's are readable by others.
    let mode = if crate::plan::agent_home::is_login_file(row.copied) || mode & 0o004 != 0 {
        0o644
    } else {
        0o600
    };
    let Some((structured, keys)) = placeheld(row, &text, shown) else {
        if matches!(row.login, "codex" | "opencode") {
            // No key of the broker's: a login (its own row's copy shows it, made from the
            // fields it knows; its tokens are of no known prefix) or nothing to show.
            atomic::write(&dest, b"{}", mode)?;
        } else if given && serde_json::from_str::<serde_json::Value>(&text).is_ok() {
            atomic::write(&dest, text.as_bytes(), mode)?;
        } else {
            let (copy, _) = broker::placehold_tokens(&text, &[], shown);
            atomic::write(&dest, copy.as_bytes(), mode)?;
        }
        return Ok(vec![]);
    };
    let placeholders: Vec<String> = keys.iter().map(|k| shown(&k.key)).collect();
    let (copy, _) = broker::placehold_tokens(&structured, &placeholders, shown);
    atomic::write(&dest, copy.as_bytes(), mode)?;
    if row.login == "opencode" && given {
        let unbrokered = broker::opencode_unbrokered(&text);
        if !unbrokered.is_empty() {
            tracing::warn!(
                "box '{}': OpenCode's {} credentials are placeholders that go nowhere in it (the broker holds only API keys of {}); give it such a key, or put it on the host's network",
                spec.name,
                crate::plan::text::escaped(&unbrokered.join(", ")),
                broker::opencode_providers().join(", ")
            );
        }
    }
    Ok(keys
        .into_iter()
        .map(|k| Secret {
            login: row.login.into(),
            placeholder: shown(&k.key),
            real: k.key,
            bearer_only: false,
            hosts: k.hosts,
            key_header: k.key_header,
        })
        .collect())
}

/// The first start on this node of a box the broker stands in for (the first after an upgrade
/// from a version without it) says once that the node's logins are the broker's now: no box
/// holds their tokens any more. A mark in the broker's state dir remembers it was said.
fn announce_once(spec: &BoxSpec, rules: &[broker::Rule]) {
    let mark = spec.broker_state.join("announced");
    if fs::symlink_metadata(&mark).is_ok() {
        return;
    }
    let logins: Vec<&str> = rules.iter().map(|r| r.login.as_str()).collect();
    say!(
        "the credential broker now holds this node's logins ({}): boxes see placeholders of their tokens, which the box's proxy puts in for their own hosts only (docs/security.md); a box on the host's network still reads the node's files",
        logins.join(", ")
    );
    let marked = fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&spec.broker_state)
        .map_err(anyhow::Error::from)
        .and_then(|()| atomic::write(&mark, b"", 0o600));
    if let Err(e) = marked {
        tracing::debug!(
            "remembering the broker's notice in {}: {e:#}",
            mark.display()
        );
    }
}

/// The dir where the broker keeps box `spec`'s own logins and marks (root's alone), made.
pub(crate) fn make_box_logins(spec: &BoxSpec) -> Result<std::path::PathBuf> {
    let dir = spec.box_logins();
    fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The box's copy of `row` (written into the broker dir) as the file of its own agent home it
/// sees (`LoginRule::copy_in_home`): written afresh, fd-relative (a link or anything else the
/// box left there is removed, never followed), the box's, 0600.
fn put_in_home(spec: &BoxSpec, row: &broker::LoginRule) -> Result<()> {
    let copy = spec.broker_copy(row.name);
    let text = fs::read(&copy).with_context(|| format!("reading {}", copy.display()))?;
    // Marked first: whatever the box writes there from now on is never taken for its login.
    make_box_logins(spec)?;
    atomic::write(&spec.in_home_mark(row.name), b"", 0o600)?;
    let tree = Tree::open(&spec.agent_home.root)?;
    let rel = Path::new(row.copied);
    tree.remove(rel)?;
    tree.ensure(rel, Entry::File(&text), 0o600, spec.ids)
}

/// The shapes of Claude Code's OAuth tokens, for placeholders made before any token is known (a
/// box that may log in through the broker).
const CLAUDE_ACCESS_SHAPE: &str = "sk-ant-oat01-000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
const CLAUDE_REFRESH_SHAPE: &str = "sk-ant-ort01-000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
/// Codex's, likewise: a JWT's signature (its access and OpenID-Connect tokens are shown as JWTs
/// of their claims, signed with it, once the box has signed in), and its refresh token's.
const JWT_SIGNATURE_SHAPE: &str =
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
const CODEX_REFRESH_SHAPE: &str =
    "rt_00000000000000000000000000000000000000000000000000000000000000000000000000000000000";

/// The broker's file of the OAuth login of row `name` that box `spec` made itself.
pub(crate) fn box_login(spec: &BoxSpec, name: &str) -> std::path::PathBuf {
    broker::box_login_file(&spec.broker_state, &spec.name, name)
}

/// The copy the box sees of an OAuth login's file (its login alone, with lasting placeholders
/// and a far expiry; the box's to write), and what its proxy needs to put the current token in.
/// The login is the node's; where the node has none, the one the box made itself through the
/// broker (kept by the broker for this box alone, until `globals adopt` makes it the node's);
/// where neither is, a login the box makes is kept that way (`captures`). None when the
/// node's file cannot be read (the box sees an empty copy).
fn copy_oauth(
    spec: &BoxSpec,
    row: &broker::LoginRule,
    endpoint: &broker::OauthEndpoint,
    key: &[u8],
) -> Result<Option<broker::OauthAccount>> {
    let shape = endpoint.shape;
    let dest = spec.broker_copy(row.name);
    let give = |text: &[u8]| -> Result<()> {
        atomic::write(&dest, text, 0o600)?;
        std::os::unix::fs::chown(&dest, Some(spec.ids.uid), Some(spec.ids.gid))
            .with_context(|| format!("handing {} to the box", dest.display()))
    };
    let (file_on_node, on_node) = match node_file(&spec.agent_home.home, row) {
        Ok(found) => (
            found.is_some(),
            found.and_then(|(text, _)| shape.tokens(&text).map(|t| (text, t))),
        ),
        Err(why) => {
            tracing::warn!("box '{}': {why}; it sees an empty copy of it", spec.name);
            give(b"{}")?;
            return Ok(None);
        }
    };
    // No login on the node, and a box may not sign in through the broker: its shape is none
    // that does, or the node's file holds something else (which an adopted login would meet).
    if on_node.is_none() && (file_on_node || !shape.captures()) {
        give(b"{}")?;
        return Ok(None);
    }
    let own = box_login(spec, row.name);
    let (file, found) = if let Some(found) = on_node {
        (spec.agent_home.home.join(row.copied), Some(found))
    } else {
        make_box_logins(spec)?;
        let found = crate::sys::oauth_refresh::read_login(&own, shape).ok();
        (own.clone(), found)
    };
    let now_ms = crate::sys::oauth_refresh::now_ms();
    let (access, refresh, id) = oauth_placeholders(spec, row, key, found.as_ref(), now_ms);
    let placeholders = oauth::Placeholders {
        access: &access,
        refresh: &refresh,
        id: id.as_deref(),
    };
    let shown = found
        .as_ref()
        .and_then(|(text, _)| shape.shown(text, &placeholders, now_ms))
        .unwrap_or_else(|| "{}".into());
    // Whatever else of a token's shape Claude Code's held is not in the copy (Codex's and
    // Gemini's are made of the fields they know alone: a JWT placeholder's claims are base64,
    // where such a pass could take a run for a token).
    let shown = if shape == Shape::Claude {
        broker::placehold_tokens(&shown, &[access.clone(), refresh.clone()], |t| {
            broker::placeholder(t, key, &spec.name, row.name)
        })
        .0
    } else {
        shown
    };
    give(shown.as_bytes())?;
    // A login of the box's own is refreshed under a lock of its own, never shared.
    let own_login = file == own;
    let lock_name = if own_login {
        format!("{}.{}", row.name, spec.name)
    } else {
        row.name.to_string()
    };
    crate::sys::oauth_refresh::ensure_lock(&broker::lock_file(&lock_name))?;
    // A process of its own with the node's config refreshes it: the proxy never holds the
    // store's credentials. Told whether this node shares its store, it refuses to refresh
    // without the store's lease where its config would say otherwise.
    let mut argv = vec![
        spec.exe.display().to_string(),
        crate::plan::unit::REFRESH_SUBCOMMAND.into(),
        "--login".into(),
        row.name.into(),
    ];
    if own_login {
        argv.extend(["--box".into(), spec.name.clone()]);
    } else if spec.shared_store {
        argv.push("--shared".into());
    }
    let refresher = broker::Refresher {
        argv,
        env: crate::sys::host::config_env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    };
    Ok(Some(broker::OauthAccount {
        login: row.login.into(),
        row: row.name.into(),
        shape,
        access,
        refresh,
        id,
        account_id: found.as_ref().and_then(|(text, _)| shape.account_id(text)),
        captures: found.is_none(),
        file,
        token_host: endpoint.host.into(),
        token_path: endpoint.path.into(),
        client_id: endpoint.client_id.into(),
        refresher,
    }))
}

/// The placeholders box `spec` sees for the tokens of the OAuth login of `row` (`found`: its
/// file and tokens; None: none yet, placeholders of Claude Code's shapes), the same whatever
/// the tokens become. A JWT (Codex's tokens, whose claims its CLI reads) is shown as one: its
/// claims, a far expiry, a placeholder of its signature.
fn oauth_placeholders(
    spec: &BoxSpec,
    row: &broker::LoginRule,
    key: &[u8],
    found: Option<&(String, oauth::Tokens)>,
    now_ms: i64,
) -> (String, String, Option<String>) {
    let shape = broker::shape_of(row.name);
    let (real_access, real_refresh, real_id) = match found {
        Some((text, t)) => (t.access.clone(), t.refresh.clone(), shape.id_token(text)),
        None if shape == Shape::Codex => (
            JWT_SIGNATURE_SHAPE.into(),
            CODEX_REFRESH_SHAPE.into(),
            Some(JWT_SIGNATURE_SHAPE.into()),
        ),
        None => (
            CLAUDE_ACCESS_SHAPE.into(),
            CLAUDE_REFRESH_SHAPE.into(),
            None,
        ),
    };
    // A JWT's placeholder is signed with a placeholder marked as one; so is a JWT's yet to
    // come (Codex's blank shape, the signature of what a sign-in through the broker shows).
    let lasting = |real: &str, what: &str| {
        let name = format!("{}-{what}", row.name);
        let signature = real.rsplit('.').next().unwrap_or(real);
        let signed = oauth::marked(&broker::lasting_placeholder(
            signature, key, &spec.name, &name,
        ));
        match oauth::jwt_placeholder(real, &signed, now_ms) {
            Some(jwt) => jwt,
            None if real == JWT_SIGNATURE_SHAPE => signed,
            None => broker::lasting_placeholder(real, key, &spec.name, &name),
        }
    };
    match shape {
        Shape::Claude => (
            broker::lasting_placeholder(&real_access, key, &spec.name, "claude-access"),
            broker::lasting_placeholder(&real_refresh, key, &spec.name, "claude-refresh"),
            None,
        ),
        Shape::Codex | Shape::Gemini => (
            lasting(&real_access, "access"),
            lasting(&real_refresh, "refresh"),
            real_id.map(|real| lasting(&real, "id")),
        ),
    }
}

/// Whether the broker keeps a login box `spec` made itself.
pub(crate) fn kept_box_logins(spec: &BoxSpec) -> bool {
    kept_rows(spec).next().is_some()
}

/// The rows whose login the broker keeps for box `spec` (one it made itself).
fn kept_rows(spec: &BoxSpec) -> impl Iterator<Item = &'static broker::LoginRule> {
    broker::RULES.iter().filter(|r| {
        r.captures()
            && crate::sys::oauth_refresh::read_login(
                &box_login(spec, r.name),
                broker::shape_of(r.name),
            )
            .is_ok()
    })
}

/// `globals adopt`: the OAuth logins the broker keeps for box `spec` (made inside it) become
/// the node's where the node has none (root's alone, never over one), and are gone from the
/// broker's keeping for the box. Each under the box's lock of it (no refresh of the box's own
/// meanwhile), then the node's (no sign-in or refresh of the node's).
pub(crate) fn adopt_box_logins(
    spec: &BoxSpec,
) -> Result<Vec<(&'static str, crate::plan::agent_home::Adopted)>> {
    use crate::plan::agent_home::Adopted;
    let mut done = Vec::new();
    for row in broker::RULES.iter().filter(|r| r.captures()) {
        let shape = broker::shape_of(row.name);
        let own = box_login(spec, row.name);
        let box_lock = broker::lock_file(&format!("{}.{}", row.name, spec.name));
        crate::sys::oauth_refresh::finish_box_refresh(row.name, &own, &box_lock)?;
        let _box_lock = crate::sys::oauth_refresh::lock(&box_lock)?;
        let Ok((text, _)) = crate::sys::oauth_refresh::read_login(&own, shape) else {
            continue;
        };
        let dest = spec.agent_home.home.join(row.copied);
        let _lock = crate::sys::oauth_refresh::lock(&broker::lock_file(row.name))?;
        let local = adoptable_node_file(spec, row)?;
        if local.as_deref().is_some_and(|t| shape.tokens(t).is_some()) {
            done.push((row.copied, Adopted::NodeHasOne(dest)));
            continue;
        }
        if let Some(dir) = dest.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // A node file that holds no login keeps what else it holds (an API key, MCP servers'
        // tokens), the login put in beside it.
        let merged = shape
            .with_login(local.as_deref(), &text)
            .context("the box's login")?;
        // Written whole or not at all (a failed write leaves the node's file as it was).
        atomic::write(&dest, merged.as_bytes(), 0o600)?;
        fs::remove_file(&own).with_context(|| format!("removing {}", own.display()))?;
        done.push((row.copied, Adopted::Moved(dest)));
    }
    Ok(done)
}

/// Whether every login the broker keeps for box `spec` could be adopted: each node file it
/// would go into is one this can read as a JSON object, or none. Asked before anything moves.
pub(crate) fn check_adoptable(spec: &BoxSpec) -> Result<()> {
    for row in kept_rows(spec) {
        adoptable_node_file(spec, row)?;
    }
    Ok(())
}

/// The node's file of `row` a login adopted for box `spec` would go into (None: none); an
/// error where it is one this cannot read, or no JSON object: the operator's, never written
/// over.
fn adoptable_node_file(spec: &BoxSpec, row: &broker::LoginRule) -> Result<Option<String>> {
    let hint = "move that file aside (it is left as it is), then adopt again";
    let local = node_file(&spec.agent_home.home, row)
        .map_err(|why| UserError::failed(format!("box '{}': {why}", spec.name), hint))?
        .map(|(t, _)| t);
    if local
        .as_deref()
        .is_some_and(|t| !serde_json::from_str::<serde_json::Value>(t).is_ok_and(|v| v.is_object()))
    {
        let dest = spec.agent_home.home.join(row.copied);
        return Err(UserError::failed(
            format!(
                "box '{}': {} holds no JSON object",
                spec.name,
                dest.display()
            ),
            hint,
        )
        .into());
    }
    Ok(local)
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
                    bearer_only: false,
                    hosts: Vec::new(),
                    key_header: None,
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

/// What the node's files hold of a broker row: accounts, distinct tokens, and when an OAuth
/// login's access token expires (milliseconds since the epoch).
pub(crate) struct Held {
    pub accounts: Vec<String>,
    pub tokens: usize,
    pub expires_at_ms: Option<i64>,
}

/// What the node's files hold of the broker's row `row`.
pub(crate) fn held(home: &Path, row: &broker::LoginRule) -> Held {
    if row.oauth.is_some() {
        let tokens = node_file(home, row)
            .ok()
            .flatten()
            .and_then(|(text, _)| broker::shape_of(row.name).tokens(&text));
        return Held {
            accounts: vec![],
            tokens: usize::from(tokens.is_some()),
            expires_at_ms: tokens.map(|t| t.expires_at_ms),
        };
    }
    let (accounts, tokens) = held_keys(home, row);
    Held {
        accounts,
        tokens,
        expires_at_ms: None,
    }
}

/// The accounts and distinct tokens of a key login's row in the node's files.
fn held_keys(home: &Path, row: &broker::LoginRule) -> (Vec<String>, usize) {
    if row.login != "gh" {
        // An API key names no account.
        let keys = node_file(home, row)
            .ok()
            .flatten()
            .and_then(|(text, _)| brokered_keys(row, &text))
            .map_or(0, |mut keys| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// Which rows of Codex's and Gemini's logins the broker holds for a node's files: a file
    /// with a key alone is the key's, any other the login's (an API key beside a login too);
    /// none: Codex's login's (a box may sign in to Codex through the broker), no Gemini row.
    #[test]
    fn a_codex_file_is_its_logins_or_its_keys_and_never_both() {
        let home = tempfile::tempdir().unwrap();
        let held = || {
            held_logins(home.path())
                .into_iter()
                .filter(|r| r.starts_with("codex") || r.starts_with("gemini"))
                .collect::<Vec<_>>()
        };
        assert_eq!(held(), ["codex-oauth"]);
        fs::create_dir_all(home.path().join(".codex")).unwrap();
        fs::create_dir_all(home.path().join(".gemini")).unwrap();
        let auth = home.path().join(".codex/auth.json");
        fs::write(
            &auth,
            r#"{"OPENAI_API_KEY":"sk-proj-aaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
        )
        .unwrap();
        assert_eq!(held(), ["codex"]);
        fs::write(
            &auth,
            r#"{"OPENAI_API_KEY":"sk-proj-aaaaaaaaaaaaaaaaaaaaaaaaaaaa","tokens":{"access_token":"a","refresh_token":"rt_r"}}"#,
        )
        .unwrap();
        assert_eq!(held(), ["codex-oauth"]);
        // A file the broker cannot read as either: the login's row, an empty copy in the box.
        fs::write(
            &auth,
            r#"{"OPENAI_API_KEY":null,"tokens":{"access_token":7}}"#,
        )
        .unwrap();
        assert_eq!(held(), ["codex-oauth"]);
        fs::write(&auth, "not json").unwrap();
        assert_eq!(held(), ["codex-oauth"]);
        fs::remove_file(&auth).unwrap();
        fs::write(
            home.path().join(".gemini/oauth_creds.json"),
            r#"{"access_token":"ya29.a","refresh_token":"1//r","expiry_date":1}"#,
        )
        .unwrap();
        assert_eq!(held(), ["codex-oauth", "gemini-oauth"]);
    }
}
