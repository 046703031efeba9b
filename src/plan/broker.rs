//! The credential broker's rules and rewrites (docs/design.md "Credential broker"): which of
//! the node's logins a box's proxy stands in for, the placeholders a box sees in place of their
//! tokens, and how a request gets the real token back, on that login's own hosts only.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::oauth::{Placeholders, Shape};
use super::sign_in::{DeviceCode, SignInPage, Way};

/// A login whose token the broker keeps out of boxes, and the hosts that token is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rule {
    pub login: String,
    pub hosts: Vec<String>,
}

/// A brokered login: the part of HOME the box sees a copy of (with placeholders), and the
/// hosts (HTTPS, port [`TLS_PORT`]) its token is for.
pub(crate) struct LoginRule {
    /// The login (`creds=`) this row is of; a login may have more than one.
    pub login: &'static str,
    /// The row's own name: what names its copy in the box's run dir, and `broker_held`.
    pub name: &'static str,
    pub copied: &'static str,
    pub hosts: &'static [&'static str],
    /// Headers besides `Authorization` whose whole value is the login's key (Anthropic's
    /// `x-api-key`, Google's `x-goog-api-key`).
    pub key_headers: &'static [&'static str],
    /// The paths (prefixes) a request that gets the token may have; empty: any. A model API's
    /// key goes into model requests only, never into one that could mint another key.
    pub paths: &'static [&'static str],
    /// An OAuth login: where its tokens are refreshed, which the broker does itself.
    pub oauth: Option<OauthEndpoint>,
}

impl LoginRule {
    /// Whether the box's copy is a file of its own agent home rather than a bind over it:
    /// Codex saves its login by renaming a new file over `auth.json`, which a bind's mount
    /// point refuses (the agent home's login files are never in a snapshot).
    pub(crate) fn copy_in_home(&self) -> bool {
        self.oauth.is_some_and(|o| o.shape == Shape::Codex)
    }

    /// Whether a login a box makes of this row is kept by the broker for it
    /// (`Shape::captures`).
    pub(crate) fn captures(&self) -> bool {
        self.oauth.is_some_and(|o| o.shape.captures())
    }
}

/// An OAuth login's token endpoint (HTTPS, port [`TLS_PORT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OauthEndpoint {
    pub host: &'static str,
    pub path: &'static str,
    pub client_id: &'static str,
    /// The shape of the login's file.
    pub shape: Shape,
    /// How `ag-box login` signs a person in; None: it does not.
    pub sign_in: Option<Way>,
}

/// The brokered logins: data, one row per file. Claude Code's are its API key
/// (`ANTHROPIC_API_KEY`/`ANTHROPIC_AUTH_TOKEN` in the node's `~/.claude/settings.json`) and its
/// OAuth login (`~/.claude/.credentials.json`, refreshed by the broker); Codex's is its API key
/// (`OPENAI_API_KEY` in `~/.codex/auth.json`) and its `ChatGPT` login (the `tokens` of the same
/// file, which then holds no key of the broker's: one row or the other stands in for it);
/// Grok's is its API key (`apiKey` of `~/.grok/user-settings.json`, for xAI's API).
pub(crate) const RULES: &[LoginRule] = &[
    LoginRule {
        login: "gh",
        name: "gh",
        copied: ".config/gh",
        hosts: &["github.com", "api.github.com"],
        key_headers: &[],
        paths: &[],
        oauth: None,
    },
    LoginRule {
        login: "claude",
        name: "claude",
        copied: ".claude/settings.json",
        hosts: &["api.anthropic.com"],
        key_headers: &["x-api-key"],
        paths: CLAUDE_PATHS,
        oauth: None,
    },
    LoginRule {
        login: "claude",
        name: "claude-oauth",
        copied: ".claude/.credentials.json",
        hosts: &["api.anthropic.com"],
        key_headers: &[],
        paths: CLAUDE_PATHS,
        oauth: Some(OauthEndpoint {
            host: "platform.claude.com",
            path: "/v1/oauth/token",
            client_id: "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
            shape: Shape::Claude,
            sign_in: Some(Way::Paste(SignInPage {
                authorize_url: "https://claude.com/cai/oauth/authorize",
                redirect_uri: "https://platform.claude.com/oauth/code/callback",
                scopes: "org:create_api_key user:profile user:inference user:sessions:claude_code user:mcp_servers user:file_upload",
                extra: &[("code", "true")],
                shows_state: true,
            })),
        }),
    },
    LoginRule {
        login: "codex",
        name: "codex",
        copied: ".codex/auth.json",
        hosts: &["api.openai.com"],
        key_headers: &[],
        paths: &[
            "/v1/responses",
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/models",
            "/v1/embeddings",
        ],
        oauth: None,
    },
    LoginRule {
        login: "codex",
        name: "codex-oauth",
        copied: ".codex/auth.json",
        hosts: &["chatgpt.com"],
        key_headers: &[],
        paths: &[
            "/backend-api/codex/responses",
            "/backend-api/codex/models",
            "/backend-api/wham/accounts/check",
            "/backend-api/wham/usage",
        ],
        oauth: Some(OauthEndpoint {
            host: "auth.openai.com",
            path: "/oauth/token",
            client_id: "app_EMoamEEZ73f0CkXaXp7hrann",
            shape: Shape::Codex,
            sign_in: Some(Way::Device(DeviceCode {
                user_code_path: "/api/accounts/deviceauth/usercode",
                poll_path: "/api/accounts/deviceauth/token",
                verify_url: "https://auth.openai.com/codex/device",
                redirect_uri: "https://auth.openai.com/deviceauth/callback",
            })),
        }),
    },
    LoginRule {
        login: "gemini",
        name: "gemini-oauth",
        copied: ".gemini/oauth_creds.json",
        hosts: &["cloudcode-pa.googleapis.com"],
        key_headers: &[],
        paths: &[
            "/v1internal:loadCodeAssist",
            "/v1internal:onboardUser",
            "/v1internal:generateContent",
            "/v1internal:streamGenerateContent",
            "/v1internal:countTokens",
            "/v1internal:retrieveUserQuota",
        ],
        oauth: Some(OauthEndpoint {
            host: "oauth2.googleapis.com",
            path: "/token",
            client_id: "681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com",
            shape: Shape::Gemini,
            sign_in: Some(Way::Paste(SignInPage {
                authorize_url: "https://accounts.google.com/o/oauth2/v2/auth",
                redirect_uri: "https://codeassist.google.com/authcode",
                scopes: "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/userinfo.email https://www.googleapis.com/auth/userinfo.profile",
                extra: &[("access_type", "offline")],
                shows_state: false,
            })),
        }),
    },
    LoginRule {
        login: "grok",
        name: "grok",
        copied: ".grok/user-settings.json",
        hosts: &["api.x.ai"],
        key_headers: &[],
        paths: &[
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/completions",
            "/v1/models",
            "/v1/embeddings",
        ],
        oauth: None,
    },
    LoginRule {
        login: "opencode",
        name: "opencode",
        copied: ".local/share/opencode/auth.json",
        hosts: &[
            "api.anthropic.com",
            "api.openai.com",
            "generativelanguage.googleapis.com",
            "api.x.ai",
            "openrouter.ai",
            "api.groq.com",
            "api.deepseek.com",
            "api.mistral.ai",
        ],
        key_headers: &[],
        paths: &[
            "/v1/messages",
            "/v1/models",
            "/v1/responses",
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/embeddings",
            "/v1beta/models",
            "/api/v1/chat/completions",
            "/api/v1/completions",
            "/api/v1/models",
            "/openai/v1/chat/completions",
            "/openai/v1/models",
            "/chat/completions",
            "/models",
        ],
        oauth: None,
    },
];

/// `OpenCode`'s providers whose API keys (`{"type": "api", "key": ...}` in its `auth.json`) the
/// broker stands in for, each key for its provider's API alone; any other entry (another
/// provider's key, an OAuth login `OpenCode` refreshes itself) is a placeholder that goes
/// nowhere.
const OPENCODE_PROVIDERS: &[OpencodeProvider] = &[
    OpencodeProvider {
        id: "anthropic",
        host: "api.anthropic.com",
        key_header: Some("x-api-key"),
    },
    OpencodeProvider {
        id: "openai",
        host: "api.openai.com",
        key_header: None,
    },
    OpencodeProvider {
        id: "google",
        host: "generativelanguage.googleapis.com",
        key_header: Some("x-goog-api-key"),
    },
    OpencodeProvider {
        id: "xai",
        host: "api.x.ai",
        key_header: None,
    },
    OpencodeProvider {
        id: "openrouter",
        host: "openrouter.ai",
        key_header: None,
    },
    OpencodeProvider {
        id: "groq",
        host: "api.groq.com",
        key_header: None,
    },
    OpencodeProvider {
        id: "deepseek",
        host: "api.deepseek.com",
        key_header: None,
    },
    OpencodeProvider {
        id: "mistral",
        host: "api.mistral.ai",
        key_header: None,
    },
];

/// The ids of the `OpenCode` providers the broker holds API keys of.
pub(crate) fn opencode_providers() -> Vec<&'static str> {
    OPENCODE_PROVIDERS.iter().map(|p| p.id).collect()
}

/// An `OpenCode` provider the broker holds the API key of: its id in `auth.json`, its API's
/// host, and the header besides `Authorization` its API reads the key from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpencodeProvider {
    pub id: &'static str,
    pub host: &'static str,
    pub key_header: Option<&'static str>,
}

/// The requests Claude's credentials go into: model requests only (both rows of the login
/// name the same, so a placeholder of either is held to them).
const CLAUDE_PATHS: &[&str] = &["/v1/messages", "/v1/models"];

/// The variables of Claude Code's settings (`env`) that hold its API key.
const CLAUDE_KEY_VARS: &[&str] = &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"];

/// The host whose tokens in gh's `hosts.yml` the broker puts back in (`gh`'s rule); a token of
/// another host (GitHub Enterprise) is a placeholder in the box and goes nowhere.
pub(crate) const GH_HOST: &str = "github.com";

/// Where a box sees the bundle of CAs it trusts (the system's and the node's), which the
/// variables of [`ca_env`] name.
pub(crate) const BOX_CA_BUNDLE: &str = "/run/ag-box-ca.pem";

/// The variables that point TLS clients at a CA bundle (curl and OpenSSL, Go, Node, Python,
/// git), in a box whose proxy stands in for a login.
pub(crate) fn ca_env() -> Vec<(String, String)> {
    [
        "SSL_CERT_FILE",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "GIT_SSL_CAINFO",
    ]
    .into_iter()
    .map(|k| (k.to_string(), BOX_CA_BUNDLE.to_string()))
    .collect()
}

/// The shape of the OAuth login of row `name` (Claude Code's for any other).
pub(crate) fn shape_of(name: &str) -> Shape {
    RULES
        .iter()
        .find(|r| r.name == name)
        .and_then(|r| r.oauth)
        .map_or(Shape::Claude, |o| o.shape)
}

impl OauthAccount {
    /// The placeholders the box sees for its tokens.
    pub(crate) fn shown(&self) -> Placeholders<'_> {
        Placeholders {
            access: &self.access,
            refresh: &self.refresh,
            id: self.id.as_deref(),
        }
    }
}

/// The part of HOME the box sees a brokered copy of for the row `name`, if it is one.
pub(crate) fn copied(name: &str) -> Option<&'static str> {
    RULES.iter().find(|r| r.name == name).map(|r| r.copied)
}

/// The file a box's proxy reads, in the box's run dir.
pub(crate) fn file(run_dir: &std::path::Path) -> std::path::PathBuf {
    run_dir.join("broker.json")
}

/// Where the node's refreshers take turns to refresh an OAuth login (root's).
const LOCK_DIR: &str = "/run/box/.broker";

/// Where the broker (`$BOX_STATE_DIR/broker`, `state`) keeps the OAuth login of row `row` that
/// box `name` made itself.
pub(crate) fn box_login_file(state: &std::path::Path, name: &str, row: &str) -> std::path::PathBuf {
    box_logins_dir(state, name).join(format!("{row}.json"))
}

/// Where the broker keeps the OAuth logins box `name` made itself (root's alone).
pub(crate) fn box_logins_dir(state: &std::path::Path, name: &str) -> std::path::PathBuf {
    state.join("boxes").join(name)
}

/// The lock of the broker's row `row` (an OAuth login).
pub(crate) fn lock_file(row: &str) -> std::path::PathBuf {
    std::path::Path::new(LOCK_DIR).join(format!("{row}.lock"))
}

/// The port a ruled host is terminated on; a CONNECT to any other port is tunnelled.
pub(crate) const TLS_PORT: u16 = 443;

/// Every host of [`RULES`] and their token endpoints: all the node's CA may ever vouch for (its
/// name constraints).
pub(crate) fn ruled_hosts() -> Vec<String> {
    let mut hosts: Vec<String> = Vec::new();
    for r in RULES {
        for h in r.hosts.iter().chain(r.oauth.as_ref().map(|o| &o.host)) {
            if !hosts.iter().any(|k| k == h) {
                hosts.push((*h).to_string());
            }
        }
    }
    hosts
}

/// The rules (one per login) for the logins a box is given whose node files hold a token the
/// broker stands in for (`held`: rows by name), when it has a proxy to stand in for them (a box
/// on the host's network has none, and sees the real files).
pub(crate) fn rules_for(logins: &[&str], isolated: bool, held: &[&str]) -> Vec<Rule> {
    if !isolated {
        return vec![];
    }
    let mut rules: Vec<Rule> = Vec::new();
    for r in RULES
        .iter()
        .filter(|r| logins.contains(&r.login) && held.contains(&r.name))
    {
        if let Some(rule) = rules.iter_mut().find(|k| k.login == r.login) {
            for h in r.hosts {
                if !rule.hosts.iter().any(|k| k == h) {
                    rule.hosts.push((*h).to_string());
                }
            }
            continue;
        }
        rules.push(Rule {
            login: r.login.to_string(),
            hosts: r.hosts.iter().map(|h| (*h).to_string()).collect(),
        });
    }
    rules
}

/// The brokered files a box sees as their copies: those of its logins, and those it sees
/// whatever its logins (Claude Code's settings), where the node's hold a token (`held`: rows
/// by name) and the box has a proxy. A login the box is not given is a placeholder there that
/// goes nowhere.
pub(crate) fn copies_seen(
    logins: &[&str],
    isolated: bool,
    held: &[&str],
    is_login_file: impl Fn(&str) -> bool,
) -> Vec<&'static LoginRule> {
    RULES
        .iter()
        .filter(|r| {
            isolated
                && held.contains(&r.name)
                && (logins.contains(&r.login) || !is_login_file(r.copied))
        })
        .collect()
}

/// One token a box sees as a placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Secret {
    pub login: String,
    pub placeholder: String,
    pub real: String,
    /// Goes only into `Authorization` (an OAuth token), never into a key header.
    #[serde(default)]
    pub bearer_only: bool,
    /// The hosts of its login's this token is for, where they are not all (an `OpenCode`
    /// provider's key is for that provider's API alone); empty: all of them.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// A header besides `Authorization` whose whole value is this token, where it is not its
    /// login's (an `OpenCode` provider's: Anthropic's `x-api-key`, Google's `x-goog-api-key`).
    #[serde(default)]
    pub key_header: Option<String>,
}

/// What a box's proxy reads from the box's run dir (root's alone): the rules, the tokens, and
/// the certificate (by the node's CA) it shows for the ruled hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BrokerFile {
    pub rules: Vec<Rule>,
    pub secrets: Vec<Secret>,
    pub cert_pem: String,
    pub key_pem: String,
    /// The port ruled hosts are terminated on ([`TLS_PORT`]).
    pub port: u16,
    /// The OAuth logins the proxy puts the current token of in, refreshing it when due.
    #[serde(default)]
    pub oauth: Vec<OauthAccount>,
}

/// An OAuth login a box's proxy stands in for: the placeholders the box sees for its tokens,
/// whatever the tokens are now (they change at each refresh), and where the real ones are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OauthAccount {
    pub login: String,
    /// The broker's row (`RULES`) of the login.
    pub row: String,
    #[serde(default)]
    pub shape: Shape,
    pub access: String,
    pub refresh: String,
    /// The placeholder of its OpenID-Connect token, where the login has one (Codex's).
    #[serde(default)]
    pub id: Option<String>,
    /// The account its requests may name beside the token (Codex's `chatgpt-account-id`).
    #[serde(default)]
    pub account_id: Option<String>,
    /// The box has no login yet (neither the node nor the box made one): the answer to a
    /// login's code exchange it makes is kept, in `file`, for it alone.
    pub captures: bool,
    /// Where the login's tokens are (root's): the node's file, or the broker's for this box.
    pub file: std::path::PathBuf,
    pub token_host: String,
    pub token_path: String,
    pub client_id: String,
    /// What refreshes it: `ag-box __refresh`, and the environment that finds the node's config.
    pub refresher: Refresher,
}

/// A command and the whole environment it runs with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Refresher {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
}

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// The prefixes of the tokens' kinds (gh's and the model APIs' keys), longest first, kept in
/// their placeholders (clients and servers tell a token's kind by them).
const TOKEN_PREFIXES: &[&str] = &[
    "github_pat_",
    "gho_",
    "ghp_",
    "ghu_",
    "ghs_",
    "ghr_",
    "sk-ant-api03-",
    "sk-ant-oat01-",
    "sk-ant-ort01-",
    "sk-ant-admin01-",
    "sk-ant-",
    "rt_",
    "ya29.",
    "1//",
    "xai-",
    "sk-proj-",
    "sk-svcacct-",
    "sk-admin-",
    "sk-",
];

/// The placeholder of token `real`: its shape (length, and a known prefix such as `gho_`),
/// the rest letters and digits drawn from `key` (a node secret), the box's name, the login and
/// the token, so that no two boxes, and no token, share one.
pub(crate) fn placeholder(real: &str, key: &[u8], box_name: &str, login: &str) -> String {
    let prefix = TOKEN_PREFIXES
        .iter()
        .find(|p| real.starts_with(*p))
        .copied()
        .unwrap_or("");
    let wanted = real.chars().count().saturating_sub(prefix.chars().count());
    let mut out = prefix.to_string();
    let mut round = 0u32;
    while out.len() < prefix.len() + wanted {
        let block = Sha256::new()
            .chain_update(key)
            .chain_update([0])
            .chain_update(box_name)
            .chain_update([0])
            .chain_update(login)
            .chain_update([0])
            .chain_update(real)
            .chain_update(round.to_be_bytes())
            .finalize();
        out.extend(
            block
                .iter()
                .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
                .take(prefix.len() + wanted - out.len()),
        );
        round += 1;
    }
    out
}

/// The placeholder of a token of `real`'s shape that stays the same whatever the token is (an
/// OAuth token changes at each refresh; the box's copy does not): drawn from `key`, the box's
/// name and `name` (what the token is) alone.
pub(crate) fn lasting_placeholder(real: &str, key: &[u8], box_name: &str, name: &str) -> String {
    let prefix = TOKEN_PREFIXES
        .iter()
        .find(|p| real.starts_with(*p))
        .copied()
        .unwrap_or("");
    let shape = format!(
        "{prefix}{}",
        "0".repeat(real.len().saturating_sub(prefix.len()))
    );
    placeholder(&shape, key, box_name, name)
}

/// The token of the placeholder `shown`, when its login's rule names `host`; Err: the reason
/// the request is refused.
fn token_for<'s>(secret: &'s Secret, host: &str, rules: &[Rule]) -> Result<&'s str, String> {
    let Some(rule) = rules.iter().find(|r| r.login == secret.login) else {
        return Err(format!(
            "a placeholder of the {} login went to {host}; this box may not use that login",
            secret.login
        ));
    };
    let hosts = if secret.hosts.is_empty() {
        &rule.hosts
    } else {
        &secret.hosts
    };
    if !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        return Err(format!(
            "a placeholder of the {} login went to {host}; its token is for {} only",
            secret.login,
            hosts.join(", ")
        ));
    }
    Ok(&secret.real)
}

/// A header of a request to `host` as it goes there. The token goes in one place only: as the
/// whole credential of `Authorization` (`token P`, `Bearer P`), as the password of a `Basic`
/// one, or as the whole value of its login's key header (`x-api-key: P`), where `P` is its
/// login's placeholder and that login's rule names `host`; so a
/// box cannot have it written anywhere a server would keep or show it (a path, another
/// header, a user name). Ok(None): sent as it is; Err: the request is refused, and why.
pub(crate) fn header_for(
    name: &str,
    value: &[u8],
    host: &str,
    rules: &[Rule],
    secrets: &[Secret],
) -> Result<Option<Vec<u8>>, String> {
    let text = String::from_utf8_lossy(value);
    if let Some(secret) = secrets.iter().find(|s| s.placeholder == text.trim())
        && !secret.bearer_only
        && key_headers(&secret.login)
            .iter()
            .copied()
            .chain(secret.key_header.as_deref())
            .any(|h| h.eq_ignore_ascii_case(name))
    {
        return token_for(secret, host, rules).map(|real| Some(real.as_bytes().to_vec()));
    }
    if name.eq_ignore_ascii_case("authorization")
        && let Some((scheme, credential)) = text.split_once(' ')
    {
        let credential = credential.trim();
        if scheme.eq_ignore_ascii_case("basic")
            && let Ok(decoded) = STANDARD.decode(credential)
            && let Ok(pair) = String::from_utf8(decoded)
            && let Some((user, password)) = pair.split_once(':')
            && let Some(secret) = secrets.iter().find(|s| s.placeholder == password)
            && placeholder_in(user.as_bytes(), secrets).is_none()
        {
            let real = token_for(secret, host, rules)?;
            let pair = format!("{user}:{real}");
            return Ok(Some(
                format!("{scheme} {}", STANDARD.encode(pair)).into_bytes(),
            ));
        }
        if ["token", "bearer"]
            .iter()
            .any(|known| scheme.eq_ignore_ascii_case(known))
            && let Some(secret) = secrets.iter().find(|s| s.placeholder == credential)
        {
            let real = token_for(secret, host, rules)?;
            return Ok(Some(format!("{scheme} {real}").into_bytes()));
        }
    }
    match placeholder_in(value, secrets) {
        Some(login) => Err(format!(
            "a placeholder of the {login} login went to {host} in its {name} header; the broker puts a token in only as an Authorization header's credential (token, Bearer or a Basic password), or as an API key's own header"
        )),
        None => Ok(None),
    }
}

/// The key headers of `login`.
fn key_headers(login: &str) -> &'static [&'static str] {
    RULES
        .iter()
        .find(|r| r.login == login)
        .map_or(&[], |r| r.key_headers)
}

/// Why a request to `path` may not get the tokens of `logins` it carries placeholders of (a
/// login whose rule names paths, and this is none of them); None: it may.
pub(crate) fn path_refusal(logins: &[String], host: &str, path: &str) -> Option<String> {
    logins.iter().find_map(|login| {
        // The login's rows for this host (Codex's API key and its ChatGPT login go to hosts of
        // their own, each with its paths).
        let rows: Vec<&LoginRule> = RULES
            .iter()
            .filter(|r| r.login == login.as_str())
            .filter(|r| r.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)))
            .collect();
        let mut paths: Vec<&str> = Vec::new();
        for p in rows.iter().flat_map(|r| r.paths.iter().copied()) {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        if rows.is_empty() || rows.iter().any(|r| r.paths.is_empty()) {
            return None;
        }
        // A path a server may read otherwise than as written (dot segments, escaped slashes)
        // could name what no prefix allows.
        if !plain_path(path) {
            return Some(format!(
                "the broker puts the {login} key into no request whose path has dot segments, empty segments or escaped dots or slashes ({path})"
            ));
        }
        let allowed = paths.iter().any(|p| {
            path == *p || path.starts_with(&format!("{p}/")) || path.starts_with(&format!("{p}?"))
        });
        (!allowed).then(|| {
            format!(
                "the broker puts the {login} key only into model requests ({}), not into one to {path}",
                paths.join(", ")
            )
        })
    })
}

/// Whether `path` means what it says: no `.` or `..` segment, no empty one, no escaped dot,
/// slash or backslash, no backslash.
fn plain_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let segments = path.strip_prefix('/').unwrap_or(path).split('/');
    !["%2e", "%2f", "%5c", "\\"]
        .iter()
        .any(|s| lower.contains(s))
        && segments
            .into_iter()
            .all(|s| s != "." && s != ".." && !s.is_empty())
}

/// The login of a placeholder in `value` (as it is, or in a `Basic` credential), if any.
pub(crate) fn placeholder_in<'s>(value: &[u8], secrets: &'s [Secret]) -> Option<&'s str> {
    let text = String::from_utf8_lossy(value);
    let decoded = text
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .and_then(|(_, encoded)| STANDARD.decode(encoded.trim()).ok())
        .map(|d| String::from_utf8_lossy(&d).into_owned())
        .unwrap_or_default();
    secrets
        .iter()
        .find(|s| text.contains(&s.placeholder) || decoded.contains(&s.placeholder))
        .map(|s| s.login.as_str())
}

/// The methods a request that gets a token may have (not TRACE, which echoes the request).
pub(crate) fn method_takes_token(method: &str) -> bool {
    ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].contains(&method)
}

/// A token of gh's shape in `text` that is none of `placeholders` (a token a copy still holds).
pub(crate) fn holds_a_token(text: &str, placeholders: &[String]) -> bool {
    TOKEN_PREFIXES.iter().any(|prefix| {
        text.match_indices(prefix).any(|(at, _)| {
            // Within a word (`insert_pull_request`) it starts no token.
            if text[..at].ends_with(|c: char| c.is_ascii_alphanumeric()) {
                return false;
            }
            let token = &text[at..at + token_len(&text[at..], prefix)];
            token.len() >= prefix.len() + 20 && !placeholders.iter().any(|p| p == token)
        })
    })
}

/// What a token is made of (gh's, and the model APIs' keys with their dashes).
/// The length of the token `text` starts with (its prefix `prefix`, which may hold a `.` or
/// `/`, then token characters).
fn token_len(text: &str, prefix: &str) -> usize {
    let rest = &text[prefix.len()..];
    prefix.len() + rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len())
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `text` with every token of a known kind in it (20 characters or more past its prefix) but
/// those of `keep` replaced by `placeholder(token)`, and the tokens replaced: whatever else a
/// copied file holds of a key (another variable, a helper's command line) reaches no box.
pub(crate) fn placehold_tokens(
    text: &str,
    keep: &[String],
    mut placeholder: impl FnMut(&str) -> String,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut found = Vec::new();
    let mut rest = text;
    'scan: while !rest.is_empty() {
        for (at, _) in rest.char_indices() {
            let here = &rest[at..];
            // A key glued to what comes before it by a dash or an underscore is still one.
            let starts_token =
                at == 0 || !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric());
            if !starts_token {
                continue;
            }
            let Some(prefix) = TOKEN_PREFIXES.iter().find(|p| here.starts_with(*p)) else {
                continue;
            };
            let len = token_len(here, prefix);
            let token = &here[..len];
            if len < prefix.len() + 20 || keep.iter().any(|k| k == token) {
                continue;
            }
            out.push_str(&rest[..at]);
            out.push_str(&placeholder(token));
            found.push(token.to_string());
            rest = &here[len..];
            continue 'scan;
        }
        out.push_str(rest);
        break;
    }
    (out, found)
}

/// The refusal of a request whose target (path and query) holds a placeholder: no token goes
/// in a URL.
pub(crate) fn refuses_target(target: &str, host: &str, secrets: &[Secret]) -> Option<String> {
    placeholder_in(target.as_bytes(), secrets).map(|login| {
        format!(
            "a placeholder of the {login} login went to {host} in the request's URL; the broker puts a token in only as an Authorization header's credential"
        )
    })
}

/// gh's `hosts.yml` with each `oauth_token:` value replaced by `placeholder(value)`, and the
/// tokens found with the host whose block holds them (line by line: gh writes one key per
/// line, a value plain or quoted).
pub(crate) fn gh_hosts_placeheld(
    text: &str,
    mut placeholder: impl FnMut(&str) -> String,
) -> (String, Vec<(String, String)>) {
    let mut found = Vec::new();
    let mut host = String::new();
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let ending = &line[body.len()..];
        let indent = body.len() - body.trim_start().len();
        let rest = &body[indent..];
        if indent == 0
            && let Some(key) = rest.strip_suffix(':')
        {
            key.clone_into(&mut host);
        }
        let Some(value) = rest.strip_prefix("oauth_token:") else {
            out.push_str(line);
            continue;
        };
        let value = value.trim();
        let (quote, token) = match value.chars().next() {
            Some(q @ ('"' | '\'')) if value.len() >= 2 && value.ends_with(q) => {
                (Some(q), &value[1..value.len() - 1])
            }
            _ => (None, value),
        };
        if token.is_empty() {
            out.push_str(line);
            continue;
        }
        let shown = placeholder(token);
        found.push((host.clone(), token.to_string()));
        let q = quote.map(String::from).unwrap_or_default();
        for part in [&body[..indent], "oauth_token: ", &q, &shown, &q, ending] {
            out.push_str(part);
        }
    }
    (out, found)
}

/// Claude Code's settings with the API key of its `env` (`ANTHROPIC_API_KEY`,
/// `ANTHROPIC_AUTH_TOKEN`) replaced by `placeholder(key)`, and the keys found; None when it is
/// no JSON object or holds no key.
pub(crate) fn claude_settings_placeheld(
    text: &str,
    mut placeholder: impl FnMut(&str) -> String,
) -> Option<(String, Vec<String>)> {
    let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
    let env = v.as_object_mut()?.get_mut("env")?.as_object_mut()?;
    // A key for another endpoint (a gateway of the operator's) is none of the broker's.
    if let Some(base) = env.get("ANTHROPIC_BASE_URL").and_then(|b| b.as_str())
        && !base.trim().is_empty()
        && !url_host(base.trim()).is_some_and(|h| {
            h.trim_end_matches('.')
                .eq_ignore_ascii_case("api.anthropic.com")
        })
    {
        return None;
    }
    let mut found = Vec::new();
    for var in CLAUDE_KEY_VARS {
        if let Some(serde_json::Value::String(key)) = env.get_mut(*var)
            && !key.is_empty()
        {
            found.push(key.clone());
            *key = placeholder(key);
        }
    }
    if found.is_empty() {
        return None;
    }
    let text = serde_json::to_string_pretty(&v).ok()?;
    Some((text, found))
}

/// Grok's settings with their `apiKey` replaced by `placeholder(key)`, and the key; None when it
/// is no JSON object, holds no key, or sends its requests elsewhere than xAI's API (`baseURL`
/// naming another host: a gateway of the operator's, for which the broker has no rule).
pub(crate) fn grok_settings_placeheld(
    text: &str,
    placeholder: impl FnMut(&str) -> String,
) -> Option<(String, Vec<String>)> {
    let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
    let settings = v.as_object_mut()?;
    // A URL this reads otherwise than a client might (a backslash, a space, a control byte)
    // is taken for xAI's: the key stays the broker's.
    if let Some(base) = settings.get("baseURL").and_then(|b| b.as_str())
        && !base.trim().is_empty()
        && !base
            .trim()
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
        && !url_host(base.trim())
            .is_some_and(|h| h.trim_end_matches('.').eq_ignore_ascii_case("api.x.ai"))
    {
        return None;
    }
    key_placeheld(v, "apiKey", placeholder)
}

/// The JSON object `v` with its string field `field` (a key) replaced by `placeholder(key)`,
/// and the key; None when it holds none.
fn key_placeheld(
    mut v: serde_json::Value,
    field: &str,
    mut placeholder: impl FnMut(&str) -> String,
) -> Option<(String, Vec<String>)> {
    let Some(serde_json::Value::String(key)) = v.as_object_mut()?.get_mut(field) else {
        return None;
    };
    if key.is_empty() {
        return None;
    }
    let found = vec![key.clone()];
    *key = placeholder(key);
    let text = serde_json::to_string_pretty(&v).ok()?;
    Some((text, found))
}

/// The host of an `http(s)://host[:port][/...]` URL.
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    Some(host.split(':').next().unwrap_or(host)).filter(|h| !h.is_empty())
}

/// `OpenCode`'s `auth.json` (one entry per provider) with every string of every entry but its
/// `type` a placeholder (`placeholder(value)`), and the API keys of the providers the broker
/// stands in for, each with its provider; None when it is no JSON object.
pub(crate) fn opencode_auth_placeheld(
    text: &str,
    mut placeholder: impl FnMut(&str) -> String,
) -> Option<(String, Vec<(String, OpencodeProvider)>)> {
    let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut found = Vec::new();
    for (provider, entry) in v.as_object_mut()? {
        let host = OPENCODE_PROVIDERS
            .iter()
            .find(|p| p.id == provider)
            .copied();
        let Some(fields) = entry.as_object_mut() else {
            *entry = serde_json::Value::Null;
            continue;
        };
        let is_key = fields.get("type").and_then(serde_json::Value::as_str) == Some("api");
        for (name, value) in fields.iter_mut() {
            match value {
                serde_json::Value::String(s) if name != "type" && !s.is_empty() => {
                    if let (true, "key", Some(host)) = (is_key, name.as_str(), host) {
                        found.push((s.clone(), host));
                    }
                    *s = placeholder(s);
                }
                serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
                    *value = serde_json::Value::Null;
                }
                _ => {}
            }
        }
    }
    let text = serde_json::to_string_pretty(&v).ok()?;
    Some((text, found))
}

/// The entries of `OpenCode`'s `auth.json` whose credentials go nowhere from a guarded box (an
/// OAuth login, a provider the broker holds no key of), by provider id.
pub(crate) fn opencode_unbrokered(text: &str) -> Vec<String> {
    let Ok(serde_json::Value::Object(v)) = serde_json::from_str(text) else {
        return Vec::new();
    };
    v.iter()
        .filter(|(provider, entry)| {
            entry.get("type").and_then(serde_json::Value::as_str) != Some("api")
                || !OPENCODE_PROVIDERS.iter().any(|p| p.id == provider.as_str())
        })
        .map(|(provider, _)| provider.clone())
        .collect()
}

/// Codex's `auth.json` with its `OPENAI_API_KEY` replaced by `placeholder(key)`, and the key;
/// None when it is no JSON object, holds no key, or holds an OAuth login (`tokens`: not
/// brokered yet, the box gets the node's file as before).
pub(crate) fn codex_auth_placeheld(
    text: &str,
    placeholder: impl FnMut(&str) -> String,
) -> Option<(String, Vec<String>)> {
    let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
    let auth = v.as_object_mut()?;
    if auth.get("tokens").is_some_and(|t| !t.is_null()) {
        return None;
    }
    key_placeheld(v, "OPENAI_API_KEY", placeholder)
}

/// The accounts of gh's `hosts.yml`: `user@host` for each host's `user:` (and each user of
/// its `users:`), in the file's order.
pub(crate) fn gh_accounts(text: &str) -> Vec<String> {
    let mut host = "?";
    // The indent of a `users:` key being read, and of its entries once one is seen.
    let mut users: Option<(usize, Option<usize>)> = None;
    let mut out: Vec<String> = Vec::new();
    let mut add = |user: &str, host: &str| {
        let account = format!("{user}@{host}");
        if !user.is_empty() && !out.contains(&account) {
            out.push(account);
        }
    };
    for line in text.lines() {
        let item = line.trim();
        if item.is_empty() || item.starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if users.is_some_and(|(at, _)| indent <= at) {
            users = None;
        }
        if let Some(key) = item.strip_suffix(':').filter(|_| indent == 0) {
            host = key;
        } else if item == "users:" {
            users = Some((indent, None));
        } else if let Some((_, entries)) = &mut users {
            if let Some(user) = item.strip_suffix(':')
                && *entries.get_or_insert(indent) == indent
            {
                add(user, host);
            }
        } else if let Some(user) = item.strip_prefix("user:") {
            add(user.trim().trim_matches(['"', '\'']), host);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const REAL: &str = "gho_REALREALREALREALREALREALREALREAL1234";

    fn gh() -> (Vec<Rule>, Vec<Secret>) {
        (
            rules_for(&["claude", "gh"], true, &["gh"]),
            vec![Secret {
                login: "gh".into(),
                placeholder: "gho_placeholder".into(),
                real: REAL.into(),
                bearer_only: false,
                hosts: Vec::new(),
                key_header: None,
            }],
        )
    }

    #[test]
    fn googles_tokens_are_seen_whatever_their_prefix_holds() {
        let access = format!("ya29.{}", "a0AfH6SMB".repeat(4));
        let refresh = format!("1//{}", "0gXyZ-abc_".repeat(4));
        let text = format!(
            "{{\"a\":\"{access}\",\"r\":\"{refresh}\",\"w\":\"insert_pull_request_template{}\"}}",
            "x".repeat(30)
        );
        assert!(holds_a_token(&text, &[]));
        let (copy, found) = placehold_tokens(&text, &[], |t| format!("<{}>", t.len()));
        assert_eq!(found, [access.clone(), refresh.clone()]);
        assert_eq!(
            copy,
            format!(
                "{{\"a\":\"<{}>\",\"r\":\"<{}>\",\"w\":\"insert_pull_request_template{}\"}}",
                access.len(),
                refresh.len(),
                "x".repeat(30)
            )
        );
        assert!(!holds_a_token(
            &format!("insert_pull_request_template{}", "x".repeat(30)),
            &[]
        ));
    }

    #[test]
    fn only_a_box_with_its_own_network_and_the_login_has_rules() {
        let all = ["gh", "claude", "claude-oauth", "codex"];
        assert_eq!(
            rules_for(&["claude", "gh"], true, &all),
            vec![
                Rule {
                    login: "gh".into(),
                    hosts: vec!["github.com".into(), "api.github.com".into()],
                },
                Rule {
                    login: "claude".into(),
                    hosts: vec!["api.anthropic.com".into()],
                },
            ]
        );
        // A login whose node files hold no token to stand in for (Codex's OAuth login) has none.
        assert_eq!(
            rules_for(&["codex", "gh"], true, &["gh"]),
            vec![Rule {
                login: "gh".into(),
                hosts: vec!["github.com".into(), "api.github.com".into()],
            }]
        );
        // Claude Code's OAuth login alone: one rule for the login, whichever of its rows.
        assert_eq!(
            rules_for(&["claude"], true, &["claude-oauth"]),
            vec![Rule {
                login: "claude".into(),
                hosts: vec!["api.anthropic.com".into()],
            }]
        );
        assert_eq!(rules_for(&["claude", "gh"], false, &all), vec![]);
        assert_eq!(rules_for(&["opencode"], true, &all), vec![]);
        assert_eq!(
            rules_for(&["opencode"], true, &["opencode"])
                .iter()
                .map(|r| (r.login.as_str(), r.hosts.len()))
                .collect::<Vec<_>>(),
            [("opencode", 8)]
        );
        assert_eq!(
            ruled_hosts(),
            [
                "github.com",
                "api.github.com",
                "api.anthropic.com",
                "platform.claude.com",
                "api.openai.com",
                "chatgpt.com",
                "auth.openai.com",
                "cloudcode-pa.googleapis.com",
                "oauth2.googleapis.com",
                "api.x.ai",
                "generativelanguage.googleapis.com",
                "openrouter.ai",
                "api.groq.com",
                "api.deepseek.com",
                "api.mistral.ai",
            ]
        );
        // Claude Code's settings are every box's to read: a box not given the login sees
        // them with a placeholder too; a login file only by the box given it.
        let seen = |logins: &[&str], held: &[&str]| {
            copies_seen(logins, true, held, |f| f != ".claude/settings.json")
                .iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(seen(&["gh"], &all), ["gh", "claude"]);
        assert_eq!(seen(&["claude"], &all), ["claude", "claude-oauth"]);
        assert_eq!(seen(&["codex"], &all), ["claude", "codex"]);
        assert_eq!(seen(&["codex"], &["gh"]), Vec::<&str>::new());
        assert!(copies_seen(&["gh"], false, &all, |_| true).is_empty());
    }

    #[test]
    fn a_placeholder_keeps_the_tokens_shape_and_differs_per_box_and_key() {
        let p = placeholder(REAL, b"key", "demo", "gh");
        assert_eq!(p.len(), REAL.len());
        assert!(p.starts_with("gho_") && p[4..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(p, REAL);
        assert_eq!(p, placeholder(REAL, b"key", "demo", "gh"));
        assert_ne!(p, placeholder(REAL, b"key", "other", "gh"));
        assert_ne!(p, placeholder(REAL, b"another key", "demo", "gh"));
        let pat =
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP";
        let q = placeholder(pat, b"key", "demo", "gh");
        assert_eq!((q.len(), &q[..11]), (pat.len(), "github_pat_"));
        // An unknown shape keeps no prefix.
        let other = placeholder("abc_defghijklmnop", b"k", "b", "gh");
        assert_eq!(other.len(), 17);
        assert!(other.chars().all(|c| c.is_ascii_alphanumeric()), "{other}");
        // Longer than one hash's worth.
        let long = "x".repeat(100);
        assert_eq!(placeholder(&long, b"k", "b", "gh").len(), 100);
    }

    #[test]
    fn the_token_goes_in_as_the_authorization_credential_on_its_own_hosts() {
        let (rules, secrets) = gh();
        let on = |name: &str, v: &str, host| {
            header_for(name, v.as_bytes(), host, &rules, &secrets)
                .map(|o| o.map(|b| String::from_utf8(b).unwrap()))
        };
        assert_eq!(
            on("Authorization", "token gho_placeholder", "api.github.com"),
            Ok(Some(format!("token {REAL}")))
        );
        assert_eq!(
            on("authorization", "Bearer gho_placeholder", "API.GitHub.com"),
            Ok(Some(format!("Bearer {REAL}")))
        );
        let basic = format!(
            "Basic {}",
            STANDARD.encode("x-access-token:gho_placeholder")
        );
        let real_basic = format!(
            "Basic {}",
            STANDARD.encode(format!("x-access-token:{REAL}"))
        );
        assert_eq!(
            on("Authorization", &basic, "github.com"),
            Ok(Some(real_basic))
        );
        assert_eq!(
            on("Authorization", "Bearer something-else", "github.com"),
            Ok(None)
        );
        assert_eq!(on("Accept-Encoding", "gzip", "github.com"), Ok(None));
    }

    #[test]
    fn an_oauth_token_goes_into_authorization_alone() {
        let rules = rules_for(&["claude"], true, &["claude", "claude-oauth"]);
        let secrets = [Secret {
            login: "claude".into(),
            placeholder: "sk-ant-oat01-shown".into(),
            real: "sk-ant-oat01-real".into(),
            bearer_only: true,
            hosts: Vec::new(),
            key_header: None,
        }];
        let on = |name: &str, v: &str| {
            header_for(name, v.as_bytes(), "api.anthropic.com", &rules, &secrets)
        };
        assert_eq!(
            on("Authorization", "Bearer sk-ant-oat01-shown"),
            Ok(Some(b"Bearer sk-ant-oat01-real".to_vec()))
        );
        assert!(on("x-api-key", "sk-ant-oat01-shown").is_err());
    }

    #[test]
    fn a_placeholder_anywhere_else_refuses_the_request() {
        let (rules, secrets) = gh();
        let on = |name: &str, v: &str, host| {
            header_for(name, v.as_bytes(), host, &rules, &secrets)
                .map(|o| o.map(|b| String::from_utf8(b).unwrap()))
        };
        let elsewhere = "a placeholder of the gh login went to api.anthropic.com; its token is for github.com, api.github.com only";
        assert_eq!(
            on(
                "Authorization",
                "Bearer gho_placeholder",
                "api.anthropic.com"
            ),
            Err(elsewhere.into())
        );
        let basic = format!("Basic {}", STANDARD.encode("x:gho_placeholder"));
        assert_eq!(
            on("Authorization", &basic, "api.anthropic.com"),
            Err(elsewhere.into())
        );
        let only_auth = |name: &str| {
            Err(format!(
                "a placeholder of the gh login went to github.com in its {name} header; the broker puts a token in only as an Authorization header's credential (token, Bearer or a Basic password), or as an API key's own header"
            ))
        };
        // Where a server would keep or show it: another header, a user name, beside other text.
        assert_eq!(
            on("X-Note", "gho_placeholder", "github.com"),
            only_auth("X-Note")
        );
        let as_user = format!("Basic {}", STANDARD.encode("gho_placeholder:x"));
        assert_eq!(
            on("Authorization", &as_user, "github.com"),
            only_auth("Authorization")
        );
        let both = format!(
            "Basic {}",
            STANDARD.encode("gho_placeholder:gho_placeholder")
        );
        assert_eq!(
            on("Authorization", &both, "github.com"),
            only_auth("Authorization")
        );
        assert_eq!(
            on(
                "Authorization",
                "token gho_placeholder,gho_placeholder",
                "github.com"
            ),
            only_auth("Authorization")
        );
        assert_eq!(
            refuses_target("/repos/a/b/contents/gho_placeholder", "github.com", &secrets),
            Some("a placeholder of the gh login went to github.com in the request's URL; the broker puts a token in only as an Authorization header's credential".into())
        );
        assert_eq!(refuses_target("/user", "github.com", &secrets), None);
        // A login the box may not use (no rule for it) goes nowhere.
        assert_eq!(
            header_for(
                "Authorization",
                b"token gho_placeholder",
                "github.com",
                &[],
                &secrets
            ),
            Err(
                "a placeholder of the gh login went to github.com; this box may not use that login"
                    .into()
            )
        );
    }

    #[test]
    fn a_placeholder_is_found_as_it_is_or_in_basic() {
        let (_, secrets) = gh();
        let basic = format!("Basic {}", STANDARD.encode("u:gho_placeholder"));
        assert_eq!(placeholder_in(basic.as_bytes(), &secrets), Some("gh"));
        assert_eq!(placeholder_in(b"x gho_placeholder y", &secrets), Some("gh"));
        assert_eq!(placeholder_in(b"Basic !!notbase64", &secrets), None);
        assert_eq!(placeholder_in(b"gho_other", &secrets), None);
    }

    #[test]
    fn gh_accounts_are_user_at_host() {
        let text = "github.com:\n    users:\n        octo:\n            oauth_token: gho_A\n        cat:\n            oauth_token: gho_B\n    oauth_token: gho_A\n    user: octo\n    git_protocol: https\nghe.example:\n    oauth_token: gho_C\n    user: \"dev\"\n";
        assert_eq!(
            gh_accounts(text),
            ["octo@github.com", "cat@github.com", "dev@ghe.example"]
        );
        assert_eq!(gh_accounts(""), Vec::<String>::new());
    }

    #[test]
    fn gh_hosts_tokens_are_replaced_in_place_plain_or_quoted() {
        let text = "github.com:\n    users:\n        octo:\n            oauth_token: gho_AAA\n    oauth_token: \"gho_BBB\"\n    user: octo\n    git_protocol: https\nghe.example:\n    oauth_token: 'gho_CCC'\r\n    oauth_token:\n";
        let (out, found) = gh_hosts_placeheld(text, |t| format!("P{}", t.len()));
        assert_eq!(
            out,
            "github.com:\n    users:\n        octo:\n            oauth_token: P7\n    oauth_token: \"P7\"\n    user: octo\n    git_protocol: https\nghe.example:\n    oauth_token: 'P7'\r\n    oauth_token:\n"
        );
        let at = |h: &str, t: &str| (h.to_string(), t.to_string());
        assert_eq!(
            found,
            [
                at("github.com", "gho_AAA"),
                at("github.com", "gho_BBB"),
                at("ghe.example", "gho_CCC")
            ]
        );
    }

    #[test]
    fn a_token_left_in_a_copy_is_found() {
        let shown = vec![placeholder(REAL, b"k", "b", "gh")];
        assert!(!holds_a_token(
            &format!("oauth_token: {}\n", shown[0]),
            &shown
        ));
        assert!(holds_a_token(&format!("oauth_token : {REAL}\n"), &shown));
        assert!(holds_a_token(
            "hosts: {x: {oauth_token: ghp_0123456789abcdefghijKLMN}}",
            &shown
        ));
        // A prefix alone, or too short to be a token.
        assert!(!holds_a_token("see gho_ docs, ghp_short", &shown));
    }

    #[test]
    fn only_known_schemes_and_methods_carry_the_token() {
        let (rules, secrets) = gh();
        assert!(
            header_for(
                "Authorization",
                b"Foo gho_placeholder",
                "github.com",
                &rules,
                &secrets
            )
            .is_err()
        );
        assert!(method_takes_token("PATCH") && !method_takes_token("TRACE"));
    }

    #[test]
    fn api_keys_of_claude_and_codex_are_placeheld_in_their_files() {
        let settings = r#"{"env": {"ANTHROPIC_API_KEY": "sk-ant-api03-real", "DISABLE_TELEMETRY": "1"}, "model": "opus"}"#;
        assert_eq!(
            claude_settings_placeheld(settings, |k| format!("P({k})")),
            Some((
                "{\n  \"env\": {\n    \"ANTHROPIC_API_KEY\": \"P(sk-ant-api03-real)\",\n    \"DISABLE_TELEMETRY\": \"1\"\n  },\n  \"model\": \"opus\"\n}".to_string(),
                vec!["sk-ant-api03-real".to_string()]
            ))
        );
        // A key for a gateway of the operator's is its own: the box sees the node's settings.
        let gateway = r#"{"env": {"ANTHROPIC_API_KEY": "sk-x", "ANTHROPIC_BASE_URL": "http://10.0.0.5:4000"}}"#;
        let official = r#"{"env": {"ANTHROPIC_API_KEY": "sk-x", "ANTHROPIC_BASE_URL": "https://api.anthropic.com/"}}"#;
        assert_eq!(
            claude_settings_placeheld(official, |k| format!("P({k})")).map(|(_, keys)| keys),
            Some(vec!["sk-x".to_string()])
        );
        for none in [
            gateway,
            r#"{"env": {"DISABLE_TELEMETRY": "1"}}"#,
            "{}",
            "[1]",
            "not json",
            r#"{"env": {"ANTHROPIC_API_KEY": ""}}"#,
        ] {
            assert_eq!(
                claude_settings_placeheld(none, |k| k.into()),
                None,
                "{none}"
            );
        }
        assert_eq!(
            codex_auth_placeheld(
                r#"{"OPENAI_API_KEY": "sk-proj-real", "tokens": null}"#,
                |k| format!("P({k})")
            ),
            Some((
                "{\n  \"OPENAI_API_KEY\": \"P(sk-proj-real)\",\n  \"tokens\": null\n}".to_string(),
                vec!["sk-proj-real".to_string()]
            ))
        );
        // An OAuth login (ChatGPT) is not brokered yet: none.
        assert_eq!(
            codex_auth_placeheld(
                r#"{"OPENAI_API_KEY": "sk-x", "tokens": {"access_token": "a"}}"#,
                |k| k.into()
            ),
            None
        );
        assert_eq!(
            codex_auth_placeheld(r#"{"OPENAI_API_KEY": null}"#, |k| k.into()),
            None
        );
        // Grok's key, for xAI's API (its own baseURL, or none); another baseURL is a gateway.
        for settings in [
            r#"{"apiKey": "xai-real", "baseURL": "https://API.x.ai./v1"}"#,
            r#"{"apiKey": "xai-real"}"#,
            r#"{"apiKey": "xai-real", "baseURL": "https://api.x.ai\\v1"}"#,
            r#"{"apiKey": "xai-real", "baseURL": "https://api.x.ai\t.evil/v1"}"#,
        ] {
            let (text, keys) = grok_settings_placeheld(settings, |k| format!("P({k})")).unwrap();
            assert_eq!(
                (
                    serde_json::from_str::<serde_json::Value>(&text).unwrap()["apiKey"].clone(),
                    keys
                ),
                (
                    serde_json::json!("P(xai-real)"),
                    vec!["xai-real".to_string()]
                ),
                "{settings}"
            );
        }
        for none in [
            r#"{"apiKey": "xai-real", "baseURL": "https://gateway.example/v1"}"#,
            r#"{"apiKey": ""}"#,
            r#"{"defaultModel": "grok-4"}"#,
            "[]",
        ] {
            assert_eq!(grok_settings_placeheld(none, |k| k.into()), None, "{none}");
        }
        // The placeholder keeps the key's kind.
        let p = placeholder("sk-ant-api03-abcdefghij0123456789", b"k", "demo", "claude");
        assert_eq!((p.len(), &p[..13]), (33, "sk-ant-api03-"));
        assert_eq!(
            &placeholder("sk-proj-abcdefghij", b"k", "demo", "codex")[..8],
            "sk-proj-"
        );
    }

    #[test]
    fn an_api_key_goes_in_as_its_own_header_or_the_bearer_credential_on_its_api_only() {
        let held = ["gh", "claude", "codex"];
        let rules = rules_for(&["claude", "codex"], true, &held);
        let secrets = vec![
            Secret {
                login: "claude".into(),
                placeholder: "sk-ant-api03-shown".into(),
                real: "sk-ant-api03-real".into(),
                bearer_only: false,
                hosts: Vec::new(),
                key_header: None,
            },
            Secret {
                login: "codex".into(),
                placeholder: "sk-proj-shown".into(),
                real: "sk-proj-real".into(),
                bearer_only: false,
                hosts: Vec::new(),
                key_header: None,
            },
        ];
        let on = |name: &str, v: &str, host| {
            header_for(name, v.as_bytes(), host, &rules, &secrets)
                .map(|o| o.map(|b| String::from_utf8(b).unwrap()))
        };
        assert_eq!(
            on("x-api-key", "sk-ant-api03-shown", "api.anthropic.com"),
            Ok(Some("sk-ant-api03-real".into()))
        );
        assert_eq!(
            on(
                "Authorization",
                "Bearer sk-ant-api03-shown",
                "api.anthropic.com"
            ),
            Ok(Some("Bearer sk-ant-api03-real".into()))
        );
        assert_eq!(
            on("Authorization", "Bearer sk-proj-shown", "api.openai.com"),
            Ok(Some("Bearer sk-proj-real".into()))
        );
        assert_eq!(
            on("x-api-key", "sk-ant-api03-shown", "api.openai.com"),
            Err("a placeholder of the claude login went to api.openai.com; its token is for api.anthropic.com only".into())
        );
        assert_eq!(
            on("Authorization", "Bearer sk-proj-shown", "api.anthropic.com"),
            Err("a placeholder of the codex login went to api.anthropic.com; its token is for api.openai.com only".into())
        );
        // Codex's key has no header of its own; Claude's key in another header is refused.
        assert!(on("x-api-key", "sk-proj-shown", "api.openai.com").is_err());
        assert!(on("x-other", "sk-ant-api03-shown", "api.anthropic.com").is_err());
        // A box not given the claude login: its settings' placeholder goes nowhere.
        let codex_only = rules_for(&["codex"], true, &held);
        assert_eq!(
            header_for("x-api-key", b"sk-ant-api03-shown", "api.anthropic.com", &codex_only, &secrets),
            Err("a placeholder of the claude login went to api.anthropic.com; this box may not use that login".into())
        );
    }

    #[test]
    fn every_token_of_a_keys_shape_in_a_copy_becomes_a_placeholder() {
        let key = "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let other = "sk-proj-BBBBBBBBBBBBBBBBBBBBBBBB-bb_b";
        let text = format!(
            "{{\"apiKeyHelper\": \"echo {key}\", \"env\": {{\"X\": \"{other}\", \"SHORT\": \"sk-abc\", \"W\": \"ask-{other}\"}}}}"
        );
        let (copy, found) = placehold_tokens(&text, &[], |t| format!("<{}>", t.len()));
        assert_eq!(
            copy,
            "{\"apiKeyHelper\": \"echo <41>\", \"env\": {\"X\": \"<37>\", \"SHORT\": \"sk-abc\", \"W\": \"ask-<37>\"}}"
        );
        assert_eq!(found, [key, other, other]);
        // Inside a word, no key starts: a setting's own text is left alone.
        let word = "task-runner-configuration-value";
        assert_eq!(placehold_tokens(word, &[], |_| "x".into()).0, word);
        // A placeholder already made stays as it is.
        let (again, found) =
            placehold_tokens(&format!("k={key}"), &[key.to_string()], |_| "x".into());
        assert_eq!(
            (again.as_str(), found.len()),
            (format!("k={key}").as_str(), 0)
        );
        assert!(holds_a_token(&format!("x {other}"), &[]));
    }

    #[test]
    fn a_model_apis_key_goes_into_model_requests_only() {
        let claude = vec!["claude".to_string()];
        let codex = vec!["codex".to_string()];
        for ok in [
            "/v1/messages",
            "/v1/messages/count_tokens",
            "/v1/models",
            "/v1/models/x",
        ] {
            assert_eq!(path_refusal(&claude, "api.anthropic.com", ok), None, "{ok}");
        }
        assert_eq!(
            path_refusal(&claude, "api.anthropic.com", "/api/oauth/claude_cli/create_api_key"),
            Some("the broker puts the claude key only into model requests (/v1/messages, /v1/models), not into one to /api/oauth/claude_cli/create_api_key".into())
        );
        assert!(path_refusal(&claude, "api.anthropic.com", "/v1/messagesX").is_some());
        // A path a server could read as another: dot segments, escaped ones, empty segments.
        for odd in [
            "/v1/messages/../../api/oauth/claude_cli/create_api_key",
            "/v1/messages/%2e%2e/%2E%2E/api/oauth/claude_cli/create_api_key",
            "/v1/messages/..%2fapi",
            "/v1/models/.",
            "/v1/messages//x",
            "/v1/messages/..\\api",
            "/v1/models/%5c",
        ] {
            assert_eq!(
                path_refusal(&claude, "api.anthropic.com", odd),
                Some(format!(
                    "the broker puts the claude key into no request whose path has dot segments, empty segments or escaped dots or slashes ({odd})"
                )),
                "{odd}"
            );
        }
        assert!(path_refusal(&claude, "api.anthropic.com", "/v1/organizations/invites").is_some());
        assert_eq!(
            path_refusal(&codex, "api.openai.com", "/v1/responses"),
            None
        );
        assert_eq!(
            path_refusal(&codex, "chatgpt.com", "/backend-api/codex/responses"),
            None
        );
        assert!(path_refusal(&codex, "chatgpt.com", "/v1/responses").is_some());
        assert!(path_refusal(&codex, "chatgpt.com", "/backend-api/conversation").is_some());
        assert!(
            path_refusal(&codex, "api.openai.com", "/v1/organization/admin_api_keys").is_some()
        );
        // gh's token may go to any path of its hosts.
        assert_eq!(
            path_refusal(&["gh".to_string()], "api.github.com", "/repos/a/b/keys"),
            None
        );
        assert_eq!(path_refusal(&[], "api.github.com", "/anything"), None);
    }

    /// `OpenCode`'s `auth.json`: each known provider's API key brokered for its own API; every
    /// other string (another provider's key, an OAuth login it refreshes itself) a placeholder
    /// that goes nowhere; nested values dropped; the kind of each entry kept.
    #[test]
    fn opencodes_keys_are_each_for_their_providers_api_and_all_else_goes_nowhere() {
        let text = r#"{
            "anthropic": {"type": "api", "key": "sk-ant-api03-aaaa"},
            "openai": {"type": "api", "key": "sk-proj-bbbb"},
            "github-copilot": {"type": "oauth", "refresh": "gho_cccc", "access": "tid=dddd", "expires": 5},
            "acme": {"type": "api", "key": "acme-eeee"},
            "google": {"type": "wellknown", "key": "k", "token": "ffff", "extra": {"x": "gggg"}},
            "odd": "hhhh"
        }"#;
        let (shown, keys) = opencode_auth_placeheld(text, |v| format!("P({v})")).unwrap();
        let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(
            shown,
            serde_json::json!({
                "anthropic": {"type": "api", "key": "P(sk-ant-api03-aaaa)"},
                "openai": {"type": "api", "key": "P(sk-proj-bbbb)"},
                "github-copilot": {"type": "oauth", "refresh": "P(gho_cccc)", "access": "P(tid=dddd)", "expires": 5},
                "acme": {"type": "api", "key": "P(acme-eeee)"},
                "google": {"type": "wellknown", "key": "P(k)", "token": "P(ffff)", "extra": null},
                "odd": null
            })
        );
        assert_eq!(
            keys.iter()
                .map(|(k, p)| (k.as_str(), p.host, p.key_header))
                .collect::<Vec<_>>(),
            [
                ("sk-ant-api03-aaaa", "api.anthropic.com", Some("x-api-key")),
                ("sk-proj-bbbb", "api.openai.com", None),
            ]
        );
        assert_eq!(
            opencode_unbrokered(text),
            ["github-copilot", "acme", "google", "odd"]
        );
        assert_eq!(opencode_auth_placeheld("[]", |v| v.into()), None);
        assert_eq!(opencode_auth_placeheld("not json", |v| v.into()), None);
    }

    /// A token whose secret names hosts goes to those alone, though its login's rule names more.
    #[test]
    fn a_token_for_some_of_its_logins_hosts_goes_to_those_alone() {
        let rules = [Rule {
            login: "opencode".into(),
            hosts: vec!["api.anthropic.com".into(), "api.openai.com".into()],
        }];
        let secrets = [Secret {
            login: "opencode".into(),
            placeholder: "sk-ant-api03-PPPP".into(),
            real: "sk-ant-api03-REAL".into(),
            bearer_only: false,
            hosts: vec!["api.anthropic.com".into()],
            key_header: Some("x-api-key".into()),
        }];
        assert_eq!(
            header_for(
                "x-api-key",
                b"sk-ant-api03-PPPP",
                "api.anthropic.com",
                &rules,
                &secrets
            ),
            Ok(Some(b"sk-ant-api03-REAL".to_vec()))
        );
        // Another provider's key header is none of this key's: refused, never put in.
        assert!(
            header_for(
                "x-goog-api-key",
                b"sk-ant-api03-PPPP",
                "api.anthropic.com",
                &rules,
                &secrets
            )
            .is_err()
        );
        assert_eq!(
            header_for(
                "authorization",
                b"Bearer sk-ant-api03-PPPP",
                "api.openai.com",
                &rules,
                &secrets
            ),
            Err("a placeholder of the opencode login went to api.openai.com; its token is for api.anthropic.com only".into())
        );
        let opencode = ["opencode".to_string()];
        assert_eq!(
            path_refusal(&opencode, "api.anthropic.com", "/v1/messages"),
            None
        );
        assert!(path_refusal(&opencode, "api.anthropic.com", "/v1/organizations/x").is_some());
        assert_eq!(
            path_refusal(
                &opencode,
                "generativelanguage.googleapis.com",
                "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
            ),
            None
        );
    }
}
