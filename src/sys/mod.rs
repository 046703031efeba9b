//! Everything that touches the world: processes, restic, systemd, tmux, files.

pub mod agent_home;
pub mod atomic;
pub mod box_lock;
pub mod box_tree;
pub mod bundle;
pub mod cmd;
pub mod copy_state;
pub mod crash;
pub mod digest;
pub mod egress_log;
pub mod enter;
pub mod freezer;
pub mod host;
pub mod interrupt;
pub mod netns;
pub mod nodes;
pub mod privs;
pub mod proxy;
pub mod pty;
pub mod restic;
pub mod restore;
pub mod runtime;
pub mod slices;
pub mod working_copy;
