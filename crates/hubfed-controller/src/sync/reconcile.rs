//! `reconcile(federated object)`: observe → plan (hubfed-core) → dispatch → status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hubfed_api::federated::{FederatedStatus, Placement};
use hubfed_api::names::SYNC_CONTROLLER_FINALIZER;
use hubfed_api::propagatedversion::{
    ClusterObjectVersion as ApiClusterObjectVersion, ClusterPropagatedVersion, PropagatedVersion,
    PropagatedVersionStatus as ApiVersionStatus,
};
use hubfed_core::hub::HubNamespace;
use hubfed_core::placement::{ClusterInfo, NamespaceFederation};
use hubfed_core::plan::{
    ClusterAction, Disposition, FederatedObject, FinalizerAction, MemberObservation, Plan,
    PlanInput, plan,
};
use hubfed_core::status::PropagationStatus;
use hubfed_core::status::{StatusInput, compute_status};
use hubfed_core::version::{
    ClusterObjectVersion, PropagatedVersionStatus, RecordedApply, overrides_version,
    propagated_version_name, recorded_cluster_versions, template_version,
    update_propagated_version,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, warn};

use super::members::CacheView;
use super::{TypeContext, action_after, dispatch};
use crate::metrics::METRICS;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("hub API request failed: {0}")]
    Hub(#[from] kube::Error),
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
}

pub fn error_policy(obj: Arc<DynamicObject>, error: &Error, _ctx: Arc<TypeContext>) -> Action {
    warn!(name = %obj.name_any(), namespace = ?obj.namespace(), error = %error, "reconcile failed");
    Action::requeue(super::RETRY_DELAY)
}

/// RFC 3339 with second precision, as Kubernetes writes times.
pub(crate) fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn string_map(map: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    map.cloned().unwrap_or_default()
}

fn to_core_versions(status: &ApiVersionStatus) -> PropagatedVersionStatus {
    PropagatedVersionStatus {
        template_version: status.template_version.clone(),
        overrides_version: status.override_version.clone(),
        cluster_versions: status
            .cluster_versions
            .iter()
            .map(|v| ClusterObjectVersion {
                cluster_name: v.cluster_name.clone(),
                version: v.version.clone(),
            })
            .collect(),
    }
}

fn to_api_versions(status: &PropagatedVersionStatus) -> ApiVersionStatus {
    ApiVersionStatus {
        template_version: status.template_version.clone(),
        override_version: status.overrides_version.clone(),
        cluster_versions: status
            .cluster_versions
            .iter()
            .map(|v| ApiClusterObjectVersion {
                cluster_name: v.cluster_name.clone(),
                version: v.version.clone(),
            })
            .collect(),
    }
}

/// Plans, and when the plan would delete a namespace in a member, reads the hub's namespace of
/// that name and plans again with it ([`hubfed_core::hub`]: the hub's own namespace is never
/// deleted). Says in an Event why a namespace is held back.
async fn plan_with_hub_namespace(ctx: &TypeContext, mut input: PlanInput<'_>) -> Plan {
    let mut planned = plan(&input);
    let read;
    if planned.needs_hub_namespace {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.shared.hub.clone());
        read = api
            .get_metadata_opt(&input.object.name)
            .await
            .map(|found| found.map(|m| m.metadata.uid.unwrap_or_default()))
            .map_err(|e| e.to_string());
        input.hub_namespace = match &read {
            Ok(None) => HubNamespace::Absent,
            Ok(Some(uid)) => HubNamespace::Uid(uid),
            Err(why) => HubNamespace::Unreadable(why),
        };
        planned = plan(&input);
    }
    for cp in &planned.clusters {
        if let ClusterAction::Blocked {
            status: PropagationStatus::ClusterIdentityUnknown,
            message,
        } = &cp.action
        {
            warn!(name = %input.object.name, cluster = %cp.cluster, reason = %message, "namespace held back");
            let reference = dispatch::federated_reference(ctx, input.object);
            publish(
                ctx,
                &reference,
                EventType::Warning,
                PropagationStatus::ClusterIdentityUnknown.as_str(),
                &format!("cluster {:?}: {message}", cp.cluster),
            );
        }
    }
    planned
}

/// Reconciles one federated object, recording duration and outcome.
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<TypeContext>) -> Result<Action, Error> {
    let controller = ctx.federated.kind.to_lowercase();
    let started = std::time::Instant::now();
    METRICS
        .workqueue_depth
        .with_label_values(&[&controller])
        .inc();
    let result = reconcile_object(obj, &ctx).await;
    METRICS
        .workqueue_depth
        .with_label_values(&[&controller])
        .dec();
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
        Ok(action) if *action == Action::requeue(super::RETRY_DELAY) => "requeue",
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

async fn reconcile_object(
    obj: Arc<DynamicObject>,
    ctx: &Arc<TypeContext>,
) -> Result<Action, Error> {
    let ctx = Arc::clone(ctx);
    let name = obj.name_any();
    let namespace = obj.namespace();
    let object_ref = ObjectRef::from_obj_with(&*obj, ctx.federated.clone());
    let reference = obj.object_ref(&ctx.federated);

    let spec = match obj.data.get("spec") {
        None => Ok(Default::default()),
        Some(spec) => serde_json::from_value(spec.clone()),
    };
    let spec = match spec {
        Ok(spec) => spec,
        Err(e) => {
            let message = format!("spec cannot be read: {e}");
            publish(
                &ctx,
                &reference,
                EventType::Warning,
                "InvalidSpec",
                &message,
            );
            write_invalid_status(&ctx, &obj, &message).await?;
            return Ok(Action::await_change());
        }
    };
    let finalizers = obj.finalizers();
    let federated = FederatedObject {
        name: name.clone(),
        namespace: namespace.clone(),
        spec,
        annotations: string_map(obj.metadata.annotations.as_ref()),
        deleting: obj.metadata.deletion_timestamp.is_some(),
        has_sync_finalizer: finalizers.iter().any(|f| f == SYNC_CONTROLLER_FINALIZER),
    };

    let clusters = ctx.shared.pool.clusters();
    let infos: Vec<ClusterInfo> = clusters
        .iter()
        .map(|c| ClusterInfo {
            name: c.name.clone(),
            labels: c.labels.clone(),
            ready: c.ready,
        })
        .collect();

    let mut members = BTreeMap::new();
    let mut cache_pending = false;
    // A cache that is still listing (just after a start or a join) is no failure to report:
    // the status would flap to CachedRetrievalFailed and back on every restart.
    let mut cache_warming = false;
    for cluster in clusters.iter().filter(|c| c.ready) {
        let observation = match ctx.members.view(&cluster.name, &name, namespace.as_deref()) {
            CacheView::Ready(Some(member)) => MemberObservation::Present(member),
            CacheView::Ready(None) => MemberObservation::Absent,
            view @ (CacheView::Syncing(_) | CacheView::Unavailable) => {
                cache_pending = true;
                if let CacheView::Syncing(elapsed) = view
                    && elapsed < CACHE_SYNC_GRACE
                {
                    cache_warming = true;
                }
                MemberObservation::RetrievalFailed(format!(
                    "the cache of {} objects in cluster {:?} is not synced yet",
                    ctx.target.kind, cluster.name
                ))
            }
        };
        members.insert(cluster.name.clone(), observation);
    }

    // The containing namespace's FederatedNamespace bounds placement.
    let fns_placement: Option<Option<Placement>>;
    let namespace_federation = match (
        &ctx.federated_namespaces,
        &ctx.federated_namespace,
        &namespace,
    ) {
        (Some(store), Some(fns_ar), Some(ns)) if ctx.target.namespaced => {
            fns_placement = store
                .get(&ObjectRef::new_with(ns, fns_ar.clone()).within(ns))
                .map(|fns| {
                    fns.data
                        .get("spec")
                        .and_then(|s| s.get("placement"))
                        .and_then(|p| serde_json::from_value(p.clone()).ok())
                });
            match &fns_placement {
                Some(p) => NamespaceFederation::Federated(p.as_ref()),
                None => NamespaceFederation::NotFederated,
            }
        }
        _ => NamespaceFederation::NotApplicable,
    };

    let template_v = template_version(federated.spec.template.as_ref());
    let overrides_v = overrides_version(federated.spec.overrides.as_deref());
    let (stored_versions, stored_resource_version) =
        stored_versions(&ctx, &object_ref, &name, namespace.as_deref());
    let recorded_versions =
        recorded_cluster_versions(stored_versions.as_ref(), &template_v, &overrides_v);
    let recorded: BTreeMap<String, RecordedApply> = {
        let mut applied = ctx.applied.get(namespace.as_deref(), &name);
        infos
            .iter()
            .filter_map(|c| {
                let remembered = applied.remove(&c.name);
                let from_versions = recorded_versions.get(&c.name).map(|v| RecordedApply {
                    version: v.clone(),
                    desired_hash: None,
                });
                remembered.or(from_versions).map(|r| (c.name.clone(), r))
            })
            .collect()
    };

    let identities = if ctx.target.is_namespace() {
        ctx.shared
            .hub_identities
            .resolve(&ctx.shared.hub, &clusters)
            .await
    } else {
        BTreeMap::new()
    };
    let adopt = ctx
        .shared
        .adopt_resources
        .load(std::sync::atomic::Ordering::Relaxed);
    let plan = plan_with_hub_namespace(
        &ctx,
        PlanInput {
            object: &federated,
            target: &ctx.target,
            clusters: &infos,
            namespace: namespace_federation,
            scope: ctx.shared.scope,
            kubefed_namespace: &ctx.shared.kubefed_namespace,
            identities: &identities,
            hub_namespace: HubNamespace::NotRead,
            adopt_resources: adopt,
            members: &members,
            recorded: &recorded,
        },
    )
    .await;
    for warning in &plan.warnings {
        publish(
            &ctx,
            &reference,
            EventType::Warning,
            warning.reason,
            &warning.message,
        );
    }
    debug!(name = %name, namespace = ?namespace, disposition = ?plan.disposition, "planned");

    match plan.disposition {
        Disposition::Ignore(_) => return Ok(Action::await_change()),
        Disposition::Sync => {
            if plan.finalizer == FinalizerAction::Ensure && !federated.has_sync_finalizer {
                add_finalizer(&ctx, &obj).await?;
            }
        }
        Disposition::Delete => {}
    }

    let type_label = ctx.federated.kind.to_lowercase();
    for cp in &plan.clusters {
        if let hubfed_core::plan::ClusterAction::Apply(_) = &cp.action
            && let Some(recorded) = recorded.get(&cp.cluster)
        {
            let drifted = match members.get(&cp.cluster) {
                Some(MemberObservation::Present(m)) => m.version != recorded.version,
                Some(MemberObservation::Absent) | None => true,
                Some(MemberObservation::RetrievalFailed(_)) => false,
            };
            if drifted {
                METRICS
                    .drift_corrections_total
                    .with_label_values(&[&type_label, &cp.cluster])
                    .inc();
            }
        }
    }
    let generation = obj.metadata.generation.unwrap_or(0);
    if plan.disposition == Disposition::Sync {
        ctx.latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe_start(&object_ref, generation);
    }

    let result = dispatch::execute(&ctx, &federated, &plan, &clusters).await;

    if plan.disposition == Disposition::Delete {
        ctx.applied.forget(namespace.as_deref(), &name);
        ctx.written_versions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&object_ref);
        ctx.latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(&object_ref);
        let release = match plan.finalizer {
            FinalizerAction::Remove => !result.recoverable_failure,
            FinalizerAction::RemoveAfterVerification => {
                !result.recoverable_failure
                    && dispatch::no_managed_copies_left(
                        &ctx,
                        &name,
                        namespace.as_deref(),
                        &clusters,
                        &plan.hub_namespace_in,
                    )
                    .await
            }
            _ => false,
        };
        if release {
            remove_finalizer(&ctx, &obj).await?;
            publish(
                &ctx,
                &reference,
                EventType::Normal,
                "FinalizerRemoved",
                "member objects were cleaned up",
            );
            return Ok(Action::await_change());
        }
        return Ok(if result.recoverable_failure {
            Action::requeue(super::RETRY_DELAY)
        } else {
            Action::requeue(Duration::from_secs(5))
        });
    }

    // Status: written only when it changes.
    let previous: Option<FederatedStatus> = obj
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    let now = now_rfc3339();
    let update = compute_status(
        previous.as_ref(),
        &StatusInput {
            generation: obj.metadata.generation.unwrap_or(0),
            reason: plan.reason,
            reason_message: plan.reason_message.as_deref(),
            outcomes: &result.outcomes,
            resources_updated: result.wrote,
            remote_status_collection: false,
            unknown_clusters: &plan.placement.unknown_clusters,
            now: &now,
        },
    );
    if update.changed && !cache_warming {
        write_status(&ctx, &obj, &update.status).await?;
        // Placement problems are the user's to fix: say so once per change, as an Event.
        if let Some(message) = &plan.reason_message {
            publish(
                &ctx,
                &reference,
                EventType::Warning,
                plan.reason.as_str(),
                message,
            );
        }
        if !plan.placement.unknown_clusters.is_empty() {
            publish(
                &ctx,
                &reference,
                EventType::Warning,
                "UnknownClusters",
                &format!(
                    "placement names clusters that are not joined: {}",
                    plan.placement.unknown_clusters.join(", ")
                ),
            );
        }
    }

    if let Some(versions) = update_propagated_version(
        stored_versions.as_ref(),
        &template_v,
        &overrides_v,
        &plan.placement.clusters,
        &result.new_versions,
    ) {
        match write_versions(
            &ctx,
            &obj,
            stored_versions.is_some() || stored_resource_version.is_some(),
            &versions,
        )
        .await
        {
            Ok(resource_version) => {
                ctx.written_versions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(
                        object_ref.clone(),
                        super::WrittenVersions {
                            resource_version,
                            status: versions,
                        },
                    );
            }
            Err(e) => warn!(name = %name, error = %e, "writing the propagated version failed"),
        }
    }

    let converged = !cache_pending
        && plan.reason == hubfed_core::status::AggregateReason::Success
        && result
            .outcomes
            .iter()
            .all(|o| o.status == hubfed_core::status::PropagationStatus::Ok);
    if let Some(latency) = ctx
        .latency
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .observe_end(&object_ref, generation, result.wrote, converged)
    {
        METRICS
            .propagation_latency
            .with_label_values(&[&type_label])
            .observe(latency.as_secs_f64());
    }

    if cache_pending {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    Ok(action_after(result.recoverable_failure, result.waiting))
}

/// How long a member cache may take to list before the clusters it leaves unobserved are
/// reported as `CachedRetrievalFailed`.
const CACHE_SYNC_GRACE: Duration = Duration::from_secs(30);

/// The PropagatedVersion status as last written, and the resourceVersion of the stored copy
/// (`None`: not stored). A write of this controller's that the store does not show yet wins
/// over the store's older copy.
fn stored_versions(
    ctx: &TypeContext,
    object_ref: &ObjectRef<DynamicObject>,
    name: &str,
    namespace: Option<&str>,
) -> (Option<PropagatedVersionStatus>, Option<String>) {
    let pv_name = propagated_version_name(&ctx.target.kind, name);
    let (status, resource_version) = match namespace {
        Some(ns) => ctx
            .shared
            .propagated_versions
            .get(&ObjectRef::<PropagatedVersion>::new(&pv_name).within(ns))
            .map(|pv| {
                (
                    pv.status.as_ref().map(to_core_versions),
                    pv.metadata.resource_version.clone(),
                )
            }),
        None => ctx
            .shared
            .cluster_propagated_versions
            .get(&ObjectRef::<ClusterPropagatedVersion>::new(&pv_name))
            .map(|pv| {
                (
                    pv.status.as_ref().map(to_core_versions),
                    pv.metadata.resource_version.clone(),
                )
            }),
    }
    .unwrap_or_default();
    let mut written = ctx
        .written_versions
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    match written.get(object_ref) {
        Some(w) if store_is_behind(resource_version.as_deref(), &w.resource_version) => {
            (Some(w.status.clone()), resource_version)
        }
        Some(_) => {
            written.remove(object_ref);
            (status, resource_version)
        }
        None => (status, resource_version),
    }
}

/// Whether a cached copy at `cached` predates the write that returned `written`. Kubernetes
/// resourceVersions are comparable decimal numbers (KEP-5504); anything else counts as
/// caught up, which at worst costs one redundant write.
fn store_is_behind(cached: Option<&str>, written: &str) -> bool {
    let Ok(written) = written.parse::<u64>() else {
        return false;
    };
    match cached {
        None => true,
        Some(cached) => cached.parse::<u64>().is_ok_and(|cached| cached < written),
    }
}

/// Forgets written PropagatedVersions the store has caught up with.
pub(crate) fn prune_written_versions(ctx: &TypeContext) {
    let pending: Vec<ObjectRef<DynamicObject>> = ctx
        .written_versions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .cloned()
        .collect();
    for object_ref in pending {
        // `stored_versions` drops the entry once the store has moved on.
        let _ = stored_versions(
            ctx,
            &object_ref,
            &object_ref.name,
            object_ref.namespace.as_deref(),
        );
    }
}

fn federated_api(ctx: &TypeContext, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(ctx.shared.hub.clone(), ns, &ctx.federated),
        None => Api::all_with(ctx.shared.hub.clone(), &ctx.federated),
    }
}

/// Adds the sync finalizer; the resourceVersion makes a concurrent change fail and retry.
async fn add_finalizer(ctx: &TypeContext, obj: &DynamicObject) -> Result<(), Error> {
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(SYNC_CONTROLLER_FINALIZER.to_string());
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    federated_api(ctx, obj.namespace().as_deref())
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

async fn remove_finalizer(ctx: &TypeContext, obj: &DynamicObject) -> Result<(), Error> {
    let finalizers: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != SYNC_CONTROLLER_FINALIZER)
        .collect();
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    match federated_api(ctx, obj.namespace().as_deref())
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes `status` through the status subresource. Lists are sent even when empty: a merge
/// patch would otherwise keep the old ones.
async fn write_status(
    ctx: &TypeContext,
    obj: &DynamicObject,
    status: &FederatedStatus,
) -> Result<(), Error> {
    let mut value = serde_json::to_value(status)?;
    if let Value::Object(map) = &mut value {
        map.entry("clusters").or_insert_with(|| json!([]));
        map.entry("conditions").or_insert_with(|| json!([]));
    }
    let patch = json!({ "status": value });
    match federated_api(ctx, obj.namespace().as_deref())
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn write_invalid_status(
    ctx: &TypeContext,
    obj: &DynamicObject,
    message: &str,
) -> Result<(), Error> {
    let previous: Option<FederatedStatus> = obj
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    let now = now_rfc3339();
    let update = compute_status(
        previous.as_ref(),
        &StatusInput {
            generation: obj.metadata.generation.unwrap_or(0),
            reason: hubfed_core::status::AggregateReason::ComputePlacementFailed,
            reason_message: Some(message),
            outcomes: &[],
            resources_updated: false,
            remote_status_collection: false,
            unknown_clusters: &[],
            now: &now,
        },
    );
    if update.changed {
        write_status(ctx, obj, &update.status).await?;
    }
    Ok(())
}

/// Creates the (Cluster)PropagatedVersion unless it `exists`, then writes its status;
/// returns the resourceVersion of that write.
async fn write_versions(
    ctx: &TypeContext,
    obj: &DynamicObject,
    exists: bool,
    versions: &PropagatedVersionStatus,
) -> Result<String, Error> {
    let pv_name = propagated_version_name(&ctx.target.kind, &obj.name_any());
    let owner = OwnerReference {
        api_version: ctx.federated.api_version.clone(),
        kind: ctx.federated.kind.clone(),
        name: obj.name_any(),
        uid: obj.uid().unwrap_or_default(),
        ..Default::default()
    };
    let metadata = ObjectMeta {
        name: Some(pv_name.clone()),
        namespace: obj.namespace(),
        owner_references: Some(vec![owner]),
        ..Default::default()
    };
    let status = json!({ "status": to_api_versions(versions) });
    let hub = ctx.shared.hub.clone();
    match obj.namespace() {
        Some(ns) => {
            let pv = PropagatedVersion {
                metadata,
                ..PropagatedVersion::new(&pv_name, Default::default())
            };
            create_then_write_status(Api::namespaced(hub, &ns), exists, &pv, &status).await
        }
        None => {
            let pv = ClusterPropagatedVersion {
                metadata,
                ..ClusterPropagatedVersion::new(&pv_name, Default::default())
            };
            create_then_write_status(Api::all(hub), exists, &pv, &status).await
        }
    }
}

async fn create_then_write_status<K>(
    api: Api<K>,
    exists: bool,
    object: &K,
    status: &Value,
) -> Result<String, Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if !exists {
        create_ignoring_conflict(&api, object).await?;
    }
    let written = api
        .patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await?;
    Ok(written.resource_version().unwrap_or_default())
}

async fn create_ignoring_conflict<K>(api: &Api<K>, object: &K) -> Result<(), Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Records an Event on the federated object without holding up the reconcile.
pub(crate) fn publish(
    ctx: &TypeContext,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    let recorder = ctx.recorder.clone();
    let reference = reference.clone();
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(message.chars().take(1024).collect()),
        action: reason.to_string(),
        secondary: None,
    };
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&event, &reference).await {
            debug!(error = %e, "recording an event failed");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::store_is_behind;

    #[test]
    fn a_store_is_behind_until_it_shows_the_write() {
        assert!(store_is_behind(None, "12"), "not stored yet");
        assert!(store_is_behind(Some("11"), "12"), "only the creation seen");
        assert!(!store_is_behind(Some("12"), "12"), "the write itself");
        assert!(!store_is_behind(Some("13"), "12"), "a later write");
        assert!(!store_is_behind(Some("9"), "x"), "opaque: caught up");
        assert!(!store_is_behind(Some("x"), "12"), "opaque: caught up");
    }
}
