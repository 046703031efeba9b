//! The agents a box can hold, as data: one entry per agent, so that a new agent is one entry.
//! A box's record names its agent (`track --agent`, `set agent=`); as the box starts, its `main`
//! tmux window runs the agent's resume command (`commands::agent_window`), or its start command
//! for a fresh conversation.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::box_exe::BOX_EXE;
use super::slices;

/// How an agent goes back to the most recent conversation in the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// The agent finds its most recent conversation in the project itself.
    Latest(&'static [&'static str]),
    /// ag-box names the conversation: these arguments, then the session id it finds there.
    Session(&'static [&'static str], Sessions),
}

/// Where ag-box finds the conversation to resume, when it names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sessions {
    /// Claude Code: the newest `<id>.jsonl` in the project's dir
    /// (`slices::claude_project_dir`); its own `--continue` skips sessions made with `-p`.
    ClaudeProject,
    /// Codex: the newest rollout under `~/.codex/sessions/` whose cwd is the project; its own
    /// `resume --last` skips sessions made with `codex exec`.
    CodexRollouts,
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
    /// How it tells ag-box what it is doing (`plan::attention`).
    pub signals: Signals,
}

/// How an agent tells ag-box what it is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signals {
    /// Claude Code's hooks, from the managed settings every box gets.
    ClaudeHooks,
    /// Codex's notify program, given on its command line (a turn done).
    CodexNotify,
    /// None of its own that ag-box hears: its window's terminal tells (output, a bell,
    /// silence; `plan::tmux`).
    Terminal,
}

/// Every agent ag-box knows. Resume commands as each agent's docs give them: Claude Code's
/// `--resume <id>`; Codex's `resume <id>`; Gemini CLI's `--resume latest`
/// (geminicli.com, session management); Grok Build's `--resume` without an id, the most recent
/// for the directory (docs.x.ai, sessions); `OpenCode`'s `--continue` (opencode.ai, CLI).
pub(crate) const AGENTS: &[Agent] = &[
    Agent {
        name: "claude",
        binary: "claude",
        home_dir: ".claude",
        start: &["claude"],
        resume: Resume::Session(&["claude", "--resume"], Sessions::ClaudeProject),
        signals: Signals::ClaudeHooks,
    },
    Agent {
        name: "codex",
        binary: "codex",
        home_dir: ".codex",
        start: &["codex"],
        resume: Resume::Session(&["codex", "resume"], Sessions::CodexRollouts),
        signals: Signals::CodexNotify,
    },
    Agent {
        name: "gemini",
        binary: "gemini",
        home_dir: ".gemini",
        start: &["gemini"],
        resume: Resume::Latest(&["gemini", "--resume", "latest"]),
        signals: Signals::Terminal,
    },
    Agent {
        name: "grok",
        binary: "grok",
        home_dir: ".grok",
        start: &["grok"],
        resume: Resume::Latest(&["grok", "--resume"]),
        signals: Signals::Terminal,
    },
    Agent {
        name: "opencode",
        binary: "opencode",
        home_dir: ".local/share/opencode",
        start: &["opencode"],
        resume: Resume::Latest(&["opencode", "--continue"]),
        signals: Signals::Terminal,
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
    named(value)
        .map(Some)
        .ok_or_else(|| format!("agent takes {} or {NONE}", names().join(", ")))
}

/// Every agent's name, in the table's order.
pub(crate) fn names() -> Vec<&'static str> {
    AGENTS.iter().map(|a| a.name).collect()
}

/// What `--agent` and `agent=` take: each agent's name, then `none`.
pub(crate) fn choices() -> Vec<&'static str> {
    names().into_iter().chain([NONE]).collect()
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

/// The config override that makes Codex tell ag-box when a turn is done (`plan::attention`).
fn codex_notify_args() -> [String; 2] {
    [
        "-c".to_string(),
        format!("notify=[\"{BOX_EXE}\",\"__agent-state\",\"codex\"]"),
    ]
}

/// Is this a session id ag-box may hand an agent (a transcript's name without `.jsonl`)? Hex
/// digits and dashes, as Claude Code's UUIDs are: never an option, a path or a shell word.
fn is_session_id(id: &str) -> bool {
    (8..=64).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_hexdigit())
        && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// The session of the newest transcript (`<id>.jsonl`, by its last write) among a project dir's
/// files; ties go to the greater name, so the choice never depends on the listing's order.
pub(crate) fn newest_session(files: &[(OsString, SystemTime)]) -> Option<String> {
    files
        .iter()
        .filter_map(|(name, written)| {
            let id = name.to_str()?.strip_suffix(".jsonl")?;
            is_session_id(id).then_some((*written, id))
        })
        .max()
        .map(|(_, id)| id.to_string())
}

/// The session a Codex rollout's first line (its `session_meta`) names, when its cwd is
/// `project`.
pub(crate) fn rollout_session(first_line: &[u8], project: &Path) -> Option<String> {
    let meta: serde_json::Value = serde_json::from_slice(first_line).ok()?;
    let payload = &meta["payload"];
    let id = payload["id"].as_str()?;
    (meta["type"] == "session_meta"
        && payload["cwd"].as_str() == project.to_str()
        && is_session_id(id))
    .then(|| id.to_string())
}

impl Agent {
    /// Where ag-box looks for the conversation to resume, and the dir it looks in (None: the
    /// agent finds it itself).
    pub(crate) fn sessions(&self, home: &Path, project: &Path) -> Option<(Sessions, PathBuf)> {
        match self.resume {
            Resume::Session(_, kind @ Sessions::ClaudeProject) => {
                Some((kind, slices::claude_project_dir(home, project)))
            }
            Resume::Session(_, kind @ Sessions::CodexRollouts) => {
                Some((kind, home.join(".codex/sessions")))
            }
            Resume::Latest(_) => None,
        }
    }

    /// What the box's `main` window runs: a fresh conversation, or the most recent one; an
    /// agent told on its command line how to signal gets that first.
    pub(crate) fn window_command(&self, fresh: bool, session: Option<&str>) -> Vec<String> {
        let mut command = if fresh {
            self.start.iter().map(|w| (*w).to_string()).collect()
        } else {
            self.resume_command(session)
        };
        if self.signals == Signals::CodexNotify {
            command.splice(1..1, codex_notify_args());
        }
        command
    }

    /// What the box's tmux window runs to go back to the most recent conversation: the
    /// conversation `session` names when the agent needs one named, a fresh one when none is.
    fn resume_command(&self, session: Option<&str>) -> Vec<String> {
        let argv = |words: &[&str]| words.iter().map(|w| (*w).to_string()).collect::<Vec<_>>();
        match (self.resume, session) {
            (Resume::Latest(words), _) => argv(words),
            (Resume::Session(words, _), Some(id)) => {
                let mut command = argv(words);
                command.push(id.to_string());
                command
            }
            (Resume::Session(..), None) => argv(self.start),
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
                "codex codex .codex | codex | codex resume 0f3c | codex",
                "gemini gemini .gemini | gemini | gemini --resume latest | gemini --resume latest",
                "grok grok .grok | grok | grok --resume | grok --resume",
                "opencode opencode .local/share/opencode | opencode | opencode --continue | \
                 opencode --continue",
            ]
        );
    }

    #[test]
    fn the_newest_transcript_by_its_last_write_names_the_session() {
        use std::time::Duration;
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let files = |names: &[(&str, u64)]| -> Vec<(OsString, SystemTime)> {
            names.iter().map(|(n, t)| ((*n).into(), at(*t))).collect()
        };
        let uuid_a = "0a1b2c3d-0000-4000-8000-00000000000a";
        let uuid_b = "0a1b2c3d-0000-4000-8000-00000000000b";
        let cases: Vec<Option<String>> = [
            files(&[]),
            files(&[
                (&format!("{uuid_a}.jsonl"), 10),
                (&format!("{uuid_b}.jsonl"), 20),
            ]),
            files(&[
                (&format!("{uuid_a}.jsonl"), 30),
                (&format!("{uuid_b}.jsonl"), 20),
            ]),
            // A tie goes to the greater name, whatever the listing's order.
            files(&[
                (&format!("{uuid_b}.jsonl"), 20),
                (&format!("{uuid_a}.jsonl"), 20),
            ]),
            // Newer, but no session of its own: a subagent's, a note, an option, a shell word,
            // a name too short or too long to be an id.
            files(&[
                (&format!("{uuid_a}.jsonl"), 10),
                ("agent-5f2e.jsonl", 90),
                (&format!("{uuid_b}.json"), 90),
                ("-rf.jsonl", 90),
                ("a1$(reboot).jsonl", 90),
                ("0a1b.jsonl", 90),
                (&format!("{}.jsonl", "a".repeat(65)), 90),
            ]),
        ]
        .iter()
        .map(|f| newest_session(f))
        .collect();
        assert_eq!(
            cases,
            [
                None,
                Some(uuid_b.to_string()),
                Some(uuid_a.to_string()),
                Some(uuid_b.to_string()),
                Some(uuid_a.to_string()),
            ]
        );
    }

    #[test]
    fn ag_box_finds_the_session_of_claude_code_and_codex_and_fresh_is_the_start_command() {
        const NOTIFY: &str = "notify=[\"/run/ag-box\",\"__agent-state\",\"codex\"]";
        let (home, project) = (Path::new("/root"), Path::new("/root/my.app"));
        let dirs: Vec<(&str, Option<(Sessions, PathBuf)>)> = AGENTS
            .iter()
            .map(|a| (a.name, a.sessions(home, project)))
            .collect();
        assert_eq!(
            dirs,
            [
                (
                    "claude",
                    Some((
                        Sessions::ClaudeProject,
                        PathBuf::from("/root/.claude/projects/-root-my-app")
                    ))
                ),
                (
                    "codex",
                    Some((
                        Sessions::CodexRollouts,
                        PathBuf::from("/root/.codex/sessions")
                    ))
                ),
                ("gemini", None),
                ("grok", None),
                ("opencode", None),
            ]
        );
        let claude = named("claude").unwrap();
        let codex = named("codex").unwrap();
        assert_eq!(
            [
                claude.window_command(true, Some("0f3c0f3c")),
                claude.window_command(false, Some("0f3c0f3c")),
                codex.window_command(true, Some("01a23b81")),
                codex.window_command(false, Some("01a23b81")),
                codex.window_command(false, None),
            ],
            [
                vec!["claude"],
                vec!["claude", "--resume", "0f3c0f3c"],
                vec!["codex", "-c", NOTIFY],
                vec!["codex", "-c", NOTIFY, "resume", "01a23b81"],
                vec!["codex", "-c", NOTIFY],
            ]
        );
    }

    #[test]
    fn a_rollout_names_its_session_when_its_cwd_is_the_project() {
        let project = Path::new("/root/demo");
        let id = "01a23b81-b45a-75c3-a1b8-a49a092f81ad";
        let line = |kind: &str, cwd: &str, id: &str| {
            serde_json::json!({
                "timestamp": "2026-12-03T10:44:45.833Z",
                "type": kind,
                "payload": {"id": id, "cwd": cwd, "source": "exec", "cli_version": "0.171.0"}
            })
            .to_string()
        };
        let found: Vec<Option<String>> = [
            line("session_meta", "/root/demo", id),
            line("session_meta", "/root/demo-2", id),
            line("session_meta", "/root", id),
            line("response_item", "/root/demo", id),
            line("session_meta", "/root/demo", "--last"),
            "{\"type\":\"session_meta\",\"payload\":{\"cwd\":\"/root/demo\"}}".to_string(),
            "not json".to_string(),
        ]
        .iter()
        .map(|l| rollout_session(l.as_bytes(), project))
        .collect();
        assert_eq!(
            found,
            [Some(id.to_string()), None, None, None, None, None, None]
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
