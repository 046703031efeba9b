//! `ag-box __become`, run inside a box as root: hand the box's HOME tmpfs to its user, drop to
//! the given ids with every capability set empty and `no_new_privs`, then run the command.
//! Nothing of the box runs before this drop.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use caps::CapSet;
use nix::unistd::{Gid, Uid};

use crate::plan::account::Ids;
use crate::plan::sandbox::Become;
use crate::plan::tmux as tmux_plan;
use crate::sys::box_tree::Tree;
use crate::sys::cmd;

/// How long the anchor waits for tmux to make its socket.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(15);

pub(crate) fn run(b: &Become, argv: &[String]) -> Result<i32> {
    close_inherited_fds();
    if let Some(home) = &b.own_home {
        give_tree(home, b.ids)
            .with_context(|| format!("handing {} to the box user", home.display()))?;
    }
    if let Some(n) = b.tasks {
        // Counted per uid, so (a uid per box) per box; root is not held to it, the box user is.
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NPROC, n, n)
            .context("setting the box's task limit")?;
    }
    drop_privileges(b.ids, &b.groups)?;
    if let Some(dir) = &b.chdir {
        std::env::set_current_dir(dir).with_context(|| format!("entering {}", dir.display()))?;
    }
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    let Some(socket) = &b.share_socket else {
        let e = c.exec();
        // As sh and env report it: 127 for a command that is not there, 126 for one that
        // cannot run.
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        let box_name = std::env::var("BOX_NAME").unwrap_or_default();
        say!(
            "ag-box: box '{box_name}': cannot run '{}': {}",
            argv[0],
            if code == 127 {
                "no such command there".to_string()
            } else {
                e.to_string()
            }
        );
        return Ok(code);
    };
    let mut child = c.spawn().with_context(|| format!("starting {}", argv[0]))?;
    // The owner's client first, the box group after: a client of another user that reaches
    // a tmux 3.3 server before any allowed one is refused, and the config that would admit
    // the client user is then never read (seen under load).
    if load_config(&argv[0], socket) {
        share_socket(socket);
    }
    Ok(cmd::exit_code(child.wait()?))
}

/// Descriptors handed down by bwrap or nsenter (bwrap's info file, the box's namespaces) are
/// not the box's to keep.
fn close_inherited_fds() {
    const CLOSE_RANGE_CLOEXEC: nix::libc::c_uint = 4;
    // SAFETY: close_range only flags descriptors; no memory is touched.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_close_range,
            3 as nix::libc::c_uint,
            nix::libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if r != 0 {
        for fd in 3..1024 {
            // SAFETY: as above, per descriptor (kernels before 5.11).
            unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC) };
        }
    }
}

/// tmux makes its socket 0600; the client user reaches it through the box group.
fn share_socket(socket: &Path) {
    if let Err(e) = fs::set_permissions(socket, fs::Permissions::from_mode(0o660)) {
        say!(
            "ag-box: could not open {} to the box group: {e}",
            socket.display()
        );
    }
}

/// The server owner connects once, so the server reads its config (which admits the client
/// user) now rather than when the first client it allows arrives: until then tmux 3.3 refuses
/// every other user's client, `attach` included. Retried until the server listens; false
/// when it never did.
fn load_config(tmux: &str, socket: &Path) -> bool {
    let started = Instant::now();
    while started.elapsed() < SOCKET_TIMEOUT {
        if cmd::succeeds(Command::new(tmux).args(tmux_plan::load_config_args(socket))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    say!(
        "ag-box: the tmux server at {} never answered its owner",
        socket.display()
    );
    false
}

/// Every entry of the filesystem at `root` below it (not what is mounted there) becomes the
/// box user's; symlinks themselves, never their targets (fd-relative, however deep).
pub(crate) fn give_tree(root: &Path, ids: Ids) -> Result<()> {
    Tree::open(root)?.give_all(ids)
}

/// [`give_tree`] of a tree ag-box has just copied, hard links and all (`Tree::give_all_copied`).
pub(crate) fn give_copied_tree(root: &Path, ids: Ids) -> Result<()> {
    Tree::open(root)?.give_all_copied(ids)
}

fn drop_privileges(ids: Ids, groups: &[u32]) -> Result<()> {
    let uid = Uid::from_raw(ids.uid);
    let gid = Gid::from_raw(ids.gid);
    let mut all = vec![gid];
    all.extend(groups.iter().map(|g| Gid::from_raw(*g)));
    nix::unistd::setgroups(&all).context("setgroups")?;
    nix::unistd::setresgid(gid, gid, gid).context("setresgid")?;
    // The bounding set can only be emptied while CAP_SETPCAP is still ours.
    for set in [CapSet::Bounding, CapSet::Ambient, CapSet::Inheritable] {
        caps::clear(None, set).with_context(|| format!("clearing the {set:?} capabilities"))?;
    }
    // Leaving uid 0 empties the permitted and effective sets.
    nix::unistd::setresuid(uid, uid, uid).context("setresuid")?;
    nix::sys::prctl::set_no_new_privs().context("setting no_new_privs")?;
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Bounding] {
        if !caps::read(None, set)
            .with_context(|| format!("reading the {set:?} capabilities"))?
            .is_empty()
        {
            bail!("{set:?} capabilities are not empty after the drop");
        }
    }
    if nix::unistd::getuid() != uid || nix::unistd::geteuid() != uid {
        bail!("still not uid {} after the drop", ids.uid);
    }
    Ok(())
}

/// Give up every capability for good, staying root (the proxy after it has joined a namespace:
/// it still reads and writes root's files in the box's run dir).
pub(crate) fn drop_capabilities() -> Result<()> {
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).with_context(|| format!("clearing the {set:?} capabilities"))?;
    }
    nix::sys::prctl::set_no_new_privs().context("setting no_new_privs")?;
    Ok(())
}
