//! What of HOME a box sees, and from where (docs/design.md "Agent homes").
//!
//! Each box has its own agent home on the node (`$BOX_STATE_DIR/homes/<name>`, owned by the
//! box user): the agents' state dirs are bound from it, so a box sees and changes only its own
//! transcripts and history, and they move with the box's snapshot. The agents' credentials are
//! shared per node (read-write for token refresh) and their global config is read-only; both are
//! bound file by file over the box's own dirs, and neither is ever part of a snapshot.

use std::path::{Path, PathBuf};

/// Dirs of HOME that live in the box's agent home (read-write, snapshotted).
pub(crate) const OWN_DIRS: &[&str] = &[
    ".claude",
    ".codex",
    ".grok",
    ".gemini",
    ".local/share/opencode",
];
/// Files of HOME that live in the box's agent home; `.claude.json` is seeded from the node's.
pub(crate) const OWN_FILES: &[&str] = &[".claude.json"];
/// The agents' credentials, shared per node: read-write, owned by the box user.
pub(crate) const CREDENTIALS: &[&str] = &[
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
    ".gemini/google_accounts.json",
    ".local/share/opencode/auth.json",
];
/// Shared config that holds the agent's key and also says where it sends its requests (grok's
/// `baseURL`): the box user's, to read the key, but read-only, so that no box can point the
/// operator's own agent, or the next box, elsewhere.
pub(crate) const KEYED_CONFIG: &[&str] = &[".grok/user-settings.json"];
/// The node's logins a box may be given (`set creds=`), each the shared files it is: an
/// agent's credentials (or its keyed config), and gh's config with its token.
pub(crate) const LOGINS: &[(&str, &[&str])] = &[
    ("claude", &[".claude/.credentials.json"]),
    ("codex", &[".codex/auth.json"]),
    (
        "gemini",
        &[".gemini/oauth_creds.json", ".gemini/google_accounts.json"],
    ),
    ("grok", &[".grok/user-settings.json"]),
    ("opencode", &[".local/share/opencode/auth.json"]),
    ("gh", &[".config/gh"]),
];

/// The logins a box is given: those its record names (`creds=`), or by default its agent's
/// and gh's (a box without an agent, or with one this version does not know: every login).
pub(crate) fn logins_for(agent: Option<&str>, creds: Option<&[String]>) -> Vec<&'static str> {
    let all = LOGINS.iter().map(|(name, _)| *name);
    match (creds, agent) {
        (Some(named), _) => all.filter(|n| named.iter().any(|c| c == n)).collect(),
        (None, Some(agent)) if LOGINS.iter().any(|(n, _)| *n == agent) => {
            all.filter(|n| *n == agent || *n == "gh").collect()
        }
        (None, _) => all.collect(),
    }
}

/// `creds=`: logins by name, comma-separated; `all`; `none` (no login); `default` (or
/// nothing) for the default. Some(list) as the record keeps it; None for the default.
pub(crate) fn parse_creds(value: &str) -> Result<Option<Vec<String>>, String> {
    let names: Vec<&str> = LOGINS.iter().map(|(n, _)| *n).collect();
    match value {
        "" | "default" => Ok(None),
        "all" => Ok(Some(names.iter().map(|n| (*n).to_string()).collect())),
        "none" => Ok(Some(vec![])),
        list => {
            let mut out: Vec<String> = Vec::new();
            for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                if !names.contains(&item) {
                    return Err(format!(
                        "creds takes logins among {}, or all, none or default",
                        names.join(", ")
                    ));
                }
                if !out.iter().any(|o| o == item) {
                    out.push(item.to_string());
                }
            }
            Ok(Some(out))
        }
    }
}

/// Whether `rel` (a shared file of HOME) is a login's, which only a box given it sees.
pub(crate) fn is_login_file(rel: &str) -> bool {
    login_of(rel).is_some()
}

/// The login `rel` (a shared file of HOME) belongs to, if it is one.
fn login_of(rel: &str) -> Option<&'static str> {
    LOGINS
        .iter()
        .find(|(_, files)| files.contains(&rel))
        .map(|(name, _)| *name)
}

/// What of the node's `~/.claude.json` seeds a box's own: all but the API key Claude Code kept
/// there (`primaryApiKey`), which no box is given that way and no snapshot may carry. None when
/// it is no JSON object (the box starts with an empty one).
pub(crate) fn seed_claude_json(node: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(node).ok()?;
    v.as_object_mut()?.remove("primaryApiKey");
    serde_json::to_vec_pretty(&v).ok()
}

/// Global config, shared per node, read-only inside a box.
pub(crate) const GLOBAL_CONFIG: &[&str] = &[
    ".claude/CLAUDE.md",
    ".claude/settings.json",
    ".claude/output-styles",
    ".claude/skills",
    ".claude/plugins",
    ".claude/agents",
    ".claude/commands",
    ".codex/config.toml",
    ".codex/AGENTS.md",
    ".gemini/settings.json",
    ".gemini/GEMINI.md",
    ".gitconfig",
    ".config/gh",
    ".local",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    ReadWrite,
}

/// One path of the box's HOME and where it comes from on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HomeBind {
    pub src: PathBuf,
    pub dest: PathBuf,
    pub access: Access,
}

impl HomeBind {
    /// One of the node's shared files (bound at its own path), not of the box's agent home.
    pub(crate) fn is_node_file(&self) -> bool {
        self.src == self.dest
    }
}

/// The host side of a box's HOME: the node's home (shared files) and the box's agent home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentHome {
    /// HOME inside the box, and the node's home whose shared files are bound.
    pub home: PathBuf,
    /// `$BOX_STATE_DIR/homes/<name>`.
    pub root: PathBuf,
    /// The node's logins the box is given ([`logins_for`]); the others' files are not bound.
    pub logins: Vec<&'static str>,
}

pub(crate) fn root_for(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join("homes").join(name)
}

/// `rel` lies in one of the box's own dirs (so its mount point is made in the agent home).
fn in_own_dir(rel: &str) -> bool {
    OWN_DIRS
        .iter()
        .any(|d| Path::new(rel).starts_with(d) && rel != *d)
}

/// What an agent's login writes: its credentials and keyed config. Shared from the node when
/// the node has them; a login made inside a box on a node without them lands in the box's own
/// agent home, which no snapshot carries (`globals adopt` makes its credentials the node's).
pub(crate) fn logins() -> impl Iterator<Item = &'static str> {
    CREDENTIALS.iter().chain(KEYED_CONFIG).copied()
}

/// A shared file the box user must own to use (a credential, or a keyed config).
pub(crate) fn handed_to_box(rel: &Path) -> bool {
    logins().any(|c| Path::new(c) == rel)
}

impl AgentHome {
    /// The binds of HOME, parents before children; shared files the node lacks are left out.
    /// The opencode store needs its mount point in the node's `~/.local` when that is bound.
    pub(crate) fn binds(&self, node_has: impl Fn(&Path) -> bool) -> Vec<HomeBind> {
        let node = |rel: &str| self.home.join(rel);
        let own = |rel: &str| HomeBind {
            src: self.root.join(rel),
            dest: self.home.join(rel),
            access: Access::ReadWrite,
        };
        let shared = |rel: &str, access| HomeBind {
            src: node(rel),
            dest: node(rel),
            access,
        };
        let local_hides_opencode =
            node_has(&node(".local")) && !node_has(&node(".local/share/opencode"));
        let mut binds: Vec<HomeBind> = OWN_DIRS
            .iter()
            .filter(|d| !(**d == ".local/share/opencode" && local_hides_opencode))
            .chain(OWN_FILES)
            .map(|rel| own(rel))
            .collect();
        let given = |rel: &&&str| login_of(rel).is_none_or(|l| self.logins.contains(&l));
        binds.extend(
            CREDENTIALS
                .iter()
                .filter(given)
                .filter(|rel| node_has(&node(rel)))
                .map(|rel| shared(rel, Access::ReadWrite)),
        );
        binds.extend(
            KEYED_CONFIG
                .iter()
                .chain(GLOBAL_CONFIG)
                .filter(given)
                .filter(|rel| node_has(&node(rel)))
                .map(|rel| shared(rel, Access::ReadOnly)),
        );
        binds.retain(|b| {
            // Shared files inside a skipped own dir have nowhere to go.
            let rel = b.dest.strip_prefix(&self.home).unwrap_or(&b.dest);
            !(local_hides_opencode && rel.starts_with(".local/share/opencode"))
        });
        binds.sort_by_key(|b| b.dest.components().count());
        binds
    }

    /// Mount points of shared files inside the agent home: made (as the box user's) before
    /// the box starts, since bwrap would make them root's.
    pub(crate) fn mount_points(&self, binds: &[HomeBind]) -> Vec<PathBuf> {
        binds
            .iter()
            .filter(|b| b.src != self.root.join(self.rel(&b.dest)))
            .filter(|b| in_own_dir(&self.rel(&b.dest).to_string_lossy()))
            .map(|b| self.root.join(self.rel(&b.dest)))
            .collect()
    }

    fn rel(&self, dest: &Path) -> PathBuf {
        dest.strip_prefix(&self.home).unwrap_or(dest).to_path_buf()
    }

    /// Never in a snapshot: the shared files' mount points in the agent home.
    pub(crate) fn snapshot_excludes(&self) -> Vec<PathBuf> {
        CREDENTIALS
            .iter()
            .chain(KEYED_CONFIG)
            .chain(GLOBAL_CONFIG)
            .filter(|rel| in_own_dir(rel))
            .map(|rel| self.root.join(rel))
            .collect()
    }
}

/// What `sys::agent_home::adopt_logins` (or the broker's adoption) did with each of a box's own
/// logins.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Adopted {
    /// Now the node's, at this path (root's, mode 0600), and gone from the agent home.
    Moved(std::path::PathBuf),
    /// The node has one of its own meanwhile: both left as they are.
    NodeHasOne(std::path::PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn home() -> AgentHome {
        AgentHome {
            home: "/root".into(),
            root: "/var/lib/ag-box/homes/demo".into(),
            logins: logins_for(None, None),
        }
    }

    fn b(src: &str, dest: &str, access: Access) -> HomeBind {
        HomeBind {
            src: src.into(),
            dest: dest.into(),
            access,
        }
    }

    #[test]
    fn a_bare_node_gives_the_box_only_its_own_dirs() {
        let h = home();
        let own = |rel: &str| {
            b(
                &format!("/var/lib/ag-box/homes/demo/{rel}"),
                &format!("/root/{rel}"),
                Access::ReadWrite,
            )
        };
        assert_eq!(
            h.binds(|_| false),
            vec![
                own(".claude"),
                own(".codex"),
                own(".grok"),
                own(".gemini"),
                own(".claude.json"),
                own(".local/share/opencode"),
            ]
        );
        assert_eq!(h.mount_points(&h.binds(|_| false)), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_box_is_given_its_agents_login_and_ghs_unless_its_record_names_others() {
        let named = |list: &[&str]| list.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        let cases: Vec<Vec<&str>> = vec![
            logins_for(Some("claude"), None),
            logins_for(Some("codex"), None),
            logins_for(None, None),
            logins_for(Some("a-newer-agent"), None),
            logins_for(Some("claude"), Some(&named(&["codex", "gemini"]))),
            logins_for(Some("claude"), Some(&[])),
        ];
        assert_eq!(
            cases,
            vec![
                vec!["claude", "gh"],
                vec!["codex", "gh"],
                vec!["claude", "codex", "gemini", "grok", "opencode", "gh"],
                vec!["claude", "codex", "gemini", "grok", "opencode", "gh"],
                vec!["codex", "gemini"],
                vec![],
            ]
        );
        assert_eq!(
            ["claude, gh,claude", "all", "none", "default", "", "claude,ssh"].map(parse_creds),
            [
                Ok(Some(named(&["claude", "gh"]))),
                Ok(Some(named(&["claude", "codex", "gemini", "grok", "opencode", "gh"]))),
                Ok(Some(vec![])),
                Ok(None),
                Ok(None),
                Err("creds takes logins among claude, codex, gemini, grok, opencode, gh, or all, none or default".into()),
            ]
        );
    }

    #[test]
    fn a_boxs_claude_json_is_the_nodes_without_its_api_key() {
        let seeded = |node: &str| {
            seed_claude_json(node.as_bytes())
                .map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap())
        };
        assert_eq!(
            seeded(r#"{"primaryApiKey": "sk-ant-1", "hasCompletedOnboarding": true}"#),
            Some(serde_json::json!({"hasCompletedOnboarding": true}))
        );
        assert_eq!(seeded("[1]"), None);
        assert_eq!(seeded("not json"), None);
    }

    #[test]
    fn the_logins_a_box_is_not_given_are_not_bound() {
        let h = AgentHome {
            logins: vec!["claude"],
            ..home()
        };
        let present = [
            "/root/.claude/.credentials.json",
            "/root/.codex/auth.json",
            "/root/.gemini/oauth_creds.json",
            "/root/.grok/user-settings.json",
            "/root/.config/gh",
            "/root/.gitconfig",
        ];
        let shared: Vec<PathBuf> = h
            .binds(|p| present.iter().any(|x| Path::new(x) == p))
            .into_iter()
            .filter(HomeBind::is_node_file)
            .map(|b| b.dest)
            .collect();
        assert_eq!(
            shared,
            [
                PathBuf::from("/root/.gitconfig"),
                PathBuf::from("/root/.claude/.credentials.json")
            ]
        );
    }

    #[test]
    fn shared_files_go_over_the_own_dirs() {
        let h = home();
        let present = [
            "/root/.claude/.credentials.json",
            "/root/.claude/settings.json",
            "/root/.codex/auth.json",
            "/root/.grok/user-settings.json",
            "/root/.gitconfig",
            "/root/.local",
            "/root/.local/share/opencode",
        ];
        let binds = h.binds(|p| present.iter().any(|x| Path::new(x) == p));
        let rw = Access::ReadWrite;
        let ro = Access::ReadOnly;
        let own = "/var/lib/ag-box/homes/demo";
        assert_eq!(
            binds,
            vec![
                b(&format!("{own}/.claude"), "/root/.claude", rw),
                b(&format!("{own}/.codex"), "/root/.codex", rw),
                b(&format!("{own}/.grok"), "/root/.grok", rw),
                b(&format!("{own}/.gemini"), "/root/.gemini", rw),
                b(&format!("{own}/.claude.json"), "/root/.claude.json", rw),
                b("/root/.gitconfig", "/root/.gitconfig", ro),
                b("/root/.local", "/root/.local", ro),
                b(
                    "/root/.claude/.credentials.json",
                    "/root/.claude/.credentials.json",
                    rw
                ),
                b("/root/.codex/auth.json", "/root/.codex/auth.json", rw),
                b(
                    "/root/.grok/user-settings.json",
                    "/root/.grok/user-settings.json",
                    ro
                ),
                b(
                    "/root/.claude/settings.json",
                    "/root/.claude/settings.json",
                    ro
                ),
                b(
                    &format!("{own}/.local/share/opencode"),
                    "/root/.local/share/opencode",
                    rw
                ),
            ]
        );
        assert_eq!(
            h.mount_points(&binds),
            vec![
                PathBuf::from(format!("{own}/.claude/.credentials.json")),
                PathBuf::from(format!("{own}/.codex/auth.json")),
                PathBuf::from(format!("{own}/.grok/user-settings.json")),
                PathBuf::from(format!("{own}/.claude/settings.json")),
            ]
        );
    }

    #[test]
    fn a_node_local_without_opencode_leaves_the_opencode_store_out() {
        let h = home();
        let present = ["/root/.local", "/root/.local/share/opencode/auth.json"];
        let binds = h.binds(|p| present.iter().any(|x| Path::new(x) == p));
        assert!(
            binds
                .iter()
                .all(|b| !b.dest.starts_with("/root/.local/share/opencode")),
            "{binds:?}"
        );
    }

    #[test]
    fn credentials_and_config_never_enter_a_snapshot() {
        let excludes = home().snapshot_excludes();
        let own = "/var/lib/ag-box/homes/demo";
        assert!(excludes.contains(&PathBuf::from(format!("{own}/.claude/.credentials.json"))));
        assert!(excludes.contains(&PathBuf::from(format!("{own}/.codex/auth.json"))));
        assert!(excludes.contains(&PathBuf::from(format!("{own}/.claude/settings.json"))));
        assert!(!excludes.iter().any(|p| p.ends_with(".gitconfig")));
        assert_eq!(excludes.len(), 17);
    }
}
