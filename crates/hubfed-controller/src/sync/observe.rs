//! *Observe*: everything one reconcile reads, from caches — the federated object, the cluster
//! registry, the member caches, the containing FederatedNamespace, the PropagatedVersion — and,
//! only when a plan asks for it, the hub's namespace ([`plan_with_hub_namespace`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use hubfed_api::federated::{FederatedSpec, Placement};
use hubfed_api::names::SYNC_CONTROLLER_FINALIZER;
use hubfed_api::propagatedversion::{ClusterPropagatedVersion, PropagatedVersion};
use hubfed_core::conclude::cache_warming;
use hubfed_core::hub::{ClusterIdentity, HubNamespace};
use hubfed_core::placement::{ClusterInfo, NamespaceFederation};
use hubfed_core::plan::{
    ClusterAction, ContainingNamespace, FederatedObject, MemberObservation, Plan, PlanInput, plan,
};
use hubfed_core::status::PropagationStatus;
use hubfed_core::version::{
    PropagatedVersionStatus, RecordedApply, overrides_version, propagated_version_name,
    recorded_cluster_versions, template_version,
};
use kube::api::{Api, DynamicObject};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::warn;

use super::TypeContext;
use super::hub_writes::publish;
use super::members::CacheView;
use super::objects::store_is_behind;
use crate::clusters::MemberCluster;

/// What one reconcile observed.
pub struct Observed {
    /// Shared with the member writes that may outlast the reconcile: its template is the
    /// largest thing a reconcile holds.
    pub federated: Arc<FederatedObject>,
    pub object_ref: ObjectRef<DynamicObject>,
    pub reference: k8s_openapi::api::core::v1::ObjectReference,
    pub clusters: Vec<Arc<MemberCluster>>,
    infos: Vec<ClusterInfo>,
    pub members: BTreeMap<String, MemberObservation>,
    /// Some ready cluster's cache started listing only moments ago: no failure to report yet
    /// (the status would flap to CachedRetrievalFailed and back on every restart).
    pub cache_warming: bool,
    /// The containing namespace's FederatedNamespace placement: `None` when not applicable,
    /// `Some(None)` when the namespace is not federated.
    namespace_placement: Option<Option<Option<Placement>>>,
    pub template_version: String,
    pub overrides_version: String,
    /// The PropagatedVersion status as last written, and whether it is stored.
    pub stored_versions: Option<PropagatedVersionStatus>,
    pub versions_stored: bool,
    pub recorded: BTreeMap<String, RecordedApply>,
    identities: BTreeMap<String, ClusterIdentity>,
    duplicates: BTreeMap<String, Vec<String>>,
    control_plane: Option<String>,
}

/// The federated object as planning sees it, or why its spec cannot be read.
pub fn federated_object(obj: &DynamicObject) -> Result<FederatedObject, String> {
    let spec: FederatedSpec = match super::packed_fields::field(obj, "spec") {
        None => FederatedSpec::default(),
        Some(spec) => spec.map_err(|e| format!("spec cannot be read: {e}"))?,
    };
    Ok(FederatedObject {
        name: obj.name_any(),
        namespace: obj.namespace(),
        uid: obj.uid(),
        spec,
        annotations: obj.metadata.annotations.clone().unwrap_or_default(),
        deleting: obj.metadata.deletion_timestamp.is_some(),
        has_sync_finalizer: obj
            .finalizers()
            .iter()
            .any(|f| f == SYNC_CONTROLLER_FINALIZER),
    })
}

/// Reads what the plan for `obj` needs.
pub async fn observe(
    ctx: &TypeContext,
    obj: &DynamicObject,
    federated: FederatedObject,
) -> Observed {
    let clusters = ctx.shared.pool.clusters();
    let infos = clusters
        .iter()
        .map(|c| ClusterInfo {
            name: c.name.clone(),
            labels: c.labels.clone(),
            ready: c.ready,
        })
        .collect();
    // Which cluster is the hub matters for namespaces and for objects in the control plane's
    // own namespace (protected on the hub); which clusters share an API server, for all.
    let (identities, uids) = ctx
        .shared
        .hub_identities
        .resolve(&ctx.shared.hub, &clusters)
        .await;
    let duplicates = hubfed_core::hub::duplicate_clusters(&uids);
    let object_ref = ObjectRef::from_obj_with(obj, ctx.federated.clone());
    let template_version = template_version(federated.spec.template.as_ref());
    let overrides_version = overrides_version(federated.spec.overrides.as_deref());
    let namespace = federated.namespace.as_deref();
    let (stored_versions, stored_resource_version) =
        stored_versions(ctx, &object_ref, &federated.name, namespace);
    let mut observed = Observed {
        reference: obj.object_ref(&ctx.federated),
        object_ref,
        infos,
        members: BTreeMap::new(),
        cache_warming: false,
        namespace_placement: namespace_placement(ctx, namespace),
        recorded: BTreeMap::new(),
        versions_stored: stored_versions.is_some() || stored_resource_version.is_some(),
        stored_versions,
        template_version,
        overrides_version,
        identities,
        duplicates,
        control_plane: ctx.shared.control_plane().await.map(str::to_owned),
        clusters,
        federated: Arc::new(federated),
    };
    observed.observe_members(ctx);
    observed.recorded = observed.recorded_applies(ctx);
    observed
}

impl Observed {
    fn observe_members(&mut self, ctx: &TypeContext) {
        let (name, namespace) = (&self.federated.name, self.federated.namespace.as_deref());
        for cluster in self.clusters.iter().filter(|c| c.ready) {
            if cluster.pull {
                // What the cluster's agent last reported on the object's work.
                let work = super::deliver::lookup(ctx, &cluster.name, &self.federated);
                let observation = hubfed_core::pull::observation(work.as_deref());
                self.members.insert(cluster.name.clone(), observation);
                continue;
            }
            let observation = match ctx.members.view(&cluster.name, name, namespace) {
                CacheView::Ready(Some(member)) => MemberObservation::Present(member),
                CacheView::Ready(None) => MemberObservation::Absent,
                CacheView::NotServed => MemberObservation::NotServed,
                CacheView::Syncing(age, listing_for, failure) => {
                    if cache_warming(age, listing_for) {
                        self.cache_warming = true;
                    }
                    let kind = &ctx.target.kind;
                    MemberObservation::RetrievalFailed(match failure {
                        Some(why) => format!("the {kind} objects cannot be listed: {why}"),
                        None => format!("the cache of {kind} objects is not synced yet"),
                    })
                }
                CacheView::Unavailable => MemberObservation::RetrievalFailed(format!(
                    "the cache of {} objects is not running",
                    ctx.target.kind
                )),
            };
            self.members.insert(cluster.name.clone(), observation);
        }
    }

    /// What the last successful apply per cluster sent (this process's memory) or, after a
    /// restart, the versions stored for the current template and overrides.
    fn recorded_applies(&self, ctx: &TypeContext) -> BTreeMap<String, RecordedApply> {
        let recorded_versions = recorded_cluster_versions(
            self.stored_versions.as_ref(),
            &self.template_version,
            &self.overrides_version,
        );
        let mut applied = ctx
            .applied
            .get(self.federated.namespace.as_deref(), &self.federated.name);
        self.infos
            .iter()
            .filter_map(|c| {
                let pulled = self
                    .clusters
                    .iter()
                    .find(|m| m.name == c.name && m.pull)
                    .and_then(|m| super::deliver::lookup(ctx, &m.name, &self.federated))
                    .and_then(|work| hubfed_core::pull::recorded(&work));
                let remembered = pulled.or_else(|| applied.remove(&c.name));
                let from_versions = recorded_versions.get(&c.name).map(|v| RecordedApply {
                    version: v.clone(),
                    desired_hash: None,
                });
                remembered.or(from_versions).map(|r| (c.name.clone(), r))
            })
            .collect()
    }

    /// The plan's input; the hub's namespace is not read yet.
    /// The registry as planning sees it.
    pub fn infos(&self) -> &[ClusterInfo] {
        &self.infos
    }

    pub fn plan_input<'a>(&'a self, ctx: &'a TypeContext) -> PlanInput<'a> {
        let namespace = match &self.namespace_placement {
            None => NamespaceFederation::NotApplicable,
            Some(None) => NamespaceFederation::NotFederated,
            Some(Some(placement)) => NamespaceFederation::Federated(placement.as_ref()),
        };
        PlanInput {
            object: &self.federated,
            target: &ctx.target,
            clusters: &self.infos,
            namespace,
            scope: ctx.shared.scope,
            kubefed_namespace: &ctx.shared.kubefed_namespace,
            control_plane: self.control_plane.as_deref(),
            duplicates: &self.duplicates,
            identities: &self.identities,
            hub_namespace: HubNamespace::NotRead,
            containing_namespace: ContainingNamespace::NotRead,
            adopt_resources: ctx
                .shared
                .adopt_resources
                .load(std::sync::atomic::Ordering::Relaxed),
            members: &self.members,
            recorded: &self.recorded,
        }
    }
}

/// The containing namespace's FederatedNamespace placement, for namespaced targets.
fn namespace_placement(
    ctx: &TypeContext,
    namespace: Option<&str>,
) -> Option<Option<Option<Placement>>> {
    let (Some(store), Some(fns), Some(ns)) = (
        &ctx.federated_namespaces,
        &ctx.federated_namespace,
        namespace,
    ) else {
        return None;
    };
    if !ctx.target.namespaced {
        return None;
    }
    Some(
        store
            .get(&ObjectRef::new_with(ns, fns.clone()).within(ns))
            .map(|fns| {
                fns.data
                    .get("spec")
                    .and_then(|s| s.get("placement"))
                    .and_then(|p| serde_json::from_value(p.clone()).ok())
            }),
    )
}

/// Plans, and when the plan would delete a namespace in a member, or a copy of a namespaced
/// object, reads the hub's namespace of that name and plans again with it
/// ([`hubfed_core::hub`]: the hub's own namespace is never deleted;
/// [`hubfed_core::plan::ContainingNamespace`]: nothing is deleted on the way while it is being
/// deleted). Says in an Event why a namespace is held back.
pub async fn plan_with_hub_namespace(
    ctx: &TypeContext,
    observed: &Observed,
    mut input: PlanInput<'_>,
) -> Plan {
    let mut planned = plan(&input);
    let read;
    if planned.needs_hub_namespace || planned.needs_containing_namespace {
        // A FederatedNamespace's name is its namespace's; any other object's namespace holds it.
        let name = match &input.object.namespace {
            Some(namespace) if !planned.needs_hub_namespace => namespace,
            _ => &input.object.name,
        };
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.shared.hub.clone());
        read = api
            .get_metadata_opt(name)
            .await
            .map(|found| {
                found.map(|m| {
                    let deleting = m.metadata.deletion_timestamp.is_some();
                    (m.metadata.uid.unwrap_or_default(), deleting)
                })
            })
            .map_err(|e| e.to_string());
        (input.hub_namespace, input.containing_namespace) = match &read {
            Ok(None) => (HubNamespace::Absent, ContainingNamespace::Deleting),
            Ok(Some((uid, deleting))) => (
                HubNamespace::Uid(uid),
                if *deleting {
                    ContainingNamespace::Deleting
                } else {
                    ContainingNamespace::Active
                },
            ),
            Err(why) => (
                HubNamespace::Unreadable(why),
                ContainingNamespace::Unreadable(why),
            ),
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
            publish(
                ctx,
                &observed.reference,
                EventType::Warning,
                PropagationStatus::ClusterIdentityUnknown.as_str(),
                &format!("cluster {:?}: {message}", cp.cluster),
            );
        }
    }
    planned
}

/// The PropagatedVersion status as last written, and the resourceVersion of the stored copy
/// (`None`: not stored). A write of this controller's that the store does not show yet wins
/// over the store's older copy; one it shows is forgotten.
fn stored_versions(
    ctx: &TypeContext,
    object_ref: &ObjectRef<DynamicObject>,
    name: &str,
    namespace: Option<&str>,
) -> (Option<PropagatedVersionStatus>, Option<String>) {
    let (status, resource_version) = stored_propagated_version(ctx, name, namespace);
    ctx.objects
        .update(object_ref, |state| match &state.written_versions {
            Some(w) if store_is_behind(resource_version.as_deref(), &w.resource_version) => {
                (Some(w.status.clone()), resource_version)
            }
            Some(_) => {
                state.written_versions = None;
                (status, resource_version)
            }
            None => (status, resource_version),
        })
}

/// The status and resourceVersion of the federated object `name`'s (Cluster)PropagatedVersion
/// in the hub's cache (`None`s: not stored).
pub(crate) fn stored_propagated_version(
    ctx: &TypeContext,
    name: &str,
    namespace: Option<&str>,
) -> (Option<PropagatedVersionStatus>, Option<String>) {
    let pv_name = propagated_version_name(&ctx.target.kind, name);
    match namespace {
        Some(ns) => ctx
            .shared
            .propagated_versions
            .get(&ObjectRef::<PropagatedVersion>::new(&pv_name).within(ns))
            .map(|pv| (pv.status.clone(), pv.metadata.resource_version.clone())),
        None => ctx
            .shared
            .cluster_propagated_versions
            .get(&ObjectRef::<ClusterPropagatedVersion>::new(&pv_name))
            .map(|pv| (pv.status.clone(), pv.metadata.resource_version.clone())),
    }
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::sync::objects::store_is_behind;

    #[test]
    fn a_store_is_behind_until_it_shows_the_write() {
        assert!(store_is_behind(None, "12"), "not stored yet");
        assert!(store_is_behind(Some("11"), "12"), "only the creation seen");
        assert!(!store_is_behind(Some("12"), "12"));
        assert!(!store_is_behind(Some("13"), "12"), "a later write seen");
        assert!(
            !store_is_behind(Some("x"), "12"),
            "not comparable: caught up"
        );
        assert!(!store_is_behind(None, "x"));
    }
}
