//! Which node `up` starts a box on, from the nodes' probe replies.

use serde::{Deserialize, Serialize};

/// What `ag-box __probe` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProbeReply {
    pub node: String,
    pub version: String,
    pub mem_available_kb: u64,
    pub active_boxes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    Answered(ProbeReply),
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub node: String,
    pub reach: Reach,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Choice {
    pub node: String,
    /// One line per node left out, for the operator.
    pub skipped: Vec<String>,
}

/// The answering node of our version with the most `MemAvailable`; ties go to `local`, then by name.
pub(crate) fn choose(
    candidates: &[Candidate],
    version: &str,
    local: &str,
) -> Result<Choice, String> {
    let mut skipped = Vec::new();
    let mut eligible: Vec<&ProbeReply> = Vec::new();
    for c in candidates {
        match &c.reach {
            Reach::Failed(e) => skipped.push(format!("node {} is unreachable, skipped: {e}", c.node)),
            Reach::Answered(r) if r.version != version => skipped.push(format!(
                "node {} runs ag-box {}, this is {version}: refused (install the same version on every node)",
                c.node, r.version
            )),
            Reach::Answered(r) => eligible.push(r),
        }
    }
    let best = eligible.into_iter().max_by(|a, b| {
        a.mem_available_kb
            .cmp(&b.mem_available_kb)
            .then_with(|| (a.node == local).cmp(&(b.node == local)))
            .then_with(|| b.node.cmp(&a.node))
    });
    match best {
        Some(r) => Ok(Choice {
            node: r.node.clone(),
            skipped,
        }),
        None => Err(if skipped.is_empty() {
            "no nodes to choose from".to_string()
        } else {
            skipped.join("; ")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn up(node: &str, version: &str, mem: u64) -> Candidate {
        Candidate {
            node: node.into(),
            reach: Reach::Answered(ProbeReply {
                node: node.into(),
                version: version.into(),
                mem_available_kb: mem,
                active_boxes: vec![],
            }),
        }
    }

    fn down(node: &str) -> Candidate {
        Candidate {
            node: node.into(),
            reach: Reach::Failed("connection refused".into()),
        }
    }

    #[test]
    fn most_memory_wins() {
        let got = choose(
            &[up("a", "1", 100), up("b", "1", 300), up("c", "1", 200)],
            "1",
            "a",
        );
        assert_eq!(
            got,
            Ok(Choice {
                node: "b".into(),
                skipped: vec![]
            })
        );
    }

    #[test]
    fn ties_prefer_this_node_then_the_first_name() {
        assert_eq!(
            choose(&[up("a", "1", 5), up("b", "1", 5)], "1", "b")
                .unwrap()
                .node,
            "b"
        );
        assert_eq!(
            choose(&[up("c", "1", 5), up("b", "1", 5)], "1", "a")
                .unwrap()
                .node,
            "b"
        );
    }

    #[test]
    fn unreachable_nodes_are_skipped_with_a_warning() {
        let got = choose(&[down("a"), up("b", "1", 1)], "1", "a");
        assert_eq!(
            got,
            Ok(Choice {
                node: "b".into(),
                skipped: vec!["node a is unreachable, skipped: connection refused".into()],
            })
        );
    }

    #[test]
    fn other_versions_are_refused() {
        let got = choose(&[up("a", "2", 900), up("b", "1", 1)], "1", "b");
        assert_eq!(
            got,
            Ok(Choice {
                node: "b".into(),
                skipped: vec![
                    "node a runs ag-box 2, this is 1: refused (install the same version on every node)".into()
                ],
            })
        );
    }

    #[test]
    fn nothing_eligible_is_an_error_naming_why() {
        assert_eq!(
            choose(&[down("a")], "1", "a"),
            Err("node a is unreachable, skipped: connection refused".into())
        );
        assert_eq!(choose(&[], "1", "a"), Err("no nodes to choose from".into()));
    }
}
