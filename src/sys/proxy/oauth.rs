//! The broker's OAuth logins (`plan::oauth`): the current access token put in where a box sends
//! its placeholder, refreshed here when due (one proxy of the node at a time, under the login's
//! lock, the node's file rewritten whole), and a box's own refresh answered here with its
//! placeholders again: the real tokens never reach a box.

use std::io::Read;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;

use super::broker::Broker;
use super::{Attempt, Body, CONNECT_TIMEOUT, dial};
use crate::atomic;
use crate::plan::broker::{OauthAccount, Secret};
use crate::plan::oauth::{self, Asked, Tokens};
use crate::plan::text::escaped;

/// The most of a token request or answer read (they are a few hundred bytes).
const MAX_BODY: usize = 64 * 1024;
/// The most of a login file read.
const MAX_FILE: u64 = 1 << 20;

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The placeholders of the box's OAuth logins as secrets: an access token's with the current
/// token where `headers` carry it (refreshed first when due), with none elsewhere (there it is
/// only to be recognised and refused). Err: why the request is refused.
pub(super) async fn secrets(
    accounts: &[OauthAccount],
    headers: &hyper::HeaderMap,
    broker: &Broker,
) -> Result<Vec<Secret>, String> {
    let carries = |placeholder: &str| {
        headers
            .values()
            .any(|v| String::from_utf8_lossy(v.as_bytes()).contains(placeholder))
    };
    let mut out = Vec::new();
    for account in accounts {
        if carries(&account.refresh) {
            return Err(format!(
                "the {} login's refresh token goes to {} only, and the broker answers for it",
                account.login, account.token_host
            ));
        }
        let real = if carries(&account.access) {
            current(account, broker).await?
        } else {
            String::new()
        };
        out.push(Secret {
            login: account.login.clone(),
            placeholder: account.access.clone(),
            real,
        });
    }
    Ok(out)
}

/// The node's file of `account` and the login in it.
fn read(file: &Path) -> Result<(String, Tokens), String> {
    let mut text = String::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_FILE).read_to_string(&mut text))
        .map_err(|e| format!("reading {}: {e}", file.display()))?;
    let tokens = oauth::claude_tokens(&text)
        .ok_or_else(|| format!("{} holds no login any more", file.display()))?;
    Ok((text, tokens))
}

/// The login's access token as it is now, refreshed first when it is due: under the login's
/// lock, after reading the file again (another box's proxy may have just refreshed it).
async fn current(account: &OauthAccount, broker: &Broker) -> Result<String, String> {
    let (_, tokens) = read(&account.file)?;
    if !tokens.stale(now_ms()) {
        return Ok(tokens.access);
    }
    let lock_path = account.lock.clone();
    let lock = tokio::task::spawn_blocking(move || {
        let f = std::fs::File::open(&lock_path)
            .map_err(|e| format!("opening {}: {e}", lock_path.display()))?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
        Ok::<_, String>(f)
    })
    .await
    .map_err(|e| format!("locking the {} login: {e}", account.login))??;
    let (text, tokens) = read(&account.file)?;
    if !tokens.stale(now_ms()) {
        return Ok(tokens.access);
    }
    let body = oauth::refresh_request(&tokens.refresh, &account.client_id);
    let (status, answer) = post(broker, &account.token_host, &account.token_path, body).await?;
    let refused = |why: &str| {
        format!(
            "refreshing the {} login at {}: {why}",
            account.login, account.token_host
        )
    };
    if !status.is_success() {
        let said = String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned();
        return Err(refused(&format!("{status}: {}", escaped(&said))));
    }
    let new = oauth::refreshed(&answer).ok_or_else(|| refused("no access token in the answer"))?;
    let after = oauth::claude_after_refresh(&text, &new, now_ms())
        .ok_or_else(|| refused("the login file changed shape"))?;
    atomic::write(&account.file, after.as_bytes(), 0o600)
        .map_err(|e| refused(&format!("{e:#}")))?;
    drop(lock);
    tracing::info!(
        "refreshed the {} login at {}",
        account.login,
        account.token_host
    );
    Ok(new.access)
}

/// POST `body` (JSON) to `https://host/path` (on the port ruled hosts are served on), the
/// certificate checked against the system's
/// CAs; the status and the answer's body.
async fn post(
    broker: &Broker,
    host: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(StatusCode, Bytes), String> {
    let exchange = async {
        let addrs: Vec<_> = tokio::net::lookup_host((host, broker.port()))
            .await
            .map_err(|e| format!("resolving {host}: {e}"))?
            .collect();
        let stream = dial(&addrs)
            .await
            .map_err(|e| format!("connecting to {host}: {e}"))?;
        let name =
            ServerName::try_from(host.to_string()).map_err(|e| format!("server name: {e}"))?;
        let tls = broker
            .connector()
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS to {host}: {e}"))?;
        let (mut sender, link) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("handshake with {host}: {e}"))?;
        tokio::spawn(link);
        let req = Request::post(path)
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, "ag-box-broker")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("the request: {e}"))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("{host}: {e}"))?;
        let status = resp.status();
        let answer = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("{host}'s answer: {e}"))?
            .to_bytes();
        Ok((status, answer))
    };
    tokio::time::timeout(CONNECT_TIMEOUT * 3, exchange)
        .await
        .map_err(|_| format!("{host}: timed out"))?
}

/// A box's request to its login's token endpoint, answered here: a refresh of its placeholder
/// gets the placeholders again (the login refreshed first when due); any other grant (a login,
/// which would replace the node's) or token is refused.
pub(super) async fn token_request(
    req: Request<Incoming>,
    account: &OauthAccount,
    broker: &Broker,
    attempt: &Attempt,
) -> Response<Body> {
    let rule = "answered by the broker";
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return attempt.refuse(&format!("the token request's body: {e}")),
    };
    match oauth::asked(&body) {
        Some(Asked::Refresh(token)) if token == account.refresh => {}
        Some(Asked::Other(grant)) => {
            return attempt.refuse(&format!(
                "the broker holds this node's {} login; a {grant} grant from a box would replace it, log in on the node",
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
    if let Err(e) = current(account, broker).await {
        return attempt.unreachable(rule, &e);
    }
    attempt.log(Ok(rule), None, (0, 0));
    let mut resp = Response::new(
        Full::new(Bytes::from(oauth::answer_to_box(
            &account.access,
            &account.refresh,
        )))
        .map_err(|never| match never {})
        .boxed(),
    );
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Whether a request to `host` for `path` is one to `account`'s token endpoint.
pub(super) fn is_token_request(account: &OauthAccount, host: &str, path: &str) -> bool {
    account.token_host.eq_ignore_ascii_case(host) && path == account.token_path
}
