//! Carries out a plan: one task per cluster, concurrently, each bounded by the member's write
//! semaphore and the dispatch deadline, so a slow member never holds up the others' writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_core::plan::{ClusterAction, ClusterPlan, DeleteAction, FederatedObject, Plan};
use hubfed_core::status::{ClusterOutcome, PropagationStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::runtime::events::EventType;
use serde_json::json;

use super::TypeContext;
use super::apply::apply_to_cluster;
use super::hub_writes::publish;
use super::member_io::{
    ClusterResult, error_message, federated_reference, is_not_found, kind_and_key, member_api,
    outcome, record,
};
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
    /// A member object was created, updated or deleted.
    pub wrote: bool,
    /// Some cluster failed in a way worth retrying soon.
    pub recoverable_failure: bool,
    /// Some member object is on its way out.
    pub waiting: bool,
    /// The clusters whose write failed without the member refusing the object
    /// (`ClusterResult::transient`): such a failure never halts a rollout.
    pub transient: std::collections::BTreeSet<String>,
}

/// The delete's parameters: the `kubefed.io/deleteoption` options, and the observed copy's
/// UID as precondition unless the options bring their own preconditions.
fn delete_params(delete: &DeleteAction) -> DeleteParams {
    let mut params = options_params(delete.options.as_ref());
    if params.preconditions.is_none() && delete.uid.is_some() {
        params.preconditions = Some(Preconditions {
            resource_version: None,
            uid: delete.uid.clone(),
        });
    }
    params
}

fn options_params(options: Option<&DeleteOptions>) -> DeleteParams {
    let Some(options) = options else {
        return DeleteParams::default();
    };
    DeleteParams {
        dry_run: false,
        grace_period_seconds: options
            .grace_period_seconds
            .and_then(|s| u32::try_from(s).ok()),
        propagation_policy: options.propagation_policy.as_deref().and_then(|p| match p {
            "Orphan" => Some(PropagationPolicy::Orphan),
            "Background" => Some(PropagationPolicy::Background),
            "Foreground" => Some(PropagationPolicy::Foreground),
            _ => None,
        }),
        preconditions: options.preconditions.as_ref().map(|p| Preconditions {
            resource_version: p.resource_version.clone(),
            uid: p.uid.clone(),
        }),
    }
}

/// Runs every cluster's action of `plan`.
pub async fn execute(
    ctx: &TypeContext,
    object: &FederatedObject,
    plan: &Plan,
    clusters: &[Arc<MemberCluster>],
) -> DispatchResult {
    let by_name: BTreeMap<&str, &Arc<MemberCluster>> =
        clusters.iter().map(|c| (c.name.as_str(), c)).collect();
    let tasks = plan.clusters.iter().map(|cp| {
        let cluster = by_name.get(cp.cluster.as_str()).copied();
        async move {
            match tokio::time::timeout(DISPATCH_TIMEOUT, dispatch_one(ctx, object, cp, cluster))
                .await
            {
                Ok(result) => result,
                Err(_) => ClusterResult {
                    outcome: outcome(
                        &cp.cluster,
                        cp.action.status_on_timeout(),
                        Some(format!(
                            "no answer from cluster within {}s",
                            DISPATCH_TIMEOUT.as_secs()
                        )),
                    ),
                    version: None,
                    wrote: false,
                    done: None,
                    transient: false,
                },
            }
        }
    });
    let mut result = DispatchResult::default();
    let mut done: BTreeMap<(&'static str, &'static str), Vec<&str>> = BTreeMap::new();
    for (cp, r) in plan.clusters.iter().zip(join_all(tasks).await) {
        if let Some(key) = r.done {
            done.entry(key).or_default().push(&cp.cluster);
        }
        if let Some(o) = &r.outcome {
            if o.status.is_recoverable() {
                result.recoverable_failure = true;
            }
            if o.status == PropagationStatus::WaitingForRemoval {
                result.waiting = true;
            }
        }
        if let Some(v) = r.version {
            result.new_versions.insert(cp.cluster.clone(), v);
        }
        result.wrote |= r.wrote;
        if r.transient {
            result.transient.insert(cp.cluster.clone());
        }
        result.outcomes.extend(r.outcome);
    }
    if !done.is_empty() {
        let reference = federated_reference(ctx, object);
        let what = kind_and_key(ctx, object);
        for ((reason, verb), clusters) in done {
            let clusters: Vec<String> = clusters.iter().map(|c| format!("{c:?}")).collect();
            let noun = if clusters.len() == 1 {
                "cluster"
            } else {
                "clusters"
            };
            let message = format!("{verb} {what} in {noun} {}", clusters.join(", "));
            publish(ctx, &reference, EventType::Normal, reason, &message);
        }
    }
    result
}

async fn dispatch_one(
    ctx: &TypeContext,
    object: &FederatedObject,
    cp: &ClusterPlan,
    cluster: Option<&Arc<MemberCluster>>,
) -> ClusterResult {
    let name = cp.cluster.as_str();
    let passive = |action: &ClusterAction| ClusterResult {
        outcome: outcome(
            name,
            action.status_on_success(),
            match action {
                ClusterAction::Blocked { message, .. } => Some(message.clone()),
                _ => None,
            },
        ),
        version: None,
        wrote: false,
        done: None,
        transient: false,
    };
    let needs_io = matches!(
        cp.action,
        ClusterAction::Apply(_) | ClusterAction::Delete(_) | ClusterAction::RemoveManagedLabel
    );
    if !needs_io {
        return passive(&cp.action);
    }
    let Some(client) = cluster.and_then(|c| c.client.clone()) else {
        return ClusterResult {
            outcome: outcome(
                name,
                Some(PropagationStatus::ClientRetrievalFailed),
                Some("no client for cluster".into()),
            ),
            version: None,
            wrote: false,

            done: None,

            transient: false,
        };
    };
    let _permit = match cluster {
        Some(c) => Arc::clone(&c.writes).acquire_owned().await.ok(),
        None => None,
    };
    let api = member_api(ctx, client, object.namespace.as_deref());
    match &cp.action {
        ClusterAction::Apply(apply) => apply_to_cluster(ctx, object, cp, &api, apply).await,
        ClusterAction::Delete(delete) => delete_in_cluster(ctx, object, cp, &api, delete).await,
        ClusterAction::RemoveManagedLabel => remove_label_in_cluster(object, cp, &api).await,
        other => passive(other),
    }
}

async fn delete_in_cluster(
    ctx: &TypeContext,
    object: &FederatedObject,
    cp: &ClusterPlan,
    api: &Api<DynamicObject>,
    delete: &DeleteAction,
) -> ClusterResult {
    let cluster = cp.cluster.as_str();
    let what = kind_and_key(ctx, object);
    let reference = federated_reference(ctx, object);
    let started = std::time::Instant::now();
    let deleted = api.delete(&object.name, &delete_params(delete)).await;
    record(
        cluster,
        "delete",
        started,
        deleted.is_ok() || deleted.as_ref().is_err_and(is_not_found),
    );
    // A later re-placement must not count as drift against the deleted copy's version.
    ctx.applied
        .remove(object.namespace.as_deref(), &object.name, cluster);
    match deleted {
        Ok(_) => ClusterResult {
            outcome: outcome(cluster, cp.action.status_on_success(), None),
            version: None,
            wrote: true,
            done: Some(("DeleteInCluster", "Deleting")),
            transient: false,
        },
        Err(e) if is_not_found(&e) => ClusterResult {
            outcome: None,
            version: None,
            wrote: false,

            done: None,

            transient: false,
        },
        Err(e) => {
            let message = error_message(&e);
            publish(
                ctx,
                &reference,
                EventType::Warning,
                "DeleteInClusterFailed",
                &format!("Failed to delete {what} in cluster {cluster:?}: {message}"),
            );
            ClusterResult {
                outcome: outcome(cluster, cp.action.status_on_failure(), Some(message)),
                version: None,
                wrote: false,

                done: None,

                transient: false,
            }
        }
    }
}

async fn remove_label_in_cluster(
    object: &FederatedObject,
    cp: &ClusterPlan,
    api: &Api<DynamicObject>,
) -> ClusterResult {
    let cluster = cp.cluster.as_str();
    let patch = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
    let started = std::time::Instant::now();
    let patched = api
        .patch(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    record(
        cluster,
        "remove_label",
        started,
        patched.is_ok() || patched.as_ref().is_err_and(is_not_found),
    );
    match patched {
        Ok(_) => ClusterResult {
            outcome: outcome(cluster, cp.action.status_on_success(), None),
            version: None,
            wrote: true,
            done: Some((
                "RemoveManagedLabelFromInCluster",
                "Removing the managed label from",
            )),
            transient: false,
        },
        Err(e) if is_not_found(&e) => ClusterResult {
            outcome: None,
            version: None,
            wrote: false,

            done: None,

            transient: false,
        },
        Err(e) => ClusterResult {
            outcome: outcome(
                cluster,
                cp.action.status_on_failure(),
                Some(error_message(&e)),
            ),
            version: None,
            wrote: false,

            done: None,

            transient: false,
        },
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Preconditions as ApiPreconditions;

    #[test]
    fn member_deletes_carry_the_observed_uid_unless_the_user_set_preconditions() {
        let observed = DeleteAction {
            options: None,
            uid: Some("u1".into()),
        };
        let params = delete_params(&observed);
        assert_eq!(
            params.preconditions.and_then(|p| p.uid).as_deref(),
            Some("u1")
        );

        let user = DeleteAction {
            options: Some(DeleteOptions {
                preconditions: Some(ApiPreconditions {
                    resource_version: Some("7".into()),
                    uid: None,
                }),
                propagation_policy: Some("Orphan".into()),
                ..Default::default()
            }),
            uid: Some("u1".into()),
        };
        let params = delete_params(&user);
        let preconditions = params.preconditions.expect("the user's preconditions");
        assert_eq!(preconditions.resource_version.as_deref(), Some("7"));
        assert_eq!(preconditions.uid, None);
        assert!(matches!(
            params.propagation_policy,
            Some(PropagationPolicy::Orphan)
        ));

        let unknown = DeleteAction {
            options: None,
            uid: None,
        };
        assert!(delete_params(&unknown).preconditions.is_none());
    }
}
