//! Member writes that outlast their reconcile. A reconcile waits [`DETACH_AFTER`] for each
//! member's apply; one still running then goes on by itself, and the reconcile ends without
//! it (its cluster *pending*, the status and versions held as for a pull member's report), so
//! a member that answers late holds no reconcile slot and delays no other member. When the
//! write ends, the object is reconciled again and takes the result ([`resume`]).

use std::time::Duration;

use crate::plan::{ApplyAction, ClusterAction, Disposition};

/// How long a reconcile waits for one member's apply before leaving it to finish on its own:
/// above a healthy member's apply on a busy machine (tens of milliseconds), well below a
/// distant or overloaded member's.
pub const DETACH_AFTER: Duration = Duration::from_millis(200);

/// A member's recent write times, as far as waiting for its writes goes: their exponentially
/// weighted mean (each write weighs a fifth).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteTimes {
    mean: Option<Duration>,
}

impl WriteTimes {
    /// Notes a write that took `took`, from its start (member permit included) to its end.
    pub fn record(&mut self, took: Duration) {
        self.mean = Some(match self.mean {
            None => took,
            Some(mean) => mean.mul_f64(0.8) + took.mul_f64(0.2),
        });
    }

    /// How long a reconcile waits for a write to this member before leaving it running
    /// ([`DETACH_AFTER`]), or not at all once its writes take longer than that on average:
    /// each reconcile would otherwise hold its slot that long for a write it then leaves
    /// anyway (one member 500 ms late with 16 reconcile slots: the other members' p99 at 20
    /// updates/s 1.7–4.6× the all-healthy figure; with 64 slots within 1.5×).
    pub fn wait(&self) -> Duration {
        match self.mean {
            Some(mean) if mean > DETACH_AFTER => Duration::ZERO,
            _ => DETACH_AFTER,
        }
    }
}

/// A member write that went on after its reconcile ended.
#[derive(Debug)]
pub enum Detached<R> {
    /// Still running.
    InFlight,
    /// Ended with `result`, applying the desired object of hash `desired_hash`.
    Done { desired_hash: String, result: R },
}

/// What a reconcile does in a cluster where a write of the object may have been left running.
#[derive(Debug, PartialEq, Eq)]
pub enum Resume<R> {
    /// Nothing left running, or it wrote something the plan no longer wants: write now.
    Write,
    /// The write is still running: no second write beside it (the order of writes to one
    /// copy is kept); the cluster is pending.
    Pending,
    /// The write ended doing what the plan wants now: its result is this reconcile's.
    Finished(R),
}

/// The apply, when a cluster's action may be left running past its reconcile: applies of an
/// object being synced. Deletions (the finalizer waits on them) and label removals are
/// waited for.
pub fn detachable(disposition: Disposition, action: &ClusterAction) -> Option<&ApplyAction> {
    match action {
        ClusterAction::Apply(apply) if disposition == Disposition::Sync => Some(apply),
        _ => None,
    }
}

/// Decides about `slot`, what was left of an earlier write of the object to the cluster, for
/// a plan whose action there is `action`; takes a finished write out of the slot. A finished
/// apply of the same desired object is the plan's write, a create or an update alike (the
/// cache may not show the created copy yet).
pub fn resume<R>(slot: &mut Option<Detached<R>>, action: &ClusterAction) -> Resume<R> {
    match slot.take() {
        None => Resume::Write,
        Some(Detached::InFlight) => {
            *slot = Some(Detached::InFlight);
            Resume::Pending
        }
        Some(Detached::Done {
            desired_hash,
            result,
        }) if matches!(action, ClusterAction::Apply(a) if a.desired_hash == desired_hash) => {
            Resume::Finished(result)
        }
        Some(Detached::Done { .. }) => Resume::Write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ApplyAction, DeleteAction};

    fn apply(rev: u32) -> ClusterAction {
        ClusterAction::Apply(ApplyAction {
            object: serde_json::json!({ "data": { "rev": rev } }).into(),
            desired_hash: format!("hash-{rev}"),
            creates: true,
            create_only: false,
            adopts: false,
            released_fields: Vec::new(),
        })
    }

    fn update(rev: u32) -> ClusterAction {
        match apply(rev) {
            ClusterAction::Apply(a) => ClusterAction::Apply(ApplyAction {
                creates: false,
                ..a
            }),
            other => other,
        }
    }

    fn done(rev: u32) -> Option<Detached<&'static str>> {
        Some(Detached::Done {
            desired_hash: format!("hash-{rev}"),
            result: "ok",
        })
    }

    #[test]
    fn only_applies_of_synced_objects_are_left_running() {
        let applied = apply(1);
        let ClusterAction::Apply(inner) = &applied else {
            unreachable!("apply() makes an apply")
        };
        assert_eq!(detachable(Disposition::Sync, &applied), Some(inner));
        assert!(detachable(Disposition::Delete, &apply(1)).is_none());
        let delete = ClusterAction::Delete(DeleteAction {
            options: None,
            uid: None,
        });
        assert!(detachable(Disposition::Sync, &delete).is_none());
        assert!(detachable(Disposition::Sync, &ClusterAction::RemoveManagedLabel).is_none());
    }

    #[test]
    fn writes_to_a_slow_member_are_left_at_once_and_waited_for_again_once_it_is_fast() {
        let mut times = WriteTimes::default();
        assert_eq!(times.wait(), DETACH_AFTER, "nothing known: the usual wait");
        times.record(Duration::from_millis(30));
        assert_eq!(times.wait(), DETACH_AFTER);
        // One slow write among fast ones is not a slow member.
        times.record(Duration::from_millis(600));
        assert_eq!(times.wait(), DETACH_AFTER, "mean 144 ms");
        for _ in 0..5 {
            times.record(Duration::from_millis(520));
        }
        assert_eq!(times.wait(), Duration::ZERO, "a member 500 ms late");
        for _ in 0..10 {
            times.record(Duration::from_millis(20));
        }
        assert_eq!(times.wait(), DETACH_AFTER, "fast again");
    }

    #[test]
    fn a_write_still_running_is_never_doubled() {
        let mut slot = Some(Detached::<&str>::InFlight);
        assert_eq!(resume(&mut slot, &apply(2)), Resume::Pending);
        assert!(
            matches!(slot, Some(Detached::InFlight)),
            "kept until it ends"
        );
    }

    #[test]
    fn a_finished_write_is_taken_when_it_did_what_the_plan_wants() {
        let mut slot = done(1);
        assert_eq!(resume(&mut slot, &apply(1)), Resume::Finished("ok"));
        assert!(slot.is_none());
        // The copy it created is in the cache now: the plan updates the same object.
        let mut slot = done(1);
        assert_eq!(resume(&mut slot, &update(1)), Resume::Finished("ok"));
    }

    #[test]
    fn a_finished_write_of_an_older_template_is_written_over() {
        let mut slot = done(1);
        assert_eq!(resume(&mut slot, &apply(2)), Resume::Write);
        assert!(slot.is_none());
        assert_eq!(resume::<&str>(&mut None, &apply(2)), Resume::Write);
    }
}
