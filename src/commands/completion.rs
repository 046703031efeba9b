//! Shell completion (`COMPLETE=bash ag-box` prints the script a shell sources; the script asks the
//! binary back on every <Tab>) and the man pages (`ag-box __man <dir>`), both from the clap definitions.

use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::engine::CompletionCandidate;

use super::Ctx;
use crate::cli::Cli;

/// When the shell asks for completions, answer and exit; otherwise return.
pub fn answer_if_asked() {
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
}

/// Box names from the store (records read before come from this node's cache). Nothing when
/// the store cannot be read: a completion never prints an error into the operator's line.
pub fn box_names() -> Vec<CompletionCandidate> {
    let Ok(ctx) = Ctx::load() else {
        return Vec::new();
    };
    ctx.store
        .list()
        .map(|metas| {
            metas
                .into_iter()
                .map(|m| {
                    let holder = m
                        .lease
                        .as_ref()
                        .map_or("parked".to_string(), |l| l.node.clone());
                    CompletionCandidate::new(m.name).help(Some(holder.into()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The man pages (ag-box.1 and one per verb, ag-box-up.1 ...) into `dir`.
pub fn man(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))
}
