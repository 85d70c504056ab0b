//! Member applies left running past their reconcile ([`hubfed_core::detach`]): a member that
//! answers late holds no reconcile slot and delays no other member's writes.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use hubfed_core::detach::{DETACH_AFTER, Detached, Resume, WriteTimes, resume};
use hubfed_core::plan::ClusterPlan;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

use super::TypeContext;
use super::member_io::ClusterResult;

/// Writes left running, by federated object, then cluster, until a reconcile takes them (by
/// object first: a reconcile asks whether any of its object's writes still runs).
pub(crate) type DetachedWrites =
    Mutex<HashMap<ObjectRef<DynamicObject>, HashMap<String, Detached<ClusterResult>>>>;

/// Keeps `write` for the copy `(object, cluster)`.
fn keep(
    ctx: &TypeContext,
    (object, cluster): (ObjectRef<DynamicObject>, String),
    write: Detached<ClusterResult>,
) {
    ctx.detached
        .lock()
        .entry(object)
        .or_default()
        .insert(cluster, write);
}

/// Whether a write of `object` to any cluster is still running or its result not yet taken.
pub(super) fn any_of(ctx: &TypeContext, object: &ObjectRef<DynamicObject>) -> bool {
    ctx.detached.lock().contains_key(object)
}

/// Who takes a write's result: the reconcile while it waits, else the write itself.
enum Handoff {
    Waiting,
    Done(Box<ClusterResult>),
    Left,
}

/// What a reconcile does in `cp.cluster` about a write of `object` it may have left running.
pub(super) fn resume_in(
    ctx: &TypeContext,
    object: &ObjectRef<DynamicObject>,
    cp: &ClusterPlan,
) -> Resume<ClusterResult> {
    let mut writes = ctx.detached.lock();
    let Some(by_cluster) = writes.get_mut(object) else {
        return resume(&mut None, &cp.action);
    };
    let mut slot = by_cluster.remove(&cp.cluster);
    let decided = resume(&mut slot, &cp.action);
    match slot {
        Some(left) => {
            by_cluster.insert(cp.cluster.clone(), left);
        }
        None if by_cluster.is_empty() => {
            writes.remove(object);
        }
        None => {}
    }
    decided
}

/// Runs `write` (an apply of `desired_hash` to the copy `key`: federated object, cluster) in
/// a task of its own and waits [`DETACH_AFTER`] for it — not at all when the member's writes
/// take longer than that on average ([`WriteTimes`]); a write still running then goes on by
/// itself: when it ends, its result is kept for the object's next reconcile ([`resume_in`])
/// and the object is queued. `None`: left running, the cluster is pending.
pub(super) async fn write_or_leave(
    ctx: &Arc<TypeContext>,
    key: (ObjectRef<DynamicObject>, String),
    desired_hash: String,
    write: impl Future<Output = ClusterResult> + Send + 'static,
) -> Option<ClusterResult> {
    let handoff = Arc::new((Mutex::new(Handoff::Waiting), tokio::sync::Notify::new()));
    let task = {
        let (handoff, ctx, key) = (Arc::clone(&handoff), Arc::clone(ctx), key.clone());
        async move {
            let result = write.await;
            let (state, done) = &*handoff;
            let mut state = state.lock();
            if matches!(*state, Handoff::Left) {
                let object = key.0.clone();
                let done = Detached::Done {
                    desired_hash,
                    result,
                };
                keep(&ctx, key, done);
                drop(state);
                ctx.members.queue_federated(object);
            } else {
                *state = Handoff::Done(Box::new(result));
                done.notify_one();
            }
        }
    };
    let wait = ctx
        .write_times
        .lock()
        .get(&key.1)
        .map_or(DETACH_AFTER, WriteTimes::wait);
    tokio::spawn(task);
    let _ = tokio::time::timeout(wait, handoff.1.notified()).await;
    let mut state = handoff.0.lock();
    match std::mem::replace(&mut *state, Handoff::Left) {
        Handoff::Done(result) => Some(*result),
        Handoff::Waiting | Handoff::Left => {
            // Marked while the handoff is held: the write cannot end in between.
            keep(ctx, key, Detached::InFlight);
            None
        }
    }
}

/// Forgets the writes of objects no longer in the hub, and gives back the room of those taken
/// (a cold start on slow members leaves nearly every copy's write running at some point).
pub(super) fn forget(ctx: &TypeContext, exists: impl Fn(&ObjectRef<DynamicObject>) -> bool) {
    super::objects::prune(&ctx.detached, |object, _| exists(object));
}
