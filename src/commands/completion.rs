//! Shell completion (`COMPLETE=bash ag-box` prints the script a shell sources; the script asks the
//! binary back on every <Tab>) and the man pages (`ag-box __man <dir>`), both from the clap definitions.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::engine::CompletionCandidate;

use super::{Ctx, record_cache_dir};
use crate::cli::Cli;
use crate::config::Config;

/// When the shell asks for completions, answer and exit; otherwise return.
pub fn answer_if_asked() {
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
}

/// How long a <Tab> waits for the store before it answers from this node's record cache.
const STORE_WAIT: Duration = Duration::from_secs(2);

/// Box names, with their holder, from the store; when the store does not answer at once (a
/// node offline, S3 down), the names this node last listed. Never an error in the operator's
/// line.
pub fn box_names() -> Vec<CompletionCandidate> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let listed = Ctx::load().and_then(|ctx| ctx.store.list());
        let _ = tx.send(listed.map(|metas| {
            metas
                .into_iter()
                .map(|m| {
                    let holder = m.lease.map_or("parked".to_string(), |l| l.node);
                    (m.name, holder)
                })
                .collect::<Vec<_>>()
        }));
    });
    let named = match rx.recv_timeout(STORE_WAIT) {
        Ok(Ok(names)) => names,
        _ => cached_names(),
    };
    named
        .into_iter()
        .map(|(name, help)| CompletionCandidate::new(name).help(Some(help.into())))
        .collect()
}

/// The boxes of this node's record cache (the last listing here).
fn cached_names() -> Vec<(String, String)> {
    let Some(dir) = Config::load().ok().as_ref().and_then(record_cache_dir) else {
        return Vec::new();
    };
    let mut names: Vec<(String, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e
                .ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".json")?
                .to_string();
            Some((name, "as last listed here".to_string()))
        })
        .collect();
    names.sort();
    names
}

/// The man pages (ag-box.1 and one per verb, ag-box-up.1 ...) into `dir`.
pub fn man(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))
}
