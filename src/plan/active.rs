//! How `snapshot --active` runs the boxes up on a node: in what order, how many at once, in
//! which waves. Each box's snapshot is a process of its own (an ag-box and its restic).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// How often the timer runs `snapshot --active --due`; `BOX_SNAPSHOT_EVERY` is at least this.
pub(crate) const TIMER_EVERY: Duration = Duration::from_mins(5);

/// A timer's run that comes this much early still finds a box due (runs are minutes apart).
const DUE_SLACK: Duration = Duration::from_mins(1);

/// Is a box whose last snapshot (or lease renewal) here was at `last` due for another, `every`
/// apart, at `now`? Never snapshotted here: due. A clock set back: due.
pub(crate) fn due(last: Option<SystemTime>, now: SystemTime, every: Duration) -> bool {
    last.and_then(|at| now.duration_since(at).ok())
        .is_none_or(|age| age + DUE_SLACK >= every)
}

/// What the last run measured, for the next one to plan by.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LastRun {
    /// The most memory (bytes) one of its processes took: a restic holds the repository's
    /// whole index.
    pub peak_memory: u64,
    /// Seconds each box's snapshot took.
    pub seconds: BTreeMap<String, f64>,
    /// The most snapshots that ran at once (0: not measured, a file of an older ag-box).
    #[serde(default)]
    pub width: usize,
    /// Seconds of the quickest snapshot that ran a restic backup (a box with nothing new runs
    /// none).
    #[serde(default)]
    pub quickest_backup: Option<f64>,
    /// How busy all the node's cores were meanwhile, 0 to 1: its S3 server and agents count too.
    #[serde(default)]
    pub busy: f64,
}

impl LastRun {
    /// The box that took longest, and its seconds.
    pub(crate) fn longest(&self) -> Option<(&str, f64)> {
        self.seconds
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(name, s)| (name.as_str(), *s))
    }
}

/// A run whose quickest snapshot took this long mostly waited on the store: its wave's lock
/// checks were over long before the first of it ended.
const WAITED_ON_THE_STORE: f64 = 1.0;
/// A run whose cores were this busy had no CPU to spare for more at once.
const BUSY: f64 = 0.75;

/// How many snapshots run at once. Four per core, and eight when the run before shows they
/// mostly waited on the store (a store far away: its quickest backup took a second or more)
/// with the cores idle enough ([`BUSY`]). Short backups many at once meet restic #1523: a
/// restic that reads the locks as another removes its own waits five seconds, and the idle
/// time that makes looks like room for more. No more than half the memory available holds,
/// each an ag-box and its restic at the run's peak before: the agents keep theirs.
pub(crate) fn width(cores: usize, available: Option<u64>, last: &LastRun) -> usize {
    let cores = cores.max(1);
    let waited = last
        .quickest_backup
        .is_some_and(|s| s >= WAITED_ON_THE_STORE);
    let by_cpu = if waited && last.busy > 0.0 && last.busy < BUSY {
        8 * cores
    } else {
        4 * cores
    };
    match available {
        Some(available) if last.peak_memory > 0 => {
            let fit = available / 2 / (2 * last.peak_memory);
            by_cpu.min(usize::try_from(fit).unwrap_or(usize::MAX).max(1))
        }
        _ => by_cpu,
    }
}

/// The boxes, longest first by what they took the last time (one not in it first of all: its
/// first snapshot here may read everything). A wave lasts as long as its longest box, so the
/// long ones share the first and the short ones the last.
pub(crate) fn order(names: &[String], last: &LastRun) -> Vec<String> {
    let mut ordered = names.to_vec();
    let took = |n: &String| last.seconds.get(n).copied().unwrap_or(f64::INFINITY);
    ordered.sort_by(|a, b| took(b).total_cmp(&took(a)).then_with(|| a.cmp(b)));
    ordered
}

/// The sizes of the waves `count` snapshots run in, at most `width` each: as few as that allows,
/// as even as can be (one short wave at the end would leave cores idle).
pub(crate) fn waves(count: usize, width: usize) -> Vec<usize> {
    if count == 0 {
        return Vec::new();
    }
    let n = count.div_ceil(width.max(1));
    (0..n)
        .map(|i| count / n + usize::from(i < count % n))
        .collect()
}

/// How long a wave's boxes may run before the next wave starts beside those still running.
pub(crate) const STRAGGLER: Duration = Duration::from_mins(1);

/// Whether the next wave starts, given how long each running snapshot has run: when none runs,
/// or all have run past [`STRAGGLER`] (one stuck on the network must not hold back the boxes
/// after it; its end may then cost a lock check in the next wave its five seconds).
pub(crate) fn next_wave_due(running_for: &[Duration]) -> bool {
    running_for.iter().all(|t| *t >= STRAGGLER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A run whose boxes took `seconds`, with the cores `busy`.
    fn ran(seconds: &[f64], busy: f64, peak_memory: u64) -> LastRun {
        LastRun {
            peak_memory,
            seconds: seconds
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("b{i}"), *s))
                .collect(),
            width: seconds.len(),
            quickest_backup: seconds.iter().copied().reduce(f64::min),
            busy,
        }
    }

    #[test]
    fn four_per_core_within_half_the_memory_available() {
        const MB: u64 = 1 << 20;
        let first = |peak| ran(&[], 0.0, peak);
        assert_eq!(width(2, Some(4096 * MB), &first(0)), 8, "no figure yet");
        assert_eq!(width(2, None, &first(100 * MB)), 8, "no memory figure");
        assert_eq!(width(2, Some(4096 * MB), &first(100 * MB)), 8);
        assert_eq!(width(2, Some(2000 * MB), &first(100 * MB)), 5);
        assert_eq!(width(4, Some(8000 * MB), &first(100 * MB)), 16);
        assert_eq!(
            width(2, Some(100 * MB), &first(150 * MB)),
            1,
            "one at least"
        );
        assert_eq!(
            width(2, Some(2000 * MB), &ran(&[1.6, 2.0], 0.3, 100 * MB)),
            5,
            "memory before the store"
        );
    }

    #[test]
    fn eight_per_core_when_the_snapshots_mostly_waited_on_the_store() {
        assert_eq!(width(2, None, &ran(&[1.6, 2.9, 1.8], 0.56, 0)), 16);
        assert_eq!(
            width(2, None, &ran(&[0.4, 0.7, 5.6], 0.2, 0)),
            8,
            "quick ones, however idle a stall left the cores"
        );
        assert_eq!(
            width(2, None, &ran(&[1.6, 2.9], 0.8, 0)),
            8,
            "no CPU to spare"
        );
        assert_eq!(
            width(2, None, &ran(&[1.6, 2.9], 0.0, 0)),
            8,
            "how busy not measured"
        );
        let unchanged_too = LastRun {
            quickest_backup: None,
            ..ran(&[0.3, 0.4], 0.1, 0)
        };
        assert_eq!(width(2, None, &unchanged_too), 8, "no backup measured");
        let unchanged_quick = LastRun {
            quickest_backup: Some(1.6),
            ..ran(&[0.3, 1.6, 2.0], 0.3, 0)
        };
        assert_eq!(
            width(2, None, &unchanged_quick),
            16,
            "boxes with nothing new run no restic: their time does not count"
        );
    }

    #[test]
    fn the_longest_first_and_a_new_box_before_them() {
        let names: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let last = LastRun {
            seconds: [
                ("a", 0.2),
                ("b", 1.5),
                ("c", 0.2),
                ("e", 0.9),
                ("gone", 9.0),
            ]
            .map(|(n, s)| (n.to_string(), s))
            .into(),
            ..LastRun::default()
        };
        assert_eq!(order(&names, &last), ["d", "b", "e", "a", "c"]);
        assert_eq!(last.longest(), Some(("gone", 9.0)));
        assert_eq!(order(&names, &LastRun::default()), names);
    }

    #[test]
    fn a_wave_waits_for_the_last_unless_all_left_are_stuck() {
        let s = Duration::from_secs;
        assert!(next_wave_due(&[]));
        assert!(!next_wave_due(&[s(1), s(2)]));
        assert!(
            !next_wave_due(&[s(75), s(2)]),
            "a new wave beside a straggler"
        );
        assert!(next_wave_due(&[s(60), s(75)]));
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

    #[test]
    fn a_box_is_due_once_its_last_turn_is_every_ago_give_or_take_a_minute() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_hours(100);
        let every = Duration::from_mins(15);
        let ago = |m: u64| Some(now - Duration::from_mins(m));
        assert!(due(None, now, every));
        assert!(!due(ago(5), now, every));
        assert!(!due(ago(13), now, every));
        assert!(due(ago(14), now, every));
        assert!(due(ago(60), now, every));
        assert!(due(Some(now + Duration::from_mins(3)), now, every));
    }
}
