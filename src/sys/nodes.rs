//! The other nodes, over ssh (openssh crate, one multiplexed connection per node).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use openssh::{KnownHosts, Session, SessionBuilder, Stdio};
use tokio::runtime::Runtime;

use crate::config::NodeEntry;
use crate::plan::schedule::{Candidate, ProbeReply, Reach};
use crate::sys::cmd;

pub(crate) const PROBE_SUBCOMMAND: &str = "__probe";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Open connections, reused from probing to the remote `up`.
pub(crate) struct Nodes {
    rt: Runtime,
    sessions: HashMap<String, Session>,
}

async fn connect(alias: &str) -> Result<Session> {
    SessionBuilder::default()
        .known_hosts_check(KnownHosts::Strict)
        .connect_timeout(CONNECT_TIMEOUT)
        .connect(alias)
        .await
        .with_context(|| format!("ssh {alias}"))
}

async fn probe(session: &Session) -> Result<ProbeReply> {
    let out = tokio::time::timeout(
        PROBE_TIMEOUT,
        session.command("ag-box").arg(PROBE_SUBCOMMAND).output(),
    )
    .await
    .context("probe timed out")??;
    if !out.status.success() {
        anyhow::bail!(
            "ag-box {PROBE_SUBCOMMAND} exited with {}: {}",
            cmd::exit_code(out.status),
            cmd::last_line(&String::from_utf8_lossy(&out.stderr))
        );
    }
    serde_json::from_slice(&out.stdout).context("parsing the probe reply")
}

impl Nodes {
    pub(crate) fn new() -> Result<Nodes> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(Nodes {
            rt,
            sessions: HashMap::new(),
        })
    }

    /// Probe every remote node in parallel; `local` answers for this node.
    pub(crate) fn probe_all(&mut self, entries: &[NodeEntry], local: ProbeReply) -> Vec<Candidate> {
        let remotes: Vec<(String, String)> = entries
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.ssh_alias.clone()?)))
            .collect();
        let mut results = self.rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (node, alias) in remotes {
                set.spawn(async move {
                    let reply = async {
                        let session = connect(&alias).await?;
                        let reply = probe(&session).await?;
                        Ok::<_, anyhow::Error>((session, reply))
                    }
                    .await;
                    (node, reply)
                });
            }
            let mut done = Vec::new();
            while let Some(joined) = set.join_next().await {
                if let Ok(r) = joined {
                    done.push(r);
                }
            }
            done
        });
        results.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = vec![Candidate {
            node: local.node.clone(),
            reach: Reach::Answered(local),
        }];
        for (node, result) in results {
            let reach = match result {
                Ok((session, reply)) if reply.node == node => {
                    self.sessions.insert(node.clone(), session);
                    Reach::Answered(reply)
                }
                Ok((_, reply)) => Reach::Failed(format!(
                    "it calls itself '{}' (fix BOX_NODE there or the nodes file here)",
                    reply.node
                )),
                Err(e) => Reach::Failed(format!("{e:#}")),
            };
            out.push(Candidate { node, reach });
        }
        out
    }

    /// `ag-box up <name> --node <node>` on that node, its output streamed; returns its exit code.
    pub(crate) fn remote_up(&mut self, entry: &NodeEntry, name: &str, force: bool) -> Result<i32> {
        let mut args = vec!["up", name, "--node", &entry.name];
        if force {
            args.push("--force");
        }
        self.remote(entry, &args)
    }

    /// `ag-box <args>` on that node, its output streamed; returns its exit code.
    pub(crate) fn remote(&mut self, entry: &NodeEntry, args: &[&str]) -> Result<i32> {
        let alias = entry
            .ssh_alias
            .as_deref()
            .with_context(|| format!("node {} is this node", entry.name))?;
        self.rt.block_on(async {
            let session = match self.sessions.remove(&entry.name) {
                Some(s) => s,
                None => connect(alias).await?,
            };
            let status = session
                .command("ag-box")
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .status()
                .await
                .with_context(|| format!("running ag-box {} on {}", args.join(" "), entry.name))?;
            let _ = session.close().await;
            Ok(cmd::exit_code(status))
        })
    }
}
