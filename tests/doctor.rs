//! `doctor` on a rig node: a good node passes, and each broken thing (a missing tool, a loose
//! env file, the S3 server gone, an unreachable node, another ag-box version on a node, a stale
//! restic lock) fails naming its fix.

mod common;

use common::{Checked, Cluster, Node, Target, assert_code};

const RESTIC_ENV: &str = "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/restic \
    RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test";
/// The rig's repository of changes alone.
const CHANGES_RESTIC_ENV: &str = "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/restic-changes \
    RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test";

/// The line of check `name` in doctor's output, and the fix line after it.
fn check(out: &str, name: &str) -> String {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.get(6..)
            .is_some_and(|rest| rest.starts_with(&format!("{name} ")))
        {
            return format!("{l}\n{}", lines.next().unwrap_or(""));
        }
    }
    panic!("no check {name} in:\n{out}")
}

/// The report of a doctor that found something failing.
fn failed(out: &std::process::Output) -> String {
    assert_code(out, 1, " failed on node ");
    out.stdout()
}

/// nodeC's ag-box, put back however the test ends.
struct RealBinary<'a>(&'a Node);

impl Drop for RealBinary<'_> {
    fn drop(&mut self) {
        self.0
            .sh("mv -f /opt/box/bin/ag-box.real /opt/box/bin/ag-box 2>/dev/null || true");
    }
}

#[test]
fn doctor_passes_a_good_node_and_names_the_fix_of_each_broken_thing() {
    let Some(c) = Cluster::get() else { return };
    let a = &c.a;
    // (--unlock: a test before this one may have cut a node's power under a running restic.)
    let good = a.sh("ag-box doctor --unlock");
    good.ok();
    for line in [
        "ok    store ",
        "ok    conditional writes ",
        "ok    clock ",
        "ok    node nodeB ",
        "ok    repository locks ",
        "ok    restic key ",
        "ok    changes repository ",
        "ok    snapshot pause ",
    ] {
        assert!(
            good.stdout().contains(line),
            "{line:?} missing:\n{}",
            good.stdout()
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&a.sh("ag-box doctor --json").ok().stdout()).unwrap();
    assert_eq!(
        (json["schema_version"].as_u64(), json["node"].as_str()),
        (Some(1), Some("nodeA"))
    );

    // A missing tool: tmux off the PATH.
    let no_tmux = a.sh(
        "rm -rf /root/doctor-bin && mkdir /root/doctor-bin && ln -s /usr/bin/* /root/doctor-bin/ && \
         rm /root/doctor-bin/tmux && PATH=/opt/box/bin:/root/doctor-bin:/usr/sbin:/sbin ag-box doctor",
    );
    assert_code(&no_tmux, 1, "doctor: 1 check failed on node nodeA");
    assert_eq!(
        check(&no_tmux.stdout(), "tool tmux")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        "FAIL tool tmux tmux is not installed (or not on PATH) fix: run install.sh (on Debian it apt-gets the tools), or install it by hand"
    );

    // A loose env file, the S3 server gone, an unreachable node: in a config of their own.
    a.sh("rm -rf /root/.config/box-doctor && cp -a /root/.config/box /root/.config/box-doctor && \
          chmod 644 /root/.config/box-doctor/env && echo 'ghost ghost.invalid' >> /root/.config/box-doctor/nodes")
        .ok();
    let env = [("BOX_CONFIG_DIR", "/root/.config/box-doctor")];
    let broken = a.sh_env(&env, "ag-box doctor");
    assert_code(&broken, 1, " failed on node ");
    let out = broken.stdout();
    assert!(
        check(&out, "file /root/.config/box-doctor/env")
            .contains("fix: chmod 600 /root/.config/box-doctor/env"),
        "{out}"
    );
    // ag-box itself refuses to read secrets others can read: the rest needs it private.
    assert!(check(&out, "config").starts_with("FAIL"), "{out}");
    a.sh("chmod 600 /root/.config/box-doctor/env").ok();
    let out = failed(&a.sh_env(&env, "ag-box doctor"));
    let ghost = check(&out, "node ghost");
    assert!(
        ghost.starts_with("FAIL") && ghost.contains("not reachable over ssh without a prompt"),
        "{ghost}"
    );
    let gone = a.sh_env(
        &[
            ("BOX_CONFIG_DIR", "/root/.config/box-doctor"),
            ("BOX_S3_ENDPOINT", "http://10.200.0.1:5999"),
        ],
        "ag-box doctor",
    );
    let store = check(&failed(&gone), "store");
    assert!(
        store.starts_with("FAIL") && store.contains("fix: check BOX_S3_ENDPOINT"),
        "{store}"
    );

    // Another ag-box version on nodeC.
    let real = RealBinary(&c.c);
    c.c.sh("mv /opt/box/bin/ag-box /opt/box/bin/ag-box.real && \
            printf '#!/bin/sh\\necho ag-box 0.0.9\\n' > /opt/box/bin/ag-box && chmod +x /opt/box/bin/ag-box")
        .ok();
    let mismatch = check(&failed(&a.sh("ag-box doctor")), "node nodeC");
    assert!(
        mismatch.contains("runs ag-box 0.0.9 but this node runs ag-box"),
        "{mismatch}"
    );
    drop(real);

    // A stale restic lock: a backup killed as a power cut would.
    a.sh(&format!(
        "{RESTIC_ENV}; mkdir -p /root/doctor-data && head -c 200M /dev/urandom > /root/doctor-data/big
         restic backup --host doctor /root/doctor-data >/dev/null 2>&1 & pid=$!
         for i in $(seq 100); do restic list locks --no-lock | grep -q . && break; sleep 0.1; done
         kill -9 $pid; wait $pid || true; rm -rf /root/doctor-data"
    ))
    .ok();
    let locked = check(&failed(&a.sh("ag-box doctor")), "repository locks");
    assert!(
        locked.starts_with("FAIL")
            && locked.contains("stale: nodeA pid")
            && locked.contains("fix: run 'ag-box doctor --unlock'"),
        "{locked}"
    );
    let unlocked = a.sh("ag-box doctor --unlock");
    assert!(check(&unlocked.ok().stdout(), "repository locks").starts_with("ok"));

    // One in the repository of changes: a backup waiting on its input holds a lock there.
    a.sh(&format!(
        "{CHANGES_RESTIC_ENV}; rm -f /root/doctor-fifo && mkfifo /root/doctor-fifo && exec 3<>/root/doctor-fifo
         restic backup --stdin --host doctor <&3 >/dev/null 2>&1 & pid=$!
         for i in $(seq 100); do restic list locks --no-lock | grep -q . && break; sleep 0.1; done
         kill -9 $pid; wait $pid || true; exec 3>&-; rm /root/doctor-fifo
         restic list locks --no-lock | grep -q ."
    ))
    .ok();
    let locked = check(&failed(&a.sh("ag-box doctor")), "repository locks");
    assert!(
        locked.starts_with("FAIL")
            && locked.contains("stale: nodeA pid")
            && locked.contains("in restic-changes"),
        "{locked}"
    );
    let unlocked = a.sh("ag-box doctor --unlock");
    assert!(check(&unlocked.ok().stdout(), "repository locks").starts_with("ok"));
    let left = a.sh(&format!(
        "{CHANGES_RESTIC_ENV}; restic list locks --no-lock"
    ));
    assert_eq!(left.ok().stdout(), "");
    a.sh("rm -rf /root/doctor-bin /root/.config/box-doctor")
        .ok();
}
