//! The end of a reconcile, after the plan was carried out: whether the finalizer goes, whether
//! the object has converged, and when to look at it again.
//!
//! Work is event driven: member watches and hub watches queue the object when something
//! changes, so the requeue here is only a safety net, except while waiting on something no
//! watch reports (a cache still listing) or after a failure worth retrying.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::plan::{ClusterAction, Disposition, FinalizerAction, MemberObservation, Plan};
use crate::readiness::{Readiness, not_ready};
use crate::status::{AggregateReason, ClusterOutcome, PropagationStatus};

/// Retry after a failure that may pass (KubeFed's recoverable statuses): the first delay of
/// an object's backoff ([`retry_delay`]).
pub const RETRY_DELAY: Duration = Duration::from_secs(5);
/// The longest an object backs off between failing attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);
/// Look again at a converged object this often, in case an event was missed.
pub const RESYNC: Duration = Duration::from_secs(600);
/// Look again while a member cache of a placed cluster is still listing (or waits its turn) —
/// its list's end queues the object at once; this is the fallback …
pub const CACHE_PENDING_DELAY: Duration = Duration::from_secs(5);
/// … or, past its first moments, failing to list (its first list queues what it holds).
pub const CACHE_FAILING_DELAY: Duration = Duration::from_secs(15);

/// How long a member cache's first list may get nothing — from when it began (took its list
/// slot), or since its last object — before the clusters it leaves unobserved are reported as
/// `CachedRetrievalFailed`. A list of many large objects that keeps getting pages is not
/// failing, however long it takes.
pub const CACHE_SYNC_GRACE: Duration = Duration::from_secs(30);
/// How long a member cache may wait for its first list's slot within its first moments. At a
/// start every type and member lists, a few at a time (`--member-list-concurrency`): a cluster
/// whose turn has not come is not failing, and a status saying so would be written again
/// moments later. Bounded: lists that hang give their slots back after 30 s each.
pub const CACHE_TURN_GRACE: Duration = Duration::from_secs(120);

/// Whether a member cache that has not listed yet is in its first moments — the objects placed
/// on its cluster are looked at again soon ([`CACHE_PENDING_DELAY`]) and their status waits —
/// rather than failing: its watch started `age` ago, and its list began or last got an object
/// `quiet_for` ago (`None`: it waits for a list slot).
pub fn cache_warming(age: Duration, quiet_for: Option<Duration>) -> bool {
    match quiet_for {
        Some(quiet_for) => quiet_for < CACHE_SYNC_GRACE,
        None => age < CACHE_TURN_GRACE,
    }
}

/// Look again while a member object is being removed (its watch event normally comes first).
pub const WAITING_DELAY: Duration = Duration::from_secs(10);
/// Look again while a deletion waits for member copies to go.
pub const DELETION_DELAY: Duration = Duration::from_secs(5);

/// What carrying out a plan came to, as far as the conclusion cares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// A cluster failed with a status worth retrying.
    pub recoverable_failure: bool,
    /// A cluster waits for a member object to go.
    pub waiting: bool,
    /// Failed attempts in a row for this generation of the object, this one included when
    /// `recoverable_failure` (see [`failures_after`]).
    pub failures: u32,
    /// A placed cluster could not be observed: its cache has not listed (see [`awaits_cache`]).
    pub cache_pending: bool,
    /// Some cache started listing only moments ago.
    pub cache_warming: bool,
    /// Some cluster is pending: a pull member's agent has not reported on this object's
    /// current request yet, or a push member's apply is still running (queued for the
    /// member's write permit or waiting for its answer).
    pub pending: bool,
    /// Every pending cluster is a push member's apply still running: each ends by itself
    /// (within the dispatch deadline once the member takes it) and queues the object then.
    pub pending_writes_only: bool,
}

impl Carried {
    /// The plan could not observe a placed cluster whose cache is in its first moments
    /// ([`cache_warming`]): its writes there are to come, soon ([`CACHE_PENDING_DELAY`]).
    pub fn awaits_warming_cache(&self) -> bool {
        self.cache_pending && self.cache_warming
    }
}

/// How long the status and versions of an object may wait for pull members' agents to
/// report before they are written anyway (showing each such cluster's last report).
pub const PULL_REPORT_GRACE: Duration = Duration::from_secs(30);

/// How long they may wait for push members' applies still running. Longer: such an apply
/// ends by itself, and a cold start that outlasts [`PULL_REPORT_GRACE`] (tens of seconds at
/// 10 members × 2,000 objects) left the objects written last with a status at the grace and
/// a second one moments later. Bounded all the same: writes queued behind a member that
/// stopped answering drain one dispatch deadline per write permit.
pub const PENDING_WRITES_HOLD: Duration = Duration::from_secs(120);

/// What becomes of an object's status and versions after a reconcile ([`status_hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusHold {
    /// Written now.
    Write,
    /// Put off: look at the object again after this long (an agent that stays silent
    /// queues nothing).
    Recheck(Duration),
    /// Put off until the push applies still running end — each queues the object when it
    /// does — or the hold ends: objects held that long are queued by a periodic sweep
    /// ([`hold_expired`]), not by a timer of their own, so an object whose writes ended in
    /// time costs no reconcile at the end of its hold (2,000 of them in a cold start).
    UntilWritesEnd,
}

/// Whether this reconcile writes the object's status and versions, or how they wait: not
/// while clusters are pending — each report or finished apply queues the object again, and
/// writing a status per report would multiply the hub's writes by the number of pending
/// clusters — unless they have been pending for [`PULL_REPORT_GRACE`]
/// ([`PENDING_WRITES_HOLD`] when only push applies are pending): a cluster that stays silent
/// must not hide what the other clusters did. The controller then counts the period again
/// from that write, so a slow hub gets one status write per period, not one per report.
pub fn status_hold(carried: Carried, pending_for: Duration) -> StatusHold {
    if !carried.pending {
        return StatusHold::Write;
    }
    if carried.pending_writes_only {
        return if hold_expired(pending_for) {
            StatusHold::Write
        } else {
            StatusHold::UntilWritesEnd
        };
    }
    match PULL_REPORT_GRACE.checked_sub(pending_for) {
        Some(left) if !left.is_zero() => StatusHold::Recheck(left),
        _ => StatusHold::Write,
    }
}

/// Whether an object pending for `pending_for` is past every hold: the sweep queues it, and
/// its next reconcile writes the status with what is known.
pub fn hold_expired(pending_for: Duration) -> bool {
    pending_for >= PENDING_WRITES_HOLD
}

/// The delay before the next attempt after `failures` failed attempts in a row: 5 s doubling
/// to at most 5 minutes. A member that refuses a write (an immutable field, an admission
/// webhook, RBAC) is thus not rewritten — nor a Warning event recorded — every 5 s forever.
pub fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_DELAY
        .saturating_mul(1 << doublings)
        .min(MAX_RETRY_DELAY)
}

/// How long an attempt must still wait, if it must: the object's last `failures` attempts in a
/// row failed for `failed_generation`, the last one `since` ago. Whatever wakes the object up
/// meanwhile (its own status write, a member event, a cluster change) waits for the backoff
/// too, so a refusing member sees at most one write per [`retry_delay`]. A new generation (the
/// user changed the object) or `go_ahead` (a deletion, or what the caller counts as a change
/// worth trying at once: a cluster back, an annotation changed) goes ahead at once.
pub fn backoff_remaining(
    failures: u32,
    failed_generation: i64,
    generation: i64,
    since: Duration,
    go_ahead: bool,
) -> Option<Duration> {
    if failures == 0 || go_ahead || failed_generation != generation {
        return None;
    }
    retry_delay(failures)
        .checked_sub(since)
        .filter(|left| !left.is_zero())
}

/// The count of failed attempts after this one: one more when it failed for the same
/// generation, one when it failed for a new generation (a change starts afresh), none when it
/// did not fail.
pub fn failures_after(previous: Option<(u32, i64)>, generation: i64, failed: bool) -> u32 {
    match previous {
        _ if !failed => 0,
        Some((failures, seen)) if seen == generation => failures.saturating_add(1),
        _ => 1,
    }
}

/// Whether the plan could not observe a placed cluster because its cache has not listed.
pub fn awaits_cache(plan: &Plan) -> bool {
    clusters_awaiting_cache(plan).next().is_some()
}

/// The clusters the plan could not observe because their caches have not listed: the object
/// is to be looked at again when they have.
pub fn clusters_awaiting_cache(plan: &Plan) -> impl Iterator<Item = &str> {
    plan.clusters.iter().filter_map(|c| {
        matches!(
            c.action,
            ClusterAction::Blocked {
                status: PropagationStatus::CachedRetrievalFailed,
                ..
            }
        )
        .then_some(c.cluster.as_str())
    })
}

/// When to reconcile the object again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Only when something changes.
    OnChange,
    After(Duration),
}

/// What to do with the sync finalizer of an object being deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    Keep,
    Now,
    /// When live reads confirm that no ready cluster still holds a managed copy.
    AfterVerification,
}

/// Whether the finalizer of an object being deleted may go after this reconcile.
pub fn finalizer_release(finalizer: FinalizerAction, carried: Carried) -> Release {
    if carried.recoverable_failure {
        return Release::Keep;
    }
    match finalizer {
        FinalizerAction::Remove => Release::Now,
        FinalizerAction::RemoveAfterVerification => Release::AfterVerification,
        FinalizerAction::Untouched | FinalizerAction::Ensure | FinalizerAction::Keep => {
            Release::Keep
        }
    }
}

/// When to look again. `released`: the finalizer of an object being deleted was removed.
pub fn requeue(disposition: Disposition, carried: Carried, released: bool) -> Requeue {
    match disposition {
        Disposition::Ignore(_) => Requeue::OnChange,
        Disposition::Delete if released => Requeue::OnChange,
        Disposition::Delete if carried.recoverable_failure => {
            Requeue::After(retry_delay(carried.failures))
        }
        Disposition::Delete => Requeue::After(DELETION_DELAY),
        Disposition::Sync if carried.awaits_warming_cache() => Requeue::After(CACHE_PENDING_DELAY),
        Disposition::Sync if carried.cache_pending => Requeue::After(CACHE_FAILING_DELAY),
        Disposition::Sync if carried.recoverable_failure => {
            Requeue::After(retry_delay(carried.failures))
        }
        Disposition::Sync if carried.waiting => Requeue::After(WAITING_DELAY),
        Disposition::Sync => Requeue::After(RESYNC),
    }
}

/// Every placed cluster holds the current object: the end of a propagation.
pub fn converged(carried: Carried, reason: AggregateReason, outcomes: &[ClusterOutcome]) -> bool {
    !carried.cache_pending
        && !carried.pending
        && reason == AggregateReason::Success
        && outcomes.iter().all(|o| o.status == PropagationStatus::Ok)
}

/// Seconds the oldest deletion still held by the sync finalizer has been waiting, at `now`
/// (Unix seconds), from the `(deletionTimestamp, finalizer held)` of each federated object
/// being deleted; 0 when none waits. Objects whose finalizer is gone, or not hubfed's, do not
/// wait on hubfed.
pub fn oldest_waiting_deletion(now: i64, deletions: impl IntoIterator<Item = (i64, bool)>) -> i64 {
    deletions
        .into_iter()
        .filter(|(_, held)| *held)
        .map(|(deleted_at, _)| (now - deleted_at).max(0))
        .max()
        .unwrap_or(0)
}

/// The readiness of each placed cluster's copy after a reconcile: a cluster this reconcile
/// failed to propagate to is not ready; a copy just written by it (`written`) is as the
/// write's answer showed it (`Some`), else ready at once if its type has no status, not until
/// its controller reports otherwise (the member watch brings that); otherwise the cached copy
/// says. Judged from the answer, a new copy reads as it will from the cache a moment later,
/// so the status is not written twice for it.
pub fn placed_readiness(
    placed: &BTreeSet<String>,
    outcomes: &[ClusterOutcome],
    members: &BTreeMap<String, MemberObservation>,
    written: &BTreeMap<&str, Option<&Readiness>>,
    statusless: bool,
) -> Vec<(String, Readiness)> {
    placed
        .iter()
        .map(|cluster| {
            let failed = outcomes
                .iter()
                .find(|o| o.cluster == *cluster && o.status != PropagationStatus::Ok);
            let readiness = match (failed, members.get(cluster)) {
                (Some(o), _) => not_ready(&format!("not propagated: {}", o.status.as_str())),
                _ if written.contains_key(cluster.as_str()) => {
                    if let Some(Some(answered)) = written.get(cluster.as_str()) {
                        (*answered).clone()
                    } else if statusless {
                        Readiness::Ready
                    } else {
                        not_ready("just written, waiting for its controller")
                    }
                }
                (None, Some(MemberObservation::Present(copy))) if copy.terminating => {
                    not_ready("being deleted")
                }
                (None, Some(MemberObservation::Present(copy))) => copy.readiness.clone(),
                (None, _) => not_ready("no copy yet"),
            };
            (cluster.clone(), readiness)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_warms_while_its_list_gets_pages_or_waits_its_turn() {
        let secs = Duration::from_secs;
        // Listing: 30 s from the list's start or its last object, however long it waited for
        // its turn or has been listing.
        assert!(cache_warming(secs(100), Some(secs(29))));
        assert!(!cache_warming(secs(100), Some(secs(30))));
        assert!(!cache_warming(secs(31), Some(secs(31))));
        // Waiting for its turn: not failing, for up to 2 minutes.
        assert!(cache_warming(secs(45), None));
        assert!(cache_warming(secs(119), None));
        assert!(!cache_warming(secs(120), None));
    }

    #[test]
    fn status_waits_for_pull_reports_but_not_for_ever() {
        let quiet = Carried {
            recoverable_failure: false,
            failures: 0,
            waiting: false,
            cache_pending: false,
            cache_warming: false,
            pending: false,
            pending_writes_only: false,
        };
        assert_eq!(status_hold(quiet, Duration::ZERO), StatusHold::Write);
        let pending = Carried {
            pending: true,
            ..quiet
        };
        assert_eq!(
            status_hold(pending, Duration::from_secs(1)),
            StatusHold::Recheck(PULL_REPORT_GRACE - Duration::from_secs(1))
        );
        assert_eq!(status_hold(pending, PULL_REPORT_GRACE), StatusHold::Write);
    }

    #[test]
    fn status_waits_longer_for_push_writes_still_running_but_not_for_ever() {
        let running = Carried {
            pending: true,
            pending_writes_only: true,
            ..Carried::default()
        };
        // Past the pull members' grace: a cold start's last objects get one status, not two;
        // and no timer of their own (the writes' ends queue them, the sweep the expired).
        assert_eq!(
            status_hold(running, PULL_REPORT_GRACE),
            StatusHold::UntilWritesEnd
        );
        assert!(!hold_expired(
            PENDING_WRITES_HOLD - Duration::from_millis(1)
        ));
        assert!(hold_expired(PENDING_WRITES_HOLD));
        assert_eq!(status_hold(running, PENDING_WRITES_HOLD), StatusHold::Write);
        assert_eq!(
            status_hold(running, PENDING_WRITES_HOLD + Duration::from_secs(1)),
            StatusHold::Write
        );
        // A pull member's report pending beside them: the pull grace.
        let mixed = Carried {
            pending_writes_only: false,
            ..running
        };
        assert_eq!(status_hold(mixed, PULL_REPORT_GRACE), StatusHold::Write);
    }
    use crate::plan::{IgnoreReason, MemberObject};

    const FAILED: Carried = Carried {
        recoverable_failure: true,
        failures: 1,
        waiting: false,
        cache_pending: false,
        cache_warming: false,
        pending: false,
        pending_writes_only: false,
    };

    #[test]
    fn a_finalizer_goes_only_without_recoverable_failures() {
        let ok = Carried::default();
        assert_eq!(finalizer_release(FinalizerAction::Remove, ok), Release::Now);
        assert_eq!(
            finalizer_release(FinalizerAction::RemoveAfterVerification, ok),
            Release::AfterVerification
        );
        assert_eq!(finalizer_release(FinalizerAction::Keep, ok), Release::Keep);
        assert_eq!(
            finalizer_release(FinalizerAction::Remove, FAILED),
            Release::Keep
        );
        assert_eq!(
            finalizer_release(FinalizerAction::RemoveAfterVerification, FAILED),
            Release::Keep
        );
    }

    #[test]
    fn requeues_follow_what_is_awaited() {
        let ok = Carried::default();
        let pending = Carried {
            cache_pending: true,
            cache_warming: true,
            ..FAILED
        };
        let failing = Carried {
            cache_warming: false,
            ..pending
        };
        let waiting = Carried {
            waiting: true,
            ..ok
        };
        let cases = [
            (Disposition::Sync, ok, false, Requeue::After(RESYNC)),
            (
                Disposition::Sync,
                FAILED,
                false,
                Requeue::After(RETRY_DELAY),
            ),
            (
                Disposition::Sync,
                pending,
                false,
                Requeue::After(CACHE_PENDING_DELAY),
            ),
            (
                Disposition::Sync,
                failing,
                false,
                Requeue::After(CACHE_FAILING_DELAY),
            ),
            (
                Disposition::Sync,
                waiting,
                false,
                Requeue::After(WAITING_DELAY),
            ),
            (Disposition::Delete, ok, true, Requeue::OnChange),
            (
                Disposition::Delete,
                ok,
                false,
                Requeue::After(DELETION_DELAY),
            ),
            (
                Disposition::Delete,
                FAILED,
                false,
                Requeue::After(RETRY_DELAY),
            ),
            (
                Disposition::Ignore(IgnoreReason::FinalizerAbsent),
                FAILED,
                false,
                Requeue::OnChange,
            ),
        ];
        for (disposition, carried, released, expected) in cases {
            assert_eq!(
                requeue(disposition, carried, released),
                expected,
                "{disposition:?} {carried:?} released={released}"
            );
        }
    }

    #[test]
    fn failing_objects_back_off_to_five_minutes() {
        let delays: Vec<u64> = [1, 2, 3, 4, 6, 7, 8, 40]
            .into_iter()
            .map(|n| retry_delay(n).as_secs())
            .collect();
        assert_eq!(delays, [5, 10, 20, 40, 160, 300, 300, 300]);
        let tenth = Carried {
            failures: 10,
            ..FAILED
        };
        assert_eq!(
            requeue(Disposition::Sync, tenth, false),
            Requeue::After(MAX_RETRY_DELAY)
        );
    }

    #[test]
    fn failures_count_per_generation() {
        assert_eq!(failures_after(None, 3, true), 1);
        assert_eq!(failures_after(Some((4, 3)), 3, true), 5);
        assert_eq!(
            failures_after(Some((4, 3)), 4, true),
            1,
            "a change starts afresh"
        );
        assert_eq!(failures_after(Some((4, 3)), 3, false), 0);
    }

    #[test]
    fn convergence_needs_every_cluster_ok_and_every_cache_listed() {
        let ok = [ClusterOutcome::ok("a"), ClusterOutcome::ok("b")];
        let carried = Carried::default();
        assert!(converged(carried, AggregateReason::Success, &ok));
        let pending = Carried {
            cache_pending: true,
            ..carried
        };
        assert!(!converged(pending, AggregateReason::Success, &ok));
        let agents_pending = Carried {
            pending: true,
            ..carried
        };
        assert!(
            !converged(agents_pending, AggregateReason::Success, &ok),
            "an outcome shown while an agent has yet to report is not convergence"
        );
        assert!(!converged(
            carried,
            AggregateReason::ComputePlacementFailed,
            &ok
        ));
        let mut failing = ok.to_vec();
        failing[1].status = PropagationStatus::UpdateFailed;
        assert!(!converged(carried, AggregateReason::Success, &failing));
    }

    #[test]
    fn the_oldest_held_deletion_counts() {
        assert_eq!(oldest_waiting_deletion(1_000, []), 0);
        assert_eq!(
            oldest_waiting_deletion(1_000, [(900, true), (400, false), (990, true)]),
            100
        );
        // A clock behind the hub's never reports a negative wait.
        assert_eq!(oldest_waiting_deletion(1_000, [(1_010, true)]), 0);
    }

    #[test]
    fn backoff_holds_every_wake_up_until_its_time() {
        let s = Duration::from_secs;
        // Two failures: the next attempt after 10 s.
        assert_eq!(backoff_remaining(2, 7, 7, s(3), false), Some(s(7)));
        assert_eq!(backoff_remaining(2, 7, 7, s(10), false), None);
        assert_eq!(backoff_remaining(2, 7, 7, s(11), false), None);
        // A change, a deletion, or no failure: at once.
        assert_eq!(backoff_remaining(2, 7, 8, s(3), false), None);
        assert_eq!(backoff_remaining(2, 7, 7, s(3), true), None);
        assert_eq!(backoff_remaining(0, 7, 7, s(0), false), None);
        // Capped at 5 minutes.
        assert_eq!(backoff_remaining(30, 1, 1, s(0), false), Some(s(300)));
    }

    #[test]
    fn placed_clusters_from_outcomes_writes_and_caches() {
        let placed: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let outcomes = vec![
            ClusterOutcome::failed("a", PropagationStatus::UpdateFailed, "refused"),
            ClusterOutcome::ok("b"),
        ];
        let copy = |readiness: Readiness| {
            MemberObservation::Present(MemberObject {
                readiness,
                ..MemberObject::default()
            })
        };
        let members = BTreeMap::from([
            ("a".to_owned(), copy(Readiness::Ready)),
            ("b".to_owned(), copy(Readiness::Ready)),
            (
                "c".to_owned(),
                copy(Readiness::NotReady("1 of 2 replicas available".into())),
            ),
            ("e".to_owned(), copy(Readiness::Ready)),
        ]);
        let behind = not_ready("its controller has not seen the current generation yet");
        let written = BTreeMap::from([("e", None), ("b", Some(&behind))]);
        let got = placed_readiness(&placed, &outcomes, &members, &written, false);
        let want = [
            ("a", not_ready("not propagated: UpdateFailed")),
            ("b", behind.clone()),
            ("c", not_ready("1 of 2 replicas available")),
            ("d", not_ready("no copy yet")),
            ("e", not_ready("just written, waiting for its controller")),
        ]
        .map(|(c, r)| (c.to_owned(), r));
        assert_eq!(got, want);
        let statusless = placed_readiness(&placed, &outcomes, &members, &written, true);
        assert_eq!(statusless[4], ("e".to_owned(), Readiness::Ready));
    }
}
