//! Where a box's process tree runs: a systemd transient unit, or (without systemd as PID 1)
//! a detached supervisor process. Both run the same anchor and bwrap argv.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::atomic;
use crate::error::UserError;
use crate::plan::account;
use crate::plan::sandbox::{BoxSpec, INFO_FD};
use crate::plan::{egress, tmux as tmux_plan, unit};
use crate::sys::enter::Sandbox;
use crate::sys::runtime_kind::{Runtime, supervisor_pid};
use crate::sys::{cmd, freezer, host, netns, threads};

const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// One readiness probe (nsenter, a drop of privileges, a tmux client) on a loaded node.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

impl Runtime {
    pub(crate) fn is_active(self, spec: &BoxSpec) -> bool {
        match self {
            Runtime::Systemd => cmd::which("systemctl").is_some_and(|sc| {
                cmd::succeeds(Command::new(sc).args([
                    "is-active",
                    "--quiet",
                    &unit::unit_name(&spec.name),
                ]))
            }),
            Runtime::Direct => direct_box_runs(&spec.run_dir),
        }
    }

    /// Names of the boxes whose process tree runs on this node (without asking the store).
    pub(crate) fn running_boxes(self, run_root: &Path) -> Vec<String> {
        let mut names: Vec<String> = match self {
            Runtime::Systemd => cmd::which("systemctl")
                .and_then(|sc| {
                    cmd::output(Command::new(sc).args([
                        "list-units",
                        "--state=active",
                        "--plain",
                        "--no-legend",
                        "boxrun-*.service",
                    ]))
                    .ok()
                })
                .map(|text| {
                    text.lines()
                        .filter_map(|l| {
                            l.split_whitespace()
                                .next()?
                                .strip_prefix("boxrun-")?
                                .strip_suffix(".service")
                                .map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default(),
            Runtime::Direct => fs::read_dir(run_root)
                .map(|entries| {
                    entries
                        .filter_map(std::result::Result::ok)
                        .filter(|e| direct_box_runs(&e.path()))
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default(),
        };
        names.sort();
        names
    }

    /// Start the box and wait until its tmux server answers a client inside it.
    pub(crate) fn start(
        self,
        spec: &BoxSpec,
        bwrap_args: &[String],
        memory_max: Option<&str>,
        nix: bool,
    ) -> Result<()> {
        let bwrap = cmd::require("bwrap")?;
        // The system clock: the unit's journal and the anchor's log are read from this time.
        let since = SystemTime::now();
        // A watcher an earlier run left (a box that died unstopped) goes before its pid does.
        end_watcher(spec);
        // The run dir and network namespace are made while the units an earlier run left go
        // (a process or two each, off the way to the box's start).
        std::thread::scope(|s| {
            let leftovers = s.spawn(|| self.stop_leftover_units(spec));
            let made = prepare_run_dir(spec, nix).and_then(|()| make_netns(spec));
            let stopped = threads::joined(leftovers, "stopping what an earlier run left");
            made.and(stopped)
        })?;
        let supervise = self == Runtime::Direct;
        let anchor = unit::anchor_argv(spec, supervise, &bwrap, bwrap_args);
        match self {
            Runtime::Systemd => {
                let writable = unit::writable_paths(spec, std::path::Path::exists);
                let argv = unit::systemd_run_argv(spec, memory_max, &writable, &anchor);
                run_unit(&argv, &unit::unit_name(&spec.name))?;
                if let Some(pin) = spec.netns() {
                    let proxy = unit::proxy_argv(&spec.exe, &spec.name, &spec.run_dir, &pin);
                    let name = unit::proxy_unit_name(&spec.name);
                    // Bound to the box's unit: refused when that one already ended (then
                    // what it said is the answer).
                    if let Err(e) = run_unit(&unit::proxy_unit_argv(spec, &proxy), &name) {
                        if !self.is_active(spec) {
                            return Err(self.did_not_start(spec, since));
                        }
                        return Err(e);
                    }
                }
            }
            Runtime::Direct => spawn_supervisor(spec, &anchor, memory_max)?,
        }
        // The watcher starts while the box comes up (it waits for the box's state itself).
        let (ready, watcher) = std::thread::scope(|s| {
            let watcher = s.spawn(|| self.start_watcher(spec));
            let ready = self.wait_ready(spec, since);
            (ready, threads::joined(watcher, "starting the watcher"))
        });
        if ready.is_err() {
            // A watcher that started after the failed box was stopped goes too.
            let _ = self.stop(spec);
            return ready;
        }
        if let Err(e) = watcher {
            tracing::warn!(
                "box '{}': its agent's state will not be published: {e:#}",
                spec.name
            );
        }
        Ok(())
    }

    /// The units an earlier run of the box left (its proxy, its watcher): stopped before
    /// new ones start under their names.
    fn stop_leftover_units(self, spec: &BoxSpec) -> Result<()> {
        match self {
            Runtime::Systemd => {
                let [proxy, watch] = companion_units(spec);
                stop_units(&[&proxy, &watch])
            }
            Runtime::Direct => Ok(()),
        }
    }

    /// The box's state watcher (`commands::watch`): a unit bound to the box's, or a detached
    /// process that ends when the box does.
    fn start_watcher(self, spec: &BoxSpec) -> Result<()> {
        match self {
            Runtime::Systemd => run_unit(
                &unit::watch_unit_argv(spec, &host::config_env()),
                &unit::watch_unit_name(&spec.name),
            ),
            Runtime::Direct => {
                let child = spawn_detached(
                    spec,
                    unit::WATCH_SUBCOMMAND,
                    &spec.run_dir.join("watch.log"),
                )
                .context("starting the box's state watcher")?;
                atomic::write(
                    &spec.run_dir.join(WATCH_PID),
                    child.id().to_string().as_bytes(),
                    0o600,
                )
            }
        }
    }

    /// A quick park's finisher (`lifecycle::finish`): a transient unit, or a detached process.
    fn finish_later(self, spec: &BoxSpec, log: &Path) -> Result<()> {
        match self {
            Runtime::Systemd => {
                let name = unit::finish_unit_name(&spec.name);
                let argv = unit::finish_unit_argv(spec, &finisher_env());
                // Refused while an earlier park's finisher runs under that name: that one
                // is stopped (this one snapshots what it would have, and more) and this
                // one started again.
                run_unit(&argv, &name).or_else(|refused| {
                    stop_unit(&name)
                        .and_then(|()| run_unit(&argv, &name))
                        .map_err(|e| e.context(format!("{refused:#}")))
                })
            }
            Runtime::Direct => {
                if let Some(dir) = log.parent() {
                    fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                spawn_detached(spec, unit::FINISH_SUBCOMMAND, log)
                    .context("starting the whole snapshot after the quick park")?;
                Ok(())
            }
        }
    }

    /// The box's tmux server lets the client user in and answers it: a client inside the box
    /// (never one on the host: a box controls its server, and a server can make its clients
    /// write files and run commands). The error says what tmux said.
    pub(crate) fn admits(self, spec: &BoxSpec) -> Result<()> {
        let mut probe = Sandbox::open(spec, self)?.command(&spec.probe_argv())?;
        let (out, err) = cmd::output_within(probe.env_clear().envs(spec.env()), PROBE_TIMEOUT)?;
        if out.trim_end() != tmux_plan::READY {
            bail!(
                "its tmux server did not let the client in (tmux said: {})",
                crate::plan::text::escaped(cmd::last_line(&err))
            );
        }
        Ok(())
    }

    /// The box's tmux server answers, and so does its proxy when it has one.
    fn wait_ready(self, spec: &BoxSpec, since: SystemTime) -> Result<()> {
        let started = Instant::now();
        while started.elapsed() < READY_TIMEOUT {
            let proxy_up = spec
                .netns()
                .is_none_or(|pin| netns::answers(&pin, egress::PROXY_PORT));
            if proxy_up {
                match self.admits(spec) {
                    Ok(()) => return Ok(()),
                    Err(e) => tracing::debug!("box '{}' does not answer yet: {e:#}", spec.name),
                }
            }
            // A unit or supervisor that died early will not come back: stop waiting.
            if started.elapsed() > Duration::from_secs(1) && !self.is_active(spec) {
                break;
            }
            // Each probe is a process or two: a short pause answers an up sooner.
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(self.did_not_start(spec, since))
    }

    /// A start that failed: stopped, with the last line the anchor said.
    fn did_not_start(self, spec: &BoxSpec, since: SystemTime) -> anyhow::Error {
        let hint = match self {
            Runtime::Systemd => format!("see 'journalctl -u {}'", unit::unit_name(&spec.name)),
            Runtime::Direct => format!("see {}", spec.run_dir.join("anchor.log").display()),
        };
        let said = self.last_words(spec, since);
        let _ = self.stop(spec);
        UserError::failed(
            format!(
                "box '{}' did not start (its tmux server or egress proxy never answered){}",
                spec.name,
                said.map(|l| format!("; it said: {l}")).unwrap_or_default()
            ),
            hint,
        )
        .into()
    }

    /// The last line the box's anchor (bwrap, tmux) wrote since `since`, if any: why it died.
    fn last_words(self, spec: &BoxSpec, since: SystemTime) -> Option<String> {
        let text = match self {
            Runtime::Systemd => {
                let secs = since.duration_since(UNIX_EPOCH).ok()?.as_secs();
                // The unit's own output only (systemd's lines about it are its PID 1's).
                let unit = format!("_SYSTEMD_UNIT={}.service", unit::unit_name(&spec.name));
                cmd::output(Command::new(cmd::which("journalctl")?).args([
                    "--no-pager",
                    "-o",
                    "cat",
                    "-n",
                    "20",
                    &format!("--since=@{secs}"),
                    &unit,
                ]))
                .ok()?
            }
            Runtime::Direct => fs::read_to_string(spec.run_dir.join("anchor.log")).ok()?,
        };
        Some(cmd::last_line(&text).to_string()).filter(|l| !l.is_empty())
    }

    /// Stop the box's whole process tree and wait until it is gone.
    pub(crate) fn stop(self, spec: &BoxSpec) -> Result<()> {
        freezer::resume_orphaned(spec);
        match self {
            Runtime::Systemd => {
                // Its proxy and watcher are bound to the box's unit; stopped with it in case that
                // bond was never made (one job: systemd stops them before the box).
                let [proxy, watch] = companion_units(spec);
                stop_units(&[&unit::unit_name(&spec.name), &proxy, &watch])?;
            }
            Runtime::Direct => {
                // The supervisor's death takes bwrap and its pid namespace with it.
                for signal in [Signal::SIGTERM, Signal::SIGKILL] {
                    let Some(pid) = supervisor_pid(&spec.run_dir) else {
                        break;
                    };
                    let _ = kill(pid, signal);
                    let deadline = Instant::now() + STOP_TIMEOUT;
                    while supervisor_pid(&spec.run_dir).is_some() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                if supervisor_pid(&spec.run_dir).is_some() {
                    bail!(
                        "box '{}': its supervisor is still running after stop",
                        spec.name
                    );
                }
                end_watcher(spec);
                end_what_runs_on(spec)?;
                remove_box_cgroups(&spec.run_dir);
            }
        }
        netns::remove(&spec.legacy_netns_pin())?;
        netns::remove(&spec.netns_pin())
    }
}

/// Where the direct runtime keeps its watcher's pid, in the box's run dir (root's).
const WATCH_PID: &str = "watch.pid";

/// The direct runtime's watcher of the box, ended with it (it would notice within seconds;
/// a quick `stop` and `up` must not leave two). Only a process that is that watcher.
fn end_watcher(spec: &BoxSpec) {
    let Some(pid) = fs::read_to_string(spec.run_dir.join(WATCH_PID))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        return;
    };
    let proc_dir = format!("/proc/{pid}");
    let root_owned = fs::metadata(&proc_dir).is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    let ours = root_owned
        && fs::read(format!("{proc_dir}/cmdline")).is_ok_and(|c| {
            let words: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            words.get(1) == Some(&unit::WATCH_SUBCOMMAND.as_bytes())
                && words.get(2) == Some(&spec.name.as_bytes())
        });
    if ours {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
}

/// `ag-box <verb> <box>` in a session of its own (it outlives this command), writing to `log`.
fn spawn_detached(spec: &BoxSpec, verb: &str, log: &Path) -> Result<std::process::Child> {
    let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut c = Command::new(&spec.exe);
    c.args([verb, spec.name.as_str()])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // SAFETY: setsid is async-signal-safe; it detaches the child from our session.
    unsafe {
        c.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    Ok(c.spawn()?)
}

/// [`config_env`], and under test the crash points, which the finisher's unit has to reach as
/// its detached process does (`sys::crash`).
fn finisher_env() -> Vec<(&'static str, String)> {
    let mut env = host::config_env();
    if cfg!(feature = "crash-points") {
        env.extend(host::set_of(&["AG_BOX_CRASH_AT", "AG_BOX_PAUSE_AT"]));
    }
    env
}

fn run_unit(argv: &[String], unit: &str) -> Result<()> {
    cmd::output(Command::new(&argv[0]).args(&argv[1..]))
        .with_context(|| format!("starting unit {unit}"))?;
    Ok(())
}

/// The units that run beside a box's own: its egress proxy and its state watcher.
fn companion_units(spec: &BoxSpec) -> [String; 2] {
    [
        unit::proxy_unit_name(&spec.name),
        unit::watch_unit_name(&spec.name),
    ]
}

/// Stop `unit` if it is loaded (active, activating or restarting).
fn stop_unit(unit: &str) -> Result<()> {
    stop_units(&[unit])
}

/// Stop those of `units` that are loaded (active, activating or restarting): one `systemctl`
/// asks for all, one stops those.
fn stop_units(units: &[&str]) -> Result<()> {
    let sc = cmd::require("systemctl")?;
    let loaded = || {
        cmd::output(Command::new(&sc).args(unit::show_states_argv(units)))
            .map(|shown| unit::loaded_units(&shown))
            .with_context(|| format!("asking systemd about {}", units.join(", ")))
    };
    let stopping = loaded()?;
    if stopping.is_empty() {
        return Ok(());
    }
    match cmd::output(Command::new(&sc).arg("stop").args(&stopping)) {
        // One that ended and was collected meanwhile is refused as not loaded: what counts
        // is that none is left.
        Err(e) if !loaded()?.is_empty() => {
            Err(e).with_context(|| format!("stopping {}", stopping.join(", ")))
        }
        _ => Ok(()),
    }
}

/// The box's own network namespace when it has one; else none left of an earlier run.
fn make_netns(spec: &BoxSpec) -> Result<()> {
    match spec.netns() {
        Some(pin) => netns::create(&pin).map_err(|e| {
            e.context(UserError::failed(
                format!("box '{}': cannot make its own network namespace", spec.name),
                format!(
                    "ag-box needs CAP_SYS_ADMIN and CAP_NET_ADMIN here (grant them to a container), \
                     or run the box unguarded: 'ag-box set {} network=host'",
                    spec.name
                ),
            ))
        }),
        None => netns::remove(&spec.netns_pin()),
    }
}

/// A fresh run dir, root's alone, but for the socket dir the box user writes its socket in.
fn prepare_run_dir(spec: &BoxSpec, nix: bool) -> Result<()> {
    let dir = &spec.run_dir;
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    // Whatever an earlier start (or an older ag-box, whose run dir the box could write) left.
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("clearing {}", dir.display()));
        }
        _ => {}
    }
    let sock = spec.socket_dir();
    fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    fs::create_dir(&sock).with_context(|| format!("creating {}", sock.display()))?;
    std::os::unix::fs::chown(&sock, Some(spec.ids.uid), Some(spec.ids.gid))?;
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o750))?;
    if spec.egress.mode.isolated() {
        write_policy(spec)?;
    }
    crate::sys::broker::prepare(spec).map_err(|e| {
        e.context(UserError::failed(
            format!("box '{}': cannot prepare its credential broker", spec.name),
            format!(
                "fix what the line above names, or give the box its logins unbrokered on the host's network: 'ag-box set {} network=host'",
                spec.name
            ),
        ))
    })?;
    for managed in crate::plan::attention::MANAGED {
        crate::sys::attention::write_managed(spec, managed).map_err(|e| {
            e.context(UserError::failed(
                format!(
                    "box '{}': cannot carry the node's {} into it",
                    spec.name, managed.node_dir
                ),
                format!(
                    "fix what the line above names in {} (ag-box binds each box's copy over it)",
                    managed.node_dir
                ),
            ))
        })?;
    }
    for (path, text) in [
        (
            spec.tmux_conf(),
            tmux_plan::server_conf(
                &spec.project,
                nix,
                spec.main_command(nix).as_deref(),
                spec.monitored_agent(),
            ),
        ),
        (spec.passwd_file(), account::passwd(spec.ids, spec.home())),
        (spec.group_file(), account::group(spec.ids)),
        (spec.tasks_file(), format!("{}\n", spec.tasks_max)),
    ] {
        atomic::write(&path, text.as_bytes(), 0o644)?;
    }
    Ok(())
}

/// The policy the box's proxy reads; a rewrite applies to the running proxy.
pub(crate) fn write_policy(spec: &BoxSpec) -> Result<()> {
    let json = serde_json::to_vec(&spec.egress)?;
    atomic::write(&spec.egress_policy_file(), &json, 0o600)
}

/// The network a running box has, which a `set network=` changes only between guarded modes
/// (host and guarded switch at the next `up`): host when it has no network namespace of its
/// own, else the policy its proxy reads.
pub(crate) fn egress_in_force(spec: &BoxSpec) -> egress::BoxPolicy {
    if !host::is_mount_point(&spec.netns_pin()) {
        return egress::BoxPolicy {
            mode: egress::Mode::Host,
            allow: spec.egress.allow.clone(),
        };
    }
    fs::read(spec.egress_policy_file())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| spec.egress.clone())
}

/// Move this process into the cgroups of the box's sandbox, so that what `exec` starts there
/// counts against the box's memory limit like everything else in it. Best effort: a hierarchy
/// that cannot be written (read-only, not delegated) is skipped.
/// The bound on tasks the running box started with (its run dir says; root's alone).
pub(crate) fn task_limit(spec: &BoxSpec) -> Option<u64> {
    fs::read_to_string(spec.tasks_file())
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub(crate) fn join_cgroups_of(pid: i32) {
    let Ok(table) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return;
    };
    let me = std::process::id().to_string();
    for line in table.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        let dir = match controllers {
            // cgroup v2; on hybrid hosts it is mounted at .../unified
            "" if Path::new("/sys/fs/cgroup/unified").is_dir() => {
                Path::new("/sys/fs/cgroup/unified").join(rel)
            }
            "" => Path::new("/sys/fs/cgroup").join(rel),
            c => {
                let mount = c.strip_prefix("name=").unwrap_or(c);
                Path::new("/sys/fs/cgroup").join(mount).join(rel)
            }
        };
        if let Err(e) = fs::write(dir.join("cgroup.procs"), &me) {
            tracing::debug!("not joining {}: {e}", dir.display());
        }
    }
}

fn spawn_supervisor(spec: &BoxSpec, anchor: &[String], memory_max: Option<&str>) -> Result<()> {
    let log_path = spec.run_dir.join("anchor.log");
    let log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let mut c = Command::new(&anchor[0]);
    c.args(&anchor[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .env_clear()
        .env("HOME", spec.home())
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
    if let Some(m) = memory_max {
        c.env("AG_BOX_MEMORY_MAX", m);
    }
    // SAFETY: setsid is async-signal-safe; it detaches the supervisor from our session.
    unsafe {
        c.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    c.spawn().context("starting the box supervisor")?;
    Ok(())
}

/// `ag-box __anchor`: give bwrap its info fd (3), then become bwrap (systemd) or supervise it
/// (direct: in the box's network namespace, with its proxy kept running beside it).
pub(crate) fn anchor(
    info: &Path,
    supervise: bool,
    netns: Option<&Path>,
    argv: &[String],
) -> Result<i32> {
    let file = fs::File::create(info).with_context(|| format!("creating {}", info.display()))?;
    let namespace = match netns.filter(|_| supervise) {
        Some(pin) => {
            Some(fs::File::open(pin).with_context(|| format!("opening {}", pin.display()))?)
        }
        None => None,
    };
    let ns_fd = namespace.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: between fork and exec only setns, fcntl and dup2 (async-signal-safe), on fds
    // that stay open until the spawn returns (`namespace` and `file` outlive it).
    unsafe {
        c.pre_exec(move || {
            if let Some(ns) = ns_fd {
                nix::sched::setns(
                    std::os::fd::BorrowedFd::borrow_raw(ns),
                    nix::sched::CloneFlags::CLONE_NEWNET,
                )?;
            }
            if fd == INFO_FD {
                nix::fcntl::fcntl(
                    std::os::fd::BorrowedFd::borrow_raw(INFO_FD),
                    nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
                )?;
            // nix's dup2 wants the target as an fd the child owns; INFO_FD is just a number.
            } else if nix::libc::dup2(fd, INFO_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    if !supervise {
        return Err(c.exec()).with_context(|| format!("executing {}", argv[0]));
    }
    let run_dir = info
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    atomic::write(
        &run_dir.join("anchor.pid"),
        std::process::id().to_string().as_bytes(),
        0o644,
    )?;
    let memory_max = std::env::var("AG_BOX_MEMORY_MAX").ok();
    let cgroups = join_box_cgroups(&run_dir, memory_max.as_deref());
    // For `stop`, which ends this process before it can remove them.
    let listed: Vec<String> = cgroups
        .made
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Err(e) = atomic::write(&cgroups_file(&run_dir), listed.join("\n").as_bytes(), 0o600) {
        say!("ag-box: the box's cgroups were not recorded: {e:#}");
    }
    let proxy_cgroup = cgroups.proxy.clone();
    let mut child = c.spawn().with_context(|| format!("starting {}", argv[0]))?;
    drop(namespace);
    let box_done = Arc::new(AtomicBool::new(false));
    let keeper = netns.map(|pin| {
        let name = run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let proxy = unit::proxy_argv(&host::own_exe(), &name, &run_dir, pin);
        let done = box_done.clone();
        std::thread::spawn(move || keep_proxy(&proxy, &done, proxy_cgroup.as_deref()))
    });
    let status = child.wait()?;
    box_done.store(true, Ordering::Relaxed);
    if let Some(k) = keeper {
        let _ = k.join();
    }
    drop(file);
    // Out of them first: a cgroup this process is in cannot be removed.
    for cg in cgroups.made {
        if let Some(parent) = cg.parent() {
            let _ = fs::write(parent.join("cgroup.procs"), std::process::id().to_string());
        }
        let _ = fs::remove_dir(cg);
    }
    Ok(cmd::exit_code(status))
}

/// The direct runtime's proxy: started again whenever it dies, killed when the box is done
/// (or, through the parent-death signal, when the supervisor is).
fn keep_proxy(argv: &[String], box_done: &AtomicBool, cgroup: Option<&Path>) {
    while !box_done.load(Ordering::Relaxed) {
        let mut c = Command::new(&argv[0]);
        // Its decisions are in the box's rotated log; stdout here would be anchor.log, which
        // nothing rotates.
        c.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            c.pre_exec(|| Ok(nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?));
        }
        match c.spawn() {
            Ok(mut proxy) => {
                if let Some(cg) = cgroup
                    && let Err(e) = fs::write(cg.join("cgroup.procs"), proxy.id().to_string())
                {
                    say!(
                        "ag-box: the proxy's memory bound was not applied ({}): {e}",
                        cg.display()
                    );
                }
                loop {
                    if box_done.load(Ordering::Relaxed) {
                        let _ = proxy.kill();
                        let _ = proxy.wait();
                        return;
                    }
                    if let Ok(Some(status)) = proxy.try_wait() {
                        say!("ag-box: the egress proxy exited ({status}); starting it again");
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Err(e) => say!("ag-box: starting the egress proxy: {e}"),
        }
        std::thread::sleep(unit::PROXY_RESTART);
    }
}

/// Where the direct runtime's supervisor lists the cgroups it made (root's run dir).
fn cgroups_file(run_dir: &Path) -> PathBuf {
    run_dir.join("cgroups")
}

/// The cgroups the direct runtime's supervisor made for a box (as it listed them; only names
/// of ag-box's own), the proxy's among them.
fn listed_box_cgroups(run_dir: &Path) -> Vec<PathBuf> {
    let Ok(listed) = fs::read_to_string(cgroups_file(run_dir)) else {
        return Vec::new();
    };
    listed
        .lines()
        .map(PathBuf::from)
        .filter(|dir| {
            dir.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ag-box-"))
                && dir.starts_with("/sys/fs/cgroup")
        })
        .collect()
}

fn cgroup_pids(dir: &Path) -> Vec<Pid> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .map(Pid::from_raw)
        .collect()
}

/// A direct-runtime box runs while its supervisor does, or while anything is left in its own
/// cgroups: a pid file that is lost or wrong must not make a running box look stopped (park
/// would release its lease while it runs on).
fn direct_box_runs(run_dir: &Path) -> bool {
    // The proxy's cgroup is left out: a proxy that outlived its box is no box.
    supervisor_pid(run_dir).is_some()
        || listed_box_cgroups(run_dir)
            .iter()
            .filter(|dir| !dir.to_string_lossy().ends_with("+proxy"))
            .any(|dir| !cgroup_pids(dir).is_empty())
}

/// Whatever still runs in the box's cgroups once its supervisor is gone (or was never known):
/// killed, and waited for. Never a cgroup holding this very process.
fn end_what_runs_on(spec: &BoxSpec) -> Result<()> {
    let me = Pid::this();
    let live = |dir: &PathBuf| {
        let pids = cgroup_pids(dir);
        !pids.is_empty() && !pids.contains(&me)
    };
    let left: Vec<PathBuf> = listed_box_cgroups(&spec.run_dir)
        .into_iter()
        .filter(live)
        .collect();
    // The box's last processes leave a moment after its supervisor (a pid namespace's end is
    // not instant): only what is still there after that ran on.
    let grace = Instant::now() + Duration::from_secs(2);
    while left.iter().any(live) && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !left.iter().any(live) {
        return Ok(());
    }
    tracing::debug!(
        "box '{}': left in its cgroups: {:?}",
        spec.name,
        left.iter()
            .map(|d| (d.display().to_string(), cgroup_pids(d)))
            .collect::<Vec<_>>()
    );
    tracing::warn!(
        "box '{}': processes of it ran on without its known supervisor; ending them",
        spec.name
    );
    let deadline = Instant::now() + STOP_TIMEOUT;
    while left.iter().any(live) {
        // cgroup.kill (cgroup v2, Linux 5.14) takes a whole cgroup at once, and the v2 cgroup
        // holds every process of the box's v1 ones too. Only without it, one pid at a time
        // (a pid that ends and is reused in between could be hit: old kernels only).
        let mut killed_whole = false;
        for dir in left.iter().filter(|d| live(d)) {
            killed_whole |= fs::write(dir.join("cgroup.kill"), "1").is_ok();
        }
        if !killed_whole {
            for dir in left.iter().filter(|d| live(d)) {
                for pid in cgroup_pids(dir) {
                    let _ = kill(pid, Signal::SIGKILL);
                }
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "box '{}': processes are left in its cgroups after stop",
                spec.name
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The cgroups a stopped supervisor made, now empty, removed (only names of ag-box's own).
fn remove_box_cgroups(run_dir: &Path) {
    for dir in listed_box_cgroups(run_dir) {
        let dir = dir.as_path();
        // Its last tasks may take a moment to leave after the supervisor is gone.
        for _ in 0..20 {
            match fs::remove_dir(dir) {
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EBUSY as i32) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::debug!("not removing {}: {e}", dir.display());
                    break;
                }
                _ => break,
            }
        }
    }
    let _ = fs::remove_file(cgroups_file(run_dir));
}

/// The cgroups the direct runtime's supervisor made for a box, removed when it is done.
struct BoxCgroups {
    made: Vec<PathBuf>,
    /// The memory cgroup of the box's proxy (beside the box's, bounded on its own).
    proxy: Option<PathBuf>,
}

/// The box's own cgroups, joined by the supervisor before it starts the box: a v2 one always
/// (the freezer a snapshot pauses the box with), with the box's memory limit where that is the
/// memory hierarchy, and a v1 memory one on hybrid hosts; and one beside them for the proxy
/// with `PROXY_MEMORY_MAX`. Best effort: what cannot be made is said in the log and skipped.
fn join_box_cgroups(run_dir: &Path, memory_max: Option<&str>) -> BoxCgroups {
    let mut cgroups = BoxCgroups {
        made: Vec::new(),
        proxy: None,
    };
    let Some(name) = run_dir.file_name() else {
        return cgroups;
    };
    let name = unit::direct_cgroup_name(&name.to_string_lossy());
    // `+` is in no box name: no box's own cgroup is another's proxy's.
    let proxy_name = format!("{name}+proxy");
    let limit = memory_max.and_then(|m| Some((m, unit::memory_limit_bytes(m, host::mem_total())?)));
    let mut memory_set = false;
    if let (Some(mount), Some(own)) = (freezer::v2_mount(), freezer::v2_path_of("self")) {
        let parent = mount.join(own);
        let dir = parent.join(&name);
        // One left by a supervisor killed mid-snapshot may still be frozen.
        let _ = fs::write(dir.join("cgroup.freeze"), "0");
        match join_cgroup(&dir, &[], true) {
            Ok(()) => {
                // Pure v2: the memory controller is here, when the parent hands it down.
                if mount == Path::new("/sys/fs/cgroup") {
                    if let Some((m, bytes)) = limit {
                        match fs::write(dir.join("memory.max"), bytes.to_string()) {
                            Ok(()) => memory_set = true,
                            Err(e) => say!(
                                "ag-box: memory limit {m} not applied ({}): {e}",
                                dir.display()
                            ),
                        }
                    }
                    cgroups.proxy = proxy_cgroup(&parent.join(&proxy_name), "memory.max");
                }
                cgroups.made.push(dir);
            }
            Err(e) => say!(
                "ag-box: the box's cgroup {} was not made: {e}",
                dir.display()
            ),
        }
    }
    if let Some(parent) = v1_memory_cgroup() {
        if let Some((m, bytes)) = limit.filter(|_| !memory_set) {
            let dir = parent.join(&name);
            match join_cgroup(&dir, &[("memory.limit_in_bytes", bytes)], true) {
                Ok(()) => cgroups.made.push(dir),
                Err(e) => say!(
                    "ag-box: memory limit {m} not applied ({}): {e}",
                    dir.display()
                ),
            }
        }
        if cgroups.proxy.is_none() {
            cgroups.proxy = proxy_cgroup(&parent.join(&proxy_name), "memory.limit_in_bytes");
        }
    }
    cgroups.made.extend(cgroups.proxy.clone());
    cgroups
}

/// The proxy's memory cgroup at `dir`, bounded through `limit_file`; None (said) when it
/// cannot be made.
fn proxy_cgroup(dir: &Path, limit_file: &str) -> Option<PathBuf> {
    match join_cgroup(dir, &[(limit_file, unit::PROXY_MEMORY_MAX)], false) {
        Ok(()) => Some(dir.to_path_buf()),
        Err(e) => {
            say!(
                "ag-box: the proxy's memory bound was not applied ({}): {e}",
                dir.display()
            );
            None
        }
    }
}

/// This process's cgroup in the v1 memory hierarchy.
fn v1_memory_cgroup() -> Option<PathBuf> {
    fs::read_to_string("/proc/self/cgroup")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctrl.split(',')
                .any(|c| c == "memory")
                .then(|| Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
        })
}

/// Make cgroup `dir` with `limits` written, and move this process into it when `enter` (removed
/// again when that fails).
fn join_cgroup(dir: &Path, limits: &[(&str, u64)], enter: bool) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let joined = limits
        .iter()
        .try_for_each(|(file, value)| fs::write(dir.join(file), value.to_string()))
        .and_then(|()| {
            if enter {
                fs::write(dir.join("cgroup.procs"), std::process::id().to_string())
            } else {
                Ok(())
            }
        });
    if joined.is_err() {
        let _ = fs::remove_dir(dir);
    }
    joined
}

impl crate::sys::ports::BoxRuntime for Runtime {
    fn kind(&self) -> Runtime {
        *self
    }
    fn running_boxes(&self, run_root: &Path) -> Vec<String> {
        Runtime::running_boxes(*self, run_root)
    }
    fn is_active(&self, spec: &BoxSpec) -> bool {
        Runtime::is_active(*self, spec)
    }
    fn start(
        &self,
        spec: &BoxSpec,
        bwrap_args: &[String],
        memory_max: Option<&str>,
        nix: bool,
    ) -> Result<()> {
        Runtime::start(*self, spec, bwrap_args, memory_max, nix)
    }
    fn stop(&self, spec: &BoxSpec) -> Result<()> {
        Runtime::stop(*self, spec)
    }
    fn finish_later(&self, spec: &BoxSpec, log: &Path) -> Result<()> {
        Runtime::finish_later(*self, spec, log)
    }
    fn pause(&self, spec: &BoxSpec) -> Result<Option<freezer::Paused>> {
        // Opening the sandbox also undoes a pause an ag-box killed mid-snapshot left.
        match Sandbox::open(spec, *self) {
            Ok(sandbox) => freezer::pause(spec, *self, sandbox.pid),
            Err(e) => {
                tracing::debug!("box '{}': not paused: {e:#}", spec.name);
                Ok(None)
            }
        }
    }
}
