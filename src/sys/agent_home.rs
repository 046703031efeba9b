//! A box's agent home and project on this node: made, filled from the project's existing
//! sessions, and owned by the box user.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::atomic;
use crate::plan::account::{self, Ids};
use crate::plan::agent_home::Adopted;
use crate::plan::sandbox::BoxSpec;
use crate::sys::box_tree::{Entry, Tree};
use crate::sys::{cmd, privs, restore, slices};

/// Make the box's agent home when this node has none (importing the project's sessions from
/// the node's home, and the node's `~/.claude.json`), then everything the box binds in it.
pub(crate) fn ensure(spec: &BoxSpec) -> Result<()> {
    let ah = &spec.agent_home;
    if !ah.root.exists() {
        let homes = ah.root.parent().unwrap_or(&ah.root);
        fs::create_dir_all(homes).with_context(|| format!("creating {}", homes.display()))?;
        fs::set_permissions(homes, fs::Permissions::from_mode(0o700))?;
        // No box's name starts with a dot (`<name>.new` may be another box's home).
        let staging = homes.join(format!(".{}.new", spec.name));
        restore::remove_any(&staging).with_context(|| format!("removing {}", staging.display()))?;
        fs::create_dir(&staging).with_context(|| format!("creating {}", staging.display()))?;
        let n = import_sessions(Path::new("/"), spec.home(), &spec.project, &staging)?;
        let claude_json = spec.home().join(".claude.json");
        if claude_json.is_file() {
            let node = fs::read(&claude_json)
                .with_context(|| format!("reading {}", claude_json.display()))?;
            if let Some(seed) = crate::plan::agent_home::seed_claude_json(&node) {
                atomic::write(&staging.join(".claude.json"), &seed, 0o600)?;
            } else {
                tracing::warn!(
                    "{} is not a JSON object: box '{}' starts with an empty one",
                    claude_json.display(),
                    spec.name
                );
            }
        }
        if n > 0 {
            say!(
                "box '{}': imported {n} agent session store(s) of {} from {}",
                spec.name,
                spec.project.display(),
                spec.home().display()
            );
        }
        privs::give_tree(&staging, spec.ids)?;
        fs::rename(&staging, &ah.root)
            .with_context(|| format!("moving {} into place", ah.root.display()))?;
    }
    // Only when it differs: a chmod moves the ctime, and the copy's digest with it.
    if fs::symlink_metadata(&ah.root)?.mode() & 0o7777 != 0o700 {
        fs::set_permissions(&ah.root, fs::Permissions::from_mode(0o700))?;
    }
    give_if_foreign(&ah.root, spec.ids)?;
    // What bwrap binds from or onto below the home, checked and made fd-relative right before
    // the start: a link the box planted there would lead root's bind (and bwrap's creation of
    // a missing mount point) out of the box.
    let tree = Tree::open(&ah.root)?;
    for rel in crate::plan::agent_home::OWN_DIRS {
        tree.ensure(Path::new(rel), Entry::Dir, 0o755, spec.ids)?;
    }
    for rel in crate::plan::agent_home::OWN_FILES {
        tree.ensure(Path::new(rel), Entry::File(b"{}\n"), 0o644, spec.ids)?;
    }
    cover_opencode_store(spec.home())?;
    let binds = ah.binds(std::path::Path::exists);
    for point in ah.mount_points(&binds) {
        let rel = point.strip_prefix(&ah.root).unwrap_or(&point);
        let (entry, mode) = if spec.home().join(rel).is_dir() {
            (Entry::Dir, 0o755)
        } else {
            (Entry::File(b""), 0o644)
        };
        tree.ensure(rel, entry, mode, spec.ids)?;
    }
    // Where the box sees the broker's copies (some where the node has no file): a login the
    // box made in its own home becomes the broker's for it first.
    let points = spec.broker_copy_points();
    for rel in &points {
        take_own_login(spec, &tree, rel)?;
        tree.ensure(rel, Entry::File(b""), 0o644, spec.ids)?;
    }
    forget_stale_copies(spec, &tree, &points)?;
    // Shared credentials are rewritten by the agents (token refresh), and keyed config is
    // read: root's, in the group every box user is in, so every box on the node has them.
    // Not what this box sees as the broker's copy: the broker keeps that file.
    for b in binds.iter().filter(|b| {
        b.is_node_file()
            && !spec.sees_broker_copy(&b.dest)
            && crate::plan::agent_home::handed_to_box(
                b.src.strip_prefix(spec.home()).unwrap_or(&b.src),
            )
    }) {
        let meta = fs::symlink_metadata(&b.src)?;
        if !meta.is_file() {
            continue;
        }
        if (meta.uid(), meta.gid()) != (0, account::SHARED_GID) {
            std::os::unix::fs::lchown(&b.src, Some(0), Some(account::SHARED_GID))
                .with_context(|| format!("sharing {} with the boxes", b.src.display()))?;
        }
        let mode = (meta.mode() & 0o7777 & !0o007) | 0o060;
        if meta.mode() & 0o7777 != mode {
            fs::set_permissions(&b.src, fs::Permissions::from_mode(mode))
                .with_context(|| format!("sharing {} with the boxes", b.src.display()))?;
        }
    }
    Ok(())
}

/// A copy an earlier start wrote into the agent home, where this one writes none (the box on
/// the host's network, or not given the login now): emptied, not left for the box's agent to
/// take for a login (or to read the node account's claims in).
fn forget_stale_copies(spec: &BoxSpec, tree: &Tree, points: &[std::path::PathBuf]) -> Result<()> {
    for row in crate::plan::broker::RULES
        .iter()
        .filter(|r| r.copy_in_home())
    {
        let rel = Path::new(row.copied);
        if points.iter().any(|p| p == rel) {
            continue;
        }
        if holds_brokers_copy(tree, row.copied) {
            tree.remove(rel)?;
            tree.ensure(rel, Entry::File(b""), 0o644, spec.ids)?;
        }
        // What the box writes there now (on the host's network, say) is its own again.
        match fs::remove_file(spec.in_home_mark(row.name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).context("forgetting the broker's copy in the agent home");
            }
            _ => {}
        }
    }
    Ok(())
}

/// A Claude Code or Codex login the box made in its own agent home (before the broker kept
/// such logins, or on the host's network) where the broker keeps none for it yet and the node
/// has none (Codex's: whatever the node has, since the start writes the box's copy over that
/// file): read with no link followed, moved into the broker's keeping for this box, and said.
/// A link, a fifo, a file too big or the broker's own copy is kept as nothing.
fn take_own_login(spec: &BoxSpec, tree: &Tree, rel: &Path) -> Result<()> {
    use crate::plan::broker;
    use crate::sys::oauth_refresh::read_login;
    let Some(row) = broker::RULES
        .iter()
        .find(|r| r.captures() && Path::new(r.copied) == rel)
    else {
        return Ok(());
    };
    let shape = broker::shape_of(row.name);
    let own = broker::box_login_file(&spec.broker_state, &spec.name, row.name);
    // The node's file, whatever it holds, is what the box sees (a copy of its login, or an
    // empty one); only where it has none does a box's own login stand in. A copy written into
    // the agent home would be lost under the next one: kept whatever the node has.
    let node_has = fs::symlink_metadata(spec.home().join(row.copied)).is_ok();
    if (node_has && !row.copy_in_home()) || read_login(&own, shape).is_ok() {
        return Ok(());
    }
    // Where the last start wrote the broker's copy, the box wrote whatever is there now: a
    // login it planted, never one made through the broker (that one the broker kept).
    if row.copy_in_home() && fs::symlink_metadata(spec.in_home_mark(row.name)).is_ok() {
        return Ok(());
    }
    let bytes = match tree.read_file(rel, LOGIN_MAX) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(()),
        Err(e) => {
            tracing::warn!("box '{}': {e:#}; not kept as its login", spec.name);
            return Ok(());
        }
    };
    // A copy of the broker's placeholders (Codex's is a file of the agent home) is no login.
    let Some(login) = std::str::from_utf8(&bytes)
        .ok()
        .filter(|t| !crate::plan::oauth::holds_placeholders(shape, t))
        .and_then(|t| shape.login_only(t))
    else {
        return Ok(());
    };
    crate::sys::broker::make_box_logins(spec)?;
    atomic::write(&own, login.as_bytes(), 0o600)?;
    tree.remove(rel)?;
    say!(
        "box '{}': the {} login it made is now kept by the credential broker; the box sees placeholders",
        spec.name,
        row.login
    );
    Ok(())
}

/// A login file's largest size (a token file is a few KiB).
const LOGIN_MAX: u64 = 1 << 20;

/// Every box sees the node's `~/.local` (CLIs and their libraries), where `OpenCode` keeps its
/// login: the box's own `OpenCode` store is bound over `~/.local/share/opencode`, which needs
/// that dir on the node. Made (empty, root's) when the node has `~/.local` without it, so a
/// login made on the node later never shows in a box that is not given it.
fn cover_opencode_store(home: &Path) -> Result<()> {
    let store = home.join(".local/share/opencode");
    if home.join(".local").is_dir() && fs::symlink_metadata(&store).is_err() {
        fs::create_dir_all(&store).with_context(|| format!("creating {}", store.display()))?;
        fs::set_permissions(&store, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Logins made inside the box: a credential file (`plan::agent_home::CREDENTIALS`) in its own
/// agent home where the node has none, so nothing was bound over it. No snapshot carries them.
/// (A keyed config is never one: it also says where the agent sends its requests, and no box
/// may choose that for the node.)
pub(crate) fn own_logins(spec: &BoxSpec) -> Result<Vec<&'static str>> {
    let root = &spec.agent_home.root;
    if !root.exists() {
        return Ok(Vec::new());
    }
    let tree = Tree::open(root)?;
    let points = spec.broker_copy_points();
    let mut found = Vec::new();
    for rel in crate::plan::agent_home::CREDENTIALS {
        if spec.home().join(rel).exists() {
            continue;
        }
        // Where the box sees the broker's copy as a file of its own: whatever it wrote there
        // is never adopted (a login it made through the broker is the broker's to adopt).
        if in_home_copy(rel).is_some() && points.iter().any(|p| p == Path::new(rel)) {
            continue;
        }
        let st = tree.stat(Path::new(rel))?;
        if st.is_some_and(|st| st.st_size > 0) && !holds_brokers_copy(&tree, rel) {
            found.push(*rel);
        }
    }
    Ok(found)
}

/// The broker's row whose copy the start writes at the agent home's `rel`, if any.
fn in_home_copy(rel: &str) -> Option<&'static crate::plan::broker::LoginRule> {
    crate::plan::broker::RULES
        .iter()
        .find(|r| r.copy_in_home() && r.copied == rel)
}

/// Whether the agent home's `rel` is where the start writes the broker's copy of a login
/// (`LoginRule::copy_in_home`) and holds nothing of the box's own: that copy (placeholders,
/// or an empty one). A login or a key the box saved there itself is its own, and so is
/// what cannot be read as either (adopt says why it takes none of it).
fn holds_brokers_copy(tree: &Tree, rel: &str) -> bool {
    use serde_json::Value;
    let Some(row) = in_home_copy(rel) else {
        return false;
    };
    let shape = crate::plan::broker::shape_of(row.name);
    let text = tree
        .read_file(Path::new(rel), LOGIN_MAX)
        .ok()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    text.is_some_and(|t| {
        crate::plan::oauth::holds_placeholders(shape, &t)
            || serde_json::from_str::<Value>(&t).is_ok_and(|v| {
                ["tokens", "OPENAI_API_KEY"]
                    .iter()
                    .all(|k| v.get(k).is_none_or(Value::is_null))
            })
    })
}

/// The box's own logins made the node's: each read from the agent home with no link followed
/// (a regular JSON file, at most 1 MiB), all of them checked before any moves; each written
/// beside the node's other files, never over one, then removed from the box. The next start
/// binds the node's file, shared as any other.
pub(crate) fn adopt_logins(spec: &BoxSpec) -> Result<Vec<(&'static str, Adopted)>> {
    let own = own_logins(spec)?;
    if own.is_empty() {
        return Ok(Vec::new());
    }
    let tree = Tree::open(&spec.agent_home.root)?;
    let mut read = Vec::new();
    for rel in own {
        let Some(bytes) = tree.read_file(Path::new(rel), LOGIN_MAX)? else {
            continue;
        };
        let shown = crate::plan::text::escaped(&format!("~/{rel}"));
        serde_json::from_slice::<serde_json::Value>(&bytes).map_err(|e| {
            crate::error::UserError::failed(
                format!("box '{}': its {shown} is not a login file ({e})", spec.name),
                "nothing was adopted; log in again inside the box",
            )
        })?;
        read.push((rel, bytes));
    }
    let mut done = Vec::new();
    for (rel, bytes) in read {
        let dest = spec.home().join(rel);
        let dir = dest.parent().unwrap_or(spec.home());
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".ag-box-adopt")
            .tempfile_in(dir)
            .with_context(|| format!("writing into {}", dir.display()))?;
        std::io::Write::write_all(&mut tmp, &bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .with_context(|| format!("writing {}", dest.display()))?;
        match tmp.persist_noclobber(&dest) {
            Ok(_) => {
                tree.remove(Path::new(rel))?;
                done.push((rel, Adopted::Moved(dest)));
            }
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                done.push((rel, Adopted::NodeHasOne(dest)));
            }
            Err(e) => return Err(e.error).with_context(|| format!("writing {}", dest.display())),
        }
    }
    Ok(done)
}

/// A project not owned by the box user (made by root, or a changed uid) becomes its own.
/// True when it handed the project over.
pub(crate) fn reown_project(spec: &BoxSpec) -> Result<bool> {
    let owner = fs::metadata(&spec.project)
        .with_context(|| format!("reading {}", spec.project.display()))?
        .uid();
    if owner != spec.ids.uid {
        say!(
            "box '{}': {} belongs to uid {owner}; handing it to the box user (uid {}, gid {})",
            spec.name,
            spec.project.display(),
            spec.ids.uid,
            spec.ids.gid
        );
        privs::give_tree(&spec.project, spec.ids)?;
        return Ok(true);
    }
    Ok(false)
}

/// The project's sessions under `from_root` (the node's `/`, or an old snapshot's tree) copied
/// into the agent home `into`; returns how many stores were copied.
pub(crate) fn import_sessions(
    from_root: &Path,
    home: &Path,
    project: &Path,
    into: &Path,
) -> Result<usize> {
    let mut n = 0;
    for path in slices::session_paths_under(from_root, home, project) {
        let Ok(rel) = path.strip_prefix(home) else {
            continue;
        };
        let src = from_root.join(path.strip_prefix("/").unwrap_or(&path));
        let dest = into.join(rel);
        if dest.exists() {
            continue;
        }
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        copy(&src, &dest)?;
        n += 1;
    }
    Ok(n)
}

/// What a restore puts in place from its staging tree: the project and the agent home. An
/// older snapshot holds the sessions at their places in the node's home instead; they are
/// imported into an agent home in the staging tree first.
pub(crate) fn restored_paths(staging: &Path, spec: &BoxSpec) -> Result<Vec<PathBuf>> {
    let under = |p: &Path| staging.join(p.strip_prefix("/").unwrap_or(p));
    let root = &spec.agent_home.root;
    if !under(root).exists() {
        fs::create_dir_all(under(root))?;
        import_sessions(staging, spec.home(), &spec.project, &under(root))?;
        privs::give_tree(&under(root), spec.ids)?;
    }
    Ok([spec.project.clone(), root.clone()]
        .into_iter()
        .filter(|p| fs::symlink_metadata(under(p)).is_ok())
        .collect())
}

fn give_if_foreign(path: &Path, ids: Ids) -> Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if (meta.uid(), meta.gid()) != (ids.uid, ids.gid) {
        privs::give_tree(path, ids)?;
    }
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    cmd::output(Command::new("cp").arg("-a").arg("--").arg(from).arg(to))
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}
