//! `login <agent>`: a sign-in made from the operator's shell, its login kept by the node's
//! credential broker (boxes given it see placeholders) and, where nodes share a store, sealed
//! there for the other nodes' brokers.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};

use anyhow::{Context, Result};

use super::Ctx;
use crate::error::UserError;
use crate::plan::broker::{self, RULES};
use crate::plan::oauth::{self, SignIn};
use crate::sys::{host, oauth_refresh};

/// The longest line a pasted code is read from.
const MAX_PASTE: u64 = 8 * 1024;

pub(crate) fn run(agent: &str) -> Result<()> {
    let Some((row, at, page)) = RULES.iter().find_map(|r| {
        let at = r.oauth?;
        Some((r, at, at.sign_in?)).filter(|(r, ..)| r.login == agent)
    }) else {
        return Err(not_signed_in_here(agent).into());
    };
    let ctx = Ctx::load()?;
    let mut verifier = [0u8; 32];
    let mut state = [0u8; 32];
    host::random_bytes(&mut verifier)?;
    host::random_bytes(&mut state)?;
    let sign_in = SignIn::new(&verifier, &state);
    // The link and the prompt are the sign-in itself, not log lines: shown even with -q.
    let mut err = std::io::stderr();
    write!(
        err,
        "Open this link in a browser, sign in with the account {agent} is to use, and paste the code the page shows:\n\n{}\n\n",
        sign_in.url(at.client_id, &page)
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
    let again = format!("run 'ag-box login {agent}' again and paste the whole code the page shows");
    let code = sign_in
        .code(&pasted)
        .map_err(|why| UserError::failed(format!("{agent}: {why}"), again.clone()))?;
    let post = oauth_refresh::blocking_post()?;
    let file = ctx.config.home.join(row.copied);
    let shared = super::refresh::shared(&ctx);
    let mut login = String::new();
    let installed = oauth_refresh::install(
        row.name,
        &file,
        &broker::lock_file(row.name),
        shared.as_ref(),
        || {
            let (status, answer) = post(
                at.host,
                at.path,
                sign_in.exchange(code, at.client_id, &page),
            )
            .map_err(|e| {
                UserError::failed(
                    format!("{agent}: {} did not answer: {e}", at.host),
                    again.clone(),
                )
            })?;
            let now = oauth_refresh::now_ms();
            login = (200..300)
                .contains(&status)
                .then(|| oauth::captured_login(&answer, now))
                .flatten()
                .ok_or_else(|| {
                    let said =
                        oauth::refusal(&answer).map_or_else(String::new, |s| format!(": {s}"));
                    UserError::failed(
                        format!("{agent}: {} refused the code ({status}{said})", at.host),
                        format!("a code is good once and for a few minutes: {again}"),
                    )
                })?;
            Ok(login.clone())
        },
    )?;
    out!("{}", crate::plan::text::escaped(&file.to_string_lossy()));
    let expires = oauth::claude_tokens(&login).map_or(0, |t| t.expires_at_ms);
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

/// The error for an agent this version signs in to through its own CLI only.
fn not_signed_in_here(agent: &str) -> UserError {
    let own = match agent {
        "codex" => "codex login",
        "gemini" => "gemini (its /auth)",
        "grok" => "its API key in ~/.grok/user-settings.json",
        "opencode" => "opencode auth login",
        "gh" => "gh auth login",
        _ => {
            return UserError::usage(
                format!(
                    "'{}' is no agent ag-box signs in to",
                    crate::plan::text::escaped(agent)
                ),
                "ag-box login claude",
            );
        }
    };
    UserError::usage(
        format!("{agent}: no sign-in through ag-box yet"),
        format!("sign in on this node with {own}; boxes given {agent} use the node's login"),
    )
}
