//! The OAuth logins the credential broker keeps (docs/design.md "Credential broker"): Claude
//! Code's `~/.claude/.credentials.json` as its CLI writes it, the copy a box sees of it
//! (placeholders that never expire soon, so the CLI never refreshes by itself), and the token
//! exchanges the broker makes and answers in its stead.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The key of Claude Code's login in its credentials file.
const CLAUDE_KEY: &str = "claudeAiOauth";

/// How long before its expiry the broker refreshes an access token (as Claude Code does).
pub(crate) const REFRESH_MARGIN_MS: i64 = 5 * 60 * 1000;

/// How far ahead a box's copy says its token expires, and what the broker's answer to a box's
/// own refresh says: a year, so the CLI in the box never refreshes on its own.
pub(crate) const SHOWN_LIFETIME_S: i64 = 365 * 24 * 60 * 60;

/// The tokens of an OAuth login, as the node's file holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub access: String,
    pub refresh: String,
    /// Milliseconds since the epoch.
    pub expires_at_ms: i64,
}

impl Tokens {
    /// Whether the access token is to be refreshed before it is used at `now_ms`.
    pub(crate) fn stale(&self, now_ms: i64) -> bool {
        self.expires_at_ms - now_ms < REFRESH_MARGIN_MS
    }
}

/// The login of Claude Code's credentials file; None when it holds none.
pub(crate) fn claude_tokens(text: &str) -> Option<Tokens> {
    let v: Value = serde_json::from_str(text).ok()?;
    let login = v.get(CLAUDE_KEY)?;
    let token = |k: &str| {
        login
            .get(k)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(String::from)
    };
    Some(Tokens {
        access: token("accessToken")?,
        refresh: token("refreshToken")?,
        expires_at_ms: login.get("expiresAt").and_then(Value::as_i64).unwrap_or(0),
    })
}

/// The shape of an OAuth login's file: Claude Code's `~/.claude/.credentials.json`, or Codex's
/// `~/.codex/auth.json` holding its `ChatGPT` login.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Shape {
    #[default]
    Claude,
    Codex,
    /// Gemini CLI's Google login, `~/.gemini/oauth_creds.json`.
    Gemini,
}

/// The placeholders a box sees for an OAuth login's tokens (Codex's login has an OpenID-Connect token
/// too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placeholders<'a> {
    pub access: &'a str,
    pub refresh: &'a str,
    pub id: Option<&'a str>,
}

impl Shape {
    /// The login of a file of this shape; None when it holds none.
    pub(crate) fn tokens(self, text: &str) -> Option<Tokens> {
        match self {
            Shape::Claude => claude_tokens(text),
            Shape::Codex => codex_tokens(text),
            Shape::Gemini => gemini_tokens(text),
        }
    }

    /// The copy a box sees (the login alone, `shown` in place of its tokens, an expiry far
    /// ahead, so that the CLI never refreshes by itself); None when it holds no login.
    pub(crate) fn shown(self, text: &str, shown: &Placeholders, now_ms: i64) -> Option<String> {
        match self {
            Shape::Claude => claude_shown(text, shown.access, shown.refresh, now_ms),
            Shape::Codex => codex_shown(text, shown, now_ms),
            Shape::Gemini => gemini_shown(text, shown, now_ms),
        }
    }

    /// The login alone of a file: what the store keeps (never the file's other entries).
    pub(crate) fn login_only(self, text: &str) -> Option<String> {
        match self {
            Shape::Claude => claude_login_only(text),
            Shape::Codex | Shape::Gemini => {
                self.tokens(text)?;
                let v: Value = serde_json::from_str(text).ok()?;
                let mut out = Map::new();
                for key in self.login_keys() {
                    if let Some(found) = v.get(key) {
                        out.insert(key.to_string(), found.clone());
                    }
                }
                serde_json::to_string(&Value::Object(out)).ok()
            }
        }
    }

    /// This node's file (`local`) with the login of `login` (a [`Shape::login_only`]) in place
    /// of its own, all else kept.
    pub(crate) fn with_login(self, local: Option<&str>, login: &str) -> Option<String> {
        match self {
            Shape::Claude => claude_with_login(local, login),
            Shape::Codex | Shape::Gemini => {
                let login: Value = serde_json::from_str(login).ok()?;
                let mut v = local
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                let o = v.as_object_mut()?;
                for key in self.login_keys() {
                    if let Some(found) = login.get(key) {
                        o.insert(key.to_string(), found.clone());
                    }
                }
                serde_json::to_string_pretty(&v).ok()
            }
        }
    }

    /// The file after a refresh at `now_ms`: the new tokens, all else as it was.
    pub(crate) fn after_refresh(self, text: &str, new: &Refreshed, now_ms: i64) -> Option<String> {
        match self {
            Shape::Claude => claude_after_refresh(text, new, now_ms),
            Shape::Codex => {
                let mut v: Value = serde_json::from_str(text).ok()?;
                let o = v.as_object_mut()?;
                let tokens = o.get_mut("tokens")?.as_object_mut()?;
                tokens.insert("access_token".into(), json!(new.access));
                if let Some(refresh) = &new.refresh {
                    tokens.insert("refresh_token".into(), json!(refresh));
                }
                if let Some(id) = &new.id {
                    tokens.insert("id_token".into(), json!(id));
                }
                o.insert(
                    "last_refresh".into(),
                    json!(super::text::rfc3339_ms(now_ms)),
                );
                serde_json::to_string_pretty(&v).ok()
            }
            Shape::Gemini => {
                let mut v: Value = serde_json::from_str(text).ok()?;
                let o = v.as_object_mut()?;
                o.insert("access_token".into(), json!(new.access));
                if let Some(refresh) = &new.refresh {
                    o.insert("refresh_token".into(), json!(refresh));
                }
                if let Some(id) = &new.id {
                    o.insert("id_token".into(), json!(id));
                }
                o.insert(
                    "expiry_date".into(),
                    json!(now_ms + new.expires_in_s * 1000),
                );
                serde_json::to_string_pretty(&v).ok()
            }
        }
    }

    /// What of the file is the login (the store keeps it alone).
    fn login_keys(self) -> &'static [&'static str] {
        match self {
            Shape::Claude => &[CLAUDE_KEY],
            Shape::Codex => CODEX_LOGIN_KEYS,
            Shape::Gemini => GEMINI_LOGIN_KEYS,
        }
    }

    /// The body of a refresh of `refresh` at the login's token endpoint, as its CLI sends it.
    pub(crate) fn refresh_request(self, refresh: &str, client_id: &str) -> Vec<u8> {
        let body = match self {
            Shape::Claude => json!({
                "grant_type": "refresh_token",
                "refresh_token": refresh,
                "client_id": client_id,
            }),
            Shape::Codex => json!({
                "client_id": client_id,
                "grant_type": "refresh_token",
                "refresh_token": refresh,
                "scope": "openid profile email",
            }),
            // Google's token endpoint takes a form, with the installed app's (public) secret.
            Shape::Gemini => {
                return form(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", refresh),
                    ("client_id", client_id),
                    ("client_secret", GEMINI_CLIENT_SECRET),
                ])
                .into_bytes();
            }
        };
        body.to_string().into_bytes()
    }

    /// The login's OpenID-Connect token, where it keeps one (Codex's).
    pub(crate) fn id_token(self, text: &str) -> Option<String> {
        match self {
            Shape::Claude => None,
            Shape::Codex | Shape::Gemini => {
                let v = serde_json::from_str::<Value>(text).ok()?;
                let holder = if self == Shape::Codex {
                    v.get("tokens")?
                } else {
                    &v
                };
                holder
                    .get("id_token")?
                    .as_str()
                    .filter(|t| !t.is_empty())
                    .map(String::from)
            }
        }
    }

    /// The account a login's token is for, where requests name it beside the token (Codex's
    /// `chatgpt-account-id`): no secret, but a box may not name another.
    pub(crate) fn account_id(self, text: &str) -> Option<String> {
        match self {
            Shape::Codex => serde_json::from_str::<Value>(text)
                .ok()?
                .get("tokens")?
                .get("account_id")?
                .as_str()
                .map(String::from),
            Shape::Claude | Shape::Gemini => None,
        }
    }

    /// The login file of a sign-in's code exchange answered at `now_ms`, as the agent's CLI
    /// writes it; None when the answer holds no access and refresh token (or, for Codex, no
    /// id token, which its CLI reads the account from).
    pub(crate) fn captured(self, answer: &[u8], now_ms: i64) -> Option<String> {
        let new = refreshed(answer)?;
        let refresh = new.refresh?;
        let v: Value = serde_json::from_slice(answer).ok()?;
        let scope = v.get("scope").and_then(Value::as_str);
        let expires_at_ms = now_ms + new.expires_in_s * 1000;
        let file = match self {
            Shape::Claude => json!({CLAUDE_KEY: {
                "accessToken": new.access,
                "refreshToken": refresh,
                "expiresAt": expires_at_ms,
                "scopes": scope.map(|s| s.split_whitespace().collect::<Vec<_>>()).unwrap_or_default(),
            }}),
            Shape::Codex => {
                let id = new.id?;
                let account = jwt_claims(&id).and_then(|c| {
                    c.get("https://api.openai.com/auth")?
                        .get("chatgpt_account_id")?
                        .as_str()
                        .map(String::from)
                });
                json!({
                    "auth_mode": "chatgpt",
                    "OPENAI_API_KEY": null,
                    "tokens": {
                        "id_token": id,
                        "access_token": new.access,
                        "refresh_token": refresh,
                        "account_id": account,
                    },
                    "last_refresh": super::text::rfc3339_ms(now_ms),
                })
            }
            Shape::Gemini => {
                let mut file = json!({
                    "access_token": new.access,
                    "refresh_token": refresh,
                    "scope": scope.unwrap_or_default(),
                    "token_type": v.get("token_type").and_then(Value::as_str).unwrap_or("Bearer"),
                    "expiry_date": expires_at_ms,
                });
                if let (Some(id), Some(o)) = (new.id, file.as_object_mut()) {
                    o.insert("id_token".into(), json!(id));
                }
                file
            }
        };
        serde_json::to_string_pretty(&file).ok()
    }

    /// Whether a login made inside a box is kept by the broker for it (Claude Code's, Codex's;
    /// Gemini CLI signs in through a callback on the box's own localhost).
    pub(crate) fn captures(self) -> bool {
        matches!(self, Shape::Claude | Shape::Codex)
    }
}

/// The broker's answer to a box's refresh: its placeholders again, good for a year.
pub(crate) fn answer_to_box(shown: &Placeholders) -> Vec<u8> {
    let mut v = json!({
        "token_type": "Bearer",
        "access_token": shown.access,
        "refresh_token": shown.refresh,
        "expires_in": SHOWN_LIFETIME_S,
    });
    if let (Some(id), Some(o)) = (shown.id, v.as_object_mut()) {
        o.insert("id_token".into(), json!(id));
    }
    v.to_string().into_bytes()
}

/// What of Codex's `auth.json` is its `ChatGPT` login (an API key beside it is the node's own).
const CODEX_LOGIN_KEYS: &[&str] = &["auth_mode", "tokens", "last_refresh"];

/// What of Gemini CLI's `oauth_creds.json` is its login: all it holds.
const GEMINI_LOGIN_KEYS: &[&str] = &[
    "access_token",
    "refresh_token",
    "scope",
    "token_type",
    "id_token",
    "expiry_date",
];

/// Gemini CLI's OAuth client secret: an installed app's, public in its source, which Google's
/// token endpoint asks for with every refresh.
pub(crate) const GEMINI_CLIENT_SECRET: &str = "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";

/// Gemini CLI's Google login (`expiry_date`: milliseconds since the epoch).
fn gemini_tokens(text: &str) -> Option<Tokens> {
    let v: Value = serde_json::from_str(text).ok()?;
    let token = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(String::from)
    };
    Some(Tokens {
        access: token("access_token")?,
        refresh: token("refresh_token")?,
        // Milliseconds, written as a float by some versions.
        expires_at_ms: v
            .get("expiry_date")
            .and_then(|d| {
                d.as_i64()
                    .or_else(|| format!("{:.0}", d.as_f64()?).parse().ok())
            })
            .unwrap_or(0),
    })
}

/// Google's answer to a token-info query (`/tokeninfo`) on the login of Gemini CLI's file
/// `text`, as the broker gives it to a box asking of its placeholder (the CLI checks its
/// login so before using it): the client it is for, its scope and expiry, the id token's
/// email; no token. None when the file holds no login.
pub(crate) fn gemini_token_info(text: &str, client_id: &str, now_ms: i64) -> Option<Vec<u8>> {
    let tokens = gemini_tokens(text)?;
    let v: Value = serde_json::from_str(text).ok()?;
    let mut out = json!({
        "azp": client_id,
        "aud": client_id,
        "scope": v.get("scope").and_then(Value::as_str).unwrap_or(""),
        "exp": (tokens.expires_at_ms / 1000).to_string(),
        "expires_in": ((tokens.expires_at_ms - now_ms) / 1000).max(0).to_string(),
        "access_type": "offline",
    });
    let claims = Shape::Gemini.id_token(text).and_then(|id| jwt_claims(&id));
    if let (Some(o), Some(c)) = (out.as_object_mut(), claims) {
        for key in ["sub", "email", "email_verified"] {
            if let Some(found) = c.get(key) {
                o.insert(key.into(), found.clone());
            }
        }
    }
    serde_json::to_vec(&out).ok()
}

/// The copy a box sees of Gemini CLI's `oauth_creds.json`: the placeholders, its scope and kind,
/// an expiry a year ahead.
fn gemini_shown(text: &str, shown: &Placeholders, now_ms: i64) -> Option<String> {
    gemini_tokens(text)?;
    let v: Value = serde_json::from_str(text).ok()?;
    let mut out = Map::new();
    out.insert("access_token".into(), json!(shown.access));
    out.insert("refresh_token".into(), json!(shown.refresh));
    for key in ["scope", "token_type"] {
        if let Some(found) = v.get(key).filter(|f| f.is_string()) {
            out.insert(key.into(), found.clone());
        }
    }
    if let Some(id) = shown.id {
        out.insert("id_token".into(), json!(id));
    }
    out.insert(
        "expiry_date".into(),
        json!(now_ms + SHOWN_LIFETIME_S * 1000),
    );
    serde_json::to_string_pretty(&Value::Object(out)).ok()
}

/// How long an access token that says nothing of its expiry is taken to last after its
/// refresh.
const UNSAID_LIFETIME_MS: i64 = 60 * 60 * 1000;

/// Codex's `ChatGPT` login in its `auth.json`; its expiry the access token's (a JWT's `exp`), or
/// an hour after its last refresh where the token says none.
fn codex_tokens(text: &str) -> Option<Tokens> {
    let v: Value = serde_json::from_str(text).ok()?;
    let tokens = v.get("tokens")?;
    let token = |k: &str| {
        tokens
            .get(k)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(String::from)
    };
    let access = token("access_token")?;
    let expires_at_ms = jwt_claims(&access)
        .and_then(|c| c.get("exp")?.as_i64())
        .map(|s| s.saturating_mul(1000))
        .or_else(|| {
            let at = humantime::parse_rfc3339_weak(v.get("last_refresh")?.as_str()?).ok()?;
            let ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
            Some(i64::try_from(ms).ok()? + UNSAID_LIFETIME_MS)
        })
        .unwrap_or(0);
    Some(Tokens {
        refresh: token("refresh_token")?,
        access,
        expires_at_ms,
    })
}

/// The copy a box sees of Codex's `auth.json`: its `ChatGPT` login alone (no API key), the
/// placeholders in place of its tokens (the account id kept: it is no secret, and goes in a
/// header of its own), refreshed just now.
fn codex_shown(text: &str, shown: &Placeholders, now_ms: i64) -> Option<String> {
    codex_tokens(text)?;
    let v: Value = serde_json::from_str(text).ok()?;
    let real = v.get("tokens")?.as_object()?;
    let mut tokens = Map::new();
    if let Some(id) = shown.id {
        tokens.insert("id_token".into(), json!(id));
    }
    tokens.insert("access_token".into(), json!(shown.access));
    tokens.insert("refresh_token".into(), json!(shown.refresh));
    if let Some(account) = real.get("account_id").filter(|a| a.is_string()) {
        tokens.insert("account_id".into(), account.clone());
    }
    let mut out = Map::new();
    if let Some(mode) = v.get("auth_mode").filter(|m| m.is_string()) {
        out.insert("auth_mode".into(), mode.clone());
    }
    out.insert("OPENAI_API_KEY".into(), Value::Null);
    out.insert("tokens".into(), Value::Object(tokens));
    out.insert(
        "last_refresh".into(),
        json!(super::text::rfc3339_ms(now_ms)),
    );
    serde_json::to_string_pretty(&Value::Object(out)).ok()
}

/// The claims of a JWT (its middle part); None when it is none.
fn jwt_claims(token: &str) -> Option<Map<String, Value>> {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = token.split('.');
    let (_, claims, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(claims.trim_end_matches('=')).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// A placeholder of the JWT `real` a client reads: its header and claims (the account, the
/// plan), an expiry [`SHOWN_LIFETIME_S`] past `now_ms`, and `signature` in place of its own (no
/// server takes it). None when `real` is no JWT.
pub(crate) fn jwt_placeholder(real: &str, signature: &str, now_ms: i64) -> Option<String> {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = real.split('.').next()?;
    let mut claims = jwt_claims(real)?;
    claims.insert("exp".into(), json!(now_ms / 1000 + SHOWN_LIFETIME_S));
    let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&Value::Object(claims)).ok()?);
    Some(format!("{header}.{claims}.{signature}"))
}

/// What the signature of every JWT placeholder begins with: a file of a box's own whose token
/// carries it holds the broker's placeholders, never a login of the box's own.
const PLACEHOLDER_MARK: &str = "agboxPlaceholder";

/// `signature` (a placeholder's) marked as one: [`PLACEHOLDER_MARK`] over its start, its
/// length kept where it is longer.
pub(crate) fn marked(signature: &str) -> String {
    format!(
        "{PLACEHOLDER_MARK}{}",
        signature.get(PLACEHOLDER_MARK.len()..).unwrap_or("")
    )
}

/// Whether the login of `text` (a file of the shape) is the broker's placeholders: its access
/// token a JWT whose signature is [`marked`].
pub(crate) fn holds_placeholders(shape: Shape, text: &str) -> bool {
    shape.tokens(text).is_some_and(|t| {
        t.access.split('.').count() == 3
            && t.access
                .rsplit('.')
                .next()
                .is_some_and(|sig| sig.starts_with(PLACEHOLDER_MARK))
    })
}

/// The copy a box sees of Claude Code's credentials file: its login alone (other entries, such
/// as MCP servers' tokens, are left out), the tokens `access` and `refresh` (placeholders), and
/// an expiry [`SHOWN_LIFETIME_S`] past `now_ms`. None when it holds no login.
pub(crate) fn claude_shown(text: &str, access: &str, refresh: &str, now_ms: i64) -> Option<String> {
    claude_tokens(text)?;
    let v: Value = serde_json::from_str(text).ok()?;
    let mut login = v.get(CLAUDE_KEY)?.as_object()?.clone();
    login.insert("accessToken".into(), json!(access));
    login.insert("refreshToken".into(), json!(refresh));
    login.insert("expiresAt".into(), json!(now_ms + SHOWN_LIFETIME_S * 1000));
    let mut out = Map::new();
    out.insert(CLAUDE_KEY.into(), Value::Object(login));
    serde_json::to_string(&Value::Object(out)).ok()
}

/// Claude Code's login alone of its credentials file (`{"claudeAiOauth": ...}`): what the store
/// keeps, never the file's other entries (MCP servers' tokens are each node's own).
pub(crate) fn claude_login_only(text: &str) -> Option<String> {
    claude_tokens(text)?;
    let v: Value = serde_json::from_str(text).ok()?;
    let mut out = Map::new();
    out.insert(CLAUDE_KEY.into(), v.get(CLAUDE_KEY)?.clone());
    serde_json::to_string(&Value::Object(out)).ok()
}

/// This node's credentials file (`local`, None when it has none or one that does not parse)
/// with the login of `login` (a [`claude_login_only`]) in place of its own, all else kept.
pub(crate) fn claude_with_login(local: Option<&str>, login: &str) -> Option<String> {
    let login: Value = serde_json::from_str(login).ok()?;
    let mut v = local
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    v.as_object_mut()?
        .insert(CLAUDE_KEY.into(), login.get(CLAUDE_KEY)?.clone());
    serde_json::to_string_pretty(&v).ok()
}

/// What a token endpoint answered to a refresh: the new tokens (a refresh token is kept when
/// none is sent back) and its lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refreshed {
    pub access: String,
    pub refresh: Option<String>,
    /// An OpenID-Connect token, where the endpoint sends one (Codex's login keeps it).
    pub id: Option<String>,
    pub expires_in_s: i64,
}

/// The answer of a token endpoint (RFC 6749 5.1); None when it holds no access token.
pub(crate) fn refreshed(answer: &[u8]) -> Option<Refreshed> {
    let v: Value = serde_json::from_slice(answer).ok()?;
    let access = v.get("access_token")?.as_str()?.to_string();
    if access.is_empty() {
        return None;
    }
    Some(Refreshed {
        access,
        refresh: v
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(String::from),
        id: v
            .get("id_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(String::from),
        // Claude's access tokens last hours; an answer without a lifetime is taken for one.
        expires_in_s: v.get("expires_in").and_then(Value::as_i64).unwrap_or(3600),
    })
}

/// Claude Code's credentials file after a refresh at `now_ms`: the new tokens and expiry, all
/// else as it was.
pub(crate) fn claude_after_refresh(text: &str, new: &Refreshed, now_ms: i64) -> Option<String> {
    let mut v: Value = serde_json::from_str(text).ok()?;
    let login = v.get_mut(CLAUDE_KEY)?.as_object_mut()?;
    login.insert("accessToken".into(), json!(new.access));
    if let Some(refresh) = &new.refresh {
        login.insert("refreshToken".into(), json!(refresh));
    }
    login.insert("expiresAt".into(), json!(now_ms + new.expires_in_s * 1000));
    serde_json::to_string_pretty(&v).ok()
}

/// A form (or a URL's query) of `pairs`, each value [`form_encoded`].
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encoded(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A URL query's value: unreserved bytes as they are, a space as `+`, all else `%XX`.
pub(crate) fn form_encoded(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// What a token endpoint said when it refused a code or a refresh (RFC 6749 5.2), for the
/// operator: its `error` and `error_description`, escaped; None when it said neither.
pub(crate) fn refusal(answer: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(answer).ok()?;
    let said = |k: &str| v.get(k).and_then(Value::as_str).map(super::text::escaped);
    match (said("error"), said("error_description")) {
        (Some(e), Some(d)) => Some(format!("{e}: {d}")),
        (Some(e), None) => Some(e),
        (None, d) => d,
    }
}

/// What a box asked of a token endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Asked {
    /// A refresh of this refresh token.
    Refresh(String),
    /// Any other grant (a login's code exchange), by its name.
    Other(String),
}

/// The grant a token request's body (JSON, or a form) asks for; None when it is neither.
pub(crate) fn asked(body: &[u8]) -> Option<Asked> {
    let fields: Vec<(String, String)> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.as_str()?.to_string())))
            .collect(),
        Ok(_) => return None,
        Err(_) => std::str::from_utf8(body)
            .ok()?
            .split('&')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((form_decoded(k)?, form_decoded(v)?))
            })
            .collect(),
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let grant = field("grant_type")?;
    Some(match (grant.as_str(), field("refresh_token")) {
        ("refresh_token", Some(token)) => Asked::Refresh(token),
        _ => Asked::Other(grant),
    })
}

/// A form field's value with its escapes (`+`, `%XX`) undone; None when it is no UTF-8.
fn form_decoded(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// A token endpoint's answer as the box sees it: its tokens the box's placeholders `shown`, good
/// for a year (an OpenID-Connect token the box has no placeholder of left out); all else (the
/// account it names) as it was.
pub(crate) fn answer_with_placeholders(answer: &[u8], shown: &Placeholders) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(answer).ok()?;
    let o = v.as_object_mut()?;
    o.insert("access_token".into(), json!(shown.access));
    o.insert("refresh_token".into(), json!(shown.refresh));
    o.insert("expires_in".into(), json!(SHOWN_LIFETIME_S));
    match shown.id {
        Some(id) => o.insert("id_token".into(), json!(id)),
        None => o.remove("id_token"),
    };
    serde_json::to_vec(&v).ok()
}

/// The placeholders a box is answered with for the login `kept` (a [`Shape::captured`]) it made
/// through the broker at `now_ms`: those it was given before (`blank`), but for a JWT, which
/// Codex's CLI reads the claims of: shown as one (its claims, a far expiry), signed with the
/// blank one.
pub(crate) fn signed_in_placeholders(
    shape: Shape,
    kept: &str,
    blank: &Placeholders,
    now_ms: i64,
) -> (String, String, Option<String>) {
    let as_jwt = |real: Option<String>, blank: &str| {
        real.and_then(|r| jwt_placeholder(&r, blank, now_ms))
            .unwrap_or_else(|| blank.to_string())
    };
    let access = as_jwt(shape.tokens(kept).map(|t| t.access), blank.access);
    let id = blank.id.map(|b| as_jwt(shape.id_token(kept), b));
    (access, blank.refresh.to_string(), id)
}

/// How long a node may hold an account's lease to redeem its refresh token: past it, another
/// node takes the lease over (a node that died holding it blocks the others no longer).
pub(crate) const LEASE_MS: i64 = 45_000;

/// An OAuth login as the store keeps it for every node (`accounts/<row>.json`): the login file
/// sealed with a key only the nodes hold, and the lease of the node redeeming its refresh token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct StoredLogin {
    pub lease: Option<AccountLease>,
    /// The login file as the last refresh left it, sealed (`plan::restic_key::seal_with`).
    pub sealed: Option<Sealed>,
    /// When its access token expires (milliseconds since the epoch).
    pub expires_at_ms: i64,
    pub refreshed_by: Option<String>,
    pub refreshed_at_ms: Option<i64>,
}

/// Who redeems an account's refresh token, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AccountLease {
    pub node: String,
    pub until_ms: i64,
}

/// Sealed bytes, the salt their key was derived with (base64), and scrypt's cost (2^`log_n`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sealed {
    pub salt: String,
    pub data: String,
    pub log_n: u8,
}

/// What a node whose login (`here`) wants refreshing does next, given the store's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Its own is fresh (another process of the node refreshed it).
    Done,
    /// The store's is newer and fresh: another node refreshed it; take that.
    Take,
    /// Another node is redeeming the refresh token: wait for it, or for its lease to end.
    Wait,
    /// Take the lease, and redeem the refresh token here.
    Lease,
}

/// [`Next`] for `node` at `now_ms`, having watched the store's object stay as it is for
/// `watched_ms` (this node's own monotonic clock: a lease lives [`LEASE_MS`] from when this node
/// first saw it, whatever the holder's clock says).
pub(crate) fn next(
    here: &Tokens,
    stored: Option<&StoredLogin>,
    node: &str,
    now_ms: i64,
    watched_ms: i64,
) -> Next {
    if !here.stale(now_ms) {
        return Next::Done;
    }
    let Some(stored) = stored else {
        return Next::Lease;
    };
    let fresh = |expires: i64| expires - now_ms >= REFRESH_MARGIN_MS;
    if stored.sealed.is_some()
        && stored.expires_at_ms > here.expires_at_ms
        && fresh(stored.expires_at_ms)
    {
        return Next::Take;
    }
    match &stored.lease {
        Some(lease) if lease.node != node && watched_ms < LEASE_MS => Next::Wait,
        _ => Next::Lease,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const FILE: &str = r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-real","refreshToken":"sk-ant-ort01-real","expiresAt":1000,"scopes":["user:inference"],"subscriptionType":"max"},"mcpOAuth":{"srv":{"accessToken":"mcp-secret"}}}"#;

    #[test]
    fn a_refusal_is_what_the_endpoint_said_escaped() {
        assert_eq!(
            refusal(br#"{"error":"invalid_grant","error_description":"code\u001b[2J used"}"#),
            Some("invalid_grant: code\\x1b[2J used".into())
        );
        assert_eq!(
            refusal(br#"{"error":"invalid_request"}"#),
            Some("invalid_request".into())
        );
        assert_eq!(refusal(b"<html>"), None);
    }

    /// A JWT of `claims` (an unsigned test one).
    fn jwt(claims: &Value) -> String {
        use base64::Engine;
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "eyJhbGciOiJSUzI1NiJ9.{}.c2lnbmF0dXJl",
            URL_SAFE_NO_PAD.encode(claims.to_string())
        )
    }

    #[test]
    fn codexs_chatgpt_login_is_read_shown_as_placeholders_refreshed_and_kept_alone() {
        let auth = json!({"https://api.openai.com/auth": {"chatgpt_account_id": "acct-1", "chatgpt_plan_type": "pro"}});
        let access = jwt(
            &json!({"exp": 2_000_000, "https://api.openai.com/auth": auth["https://api.openai.com/auth"]}),
        );
        let id = jwt(&json!({"email": "a@b", "exp": 1_000}));
        let file = json!({
            "auth_mode": "chatgpt",
            "OPENAI_API_KEY": "sk-proj-exchanged",
            "tokens": {"id_token": id, "access_token": access, "refresh_token": "rt_real", "account_id": "acct-1"},
            "last_refresh": "2026-12-01T00:00:00Z",
            "other": "kept",
        })
        .to_string();
        assert_eq!(
            Shape::Codex.tokens(&file),
            Some(Tokens {
                access: access.clone(),
                refresh: "rt_real".into(),
                expires_at_ms: 2_000_000_000,
            })
        );
        // A token that says no expiry: an hour after its last refresh.
        let opaque = file.replace(&access, "opaque");
        assert_eq!(
            Shape::Codex.tokens(&opaque).unwrap().expires_at_ms,
            1_796_083_200_000 + 3_600_000
        );
        assert_eq!(Shape::Codex.tokens(r#"{"OPENAI_API_KEY":"sk-x"}"#), None);
        assert_eq!(Shape::Codex.account_id(&file), Some("acct-1".into()));
        assert_eq!(Shape::Claude.account_id(&file), None);

        // The box's copy: placeholders, the account id, no API key, refreshed now.
        let now_ms = 1_796_400_000_000;
        let access_shown = jwt_placeholder(&access, "SIG", now_ms).unwrap();
        assert!(
            access_shown.starts_with("eyJhbGciOiJSUzI1NiJ9.")
                && access_shown.rsplit('.').next() == Some("SIG")
        );
        assert_eq!(
            jwt_claims(&access_shown).unwrap(),
            json!({"exp": 1_796_400_000 + SHOWN_LIFETIME_S, "https://api.openai.com/auth": {"chatgpt_account_id": "acct-1", "chatgpt_plan_type": "pro"}})
                .as_object()
                .unwrap()
                .clone()
        );
        assert_eq!(jwt_placeholder("rt_real", "SIG", now_ms), None);
        let shown = Placeholders {
            access: "A.B.C",
            refresh: "rt_shown",
            id: Some("I.D.S"),
        };
        assert_eq!(
            serde_json::from_str::<Value>(&Shape::Codex.shown(&file, &shown, now_ms).unwrap())
                .unwrap(),
            json!({
                "auth_mode": "chatgpt",
                "OPENAI_API_KEY": null,
                "tokens": {"id_token": "I.D.S", "access_token": "A.B.C", "refresh_token": "rt_shown", "account_id": "acct-1"},
                "last_refresh": "2026-12-04T16:00:00Z",
            })
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&answer_to_box(&shown)).unwrap(),
            json!({"token_type": "Bearer", "access_token": "A.B.C", "refresh_token": "rt_shown", "id_token": "I.D.S", "expires_in": SHOWN_LIFETIME_S})
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&Shape::Codex.refresh_request("rt_real", "app_x"))
                .unwrap(),
            json!({"client_id": "app_x", "grant_type": "refresh_token", "refresh_token": "rt_real", "scope": "openid profile email"})
        );

        // A refresh: the new tokens and the time, all else kept.
        let new =
            refreshed(br#"{"id_token":"i2","access_token":"a2","refresh_token":"rt_2"}"#).unwrap();
        let after: Value =
            serde_json::from_str(&Shape::Codex.after_refresh(&file, &new, now_ms).unwrap())
                .unwrap();
        assert_eq!(
            after,
            json!({
                "auth_mode": "chatgpt",
                "OPENAI_API_KEY": "sk-proj-exchanged",
                "tokens": {"id_token": "i2", "access_token": "a2", "refresh_token": "rt_2", "account_id": "acct-1"},
                "last_refresh": "2026-12-04T16:00:00Z",
                "other": "kept",
            })
        );
        // The store keeps the login alone; a node keeps its own key and entries.
        let alone = Shape::Codex.login_only(&after.to_string()).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&alone).unwrap(),
            json!({"auth_mode": "chatgpt", "tokens": after["tokens"], "last_refresh": "2026-12-04T16:00:00Z"})
        );
        let local = r#"{"OPENAI_API_KEY":"sk-proj-mine","tokens":{"access_token":"old","refresh_token":"rt_old"}}"#;
        assert_eq!(
            serde_json::from_str::<Value>(&Shape::Codex.with_login(Some(local), &alone).unwrap())
                .unwrap(),
            json!({"OPENAI_API_KEY": "sk-proj-mine", "tokens": after["tokens"], "auth_mode": "chatgpt", "last_refresh": "2026-12-04T16:00:00Z"})
        );
    }

    #[test]
    fn geminis_google_login_is_read_shown_as_placeholders_and_refreshed_by_a_form() {
        let id = jwt(&json!({"email": "a@b", "exp": 1_000}));
        let file = json!({
            "access_token": "ya29.real",
            "refresh_token": "1//real",
            "scope": "https://www.googleapis.com/auth/cloud-platform",
            "token_type": "Bearer",
            "id_token": id,
            "expiry_date": 1_700_000_000_000_i64,
        })
        .to_string();
        assert_eq!(
            Shape::Gemini.tokens(&file),
            Some(Tokens {
                access: "ya29.real".into(),
                refresh: "1//real".into(),
                expires_at_ms: 1_700_000_000_000,
            })
        );
        assert_eq!(Shape::Gemini.id_token(&file), Some(id.clone()));
        let shown = Placeholders {
            access: "ya29.shown",
            refresh: "1//shown",
            id: Some("I.D.S"),
        };
        assert_eq!(
            serde_json::from_str::<Value>(&Shape::Gemini.shown(&file, &shown, 1_000).unwrap())
                .unwrap(),
            json!({
                "access_token": "ya29.shown",
                "refresh_token": "1//shown",
                "scope": "https://www.googleapis.com/auth/cloud-platform",
                "token_type": "Bearer",
                "id_token": "I.D.S",
                "expiry_date": 1_000 + SHOWN_LIFETIME_S * 1000,
            })
        );
        assert_eq!(
            String::from_utf8(Shape::Gemini.refresh_request("1//real", "cid")).unwrap(),
            "grant_type=refresh_token&refresh_token=1%2F%2Freal&client_id=cid&client_secret=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"
        );
        // Google keeps the refresh token: only the access token, its expiry and the id change.
        let new =
            refreshed(br#"{"access_token":"ya29.new","expires_in":3599,"id_token":"i2"}"#).unwrap();
        let after: Value =
            serde_json::from_str(&Shape::Gemini.after_refresh(&file, &new, 5_000).unwrap())
                .unwrap();
        assert_eq!(
            after,
            json!({
                "access_token": "ya29.new",
                "refresh_token": "1//real",
                "scope": "https://www.googleapis.com/auth/cloud-platform",
                "token_type": "Bearer",
                "id_token": "i2",
                "expiry_date": 5_000 + 3_599_000,
            })
        );
        assert_eq!(
            serde_json::from_str::<Value>(&Shape::Gemini.login_only(&after.to_string()).unwrap())
                .unwrap(),
            after
        );
        // Token info, as Google answers it of the login: no token in it.
        let id = jwt(&json!({"email": "a@b", "email_verified": true, "sub": "7"}));
        let file = json!({"access_token": "ya29.real", "refresh_token": "1//real", "scope": "s1 s2", "id_token": id, "expiry_date": 9_000_000.0})
            .to_string();
        assert_eq!(
            serde_json::from_slice::<Value>(&gemini_token_info(&file, "cid", 1_000).unwrap())
                .unwrap(),
            json!({"azp": "cid", "aud": "cid", "scope": "s1 s2", "exp": "9000", "expires_in": "8999", "access_type": "offline", "sub": "7", "email": "a@b", "email_verified": true})
        );
    }

    #[test]
    fn the_login_is_read_and_a_box_sees_placeholders_that_do_not_expire_soon() {
        assert_eq!(
            claude_tokens(FILE),
            Some(Tokens {
                access: "sk-ant-oat01-real".into(),
                refresh: "sk-ant-ort01-real".into(),
                expires_at_ms: 1000,
            })
        );
        assert_eq!(claude_tokens(r#"{"mcpOAuth":{}}"#), None);
        assert_eq!(claude_tokens("not json"), None);
        let shown: Value =
            serde_json::from_str(&claude_shown(FILE, "A", "R", 5000).unwrap()).unwrap();
        assert_eq!(
            shown,
            json!({"claudeAiOauth": {
                "accessToken": "A",
                "refreshToken": "R",
                "expiresAt": 5000 + SHOWN_LIFETIME_S * 1000,
                "scopes": ["user:inference"],
                "subscriptionType": "max",
            }})
        );
        assert_eq!(claude_shown(r#"{"x":1}"#, "A", "R", 0), None);
    }

    #[test]
    fn the_store_keeps_the_login_alone_and_a_node_keeps_its_other_entries() {
        let only = claude_login_only(FILE).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&only).unwrap(),
            json!({"claudeAiOauth": {"accessToken": "sk-ant-oat01-real", "refreshToken": "sk-ant-ort01-real", "expiresAt": 1000, "scopes": ["user:inference"], "subscriptionType": "max"}})
        );
        let local = r#"{"claudeAiOauth":{"accessToken":"old","refreshToken":"old"},"mcpOAuth":{"mine":{}}}"#;
        let merged: Value =
            serde_json::from_str(&claude_with_login(Some(local), &only).unwrap()).unwrap();
        assert_eq!(merged["mcpOAuth"], json!({"mine": {}}));
        assert_eq!(merged["claudeAiOauth"]["accessToken"], "sk-ant-oat01-real");
        // None here, or one that does not parse: the login alone.
        for none in [None, Some("not json")] {
            let made: Value =
                serde_json::from_str(&claude_with_login(none, &only).unwrap()).unwrap();
            assert_eq!(made, serde_json::from_str::<Value>(&only).unwrap());
        }
        assert_eq!(claude_login_only(r#"{"mcpOAuth":{}}"#), None);
    }

    /// Placeholders made before any token was known.
    const BLANK: Placeholders = Placeholders {
        access: "A",
        refresh: "R",
        id: None,
    };

    #[test]
    fn a_login_made_through_the_broker_is_kept_and_the_box_answered_with_placeholders() {
        let answer = br#"{"token_type":"Bearer","access_token":"sk-ant-oat01-new","refresh_token":"sk-ant-ort01-new","expires_in":28800,"scope":"user:inference user:profile","account":{"uuid":"u","email_address":"a@b"}}"#;
        let kept: Value =
            serde_json::from_str(&Shape::Claude.captured(answer, 1000).unwrap()).unwrap();
        assert_eq!(
            kept,
            json!({"claudeAiOauth": {"accessToken": "sk-ant-oat01-new", "refreshToken": "sk-ant-ort01-new", "expiresAt": 1000 + 28_800_000, "scopes": ["user:inference", "user:profile"]}})
        );
        let shown: Value =
            serde_json::from_slice(&answer_with_placeholders(answer, &BLANK).unwrap()).unwrap();
        assert_eq!(
            shown,
            json!({"token_type": "Bearer", "access_token": "A", "refresh_token": "R", "expires_in": SHOWN_LIFETIME_S, "scope": "user:inference user:profile", "account": {"uuid": "u", "email_address": "a@b"}})
        );
        // No refresh token: nothing to keep.
        assert_eq!(Shape::Claude.captured(br#"{"access_token":"a"}"#, 0), None);
    }

    #[test]
    fn a_file_whose_jwt_is_signed_with_a_marked_placeholder_is_the_brokers_copy() {
        let file_of = |access: &str| {
            json!({"tokens": {"access_token": access, "refresh_token": "rt_R"}}).to_string()
        };
        let signed = marked("sigA-of-a-length-longer-than-the-mark");
        assert_eq!(signed, "agboxPlaceholder-longer-than-the-mark");
        assert_eq!(marked("short"), "agboxPlaceholder");
        let real = jwt(&json!({"exp": 5}));
        let id = jwt(&json!({"email": "e"}));
        let answer = json!({"id_token": id, "access_token": real, "refresh_token": "rt_1"});
        let kept = Shape::Codex
            .captured(answer.to_string().as_bytes(), 1_000)
            .unwrap();
        let blank = Placeholders {
            access: &signed,
            refresh: "rt_R",
            id: None,
        };
        let (shown, ..) = signed_in_placeholders(Shape::Codex, &kept, &blank, 2_000);
        assert!(holds_placeholders(Shape::Codex, &file_of(&shown)));
        assert!(!holds_placeholders(Shape::Codex, &file_of(&real)));
        // The bare mark is no JWT: a token of that form is the box's own.
        assert!(!holds_placeholders(Shape::Codex, &file_of(&signed)));
    }

    #[test]
    fn a_codex_or_gemini_login_made_through_the_broker_is_kept_as_its_cli_keeps_it() {
        // Codex's file as its CLI writes a sign-in (the account from the id token's claims);
        // none without an id token.
        let id = jwt(&json!({"https://api.openai.com/auth": {"chatgpt_account_id": "acct-1"}}));
        let answer = json!({"id_token": id, "access_token": "at", "refresh_token": "rt_1"});
        let kept: Value = serde_json::from_str(
            &Shape::Codex
                .captured(answer.to_string().as_bytes(), 1_000)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            kept,
            json!({"auth_mode": "chatgpt", "OPENAI_API_KEY": null, "last_refresh": "1970-01-01T00:00:01Z",
                   "tokens": {"id_token": id, "access_token": "at", "refresh_token": "rt_1", "account_id": "acct-1"}})
        );
        assert_eq!(
            Shape::Codex.captured(br#"{"access_token":"at","refresh_token":"rt_1"}"#, 0),
            None
        );
        // The box is answered with JWTs of the login's claims (a far expiry), signed with the
        // blank placeholders it was given; its refresh placeholder as it was.
        let access_jwt = jwt(&json!({"exp": 5, "sub": "u"}));
        let answer = json!({"id_token": id, "access_token": access_jwt, "refresh_token": "rt_1"});
        let kept = Shape::Codex
            .captured(answer.to_string().as_bytes(), 1_000)
            .unwrap();
        let blank = Placeholders {
            access: "sigA",
            refresh: "rt_R",
            id: Some("sigI"),
        };
        let (access, refresh, id) = signed_in_placeholders(Shape::Codex, &kept, &blank, 2_000);
        let id = id.unwrap();
        assert!(
            access.ends_with(".sigA") && id.ends_with(".sigI") && refresh == "rt_R",
            "{access} {id} {refresh}"
        );
        assert_eq!(
            jwt_claims(&access).unwrap(),
            json!({"exp": 2 + SHOWN_LIFETIME_S, "sub": "u"})
                .as_object()
                .unwrap()
                .clone()
        );
        assert_eq!(
            jwt_claims(&id).unwrap(),
            json!({"https://api.openai.com/auth": {"chatgpt_account_id": "acct-1"}, "exp": 2 + SHOWN_LIFETIME_S})
                .as_object()
                .unwrap()
                .clone()
        );
        // An access token that is no JWT: the blank one.
        let plain = json!({"id_token": id, "access_token": "at", "refresh_token": "rt_1"});
        let kept = Shape::Codex
            .captured(plain.to_string().as_bytes(), 1_000)
            .unwrap();
        assert_eq!(
            signed_in_placeholders(Shape::Codex, &kept, &blank, 2_000).0,
            "sigA"
        );
        let shown: Value = serde_json::from_slice(
            &answer_with_placeholders(
                answer.to_string().as_bytes(),
                &Placeholders {
                    access: &access,
                    refresh: &refresh,
                    id: Some(&id),
                },
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            shown,
            json!({"id_token": id, "access_token": access, "refresh_token": "rt_R", "expires_in": SHOWN_LIFETIME_S})
        );
        // Claude Code's: the blank ones; an id token the box has no placeholder of is left out.
        assert_eq!(
            signed_in_placeholders(Shape::Claude, FILE, &BLANK, 0),
            ("A".into(), "R".into(), None)
        );
        let shown: Value = serde_json::from_slice(
            &answer_with_placeholders(answer.to_string().as_bytes(), &BLANK).unwrap(),
        )
        .unwrap();
        assert_eq!(
            shown,
            json!({"access_token": "A", "refresh_token": "R", "expires_in": SHOWN_LIFETIME_S})
        );
        // Gemini CLI's, as google-auth-library keeps credentials.
        let answer = br#"{"access_token":"ya29.a","expires_in":3599,"refresh_token":"1//r","scope":"s1 s2","token_type":"Bearer","id_token":"e.y.j"}"#;
        let kept: Value =
            serde_json::from_str(&Shape::Gemini.captured(answer, 1_000).unwrap()).unwrap();
        assert_eq!(
            kept,
            json!({"access_token": "ya29.a", "refresh_token": "1//r", "scope": "s1 s2", "token_type": "Bearer",
                   "id_token": "e.y.j", "expiry_date": 1_000 + 3_599_000})
        );
        assert_eq!(answer_with_placeholders(b"[]", &BLANK), None);
    }

    #[test]
    fn a_token_is_stale_within_the_margin_of_its_expiry() {
        let t = |at| Tokens {
            access: "a".into(),
            refresh: "r".into(),
            expires_at_ms: at,
        };
        assert!(t(1000).stale(1000));
        assert!(t(1000 + REFRESH_MARGIN_MS - 1).stale(1000));
        assert!(!t(1000 + REFRESH_MARGIN_MS).stale(1000));
    }

    #[test]
    fn a_refresh_writes_the_new_tokens_and_keeps_the_rest() {
        let new = refreshed(br#"{"access_token":"sk-ant-oat01-new","refresh_token":"sk-ant-ort01-new","expires_in":28800,"token_type":"Bearer"}"#).unwrap();
        assert_eq!(
            new,
            Refreshed {
                access: "sk-ant-oat01-new".into(),
                refresh: Some("sk-ant-ort01-new".into()),
                id: None,
                expires_in_s: 28800,
            }
        );
        let after: Value =
            serde_json::from_str(&claude_after_refresh(FILE, &new, 7000).unwrap()).unwrap();
        assert_eq!(
            after,
            json!({
                "claudeAiOauth": {
                    "accessToken": "sk-ant-oat01-new",
                    "refreshToken": "sk-ant-ort01-new",
                    "expiresAt": 7000 + 28_800_000,
                    "scopes": ["user:inference"],
                    "subscriptionType": "max",
                },
                "mcpOAuth": {"srv": {"accessToken": "mcp-secret"}},
            })
        );
        // No refresh token back: the old one stays.
        let kept = refreshed(br#"{"access_token":"n"}"#).unwrap();
        assert_eq!((kept.refresh.clone(), kept.expires_in_s), (None, 3600));
        let after: Value =
            serde_json::from_str(&claude_after_refresh(FILE, &kept, 0).unwrap()).unwrap();
        assert_eq!(after["claudeAiOauth"]["refreshToken"], "sk-ant-ort01-real");
        assert_eq!(refreshed(br#"{"error":"invalid_grant"}"#), None);
        assert_eq!(refreshed(br#"{"access_token":""}"#), None);
    }

    #[test]
    fn what_a_box_asks_of_a_token_endpoint_is_read_from_json_or_a_form() {
        assert_eq!(
            asked(br#"{"grant_type":"refresh_token","refresh_token":"R","client_id":"c"}"#),
            Some(Asked::Refresh("R".into()))
        );
        assert_eq!(
            asked(b"grant_type=refresh_token&refresh_token=R%2Bx+y&client_id=c"),
            Some(Asked::Refresh("R+x y".into()))
        );
        assert_eq!(
            asked(br#"{"grant_type":"authorization_code","code":"c"}"#),
            Some(Asked::Other("authorization_code".into()))
        );
        assert_eq!(asked(b"[1]"), None);
        assert_eq!(asked(b"refresh_token=R"), None);
        assert_eq!(asked(b"grant_type=%zz"), None);
        assert_eq!(
            serde_json::from_slice::<Value>(&Shape::Claude.refresh_request("R", "c")).unwrap(),
            json!({"grant_type": "refresh_token", "refresh_token": "R", "client_id": "c"})
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&answer_to_box(&Placeholders {
                access: "A",
                refresh: "R",
                id: None
            }))
            .unwrap(),
            json!({"token_type": "Bearer", "access_token": "A", "refresh_token": "R", "expires_in": SHOWN_LIFETIME_S})
        );
    }

    #[test]
    fn a_node_takes_a_newer_login_waits_for_a_live_lease_and_takes_over_a_dead_one() {
        let now = 1_000_000_000;
        let here = |at| Tokens {
            access: "a".into(),
            refresh: "r".into(),
            expires_at_ms: at,
        };
        let sealed = Some(Sealed {
            salt: "s".into(),
            data: "d".into(),
            log_n: 16,
        });
        let stored = |expires, lease: Option<(&str, i64)>| StoredLogin {
            lease: lease.map(|(node, until_ms)| AccountLease {
                node: node.into(),
                until_ms,
            }),
            sealed: sealed.clone(),
            expires_at_ms: expires,
            refreshed_by: Some("nodeB".into()),
            refreshed_at_ms: Some(now),
        };
        let hour = 3_600_000;
        let stale = here(now - 1);
        assert_eq!(next(&here(now + hour), None, "nodeA", now, 0), Next::Done);
        assert_eq!(next(&stale, None, "nodeA", now, 0), Next::Lease);
        assert_eq!(
            next(&stale, Some(&stored(now + hour, None)), "nodeA", now, 0),
            Next::Take
        );
        // The store's is no fresher: this node redeems, unless another holds a lease this node
        // has seen for less than a lease's length (its own clock; the holder's may differ).
        let held = stored(now - 1, Some(("nodeB", now - hour)));
        assert_eq!(
            next(&stale, Some(&held), "nodeA", now, LEASE_MS - 1),
            Next::Wait
        );
        assert_eq!(
            next(&stale, Some(&held), "nodeA", now, LEASE_MS),
            Next::Lease
        );
        let own = stored(now - 1, Some(("nodeA", now + LEASE_MS)));
        assert_eq!(next(&stale, Some(&own), "nodeA", now, 0), Next::Lease);
        // Newer but due itself, or nothing sealed: not taken.
        let due = stored(now + REFRESH_MARGIN_MS - 1, None);
        assert_eq!(
            next(&here(now - 5), Some(&due), "nodeA", now, 0),
            Next::Lease
        );
        let empty = StoredLogin {
            sealed: None,
            ..stored(now + hour, None)
        };
        assert_eq!(next(&stale, Some(&empty), "nodeA", now, 0), Next::Lease);
    }
}
