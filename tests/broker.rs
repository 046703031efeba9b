//! The credential broker on the rig: a box on node A given gh sees a placeholder where the
//! node's token is, and its proxy puts the token back only in requests to GitHub's hosts. A
//! stand-in for api.github.com and github.com runs over TLS on node C, with a certificate
//! from a test CA node A trusts as it would a real host's (its system bundle); node A's
//! /etc/hosts sends both names there. Traffic goes only to the rig's own addresses.
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use common::{Checked, Cluster, Node, Target};

/// The node's real gh token (as `gh auth login` writes it into hosts.yml).
const REAL: &str = "gho_RigRealTokenRigRealTokenRigRealTo12";
/// A GitHub Enterprise login's token beside it: a placeholder in the box, put in nowhere.
const GHE: &str = "gho_GheRealTokenGheRealTokenGheRealTo34";
/// Plain HTTP on node B, listed: no token may go there.
const PLAIN: &str = "10.200.0.2:8085";
/// The system bundle node A trusts, and the files the test changes there.
const BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What the test changes on the nodes, put back when dropped (pass or fail).
struct Stage<'a> {
    c: &'a Cluster,
}

impl Drop for Stage<'_> {
    fn drop(&mut self) {
        self.c.a.sh(&format!(
            "cp /root/broker-saved.crt {BUNDLE} 2>/dev/null || true
                 sed -i '/github.com/d' /etc/hosts
                 rm -rf /root/.config/gh
                 [ ! -d /root/broker-saved-gh ] || mv /root/broker-saved-gh /root/.config/gh"
        ));
        self.c
            .c
            .sh("systemctl stop broker-standin 2>/dev/null || true");
        self.c
            .b
            .sh("systemctl stop broker-plain 2>/dev/null || true");
    }
}

/// A test CA in node `n`'s /root (`test-ca.pem`, made afresh) and a server certificate by it
/// for `names` (`<stem>.pem`, `<stem>.key`), as a real host's would be.
fn test_ca_cert(n: &Node, stem: &str, names: &[&str]) {
    let sans: Vec<String> = names.iter().map(|h| format!("DNS:{h}")).collect();
    n.sh(&format!(
        "set -e; cd /root
         openssl req -x509 -newkey rsa:2048 -nodes -keyout test-ca.key -out test-ca.pem -days 2 \
           -subj /CN=rig-test-ca -addext basicConstraints=critical,CA:TRUE \
           -addext keyUsage=critical,keyCertSign 2>/dev/null
         openssl req -newkey rsa:2048 -nodes -keyout {stem}.key -out {stem}.csr -subj /CN={first} 2>/dev/null
         printf 'subjectAltName={sans}\\nextendedKeyUsage=serverAuth\\n' > {stem}.ext
         openssl x509 -req -in {stem}.csr -CA test-ca.pem -CAkey test-ca.key -CAcreateserial \
           -out {stem}.pem -days 2 -extfile {stem}.ext 2>/dev/null",
        first = names[0],
        sans = sans.join(",")
    ))
    .ok();
}

fn inside(n: &Node, name: &str, line: &str) -> std::process::Output {
    let quoted = line.replace('\'', r"'\''");
    n.sh(&format!("ag-box exec {name} -- bash -c '{quoted}'"))
}

/// The stand-in GitHub on node C (TLS, a test CA's certificate) and a plain server on node B;
/// node A trusts the test CA, sends GitHub's names to node C, and holds a gh login.
fn stage(c: &Cluster) -> Stage<'_> {
    let stage = Stage { c };
    c.c.put_in_root("tests/egress-server.py", "egress-server.py");
    c.c.sh("systemctl stop broker-standin 2>/dev/null || true")
        .ok();
    test_ca_cert(&c.c, "gh", &["api.github.com", "github.com"]);
    c.c.sh("systemd-run --unit broker-standin --quiet python3 /root/egress-server.py 10.200.0.3 8084 443 /root/gh.pem /root/gh.key")
        .ok();
    c.b.put_in_root("tests/egress-server.py", "egress-server.py");
    c.b.sh("systemctl stop broker-plain 2>/dev/null || true
         systemd-run --unit broker-plain --quiet python3 /root/egress-server.py 10.200.0.2 8085")
        .ok();
    let test_ca = c.c.read("/root/test-ca.pem");
    c.a.write("/root/test-ca.pem", &test_ca);
    c.a.sh(&format!(
        "set -e
         [ -f /root/broker-saved.crt ] || cp {BUNDLE} /root/broker-saved.crt
         cat /root/broker-saved.crt /root/test-ca.pem > {BUNDLE}
         sed -i '/github.com/d' /etc/hosts
         echo '10.200.0.3 api.github.com github.com' >> /etc/hosts
         [ ! -d /root/.config/gh ] || [ -d /root/broker-saved-gh ] || mv /root/.config/gh /root/broker-saved-gh
         rm -rf /root/.config/gh; mkdir -p /root/.config/gh
         printf 'github.com:\\n    users:\\n        octo:\\n            oauth_token: {REAL}\\n    oauth_token: {REAL}\\n    user: octo\\n    git_protocol: https\\nghe.example:\\n    oauth_token: {GHE}\\n    user: dev\\n' > /root/.config/gh/hosts.yml
         # A backup of it (as an editor leaves), which the box must not see either.
         cp /root/.config/gh/hosts.yml /root/.config/gh/hosts.yml~
         printf 'version: \"1\"\\ngit_protocol: https\\n' > /root/.config/gh/config.yml
         chmod 600 /root/.config/gh/hosts.yml
         for i in $(seq 100); do curl -sf https://api.github.com/ >/dev/null && curl -sf http://{PLAIN}/ >/dev/null && exit 0; sleep 0.1; done
         echo 'the stand-ins do not answer' >&2; exit 1"
    ))
    .ok();
    stage
}

/// A box on node A with the policy of this test: GitHub's names (and the private address they
/// have on the rig, which a name alone does not admit), and the plain server.
fn box_up(c: &Cluster, name: &str, creds: &str) {
    c.parked_box(name);
    c.a.sh(&format!(
        "echo '# no node entries in this test' > /etc/box/egress-allow.txt
         ag-box set {name} network=allow allow=api.github.com:443,github.com:443,10.200.0.3:443,{PLAIN} creds={creds}
         ag-box up {name} --node nodeA"
    ))
    .ok();
}

/// What a command in the box printed (its stderr shown when it is not `want`).
#[track_caller]
fn prints(c: &Cluster, name: &str, line: &str, want: &str) {
    let got = inside(&c.a, name, line);
    assert_eq!(got.stdout(), want, "{}", got.stderr());
}

/// The issuer of the certificate a client in the box is shown for api.github.com.
fn issuer(c: &Cluster, name: &str) -> String {
    let out = inside(
        &c.a,
        name,
        "curl -sS -m 10 -o /dev/null -v https://api.github.com/ 2>&1 | grep -i '^\\*  *issuer:'",
    );
    out.ok();
    out.stdout().trim().to_string()
}

#[test]
fn a_box_sees_placeholders_and_the_proxy_puts_the_token_in_only_for_its_hosts() {
    let Some(c) = Cluster::get() else { return };
    let _stage = stage(&c);
    let name = "broker-gh";
    box_up(&c, name, "gh");

    // The box's gh login holds a placeholder of the token's shape, and nothing in the box's
    // view (files, environments and command lines of its processes) holds the real one.
    let hosts = inside(&c.a, name, "cat ~/.config/gh/hosts.yml");
    hosts.ok();
    let shown = hosts
        .stdout()
        .lines()
        .find_map(|l| l.trim().strip_prefix("oauth_token: ").map(str::to_string))
        .expect("a token line in the box's hosts.yml");
    assert_eq!(shown.len(), REAL.len(), "{shown}");
    assert!(shown.starts_with("gho_") && shown != REAL, "{shown}");
    assert_eq!(
        inside(&c.a, name, "cat ~/.config/gh/config.yml").stdout(),
        "version: \"1\"\ngit_protocol: https\n"
    );
    // Only gh's settings and logins are copied (no backup of them), and neither token is
    // anywhere the box can read. Each is put together in the box's shell, so that no command
    // line holds it whole.
    assert_eq!(
        inside(&c.a, name, "ls -A ~/.config/gh").stdout(),
        "config.yml\nhosts.yml\n"
    );
    let (head, tail) = REAL.split_at(10);
    let (ghe_head, ghe_tail) = GHE.split_at(10);
    let search = inside(
        &c.a,
        name,
        &format!(
            "r=\"{head}\"\"{tail}\"; g=\"{ghe_head}\"\"{ghe_tail}\"
             grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -f <(printf \"%s\\n%s\\n\" \"$r\" \"$g\") / | head -5
             cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f <(printf \"%s\\n%s\\n\" \"$r\" \"$g\") || true
             grep -rlsF {shown} ~/.config/gh"
        ),
    );
    assert_eq!(
        search.stdout(),
        "0\n/root/.config/gh/hosts.yml\n",
        "a real token is readable in the box: {}",
        search.stderr()
    );
    let ghe_shown = hosts
        .stdout()
        .lines()
        .skip_while(|l| *l != "ghe.example:")
        .find_map(|l| l.trim().strip_prefix("oauth_token: ").map(str::to_string))
        .expect("the enterprise host's token line");
    assert!(ghe_shown.starts_with("gho_") && ghe_shown != GHE && ghe_shown != shown);

    // curl (through the system bundle) and Python (through SSL_CERT_FILE) trust the node's CA
    // for GitHub's hosts; the stand-in receives the real token, never the placeholder.
    prints(
        &c,
        name,
        &format!("curl -sS -m 10 https://api.github.com/auth -H 'Authorization: token {shown}'"),
        &format!("auth token {REAL}\n"),
    );
    prints(
        &c,
        name,
        &format!("curl -sS -m 10 -u x-access-token:{shown} https://github.com/auth"),
        &format!(
            "auth Basic {}\n",
            STANDARD.encode(format!("x-access-token:{REAL}"))
        ),
    );
    prints(
        &c,
        name,
        &format!(
            "python3 -c 'import urllib.request as u; print(u.urlopen(u.Request(\"https://api.github.com/auth\", headers={{\"Authorization\": \"Bearer {shown}\"}}), timeout=10).read().decode(), end=\"\")'"
        ),
        &format!("auth Bearer {REAL}\n"),
    );
    // The enterprise token is for another host: its placeholder reaches github.com as it is.
    prints(
        &c,
        name,
        &format!(
            "curl -sS -m 10 https://api.github.com/auth -H 'Authorization: token {ghe_shown}'"
        ),
        &format!("auth token {ghe_shown}\n"),
    );
    assert!(
        issuer(&c, name).contains("ag-box node CA"),
        "{}",
        issuer(&c, name)
    );

    // Put where GitHub would keep it (a file's path in a repository), it is refused.
    let got = inside(
        &c.a,
        name,
        &format!(
            "curl -sS -m 10 -i -X PUT https://api.github.com/repos/a/b/contents/{shown} -H 'Authorization: token {shown}' -d x"
        ),
    );
    // (The CONNECT's own answer comes first.)
    let out = got.stdout();
    assert!(out.contains("\r\n\r\nHTTP/1.1 403 Forbidden"), "{out}");
    assert!(
        out.contains("placeholder of the gh login went to api.github.com in the request's URL"),
        "{out}"
    );

    // The placeholder sent over plain HTTP to a listed host is refused, and said why.
    let got = inside(
        &c.a,
        name,
        &format!("curl -sS -m 10 -i http://{PLAIN}/auth -H 'Authorization: token {shown}'"),
    );
    let out = got.stdout();
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains("a placeholder of the gh login went to 10.200.0.2:8085 over plain HTTP"),
        "{out}"
    );
    // Without the placeholder the same request passes: the refusal was the broker's.
    let got = inside(&c.a, name, &format!("curl -sS -m 10 http://{PLAIN}/auth"));
    assert_eq!(got.stdout(), "auth None\n");

    // Each brokered request is a line of the box's egress log.
    let log =
        c.a.sh(&format!("ag-box egress {name} --json --last 100"))
            .ok()
            .stdout();
    let v: serde_json::Value = serde_json::from_str(&log).unwrap();
    let decisions = v["decisions"].as_array().unwrap();
    assert!(
        decisions.iter().any(|d| d["host"] == "api.github.com"
            && d["method"] == "GET"
            && d["path"] == "/auth"
            && d["rule"]
                .as_str()
                .is_some_and(|r| r.ends_with("(token put in by the broker)"))),
        "{log}"
    );
    assert!(
        decisions.iter().any(|d| d["host"] == "10.200.0.2"
            && d["allowed"] == false
            && d["reason"]
                .as_str()
                .is_some_and(|r| r.contains("placeholder of the gh login"))),
        "{log}"
    );
    // doctor checks the node's CA the start made.
    let doctor = c.a.sh("ag-box doctor --json || true").stdout();
    let v: serde_json::Value = serde_json::from_str(&doctor).unwrap();
    let ca = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ch| ch["check"] == "credential broker CA")
        .cloned();
    assert_eq!(
        ca,
        Some(serde_json::json!({
            "check": "credential broker CA",
            "status": "ok",
            "detail": "/var/lib/ag-box/ca: ready, key root's alone",
            "fix": null
        }))
    );
    // creds says what the broker holds and for whom.
    let creds: serde_json::Value =
        serde_json::from_str(&c.a.sh("ag-box creds --json").ok().stdout()).unwrap();
    let gh = &creds["logins"][0];
    assert_eq!(
        (&gh["login"], &gh["accounts"], &gh["tokens"], &gh["hosts"],),
        (
            &serde_json::json!("gh"),
            &serde_json::json!(["octo@github.com"]),
            &serde_json::json!(1),
            &serde_json::json!(["github.com", "api.github.com"]),
        ),
        "{creds}"
    );
    // (Boxes of other tests on the host's network may be listed as unbrokered; never this one.)
    assert!(
        !gh["unbrokered_for"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(name)),
        "{creds}"
    );
    assert!(
        gh["brokered_for"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(name)),
        "{creds}"
    );
    let text = c.a.sh("ag-box creds").ok().stdout();
    assert!(
        text.starts_with("gh: octo@github.com (1 token held), for github.com, api.github.com\n"),
        "{text}"
    );
    c.a.sh(&format!("ag-box park {name}")).ok();

    // A box not given gh sees none of it, and its TLS to GitHub is the stand-in's own, end to
    // end (tunnelled: the broker does not stand in where it has nothing to put in).
    let other = "broker-none";
    box_up(&c, other, "none");
    let gh = inside(
        &c.a,
        other,
        "test -e ~/.config/gh && echo present || echo absent",
    );
    assert_eq!(gh.stdout(), "absent\n");
    assert!(
        issuer(&c, other).contains("rig-test-ca"),
        "{}",
        issuer(&c, other)
    );
    c.a.sh(&format!("ag-box park {other}")).ok();
}

/// Claude Code's API key (in the node's `~/.claude/settings.json`) and Codex's (its
/// `auth.json`, as `codex login --with-api-key` writes it).
const ANTHROPIC_KEY: &str = "sk-ant-api03-RigRealAnthropicKeyRigRealAnthropicKey00";
const OPENAI_KEY: &str = "sk-proj-RigRealOpenaiKeyRigRealOpenaiKeyRigRealOpenai00";
/// Grok's (`apiKey` in its `~/.grok/user-settings.json`), for xAI's API.
const XAI_KEY: &str = "xai-RigRealXaiKeyRigRealXaiKeyRigRealXaiKeyRigRealXai00";
/// Another service's key the operator keeps in Claude Code's settings: no box reads it either.
const OTHER_KEY: &str = "sk-proj-RigOtherServiceKeyRigOtherServiceKey000000000";
const AGENTS: &str = "/usr/local/lib/ag-box-test-agents/bin";
/// The box of the API-key test.
const KEYED: &str = "broker-keys";

/// What the API-key test changes on the nodes, put back when dropped (pass or fail).
struct ModelStage<'a> {
    c: &'a Cluster,
}

impl Drop for ModelStage<'_> {
    fn drop(&mut self) {
        self.c.a.sh(&format!(
            "cp /root/broker-saved.crt {BUNDLE} 2>/dev/null || true
             sed -i '/anthropic.com/d' /etc/hosts
             rm -f /usr/local/bin/claude /usr/local/bin/codex /root/.claude/.credentials.json.redeemed
             for f in /root/.claude/settings.json /root/.claude/.credentials.json /root/.codex/auth.json /root/.codex/config.toml /root/.claude.json /root/.grok/user-settings.json /root/.gemini/oauth_creds.json /root/.local/share/opencode/auth.json; do
               rm -f $f; [ ! -e $f.broker-saved ] || mv $f.broker-saved $f
             done"
        ));
        self.c
            .c
            .sh("systemctl stop models-standin 2>/dev/null || true");
    }
}

/// The stand-in model server over TLS on node C (a test CA's certificate for the model APIs'
/// hosts); node A trusts the test CA, sends those names to node C, and holds both agents' API
/// keys and their CLIs.
fn stage_models(c: &Cluster) -> ModelStage<'_> {
    let stage = ModelStage { c };
    c.c.put_in_root("tests/agents/standin.py", "standin.py");
    c.c.sh("systemctl stop models-standin 2>/dev/null || true")
        .ok();
    test_ca_cert(
        &c.c,
        "models",
        &[
            "api.anthropic.com",
            "api.openai.com",
            "platform.claude.com",
            "api.x.ai",
            "chatgpt.com",
            "auth.openai.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
        ],
    );
    c.c.sh(
        "set -e; : > /root/models.log
         systemd-run --unit models-standin --quiet python3 /root/standin.py --host 10.200.0.3 --port 443 \
           --log /root/models.log --tls-cert /root/models.pem --tls-key /root/models.key",
    )
    .ok();
    let test_ca = c.c.read("/root/test-ca.pem");
    c.a.write("/root/test-ca.pem", &test_ca);
    let settings = serde_json::json!({"env": {
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "OTHER_SERVICE_KEY": OTHER_KEY,
    }});
    let claude_json = serde_json::json!({
        "hasCompletedOnboarding": true,
        "projects": {format!("/root/{KEYED}"): {"hasTrustDialogAccepted": true}},
    });
    c.a.sh(&format!(
        "set -e
         [ -f /root/broker-saved.crt ] || cp {BUNDLE} /root/broker-saved.crt
         cat /root/broker-saved.crt /root/test-ca.pem > {BUNDLE}
         sed -i '/anthropic.com/d' /etc/hosts
         echo '10.200.0.3 api.anthropic.com api.openai.com platform.claude.com api.x.ai chatgpt.com auth.openai.com cloudcode-pa.googleapis.com oauth2.googleapis.com' >> /etc/hosts
         mkdir -p /root/.claude /root/.codex /root/.grok /root/.gemini /root/.local/share/opencode
         for f in /root/.claude/settings.json /root/.claude/.credentials.json /root/.codex/auth.json /root/.codex/config.toml /root/.claude.json /root/.grok/user-settings.json /root/.gemini/oauth_creds.json /root/.local/share/opencode/auth.json; do
           [ ! -e $f ] || [ -e $f.broker-saved ] || mv $f $f.broker-saved
         done
         ln -sf {AGENTS}/claude {AGENTS}/codex /usr/local/bin/
         echo '{settings}' > /root/.claude/settings.json
         echo '{claude_json}' > /root/.claude.json
         printf '{{\"auth_mode\": \"apikey\", \"OPENAI_API_KEY\": \"{OPENAI_KEY}\"}}' > /root/.codex/auth.json
         printf '{{\"apiKey\": \"{XAI_KEY}\", \"baseURL\": \"https://api.x.ai/v1\", \"defaultModel\": \"grok-4\"}}' > /root/.grok/user-settings.json
         chmod 600 /root/.codex/auth.json
         cat > /root/.codex/config.toml <<EOF
model = \"gpt-standin\"
approval_policy = \"never\"
sandbox_mode = \"read-only\"
check_for_update_on_startup = false
[analytics]
enabled = false
[features]
plugins = false
apps = false
# The stand-in reads no zstd (Python's library has none); the broker never reads a model
# request's body either way.
enable_request_compression = false
[projects.\"/root/{KEYED}\"]
trust_level = \"trusted\"
EOF
         # No login of an earlier test left in the store for the nodes to take.
         curl -sf -o /dev/null {SIGNED} -X DELETE {ACCOUNT_URL}
         curl -sf -o /dev/null {SIGNED} -X DELETE {CODEX_ACCOUNT_URL}
         curl -sf -o /dev/null {SIGNED} -X DELETE {ACCOUNTS}/gemini-oauth.json
         for i in $(seq 100); do curl -sf https://api.anthropic.com/v1/models >/dev/null && exit 0; sleep 0.1; done
         echo 'the stand-in does not answer' >&2; exit 1"
    ))
    .ok();
    stage
}

/// Where the store (the rig's S3 server) keeps the broker's copy of Claude Code's OAuth login,
/// and curl's arguments to sign a request to it as the nodes do.
const ACCOUNT_URL: &str = "http://10.200.0.1:5001/agent-boxes/accounts/claude-oauth.json";
/// And of Codex's `ChatGPT` login; where the store keeps them all.
const CODEX_ACCOUNT_URL: &str = "http://10.200.0.1:5001/agent-boxes/accounts/codex-oauth.json";
const ACCOUNTS: &str = "http://10.200.0.1:5001/agent-boxes/accounts";
const SIGNED: &str = "--aws-sigv4 aws:amz:us-east-1:s3 --user test:test";
/// restic's view of the rig's repository.
const RESTIC_ENV: &str = "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/restic \
    RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test";

/// The real Claude Code CLI's turn in box `name` on `n`: it answers `prompt`, and each model
/// request the stand-in got for it carried `credential` (as `Authorization` or `x-api-key`).
fn claude_turn(c: &Cluster, n: &Node, name: &str, prompt: &str, credential: &str) {
    let before = answered(c, "anthropic.messages").len();
    let out = inside(
        n,
        name,
        &format!("timeout 120 {AGENTS}/claude -p '{prompt}' --output-format json"),
    );
    assert!(
        out.stdout()
            .contains(&format!("STANDIN-REPLY turns=1 last={prompt}")),
        "{out:?}"
    );
    let messages = answered(c, "anthropic.messages");
    assert!(
        messages.len() > before
            && messages[before..]
                .iter()
                .all(|m| m["auth"] == credential && m["host"] == "api.anthropic.com"),
        "{messages:#?}"
    );
}

/// The 8 requests for models the boxes made (the stage's own readiness probes carry no
/// credential) each carried the OAuth token `issued`.
fn all_models_carried(c: &Cluster, issued: &str) {
    let models: Vec<_> = answered(c, "models")
        .into_iter()
        .filter(|m| !m["auth"].is_null())
        .collect();
    assert!(
        models.len() >= 8
            && models
                .iter()
                .all(|m| m["auth"] == format!("Bearer {issued}")),
        "{models:#?}"
    );
}

/// The stand-in's log lines of `summary` (the model requests it answered).
fn answered(c: &Cluster, summary: &str) -> Vec<serde_json::Value> {
    c.c.sh("cat /root/models.log")
        .ok()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["summary"] == summary)
        .collect()
}

#[test]
fn agents_api_keys_never_enter_a_box_and_reach_only_their_apis() {
    let Some(c) = Cluster::get() else { return };
    the_agent_clis(&c.a, &["claude", "codex"]);
    let _stage = stage_models(&c);
    let name = KEYED;
    c.parked_box(name);
    c.a.sh(&format!(
        "echo '# no node entries in this test' > /etc/box/egress-allow.txt
         ag-box set {name} agent=none network=allow allow=api.anthropic.com:443,api.openai.com:443,api.x.ai:443,10.200.0.3:443,{PLAIN} creds=claude,codex,grok
         ag-box up {name} --node nodeA"
    ))
    .ok();

    // Both keys are placeholders of their shape in the box's files; neither key is anywhere
    // the box can read (files, environments, command lines).
    let settings: serde_json::Value = serde_json::from_str(
        &inside(&c.a, name, "cat ~/.claude/settings.json")
            .ok()
            .stdout(),
    )
    .unwrap();
    let claude_shown = settings["env"]["ANTHROPIC_API_KEY"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(settings["env"]["DISABLE_TELEMETRY"], "1");
    let auth: serde_json::Value =
        serde_json::from_str(&inside(&c.a, name, "cat ~/.codex/auth.json").ok().stdout()).unwrap();
    let codex_shown = auth["OPENAI_API_KEY"].as_str().unwrap().to_string();
    assert_eq!(auth["auth_mode"], "apikey");
    for (shown, real, prefix) in [
        (&claude_shown, ANTHROPIC_KEY, "sk-ant-api03-"),
        (&codex_shown, OPENAI_KEY, "sk-proj-"),
    ] {
        assert!(
            shown.len() == real.len() && shown.starts_with(prefix) && shown != real,
            "{shown}"
        );
    }
    let other_shown = settings["env"]["OTHER_SERVICE_KEY"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(other_shown.starts_with("sk-proj-") && other_shown != OTHER_KEY);
    let (a_head, a_tail) = ANTHROPIC_KEY.split_at(16);
    let (o_head, o_tail) = OPENAI_KEY.split_at(12);
    let (x_head, x_tail) = OTHER_KEY.split_at(12);
    let (g_head, g_tail) = XAI_KEY.split_at(12);
    let search = inside(
        &c.a,
        name,
        &format!(
            "a=\"{a_head}\"\"{a_tail}\"; o=\"{o_head}\"\"{o_tail}\"; x=\"{x_head}\"\"{x_tail}\"; g=\"{g_head}\"\"{g_tail}\"
             grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -f <(printf \"%s\\n%s\\n%s\\n%s\\n\" \"$a\" \"$o\" \"$x\" \"$g\") / | head -5
             cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f <(printf \"%s\\n%s\\n%s\\n%s\\n\" \"$a\" \"$o\" \"$x\" \"$g\") || true"
        ),
    );
    assert_eq!(
        search.stdout(),
        "0\n",
        "a real key is readable in the box: {}",
        search.stderr()
    );

    // The real CLIs complete a turn against "Anthropic" and "OpenAI" (the stand-in, over
    // TLS, trusted as a real host would be); the stand-in receives the real keys.
    claude_turn(&c, &c.a, name, "Hi from a keyed box?", ANTHROPIC_KEY);
    let out = inside(
        &c.a,
        name,
        &format!(
            "timeout 120 {AGENTS}/codex exec --skip-git-repo-check --json 'Hi codex from a keyed box?' </dev/null"
        ),
    );
    assert!(
        out.stdout()
            .contains("STANDIN-REPLY turns=1 last=Hi codex from a keyed box?"),
        "{out:?}"
    );
    let responses = answered(&c, "openai.responses");
    assert!(!responses.is_empty());
    assert!(
        responses
            .iter()
            .all(|m| m["auth"] == format!("Bearer {OPENAI_KEY}")),
        "{responses:?}"
    );
    // Grok's key: a placeholder of its shape in its settings (where they send requests kept),
    // the real key in a request to xAI's API.
    let grok: serde_json::Value = serde_json::from_str(
        &inside(&c.a, name, "cat ~/.grok/user-settings.json")
            .ok()
            .stdout(),
    )
    .unwrap();
    let grok_shown = grok["apiKey"].as_str().unwrap().to_string();
    assert!(
        grok_shown.len() == XAI_KEY.len()
            && grok_shown.starts_with("xai-")
            && grok_shown != XAI_KEY,
        "{grok}"
    );
    assert_eq!(
        (&grok["baseURL"], &grok["defaultModel"]),
        (
            &serde_json::json!("https://api.x.ai/v1"),
            &serde_json::json!("grok-4")
        )
    );
    let out = inside(
        &c.a,
        name,
        &format!(
            "curl -sS -m 30 https://api.x.ai/v1/chat/completions -H 'Authorization: Bearer {grok_shown}' \
               -H 'content-type: application/json' -d '{{\"model\":\"grok-4\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hi grok?\"}}]}}'"
        ),
    );
    assert!(
        out.ok()
            .stdout()
            .contains("STANDIN-REPLY turns=1 last=Hi grok?"),
        "{out:?}"
    );
    let chats = answered(&c, "openai.chat");
    assert!(
        !chats.is_empty()
            && chats
                .iter()
                .all(|m| m["auth"] == format!("Bearer {XAI_KEY}") && m["host"] == "api.x.ai"),
        "{chats:?}"
    );

    // A key's placeholder anywhere else is refused: to the other API, to its own API but
    // for what is no model request (one that could mint another key), or to a listed host
    // without a rule (plain HTTP).
    let refused = inside(
        &c.a,
        name,
        &format!(
            "curl -sS -m 10 https://api.openai.com/v1/models -H 'x-api-key: {claude_shown}'; echo
             curl -sS -m 10 -X POST https://api.anthropic.com/api/oauth/claude_cli/create_api_key -H 'x-api-key: {claude_shown}'; echo
             curl -sS -m 10 http://{PLAIN}/ -H 'Authorization: Bearer {codex_shown}'; echo
             curl -sS -m 10 https://api.openai.com/v1/models -H 'Authorization: Bearer {grok_shown}'"
        ),
    );
    let seen = refused.stdout();
    assert!(
        seen.contains("a placeholder of the claude login went to api.openai.com; its token is for api.anthropic.com only")
            && seen.contains("the broker puts the claude key only into model requests (/v1/messages, /v1/models), not into one to /api/oauth/claude_cli/create_api_key")
            && seen.contains("a placeholder of the codex login went to 10.200.0.2:8085 over plain HTTP")
            && seen.contains("a placeholder of the grok login went to api.openai.com; its token is for api.x.ai only"),
        "{seen}"
    );
    let log = c.c.sh("cat /root/models.log").ok().stdout();
    assert!(
        !log.contains("/api/oauth/claude_cli/create_api_key"),
        "the refused request reached the stand-in: {log}"
    );
    // `creds` names both keys and the box given them.
    let creds: serde_json::Value =
        serde_json::from_str(&c.a.sh("ag-box creds --json").ok().stdout()).unwrap();
    let login = |l: &str| {
        creds["logins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["login"] == l)
            .cloned()
            .unwrap_or_else(|| panic!("no {l} in {creds:#}"))
    };
    for (l, host) in [
        ("claude", "api.anthropic.com"),
        ("codex", "api.openai.com"),
        ("grok", "api.x.ai"),
    ] {
        let row = login(l);
        assert_eq!(
            (&row["tokens"], &row["hosts"]),
            (&serde_json::json!(1), &serde_json::json!([host])),
            "{row:#}"
        );
        assert!(
            row["brokered_for"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(name)),
            "{row:#}"
        );
    }
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// Claude Code's OAuth login on node A (as `claude /login` writes it), its access token
/// expired an hour ago: the broker refreshes it at the stand-in's token endpoint.
const OAUTH_ACCESS: &str = "sk-ant-oat01-RigRealOauthAccessRigRealOauthAccessRigReal00";
const OAUTH_REFRESH: &str = "sk-ant-ort01-RigRealOauthRefreshRigRealOauthRefreshRigRe00";

/// The real agent CLIs `tools` are on node `n`: a test of them fails without.
fn the_agent_clis(n: &Node, tools: &[&str]) {
    for tool in tools {
        if !n.sh(&format!("test -x {AGENTS}/{tool}")).status.success() {
            common::missing("the agent CLIs (tests/rig.sh install)");
        }
    }
}

/// The store's copy of an OAuth login (`url`: [`ACCOUNT_URL`] or [`CODEX_ACCOUNT_URL`]), as
/// text and parsed.
fn store_account(c: &Cluster, url: &str) -> (String, serde_json::Value) {
    let text = c.a.sh(&format!("curl -sf {SIGNED} {url}")).ok().stdout();
    let parsed = serde_json::from_str(&text).unwrap();
    (text, parsed)
}

/// None of `secrets` is anywhere box `name` can read: its files, its processes' environments
/// and command lines (the search itself names each in two halves).
fn nowhere_in_the_box(n: &Node, name: &str, secrets: &[&str]) {
    let needles: Vec<String> = secrets
        .iter()
        .map(|t| {
            let (head, tail) = t.split_at(10);
            format!("\"{head}\"\"{tail}\"")
        })
        .collect();
    let search = inside(
        n,
        name,
        &format!(
            "printf '%s\\n' {} > /tmp/real
             grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude=real -f /tmp/real / | head -5
             cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f /tmp/real || true",
            needles.join(" ")
        ),
    );
    assert_eq!(search.stdout(), "0\n", "{}", search.stderr());
}

/// The stand-in's token endpoint was asked once, for a refresh of `refresh` by `client` at
/// `host`, and answered it; the access token it issued.
fn refreshed_once(c: &Cluster, refresh: &str, client: &str, host: &str) -> String {
    let refreshes = token_lines(c);
    assert_eq!(refreshes.len(), 1, "{refreshes:#?}");
    let r = &refreshes[0];
    assert_eq!(
        (
            &r["grant"],
            &r["refresh_token"],
            &r["client_id"],
            &r["host"],
            &r["status"]
        ),
        (
            &serde_json::json!("refresh_token"),
            &serde_json::json!(refresh),
            &serde_json::json!(client),
            &serde_json::json!(host),
            &serde_json::json!(200)
        )
    );
    r["issued"].as_str().unwrap().to_string()
}

/// Parked box `name` up on node A, guarded, given the login `creds` and allowed `hosts` (and
/// the stand-in and the plain host); its copy of `file` (in HOME), which it may write.
fn guarded_copy(
    c: &Cluster,
    name: &str,
    hosts: &str,
    creds: &str,
    file: &str,
) -> serde_json::Value {
    c.a.sh(&format!(
        "echo '# no node entries in this test' > /etc/box/egress-allow.txt
         ag-box set {name} agent=none network=allow allow={hosts},10.200.0.3:443,{PLAIN} creds={creds}
         ag-box up {name} --node nodeA"
    ))
    .ok();
    serde_json::from_str(
        &inside(&c.a, name, &format!("test -w ~/{file} && cat ~/{file}"))
            .ok()
            .stdout(),
    )
    .unwrap()
}

/// When a login that expired an hour ago expired (ms), and Claude Code's file of it.
fn expired_login() -> (u64, String) {
    let expired = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 3600)
        * 1000;
    let file = serde_json::json!({"claudeAiOauth": {
        "accessToken": OAUTH_ACCESS,
        "refreshToken": OAUTH_REFRESH,
        "expiresAt": expired,
        "scopes": ["user:inference"],
    }})
    .to_string();
    (expired, file)
}

/// The stand-in's token endpoint lines (`oauth.token`) and model requests since the start.
fn token_lines(c: &Cluster) -> Vec<serde_json::Value> {
    answered(c, "oauth.token")
}

#[test]
fn claudes_oauth_login_never_enters_a_box_and_is_refreshed_once_by_the_broker() {
    let Some(c) = Cluster::get() else { return };
    the_agent_clis(&c.a, &["claude"]);
    let _stage = stage_models(&c);
    // The login alone: no API key in the settings, which Claude Code would prefer.
    let expired = expired_login().0;
    let credentials = serde_json::json!({"claudeAiOauth": {
        "accessToken": OAUTH_ACCESS,
        "refreshToken": OAUTH_REFRESH,
        "expiresAt": expired,
        "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "max",
    }, "mcpOAuth": {"srv": {"accessToken": "mcp-RigSecretMcpToken"}}});
    c.a.sh(&format!(
        "set -e
         echo '{{\"env\": {{\"DISABLE_AUTOUPDATER\": \"1\", \"DISABLE_TELEMETRY\": \"1\", \"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC\": \"1\"}}}}' > /root/.claude/settings.json
         echo '{credentials}' > /root/.claude/.credentials.json
         chmod 600 /root/.claude/.credentials.json"
    ))
    .ok();
    let boxes = ["oauth-1", "oauth-2"];
    for name in boxes {
        c.parked_box(name);
        c.a.sh(&format!(
            "echo '# no node entries in this test' > /etc/box/egress-allow.txt
             ag-box set {name} agent=none network=allow allow=api.anthropic.com:443,platform.claude.com:443,10.200.0.3:443,{PLAIN} creds=claude
             ag-box up {name} --node nodeA"
        ))
        .ok();
    }

    // Each box sees its login with placeholders of the tokens' shapes, good for a year, and
    // nothing else of the file; no real token is anywhere it can read.
    let mut shown = Vec::new();
    for name in boxes {
        let copy: serde_json::Value = serde_json::from_str(
            &inside(&c.a, name, "cat ~/.claude/.credentials.json")
                .ok()
                .stdout(),
        )
        .unwrap();
        let login = &copy["claudeAiOauth"];
        let access = login["accessToken"].as_str().unwrap().to_string();
        let refresh = login["refreshToken"].as_str().unwrap().to_string();
        assert!(
            access.starts_with("sk-ant-oat01-")
                && refresh.starts_with("sk-ant-ort01-")
                && access != OAUTH_ACCESS
                && refresh != OAUTH_REFRESH,
            "{copy}"
        );
        assert!(
            login["expiresAt"].as_u64().unwrap() > expired + 300 * 86_400_000,
            "{copy}"
        );
        assert_eq!(
            (&login["subscriptionType"], copy.get("mcpOAuth")),
            (&serde_json::json!("max"), None),
            "{copy}"
        );
        shown.push((access, refresh));
    }
    assert_ne!(shown[0], shown[1], "two boxes share a placeholder");
    let no_real = |name: &str, tokens: &[&str]| {
        let patterns: Vec<String> = tokens
            .iter()
            .map(|t| {
                let (head, tail) = t.split_at(16);
                format!("\"{head}\"\"{tail}\"")
            })
            .collect();
        let search = inside(
            &c.a,
            name,
            &format!(
                "printf '%s\\n' {} > /tmp/real
                 grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude=real -f /tmp/real / | head -5
                 cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f /tmp/real || true",
                patterns.join(" ")
            ),
        );
        assert_eq!(
            search.stdout(),
            "0\n",
            "a real token is readable in {name}: {}",
            search.stderr()
        );
    };
    for name in boxes {
        no_real(
            name,
            &[OAUTH_ACCESS, OAUTH_REFRESH, "mcp-RigSecretMcpToken"],
        );
    }

    // Both boxes at once, each with requests in parallel, while the token is expired: the
    // broker refreshes it once, and every request goes with the new token.
    let parallel = boxes
        .iter()
        .zip(&shown)
        .map(|(name, (access, _))| {
            format!(
                "ag-box exec {name} -- bash -c 'for i in 1 2 3 4; do curl -sS -m 30 -o /dev/null -w \"%{{http_code}}\\n\" https://api.anthropic.com/v1/models -H \"Authorization: Bearer {access}\" & done; wait' &"
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let codes = c.a.sh(&format!("{parallel}\nwait")).ok().stdout();
    assert_eq!(codes, "200\n".repeat(8), "{codes}");
    let refreshes = token_lines(&c);
    assert_eq!(refreshes.len(), 1, "{refreshes:#?}");
    assert_eq!(
        (&refreshes[0]["refresh_token"], &refreshes[0]["status"]),
        (&serde_json::json!(OAUTH_REFRESH), &serde_json::json!(200)),
    );
    let issued = refreshes[0]["issued"].as_str().unwrap().to_string();
    all_models_carried(&c, &issued);
    // The node's file holds the new tokens (the refresh token rotated), still root's alone.
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.claude/.credentials.json")).unwrap();
    assert_eq!(node["claudeAiOauth"]["accessToken"], issued.as_str());
    assert!(
        node["claudeAiOauth"]["refreshToken"]
            .as_str()
            .unwrap()
            .starts_with("sk-ant-ort01-STANDIN")
    );
    assert_eq!(
        node["mcpOAuth"]["srv"]["accessToken"],
        "mcp-RigSecretMcpToken"
    );
    assert_eq!(
        c.a.sh("stat -c '%U %a' /root/.claude/.credentials.json")
            .ok()
            .stdout(),
        "root 600\n"
    );

    // The real Claude Code CLI completes a turn with the login: the stand-in gets the token.
    claude_turn(
        &c,
        &c.a,
        boxes[0],
        "Hi from an OAuth box?",
        &format!("Bearer {issued}"),
    );

    // The box's own refresh is answered by the broker with its placeholders (the stand-in
    // sees nothing); a login's code exchange, which would replace the node's login, and the
    // refresh token's placeholder sent anywhere but there are refused.
    let (access, refresh) = &shown[1];
    let own = inside(
        &c.a,
        boxes[1],
        &format!(
            "curl -sS -m 10 https://platform.claude.com/v1/oauth/token -H 'content-type: application/json' \
               -d '{{\"grant_type\":\"refresh_token\",\"refresh_token\":\"{refresh}\",\"client_id\":\"x\"}}'"
        ),
    );
    let answer: serde_json::Value = serde_json::from_str(own.ok().stdout().trim()).unwrap();
    assert_eq!(
        (&answer["access_token"], &answer["refresh_token"]),
        (&serde_json::json!(access), &serde_json::json!(refresh)),
        "{answer}"
    );
    let refused = inside(
        &c.a,
        boxes[1],
        &format!(
            "curl -sS -m 10 https://platform.claude.com/v1/oauth/token -d 'grant_type=authorization_code&code=abc'; echo
             curl -sS -m 10 https://api.anthropic.com/v1/models -H 'Authorization: Bearer {refresh}'; echo
             curl -sS -m 10 -X POST https://api.anthropic.com/api/oauth/claude_cli/create_api_key -H 'Authorization: Bearer {access}'"
        ),
    );
    let seen = refused.stdout();
    assert!(
        seen.contains("which the authorization_code grant would replace")
            && seen.contains("the claude login's refresh token goes to platform.claude.com only")
            && seen.contains("the broker puts the claude key only into model requests"),
        "{seen}"
    );
    assert_eq!(token_lines(&c).len(), 1);

    // Expired again, and no fresher copy in the store to take: the real CLI's next turn, in
    // the other box, gets a freshly refreshed token.
    c.a.sh(&format!(
        "python3 -c 'import json; p=\"/root/.claude/.credentials.json\"; d=json.load(open(p)); d[\"claudeAiOauth\"][\"expiresAt\"]={expired}; json.dump(d, open(p, \"w\"))'
         curl -sf -o /dev/null {SIGNED} -X DELETE {ACCOUNT_URL}"
    ))
    .ok();
    // (The token the stand-in issues next: its refreshes are numbered.)
    let second = "sk-ant-oat01-STANDIN2".to_string() + &"A".repeat(80);
    claude_turn(&c, &c.a, boxes[1], "Hi again?", &format!("Bearer {second}"));
    let refreshes = token_lines(&c);
    assert_eq!(refreshes.len(), 2, "{refreshes:#?}");
    assert_eq!(refreshes[1]["issued"], second.as_str());
    for name in boxes {
        no_real(name, &[&issued, &second]);
    }

    // `creds` shows the login, when its token expires, and both boxes.
    let creds: serde_json::Value =
        serde_json::from_str(&c.a.sh("ag-box creds --json").ok().stdout()).unwrap();
    let row = creds["logins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["file"] == ".claude/.credentials.json")
        .cloned()
        .unwrap();
    assert_eq!(
        (&row["login"], &row["tokens"]),
        (&serde_json::json!("claude"), &serde_json::json!(1)),
        "{row:#}"
    );
    assert!(row["expires"].as_str().unwrap().ends_with('Z'), "{row:#}");
    for name in boxes {
        assert!(
            row["brokered_for"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(name)),
            "{row:#}"
        );
        c.a.sh(&format!("ag-box park {name}")).ok();
    }
}

/// What the cross-node test changes on nodes B and C, put back when dropped.
struct SharedStage<'a> {
    c: &'a Cluster,
}

impl Drop for SharedStage<'_> {
    fn drop(&mut self) {
        for n in [&self.c.b, &self.c.c] {
            n.sh(&format!(
                "cp /root/broker-saved.crt {BUNDLE} 2>/dev/null || true
                 sed -i '/anthropic.com/d' /etc/hosts
                 rm -f /root/.claude/.credentials.json.redeemed
                 for f in /root/.claude/.credentials.json /root/.claude/settings.json; do
                   rm -f $f; [ ! -e $f.broker-saved ] || mv $f.broker-saved $f
                 done"
            ));
        }
        self.c.a.sh(&format!(
            "curl -s -o /dev/null {SIGNED} -X DELETE {ACCOUNT_URL}"
        ));
    }
}

/// The login `globals push` copied to every node: nodes A and B redeem it once between them (the
/// store's account lease), even after node C died holding that lease; both boxes go on.
#[test]
fn nodes_sharing_a_login_redeem_it_once_and_a_dead_nodes_lease_holds_them_only_until_it_ends() {
    let Some(c) = Cluster::get() else { return };
    let _stage = stage_models(&c);
    let _shared = SharedStage { c: &c };
    let (expired, credentials) = expired_login();
    let test_ca = c.c.read("/root/test-ca.pem");
    for n in c.all() {
        n.write("/root/test-ca.pem", &test_ca);
        n.sh(&format!(
            "set -e
             [ -f /root/broker-saved.crt ] || cp {BUNDLE} /root/broker-saved.crt
             cat /root/broker-saved.crt /root/test-ca.pem > {BUNDLE}
             sed -i '/anthropic.com/d' /etc/hosts
             echo '10.200.0.3 api.anthropic.com api.openai.com platform.claude.com' >> /etc/hosts
             mkdir -p /root/.claude
             f=/root/.claude/.credentials.json
             [ ! -e $f ] || [ -e $f.broker-saved ] || mv $f $f.broker-saved
             echo '{credentials}' > $f; chmod 600 $f"
        ))
        .ok();
    }
    let boxes = [("shared-a", &c.a, "nodeA"), ("shared-b", &c.b, "nodeB")];
    for (name, n, node) in boxes {
        c.parked_box(name);
        n.sh(&format!(
            "ag-box set {name} agent=none network=allow allow=api.anthropic.com:443,platform.claude.com:443,10.200.0.3:443 creds=claude
             ag-box up {name} --node {node}"
        ))
        .ok();
    }

    // `globals push` on A carries the login through the store, sealed, not in its snapshot.
    let pushed = c.a.sh("ag-box globals push");
    assert!(
        pushed
            .ok()
            .stderr()
            .contains("the claude-oauth login is in the store for the other nodes' brokers"),
        "{}",
        pushed.stderr()
    );
    let raw =
        c.a.sh(&format!("curl -sf {SIGNED} {ACCOUNT_URL}"))
            .ok()
            .stdout();
    assert!(!raw.contains("sk-ant-"), "{raw}");
    let offered: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(offered["expires_at_ms"], expired, "{offered}");
    assert_eq!(
        c.a.sh(&format!(
            "{RESTIC_ENV}; restic ls latest --tag globals | grep -c credentials.json || true"
        ))
        .ok()
        .stdout(),
        "0\n"
    );

    // Node C's refresher dies right after it took the account's lease (as a power cut would):
    // the lease stays in the store until it ends.
    let died = std::time::SystemTime::now();
    let out = c.c.sh_env(
        &[("AG_BOX_CRASH_AT", "refresh.leased")],
        "ag-box __refresh --login claude-oauth",
    );
    assert!(
        out.stderr().contains("crash point refresh.leased"),
        "{:?} {}",
        out.status,
        out.stderr()
    );
    let stored: serde_json::Value = serde_json::from_str(
        &c.a.sh(&format!("curl -sf {SIGNED} {ACCOUNT_URL}"))
            .ok()
            .stdout(),
    )
    .unwrap();
    assert_eq!(stored["lease"]["node"], "nodeC", "{stored}");
    let lease_ends = stored["lease"]["until_ms"].as_f64().unwrap() / 1000.0;

    // Both nodes' boxes, four requests each at once, with the token expired on both nodes.
    let requests = |name: &str, n: &Node| {
        let copy: serde_json::Value = serde_json::from_str(
            &inside(n, name, "cat ~/.claude/.credentials.json")
                .ok()
                .stdout(),
        )
        .unwrap();
        let access = copy["claudeAiOauth"]["accessToken"]
            .as_str()
            .unwrap()
            .to_string();
        format!(
            "ag-box exec {name} -- bash -c 'for i in 1 2 3 4; do curl -sS -m 120 -o /dev/null -w \"%{{http_code}}\\n\" https://api.anthropic.com/v1/models -H \"Authorization: Bearer {access}\" & done; wait'"
        )
    };
    let on_a = requests("shared-a", &c.a);
    let on_b = requests("shared-b", &c.b);
    let (codes_a, codes_b) = std::thread::scope(|s| {
        let a = s.spawn(|| c.a.sh(&on_a).ok().stdout());
        let b = s.spawn(|| c.b.sh(&on_b).ok().stdout());
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(
        (codes_a.as_str(), codes_b.as_str()),
        ("200\n".repeat(4).as_str(), "200\n".repeat(4).as_str())
    );
    // One refresh between them, and not before node C's lease ended.
    let refreshes = token_lines(&c);
    assert_eq!(refreshes.len(), 1, "{refreshes:#?}");
    assert_eq!(refreshes[0]["refresh_token"], OAUTH_REFRESH);
    let at = refreshes[0]["t"].as_f64().unwrap();
    assert!(
        at >= lease_ends,
        "redeemed at {at}, while node C's lease ran until {lease_ends} (it died at {died:?})"
    );
    let issued = refreshes[0]["issued"].as_str().unwrap().to_string();
    all_models_carried(&c, &issued);
    // Both nodes hold the new login; the store has it sealed (no token in clear), the lease
    // given back, and which node refreshed it.
    for n in [&c.a, &c.b] {
        let node: serde_json::Value =
            serde_json::from_str(&n.read("/root/.claude/.credentials.json")).unwrap();
        assert_eq!(node["claudeAiOauth"]["accessToken"], issued.as_str());
    }
    let raw =
        c.a.sh(&format!("curl -sf {SIGNED} {ACCOUNT_URL}"))
            .ok()
            .stdout();
    assert!(!raw.contains("sk-ant-"), "{raw}");
    let stored: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert!(stored["lease"].is_null(), "{stored}");
    assert!(
        ["nodeA", "nodeB"].contains(&stored["refreshed_by"].as_str().unwrap()),
        "{stored}"
    );
    // `creds` says when, and by which node.
    let creds: serde_json::Value =
        serde_json::from_str(&c.b.sh("ag-box creds --json").ok().stdout()).unwrap();
    let row = creds["logins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["oauth"] == true)
        .cloned()
        .unwrap();
    assert_eq!(row["refreshed_by"], stored["refreshed_by"], "{row:#}");
    // `doctor` finds the store's copy opens with this node's password.
    let doctor: serde_json::Value =
        serde_json::from_str(&c.b.sh("ag-box doctor --json").stdout()).unwrap();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "claude-oauth login")
        .cloned()
        .unwrap();
    assert!(
        check["status"] == "ok"
            && check["detail"].as_str().unwrap().contains(&format!(
                "the store's copy, refreshed by {}",
                stored["refreshed_by"].as_str().unwrap()
            )),
        "{check:#}"
    );
    // Node C still holds the spent login: `globals pull` there takes the store's instead (an
    // older globals snapshot never puts one back).
    c.c.sh("ag-box globals pull").ok();
    let node: serde_json::Value =
        serde_json::from_str(&c.c.read("/root/.claude/.credentials.json")).unwrap();
    assert_eq!(node["claudeAiOauth"]["accessToken"], issued.as_str());
    for (name, n, _) in boxes {
        n.sh(&format!("ag-box park {name}")).ok();
    }
}

/// The node's Claude Code login file.
const NODE_LOGIN: &str = "/root/.claude/.credentials.json";

/// A refresher killed after the token endpoint answered, before the store or its node's file
/// held the new login (as a power cut would): its next run finishes the refresh from what it
/// kept on disk, with no second redeem, and the other nodes take the login from the store.
#[test]
fn a_refresh_killed_after_the_answer_is_finished_by_the_next_run() {
    let Some(c) = Cluster::get() else { return };
    let _stage = stage_models(&c);
    let _shared = SharedStage { c: &c };
    trust_models(&c, &[&c.a, &c.c]);
    let (expired, credentials) = expired_login();
    let access = |n: &Node| {
        serde_json::from_str::<serde_json::Value>(&n.read(NODE_LOGIN)).unwrap()["claudeAiOauth"]
            ["accessToken"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let stored = || -> serde_json::Value {
        serde_json::from_str(
            &c.a.sh(&format!("curl -sf {SIGNED} {ACCOUNT_URL}"))
                .ok()
                .stdout(),
        )
        .unwrap()
    };
    for n in [&c.a, &c.c] {
        n.write(NODE_LOGIN, &credentials);
        n.sh(&format!("chmod 600 {NODE_LOGIN}")).ok();
    }
    c.a.sh("ag-box globals push").ok();

    let out = c.c.sh_env(
        &[("AG_BOX_CRASH_AT", "refresh.answered")],
        "ag-box __refresh --login claude-oauth",
    );
    assert!(
        out.stderr().contains("crash point refresh.answered"),
        "{:?} {}",
        out.status,
        out.stderr()
    );
    let logins = token_lines(&c);
    assert_eq!(logins.len(), 1, "{logins:#?}");
    let issued = logins[0]["issued"].as_str().unwrap().to_string();
    // The answer is on node C's disk alone (root's); its file and the store as they were.
    assert_eq!(
        c.c.sh(&format!(
            "stat -c '%U %a' {NODE_LOGIN}.redeemed; grep -c {issued} {NODE_LOGIN}.redeemed"
        ))
        .ok()
        .stdout(),
        "root 600\n1\n"
    );
    assert_eq!(access(&c.c), OAUTH_ACCESS);
    assert_eq!(stored()["lease"]["node"], "nodeC");
    // `doctor` says so; and fails while it cannot be read (the login's refreshes stop).
    let doctor = || c.c.sh("ag-box doctor --json || true").ok().stdout();
    let said = doctor();
    assert!(
        said.contains(&format!(
            "a refresh cut short earlier left the newest login in {NODE_LOGIN}.redeemed"
        )),
        "{said}"
    );
    c.c.sh(&format!(
        "mv {NODE_LOGIN}.redeemed /root/journal.aside && mkdir {NODE_LOGIN}.redeemed"
    ))
    .ok();
    let said = doctor();
    c.c.sh(&format!(
        "rmdir {NODE_LOGIN}.redeemed && mv /root/journal.aside {NODE_LOGIN}.redeemed"
    ))
    .ok();
    assert!(
        said.contains("the newest login a cut-short refresh left, cannot be read"),
        "{said}"
    );

    // Node C's next run finishes it, without redeeming the spent refresh token again.
    let finished = c.c.sh("ag-box __refresh --login claude-oauth");
    assert!(
        finished.ok().stderr().contains(
            "finished a refresh of the claude-oauth login an earlier run was cut short in"
        ),
        "{}",
        finished.stderr()
    );
    assert_eq!(token_lines(&c).len(), 1);
    assert_eq!(access(&c.c), issued);
    assert!(!c.c.exists(&format!("{NODE_LOGIN}.redeemed")));
    assert!(!doctor().contains("cut short"));
    let now = stored();
    assert!(
        now["refreshed_by"] == "nodeC"
            && now["lease"].is_null()
            && now["expires_at_ms"].as_i64().unwrap() > i64::try_from(expired).unwrap() + 3_600_000,
        "{now}"
    );
    // Node A's refresher takes it from the store.
    c.a.sh("ag-box __refresh --login claude-oauth").ok();
    assert_eq!(token_lines(&c).len(), 1);
    assert_eq!(access(&c.a), issued);
}

/// Trust the test CA and send the model APIs' names to node C on `nodes`, with no Claude login
/// and settings without a key (what [`SharedStage`] puts back).
fn trust_models(c: &Cluster, nodes: &[&Node]) {
    let test_ca = c.c.read("/root/test-ca.pem");
    for n in nodes {
        n.write("/root/test-ca.pem", &test_ca);
        n.sh(&format!(
            "set -e
             [ -f /root/broker-saved.crt ] || cp {BUNDLE} /root/broker-saved.crt
             cat /root/broker-saved.crt /root/test-ca.pem > {BUNDLE}
             sed -i '/anthropic.com/d' /etc/hosts
             echo '10.200.0.3 api.anthropic.com api.openai.com platform.claude.com api.x.ai' >> /etc/hosts
             mkdir -p /root/.claude
             for f in /root/.claude/.credentials.json /root/.claude/settings.json; do
               [ ! -e $f ] || [ -e $f.broker-saved ] || mv $f $f.broker-saved; rm -f $f
             done
             echo '{{\"env\": {{\"DISABLE_AUTOUPDATER\": \"1\", \"DISABLE_TELEMETRY\": \"1\", \"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC\": \"1\"}}}}' > /root/.claude/settings.json"
        ))
        .ok();
    }
}

/// A login made inside a box on a node with none: the broker keeps it for that box alone (the
/// box sees placeholders, its CLI works), until `globals adopt` makes it the node's; then
/// another box, and a box on another node, use it.
#[test]
fn a_login_made_inside_a_box_is_kept_by_the_broker_until_the_node_adopts_it() {
    let Some(c) = Cluster::get() else { return };
    the_agent_clis(&c.a, &["claude"]);
    let _stage = stage_models(&c);
    let _shared = SharedStage { c: &c };
    trust_models(&c, &[&c.a, &c.b]);
    let name = "login-inside";
    c.parked_box(name);
    c.a.sh(&format!(
        "echo '# no node entries in this test' > /etc/box/egress-allow.txt
         ag-box set {name} agent=none network=allow allow=api.anthropic.com:443,platform.claude.com:443,10.200.0.3:443 creds=claude
         ag-box up {name} --node nodeA"
    ))
    .ok();
    // No login yet: the box's copy is empty, and its own to write.
    assert_eq!(
        inside(
            &c.a,
            name,
            "cat ~/.claude/.credentials.json; test -w ~/.claude/.credentials.json && echo writable"
        )
        .ok()
        .stdout(),
        "{}writable\n"
    );
    // The code exchange of a login (as `claude /login` makes it): the stand-in issues the
    // tokens, the box gets placeholders (and the account the answer names).
    let exchange = "curl -sS -m 30 https://platform.claude.com/v1/oauth/token -H 'content-type: application/json' \
         -d '{\"grant_type\":\"authorization_code\",\"code\":\"rig-code\",\"client_id\":\"9d1c250a-e61b-44d9-88ed-5944d1962f5e\",\"code_verifier\":\"v\",\"state\":\"s\",\"redirect_uri\":\"https://platform.claude.com/oauth/code/callback\"}'";
    let answer: serde_json::Value =
        serde_json::from_str(inside(&c.a, name, exchange).ok().stdout().trim()).unwrap();
    let logins = token_lines(&c);
    assert_eq!(logins.len(), 1, "{logins:#?}");
    assert_eq!(logins[0]["grant"], "authorization_code");
    let issued = logins[0]["issued"].as_str().unwrap().to_string();
    let (access, refresh) = (
        answer["access_token"].as_str().unwrap().to_string(),
        answer["refresh_token"].as_str().unwrap().to_string(),
    );
    assert!(
        access.starts_with("sk-ant-oat01-")
            && refresh.starts_with("sk-ant-ort01-")
            && access != issued
            && answer["expires_in"].as_i64().unwrap() > 300 * 86_400
            && answer["account"]["email_address"] == "rig@example.com",
        "{answer}"
    );
    // Saved as the CLI saves it; the real CLI then completes a turn with it.
    inside(
        &c.a,
        name,
        &format!(
            "printf '{{\"claudeAiOauth\":{{\"accessToken\":\"{access}\",\"refreshToken\":\"{refresh}\",\"expiresAt\":4102444800000,\"scopes\":[\"user:inference\"]}}}}' > ~/.claude/.credentials.json"
        ),
    )
    .ok();
    claude_turn(
        &c,
        &c.a,
        name,
        "Hi from my own login?",
        &format!("Bearer {issued}"),
    );
    // The broker keeps it for this box alone, root's; the node has none; no real token is
    // anywhere in the box. A second login from the box is refused.
    let kept = format!("/var/lib/ag-box/broker/boxes/{name}/claude-oauth.json");
    assert_eq!(
        c.a.sh(&format!(
            "stat -c '%U %a' {kept}; test -e /root/.claude/.credentials.json || echo none"
        ))
        .ok()
        .stdout(),
        "root 600\nnone\n"
    );
    let (head, tail) = issued.split_at(16);
    let search = inside(
        &c.a,
        name,
        &format!(
            "printf '%s\\n' \"{head}\"\"{tail}\" > /tmp/real
             grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude=real -f /tmp/real / | head -5
             cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f /tmp/real || true"
        ),
    );
    assert_eq!(search.stdout(), "0\n", "{}", search.stderr());
    assert!(
        inside(&c.a, name, exchange)
            .stdout()
            .contains("holds a claude login for this box already"),
    );
    assert_eq!(token_lines(&c).len(), 1);

    // Parked, it says where its login is; adopted, the login is the node's (and in the store).
    let parked = c.a.sh(&format!("ag-box park {name}"));
    assert!(
        parked
            .ok()
            .stderr()
            .contains("kept by the credential broker on this node"),
        "{}",
        parked.stderr()
    );
    assert_eq!(
        c.a.sh(&format!("ag-box globals adopt {name}"))
            .ok()
            .stdout(),
        "adopted /root/.claude/.credentials.json\n"
    );
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.claude/.credentials.json")).unwrap();
    assert_eq!(node["claudeAiOauth"]["accessToken"], issued.as_str());
    c.a.sh(&format!("test ! -e {kept}")).ok();
    // Another box on a node that pulls it: its CLI works with the adopted login.
    c.a.sh("ag-box globals push").ok();
    c.b.sh("ag-box globals pull").ok();
    let other = "login-other";
    c.parked_box(other);
    c.a.sh(&format!(
        "ag-box set {other} agent=none network=allow allow=api.anthropic.com:443,platform.claude.com:443,10.200.0.3:443 creds=claude"
    ))
    .ok();
    c.b.sh(&format!("ag-box up {other} --node nodeB")).ok();
    claude_turn(
        &c,
        &c.b,
        other,
        "Hi on node B?",
        &format!("Bearer {issued}"),
    );
    c.b.sh(&format!("ag-box park {other}")).ok();
}

/// A command at a real terminal on a node (a tmux pane): what it shows, and lines typed in.
struct Terminal<'a> {
    n: &'a Node,
    socket: &'static str,
}

impl<'a> Terminal<'a> {
    /// `command` at a new terminal; its exit status shown after it (`exit=N`).
    fn start(n: &'a Node, socket: &'static str, command: &str) -> Terminal<'a> {
        n.write(
            &format!("/root/{socket}.sh"),
            &format!("{command}; echo exit=$?; sleep 600\n"),
        );
        n.sh(&format!(
            "tmux -L {socket} kill-server 2>/dev/null || true
             tmux -L {socket} new-session -d -s t -x 600 -y 50 'bash /root/{socket}.sh'"
        ))
        .ok();
        Terminal { n, socket }
    }

    /// The screen, wrapped lines joined.
    fn screen(&self) -> String {
        self.n
            .sh(&format!(
                "tmux -L {} capture-pane -p -J -t t -S -200",
                self.socket
            ))
            .ok()
            .stdout()
    }

    /// The screen once it shows `text` (30 s at most).
    fn shows(&self, text: &str) -> String {
        for _ in 0..300 {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the terminal never showed {text:?}:\n{}", self.screen());
    }

    fn types(&self, line: &str) {
        self.n
            .sh(&format!(
                "tmux -L {0} send-keys -t t -l '{line}' && tmux -L {0} send-keys -t t Enter",
                self.socket
            ))
            .ok();
    }
}

impl Drop for Terminal<'_> {
    fn drop(&mut self) {
        self.n.sh(&format!(
            "tmux -L {0} kill-server 2>/dev/null; rm -f /root/{0}.sh",
            self.socket
        ));
    }
}

/// The stand-in's token lines number `count`, the last a code exchange it answered with the
/// PKCE verifier of its own sign-in: the access token it issued.
fn redeemed_with_pkce(c: &Cluster, count: usize) -> String {
    let logins = token_lines(c);
    assert_eq!(logins.len(), count, "{logins:#?}");
    let last = &logins[count - 1];
    assert_eq!(
        (&last["grant"], &last["pkce"], &last["status"]),
        (&"authorization_code".into(), &"ok".into(), &200.into())
    );
    last["issued"].as_str().unwrap().to_string()
}

/// The sign-in link `ag-box login claude` shows, from its screen.
fn sign_in_link(screen: &str) -> String {
    screen
        .lines()
        .find(|l| l.starts_with("https://claude.com/cai/oauth/authorize?"))
        .unwrap_or_else(|| panic!("no sign-in link:\n{screen}"))
        .trim_end()
        .to_string()
}

/// `ag-box login claude` from the operator's shell, at a real terminal: the link is Claude
/// Code's sign-in, the code pasted back is redeemed with the sign-in's PKCE verifier, and the
/// login is the node's (its other entries kept) and, sealed, the store's; a box on another node
/// uses it. A code of another sign-in, or one the sign-in server refuses, changes nothing.
#[test]
fn ag_box_login_signs_in_outside_every_box_and_the_store_carries_the_login() {
    let Some(c) = Cluster::get() else { return };
    the_agent_clis(&c.a, &["claude"]);
    let _stage = stage_models(&c);
    let _shared = SharedStage { c: &c };
    trust_models(&c, &[&c.a, &c.b]);
    // Node A holds an older login, and an MCP server's token that stays.
    let before = serde_json::json!({
        "claudeAiOauth": {"accessToken": OAUTH_ACCESS, "refreshToken": OAUTH_REFRESH,
                          "expiresAt": 4_102_444_800_000_i64, "scopes": ["user:inference"]},
        "mcpOAuth": {"srv": {"accessToken": "mcp-kept"}},
    })
    .to_string();
    c.a.write("/root/.claude/.credentials.json", &before);
    c.a.sh("chmod 600 /root/.claude/.credentials.json").ok();
    let browse = |link: &str| {
        let query = link.split_once('?').unwrap().1;
        c.c.sh(&format!(
            "curl -sfk 'https://10.200.0.3/cai/oauth/authorize?{query}'"
        ))
        .ok()
        .stdout()
    };

    // A code of another sign-in: refused before any request, nothing changed.
    let term = Terminal::start(&c.a, "login-term", "ag-box login claude");
    let screen = term.shows("Code: ");
    let first = sign_in_link(&screen);
    term.types(&browse(&first).replace('#', "#x"));
    let screen = term.shows("exit=");
    assert!(
        screen.contains("claude: the code pasted is of another sign-in")
            && screen.contains("exit=1"),
        "{screen}"
    );
    assert!(token_lines(&c).is_empty());
    assert_eq!(c.a.read("/root/.claude/.credentials.json"), before);
    drop(term);

    // The sign-in: Claude Code's link; the page's code pasted back; the node's login replaced.
    let term = Terminal::start(&c.a, "login-term", "ag-box login claude");
    let link = sign_in_link(&term.shows("Code: "));
    let query: Vec<(String, String)> = link
        .split_once('?')
        .unwrap()
        .1
        .split('&')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    let value = |k: &str| query.iter().find(|(q, _)| q == k).unwrap().1.clone();
    let (challenge, state) = (value("code_challenge"), value("state"));
    assert!(
        challenge.len() == 43
            && state.len() == 43
            && state != sign_in_link(&first).split("state=").nth(1).unwrap(),
        "{link}"
    );
    assert_eq!(
        query,
        [
            ("code", "true"),
            ("client_id", "9d1c250a-e61b-44d9-88ed-5944d1962f5e"),
            ("response_type", "code"),
            ("redirect_uri", "https%3A%2F%2Fplatform.claude.com%2Foauth%2Fcode%2Fcallback"),
            ("scope", "org%3Acreate_api_key+user%3Aprofile+user%3Ainference+user%3Asessions%3Aclaude_code+user%3Amcp_servers+user%3Afile_upload"),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("state", &state),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec()
    );
    let code = browse(&link);
    term.types(&code);
    let screen = term.shows("exit=");
    assert!(
        screen.contains("signed in to claude: the node's login is replaced")
            && screen.contains("exit=0"),
        "{screen}"
    );
    drop(term);
    let issued = redeemed_with_pkce(&c, 1);
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.claude/.credentials.json")).unwrap();
    assert_eq!(node["claudeAiOauth"]["accessToken"], issued.as_str());
    assert_eq!(node["mcpOAuth"]["srv"]["accessToken"], "mcp-kept");
    assert_eq!(
        c.a.sh("stat -c '%U %a' /root/.claude/.credentials.json")
            .ok()
            .stdout(),
        "root 600\n"
    );
    // The store holds it sealed, made by node A, no lease.
    let (stored, v) = store_account(&c, ACCOUNT_URL);
    assert!(
        v["refreshed_by"] == "nodeA"
            && v["lease"].is_null()
            && v["sealed"]["data"].is_string()
            && !stored.contains("STANDIN")
            && !stored.contains("mcp-kept"),
        "{stored}"
    );

    // A code the sign-in server refuses (its verifier is another sign-in's): said, nothing
    // changed, here or in the store.
    let now = c.a.read("/root/.claude/.credentials.json");
    let term = Terminal::start(&c.a, "login-term", "ag-box login claude");
    let again = sign_in_link(&term.shows("Code: "));
    let state = again.split("state=").nth(1).unwrap();
    term.types(&format!("{}#{state}", code.split('#').next().unwrap()));
    let screen = term.shows("exit=");
    assert!(
        screen.contains("claude: platform.claude.com refused the code (400: invalid_grant:")
            && screen.contains("run 'ag-box login claude' again")
            && screen.contains("exit=1"),
        "{screen}"
    );
    drop(term);
    assert_eq!(c.a.read("/root/.claude/.credentials.json"), now);
    assert_eq!(
        c.a.sh(&format!("curl -sf {SIGNED} {ACCOUNT_URL}"))
            .ok()
            .stdout(),
        stored
    );

    // Node B takes it from the store; a box there completes a turn with it.
    c.a.sh("ag-box globals push").ok();
    assert!(
        c.b.sh("ag-box globals pull")
            .ok()
            .stderr()
            .contains("took the claude-oauth login from the store")
    );
    let name = "login-shell";
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box set {name} agent=none network=allow allow=api.anthropic.com:443,platform.claude.com:443,10.200.0.3:443 creds=claude"
    ))
    .ok();
    c.b.sh(&format!("ag-box up {name} --node nodeB")).ok();
    claude_turn(
        &c,
        &c.b,
        name,
        "Hi after ag-box login?",
        &format!("Bearer {issued}"),
    );
    c.b.sh(&format!("ag-box park {name}")).ok();
}

/// `ag-box login codex` (Codex's device code: a code shown, entered on a page, polled for until
/// it is) and `ag-box login gemini` (Google's page, its code pasted back): each login the
/// node's and, sealed, the store's; a box given it sees placeholders and its requests carry the
/// new token. A code of another sign-in is refused by the server, and changes nothing.
#[test]
fn ag_box_login_signs_codex_in_by_a_device_code_and_gemini_by_a_pasted_code() {
    let Some(c) = Cluster::get() else { return };
    let _stage = stage_models(&c);
    let unchanged = |path: &str| {
        c.a.sh(&format!("cat {path} 2>/dev/null || echo none"))
            .ok()
            .stdout()
    };

    // Codex: the code is shown; the sign-in is polled for, pending, until it is entered.
    let term = Terminal::start(&c.a, "login-term", "ag-box login codex");
    let screen = term.shows("waiting for the sign-in");
    assert!(
        screen.contains("\nhttps://auth.openai.com/codex/device\n"),
        "{screen}"
    );
    let code = screen
        .split("enter the code ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap()
        .to_string();
    let issued_code = answered(&c, "deviceauth.usercode");
    assert_eq!(issued_code.len(), 1, "{issued_code:#?}");
    assert_eq!(issued_code[0]["user_code"], code.as_str());
    for _ in 0..100 {
        if answered(&c, "deviceauth.token")
            .iter()
            .any(|p| p["pending"] == true)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(token_lines(&c).is_empty());
    assert!(
        answered(&c, "deviceauth.token")
            .iter()
            .any(|p| p["pending"] == true)
    );
    assert_eq!(
        c.c.sh(&format!("curl -sfk -o /dev/null -w '%{{http_code}}' 'https://10.200.0.3/codex/device?user_code={code}'"))
            .ok()
            .stdout(),
        "200"
    );
    let screen = term.shows("exit=");
    assert!(
        screen.contains("signed in to codex: the node's login is made")
            && screen.contains("exit=0"),
        "{screen}"
    );
    drop(term);
    let logins = token_lines(&c);
    assert_eq!(logins.len(), 1, "{logins:#?}");
    assert_eq!(
        (
            &logins[0]["grant"],
            &logins[0]["pkce"],
            &logins[0]["client_id"],
            &logins[0]["status"]
        ),
        (
            &"authorization_code".into(),
            &"ok".into(),
            &"app_EMoamEEZ73f0CkXaXp7hrann".into(),
            &200.into()
        )
    );
    let issued = logins[0]["issued"].as_str().unwrap().to_string();
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.codex/auth.json")).unwrap();
    assert!(
        node["tokens"]["access_token"] == issued.as_str()
            && node["tokens"]["refresh_token"]
                .as_str()
                .unwrap()
                .starts_with("rt_STANDIN")
            && node["tokens"]["account_id"] == "acct-rig"
            && node["auth_mode"] == "chatgpt",
        "{node:#}"
    );
    assert_eq!(
        c.a.sh("stat -c '%U %a' /root/.codex/auth.json")
            .ok()
            .stdout(),
        "root 600\n"
    );
    let (stored, v) = store_account(&c, CODEX_ACCOUNT_URL);
    assert!(
        v["refreshed_by"] == "nodeA" && v["lease"].is_null() && !stored.contains("STANDIN"),
        "{stored}"
    );
    // A box given codex: placeholders, and its backend request carries the new token.
    let name = "login-codex";
    c.parked_box(name);
    let shown = guarded_copy(
        &c,
        name,
        "chatgpt.com:443,auth.openai.com:443",
        "codex",
        ".codex/auth.json",
    );
    let access_shown = shown["tokens"]["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        access_shown != issued && shown["tokens"]["account_id"] == "acct-rig",
        "{shown:#}"
    );
    nowhere_in_the_box(&c.a, name, &[&issued]);
    let out = inside(
        &c.a,
        name,
        &format!(
            "curl -sS -m 10 -o /dev/null -w '%{{http_code}}' https://chatgpt.com/backend-api/wham/accounts/check -H 'Authorization: Bearer {access_shown}' -H 'chatgpt-account-id: acct-rig'"
        ),
    );
    assert_eq!(out.ok().stdout(), "200");
    let checked = answered(&c, "accounts.check");
    assert!(
        checked.len() == 1 && checked[0]["auth"] == format!("Bearer {issued}"),
        "{checked:#?}"
    );
    c.a.sh(&format!("ag-box park {name}")).ok();

    // Gemini: Google's page, its code pasted back; a code of another sign-in refused.
    let google_link = |screen: &str| {
        screen
            .lines()
            .find(|l| l.starts_with("https://accounts.google.com/o/oauth2/v2/auth?"))
            .unwrap_or_else(|| panic!("no sign-in link:\n{screen}"))
            .trim_end()
            .to_string()
    };
    let browse = |link: &str| {
        let query = link.split_once('?').unwrap().1;
        c.c.sh(&format!(
            "curl -sfk 'https://10.200.0.3/o/oauth2/v2/auth?{query}'"
        ))
        .ok()
        .stdout()
    };
    let term = Terminal::start(&c.a, "login-term", "ag-box login gemini");
    let link = google_link(&term.shows("Code: "));
    assert!(
        link.contains("access_type=offline")
            && link.contains("redirect_uri=https%3A%2F%2Fcodeassist.google.com%2Fauthcode")
            && link.contains("&client_id=681255809395-"),
        "{link}"
    );
    let code = browse(&link);
    assert!(code.starts_with("4/0STANDINCODE"), "{code}");
    term.types(&code);
    let screen = term.shows("exit=");
    assert!(
        screen.contains("signed in to gemini: the node's login is made")
            && screen.contains("exit=0"),
        "{screen}"
    );
    drop(term);
    let issued = redeemed_with_pkce(&c, 2);
    let creds = c.a.read("/root/.gemini/oauth_creds.json");
    let node: serde_json::Value = serde_json::from_str(&creds).unwrap();
    assert!(
        node["access_token"] == issued.as_str()
            && node["refresh_token"]
                .as_str()
                .unwrap()
                .starts_with("1//STANDIN")
            && node["expiry_date"].as_u64().unwrap() > 1_700_000_000_000,
        "{node:#}"
    );
    let (stored, v) = store_account(&c, &format!("{ACCOUNTS}/gemini-oauth.json"));
    assert!(
        v["refreshed_by"] == "nodeA" && !stored.contains("STANDIN"),
        "{stored}"
    );
    // The first sign-in's code pasted into a second: Google refuses it (its verifier is the
    // first's); the node's login stays.
    let term = Terminal::start(&c.a, "login-term", "ag-box login gemini");
    term.shows("Code: ");
    term.types(&code);
    let screen = term.shows("exit=");
    assert!(
        screen.contains("gemini: oauth2.googleapis.com refused the code (400: invalid_grant")
            && screen.contains("exit=1"),
        "{screen}"
    );
    drop(term);
    assert_eq!(unchanged("/root/.gemini/oauth_creds.json"), creds);
    // A box given gemini: its Code Assist request carries the new token.
    let name = "login-gemini";
    c.parked_box(name);
    let shown = guarded_copy(
        &c,
        name,
        "cloudcode-pa.googleapis.com:443,oauth2.googleapis.com:443",
        "gemini",
        ".gemini/oauth_creds.json",
    );
    let access_shown = shown["access_token"].as_str().unwrap().to_string();
    assert_ne!(access_shown, issued);
    nowhere_in_the_box(&c.a, name, &[&issued]);
    let out = inside(
        &c.a,
        name,
        &format!(
            "curl -sS -m 30 https://cloudcode-pa.googleapis.com/v1internal:generateContent -H 'Authorization: Bearer {access_shown}' \
           -H 'content-type: application/json' -d '{{\"model\":\"m\",\"project\":\"p\",\"request\":{{\"contents\":[{{\"role\":\"user\",\"parts\":[{{\"text\":\"Hi?\"}}]}}]}}}}'"
        ),
    );
    assert!(
        out.ok().stdout().contains("STANDIN-REPLY turns=1"),
        "{out:?}"
    );
    let generated = answered(&c, "gemini.generate");
    assert!(
        generated.len() == 1 && generated[0]["auth"] == format!("Bearer {issued}"),
        "{generated:#?}"
    );
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// `OpenCode`'s keys (one per provider in its `auth.json`): the box sees placeholders of every
/// entry; each known provider's key goes to that provider's API alone; another provider's key
/// and an OAuth login `OpenCode` refreshes itself go nowhere.
#[test]
fn opencodes_keys_never_enter_a_box_and_each_reaches_only_its_providers_api() {
    let Some(c) = Cluster::get() else { return };
    let _stage = stage_models(&c);
    let (anthropic, openai, copilot, acme) = (
        "sk-ant-api03-RigOpenCodeAnthropicKey000000",
        "sk-proj-RigOpenCodeOpenAiKey0000000000000",
        "gho_RigOpenCodeCopilotRefresh000000000000",
        "acme-RigOpenCodeAcmeKey000000000000000000",
    );
    let auth = serde_json::json!({
        "anthropic": {"type": "api", "key": anthropic},
        "openai": {"type": "api", "key": openai},
        "github-copilot": {"type": "oauth", "refresh": copilot, "access": copilot, "expires": 0},
        "acme": {"type": "api", "key": acme},
    });
    c.a.write("/root/.local/share/opencode/auth.json", &auth.to_string());
    c.a.sh("chmod 600 /root/.local/share/opencode/auth.json")
        .ok();
    let name = "opencode-keys";
    c.parked_box(name);
    // The node's first start of a box the broker stands in for says, once, that the broker
    // holds the node's logins now (as after an upgrade from a version without it).
    let notice = "the credential broker now holds this node's logins (opencode)";
    let up = c.a.sh(&format!(
        "echo '# no node entries in this test' > /etc/box/egress-allow.txt
         rm -f /var/lib/ag-box/broker/announced
         ag-box set {name} agent=none network=allow allow=api.anthropic.com:443,api.openai.com:443,10.200.0.3:443 creds=opencode
         ag-box up {name} --node nodeA"
    ));
    assert!(up.ok().stderr().contains(notice), "{}", up.stderr());
    let shown: serde_json::Value = serde_json::from_str(
        &inside(&c.a, name, "cat ~/.local/share/opencode/auth.json")
            .ok()
            .stdout(),
    )
    .unwrap();
    let key = |p: &str, f: &str| shown[p][f].as_str().unwrap().to_string();
    let (anthropic_shown, openai_shown, acme_shown) = (
        key("anthropic", "key"),
        key("openai", "key"),
        key("acme", "key"),
    );
    // Of the key's shape (a known prefix kept), never the key.
    for (seen, real, prefix) in [
        (&anthropic_shown, anthropic, "sk-ant-api03-"),
        (&openai_shown, openai, "sk-proj-"),
        (&acme_shown, acme, ""),
        (&key("github-copilot", "refresh"), copilot, "gho_"),
    ] {
        assert!(
            seen != real && seen.len() == real.len() && seen.starts_with(prefix),
            "{shown:#}"
        );
    }
    assert_eq!(shown["github-copilot"]["type"], "oauth");
    nowhere_in_the_box(&c.a, name, &[anthropic, openai, copilot, acme]);

    // Each key to its own provider's API: the stand-in gets the real one.
    let out = inside(
        &c.a,
        name,
        &format!(
            "curl -sS -m 10 -o /dev/null https://api.anthropic.com/v1/models -H 'x-api-key: {anthropic_shown}'
             curl -sS -m 10 -o /dev/null https://api.openai.com/v1/models -H 'Authorization: Bearer {openai_shown}'"
        ),
    );
    out.ok();
    // (The stage's own readiness probe carried no credential.)
    let keyed = || -> Vec<serde_json::Value> {
        answered(&c, "models")
            .into_iter()
            .filter(|m| !m["auth"].is_null())
            .collect()
    };
    let models = keyed();
    let auths: Vec<(&str, &str)> = models
        .iter()
        .map(|m| (m["host"].as_str().unwrap(), m["auth"].as_str().unwrap()))
        .collect();
    assert_eq!(
        auths,
        [
            ("api.anthropic.com", anthropic),
            ("api.openai.com", &*format!("Bearer {openai}")),
        ]
    );
    // Anthropic's key to OpenAI's API, or into a request that is no model request: refused.
    // Another provider's key goes nowhere: the API gets its placeholder.
    let refused = inside(
        &c.a,
        name,
        &format!(
            "curl -sS -m 10 https://api.openai.com/v1/models -H 'Authorization: Bearer {anthropic_shown}'; echo
             curl -sS -m 10 https://api.anthropic.com/v1/organizations/invites -H 'x-api-key: {anthropic_shown}'; echo
             curl -sS -m 10 -o /dev/null https://api.anthropic.com/v1/models -H 'x-api-key: {acme_shown}'"
        ),
    )
    .ok()
    .stdout();
    assert!(
        refused.contains("its token is for api.anthropic.com only")
            && refused.contains("puts the opencode key only into model requests"),
        "{refused}"
    );
    let models = keyed();
    assert!(
        models.len() == 3 && models[2]["auth"] == acme_shown.as_str(),
        "{models:#?}"
    );
    c.a.sh(&format!("ag-box park {name}")).ok();
    let again = c.a.sh(&format!("ag-box up {name} --node nodeA"));
    assert!(!again.ok().stderr().contains(notice), "{}", again.stderr());
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// Codex's own device-code sign-in (`codex login --device-auth`), at a terminal inside a box on a
/// node with no Codex login: the broker keeps the login for that box (the box's file holds
/// JWT placeholders of its claims, the real CLI completes a turn with it), refuses a second
/// sign-in, and `globals adopt` makes it the node's.
#[test]
fn a_codex_sign_in_inside_a_box_is_kept_by_the_broker_until_the_node_adopts_it() {
    let Some(c) = Cluster::get() else { return };
    the_agent_clis(&c.a, &["codex"]);
    let _stage = stage_models(&c);
    c.a.sh("rm /root/.codex/auth.json").ok();
    let name = "codex-inside";
    c.parked_box(name);
    let shown = guarded_copy(
        &c,
        name,
        "chatgpt.com:443,auth.openai.com:443",
        "codex",
        ".codex/auth.json",
    );
    assert_eq!(shown, serde_json::json!({}));

    let term = Terminal::start(
        &c.a,
        "codex-login",
        &format!("ag-box exec {name} -- {AGENTS}/codex login --device-auth"),
    );
    let mut issued_code = Vec::new();
    for _ in 0..300 {
        issued_code = answered(&c, "deviceauth.usercode");
        if !issued_code.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        !issued_code.is_empty(),
        "no device code was asked for:\n{}\n{}",
        term.screen(),
        c.c.sh("tail -5 /root/models.log").stdout()
    );
    let code = issued_code[0]["user_code"].as_str().unwrap().to_string();
    term.shows(&code);
    assert_eq!(
        c.c.sh(&format!("curl -sfk -o /dev/null -w '%{{http_code}}' 'https://10.200.0.3/codex/device?user_code={code}'"))
            .ok()
            .stdout(),
        "200"
    );
    let screen = term.shows("exit=");
    assert!(screen.contains("exit=0"), "{screen}");
    drop(term);
    let logins = token_lines(&c);
    assert_eq!(logins.len(), 1, "{logins:#?}");
    assert_eq!(
        (
            &logins[0]["grant"],
            &logins[0]["pkce"],
            &logins[0]["status"]
        ),
        (&"authorization_code".into(), &"ok".into(), &200.into())
    );
    let issued = logins[0]["issued"].as_str().unwrap().to_string();
    let n = claims(&issued)["jti"].as_str().unwrap().to_string();
    let refresh = format!("rt_{n}{}", "R".repeat(40));

    // The box's file, as its CLI saved the answer: JWTs of the login's claims, not its tokens.
    let saved: serde_json::Value =
        serde_json::from_str(&inside(&c.a, name, "cat ~/.codex/auth.json").ok().stdout()).unwrap();
    let tokens = &saved["tokens"];
    let access = tokens["access_token"].as_str().unwrap().to_string();
    assert!(
        access != issued
            && claims(&access)["https://api.openai.com/auth"]["chatgpt_account_id"] == "acct-rig"
            && claims(tokens["id_token"].as_str().unwrap())["email"] == "rig@example.com"
            && tokens["account_id"] == "acct-rig"
            && tokens["refresh_token"] != refresh.as_str(),
        "{saved:#}"
    );
    let kept = format!("/var/lib/ag-box/broker/boxes/{name}/codex-oauth.json");
    assert_eq!(
        c.a.sh(&format!(
            "stat -c '%U %a' {kept}; test -e /root/.codex/auth.json || echo none"
        ))
        .ok()
        .stdout(),
        "root 600\nnone\n"
    );
    nowhere_in_the_box(&c.a, name, &[&issued, &refresh]);
    // The real CLI's turn with it: ChatGPT's backend gets the real token.
    let out = inside(
        &c.a,
        name,
        &format!(
            "timeout 120 {AGENTS}/codex exec --skip-git-repo-check --json 'Hi codex, signed in here?' </dev/null"
        ),
    );
    assert!(
        out.stdout()
            .contains("STANDIN-REPLY turns=1 last=Hi codex, signed in here?"),
        "{out:?}"
    );
    // A proxy restarted (killed) still knows the box's placeholders: the next turn works.
    assert_eq!(
        c.a.sh(&format!(
            "systemctl kill -s KILL boxnet-{name}; sleep 1
             for i in $(seq 50); do systemctl is-active -q boxnet-{name} && break; sleep 0.2; done
             systemctl show -p NRestarts boxnet-{name}"
        ))
        .ok()
        .stdout(),
        "NRestarts=1\n"
    );
    let out = inside(
        &c.a,
        name,
        &format!(
            "timeout 120 {AGENTS}/codex exec --skip-git-repo-check --json 'Hi codex, after a restart?' </dev/null"
        ),
    );
    assert!(
        out.stdout()
            .contains("STANDIN-REPLY turns=1 last=Hi codex, after a restart?"),
        "{out:?}"
    );
    let seen = answered(&c, "openai.responses");
    assert!(
        seen.len() >= 2 && seen.iter().all(|m| m["auth"] == format!("Bearer {issued}")),
        "{seen:#?}"
    );
    // A second sign-in from the box is refused before it reaches the sign-in server.
    let again = inside(
        &c.a,
        name,
        "curl -sS -m 10 https://auth.openai.com/oauth/token -d 'grant_type=authorization_code&code=x&client_id=app_EMoamEEZ73f0CkXaXp7hrann'",
    );
    assert!(
        again
            .stdout()
            .contains("holds a codex login for this box already"),
        "{again:?}"
    );
    assert_eq!(token_lines(&c).len(), 1);

    // The box writes a login of its choosing where it sees its copy: adopt takes the one the
    // broker kept, never that.
    inside(
        &c.a,
        name,
        "printf '{\"auth_mode\":\"chatgpt\",\"tokens\":{\"access_token\":\"attacker-access-token\",\"refresh_token\":\"rt_attacker\"}}' > ~/.codex/auth.json",
    )
    .ok();
    // Adopted, the login is the node's.
    c.a.sh(&format!("ag-box park {name}")).ok();
    assert_eq!(
        c.a.sh(&format!("ag-box globals adopt {name}"))
            .ok()
            .stdout(),
        "adopted /root/.codex/auth.json\n"
    );
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.codex/auth.json")).unwrap();
    assert!(
        node["tokens"]["access_token"] == issued.as_str()
            && node["tokens"]["refresh_token"] == refresh.as_str(),
        "{node:#}"
    );
    c.a.sh(&format!("test ! -e {kept}")).ok();
    // Nor is what the box planted taken for a login of its own at its next start.
    c.a.sh(&format!("ag-box up {name} --node nodeA")).ok();
    c.a.sh(&format!("test ! -e {kept}")).ok();
    let copy = inside(&c.a, name, "cat ~/.codex/auth.json").ok().stdout();
    assert!(!copy.contains("attacker"), "{copy}");
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// Codex's `ChatGPT` login (`tokens` of `~/.codex/auth.json`): the node's real tokens' signatures
/// and refresh token, which no box may read.
const CODEX_ACCESS_SIG: &str = "RigRealCodexAccessSignatureRigRealCodexAccessSig00";
const CODEX_ID_SIG: &str = "RigRealCodexIdSignatureRigRealCodexIdSignature00";
const CODEX_REFRESH: &str = "rt_RigRealCodexRefreshRigRealCodexRefreshRigReal00";

/// A JWT of `claims` signed `signature` (the stand-in checks none).
fn jwt(claims: &serde_json::Value, signature: &str) -> String {
    format!(
        "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.{}.{signature}",
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

/// The claims of a JWT.
fn claims(token: &str) -> serde_json::Value {
    let part = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

/// Codex's `ChatGPT` login never enters a box: the box sees JWT-shaped placeholders (the claims
/// its CLI reads, a far expiry); the real Codex CLI completes a turn against `ChatGPT` with the
/// real token, put in by the broker after it refreshed the expired login once; the box's own
/// refresh gets its placeholders again, and a placeholder anywhere else is refused.
#[test]
fn codexs_chatgpt_login_never_enters_a_box_and_is_refreshed_by_the_broker() {
    let Some(c) = Cluster::get() else { return };
    the_agent_clis(&c.a, &["codex"]);
    let _stage = stage_models(&c);
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let account = serde_json::json!({"chatgpt_account_id": "acct-rig", "chatgpt_plan_type": "pro"});
    let access = jwt(
        &serde_json::json!({"https://api.openai.com/auth": account, "exp": now_s - 3600}),
        CODEX_ACCESS_SIG,
    );
    let id = jwt(
        &serde_json::json!({"https://api.openai.com/auth": account, "email": "rig@example.com", "exp": now_s - 3600}),
        CODEX_ID_SIG,
    );
    let login = serde_json::json!({
        "auth_mode": "chatgpt",
        "OPENAI_API_KEY": null,
        "tokens": {"id_token": id, "access_token": access, "refresh_token": CODEX_REFRESH, "account_id": "acct-rig"},
        "last_refresh": "2026-11-01T00:00:00Z",
    });
    c.a.write("/root/.codex/auth.json", &login.to_string());
    c.a.sh("chmod 600 /root/.codex/auth.json").ok();
    let name = "codex-chatgpt";
    c.parked_box(name);
    // The box's copy: placeholders of the tokens' shapes, the claims its CLI reads, a far
    // expiry; the box's to write (its CLI saves what its refresh is answered).
    let shown = guarded_copy(
        &c,
        name,
        "chatgpt.com:443,auth.openai.com:443",
        "codex",
        ".codex/auth.json",
    );
    let shown_token = |k: &str| shown["tokens"][k].as_str().unwrap().to_string();
    let (access_shown, refresh_shown, id_shown) = (
        shown_token("access_token"),
        shown_token("refresh_token"),
        shown_token("id_token"),
    );
    assert_eq!(
        (
            &shown["OPENAI_API_KEY"],
            &shown["auth_mode"],
            &shown["tokens"]["account_id"]
        ),
        (
            &serde_json::Value::Null,
            &serde_json::json!("chatgpt"),
            &serde_json::json!("acct-rig")
        )
    );
    for (token, real) in [(&access_shown, &access), (&id_shown, &id)] {
        let seen = claims(token);
        assert!(
            token != real
                && seen["https://api.openai.com/auth"] == account
                && seen["exp"].as_u64().unwrap() > now_s + 300 * 86_400,
            "{token}"
        );
    }
    assert_eq!(claims(&id_shown)["email"], "rig@example.com");
    assert!(
        refresh_shown.starts_with("rt_")
            && refresh_shown.len() == CODEX_REFRESH.len()
            && refresh_shown != CODEX_REFRESH,
        "{refresh_shown}"
    );
    nowhere_in_the_box(&c.a, name, &[CODEX_ACCESS_SIG, CODEX_ID_SIG, CODEX_REFRESH]);

    // The real CLI's turn: the broker refreshed the expired login once, and every request to
    // ChatGPT's backend carried the new token.
    let out = inside(
        &c.a,
        name,
        &format!(
            "timeout 120 {AGENTS}/codex exec --skip-git-repo-check --json 'Hi codex on ChatGPT?' </dev/null"
        ),
    );
    assert!(
        out.stdout()
            .contains("STANDIN-REPLY turns=1 last=Hi codex on ChatGPT?"),
        "{out:?}"
    );
    let issued = refreshed_once(
        &c,
        CODEX_REFRESH,
        "app_EMoamEEZ73f0CkXaXp7hrann",
        "auth.openai.com",
    );
    for summary in ["openai.responses", "accounts.check"] {
        let seen = answered(&c, summary);
        assert!(
            !seen.is_empty()
                && seen
                    .iter()
                    .all(|m| m["auth"] == format!("Bearer {issued}") && m["host"] == "chatgpt.com"),
            "{summary}: {seen:#?}"
        );
    }
    // Nor is the new login anywhere the box can read.
    let new_refresh = c.a.read("/root/.codex/auth.json");
    let new_refresh =
        serde_json::from_str::<serde_json::Value>(&new_refresh).unwrap()["tokens"]["refresh_token"]
            .as_str()
            .unwrap()
            .to_string();
    nowhere_in_the_box(
        &c.a,
        name,
        &[issued.rsplit('.').next().unwrap(), &new_refresh],
    );
    // The node's file holds the new login, the account and mode kept.
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.codex/auth.json")).unwrap();
    assert!(
        node["tokens"]["access_token"] == issued.as_str()
            && node["tokens"]["refresh_token"]
                .as_str()
                .unwrap()
                .starts_with("rt_STANDIN")
            && node["tokens"]["id_token"] != id.as_str()
            && node["tokens"]["account_id"] == "acct-rig"
            && node["auth_mode"] == "chatgpt",
        "{node:#}"
    );
    // The store shared by the nodes holds it, sealed, for their brokers.
    let (stored, v) = store_account(&c, CODEX_ACCOUNT_URL);
    assert!(
        v["refreshed_by"] == "nodeA"
            && v["lease"].is_null()
            && v["sealed"]["data"].is_string()
            && !stored.contains("rt_STANDIN")
            && !stored.contains(issued.split('.').nth(1).unwrap()),
        "{stored}"
    );

    // The box's own refresh is answered with its placeholders; another token, or the refresh
    // placeholder anywhere else, is refused.
    let refresh_body = |token: &str| {
        format!(
            "curl -sS -m 30 https://auth.openai.com/oauth/token -H 'content-type: application/json' \
               -d '{{\"client_id\":\"app_EMoamEEZ73f0CkXaXp7hrann\",\"grant_type\":\"refresh_token\",\"refresh_token\":\"{token}\",\"scope\":\"openid profile email\"}}'"
        )
    };
    let answer: serde_json::Value = serde_json::from_str(
        inside(&c.a, name, &refresh_body(&refresh_shown))
            .ok()
            .stdout()
            .trim(),
    )
    .unwrap();
    assert_eq!(
        (
            &answer["access_token"],
            &answer["refresh_token"],
            &answer["id_token"]
        ),
        (
            &serde_json::json!(access_shown),
            &serde_json::json!(refresh_shown),
            &serde_json::json!(id_shown)
        )
    );
    let refused = inside(
        &c.a,
        name,
        &format!(
            "{}; echo
             curl -sS -m 10 https://chatgpt.com/backend-api/codex/models -H 'Authorization: Bearer {refresh_shown}'; echo
             curl -sS -m 10 https://chatgpt.com/backend-api/codex/models -H 'Authorization: Bearer {access_shown}' -H 'chatgpt-account-id: acct-other-workspace'; echo
             curl -sS -m 10 http://{PLAIN}/ -H 'Authorization: Bearer {access_shown}'",
            refresh_body("rt_SomeOtherRefreshToken")
        ),
    );
    let seen = refused.stdout();
    assert!(
        seen.contains("the broker answers only a refresh of the codex login's placeholder")
            && seen.contains("the codex login's refresh token goes to auth.openai.com only")
            && seen
                .contains("the codex login's token goes with the account of the node's login only")
            && seen.contains(
                "a placeholder of the codex login went to 10.200.0.2:8085 over plain HTTP"
            ),
        "{seen}"
    );
    assert_eq!(token_lines(&c).len(), 1);
    c.a.sh(&format!("ag-box park {name}")).ok();
}

/// Gemini CLI's Google login: the node's real tokens, which no box may read.
const GEMINI_ACCESS: &str = "ya29.RigRealGeminiAccessRigRealGeminiAccessRigReal00";
const GEMINI_REFRESH: &str = "1//RigRealGeminiRefreshRigRealGeminiRefreshRigRe00";
const GEMINI_ID_SIG: &str = "RigRealGeminiIdSignatureRigRealGeminiIdSignature00";
const GEMINI_CLIENT: &str =
    "681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com";

/// Gemini CLI's Google login (`~/.gemini/oauth_creds.json`) never enters a box: placeholders of
/// its tokens' shapes, an expiry a year ahead; the token goes into Code Assist requests only,
/// made fresh once by the broker with the CLI's client (a form, as Google takes it); the box's
/// own refresh gets its placeholders again, and a placeholder anywhere else is refused; a
/// rollback to before the refresh leaves the refreshed login in force.
#[test]
fn geminis_google_login_never_enters_a_box_and_is_refreshed_by_the_broker() {
    let Some(c) = Cluster::get() else { return };
    let _stage = stage_models(&c);
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let id = jwt(
        &serde_json::json!({"email": "rig@example.com", "exp": now_s - 3600}),
        GEMINI_ID_SIG,
    );
    let login = serde_json::json!({
        "access_token": GEMINI_ACCESS,
        "refresh_token": GEMINI_REFRESH,
        "scope": "https://www.googleapis.com/auth/cloud-platform",
        "token_type": "Bearer",
        "id_token": id,
        "expiry_date": (now_s - 3600) * 1000,
    });
    c.a.write("/root/.gemini/oauth_creds.json", &login.to_string());
    c.a.sh("chmod 600 /root/.gemini/oauth_creds.json").ok();
    let name = "gemini-google";
    c.parked_box(name);
    let before_refresh = common::box_row(&c.a, name).unwrap()["last_snapshot"]["id"]
        .as_str()
        .unwrap()[..8]
        .to_string();
    // The box's copy: placeholders of the tokens' shapes, the id token's claims, a far expiry.
    let shown = guarded_copy(
        &c,
        name,
        "cloudcode-pa.googleapis.com:443,oauth2.googleapis.com:443",
        "gemini",
        ".gemini/oauth_creds.json",
    );
    let field = |k: &str| shown[k].as_str().unwrap().to_string();
    let (access_shown, refresh_shown) = (field("access_token"), field("refresh_token"));
    assert!(
        access_shown.starts_with("ya29.")
            && access_shown.len() == GEMINI_ACCESS.len()
            && access_shown != GEMINI_ACCESS
            && refresh_shown.starts_with("1//")
            && refresh_shown != GEMINI_REFRESH
            && claims(&field("id_token"))["email"] == "rig@example.com"
            && shown["expiry_date"].as_u64().unwrap() > (now_s + 300 * 86_400) * 1000
            && shown["scope"] == login["scope"],
        "{shown:#}"
    );
    nowhere_in_the_box(&c.a, name, &[GEMINI_ACCESS, GEMINI_REFRESH, GEMINI_ID_SIG]);

    // A Code Assist request: the broker made the login fresh once, with the CLI's client.
    let generate = |token: &str, path: &str| {
        format!(
            "curl -sS -m 30 https://cloudcode-pa.googleapis.com/v1internal:{path} -H 'Authorization: Bearer {token}' \
               -H 'content-type: application/json' \
               -d '{{\"model\":\"gemini-2.5-pro\",\"project\":\"p\",\"request\":{{\"contents\":[{{\"role\":\"user\",\"parts\":[{{\"text\":\"Hi gemini?\"}}]}}]}}}}'"
        )
    };
    let out = inside(&c.a, name, &generate(&access_shown, "generateContent"));
    assert!(
        out.ok()
            .stdout()
            .contains("STANDIN-REPLY turns=1 last=Hi gemini?"),
        "{out:?}"
    );
    let issued = refreshed_once(&c, GEMINI_REFRESH, GEMINI_CLIENT, "oauth2.googleapis.com");
    let generated = answered(&c, "gemini.generate");
    assert!(
        generated.len() == 1
            && generated[0]["auth"] == format!("Bearer {issued}")
            && generated[0]["host"] == "cloudcode-pa.googleapis.com",
        "{generated:#?}"
    );
    // The node's file: the new access token and expiry; Google's refresh token kept.
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.gemini/oauth_creds.json")).unwrap();
    assert!(
        node["access_token"] == issued.as_str()
            && node["refresh_token"] == GEMINI_REFRESH
            && node["expiry_date"].as_u64().unwrap() > now_s * 1000,
        "{node:#}"
    );

    // The CLI's check of its login (token info of its access token) is answered from the
    // node's login: the client, the scope, the email, no token; of another token, refused.
    let info = |token: &str| {
        format!(
            "curl -sS -m 30 https://oauth2.googleapis.com/tokeninfo -H 'Authorization: Bearer {token}' \
               --data-urlencode 'access_token={token}'"
        )
    };
    let said: serde_json::Value = serde_json::from_str(
        inside(&c.a, name, &info(&access_shown))
            .ok()
            .stdout()
            .trim(),
    )
    .unwrap();
    assert!(
        said["aud"] == GEMINI_CLIENT
            && said["email"] == "rig@example.com"
            && said["scope"] == login["scope"]
            && said["expires_in"].as_str().unwrap().parse::<u64>().unwrap() > 0
            && !said.to_string().contains("ya29."),
        "{said}"
    );
    assert!(
        inside(&c.a, name, &info("ya29.SomeOtherTokenSomeOtherToken"))
            .stdout()
            .contains("the broker answers token info only of the gemini login's placeholder")
    );
    // The box's own refresh (a form, as the CLI's library sends it) gets its placeholders; the
    // token goes into no other Code Assist request, and the refresh placeholder nowhere.
    let answer: serde_json::Value = serde_json::from_str(
        inside(
            &c.a,
            name,
            &format!(
                "curl -sS -m 30 https://oauth2.googleapis.com/token \
                   --data-urlencode grant_type=refresh_token --data-urlencode 'refresh_token={refresh_shown}' \
                   --data-urlencode client_id={GEMINI_CLIENT} --data-urlencode client_secret=s"
            ),
        )
        .ok()
        .stdout()
        .trim(),
    )
    .unwrap();
    assert_eq!(
        (&answer["access_token"], &answer["refresh_token"]),
        (
            &serde_json::json!(access_shown),
            &serde_json::json!(refresh_shown)
        )
    );
    let refused = inside(
        &c.a,
        name,
        &format!(
            "{}; echo; {}",
            generate(&access_shown, "setCodeAssistGlobalUserSetting"),
            generate(&refresh_shown, "generateContent")
        ),
    );
    let seen = refused.stdout();
    assert!(
        seen.contains("the broker puts the gemini key only into model requests")
            && seen.contains("the gemini login's refresh token goes to oauth2.googleapis.com only"),
        "{seen}"
    );
    assert_eq!(token_lines(&c).len(), 1);

    // A rollback to a snapshot from before the refresh leaves the current login in force: no
    // snapshot holds it, the node's file is as the refresh left it, and the box's requests
    // carry the new token with no other refresh.
    c.a.sh(&format!("ag-box rollback {name} {before_refresh} --yes"))
        .ok();
    let shown: serde_json::Value = serde_json::from_str(
        &inside(&c.a, name, "cat ~/.gemini/oauth_creds.json")
            .ok()
            .stdout(),
    )
    .unwrap();
    let access_now = shown["access_token"].as_str().unwrap().to_string();
    assert!(access_now.starts_with("ya29.") && access_now != issued);
    inside(&c.a, name, &generate(&access_now, "generateContent")).ok();
    let generated = answered(&c, "gemini.generate");
    assert!(
        generated.len() == 2 && generated[1]["auth"] == format!("Bearer {issued}"),
        "{generated:#?}"
    );
    assert_eq!(token_lines(&c).len(), 1);
    let node: serde_json::Value =
        serde_json::from_str(&c.a.read("/root/.gemini/oauth_creds.json")).unwrap();
    assert_eq!(node["access_token"], issued.as_str());
    c.a.sh(&format!("ag-box park {name}")).ok();
}
