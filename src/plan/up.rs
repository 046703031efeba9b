//! What `up` does with this node's copy of a box, decided from what is known before anything
//! is touched: start the copy as it is, or restore the box's latest snapshot first, and by
//! which ways in which order (`lifecycle::up` executes the plan).

/// What `up` knows of the box and of this node's copy once it holds the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyFacts {
    /// This node held the lease before this `up` and no `up` here was cut off: unless the
    /// copy is stale or half restored, it is the box's newest.
    pub held: bool,
    /// How the copy stands to the box's snapshots.
    pub copy: Known,
    /// The project path exists (as anything).
    pub project_exists: bool,
    /// The project path is a directory.
    pub project_is_dir: bool,
}

/// What is known of this node's copy against the box's snapshots (`sys::copy_state::Relation`
/// as the plan reads it); `current`: it equals the latest, and all the paths it holds are
/// there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// Nothing: never saved or restored here, or kept only as a fork.
    Nothing,
    /// The copy equals a snapshot.
    Equals { current: bool },
    /// It equals a snapshot, but a rollback pointed the record at an earlier one since.
    Stale { current: bool },
    /// A restore in place cut off here left the copy part old, part new (nothing unsaved).
    Restoring,
}

/// Why the copy is restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// The box ran here, but its project is gone.
    CopyGone,
    /// The copy is not the latest snapshot (another node ran the box, a rollback, a restore
    /// cut off, or no copy here at all).
    Behind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyPlan<S> {
    /// Start the copy as it is; `clear_stale`: a rollback cut off before it moved the record
    /// left the copy marked stale, and it is the latest after all.
    Start { clear_stale: bool },
    /// Restore the latest snapshot; `keep_local_work`: the copy may hold work in no snapshot,
    /// so it is checked (and kept as a fork snapshot unless it equals one) first.
    Restore {
        snapshot: S,
        why: Why,
        keep_local_work: bool,
    },
    /// Nothing to start: no project and no snapshot to restore it from.
    Missing,
}

/// What to do with the copy, given the box's latest snapshot (if it has one).
pub(crate) fn copy<S>(f: CopyFacts, latest: Option<S>) -> CopyPlan<S> {
    // The copy is the box's newest only if the box ran here since this node took the lease,
    // and no rollback or restore since made it something else.
    let (newest, current) = match f.copy {
        Known::Nothing => (f.held, false),
        Known::Equals { current } => (f.held, current),
        Known::Stale { current } => (false, current),
        Known::Restoring => (false, false),
    };
    let why = if newest {
        (!f.project_exists).then_some(Why::CopyGone)
    } else {
        (!current).then_some(Why::Behind)
    };
    match (latest, why) {
        (Some(snapshot), Some(why)) => CopyPlan::Restore {
            snapshot,
            why,
            keep_local_work: f.copy != Known::Restoring,
        },
        _ if !f.project_is_dir => CopyPlan::Missing,
        _ => CopyPlan::Start {
            clear_stale: matches!(f.copy, Known::Stale { .. }),
        },
    }
}

/// What decides how a snapshot is brought onto this node's copy.
// Independent facts, as above.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestoreFacts {
    /// The copy is known to equal a snapshot (so what changed since can be written alone).
    pub equals_a_snapshot: bool,
    /// The node that parked the latest published what changed since the snapshot the copy
    /// equals (`plan::delta::PublishedRef::leads`).
    pub published: bool,
    /// The operator asked for a whole restore (`AG_BOX_FULL_RESTORE=1`).
    pub full: bool,
    /// The snapshot holds exactly paths this node keeps, the project among them, and the
    /// project is a directory here: it can be changed where it is.
    pub fits_roots: bool,
    /// restic restores in place (0.17+).
    pub restores_in_place: bool,
}

/// A way to bring the copy to a snapshot that writes less than a whole restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shortcut {
    /// Write only what changed since the snapshot the copy equals, as the node that parked it
    /// published it (one restore of a small snapshot).
    Published,
    /// Write only what changed since the snapshot the copy equals, as restic lists it
    /// (`restic diff` and `restic ls` of the whole tree, then a restore of at most 1,000
    /// paths; more and it gives up).
    Listed,
    /// restic restores over the copy, writing only what differs.
    InPlace,
}

/// The shortcuts to try, cheapest first; a failed one falls through to the next, and after
/// them all comes a whole restore into a staging dir beside the copy, then a swap (always
/// possible). The order is what `bench/restore-ways.sh` measured of restic 0.18 (seconds, at
/// 20,000 files / 300 MiB and 200,000 files / 2 GiB, 1% changed): a whole restore 6.3 and
/// 26.5; the published changes' restore 1.4 (and 2.0 for restore and moves in
/// `bench/run.sh` at 200,000); restic's listing 2.0 and 6.8, plus its fetch 1.4 and 7.0, and
/// past 1,000 changes the listing is spent for nothing; in place 2.1 and 15.0. So the
/// published changes come first, and where restic restores in place its listing is not
/// tried: the listing alone costs about what the restore in place costs, and at real sizes
/// more changes than it may fetch make it a pure loss.
pub(crate) fn shortcuts(f: RestoreFacts) -> Vec<Shortcut> {
    let mut ways = Vec::new();
    if f.fits_roots && !f.full {
        if f.equals_a_snapshot && f.published {
            ways.push(Shortcut::Published);
        }
        if f.restores_in_place {
            ways.push(Shortcut::InPlace);
        } else if f.equals_a_snapshot {
            ways.push(Shortcut::Listed);
        }
    }
    ways
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const NEW_HERE: CopyFacts = CopyFacts {
        held: false,
        copy: Known::Nothing,
        project_exists: false,
        project_is_dir: false,
    };
    const CURRENT: Known = Known::Equals { current: true };
    const THERE: CopyFacts = CopyFacts {
        project_exists: true,
        project_is_dir: true,
        ..NEW_HERE
    };

    fn restore(why: Why, keep_local_work: bool) -> CopyPlan<&'static str> {
        CopyPlan::Restore {
            snapshot: "s1",
            why,
            keep_local_work,
        }
    }

    #[test]
    fn a_copy_is_restored_unless_it_is_the_latest() {
        let start = CopyPlan::Start { clear_stale: false };
        let cases = [
            // Never here: restore; the check for unsaved work finds no copy.
            (NEW_HERE, Some("s1"), restore(Why::Behind, true)),
            // Here, but another node ran the box since: what it holds may be unsaved.
            (THERE, Some("s1"), restore(Why::Behind, true)),
            // Equal to the latest snapshot: start as it is.
            (
                CopyFacts {
                    copy: CURRENT,
                    ..THERE
                },
                Some("s1"),
                start,
            ),
            // Ran here last: the copy is newer than any snapshot, even if it equals none.
            (
                CopyFacts {
                    held: true,
                    ..THERE
                },
                Some("s1"),
                start,
            ),
            (
                CopyFacts {
                    held: true,
                    copy: Known::Equals { current: false },
                    ..THERE
                },
                Some("s1"),
                start,
            ),
            // Ran here, but its project is gone.
            (
                CopyFacts {
                    held: true,
                    ..NEW_HERE
                },
                Some("s1"),
                restore(Why::CopyGone, true),
            ),
            // A restore cut off here: finish it, nothing unsaved to keep; never started half
            // restored, even where the lease stayed here.
            (
                CopyFacts {
                    copy: Known::Restoring,
                    ..THERE
                },
                Some("s1"),
                restore(Why::Behind, false),
            ),
            (
                CopyFacts {
                    held: true,
                    copy: Known::Restoring,
                    ..THERE
                },
                Some("s1"),
                restore(Why::Behind, false),
            ),
            // A rollback: the copy ran here, but the record now names an earlier snapshot.
            (
                CopyFacts {
                    held: true,
                    copy: Known::Stale { current: false },
                    ..THERE
                },
                Some("s1"),
                restore(Why::Behind, true),
            ),
            // A rollback cut off before it moved the record: the copy is current after all.
            (
                CopyFacts {
                    held: true,
                    copy: Known::Stale { current: true },
                    ..THERE
                },
                Some("s1"),
                CopyPlan::Start { clear_stale: true },
            ),
            // No snapshot: the project must be there.
            (THERE, None, start),
            (NEW_HERE, None, CopyPlan::Missing),
            // A file where the project should be: missing, snapshot or not.
            (
                CopyFacts {
                    project_is_dir: false,
                    ..THERE
                },
                None,
                CopyPlan::Missing,
            ),
            (
                CopyFacts {
                    held: true,
                    project_is_dir: false,
                    ..THERE
                },
                Some("s1"),
                CopyPlan::Missing,
            ),
        ];
        for (facts, latest, plan) in cases {
            assert_eq!(copy(facts, latest), plan, "{facts:?} {latest:?}");
        }
    }

    #[test]
    fn restores_try_the_cheapest_way_first() {
        use Shortcut::{InPlace, Listed, Published};
        let all = RestoreFacts {
            equals_a_snapshot: true,
            published: true,
            full: false,
            fits_roots: true,
            restores_in_place: true,
        };
        let old_restic = RestoreFacts {
            restores_in_place: false,
            ..all
        };
        let cases = [
            (all, vec![Published, InPlace]),
            // Nothing published: restic in place, its listing only where it cannot do that.
            (
                RestoreFacts {
                    published: false,
                    ..all
                },
                vec![InPlace],
            ),
            (old_restic, vec![Published, Listed]),
            (
                RestoreFacts {
                    published: false,
                    ..old_restic
                },
                vec![Listed],
            ),
            // A copy equal to no snapshot: what changed since is not known.
            (
                RestoreFacts {
                    equals_a_snapshot: false,
                    ..all
                },
                vec![InPlace],
            ),
            (
                RestoreFacts {
                    equals_a_snapshot: false,
                    ..old_restic
                },
                vec![],
            ),
            // Paths this node does not keep: only a whole restore fits.
            (
                RestoreFacts {
                    fits_roots: false,
                    ..all
                },
                vec![],
            ),
            // A copy the operator distrusts is replaced whole.
            (RestoreFacts { full: true, ..all }, vec![]),
        ];
        for (facts, ways) in cases {
            assert_eq!(shortcuts(facts), ways, "{facts:?}");
        }
    }
}
