//! The global agent files that `globals push|pull` carry between nodes (never with a box).

use std::path::{Path, PathBuf};

use super::agent_home;

/// Relative to the home directory, files and directories, besides the agents' logins
/// ([`agent_home::logins`]).
const GLOBAL_FILES: &[&str] = &[
    ".claude/settings.json",
    ".claude/CLAUDE.md",
    ".claude/skills",
    ".claude/plugins",
    ".claude/output-styles",
    ".claude/agents",
    ".claude/commands",
    ".claude.json",
    ".codex/config.toml",
    ".codex/AGENTS.md",
    ".grok/auth.json",
    ".grok/config.toml",
    ".gitconfig",
    ".config/gh",
];

pub(crate) fn global_paths(home: &Path) -> Vec<PathBuf> {
    agent_home::logins()
        .chain(GLOBAL_FILES.iter().copied())
        .map(|rel| home.join(rel))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Push,
    Pull,
}

impl Role {
    pub(crate) fn parse(v: &str) -> Option<Role> {
        match v {
            "push" => Some(Role::Push),
            "pull" => Some(Role::Pull),
            _ => None,
        }
    }
}

/// What `push` on a pull node does and does not do (the spec's one-way rule).
pub(crate) const PUSH_FROM_PULL_NODE: &str = "this node's BOX_GLOBALS_ROLE is pull: this push uploads its files as the newest \
globals snapshot, but does not write them to the push node's disk, and the push node's next hourly push overwrites \
them; to keep credentials refreshed here, log in on the push node instead, or run 'ag-box globals pull' there now";

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn credentials_and_config_under_home_only() {
        let paths = global_paths(Path::new("/root"));
        assert_eq!(
            paths.len(),
            GLOBAL_FILES.len() + agent_home::logins().count()
        );
        assert!(paths.iter().all(|p| p.starts_with("/root")));
        // Every login a box can make, so that an adopted one moves.
        for rel in agent_home::logins() {
            assert!(paths.contains(&Path::new("/root").join(rel)), "{rel}");
        }
        assert!(paths.contains(&PathBuf::from("/root/.claude/.credentials.json")));
        assert!(paths.contains(&PathBuf::from("/root/.gemini/oauth_creds.json")));
        assert!(paths.contains(&PathBuf::from("/root/.config/gh")));
        // Session data never travels as globals.
        assert!(
            !paths
                .iter()
                .any(|p| p.ends_with("projects") || p.ends_with("sessions"))
        );
        assert!(!paths.iter().any(|p| p.to_string_lossy().contains(".ssh")));
    }

    #[test]
    fn roles() {
        assert_eq!(Role::parse("push"), Some(Role::Push));
        assert_eq!(Role::parse("pull"), Some(Role::Pull));
        assert_eq!(Role::parse("both"), None);
    }
}
