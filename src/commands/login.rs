//! `login <agent>`: a sign-in made from the operator's shell, its login kept by the node's
//! credential broker (boxes given it see placeholders) and, where nodes share a store, sealed
//! there for the other nodes' brokers.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::Ctx;
use crate::error::UserError;
use crate::plan::broker::{self, OauthEndpoint, RULES};
use crate::plan::oauth;
use crate::plan::sign_in::{self, DeviceCode, Polled, SignIn, SignInPage, Way};
use crate::sys::{host, oauth_refresh};

/// The longest line a pasted code is read from.
const MAX_PASTE: u64 = 8 * 1024;

/// How long a device code is waited on (as long as Codex's server keeps one).
const DEVICE_WAIT: Duration = Duration::from_mins(15);

pub(crate) fn run(agent: &str) -> Result<()> {
    let Some((row, at, way)) = RULES.iter().find_map(|r| {
        let at = r.oauth?;
        Some((r, at, at.sign_in?)).filter(|(r, ..)| r.login == agent)
    }) else {
        return Err(not_signed_in_here(agent).into());
    };
    let ctx = Ctx::load()?;
    let post = oauth_refresh::blocking_post()?;
    let again = match way {
        Way::Paste(_) => {
            format!("run 'ag-box login {agent}' again and paste the whole code the page shows")
        }
        Way::Device(_) => format!(
            "run 'ag-box login {agent}' again and enter the code it shows within 15 minutes"
        ),
    };
    let exchange = match way {
        Way::Paste(page) => pasted_code(agent, &at, &page, &again)?,
        Way::Device(device) => device_code(agent, &at, &device, &again, &post)?,
    };
    let file = ctx.config.home.join(row.copied);
    let shared = super::refresh::shared(&ctx);
    let mut login = String::new();
    let installed = oauth_refresh::install(
        row.name,
        &file,
        &broker::lock_file(row.name),
        shared.as_ref(),
        || {
            let (status, answer) = post(at.host, at.path, exchange).map_err(|e| {
                UserError::failed(
                    format!("{agent}: {} did not answer: {e}", at.host),
                    again.clone(),
                )
            })?;
            let now = oauth_refresh::now_ms();
            login = (200..300)
                .contains(&status)
                .then(|| at.shape.captured(&answer, now))
                .flatten()
                .ok_or_else(|| {
                    UserError::failed(
                        format!(
                            "{agent}: {} refused the code ({status}{})",
                            at.host,
                            said(&answer)
                        ),
                        format!("a code is good once and for a few minutes: {again}"),
                    )
                })?;
            Ok(login.clone())
        },
    )?;
    out!("{}", crate::plan::text::escaped(&file.to_string_lossy()));
    let expires = at.shape.tokens(&login).map_or(0, |t| t.expires_at_ms);
    say!(
        "signed in to {agent}: the node's login {} (its token good until {}; the broker refreshes it)",
        if installed.replaced {
            "is replaced"
        } else {
            "is made"
        },
        crate::plan::text::rfc3339_ms(expires)
    );
    if installed.stored {
        say!(
            "the login is in the store for the other nodes' brokers (sealed); they take it at their next refresh, or at once with 'ag-box globals pull'"
        );
    } else if shared.is_some() {
        tracing::warn!(
            "the login is in this node's file but not in the store: run 'ag-box globals push' here for the other nodes"
        );
    }
    say!(
        "boxes given {agent} use it from their next request (a box started while the node had no {agent} login: from its next start)"
    );
    Ok(())
}

/// What a token or sign-in endpoint said when it refused, for the operator (`: why`, escaped).
fn said(answer: &[u8]) -> String {
    oauth::refusal(answer).map_or_else(String::new, |s| format!(": {s}"))
}

/// A sign-in through a page that shows a code to paste back (Claude Code's, Gemini CLI's): the
/// link shown, the code read back and checked against this sign-in, and the body that redeems
/// it. The link and the prompt are the sign-in itself, not log lines: shown even with -q.
fn pasted_code(agent: &str, at: &OauthEndpoint, page: &SignInPage, again: &str) -> Result<Vec<u8>> {
    let mut verifier = [0u8; 32];
    let mut state = [0u8; 32];
    host::random_bytes(&mut verifier)?;
    host::random_bytes(&mut state)?;
    let sign_in = SignIn::new(&verifier, &state);
    let mut err = std::io::stderr();
    write!(
        err,
        "Open this link in a browser, sign in with the account {agent} is to use, and paste the code the page shows:\n\n{}\n\n",
        sign_in.url(at.client_id, page)
    )
    .and_then(|()| {
        if std::io::stdin().is_terminal() {
            write!(err, "Code: ")?;
        }
        err.flush()
    })
    .context("showing the sign-in link")?;
    let mut pasted = String::new();
    std::io::stdin()
        .lock()
        .take(MAX_PASTE)
        .read_line(&mut pasted)
        .context("reading the code")?;
    let code = sign_in
        .code(&pasted, page)
        .map_err(|why| UserError::failed(format!("{agent}: {why}"), again.to_string()))?;
    Ok(sign_in::exchange(
        at.shape,
        code,
        &sign_in.verifier,
        &sign_in.state,
        at.client_id,
        page.redirect_uri,
    ))
}

/// A device-code sign-in (Codex's): a one-time code asked for and shown with the page to enter
/// it on, the sign-in polled for until the person has (15 minutes at most), and the body that
/// redeems the authorization code it gives.
fn device_code(
    agent: &str,
    at: &OauthEndpoint,
    device: &DeviceCode,
    again: &str,
    post: &oauth_refresh::Post<'static>,
) -> Result<Vec<u8>> {
    let unanswered = |e: String| {
        UserError::failed(
            format!("{agent}: {} did not answer: {e}", at.host),
            again.to_string(),
        )
    };
    let (status, answer) = post(
        at.host,
        device.user_code_path,
        sign_in::user_code_request(at.client_id),
    )
    .map_err(unanswered)?;
    let issued = (200..300)
        .contains(&status)
        .then(|| sign_in::issued(&answer))
        .flatten()
        .ok_or_else(|| {
            UserError::failed(
                format!("{agent}: {} gave no device code ({status}{})", at.host, said(&answer)),
                format!("device code sign-in may be off for the account (ChatGPT's security settings turn it on); or sign in with '{agent} login' on this node"),
            )
        })?;
    write!(
        std::io::stderr(),
        "Open this link in a browser, sign in with the account {agent} is to use, and enter the code {}:\n\n{}\n\n(the code is good for 15 minutes; waiting for the sign-in)\n",
        issued.user_code,
        device.verify_url
    )
    .context("showing the sign-in link")?;
    let until = Instant::now() + DEVICE_WAIT;
    loop {
        let (status, answer) = match post(at.host, device.poll_path, sign_in::poll_request(&issued))
        {
            Ok(answered) => answered,
            // A network that fails for a moment ends no sign-in.
            Err(e) if Instant::now() < until => {
                tracing::warn!("{agent}: {} did not answer ({e}); asking again", at.host);
                std::thread::sleep(Duration::from_secs(issued.interval_s));
                continue;
            }
            Err(e) => return Err(unanswered(e).into()),
        };
        match sign_in::polled(status, &answer) {
            Polled::Granted { code, verifier } => {
                return Ok(sign_in::exchange(
                    at.shape,
                    &code,
                    &verifier,
                    "",
                    at.client_id,
                    device.redirect_uri,
                ));
            }
            Polled::Pending if Instant::now() < until => {
                std::thread::sleep(Duration::from_secs(issued.interval_s));
            }
            Polled::Pending => {
                return Err(UserError::failed(
                    format!("{agent}: the code was not entered within 15 minutes"),
                    again.to_string(),
                )
                .into());
            }
            Polled::Failed => {
                return Err(UserError::failed(
                    format!(
                        "{agent}: {} ended the sign-in ({status}{})",
                        at.host,
                        said(&answer)
                    ),
                    again.to_string(),
                )
                .into());
            }
        }
    }
}

/// The error for an agent whose login ag-box does not sign in to: its own way of signing in.
fn not_signed_in_here(agent: &str) -> UserError {
    let own = match agent {
        "grok" => "its API key in ~/.grok/user-settings.json",
        "opencode" => "opencode auth login",
        "gh" => "gh auth login",
        _ => {
            return UserError::usage(
                format!(
                    "'{}' is no agent ag-box signs in to",
                    crate::plan::text::escaped(agent)
                ),
                "ag-box login claude|codex|gemini",
            );
        }
    };
    UserError::usage(
        format!("{agent}: no sign-in through ag-box (its login is a key, or its own)"),
        format!("sign in on this node with {own}; boxes given {agent} use the node's login"),
    )
}
