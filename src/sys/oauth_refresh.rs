//! Refreshing an OAuth login the credential broker holds (docs/design.md "Credential broker"):
//! the node's login file is rewritten in place (its inode, owner and mode kept, as the agent's
//! own CLI does), and where nodes share a store, one node at a time redeems the refresh token
//! under the account's lease in the store and leaves the new login there, sealed, for the
//! others to take instead of redeeming it again.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::header;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::plan::broker::shape_of;
use crate::plan::oauth::{self, AccountLease, Next, Sealed, Shape, StoredLogin, Tokens};
use crate::plan::restic_key;
use crate::store::{Accounts, Cas, Version};
use crate::sys::{crash, host};

/// The most of a login file, token request or answer read.
const MAX_BYTES: usize = 1 << 20;
/// How long a token endpoint has to answer (well within the account's lease).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// An OAuth login of the node: its file and where its tokens are refreshed.
pub(crate) struct Login<'a> {
    /// The broker's row (`plan::broker::RULES`), which names it in the store.
    pub row: &'a str,
    pub file: &'a Path,
    /// Held (`flock`) while the login is refreshed, by every process of the node that does.
    pub lock: &'a Path,
    pub token_host: &'a str,
    pub token_path: &'a str,
    pub client_id: &'a str,
}

/// Where the nodes share the login: the store, this node's name, and the password only the
/// nodes hold (`RESTIC_PASSWORD`), which seals the login there.
pub(crate) struct Shared<'a> {
    pub store: &'a dyn Accounts,
    pub node: &'a str,
    pub password: &'a [u8],
}

/// What sends a refresh to a token endpoint: (host, path, JSON body) to (status, answer).
pub(crate) type Post<'a> = dyn Fn(&str, &str, Vec<u8>) -> Result<(u16, Vec<u8>), String> + 'a;

/// Milliseconds since the epoch, by this node's clock.
pub(crate) fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The text of a login file: a regular file of at most 1 MiB (no fifo blocks this), its
/// byte-order mark dropped. The operator's own file: a link is followed.
pub(crate) fn read_text(path: &Path) -> Result<String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed())
        .open(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() || meta.len() > MAX_BYTES as u64 {
        bail!("{} is no file of at most 1 MiB", path.display());
    }
    let mut text = String::new();
    file.take(MAX_BYTES as u64)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .strip_prefix('\u{feff}')
        .map_or(text.clone(), str::to_string))
}

/// The login file's text and its login.
pub(crate) fn read_login(path: &Path, shape: Shape) -> Result<(String, Tokens)> {
    let text = read_text(path)?;
    let tokens = shape
        .tokens(&text)
        .with_context(|| format!("{} holds no login", path.display()))?;
    Ok((text, tokens))
}

/// Rewrite the login file in place: its inode (a box on the host's network binds it), owner and
/// mode stay; a file gone meanwhile is made anew, root's alone. The new text is padded with
/// spaces to the old length and written at once, so no moment leaves the file empty or half
/// old (a kill between the write and the trim leaves valid JSON).
fn write_login(path: &Path, text: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed())
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("{} is no regular file", path.display());
    }
    let old = usize::try_from(meta.len()).unwrap_or(0);
    let mut bytes = text.as_bytes().to_vec();
    if bytes.len() < old {
        bytes.resize(old, b' ');
    }
    file.write_all(&bytes)
        .and_then(|()| file.set_len(text.len() as u64))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

/// Make the login's lock (`plan::broker::lock_file`, root's alone) where it is missing: the
/// box's start does, for a refresher whose sandbox may not write there.
pub(crate) fn ensure_lock(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    Ok(())
}

/// Where a refresh keeps the token endpoint's answer (the login file as it is to be) until the
/// store and the login file hold it: beside the login file, in a dir its refresher may write.
fn journal_of(file: &Path) -> std::path::PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".redeemed");
    file.with_file_name(name)
}

/// Keep the answer of a redeem on disk (root's alone, synced with its dir) before anything
/// else: a refresher killed before the store and the file hold it (a power cut) leaves it for
/// the next run to finish, instead of every node left with the spent refresh token.
fn keep_answer(journal: &Path, text: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(journal)
        .with_context(|| format!("writing {}", journal.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", journal.display()))?;
    if let Some(dir) = journal.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(())
}

/// The journal of a refresh of `file` cut short after its answer, and what it holds (None:
/// there is none).
pub(crate) fn cut_short(file: &Path) -> (std::path::PathBuf, Option<Result<String>>) {
    let journal = journal_of(file);
    let found = journal
        .symlink_metadata()
        .is_ok()
        .then(|| read_text(&journal));
    (journal, found)
}

/// A redeem an earlier run was cut short after: its answer into the store (unless the store
/// holds a newer login) and the login file (unless that is newer), then forgotten. A journal
/// that holds no login was cut short itself: nothing of it is kept.
fn finish_cut_short(login: &Login, shared: Option<&Shared>) -> Result<()> {
    let shape = shape_of(login.row);
    let (journal, found) = cut_short(login.file);
    let Some(text) = found else {
        return Ok(());
    };
    // Unreadable now (not unparsable): kept for a later run, which may read it.
    let text = text?;
    if let Some((answer, tokens)) = shape.login_only(&text).zip(shape.tokens(&text)) {
        if let Some(s) = shared {
            let there = s.store.account(login.row)?.and_then(|(bytes, v)| {
                Some((serde_json::from_slice::<StoredLogin>(&bytes).ok()?, v))
            });
            let stored = StoredLogin {
                lease: None,
                sealed: Some(Sealing::new(s.password)?.seal(&answer)?),
                expires_at_ms: tokens.expires_at_ms,
                refreshed_by: Some(s.node.to_string()),
                refreshed_at_ms: Some(now_ms()),
            };
            let held = match there {
                Some((there, _)) if there.expires_at_ms >= tokens.expires_at_ms => true,
                Some((_, version)) => keep(login.row, s, &stored, version),
                None => matches!(
                    s.store
                        .put_account(login.row, &serde_json::to_vec(&stored)?, None)?,
                    Cas::Written(_)
                ),
            };
            if !held {
                bail!(
                    "the store does not take the {} login a refresh cut short earlier redeemed; it is kept in {} for the next try",
                    login.row,
                    journal.display()
                );
            }
        }
        let local = match read_text(login.file) {
            Ok(text) => Some(text),
            Err(_) if !login.file.exists() => None,
            Err(e) => return Err(e),
        };
        let here = local.as_deref().and_then(|t| shape.tokens(t));
        if here.is_none_or(|h| h.expires_at_ms < tokens.expires_at_ms) {
            let text = shape
                .with_login(local.as_deref(), &answer)
                .context("the login the cut-short refresh redeemed")?;
            write_login(login.file, &text)?;
        }
        tracing::warn!(
            "finished a refresh of the {} login an earlier run was cut short in",
            login.row
        );
    }
    std::fs::remove_file(&journal).with_context(|| format!("removing {}", journal.display()))
}

/// A refresh of the login a box made itself (`file`, under the lock `lock_at`) cut short
/// earlier, finished: before the login leaves the broker's keeping for the box.
pub(crate) fn finish_box_refresh(row: &str, file: &Path, lock_at: &Path) -> Result<()> {
    let _lock = lock(lock_at)?;
    let login = Login {
        row,
        file,
        lock: lock_at,
        token_host: "",
        token_path: "",
        client_id: "",
    };
    finish_cut_short(&login, None)
}

/// The login's lock, taken: every process of the node that refreshes the login takes it first.
pub(crate) fn lock(path: &Path) -> Result<std::fs::File> {
    if !path.exists() {
        ensure_lock(path)?;
    }
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

/// How much of a lease must be left to redeem under it: the token endpoint's answer and the
/// store's write of the result, with room to spare.
const REDEEM_BUDGET: Duration = Duration::from_secs(30);

/// The store's copy of the login, its version, and since when (this node's monotonic clock)
/// this node has seen that version.
struct Watch {
    stored: Option<StoredLogin>,
    version: Option<Version>,
    since: Instant,
}

impl Watch {
    fn read(row: &str, shared: Option<&Shared>, before: Option<&Watch>) -> Result<Watch> {
        let Some(s) = shared else {
            return Ok(Watch {
                stored: None,
                version: None,
                since: Instant::now(),
            });
        };
        let (stored, version) = match s.store.account(row)? {
            Some((bytes, v)) => (
                Some(
                    serde_json::from_slice::<StoredLogin>(&bytes)
                        .with_context(|| format!("parsing the store's {row} login"))?,
                ),
                Some(v),
            ),
            None => (None, None),
        };
        let since = before
            .filter(|b| b.version == version)
            .map_or_else(Instant::now, |b| b.since);
        Ok(Watch {
            stored,
            version,
            since,
        })
    }
}

/// Make the login file's access token fresh, under the node's lock of the login: nothing to do
/// when it is; else the newer login another node left in the store, or a refresh here (under
/// the account's lease where nodes share a store), the new login left in the store before this
/// node's file is rewritten.
pub(crate) fn refresh(login: &Login, shared: Option<&Shared>, post: &Post) -> Result<()> {
    let shape = shape_of(login.row);
    let _lock = lock(login.lock)?;
    finish_cut_short(login, shared)?;
    let node = shared.map_or("", |s| s.node);
    let deadline = Instant::now() + Duration::from_millis(oauth::LEASE_MS.unsigned_abs() * 2);
    let mut watch: Option<Watch> = None;
    loop {
        if Instant::now() > deadline {
            bail!(
                "the {} login could not be refreshed in time (another node's lease, or a slow store)",
                login.row
            );
        }
        let seen = Watch::read(login.row, shared, watch.as_ref())?;
        let local = read_login(login.file, shape);
        let (text, here) = match (&local, shared, &seen.stored) {
            (Ok((text, here)), _, _) => (Some(text.clone()), here.clone()),
            // A file gone takes the store's login where it has one (one that holds something
            // else is the operator's: never written over).
            (Err(_), Some(s), Some(stored)) if stored.sealed.is_some() && !login.file.exists() => {
                return take_stored(login, s, stored, None);
            }
            (Err(e), _, _) => bail!("{e:#}"),
        };
        let watched = i64::try_from(seen.since.elapsed().as_millis()).unwrap_or(i64::MAX);
        match oauth::next(&here, seen.stored.as_ref(), node, now_ms(), watched) {
            Next::Done => return Ok(()),
            Next::Take => {
                let (Some(s), Some(stored)) = (shared, &seen.stored) else {
                    bail!("nothing in the store to take");
                };
                return take_stored(login, s, stored, text.as_deref());
            }
            Next::Wait => {
                std::thread::sleep(Duration::from_millis(500));
                watch = Some(seen);
            }
            Next::Lease => {
                // The newest login known is redeemed: the store's, when this node's file is
                // older (a globals pull or an old copy put it back; its refresh token is spent).
                let (text, here) = match (shared, &seen.stored) {
                    (Some(s), Some(st))
                        if st.sealed.is_some() && st.expires_at_ms > here.expires_at_ms =>
                    {
                        let newer = shape
                            .with_login(text.as_deref(), &open_stored(st, s.password)?)
                            .context("the store's login")?;
                        let tokens = shape.tokens(&newer).with_context(|| {
                            format!("the store's {} login holds no tokens", login.row)
                        })?;
                        (newer, tokens)
                    }
                    _ => (text.unwrap_or_default(), here),
                };
                let leased = match shared {
                    Some(s) => {
                        let asked = Instant::now();
                        let mut taking = seen.stored.clone().unwrap_or_default();
                        taking.lease = Some(AccountLease {
                            node: node.to_string(),
                            until_ms: now_ms() + oauth::LEASE_MS,
                        });
                        let bytes = serde_json::to_vec(&taking)?;
                        let version = match s.store.put_account(
                            login.row,
                            &bytes,
                            seen.version.as_ref(),
                        )? {
                            Cas::Conflict => continue,
                            Cas::Written(None) => bail!(
                                "the store named no version of the {} login it wrote: it cannot guard a refresh",
                                login.row
                            ),
                            Cas::Written(Some(v)) => v,
                        };
                        // A lease whose write took most of it is not redeemed under: given back.
                        let lease = Duration::from_millis(oauth::LEASE_MS.unsigned_abs());
                        if asked.elapsed() + REDEEM_BUDGET > lease {
                            taking.lease = None;
                            let _ = s.store.put_account(
                                login.row,
                                &serde_json::to_vec(&taking)?,
                                Some(&version),
                            );
                            bail!(
                                "the store took {}s to lease the {} login: too slow to redeem it under that lease",
                                asked.elapsed().as_secs(),
                                login.row
                            );
                        }
                        Some((s, taking, version))
                    }
                    None => None,
                };
                crash::point("refresh.leased");
                return redeem(login, &text, &here, leased, post);
            }
        }
    }
}

/// The store's login into this node's file, its other entries kept.
fn take_stored(
    login: &Login,
    shared: &Shared,
    stored: &StoredLogin,
    local: Option<&str>,
) -> Result<()> {
    let shape = shape_of(login.row);
    let taken = open_stored(stored, shared.password)?;
    let text = shape
        .with_login(local, &taken)
        .context("the store's login")?;
    shape
        .tokens(&text)
        .with_context(|| format!("the store's {} login holds no tokens", login.row))?;
    tracing::info!(
        "took the {} login {} refreshed from the store",
        login.row,
        stored.refreshed_by.as_deref().unwrap_or("another node")
    );
    write_login(login.file, &text)
}

/// Redeem the refresh token here (this node holds the lease where there is one); the new
/// login into the store (sealed, the lease given back), then into the node's file.
fn redeem(
    login: &Login,
    text: &str,
    here: &Tokens,
    leased: Option<(&Shared, StoredLogin, Version)>,
    post: &Post,
) -> Result<()> {
    let shape = shape_of(login.row);
    let refused = |why: String| {
        anyhow::anyhow!(
            "refreshing the {} login at {}: {why}",
            login.row,
            login.token_host
        )
    };
    let sealing = match &leased {
        Some((s, ..)) => Some(Sealing::new(s.password)?),
        None => None,
    };
    let answered = post(
        login.token_host,
        login.token_path,
        shape.refresh_request(&here.refresh, login.client_id),
    );
    let new = match answered {
        Ok((status, answer)) if (200..300).contains(&status) => {
            oauth::refreshed(&answer).ok_or_else(|| refused("no access token in the answer".into()))
        }
        // Only the status: an answer's body is the server's to word, and is shown to a box.
        Ok((status, _)) => Err(refused(format!("it answered {status}"))),
        Err(e) => Err(refused(e)),
    };
    let new = match new {
        Ok(n) => n,
        Err(e) => {
            if let Some((s, mut stored, version)) = leased {
                stored.lease = None;
                let _ =
                    s.store
                        .put_account(login.row, &serde_json::to_vec(&stored)?, Some(&version));
            }
            return Err(e);
        }
    };
    let now = now_ms();
    let after = shape
        .after_refresh(text, &new, now)
        .ok_or_else(|| refused("the login file changed shape".into()))?;
    let journal = journal_of(login.file);
    if let Err(e) = keep_answer(&journal, &after) {
        tracing::warn!("{e:#}");
    }
    crash::point("refresh.answered");
    let mut stored = true;
    if let (Some((s, _, version)), Some(sealing)) = (leased, sealing) {
        let kept = StoredLogin {
            lease: None,
            sealed: Some(sealing.seal(&shape.login_only(&after).context("the refreshed login")?)?),
            expires_at_ms: shape
                .tokens(&after)
                .map_or(now + new.expires_in_s * 1000, |t| t.expires_at_ms),
            refreshed_by: Some(s.node.to_string()),
            refreshed_at_ms: Some(now),
        };
        stored = keep(login.row, s, &kept, version);
    }
    write_login(login.file, &after)?;
    // Kept until the store holds it too: the next refresh puts it there.
    if stored {
        let _ = std::fs::remove_file(&journal);
    }
    tracing::info!("refreshed the {} login at {}", login.row, login.token_host);
    Ok(())
}

/// The refreshed login into the store, whatever it takes: the refresh token it replaces is
/// spent, and a node that does not find the new one there would redeem the spent one. Whether
/// the store holds it (or a newer one) now.
fn keep(row: &str, shared: &Shared, kept: &StoredLogin, mut version: Version) -> bool {
    let Ok(bytes) = serde_json::to_vec(kept) else {
        return false;
    };
    for attempt in 0..20 {
        match shared.store.put_account(row, &bytes, Some(&version)) {
            Ok(Cas::Written(_)) => return true,
            // Written over meanwhile (this node's lease ran out): unless what is there is newer,
            // this login goes in over it.
            Ok(Cas::Conflict) => match shared.store.account(row) {
                Ok(Some((now, v))) => {
                    let there: Option<StoredLogin> = serde_json::from_slice(&now).ok();
                    if there.is_some_and(|t| t.expires_at_ms > kept.expires_at_ms) {
                        return true;
                    }
                    version = v;
                }
                Ok(None) => {
                    if matches!(
                        shared.store.put_account(row, &bytes, None),
                        Ok(Cas::Written(_))
                    ) {
                        return true;
                    }
                }
                Err(e) => tracing::warn!("reading the store's {row} login: {e:#}"),
            },
            Err(e) => {
                tracing::warn!(
                    "keeping the refreshed {row} login in the store (try {attempt}): {e:#}"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    tracing::error!(
        "the refreshed {row} login is in this node's file but not in the store: run 'ag-box globals push' here before another node refreshes it"
    );
    false
}

/// What [`install`] did with a new login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Installed {
    /// The node's file held a login before, now replaced.
    pub replaced: bool,
    /// The store shared by nodes holds it now.
    pub stored: bool,
}

/// A login `ag-box login` makes: under the node's lock, and where nodes share a store under
/// the account's lease there (once no other node holds it), `sign_in` redeems the code (a
/// [`Shape::login_only`] of the answer); the login goes into this node's file (its other
/// entries kept), then into the store over whatever login it held. Held so, no node redeems
/// the old login between the sign-in and the store's write, and every node's broker takes the
/// new one at its next refresh. A node file that holds no JSON object stops it before any
/// code is spent.
pub(crate) fn install(
    row: &str,
    file: &Path,
    lock_at: &Path,
    shared: Option<&Shared>,
    sign_in: impl FnOnce() -> Result<String>,
) -> Result<Installed> {
    let shape = shape_of(row);
    let _lock = lock(lock_at)?;
    let local = match read_text(file) {
        Ok(text) => Some(text),
        Err(_) if !file.exists() => None,
        Err(e) => return Err(e),
    };
    if local
        .as_deref()
        .is_some_and(|t| !serde_json::from_str::<serde_json::Value>(t).is_ok_and(|v| v.is_object()))
    {
        bail!(
            "{} holds no JSON object: move it aside, then log in again",
            file.display()
        );
    }
    let held = match shared {
        Some(s) => {
            let (asked, leased) = lease_account(row, s)?;
            let held = Some((s, leased));
            // A lease whose write took most of it is not signed in under: given back.
            if asked.elapsed() + REDEEM_BUDGET
                > Duration::from_millis(oauth::LEASE_MS.unsigned_abs())
            {
                give_back_lease(row, held);
                bail!("the store is too slow to hold the {row} login for a sign-in: try again");
            }
            held
        }
        None => None,
    };
    let login = match sign_in().and_then(|login| {
        let tokens = shape
            .tokens(&login)
            .context("the new login holds no tokens")?;
        Ok((login, tokens))
    }) {
        Ok(found) => found,
        Err(e) => {
            give_back_lease(row, held);
            return Err(e);
        }
    };
    let (login, tokens) = login;
    let replaced = local.as_deref().and_then(|t| shape.tokens(t)).is_some();
    let text = shape
        .with_login(local.as_deref(), &login)
        .context("the new login")?;
    if let Some(dir) = file.parent() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    write_login(file, &text)?;
    // A refresh of the old login cut short is superseded.
    let _ = std::fs::remove_file(journal_of(file));
    let Some((s, (_, version))) = held else {
        return Ok(Installed {
            replaced,
            stored: false,
        });
    };
    let new = StoredLogin {
        lease: None,
        sealed: Some(Sealing::new(s.password)?.seal(&login)?),
        expires_at_ms: tokens.expires_at_ms,
        refreshed_by: Some(s.node.to_string()),
        refreshed_at_ms: Some(now_ms()),
    };
    // The node's file holds it now: a store that fails here is said, not the sign-in undone.
    let stored = store_new_login(row, s, &new, version).unwrap_or_else(|e| {
        tracing::error!("putting the new {row} login in the store: {e:#}");
        false
    });
    Ok(Installed { replaced, stored })
}

/// The lease `held` took, given back (the login the store held as it was).
fn give_back_lease(row: &str, held: Option<(&Shared, (StoredLogin, Version))>) {
    if let Some((s, (mut stored, version))) = held {
        stored.lease = None;
        if let Ok(bytes) = serde_json::to_vec(&stored) {
            let _ = s.store.put_account(row, &bytes, Some(&version));
        }
    }
}

/// A new login (`ag-box login`'s) into the store under this node's lease (`version`); where
/// the lease was lost meanwhile (another node wrote: a refresh of the old account), leased
/// again and written over it: a new login supersedes whatever the old account's refresh made.
/// Whether it is there.
fn store_new_login(
    row: &str,
    shared: &Shared,
    new: &StoredLogin,
    mut version: Version,
) -> Result<bool> {
    let bytes = serde_json::to_vec(new)?;
    for _ in 0..5 {
        match shared.store.put_account(row, &bytes, Some(&version))? {
            Cas::Written(_) => return Ok(true),
            Cas::Conflict => version = lease_account(row, shared)?.1.1,
        }
    }
    Ok(false)
}

/// The account's lease in the store for this node, once no other node holds one (a lease is
/// waited for until this node has seen it unchanged for its length); the login the store held
/// with it, and the version written.
fn lease_account(row: &str, shared: &Shared) -> Result<(Instant, (StoredLogin, Version))> {
    let deadline = Instant::now() + Duration::from_millis(oauth::LEASE_MS.unsigned_abs() * 2);
    let mut watch: Option<Watch> = None;
    loop {
        if Instant::now() > deadline {
            bail!("another node still holds the store's {row} login: try again in a minute");
        }
        let seen = Watch::read(row, Some(shared), watch.as_ref())?;
        let held = seen
            .stored
            .as_ref()
            .and_then(|s| s.lease.as_ref())
            .is_some_and(|l| {
                l.until_ms > now_ms()
                    && seen.since.elapsed() < Duration::from_millis(oauth::LEASE_MS.unsigned_abs())
            });
        if held {
            std::thread::sleep(Duration::from_millis(500));
            watch = Some(seen);
            continue;
        }
        let mut taking = seen.stored.clone().unwrap_or_default();
        taking.lease = Some(AccountLease {
            node: shared.node.to_string(),
            until_ms: now_ms() + oauth::LEASE_MS,
        });
        let asked = Instant::now();
        match shared
            .store
            .put_account(row, &serde_json::to_vec(&taking)?, seen.version.as_ref())?
        {
            Cas::Written(Some(version)) => return Ok((asked, (taking, version))),
            Cas::Written(None) => bail!(
                "the store named no version of the {row} login it wrote: it cannot guard a sign-in"
            ),
            Cas::Conflict => {
                std::thread::sleep(Duration::from_millis(200));
                watch = Some(seen);
            }
        }
    }
}

/// A login a box made through the broker, kept for it: a new file (never over one: a second
/// exchange at once keeps the first), root's alone.
pub(crate) fn keep_new_login(path: &Path, text: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

/// `globals push`: this node's login into the store, where the store holds none as new and no
/// other node is refreshing it; whether it was put there.
pub(crate) fn offer(row: &str, file: &Path, lock_at: &Path, shared: &Shared) -> Result<bool> {
    let shape = shape_of(row);
    let _lock = lock(lock_at)?;
    let Ok((text, here)) = read_login(file, shape) else {
        return Ok(false);
    };
    for _ in 0..20 {
        let (stored, version) = match shared.store.account(row)? {
            Some((bytes, v)) => (
                serde_json::from_slice::<StoredLogin>(&bytes)
                    .with_context(|| format!("parsing the store's {row} login"))?,
                Some(v),
            ),
            None => (StoredLogin::default(), None),
        };
        // Whichever node holds it (this one too, in another process): its login is newer.
        let refreshing = stored.lease.as_ref().is_some_and(|l| l.until_ms > now_ms());
        if refreshing || (stored.sealed.is_some() && stored.expires_at_ms >= here.expires_at_ms) {
            return Ok(false);
        }
        let offered = StoredLogin {
            lease: None,
            sealed: Some(
                Sealing::new(shared.password)?
                    .seal(&shape.login_only(&text).context("this node's login")?)?,
            ),
            expires_at_ms: here.expires_at_ms,
            ..stored
        };
        match shared
            .store
            .put_account(row, &serde_json::to_vec(&offered)?, version.as_ref())?
        {
            Cas::Written(_) => return Ok(true),
            Cas::Conflict => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    bail!("the store's {row} login kept changing while this node offered its own: try again")
}

/// `globals pull`: the store's login into this node's file (made, root's alone, where there
/// is none), where it is newer than the node's; whether it was.
pub(crate) fn take(row: &str, file: &Path, lock_at: &Path, shared: &Shared) -> Result<bool> {
    let shape = shape_of(row);
    let _lock = lock(lock_at)?;
    let Some((bytes, _)) = shared.store.account(row)? else {
        return Ok(false);
    };
    let stored: StoredLogin = serde_json::from_slice(&bytes)
        .with_context(|| format!("parsing the store's {row} login"))?;
    if stored.sealed.is_none() {
        return Ok(false);
    }
    // The node's file as it is (another entry of it, an API key beside no login, is kept).
    let local = match read_text(file) {
        Ok(text) => Some(text),
        Err(_) if !file.exists() => None,
        Err(e) => return Err(e),
    };
    if local
        .as_deref()
        .and_then(|t| shape.tokens(t))
        .is_some_and(|here| here.expires_at_ms >= stored.expires_at_ms)
    {
        return Ok(false);
    }
    let text = shape
        .with_login(local.as_deref(), &open_stored(&stored, shared.password)?)
        .context("the store's login")?;
    shape
        .tokens(&text)
        .with_context(|| format!("the store's {row} login holds no tokens"))?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_login(file, &text)?;
    Ok(true)
}

/// What seals a login under `password`, with fresh randomness; its key derived at once (scrypt
/// takes a fifth of a second), so that sealing after a redeem takes no time.
struct Sealing {
    sealer: restic_key::Sealer,
    salt: [u8; 64],
}

impl Sealing {
    fn new(password: &[u8]) -> Result<Sealing> {
        let mut random = restic_key::Randomness {
            salt: [0; 64],
            iv: [0; 16],
        };
        host::random_bytes(&mut random.salt)?;
        host::random_bytes(&mut random.iv)?;
        Ok(Sealing {
            sealer: restic_key::Sealer::new(password, &random)?,
            salt: random.salt,
        })
    }

    fn seal(&self, text: &str) -> Result<Sealed> {
        Ok(Sealed {
            salt: STANDARD.encode(self.salt),
            data: STANDARD.encode(self.sealer.seal(text.as_bytes().to_vec())?),
            log_n: restic_key::SEAL_LOG_N,
        })
    }
}

/// The login the store holds, opened with `password`.
pub(crate) fn open_stored(stored: &StoredLogin, password: &[u8]) -> Result<String> {
    let sealed = stored.sealed.as_ref().context("nothing sealed")?;
    let salt = STANDARD.decode(&sealed.salt).context("the sealed salt")?;
    let data = STANDARD.decode(&sealed.data).context("the sealed login")?;
    let plain = restic_key::open_with(password, &salt, sealed.log_n, &data)
        .context("opening the store's login (is RESTIC_PASSWORD the same on every node?)")?;
    String::from_utf8(plain).context("the store's login is no text")
}

/// A token endpoint's POST for a command (no runtime of its own): [`post`] at port 443, the
/// certificate checked against the system's roots.
pub(crate) fn blocking_post() -> Result<Box<Post<'static>>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the token request's runtime")?;
    let connector = system_connector();
    Ok(Box::new(move |host: &str, path: &str, body: Vec<u8>| {
        rt.block_on(post(&connector, host, 443, path, body))
    }))
}

/// POST `body` (JSON) to `https://host:port/path`, its certificate checked by `connector`; the
/// status and the answer.
pub(crate) async fn post(
    connector: &TlsConnector,
    host: &str,
    port: u16,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), String> {
    let exchange = async {
        let addrs: Vec<_> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("resolving {host}: {e}"))?
            .collect();
        let addr = addrs
            .first()
            .ok_or_else(|| format!("{host} has no address"))?;
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {host}: {e}"))?;
        let name =
            ServerName::try_from(host.to_string()).map_err(|e| format!("server name: {e}"))?;
        let tls = connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS to {host}: {e}"))?;
        let (mut sender, link) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("handshake with {host}: {e}"))?;
        tokio::spawn(link);
        // JSON, or a form (Google's token endpoint takes one).
        let kind = if body.starts_with(b"{") {
            "application/json"
        } else {
            "application/x-www-form-urlencoded"
        };
        let req = Request::post(path)
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, kind)
            .header(header::USER_AGENT, "ag-box-broker")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("the request: {e}"))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("{host}: {e}"))?;
        let status = resp.status().as_u16();
        let answer = Limited::new(resp.into_body(), MAX_BYTES)
            .collect()
            .await
            .map_err(|e| format!("{host}'s answer: {e}"))?
            .to_bytes();
        Ok((status, answer.to_vec()))
    };
    tokio::time::timeout(ANSWER_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{host}: timed out"))?
}

/// A TLS client trusting the system's CAs.
pub(crate) fn system_connector() -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!("reading the system's CA certificates: {e}");
    }
    roots.add_parsable_certificates(native.certs);
    let mut client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(std::sync::Arc::new(client))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::cell::RefCell;

    /// A store that keeps accounts in memory, versions counted.
    #[derive(Default)]
    struct Memory {
        objects: RefCell<Option<(Vec<u8>, u32)>>,
    }

    impl Accounts for Memory {
        fn keeps_accounts(&self) -> bool {
            true
        }
        fn account(&self, _: &str) -> Result<Option<(Vec<u8>, Version)>> {
            Ok(self
                .objects
                .borrow()
                .clone()
                .map(|(b, v)| (b, Version(v.to_string()))))
        }
        fn put_account(&self, _: &str, bytes: &[u8], expected: Option<&Version>) -> Result<Cas> {
            let mut held = self.objects.borrow_mut();
            let now = held.as_ref().map(|(_, v)| Version(v.to_string()));
            if now.as_ref() != expected {
                return Ok(Cas::Conflict);
            }
            let next = held.as_ref().map_or(1, |(_, v)| v + 1);
            *held = Some((bytes.to_vec(), next));
            Ok(Cas::Written(Some(Version(next.to_string()))))
        }
    }

    /// Claude Code's login in `file`, refreshed at a stand-in endpoint under the lock `lock`.
    fn test_login<'a>(file: &'a Path, lock: &'a Path) -> Login<'a> {
        Login {
            row: "claude-oauth",
            file,
            lock,
            token_host: "platform.example",
            token_path: "/v1/oauth/token",
            client_id: "c",
        }
    }

    /// `node` sharing `store`, its password "pw".
    fn test_shared<'a>(store: &'a Memory, node: &'a str) -> Shared<'a> {
        Shared {
            store,
            node,
            password: b"pw",
        }
    }

    fn login_file(
        dir: &Path,
        name: &str,
        access: &str,
        refresh: &str,
        expires: i64,
    ) -> std::path::PathBuf {
        let file = dir.join(name);
        std::fs::write(
            &file,
            format!(r#"{{"claudeAiOauth":{{"accessToken":"{access}","refreshToken":"{refresh}","expiresAt":{expires}}}}}"#),
        )
        .unwrap();
        file
    }

    #[test]
    fn one_node_redeems_and_the_next_takes_its_login_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let a = login_file(dir.path(), "a.json", "A0", "R0", 0);
        let b = login_file(dir.path(), "b.json", "A0", "R0", 0);
        let store = Memory::default();
        let asked = RefCell::new(Vec::new());
        let post = |host: &str, path: &str, body: Vec<u8>| {
            asked.borrow_mut().push((
                host.to_string(),
                path.to_string(),
                String::from_utf8(body).unwrap(),
            ));
            Ok((
                200,
                br#"{"access_token":"sk-ant-oat01-A1","refresh_token":"sk-ant-ort01-R1","expires_in":3600}"#.to_vec(),
            ))
        };
        let lock = dir.path().join("lock");
        let login = |file| Login {
            row: "claude-oauth",
            file,
            lock: &lock,
            token_host: "platform.example",
            token_path: "/v1/oauth/token",
            client_id: "c",
        };
        let shared = |node| test_shared(&store, node);
        refresh(&login(&a), Some(&shared("nodeA")), &post).unwrap();
        refresh(&login(&b), Some(&shared("nodeB")), &post).unwrap();
        // One redeem, of R0; both files hold the new login.
        assert_eq!(
            asked.borrow().clone(),
            [(
                "platform.example".to_string(),
                "/v1/oauth/token".to_string(),
                r#"{"grant_type":"refresh_token","refresh_token":"R0","client_id":"c"}"#
                    .to_string()
            )]
        );
        for file in [&a, &b] {
            let (_, t) = read_login(file, Shape::Claude).unwrap();
            assert_eq!(
                (t.access.as_str(), t.refresh.as_str()),
                ("sk-ant-oat01-A1", "sk-ant-ort01-R1")
            );
        }
        // The store: sealed (no token in clear), no lease, who refreshed it.
        let (bytes, _) = store.account("claude-oauth").unwrap().unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(!text.contains("sk-ant-"), "{text}");
        let stored: StoredLogin = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            (&stored.lease, stored.refreshed_by.as_deref()),
            (&None, Some("nodeA"))
        );
        assert!(open_stored(&stored, b"other").is_err());

        // A node whose file went back to the spent login (an old copy) redeems the store's
        // newer refresh token, not its own, once the store's is due too.
        let c = login_file(dir.path(), "c.json", "A0", "R0", 0);
        let mut due = stored.clone();
        due.expires_at_ms = 1;
        store.objects.borrow_mut().as_mut().unwrap().0 = serde_json::to_vec(&due).unwrap();
        refresh(&login(&c), Some(&shared("nodeC")), &post).unwrap();
        assert!(
            asked.borrow()[1]
                .2
                .contains(r#""refresh_token":"sk-ant-ort01-R1""#),
            "{:?}",
            asked.borrow()
        );

        // `globals pull` takes the store's; `globals push` offers only what is newer.
        let d = login_file(dir.path(), "d.json", "A0", "R0", 0);
        assert!(take("claude-oauth", &d, &lock, &shared("nodeD")).unwrap());
        assert_eq!(
            read_login(&d, Shape::Claude).unwrap().1.access,
            "sk-ant-oat01-A1"
        );
        assert!(!take("claude-oauth", &d, &lock, &shared("nodeD")).unwrap());
        assert!(!offer("claude-oauth", &d, &lock, &shared("nodeD")).unwrap());
    }

    #[test]
    fn a_refresh_cut_short_after_its_answer_is_finished_by_the_next_run_without_a_redeem() {
        let dir = tempfile::tempdir().unwrap();
        let c = login_file(dir.path(), "c.json", "A0", "R0", 0);
        let store = Memory::default();
        let lock = dir.path().join("lock");
        let login = test_login(&c, &lock);
        let shared = test_shared(&store, "nodeC");
        // As a run killed after the endpoint answered left it: the store's old login under this
        // node's lease, the answer in the journal, the file as it was.
        let old = StoredLogin {
            lease: Some(AccountLease {
                node: "nodeC".into(),
                until_ms: now_ms() + 40_000,
            }),
            sealed: Some(
                Sealing::new(b"pw")
                    .unwrap()
                    .seal(&std::fs::read_to_string(&c).unwrap())
                    .unwrap(),
            ),
            expires_at_ms: 0,
            refreshed_by: None,
            refreshed_at_ms: None,
        };
        store
            .put_account("claude-oauth", &serde_json::to_vec(&old).unwrap(), None)
            .unwrap();
        let expires = now_ms() + 3_600_000;
        let answer = format!(
            r#"{{"claudeAiOauth":{{"accessToken":"sk-ant-oat01-A1","refreshToken":"sk-ant-ort01-R1","expiresAt":{expires}}}}}"#
        );
        std::fs::write(journal_of(&c), &answer).unwrap();
        let post = |_: &str, _: &str, _: Vec<u8>| -> Result<(u16, Vec<u8>), String> {
            panic!("the spent refresh token was redeemed again")
        };
        refresh(&login, Some(&shared), &post).unwrap();
        let (_, here) = read_login(&c, Shape::Claude).unwrap();
        assert_eq!(
            (here.access.as_str(), here.expires_at_ms),
            ("sk-ant-oat01-A1", expires)
        );
        let (bytes, _) = store.account("claude-oauth").unwrap().unwrap();
        let stored: StoredLogin = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            (
                &stored.lease,
                stored.refreshed_by.as_deref(),
                stored.expires_at_ms
            ),
            (&None, Some("nodeC"), expires)
        );
        assert_eq!(
            Shape::Claude
                .tokens(&open_stored(&stored, b"pw").unwrap())
                .unwrap()
                .refresh,
            "sk-ant-ort01-R1"
        );
        assert!(!journal_of(&c).exists());

        // A journal cut short itself holds nothing to finish: dropped, and the refresh goes on.
        login_file(dir.path(), "c.json", "A1", "sk-ant-ort01-R1", 0);
        std::fs::write(journal_of(&c), "{\"claudeAiOa").unwrap();
        let redeemed = RefCell::new(0);
        let post = |_: &str, _: &str, _: Vec<u8>| {
            *redeemed.borrow_mut() += 1;
            Ok((
                200,
                br#"{"access_token":"sk-ant-oat01-A2","refresh_token":"sk-ant-ort01-R2","expires_in":3600}"#.to_vec(),
            ))
        };
        let mut due = stored.clone();
        due.expires_at_ms = 1;
        store.objects.borrow_mut().as_mut().unwrap().0 = serde_json::to_vec(&due).unwrap();
        refresh(&login, Some(&shared), &post).unwrap();
        assert_eq!(*redeemed.borrow(), 1);
        assert_eq!(
            read_login(&c, Shape::Claude).unwrap().1.access,
            "sk-ant-oat01-A2"
        );
        assert!(!journal_of(&c).exists());
    }

    #[test]
    fn a_sign_in_holds_the_account_until_the_store_has_its_login() {
        let dir = tempfile::tempdir().unwrap();
        let a = login_file(dir.path(), "a.json", "A0", "R0", 5);
        let store = Memory::default();
        let lock = dir.path().join("lock");
        let shared = test_shared(&store, "nodeA");
        let stored = |store: &Memory| -> StoredLogin {
            serde_json::from_slice(&store.account("claude-oauth").unwrap().unwrap().0).unwrap()
        };
        // Refused: the lease given back, nothing else changed.
        let before = std::fs::read_to_string(&a).unwrap();
        let refused = install("claude-oauth", &a, &lock, Some(&shared), || {
            assert_eq!(stored(&store).lease.unwrap().node, "nodeA");
            bail!("refused")
        });
        assert!(refused.is_err());
        assert_eq!(stored(&store).lease, None);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), before);
        // Signed in: the sign-in ran under this node's lease; the login is the file's and,
        // sealed, the store's, the lease gone; a leftover journal dropped.
        std::fs::write(journal_of(&a), "{}").unwrap();
        let login = r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-N","refreshToken":"sk-ant-ort01-N","expiresAt":99}}"#;
        let done = install("claude-oauth", &a, &lock, Some(&shared), || {
            assert_eq!(stored(&store).lease.unwrap().node, "nodeA");
            Ok(login.to_string())
        })
        .unwrap();
        assert_eq!(
            done,
            Installed {
                replaced: true,
                stored: true
            }
        );
        assert_eq!(
            read_login(&a, Shape::Claude).unwrap().1.access,
            "sk-ant-oat01-N"
        );
        let now = stored(&store);
        assert_eq!(
            (&now.lease, now.expires_at_ms, now.refreshed_by.as_deref()),
            (&None, 99, Some("nodeA"))
        );
        assert_eq!(open_stored(&now, b"pw").unwrap(), login);
        assert!(!journal_of(&a).exists());
        // A node file that is no JSON object stops it before any code is spent.
        std::fs::write(&a, "not json").unwrap();
        let err = install("claude-oauth", &a, &lock, None, || {
            panic!("a code was spent")
        })
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("holds no JSON object"),
            "{err:#}"
        );
    }

    #[test]
    fn a_cut_short_refresh_never_puts_an_older_login_over_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        // The file is newer than the journal: kept; the store likewise.
        let c = login_file(dir.path(), "c.json", "A9", "sk-ant-ort01-R9", 9_000);
        std::fs::write(
            journal_of(&c),
            r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-A1","refreshToken":"sk-ant-ort01-R1","expiresAt":1000}}"#,
        )
        .unwrap();
        let store = Memory::default();
        let newer = StoredLogin {
            expires_at_ms: 5_000,
            ..StoredLogin::default()
        };
        store
            .put_account("claude-oauth", &serde_json::to_vec(&newer).unwrap(), None)
            .unwrap();
        let lock = dir.path().join("lock");
        let login = test_login(&c, &lock);
        let shared = test_shared(&store, "nodeC");
        finish_cut_short(&login, Some(&shared)).unwrap();
        assert_eq!(read_login(&c, Shape::Claude).unwrap().1.access, "A9");
        let (bytes, _) = store.account("claude-oauth").unwrap().unwrap();
        assert_eq!(
            serde_json::from_slice::<StoredLogin>(&bytes).unwrap(),
            newer
        );
        assert!(!journal_of(&c).exists());
    }

    #[test]
    fn a_refused_refresh_gives_the_lease_back_and_says_only_the_status() {
        let dir = tempfile::tempdir().unwrap();
        let a = login_file(dir.path(), "a.json", "A0", "R0", 0);
        let store = Memory::default();
        let post = |_: &str, _: &str, _: Vec<u8>| {
            Ok((
                400,
                br#"{"error":"invalid_grant","secret":"sk-ant-x"}"#.to_vec(),
            ))
        };
        let lock = dir.path().join("lock");
        let login = Login {
            row: "claude-oauth",
            file: &a,
            lock: &lock,
            token_host: "platform.example",
            token_path: "/t",
            client_id: "c",
        };
        let shared = test_shared(&store, "nodeA");
        let err = refresh(&login, Some(&shared), &post).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "refreshing the claude-oauth login at platform.example: it answered 400"
        );
        let (bytes, _) = store.account("claude-oauth").unwrap().unwrap();
        let stored: StoredLogin = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(stored.lease, None);
        assert_eq!(read_login(&a, Shape::Claude).unwrap().1.access, "A0");
    }
}
