//! The agents a box can hold, as data: one entry per agent, so that a new agent is one entry.
//! A box's record names its agent (`track --agent`, `set agent=`); the step that starts the
//! agent in the box's tmux window (issue 25) runs its resume command, else its start command.

use std::path::{Path, PathBuf};

/// How an agent goes back to the most recent conversation in the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// The agent finds its most recent conversation in the project itself.
    Latest(&'static [&'static str]),
    /// ag-box names the conversation: these arguments, then its session id.
    Session(&'static [&'static str]),
}

/// One agent: its name in records and on the command line, its CLI, where it keeps its state,
/// and how it starts and resumes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Agent {
    /// What `--agent`, `agent=` and the record say.
    pub name: &'static str,
    /// Its CLI on the node (`doctor` asks each for its version).
    pub binary: &'static str,
    /// Its state in HOME (one of `agent_home::OWN_DIRS`): a session imported from there is its.
    pub home_dir: &'static str,
    /// A fresh conversation in the project.
    pub start: &'static [&'static str],
    /// Back to the most recent conversation.
    pub resume: Resume,
}

/// Every agent ag-box knows. Resume commands as each agent's docs give them: Claude Code's
/// `--resume <id>`; Codex's `resume --last`; Gemini CLI's `--resume latest`
/// (geminicli.com, session management); Grok Build's `--resume` without an id, the most recent
/// for the directory (docs.x.ai, sessions); `OpenCode`'s `--continue` (opencode.ai, CLI).
pub(crate) const AGENTS: &[Agent] = &[
    Agent {
        name: "claude",
        binary: "claude",
        home_dir: ".claude",
        start: &["claude"],
        resume: Resume::Session(&["claude", "--resume"]),
    },
    Agent {
        name: "codex",
        binary: "codex",
        home_dir: ".codex",
        start: &["codex"],
        resume: Resume::Latest(&["codex", "resume", "--last"]),
    },
    Agent {
        name: "gemini",
        binary: "gemini",
        home_dir: ".gemini",
        start: &["gemini"],
        resume: Resume::Latest(&["gemini", "--resume", "latest"]),
    },
    Agent {
        name: "grok",
        binary: "grok",
        home_dir: ".grok",
        start: &["grok"],
        resume: Resume::Latest(&["grok", "--resume"]),
    },
    Agent {
        name: "opencode",
        binary: "opencode",
        home_dir: ".local/share/opencode",
        start: &["opencode"],
        resume: Resume::Latest(&["opencode", "--continue"]),
    },
];

/// What a box's record says when it has no agent.
pub(crate) const NONE: &str = "none";

/// The agent of this name (None: ag-box knows no such agent).
pub(crate) fn named(name: &str) -> Option<&'static Agent> {
    AGENTS.iter().find(|a| a.name == name)
}

/// `--agent` or `agent=`: an agent's name, or `none` (or nothing) for no agent; else the hint
/// that lists them.
pub(crate) fn parse(value: &str) -> Result<Option<&'static Agent>, String> {
    if value.is_empty() || value == NONE {
        return Ok(None);
    }
    named(value).map(Some).ok_or_else(|| {
        let names: Vec<&str> = AGENTS.iter().map(|a| a.name).collect();
        format!("agent takes {} or {NONE}", names.join(", "))
    })
}

/// What `--agent` and `agent=` take: each agent's name, then `none`.
pub(crate) fn choices() -> Vec<&'static str> {
    AGENTS.iter().map(|a| a.name).chain([NONE]).collect()
}

/// A name a record may hold: this version's agents, and any a newer ag-box adds (kept and
/// shown, never run), but nothing a terminal would not print as it is.
pub(crate) fn plausible(name: &str) -> bool {
    name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The agent a box holds by default: the one whose sessions `track` imports from `home` (the
/// node's HOME), when exactly one agent has any; none when no agent or several have.
pub(crate) fn with_sessions(home: &Path, session_paths: &[PathBuf]) -> Option<&'static Agent> {
    let mut owners: Vec<&'static Agent> = session_paths
        .iter()
        .filter_map(|p| p.strip_prefix(home).ok())
        .filter_map(|rel| AGENTS.iter().find(|a| rel.starts_with(a.home_dir)))
        .collect();
    owners.sort_by_key(|a| a.name);
    owners.dedup_by_key(|a| a.name);
    match owners.as_slice() {
        [one] => Some(one),
        _ => None,
    }
}

impl Agent {
    /// What the box's tmux window runs to go back to the most recent conversation: the
    /// conversation `session` names when the agent needs one named, a fresh one when none is.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the resume step (issue 25) starts the agent with it"
        )
    )]
    pub(crate) fn resume_command(&self, session: Option<&str>) -> Vec<String> {
        let argv = |words: &[&str]| words.iter().map(|w| (*w).to_string()).collect::<Vec<_>>();
        match (self.resume, session) {
            (Resume::Latest(words), _) => argv(words),
            (Resume::Session(words), Some(id)) => {
                let mut command = argv(words);
                command.push(id.to_string());
                command
            }
            (Resume::Session(_), None) => argv(self.start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::agent_home::OWN_DIRS;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_table_names_each_agent_its_cli_state_and_commands() {
        // name, CLI, state in HOME | start | resume with a session id | resume without one
        let rows: Vec<String> = AGENTS
            .iter()
            .map(|a| {
                format!(
                    "{} {} {} | {} | {} | {}",
                    a.name,
                    a.binary,
                    a.home_dir,
                    a.start.join(" "),
                    a.resume_command(Some("0f3c")).join(" "),
                    a.resume_command(None).join(" ")
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                "claude claude .claude | claude | claude --resume 0f3c | claude",
                "codex codex .codex | codex | codex resume --last | codex resume --last",
                "gemini gemini .gemini | gemini | gemini --resume latest | gemini --resume latest",
                "grok grok .grok | grok | grok --resume | grok --resume",
                "opencode opencode .local/share/opencode | opencode | opencode --continue | \
                 opencode --continue",
            ]
        );
    }

    #[test]
    fn each_agent_keeps_its_state_in_one_of_the_agent_homes_own_dirs() {
        let mut dirs: Vec<&str> = AGENTS.iter().map(|a| a.home_dir).collect();
        let mut own = OWN_DIRS.to_vec();
        dirs.sort_unstable();
        own.sort_unstable();
        assert_eq!(dirs, own);
    }

    #[test]
    fn kinds_parse_by_name_and_none_is_no_agent() {
        let parsed: Vec<Result<Option<&str>, String>> =
            ["claude", "opencode", "none", "", "Claude", "aider"]
                .into_iter()
                .map(|v| parse(v).map(|a| a.map(|a| a.name)))
                .collect();
        let hint = "agent takes claude, codex, gemini, grok, opencode or none".to_string();
        assert_eq!(
            parsed,
            vec![
                Ok(Some("claude")),
                Ok(Some("opencode")),
                Ok(None),
                Ok(None),
                Err(hint.clone()),
                Err(hint)
            ]
        );
        let plausible: Vec<bool> = ["claude", "aider-2", "", "Claude", "a b", "x\u{1b}[2J"]
            .into_iter()
            .map(plausible)
            .collect();
        assert_eq!(plausible, [true, true, false, false, false, false]);
    }

    #[test]
    fn the_default_agent_is_the_one_whose_sessions_were_imported() {
        let home = Path::new("/root");
        let of = |paths: &[&str]| {
            let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
            with_sessions(home, &paths).map(|a| a.name)
        };
        let claude = [
            "/root/.claude/projects/-root-demo",
            "/root/.claude/file-history/a1",
        ];
        assert_eq!(of(&claude), Some("claude"));
        assert_eq!(
            of(&["/root/.codex/sessions/2026/11/29/rollout-1.jsonl"]),
            Some("codex")
        );
        assert_eq!(
            of(&["/root/.gemini/tmp/b116", "/root/.gemini/tmp/demo"]),
            Some("gemini")
        );
        assert_eq!(of(&["/root/.grok/sessions/%2Froot%2Fdemo"]), Some("grok"));
        assert_eq!(of(&[]), None);
        assert_eq!(
            of(&[
                "/root/.claude/projects/-root-demo",
                "/root/.codex/sessions/2026/11/29/rollout-1.jsonl",
                "/root/.claude/session-env/a1",
            ]),
            None
        );
        // A path outside the home, or in no agent's dir, says nothing of an agent.
        assert_eq!(of(&["/srv/.claude/projects/x", "/root/.config/gh"]), None);
    }
}
