//! The lease state machine: pure functions from a record to the next record.
//! Every store backend runs these inside its compare-and-swap loop.

use std::time::{Duration, SystemTime};

use super::meta::{Lease, Meta, SnapshotRef};

pub(crate) fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// What `up` on `node` does with the record as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpPlan {
    /// Nobody holds it: take it, epoch + 1.
    Acquire,
    /// This node already holds it (crash, reboot, or still running): the local copy is the newest.
    AlreadyOurs { epoch: u64 },
    /// Another node holds it and no `--force`.
    HeldElsewhere(Lease),
    /// Another node holds it and `--force`: take it; its unsnapshotted work forks.
    TakeOver(Lease),
}

pub(crate) fn plan_up(meta: &Meta, node: &str, force: bool) -> UpPlan {
    match &meta.lease {
        None => UpPlan::Acquire,
        Some(l) if l.node == node => UpPlan::AlreadyOurs { epoch: l.epoch },
        Some(l) if force => UpPlan::TakeOver(l.clone()),
        Some(l) => UpPlan::HeldElsewhere(l.clone()),
    }
}

/// The highest epoch this record has seen: a released lease leaves its epoch in `last_snapshot`.
fn last_epoch(meta: &Meta) -> u64 {
    let leased = meta.lease.as_ref().map_or(0, |l| l.epoch);
    let snapped = meta.last_snapshot.as_ref().map_or(0, |s| s.epoch);
    leased.max(snapped)
}

/// Take the lease for `node` with a new epoch.
pub(crate) fn acquire(meta: &Meta, node: &str, now: SystemTime, ttl: Duration) -> Meta {
    let at = timestamp(now);
    Meta {
        lease: Some(Lease {
            node: node.to_string(),
            epoch: last_epoch(meta) + 1,
            acquired_at: at.clone(),
            renewed_at: at,
            expires_at: timestamp(now + ttl),
        }),
        ..meta.clone()
    }
}

/// The lease is no longer the one the caller held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseLost {
    pub now_held_by: Option<Lease>,
}

fn check_held<'a>(meta: &'a Meta, node: &str, epoch: u64) -> Result<&'a Lease, LeaseLost> {
    match &meta.lease {
        Some(l) if l.node == node && l.epoch == epoch => Ok(l),
        other => Err(LeaseLost {
            now_held_by: other.clone(),
        }),
    }
}

/// Renew after a snapshot; the snapshot becomes `last_snapshot` only while the lease is ours.
pub(crate) fn renew(
    meta: &Meta,
    node: &str,
    epoch: u64,
    snapshot: Option<SnapshotRef>,
    now: SystemTime,
    ttl: Duration,
) -> Result<Meta, LeaseLost> {
    let lease = check_held(meta, node, epoch)?;
    Ok(Meta {
        lease: Some(Lease {
            renewed_at: timestamp(now),
            expires_at: timestamp(now + ttl),
            ..lease.clone()
        }),
        last_snapshot: snapshot.or_else(|| meta.last_snapshot.clone()),
        ..meta.clone()
    })
}

/// Park: drop the lease, pointing `last_snapshot` at the parking snapshot.
pub(crate) fn release(
    meta: &Meta,
    node: &str,
    epoch: u64,
    snapshot: Option<SnapshotRef>,
) -> Result<Meta, LeaseLost> {
    check_held(meta, node, epoch)?;
    Ok(Meta {
        lease: None,
        last_snapshot: snapshot.or_else(|| meta.last_snapshot.clone()),
        ..meta.clone()
    })
}

/// A lease not renewed within its TTL looks abandoned (its node may be down).
pub(crate) fn is_stale(lease: &Lease, now: SystemTime) -> bool {
    humantime::parse_rfc3339(&lease.expires_at).map_or(true, |exp| exp < now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }
    const TTL: Duration = Duration::from_hours(3);

    fn meta() -> Meta {
        Meta {
            created_at: timestamp(t(0)),
            ..Meta::sample("demo")
        }
    }

    fn lease(node: &str, epoch: u64) -> Lease {
        Lease {
            node: node.into(),
            epoch,
            acquired_at: timestamp(t(0)),
            renewed_at: timestamp(t(0)),
            expires_at: timestamp(t(0) + TTL),
        }
    }

    fn snap(id: &str, epoch: u64) -> SnapshotRef {
        SnapshotRef {
            id: id.into(),
            at: timestamp(t(5)),
            node: "a".into(),
            epoch,
            paths: vec![],
            on: None,
            same_as: None,
        }
    }

    #[test]
    fn up_decisions() {
        let free = meta();
        assert_eq!(plan_up(&free, "a", false), UpPlan::Acquire);
        assert_eq!(plan_up(&free, "a", true), UpPlan::Acquire);
        let held = Meta {
            lease: Some(lease("b", 3)),
            ..meta()
        };
        assert_eq!(plan_up(&held, "b", false), UpPlan::AlreadyOurs { epoch: 3 });
        assert_eq!(
            plan_up(&held, "a", false),
            UpPlan::HeldElsewhere(lease("b", 3))
        );
        assert_eq!(plan_up(&held, "a", true), UpPlan::TakeOver(lease("b", 3)));
    }

    #[test]
    fn acquire_starts_a_new_epoch_after_every_holder() {
        let parked = Meta {
            last_snapshot: Some(snap("s1", 4)),
            ..meta()
        };
        let got = acquire(&parked, "a", t(10), TTL);
        assert_eq!(
            got,
            Meta {
                lease: Some(Lease {
                    node: "a".into(),
                    epoch: 5,
                    acquired_at: timestamp(t(10)),
                    renewed_at: timestamp(t(10)),
                    expires_at: timestamp(t(10) + TTL),
                }),
                ..parked.clone()
            }
        );
        let forced = Meta {
            lease: Some(lease("b", 7)),
            ..parked
        };
        assert_eq!(
            acquire(&forced, "a", t(10), TTL).lease.map(|l| l.epoch),
            Some(8)
        );
        assert_eq!(
            acquire(&meta(), "a", t(0), TTL).lease.map(|l| l.epoch),
            Some(1)
        );
    }

    #[test]
    fn renew_moves_last_snapshot_only_for_the_holder() {
        let held = Meta {
            lease: Some(lease("a", 2)),
            ..meta()
        };
        let renewed = renew(&held, "a", 2, Some(snap("s2", 2)), t(60), TTL).unwrap();
        assert_eq!(
            renewed,
            Meta {
                lease: Some(Lease {
                    renewed_at: timestamp(t(60)),
                    expires_at: timestamp(t(60) + TTL),
                    ..lease("a", 2)
                }),
                last_snapshot: Some(snap("s2", 2)),
                ..meta()
            }
        );
        assert_eq!(
            renew(&held, "a", 1, Some(snap("s2", 1)), t(60), TTL),
            Err(LeaseLost {
                now_held_by: Some(lease("a", 2))
            })
        );
        assert_eq!(
            renew(&held, "b", 2, None, t(60), TTL),
            Err(LeaseLost {
                now_held_by: Some(lease("a", 2))
            })
        );
        assert_eq!(
            renew(&meta(), "a", 2, None, t(60), TTL),
            Err(LeaseLost { now_held_by: None })
        );
    }

    #[test]
    fn renew_without_snapshot_keeps_the_old_one() {
        let held = Meta {
            lease: Some(lease("a", 2)),
            last_snapshot: Some(snap("s1", 2)),
            ..meta()
        };
        let renewed = renew(&held, "a", 2, None, t(60), TTL).unwrap();
        assert_eq!(renewed.last_snapshot, Some(snap("s1", 2)));
    }

    #[test]
    fn release_frees_the_box_and_records_the_snapshot() {
        let held = Meta {
            lease: Some(lease("a", 2)),
            ..meta()
        };
        assert_eq!(
            release(&held, "a", 2, Some(snap("s3", 2))),
            Ok(Meta {
                last_snapshot: Some(snap("s3", 2)),
                ..meta()
            })
        );
        assert_eq!(
            release(&held, "b", 2, Some(snap("s3", 2))),
            Err(LeaseLost {
                now_held_by: Some(lease("a", 2))
            })
        );
    }

    #[test]
    fn staleness_follows_expiry() {
        let l = lease("a", 1);
        assert!(!is_stale(&l, t(60)));
        assert!(is_stale(&l, t(0) + TTL + Duration::from_secs(1)));
    }
}
