//! A command inside a box on a pseudo-terminal of ag-box's own, relayed to the operator's
//! terminal (`attach`, and `exec` from a terminal). No box process ever holds the operator's
//! terminal: when the command ends, its terminal is hung up, so a box process it left behind
//! reads nothing the operator types next; and what the box writes passes through a filter.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::pty::{Winsize, openpty};
use nix::sys::termios::{self, SetArg, Termios};

use crate::plan::term_filter::OutputFilter;

nix::ioctl_read_bad!(get_winsize, nix::libc::TIOCGWINSZ, Winsize);
nix::ioctl_write_ptr_bad!(set_winsize, nix::libc::TIOCSWINSZ, Winsize);
nix::ioctl_write_int_bad!(set_controlling_terminal, nix::libc::TIOCSCTTY);

/// The caller's terminal in raw mode while the relay runs; put back however it ends.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> Result<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).context("reading the terminal's mode")?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)
            .context("setting the terminal to raw mode")?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

fn winsize_of(fd: BorrowedFd<'_>) -> Option<Winsize> {
    let mut ws = Winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one Winsize into the one given.
    unsafe { get_winsize(fd.as_raw_fd(), &raw mut ws) }.ok()?;
    Some(ws)
}

fn same(a: Winsize, b: Winsize) -> bool {
    (a.ws_row, a.ws_col) == (b.ws_row, b.ws_col)
}

/// Where the caller's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Terminal {
    /// A terminal whose foreground this process is: it can be relayed.
    Foreground,
    /// A terminal another process group has (a job in a shell's background): setting it raw
    /// would stop this process (SIGTTOU).
    Background,
    None,
}

pub(crate) fn terminal_of_caller() -> Terminal {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Terminal::None;
    }
    match nix::unistd::tcgetpgrp(stdin.as_fd()) {
        Ok(fg) if fg == nix::unistd::getpgrp() => Terminal::Foreground,
        _ => Terminal::Background,
    }
}

/// Run `cmd` (an nsenter into the box) on a new pseudo-terminal, the caller's terminal relayed
/// to it; `filter` judges what the box writes. Returns the command's status.
pub(crate) fn run_relayed(
    mut cmd: Command,
    mut filter: Option<OutputFilter>,
) -> Result<ExitStatus> {
    let stdin = std::io::stdin();
    let mut size = winsize_of(stdin.as_fd());
    // Output going to a file or a pipe passes as it is (no newline translation).
    let raw_output = (!std::io::stdout().is_terminal())
        .then(|| termios::tcgetattr(stdin.as_fd()))
        .transpose()
        .context("reading the terminal's mode")?
        .map(|mut t| {
            termios::cfmakeraw(&mut t);
            t
        });
    let pty = openpty(size.as_ref(), raw_output.as_ref()).context("opening a pseudo-terminal")?;
    cmd.stdin(Stdio::from(pty.slave.try_clone()?))
        .stdout(Stdio::from(pty.slave.try_clone()?))
        .stderr(Stdio::from(pty.slave.try_clone()?));
    // SAFETY: setsid and ioctl only, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid()?;
            set_controlling_terminal(0, 0)?;
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .context("starting the command on its terminal")?;
    // Only the child holds the terminal's other end now: its end is ours to hang up.
    drop(pty.slave);
    // A SIGTERM (the box's unit stopping with this process in its cgroups) or a SIGHUP (the
    // ssh connection gone) is noted, so the operator's terminal gets its mode back first.
    let signals = crate::sys::interrupt::Shield::new();
    let raw = RawMode::enter()?;
    let status = relay(&pty.master, &mut child, &mut filter, &mut size);
    drop(raw);
    drop(signals);
    // Closing our end hangs the terminal up: what the command left behind gets EOF, never
    // what the operator types next.
    drop(pty.master);
    status
}

fn relay(
    master: &OwnedFd,
    child: &mut std::process::Child,
    filter: &mut Option<OutputFilter>,
    size: &mut Option<Winsize>,
) -> Result<ExitStatus> {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let mut to_box = std::fs::File::from(master.try_clone()?);
    let mut from_box = std::fs::File::from(master.try_clone()?);
    let mut buf = vec![0u8; 16 * 1024];
    let mut shown = Vec::with_capacity(buf.len());
    let mut stdin_open = true;
    loop {
        // A resized terminal is passed on (looked at every turn: no signal handler needed).
        if let Some(now) = winsize_of(stdin.as_fd())
            && size.as_ref().is_none_or(|s| !same(*s, now))
        {
            // SAFETY: TIOCSWINSZ reads the one Winsize given.
            let _ = unsafe { set_winsize(master.as_raw_fd(), &raw const now) };
            *size = Some(now);
        }
        if let Err(e) = crate::sys::interrupt::check("the session ended") {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        if let Some(status) = child.try_wait()? {
            // What it wrote before it ended still goes out.
            drain(&mut from_box, master, filter, &mut stdout, &mut buf)?;
            return Ok(status);
        }
        let mut fds = vec![PollFd::new(master.as_fd(), PollFlags::POLLIN)];
        if stdin_open {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
        }
        poll(&mut fds, PollTimeout::from(100_u16)).or_else(|e| {
            if e == nix::errno::Errno::EINTR {
                Ok(0)
            } else {
                Err(e)
            }
        })?;
        let ready = |fd: &PollFd<'_>| {
            fd.revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP))
        };
        let box_ready = ready(&fds[0]);
        let caller_ready = stdin_open && ready(&fds[1]);
        drop(fds);
        if box_ready {
            match from_box.read(&mut buf) {
                // EIO: every holder of the terminal's other end is gone.
                Ok(0) | Err(_) => {
                    return Ok(child.wait()?);
                }
                Ok(n) => show(&buf[..n], filter, &mut shown, &mut stdout)?,
            }
        }
        if caller_ready {
            match std::io::stdin().lock().read(&mut buf) {
                Ok(0) | Err(_) => stdin_open = false,
                Ok(n) => to_box.write_all(&buf[..n]).context("writing to the box")?,
            }
        }
    }
}

/// What the box wrote after its command ended, for as long as it comes at once.
fn drain(
    from_box: &mut std::fs::File,
    master: &OwnedFd,
    filter: &mut Option<OutputFilter>,
    stdout: &mut std::io::Stdout,
    buf: &mut [u8],
) -> Result<()> {
    let mut shown = Vec::new();
    loop {
        let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
        let waited = Duration::from_millis(20).as_millis();
        if poll(
            &mut fds,
            PollTimeout::from(u16::try_from(waited).unwrap_or(20)),
        )
        .unwrap_or(0)
            == 0
        {
            return Ok(());
        }
        match from_box.read(buf) {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => show(&buf[..n], filter, &mut shown, stdout)?,
        }
    }
}

fn show(
    bytes: &[u8],
    filter: &mut Option<OutputFilter>,
    shown: &mut Vec<u8>,
    stdout: &mut std::io::Stdout,
) -> Result<()> {
    let out = match filter {
        Some(f) => {
            shown.clear();
            f.feed(bytes, shown);
            &shown[..]
        }
        None => bytes,
    };
    stdout.write_all(out)?;
    stdout.flush()?;
    Ok(())
}
