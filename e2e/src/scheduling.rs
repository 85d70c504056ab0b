//! Scheduling in tests: ReplicaSchedulingPreferences (`scheduling.kubefed.io`),
//! PlacementPolicies (`scheduling.hubfed.io`), and what the members run.

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::{Federation, target};

/// The `scheduling.<group>/v1alpha1` type `kind` (plural `plural`).
fn scheduling_type(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Creates `resource` `namespace/name` with `spec` through `api`.
async fn create_spec(
    api: Api<DynamicObject>,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<()> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))?;
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

fn rsp_type() -> ApiResource {
    scheduling_type(
        "scheduling.kubefed.io",
        "ReplicaSchedulingPreference",
        "replicaschedulingpreferences",
    )
}

fn policy_type() -> ApiResource {
    scheduling_type(
        "scheduling.hubfed.io",
        "PlacementPolicy",
        "placementpolicies",
    )
}

/// The ReplicaSchedulingPreferences of `namespace`.
pub fn rsps(hub: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(hub.clone(), namespace, &rsp_type())
}

/// Creates ReplicaSchedulingPreference `namespace/name` with `spec`.
pub async fn create_rsp(
    hub: &Client,
    namespace: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<()> {
    create_spec(rsps(hub, namespace), &rsp_type(), namespace, name, spec).await
}

/// The PlacementPolicies of `namespace`.
pub fn placement_policies(hub: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(hub.clone(), namespace, &policy_type())
}

/// Creates PlacementPolicy `namespace/name` with `spec`.
pub async fn create_placement_policy(
    hub: &Client,
    namespace: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<()> {
    let policies = placement_policies(hub, namespace);
    create_spec(policies, &policy_type(), namespace, name, spec).await
}

/// `{cluster: (spec.replicas, status.readyReplicas)}` of the Deployments `namespace/name` in
/// those of `clusters` that hold one.
pub async fn member_replicas(
    fed: &Federation,
    clusters: &[&str],
    namespace: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, (i64, i64)>> {
    let mut found = BTreeMap::new();
    for cluster in clusters {
        let object = fed
            .member_object(cluster, &target("Deployment"), Some(namespace), name)
            .await?;
        if let Some(object) = object {
            let replicas = object["spec"]["replicas"].as_i64().unwrap_or(0);
            let ready = object["status"]["readyReplicas"].as_i64().unwrap_or(0);
            found.insert((*cluster).to_owned(), (replicas, ready));
        }
    }
    Ok(found)
}
