//! Secrets reach restic through its environment only: never argv, logs, or the box.

mod common;

use common::{Checked, Host, Target, assert_code};

#[test]
fn the_restic_password_stays_out_of_argv_logs_and_the_box() {
    let Some(host) = Host::new("secrets") else {
        return;
    };
    let secret = format!("pw-{}-do-not-leak", std::process::id());
    let base = host.base.display().to_string();
    let name = format!("sec-{}", std::process::id());
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v restic"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    host.sh(&format!(
        "set -e; mkdir -p config shim home/{name}; echo data > home/{name}/f
         printf 'RESTIC_PASSWORD={secret}\\nBOX_NODE=host\\n' > config/env; chmod 600 config/env
         printf '#!/bin/sh\\nprintf \"%%s\\\\n\" \"$*\" >> {base}/argv.log\\nexec {} \"$@\"\\n' > shim/restic
         chmod +x shim/restic",
        real.trim()
    ))
    .ok();
    let env = [("AG_BOX_LOG", "debug")];
    let mut transcript = String::new();
    for step in [
        format!("ag-box track {name}"),
        format!("ag-box up {name}"),
        format!("ag-box exec {name} -- sh -c 'env; cat /proc/1/cmdline'"),
        format!("cat /proc/$(cat /run/box/{name}/anchor.pid)/cmdline"),
        format!("ag-box snapshot {name}"),
        format!("ag-box park {name}"),
        "ag-box status --json --deep".to_string(),
    ] {
        let out = host.sh_env(&env, &format!("export PATH={base}/shim:$PATH; {step}"));
        out.ok();
        transcript.push_str(&out.stdout());
        transcript.push_str(&out.stderr());
    }
    assert!(
        !host.base.join("state/restic-password").exists(),
        "the env file's password was not used"
    );
    let argv = host.sh("cat argv.log").ok().stdout();
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

/// A login made inside a box on a node without that agent's credentials: `park` says no
/// snapshot carries it, `globals adopt` makes it the node's (refused while the box runs), and
/// the box's next start shares the node's file.
#[test]
fn a_login_made_inside_a_box_is_adopted_by_the_node() {
    let Some(host) = Host::new("adopt") else {
        return;
    };
    let name = format!("adopt-{}", std::process::id());
    let home = host.home().to_string();
    let node_file = format!("{home}/.codex/auth.json");
    let own_file = host
        .base
        .join(format!("state/homes/{name}/.codex/auth.json"));
    host.sh(&format!(
        "set -e; mkdir -p {home}/{name}; echo x > {home}/{name}/f; ag-box track {name}; ag-box up {name}
         ag-box exec {name} -- sh -c 'echo {{\\\"tokens\\\":\\\"made-inside\\\"}} > ~/.codex/auth.json'"
    ))
    .ok();
    assert!(
        own_file.is_file(),
        "the login never landed in the box's home"
    );
    assert!(!std::path::Path::new(&node_file).exists());

    let out = host.sh(&format!("ag-box globals adopt {name}"));
    assert_code(&out, 1, &format!("box '{name}' is running here"));
    assert!(!std::path::Path::new(&node_file).exists());

    let out = host.sh(&format!("ag-box park {name}"));
    assert_code(
        &out,
        0,
        &format!(
            "box '{name}' holds a login made inside it (~/.codex/auth.json) that no snapshot carries"
        ),
    );
    assert!(
        out.stderr()
            .contains(&format!("'ag-box globals adopt {name}'"))
    );

    let out = host.sh(&format!("ag-box globals adopt {name}"));
    assert_eq!(out.ok().stdout(), format!("adopted {node_file}\n"));
    assert_eq!(
        host.sh(&format!("stat -c '%a %u' {node_file}; cat {node_file}"))
            .ok()
            .stdout(),
        "600 0\n{\"tokens\":\"made-inside\"}\n"
    );
    assert!(!own_file.exists(), "the box kept its own copy");
    let out = host.sh(&format!("ag-box globals adopt {name}"));
    assert_code(
        &out,
        0,
        "holds no login of its own on this node: nothing to adopt",
    );
    assert_eq!(out.stdout(), "");

    // The next start binds the node's file: the box reads it, and a refresh reaches the node.
    let out = host.sh(&format!(
        "set -e; ag-box up {name}; ag-box exec {name} -- cat ~/.codex/auth.json 2>&1
         ag-box exec {name} -- sh -c 'echo {{\\\"tokens\\\":\\\"refreshed\\\"}} > ~/.codex/auth.json'
         cat {node_file}; ag-box park {name} >/dev/null"
    ));
    assert_eq!(
        out.ok().stdout(),
        "{\"tokens\":\"made-inside\"}\n{\"tokens\":\"refreshed\"}\n"
    );
    assert!(
        !out.stderr().contains("login made inside"),
        "{}",
        out.stderr()
    );
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
    host.sh(&format!(
        "set -e; mkdir -p {home}/{name}; echo x > {home}/{name}/f; ag-box track {name}; ag-box up {name}
         umask 077; echo root-only-secret > {base}/secret"
    ))
    .ok();
    let node_file = |rel: &str| std::path::Path::new(&home).join(rel);
    // `script` run inside the box, as its user (the box started for it and stopped after).
    let in_box = |script: &str| {
        host.sh(&format!(
            "set -e; ag-box up {name}; ag-box exec {name} -- sh -c '{script}'; ag-box stop {name}"
        ))
        .ok();
    };
    // Each: what the box plants (in its own HOME), and what adopt says.
    let cases = [
        (
            format!("ln -sfn {base}/secret ~/.claude/.credentials.json"),
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
        host.sh(&format!("ls -l {base}/state/homes/{name}/{rel}"))
            .ok();
        let out = host.sh(&format!("ag-box globals adopt {name}"));
        assert_code(&out, 1, &said);
        assert_eq!(
            out.stderr().trim_end().lines().count(),
            1,
            "{}",
            out.stderr()
        );
        assert!(!node_file(rel).exists(), "{rel} was adopted");
        in_box(&format!("rm -f ~/{rel}"));
    }
    // One good login and one that is not: nothing moves.
    in_box("echo {} > ~/.codex/auth.json; echo nope > ~/.gemini/oauth_creds.json");
    let out = host.sh(&format!("ag-box globals adopt {name}"));
    assert_code(
        &out,
        1,
        "its ~/.gemini/oauth_creds.json is not a login file",
    );
    assert!(
        !node_file(".codex/auth.json").exists(),
        "a login moved before the check of all"
    );
    assert!(
        host.base
            .join(format!("state/homes/{name}/.codex/auth.json"))
            .is_file()
    );
    in_box("rm -f ~/.codex/auth.json ~/.gemini/oauth_creds.json");
    // A keyed config says where the agent sends its requests: never the box's to choose.
    in_box(
        r#"echo {\"apiKey\":\"k\",\"baseURL\":\"https://evil.example\"} > ~/.grok/user-settings.json"#,
    );
    host.sh(&format!(
        "test -s {base}/state/homes/{name}/.grok/user-settings.json"
    ))
    .ok();
    assert_code(
        &host.sh(&format!("ag-box globals adopt {name}")),
        0,
        "nothing to adopt",
    );
    assert!(!node_file(".grok/user-settings.json").exists());
    // A fifo (which would hold a reader forever) is no login at all.
    in_box("mkfifo ~/.gemini/oauth_creds.json");
    host.sh(&format!(
        "test -p {base}/state/homes/{name}/.gemini/oauth_creds.json"
    ))
    .ok();
    let out = host.sh(&format!("timeout 20 ag-box globals adopt {name}"));
    assert_code(&out, 0, "nothing to adopt");
    assert!(!node_file(".gemini/oauth_creds.json").exists());
    assert_eq!(
        host.sh(&format!("cat {base}/secret")).ok().stdout(),
        "root-only-secret\n"
    );
}
