//! `BOX_NOTIFY`: where a box's agent state changes are pushed (docs/reference.md "Push"), and
//! what is sent. Pure: the watcher (`commands::watch`) decides with [`due`] and sends with
//! `sys::notify`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::attention::{AgentState, State};

/// Where notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `http(s)://...`: a POST of the notice as JSON.
    Webhook(String),
    /// `ntfy:https://ntfy.sh/<topic>`: a POST of one line of text, the title in a header.
    Ntfy(String),
    /// `/path/to/program`: run with the notice as JSON on its stdin.
    Command(PathBuf),
}

/// `BOX_NOTIFY`'s value, or the hint for a bad one.
pub(crate) fn parse(value: &str) -> Result<Target, &'static str> {
    let is_url = |u: &str| u.starts_with("https://") || u.starts_with("http://");
    if let Some(url) = value.strip_prefix("ntfy:") {
        return if is_url(url) {
            Ok(Target::Ntfy(url.to_string()))
        } else {
            Err("ntfy: takes the topic's URL, e.g. ntfy:https://ntfy.sh/my-boxes")
        };
    }
    if is_url(value) {
        return Ok(Target::Webhook(value.to_string()));
    }
    if value.starts_with('/') {
        return Ok(Target::Command(value.into()));
    }
    Err("use an https:// webhook, ntfy:<topic URL>, or the absolute path of a program")
}

/// What one notification says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Notice {
    #[serde(rename = "box")]
    pub name: String,
    pub node: String,
    pub agent: String,
    pub state: State,
    /// Unix seconds.
    pub since: u64,
    /// The first line of the question or prompt, when there is one.
    pub question: Option<String>,
    /// What takes the operator there.
    pub attach: String,
}

impl Notice {
    pub(crate) fn of(name: &str, node: &str, s: &AgentState) -> Notice {
        Notice {
            name: name.to_string(),
            node: node.to_string(),
            agent: s.agent.clone(),
            state: s.state,
            since: s.since,
            question: s.detail.clone(),
            attach: format!("ag-box attach {name}"),
        }
    }

    /// ntfy's title and message.
    pub(crate) fn text(&self) -> (String, String) {
        let what = match self.state {
            State::Waiting => "waits for you",
            State::Idle => "is done",
            State::Working => "is working",
        };
        let title = format!("{} in {} {what}", self.agent, self.name);
        let body = match &self.question {
            Some(q) if self.state == State::Waiting => format!("{q} ({})", self.attach),
            _ => format!("on {} ({})", self.node, self.attach),
        };
        (title, body)
    }
}

/// The same kind of notice for one box at most once in this long.
pub(crate) const SAME_GAP: Duration = Duration::from_secs(10);
/// Any notice for one box at most once in this long.
pub(crate) const ANY_GAP: Duration = Duration::from_secs(3);

/// Is `now` news, after `before` (the state last seen)? A question (a change into waiting), or
/// a turn done: working into idle, or a new idle report (Codex reports nothing else). An agent
/// idle at its prompt as the box starts did nothing.
pub(crate) fn news(before: Option<&AgentState>, now: &AgentState) -> bool {
    match (before, now.state) {
        (Some(b), State::Waiting) => b.state != State::Waiting,
        (None, State::Waiting) => true,
        (Some(b), State::Idle) => {
            b.state == State::Working || (b.state == State::Idle && now.since > b.since)
        }
        (None, State::Idle) | (_, State::Working) => false,
    }
}

/// May a notice of `kind` go now, the last one sent being of its kind so long ago (the
/// watcher's own clock: a box sets the times in its state file, never this)? Held back, it
/// waits for the gap, not dropped.
pub(crate) fn may_send(last: Option<(State, Duration)>, kind: State) -> bool {
    last.is_none_or(|(was, ago)| ago >= ANY_GAP && (was != kind || ago >= SAME_GAP))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn at(state: State, since: u64) -> AgentState {
        AgentState {
            agent: "claude".into(),
            state,
            since,
            detail: None,
        }
    }

    #[test]
    fn targets_parse_and_a_bad_one_says_how() {
        assert_eq!(
            [
                "https://hooks.example/x",
                "http://127.0.0.1:9/h",
                "ntfy:https://ntfy.sh/boxes",
                "/usr/local/bin/tell"
            ]
            .map(parse),
            [
                Ok(Target::Webhook("https://hooks.example/x".into())),
                Ok(Target::Webhook("http://127.0.0.1:9/h".into())),
                Ok(Target::Ntfy("https://ntfy.sh/boxes".into())),
                Ok(Target::Command("/usr/local/bin/tell".into())),
            ]
        );
        assert!(parse("ntfy:boxes").is_err());
        assert!(parse("tell").is_err());
        assert!(parse("ftp://x").is_err());
    }

    #[test]
    fn a_question_or_a_turn_done_is_news_and_notices_keep_their_distance() {
        use State::{Idle, Waiting, Working};
        let news_of: Vec<bool> = [
            (None, at(Waiting, 100)),
            (Some(at(Working, 90)), at(Waiting, 100)),
            (Some(at(Waiting, 90)), at(Waiting, 90)),
            (Some(at(Idle, 90)), at(Working, 100)),
            // The agent at its prompt as the box starts; the same idle again.
            (None, at(Idle, 100)),
            (Some(at(Idle, 100)), at(Idle, 100)),
            (Some(at(Working, 90)), at(Idle, 100)),
            // Codex's next turn done.
            (Some(at(Idle, 90)), at(Idle, 100)),
        ]
        .iter()
        .map(|(b, n)| news(b.as_ref(), n))
        .collect();
        assert_eq!(
            news_of,
            [true, true, false, false, false, false, true, true]
        );
        let secs = Duration::from_secs;
        let may: Vec<bool> = [
            (None, Waiting),
            (Some((Idle, secs(1))), Waiting),
            (Some((Idle, secs(4))), Waiting),
            (Some((Waiting, secs(4))), Waiting),
            (Some((Waiting, secs(11))), Waiting),
        ]
        .iter()
        .map(|(last, kind)| may_send(*last, *kind))
        .collect();
        assert_eq!(may, [true, false, true, false, true]);
    }

    #[test]
    fn a_notice_names_the_box_its_node_the_question_and_how_to_get_there() {
        let s = AgentState {
            detail: Some("Claude needs your permission to use Bash".into()),
            ..at(State::Waiting, 1_796_294_736)
        };
        let n = Notice::of("demo", "node-a", &s);
        assert_eq!(
            serde_json::to_value(&n).unwrap(),
            serde_json::json!({"box": "demo", "node": "node-a", "agent": "claude",
                "state": "waiting", "since": 1_796_294_736_u64,
                "question": "Claude needs your permission to use Bash",
                "attach": "ag-box attach demo"})
        );
        assert_eq!(
            n.text(),
            (
                "claude in demo waits for you".to_string(),
                "Claude needs your permission to use Bash (ag-box attach demo)".to_string()
            )
        );
    }
}
