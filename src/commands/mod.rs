//! One thin file per verb: load, plan, print, execute.

pub(crate) mod agent_state;
pub(crate) mod agent_window;
pub(crate) mod attach;
pub(crate) mod completion;
pub(crate) mod cost;
pub(crate) mod creds;
pub(crate) mod diff;
pub(crate) mod doctor;
pub(crate) mod drop;
pub(crate) mod egress;
pub(crate) mod exec;
pub(crate) mod follow;
pub(crate) mod fork;
pub(crate) mod globals;
pub(crate) mod history;
pub(crate) mod init;
pub(crate) mod login;
pub(crate) mod ls;
pub(crate) mod park;
pub(crate) mod port;
pub(crate) mod probe;
pub(crate) mod prune;
pub(crate) mod refresh;
pub(crate) mod rollback;
pub(crate) mod set;
pub(crate) mod snapshot;
pub(crate) mod status;
pub(crate) mod stop;
pub(crate) mod track;
pub(crate) mod turn;
pub(crate) mod up;
pub(crate) mod wait;
pub(crate) mod watch;

use anyhow::Result;

pub(crate) use crate::lifecycle::Ctx;
use crate::sys::cmd;

pub(crate) use crate::lifecycle::RUN_ROOT;

/// The layout version of every `--json` output (`ls`, `status`, `history`): raised when a
/// field changes meaning or goes away, not when one is added.
pub(crate) const JSON_SCHEMA_VERSION: u32 = 1;

/// Print a `--json` document on stdout, its timestamps to the second (`plan::json`).
pub(crate) fn print_json(doc: &impl serde::Serialize) -> Result<()> {
    let v = crate::plan::json::normalized(serde_json::to_value(doc)?);
    out!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

pub(crate) use crate::lifecycle::not_up_here;

/// The caller's terminal type, for `attach` and `exec`; nothing else of its environment enters
/// a box.
pub(crate) fn caller_term() -> Option<(&'static str, String)> {
    std::env::var("TERM")
        .ok()
        .filter(|t| {
            !t.is_empty()
                && t.len() < 64
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
        })
        .map(|t| ("TERM", t))
}

pub(crate) fn require_tools(tools: &[&str]) -> Result<()> {
    for t in tools {
        cmd::require(t)?;
    }
    Ok(())
}
