//! Which agent session files move with a box (docs/design.md "Agent session slices").

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const MAX_SLUG: usize = 200;

/// Claude Code's project directory name: every non-alphanumeric UTF-16 unit becomes `-`;
/// past 200 units, the first 200 plus `-` and a base36 hash of the original path.
pub(crate) fn claude_slug(project: &Path) -> String {
    let raw = project.to_string_lossy();
    let units: Vec<u16> = raw.encode_utf16().collect();
    let slug: String = units
        .iter()
        .map(|&u| match char::from_u32(u32::from(u)) {
            Some(c) if c.is_ascii_alphanumeric() => c,
            _ => '-',
        })
        .collect();
    if units.len() <= MAX_SLUG {
        return slug;
    }
    let mut h: i32 = 0;
    for &u in &units {
        h = h.wrapping_shl(5).wrapping_sub(h).wrapping_add(i32::from(u));
    }
    format!("{}-{}", &slug[..MAX_SLUG], base36(h.unsigned_abs()))
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

/// `~/.claude/projects/<slug>`: the transcripts `claude --resume` needs.
pub(crate) fn claude_project_dir(home: &Path, project: &Path) -> PathBuf {
    home.join(".claude/projects").join(claude_slug(project))
}

/// Per-session Claude dirs kept beside the transcripts, for the given session ids.
pub(crate) fn claude_session_dirs(home: &Path, session_ids: &[String]) -> Vec<PathBuf> {
    let claude = home.join(".claude");
    session_ids
        .iter()
        .flat_map(|id| ["file-history", "session-env"].map(|d| claude.join(d).join(id)))
        .collect()
}

/// Codex: the `cwd` of a rollout file's first line (`session_meta`), if it is one.
pub(crate) fn codex_rollout_cwd(first_line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(first_line).ok()?;
    if v.get("type")?.as_str()? != "session_meta" {
        return None;
    }
    Some(v.get("payload")?.get("cwd")?.as_str()?.to_string())
}

/// Codex keeps rollouts under `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`.
pub(crate) fn codex_sessions_root(home: &Path) -> PathBuf {
    home.join(".codex/sessions")
}

pub(crate) fn is_codex_rollout(file_name: &str) -> bool {
    // Codex names them itself, always in lower case.
    #[allow(clippy::case_sensitive_file_extension_comparisons)]
    let rollout = file_name.starts_with("rollout-") && file_name.ends_with(".jsonl");
    rollout
}

/// Grok: `~/.grok/sessions/<percent-encoded cwd>/` (JavaScript's encodeURIComponent).
pub(crate) fn grok_session_dir(home: &Path, project: &Path) -> PathBuf {
    let mut enc = String::new();
    for b in project.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            enc.push(char::from(b));
        } else {
            let _ = write!(enc, "%{b:02X}");
        }
    }
    home.join(".grok/sessions").join(enc)
}

/// Gemini CLI, older layout: `~/.gemini/tmp/<sha256 of the project path>/`.
pub(crate) fn gemini_hash_dir(home: &Path, project: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(project.to_string_lossy().as_bytes());
    gemini_tmp(home).join(super::text::hex(&digest))
}

/// Gemini CLI, newer layout: `~/.gemini/tmp/<slug>/` holding a `.project_root` file with the path.
pub(crate) fn gemini_tmp(home: &Path) -> PathBuf {
    home.join(".gemini/tmp")
}

/// Session ids are the names of the `<id>.jsonl` transcripts in the project dir.
pub(crate) fn session_ids(transcript_names: &[String]) -> Vec<String> {
    let mut ids: Vec<String> = transcript_names
        .iter()
        .filter_map(|n| n.strip_suffix(".jsonl"))
        .filter(|id| !id.is_empty() && !id.contains('/') && !id.starts_with('.'))
        .map(str::to_owned)
        .collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn slug_replaces_every_non_alphanumeric() {
        assert_eq!(
            claude_slug(Path::new("/root/my_proj.v2")),
            "-root-my-proj-v2"
        );
        assert_eq!(claude_slug(Path::new("/home/a/文档 x")), "-home-a----x");
    }

    #[test]
    fn slug_of_long_path_is_truncated_with_hash() {
        let long = format!("/srv/{}", "d".repeat(230));
        let slug = claude_slug(Path::new(&long));
        let expected_prefix = format!("-srv-{}", "d".repeat(195));
        assert_eq!(&slug[..200], expected_prefix);
        // Hash of Claude Code's rule (int32 `h*31+c` over UTF-16 units, |h| in base36),
        // computed independently with node: Math.abs(h).toString(36).
        assert_eq!(slug, format!("{expected_prefix}-{}", "ljdou1"));
    }

    #[test]
    fn slug_of_exactly_200_units_is_not_hashed() {
        let p = format!("/{}", "x".repeat(199));
        assert_eq!(claude_slug(Path::new(&p)), format!("-{}", "x".repeat(199)));
    }

    #[test]
    fn codex_first_line() {
        let line = r#"{"timestamp":"2026-11-29T10:00:00Z","type":"session_meta","payload":{"id":"x","cwd":"/root/demo","cli_version":"0.60.0"}}"#;
        assert_eq!(codex_rollout_cwd(line), Some("/root/demo".into()));
        assert_eq!(
            codex_rollout_cwd(r#"{"type":"response_item","payload":{"cwd":"/root/demo"}}"#),
            None
        );
        assert_eq!(codex_rollout_cwd("garbage"), None);
        assert!(is_codex_rollout("rollout-2026-11-29T10-00-00-abc.jsonl"));
        assert!(!is_codex_rollout("history.jsonl"));
    }

    #[test]
    fn grok_and_gemini_dirs() {
        assert_eq!(
            grok_session_dir(Path::new("/root"), Path::new("/root/my proj_v2")),
            PathBuf::from("/root/.grok/sessions/%2Froot%2Fmy%20proj_v2")
        );
        // sha256("/root/demo"), computed with sha256sum
        assert_eq!(
            gemini_hash_dir(Path::new("/root"), Path::new("/root/demo")),
            PathBuf::from(
                "/root/.gemini/tmp/b116d8261891cdc2b47c9267d6b7ec944a8e80b1a13c128702a71cf76ac52a1a"
            )
        );
    }

    #[test]
    fn session_dirs_per_id() {
        let ids = session_ids(&["b.jsonl".into(), "a.jsonl".into(), "notes.txt".into()]);
        assert_eq!(ids, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(
            claude_session_dirs(Path::new("/root"), &ids[..1]),
            vec![
                PathBuf::from("/root/.claude/file-history/a"),
                PathBuf::from("/root/.claude/session-env/a"),
            ]
        );
    }
}
