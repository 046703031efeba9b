//! Pure planning code: no I/O, clock or environment. Everything here is unit-tested by value.

pub mod account;
pub mod active;
pub mod agent_home;
pub mod bundle;
pub mod delta;
pub mod diff;
pub mod doctor;
pub mod egress;
pub mod globals;
pub mod history;
pub mod json;
pub mod manual;
pub mod names;
pub mod project;
pub mod restic;
pub mod restic_key;
pub mod retention;
pub mod sandbox;
pub mod schedule;
pub mod slices;
pub mod term_filter;
pub mod text;
pub mod tmux;
pub mod unit;
