//! `ag-box port`: a server a box started on its own loopback answers on the node's loopback
//! while `port` runs, on a systemd node and with the bare host's direct runtime, and from
//! another node through ssh. Traffic stays on loopback and the rig's own addresses.

mod common;

use std::time::Duration;

use common::boxtest::{BoxTest, Exit, Project, parked_box, wait_for};
use common::{Checked, Cluster, Host, Target};

/// The box's web server: port 8000 on the box's loopback, serving `www/` of the project.
fn serve_in(b: &BoxTest) {
    b.exec_sh(
        "mkdir -p www && echo port-marker > www/marker.txt
         setsid python3 -m http.server 8000 --bind 127.0.0.1 --directory www >/dev/null 2>&1 < /dev/null &
         echo started",
    )
    .ok();
    b.ag(["port", b.name(), "--list"])
        .until(Duration::from_secs(20), |r| {
            r.stdout().lines().any(|l| l == "127.0.0.1:8000")
        });
}

/// `ag-box port <box> 8000 --local <local>` started on `t` in the background; the body curl
/// gets from it there once it answers.
fn forwarded(t: &dyn Target, name: &str, local: u16) -> String {
    t.sh(&format!(
        "setsid -f ag-box port {name} 8000 --local {local} > /tmp/port-{local}.log 2>&1 < /dev/null"
    ))
    .ok();
    wait_for(
        &format!("port {local} answering on {}", t.home()),
        Duration::from_secs(20),
        || {
            let out = t.sh(&format!(
                "curl -sf -m 5 http://127.0.0.1:{local}/marker.txt || true"
            ));
            Some(out.stdout()).filter(|s| !s.is_empty())
        },
    )
}

/// Only loopback listens on `local` (`ss`'s local addresses).
fn listeners(t: &dyn Target, local: u16) -> String {
    t.sh(&format!("ss -ltnH 'sport = :{local}' | awk '{{print $4}}'"))
        .ok()
        .stdout()
}

fn stop_forwarding(t: &dyn Target, name: &str) {
    t.sh(&format!("pkill -f 'ag-box port {name} ' || true"));
}

fn a_box_port_answers_here(t: &dyn Target, b: &BoxTest, local: u16) {
    let name = b.name();
    serve_in(b);
    assert_eq!(forwarded(t, name, local), "port-marker\n");
    assert_eq!(listeners(t, local), format!("127.0.0.1:{local}\n"));
    // Each connection is its own: a second one while the first forward runs.
    let again = t.sh(&format!(
        "curl -sf -m 5 http://127.0.0.1:{local}/marker.txt"
    ));
    assert_eq!(again.stdout(), "port-marker\n");
    stop_forwarding(t, name);
    // What it said, and where.
    let said = t.sh(&format!("cat /tmp/port-{local}.log")).stdout();
    assert!(
        said.contains(&format!(
            "box '{name}': its port 8000 is at 127.0.0.1:{local} here; Ctrl-C ends it"
        )),
        "{said}"
    );
    // Bad input: no port, and one that is none.
    b.ag(["port", name])
        .cannot(Exit::Usage, "required arguments were not provided");
    b.ag(["port", name, "0"])
        .cannot(Exit::Usage, "0 is not in 1..=65535");
}

#[test]
fn a_port_in_a_box_on_a_systemd_node_answers_on_that_node_and_from_another() {
    let Some(c) = Cluster::get() else { return };
    let name = "ports-main";
    let b = parked_box(&c, name);
    b.verb("up", ["--node", "nodeA"]).ok();
    a_box_port_answers_here(&c.a, &b, 18000);
    // From node B: one ssh to node A, a socket there that only root reaches, gone after.
    assert_eq!(forwarded(&c.b, name, 18001), "port-marker\n");
    assert_eq!(listeners(&c.b, 18001), "127.0.0.1:18001\n");
    let sockets =
        c.a.sh("stat -c '%a %U' /run/ag-box-ports; ls /run/ag-box-ports | wc -l");
    assert_eq!(sockets.stdout(), "700 root\n1\n");
    let said = c.b.sh("cat /tmp/port-18001.log").stdout();
    assert!(
        said.contains(&format!(
            "box '{name}' is up on node nodeA: its port 8000 is at 127.0.0.1:18001 here, through ssh"
        )),
        "{said}"
    );
    stop_forwarding(&c.b, name);
    wait_for("the socket on node A gone", Duration::from_secs(20), || {
        let left = c.a.sh("ls /run/ag-box-ports | wc -l").stdout();
        (left == "0\n").then_some(())
    });
    // --list from node B follows the box to node A.
    let listed = c.b.sh(&format!("ag-box port {name} --list")).ok().stdout();
    assert!(listed.lines().any(|l| l == "127.0.0.1:8000"), "{listed}");
    b.park().ok();
    b.ag(["port", name, "8000"])
        .cannot(Exit::Failure, "is parked");
}

#[test]
fn a_port_in_a_box_with_the_direct_runtime_answers_on_the_host() {
    let Some(host) = Host::new("ports") else {
        return;
    };
    let name = format!("ports-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "x\n"));
    b.track().ok();
    b.up().ok();
    let local = 18100 + u16::try_from(std::process::id() % 500).unwrap();
    a_box_port_answers_here(&host, &b, local);
    b.park().ok();
}
