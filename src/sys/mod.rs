//! Everything that touches the world: processes, restic, systemd, tmux, files.

pub(crate) mod agent_home;
pub(crate) mod attention;
pub(crate) mod box_lock;
pub(crate) mod box_tree;
pub(crate) mod cmd;
pub(crate) mod copy_state;
pub(crate) mod crash;
pub(crate) mod digest;
pub(crate) mod egress_log;
pub(crate) mod enter;
pub(crate) mod freezer;
pub(crate) mod host;
pub(crate) mod interrupt;
pub(crate) mod netns;
pub(crate) mod nodes;
pub(crate) mod ports;
pub(crate) mod privs;
pub(crate) mod proxy;
pub(crate) mod pty;
pub(crate) mod restic;
pub(crate) mod restore;
pub(crate) mod runtime;
pub(crate) mod runtime_kind;
pub(crate) mod slices;
pub(crate) mod transcripts;
pub(crate) mod working_copy;
