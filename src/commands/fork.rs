//! `fork <box> <new> [--count N] [--from <snapshot>] [--node <n>] [--branch <name>]`: new boxes
//! from the box's latest snapshot (taken first when it is up) or a named one, each started
//! where `up` would start it and, in a git project, on a branch of its own.

use std::process::{Command, Stdio};

use anyhow::Result;

use super::{Ctx, require_tools};
use crate::error::{Code, UserError};
use crate::lifecycle::{self, up::being_dropped};
use crate::plan::fork::{self, Sibling};
use crate::plan::names::BoxName;
use crate::plan::snapshot_id::SnapshotId;
use crate::plan::text;
use crate::store::meta::Meta;
use crate::sys::cmd;
use crate::sys::nodes::Nodes;

/// What the operator asked for besides the two names.
pub(crate) struct Ask<'a> {
    pub count: u32,
    pub from: Option<&'a str>,
    pub node: Option<&'a str>,
    pub branch: Option<&'a str>,
}

/// `fork --json`.
#[derive(serde::Serialize)]
struct Forked<'a> {
    schema_version: u32,
    #[serde(rename = "box")]
    parent: &'a str,
    snapshot: &'a SnapshotId,
    forks: Vec<Made>,
}

/// One new box as it stands once started.
#[derive(serde::Serialize)]
struct Made {
    #[serde(rename = "box")]
    name: String,
    path: String,
    uid: Option<u32>,
    /// Its first snapshot.
    snapshot: SnapshotId,
    /// Where it runs (null: its `up` failed; it is parked).
    node: Option<String>,
    /// The git branch it has checked out (null: not a git project, or none was made).
    branch: Option<String>,
}

pub(crate) fn run(parent: &BoxName, new: &str, ask: &Ask, json: bool) -> Result<()> {
    let ctx = Ctx::load()?;
    let siblings = fork::siblings(new, ask.count, ask.branch, &ctx.config.home)?;
    let stored = ctx.tracked(parent)?;
    if stored.meta.dropping {
        return Err(being_dropped(parent).into());
    }
    require_tools(&["restic"])?;
    ctx.require_safe_leases()?;
    if let Some(node) = ask.node
        && node != ctx.config.node
        && ctx.config.reachable(node).is_none()
    {
        return Err(UserError::usage(
            format!("node '{node}' is not this node ({}), nor in the nodes file with an ssh alias", ctx.config.node),
            "add '<node> <ssh-alias>' to ~/.config/box/nodes (see nodes.example), or leave --node out",
        )
        .into());
    }
    lifecycle::fork::refuse(&ctx, &siblings)?;
    crate::sys::interrupt::arm();
    let from = match ask.from {
        Some(prefix) => {
            let restic = ctx.restic()?;
            restic.require_repo()?;
            restic.find(parent, prefix)?.id
        }
        None => latest_whole(&ctx, &stored.meta)?,
    };
    let made = lifecycle::fork::fork(&ctx, &stored.meta, &from, &siblings)?;
    for (m, s) in made.iter().zip(&siblings) {
        say!(
            "forked box '{parent}' (snapshot {}) into box '{}' at {} (uid {})",
            from.short(),
            s.name,
            text::escaped(&s.path.to_string_lossy()),
            m.meta.uid.map_or("-".into(), |u| u.to_string())
        );
    }
    let mut failed = None;
    let mut out = Vec::new();
    for (m, s) in made.iter().zip(&siblings) {
        let started = super::up::start(&s.name, ask.node, super::up::How::default());
        let (node, branch) = match started {
            Ok(()) => {
                let now = ctx.tracked(&s.name)?.meta;
                (now.lease.map(|l| l.node), make_branch(s))
            }
            Err(e) => {
                tracing::error!("box '{}': not started: {e:#}", s.name);
                failed.get_or_insert(e);
                (None, None)
            }
        };
        out.push(Made {
            name: s.name.to_string(),
            path: s.path.display().to_string(),
            uid: m.meta.uid,
            snapshot: m.snapshot.clone(),
            node,
            branch,
        });
    }
    print(parent, &from, out, json)?;
    match failed {
        None => Ok(()),
        Some(e) => Err(e.context(format!(
            "box '{parent}' was forked, but not every fork started: 'ag-box up <fork>' starts one"
        ))),
    }
}

fn print(parent: &str, from: &SnapshotId, forks: Vec<Made>, json: bool) -> Result<()> {
    if json {
        return super::print_json(&Forked {
            schema_version: super::JSON_SCHEMA_VERSION,
            parent,
            snapshot: from,
            forks,
        });
    }
    let mut table = vec![["BOX", "NODE", "BRANCH", "PATH"].map(String::from).to_vec()];
    for f in forks {
        table.push(vec![
            f.name,
            f.node.unwrap_or_else(|| "-".into()),
            f.branch.unwrap_or_else(|| "-".into()),
            text::escaped(&f.path),
        ]);
    }
    for line in text::table(&table) {
        out!("{line}");
    }
    Ok(())
}

/// The box's latest snapshot, whole: a box up somewhere is snapshotted first (here, or on its
/// node over ssh).
fn latest_whole(ctx: &Ctx, meta: &Meta) -> Result<SnapshotId> {
    let name = BoxName::new(meta.name.as_str())?;
    if let Some(lease) = &meta.lease {
        if lease.node == ctx.config.node {
            let _lock = ctx.lock(&name, "snapshot")?;
            ctx.restic()?.ensure_repo()?;
            let taken = lifecycle::snapshot::take_alone(ctx, &ctx.tracked(&name)?, false)?;
            if let Some(lost) = taken.forked {
                return Err(UserError::new(
                    Code::LeaseHeld,
                    format!(
                        "box '{name}' was taken over by {} as it was snapshotted for the fork",
                        lost.now_held_by.map_or("nobody".into(), |l| l.node)
                    ),
                    format!(
                        "fork it where it runs now, or 'ag-box fork {name} <new> --from <snapshot>'"
                    ),
                )
                .into());
            }
        } else {
            snapshot_on(ctx, &name, &lease.node)?;
        }
    }
    let meta = ctx.tracked(&name)?.meta;
    let Some(latest) = meta.last_snapshot else {
        return Err(UserError::failed(
            format!("box '{name}' has no snapshot to fork"),
            format!("run 'ag-box up {name}' and 'ag-box snapshot {name}' first"),
        )
        .into());
    };
    if let Some(whole) = &latest.on {
        return Err(UserError::failed(
            format!(
                "box '{name}': its latest is what a quick park on {} saved (snapshot {}), and its whole snapshot is not taken yet",
                latest.node,
                latest.id.short()
            ),
            format!(
                "try again in a minute ({} takes it after the park), or fork the one before: 'ag-box fork {name} <new> --from {}'",
                latest.node,
                whole.id.short()
            ),
        )
        .into());
    }
    Ok(latest.id)
}

/// `ag-box snapshot <name>` on the node running the box.
fn snapshot_on(ctx: &Ctx, name: &BoxName, node: &str) -> Result<()> {
    let entry = ctx.config.reachable(node).ok_or_else(|| {
            UserError::usage(
                format!("box '{name}' is up on node {node}, which this node cannot reach (no ssh alias in the nodes file)"),
                format!("fork it on {node}, or fork a snapshot it has: 'ag-box fork {name} <new> --from <snapshot>'"),
            )
        })?;
    say!("box '{name}' is up on node {node}: snapshotting it there first");
    match Nodes::new()?.captured(entry, &["snapshot", name])? {
        (0, _) => Ok(()),
        (code, _) => Err(UserError::failed(
            format!("box '{name}': its snapshot on node {node} failed (exit {code})"),
            format!("see 'ag-box doctor' on {node}, or fork a snapshot it has: --from <snapshot>"),
        )
        .into()),
    }
}

/// In the box (as its user, wherever it runs): a new git branch checked out, when its project
/// is a git work tree. None of the repository's hooks runs for it, and a minute is the bound
/// of it all (what the parent's box left in `.git` could make git wait: a fifo, a config).
const BRANCH_SCRIPT: &str = r#"cd -- "$1" || exit 1
command -v git >/dev/null 2>&1 || exit 4
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 3
exec git -c core.hooksPath=/dev/null -c core.fsmonitor=false switch -q -c "$2""#;

/// The sibling's own branch, made in its box; None (with a word why) when none was made.
fn make_branch(s: &Sibling) -> Option<String> {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            tracing::warn!("box '{}': no branch made: {e}", s.name);
            return None;
        }
    };
    let mut c = Command::new(exe);
    c.args([
        "exec",
        &s.name,
        "--",
        "timeout",
        "-k",
        "5",
        "60",
        "sh",
        "-c",
        BRANCH_SCRIPT,
        "sh",
    ])
    .arg(&s.path)
    .arg(&s.branch)
    .stdin(Stdio::null());
    let why = match c.output() {
        Ok(o) if o.status.success() => return Some(s.branch.clone()),
        Ok(o) => match cmd::exit_code(o.status) {
            3 => {
                tracing::info!(
                    "box '{}': its project is no git work tree: no branch made",
                    s.name
                );
                return None;
            }
            4 => "git is not installed on its node".to_string(),
            124 | 137 => "git did not finish within a minute".to_string(),
            code => format!(
                "git said: {} (exit {code})",
                text::escaped(cmd::last_line(&String::from_utf8_lossy(&o.stderr)))
            ),
        },
        Err(e) => e.to_string(),
    };
    tracing::warn!(
        "box '{}': no branch '{}' made ({why}); it is on its parent's branch",
        s.name,
        s.branch
    );
    None
}
