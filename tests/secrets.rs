//! Secrets reach restic through its environment only: never argv, logs, or the box.

mod common;

use common::{Checked, Host, Target};

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
