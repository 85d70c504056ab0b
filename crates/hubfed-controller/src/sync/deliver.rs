//! Pull-mode members: a plan's action for such a cluster becomes its [`Work`] in the hub
//! (written only when it changes), the agent's report on the work becomes the cluster's
//! outcome, and works the plan no longer needs are removed. Every decision is
//! [`hubfed_core::pull`]'s; this module reads and writes works.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::names::FIELD_MANAGER;
use hubfed_api::work::{WORK_CLUSTER_LABEL, WORK_KIND_LABEL, Work, WorkSource, WorkTarget};
use hubfed_core::plan::{ClusterAction, ClusterPlan, FederatedObject, Plan, is_orphaning};
use hubfed_core::pull::{
    WorkFate, WorkSubject, cluster_namespace, outcome, reported, work_fate, work_name, work_spec,
};
use hubfed_core::status::ClusterOutcome;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, warn};

use super::TypeContext;
use super::hub_writes::{HubError, bounded};
use super::member_io::{ClusterResult, error_message, federated_reference};
use crate::clusters::MemberCluster;

/// One type's works in the hub, and which reports were already turned into Events.
pub struct PullWorks {
    pub store: Store<Work>,
    /// Work UID → the generation whose report's Events were recorded.
    reported: Mutex<HashMap<String, i64>>,
    /// Works this process wrote that the cache does not show yet, by namespace and name: a
    /// reconcile queued meanwhile must not write the same work again.
    written: Mutex<HashMap<(String, String), Arc<Work>>>,
}

impl PullWorks {
    pub fn new(store: Store<Work>) -> Self {
        Self {
            store,
            reported: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets works that are gone.
    pub fn forget(&self, uid: &str) {
        self.reported.lock().remove(uid);
    }
}

/// The work of `object` for `cluster`: as the cache shows it, or as this process last wrote
/// it when the cache does not show that generation yet.
pub fn lookup(ctx: &TypeContext, cluster: &str, object: &FederatedObject) -> Option<Arc<Work>> {
    let name = work_name(
        &ctx.target.group,
        &ctx.target.kind,
        object
            .namespace
            .as_deref()
            .filter(|_| ctx.target.namespaced),
        &object.name,
    );
    let namespace = cluster_namespace(cluster);
    let cached = ctx
        .works
        .store
        .get(&ObjectRef::new(&name).within(&namespace));
    let mut written = ctx.works.written.lock();
    let key = (namespace, name);
    match (cached, written.get(&key)) {
        (Some(cached), Some(mine)) if cached.metadata.generation < mine.metadata.generation => {
            Some(Arc::clone(mine))
        }
        (None, Some(mine)) => Some(Arc::clone(mine)),
        (cached, _) => {
            written.remove(&key);
            cached
        }
    }
}

fn target(ctx: &TypeContext) -> WorkTarget {
    WorkTarget {
        api_version: ctx.target_resource.api_version.clone(),
        kind: ctx.target_resource.kind.clone(),
        plural: ctx.target_resource.plural.clone(),
        namespaced: ctx.target.namespaced,
    }
}

fn source(ctx: &TypeContext, object: &FederatedObject) -> WorkSource {
    WorkSource {
        kind: ctx.federated.kind.clone(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        uid: object.uid.clone().unwrap_or_default(),
    }
}

/// Writes `action` as the work of `object` for `cluster` when it differs from the work as it
/// stands (`basis`: the copy's version the plan saw). The cluster's result, and whether the
/// agent has yet to report on it.
pub async fn deliver(
    ctx: &TypeContext,
    object: &FederatedObject,
    cp: &ClusterPlan,
    basis: &str,
) -> (ClusterResult, bool) {
    let (target, source) = (target(ctx), source(ctx, object));
    let subject = WorkSubject {
        target: &target,
        source: &source,
        name: &object.name,
        namespace: object
            .namespace
            .as_deref()
            .filter(|_| ctx.target.namespaced),
        annotations: &object.annotations,
        collect_status: ctx.collect_status,
    };
    let Some(spec) = work_spec(&subject, &cp.action, basis) else {
        return (super::execute::passive(&cp.cluster, &cp.action), false);
    };
    let current = lookup(ctx, &cp.cluster, object);
    let (work, requested) = match current {
        Some(work) if work.spec == spec => (work, false),
        _ => match write_work(ctx, &cp.cluster, object, spec).await {
            Ok(work) => (remember(ctx, work), true),
            Err(e) => {
                let message = format!(
                    "the work cannot be written to the hub: {}",
                    error_message(&e)
                );
                return (failed(cp, message), false);
            }
        },
    };
    let pull = outcome(&cp.action, &work);
    let result = ClusterResult {
        outcome: pull.status.map(|status| ClusterOutcome {
            cluster: cp.cluster.clone(),
            status,
            message: pull.message,
            remote_status: None,
            drift: pull.drift,
        }),
        version: pull.version,
        // A new request is this reconcile's write to the cluster: its Event is the
        // dispatch's, one for all clusters (per pull member and object, Events would double
        // the hub's writes in a cold start); the agent's own Events come with its report.
        wrote: requested,
        done: requested.then(|| done_event(&cp.action)).flatten(),
        transient: pull.transient,
        readiness: None,
    };
    (result, pull.pending)
}

/// Keeps a work just written until the cache shows it ([`lookup`]).
fn remember(ctx: &TypeContext, work: Work) -> Arc<Work> {
    let work = Arc::new(work);
    let key = (work.namespace().unwrap_or_default(), work.name_any());
    ctx.works.written.lock().insert(key, Arc::clone(&work));
    work
}

/// The dispatch's Event for a new request (as for the same write to a push member).
fn done_event(action: &ClusterAction) -> Option<(&'static str, &'static str)> {
    match action {
        ClusterAction::Apply(apply) if apply.creates => Some(("CreateInCluster", "Creating")),
        ClusterAction::Apply(_) => Some(("UpdateInCluster", "Updating")),
        ClusterAction::Delete(_) => Some(("DeleteInCluster", "Deleting")),
        ClusterAction::RemoveManagedLabel => Some((
            "RemoveManagedLabelFromInCluster",
            "Removing the managed label from",
        )),
        _ => None,
    }
}

fn failed(cp: &ClusterPlan, message: String) -> ClusterResult {
    ClusterResult {
        transient: true,
        ..ClusterResult::unwritten(super::member_io::outcome(
            &cp.cluster,
            cp.action.status_on_failure(),
            Some(message),
        ))
    }
}

/// Server-side applies the work (hubfed owns every field of its spec).
async fn write_work(
    ctx: &TypeContext,
    cluster: &str,
    object: &FederatedObject,
    spec: hubfed_api::work::WorkSpec,
) -> Result<Work, kube::Error> {
    let namespace = cluster_namespace(cluster);
    let name = work_name(
        &ctx.target.group,
        &ctx.target.kind,
        spec.namespace.as_deref(),
        &object.name,
    );
    let body = json!({
        "apiVersion": Work::api_version(&()),
        "kind": Work::kind(&()),
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                WORK_CLUSTER_LABEL: cluster,
                WORK_KIND_LABEL: ctx.federated.kind.to_lowercase(),
            },
        },
        "spec": spec,
    });
    let api: Api<Work> = Api::namespaced(ctx.shared.hub.clone(), &namespace);
    debug!(cluster, work = %name, action = %spec.action, "writing work");
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
}

/// The first time this process sees the agent's report on the work's current generation:
/// records the Events the agent's action made (adoption, drift, a refused write, ...) on
/// the federated object, related to the cluster's KubeFedCluster.
fn publish_report(ctx: &TypeContext, object: &FederatedObject, cluster: &str, work: &Work) {
    if !reported(work) {
        return;
    }
    let (Some(uid), Some(generation)) = (work.uid(), work.metadata.generation) else {
        return;
    };
    let seen = ctx.works.reported.lock().insert(uid, generation);
    let Some(status) = work.status.as_ref().filter(|_| seen != Some(generation)) else {
        return;
    };
    let reference = federated_reference(ctx, object);
    let related = ObjectReference {
        api_version: Some(KubeFedCluster::api_version(&()).into_owned()),
        kind: Some(KubeFedCluster::kind(&()).into_owned()),
        namespace: Some(ctx.shared.kubefed_namespace.clone()),
        name: Some(cluster.to_owned()),
        ..ObjectReference::default()
    };
    let publish = |type_: EventType, reason: &str, message: &str| {
        crate::events::publish_related(
            &ctx.recorder,
            &reference,
            Some(related.clone()),
            type_,
            reason,
            message,
        );
    };
    // The agent's drift handling counts here, as a push member's does in the controller:
    // once per new drift (the agent reports a drift seen again without its Event).
    let drifted = status.events.iter().any(|e| e.reason == "Drifted");
    if let Some(drift) = status.drift.as_ref().filter(|_| drifted) {
        crate::metrics::METRICS
            .drift_total
            .with_label_values(&[&ctx.federated.kind.to_lowercase(), cluster, &drift.action])
            .inc();
    }
    for event in &status.events {
        let type_ = if event.type_ == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(type_, &event.reason, &event.message);
    }
}

/// Every pull member's work after a dispatch: the agent's new report recorded as Events
/// ([`publish_report`]); a work the plan asked nothing of kept, deleted, or turned into a
/// tombstone ([`work_fate`]). An error means some work could not be settled: a deletion
/// must not release its finalizer then (the work would stand for an object that is gone).
pub async fn settle(
    ctx: &TypeContext,
    object: &FederatedObject,
    plan: &Plan,
    clusters: &[Arc<MemberCluster>],
) -> Result<(), HubError> {
    let orphaning = object.deleting && is_orphaning(&object.annotations);
    let mut failed = None;
    for cluster in clusters.iter().filter(|c| c.pull) {
        let Some(work) = lookup(ctx, &cluster.name, object) else {
            continue;
        };
        publish_report(ctx, object, &cluster.name, &work);
        let planned = plan
            .clusters
            .iter()
            .find(|cp| cp.cluster == cluster.name)
            .map(|cp| &cp.action);
        let requested = matches!(
            planned,
            Some(
                ClusterAction::Apply(_)
                    | ClusterAction::Delete(_)
                    | ClusterAction::RemoveManagedLabel
            )
        );
        if requested {
            continue;
        }
        let fate = work_fate(&work, planned, orphaning);
        if let Err(e) = carry_out(ctx, object, &cluster.name, &work, fate).await {
            warn!(cluster = %cluster.name, work = %work.name_any(), error = %e, "settling a work failed");
            failed = Some(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Deletes or rewrites one work as `fate` says.
pub async fn carry_out(
    ctx: &TypeContext,
    object: &FederatedObject,
    cluster: &str,
    work: &Work,
    fate: WorkFate,
) -> Result<(), HubError> {
    let namespace = cluster_namespace(cluster);
    match fate {
        WorkFate::Keep => Ok(()),
        WorkFate::Delete => {
            let api: Api<Work> = Api::namespaced(ctx.shared.hub.clone(), &namespace);
            debug!(cluster, work = %work.name_any(), "deleting work");
            match bounded(api.delete(&work.name_any(), &DeleteParams::default())).await? {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(uid) = work.uid() {
                ctx.works.forget(&uid);
            }
            ctx.works
                .written
                .lock()
                .remove(&(namespace.clone(), work.name_any()));
            Ok(())
        }
        WorkFate::Rewrite(spec) if *spec == work.spec => Ok(()),
        WorkFate::Rewrite(spec) => {
            debug!(cluster, work = %work.name_any(), action = %spec.action, "tombstone");
            let written = bounded(write_work(ctx, cluster, object, *spec)).await??;
            remember(ctx, written);
            Ok(())
        }
    }
}
