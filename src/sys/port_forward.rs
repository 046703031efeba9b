//! A box's TCP port brought out of its network namespace: each connection accepted here is
//! relayed to a fresh connection to that port on the box's loopback.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::error::UserError;
use crate::plan::ports;
use crate::sys::netns;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to `port` on the box's loopback: in its namespace (`netns`), or the host's
/// for a box on the host's network.
pub(crate) fn connect_into(netns: Option<&Path>, port: u16) -> Result<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let connect = move || TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT);
    match netns {
        Some(pin) => netns::within(pin, connect),
        None => connect().map_err(Into::into),
    }
    .with_context(|| format!("connecting to port {port} in the box"))
}

/// What listens in the box (its namespace, or the host's for a box on the host's network).
pub(crate) fn listening_in(netns: Option<&Path>) -> Result<Vec<(std::net::IpAddr, u16)>> {
    let read = || {
        let tcp = std::fs::read_to_string("/proc/thread-self/net/tcp")?;
        let tcp6 = std::fs::read_to_string("/proc/thread-self/net/tcp6").unwrap_or_default();
        Ok(ports::listening(&tcp, &tcp6))
    };
    match netns {
        Some(pin) => netns::within(pin, read),
        None => read().map_err(Into::into),
    }
    .context("reading what listens in the box")
}

/// A stream that can be read and written from two threads, and half-closed.
pub(crate) trait Duplex: Read + Write + Send + Sized + 'static {
    fn other_half(&self) -> io::Result<Self>;
    fn close_write(&self);
}

impl Duplex for TcpStream {
    fn other_half(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn close_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Duplex for UnixStream {
    fn other_half(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn close_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Relay each accepted connection to a fresh one from `connect`, each on threads of its own,
/// for as long as connections come (a listener's never end).
pub(crate) fn serve<S: Duplex>(
    incoming: impl Iterator<Item = io::Result<S>>,
    connect: impl Fn() -> Result<TcpStream> + Send + Sync + 'static,
) {
    let connect = std::sync::Arc::new(connect);
    for client in incoming {
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accepting a connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let connect = connect.clone();
        std::thread::spawn(move || match connect() {
            Ok(upstream) => relay(client, upstream),
            // The client sees its connection closed; the operator, why.
            Err(e) => tracing::warn!("{e:#}"),
        });
    }
}

/// Copy both ways until each side has said all it will.
fn relay<S: Duplex>(client: S, box_side: TcpStream) {
    let (Ok(client_in), Ok(box_in)) = (client.other_half(), box_side.try_clone()) else {
        return;
    };
    let back = std::thread::spawn(move || pump(box_in, client));
    pump(client_in, box_side);
    let _ = back.join();
}

fn pump<R: Read, W: Duplex>(mut from: R, mut to: W) {
    let _ = io::copy(&mut from, &mut to);
    to.close_write();
}

/// The Unix socket a remote `port` serves on, in a dir root's alone.
pub(crate) fn socket_dir() -> PathBuf {
    PathBuf::from("/run/ag-box-ports")
}

/// A Unix socket at `path` (in a dir root's alone; one left by an earlier run replaced).
pub(crate) fn unix_listener(path: &Path) -> Result<UnixListener> {
    let dir = socket_dir();
    if path.parent() != Some(dir.as_path()) {
        return Err(UserError::usage(
            format!("--serve-unix takes a socket in {}", dir.display()),
            "it is what 'ag-box port' on another node passes; run 'ag-box port <box> <port>' instead",
        )
        .into());
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let _ = std::fs::remove_file(path);
    UnixListener::bind(path).with_context(|| format!("listening on {}", path.display()))
}
