//! Egress control on the rig: a box on node A has its own network, and reaches the test servers
//! on nodes B and C only through its proxy, as its policy says. Traffic goes only to the rig's
//! own addresses.
// A test is one scenario told top to bottom; splitting it would hide the story.
#![allow(clippy::too_many_lines)]

mod common;

use std::time::{Duration, Instant};

use common::{Checked, Cluster, Node, Target};

/// Server one: plain HTTP on node B.
const ONE: &str = "10.200.0.2:8081";
/// Server two: HTTP and HTTPS (self-signed) on node C.
const TWO_HTTP: &str = "10.200.0.3:8082";
const TWO_HTTPS: &str = "10.200.0.3:8443";
/// A name node A resolves (its /etc/hosts) to server two's private address.
const TWO_NAME: &str = "srv-two.egress.test";

/// A test server in a transient unit on a node, stopped when dropped.
struct Server<'a> {
    node: &'a Node,
    unit: &'static str,
}

impl<'a> Server<'a> {
    fn start(node: &'a Node, unit: &'static str, args: &str) -> Server<'a> {
        node.put_in_root("tests/egress-server.py", "egress-server.py");
        node.sh(&format!(
            "set -e; systemctl stop {unit} 2>/dev/null || true
             cd /root && openssl req -x509 -newkey rsa:2048 -nodes -keyout egress-key.pem \
               -out egress-cert.pem -days 2 -subj /CN=egress-test 2>/dev/null
             systemd-run --unit {unit} --quiet python3 /root/egress-server.py {args}"
        ))
        .ok();
        Server { node, unit }
    }
}

impl Drop for Server<'_> {
    fn drop(&mut self) {
        self.node
            .sh(&format!("systemctl stop {} 2>/dev/null || true", self.unit));
    }
}

/// Run a shell line inside the box on `n`; its output.
fn inside(n: &Node, name: &str, line: &str) -> std::process::Output {
    let quoted = line.replace('\'', r"'\''");
    n.sh(&format!("ag-box exec {name} -- bash -c '{quoted}'"))
}

/// `curl` inside the box through its proxy: (exit code, body, stderr).
fn curl(n: &Node, name: &str, args: &str) -> (i32, String, String) {
    let out = inside(n, name, &format!("curl -sS -m 10 {args}"));
    (out.code(), out.stdout(), out.stderr())
}

/// A direct connection from inside the box, bypassing the proxy: Python's error for it.
fn direct(n: &Node, name: &str, host: &str, port: u16) -> String {
    let out = inside(
        n,
        name,
        &format!(
            "python3 -c 'import socket; socket.create_connection((\"{host}\", {port}), 10)' 2>&1 | tail -1"
        ),
    );
    out.stdout().trim().to_string()
}

/// The proxy's reason in a response's headers (`curl -i` output).
fn refusal(headers: &str) -> Option<String> {
    headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("x-ag-box-refused")
            .then(|| v.trim().to_string())
    })
}

fn decisions(n: &Node, name: &str) -> Vec<serde_json::Value> {
    let out = n
        .sh(&format!("ag-box egress {name} --json --last 1000"))
        .ok()
        .stdout();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["decisions"].as_array().unwrap().clone()
}

/// Wait (bounded) until every URL answers from node A's own network.
fn wait_for_servers(a: &Node, urls: &[String]) {
    let all: Vec<String> = urls
        .iter()
        .map(|u| format!("curl -sfk {u} >/dev/null"))
        .collect();
    a.sh(&format!(
        "for i in $(seq 100); do {} && exit 0; sleep 0.1; done; exit 1",
        all.join(" && ")
    ))
    .ok();
}

#[test]
fn a_box_reaches_only_what_its_policy_names_and_every_decision_is_logged() {
    let Some(c) = Cluster::get() else { return };
    let _one = Server::start(&c.b, "egress-srv-one", "10.200.0.2 8081");
    let _two = Server::start(
        &c.c,
        "egress-srv-two",
        "10.200.0.3 8082 8443 /root/egress-cert.pem /root/egress-key.pem",
    );
    wait_for_servers(
        &c.a,
        &[
            format!("http://{ONE}/"),
            format!("https://{TWO_HTTPS}/"),
            format!("http://{TWO_HTTP}/"),
        ],
    );
    c.a.sh(&format!(
        "grep -q {TWO_NAME} /etc/hosts || echo '10.200.0.3 {TWO_NAME}' >> /etc/hosts"
    ))
    .ok();
    let name = "egress-main";
    c.parked_box(name);
    c.a.sh(&format!(
        "echo '# no node entries in this test' > /etc/box/egress-allow.txt
         ag-box set {name} network=allow allow={ONE},{TWO_NAME}:8082 && ag-box up {name} --node nodeA"
    ))
    .ok();

    // Server one, by plain HTTP forwarding and by a CONNECT tunnel.
    assert_eq!(
        curl(&c.a, name, &format!("http://{ONE}/")),
        (0, format!("hello from {ONE}\n"), String::new())
    );
    assert_eq!(
        curl(&c.a, name, &format!("--proxytunnel http://{ONE}/")),
        (0, format!("hello from {ONE}\n"), String::new())
    );
    // Server two: refused, with the reason in a header, by HTTP and by CONNECT.
    let (code, headers, _) = curl(&c.a, name, &format!("-i http://{TWO_HTTP}/"));
    assert_eq!(code, 0);
    assert!(headers.starts_with("HTTP/1.1 403"), "{headers}");
    assert_eq!(
        refusal(&headers),
        Some(format!("private address {TWO_HTTP} is not listed"))
    );
    let (code, _, err) = curl(&c.a, name, &format!("-k https://{TWO_HTTPS}/"));
    assert_eq!(code, 56, "{err}");
    assert!(err.contains("CONNECT tunnel failed, response 403"), "{err}");
    // A listed name that resolves to an unlisted private address.
    let (_, headers, _) = curl(&c.a, name, &format!("-i http://{TWO_NAME}:8082/"));
    assert_eq!(
        refusal(&headers),
        Some(format!(
            "{TWO_NAME} resolves to private address 10.200.0.3, which is not listed"
        ))
    );

    // Nothing bypasses the proxy: no route for TCP (v4, v6), and no name service.
    for (host, port) in [
        ("10.200.0.2", 8081),
        ("10.200.0.3", 8443),
        ("10.200.0.2", 22),
    ] {
        assert_eq!(
            direct(&c.a, name, host, port),
            "OSError: [Errno 101] Network is unreachable",
            "{host}:{port}"
        );
    }
    assert_eq!(
        direct(&c.a, name, "fd00::1", 22),
        "OSError: [Errno 101] Network is unreachable"
    );
    let dns = inside(
        &c.a,
        name,
        "python3 -c 'import socket; socket.getaddrinfo(\"github.com\", 443)' 2>&1 | tail -1",
    );
    assert!(dns.stdout().contains("socket.gaierror"), "{}", dns.stdout());
    let udp = inside(
        &c.a,
        name,
        "python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"10.200.0.2\", 53))' 2>&1 | tail -1",
    );
    assert_eq!(
        udp.stdout().trim(),
        "OSError: [Errno 101] Network is unreachable"
    );

    // Every decision is one JSON line: in the run dir (read by `egress`) and in the journal.
    let log = decisions(&c.a, name);
    let find = |method: &str, host: &str, port: u16, allowed: bool| {
        log.iter()
            .find(|d| {
                d["method"] == method
                    && d["host"] == host
                    && d["port"] == port
                    && d["allowed"] == allowed
            })
            .cloned()
            .unwrap_or_else(|| panic!("no {method} {host}:{port} allowed={allowed} in {log:#?}"))
    };
    let get = find("GET", "10.200.0.2", 8081, true);
    assert_eq!(get["box"], name);
    assert_eq!(
        (&get["rule"], &get["path"]),
        (&serde_json::json!(ONE), &serde_json::json!("/"))
    );
    assert!(get["bytes_out"].as_u64().unwrap() > 0 && get["bytes_in"].as_u64().unwrap() > 0);
    assert_eq!(find("CONNECT", "10.200.0.2", 8081, true)["rule"], ONE);
    assert_eq!(
        find("CONNECT", "10.200.0.3", 8443, false)["reason"],
        format!("private address {TWO_HTTPS} is not listed")
    );
    find("GET", TWO_NAME, 8082, false);
    let journal =
        c.a.sh(&format!("journalctl -u boxnet-{name} -o cat --no-pager"))
            .ok()
            .stdout();
    assert!(
        journal.contains(
            "\"host\":\"10.200.0.3\",\"port\":8443,\"method\":\"CONNECT\",\"path\":null,\"allowed\":false"
        ),
        "{journal}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&c.a.sh("ag-box status --json").ok().stdout()).unwrap();
    let mine = status["egress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["box"] == name)
        .cloned()
        .unwrap();
    assert_eq!(mine["network"], "allow");
    assert_eq!(mine["refused"], 3, "{mine}");

    // Plain HTTP goes out with the Host the proxy judged; a box's own Host naming another
    // site (domain fronting through an allowed address) is refused, and logged.
    assert_eq!(
        curl(&c.a, name, &format!("http://{ONE}/host")),
        (0, format!("host {ONE}\n"), String::new())
    );
    let (code, headers, _) = curl(
        &c.a,
        name,
        &format!("-i -H 'Host: {TWO_NAME}' http://{ONE}/host"),
    );
    assert_eq!(code, 0);
    assert!(headers.starts_with("HTTP/1.1 403"), "{headers}");
    let fronting = format!("Host header '{TWO_NAME}' names another host than the request's {ONE}");
    assert_eq!(refusal(&headers), Some(fronting.clone()));
    assert_eq!(
        decisions(&c.a, name)
            .iter()
            .filter(|d| d["reason"] == fronting.as_str())
            .count(),
        1
    );

    // A live change: server two listed (from node B, while the box runs on A), then none.
    c.b.sh(&format!(
        "ag-box set {name} allow={ONE},{TWO_HTTPS},{TWO_HTTP}"
    ))
    .ok();
    assert_eq!(
        curl(&c.a, name, &format!("-k https://{TWO_HTTPS}/")),
        (0, format!("hello from {TWO_HTTPS}\n"), String::new())
    );
    c.a.sh(&format!("ag-box set {name} network=none")).ok();
    let (_, headers, _) = curl(&c.a, name, &format!("-i http://{ONE}/"));
    assert_eq!(refusal(&headers).as_deref(), Some("network=none"));
    let (code, _, _) = curl(&c.a, name, &format!("-k https://{TWO_HTTPS}/"));
    assert_eq!(code, 56);
    c.a.sh(&format!("ag-box set {name} network=allow")).ok();
    // A change the proxy missed (its node was unreachable for `set`) lands at the next snapshot.
    c.a.sh(&format!(
        "echo '{{\"mode\":\"none\",\"allow\":[]}}' > /run/box/{name}/egress.json"
    ))
    .ok();
    let (_, headers, _) = curl(&c.a, name, &format!("-i http://{ONE}/"));
    assert_eq!(refusal(&headers).as_deref(), Some("network=none"));
    c.a.sh(&format!("ag-box snapshot {name}")).ok();
    assert_eq!(
        curl(&c.a, name, &format!("http://{ONE}/")),
        (0, format!("hello from {ONE}\n"), String::new())
    );

    // The policy moves with the box.
    c.a.sh(&format!(
        "ag-box park {name} && ag-box up {name} --node nodeB"
    ))
    .ok();
    let on_b: serde_json::Value = serde_json::from_str(
        &c.b.sh(&format!("ag-box egress {name} --json"))
            .ok()
            .stdout(),
    )
    .unwrap();
    assert_eq!(on_b["network"], "allow");
    assert_eq!(
        on_b["box_entries"],
        serde_json::json!([ONE, TWO_HTTPS, TWO_HTTP])
    );
    assert_eq!(
        curl(&c.b, name, &format!("http://{TWO_HTTP}/")),
        (0, format!("hello from {TWO_HTTP}\n"), String::new())
    );
    assert_eq!(
        direct(&c.b, name, "10.200.0.3", 8082),
        "OSError: [Errno 101] Network is unreachable"
    );

    // `host`: the node's network, unguarded, from the next up. Until then the running box
    // keeps its guarded network, and ls, status, egress and exec say and do so.
    let running_mode = common::box_row(&c.b, name).unwrap()["network_mode"].clone();
    c.b.sh(&format!("ag-box set {name} network=host")).ok();
    assert_eq!(
        common::box_row(&c.b, name).unwrap()["network_mode"],
        running_mode
    );
    let shown: serde_json::Value = serde_json::from_str(
        &c.b.sh(&format!("ag-box egress {name} --json"))
            .ok()
            .stdout(),
    )
    .unwrap();
    assert_eq!(shown["network"], running_mode);
    assert!(
        !c.b.sh("ag-box status")
            .ok()
            .stdout()
            .contains("host (unguarded)"),
        "status shows a mode not in force"
    );
    let env = inside(&c.b, name, "env | grep -c ^http_proxy=; true").stdout();
    assert_eq!(env.trim(), "1", "exec dropped the proxy of the running box");
    c.b.sh(&format!(
        "ag-box park {name} && ag-box up {name} --node nodeA"
    ))
    .ok();
    let row = common::box_row(&c.a, name).unwrap();
    assert_eq!(row["network_mode"], "host");
    assert!(
        c.a.sh("ag-box ls")
            .ok()
            .stdout()
            .contains("host (unguarded)")
    );
    let env = inside(&c.a, name, "env | grep -ci _proxy; true").stdout();
    assert_eq!(env.trim(), "0", "no proxy variables with network=host");
    for url in [format!("http://{ONE}/"), format!("http://{TWO_HTTP}/")] {
        assert_eq!(curl(&c.a, name, &url).0, 0, "{url}");
    }
    c.a.sh(&format!("ag-box park {name}")).ok();
    c.a.sh(&format!("sed -i '/{TWO_NAME}/d' /etc/hosts")).ok();
}

#[test]
fn a_killed_proxy_comes_back_and_the_box_never_gets_a_route() {
    let Some(c) = Cluster::get() else { return };
    let _one = Server::start(&c.b, "egress-srv-one", "10.200.0.2 8081");
    wait_for_servers(&c.a, &[format!("http://{ONE}/")]);
    let name = "egress-restart";
    c.parked_box(name);
    c.a.sh(&format!(
        "ag-box set {name} network=allow allow={ONE} && ag-box up {name} --node nodeA"
    ))
    .ok();
    let unit = format!("boxnet-{name}");
    assert_eq!(
        c.a.sh(&format!("systemctl show -p RestartUSec --value {unit}"))
            .ok()
            .stdout()
            .trim(),
        "200ms"
    );
    for round in 0..3 {
        c.a.sh(&format!("systemctl kill -s KILL {unit}")).ok();
        assert_eq!(
            direct(&c.a, name, "10.200.0.2", 8081),
            "OSError: [Errno 101] Network is unreachable",
            "round {round}"
        );
        let killed = Instant::now();
        loop {
            let (code, body, _) = curl(&c.a, name, &format!("http://{ONE}/"));
            if code == 0 {
                assert_eq!(body, format!("hello from {ONE}\n"));
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(20),
                "round {round}: the proxy did not come back"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "round {round}: the proxy answered again {:?} after the kill",
            killed.elapsed()
        );
    }
    let restarts: u32 =
        c.a.sh(&format!("systemctl show -p NRestarts --value {unit}"))
            .ok()
            .stdout()
            .trim()
            .parse()
            .unwrap();
    assert!(restarts >= 3, "NRestarts={restarts}");
    // The proxy stops with the box, and the namespace is released.
    c.a.sh(&format!("ag-box park {name}")).ok();
    assert_eq!(
        c.a.sh(&format!(
            "systemctl is-active {unit} || true; test -e /run/box/.netns/{name} && echo pinned; true"
        ))
        .stdout()
        .trim(),
        "inactive"
    );
}
