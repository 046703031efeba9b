//! Pure planning code: no I/O, clock or environment. Everything here is unit-tested by value.

pub(crate) mod account;
pub(crate) mod active;
pub(crate) mod agent_home;
pub(crate) mod delta;
pub(crate) mod diff;
pub(crate) mod doctor;
pub(crate) mod egress;
pub(crate) mod event;
pub(crate) mod globals;
pub(crate) mod history;
pub(crate) mod json;
pub(crate) mod manual;
pub(crate) mod names;
pub(crate) mod project;
pub(crate) mod restic;
pub(crate) mod restic_key;
pub(crate) mod retention;
pub(crate) mod sandbox;
pub(crate) mod schedule;
pub(crate) mod slices;
pub(crate) mod snapshot_id;
pub(crate) mod term_filter;
pub(crate) mod text;
pub(crate) mod tmux;
pub(crate) mod unit;
pub(crate) mod up;
