//! Command-line types (clap only; no behaviour but where box names come from for completion).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use clap_complete::ArgValueCandidates;

use crate::commands::completion::{agent_names, box_names, node_names, setting_keys, snapshot_ids};
use crate::plan::manual;

/// The command line as parsed, helped and documented: the derived definitions, each verb's
/// long help (`--help`) ending in its EXIT STATUS.
#[must_use]
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let with_status = |cmd: clap::Command, verb: &str| {
        let after = cmd
            .get_after_help()
            .map(ToString::to_string)
            .unwrap_or_default();
        let status = manual::exit_status_text(verb);
        cmd.after_long_help(format!("{after}\n\n{status}"))
    };
    with_status(Cli::command(), "").mut_subcommands(|sub| {
        if sub.is_hide_set() {
            return sub;
        }
        let verb = sub.get_name().to_string();
        with_status(sub, &verb)
    })
}

#[derive(Debug, Parser)]
#[command(
    name = "ag-box",
    version,
    about = "Isolated, movable work boxes for AI coding agents",
    after_help = "Example: ag-box track myproj && ag-box up myproj && ag-box attach myproj"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
    /// Say only warnings and errors (no progress or info lines); data on stdout stays
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Say more: -v debug lines, -vv trace lines (`AG_BOX_LOG` takes a filter of its own)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// List all boxes
    #[command(after_help = "Example: ag-box ls --json")]
    Ls {
        /// Only the boxes whose agent waits for the operator or is done (state waiting or idle)
        #[arg(long)]
        waiting: bool,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Register an existing directory as a box (default ~/<name>) and take its first snapshot
    #[command(after_help = "Example: ag-box track myproj /root/myproj")]
    Track {
        /// A name for the new box: [a-z0-9][a-z0-9._-]{0,62}
        name: String,
        /// The project directory (default ~/<name>); the same path on every node
        path: Option<PathBuf>,
        /// Start the box's shell inside `nix develop /etc/base-flake`
        #[arg(long)]
        nix: bool,
        /// The box's agent: claude, codex, gemini, grok, opencode or none (default: the one
        /// whose sessions of the project it imports, when only one agent has any; else none)
        #[arg(long, value_name = "AGENT", add = ArgValueCandidates::new(agent_names))]
        agent: Option<String>,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Start a box on this node, restoring its newest snapshot when needed
    #[command(after_help = "Example: ag-box up myproj")]
    Up {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// Node to start it on (default: its pinned node, else the one with the most free memory)
        #[arg(long, value_name = "NODE", add = ArgValueCandidates::new(node_names))]
        node: Option<String>,
        /// Take the lease from another node (its unsnapshotted work forks)
        #[arg(long)]
        force: bool,
        /// Start the box's agent in a new conversation, not back in its most recent one
        #[arg(long)]
        fresh: bool,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// New boxes from the box's latest snapshot (or --from one): each its own record, uid,
    /// agent home (its conversations carried) and project dir (~/<new>, or ~/<new>-<i> of
    /// --count), started where 'up' would start it, on a git branch of its own
    #[command(
        after_help = "A box that is up is snapshotted first (on its node). In a git project each fork \
checks out a new branch (--branch B, B-<i> of several; default: the fork's name) in its own full \
copy: forks never share .git. Dropping the parent leaves its forks alone.\n\n\
Example: ag-box fork myproj try --count 3 --branch cache"
    )]
    Fork {
        /// The box to fork
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// The new box's name (with --count N: <new>-1 .. <new>-N)
        new: String,
        /// How many forks to make (1-16)
        #[arg(long, value_name = "N", default_value_t = 1)]
        count: u32,
        /// Fork this snapshot (at least its first 4 hex digits; 'ag-box history <box>' lists them)
        #[arg(long, value_name = "SNAPSHOT")]
        from: Option<String>,
        /// Node to start the forks on (default: as 'up' schedules each)
        #[arg(long, value_name = "NODE", add = ArgValueCandidates::new(node_names))]
        node: Option<String>,
        /// The git branch each fork checks out (default: its name)
        #[arg(long, value_name = "BRANCH")]
        branch: Option<String>,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Wait until the box's agent needs you: it asks (a permission or a question) or its turn is done
    #[command(
        after_help = "Prints '<box> <node> <agent> <state>[: <the question>]' and exits 0 once the \
agent's state is waiting or idle (at once if it is already); exit 1 when the box is not up.\n\n\
Example: ag-box wait myproj && notify-send 'myproj needs you'"
    )]
    Wait {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
    },
    /// Attach to the box's tmux session
    #[command(after_help = "Example: ag-box attach myproj")]
    Attach {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
    },
    /// Run one command inside the box
    #[command(after_help = "Example: ag-box exec myproj -- git status")]
    Exec {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// The command and its arguments (after `--`, or straight after the name)
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "COMMAND"
        )]
        command: Vec<String>,
    },
    /// Snapshot the box, stop it and release this node
    #[command(after_help = "Example: ag-box park myproj")]
    Park {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// Count a snapshot restic could not read every file for (or of an empty project)
        #[arg(long)]
        accept_partial: bool,
        /// Do not wait for the agent to end its turn (`BOX_PARK_WAIT`, default 2m)
        #[arg(long)]
        now: bool,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Stop the box without a snapshot; its lease and copy stay on this node
    #[command(
        after_help = "Stops the box's processes whatever its files hold; 'ag-box up' starts the copy \
again, 'ag-box park' saves it and frees the node.\n\nExample: ag-box stop myproj"
    )]
    Stop {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
    },
    /// Snapshot one box, or every active box on this node (renewing leases)
    #[command(after_help = "Example: ag-box snapshot --active")]
    Snapshot(SnapshotArgs),
    /// A box's snapshots, newest first (time, node, epoch, what each added); --events adds
    /// who did what to it (up, park, take-over, fork, set, drop, rollback)
    #[command(after_help = "Example: ag-box history myproj --events")]
    History {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
        /// Interleave the box's lifecycle events
        #[arg(long)]
        events: bool,
    },
    /// What changed between two snapshots, or between one (default: the latest) and the
    /// working copy on this node
    #[command(
        after_help = "Example: ag-box diff myproj   (the working copy against the latest snapshot)"
    )]
    Diff {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// Snapshot ids: none, one (against the working copy), or two
        #[arg(num_args = 0..=2, value_name = "SNAPSHOT", add = ArgValueCandidates::new(snapshot_ids))]
        snapshots: Vec<String>,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Put a box back to an earlier snapshot (the state it replaces is snapshotted first and
    /// named, so the rollback can be undone); --to restores a copy elsewhere instead
    #[command(
        after_help = "Example: ag-box rollback myproj 1a2b3c4d   (ids: 'ag-box history myproj')"
    )]
    Rollback {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// The snapshot's id (at least its first 4 hex digits; 'ag-box history <name>' lists them)
        #[arg(value_name = "SNAPSHOT", add = ArgValueCandidates::new(snapshot_ids))]
        snapshot: String,
        /// Restore the snapshot under this new directory for a look; the box is not touched
        #[arg(long, value_name = "DIR")]
        to: Option<PathBuf>,
        /// Do not ask before stopping and restarting a running box (for scripts)
        #[arg(long)]
        yes: bool,
        /// Do not wait for a running box's agent to end its turn (`BOX_PARK_WAIT`, default 2m)
        #[arg(long)]
        now: bool,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Tokens in, out, cache write and cache read, by model, and their estimated cost, of each
    /// box (or one) from the agents' transcripts in its agent home on this node
    #[command(
        after_help = "Reads Claude Code's and Codex's transcripts as the box wrote them (no link followed, \
bounded); a model of no known price shows its tokens and no cost.\n\nExample: ag-box cost myproj --since 7days"
    )]
    Cost {
        /// The box (default: every box with an agent home on this node)
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: Option<String>,
        /// Count only what was written since then: a time in UTC (2026-12-01,
        /// 2026-12-01T08:00:00Z) or a span back from now (2h, 3days)
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// This node's view: node, store, snapshots, timer, runtime, active boxes
    #[command(after_help = "Example: ag-box status --json")]
    Status {
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
        /// Also count the repository's snapshots now (a walk of the repository; the count
        /// shown otherwise is the one the last --deep cached)
        #[arg(long)]
        deep: bool,
    },
    /// Sync the global agent credentials and config (one push node, the others pull)
    #[command(
        after_help = "Example: ag-box globals auto   (push or pull as BOX_GLOBALS_ROLE says)"
    )]
    Globals {
        #[command(subcommand)]
        action: GlobalsAction,
    },
    /// Forget old snapshots by the retention keys, then prune the repository
    #[command(after_help = "Example: ag-box prune --dry-run")]
    Prune {
        /// Print the plan; remove nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Delete a box's snapshots and record (never its local files), after typing its name
    #[command(after_help = "Example: ag-box drop oldproj   (or --yes in scripts)")]
    Drop {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// Do not ask for the name (for scripts)
        #[arg(long)]
        yes: bool,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Change a box's settings: `memory_max`=<size|none>, nix=<true|false>, pin=<node|none>, uid=<n>,
    /// gid=<n>, network=<allow|none|host>, allow=<entry>,<entry>... (allow= clears them),
    /// agent=<claude|codex|gemini|grok|opencode|none>, gpu=<true|false>
    #[command(
        after_help = "Example: ag-box set myproj memory_max=4G network=allow allow=registry.npmjs.org,*.pythonhosted.org"
    )]
    Set {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// key=value pairs (see above)
        #[arg(required = true, value_name = "KEY=VALUE", add = ArgValueCandidates::new(setting_keys))]
        settings: Vec<String>,
    },
    /// A box's network policy and the egress proxy's recent decisions on this node
    #[command(after_help = "Example: ag-box egress myproj --follow")]
    Egress {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
        /// Keep printing decisions as they are made
        #[arg(long)]
        follow: bool,
        /// How many recent decisions to show
        #[arg(long, value_name = "N", default_value_t = 20)]
        last: usize,
        /// Apply the record's policy to the box running here (what `set` does on its node)
        #[arg(long, conflicts_with_all = ["json", "follow"])]
        apply: bool,
    },
    /// Reach a TCP port a process in the box listens on: here on 127.0.0.1 (or --bind) while
    /// this runs, whichever node runs the box; --list: what listens in it
    #[command(after_help = "Example: ag-box port myproj 5173 --local 8080")]
    Port {
        /// The box's name
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
        /// The port in the box
        #[arg(value_parser = clap::value_parser!(u16).range(1..), required_unless_present = "list")]
        port: Option<u16>,
        /// The port here (default: the box's)
        #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
        local: Option<u16>,
        /// The address here to listen on (default 127.0.0.1; another one lets other machines in)
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// Show what listens in the box
        #[arg(long, conflicts_with_all = ["local", "bind"])]
        list: bool,
        #[arg(long, hide = true)]
        serve_unix: Option<PathBuf>,
        #[arg(long, hide = true)]
        while_stdin: bool,
    },
    /// The node's logins the credential broker stands in for: their accounts, the hosts their
    /// tokens go to, the boxes that may use them, and the node's CA
    #[command(after_help = "Example: ag-box creds")]
    Creds {
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
    },
    /// Sign in to an agent's account for this node: the login is kept by the credential broker
    /// (boxes given it see placeholders) and, where nodes share a store, sealed there
    #[command(
        after_help = "Example: ag-box login claude   (open the link it shows, paste the code back; gemini alike)\nExample: ag-box login codex    (open the link it shows, enter the code it shows there)"
    )]
    Login {
        /// The agent whose account to sign in to (claude, codex, gemini)
        #[arg(add = ArgValueCandidates::new(agent_names))]
        agent: String,
    },
    /// Is this node set up right? Tools, runtime, config files, store, clock, the repositories
    /// and their locks, the other nodes, timers, TIOCSTI, free space, agent CLIs; each failure
    /// with its fix
    #[command(after_help = "Example: ag-box doctor")]
    Doctor {
        /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
        #[arg(long)]
        json: bool,
        /// First remove the repositories' stale locks (restic unlock)
        #[arg(long)]
        unlock: bool,
    },
    /// Check the store and create the restic repositories: the main one and the changes one (idempotent)
    #[command(after_help = "Example: ag-box init")]
    Init,
    #[command(name = "__man", hide = true)]
    Man { dir: PathBuf },
    #[command(name = "__probe", hide = true)]
    Probe,
    /// Beside a box running here: publishes its agent's state
    #[command(name = "__watch", hide = true)]
    Watch { name: String },
    /// After a quick park: the whole snapshot of the parked copy, in the changes' place
    #[command(name = "__finish-park", hide = true)]
    FinishPark { name: String },
    /// Inside a box: what the agent's hook or notify program says of its state
    #[command(name = "__agent-state", hide = true)]
    AgentState {
        agent: String,
        /// Codex's event (its notify program's last argument)
        payload: Option<String>,
    },
    /// Inside a box: its agent, resuming the project's most recent conversation
    #[command(name = "__agent", hide = true)]
    AgentWindow {
        agent: String,
        /// A new conversation instead
        #[arg(long)]
        fresh: bool,
    },
    #[command(name = "__anchor", hide = true)]
    Anchor {
        #[arg(long)]
        supervise: bool,
        #[arg(long)]
        info: PathBuf,
        /// (--supervise) run bwrap in this network namespace and keep the box's proxy running
        #[arg(long)]
        netns: Option<PathBuf>,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    #[command(name = "__proxy", hide = true)]
    Proxy {
        #[arg(long = "box")]
        box_name: String,
        #[arg(long)]
        netns: PathBuf,
        #[arg(long)]
        run_dir: PathBuf,
        #[arg(long)]
        node_list: PathBuf,
    },
    #[command(name = "__become", hide = true)]
    Become(BecomeArgs),
    /// Run by a box's proxy: make the node's OAuth login `login` (a broker row) fresh.
    #[command(name = "__refresh", hide = true)]
    Refresh {
        #[arg(long)]
        login: String,
        /// The box's start found a store shared by nodes: refuse to refresh without its lease.
        #[arg(long)]
        shared: bool,
        /// The login this box made itself, which the broker keeps for it alone.
        #[arg(long = "box")]
        box_name: Option<String>,
    },
}

/// Inside a box: drop to the box's ids, then run `argv`.
#[derive(Debug, Args)]
pub(crate) struct BecomeArgs {
    #[arg(long)]
    pub uid: u32,
    #[arg(long)]
    pub gid: u32,
    /// A supplementary group (repeatable)
    #[arg(long = "group")]
    pub groups: Vec<u32>,
    #[arg(long)]
    pub own_home: Option<PathBuf>,
    #[arg(long)]
    pub share_socket: Option<PathBuf>,
    #[arg(long)]
    pub tasks: Option<u64>,
    #[arg(long)]
    pub chdir: Option<PathBuf>,
    #[arg(last = true, required = true)]
    pub argv: Vec<String>,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum GlobalsAction {
    /// Upload this node's global agent files as the newest globals snapshot
    #[command(after_help = "Example: ag-box globals push")]
    Push,
    /// Replace this node's global agent files with the newest globals snapshot
    #[command(after_help = "Example: ag-box globals pull")]
    Pull,
    /// push or pull, as `BOX_GLOBALS_ROLE` says (nothing when it is unset)
    #[command(after_help = "Example: ag-box globals auto")]
    Auto,
    /// Make a login done inside a box (on a node without that agent's credentials) this node's,
    /// so that the next push carries it; the box must not be running here
    #[command(
        after_help = "Example: ag-box globals adopt myproj && ag-box globals push\n\nThe box's files are read as they are: adopt only a login you made yourself."
    )]
    Adopt {
        /// The box whose agent home holds the login
        #[arg(add = ArgValueCandidates::new(box_names))]
        name: String,
    },
}

#[derive(Debug, Args)]
// Flags, each a bool, as clap gives them.
#[allow(clippy::struct_excessive_bools)]
pub(crate) struct SnapshotArgs {
    /// The box to snapshot (or --active)
    #[arg(
        add = ArgValueCandidates::new(box_names),
        required_unless_present = "active",
        conflicts_with = "active"
    )]
    pub name: Option<String>,
    /// Every box running on this node
    #[arg(long)]
    pub active: bool,
    /// With --active: only the boxes whose last snapshot here is `BOX_SNAPSHOT_EVERY` old (the
    /// timer's run, every 5 minutes)
    #[arg(long, requires = "active")]
    pub due: bool,
    /// Count a snapshot restic could not read every file for (or of an empty project)
    #[arg(long)]
    pub accept_partial: bool,
    /// Print the result as JSON (`schema_version` 1; see docs/reference.md)
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument and flag a user can see says what it is, and every verb its exit status.
    #[test]
    fn every_visible_argument_is_described_and_every_verb_has_its_exit_status() {
        let mut top = command();
        top.build();
        let mut commands = vec![top.clone()];
        // (clap's own `help` verb aside)
        let verbs = || {
            top.get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        };
        for sub in verbs() {
            commands.push(sub.clone());
            commands.extend(sub.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        }
        let mut undescribed = Vec::new();
        for cmd in &commands {
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                if arg.get_help().is_none() {
                    undescribed.push(format!("{} {}", cmd.get_name(), arg.get_id()));
                }
            }
        }
        assert_eq!(undescribed, Vec::<String>::new());
        for sub in verbs() {
            let long = sub
                .get_after_long_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(
                long.contains("Example: ag-box") && long.contains("\nEXIT STATUS\n  0    done"),
                "{}: {long}",
                sub.get_name()
            );
        }
    }
}
