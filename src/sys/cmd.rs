//! Running programs: finding them on PATH, exit codes, captured output.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::error::UserError;

pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The path of a required tool, or exit 4 naming it.
pub(crate) fn require(tool: &str) -> Result<PathBuf, UserError> {
    which(tool).ok_or_else(|| UserError::tool_missing(tool))
}

/// A child's status as a shell would report it: its code, or 128 + signal.
pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

pub(crate) fn describe(cmd: &Command) -> String {
    cmd.get_program().to_string_lossy().into_owned()
}

/// Run to completion with stdout captured; a failure carries the program's last stderr line.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", describe(cmd)))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        anyhow::bail!(
            "{} exited with {}: {}",
            describe(cmd),
            exit_code(out.status),
            last_line(&stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// As [`output`], but the whole process group is killed after `limit` (a program whose peer
/// may stall it: a box's tmux server); its stderr's last line is kept either way.
pub(crate) fn output_within(cmd: &mut Command, limit: Duration) -> Result<(String, String)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| format!("running {}", describe(cmd)))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > limit {
            let group = nix::unistd::Pid::from_raw(-i32::try_from(child.id())?);
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            anyhow::bail!("{} gave no answer within {limit:?}", describe(cmd));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out)?;
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err)?;
    }
    if !status.success() {
        anyhow::bail!(
            "{} exited with {}: {}",
            describe(cmd),
            exit_code(status),
            last_line(&err)
        );
    }
    Ok((out, err))
}

/// Run for its status only, output discarded.
pub(crate) fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}
