//! A box's own network namespace: made with only `lo` before the box starts, pinned by a bind
//! mount (where `ip netns` finds it) so that the box, `exec` and the proxy all join the same one,
//! and a restarted proxy finds it again.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use nix::mount::{MntFlags, umount2};
use nix::sched::{CloneFlags, setns};

use crate::sys::{cmd, host};

/// A fresh namespace pinned at `pin` (an older one there is released first).
pub(crate) fn create(pin: &Path) -> Result<()> {
    remove(pin)?;
    if let Some(dir) = pin.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    File::create(pin).with_context(|| format!("creating {}", pin.display()))?;
    let unshare = cmd::require("unshare")?;
    let ip = cmd::require("ip")?;
    cmd::output(
        Command::new(unshare)
            .arg(format!("--net={}", pin.display()))
            .arg(ip)
            .args(["link", "set", "lo", "up"]),
    )
    .with_context(|| format!("making the network namespace {}", pin.display()))?;
    Ok(())
}

/// Release the namespace pinned at `pin` (it lives on while a process is still in it).
pub(crate) fn remove(pin: &Path) -> Result<()> {
    if host::is_mount_point(pin) {
        umount2(pin, MntFlags::MNT_DETACH)
            .with_context(|| format!("unmounting {}", pin.display()))?;
    }
    match fs::remove_file(pin) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", pin.display()))
        }
        _ => Ok(()),
    }
}

/// Run `f` on a thread of its own that has joined the namespace at `pin`; the sockets it makes
/// stay in that namespace.
pub(crate) fn within<T: Send + 'static>(
    pin: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    let ns = File::open(pin).with_context(|| format!("opening {}", pin.display()))?;
    let shown = pin.display().to_string();
    std::thread::spawn(move || -> Result<T> {
        setns(&ns, CloneFlags::CLONE_NEWNET).with_context(|| format!("joining {shown}"))?;
        Ok(f()?)
    })
    .join()
    .map_err(|_| anyhow!("the thread joining {} panicked", pin.display()))?
}

/// A listener on loopback inside the namespace.
pub(crate) fn listen(pin: &Path, port: u16) -> Result<TcpListener> {
    within(pin, move || TcpListener::bind((Ipv4Addr::LOCALHOST, port)))
        .with_context(|| format!("listening on 127.0.0.1:{port} in {}", pin.display()))
}

/// Something answers on loopback `port` inside the namespace.
pub(crate) fn answers(pin: &Path, port: u16) -> bool {
    within(pin, move || {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).map(drop)
    })
    .is_ok()
}
