//! Everything that touches the world: processes, restic, systemd, tmux, files.

pub mod cmd;
pub mod copy_state;
pub mod host;
pub mod nodes;
pub mod restic;
pub mod restore;
pub mod runtime;
pub mod slices;
pub mod tmux;
