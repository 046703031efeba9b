//! `snapshot [<name>|--active]`: snapshot boxes running here, renewing their leases; several
//! boxes at once, each in a process of its own.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};

use super::{Ctx, egress};
use crate::atomic;
use crate::error::{Code, UserError};
use crate::lifecycle::snapshot::{Taken, take_alone};
use crate::plan::active::{self, LastRun};
use crate::plan::names::BoxName;
use crate::plan::restic::Version;
use crate::plan::snapshot_id::SnapshotId;
use crate::sys::restic::Restic;
use crate::sys::{cmd, host};

/// Snapshot box `name`, or every box running here when it is None (`--active`).
pub(crate) fn run(
    name: Option<&BoxName>,
    due: bool,
    accept_partial: bool,
    json: bool,
) -> Result<()> {
    let ctx = Ctx::load()?;
    let restic = ctx.restic()?;
    // Each snapshot reads its own record: no store read need stand before the first starts.
    let mut names: Vec<String> = match name {
        Some(name) => vec![ctx.tracked(name)?.meta.name],
        None => ctx.active_box_names()?,
    };
    if names.is_empty() {
        say!("no active boxes on this node, skipping");
        return Ok(());
    }
    if due {
        let (state_dir, every) = (&ctx.config.state_dir, ctx.config.snapshot_every);
        // The system clock, as the turn files' times are.
        let now = SystemTime::now();
        names.retain(|n| active::due(last_turn(state_dir, n), now, every));
        if names.is_empty() {
            say!(
                "no active box is due for a snapshot (every {}, BOX_SNAPSHOT_EVERY), skipping",
                humantime::format_duration(every)
            );
            if json {
                print_report(&[], &[], &[])?;
            }
            return Ok(());
        }
    }
    restic.ensure_repo()?;
    let [only] = names.as_slice() else {
        return snapshot_active(&ctx, restic, &names, accept_partial, json);
    };
    // The name given, or the one active box's (which passed the same check).
    let name = BoxName::new(only.as_str())?;
    let taken = ctx.lock(&name, "snapshot").and_then(|_lock| {
        let current = ctx.tracked(&name)?;
        // A policy change that could not reach this node (it was unreachable) lands now.
        if let Err(e) = egress::apply_here(ctx.runtime.kind(), &ctx.spec(&current.meta)) {
            tracing::warn!("box '{name}': network policy not applied: {e:#}");
        }
        take_alone(&ctx, &current, accept_partial)
    })?;
    let outcome = Outcome::of(&taken);
    mark_turn(&ctx.config.state_dir, &name);
    if json {
        print_report(&names, &[outcome], &[Some(taken.snapshot.id)])?;
    } else {
        out!("{name} {}{}", taken.snapshot.id, outcome.note());
    }
    conclude(&names, &[outcome])
}

/// Where the time of a box's last snapshot (or lease renewal) here is kept: the mtime of an
/// empty file, for `--due`.
fn turn_file(state_dir: &Path, name: &str) -> std::path::PathBuf {
    state_dir.join("local/snapshot-turns").join(name)
}

fn last_turn(state_dir: &Path, name: &str) -> Option<SystemTime> {
    std::fs::metadata(turn_file(state_dir, name))
        .and_then(|m| m.modified())
        .ok()
}

/// A snapshot (or renewal) of the box just ended here.
fn mark_turn(state_dir: &Path, name: &str) {
    if let Err(e) = atomic::write(&turn_file(state_dir, name), b"", 0o644) {
        tracing::warn!("box '{name}': could not note its snapshot's time: {e:#}");
    }
}

/// `snapshot --json`.
#[derive(serde::Serialize)]
struct Report<'a> {
    schema_version: u32,
    snapshots: Vec<BoxSnapshot<'a>>,
}

#[derive(serde::Serialize)]
struct BoxSnapshot<'a> {
    #[serde(rename = "box")]
    name: &'a str,
    outcome: Outcome,
    /// The full id of the snapshot the box is at now (a fork's, when it forked); null when it
    /// failed.
    snapshot: Option<&'a SnapshotId>,
}

fn print_report(names: &[String], outcomes: &[Outcome], ids: &[Option<SnapshotId>]) -> Result<()> {
    super::print_json(&Report {
        schema_version: super::JSON_SCHEMA_VERSION,
        snapshots: names
            .iter()
            .zip(outcomes)
            .zip(ids)
            .map(|((name, outcome), id)| BoxSnapshot {
                name,
                outcome: *outcome,
                snapshot: id.as_ref(),
            })
            .collect(),
    })
}

/// Several boxes: ordered and run side by side as `plan::active` says, by what the last run
/// measured; then what this one measured is kept for the next.
fn snapshot_active(
    ctx: &Ctx,
    restic: &Restic,
    names: &[String],
    accept_partial: bool,
    json: bool,
) -> Result<()> {
    let side_by_side = restic.version().is_some_and(Version::runs_side_by_side);
    let state_dir = &ctx.config.state_dir;
    let last = last_run(state_dir).map(|(run, _)| run).unwrap_or_default();
    let width = if side_by_side {
        active::width(
            std::thread::available_parallelism().map_or(2, usize::from),
            available_memory(),
            &last,
        )
    } else {
        1
    };
    let ordered = active::order(names, &last);
    tracing::debug!(
        "{} boxes, {width} at a time: {}",
        names.len(),
        ordered.join(" ")
    );
    let waves = active::waves(ordered.len(), width);
    let (ran, busy) =
        with_cores_busy(|| snapshot_in_parallel(&ordered, &waves, accept_partial, !json));
    let Ran {
        outcomes,
        seconds,
        ids,
    } = ran?;
    let quickest_backup = outcomes
        .iter()
        .zip(&seconds)
        .filter(|(o, _)| **o == Outcome::Taken)
        .map(|(_, s)| *s)
        .reduce(f64::min);
    let kept = peak_memory().and_then(|peak_memory| {
        keep_last_run(
            state_dir,
            &LastRun {
                peak_memory,
                seconds: ordered.iter().cloned().zip(seconds).collect(),
                width: waves.first().copied().unwrap_or(0),
                quickest_backup,
                busy,
            },
        )
    });
    if let Err(e) = kept {
        tracing::warn!("keeping what this run measured: {e:#}");
    }
    if json {
        print_report(&ordered, &outcomes, &ids)?;
    }
    conclude(&ordered, &outcomes)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Taken,
    /// Nothing new since the box's last snapshot: none was taken (nor a restic run).
    Unchanged,
    #[serde(rename = "fork")]
    Forked,
    Failed,
}

impl Outcome {
    fn of(t: &Taken) -> Outcome {
        if t.forked.is_some() {
            Outcome::Forked
        } else if t.unchanged {
            Outcome::Unchanged
        } else {
            Outcome::Taken
        }
    }

    /// What ends the box's line on stdout.
    fn note(self) -> &'static str {
        match self {
            Outcome::Forked => " fork",
            Outcome::Unchanged => " unchanged",
            Outcome::Taken | Outcome::Failed => "",
        }
    }
}

/// Every box, in `waves` ([`active::waves`]): each by `ag-box snapshot <box>` of its
/// own (its own lock, renew and restic), its output passed on as it ends; with a restic before
/// 0.18, one at a time.
///
/// A wave starts only when the one before it has ended (or is stuck: `active::next_wave_due`).
/// restic checks the other locks as it takes its own, and a lock removed between its listing
/// and its reading costs that check five seconds (restic #1523, still so in 0.19): with a
/// sliding window, a box starting as another ends did so in about one run in five on the rig.
///
/// Returns each box's outcome, the seconds it took and the snapshot it is at (its line's);
/// each box's line is printed as it ends when `print`.
fn snapshot_in_parallel(
    names: &[String],
    waves: &[usize],
    accept_partial: bool,
    print: bool,
) -> Result<Ran> {
    let exe = host::own_exe();
    let mut ids = vec![None; names.len()];
    let mut outcomes = vec![Outcome::Failed; names.len()];
    let mut seconds = vec![0.0; names.len()];
    let mut running: Vec<(usize, Instant, std::process::Child)> = Vec::new();
    let mut waves = waves.iter().copied();
    let mut next = 0;
    while next < names.len() || !running.is_empty() {
        let running_for: Vec<Duration> = running.iter().map(|(_, t, _)| t.elapsed()).collect();
        if active::next_wave_due(&running_for)
            && let Some(size) = waves.next()
        {
            for _ in 0..size {
                let mut c = Command::new(&exe);
                c.arg("snapshot")
                    .arg(&names[next])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped());
                if accept_partial {
                    c.arg("--accept-partial");
                }
                let child = c
                    .spawn()
                    .with_context(|| format!("starting the snapshot of box '{}'", names[next]))?;
                running.push((next, Instant::now(), child));
                next += 1;
            }
        }
        // A look costs a waitpid per snapshot; a run ends this much after its last snapshot.
        std::thread::sleep(Duration::from_millis(10));
        let mut still = Vec::new();
        for (i, started, mut child) in running {
            match child.try_wait()? {
                None => still.push((i, started, child)),
                Some(status) => {
                    seconds[i] = started.elapsed().as_secs_f64();
                    let mut text = String::new();
                    if let Some(mut o) = child.stdout.take() {
                        let _ = o.read_to_string(&mut text);
                    }
                    let text = text.trim_end();
                    if print {
                        out!("{text}");
                    }
                    ids[i] = text.split_whitespace().nth(1).map(SnapshotId::from);
                    outcomes[i] = match cmd::exit_code(status) {
                        0 if text.ends_with(Outcome::Unchanged.note()) => Outcome::Unchanged,
                        0 => Outcome::Taken,
                        3 => Outcome::Forked,
                        code => {
                            tracing::error!("box '{}': snapshot failed (exit {code})", names[i]);
                            Outcome::Failed
                        }
                    };
                }
            }
        }
        running = still;
    }
    Ok(Ran {
        outcomes,
        seconds,
        ids,
    })
}

/// What each box's snapshot of a run came to, in the run's order.
struct Ran {
    outcomes: Vec<Outcome>,
    /// How long each took.
    seconds: Vec<f64>,
    /// The snapshot each is at (its line's), None when it failed.
    ids: Vec<Option<SnapshotId>>,
}

/// Where `snapshot --active` keeps what it measured (`plan::active::LastRun`).
const LAST_RUN: &str = "snapshot-last-run.json";

/// What the last `--active` run here measured, and when it ended.
pub(crate) fn last_run(state_dir: &Path) -> Option<(LastRun, SystemTime)> {
    let path = state_dir.join(LAST_RUN);
    let run = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    Some((run, std::fs::metadata(&path).ok()?.modified().ok()?))
}

fn keep_last_run(state_dir: &Path, run: &LastRun) -> Result<()> {
    atomic::write(&state_dir.join(LAST_RUN), &serde_json::to_vec(run)?, 0o644)
}

/// `f`'s result, and how busy all the node's cores were while it ran (0 to 1; 0: unknown).
fn with_cores_busy<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let mut cpus = sysinfo::System::new().ok();
    if let Some(sys) = &mut cpus {
        sys.refresh_cpu_usage();
    }
    let result = f();
    let busy = cpus.map_or(0.0, |mut sys| {
        sys.refresh_cpu_usage();
        f64::from(sys.global_cpu_usage()) / 100.0
    });
    (result, busy)
}

fn available_memory() -> Option<u64> {
    let mut sys = sysinfo::System::new().ok()?;
    sys.refresh_memory();
    Some(sys.available_memory()).filter(|m| *m > 0)
}

/// The most memory one of the finished snapshots' processes (and theirs) took.
fn peak_memory() -> Result<u64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let kib = getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss();
    Ok(u64::try_from(kib).unwrap_or(0) * 1024)
}

/// The exit of a run over `names`: failures first, then a split brain (the hourly timer's unit
/// fails either way, so it shows).
fn conclude(names: &[String], outcomes: &[Outcome]) -> Result<()> {
    let failed = outcomes.iter().filter(|o| **o == Outcome::Failed).count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} snapshots failed", names.len());
    }
    let forked: Vec<&str> = names
        .iter()
        .zip(outcomes)
        .filter(|(_, o)| **o == Outcome::Forked)
        .map(|(n, _)| n.as_str())
        .collect();
    if !forked.is_empty() {
        return Err(UserError::new(
            Code::LeaseHeld,
            if forked.len() == 1 {
                format!(
                    "box {} runs here but was taken over by another node; its snapshot here is a fork",
                    forked[0]
                )
            } else {
                format!(
                    "boxes {} run here but were taken over by another node; their snapshots here are forks",
                    forked.join(", ")
                )
            },
            "'ag-box park <box>' here stops this copy; its files stay in the fork snapshot",
        )
        .into());
    }
    Ok(())
}
