//! What `fork` makes (docs/design.md "Fork"): the siblings' names, project paths and git
//! branches, and what of an agent home names the project it was made for.

use std::path::{Path, PathBuf};

use crate::error::UserError;
use crate::plan::names::{self, BoxName};
use crate::plan::slices;

/// At most this many siblings at once: each is a copy of the project on this node first.
pub(crate) const MAX_COUNT: u32 = 16;

/// One box a fork makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sibling {
    pub name: BoxName,
    /// Its project, `<home>/<name>`.
    pub path: PathBuf,
    /// The git branch it checks out (when the project is a repository).
    pub branch: String,
}

/// `fork <box> <new> [--count N] [--branch B]`: `<new>` alone, or `<new>-1` .. `<new>-N`,
/// each at `<home>/<its name>` on branch B (B-i of several), by default its own name.
pub(crate) fn siblings(
    new: &str,
    count: u32,
    branch: Option<&str>,
    home: &Path,
) -> Result<Vec<Sibling>, UserError> {
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(UserError::usage(
            format!("invalid --count {count}"),
            format!("give 1 to {MAX_COUNT} siblings"),
        ));
    }
    names::validate(new)?;
    if let Some(b) = branch
        && let Some(why) = branch_refusal(b)
    {
        return Err(UserError::usage(
            format!(
                "invalid branch name '{}': {why}",
                crate::plan::text::escaped(b)
            ),
            "use letters, digits and . _ - /, e.g. --branch try-cache",
        ));
    }
    (1..=count)
        .map(|i| {
            let name = if count == 1 {
                new.to_string()
            } else {
                format!("{new}-{i}")
            };
            let name = BoxName::new(name)?;
            let branch = match (branch, count) {
                (Some(b), 1) => b.to_string(),
                (Some(b), _) => format!("{b}-{i}"),
                (None, _) => name.to_string(),
            };
            Ok(Sibling {
                path: home.join(&*name),
                name,
                branch,
            })
        })
        .collect()
}

/// Why git would refuse `b` as a branch name, or a word ag-box hands it could be taken for
/// an option; None when it is fine. Only a plain subset of what git allows.
pub(crate) fn branch_refusal(b: &str) -> Option<&'static str> {
    if b.is_empty() || b.len() > 200 {
        return Some("1 to 200 characters");
    }
    if !b
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        return Some("only letters, digits and . _ - /");
    }
    if b.starts_with('-') {
        return Some("it may not start with '-'");
    }
    let parts_ok = b
        .split('/')
        .all(|p| !p.is_empty() && !p.starts_with('.') && p.strip_suffix(".lock").is_none());
    if !parts_ok || b.contains("..") || b.ends_with('.') {
        return Some("no empty part, no part starting with '.' or ending in '.lock', no '..'");
    }
    None
}

/// Dirs of an agent home (paths relative to it) named for the project `from`, and the names
/// they take for the project `to`: Claude Code's project dir, Grok's sessions, Gemini CLI's
/// older per-project dir. (Codex's rollouts and Gemini's newer dirs name the project inside a
/// file instead.)
pub(crate) fn renamed_for(from: &Path, to: &Path) -> Vec<(PathBuf, PathBuf)> {
    let home = Path::new("");
    [
        slices::claude_project_dir,
        slices::grok_session_dir,
        slices::gemini_hash_dir,
    ]
    .iter()
    .map(|dir_of| (dir_of(home, from), dir_of(home, to)))
    .collect()
}

/// A Codex rollout's first line (`session_meta`) naming `from` as its cwd, rewritten to name
/// `to`; None when the line is no `session_meta` of `from`.
pub(crate) fn codex_meta_for(first_line: &str, from: &Path, to: &Path) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(first_line).ok()?;
    let cwd = slices::codex_rollout_cwd(first_line)?;
    if Path::new(&cwd) != from {
        return None;
    }
    *v.get_mut("payload")?.get_mut("cwd")? = serde_json::Value::String(to.display().to_string());
    let mut line = serde_json::to_string(&v).ok()?;
    if first_line.ends_with('\n') {
        line.push('\n');
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn sib(name: &str, path: &str, branch: &str) -> Sibling {
        Sibling {
            name: BoxName::new(name).unwrap(),
            path: PathBuf::from(path),
            branch: branch.into(),
        }
    }

    #[test]
    fn one_sibling_takes_the_name_given_and_its_branch() {
        assert_eq!(
            siblings("try", 1, None, Path::new("/root")).unwrap(),
            vec![sib("try", "/root/try", "try")]
        );
        assert_eq!(
            siblings("try", 1, Some("feat/x"), Path::new("/root")).unwrap(),
            vec![sib("try", "/root/try", "feat/x")]
        );
    }

    #[test]
    fn several_siblings_are_numbered_and_so_are_their_branches() {
        assert_eq!(
            siblings("try", 3, Some("cache"), Path::new("/home/op")).unwrap(),
            vec![
                sib("try-1", "/home/op/try-1", "cache-1"),
                sib("try-2", "/home/op/try-2", "cache-2"),
                sib("try-3", "/home/op/try-3", "cache-3"),
            ]
        );
        assert_eq!(
            siblings("try", 2, None, Path::new("/root")).unwrap(),
            vec![
                sib("try-1", "/root/try-1", "try-1"),
                sib("try-2", "/root/try-2", "try-2"),
            ]
        );
    }

    #[test]
    fn bad_counts_names_and_branches_are_refused_with_a_hint() {
        let err = |r: Result<Vec<Sibling>, UserError>| r.unwrap_err().to_string();
        assert_eq!(
            err(siblings("try", 0, None, Path::new("/root"))),
            "invalid --count 0; hint: give 1 to 16 siblings"
        );
        assert_eq!(
            err(siblings("try", 17, None, Path::new("/root"))),
            "invalid --count 17; hint: give 1 to 16 siblings"
        );
        assert_eq!(
            err(siblings("Try", 1, None, Path::new("/root"))),
            "invalid box name 'Try'; hint: use 1-63 chars of a-z 0-9 . _ -, starting with a letter or digit"
        );
        // The numbered name is checked too: 63 characters leave no room for "-10".
        let long = "a".repeat(61);
        assert_eq!(
            err(siblings(&long, 10, None, Path::new("/root"))),
            format!(
                "invalid box name '{long}-10'; hint: use 1-63 chars of a-z 0-9 . _ -, starting with a letter or digit"
            )
        );
        for b in [
            "-f",
            "a..b",
            ".x",
            "x/.y",
            "x.lock",
            "x/",
            "a b",
            "x\u{1b}[2J",
            "",
        ] {
            assert!(branch_refusal(b).is_some(), "{b:?}");
            assert!(
                err(siblings("try", 1, Some(b), Path::new("/root")))
                    .starts_with("invalid branch name '"),
                "{b:?}"
            );
        }
        assert_eq!(
            err(siblings("try", 1, Some("x\u{1b}[2J"), Path::new("/root"))),
            "invalid branch name 'x\\x1b[2J': only letters, digits and . _ - /; hint: use letters, digits and . _ - /, e.g. --branch try-cache"
        );
        for b in ["main", "feat/x-1", "v1.2_rc"] {
            assert_eq!(branch_refusal(b), None, "{b}");
        }
    }

    #[test]
    fn an_agent_home_renames_the_dirs_named_for_the_project() {
        let gemini = |p: &str| {
            slices::gemini_hash_dir(Path::new(""), Path::new(p))
                .display()
                .to_string()
        };
        assert_eq!(
            renamed_for(Path::new("/root/app"), Path::new("/root/app-2")),
            vec![
                (
                    PathBuf::from(".claude/projects/-root-app"),
                    PathBuf::from(".claude/projects/-root-app-2")
                ),
                (
                    PathBuf::from(".grok/sessions/%2Froot%2Fapp"),
                    PathBuf::from(".grok/sessions/%2Froot%2Fapp-2")
                ),
                (
                    PathBuf::from(gemini("/root/app")),
                    PathBuf::from(gemini("/root/app-2"))
                ),
            ]
        );
    }

    #[test]
    fn a_codex_rollout_of_the_project_names_the_new_one() {
        let line = "{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"1\",\"cwd\":\"/root/app\",\"x\":[1]}}\n";
        assert_eq!(
            codex_meta_for(line, Path::new("/root/app"), Path::new("/root/app-2")).as_deref(),
            Some(
                "{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"1\",\"cwd\":\"/root/app-2\",\"x\":[1]}}\n"
            )
        );
        // Another project's, or no session_meta: left alone.
        assert_eq!(
            codex_meta_for(line, Path::new("/root/other"), Path::new("/root/app-2")),
            None
        );
        assert_eq!(
            codex_meta_for(
                "{\"type\":\"response_item\",\"payload\":{\"cwd\":\"/root/app\"}}",
                Path::new("/root/app"),
                Path::new("/root/app-2")
            ),
            None
        );
    }
}
