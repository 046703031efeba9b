//! `gpu=true` on the rig: node A gets stand-in GPU device nodes (the null device's numbers, so
//! writing to them does nothing), and a box given them uses them as the device's group does;
//! a box without it sees none of them, nor the node's `/sys`.

mod common;

use common::boxtest::{BoxTest, parked_box};
use common::{Checked, Cluster, Node, Target};

/// The stand-in devices on node A, gone when dropped (pass or fail).
struct Devices<'a>(&'a Node);

impl Drop for Devices<'_> {
    fn drop(&mut self) {
        self.0.sh("rm -f /dev/nvidia0 /dev/nvidiactl");
    }
}

#[test]
fn a_gpu_box_uses_the_nodes_gpu_devices_and_another_box_sees_none() {
    let Some(c) = Cluster::get() else { return };
    let a = &c.a;
    // nvidia0 as a render node is: its group's alone.
    a.sh(
        "set -e; rm -f /dev/nvidia0 /dev/nvidiactl
         mknod -m 660 /dev/nvidia0 c 1 3; chgrp video /dev/nvidia0; mknod -m 666 /dev/nvidiactl c 1 3",
    )
    .ok();
    let video = a.sh("getent group video | cut -d: -f3").ok().stdout();
    let _gone = Devices(a);
    let doctor = a.sh("ag-box doctor || true").stdout();
    assert!(
        doctor
            .lines()
            .any(|l| l.contains("GPUs") && l.contains("/dev/nvidia0")),
        "{doctor}"
    );

    let name = "gpu-on";
    let b = parked_box(&c, name);
    b.set(["gpu=true"]).ok().stderr_has("gpu=true");
    b.verb("up", ["--node", "nodeA"]).ok();
    // The devices are there and usable through their group, which the box user is in; what
    // of /sys a GPU's userspace reads is readable, not writable.
    let used = b
        .exec_sh(
            "test -c /dev/nvidia0 && test -c /dev/nvidiactl && echo x > /dev/nvidia0 && echo used
             test -d /sys/bus/pci && test -d /sys/devices && test -d /sys/module && echo sys
             touch /sys/bus/pci/x 2>/dev/null || echo read-only
             id -G",
        )
        .ok()
        .stdout();
    let (said, ids) = used.split_at(used.find("read-only\n").map_or(0, |i| i + 10));
    assert_eq!(said, "used\nsys\nread-only\n");
    assert!(
        ids.split_whitespace().any(|g| g == video.trim()),
        "{ids} lacks the video group {video}"
    );
    b.park().ok();

    // A box without gpu=true: no device node of the GPU, no /sys.
    let other = "gpu-off";
    let plain: BoxTest = parked_box(&c, other);
    plain.verb("up", ["--node", "nodeA"]).ok();
    let seen = plain
        .exec_sh("test -e /dev/nvidia0 && echo nvidia0; test -e /sys/bus && echo sys; echo end")
        .ok()
        .stdout();
    assert_eq!(seen, "end\n");
    plain.park().ok();
}
