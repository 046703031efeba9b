//! Entering a running box from the host (`exec`, `attach`, the readiness probe).
//!
//! The box's namespace init is found in bwrap's info file (in the root-only run dir), checked
//! to belong to the box (its unit's cgroup, or the direct runtime's supervisor), and its
//! namespaces are held by file descriptor from that checked `/proc/<pid>` on, so a pid that
//! dies and is reused in between cannot be entered instead. The command then runs through
//! `ag-box __become` inside, so it never has root's privileges there.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use nix::fcntl::{FcntlArg, fcntl};

use crate::plan::sandbox::BoxSpec;
use crate::plan::unit;
use crate::sys::runtime_kind::{self, Runtime};
use crate::sys::{cmd, freezer};

/// The namespaces bwrap makes for a box, with nsenter's option for each.
const NAMESPACES: &[(&str, &str)] = &[
    ("cgroup", "--cgroup"),
    ("ipc", "--ipc"),
    ("uts", "--uts"),
    ("pid", "--pid"),
    ("net", "--net"),
    ("mnt", "--mount"),
];

/// First descriptor the namespaces are handed to nsenter on.
const FIRST_FD: RawFd = 3;

pub(crate) struct Sandbox {
    namespaces: Vec<(&'static str, File)>,
    pub pid: i32,
}

fn child_pid(spec: &BoxSpec) -> Result<i32> {
    let path = spec.info_file();
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    v.get("child-pid")
        .and_then(serde_json::Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 0)
        .with_context(|| format!("no valid child-pid in {}", path.display()))
}

/// The `PPid:` line of a `/proc/<pid>/status`.
fn parent_of(status: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

impl Sandbox {
    pub(crate) fn open(spec: &BoxSpec, runtime: Runtime) -> Result<Sandbox> {
        // Whatever enters the box first undoes a pause an ag-box killed mid-snapshot left.
        freezer::resume_orphaned(spec);
        let pid = child_pid(spec)?;
        let dir = File::open(format!("/proc/{pid}"))
            .with_context(|| format!("box '{}': its sandbox process {pid} is gone", spec.name))?;
        let at = |rel: &str| PathBuf::from(format!("/proc/self/fd/{}/{rel}", dir.as_raw_fd()));
        let read = |rel: &str| {
            fs::read_to_string(at(rel)).with_context(|| format!("reading /proc/{pid}/{rel}"))
        };
        let owned = match runtime {
            Runtime::Systemd => {
                let service = format!("/{}.service", unit::unit_name(&spec.name));
                read("cgroup")?.lines().any(|l| {
                    l.rsplit(':').next().is_some_and(|p| {
                        p.ends_with(&service) || p.contains(&format!("{service}/"))
                    })
                })
            }
            Runtime::Direct => {
                let bwrap = parent_of(&read("status")?);
                let supervisor = runtime_kind::supervisor_pid(&spec.run_dir);
                match (bwrap, supervisor) {
                    (Some(b), Some(s)) => {
                        fs::read_to_string(format!("/proc/{b}/status"))
                            .ok()
                            .and_then(|st| parent_of(&st))
                            == Some(s.as_raw())
                    }
                    _ => false,
                }
            }
        };
        if !owned {
            bail!(
                "box '{}': process {pid} named in {} does not belong to the box; not entering it",
                spec.name,
                spec.info_file().display()
            );
        }
        let ours = fs::read_link("/proc/self/ns/mnt").context("reading /proc/self/ns/mnt")?;
        if fs::read_link(at("ns/mnt")).ok() == Some(ours) {
            bail!("box '{}': process {pid} is not in a sandbox", spec.name);
        }
        let namespaces = NAMESPACES
            .iter()
            .map(|(ns, flag)| {
                File::open(at(&format!("ns/{ns}")))
                    .map(|f| (*flag, f))
                    .with_context(|| format!("opening /proc/{pid}/ns/{ns}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Sandbox { namespaces, pid })
    }

    /// nsenter into the held namespaces, running `inner` (an argv inside the box). The command
    /// holds the namespaces from here on.
    pub(crate) fn command(self, inner: &[String]) -> Result<Command> {
        let mut c = Command::new(cmd::require("nsenter")?);
        for (target, (flag, _)) in (FIRST_FD..).zip(&self.namespaces) {
            c.arg(format!("{flag}=/proc/self/fd/{target}"));
        }
        c.arg("--").args(inner);
        let files: Vec<File> = self.namespaces.into_iter().map(|(_, f)| f).collect();
        // SAFETY: between fork and exec the closure only calls fcntl and dup2 (async-signal-safe)
        // on a fixed array and the files it holds: no allocation, no lock. `files` moves in to
        // keep the fds open.
        unsafe {
            c.pre_exec(move || {
                // Out of the way first, so no target number is overwritten before it is moved.
                let mut high: [RawFd; NAMESPACES.len()] = [-1; NAMESPACES.len()];
                for (h, f) in high.iter_mut().zip(&files) {
                    *h = fcntl(f, FcntlArg::F_DUPFD_CLOEXEC(64))?;
                }
                for (target, h) in (FIRST_FD..).zip(&high[..files.len()]) {
                    // nix's dup2 wants the target as an fd the child owns; it is just a number.
                    if nix::libc::dup2(*h, target) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_from_status() {
        assert_eq!(
            parent_of("Name:\tbwrap\nState:\tS (sleeping)\nPid:\t42\nPPid:\t7\n"),
            Some(7)
        );
        assert_eq!(parent_of("Name:\tx\n"), None);
    }
}
