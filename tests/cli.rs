//! Conventional command-line behaviour: `-q` leaves only data and errors, `-v` adds debug
//! lines, and colour goes only to a terminal that wants it (`NO_COLOR`, `TERM=dumb`).

mod common;

use common::{Checked, Host, Target};

#[test]
fn quiet_leaves_data_and_errors_and_verbose_adds_debug_lines() {
    let Some(host) = Host::new("cli") else {
        return;
    };
    let name = format!("cli-{}", std::process::id());
    let home = host.home().to_string();
    host.sh(&format!(
        "mkdir -p {home}/{name} && echo v1 > {home}/{name}/f"
    ))
    .ok();
    // The repository's first making warns (its password): a warning -q does not hide.
    host.sh("ag-box init").ok();
    let tracked = host.sh(&format!("ag-box -q track {name}"));
    let tracked = tracked.ok();
    assert_eq!(tracked.stderr(), "", "-q track said something");
    let up = host.sh(&format!("ag-box up {name} -q"));
    let up = up.ok();
    assert_eq!(up.stderr(), "", "-q up said something");
    host.sh(&format!("echo v2 > {home}/{name}/f")).ok();
    let verbose = host.sh(&format!("ag-box -v snapshot {name}"));
    let verbose = verbose.ok();
    assert!(
        verbose.stderr().contains("DEBUG box '") && verbose.stderr().contains("': walked its copy"),
        "{}",
        verbose.stderr()
    );
    host.sh(&format!("echo v3 > {home}/{name}/f")).ok();
    let plain = host.sh(&format!("ag-box snapshot {name}"));
    assert!(!plain.ok().stderr().contains("DEBUG"));
    host.sh(&format!("echo v4 > {home}/{name}/f")).ok();
    let parked = host.sh(&format!("ag-box --quiet park {name}"));
    let parked = parked.ok();
    assert_eq!(parked.stderr(), "");
    assert!(
        parked.stdout().starts_with(&format!("{name} ")),
        "park's data line: {}",
        parked.stdout()
    );
    // Errors are said whatever -q says.
    common::assert_code(
        &host.sh("ag-box -q up no-such-box"),
        1,
        "ag-box: box 'no-such-box' is not tracked",
    );
    common::assert_code(&host.sh("ag-box -q -v ls"), 2, "cannot be used with");
}

/// What `init` of a fresh repository logs on a pseudo-terminal (`script`), with `env` before it.
fn on_a_terminal(host: &Host, env: &str, n: u32) -> String {
    host.sh(&format!(
        "s=$PWD/state-{n}; export BOX_STATE_DIR=$s RESTIC_REPOSITORY=$s/restic RESTIC_PASSWORD_FILE=$s/restic-password
         {env} script -qec 'ag-box init' /dev/null"
    ))
    .ok()
    .stdout()
}

#[test]
fn colour_only_where_the_terminal_wants_it() {
    let Some(host) = Host::new("colour") else {
        return;
    };
    let coloured = on_a_terminal(&host, "TERM=xterm", 0);
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    for (n, env) in [(1, "TERM=xterm NO_COLOR=1"), (2, "TERM=dumb")] {
        let out = on_a_terminal(&host, env, n);
        assert!(out.contains("INFO"), "{env}: {out:?}");
        assert!(!out.contains("\x1b["), "{env}: colour in {out:?}");
    }
}

/// Every verb's `--json`, through a box's life on the bare host, is what
/// `docs/json-shapes.json` says, key for key.
#[test]
fn every_json_output_has_its_documented_shape() {
    let Some(host) = Host::new("json") else {
        return;
    };
    let name = format!("json-{}", std::process::id());
    let home = host.home().to_string();
    let proj = format!("{home}/{name}");
    host.sh(&format!(
        "mkdir -p {proj} && echo v1 > {proj}/f && ag-box init"
    ))
    .ok();
    let json = |verb: &str, args: &str| -> serde_json::Value {
        let out = host.sh(&format!("ag-box {args} --json"));
        let text = out.stdout();
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{verb}: {e}: {text}\n{}", out.stderr()))
    };
    let shaped = |verb: &str, args: &str| {
        let doc = json(verb, args);
        common::assert_shape(verb, &doc);
        doc
    };
    let tracked = shaped("track", &format!("track {name}"));
    shaped("up", &format!("up {name}"));
    // A change, and a request the proxy refuses, for the diff and the egress log.
    host.sh(&format!(
        "ag-box exec {name} -- sh -c 'echo v2 > f; echo new > g; curl -s -m 5 http://x.invalid/ >/dev/null; true'"
    ))
    .ok();
    let diff = shaped("diff", &format!("diff {name}"));
    assert_eq!(diff["changes"].as_array().map(Vec::len), Some(2), "{diff}");
    let egress = shaped("egress", &format!("egress {name}"));
    assert!(
        !egress["decisions"].as_array().unwrap().is_empty(),
        "{egress}"
    );
    let taken = shaped("snapshot", &format!("snapshot {name}"));
    assert_eq!(taken["snapshots"][0]["outcome"], "taken");
    shaped("ls", "ls");
    shaped("status", "status");
    shaped("doctor", "doctor");
    let history = shaped("history", &format!("history {name} --events"));
    for entry in history["entries"].as_array().unwrap() {
        let kind = entry["kind"].as_str().unwrap();
        common::assert_shape(&format!("history_{kind}"), entry);
    }
    let parked = shaped("park", &format!("park {name}"));
    // Back to the first snapshot (parked: only the record moves), then a copy elsewhere.
    let first = tracked["snapshot"].as_str().unwrap();
    let back = shaped("rollback", &format!("rollback {name} {}", &first[..8]));
    assert_eq!(
        (&back["snapshot"], &back["undo"]),
        (&tracked["snapshot"], &parked["snapshot"])
    );
    let look = shaped(
        "rollback",
        &format!("rollback {name} {} --to {home}/look-{name}", &first[..8]),
    );
    assert_eq!(look["undo"], serde_json::Value::Null);
    let dropped = shaped("drop", &format!("drop {name} --yes"));
    // The first and the one taken while it ran (park found nothing new since: no third).
    let mut deleted: Vec<&str> = dropped["snapshots_deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    deleted.sort_unstable();
    let mut expected = [first, taken["snapshots"][0]["snapshot"].as_str().unwrap()];
    expected.sort_unstable();
    assert_eq!(deleted, expected);
}

/// `set` says which of its settings wait for the next `up`, and only those.
#[test]
fn set_names_the_settings_that_wait_for_the_next_up() {
    let Some(host) = Host::new("set") else {
        return;
    };
    let name = format!("set-{}", std::process::id());
    let home = host.home().to_string();
    host.sh(&format!(
        "mkdir -p {home}/{name}; echo x > {home}/{name}/f; ag-box track {name}"
    ))
    .ok();
    let egress = host.sh(&format!(
        "ag-box set {name} network=allow allow=example.com"
    ));
    assert!(
        !egress.ok().stderr().contains("at the next"),
        "{}",
        egress.stderr()
    );
    let both = host.sh(&format!(
        "ag-box set {name} memory_max=2G nix=true allow=example.org"
    ));
    assert!(
        both.ok().stderr().contains(&format!(
            "box '{name}': memory_max, nix take effect at the next 'ag-box up'"
        )),
        "{}",
        both.stderr()
    );
    let one = host.sh(&format!("ag-box set {name} memory_max=1G"));
    assert!(
        one.ok().stderr().contains(&format!(
            "box '{name}': memory_max takes effect at the next 'ag-box up'"
        )),
        "{}",
        one.stderr()
    );
}
