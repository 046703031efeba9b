//! `BOX_NOTIFY`: where a box's agent state changes are pushed (docs/reference.md "Push"), and
//! what is sent. Pure: the watcher (`commands::watch`) decides with [`due`] and sends with
//! `sys::notify`.

use std::path::PathBuf;

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

/// At most one notification per box in this many seconds.
pub(crate) const MIN_GAP_SECS: u64 = 10;

/// Is `now` worth a notification, after `before` (the state last seen) and the last one sent
/// (its state, at Unix seconds)? A question (a change into waiting), or a turn done (working
/// into idle: an agent at its prompt as the box starts did nothing), and not the same kind of
/// notice again within [`MIN_GAP_SECS`].
pub(crate) fn due(
    before: Option<&AgentState>,
    now: &AgentState,
    sent: Option<(State, u64)>,
) -> bool {
    let was = before.map(|b| b.state);
    let into = match now.state {
        State::Waiting => was != Some(State::Waiting),
        State::Idle => was == Some(State::Working),
        State::Working => false,
    };
    into && sent.is_none_or(|(state, at)| state != now.state || now.since >= at + MIN_GAP_SECS)
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
    fn a_question_or_a_turn_done_notifies_and_not_too_often() {
        use State::{Idle, Waiting, Working};
        let cases = [
            (None, at(Waiting, 100), None, true),
            (
                Some(at(Working, 90)),
                at(Waiting, 100),
                Some((Waiting, 50)),
                true,
            ),
            (Some(at(Waiting, 90)), at(Waiting, 100), None, false),
            (Some(at(Idle, 90)), at(Working, 100), None, false),
            // The agent at its prompt as the box starts: nothing to say.
            (None, at(Idle, 100), None, false),
            (Some(at(Idle, 90)), at(Waiting, 100), Some((Idle, 95)), true),
            (
                Some(at(Working, 90)),
                at(Idle, 100),
                Some((Idle, 95)),
                false,
            ),
            (
                Some(at(Working, 90)),
                at(Idle, 100),
                Some((Waiting, 95)),
                true,
            ),
            (Some(at(Working, 90)), at(Idle, 105), Some((Idle, 95)), true),
        ];
        let got: Vec<bool> = cases
            .iter()
            .map(|(b, n, s, _)| due(b.as_ref(), n, *s))
            .collect();
        let want: Vec<bool> = cases.iter().map(|c| c.3).collect();
        assert_eq!(got, want);
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
