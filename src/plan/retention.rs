//! Which restic snapshots of one box (or of the `globals` set) to keep and which to forget.
//!
//! Like restic's `--keep-last/--keep-daily/--keep-weekly`, days and weeks are the most recent
//! distinct periods that hold a snapshot, not calendar periods counted back from now. Forks never
//! count toward those quotas; they are kept while younger than [`Policy::window`]. The snapshot a
//! box record points to (`pinned`) is never forgotten.

use std::time::{Duration, SystemTime};

use crate::plan::snapshot_id::SnapshotId;

const DAY_SECS: i64 = 86_400;

/// One restic snapshot, as far as retention cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snap {
    pub id: SnapshotId,
    pub time: SystemTime,
    pub fork: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    pub last: usize,
    pub daily: usize,
    pub weekly: usize,
}

impl Policy {
    /// Defaults documented for operators: keep the 10 newest, one a day for 7 days, one a week for 8 weeks.
    pub(crate) const DEFAULT: Policy = Policy {
        last: 10,
        daily: 7,
        weekly: 8,
    };

    /// How far back forks are protected: max(daily days, weekly*7 days).
    pub(crate) fn window(&self) -> Duration {
        let days = self.daily.max(self.weekly.saturating_mul(7)) as u64;
        Duration::from_secs(days.saturating_mul(DAY_SECS as u64))
    }
}

/// Why a snapshot is kept: the first rule that applies, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    Last,
    Daily,
    Weekly,
    Pinned,
    RecentFork,
    /// A changes snapshot (`plan::delta::PublishedRef`) that leads to the box's latest.
    LeadsToLatest,
    /// Newer than the box's latest (or the box has none yet): a park, snapshot or track may be
    /// between its backup and the record that names it.
    NewerThanLatest,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::Last => "one of the last",
            Reason::Daily => "newest of its day",
            Reason::Weekly => "newest of its week",
            Reason::Pinned => "the box's latest",
            Reason::RecentFork => "a recent fork",
            Reason::LeadsToLatest => "what changed up to the box's latest",
            Reason::NewerThanLatest => "newer than the box's latest (its record may be on its way)",
        })
    }
}

/// Every input id exactly once, newest first in each list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    pub keep: Vec<(SnapshotId, Reason)>,
    pub forget: Vec<SnapshotId>,
}

/// Seconds since the Unix epoch, floored (negative before it).
fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let up = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            -up.saturating_add(i64::from(d.subsec_nanos() > 0))
        }
    }
}

/// UTC calendar day number since the epoch.
fn day_bucket(t: SystemTime) -> i64 {
    unix_secs(t).div_euclid(DAY_SECS)
}

/// 7-day bucket starting Monday 00:00 UTC (the epoch was a Thursday, hence the +3).
fn week_bucket(t: SystemTime) -> i64 {
    (day_bucket(t) + 3).div_euclid(7)
}

fn is_pinned(id: &SnapshotId, pinned: Option<&SnapshotId>) -> bool {
    pinned == Some(id)
}

/// Marks the newest non-fork snapshot of each of the `count` most recent distinct buckets.
/// `order` is newest first.
fn mark_buckets(order: &[&Snap], count: usize, bucket: fn(SystemTime) -> i64) -> Vec<bool> {
    let mut marked = vec![false; order.len()];
    let mut seen = 0;
    let mut current = None;
    for (i, s) in order.iter().enumerate() {
        if seen == count {
            break;
        }
        if s.fork {
            continue;
        }
        let b = bucket(s.time);
        if current != Some(b) {
            current = Some(b);
            seen += 1;
            marked[i] = true;
        }
    }
    marked
}

/// Decides which snapshots to keep (with the first reason that applies) and which to forget.
pub(crate) fn plan(
    snaps: &[Snap],
    policy: Policy,
    pinned: Option<&SnapshotId>,
    now: SystemTime,
) -> Plan {
    let mut order: Vec<&Snap> = snaps.iter().collect();
    order.sort_by(|a, b| {
        b.time
            .cmp(&a.time)
            .then_with(|| a.id.as_str().cmp(b.id.as_str()))
    });

    let mut last = vec![false; order.len()];
    for (i, _) in order
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.fork)
        .take(policy.last)
    {
        last[i] = true;
    }
    let daily = mark_buckets(&order, policy.daily, day_bucket);
    let weekly = mark_buckets(&order, policy.weekly, week_bucket);
    let cutoff = now.checked_sub(policy.window());

    let latest_time = order
        .iter()
        .find(|s| is_pinned(&s.id, pinned))
        .map(|s| s.time);
    let mut out = Plan::default();
    for (i, s) in order.iter().enumerate() {
        let reason = if is_pinned(&s.id, pinned) {
            Some(Reason::Pinned)
        } else if last[i] {
            Some(Reason::Last)
        } else if daily[i] {
            Some(Reason::Daily)
        } else if weekly[i] {
            Some(Reason::Weekly)
        } else if !s.fork && latest_time.is_some_and(|t| s.time > t) {
            // A fork is never recorded as a latest: its own window decides.
            Some(Reason::NewerThanLatest)
        } else if s.fork && cutoff.is_none_or(|c| s.time > c) {
            Some(Reason::RecentFork)
        } else {
            None
        };
        match reason {
            Some(r) => out.keep.push((s.id.clone(), r)),
            None => out.forget.push(s.id.clone()),
        }
    }
    out
}

/// A box's snapshots: as [`plan`] says, but a box whose record names no snapshot yet keeps
/// them all (its first may be between its backup and the record).
pub(crate) fn box_plan(
    snaps: &[Snap],
    policy: Policy,
    latest: Option<&SnapshotId>,
    now: SystemTime,
) -> Plan {
    if latest.is_some() {
        return plan(snaps, policy, latest, now);
    }
    let mut order: Vec<&Snap> = snaps.iter().collect();
    order.sort_by_key(|s| std::cmp::Reverse(s.time));
    Plan {
        keep: order
            .into_iter()
            .map(|s| (s.id.clone(), Reason::NewerThanLatest))
            .collect(),
        forget: vec![],
    }
}

/// Of a box's changes snapshots, each with the snapshot it leads to: the newest that leads to
/// `pinned` (the box's latest) is kept, and those newer than the latest (taken at
/// `latest_time`; None: not known, all are) since a park may not have recorded what they lead
/// to yet; the rest are forgotten. A park saves one each time, and only one that ends at the
/// latest can serve an `up`.
pub(crate) fn changes_plan(
    changes: &[(Snap, SnapshotId)],
    pinned: Option<&SnapshotId>,
    latest_time: Option<SystemTime>,
) -> Plan {
    let mut order: Vec<&(Snap, SnapshotId)> = changes.iter().collect();
    order.sort_by(|a, b| {
        b.0.time
            .cmp(&a.0.time)
            .then_with(|| a.0.id.as_str().cmp(b.0.id.as_str()))
    });
    let mut out = Plan::default();
    let mut leading = false;
    for (s, to) in order {
        if !leading && is_pinned(to, pinned) {
            leading = true;
            out.keep.push((s.id.clone(), Reason::LeadsToLatest));
        } else if latest_time.is_none_or(|t| s.time > t) {
            out.keep.push((s.id.clone(), Reason::NewerThanLatest));
        } else {
            out.forget.push(s.id.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_the_newest_changes_leading_to_the_latest_are_kept() {
        let snap = |id: &str, secs| Snap {
            id: id.into(),
            time: at(MON + secs),
            fork: false,
        };
        let changes = [
            (snap("c1", 0), "latest-full-id".into()),
            (snap("c2", HOUR), "older".into()),
            (snap("c3", 2 * HOUR), "latest-full-id".into()),
            (snap("c4", 3 * HOUR), "elsewhere".into()),
        ];
        // The latest was taken just before c3; c4, newer, is a park's on its way to the record.
        let latest_time = Some(at(MON + 2 * HOUR - 60));
        assert_eq!(
            changes_plan(&changes, Some(&"latest-f".into()), latest_time),
            Plan {
                keep: vec![
                    ("c4".into(), Reason::NewerThanLatest),
                    ("c3".into(), Reason::LeadsToLatest)
                ],
                forget: vec!["c2".into(), "c1".into()],
            }
        );
        // Once a newer latest is recorded, c4 goes with the others that do not lead to it.
        assert_eq!(
            changes_plan(&changes, Some(&"newest".into()), Some(at(MON + 4 * HOUR))),
            Plan {
                keep: vec![],
                forget: vec!["c4".into(), "c3".into(), "c2".into(), "c1".into()],
            }
        );
        // No latest known: none is forgotten.
        assert_eq!(
            changes_plan(&changes, None, None),
            Plan {
                keep: ["c4", "c3", "c2", "c1"]
                    .map(|c| (c.into(), Reason::NewerThanLatest))
                    .to_vec(),
                forget: vec![],
            }
        );
    }

    #[test]
    fn a_snapshot_newer_than_the_latest_is_kept_whatever_the_keys_say() {
        let none = Policy {
            last: 0,
            daily: 0,
            weekly: 0,
        };
        let snaps = [
            snap("old", MON),
            snap("latest", MON + HOUR),
            snap("newer", MON + 2 * HOUR),
            // A fork is never recorded as a latest: its own window decides (zero here).
            fork("newer-fork", MON + 3 * HOUR),
        ];
        let now = at(MON + DAY);
        assert_eq!(
            plan(&snaps, none, Some(&"latest".into()), now),
            Plan {
                keep: vec![
                    ("newer".into(), Reason::NewerThanLatest),
                    ("latest".into(), Reason::Pinned)
                ],
                forget: vec!["newer-fork".into(), "old".into()],
            }
        );
        // A box whose record names no snapshot yet (its track between backup and record).
        assert_eq!(
            box_plan(&snaps, none, None, now),
            Plan {
                keep: ["newer-fork", "newer", "latest", "old"]
                    .map(|c| (c.into(), Reason::NewerThanLatest))
                    .to_vec(),
                forget: vec![],
            }
        );
        // The globals have no latest: the keys alone decide.
        assert_eq!(
            plan(&snaps, none, None, now),
            Plan {
                keep: vec![],
                forget: vec![
                    "newer-fork".into(),
                    "newer".into(),
                    "latest".into(),
                    "old".into()
                ],
            }
        );
    }

    /// `1_789_948_800` = Monday 2026-09-21 00:00:00 UTC, the start of a day and of a week bucket.
    const MON: u64 = 1_789_948_800;
    const HOUR: u64 = 3_600;
    const DAY: u64 = 86_400;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn snap(id: &str, secs: u64) -> Snap {
        Snap {
            id: id.into(),
            time: at(secs),
            fork: false,
        }
    }

    fn fork(id: &str, secs: u64) -> Snap {
        Snap {
            id: id.into(),
            time: at(secs),
            fork: true,
        }
    }

    fn policy(last: usize, daily: usize, weekly: usize) -> Policy {
        Policy {
            last,
            daily,
            weekly,
        }
    }

    fn keep(items: &[(&str, Reason)]) -> Vec<(SnapshotId, Reason)> {
        items.iter().map(|(id, r)| ((*id).into(), *r)).collect()
    }

    fn ids(items: &[&str]) -> Vec<SnapshotId> {
        items.iter().map(|id| (*id).into()).collect()
    }

    /// Monday 2026-09-28 00:00 UTC: one week after MON.
    fn now() -> SystemTime {
        at(MON + 7 * DAY)
    }

    #[test]
    fn empty_input_is_an_empty_plan() {
        assert_eq!(plan(&[], Policy::DEFAULT, None, now()), Plan::default());
        assert_eq!(
            plan(&[], Policy::DEFAULT, Some(&"abcdef12".into()), now()),
            Plan::default()
        );
    }

    #[test]
    fn fewer_snapshots_than_last_are_all_kept_newest_first() {
        let snaps = [
            snap("a", MON + HOUR),     // Mon 2026-09-21 01:00
            snap("c", MON + 3 * HOUR), // Mon 2026-09-21 03:00
            snap("b", MON + 2 * HOUR), // Mon 2026-09-21 02:00
        ];
        assert_eq!(
            plan(&snaps, Policy::DEFAULT, None, now()),
            Plan {
                keep: keep(&[
                    ("c", Reason::Last),
                    ("b", Reason::Last),
                    ("a", Reason::Last)
                ]),
                forget: vec![],
            }
        );
    }

    #[test]
    fn last_only_keeps_the_n_newest() {
        let snaps: Vec<Snap> = (0..5)
            // Mon 2026-09-21 00:00 .. 04:00, s0 oldest
            .map(|i| snap(&format!("s{i}"), MON + i * HOUR))
            .collect();
        assert_eq!(
            plan(&snaps, policy(2, 0, 0), None, now()),
            Plan {
                keep: keep(&[("s4", Reason::Last), ("s3", Reason::Last)]),
                forget: ids(&["s2", "s1", "s0"]),
            }
        );
    }

    #[test]
    fn equal_times_are_ordered_by_id() {
        let snaps = [
            snap("b", MON), // Mon 2026-09-21 00:00
            snap("a", MON), // Mon 2026-09-21 00:00
            snap("c", MON), // Mon 2026-09-21 00:00
        ];
        assert_eq!(
            plan(&snaps, policy(1, 0, 0), None, now()),
            Plan {
                keep: keep(&[("a", Reason::Last)]),
                forget: ids(&["b", "c"]),
            }
        );
    }

    #[test]
    fn daily_picks_the_newest_of_each_day() {
        let snaps = [
            snap("mon-08", MON + 8 * HOUR),            // Mon 2026-09-21 08:00
            snap("mon-20", MON + 20 * HOUR),           // Mon 2026-09-21 20:00
            snap("tue-00", MON + DAY),                 // Tue 2026-09-22 00:00
            snap("tue-12", MON + DAY + 12 * HOUR),     // Tue 2026-09-22 12:00
            snap("tue-23", MON + DAY + 23 * HOUR),     // Tue 2026-09-22 23:00
            snap("thu-09", MON + 3 * DAY + 9 * HOUR),  // Thu 2026-09-24 09:00
            snap("thu-10", MON + 3 * DAY + 10 * HOUR), // Thu 2026-09-24 10:00
        ];
        // Wednesday has no snapshot, so three days cover Thu, Tue and Mon.
        assert_eq!(
            plan(&snaps, policy(0, 3, 0), None, now()),
            Plan {
                keep: keep(&[
                    ("thu-10", Reason::Daily),
                    ("tue-23", Reason::Daily),
                    ("mon-20", Reason::Daily),
                ]),
                forget: ids(&["thu-09", "tue-12", "tue-00", "mon-08"]),
            }
        );
        // Only the two most recent days with snapshots.
        assert_eq!(
            plan(&snaps, policy(0, 2, 0), None, now()),
            Plan {
                keep: keep(&[("thu-10", Reason::Daily), ("tue-23", Reason::Daily)]),
                forget: ids(&["thu-09", "tue-12", "tue-00", "mon-20", "mon-08"]),
            }
        );
    }

    #[test]
    fn days_are_utc_calendar_days() {
        let snaps = [
            snap("sun-2359", MON - 60), // Sun 2026-09-20 23:59
            snap("mon-0000", MON),      // Mon 2026-09-21 00:00
        ];
        assert_eq!(
            plan(&snaps, policy(0, 2, 0), None, now()),
            Plan {
                keep: keep(&[("mon-0000", Reason::Daily), ("sun-2359", Reason::Daily)]),
                forget: vec![],
            }
        );
    }

    #[test]
    fn weekly_picks_the_newest_of_each_monday_week() {
        let snaps = [
            snap("w0-mon", MON - 7 * DAY),              // Mon 2026-09-14 00:00
            snap("w0-sun", MON - 60),                   // Sun 2026-09-20 23:59
            snap("w1-mon", MON),                        // Mon 2026-09-21 00:00
            snap("w1-fri", MON + 4 * DAY),              // Fri 2026-09-25 00:00
            snap("w3-tue", MON + 15 * DAY),             // Tue 2026-10-06 00:00
            snap("w3-sun", MON + 20 * DAY + 12 * HOUR), // Sun 2026-10-11 12:00
        ];
        // Week of 2026-09-28 has none, so three weeks cover w3, w1 and w0. Pruned a day after
        // the newest.
        let now = at(MON + 21 * DAY);
        assert_eq!(
            plan(&snaps, policy(0, 0, 3), None, now),
            Plan {
                keep: keep(&[
                    ("w3-sun", Reason::Weekly),
                    ("w1-fri", Reason::Weekly),
                    ("w0-sun", Reason::Weekly),
                ]),
                forget: ids(&["w3-tue", "w1-mon", "w0-mon"]),
            }
        );
        assert_eq!(
            plan(&snaps, policy(0, 0, 1), None, now),
            Plan {
                keep: keep(&[("w3-sun", Reason::Weekly)]),
                forget: ids(&["w3-tue", "w1-fri", "w1-mon", "w0-sun", "w0-mon"]),
            }
        );
    }

    #[test]
    fn the_first_reason_wins_and_rules_overlap() {
        let snaps = [
            snap("w0-wed", MON - 5 * DAY),        // Wed 2026-09-16 00:00
            snap("w1-mon", MON),                  // Mon 2026-09-21 00:00
            snap("w1-tue-a", MON + DAY),          // Tue 2026-09-22 00:00
            snap("w1-tue-b", MON + DAY + HOUR),   // Tue 2026-09-22 01:00
            snap("w1-wed", MON + 2 * DAY + HOUR), // Wed 2026-09-23 01:00
        ];
        // last=1: w1-wed. daily=3: w1-wed, w1-tue-b, w1-mon. weekly=2: w1-wed, w0-wed.
        assert_eq!(
            plan(&snaps, policy(1, 3, 2), None, now()),
            Plan {
                keep: keep(&[
                    ("w1-wed", Reason::Last),
                    ("w1-tue-b", Reason::Daily),
                    ("w1-mon", Reason::Daily),
                    ("w0-wed", Reason::Weekly),
                ]),
                forget: ids(&["w1-tue-a"]),
            }
        );
    }

    #[test]
    fn pinned_old_snapshot_is_kept_by_full_id_or_prefix() {
        let snaps = [
            snap("aaaaaaaa11111111", MON - 365 * DAY), // Sun 2025-09-21 00:00
            snap("bbbbbbbb22222222", MON),             // Mon 2026-09-21 00:00
        ];
        let want = Plan {
            keep: keep(&[
                ("bbbbbbbb22222222", Reason::Last),
                ("aaaaaaaa11111111", Reason::Pinned),
            ]),
            forget: vec![],
        };
        let p = policy(1, 0, 0);
        assert_eq!(
            plan(&snaps, p, Some(&"aaaaaaaa11111111".into()), now()),
            want
        );
        assert_eq!(plan(&snaps, p, Some(&"aaaaaaaa".into()), now()), want);
        assert_eq!(plan(&snaps, p, Some(&"aaaaaaaa1111".into()), now()), want);
    }

    #[test]
    fn pinned_needs_eight_chars_to_match_by_prefix() {
        let snaps = [
            snap("aaaaaaaa11111111", MON - 365 * DAY), // Sun 2025-09-21 00:00
            snap("bbbbbbbb22222222", MON),             // Mon 2026-09-21 00:00
        ];
        let p = policy(1, 0, 0);
        let want = Plan {
            keep: keep(&[("bbbbbbbb22222222", Reason::Last)]),
            forget: ids(&["aaaaaaaa11111111"]),
        };
        assert_eq!(plan(&snaps, p, Some(&"aaaaaaa".into()), now()), want);
        assert_eq!(plan(&snaps, p, Some(&"aaaaaaaa99".into()), now()), want);
        assert_eq!(plan(&snaps, p, Some(&"".into()), now()), want);
    }

    #[test]
    fn a_short_snapshot_id_matches_a_longer_pin() {
        let snaps = [
            snap("aaaaaaaa", MON - 365 * DAY), // Sun 2025-09-21 00:00
        ];
        assert_eq!(
            plan(
                &snaps,
                policy(0, 0, 0),
                Some(&"aaaaaaaa11111111".into()),
                now()
            ),
            Plan {
                keep: keep(&[("aaaaaaaa", Reason::Pinned)]),
                forget: vec![],
            }
        );
    }

    #[test]
    fn pinned_comes_before_last() {
        let snaps = [
            snap("newest01", MON), // Mon 2026-09-21 00:00
        ];
        assert_eq!(
            plan(&snaps, Policy::DEFAULT, Some(&"newest01".into()), now()),
            Plan {
                keep: keep(&[("newest01", Reason::Pinned)]),
                forget: vec![],
            }
        );
    }

    #[test]
    fn recent_fork_is_kept_and_old_fork_forgotten() {
        // window is 7 days; now is Mon 2026-09-28 00:00, cutoff Mon 2026-09-21 00:00.
        let snaps = [
            fork("old", MON - DAY),     // Sun 2026-09-20 00:00
            fork("edge", MON),          // Mon 2026-09-21 00:00, exactly at the cutoff
            fork("recent", MON + 1),    // Mon 2026-09-21 00:00:01
            fork("new", MON + 6 * DAY), // Sun 2026-09-27 00:00
        ];
        assert_eq!(
            plan(&snaps, policy(10, 7, 1), None, now()),
            Plan {
                keep: keep(&[("new", Reason::RecentFork), ("recent", Reason::RecentFork)]),
                forget: ids(&["edge", "old"]),
            }
        );
    }

    #[test]
    fn old_pinned_fork_is_kept() {
        let snaps = [
            fork("forkfork0001", MON - 100 * DAY), // Sat 2026-06-13 00:00
        ];
        assert_eq!(
            plan(&snaps, Policy::DEFAULT, Some(&"forkfork".into()), now()),
            Plan {
                keep: keep(&[("forkfork0001", Reason::Pinned)]),
                forget: vec![],
            }
        );
    }

    #[test]
    fn forks_do_not_consume_last_daily_or_weekly() {
        let snaps = [
            snap("s1", MON),            // Mon 2026-09-21 00:00
            snap("s2", MON + HOUR),     // Mon 2026-09-21 01:00
            fork("f1", MON + 2 * HOUR), // Mon 2026-09-21 02:00
            fork("f2", MON + DAY),      // Tue 2026-09-22 00:00
            fork("f3", MON + 8 * DAY),  // Tue 2026-09-29 00:00
        ];
        // A far-future `now` makes every fork old, so only the quotas can keep them.
        let later = at(MON + 365 * DAY); // Tue 2027-09-21 00:00
        assert_eq!(
            plan(&snaps, policy(2, 0, 0), None, later),
            Plan {
                keep: keep(&[("s2", Reason::Last), ("s1", Reason::Last)]),
                forget: ids(&["f3", "f2", "f1"]),
            }
        );
        // The newest day and week with a non-fork snapshot is Mon 2026-09-21.
        assert_eq!(
            plan(&snaps, policy(0, 1, 0), None, later),
            Plan {
                keep: keep(&[("s2", Reason::Daily)]),
                forget: ids(&["f3", "f2", "f1", "s1"]),
            }
        );
        assert_eq!(
            plan(&snaps, policy(0, 0, 1), None, later),
            Plan {
                keep: keep(&[("s2", Reason::Weekly)]),
                forget: ids(&["f3", "f2", "f1", "s1"]),
            }
        );
    }

    #[test]
    fn all_zero_policy_keeps_only_pinned_and_recent_forks() {
        // The latest is the newest: what is newer is kept whatever the keys say (see
        // a_snapshot_newer_than_the_latest_is_kept_whatever_the_keys_say).
        let snaps = [
            snap("plain", MON - 30 * DAY),          // Sat 2026-08-22 00:00
            fork("fork", MON + 6 * DAY),            // Sun 2026-09-27 00:00
            snap("pinned01", MON + 6 * DAY + HOUR), // Sun 2026-09-27 01:00
        ];
        // Window is zero, so only a fork strictly after `now` is recent.
        let p = policy(0, 0, 0);
        assert_eq!(
            plan(&snaps, p, Some(&"pinned01".into()), now()),
            Plan {
                keep: keep(&[("pinned01", Reason::Pinned)]),
                forget: ids(&["fork", "plain"]),
            }
        );
        let before_fork = at(MON + 5 * DAY); // Sat 2026-09-26 00:00
        assert_eq!(
            plan(&snaps, p, Some(&"pinned01".into()), before_fork),
            Plan {
                keep: keep(&[("pinned01", Reason::Pinned), ("fork", Reason::RecentFork)]),
                forget: ids(&["plain"]),
            }
        );
    }

    #[test]
    fn default_policy_mixed() {
        // Twelve snapshots, one every 12 hours from Mon 2026-09-21 00:00 to Sat 2026-09-26 12:00,
        // plus one from the previous week and one old fork.
        let mut snaps: Vec<Snap> = (0..12)
            .map(|i| snap(&format!("s{i:02}"), MON + i * 12 * HOUR))
            .collect();
        snaps.push(snap("prev", MON - 3 * DAY)); // Fri 2026-09-18 00:00
        snaps.push(fork("oldfork", MON - 80 * DAY)); // Fri 2026-07-03 00:00
        assert_eq!(
            plan(&snaps, Policy::DEFAULT, None, now()),
            Plan {
                keep: keep(&[
                    ("s11", Reason::Last),
                    ("s10", Reason::Last),
                    ("s09", Reason::Last),
                    ("s08", Reason::Last),
                    ("s07", Reason::Last),
                    ("s06", Reason::Last),
                    ("s05", Reason::Last),
                    ("s04", Reason::Last),
                    ("s03", Reason::Last),
                    ("s02", Reason::Last),
                    ("s01", Reason::Daily),
                    ("prev", Reason::Daily),
                ]),
                forget: ids(&["s00", "oldfork"]),
            }
        );
    }

    #[test]
    fn window_is_the_longer_of_days_and_weeks() {
        assert_eq!(Policy::DEFAULT.window(), Duration::from_secs(56 * DAY));
        assert_eq!(policy(0, 10, 1).window(), Duration::from_secs(10 * DAY));
        assert_eq!(policy(5, 7, 1).window(), Duration::from_secs(7 * DAY));
        assert_eq!(policy(3, 0, 0).window(), Duration::ZERO);
        assert_eq!(policy(0, 0, 2).window(), Duration::from_secs(14 * DAY));
    }

    #[test]
    fn buckets_start_at_utc_midnight_and_monday() {
        let epoch = SystemTime::UNIX_EPOCH;
        let got = [
            day_bucket(at(MON)),                                   // Mon 2026-09-21 00:00
            day_bucket(at(MON - 1)),                               // Sun 2026-09-20 23:59:59
            week_bucket(at(MON)),                                  // Mon 2026-09-21 00:00
            week_bucket(at(MON - 1)),                              // Sun 2026-09-20 23:59:59
            week_bucket(at(MON + 7 * DAY - 1)),                    // Sun 2026-09-27 23:59:59
            day_bucket(epoch),                                     // Thu 1970-01-01 00:00
            week_bucket(epoch), // Thu 1970-01-01, in the week from Mon 1969-12-29
            day_bucket(epoch - Duration::from_millis(1)), // Wed 1969-12-31 23:59:59.999
            week_bucket(epoch - Duration::from_secs(3 * DAY + 1)), // Sun 1969-12-28 23:59:59
        ];
        assert_eq!(got, [20_717, 20_716, 2_960, 2_959, 2_960, 0, 0, -1, -1]);
    }

    #[test]
    fn a_huge_window_keeps_every_fork() {
        let snaps = [
            fork("f", 0), // Thu 1970-01-01 00:00
        ];
        assert_eq!(
            plan(&snaps, policy(0, usize::MAX, 0), None, now()),
            Plan {
                keep: keep(&[("f", Reason::RecentFork)]),
                forget: vec![],
            }
        );
    }
}
