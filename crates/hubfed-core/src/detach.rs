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
