//! ag-box: isolated, movable work boxes for AI coding agents (docs/design.md).
//! The binary is `main.rs`; everything else is here, so tests can reach the CLI in-process.

/// A message to stderr, left unsaid with `-q` (errors and warnings are not; see `host::say_line`).
#[cfg(not(test))]
macro_rules! say {
    ($($t:tt)*) => {{
        if !$crate::sys::host::quiet() {
            $crate::sys::host::say_line(&format!($($t)*));
        }
    }};
}

/// Data to stdout, likewise.
#[cfg(not(test))]
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

// In unit tests, through the test harness's capture.
#[cfg(test)]
macro_rules! say {
    ($($t:tt)*) => {
        if !$crate::sys::host::quiet() {
            eprintln!($($t)*)
        }
    };
}

#[cfg(test)]
macro_rules! out {
    ($($t:tt)*) => { println!($($t)*) };
}

mod atomic;
mod cli;
mod commands;
mod config;
mod error;
mod lifecycle;
mod plan;
mod store;
mod sys;

use std::process::ExitCode;

/// Where unit tests make their trees: inside the build tree (hermetic), never under `/tmp`,
/// which is no place for a project.
#[cfg(test)]
const UNIT_TEST_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/ag-box-unit");

use clap::FromArgMatches;

pub use cli::command;
use cli::{Cli, Cmd};
use error::ChildExit;
use plan::names::BoxName;

/// Each verb, its box name checked first: a `BoxName` is made here rather than by a clap value
/// parser, whose refusal would be clap's several lines, not ag-box's one (exit 2 either way).
// One arm per verb: a table, read down.
#[allow(clippy::too_many_lines)]
fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Ls { waiting, json } => commands::ls::run(waiting, json),
        Cmd::Track {
            name,
            path,
            nix,
            agent,
            json,
        } => {
            let name = BoxName::new(name)?;
            let agent = lifecycle::track::AgentChoice::parse(agent.as_deref())?;
            commands::track::run(&name, path, nix, agent, json)
        }
        Cmd::Up {
            name,
            node,
            force,
            fresh,
            json,
        } => commands::up::run(
            &BoxName::new(name)?,
            node.as_deref(),
            commands::up::How { force, fresh },
            json,
        ),
        Cmd::Fork {
            name,
            new,
            count,
            from,
            node,
            branch,
            json,
        } => commands::fork::run(
            &BoxName::new(name)?,
            &new,
            &commands::fork::Ask {
                count,
                from: from.as_deref(),
                node: node.as_deref(),
                branch: branch.as_deref(),
            },
            json,
        ),
        Cmd::Attach { name } => commands::attach::run(&BoxName::new(name)?),
        Cmd::Wait { name } => commands::wait::run(&BoxName::new(name)?),
        Cmd::Exec { name, command } => commands::exec::run(&BoxName::new(name)?, &command),
        Cmd::Park {
            name,
            accept_partial,
            now,
            json,
        } => commands::park::run(&BoxName::new(name)?, accept_partial, now, json),
        Cmd::Stop { name } => commands::stop::run(&BoxName::new(name)?),
        Cmd::Snapshot(args) => {
            let name = args.name.map(BoxName::new).transpose()?;
            commands::snapshot::run(name.as_ref(), args.due, args.accept_partial, args.json)
        }
        Cmd::History { name, json, events } => {
            commands::history::run(&BoxName::new(name)?, json, events)
        }
        Cmd::Diff {
            name,
            snapshots,
            json,
        } => commands::diff::run(&BoxName::new(name)?, &snapshots, json),
        Cmd::Rollback {
            name,
            snapshot,
            to,
            yes,
            now,
            json,
        } => commands::rollback::run(
            &BoxName::new(name)?,
            &snapshot,
            to.as_deref(),
            commands::rollback::Asked { yes, now },
            json,
        ),
        Cmd::Status { json, deep } => commands::status::run(json, deep),
        Cmd::Cost { name, since, json } => {
            let name = name.map(BoxName::new).transpose()?;
            commands::cost::run(name.as_ref(), since.as_deref(), json)
        }
        Cmd::Init => commands::init::run(),
        Cmd::Doctor { json, unlock } => commands::doctor::run(json, unlock),
        Cmd::Creds { json } => commands::creds::run(json),
        Cmd::Login { agent } => commands::login::run(&agent),
        Cmd::Port {
            name,
            port,
            local,
            bind,
            list,
            serve_unix,
            while_stdin,
        } => commands::port::run(
            &BoxName::new(name)?,
            &commands::port::Ask {
                port,
                local,
                bind,
                list,
                serve_unix,
                while_stdin,
            },
        ),
        Cmd::Globals { action } => commands::globals::run(match action {
            cli::GlobalsAction::Push => commands::globals::Action::Push,
            cli::GlobalsAction::Pull => commands::globals::Action::Pull,
            cli::GlobalsAction::Auto => commands::globals::Action::Auto,
            cli::GlobalsAction::Adopt { name } => {
                commands::globals::Action::Adopt(BoxName::new(name)?)
            }
        }),
        Cmd::Prune { dry_run } => commands::prune::run(dry_run),
        Cmd::Drop { name, yes, json } => commands::drop::run(&BoxName::new(name)?, yes, json),
        Cmd::Set { name, settings } => commands::set::run(&BoxName::new(name)?, &settings),
        Cmd::Probe => commands::probe::run(),
        Cmd::AgentWindow { agent, fresh } => commands::agent_window::run(&agent, fresh),
        Cmd::Watch { name } => commands::watch::run(&BoxName::new(name)?),
        Cmd::FinishPark { name } => {
            lifecycle::finish::run(&lifecycle::Ctx::load()?, &BoxName::new(name)?)
        }
        Cmd::AgentState { agent, payload } => {
            commands::agent_state::run(&agent, payload.as_deref());
            Ok(())
        }
        Cmd::Man { dir } => commands::completion::man(cli::command(), &dir),
        Cmd::Egress {
            name, apply: true, ..
        } => commands::egress::apply(&BoxName::new(name)?),
        Cmd::Egress {
            name,
            json,
            follow,
            last,
            ..
        } => commands::egress::run(&BoxName::new(name)?, json, follow, last),
        Cmd::Anchor {
            supervise,
            info,
            netns,
            argv,
        } => exit_with(sys::runtime::anchor(
            &info,
            supervise,
            netns.as_deref(),
            &argv,
        )?),
        Cmd::Proxy {
            box_name,
            netns,
            run_dir,
            node_list,
        } => sys::proxy::run(sys::proxy::Paths {
            policy: plan::egress::policy_file(&run_dir),
            log: plan::egress::log_file(&run_dir),
            broker: plan::broker::file(&run_dir),
            box_name,
            netns,
            node_list,
        }),
        Cmd::Refresh {
            login,
            shared,
            box_name,
        } => commands::refresh::run(&login, shared, box_name.as_deref()),
        Cmd::Become(b) => exit_with(sys::privs::run(
            &plan::sandbox::Become {
                ids: plan::account::Ids {
                    uid: b.uid,
                    gid: b.gid,
                },
                groups: b.groups,
                own_home: b.own_home,
                share_socket: b.share_socket,
                tasks: b.tasks,
                chdir: b.chdir,
            },
            &b.argv,
        )?),
    }
}

/// At -v: the most memory this process held, and the most any process it ran (restic) held.
fn log_peak_memory() {
    use nix::sys::resource::{UsageWho, getrusage};
    let peak = |who| getrusage(who).map_or(0, |u| u.max_rss() / 1024);
    tracing::debug!(
        "peak memory: {} MiB in ag-box, {} MiB in the largest process it ran",
        peak(UsageWho::RUSAGE_SELF),
        peak(UsageWho::RUSAGE_CHILDREN)
    );
}

fn exit_with(code: i32) -> anyhow::Result<()> {
    match code {
        0 => Ok(()),
        c => Err(ChildExit(c).into()),
    }
}

/// The whole CLI: parse the arguments, set up logging, run the verb, report and exit.
#[must_use]
pub fn main() -> ExitCode {
    // Walks of a box's trees hold a descriptor per level of a deep one: all the kernel allows.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    commands::completion::answer_if_asked(cli::command);
    let cli = Cli::from_arg_matches(&cli::command().get_matches()).unwrap_or_else(|e| e.exit());
    if cli.quiet {
        sys::host::set_quiet();
    }
    // -v is ag-box's own debug lines; -vv everything's, the S3 client's included.
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "info,ag_box=debug",
        (false, _) => "trace",
    };
    // A flag says what the operator wants now; AG_BOX_LOG is the standing filter.
    let filter = match tracing_subscriber::EnvFilter::try_from_env("AG_BOX_LOG") {
        Ok(f) if !cli.quiet && cli.verbose == 0 => f,
        _ => tracing_subscriber::EnvFilter::new(level),
    };
    let logs = tracing_subscriber::fmt()
        .with_writer(|| sys::host::EscapedStderr)
        .with_target(false)
        .with_ansi(sys::host::colour_on_stderr())
        .with_env_filter(filter);
    // Asked for (AG_BOX_LOG=debug, -v), lines carry the seconds since start: where time goes.
    if std::env::var_os("AG_BOX_LOG").is_some() || cli.verbose > 0 {
        logs.with_timer(tracing_subscriber::fmt::time::uptime())
            .init();
    } else {
        logs.without_time().init();
    }
    let ran = run(cli);
    log_peak_memory();
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(ChildExit(code)) = e.downcast_ref::<ChildExit>() {
                return ExitCode::from(u8::try_from(*code).unwrap_or(1));
            }
            let (line, code) = error::report(&e);
            // Said even with -q.
            sys::host::say_line(&format!("ag-box: {line}"));
            ExitCode::from(code as u8)
        }
    }
}
