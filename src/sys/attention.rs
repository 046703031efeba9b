//! The host's side of a box's agent state (`plan::attention`): the managed settings that carry
//! Claude Code's hooks into the box, written at each start, and the state file the box writes,
//! read back as untrusted data.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::atomic;
use crate::plan::attention::{self, AgentState, Managed};
use crate::plan::sandbox::BoxSpec;
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

/// An agent's managed dir as the box sees it (`plan::attention::MANAGED`): the node's own files
/// (links followed: `/etc` is root's), its hooks file with ag-box's hooks added. The node gets
/// an empty dir to bind it over. Whatever of the node's it cannot carry whole fails the start:
/// a box never runs without the operator's managed policy.
pub(crate) fn write_managed(spec: &BoxSpec, managed: &Managed) -> Result<()> {
    carry(
        managed,
        Path::new(managed.node_dir),
        &spec.managed_dir(managed),
    )
}

/// The node's managed dir `node_dir` into `ours`, with the hooks.
fn carry(managed: &Managed, node_dir: &Path, ours: &Path) -> Result<()> {
    fs::create_dir_all(node_dir).with_context(|| format!("creating {}", node_dir.display()))?;
    fs::create_dir_all(ours).with_context(|| format!("creating {}", ours.display()))?;
    copy_dir(node_dir, ours, managed.file, 0)?;
    let node_file = node_dir.join(managed.file);
    let node_settings = match fs::metadata(&node_file) {
        Ok(meta) if meta.len() > NODE_FILE_MAX => {
            bail!(
                "{} is larger than {NODE_FILE_MAX} bytes",
                node_file.display()
            )
        }
        // The box's agent reads the file with ag-box's hooks: it may hold nothing the node
        // keeps from its other users.
        Ok(meta) if meta.permissions().mode() & 0o004 == 0 => {
            bail!(
                "{} is not readable by others (mode {:o}): a box's agent reads it with ag-box's hooks added; make it mode 644, its secrets kept elsewhere",
                node_file.display(),
                meta.permissions().mode() & 0o7777
            )
        }
        Ok(_) => Some(
            serde_json::from_slice(&fs::read(&node_file)?)
                .with_context(|| format!("{} is not JSON", node_file.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", node_file.display())),
    };
    let settings = attention::with_hooks(managed, node_settings);
    atomic::write(
        &ours.join(managed.file),
        &serde_json::to_vec_pretty(&settings)?,
        0o644,
    )
}

/// How deep the node's managed dir is copied.
const DEPTH_MAX: usize = 3;

/// The node's files and dirs below `from` into `to`, but its top hooks file `skip`.
fn copy_dir(from: &Path, to: &Path, skip: &str, depth: usize) -> Result<()> {
    for entry in fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let path = entry?.path();
        if depth == 0 && path.file_name() == Some(skip.as_ref()) {
            continue;
        }
        let meta = fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        let dest = to.join(path.file_name().unwrap_or_default());
        if meta.is_dir() && depth < DEPTH_MAX {
            fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
            copy_dir(&path, &dest, skip, depth + 1)?;
        } else if meta.is_file() && meta.len() <= NODE_FILE_MAX {
            // As readable as on the node: a file its other users cannot read stays root's.
            let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            atomic::write(&dest, &bytes, meta.permissions().mode() & 0o644)?;
        } else {
            bail!(
                "{} is not a file of at most {NODE_FILE_MAX} bytes in a dir at most {DEPTH_MAX} deep",
                path.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::attention::MANAGED;
    use pretty_assertions::assert_eq;
    use std::path::PathBuf;

    const CLAUDE_FILE: &str = "managed-settings.json";

    fn dirs(tag: &str) -> (PathBuf, PathBuf) {
        let root = Path::new(crate::UNIT_TEST_DIR).join(format!("managed-{tag}"));
        let _ = fs::remove_dir_all(&root);
        let (node, ours) = (root.join("node"), root.join("ours"));
        fs::create_dir_all(&node).unwrap();
        (node, ours)
    }

    #[test]
    fn the_nodes_files_are_carried_links_followed_with_the_hooks_added() {
        let (node, ours) = dirs("carried");
        let real = node.parent().unwrap().join("real-settings.json");
        fs::write(&real, r#"{"permissions": {"deny": ["Bash(curl:*)"]}}"#).unwrap();
        std::os::unix::fs::symlink(&real, node.join(CLAUDE_FILE)).unwrap();
        fs::write(node.join("managed-mcp.json"), "{}").unwrap();
        fs::create_dir_all(node.join("policies")).unwrap();
        fs::write(node.join("policies/a.json"), "[1]").unwrap();
        carry(&MANAGED[0], &node, &ours).unwrap();
        let settings: serde_json::Value =
            serde_json::from_slice(&fs::read(ours.join(CLAUDE_FILE)).unwrap()).unwrap();
        assert_eq!(
            settings,
            attention::with_hooks(
                &MANAGED[0],
                Some(serde_json::json!({"permissions": {"deny": ["Bash(curl:*)"]}}))
            )
        );
        assert_eq!(
            (
                fs::read_to_string(ours.join("managed-mcp.json")).unwrap(),
                fs::read_to_string(ours.join("policies/a.json")).unwrap()
            ),
            ("{}".to_string(), "[1]".to_string())
        );
    }

    #[test]
    fn the_nodes_files_stay_as_readable_as_they_were() {
        let (node, ours) = dirs("modes");
        let secret = node.join("requirements.toml");
        fs::write(&secret, "token = \"root-only\"").unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(node.join("config.toml"), "model = \"x\"").unwrap();
        fs::set_permissions(node.join("config.toml"), fs::Permissions::from_mode(0o644)).unwrap();
        carry(&MANAGED[1], &node, &ours).unwrap();
        let mode = |f: &str| fs::metadata(ours.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            (
                mode("requirements.toml"),
                mode("config.toml"),
                mode("hooks.json")
            ),
            (0o600, 0o644, 0o644)
        );
        // A hooks file the node keeps from its other users is not handed to a box.
        let hooks = node.join("hooks.json");
        fs::write(&hooks, r#"{"hooks": {}}"#).unwrap();
        fs::set_permissions(&hooks, fs::Permissions::from_mode(0o600)).unwrap();
        let e = carry(&MANAGED[1], &node, &ours).unwrap_err();
        assert!(
            format!("{e:#}").contains("is not readable by others (mode 600)"),
            "{e:#}"
        );
    }

    #[test]
    fn what_cannot_be_carried_whole_fails_the_start() {
        let (node, ours) = dirs("malformed");
        fs::write(node.join(CLAUDE_FILE), "{ not json").unwrap();
        let e = carry(&MANAGED[0], &node, &ours).unwrap_err();
        assert!(format!("{e:#}").contains("is not JSON"), "{e:#}");
        let (node, ours) = dirs("fifo");
        nix::unistd::mkfifo(
            &node.join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = carry(&MANAGED[0], &node, &ours).unwrap_err();
        assert!(format!("{e:#}").contains("is not a file"), "{e:#}");
    }
}
