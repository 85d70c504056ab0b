//! `reconcile(federated object)`, one screen: *observe* (caches, [`super::observe`]) → *plan*
//! ([`hubfed_core::plan`]) → *execute* (member writes, [`super::dispatch`]) → *conclude*
//! ([`hubfed_core::conclude`], [`hubfed_core::status`], [`hubfed_core::version`]) → *write*
//! (hub, only what changed, [`super::hub_writes`]).

use std::sync::Arc;

use hubfed_api::federated::FederatedStatus;
use hubfed_core::conclude::placed_readiness;
use hubfed_core::conclude::{
    Carried, RETRY_DELAY, Release, Requeue, StatusHold, awaits_cache, backoff_remaining,
    clusters_awaiting_cache, converged, failures_after, finalizer_release, requeue, status_hold,
};
use hubfed_core::plan::{
    ClusterAction, Disposition, FinalizerAction, MemberObservation, Plan, is_orphaning,
};
use hubfed_core::readiness::needs_status;
use hubfed_core::status::{ClusterOutcome, StatusInput};
use hubfed_core::version::{PropagatedVersionStatus, update_propagated_version};
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::time::Duration;
use tracing::{debug, warn};

use super::dispatch::{self, DispatchResult};
use super::gc;
use super::hub_writes::{self, StatusDecision, publish};
use super::observe::{self, Observed};
use super::status_writes::{self, StatusWarnings, StatusWrite};
use super::{Error, Failing, TypeContext};
use crate::metrics::METRICS;

pub fn error_policy(obj: Arc<DynamicObject>, error: &Error, _ctx: Arc<TypeContext>) -> Action {
    warn!(name = %obj.name_any(), namespace = ?obj.namespace(), step = error.step(),
        error = %error.hub(), "reconcile failed");
    Action::requeue(RETRY_DELAY)
}

/// Reconciles one federated object, recording duration and outcome.
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<TypeContext>) -> Result<Action, Error> {
    // The status writes of its last reconcile still run: this one comes when it
    // ends ([`super::status_writes`]). Not a reconcile: neither counted nor timed.
    let object_ref = ObjectRef::from_obj_with(obj.as_ref(), ctx.federated.clone());
    if ctx.status_writes.put_off(&object_ref) {
        debug!(name = %object_ref.name, namespace = ?object_ref.namespace,
            "put off until the object's status and versions are written");
        return Ok(Action::await_change());
    }
    let controller = ctx.federated.kind.to_lowercase();
    let started = std::time::Instant::now();
    let depth = METRICS.workqueue_depth.with_label_values(&[&controller]);
    depth.inc();
    let result = reconcile_object(&obj, &ctx).await;
    // An object whose placed cluster's cache is still warming has writes to come.
    if !matches!(result, Ok((_, Warming::Yes))) {
        caught_up(&ctx, &obj, &object_ref);
    }
    let result = result.map(|(action, _)| action);
    depth.dec();
    let elapsed = started.elapsed().as_secs_f64();
    METRICS
        .reconcile_time
        .with_label_values(&[&controller])
        .observe(elapsed);
    METRICS
        .reconcile_federated_resources_duration
        .with_label_values::<&str>(&[])
        .observe(elapsed);
    let outcome = match &result {
        Ok(action) if *action == Action::requeue(RETRY_DELAY) => "requeue",
        Ok(_) => "success",
        Err(_) => {
            METRICS
                .reconcile_errors_total
                .with_label_values(&[&controller])
                .inc();
            "error"
        }
    };
    METRICS
        .reconcile_total
        .with_label_values(&[&controller, outcome])
        .inc();
    result
}

/// Tells a start's batch of Events that `obj` has caught up, unless a write of it is still
/// running (its Event is admitted at the object's next reconcile).
fn caught_up(ctx: &Arc<TypeContext>, obj: &DynamicObject, object: &ObjectRef<DynamicObject>) {
    let mut budget = ctx.event_budget.lock();
    if !budget.in_start() {
        return;
    }
    if super::detach::any_of(ctx, object) {
        return;
    }
    let sooner = budget.caught_up(&super::start_key(obj), std::time::Instant::now());
    drop(budget);
    if let Some(due) = sooner {
        super::dispatch::publish_summaries_at(ctx, due);
    }
}

/// Whether a reconcile left a placed cluster unobserved because its member cache is still in
/// its first moments ([`hubfed_core::conclude::cache_warming`]).
enum Warming {
    Yes,
    No,
}

async fn reconcile_object(
    obj: &Arc<DynamicObject>,
    ctx: &Arc<TypeContext>,
) -> Result<(Action, Warming), Error> {
    if let Some(wait) = backoff_wait(ctx, obj) {
        debug!(name = %obj.name_any(), wait_ms = wait.as_millis(), "in backoff: attempt put off");
        return Ok((Action::requeue(wait), Warming::No));
    }
    // A large object's room before its spec is read: its desired object and the writes that
    // carry it out ([`hubfed_core::large_objects`]). A stop ends the wait with nothing done.
    let reservation = tokio::select! {
        reservation = ctx.shared.large_objects.take(&ctx.federated.kind, obj) => reservation,
        () = ctx.stop.cancelled() => {
            debug!(name = %obj.name_any(), "stopping: no longer waiting for room");
            return Ok((Action::await_change(), Warming::No));
        }
    };
    let federated = match observe::federated_object(obj) {
        Ok(federated) => federated,
        Err(message) => {
            let action = refuse_invalid_spec(ctx, obj, &message).await?;
            return Ok((action, Warming::No));
        }
    };
    let observed = observe::observe(ctx, obj, federated).await;
    let plan = observe::plan_with_hub_namespace(ctx, &observed, observed.plan_input(ctx)).await;
    // Under a rollout strategy, only the clusters the rollout has reached take the change.
    let staged = super::rollout::staged(ctx, obj, &observed, plan)
        .await
        .map_err(Error::Rollout)?;
    let (plan, rollout_recheck) = (staged.plan, staged.recheck);
    publish_warnings(ctx, &observed, &plan);
    debug!(name = %observed.federated.name, namespace = ?observed.federated.namespace,
        resource_version = ?obj.metadata.resource_version, generation = ?obj.metadata.generation,
        disposition = ?plan.disposition, "planned");
    match plan.disposition {
        Disposition::Ignore(_) => return Ok((Action::await_change(), Warming::No)),
        Disposition::Sync
            if plan.finalizer == FinalizerAction::Ensure
                && !observed.federated.has_sync_finalizer =>
        {
            hub_writes::add_finalizer(ctx, obj)
                .await
                .map_err(Error::AddFinalizer)?;
        }
        Disposition::Sync | Disposition::Delete => {}
    }
    count_drift_corrections(ctx, &observed, &plan);
    if plan.disposition == Disposition::Sync {
        let generation = obj.metadata.generation.unwrap_or(0);
        let mut latency = ctx.latency.lock();
        latency.observe_start(&observed.object_ref, generation);
    }

    // The plan's bodies live until this reconcile ends: so does its room.
    let result = execute(
        ctx,
        obj,
        &observed,
        &plan,
        staged.rollout,
        reservation.clone(),
    )
    .await?;

    let carried = Carried {
        recoverable_failure: result.recoverable_failure,
        failures: count_failures(ctx, &observed, obj, result.recoverable_failure),
        waiting: result.waiting,
        cache_pending: awaits_cache(&plan),
        cache_warming: observed.cache_warming,
        pending: result.pending,
        pending_writes_only: result.pending && result.pending_writes_only,
    };
    let (released, deferred) = conclude(ctx, obj, &observed, &plan, &result, carried).await?;
    let requeue = requeue(plan.disposition, carried, released);
    // Looked at again once those lists ended, not only at the fallback delay.
    let (warming, awaited) = if carried.awaits_warming_cache() {
        (Warming::Yes, Some(clusters_awaiting_cache(&plan)))
    } else {
        (Warming::No, None)
    };
    ctx.members
        .await_first_lists(&observed.object_ref, awaited.into_iter().flatten());
    drop((plan, reservation));
    Ok((next_look(requeue, deferred, rollout_recheck), warming))
}

/// The plan's warnings, as Events on the federated object.
fn publish_warnings(ctx: &TypeContext, observed: &Observed, plan: &Plan) {
    for warning in &plan.warnings {
        let reference = &observed.reference;
        publish(
            ctx,
            reference,
            EventType::Warning,
            warning.reason,
            &warning.message,
        );
    }
}

/// *Conclude* and *write*: whether the finalizer was released, and how soon a status write
/// put off (pull members' reports, remote status coalescing) is to be made.
async fn conclude(
    ctx: &Arc<TypeContext>,
    obj: &Arc<DynamicObject>,
    observed: &Observed,
    plan: &Plan,
    result: &DispatchResult,
    carried: Carried,
) -> Result<(bool, Option<Duration>), Error> {
    let hold = pending_hold(ctx, &observed.object_ref, carried);
    Ok(match plan.disposition {
        Disposition::Delete => {
            let released = conclude_deletion(ctx, obj, observed, plan, carried).await?;
            let deferred = match (released, hold) {
                (true, _) | (false, StatusHold::UntilWritesEnd) => None,
                (false, StatusHold::Recheck(after)) => Some(after),
                // A deletion that waits says on what: the clusters and why, in status.
                (false, StatusHold::Write) => {
                    let warming = carried.awaits_warming_cache();
                    write_status(ctx, obj, observed, plan, result, warming).await?
                }
            };
            (released, deferred)
        }
        _ => {
            let conclusion = (carried, hold);
            let deferred = conclude_sync(ctx, obj, observed, plan, result, conclusion).await?;
            (false, deferred)
        }
    })
}

/// When to look at the object again: as [`requeue`] says, and no later than a status write
/// put off (`deferred`, made by the next reconcile) or the end of a rollout's soak or
/// deadline (`rollout_recheck`).
fn next_look(
    requeue: Requeue,
    deferred: Option<Duration>,
    rollout_recheck: Option<Duration>,
) -> Action {
    let deferred = match (deferred, rollout_recheck) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match (requeue, deferred) {
        (Requeue::After(delay), Some(after)) => Action::requeue(delay.min(after)),
        (Requeue::OnChange, Some(after)) => Action::requeue(after),
        (Requeue::OnChange, None) => Action::await_change(),
        (Requeue::After(delay), None) => Action::requeue(delay),
    }
}

/// Whether the status and versions are written now or wait for pending clusters (pull
/// members' reports, push members' applies still running), and how ([`status_hold`]).
fn pending_hold(
    ctx: &TypeContext,
    object_ref: &ObjectRef<DynamicObject>,
    carried: Carried,
) -> StatusHold {
    ctx.objects.update(object_ref, |state| {
        if !carried.pending {
            state.pending_since = None;
            return StatusHold::Write;
        }
        let first = state
            .pending_since
            .get_or_insert_with(std::time::Instant::now);
        let hold = status_hold(carried, first.elapsed());
        if hold == StatusHold::Write {
            // Written now with what is known; the next write waits for the reports again (or
            // another grace period): under load, at most one write per period, not one per
            // report.
            *first = std::time::Instant::now();
        }
        hold
    })
}

/// *Execute*: every cluster's action (a pull member's as its work), the works the plan no
/// longer needs settled, and a rollout's failed applies recorded.
async fn execute(
    ctx: &Arc<TypeContext>,
    obj: &DynamicObject,
    observed: &Observed,
    plan: &Plan,
    rollout: Option<super::rollout::Rollout>,
    reservation: Option<Arc<super::large_objects::Reservation>>,
) -> Result<DispatchResult, Error> {
    let (federated, clusters) = (&observed.federated, &observed.clusters);
    let target = dispatch::Target {
        object: federated,
        object_ref: &observed.object_ref,
        observed: &observed.members,
        reservation,
    };
    let result = dispatch::execute(ctx, target, plan, clusters).await;
    let settled = super::deliver::settle(ctx, federated, plan, clusters).await;
    if plan.disposition == Disposition::Delete {
        // A work left standing for an object that is gone would be carried out again.
        settled.map_err(Error::Works)?;
    }
    if let Some(rollout) = rollout {
        // Not recorded now: the retried apply fails again and is recorded then.
        if let Err(e) = super::rollout::after_dispatch(ctx, observed, rollout, &result).await {
            warn!(name = %obj.name_any(), error = %e, "recording the rollout's failed applies failed");
        }
    }
    Ok(result)
}

/// How long the object's backoff still holds every attempt ([`backoff_remaining`]).
fn backoff_wait(ctx: &TypeContext, obj: &DynamicObject) -> Option<Duration> {
    let object_ref = ObjectRef::from_obj_with(obj, ctx.federated.clone());
    let failing = ctx.objects.read(&object_ref, |state| state?.failing)?;
    // A cluster that changed (back to Ready, joined, unjoined) or an annotation or label
    // changed (e.g. `hubfed.io/recreate-on-immutable-change`, the usual remedy): go ahead.
    let changed =
        failing.registry != ctx.shared.pool.version() || failing.metadata != metadata_hash(obj);
    backoff_remaining(
        failing.failures,
        failing.generation,
        obj.metadata.generation.unwrap_or(0),
        failing.at.elapsed(),
        obj.metadata.deletion_timestamp.is_some() || changed,
    )
}

fn metadata_hash(obj: &DynamicObject) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    obj.metadata.labels.hash(&mut hasher);
    obj.metadata.annotations.hash(&mut hasher);
    hasher.finish()
}

/// Failed attempts in a row of this object (this one included), kept for its backoff; the
/// gauge of objects in backoff follows.
fn count_failures(
    ctx: &TypeContext,
    observed: &Observed,
    obj: &DynamicObject,
    failed: bool,
) -> u32 {
    let generation = obj.metadata.generation.unwrap_or(0);
    let failing = Failing {
        failures: 0,
        generation,
        at: std::time::Instant::now(),
        registry: ctx.shared.pool.version(),
        metadata: metadata_hash(obj),
    };
    let failures = ctx.objects.update(&observed.object_ref, |state| {
        let previous = state.failing.map(|f| (f.failures, f.generation));
        let failures = failures_after(previous, generation, failed);
        state.failing = (failures > 0).then_some(Failing {
            failures,
            ..failing
        });
        failures
    });
    METRICS
        .objects_in_backoff
        .with_label_values(&[&ctx.federated.kind.to_lowercase()])
        .set(i64::try_from(ctx.objects.failing()).unwrap_or(i64::MAX));
    failures
}

/// A spec that cannot be read is the user's to fix: say so once, and wait for a change.
async fn refuse_invalid_spec(
    ctx: &TypeContext,
    obj: &DynamicObject,
    message: &str,
) -> Result<Action, Error> {
    let reference = obj.object_ref(&ctx.federated);
    publish(ctx, &reference, EventType::Warning, "InvalidSpec", message);
    hub_writes::write_invalid_status(ctx, obj, message)
        .await
        .map_err(Error::Status)?;
    Ok(Action::await_change())
}

/// An apply to a cluster whose copy is no longer what was last applied corrects drift.
fn count_drift_corrections(ctx: &TypeContext, observed: &Observed, plan: &Plan) {
    let type_label = ctx.federated.kind.to_lowercase();
    for cp in &plan.clusters {
        let (ClusterAction::Apply(_), Some(recorded)) =
            (&cp.action, observed.recorded.get(&cp.cluster))
        else {
            continue;
        };
        let drifted = match observed.members.get(&cp.cluster) {
            Some(MemberObservation::Present(m)) => m.version != recorded.version,
            Some(MemberObservation::Absent) | None => true,
            Some(MemberObservation::RetrievalFailed(_) | MemberObservation::NotServed) => false,
        };
        if drifted {
            METRICS
                .drift_corrections_total
                .with_label_values(&[&type_label, &cp.cluster])
                .inc();
        }
    }
}

/// Deletion: forget what memory holds of the object, and remove the finalizer when the
/// conclusion allows. Returns whether it was removed.
async fn conclude_deletion(
    ctx: &TypeContext,
    obj: &DynamicObject,
    observed: &Observed,
    plan: &Plan,
    carried: Carried,
) -> Result<bool, Error> {
    let (name, namespace) = (
        &observed.federated.name,
        observed.federated.namespace.as_deref(),
    );
    ctx.applied.forget(namespace, name);
    let object_ref = &observed.object_ref;
    ctx.objects.update(object_ref, |state| {
        state.written_versions = None;
        state.status_written_at = None;
        state.pending_since = None;
    });
    ctx.latency.lock().forget(object_ref);
    let mut release = match finalizer_release(plan.finalizer, carried) {
        Release::Keep => false,
        Release::Now => true,
        Release::AfterVerification => {
            let clusters = &observed.clusters;
            dispatch::no_managed_copies_left(ctx, name, namespace, clusters, &plan.verify_absent_in)
                .await
        }
    };
    if release && !plan.leftovers.is_empty() {
        release = record_leftovers(ctx, observed, plan).await;
    }
    if release {
        hub_writes::remove_finalizer(ctx, obj)
            .await
            .map_err(Error::RemoveFinalizer)?;
        ctx.objects.update(object_ref, |state| state.failing = None);
        let reference = &observed.reference;
        let message = "member objects were cleaned up";
        publish(
            ctx,
            reference,
            EventType::Normal,
            "FinalizerRemoved",
            message,
        );
    }
    Ok(release)
}

/// Before the finalizer goes while clusters are not ready: records that a copy may remain in
/// each, for garbage collection, and says so in an Event. Whether it was recorded.
async fn record_leftovers(ctx: &TypeContext, observed: &Observed, plan: &Plan) -> bool {
    let object = &observed.federated;
    let orphan = is_orphaning(&object.annotations);
    if let Err(e) = gc::record_leftovers(ctx, object, &plan.leftovers, orphan).await {
        warn!(name = %object.name, error = %e, "cannot record possible leftovers; the finalizer stays");
        return false;
    }
    let clusters = plan.leftovers.join(", ");
    let then = if orphan { "unlabelled" } else { "deleted" };
    let message = format!(
        "not ready, so a copy may remain in: {clusters}; it will be {then} when the cluster is back"
    );
    publish(
        ctx,
        &observed.reference,
        EventType::Warning,
        "CopiesMayRemain",
        &message,
    );
    true
}

/// Sync: status and PropagatedVersion, each written only when it changed — decided here,
/// written after the reconcile ([`status_writes`]); the propagation latency once the object has
/// converged.
async fn conclude_sync(
    ctx: &Arc<TypeContext>,
    obj: &Arc<DynamicObject>,
    observed: &Observed,
    plan: &Plan,
    result: &DispatchResult,
    (carried, hold): (Carried, StatusHold),
) -> Result<Option<Duration>, Error> {
    let deferred = match hold {
        // Clusters are pending: one write once they have all answered.
        StatusHold::Recheck(after) => Some(after),
        StatusHold::UntilWritesEnd => None,
        // A placed cluster's cache is still listing (its first moments): neither the status nor
        // the versions yet — one write of each once it has, at a reconcile a second away
        // ([`hubfed_core::conclude::CACHE_PENDING_DELAY`]), not one per cluster listed.
        StatusHold::Write if carried.awaits_warming_cache() => None,
        StatusHold::Write => {
            let (status, deferred) = status_books(ctx, obj, observed, plan, result);
            let pending = StatusWrite {
                object: Arc::clone(obj),
                object_ref: observed.object_ref.clone(),
                status,
                versions: version_books(observed, plan, result),
            };
            status_writes::spawn(ctx, pending);
            deferred
        }
    };
    let generation = obj.metadata.generation.unwrap_or(0);
    let converged = converged(carried, plan.reason, &result.outcomes);
    let mut latency = ctx.latency.lock();
    if let Some(elapsed) =
        latency.observe_end(&observed.object_ref, generation, result.wrote, converged)
    {
        let type_label = ctx.federated.kind.to_lowercase();
        METRICS
            .propagation_latency
            .with_label_values(&[&type_label])
            .observe(elapsed.as_secs_f64());
    }
    Ok(deferred)
}

/// The status this reconcile's outcome comes to, when it is to be written, and what it says;
/// or how long a status write is put off (remote-status coalescing).
#[allow(clippy::type_complexity)]
fn status_books(
    ctx: &TypeContext,
    obj: &DynamicObject,
    observed: &Observed,
    plan: &Plan,
    result: &DispatchResult,
) -> (
    Option<(Box<FederatedStatus>, StatusWarnings)>,
    Option<Duration>,
) {
    let readiness = (plan.disposition == Disposition::Sync).then(|| {
        let written = result
            .new_versions
            .keys()
            .map(|c| (c.as_str(), result.readiness.get(c)))
            .collect();
        placed_readiness(
            &plan.placement.clusters,
            &result.outcomes,
            &observed.members,
            &written,
            !needs_status(&ctx.target.group, &ctx.target.kind),
        )
    });
    let outcomes = with_remote_status(ctx, observed, &result.outcomes);
    let input = StatusInput {
        generation: 0,
        reason: plan.reason,
        reason_message: plan.reason_message.as_deref(),
        outcomes: &outcomes,
        resources_updated: result.wrote,
        remote_status_collection: ctx.collect_status,
        unknown_clusters: &plan.placement.unknown_clusters,
        now: "",
        readiness: readiness.as_deref(),
    };
    let status = match hub_writes::status_to_write(ctx, obj, input) {
        StatusDecision::Write(status) => status,
        StatusDecision::Unchanged => return (None, None),
        StatusDecision::Deferred(after) => return (None, Some(after)),
    };
    let deleting = plan.disposition == Disposition::Delete;
    let warnings = StatusWarnings {
        reference: observed.reference.clone(),
        deleting,
        reason: plan.reason,
        reason_message: plan.reason_message.clone(),
        unknown_clusters: plan.placement.unknown_clusters.clone(),
        // Only what a deletion waits on is told from them.
        outcomes: if deleting { outcomes } else { Vec::new() },
    };
    (Some((status, warnings)), None)
}

/// The status written in the reconcile itself (a deletion's); how long a status write is put
/// off, if it is. None while a placed cluster's cache is in its first moments (`warming`).
async fn write_status(
    ctx: &TypeContext,
    obj: &DynamicObject,
    observed: &Observed,
    plan: &Plan,
    result: &DispatchResult,
    warming: bool,
) -> Result<Option<Duration>, Error> {
    if warming {
        return Ok(None);
    }
    let (status, deferred) = status_books(ctx, obj, observed, plan, result);
    if let Some((status, warnings)) = status {
        hub_writes::write_status(ctx, obj, &status)
            .await
            .map_err(Error::Status)?;
        warnings.publish(ctx);
    }
    Ok(deferred)
}

/// With remote status collection, each cluster's outcome carries its copy's `.status` from
/// the member cache (KubeFed's `remoteStatus`); a copy the cache has not shown yet has none.
fn with_remote_status(
    ctx: &TypeContext,
    observed: &Observed,
    outcomes: &[ClusterOutcome],
) -> Vec<ClusterOutcome> {
    let mut outcomes = outcomes.to_vec();
    if ctx.collect_status {
        for outcome in &mut outcomes {
            if let Some(MemberObservation::Present(copy)) = observed.members.get(&outcome.cluster) {
                outcome.remote_status.clone_from(&copy.remote_status);
            }
        }
    }
    outcomes
}

/// The PropagatedVersion's new status when it changed, and whether the object exists.
fn version_books(
    observed: &Observed,
    plan: &Plan,
    result: &DispatchResult,
) -> Option<(PropagatedVersionStatus, bool)> {
    // A copy found up to date keeps the version recorded for it: a pull member's is known
    // only from its agent's report, after the write that a held status left unrecorded.
    let mut new_versions = result.new_versions.clone();
    for cp in plan
        .clusters
        .iter()
        .filter(|cp| cp.action == ClusterAction::UpToDate)
    {
        if let Some(recorded) = observed.recorded.get(&cp.cluster) {
            new_versions
                .entry(cp.cluster.clone())
                .or_insert_with(|| recorded.version.clone());
        }
    }
    let versions = update_propagated_version(
        observed.stored_versions.as_ref(),
        &observed.template_version,
        &observed.overrides_version,
        &plan.placement.clusters,
        &new_versions,
    )?;
    Some((versions, observed.versions_stored))
}
