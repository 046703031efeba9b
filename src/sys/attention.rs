//! The host's side of a box's agent state (`plan::attention`): the managed settings that carry
//! Claude Code's hooks into the box, written at each start, and the state file the box writes,
//! read back as untrusted data.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use crate::atomic;
use crate::plan::attention::{self, AgentState, CLAUDE_MANAGED_FILE};
use crate::plan::sandbox::{BoxSpec, CLAUDE_MANAGED_DIR};
use crate::sys::box_tree::Tree;

/// At most this much of a node's own managed file is copied into the box's.
const NODE_FILE_MAX: u64 = 1 << 20;

/// The box's agent state, as its state file says; None when it has none (or not one to
/// believe: a link, a fifo, a file too large or malformed there says nothing).
pub(crate) fn read(spec: &BoxSpec) -> Option<AgentState> {
    let read = Tree::open(&spec.socket_dir())
        .and_then(|sock| sock.read_file(Path::new(attention::STATE_FILE), attention::STATE_MAX));
    match read {
        Ok(bytes) => attention::parse(&bytes?),
        Err(e) => {
            tracing::debug!("box '{}': its agent's state: {e:#}", spec.name);
            None
        }
    }
}

/// Claude Code's managed settings dir as the box sees it: the node's own files, its settings
/// with ag-box's hooks added. The node gets an empty `/etc/claude-code` to bind it over.
pub(crate) fn write_claude_managed(spec: &BoxSpec) -> Result<()> {
    let node_dir = Path::new(CLAUDE_MANAGED_DIR);
    fs::create_dir_all(node_dir).with_context(|| format!("creating {}", node_dir.display()))?;
    let ours = spec.claude_managed_dir();
    fs::create_dir_all(&ours).with_context(|| format!("creating {}", ours.display()))?;
    let mut node_settings = None;
    for entry in
        fs::read_dir(node_dir).with_context(|| format!("listing {}", node_dir.display()))?
    {
        let entry = entry?;
        let meta = entry.metadata()?;
        if !meta.is_file() || meta.len() > NODE_FILE_MAX {
            continue;
        }
        let bytes = fs::read(entry.path())?;
        if entry.file_name() == CLAUDE_MANAGED_FILE {
            node_settings = serde_json::from_slice(&bytes).ok();
        } else {
            atomic::write(&ours.join(entry.file_name()), &bytes, 0o644)?;
        }
    }
    let settings = attention::claude_managed_settings(node_settings);
    atomic::write(
        &ours.join(CLAUDE_MANAGED_FILE),
        &serde_json::to_vec_pretty(&settings)?,
        0o644,
    )
}
