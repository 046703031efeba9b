//! Talking to a box's tmux server from the host.

use std::path::Path;
use std::process::Command;

use crate::plan::tmux as plan;
use crate::sys::cmd;

/// The server answers on its socket (a leftover socket file alone does not count).
pub fn answers(socket: &Path) -> bool {
    cmd::which("tmux")
        .is_some_and(|tmux| cmd::succeeds(Command::new(tmux).args(plan::has_session_args(socket))))
}
