//! Command-line types (clap only; no behaviour).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "ag-box",
    version,
    about = "Isolated, movable work boxes for AI coding agents",
    after_help = "Example: ag-box track myproj && ag-box up myproj && ag-box attach myproj"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// List all boxes
    #[command(after_help = "Example: ag-box ls --json")]
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Register an existing directory as a box (default ~/<name>) and take its first snapshot
    #[command(after_help = "Example: ag-box track myproj /root/myproj")]
    Track { name: String, path: Option<PathBuf> },
    /// Start a box on this node, restoring its newest snapshot when needed
    #[command(after_help = "Example: ag-box up myproj")]
    Up {
        name: String,
        /// Node to start it on (default: this node)
        #[arg(long)]
        node: Option<String>,
        /// Take the lease from another node (its unsnapshotted work forks)
        #[arg(long)]
        force: bool,
    },
    /// Attach to the box's tmux session
    #[command(after_help = "Example: ag-box attach myproj")]
    Attach { name: String },
    /// Run one command inside the box
    #[command(after_help = "Example: ag-box exec myproj -- git status")]
    Exec {
        name: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Snapshot the box, stop it and release this node
    #[command(after_help = "Example: ag-box park myproj")]
    Park { name: String },
    /// Snapshot one box, or every active box on this node (renewing leases)
    #[command(after_help = "Example: ag-box snapshot --active")]
    Snapshot(SnapshotArgs),
    /// This node's view: node, store, snapshots, timer, runtime, active boxes
    #[command(after_help = "Example: ag-box status --json")]
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Check the store and create the restic repository (idempotent)
    #[command(after_help = "Example: ag-box init")]
    Init,
    #[command(name = "__probe", hide = true)]
    Probe,
    #[command(name = "__anchor", hide = true)]
    Anchor {
        #[arg(long)]
        supervise: bool,
        #[arg(long)]
        info: PathBuf,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct SnapshotArgs {
    pub name: Option<String>,
    /// Every box running on this node
    #[arg(long)]
    pub active: bool,
}
