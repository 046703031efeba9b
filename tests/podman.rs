//! Containers inside a box: rootless podman runs an image loaded from an archive in the
//! project, in a user namespace of the box's own, with no socket of the node's container
//! engine anywhere in the box and no network of its own (the box's proxy is its only way out).

mod common;

use common::boxtest::parked_box;
use common::{Checked, Cluster, Target};

/// podman's setup for a box, as docs/operations.md gives it: storage in the box's own HOME (the
/// node's `~/.local` is read-only there) that needs no subordinate ids (vfs, ownership not
/// kept), no cgroups, no network.
const SETUP: &str = r#"
mkdir -p ~/.config/containers
printf '[storage]\ndriver = "vfs"\nrootless_storage_path = "$HOME/.containers/storage"\n[storage.options]\nignore_chown_errors = "true"\n' > ~/.config/containers/storage.conf
printf '[containers]\nnetns = "none"\ncgroups = "disabled"\n[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n' > ~/.config/containers/containers.conf
export XDG_RUNTIME_DIR=/tmp/xdg-$(id -u); mkdir -p -m 700 $XDG_RUNTIME_DIR
"#;

#[test]
fn rootless_podman_runs_a_container_from_a_local_archive_inside_a_box() {
    let Some(c) = Cluster::get() else { return };
    let name = "podman-in";
    let b = parked_box(&c, name);
    // The node has a ~/.local (its agents' CLIs live there), which boxes see read-only.
    c.a.sh("mkdir -p /root/.local/bin").ok();
    b.verb("up", ["--node", "nodeA"]).ok();
    let local = b
        .exec_sh("touch ~/.local/x 2>/dev/null && echo writable || echo read-only")
        .ok()
        .stdout();
    assert_eq!(local, "read-only\n");
    // An image: a root filesystem of busybox alone, archived in the project.
    b.exec_sh(
        "mkdir -p img/bin && cp \"$(command -v busybox)\" img/bin/ && ln -s busybox img/bin/sh
         tar -C img -cf busybox.tar .",
    )
    .ok();
    let ran = b
        .exec_sh(&format!(
            "{SETUP}
             podman import busybox.tar localhost/busybox >/dev/null
             podman run --rm localhost/busybox sh -c 'echo hello from a container; id -u'"
        ))
        .ok()
        .stdout();
    assert_eq!(ran, "hello from a container\n0\n");
    // Root in the container is the box user on the node: it owns nothing of root's.
    let owner = b
        .exec_sh(&format!(
            "{SETUP}
             podman run --rm -v \"$PWD:/p\" localhost/busybox sh -c 'touch /p/made-in-a-container'
             stat -c %u made-in-a-container; id -u"
        ))
        .ok()
        .stdout();
    let ids: Vec<&str> = owner.lines().collect();
    assert_eq!(ids.len(), 2, "{owner}");
    assert_eq!(
        ids[0], ids[1],
        "a container's file is not the box user's: {owner}"
    );
    // No engine socket of the node's is there to reach.
    let sockets = b
        .exec_sh(
            "for s in /run/podman/podman.sock /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock; do
               test -e $s && echo $s; done; echo checked",
        )
        .ok()
        .stdout();
    assert_eq!(sockets, "checked\n");
    b.park().ok();
}
