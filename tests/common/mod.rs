//! Test targets: a booted systemd node of the rig, or the bare host with the direct runtime.
#![allow(dead_code)] // each test binary uses its own part of this module

pub(crate) mod boxtest;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rig_sh() -> PathBuf {
    repo_root().join("tests/rig.sh")
}

/// Where a test runs `ag-box` and shell scripts.
pub(crate) trait Target {
    /// Run a bash script with the target's environment; `env` adds variables. The script stops
    /// at its first failing command (`bash -e`), so that its exit status speaks for every step.
    fn sh_env(&self, env: &[(&str, &str)], script: &str) -> Output;
    fn sh(&self, script: &str) -> Output {
        self.sh_env(&[], script)
    }
    /// Run `argv` (`ag-box ...`) as it is, no shell in between, with the target's environment;
    /// `env` adds variables, `dir` is where it runs (else the target's own place).
    fn run_env(&self, env: &[(&str, &str)], dir: Option<&str>, argv: &[&str]) -> Output;
    fn run(&self, argv: &[&str]) -> Output {
        self.run_env(&[], None, argv)
    }
    /// The target's home directory (projects live under it).
    fn home(&self) -> &str;
    fn systemd(&self) -> bool;
    /// ag-box's state directory there (`BOX_STATE_DIR`).
    fn state_dir(&self) -> String;
    /// The `PATH` its commands run with.
    fn search_path(&self) -> String;
    /// Where a path of the target lies on the machine running the test (its files are written
    /// and read from here, not through a shell).
    fn host_path(&self, path: &str) -> PathBuf;
    /// A file's contents on the target.
    fn read(&self, path: &str) -> String {
        let p = self.host_path(path);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{path} ({}): {e}", p.display()))
    }
    /// Write a file on the target, its parents made.
    fn write(&self, path: &str, contents: &str) {
        let p = self.host_path(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("{path} ({}): {e}", p.display()));
    }
    fn exists(&self, path: &str) -> bool {
        self.host_path(path).symlink_metadata().is_ok()
    }
    /// Remove a file or tree on the target, if there.
    fn remove(&self, path: &str) {
        let p = self.host_path(path);
        let gone = match p.symlink_metadata() {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
            Ok(_) => std::fs::remove_file(&p),
            Err(_) => Ok(()),
        };
        gone.unwrap_or_else(|e| panic!("removing {path} ({}): {e}", p.display()));
    }
    /// A file's owner, `uid:gid`.
    fn owner(&self, path: &str) -> String {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::symlink_metadata(self.host_path(path))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        format!("{}:{}", m.uid(), m.gid())
    }
}

/// A prerequisite is missing: the test fails, in CI or not (a skipped test proves nothing).
pub(crate) fn missing(what: &str) -> Option<std::convert::Infallible> {
    panic!("prerequisite missing: {what}; run tests/run.sh, which installs and boots the rig");
}

pub(crate) struct Node {
    pub name: &'static str,
    /// The node's host-side directory (`tests/rig.sh dir`).
    dir: PathBuf,
    /// Variables every command on this node gets.
    env: Vec<(String, String)>,
    /// The nodes stay powered while this is held (see [`Cluster::get_alone`]).
    powered: Option<nix::fcntl::Flock<std::fs::File>>,
}

/// Tests share the rig's nodes (shared lock); one that cuts a node's power holds it alone
/// (exclusive). Always taken after the cluster lock, never before.
fn nodes_lock(arg: nix::fcntl::FlockArg) -> nix::fcntl::Flock<std::fs::File> {
    let f = std::fs::File::create(Path::new(&test_base()).join(".nodes.lock")).unwrap();
    nix::fcntl::Flock::lock(f, arg).map_err(|(_, e)| e).unwrap()
}

fn test_base() -> String {
    let base = std::env::var("BOX_TEST_BASE").unwrap_or_else(|_| "/srv/boxtest".into());
    std::fs::create_dir_all(&base).unwrap();
    base
}

impl Node {
    /// A rig node configured with the embedded local store instead of the cluster's S3 store.
    pub(crate) fn local_store(name: &'static str) -> Option<Node> {
        let mut node = Node::get(name)?;
        node.env
            .push(("BOX_CONFIG_DIR".into(), "/root/.config/box-local".into()));
        Some(node)
    }

    /// The rig's node (S3 cluster config), with this build of ag-box in its /opt/box/bin.
    pub(crate) fn get(name: &'static str) -> Option<Node> {
        let mut node = Node::unlocked(name)?;
        node.powered = Some(nodes_lock(nix::fcntl::FlockArg::LockShared));
        Some(node)
    }

    fn unlocked(name: &'static str) -> Option<Node> {
        let up = Command::new(rig_sh())
            .args(["leader", name])
            .output()
            .unwrap_or_else(|e| panic!("running tests/rig.sh leader {name}: {e}"));
        if !up.status.success() {
            missing(&format!("rig node {name} is not up (tests/rig.sh up)"))?;
        }
        let dir = Command::new(rig_sh())
            .args(["dir", name])
            .output()
            .unwrap_or_else(|e| panic!("running tests/rig.sh dir {name}: {e}"));
        let dir = PathBuf::from(String::from_utf8_lossy(&dir.stdout).trim());
        let bin_dir = dir.join("opt-box/bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        let built = std::fs::read(env!("CARGO_BIN_EXE_ag-box")).unwrap();
        // Boxes bind the binary that started them: replace it only when it differs, and by
        // rename, since another test process may be running it.
        if std::fs::read(bin_dir.join("ag-box")).ok().as_ref() != Some(&built) {
            let tmp = bin_dir.join(format!(
                ".ag-box.{}.{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::write(&tmp, &built).unwrap();
            std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            std::fs::rename(&tmp, bin_dir.join("ag-box")).unwrap();
        }
        Some(Node {
            name,
            dir,
            env: vec![],
            powered: None,
        })
    }
}

impl Node {
    /// Copy a file of the repository (`tests/...`) into the node's `/root`, as `name`.
    pub(crate) fn put_in_root(&self, repo_file: &str, name: &str) {
        let dir = Command::new(rig_sh())
            .args(["dir", self.name])
            .output()
            .unwrap();
        let dir = PathBuf::from(String::from_utf8_lossy(&dir.stdout).trim());
        std::fs::copy(repo_root().join(repo_file), dir.join("root").join(name)).unwrap();
    }
}

impl Target for Node {
    fn sh_env(&self, env: &[(&str, &str)], script: &str) -> Output {
        let mut c = Command::new(rig_sh());
        c.args(["exec", self.name]);
        c.args(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        c.args(env.iter().map(|(k, v)| format!("{k}={v}")));
        c.args(["bash", "-e", "-c", script]);
        c.output().unwrap()
    }
    fn run_env(&self, env: &[(&str, &str)], dir: Option<&str>, argv: &[&str]) -> Output {
        // `rig.sh exec` runs `env -i ... "$@"`: a first word with `=` would be a variable.
        assert!(!argv[0].contains('='), "{argv:?}");
        let mut c = Command::new(rig_sh());
        c.args(["exec", self.name]);
        c.args(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        c.args(env.iter().map(|(k, v)| format!("{k}={v}")));
        if let Some(dir) = dir {
            c.args(["env", "-C", dir]);
        }
        c.args(argv);
        c.output().unwrap()
    }
    fn home(&self) -> &'static str {
        "/root"
    }
    fn systemd(&self) -> bool {
        true
    }
    fn state_dir(&self) -> String {
        "/var/lib/ag-box".into()
    }
    fn search_path(&self) -> String {
        // `rig.sh exec`'s clean PATH.
        "/opt/box/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
    }
    fn host_path(&self, path: &str) -> PathBuf {
        // The node's own disks, bind-mounted from its directory (tests/rig.sh).
        for (inside, outside) in [
            ("/root", "root"),
            ("/var/lib/ag-box", "var-lib-ag-box"),
            ("/run/box", "run-box"),
            ("/opt/box", "opt-box"),
            ("/etc/box", "etc-box"),
        ] {
            if path == inside {
                return self.dir.join(outside);
            }
            if let Some(rest) = path.strip_prefix(inside).and_then(|r| r.strip_prefix('/')) {
                return self.dir.join(outside).join(rest);
            }
        }
        panic!("{path} is on none of {}'s own disks", self.name);
    }
}

/// The bare host (no systemd as PID 1): everything under a private base dir.
pub(crate) struct Host {
    pub base: PathBuf,
    home: String,
}

impl Host {
    pub(crate) fn new(tag: &str) -> Option<Host> {
        for tool in ["bwrap", "tmux", "restic", "nsenter"] {
            if !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
            {
                missing(&format!("{tool} on the host (tests/rig.sh install)"))?;
            }
        }
        // Not under /tmp: a box binds the project at the same path and owns its own /tmp.
        let base = PathBuf::from(format!("/srv/ag-box-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("home")).unwrap();
        let home = base.join("home").to_string_lossy().into_owned();
        Some(Host { base, home })
    }
}

/// The bare host's `PATH` for tests: this build's ag-box first.
fn host_path_var() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_ag-box")).parent().unwrap();
    format!(
        "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        bin.display()
    )
}

impl Host {
    /// `program` with the host's test environment, run in its base dir.
    fn command(&self, program: &str) -> Command {
        let path = host_path_var();
        let mut c = Command::new(if program == "ag-box" {
            env!("CARGO_BIN_EXE_ag-box")
        } else {
            program
        });
        c.current_dir(&self.base)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("BOX_STATE_DIR", self.base.join("state"))
            .env("BOX_CONFIG_DIR", self.base.join("config"))
            .env("BOX_RUNTIME", "direct")
            .env("BOX_NODE", "host")
            .env("RESTIC_REPOSITORY", self.base.join("state/restic"))
            .env(
                "RESTIC_PASSWORD_FILE",
                self.base.join("state/restic-password"),
            );
        c
    }
}

impl Target for Host {
    fn sh_env(&self, env: &[(&str, &str)], script: &str) -> Output {
        let mut c = self.command("bash");
        c.args(["-e", "-c", script]);
        c.envs(env.iter().copied());
        c.output().unwrap()
    }
    fn run_env(&self, env: &[(&str, &str)], dir: Option<&str>, argv: &[&str]) -> Output {
        let mut c = self.command(argv[0]);
        c.args(&argv[1..]);
        if let Some(dir) = dir {
            c.current_dir(self.host_path(dir));
        }
        c.envs(env.iter().copied());
        c.output()
            .unwrap_or_else(|e| panic!("running {argv:?} on the host: {e}"))
    }
    fn home(&self) -> &str {
        &self.home
    }
    fn systemd(&self) -> bool {
        false
    }
    fn state_dir(&self) -> String {
        self.base.join("state").to_string_lossy().into_owned()
    }
    fn search_path(&self) -> String {
        host_path_var()
    }
    fn host_path(&self, path: &str) -> PathBuf {
        // Relative paths are the base dir's, where its commands run.
        self.base.join(path)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // End what this test's ag-box left running detached (a quick park's whole snapshot,
        // with its restic: they would write into the files removed below), stop any box it
        // left running, remove the cgroups it ran in (once its processes are gone) and release
        // its network namespace, then remove its files.
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for p in /proc/[0-9]*; do tr '\\0' '\\n' 2>/dev/null < $p/environ | grep -qx 'BOX_STATE_DIR={0}/state' && kill -9 ${{p#/proc/}} 2>/dev/null; done
                 for d in /run/box/*; do [ -f \"$d/tmux.conf\" ] && grep -q '{0}' \"$d/tmux.conf\" && {{ kill $(cat \"$d/anchor.pid\") 2>/dev/null
                   [ -f \"$d/cgroups\" ] && while read -r c; do for i in $(seq 50); do rmdir \"$c\" 2>/dev/null && break; [ -d \"$c\" ] || break; sleep 0.1; done; done < \"$d/cgroups\"
                   rm -rf \"$d\"; }}; done
                 for m in {0}/state/meta/*.json; do [ -e \"$m\" ] || continue; p=/run/box/.netns/$(basename \"$m\" .json); umount -l \"$p\" 2>/dev/null; rm -f \"$p\"; done; true",
                self.base.display()
            ))
            .status();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// The restic locks there now that were not in `before` (`restic_locks`).
pub(crate) fn restic_locks_added(
    t: &dyn Target,
    before: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    restic_locks(t).difference(before).cloned().collect()
}

/// The shell command that lists the restic locks in the rig's bucket (S3 XML).
pub(crate) const LIST_LOCKS: &str =
    "curl -sf 'http://10.200.0.1:5001/agent-boxes?list-type=2&prefix=restic/locks/'";

/// The restic locks in the rig's bucket, as the S3 server lists them.
pub(crate) fn restic_locks(t: &dyn Target) -> std::collections::BTreeSet<String> {
    lock_keys(&t.sh(LIST_LOCKS).ok().stdout())
}

/// The keys in a listing of [`LIST_LOCKS`].
pub(crate) fn lock_keys(listed: &str) -> std::collections::BTreeSet<String> {
    listed
        .split("<Key>")
        .skip(1)
        .filter_map(|s| s.split("</Key>").next())
        .map(String::from)
        .collect()
}

/// Wait until the whole snapshot a quick park of `name` on `t` left to follow has ended (its
/// unit on a systemd node, its process on the bare host).
pub(crate) fn whole_snapshot_done(t: &dyn Target, name: &str) {
    t.sh(&format!(
        "for i in $(seq 600); do
           [ -n \"$(systemctl show -p Job --value boxfinish-{name} 2>/dev/null)\" ] ||
             systemctl is-active -q boxfinish-{name} 2>/dev/null ||
             pgrep -f -- '__finish-park {name}$' >/dev/null || exit 0
           sleep 0.1
         done; exit 1"
    ))
    .ok();
}

/// A box's row of `ag-box ls --json` on a target.
pub(crate) fn box_row(t: &dyn Target, name: &str) -> Option<serde_json::Value> {
    let ls = t.sh("ag-box ls --json").ok().stdout();
    let boxes: serde_json::Value = serde_json::from_str(&ls).unwrap();
    boxes["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .cloned()
}

/// A box's own uid (its gid is the same number), from its record: one of ag-box's range.
pub(crate) fn uid_of(t: &dyn Target, name: &str) -> u64 {
    let row = box_row(t, name).unwrap();
    let uid = row["uid"].as_u64().unwrap();
    assert_eq!(row["gid"].as_u64(), Some(uid), "{row}");
    assert!((2_000_000_000..=2_000_065_535).contains(&uid), "{row}");
    uid
}

/// Output checks with the whole transcript in the failure message.
pub(crate) trait Checked {
    fn code(&self) -> i32;
    fn stdout(&self) -> String;
    fn stderr(&self) -> String;
    fn ok(&self) -> &Self;
}

impl Checked for Output {
    fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    #[track_caller]
    fn ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "expected success, got {}\nstdout:\n{}\nstderr:\n{}",
            self.code(),
            self.stdout(),
            self.stderr()
        );
        self
    }
}

#[track_caller]
pub(crate) fn assert_code(out: &Output, code: i32, stderr_has: &str) {
    assert_eq!(
        out.code(),
        code,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout(),
        out.stderr()
    );
    assert!(
        out.stderr().contains(stderr_has),
        "stderr lacks {stderr_has:?}:\n{}",
        out.stderr()
    );
}

/// Tests that share the two-node cluster (S3 store, links) run one at a time, across processes.
pub(crate) fn cluster_lock() -> nix::fcntl::Flock<std::fs::File> {
    let f = std::fs::File::create(Path::new(&test_base()).join(".cluster.lock")).unwrap();
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap()
}

/// Both rig nodes, with a box name cleared everywhere: units, files, record, local state.
pub(crate) struct Cluster {
    pub a: Node,
    pub b: Node,
    /// A third node, for races among three.
    pub c: Node,
    /// Held alone: no other test uses the nodes (their power may be cut).
    _alone: Option<nix::fcntl::Flock<std::fs::File>>,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl Cluster {
    pub(crate) fn get() -> Option<Cluster> {
        let lock = cluster_lock();
        let a = Node::get("nodeA")?;
        let b = Node::get("nodeB")?;
        let c = Cluster {
            a,
            b,
            c: Node::get("nodeC")?,
            _alone: None,
            _lock: lock,
        };
        c.a.sh("ag-box init").ok();
        Some(c)
    }

    /// Both nodes, with no other test on them: this one may cut their power.
    pub(crate) fn get_alone() -> Option<Cluster> {
        let lock = cluster_lock();
        let alone = nodes_lock(nix::fcntl::FlockArg::LockExclusive);
        let c = Cluster {
            a: Node::unlocked("nodeA")?,
            b: Node::unlocked("nodeB")?,
            c: Node::unlocked("nodeC")?,
            _alone: Some(alone),
            _lock: lock,
        };
        c.a.sh("ag-box init").ok();
        Some(c)
    }

    /// Cut a node's power, or bring it back on its disks (`tests/rig.sh power-off|power-on`).
    // Only a holder of the cluster alone cuts power: hence a method.
    #[allow(clippy::unused_self)]
    pub(crate) fn power(&self, action: &str, node: &str) {
        let rig = repo_root().join("tests/rig.sh");
        let ok = Command::new(rig).args([action, node]).status().unwrap();
        assert!(ok.success(), "rig.sh {action} {node} failed");
    }

    pub(crate) fn node(&self, name: &str) -> &Node {
        match name {
            "nodeA" => &self.a,
            "nodeB" => &self.b,
            _ => &self.c,
        }
    }

    pub(crate) fn all(&self) -> [&Node; 3] {
        [&self.a, &self.b, &self.c]
    }

    /// A project `/root/<name>` with files and a Claude session, tracked on A and parked.
    pub(crate) fn parked_box(&self, name: &str) {
        self.forget(name);
        self.a
            .sh(&format!(
                "set -e
                 mkdir -p /root/{name}/src /root/.claude/projects/-root-{name}
                 echo v1 > /root/{name}/src/main.txt
                 echo '{{\"session\":1}}' > /root/.claude/projects/-root-{name}/s1.jsonl
                 ag-box track {name} && ag-box park {name}"
            ))
            .ok();
    }

    /// Forget an earlier run's box: park it wherever it is, then drop its record and
    /// snapshots, and remove its files on every node.
    pub(crate) fn forget(&self, name: &str) {
        for n in self.all() {
            n.sh(&format!("ag-box park {name} >/dev/null 2>&1 || true"))
                .ok();
        }
        self.a
            .sh(&format!("ag-box drop {name} --yes >/dev/null 2>&1 || true"))
            .ok();
        for n in self.all() {
            n.sh(&format!(
                "systemctl stop boxrun-{name} boxnet-{name} 2>/dev/null || true; umount /run/box/.netns/{name} 2>/dev/null || true; \
                 rm -rf /run/box/.netns/{name} /root/{name} /root/.claude/projects/-root-{name} \
                 /var/lib/ag-box/local/{name}.json /var/lib/ag-box/local/manifest/{name}.json \
                 /var/lib/ag-box/homes/{name}"
            ))
            .ok();
        }
    }

    /// The node holding a box's lease, read from node A.
    pub(crate) fn holder(&self, name: &str) -> Option<String> {
        let row = box_row(&self.a, name)?;
        row["lease"]["node"].as_str().map(str::to_string)
    }

    pub(crate) fn active(&self, node: &str, name: &str) -> bool {
        self.node(node)
            .sh(&format!("systemctl is-active boxrun-{name}"))
            .stdout()
            .trim()
            == "active"
    }
}

/// `ag-box attach <name>` in a real terminal (the pane of an outer tmux on the target), as a
/// person would: waits for the box's status bar (`[box:<host>]`, or tmux's own `[main]`), types `echo typed-$((6*7))`, waits for the
/// box's shell to print `typed-42`, detaches with `C-b d`. Returns the screen, ending with
/// attach's exit line (`attach-exit=N`); fails the test when the box never answered.
pub(crate) fn attach_and_type(t: &dyn Target, name: &str) -> String {
    let home = t.home();
    let out = t.sh(&format!(
        "o=outer-{name}; tmux -L $o kill-server 2>/dev/null || true
         tmux -L $o new-session -d -s $o -x 160 -y 40 \"ag-box attach {name} 2>{home}/attach-{name}.err; echo attach-exit=\\$?; sleep 60\" || exit 9
         screen() {{ tmux -L $o capture-pane -p -t $o; }}
         until_shown() {{ for i in $(seq 200); do screen | grep -Eq -- \"$1\" && return 0; sleep 0.1; done; return 1; }}
         rc=0
         until_shown '\\[(box:|main\\])' && tmux -L $o send-keys -t $o 'echo typed-$((6*7))' Enter &&
           until_shown '^typed-42' && tmux -L $o send-keys -t $o C-b d && until_shown 'attach-exit=' || rc=$?
         screen; cat {home}/attach-{name}.err; tmux -L $o kill-server; exit $rc"
    ));
    assert_eq!(
        out.code(),
        0,
        "the box never answered in the terminal:\n{}{}",
        out.stdout(),
        out.stderr()
    );
    out.stdout()
}

/// Checks `doc` against the shape `docs/json-shapes.json` gives `name`, key for key: no key
/// missing, none extra, each of its type.
pub(crate) fn assert_shape(name: &str, doc: &serde_json::Value) {
    let text = std::fs::read_to_string(repo_root().join("docs/json-shapes.json")).unwrap();
    let shapes: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(shapes.get(name).is_some(), "no shape named {name}");
    let mut wrong = Vec::new();
    check_shape(&shapes[name], doc, name, &mut wrong);
    assert!(wrong.is_empty(), "{name}: {wrong:#?}\n{doc:#}");
}

fn check_shape(
    shape: &serde_json::Value,
    v: &serde_json::Value,
    at: &str,
    wrong: &mut Vec<String>,
) {
    use serde_json::Value;
    match shape {
        Value::String(types) => {
            if !types.split('|').any(|t| of_type(t, v)) {
                wrong.push(format!("{at}: {v} is not {types}"));
            }
        }
        Value::Object(keys) => {
            if v.is_null() && keys.contains_key("_null") {
                return;
            }
            let Some(object) = v.as_object() else {
                wrong.push(format!("{at}: {v} is not an object"));
                return;
            };
            for key in keys.keys().filter(|k| !k.starts_with('_')) {
                match object.get(key) {
                    Some(inner) => check_shape(&keys[key], inner, &format!("{at}.{key}"), wrong),
                    None => wrong.push(format!("{at}.{key} is missing")),
                }
            }
            for key in object.keys().filter(|k| !keys.contains_key(*k)) {
                wrong.push(format!("{at}.{key} is not documented"));
            }
        }
        Value::Array(items) => match v.as_array() {
            Some(list) => {
                for (i, item) in list.iter().enumerate() {
                    check_shape(&items[0], item, &format!("{at}[{i}]"), wrong);
                }
            }
            None => wrong.push(format!("{at}: {v} is not a list")),
        },
        other => panic!("{at}: {other} is no shape"),
    }
}

fn of_type(t: &str, v: &serde_json::Value) -> bool {
    let text = v.as_str().unwrap_or("");
    match t {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "bool" => v.is_boolean(),
        "null" => v.is_null(),
        "strings" => v
            .as_array()
            .is_some_and(|l| l.iter().all(serde_json::Value::is_string)),
        "any" => true,
        "id" => text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()),
        "time" => {
            let b = text.as_bytes();
            b.len() == 20
                && b[19] == b'Z'
                && b[..19].iter().enumerate().all(|(i, c)| match i {
                    4 | 7 => *c == b'-',
                    10 => *c == b'T',
                    13 | 16 => *c == b':',
                    _ => c.is_ascii_digit(),
                })
        }
        other => panic!("no type {other}"),
    }
}
