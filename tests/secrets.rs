//! Secrets reach restic through its environment only: never argv, logs, or the box.

mod common;

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};

use common::boxtest::{BoxTest, Exit, Project, command};
use common::{Host, Target};

/// Where a program is on the host's PATH.
fn on_path(host: &Host, program: &str) -> String {
    host.search_path()
        .split(':')
        .map(|dir| format!("{dir}/{program}"))
        .find(|p| std::path::Path::new(p).is_file())
        .unwrap_or_else(|| panic!("no {program} on {}", host.search_path()))
}

#[test]
fn the_restic_password_stays_out_of_argv_logs_and_the_box() {
    let Some(host) = Host::new("secrets") else {
        return;
    };
    let secret = format!("pw-{}-do-not-leak", std::process::id());
    let base = host.base.display().to_string();
    let name = format!("sec-{}", std::process::id());
    let real = on_path(&host, "restic");
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "data\n"));
    Project::at(&format!("{base}/config"))
        .private("env", format!("RESTIC_PASSWORD={secret}\nBOX_NODE=host\n"))
        .write_on(&host);
    let shim = Project::at(&format!("{base}/shim"))
        .executable(
            "restic",
            format!("#!/bin/sh\nprintf \"%s\\n\" \"$*\" >> {base}/argv.log\nexec {real} \"$@\"\n"),
        )
        .write_on(&host);
    let path = format!("{shim}:{}", host.search_path());
    let mut transcript = String::new();
    // Each step with restic through the shim and ag-box's debug lines, all it says kept.
    let run = |steps: Vec<common::boxtest::Step<'_>>, transcript: &mut String| {
        for step in steps {
            let ran = step.env("AG_BOX_LOG", "debug").env("PATH", &path).ok();
            transcript.push_str(&ran.stdout());
            transcript.push_str(&ran.stderr());
        }
    };
    run(
        vec![
            b.track(),
            b.up(),
            b.exec_sh("env; cat /proc/1/cmdline").into_step(),
        ],
        &mut transcript,
    );
    let anchor = host.read(&format!("/run/box/{name}/anchor.pid"));
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", anchor.trim())).unwrap();
    transcript.push_str(&String::from_utf8_lossy(&cmdline));
    run(
        vec![b.snapshot(), b.park(), b.ag(["status", "--json", "--deep"])],
        &mut transcript,
    );
    assert!(
        !host.base.join("state/restic-password").exists(),
        "the env file's password was not used"
    );
    let argv = host.read(&format!("{base}/argv.log"));
    assert!(
        argv.contains("backup --json"),
        "the shim saw no backup:\n{argv}"
    );
    assert!(!argv.contains(&secret), "secret in restic argv:\n{argv}");
    assert!(
        !transcript.contains(&secret),
        "secret in output:\n{transcript}"
    );
    assert!(
        transcript.contains(&format!("BOX_NAME={name}")),
        "{transcript}"
    );
    assert!(
        !transcript.contains("RESTIC_"),
        "restic variables leaked into the box:\n{transcript}"
    );
}

/// A login made inside a box on a node without that agent's credentials (`OpenCode`'s, which
/// the broker holds only where the node has a file): `park` says no snapshot carries it,
/// `globals adopt` makes it the node's (refused while the box runs), and the box's next start
/// on the host's network shares the node's file.
#[test]
fn a_login_made_inside_a_box_is_adopted_by_the_node() {
    let Some(host) = Host::new("adopt") else {
        return;
    };
    let name = format!("adopt-{}", std::process::id());
    let home = host.home().to_string();
    let node_file = format!("{home}/.local/share/opencode/auth.json");
    let own_file = host.base.join(format!(
        "state/homes/{name}/.local/share/opencode/auth.json"
    ));
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "x\n"));
    b.track().ok();
    b.up().ok();
    b.exec_sh(r#"echo '{"tokens":"made-inside"}' > ~/.local/share/opencode/auth.json"#)
        .ok();
    assert!(
        own_file.is_file(),
        "the login never landed in the box's home"
    );
    assert!(!host.exists(&node_file));

    let adopt = || b.ag(["globals", "adopt", &name]);
    adopt().cannot(Exit::Failure, &format!("box '{name}' is running here"));
    assert!(!host.exists(&node_file));

    b.park()
        .ok()
        .stderr_has(&format!(
            "box '{name}' holds a login made inside it (~/.local/share/opencode/auth.json) that no snapshot carries"
        ))
        .stderr_has(&format!("'ag-box globals adopt {name}'"));

    adopt().ok().stdout_is(&format!("adopted {node_file}\n"));
    let meta = std::fs::metadata(host.host_path(&node_file)).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.uid()), (0o600, 0));
    assert_eq!(host.read(&node_file), "{\"tokens\":\"made-inside\"}\n");
    assert!(!own_file.exists(), "the box kept its own copy");
    adopt()
        .ok()
        .stderr_has("holds no login of its own on this node: nothing to adopt")
        .stdout_is("");

    // The next start on the host's network (no broker) binds the node's file: the box reads
    // it, and a refresh reaches the node. (A guarded box sees the broker's copy of it.)
    let unsaid = "login made inside";
    b.set(["network=host"]).ok();
    b.up().ok().stderr_lacks(unsaid);
    b.exec_sh("cat ~/.local/share/opencode/auth.json 2>&1")
        .ok()
        .stdout_is("{\"tokens\":\"made-inside\"}\n")
        .stderr_lacks(unsaid);
    b.exec_sh(r#"echo '{"tokens":"refreshed"}' > ~/.local/share/opencode/auth.json"#)
        .ok()
        .stderr_lacks(unsaid);
    assert_eq!(host.read(&node_file), "{\"tokens\":\"refreshed\"}\n");
    b.park().ok().stderr_lacks(unsaid);
}

/// A box is given the node's logins of its agent and gh's, and only those unless `creds=` names
/// others: the other logins' files are nowhere in its HOME. gh's token is the broker's: the box
/// sees a placeholder of its shape (tests/broker.rs). The API key Claude Code once kept in
/// `~/.claude.json` never reaches a box's own copy of it.
#[test]
fn a_box_sees_only_the_logins_it_is_given() {
    let Some(host) = Host::new("creds") else {
        return;
    };
    let name = format!("creds-{}", std::process::id());
    Project::at(".claude")
        .file(".credentials.json", "{\"t\":\"CLAUDE-TOKEN\"}\n")
        .write_on(&host);
    Project::at(".codex")
        .file("auth.json", "{\"t\":\"CODEX-TOKEN\"}\n")
        .write_on(&host);
    Project::at(".config/gh")
        .file("hosts.yml", "oauth_token: GH-TOKEN\n")
        .write_on(&host);
    // The API key Claude Code once kept in ~/.claude.json, which seeds each box's own.
    host.write(
        &format!("{}/.claude.json", host.home()),
        "{\"primaryApiKey\":\"APIKEY-TOKEN\",\"hasCompletedOnboarding\":true}\n",
    );
    // The node's ~/.local, which every box sees, without OpenCode's store yet.
    Project::at(".local/bin")
        .file("README", "x\n")
        .write_on(&host);
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "x\n"));
    b.track().ok();
    b.set(["agent=claude"]).ok().stderr_has("creds=default");
    // Every token the box can find anywhere in its HOME, by name.
    let found = || {
        let out = b
            .exec_sh("grep -rhoa '[A-Z]*-TOKEN' ~ 2>/dev/null | sort -u")
            .ok()
            .stdout();
        out.lines().map(str::to_string).collect::<Vec<_>>()
    };
    // gh's login as the box sees it: a placeholder of the token's length (GH- is no prefix
    // of gh's tokens: none kept).
    let gh_shown = || {
        let text = b.exec_sh("cat ~/.config/gh/hosts.yml").ok().stdout();
        let token = text
            .trim()
            .strip_prefix("oauth_token: ")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            token.len() == "GH-TOKEN".len() && token.chars().all(|c| c.is_ascii_alphanumeric()),
            "{text}"
        );
    };
    b.up().ok();
    assert_eq!(found(), ["CLAUDE-TOKEN"]);
    gh_shown();
    b.exec_sh("grep -q hasCompletedOnboarding ~/.claude.json")
        .ok();
    // An OpenCode login made on the node while the box runs does not show in it either.
    host.write(
        &format!("{}/.local/share/opencode/auth.json", host.home()),
        "{\"t\":\"OPENCODE-TOKEN\"}\n",
    );
    b.exec_sh("test -d ~/.local/bin").ok();
    assert_eq!(found(), ["CLAUDE-TOKEN"]);
    b.park().ok();
    b.set(["creds=all"])
        .ok()
        .stderr_has("creds=claude,codex,gemini,grok,opencode,gh");
    b.up().ok();
    // Codex's file, which the broker cannot read as a key or a login, is an empty copy in the
    // box: never the node's file; OpenCode's, whose entry is no provider's, holds nothing.
    assert_eq!(found(), ["CLAUDE-TOKEN"]);
    b.exec_sh("cat ~/.local/share/opencode/auth.json")
        .ok()
        .stdout_is("{\n  \"t\": null\n}");
    b.exec_sh("cat ~/.codex/auth.json").ok().stdout_is("{}");
    gh_shown();
    b.park().ok();
    b.set(["creds=codex"])
        .ok()
        .stderr_has("creds=codex")
        .stderr_has("creds takes effect at the next 'ag-box up'");
    b.up().ok();
    assert_eq!(found(), Vec::<String>::new());
    b.exec_sh("cat ~/.codex/auth.json").ok().stdout_is("{}");
    b.exec_sh("test ! -e ~/.config/gh").ok();
    b.park().ok();
    b.set(["creds=none"]).ok().stderr_has("creds=none");
    b.up().ok();
    assert_eq!(found(), Vec::<String>::new());
    b.set(["creds=ssh"]).cannot(
        Exit::Usage,
        "creds takes logins among claude, codex, gemini, grok, opencode, gh, or all, none or default",
    );
    b.park().ok();
}

/// Claude Code's OAuth login on the node (the direct runtime here; tests/broker.rs refreshes it
/// on a systemd node): a box given claude sees its login with placeholders that do not expire
/// soon, and nothing else of the file; no token of it is anywhere in the box, and the node's
/// file is left as it was.
#[test]
fn an_oauth_login_is_seen_as_placeholders() {
    let Some(host) = Host::new("oauth") else {
        return;
    };
    let name = format!("oauth-{}", std::process::id());
    let access = "sk-ant-oat01-HostRealAccessHostRealAccessHostRealAccess00";
    let refresh = "sk-ant-ort01-HostRealRefreshHostRealRefreshHostRealRefre00";
    let file = format!(
        "{{\"claudeAiOauth\":{{\"accessToken\":\"{access}\",\"refreshToken\":\"{refresh}\",\"expiresAt\":1000,\"scopes\":[\"user:inference\"]}},\"mcpOAuth\":{{\"s\":{{\"accessToken\":\"MCP-TOKEN-SECRET\"}}}}}}\n"
    );
    Project::at(".claude")
        .file(".credentials.json", &file)
        .write_on(&host);
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "x\n"));
    b.track().ok();
    b.set(["agent=claude"]).ok();
    b.up().ok();
    let shown: serde_json::Value =
        serde_json::from_str(&b.exec_sh("cat ~/.claude/.credentials.json").ok().stdout()).unwrap();
    let login = &shown["claudeAiOauth"];
    let (a, r) = (
        login["accessToken"].as_str().unwrap(),
        login["refreshToken"].as_str().unwrap(),
    );
    assert!(
        a.starts_with("sk-ant-oat01-")
            && r.starts_with("sk-ant-ort01-")
            && a != access
            && r != refresh,
        "{shown}"
    );
    assert!(
        login["expiresAt"].as_u64().unwrap() > 1_000_000_000_000,
        "{shown}"
    );
    assert_eq!(shown.get("mcpOAuth"), None, "{shown}");
    // Split, so the search does not find its own command line.
    let (a1, a2) = access.split_at(20);
    let (r1, r2) = refresh.split_at(20);
    // What it finds: the files that hold one, then how many environments and command lines do.
    b.exec_sh(&format!(
        "printf '%s\\n' \"{a1}\"\"{a2}\" \"{r1}\"\"{r2}\" MCP-TOKEN-\"SECRET\" > /tmp/real
         grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude=real -f /tmp/real / | head -5
         cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f /tmp/real || true"
    ))
    .ok()
    .stdout_is("0\n");
    b.park().ok();
    assert_eq!(
        host.read(&format!("{}/.claude/.credentials.json", host.home())),
        file
    );
}

/// A Claude Code login a box made in its own home (on the host's network, or before the broker
/// kept such logins), where the node has none: its next start with a proxy moves it into the
/// broker's keeping for that box (said once), and the box sees placeholders from then on.
#[test]
fn a_login_in_a_boxs_own_home_becomes_the_brokers_for_it() {
    let Some(host) = Host::new("own-login") else {
        return;
    };
    let name = format!("own-{}", std::process::id());
    let base = host.base.display().to_string();
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "x\n"));
    b.track().ok();
    b.set(["network=host", "agent=claude"]).ok();
    b.up().ok();
    let access = "sk-ant-oat01-OwnLoginAccessOwnLoginAccessOwnLoginAccess00";
    b.exec_sh(&format!(
        r#"printf '{{"claudeAiOauth":{{"accessToken":"{access}","refreshToken":"sk-ant-ort01-OwnRefreshOwnRefreshOwnRefresh00","expiresAt":4102444800000}}}}' > ~/.claude/.credentials.json"#
    ))
    .ok();
    b.stop().ok();
    b.set(["network=allow"]).ok();
    b.up()
        .ok()
        .stderr_has("the claude login it made is now kept by the credential broker");
    let kept = format!("{base}/state/broker/boxes/{name}/claude-oauth.json");
    assert!(host.read(&kept).contains(access));
    let shown: serde_json::Value =
        serde_json::from_str(&b.exec_sh("cat ~/.claude/.credentials.json").ok().stdout()).unwrap();
    let placeholder = shown["claudeAiOauth"]["accessToken"].as_str().unwrap();
    assert!(
        placeholder.starts_with("sk-ant-oat01-") && placeholder != access,
        "{shown}"
    );
    let (head, tail) = access.split_at(20);
    b.exec_sh(&format!(
        "printf '%s\\n' \"{head}\"\"{tail}\" > /tmp/real
         grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude=real -f /tmp/real / | head -5
         cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f /tmp/real || true"
    ))
    .ok()
    .stdout_is("0\n");
    b.park()
        .ok()
        .stderr_has("kept by the credential broker on this node");
    b.ag(["drop", &name, "--yes"]).ok();
    assert!(!host.exists(&kept), "a dropped box's login outlived it");
}

/// What a box plants where a login belongs is never adopted: a link to a root-only file, a fifo,
/// a file too big, a file that is no login; each refused in one line, the node left as it was.
#[test]
fn a_planted_login_is_never_adopted() {
    let Some(host) = Host::new("adopt-planted") else {
        return;
    };
    let name = format!("plant-{}", std::process::id());
    let home = host.home().to_string();
    let base = host.base.display().to_string();
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "x\n"));
    b.track().ok();
    // On the host's network no broker's copy is bound over its own logins: it may plant there.
    b.set(["network=host"]).ok();
    b.up().ok();
    let secret = format!("{base}/secret");
    std::fs::write(&secret, "root-only-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let node_file = |rel: &str| format!("{home}/{rel}");
    let own_file = |rel: &str| format!("{base}/state/homes/{name}/{rel}");
    // `script` run inside the box, as its user (the box started for it and stopped after).
    let in_box = |script: &str| {
        b.up().ok();
        b.exec_sh(script).ok();
        b.stop().ok();
    };
    let adopt = || b.ag(["globals", "adopt", &name]);
    // Each: what the box plants (in its own HOME), and what adopt says.
    let cases = [
        (
            format!("ln -sfn {secret} ~/.claude/.credentials.json"),
            ".claude/.credentials.json",
            "/.claude/.credentials.json is a link, not a file".to_string(),
        ),
        (
            "head -c 2000000 /dev/zero > ~/.codex/auth.json".to_string(),
            ".codex/auth.json",
            "/.codex/auth.json is larger than 1048576 bytes".to_string(),
        ),
        (
            r#"printf "not json" > ~/.codex/auth.json"#.to_string(),
            ".codex/auth.json",
            format!("box '{name}': its ~/.codex/auth.json is not a login file"),
        ),
    ];
    for (plant, rel, said) in cases {
        in_box(&plant);
        assert!(host.exists(&own_file(rel)), "{rel} was not planted");
        let out = adopt().cannot(Exit::Failure, &said);
        assert_eq!(
            out.stderr().trim_end().lines().count(),
            1,
            "{}",
            out.stderr()
        );
        assert!(!host.exists(&node_file(rel)), "{rel} was adopted");
        in_box(&format!("rm -f ~/{rel}"));
    }
    // One good login and one that is not: nothing moves.
    in_box("echo {} > ~/.codex/auth.json; echo nope > ~/.gemini/oauth_creds.json");
    adopt().cannot(
        Exit::Failure,
        "its ~/.gemini/oauth_creds.json is not a login file",
    );
    assert!(
        !host.exists(&node_file(".codex/auth.json")),
        "a login moved before the check of all"
    );
    assert!(std::path::Path::new(&own_file(".codex/auth.json")).is_file());
    in_box("rm -f ~/.codex/auth.json ~/.gemini/oauth_creds.json");
    // A keyed config says where the agent sends its requests: never the box's to choose.
    in_box(
        r#"echo {\"apiKey\":\"k\",\"baseURL\":\"https://evil.example\"} > ~/.grok/user-settings.json"#,
    );
    let planted = std::fs::metadata(own_file(".grok/user-settings.json")).unwrap();
    assert!(planted.len() > 0);
    adopt().ok().stderr_has("nothing to adopt");
    assert!(!host.exists(&node_file(".grok/user-settings.json")));
    // A fifo (which would hold a reader forever) is no login at all.
    in_box("mkfifo ~/.gemini/oauth_creds.json");
    let fifo = std::fs::symlink_metadata(own_file(".gemini/oauth_creds.json")).unwrap();
    assert!(fifo.file_type().is_fifo());
    command(
        &host,
        ["timeout", "20", "ag-box", "globals", "adopt", &name],
    )
    .ok()
    .stderr_has("nothing to adopt");
    assert!(!host.exists(&node_file(".gemini/oauth_creds.json")));
    assert_eq!(host.read(&secret), "root-only-secret\n");
    // A link planted where Claude Code's login is, then a start with the broker's copy bound
    // there (the node has no login): the start follows nothing, keeps nothing, and starts.
    in_box(&format!("ln -sfn {secret} ~/.claude/.credentials.json"));
    assert!(
        std::fs::symlink_metadata(own_file(".claude/.credentials.json"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    b.set(["network=allow"]).ok();
    b.up().ok();
    b.exec_sh("cat ~/.claude/.credentials.json")
        .ok()
        .stdout_is("{}");
    b.stop().ok();
    assert!(!host.exists(&format!(
        "{base}/state/broker/boxes/{name}/claude-oauth.json"
    )));
    assert_eq!(host.read(&secret), "root-only-secret\n");
    assert!(!host.exists(&node_file(".claude/.credentials.json")));
}
