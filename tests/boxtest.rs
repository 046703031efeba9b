//! The rig test builder itself (`tests/common/boxtest.rs`), on the bare host: a refusal is told
//! from a success and from another refusal, an in-box command's exit code from ag-box's own
//! failure, and fixtures and waits do what they say.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use common::boxtest::{BoxTest, Exit, Project, wait_for};
use common::{Host, Target};

/// The message of the panic `f` ends in (it must end in one).
fn panic_of(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("it did not fail");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap()
}

#[test]
fn a_refusal_is_told_from_a_success_and_from_another_refusal() {
    let Some(host) = Host::new("bt-refusal") else {
        return;
    };
    let b = BoxTest::on(&host, "nobox");
    b.init().ok();
    let said = panic_of(|| {
        b.ag(["ls"]).cannot(Exit::Failure, "is not tracked");
    });
    assert!(said.contains("it said no error line at all"), "{said}");
    assert!(said.contains(r#"command: ["ag-box", "ls"]"#), "{said}");
    let said = panic_of(|| {
        b.up().cannot(Exit::Failure, "is parked");
    });
    assert!(
        said.contains("ag-box said no (Failure), but not \"is parked\"")
            && said.contains("ag-box: box 'nobox' is not tracked"),
        "{said}"
    );
    let said = panic_of(|| {
        b.up().cannot(Exit::LeaseHeld, "is not tracked");
    });
    assert!(
        said.contains("with exit 3") && said.contains("exit: 1"),
        "{said}"
    );
    let said = panic_of(|| {
        b.up().ok();
    });
    assert!(said.contains("expected exit 0 (Ok)"), "{said}");
    b.up().cannot(Exit::Failure, "box 'nobox' is not tracked");
    b.ag(["ls", "--no-such-flag"])
        .cannot(Exit::Usage, "unexpected argument '--no-such-flag'");
}

#[test]
fn an_in_box_exit_code_is_told_from_ag_box_failing() {
    let Some(host) = Host::new("bt-exec") else {
        return;
    };
    let name = format!("bt-{}", std::process::id());
    let b = BoxTest::on(&host, &name);
    b.write(&Project::new(&name).file("f", "v1\n"));
    b.init().ok();
    b.track().ok();
    b.up().ok();
    // The command's own 1: ag-box ran it and passed its code through.
    b.exec_sh("echo out; echo err >&2; exit 1")
        .exits(1)
        .stdout_is("out\n")
        .stderr_is("err\n");
    let said = panic_of(|| {
        b.exec(["true"]).exits(1);
    });
    assert!(
        said.contains("expected the in-box command's exit 1"),
        "{said}"
    );
    b.park().ok();
    // Parked: ag-box's own 1, never mistaken for the command's.
    let said = panic_of(|| {
        b.exec(["true"]).exits(1);
    });
    assert!(
        said.contains("ag-box itself failed: ag-box: box '") && said.contains("is parked"),
        "{said}"
    );
    b.exec(["true"]).cannot(Exit::Failure, "is parked");
}

#[test]
fn fixtures_are_written_as_given_and_waits_end() {
    let Some(host) = Host::new("bt-fixture") else {
        return;
    };
    let at = Project::new("p")
        .file("a/b.txt", "x\n")
        .executable("run", "#!/bin/sh\necho ran\n")
        .dir("empty/inner")
        .write_on(&host);
    assert_eq!(at, format!("{}/p", host.home()));
    assert_eq!(host.read(&format!("{at}/a/b.txt")), "x\n");
    assert!(host.exists(&format!("{at}/empty/inner")));
    let run = common::boxtest::command(&host, [format!("{at}/run")]);
    run.ok().stdout_is("ran\n");
    // Written again: replaced, nothing of the old tree left.
    Project::new("p").file("c", "").write_on(&host);
    assert!(!host.exists(&format!("{at}/a")));
    let said = panic_of(|| {
        Project::new("p").file("../out", "").write_on(&host);
    });
    assert!(said.contains("is not inside the fixture"), "{said}");

    let start = Instant::now();
    let said = panic_of(|| {
        wait_for("never", Duration::from_millis(300), || None::<()>);
    });
    assert!(said.contains("waited 300ms for: never"), "{said}");
    assert!(start.elapsed() < Duration::from_secs(2));
    let mut asked = 0;
    assert_eq!(
        wait_for("the third time", Duration::from_secs(5), || {
            asked += 1;
            (asked == 3).then_some(asked)
        }),
        3
    );
}
