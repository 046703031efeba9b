//! Where a box's process tree runs: a systemd transient unit, or (without systemd as PID 1)
//! a detached supervisor process. Both run the same anchor and bwrap argv.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::config::RuntimeChoice;
use crate::error::UserError;
use crate::plan::sandbox::BoxSpec;
use crate::plan::{tmux as tmux_plan, unit};
use crate::sys::{cmd, host, tmux};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Systemd,
    Direct,
}

const READY_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

impl Runtime {
    pub fn select(choice: RuntimeChoice) -> Result<Runtime> {
        match choice {
            RuntimeChoice::Direct => Ok(Runtime::Direct),
            RuntimeChoice::Systemd if !host::systemd_booted() => Err(UserError::usage(
                "config key BOX_RUNTIME=systemd, but systemd is not PID 1 on this machine",
                "set BOX_RUNTIME=auto or direct",
            )
            .into()),
            RuntimeChoice::Systemd => Ok(Runtime::Systemd),
            RuntimeChoice::Auto if host::systemd_booted() => Ok(Runtime::Systemd),
            RuntimeChoice::Auto => Ok(Runtime::Direct),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Runtime::Systemd => "systemd",
            Runtime::Direct => "direct",
        }
    }

    /// Tools `up` needs with this runtime, checked before anything is changed.
    pub fn required_tools(self) -> &'static [&'static str] {
        match self {
            Runtime::Systemd => &["bwrap", "tmux", "systemd-run", "systemctl"],
            Runtime::Direct => &["bwrap", "tmux"],
        }
    }

    pub fn is_active(self, spec: &BoxSpec) -> bool {
        match self {
            Runtime::Systemd => cmd::which("systemctl").is_some_and(|sc| {
                cmd::succeeds(Command::new(sc).args([
                    "is-active",
                    "--quiet",
                    &unit::unit_name(&spec.name),
                ]))
            }),
            Runtime::Direct => tmux::answers(&spec.socket()),
        }
    }

    /// Names of the boxes whose process tree runs on this node (without asking the store).
    pub fn running_boxes(self, run_root: &Path) -> Vec<String> {
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
                        .filter_map(|e| e.ok())
                        .filter(|e| tmux::answers(&e.path().join("tmux.sock")))
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default(),
        };
        names.sort();
        names
    }

    /// Start the box and wait until its tmux server answers.
    pub fn start(
        self,
        spec: &BoxSpec,
        bwrap_args: &[String],
        memory_max: Option<&str>,
        nix: bool,
    ) -> Result<()> {
        let bwrap = cmd::require("bwrap")?;
        let exe = std::env::current_exe().context("locating the ag-box binary")?;
        fs::create_dir_all(&spec.run_dir)
            .with_context(|| format!("creating {}", spec.run_dir.display()))?;
        let _ = fs::remove_file(spec.socket());
        let _ = fs::remove_file(spec.info_file());
        fs::write(spec.tmux_conf(), tmux_plan::server_conf(&spec.project, nix))
            .with_context(|| format!("writing {}", spec.tmux_conf().display()))?;
        let supervise = self == Runtime::Direct;
        let anchor = unit::anchor_argv(&exe, supervise, &spec.info_file(), &bwrap, bwrap_args);
        match self {
            Runtime::Systemd => {
                let argv = unit::systemd_run_argv(&spec.name, memory_max, &spec.home, &anchor);
                cmd::output(Command::new(&argv[0]).args(&argv[1..]))
                    .with_context(|| format!("starting unit {}", unit::unit_name(&spec.name)))?;
            }
            Runtime::Direct => spawn_supervisor(spec, &anchor, memory_max)?,
        }
        self.wait_ready(spec)
    }

    fn wait_ready(self, spec: &BoxSpec) -> Result<()> {
        let started = Instant::now();
        while started.elapsed() < READY_TIMEOUT {
            if tmux::answers(&spec.socket()) {
                return Ok(());
            }
            // A unit that died early will not come back: stop waiting.
            if self == Runtime::Systemd
                && started.elapsed() > Duration::from_secs(1)
                && !self.is_active(spec)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let hint = match self {
            Runtime::Systemd => format!("see 'journalctl -u {}'", unit::unit_name(&spec.name)),
            Runtime::Direct => format!("see {}", spec.run_dir.join("anchor.log").display()),
        };
        let _ = self.stop(spec);
        Err(UserError::failed(
            format!(
                "box '{}' did not start (its tmux server never answered)",
                spec.name
            ),
            hint,
        )
        .into())
    }

    /// Stop the box's whole process tree and wait until it is gone.
    pub fn stop(self, spec: &BoxSpec) -> Result<()> {
        match self {
            Runtime::Systemd => {
                let sc = cmd::require("systemctl")?;
                let unit = unit::unit_name(&spec.name);
                if self.is_active(spec) {
                    cmd::output(Command::new(sc).args(["stop", &unit]))
                        .with_context(|| format!("stopping {unit}"))?;
                }
            }
            Runtime::Direct => {
                // The supervisor's death takes bwrap and its pid namespace with it. Its own pid
                // may linger as a zombie, so the tmux server answering is what counts.
                let pid = read_pid(&spec.run_dir.join("anchor.pid"));
                for signal in [Signal::SIGTERM, Signal::SIGKILL] {
                    if let Some(pid) = pid {
                        let _ = kill(pid, signal);
                    }
                    let deadline = Instant::now() + STOP_TIMEOUT;
                    while tmux::answers(&spec.socket()) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    if !tmux::answers(&spec.socket()) {
                        return Ok(());
                    }
                }
                bail!("box '{}': tmux server still answers after stop", spec.name);
            }
        }
        Ok(())
    }
}

fn read_pid(path: &Path) -> Option<Pid> {
    fs::read_to_string(path)
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()
        .map(Pid::from_raw)
}

/// The pid (as seen from the host) of the box's namespace init, from bwrap's info file.
pub fn sandbox_pid(spec: &BoxSpec) -> Result<i32> {
    let text = fs::read_to_string(spec.info_file())
        .with_context(|| format!("reading {}", spec.info_file().display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", spec.info_file().display()))?;
    v.get("child-pid")
        .and_then(serde_json::Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .with_context(|| format!("no child-pid in {}", spec.info_file().display()))
}

/// Move this process into the cgroups of the box's sandbox, so that what `exec` starts there
/// counts against the box's memory limit like everything else in it. Best effort: a hierarchy
/// that cannot be written (read-only, not delegated) is skipped.
pub fn join_cgroups_of(pid: i32) {
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
        .env("HOME", &spec.home)
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

/// `ag-box __anchor`: give bwrap its info fd (3), then become bwrap (systemd) or supervise it.
pub fn anchor(info: &Path, supervise: bool, argv: &[String]) -> Result<i32> {
    let file = fs::File::create(info).with_context(|| format!("creating {}", info.display()))?;
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            if fd == 3 {
                if nix::libc::fcntl(3, nix::libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if nix::libc::dup2(fd, 3) < 0 {
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
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    fs::write(run_dir.join("anchor.pid"), std::process::id().to_string())?;
    let cgroup = std::env::var("AG_BOX_MEMORY_MAX")
        .ok()
        .and_then(|m| join_memory_cgroup(&run_dir, &m));
    let status = c
        .spawn()
        .with_context(|| format!("starting {}", argv[0]))?
        .wait()?;
    drop(file);
    if let Some(cg) = cgroup {
        let _ = fs::remove_dir(cg);
    }
    Ok(cmd::exit_code(status))
}

/// Best effort: a child memory cgroup (v1 or v2) with the box's limit, when one is writable.
fn join_memory_cgroup(run_dir: &Path, memory_max: &str) -> Option<PathBuf> {
    let bytes = unit::memory_max_bytes(memory_max)?;
    let name = run_dir.file_name()?.to_string_lossy().into_owned();
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let (parent, limit_file) = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if ctrl.split(',').any(|c| c == "memory") {
            Some((
                Path::new("/sys/fs/cgroup/memory").join(rel),
                "memory.limit_in_bytes",
            ))
        } else if ctrl.is_empty() && Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            Some((Path::new("/sys/fs/cgroup").join(rel), "memory.max"))
        } else {
            None
        }
    })?;
    let dir = unit::direct_cgroup(&parent, &name);
    let joined = fs::create_dir_all(&dir)
        .and_then(|_| fs::write(dir.join(limit_file), bytes.to_string()))
        .and_then(|_| fs::write(dir.join("cgroup.procs"), std::process::id().to_string()));
    match joined {
        Ok(()) => Some(dir),
        Err(e) => {
            eprintln!(
                "ag-box: memory limit {memory_max} not applied ({}): {e}",
                dir.display()
            );
            let _ = fs::remove_dir(&dir);
            None
        }
    }
}
