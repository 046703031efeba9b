//! Which runtime runs this node's boxes (a systemd unit, or the direct runtime's supervisor),
//! and where the direct runtime keeps a box's supervisor pid: what entering, pausing and
//! running a box all need, kept apart from how boxes are run (`runtime.rs`) so that none of
//! those imports another in a circle.

use std::fs;
use std::path::Path;

use anyhow::Result;
use nix::unistd::Pid;

use crate::config::RuntimeChoice;
use crate::error::UserError;
use crate::sys::host;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    Systemd,
    Direct,
}

impl Runtime {
    pub(crate) fn select(choice: RuntimeChoice) -> Result<Runtime> {
        match choice {
            RuntimeChoice::Systemd if !host::systemd_booted() => Err(UserError::usage(
                "config key BOX_RUNTIME=systemd, but systemd is not PID 1 on this machine",
                "set BOX_RUNTIME=auto or direct",
            )
            .into()),
            RuntimeChoice::Systemd => Ok(Runtime::Systemd),
            RuntimeChoice::Auto if host::systemd_booted() => Ok(Runtime::Systemd),
            RuntimeChoice::Direct | RuntimeChoice::Auto => Ok(Runtime::Direct),
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Runtime::Systemd => "systemd",
            Runtime::Direct => "direct",
        }
    }

    /// Tools `up` needs with this runtime, checked before anything is changed.
    pub(crate) fn required_tools(self) -> &'static [&'static str] {
        match self {
            Runtime::Systemd => &["bwrap", "tmux", "systemd-run", "systemctl"],
            Runtime::Direct => &["bwrap", "tmux"],
        }
    }
}

/// The direct runtime's supervisor of the box in `run_dir`, while it runs.
pub(crate) fn supervisor_pid(run_dir: &Path) -> Option<Pid> {
    let pid = read_pid(&run_dir.join("anchor.pid"))?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let info = run_dir.join("info.json");
    let ours = args.iter().any(|a| *a == b"__anchor".as_slice())
        && args.iter().any(|a| *a == b"--supervise".as_slice())
        && args
            .iter()
            .any(|a| *a == info.as_os_str().as_encoded_bytes());
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    (ours && !zombie).then_some(pid)
}

fn read_pid(path: &Path) -> Option<Pid> {
    fs::read_to_string(path)
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()
        .map(Pid::from_raw)
}
