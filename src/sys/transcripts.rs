//! The agents' transcripts in a box's agent home, read for `ag-box cost`: Claude Code's
//! `.claude/projects/**.jsonl` (subagents' included) and Codex's `.codex/sessions/**.jsonl`
//! (and those it archived, `.codex/archived_sessions/`).
//!
//! The box wrote them, so root reads them only through the home's handle (`box_tree::Tree`): no
//! link is followed anywhere on the way (a link at a dir or a file is skipped and named in a
//! warning; the rest is still counted), only regular files are read, each no further than its
//! size when opened, and a box's reading stops at [`Limits`] (files, bytes, lines, line length),
//! saying so. Every line goes to the pure parsers of `plan::cost`; one they cannot read is
//! skipped.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::plan::cost::{CodexRollout, Entry, claude_line};
use crate::plan::text::escaped;
use crate::sys::box_tree::{Kind, Tree};

/// How much of one box's agent home is read at most.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Files read, and entries looked at in any one dir.
    pub files: usize,
    /// Entries looked at, all dirs together.
    pub entries: usize,
    /// Bytes read, all files together.
    pub bytes: u64,
    /// Lines read, all files together.
    pub lines: u64,
    /// The longest line parsed (a longer one is skipped).
    pub line_len: usize,
    /// Dirs below `.claude/projects` or `.codex/sessions` (`<slug>/<session>/subagents`,
    /// `YYYY/MM/DD`).
    pub depth: usize,
}

pub(crate) const LIMITS: Limits = Limits {
    files: 20_000,
    entries: 200_000,
    bytes: 4 << 30,
    lines: 4_000_000,
    line_len: 16 << 20,
    depth: 4,
};

/// Where each agent keeps its transcripts in the agent home.
const CLAUDE: &str = ".claude/projects";
const CODEX: &str = ".codex/sessions";
/// Where Codex moves a session archived (`/archive`, `codex archive`).
const CODEX_ARCHIVED: &str = ".codex/archived_sessions";

/// What was left out of a box's reading.
#[derive(Debug, Default)]
struct Skipped {
    links: Vec<PathBuf>,
    /// Files of another owner with other names elsewhere (hard links to what is not the box's).
    linked: Vec<PathBuf>,
    unreadable: Vec<String>,
    long_lines: u64,
    capped: Option<String>,
}

struct Reader<'a> {
    tree: &'a Tree,
    /// The box user, who owns the agent home.
    owner: u32,
    limits: Limits,
    entries: usize,
    files: usize,
    bytes: u64,
    lines: u64,
    skipped: Skipped,
}

impl Reader<'_> {
    /// The `.jsonl` files below `top`, sorted, no link followed.
    fn files_below(&mut self, top: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut dirs = vec![(top.to_path_buf(), 0_usize)];
        while let Some((dir, depth)) = dirs.pop() {
            let (mut entries, more) = match self.tree.entries(&dir, self.limits.files) {
                Ok(e) => e,
                Err(e) => {
                    match self.tree.kind(&dir) {
                        // No such dir (an agent never ran here).
                        Ok(None) => {}
                        Ok(Some(Kind::Link)) => self.skipped.links.push(dir),
                        _ => self.unreadable(&dir, &e),
                    }
                    continue;
                }
            };
            if more {
                self.cap(format!(
                    "{} holds more than {} entries",
                    escaped(&dir.to_string_lossy()),
                    self.limits.files
                ));
            }
            self.entries += entries.len();
            if self.entries > self.limits.entries {
                self.cap(format!("more than {} entries", self.limits.entries));
                break;
            }
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, kind) in entries {
                let rel = dir.join(&name);
                match kind {
                    Kind::Link => self.skipped.links.push(rel),
                    Kind::Dir if depth < self.limits.depth => dirs.push((rel, depth + 1)),
                    Kind::File if is_jsonl(&name) => out.push(rel),
                    _ => {}
                }
            }
        }
        out.sort();
        out
    }

    fn unreadable(&mut self, rel: &Path, e: &anyhow::Error) {
        self.skipped
            .unreadable
            .push(format!("{}: {e:#}", escaped(&rel.to_string_lossy())));
    }

    fn cap(&mut self, why: String) {
        if self.skipped.capped.is_none() {
            self.skipped.capped = Some(why);
        }
    }

    /// Each line of the file at `rel` (as UTF-8; others skipped), within the limits; false
    /// once a limit is reached.
    fn each_line(&mut self, rel: &Path, mut f: impl FnMut(&str)) -> bool {
        if self.files >= self.limits.files {
            self.cap(format!("more than {} transcript files", self.limits.files));
            return false;
        }
        self.files += 1;
        let (file, st) = match self.tree.open_file(rel) {
            Ok(Some(opened)) => opened,
            Ok(None) => return true,
            Err(e) => {
                if self.tree.kind(rel).ok().flatten() == Some(Kind::Link) {
                    self.skipped.links.push(rel.to_path_buf());
                } else {
                    self.unreadable(rel, &e);
                }
                return true;
            }
        };
        if st.st_nlink > 1 && st.st_uid != self.owner {
            self.skipped.linked.push(rel.to_path_buf());
            return true;
        }
        let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
        let left = self.limits.bytes.saturating_sub(self.bytes);
        // No further than the file's size when opened: a file the box keeps writing ends.
        let mut input = BufReader::new(file.take(size.min(left)));
        let mut line = Vec::new();
        loop {
            if self.lines >= self.limits.lines {
                self.cap(format!("more than {} lines", self.limits.lines));
                return false;
            }
            line.clear();
            let (read, whole) = match read_line(&mut input, &mut line, self.limits.line_len) {
                Ok(r) => r,
                Err(e) => {
                    self.unreadable(rel, &anyhow::Error::from(e));
                    return true;
                }
            };
            if read == 0 {
                break;
            }
            self.bytes += read as u64;
            self.lines += 1;
            if !whole {
                self.skipped.long_lines += 1;
            } else if let Ok(text) = std::str::from_utf8(&line) {
                f(text);
            }
        }
        if size > left {
            self.cap(format!("more than {} bytes", self.limits.bytes));
            return false;
        }
        true
    }
}

/// One line into `line` (without its newline), reading `input` to its next newline however
/// long the line is but keeping at most `max` bytes: (bytes read, whether the line was kept
/// whole).
fn read_line(
    input: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<(usize, bool)> {
    let mut read = 0;
    let mut whole = true;
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok((read, whole));
        }
        let (part, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (&buf[..at], at + 1),
            None => (buf, buf.len()),
        };
        if whole && line.len() + part.len() <= max {
            line.extend_from_slice(part);
        } else {
            whole = false;
            line.clear();
        }
        let ended = done > part.len();
        input.consume(done);
        read += done;
        if ended {
            return Ok((read, whole));
        }
    }
}

fn is_jsonl(name: &OsString) -> bool {
    Path::new(name).extension().is_some_and(|e| e == "jsonl")
}

/// Hand every response of every transcript in the agent home at `root` to `add` (a `Tally`, or
/// `Intervals`); what could not be read comes back as warnings (`box '<name>': ...`).
pub(crate) fn read(
    name: &str,
    root: &Path,
    limits: Limits,
    add: &mut dyn FnMut(Entry),
) -> Result<Vec<String>> {
    let tree = Tree::open(root)?;
    let mut r = Reader {
        tree: &tree,
        owner: tree.owner()?,
        limits,
        entries: 0,
        files: 0,
        bytes: 0,
        lines: 0,
        skipped: Skipped::default(),
    };
    'agents: for (top, claude) in [(CLAUDE, true), (CODEX, false), (CODEX_ARCHIVED, false)] {
        for file in r.files_below(Path::new(top)) {
            let mut rollout = CodexRollout::default();
            let went_on = r.each_line(&file, |line| {
                let entry = if claude {
                    claude_line(line)
                } else {
                    rollout.line(line)
                };
                if let Some(e) = entry {
                    add(e);
                }
            });
            if !went_on {
                break 'agents;
            }
        }
    }
    Ok(warnings(name, &r.skipped, &limits))
}

fn warnings(name: &str, s: &Skipped, limits: &Limits) -> Vec<String> {
    let mut out = Vec::new();
    if !s.links.is_empty() {
        let shown: Vec<String> = s
            .links
            .iter()
            .take(5)
            .map(|p| escaped(&p.to_string_lossy()))
            .collect();
        out.push(format!(
            "box '{name}': {} not followed (a box's links are never read): {}{}",
            crate::plan::text::count(s.links.len(), "link"),
            shown.join(", "),
            if s.links.len() > 5 { ", ..." } else { "" }
        ));
    }
    if !s.linked.is_empty() {
        let shown: Vec<String> = s
            .linked
            .iter()
            .take(5)
            .map(|p| escaped(&p.to_string_lossy()))
            .collect();
        out.push(format!(
            "box '{name}': skipped {} of another owner with other names elsewhere: {}",
            crate::plan::text::count(s.linked.len(), "file"),
            shown.join(", ")
        ));
    }
    for u in s.unreadable.iter().take(5) {
        out.push(format!("box '{name}': skipped {u}"));
    }
    if s.long_lines > 0 {
        out.push(format!(
            "box '{name}': skipped {} longer than {} MiB",
            crate::plan::text::count(usize::try_from(s.long_lines).unwrap_or(usize::MAX), "line"),
            limits.line_len >> 20
        ));
    }
    if let Some(why) = &s.capped {
        out.push(format!(
            "box '{name}': stopped reading its transcripts at {why}: its counts are partial"
        ));
    }
    out
}

/// The boxes with an agent home on this node (`<state>/homes/<name>`, root's dir: its
/// entries are named by box name), sorted.
pub(crate) fn boxes_here(homes: &Path) -> Result<Vec<crate::plan::names::BoxName>> {
    let entries = match std::fs::read_dir(homes) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => {
            return Err(anyhow::Error::from(e).context(format!("listing {}", homes.display())));
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // `.<name>.new` and `.<name>.dropped-<time>` are no box's home; no link is one.
        if entry.file_type()?.is_dir()
            && let Ok(b) = crate::plan::names::BoxName::new(name)
        {
            out.push(b);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::cost::Tally;
    use crate::plan::cost::{Agent, Counted, Usage};
    use pretty_assertions::assert_eq;
    use std::fs;
    use std::os::unix::fs::symlink;

    const BOX_UID: u32 = 2_000_000_123;

    fn base() -> tempfile::TempDir {
        fs::create_dir_all(crate::UNIT_TEST_DIR).unwrap();
        tempfile::tempdir_in(crate::UNIT_TEST_DIR).unwrap()
    }

    fn line(request: &str, model: &str, input: u64) -> String {
        serde_json::json!({
            "type": "assistant", "requestId": request, "timestamp": "2026-12-03T09:00:00Z",
            "message": {"model": model, "usage": {"input_tokens": input, "output_tokens": 1}}
        })
        .to_string()
            + "\n"
    }

    /// An agent home with a session, a subagent's and a Codex rollout, and beside it a
    /// root-only dir of the host's with a transcript that would count 1,000,000 tokens.
    fn home() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = base();
        let root = d.path().join("homes/demo");
        let slug = root.join(".claude/projects/-root-demo");
        fs::create_dir_all(slug.join("s1/subagents")).unwrap();
        fs::write(
            slug.join("s1.jsonl"),
            line("r1", "claude-opus-4-8", 10) + &line("r1", "claude-opus-4-8", 10),
        )
        .unwrap();
        fs::write(
            slug.join("s1/subagents/agent-1.jsonl"),
            line("r2", "claude-haiku-4-5", 20),
        )
        .unwrap();
        let day = root.join(".codex/sessions/2026/12/03");
        fs::create_dir_all(&day).unwrap();
        fs::write(
            day.join("rollout-1.jsonl"),
            concat!(
                r#"{"type":"turn_context","payload":{"model":"gpt-5-codex"}}"#, "\n",
                r#"{"timestamp":"2026-12-03T09:00:00Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":7}}}}"#, "\n",
            ),
        )
        .unwrap();
        let archived = root.join(".codex/archived_sessions");
        fs::create_dir_all(&archived).unwrap();
        fs::write(
            archived.join("rollout-0.jsonl"),
            concat!(
                r#"{"type":"turn_context","payload":{"model":"gpt-5-codex"}}"#, "\n",
                r#"{"timestamp":"2026-12-02T09:00:00Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":3,"cached_input_tokens":0,"output_tokens":2}}}}"#, "\n",
            ),
        )
        .unwrap();
        let host = d.path().join("host");
        fs::create_dir_all(host.join("dir")).unwrap();
        fs::write(
            host.join("secret.jsonl"),
            line("secret", "claude-opus-4-8", 1_000_000),
        )
        .unwrap();
        fs::write(
            host.join("dir/secret.jsonl"),
            line("secret", "claude-opus-4-8", 1_000_000),
        )
        .unwrap();
        for p in [&host, &host.join("dir")] {
            fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        }
        (d, root, host)
    }

    type Rows = Vec<((Agent, String), Counted)>;

    fn counted(root: &Path, limits: Limits) -> (Rows, Vec<String>) {
        let mut t = Tally::new(None);
        let w = read("demo", root, limits, &mut |e| t.add(e)).unwrap();
        (t.rows().iter().map(|(k, c)| (k.clone(), *c)).collect(), w)
    }

    fn row(
        agent: Agent,
        model: &str,
        requests: u64,
        input: u64,
        output: u64,
        cache_read: u64,
    ) -> ((Agent, String), Counted) {
        (
            (agent, model.to_string()),
            Counted {
                requests,
                usage: Usage {
                    input,
                    output,
                    cache_write: 0,
                    cache_read,
                },
            },
        )
    }

    fn expected() -> Rows {
        vec![
            row(Agent::ClaudeCode, "claude-haiku-4-5", 1, 20, 1, 0),
            row(Agent::ClaudeCode, "claude-opus-4-8", 1, 10, 1, 0),
            row(Agent::Codex, "gpt-5-codex", 2, 63, 9, 40),
        ]
    }

    #[test]
    fn every_session_subagent_and_rollout_counts() {
        let (_d, root, _host) = home();
        assert_eq!(counted(&root, LIMITS), (expected(), vec![]));
    }

    /// The attack: links the box planted at a transcript's path and at a dir's, to a
    /// root-only transcript of the host's. Not followed; the rest still counts.
    #[test]
    fn a_planted_link_at_a_file_or_a_dir_is_never_followed() {
        let (_d, root, host) = home();
        let slug = root.join(".claude/projects/-root-demo");
        symlink(host.join("secret.jsonl"), slug.join("planted.jsonl")).unwrap();
        symlink(host.join("dir"), slug.join("s2")).unwrap();
        symlink(host.join("dir"), root.join(".codex/sessions/2026/11")).unwrap();
        // The links are there, and what they name would count if they were followed.
        assert!(
            fs::symlink_metadata(slug.join("planted.jsonl"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let through = fs::read_to_string(slug.join("s2/secret.jsonl")).unwrap();
        let mut would = Tally::new(None);
        would.add(claude_line(through.trim()).unwrap());
        assert_eq!(would.rows().values().next().unwrap().usage.input, 1_000_000);
        let (rows, warnings) = counted(&root, LIMITS);
        assert_eq!(rows, expected());
        assert_eq!(
            warnings,
            [
                "box 'demo': 3 links not followed (a box's links are never read): \
                 .claude/projects/-root-demo/planted.jsonl, .claude/projects/-root-demo/s2, \
                 .codex/sessions/2026/11"
            ]
        );
        // The agent's own dir swapped for a link, and a dir above it: skipped as well.
        fs::remove_dir_all(root.join(".codex/sessions")).unwrap();
        symlink(host.join("dir"), root.join(".codex/sessions")).unwrap();
        let (rows, warnings) = counted(&root, LIMITS);
        let archived = row(Agent::Codex, "gpt-5-codex", 1, 3, 2, 0);
        let mut want = expected()[..2].to_vec();
        want.push(archived.clone());
        assert_eq!(rows, want);
        assert_eq!(
            warnings,
            [
                "box 'demo': 3 links not followed (a box's links are never read): \
                 .claude/projects/-root-demo/planted.jsonl, .claude/projects/-root-demo/s2, \
                 .codex/sessions"
            ]
        );
        fs::remove_file(root.join(".codex/sessions")).unwrap();
        fs::rename(root.join(".claude"), root.join("claude")).unwrap();
        symlink(root.join("claude"), root.join(".claude")).unwrap();
        let (rows, warnings) = counted(&root, LIMITS);
        assert_eq!(rows, [archived]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("box 'demo': skipped .claude/projects: opening "),
            "{warnings:?}"
        );
    }

    /// A hard link the box made to a file of another owner (where the kernel lets it) is not
    /// read; the box's own files are, whatever their links.
    #[test]
    fn a_file_of_another_owner_with_other_names_is_not_read() {
        let (d, root, _host) = home();
        let theirs = d.path().join("theirs.jsonl");
        fs::write(&theirs, line("secret", "claude-opus-4-8", 1_000_000)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(0), Some(0)).unwrap();
        std::os::unix::fs::chown(&root, Some(BOX_UID), Some(BOX_UID)).unwrap();
        let slug = root.join(".claude/projects/-root-demo");
        fs::hard_link(&theirs, slug.join("linked.jsonl")).unwrap();
        let own = slug.join("s1.jsonl");
        std::os::unix::fs::chown(&own, Some(BOX_UID), Some(BOX_UID)).unwrap();
        fs::hard_link(&own, slug.join("again.jsonl")).unwrap();
        let (rows, warnings) = counted(&root, LIMITS);
        assert_eq!(rows, expected());
        assert_eq!(
            warnings,
            [
                "box 'demo': skipped 1 file of another owner with other names elsewhere: \
                 .claude/projects/-root-demo/linked.jsonl"
            ]
        );
    }

    #[test]
    fn a_tree_of_many_dirs_is_walked_no_further_than_the_entries_allowed() {
        let (_d, root, _host) = home();
        let slug = root.join(".claude/projects/-root-demo");
        for i in 0..30 {
            fs::create_dir_all(slug.join(format!("x{i}/y/z"))).unwrap();
        }
        let (_, warnings) = counted(
            &root,
            Limits {
                entries: 40,
                ..LIMITS
            },
        );
        assert_eq!(
            warnings,
            [
                "box 'demo': stopped reading its transcripts at more than 40 entries: its counts are partial"
            ]
        );
    }

    #[test]
    fn a_huge_file_is_read_no_further_than_the_limits_and_says_so() {
        let (_d, root, _host) = home();
        let slug = root.join(".claude/projects/-root-demo");
        // 64 MiB without a newline, then a line that counts, then more lines than allowed.
        let mut big = vec![b'x'; 64 << 20];
        big.push(b'\n');
        big.extend_from_slice(line("r9", "m", 5).as_bytes());
        fs::write(slug.join("a-big.jsonl"), &big).unwrap();
        let limits = Limits {
            line_len: 1 << 20,
            ..LIMITS
        };
        let (rows, warnings) = counted(&root, limits);
        let mut want = expected();
        want.insert(2, row(Agent::ClaudeCode, "m", 1, 5, 1, 0));
        assert_eq!(rows, want);
        assert_eq!(warnings, ["box 'demo': skipped 1 line longer than 1 MiB"]);
        // A budget of bytes the big file exhausts: it stops there, and says so.
        let (rows, warnings) = counted(
            &root,
            Limits {
                bytes: 1 << 20,
                ..limits
            },
        );
        assert_eq!(rows, vec![]);
        assert_eq!(
            warnings.last().unwrap(),
            &format!(
                "box 'demo': stopped reading its transcripts at more than {} bytes: its counts are partial",
                1 << 20
            )
        );
        // Few lines, few files.
        let (_, warnings) = counted(&root, Limits { lines: 2, ..limits });
        assert!(
            warnings.last().unwrap().contains("at more than 2 lines"),
            "{warnings:?}"
        );
        let (rows, warnings) = counted(&root, Limits { files: 1, ..limits });
        assert!(
            warnings.last().unwrap().contains("more than 1 entries"),
            "{warnings:?}"
        );
        assert!(rows.len() <= 1, "{rows:?}");
    }

    #[test]
    fn lines_are_split_and_overlong_ones_skipped_whole() {
        let text = b"ab\n\ncdefgh\nij";
        let mut input = BufReader::with_capacity(2, &text[..]);
        let mut got = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            let (n, whole) = read_line(&mut input, &mut line, 3).unwrap();
            if n == 0 {
                break;
            }
            got.push((n, whole, String::from_utf8(line.clone()).unwrap()));
        }
        assert_eq!(
            got,
            [
                (3, true, "ab".to_string()),
                (1, true, String::new()),
                (7, false, String::new()),
                (2, true, "ij".to_string()),
            ]
        );
    }

    #[test]
    fn boxes_here_are_the_homes_named_as_boxes() {
        let d = base();
        let homes = d.path().join("homes");
        for n in ["b", "a", ".c.new", ".d.dropped-2026", "Bad"] {
            fs::create_dir_all(homes.join(n)).unwrap();
        }
        fs::write(homes.join("file"), "").unwrap();
        symlink(homes.join("a"), homes.join("link")).unwrap();
        let names: Vec<String> = boxes_here(&homes)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(boxes_here(&d.path().join("none")).unwrap(), vec![]);
    }
}
