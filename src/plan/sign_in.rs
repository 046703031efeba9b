//! How `ag-box login` signs a person in, as the agent's own CLI would (docs/design.md
//! "Credential broker"): a page that shows a code to paste back (Claude Code's, Gemini CLI's),
//! or a one-time code entered on a page while the sign-in is polled for (Codex's device code);
//! either ends in an authorization code redeemed with a PKCE verifier (RFC 7636).

use serde_json::{Value, json};

use super::oauth::{GEMINI_CLIENT_SECRET, Shape, form};

/// The way an agent's login is signed in to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// A page that shows a code to paste back.
    Paste(SignInPage),
    /// A one-time code entered on a page, the authorization code then polled for.
    Device(DeviceCode),
}

/// Where a person signs in, the page that shows them the code to paste back, and the scopes
/// asked for: as the agent's own CLI asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SignInPage {
    pub authorize_url: &'static str,
    pub redirect_uri: &'static str,
    pub scopes: &'static str,
    /// Query parameters the CLI puts before its own (Claude Code's `code=true`, Google's
    /// `access_type=offline`, which asks for a refresh token).
    pub extra: &'static [(&'static str, &'static str)],
    /// Whether the page shows the code as `code#state` (Claude's), or the code alone.
    pub shows_state: bool,
}

/// A device-code sign-in (Codex's): where the one-time code is asked for and the sign-in
/// polled (paths on the token endpoint's host), the page the person enters it on, and the
/// redirect the authorization code is redeemed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceCode {
    pub user_code_path: &'static str,
    pub poll_path: &'static str,
    pub verify_url: &'static str,
    pub redirect_uri: &'static str,
}

/// A sign-in through a page (OAuth's authorization code with PKCE): the secret the code is
/// redeemed with, its digest the sign-in page is given, and the state that ties the code
/// pasted back to this sign-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignIn {
    pub verifier: String,
    pub challenge: String,
    pub state: String,
}

impl SignIn {
    /// A sign-in from 32 random bytes each for its verifier and its state.
    pub(crate) fn new(verifier: &[u8; 32], state: &[u8; 32]) -> SignIn {
        use base64::Engine;
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use sha2::{Digest, Sha256};
        let verifier = URL_SAFE_NO_PAD.encode(verifier);
        SignIn {
            challenge: URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())),
            verifier,
            state: URL_SAFE_NO_PAD.encode(state),
        }
    }

    /// The page where a person signs in, as the agent's own CLI builds it for a code to paste.
    pub(crate) fn url(&self, client_id: &str, page: &SignInPage) -> String {
        let mut query = page.extra.to_vec();
        query.extend([
            ("client_id", client_id),
            ("response_type", "code"),
            ("redirect_uri", page.redirect_uri),
            ("scope", page.scopes),
            ("code_challenge", &self.challenge),
            ("code_challenge_method", "S256"),
            ("state", &self.state),
        ]);
        format!("{}?{}", page.authorize_url, form(&query))
    }

    /// The code in what the person pasted back (`code#state` where the page shows it so, else
    /// the code alone); an error that says what is wrong with it.
    pub(crate) fn code<'a>(
        &self,
        pasted: &'a str,
        page: &SignInPage,
    ) -> Result<&'a str, &'static str> {
        let pasted = pasted.trim();
        let (code, state) = if page.shows_state {
            pasted.split_once('#').unwrap_or((pasted, ""))
        } else {
            (pasted, self.state.as_str())
        };
        if code.is_empty() || !code.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(if page.shows_state {
                "no code was pasted (the sign-in page shows it as code#state)"
            } else {
                "no code was pasted"
            });
        }
        if state != self.state {
            return Err("the code pasted is of another sign-in (its state is not this one's)");
        }
        Ok(code)
    }
}

/// The body of an authorization code's exchange at the token endpoint of a login of `shape`,
/// as its CLI sends it: Claude Code's JSON (with the sign-in's state), Codex's form, Google's
/// form with the installed app's (public) secret.
pub(crate) fn exchange(
    shape: Shape,
    code: &str,
    verifier: &str,
    state: &str,
    client_id: &str,
    redirect_uri: &str,
) -> Vec<u8> {
    match shape {
        Shape::Claude => json!({
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "client_id": client_id,
            "code_verifier": verifier,
            "state": state,
        })
        .to_string(),
        Shape::Codex => form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("client_id", client_id),
            ("code_verifier", verifier),
        ]),
        Shape::Gemini => form(&[
            ("code", code),
            ("client_id", client_id),
            ("client_secret", GEMINI_CLIENT_SECRET),
            ("redirect_uri", redirect_uri),
            ("grant_type", "authorization_code"),
            ("code_verifier", verifier),
        ]),
    }
    .into_bytes()
}

/// The body that asks for a device code (Codex's).
pub(crate) fn user_code_request(client_id: &str) -> Vec<u8> {
    json!({ "client_id": client_id }).to_string().into_bytes()
}

/// A device code the sign-in server gave: what the poll names, the code the person enters,
/// and how many seconds apart to poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issued {
    pub device_auth_id: String,
    pub user_code: String,
    pub interval_s: u64,
}

/// The answer to a device code's request; None when it holds none. The code is shown to a
/// person: one of other than letters, digits and dashes is none.
pub(crate) fn issued(answer: &[u8]) -> Option<Issued> {
    let v: Value = serde_json::from_slice(answer).ok()?;
    let text = |k: &str| {
        v.get(k)?
            .as_str()
            .filter(|t| !t.is_empty())
            .map(String::from)
    };
    let user_code = text("user_code").or_else(|| text("usercode"))?;
    if user_code.len() > 64
        || !user_code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return None;
    }
    // Codex's server sends the interval as a string of seconds.
    let interval_s = v
        .get("interval")
        .and_then(|i| i.as_u64().or_else(|| i.as_str()?.trim().parse().ok()))
        .unwrap_or(5)
        .clamp(1, 60);
    Some(Issued {
        device_auth_id: text("device_auth_id")?,
        user_code,
        interval_s,
    })
}

/// The body of a device sign-in's poll.
pub(crate) fn poll_request(issued: &Issued) -> Vec<u8> {
    json!({
        "device_auth_id": issued.device_auth_id,
        "user_code": issued.user_code,
    })
    .to_string()
    .into_bytes()
}

/// What a poll of a device sign-in says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Polled {
    /// The person has not signed in yet (403 or 404, as Codex's server says it), or the
    /// server could not say now (429, 5xx): asked again.
    Pending,
    /// Signed in: the authorization code and the verifier it is redeemed with.
    Granted { code: String, verifier: String },
    /// Anything else: the sign-in is over.
    Failed,
}

/// A poll's answer of `status`.
pub(crate) fn polled(status: u16, answer: &[u8]) -> Polled {
    match status {
        403 | 404 | 429 | 500..=599 => Polled::Pending,
        200..=299 => serde_json::from_slice::<Value>(answer)
            .ok()
            .and_then(|v| {
                let text = |k: &str| {
                    v.get(k)?
                        .as_str()
                        .filter(|t| !t.is_empty())
                        .map(String::from)
                };
                Some(Polled::Granted {
                    code: text("authorization_code")?,
                    verifier: text("code_verifier")?,
                })
            })
            .unwrap_or(Polled::Failed),
        _ => Polled::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// RFC 7636's example verifier and challenge.
    const RFC_VERIFIER: [u8; 32] = [
        116, 24, 223, 180, 151, 153, 224, 37, 79, 250, 96, 125, 216, 173, 187, 186, 22, 212, 37,
        77, 105, 214, 191, 240, 91, 88, 5, 88, 83, 132, 141, 121,
    ];

    /// The sign-ins of `plan::broker::RULES`, with their clients.
    fn way(login: &str) -> (&'static str, Way) {
        crate::plan::broker::RULES
            .iter()
            .find_map(|r| {
                let at = r.oauth?;
                Some((at.client_id, at.sign_in?)).filter(|_| r.login == login)
            })
            .unwrap()
    }

    fn page(login: &str) -> (&'static str, SignInPage) {
        match way(login) {
            (client, Way::Paste(page)) => (client, page),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_sign_in_asks_as_claude_code_does_and_takes_back_only_its_own_code() {
        let (client, claude) = page("claude");
        let sign_in = SignIn::new(&RFC_VERIFIER, &[0xfb; 32]);
        assert_eq!(
            sign_in,
            SignIn {
                verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
                challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
                state: "-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_s".into(),
            }
        );
        assert_eq!(
            sign_in.url(client, &claude),
            "https://claude.com/cai/oauth/authorize?code=true\
             &client_id=9d1c250a-e61b-44d9-88ed-5944d1962f5e&response_type=code\
             &redirect_uri=https%3A%2F%2Fplatform.claude.com%2Foauth%2Fcode%2Fcallback\
             &scope=org%3Acreate_api_key+user%3Aprofile+user%3Ainference+user%3Asessions%3Aclaude_code+user%3Amcp_servers+user%3Afile_upload\
             &code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256\
             &state=-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_s"
        );
        let state = &sign_in.state;
        assert_eq!(
            sign_in.code(&format!("  abc-123_x#{state}\n"), &claude),
            Ok("abc-123_x")
        );
        let other = Err("the code pasted is of another sign-in (its state is not this one's)");
        assert_eq!(sign_in.code("abc#other-state", &claude), other);
        assert_eq!(sign_in.code("abc", &claude), other);
        let none = Err("no code was pasted (the sign-in page shows it as code#state)");
        assert_eq!(sign_in.code(&format!("#{state}"), &claude), none);
        assert_eq!(sign_in.code("", &claude), none);
        assert_eq!(sign_in.code(&format!("a\u{1b}[2Jb#{state}"), &claude), none);
        assert_eq!(
            serde_json::from_slice::<Value>(&exchange(
                Shape::Claude,
                "abc",
                &sign_in.verifier,
                &sign_in.state,
                client,
                claude.redirect_uri,
            ))
            .unwrap(),
            json!({
                "grant_type": "authorization_code",
                "code": "abc",
                "redirect_uri": "https://platform.claude.com/oauth/code/callback",
                "client_id": "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
                "code_verifier": "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
                "state": "-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_s",
            })
        );
    }

    #[test]
    fn a_google_sign_in_asks_as_gemini_cli_does_and_takes_the_code_alone() {
        let (client, google) = page("gemini");
        let sign_in = SignIn::new(&RFC_VERIFIER, &[0xfb; 32]);
        assert_eq!(
            sign_in.url(client, &google),
            "https://accounts.google.com/o/oauth2/v2/auth?access_type=offline\
             &client_id=681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com\
             &response_type=code&redirect_uri=https%3A%2F%2Fcodeassist.google.com%2Fauthcode\
             &scope=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fcloud-platform\
             +https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fuserinfo.email\
             +https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fuserinfo.profile\
             &code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256\
             &state=-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_s"
        );
        // Google's page shows the code alone; a `#` in it is the code's.
        assert_eq!(sign_in.code(" 4/0Ab_c-d#e\n", &google), Ok("4/0Ab_c-d#e"));
        assert_eq!(sign_in.code("  \n", &google), Err("no code was pasted"));
        assert_eq!(
            sign_in.code("4/0A\u{7f}b", &google),
            Err("no code was pasted")
        );
        assert_eq!(
            String::from_utf8(exchange(
                Shape::Gemini,
                "4/0Ab",
                "ver",
                "ignored",
                client,
                google.redirect_uri
            ))
            .unwrap(),
            "code=4%2F0Ab&client_id=681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com\
             &client_secret=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\
             &redirect_uri=https%3A%2F%2Fcodeassist.google.com%2Fauthcode\
             &grant_type=authorization_code&code_verifier=ver"
        );
    }

    #[test]
    fn a_device_sign_in_asks_polls_and_redeems_as_codex_does() {
        let (client, Way::Device(device)) = way("codex") else {
            panic!("codex signs in by a device code")
        };
        assert_eq!(
            String::from_utf8(user_code_request(client)).unwrap(),
            r#"{"client_id":"app_EMoamEEZ73f0CkXaXp7hrann"}"#
        );
        let issued_ =
            issued(br#"{"device_auth_id":"dev-1","user_code":"ABCD-1234","interval":"3"}"#);
        assert_eq!(
            issued_,
            Some(Issued {
                device_auth_id: "dev-1".into(),
                user_code: "ABCD-1234".into(),
                interval_s: 3,
            })
        );
        // Its other spelling, a numeric interval, one out of bounds, none.
        assert_eq!(
            issued(br#"{"device_auth_id":"d","usercode":"X","interval":600}"#)
                .map(|i| i.interval_s),
            Some(60)
        );
        assert_eq!(
            issued(br#"{"device_auth_id":"d","user_code":"X"}"#).map(|i| i.interval_s),
            Some(5)
        );
        // A code a terminal would act on is none.
        assert_eq!(
            issued(br#"{"device_auth_id":"d","user_code":"A\u001b[2J"}"#),
            None
        );
        assert_eq!(issued(br#"{"user_code":"X"}"#), None);
        assert_eq!(
            serde_json::from_slice::<Value>(&poll_request(&issued_.unwrap())).unwrap(),
            json!({"device_auth_id": "dev-1", "user_code": "ABCD-1234"})
        );
        assert_eq!(polled(403, b"{}"), Polled::Pending);
        assert_eq!(polled(404, b""), Polled::Pending);
        assert_eq!(polled(503, b"<html>"), Polled::Pending);
        assert_eq!(
            polled(
                200,
                br#"{"authorization_code":"ac","code_challenge":"ch","code_verifier":"cv"}"#
            ),
            Polled::Granted {
                code: "ac".into(),
                verifier: "cv".into()
            }
        );
        assert_eq!(
            polled(200, br#"{"authorization_code":"ac"}"#),
            Polled::Failed
        );
        assert_eq!(polled(410, b"{}"), Polled::Failed);
        assert_eq!(
            String::from_utf8(exchange(
                Shape::Codex,
                "ac",
                "cv",
                "",
                client,
                device.redirect_uri
            ))
            .unwrap(),
            "grant_type=authorization_code&code=ac\
             &redirect_uri=https%3A%2F%2Fauth.openai.com%2Fdeviceauth%2Fcallback\
             &client_id=app_EMoamEEZ73f0CkXaXp7hrann&code_verifier=cv"
        );
    }
}
