//! Carrying out one cluster's action of a plan against that cluster's API — apply, delete,
//! remove the managed label — with everything it reports (outcome, version, Events, drift,
//! metrics). Shared by the push dispatcher ([`super::dispatch`]) and the pull-mode agent
//! ([`crate::agent`]): both write member copies by exactly these rules.

use hubfed_api::names::MANAGED_LABEL;
use hubfed_core::plan::{ClusterAction, ClusterPlan, DeleteAction, FederatedObject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::runtime::events::EventType;
use serde_json::json;

use super::apply::apply_to_cluster;
pub use super::exec_env::{EventSink, ExecEnv};
use super::member_io::{ClusterResult, MemberCall, error_message, is_not_found, outcome};

/// Carries out `cp`'s action through `api` (an action without a request reports its status).
pub(crate) async fn execute_action(
    env: &ExecEnv<'_>,
    object: &FederatedObject,
    cp: &ClusterPlan,
    api: &Api<DynamicObject>,
) -> ClusterResult {
    match &cp.action {
        ClusterAction::Apply(apply) => apply_to_cluster(env, object, cp, api, apply).await,
        ClusterAction::Delete(delete) => delete_in_cluster(env, object, cp, api, delete).await,
        ClusterAction::RemoveManagedLabel => remove_label_in_cluster(object, cp, api).await,
        other => passive(&cp.cluster, other),
    }
}

/// The result of an action that needs no request.
pub(super) fn passive(cluster: &str, action: &ClusterAction) -> ClusterResult {
    ClusterResult::unwritten(outcome(
        cluster,
        action.status_on_success(),
        match action {
            ClusterAction::Blocked { message, .. } => Some(message.clone()),
            _ => None,
        },
    ))
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

async fn delete_in_cluster(
    env: &ExecEnv<'_>,
    object: &FederatedObject,
    cp: &ClusterPlan,
    api: &Api<DynamicObject>,
    delete: &DeleteAction,
) -> ClusterResult {
    let cluster = cp.cluster.as_str();
    let what = env.what(object);
    let call = MemberCall::start(cluster, "delete");
    let deleted = api.delete(&object.name, &delete_params(delete)).await;
    call.end(deleted.is_ok() || deleted.as_ref().is_err_and(is_not_found));
    // A later re-placement must not count as drift against the deleted copy's version.
    if let Some(applied) = env.applied {
        applied.remove(object.namespace.as_deref(), &object.name, cluster);
    }
    if let Err(e) = &deleted
        && !is_not_found(e)
    {
        let message = error_message(e);
        env.events.publish(
            EventType::Warning,
            "DeleteInClusterFailed",
            &format!("Failed to delete {what} in cluster {cluster:?}: {message}"),
        );
    }
    removal_result(cp, &deleted, ("DeleteInCluster", "Deleting"))
}

async fn remove_label_in_cluster(
    object: &FederatedObject,
    cp: &ClusterPlan,
    api: &Api<DynamicObject>,
) -> ClusterResult {
    let cluster = cp.cluster.as_str();
    let patch = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
    let call = MemberCall::start(cluster, "remove_label");
    let patched = api
        .patch(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    call.end(patched.is_ok() || patched.as_ref().is_err_and(is_not_found));
    let done = (
        "RemoveManagedLabelFromInCluster",
        "Removing the managed label from",
    );
    removal_result(cp, &patched, done)
}

/// The result of a removal from `cp`'s cluster (a deletion, a label removal): `done`, nothing
/// to do when the copy is gone already, or failed.
fn removal_result<T>(
    cp: &ClusterPlan,
    result: &Result<T, kube::Error>,
    done: (&'static str, &'static str),
) -> ClusterResult {
    let cluster = cp.cluster.as_str();
    match result {
        Ok(_) => {
            ClusterResult::written(outcome(cluster, cp.action.status_on_success(), None), done)
        }
        Err(e) if is_not_found(e) => ClusterResult::unwritten(None),
        Err(e) => ClusterResult::unwritten(outcome(
            cluster,
            cp.action.status_on_failure(),
            Some(error_message(e)),
        )),
    }
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
