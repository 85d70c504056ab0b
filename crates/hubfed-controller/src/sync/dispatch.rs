//! Carries out a plan: one task per cluster, concurrently, each bounded by the member's write
//! semaphore and the dispatch deadline, so a slow member never holds up the others' writes;
//! an apply still running after [`hubfed_core::detach::DETACH_AFTER`] is left to finish on its
//! own ([`super::detach`]), so a slow member holds up no reconcile either.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_core::plan::{ClusterAction, ClusterPlan, FederatedObject, MemberObservation, Plan};
use hubfed_core::status::{ClusterOutcome, PropagationStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tokio::sync::OwnedSemaphorePermit;

use hubfed_core::burst::Admit;
use hubfed_core::detach::{Resume, detachable};
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

use super::detach::{resume_in, write_or_leave};
use super::execute::{EventSink, ExecEnv, execute_action, passive};
use super::hub_writes::publish;
use super::large_objects::Reservation;
use super::member_io::{ClusterResult, federated_reference, kind_and_key, member_api, outcome};
use super::{TypeContext, deliver};
use crate::clusters::MemberCluster;

/// KubeFed's per-reconcile dispatch deadline.
const DISPATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// What a dispatch achieved.
#[derive(Default)]
pub struct DispatchResult {
    /// One entry per cluster that belongs in `status.clusters`.
    pub outcomes: Vec<ClusterOutcome>,
    /// Object versions returned by successful writes, by cluster.
    pub new_versions: BTreeMap<String, String>,
    /// The written copies' readiness as the writes' answers show it, by cluster.
    pub readiness: BTreeMap<String, hubfed_core::readiness::Readiness>,
    /// A member object was created, updated or deleted.
    pub wrote: bool,
    /// Some cluster failed in a way worth retrying soon.
    pub recoverable_failure: bool,
    /// Some member object is on its way out.
    pub waiting: bool,
    /// Some pull member's agent has yet to report on its request, or some push member's
    /// apply is still running ([`super::detach`]).
    pub pending: bool,
    /// Every pending cluster is a push member's apply still running (see
    /// [`hubfed_core::conclude::Carried::pending_writes_only`]).
    pub pending_writes_only: bool,
    /// The clusters whose write failed without the member refusing the object
    /// (`ClusterResult::transient`): such a failure never halts a rollout.
    pub transient: std::collections::BTreeSet<String>,
}

/// The push dispatcher's Events: on the federated object, through the hub's recorder.
struct HubEvents<'a> {
    ctx: &'a TypeContext,
    reference: ObjectReference,
}

impl EventSink for HubEvents<'_> {
    fn publish(&self, type_: EventType, reason: &str, message: &str) {
        publish(self.ctx, &self.reference, type_, reason, message);
    }
}

/// The copy's version the plan saw in `cluster` (empty when it saw none).
fn basis(observed: &BTreeMap<String, MemberObservation>, cluster: &str) -> String {
    match observed.get(cluster) {
        Some(MemberObservation::Present(copy)) => copy.version.clone(),
        _ => String::new(),
    }
}

fn timed_out(cp: &ClusterPlan) -> ClusterResult {
    ClusterResult::unwritten(outcome(
        &cp.cluster,
        cp.action.status_on_timeout(),
        Some(format!(
            "no answer from cluster within {}s",
            DISPATCH_TIMEOUT.as_secs()
        )),
    ))
}

/// What a plan is carried out for: the federated object, its reference (the key of writes
/// left running), what the plan saw of each cluster's copy, and the room the reconcile took
/// for a large object (held by every write until it ends).
pub struct Target<'a> {
    pub object: &'a FederatedObject,
    pub object_ref: &'a ObjectRef<DynamicObject>,
    pub observed: &'a BTreeMap<String, MemberObservation>,
    pub(super) reservation: Option<Arc<Reservation>>,
}

/// Runs every cluster's action of `plan`: a push member's through its API, a pull member's
/// as its work ([`deliver`]).
pub async fn execute(
    ctx: &Arc<TypeContext>,
    target: Target<'_>,
    plan: &Plan,
    clusters: &[Arc<MemberCluster>],
) -> DispatchResult {
    let by_name: BTreeMap<&str, &Arc<MemberCluster>> =
        clusters.iter().map(|c| (c.name.as_str(), c)).collect();
    // What the writes that may outlast this reconcile keep of the object: not its template
    // (their apply bodies hold the desired object; with ~1 MB templates a write waiting for
    // its member otherwise held two copies).
    let shared_object = Arc::new(target.object.without_spec());
    let reservation = &target.reservation;
    let tasks = plan.clusters.iter().map(|cp| {
        let cluster = by_name.get(cp.cluster.as_str()).copied();
        let (object, shared_object) = (target.object, &shared_object);
        async move {
            if cluster.is_some_and(|c| c.pull) {
                let basis = basis(target.observed, &cp.cluster);
                let delivered = deliver::deliver(ctx, object, cp, &basis);
                return match tokio::time::timeout(DISPATCH_TIMEOUT, delivered).await {
                    Ok(delivered) => delivered,
                    Err(_) => (timed_out(cp), false),
                };
            }
            // No write beside one still running: a deletion could be overtaken by it.
            match resume_in(ctx, target.object_ref, cp) {
                Resume::Pending => return (still_running(cp), true),
                Resume::Finished(result) => return (result, false),
                Resume::Write => {}
            }
            let Some(apply) = detachable(plan.disposition, &cp.action) else {
                return (write_one(ctx, object, cp, cluster, None).await, false);
            };
            let write = {
                let (ctx, object) = (Arc::clone(ctx), Arc::clone(shared_object));
                let (cp, cluster, reservation) =
                    (cp.clone(), cluster.cloned(), reservation.clone());
                async move {
                    // The apply body's room, given back when the write ends.
                    let _reservation = reservation;
                    // The member's permit first, holding nothing more than this: a cold start
                    // on members slower than the controller leaves nearly every copy's write
                    // waiting here at some point (50,000 at 50 × 1,000), and a task is the
                    // size of its largest state — 12 KB with the request inline, 1 KB so
                    // (debug build).
                    let permit = write_permit(cluster.as_ref()).await;
                    Box::pin(write_one(&ctx, &object, &cp, cluster.as_ref(), permit)).await
                }
            };
            let key = (target.object_ref.clone(), cp.cluster.clone());
            match write_or_leave(ctx, key, apply.desired_hash.clone(), write).await {
                Some(result) => (result, false),
                None => (still_running(cp), true),
            }
        }
    });
    let mut result = DispatchResult::default();
    let mut done: BTreeMap<(&'static str, &'static str), Vec<&str>> = BTreeMap::new();
    result.pending_writes_only = true;
    for (cp, (r, pending)) in plan.clusters.iter().zip(join_all(tasks).await) {
        result.pending |= pending;
        if pending && by_name.get(cp.cluster.as_str()).is_none_or(|c| c.pull) {
            result.pending_writes_only = false;
        }
        if let Some(key) = r.done {
            done.entry(key).or_default().push(&cp.cluster);
        }
        if let Some(o) = &r.outcome {
            if o.status.is_recoverable() && !pending {
                result.recoverable_failure = true;
            }
            if o.status == PropagationStatus::WaitingForRemoval {
                result.waiting = true;
            }
        }
        if let Some(v) = r.version {
            result.new_versions.insert(cp.cluster.clone(), v);
        }
        if let Some(readiness) = r.readiness {
            result.readiness.insert(cp.cluster.clone(), readiness);
        }
        result.wrote |= r.wrote;
        if r.transient {
            result.transient.insert(cp.cluster.clone());
        }
        result.outcomes.extend(r.outcome);
    }
    summarize(ctx, target.object, done);
    result
}

/// One Normal Event per kind of write for all clusters together: at scale one Event per
/// member write would double the hub's write load. When many objects of the type change at
/// once, their Events are summed up on the FederatedTypeConfig ([`hubfed_core::burst`]).
fn summarize(
    ctx: &Arc<TypeContext>,
    object: &FederatedObject,
    done: BTreeMap<(&'static str, &'static str), Vec<&str>>,
) {
    if done.is_empty() {
        return;
    }
    let reference = federated_reference(ctx, object);
    let what = kind_and_key(ctx, object);
    for ((reason, verb), clusters) in done {
        let kind_verb = format!("{verb} {}", ctx.target.kind);
        let key = what
            .strip_prefix(&ctx.target.kind)
            .unwrap_or(&what)
            .trim_start();
        let admitted = ctx.event_budget.lock().admit(
            std::time::Instant::now(),
            (reason, &kind_verb),
            key,
            &clusters,
        );
        match admitted {
            Admit::Record => {
                let clusters: Vec<String> = clusters.iter().map(|c| format!("{c:?}")).collect();
                let noun = if clusters.len() == 1 {
                    "cluster"
                } else {
                    "clusters"
                };
                let message = format!("{verb} {what} in {noun} {}", clusters.join(", "));
                publish(ctx, &reference, EventType::Normal, reason, &message);
            }
            Admit::Held(Some(due)) => publish_summaries_at(ctx, due),
            Admit::Held(None) => {}
        }
    }
}

/// At `due`, records the summaries of the Events held, on the type's FederatedTypeConfig.
pub(super) fn publish_summaries_at(ctx: &Arc<TypeContext>, due: std::time::Instant) {
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        tokio::time::sleep_until(due.into()).await;
        let summaries = ctx.event_budget.lock().due(std::time::Instant::now());
        let reference = kube::Resource::object_ref(&ctx.ftc, &());
        for summary in summaries {
            publish(
                &ctx,
                &reference,
                EventType::Normal,
                &summary.reason,
                &summary.message,
            );
        }
    });
}

/// A push member's apply still running: what its status shows if it is written before the
/// apply ends (after [`hubfed_core::conclude::PENDING_WRITES_HOLD`]). Not a failure: it neither
/// halts a rollout nor counts towards the backoff.
fn still_running(cp: &ClusterPlan) -> ClusterResult {
    ClusterResult {
        transient: true,
        ..ClusterResult::unwritten(outcome(
            &cp.cluster,
            cp.action.status_on_timeout(),
            Some("the write to the cluster has not finished yet".into()),
        ))
    }
}

/// Carries out one push member's action, with the federated object's Events and the type's
/// caches.
async fn write_one(
    ctx: &TypeContext,
    object: &FederatedObject,
    cp: &ClusterPlan,
    cluster: Option<&Arc<MemberCluster>>,
    permit: Option<OwnedSemaphorePermit>,
) -> ClusterResult {
    let events = HubEvents {
        ctx,
        reference: federated_reference(ctx, object),
    };
    let unmanaged = |cluster: &str, name: &str, namespace: Option<&str>| {
        ctx.members.unmanaged(cluster, name, namespace)
    };
    let env = ExecEnv {
        target_kind: &ctx.target.kind,
        target_group: &ctx.target.group,
        namespaced: ctx.target.namespaced,
        type_label: ctx.federated.kind.to_lowercase(),
        drift_people: &ctx.shared.drift_people,
        drift_reported: ctx,
        applied: Some(&ctx.applied),
        unmanaged: &unmanaged,
        events: &events,
    };
    dispatch_one(ctx, &env, object, cp, cluster, permit).await
}

/// A member's write permit, waited for without a deadline (writes queue behind a slow
/// member's).
async fn write_permit(cluster: Option<&Arc<MemberCluster>>) -> Option<OwnedSemaphorePermit> {
    match cluster {
        Some(c) => Arc::clone(&c.writes).acquire_owned().await.ok(),
        None => None,
    }
}

/// Carries out `cp` in its cluster with the member's write permit — `permit` when the caller
/// waited for it already ([`write_permit`]); the request itself has [`DISPATCH_TIMEOUT`].
async fn dispatch_one(
    ctx: &TypeContext,
    env: &ExecEnv<'_>,
    object: &FederatedObject,
    cp: &ClusterPlan,
    cluster: Option<&Arc<MemberCluster>>,
    permit: Option<OwnedSemaphorePermit>,
) -> ClusterResult {
    let name = cp.cluster.as_str();
    let needs_io = matches!(
        cp.action,
        ClusterAction::Apply(_) | ClusterAction::Delete(_) | ClusterAction::RemoveManagedLabel
    );
    if !needs_io {
        return passive(name, &cp.action);
    }
    let Some(client) = cluster.and_then(|c| c.client.clone()) else {
        return ClusterResult::unwritten(outcome(
            name,
            Some(PropagationStatus::ClientRetrievalFailed),
            Some("no client for cluster".into()),
        ));
    };
    let _permit = match permit {
        Some(permit) => Some(permit),
        None => write_permit(cluster).await,
    };
    let api = member_api(ctx, client, object.namespace.as_deref());
    // The member's answer time, its permit not included: what says a member is slow
    // ([`hubfed_core::detach::WriteTimes`]), not this controller's own queue.
    let started = std::time::Instant::now();
    let result =
        match tokio::time::timeout(DISPATCH_TIMEOUT, execute_action(env, object, cp, &api)).await {
            Ok(result) => result,
            Err(_) => timed_out(cp),
        };
    ctx.write_times
        .lock()
        .entry(name.to_owned())
        .or_default()
        .record(started.elapsed());
    result
}

/// Before the finalizer goes: none of the clusters `verify_in` still holds a managed copy,
/// read live rather than from the caches (KubeFed's `checkunmanaged`).
pub async fn no_managed_copies_left(
    ctx: &TypeContext,
    name: &str,
    namespace: Option<&str>,
    clusters: &[Arc<MemberCluster>],
    verify_in: &[String],
) -> bool {
    let checks = clusters
        .iter()
        .filter(|c| c.ready && verify_in.contains(&c.name))
        .filter_map(|c| c.client.clone())
        .map(|client| {
            let api = member_api(ctx, client, namespace);
            async move {
                // A cluster that does not answer is not confirmed; the deletion tries again.
                match tokio::time::timeout(DISPATCH_TIMEOUT, api.get_metadata_opt(name)).await {
                    Ok(Ok(None)) => true,
                    Ok(Ok(Some(meta))) => {
                        meta.labels().get(MANAGED_LABEL).map(String::as_str) != Some("true")
                    }
                    Ok(Err(_)) | Err(_) => false,
                }
            }
        });
    join_all(checks).await.into_iter().all(|ok| ok)
}
