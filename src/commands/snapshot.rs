//! `snapshot [<name>|--active]`: snapshot boxes running here, renewing their leases; several
//! boxes at once, each in a process of its own.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

use super::{Ctx, egress};
use crate::cli::SnapshotArgs;
use crate::error::{Code, UserError};
use crate::lifecycle::snapshot::take;
use crate::plan::restic::Version;
use crate::sys::{atomic, cmd, host};

pub fn run(args: SnapshotArgs) -> Result<()> {
    let ctx = Ctx::load()?;
    let restic = ctx.restic()?;
    let boxes = match &args.name {
        Some(name) => vec![ctx.tracked(name)?.meta],
        None => ctx.active_boxes()?,
    };
    if boxes.is_empty() {
        say!("no active boxes on this node, skipping");
        return Ok(());
    }
    restic.ensure_repo()?;
    if boxes.len() > 1 {
        let names: Vec<String> = boxes.iter().map(|m| m.name.clone()).collect();
        let side_by_side = restic.version().is_some_and(Version::runs_side_by_side);
        let peak_file = ctx.config.state_dir.join(PEAK_MEMORY);
        let width = if side_by_side {
            width(
                std::thread::available_parallelism().map_or(2, usize::from),
                available_memory(),
                std::fs::read_to_string(&peak_file)
                    .ok()
                    .and_then(|s| s.trim().parse().ok()),
            )
        } else {
            1
        };
        tracing::debug!("{} boxes, {width} at a time", names.len());
        let outcomes = snapshot_in_parallel(&names, width, args.accept_partial)?;
        if let Err(e) = keep_peak_memory(&peak_file) {
            tracing::warn!("keeping the memory a snapshot took: {e:#}");
        }
        return conclude(&names, outcomes);
    }
    let world = ctx.world(&restic);
    let mut outcomes = Vec::new();
    for meta in &boxes {
        let taken = ctx.lock_box(&meta.name, "snapshot").and_then(|_lock| {
            let current = ctx.tracked(&meta.name)?.meta;
            // A policy change that could not reach this node (it was unreachable) lands now.
            if let Err(e) = egress::apply_here(ctx.runtime, &ctx.spec(&current)) {
                tracing::warn!("box '{}': network policy not applied: {e:#}", meta.name);
            }
            take(&world, &current, args.accept_partial)
        });
        match taken {
            Ok(t) => {
                out!(
                    "{} {}{}",
                    meta.name,
                    t.snapshot.id,
                    if t.forked.is_some() { " fork" } else { "" }
                );
                outcomes.push(if t.forked.is_some() {
                    Outcome::Forked
                } else {
                    Outcome::Taken
                });
            }
            Err(e) => return Err(e),
        }
    }
    let names: Vec<String> = boxes.iter().map(|m| m.name.clone()).collect();
    conclude(&names, outcomes)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Taken,
    Forked,
    Failed,
}

/// Every box, in [`waves`] of at most `width`: each by `ag-box snapshot <box>` of its own (its
/// own lock, renew and restic), its output passed on as it ends. A snapshot spends most of its
/// time waiting (on the store, and on restic's lock check), so four per core with a restic that
/// can run side by side; one at a time with an older one.
///
/// A wave starts only when the one before it has ended. restic checks the other locks as it
/// takes its own, and a lock removed between its listing and its reading costs that check five
/// seconds (restic #1523, still so in 0.19): with a sliding window, a box starting as another
/// ends did so in about one run in five on the rig.
fn snapshot_in_parallel(
    names: &[String],
    width: usize,
    accept_partial: bool,
) -> Result<Vec<Outcome>> {
    let exe = host::own_exe();
    let mut outcomes = vec![Outcome::Failed; names.len()];
    let mut running: Vec<(usize, std::process::Child)> = Vec::new();
    let mut waves = waves(names.len(), width).into_iter();
    let mut next = 0;
    while next < names.len() || !running.is_empty() {
        if running.is_empty()
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
                running.push((next, child));
                next += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut still = Vec::new();
        for (i, mut child) in running {
            match child.try_wait()? {
                None => still.push((i, child)),
                Some(status) => {
                    let mut text = String::new();
                    if let Some(mut o) = child.stdout.take() {
                        let _ = o.read_to_string(&mut text);
                    }
                    out!("{}", text.trim_end());
                    outcomes[i] = match cmd::exit_code(status) {
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
    Ok(outcomes)
}

/// Where `snapshot --active` keeps the most memory (bytes) one of its processes took, restic
/// with the repository's whole index in memory being the largest.
const PEAK_MEMORY: &str = "snapshot-peak-memory";

/// How many snapshots run at once: four per core (they mostly wait), but no more than half the
/// memory available holds, each an ag-box and its restic at the most one process took the last
/// time (`peak`): the agents keep theirs.
fn width(cores: usize, available: Option<u64>, peak: Option<u64>) -> usize {
    let by_cores = 4 * cores.max(1);
    match (available, peak.filter(|p| *p > 0)) {
        (Some(available), Some(peak)) => {
            let fit = available / 2 / (2 * peak);
            by_cores.min(usize::try_from(fit).unwrap_or(usize::MAX).max(1))
        }
        _ => by_cores,
    }
}

fn available_memory() -> Option<u64> {
    let mut sys = sysinfo::System::new().ok()?;
    sys.refresh_memory();
    Some(sys.available_memory()).filter(|m| *m > 0)
}

/// Keep the most memory one of the finished snapshots' processes (and theirs) took.
fn keep_peak_memory(file: &std::path::Path) -> Result<()> {
    use nix::sys::resource::{UsageWho, getrusage};
    let kib = getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss();
    let bytes = u64::try_from(kib).unwrap_or(0) * 1024;
    atomic::write(file, format!("{bytes}\n").as_bytes(), 0o644)
}

/// The sizes of the waves `count` snapshots run in, at most `width` each: as few as that allows,
/// as even as can be (one short wave at the end would leave cores idle).
fn waves(count: usize, width: usize) -> Vec<usize> {
    if count == 0 {
        return Vec::new();
    }
    let n = count.div_ceil(width.max(1));
    (0..n)
        .map(|i| count / n + usize::from(i < count % n))
        .collect()
}

/// The exit of a run over `names`: failures first, then a split brain (the hourly timer's unit
/// fails either way, so it shows).
fn conclude(names: &[String], outcomes: Vec<Outcome>) -> Result<()> {
    let failed = outcomes.iter().filter(|o| **o == Outcome::Failed).count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} snapshots failed", names.len());
    }
    let forked: Vec<&str> = names
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| **o == Outcome::Forked)
        .map(|(n, _)| n.as_str())
        .collect();
    if !forked.is_empty() {
        return Err(UserError::new(
            Code::LeaseHeld,
            format!(
                "box(es) {} run here but were taken over by another node; their snapshots here are forks",
                forked.join(", ")
            ),
            "'ag-box park <box>' here stops this copy; its files stay in the fork snapshot",
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{waves, width};

    #[test]
    fn four_per_core_within_half_the_memory_available() {
        const MB: u64 = 1 << 20;
        assert_eq!(width(2, Some(4096 * MB), None), 8, "no figure yet");
        assert_eq!(width(2, None, Some(100 * MB)), 8, "no memory figure");
        assert_eq!(width(2, Some(4096 * MB), Some(100 * MB)), 8);
        assert_eq!(width(2, Some(2000 * MB), Some(100 * MB)), 5);
        assert_eq!(width(4, Some(8000 * MB), Some(100 * MB)), 16);
        assert_eq!(width(2, Some(100 * MB), Some(150 * MB)), 1, "one at least");
        assert_eq!(width(2, Some(1000 * MB), Some(0)), 8);
    }

    #[test]
    fn waves_are_few_and_even() {
        assert_eq!(waves(0, 8), Vec::<usize>::new());
        assert_eq!(waves(3, 8), vec![3]);
        assert_eq!(waves(8, 8), vec![8]);
        assert_eq!(waves(10, 8), vec![5, 5]);
        assert_eq!(waves(17, 8), vec![6, 6, 5]);
        assert_eq!(waves(3, 1), vec![1, 1, 1]);
        assert_eq!(waves(2, 0), vec![1, 1]);
    }
}
