//! Shell completion (`COMPLETE=bash ag-box` prints the script a shell sources; the script asks the
//! binary back on every <Tab>) and the man pages (`ag-box __man <dir>`), both from the clap definitions.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use clap_complete::engine::CompletionCandidate;

use super::Ctx;
use crate::config::Config;
use crate::lifecycle::record_cache_dir;
use crate::plan::agents;

/// When the shell asks for completions, answer from the `command` definitions and exit;
/// otherwise return.
pub(crate) fn answer_if_asked(command: fn() -> clap::Command) {
    clap_complete::CompleteEnv::with_factory(command).complete();
}

/// How long a <Tab> waits for the store before it answers from this node's record cache.
const STORE_WAIT: Duration = Duration::from_secs(2);

/// Box names, with their holder, from the store; when the store does not answer at once (a
/// node offline, S3 down), the names this node last listed. Never an error in the operator's
/// line.
pub(crate) fn box_names() -> Vec<CompletionCandidate> {
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

/// The nodes of this install: this one and its nodes file's.
pub(crate) fn node_names() -> Vec<CompletionCandidate> {
    let Ok(config) = Config::load() else {
        return Vec::new();
    };
    let mut names = vec![config.node.clone()];
    names.extend(config.nodes.iter().map(|n| n.name.clone()));
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|n| {
            let help = if n == config.node { "this node" } else { "" };
            CompletionCandidate::new(n).help((!help.is_empty()).then(|| help.into()))
        })
        .collect()
}

/// What `set` takes, with the values that are a fixed few.
pub(crate) fn setting_keys() -> Vec<CompletionCandidate> {
    [
        ("memory_max=", "a size (4G, 50%) or none"),
        ("nix=true", "shells in nix develop /etc/base-flake"),
        ("nix=false", ""),
        ("gpu=true", "the node's GPU devices in the box"),
        ("gpu=false", ""),
        ("pin=", "a node, or none"),
        ("uid=", "a number in ag-box's range"),
        ("gid=", "a number in ag-box's range"),
        ("network=allow", "the node's list and the box's entries"),
        ("network=none", "no network"),
        ("network=host", "the node's network, unguarded"),
        ("allow=", "entries, comma-separated (empty clears them)"),
    ]
    .into_iter()
    .map(|(k, help)| CompletionCandidate::new(k).help((!help.is_empty()).then(|| help.into())))
    .chain(
        agents::choices()
            .into_iter()
            .map(|a| CompletionCandidate::new(format!("agent={a}"))),
    )
    .collect()
}

/// What `track --agent` takes.
pub(crate) fn agent_names() -> Vec<CompletionCandidate> {
    agents::choices()
        .into_iter()
        .map(CompletionCandidate::new)
        .collect()
}

/// Snapshot ids (short), newest first, each with its box and time; none when the repository
/// does not answer at once.
pub(crate) fn snapshot_ids() -> Vec<CompletionCandidate> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let listed = Ctx::load().and_then(|ctx| ctx.restic()?.snapshots(None));
        let _ = tx.send(listed);
    });
    let Ok(Ok(mut snapshots)) = rx.recv_timeout(STORE_WAIT) else {
        return Vec::new();
    };
    snapshots.sort_by(|a, b| b.time.cmp(&a.time));
    snapshots
        .into_iter()
        // What a park saved of its changes is no state to name.
        .filter(|s| s.tag(crate::plan::restic::CHANGES_KEY).is_none())
        .map(|s| {
            let help = format!(
                "{} {}",
                s.tag("box").unwrap_or("globals"),
                s.time.get(..19).unwrap_or(&s.time)
            );
            CompletionCandidate::new(s.id.short().to_string()).help(Some(help.into()))
        })
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

/// The man pages (ag-box.1 and one per verb, ag-box-up.1 ...) into `dir`: clap's sections, then
/// EXAMPLES, EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO (`plan::manual`).
pub(crate) fn man(command: clap::Command, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut top = command.disable_help_subcommand(true);
    top.build();
    let mut pages = vec![(top.clone(), String::new())];
    for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages.push((sub.clone(), sub.get_name().to_string()));
        for action in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages.push((action.clone(), sub.get_name().to_string()));
        }
    }
    for (cmd, verb) in pages {
        let path = dir.join(clap_mangen::Man::new(cmd.clone()).get_filename());
        std::fs::write(&path, man_page(cmd, &verb)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn man_page(cmd: clap::Command, verb: &str) -> Result<Vec<u8>> {
    let examples = cmd.get_after_help().map(ToString::to_string);
    let has_options = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subcommands = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let has_version = cmd.get_version().is_some();
    let man = clap_mangen::Man::new(cmd);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    if has_options {
        man.render_options_section(&mut page)?;
    }
    if has_subcommands {
        man.render_subcommands_section(&mut page)?;
    }
    page.extend(crate::plan::manual::man_sections(verb, examples.as_deref()).into_bytes());
    if has_version {
        man.render_version_section(&mut page)?;
    }
    Ok(page)
}
