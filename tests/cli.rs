//! Conventional command-line behaviour: `-q` leaves only data and errors, `-v` adds debug
//! lines, and colour goes only to a terminal that wants it (`NO_COLOR`, `TERM=dumb`).

mod common;

use common::boxtest::{BoxTest, Exit, Project};
use common::{Host, Target};

#[test]
fn quiet_leaves_data_and_errors_and_verbose_adds_debug_lines() {
    let Some(host) = Host::new("cli") else {
        return;
    };
    let name = format!("cli-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    let f = b.write(&Project::new(&name).file("f", "v1\n")) + "/f";
    // The repository's first making warns (its password): a warning -q does not hide.
    b.init().ok();
    b.ag(["-q", "track", &name]).ok().stderr_is("");
    b.up().arg("-q").ok().stderr_is("");
    host.write(&f, "v2\n");
    b.ag(["-v", "snapshot", &name])
        .ok()
        .stderr_has("DEBUG box '")
        .stderr_has("': walked its copy");
    host.write(&f, "v3\n");
    b.snapshot().ok().stderr_lacks("DEBUG");
    host.write(&f, "v4\n");
    b.ag(["--quiet", "park", &name])
        .ok()
        .stderr_is("")
        .stdout_starts_with(&format!("{name} "));
    // Errors are said whatever -q says.
    b.ag(["-q", "up", "no-such-box"])
        .cannot(Exit::Failure, "ag-box: box 'no-such-box' is not tracked");
    b.ag(["-q", "-v", "ls"])
        .cannot(Exit::Usage, "cannot be used with");
}

/// What `init` of a fresh repository logs on a pseudo-terminal (`script`), with `env`.
fn on_a_terminal(host: &Host, env: &[(&str, &str)], n: u32) -> String {
    let state = host.host_path(&format!("state-{n}"));
    let state = state.to_str().unwrap();
    let mut init = BoxTest::on(host, "none")
        .init()
        .env("BOX_STATE_DIR", state)
        .env("RESTIC_REPOSITORY", &format!("{state}/restic"))
        .env("RESTIC_PASSWORD_FILE", &format!("{state}/restic-password"));
    for (k, v) in env {
        init = init.env(k, v);
    }
    init.on_a_terminal().ok().stdout()
}

#[test]
fn colour_only_where_the_terminal_wants_it() {
    let Some(host) = Host::new("colour") else {
        return;
    };
    let coloured = on_a_terminal(&host, &[("TERM", "xterm")], 0);
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    for (n, env) in [
        (1, [("TERM", "xterm"), ("NO_COLOR", "1")].as_slice()),
        (2, [("TERM", "dumb")].as_slice()),
    ] {
        let out = on_a_terminal(&host, env, n);
        assert!(out.contains("INFO"), "{env:?}: {out:?}");
        assert!(!out.contains("\x1b["), "{env:?}: colour in {out:?}");
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
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "v1\n"));
    b.init().ok();
    // `ag-box <verb> <name> <args> --json` (`name` false: no box name), its shape checked.
    let shaped = |verb: &str, boxed: bool, args: &[&str]| {
        let mut argv = vec![verb];
        if boxed {
            argv.push(&name);
        }
        argv.extend(args);
        argv.push("--json");
        let doc = b.ag(argv).ok().json();
        common::assert_shape(verb, &doc);
        doc
    };
    let tracked = shaped("track", true, &[]);
    shaped("up", true, &[]);
    // A change, and a request the proxy refuses, for the diff and the egress log.
    b.exec_sh("echo v2 > f; echo new > g; curl -s -m 5 http://x.invalid/ >/dev/null; true")
        .ok();
    let diff = shaped("diff", true, &[]);
    assert_eq!(diff["changes"].as_array().map(Vec::len), Some(2), "{diff}");
    let egress = shaped("egress", true, &[]);
    assert!(
        !egress["decisions"].as_array().unwrap().is_empty(),
        "{egress}"
    );
    let taken = shaped("snapshot", true, &[]);
    assert_eq!(taken["snapshots"][0]["outcome"], "taken");
    // No agent ran here: no rows, every key there.
    let cost = shaped("cost", true, &[]);
    assert_eq!(cost["boxes"][0]["models"], serde_json::json!([]), "{cost}");
    shaped("ls", false, &[]);
    shaped("status", false, &[]);
    shaped("doctor", false, &[]);
    shaped("creds", false, &[]);
    let history = shaped("history", true, &["--events"]);
    for entry in history["entries"].as_array().unwrap() {
        let kind = entry["kind"].as_str().unwrap();
        common::assert_shape(&format!("history_{kind}"), entry);
    }
    let parked = shaped("park", true, &[]);
    // Back to the first snapshot (parked: only the record moves), then a copy elsewhere.
    let first = tracked["snapshot"].as_str().unwrap();
    let back = shaped("rollback", true, &[&first[..8]]);
    assert_eq!(
        (&back["snapshot"], &back["undo"]),
        (&tracked["snapshot"], &parked["snapshot"])
    );
    let look = shaped(
        "rollback",
        true,
        &[&first[..8], "--to", &format!("{home}/look-{name}")],
    );
    assert_eq!(look["undo"], serde_json::Value::Null);
    let dropped = shaped("drop", true, &["--yes"]);
    // The first, the one taken while it ran (park found nothing new since: no third state),
    // and what the park published as changed since the first, which `track` kept the manifest
    // of.
    let deleted: Vec<&str> = dropped["snapshots_deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let states = [first, taken["snapshots"][0]["snapshot"].as_str().unwrap()];
    assert!(
        deleted.len() == 3 && states.iter().all(|s| deleted.contains(s)),
        "{deleted:?}"
    );
}

/// `set` says which of its settings wait for the next `up`, and only those.
#[test]
fn set_names_the_settings_that_wait_for_the_next_up() {
    let Some(host) = Host::new("set") else {
        return;
    };
    let name = format!("set-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "x\n"));
    b.track().ok();
    b.set(["network=allow", "allow=example.com"])
        .ok()
        .stderr_lacks("at the next");
    b.set(["memory_max=2G", "nix=true", "allow=example.org"])
        .ok()
        .stderr_has(&format!(
            "box '{name}': memory_max, nix take effect at the next 'ag-box up'"
        ));
    b.set(["memory_max=1G"]).ok().stderr_has(&format!(
        "box '{name}': memory_max takes effect at the next 'ag-box up'"
    ));
}
