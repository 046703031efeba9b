//! The other nodes, over ssh: every way ag-box reaches another node goes through here.
//! - Probes, remote `up`, doctor's checks: one multiplexed connection per node (openssh crate),
//!   in batch mode: nothing prompts.
//! - A command a person types into (an attach or interactive exec followed to another node):
//!   the `ssh` binary itself, with the caller's terminal, so a passphrase, password or host-key
//!   question is asked as `ssh` asks it (openssh's master is batch-only and gives no terminal).

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
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(20);

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

/// `sh` on the other end runs `script`; its stdout, or the last line of why not.
async fn run_script(alias: &str, script: &str) -> Result<String, String> {
    let session = connect(alias).await.map_err(|e| format!("{e:#}"))?;
    let out = tokio::time::timeout(SCRIPT_TIMEOUT, session.raw_command(script).output())
        .await
        .map_err(|_| "timed out".to_string())
        .and_then(|r| r.map_err(|e| format!("{e:#}")));
    let _ = session.close().await;
    let out = out?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(cmd::last_line(&String::from_utf8_lossy(&out.stderr)).to_string())
    }
}

/// `ssh` running `ag-box <args>` on `alias`; `tty`: with a terminal (an attach, an interactive
/// exec). The remote shell reads one string, so every argument is quoted for it.
pub(crate) fn terminal_argv(alias: &str, tty: bool, args: &[&str]) -> Vec<String> {
    let remote: Vec<String> = std::iter::once("ag-box")
        .chain(args.iter().copied())
        .map(quote)
        .collect();
    vec![
        "ssh".into(),
        if tty { "-t" } else { "-T" }.into(),
        "-o".into(),
        "ConnectTimeout=10".into(),
        alias.into(),
        "--".into(),
        remote.join(" "),
    ]
}

fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// `ag-box <args>` on the node at `alias`, with this process's terminal (`tty`) or its
/// standard streams; returns its exit code.
pub(crate) fn on_terminal(alias: &str, tty: bool, args: &[&str]) -> Result<i32> {
    let ssh = terminal_argv(alias, tty, args);
    let status = std::process::Command::new(&ssh[0])
        .args(&ssh[1..])
        .status()
        .with_context(|| format!("running ssh {alias}"))?;
    Ok(cmd::exit_code(status))
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

    /// `ag-box up <name> --node <node> [flags]` on that node, its output streamed; returns its
    /// exit code.
    pub(crate) fn remote_up(
        &mut self,
        entry: &NodeEntry,
        name: &str,
        flags: &[&str],
    ) -> Result<i32> {
        let mut args = vec!["up", name, "--node", &entry.name];
        args.extend(flags);
        self.remote(entry, &args)
    }

    /// `script` run by the shell of every (node, alias) of `peers`, all at once.
    pub(crate) fn script_all(
        &self,
        peers: &[(&str, &str)],
        script: &str,
    ) -> Vec<(String, Result<String, String>)> {
        self.rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (node, alias) in peers {
                let (node, alias, script) =
                    (node.to_string(), alias.to_string(), script.to_string());
                set.spawn(async move { (node, run_script(&alias, &script).await) });
            }
            let mut done = Vec::new();
            while let Some(joined) = set.join_next().await {
                if let Ok(r) = joined {
                    done.push(r);
                }
            }
            done.sort_by(|a, b| a.0.cmp(&b.0));
            done
        })
    }

    /// `ag-box <args>` on that node, its output streamed; returns its exit code.
    pub(crate) fn remote(&mut self, entry: &NodeEntry, args: &[&str]) -> Result<i32> {
        self.run_remote(entry, args, false).map(|(code, _)| code)
    }

    /// `ag-box <args>` on that node, its stderr streamed; its exit code and its stdout.
    pub(crate) fn captured(&mut self, entry: &NodeEntry, args: &[&str]) -> Result<(i32, String)> {
        self.run_remote(entry, args, true)
    }

    fn run_remote(
        &mut self,
        entry: &NodeEntry,
        args: &[&str],
        capture: bool,
    ) -> Result<(i32, String)> {
        let alias = entry
            .ssh_alias
            .as_deref()
            .with_context(|| format!("node {} is this node", entry.name))?;
        self.rt.block_on(async {
            let session = match self.sessions.remove(&entry.name) {
                Some(s) => s,
                None => connect(alias).await?,
            };
            let mut command = session.command("ag-box");
            command
                .args(args)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit());
            let what = || format!("running ag-box {} on {}", args.join(" "), entry.name);
            let (status, stdout) = if capture {
                let out = command
                    .stdout(Stdio::piped())
                    .output()
                    .await
                    .with_context(what)?;
                (out.status, out.stdout)
            } else {
                let status = command
                    .stdout(Stdio::inherit())
                    .status()
                    .await
                    .with_context(what)?;
                (status, Vec::new())
            };
            let _ = session.close().await;
            Ok((
                cmd::exit_code(status),
                String::from_utf8_lossy(&stdout).into_owned(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_remote_command_reaches_ag_box_as_typed() {
        assert_eq!(
            terminal_argv("node-b", true, &["attach", "web"]),
            [
                "ssh",
                "-t",
                "-o",
                "ConnectTimeout=10",
                "node-b",
                "--",
                "ag-box attach web"
            ]
        );
        assert_eq!(
            terminal_argv(
                "b",
                false,
                &[
                    "exec",
                    "web",
                    "--",
                    "sh",
                    "-c",
                    "echo 'it''s' $HOME; rm -rf /"
                ]
            ),
            [
                "ssh",
                "-T",
                "-o",
                "ConnectTimeout=10",
                "b",
                "--",
                r"ag-box exec web -- sh -c 'echo '\''it'\'''\''s'\'' $HOME; rm -rf /'"
            ]
        );
        assert_eq!(quote(""), "''");
    }
}
