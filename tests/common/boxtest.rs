//! A rig test that reads as data: each step is one `ag-box` verb, run as an argv (no shell in
//! between) on a [`Target`], and the result it must have; fixtures are Rust values written onto
//! the target's filesystem; waits poll a condition until a deadline.
//!
//! ```ignore
//! let b = BoxTest::on(&host, "demo");
//! b.write(&Project::new("demo").file("src/main.txt", "v1\n").dir("empty"));
//! b.track().ok();
//! b.up().ok();
//! b.exec(["sh", "-c", "exit 7"]).exits(7); // the in-box command's 7, not ag-box's
//! b.exec(["true"]).cannot(Exit::Failure, "is parked"); // ag-box said no, with exit 1
//! ```

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use super::Target;

/// `ag-box`'s exit codes (README, docs/reference.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: done.
    Ok = 0,
    /// 1: the verb failed (ag-box's own error line says why).
    Failure = 1,
    /// 2: usage: bad arguments, or a question to confirm (`--yes`).
    Usage = 2,
    /// 3: another node holds the box's lease (or took it over).
    LeaseHeld = 3,
    /// 4: a tool ag-box needs is missing.
    ToolMissing = 4,
    /// 126: `exec` of a command the box cannot run (as sh says).
    CannotRun = 126,
    /// 127: `exec` of a command the box lacks (as sh says).
    NoSuchCommand = 127,
}

impl Exit {
    fn code(self) -> i32 {
        self as i32
    }
}

/// One box on one target: its verbs as steps.
pub(crate) struct BoxTest<'t> {
    t: &'t dyn Target,
    name: String,
}

impl<'t> BoxTest<'t> {
    pub(crate) fn on(t: &'t dyn Target, name: &str) -> BoxTest<'t> {
        BoxTest {
            t,
            name: name.to_string(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn target(&self) -> &'t dyn Target {
        self.t
    }

    /// The box's project directory on the target: `<home>/<name>`.
    pub(crate) fn project(&self) -> String {
        format!("{}/{}", self.t.home(), self.name)
    }

    /// Write a fixture onto the target (see [`Project`]); returns where it is.
    pub(crate) fn write(&self, fixture: &Project) -> String {
        fixture.write_on(self.t)
    }

    /// Any `ag-box` argv (without the `ag-box`).
    pub(crate) fn ag<I, S>(&self, args: I) -> Step<'t>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Step::new(self.t, args)
    }

    /// `ag-box <verb> <name> <args...>`.
    pub(crate) fn verb<I, S>(&self, verb: &str, args: I) -> Step<'t>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut words = vec![verb.to_string(), self.name.clone()];
        words.extend(args.into_iter().map(|a| a.as_ref().to_string()));
        Step::new(self.t, words)
    }

    pub(crate) fn init(&self) -> Step<'t> {
        self.ag(["init"])
    }
    pub(crate) fn track(&self) -> Step<'t> {
        self.verb("track", NONE)
    }
    pub(crate) fn up(&self) -> Step<'t> {
        self.verb("up", NONE)
    }
    pub(crate) fn park(&self) -> Step<'t> {
        self.verb("park", NONE)
    }
    pub(crate) fn stop(&self) -> Step<'t> {
        self.verb("stop", NONE)
    }
    pub(crate) fn snapshot(&self) -> Step<'t> {
        self.verb("snapshot", NONE)
    }
    pub(crate) fn attach(&self) -> Step<'t> {
        self.verb("attach", NONE)
    }
    /// `ag-box drop <name> --yes`.
    pub(crate) fn drop_box(&self) -> Step<'t> {
        self.verb("drop", ["--yes"])
    }
    /// `ag-box set <name> <key=value...>`.
    pub(crate) fn set<I, S>(&self, settings: I) -> Step<'t>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.verb("set", settings)
    }

    /// `ag-box exec <name> -- <argv...>`: one command inside the box, its exit code kept apart
    /// from ag-box's own failures (see [`Exec`]).
    pub(crate) fn exec<I, S>(&self, argv: I) -> Exec<'t>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut words = vec!["--".to_string()];
        words.extend(argv.into_iter().map(|a| a.as_ref().to_string()));
        Exec {
            step: self.verb("exec", words),
            name: self.name.clone(),
        }
    }

    /// `sh -c <script>` inside the box.
    pub(crate) fn exec_sh(&self, script: &str) -> Exec<'t> {
        self.exec(["sh", "-c", script])
    }

    /// The box's row of `ag-box ls --json`, if it has one.
    pub(crate) fn row(&self) -> Option<serde_json::Value> {
        let ls = self.ag(["ls", "--json"]).ok().json();
        ls["boxes"]
            .as_array()
            .unwrap_or_else(|| panic!("ls --json has no boxes: {ls}"))
            .iter()
            .find(|b| b["name"] == self.name.as_str())
            .cloned()
    }
}

/// A project `/root/<name>` (`src/main.txt` v1) with a Claude session, tracked on node A and
/// parked; an earlier run's box of the name forgotten everywhere first (what
/// [`super::Cluster::parked_box`] makes, as steps and fixtures).
pub(crate) fn parked_box<'c>(c: &'c super::Cluster, name: &str) -> BoxTest<'c> {
    // Park it wherever it is, then drop its record and snapshots: whatever each says.
    for n in c.all() {
        BoxTest::on(n, name).park().either_way();
    }
    let on_a = BoxTest::on(&c.a, name);
    on_a.drop_box().either_way();
    for n in c.all() {
        for unit in [format!("boxrun-{name}"), format!("boxnet-{name}")] {
            command(n, ["systemctl", "stop", &unit]).either_way();
        }
        let netns = format!("/run/box/.netns/{name}");
        command(n, ["umount", &netns]).either_way();
        for gone in [
            netns,
            format!("/root/{name}"),
            format!("/root/.claude/projects/-root-{name}"),
            format!("/var/lib/ag-box/local/{name}.json"),
            format!("/var/lib/ag-box/local/manifest/{name}.json"),
            format!("/var/lib/ag-box/homes/{name}"),
        ] {
            n.remove(&gone);
        }
    }
    on_a.write(&Project::new(name).file("src/main.txt", "v1\n"));
    Project::at(&format!(".claude/projects/-root-{name}"))
        .file("s1.jsonl", "{\"session\":1}\n")
        .write_on(&c.a);
    on_a.track().ok();
    on_a.park().ok();
    on_a
}

/// No further arguments.
pub(crate) const NONE: [&str; 0] = [];

/// Another program than ag-box on the target (`systemctl`, `ip`, ...), as an argv.
pub(crate) fn command<I, S>(t: &dyn Target, argv: I) -> Step<'_>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut step = Step::new(t, NONE);
    step.argv = argv.into_iter().map(|a| a.as_ref().to_string()).collect();
    step
}

/// `restic <args>` on the target's own repository (ag-box's state dir).
pub(crate) fn restic<I, S>(t: &dyn Target, args: I) -> Step<'_>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let state = t.state_dir();
    let mut words = vec!["restic".to_string()];
    words.extend(args.into_iter().map(|a| a.as_ref().to_string()));
    command(t, words)
        .env("RESTIC_REPOSITORY", &format!("{state}/restic"))
        .env("RESTIC_PASSWORD_FILE", &format!("{state}/restic-password"))
}

/// One `ag-box` command, not yet run: what it runs with, then what it must end with.
#[must_use = "a step runs only when its expected result is given (ok, exits, cannot)"]
pub(crate) struct Step<'t> {
    t: &'t dyn Target,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    dir: Option<String>,
}

impl<'t> Step<'t> {
    fn new<I, S>(t: &'t dyn Target, args: I) -> Step<'t>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut words = vec!["ag-box".to_string()];
        words.extend(args.into_iter().map(|a| a.as_ref().to_string()));
        Step {
            t,
            argv: words,
            env: Vec::new(),
            dir: None,
        }
    }

    /// A variable in the command's environment.
    pub(crate) fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Run it in this directory of the target.
    pub(crate) fn in_dir(mut self, dir: &str) -> Self {
        self.dir = Some(dir.to_string());
        self
    }

    /// Run it in a pseudo-terminal (`script`), as a person at a terminal would.
    pub(crate) fn on_a_terminal(mut self) -> Self {
        let command: Vec<String> = self.argv.iter().map(|a| shell_quoted(a)).collect();
        self.argv = vec![
            "script".into(),
            "-qec".into(),
            command.join(" "),
            "/dev/null".into(),
        ];
        self
    }

    /// More arguments at the end.
    pub(crate) fn arg(mut self, arg: &str) -> Self {
        self.argv.push(arg.to_string());
        self
    }

    fn run(self) -> Ran {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let argv: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        let out = self.t.run_env(&env, self.dir.as_deref(), &argv);
        Ran {
            argv: self.argv,
            out,
        }
    }

    /// It succeeds (exit 0).
    #[track_caller]
    pub(crate) fn ok(self) -> Ran {
        self.exits(Exit::Ok)
    }

    /// It ends with this exit code, having run (not killed, not crashed).
    #[track_caller]
    pub(crate) fn exits(self, code: Exit) -> Ran {
        let ran = self.run();
        ran.ran_to_the_end();
        if ran.code() != Some(code.code()) {
            ran.fail(&format!("expected exit {} ({code:?})", code.code()));
        }
        ran
    }

    /// Whatever its exit code (tidying up after an earlier run: a box that may not be there),
    /// as long as it ran to its end.
    #[track_caller]
    pub(crate) fn either_way(self) -> Ran {
        let ran = self.run();
        ran.ran_to_the_end();
        ran
    }

    /// ag-box ran it and said no: exit `code`, its error line (`ag-box: ...`, or the argument
    /// parser's `error: ...`) saying `says`. Told apart from ag-box failing to run at all
    /// (killed, crashed, not started), and from a refusal for another reason.
    #[track_caller]
    pub(crate) fn cannot(self, code: Exit, says: &str) -> Ran {
        let ran = self.run();
        ran.said_no(code, says);
        ran
    }

    /// Run it again until `done` holds for its result (ag-box having run each time), for at
    /// most `timeout`; returns that result.
    #[track_caller]
    pub(crate) fn until(self, timeout: Duration, done: impl Fn(&Ran) -> bool) -> Ran {
        let what = self.argv.join(" ");
        let mut last: Option<Ran> = None;
        let found = wait_for_or(timeout, || {
            let step = Step {
                t: self.t,
                argv: self.argv.clone(),
                env: self.env.clone(),
                dir: self.dir.clone(),
            };
            let ran = step.run();
            ran.ran_to_the_end();
            if done(&ran) {
                return Some(ran);
            }
            last = Some(ran);
            None
        });
        found.unwrap_or_else(|| match last {
            Some(ran) => ran.fail(&format!("waited {timeout:?} for its answer")),
            None => panic!("waited {timeout:?} for: {what}"),
        })
    }
}

/// `ag-box exec`: the in-box command's exit code, told apart from ag-box's own failure (an
/// `ag-box: ...` error line, with ag-box's code).
#[must_use = "a step runs only when its expected result is given (ok, exits, cannot)"]
pub(crate) struct Exec<'t> {
    step: Step<'t>,
    name: String,
}

impl<'t> Exec<'t> {
    pub(crate) fn in_dir(mut self, dir: &str) -> Self {
        self.step = self.step.in_dir(dir);
        self
    }

    /// As a plain step (its exit code then ag-box's, as for any verb).
    pub(crate) fn into_step(self) -> Step<'t> {
        self.step
    }

    /// Run it again until `done` holds for its result, for at most `timeout`.
    #[track_caller]
    pub(crate) fn until(self, timeout: Duration, done: impl Fn(&Ran) -> bool) -> Ran {
        self.step.until(timeout, done)
    }

    /// The command ran in the box and exited 0.
    #[track_caller]
    pub(crate) fn ok(self) -> Ran {
        self.exits(0)
    }

    /// The command ran in the box and exited `code` (ag-box passing it through, with no error
    /// of its own).
    #[track_caller]
    pub(crate) fn exits(self, code: i32) -> Ran {
        let ran = self.step.run();
        ran.ran_to_the_end();
        if let Some(line) = ran.refusal() {
            ran.fail(&format!(
                "expected the in-box command's exit {code}; ag-box itself failed: {line}"
            ));
        }
        if ran.code() != Some(code) {
            ran.fail(&format!("expected the in-box command's exit {code}"));
        }
        ran
    }

    /// ag-box did not run the command in the box, and said why (`code`, `says`).
    #[track_caller]
    pub(crate) fn cannot(self, code: Exit, says: &str) -> Ran {
        let ran = self.step.run();
        ran.said_no(code, says);
        let named = format!("box '{}'", self.name);
        if !ran.stderr().contains(&named) {
            ran.fail(&format!("its refusal does not name the box ({named})"));
        }
        ran
    }
}

/// A step that ran: its output, to check further.
pub(crate) struct Ran {
    argv: Vec<String>,
    out: Output,
}

impl Ran {
    pub(crate) fn code(&self) -> Option<i32> {
        self.out.status.code()
    }
    pub(crate) fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub(crate) fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    pub(crate) fn output(&self) -> &Output {
        &self.out
    }

    /// Its stdout as JSON.
    #[track_caller]
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout())
            .unwrap_or_else(|e| self.fail(&format!("stdout is no JSON ({e})")))
    }

    /// The whole transcript, in a panic.
    #[track_caller]
    pub(crate) fn fail(&self, why: &str) -> ! {
        let code = self.code().map_or_else(
            || format!("none ({:?})", self.out.status),
            |c| c.to_string(),
        );
        panic!(
            "{why}\n  command: {:?}\n  exit: {code}\n  stdout:\n{}\n  stderr:\n{}",
            self.argv,
            self.stdout(),
            self.stderr()
        );
    }

    /// ag-box ran to its end: not killed by a signal, not panicked, started at all.
    #[track_caller]
    fn ran_to_the_end(&self) {
        match self.code() {
            None => self.fail("ag-box failed to run it: killed by a signal"),
            Some(101) => self.fail("ag-box failed to run it: it panicked"),
            Some(125) if self.stderr().is_empty() => {
                self.fail("ag-box failed to run it: the target is not up (rig.sh exec: 125)");
            }
            Some(126 | 127) if self.stderr().contains("env: ") => {
                self.fail("ag-box failed to run it: it could not be started");
            }
            Some(_) => {}
        }
    }

    /// ag-box's refusal: its error line (`ag-box: ...` as it reports an error, progress lines
    /// aside) or the argument parser's (`error: ...`).
    fn refusal(&self) -> Option<String> {
        self.stderr()
            .lines()
            .find(|l| (l.starts_with("ag-box: ") && !is_progress(l)) || l.starts_with("error: "))
            .map(str::to_string)
    }

    #[track_caller]
    fn said_no(&self, code: Exit, says: &str) {
        self.ran_to_the_end();
        let Some(line) = self.refusal() else {
            self.fail(&format!(
                "expected ag-box to say no ({code:?}: {says:?}); it said no error line at all"
            ));
        };
        if self.code() != Some(code.code()) {
            self.fail(&format!(
                "expected ag-box to say no with exit {} ({code:?}: {says:?})",
                code.code()
            ));
        }
        if !line.contains(says) {
            self.fail(&format!(
                "ag-box said no ({code:?}), but not {says:?}: {line}"
            ));
        }
    }

    #[track_caller]
    pub(crate) fn stdout_is(self, expected: &str) -> Self {
        if self.stdout() != expected {
            self.fail(&format!("expected stdout {expected:?}"));
        }
        self
    }
    #[track_caller]
    pub(crate) fn stdout_has(self, part: &str) -> Self {
        if !self.stdout().contains(part) {
            self.fail(&format!("stdout lacks {part:?}"));
        }
        self
    }
    #[track_caller]
    pub(crate) fn stdout_lacks(self, part: &str) -> Self {
        if self.stdout().contains(part) {
            self.fail(&format!("stdout has {part:?}"));
        }
        self
    }
    #[track_caller]
    pub(crate) fn stdout_starts_with(self, part: &str) -> Self {
        if !self.stdout().starts_with(part) {
            self.fail(&format!("stdout does not start with {part:?}"));
        }
        self
    }
    #[track_caller]
    pub(crate) fn stderr_is(self, expected: &str) -> Self {
        if self.stderr() != expected {
            self.fail(&format!("expected stderr {expected:?}"));
        }
        self
    }
    #[track_caller]
    pub(crate) fn stderr_has(self, part: &str) -> Self {
        if !self.stderr().contains(part) {
            self.fail(&format!("stderr lacks {part:?}"));
        }
        self
    }
    #[track_caller]
    pub(crate) fn stderr_lacks(self, part: &str) -> Self {
        if self.stderr().contains(part) {
            self.fail(&format!("stderr has {part:?}"));
        }
        self
    }
}

/// One word for `sh -c`, as it is.
fn shell_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// `ag-box: <verb> <name>: 42% (...)`: a progress line, not an error.
fn is_progress(line: &str) -> bool {
    line.split_once(": ")
        .and_then(|(_, rest)| rest.split_once(": "))
        .is_some_and(|(_, rest)| {
            rest.split_once('%')
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// Ask `check` until it answers, for at most `timeout` (every 50 ms); panics naming `what` when
/// it never did.
#[track_caller]
pub(crate) fn wait_for<T>(what: &str, timeout: Duration, check: impl FnMut() -> Option<T>) -> T {
    wait_for_or(timeout, check).unwrap_or_else(|| panic!("waited {timeout:?} for: {what}"))
}

fn wait_for_or<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

enum Entry {
    File(String, Vec<u8>, u32),
    Dir(String),
}

/// A tree of files made from Rust values, written onto a target: a project (`~/<name>`), or any
/// directory (`Project::at`).
pub(crate) struct Project {
    /// Absolute, or relative to the target's home.
    at: String,
    entries: Vec<Entry>,
}

impl Project {
    /// `~/<name>` on the target.
    pub(crate) fn new(name: &str) -> Project {
        Project {
            at: name.to_string(),
            entries: Vec::new(),
        }
    }

    /// A tree at `path` (absolute, or relative to the target's home).
    pub(crate) fn at(path: &str) -> Project {
        Project::new(path)
    }

    /// A file, its parents made.
    pub(crate) fn file(mut self, path: &str, contents: impl AsRef<[u8]>) -> Self {
        self.entries.push(Entry::File(
            path.to_string(),
            contents.as_ref().to_vec(),
            0o644,
        ));
        self
    }

    /// A file only its owner reads (mode 600), its parents made.
    pub(crate) fn private(mut self, path: &str, contents: impl AsRef<[u8]>) -> Self {
        self.entries.push(Entry::File(
            path.to_string(),
            contents.as_ref().to_vec(),
            0o600,
        ));
        self
    }

    /// An executable file (mode 755), its parents made.
    pub(crate) fn executable(mut self, path: &str, contents: impl AsRef<[u8]>) -> Self {
        self.entries.push(Entry::File(
            path.to_string(),
            contents.as_ref().to_vec(),
            0o755,
        ));
        self
    }

    /// An empty directory.
    pub(crate) fn dir(mut self, path: &str) -> Self {
        self.entries.push(Entry::Dir(path.to_string()));
        self
    }

    /// Where it lies on the target.
    pub(crate) fn path_on(&self, t: &dyn Target) -> String {
        if self.at.starts_with('/') {
            self.at.clone()
        } else {
            format!("{}/{}", t.home(), self.at)
        }
    }

    /// Write it onto the target, replacing what was there; returns its path there.
    pub(crate) fn write_on(&self, t: &dyn Target) -> String {
        let path = self.path_on(t);
        let root = t.host_path(&path);
        match std::fs::remove_dir_all(&root) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                panic!("removing {}: {e}", root.display())
            }
            _ => {}
        }
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        for entry in &self.entries {
            match entry {
                Entry::File(rel, contents, mode) => {
                    let file = under(&root, rel);
                    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                    std::fs::write(&file, contents)
                        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                    std::fs::set_permissions(
                        &file,
                        std::os::unix::fs::PermissionsExt::from_mode(*mode),
                    )
                    .unwrap();
                }
                Entry::Dir(rel) => std::fs::create_dir_all(under(&root, rel)).unwrap(),
            }
        }
        path
    }
}

fn under(root: &std::path::Path, rel: &str) -> PathBuf {
    assert!(
        !rel.starts_with('/') && !rel.split('/').any(|c| c == ".."),
        "{rel} is not inside the fixture"
    );
    root.join(rel)
}
