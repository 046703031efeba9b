//! The broker's OAuth logins (`plan::oauth`): the current access token put in where a box sends
//! its placeholder, made fresh first when due (one proxy of the node at a time, under the
//! login's lock; `sys::oauth_refresh`), and a box's own refresh answered here with its
//! placeholders again: the real tokens never reach a box.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response};

use super::{Attempt, Body};
use crate::plan::broker::{OauthAccount, Secret};
use crate::plan::oauth::{self, Asked};
use crate::plan::text::escaped;
use crate::sys::oauth_refresh;
use tokio_rustls::TlsConnector;

/// The most of a token request read (a few hundred bytes).
const MAX_BODY: usize = 64 * 1024;

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The placeholders of the box's OAuth logins as secrets: an access token's with the current
/// token where `headers` carry it (refreshed first when due), with none elsewhere (there it is
/// only to be recognised and refused). Err: why the request is refused.
pub(super) async fn secrets<'a>(
    headers: &hyper::HeaderMap,
    logins: impl Iterator<Item = (OauthAccount, &'a Gate)>,
) -> Result<Vec<Secret>, String> {
    let carries = |placeholder: &str| {
        headers
            .values()
            .any(|v| String::from_utf8_lossy(v.as_bytes()).contains(placeholder))
    };
    let mut out = Vec::new();
    for (account, gate) in logins {
        if carries(&account.refresh) {
            return Err(format!(
                "the {} login's refresh token goes to {} only, and the broker answers for it",
                account.login, account.token_host
            ));
        }
        let real = if carries(&account.access) {
            // The token goes with its own account only (a box could otherwise aim it at
            // another workspace the user belongs to).
            if let Some(own) = &account.account_id
                && headers
                    .get_all("chatgpt-account-id")
                    .iter()
                    .any(|v| v.as_bytes() != own.as_bytes())
            {
                return Err(format!(
                    "the {} login's token goes with the account of the node's login only (chatgpt-account-id)",
                    account.login
                ));
            }
            current(&account, gate).await?
        } else {
            String::new()
        };
        out.push(Secret {
            login: account.login,
            placeholder: account.access,
            real,
            bearer_only: true,
            hosts: Vec::new(),
            key_header: None,
        });
    }
    Ok(out)
}

/// What a proxy keeps of one OAuth login: the login as it is now (its placeholders change once
/// when the box signs in through the broker), the refresh under way (one at a time, run by a
/// task of its own whose end every request waiting on it reads: a box that hangs up changes
/// nothing), and the last one that failed, answered for [`BACKOFF`] without another try.
pub(super) struct Gate {
    account: std::sync::RwLock<OauthAccount>,
    state: Arc<std::sync::Mutex<GateState>>,
    /// Where the placeholders of a sign-in through the broker are kept for a restarted proxy
    /// (root's, in the run dir); None: not kept.
    kept_at: Option<std::path::PathBuf>,
}

/// The placeholders a box was answered with when it signed in through the broker, and the
/// account its login is for.
#[derive(serde::Serialize, serde::Deserialize)]
struct SignedIn {
    access: String,
    refresh: String,
    id: Option<String>,
    account_id: Option<String>,
}

impl Gate {
    pub(super) fn new(account: OauthAccount) -> Gate {
        Gate {
            account: std::sync::RwLock::new(account),
            state: Arc::default(),
            kept_at: None,
        }
    }

    /// The gate whose sign-in placeholders are kept in `dir` across the proxy's restarts (and
    /// taken from there, where an earlier run of it kept some).
    pub(super) fn keeping_in(mut self, dir: &std::path::Path) -> Gate {
        let at = dir.join(format!("signed-in.{}.json", self.account().row));
        if let Some(kept) = std::fs::read(&at)
            .ok()
            .and_then(|b| serde_json::from_slice::<SignedIn>(&b).ok())
        {
            self.apply(&kept);
        }
        self.kept_at = Some(at);
        self
    }

    fn apply(&self, kept: &SignedIn) {
        let mut a = self
            .account
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        a.access.clone_from(&kept.access);
        a.refresh.clone_from(&kept.refresh);
        a.id.clone_from(&kept.id);
        a.account_id.clone_from(&kept.account_id);
        a.captures = false;
    }

    /// The login as it is now.
    pub(super) fn account(&self) -> OauthAccount {
        self.account
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The login after the box signed in through the broker: the placeholders it was answered
    /// with, its account, and no other sign-in.
    fn signed_in(&self, shown: &oauth::Placeholders, account_id: Option<String>) {
        let kept = SignedIn {
            access: shown.access.to_string(),
            refresh: shown.refresh.to_string(),
            id: shown.id.map(String::from),
            account_id,
        };
        self.apply(&kept);
        if let Some(at) = &self.kept_at {
            let written = serde_json::to_vec(&kept)
                .map_err(anyhow::Error::from)
                .and_then(|b| crate::atomic::write(at, &b, 0o600));
            if let Err(e) = written {
                tracing::warn!(
                    "keeping the box's sign-in placeholders in {}: {e:#}",
                    at.display()
                );
            }
        }
    }
}

#[derive(Default)]
struct GateState {
    running: Option<tokio::sync::watch::Receiver<Option<bool>>>,
    failed: Option<Instant>,
}

/// How long a failed refresh is answered for without another try.
const BACKOFF: Duration = Duration::from_secs(30);

/// What a box is told when its login cannot be made fresh (the reason goes to the node's log:
/// it may name the store, other nodes, the endpoint's words).
fn not_fresh(login: &str) -> String {
    format!(
        "the node's {login} login could not be refreshed; its reason is in the log of this box's proxy on the node"
    )
}

/// The login's access token, if its file holds one that is fresh.
fn fresh(account: &OauthAccount) -> Option<String> {
    oauth_refresh::read_login(&account.file, account.shape)
        .ok()
        .filter(|(_, t)| !t.stale(now_ms()))
        .map(|(_, t)| t.access)
}

/// The login's access token as it is now, made fresh first when it is due.
async fn current(account: &OauthAccount, gate: &Gate) -> Result<String, String> {
    if let Some(access) = fresh(account) {
        return Ok(access);
    }
    let mut done = {
        let mut state = gate
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.failed.is_some_and(|at| at.elapsed() < BACKOFF) {
            return Err(not_fresh(&account.login));
        }
        if let Some(running) = &state.running {
            running.clone()
        } else {
            let (tell, told) = tokio::sync::watch::channel(None);
            state.running = Some(told.clone());
            tokio::spawn(refresh_task(account.clone(), gate.state.clone(), tell));
            told
        }
    };
    let fresh_now = done
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|d| *d)
        .unwrap_or(false);
    if !fresh_now {
        return Err(not_fresh(&account.login));
    }
    fresh(account).ok_or_else(|| not_fresh(&account.login))
}

/// One refresh of `account`, to its end: whether it left the login fresh, told to every request
/// waiting on it and kept in `state` (a failure starts the backoff).
async fn refresh_task(
    account: OauthAccount,
    state: Arc<std::sync::Mutex<GateState>>,
    tell: tokio::sync::watch::Sender<Option<bool>>,
) {
    let login = account.login.clone();
    let done = tokio::task::spawn_blocking(move || {
        run_refresher(&account)?;
        // A refresh that leaves it due (a lifetime within the margin) is a failure too.
        fresh(&account)
            .map(|_| ())
            .ok_or_else(|| "the login is still due after a refresh".to_string())
    })
    .await
    .unwrap_or_else(|e| Err(format!("the refresh stopped: {e}")));
    let mut s = state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    s.running = None;
    match &done {
        Ok(()) => s.failed = None,
        Err(why) => {
            tracing::warn!("the {login} login: {why}");
            s.failed = Some(Instant::now());
        }
    }
    drop(s);
    let _ = tell.send(Some(done.is_ok()));
}

/// `ag-box __refresh` (`sys::oauth_refresh`: the node's lock, and the store's account lease
/// where nodes share one), in a process of its own: the store's credentials never enter the
/// proxy, and a refresh under way is not cut short with it.
fn run_refresher(account: &OauthAccount) -> Result<(), String> {
    let refresher = &account.refresher;
    let (exe, args) = refresher
        .argv
        .split_first()
        .ok_or("the refresher has no command")?;
    let out = std::process::Command::new(exe)
        .args(args)
        .env_clear()
        .envs(refresher.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("running {exe}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    Err(said
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map_or_else(|| format!("{exe} {}", out.status), |l| escaped(l.trim())))
}

/// A box's request to its login's token endpoint, answered here: a refresh of its placeholder
/// gets the placeholders again (the login refreshed first when due); any other grant (a login,
/// which would replace the node's) or token is refused.
pub(super) async fn token_request(
    req: Request<Incoming>,
    account: &OauthAccount,
    gate: &Gate,
    upstream: (&TlsConnector, u16),
    attempt: &Attempt,
) -> Response<Body> {
    let rule = "answered by the broker";
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return attempt.refuse(&format!("the token request's body: {e}")),
    };
    match oauth::asked(&body) {
        Some(Asked::Refresh(token)) if token == account.refresh => {}
        Some(Asked::Other(grant))
            if grant == "authorization_code"
                && account.captures
                && account.shape.captures()
                && oauth_refresh::read_login(&account.file, account.shape).is_err() =>
        {
            return capture(body, account, gate, upstream, attempt).await;
        }
        Some(Asked::Other(grant)) => {
            return attempt.refuse(&format!(
                "the broker holds a {} login for this box already, which the {grant} grant would replace; log in on the node instead",
                account.login
            ));
        }
        _ => {
            return attempt.refuse(&format!(
                "the broker answers only a refresh of the {} login's placeholder",
                account.login
            ));
        }
    }
    if let Err(e) = current(account, gate).await {
        return attempt.unreachable(rule, &e);
    }
    attempt.log(Ok(rule), None, (0, 0));
    json(200, oauth::answer_to_box(&account.shown()))
}

/// An answer of `status` with a JSON body.
fn json(status: u16, bytes: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(bytes))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A login's code exchange from a box that has none (and a node that has none): sent on as it
/// is; what it answers is kept by the broker, for this box alone, and the box gets its
/// placeholders in its place.
async fn capture(
    body: Bytes,
    account: &OauthAccount,
    gate: &Gate,
    (connector, port): (&TlsConnector, u16),
    attempt: &Attempt,
) -> Response<Body> {
    let rule = "a login kept by the broker for this box";
    let answered = oauth_refresh::post(
        connector,
        &account.token_host,
        port,
        &account.token_path,
        body.to_vec(),
    )
    .await;
    let (status, answer) = match answered {
        Ok(a) => a,
        Err(e) => return attempt.unreachable(rule, &e),
    };
    // A refused exchange holds no token: the box reads why.
    if !(200..300).contains(&status) {
        attempt.log(
            Ok(rule),
            Some(format!("the login was refused ({status})")),
            (0, 0),
        );
        return json(status, answer);
    }
    let now = now_ms();
    let Some(kept) = account.shape.captured(&answer, now) else {
        return attempt.unreachable(rule, "the login's answer holds no tokens");
    };
    let (access, refresh, id) =
        oauth::signed_in_placeholders(account.shape, &kept, &account.shown(), now);
    let placeholders = oauth::Placeholders {
        access: &access,
        refresh: &refresh,
        id: id.as_deref(),
    };
    let Some(shown) = oauth::answer_with_placeholders(&answer, &placeholders) else {
        return attempt.unreachable(rule, "the login's answer holds no tokens");
    };
    let account_id = account.shape.account_id(&kept);
    let file = account.file.clone();
    let stored = tokio::task::spawn_blocking(move || oauth_refresh::keep_new_login(&file, &kept))
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("{e}")));
    if let Err(e) = stored {
        tracing::warn!("keeping the {} login a box made: {e:#}", account.login);
        return attempt.unreachable(rule, &not_fresh(&account.login));
    }
    gate.signed_in(&placeholders, account_id);
    tracing::info!("kept the {} login this box made", account.login);
    attempt.log(Ok(rule), None, (0, 0));
    json(status, shown)
}

/// Whether a request is Google's token-info query on the login of `account` (Gemini CLI checks
/// its login so before using it).
pub(super) fn is_token_info(account: &OauthAccount, host: &str, path: &str) -> bool {
    account.shape == oauth::Shape::Gemini
        && account.token_host.eq_ignore_ascii_case(host)
        && path == "/tokeninfo"
}

/// A token-info query of the box's access placeholder (in a header, the query or the form),
/// answered here from the node's login, made fresh first when due (the client it is for, its
/// scope, expiry and email; no token); of any other token, refused.
pub(super) async fn token_info(
    req: Request<Incoming>,
    account: &OauthAccount,
    gate: &Gate,
    attempt: &Attempt,
) -> Response<Body> {
    let rule = "answered by the broker";
    let in_header = req
        .headers()
        .values()
        .any(|v| String::from_utf8_lossy(v.as_bytes()).contains(&account.access));
    let in_query = req
        .uri()
        .query()
        .is_some_and(|q| q.contains(&account.access));
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return attempt.refuse(&format!("the token-info request's body: {e}")),
    };
    if !(in_header || in_query || String::from_utf8_lossy(&body).contains(&account.access)) {
        return attempt.refuse(&format!(
            "the broker answers token info only of the {} login's placeholder",
            account.login
        ));
    }
    if let Err(e) = current(account, gate).await {
        return attempt.unreachable(rule, &e);
    }
    let info = oauth_refresh::read_text(&account.file)
        .ok()
        .and_then(|text| oauth::gemini_token_info(&text, &account.client_id, now_ms()));
    match info {
        Some(info) => {
            attempt.log(Ok(rule), None, (0, 0));
            json(200, info)
        }
        None => attempt.unreachable(rule, &not_fresh(&account.login)),
    }
}

/// Whether a request to `host` for `path` is one to `account`'s token endpoint.
pub(super) fn is_token_request(account: &OauthAccount, host: &str, path: &str) -> bool {
    account.token_host.eq_ignore_ascii_case(host) && path == account.token_path
}
