//! Staged rollouts in tests: RolloutStrategies in the control plane's namespace, an object
//! following one (its annotation), and an object's rollout state (a ConfigMap there).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::{KUBEFED_NAMESPACE, wait_present};

/// The annotation that names an object's (or a type's) RolloutStrategy.
pub const ROLLOUT_STRATEGY_ANNOTATION: &str = "hubfed.io/rollout-strategy";

/// The RolloutStrategies of the control plane's namespace.
pub fn rollout_strategies(hub: &Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "scheduling.hubfed.io".into(),
        version: "v1alpha1".into(),
        api_version: "scheduling.hubfed.io/v1alpha1".into(),
        kind: "RolloutStrategy".into(),
        plural: "rolloutstrategies".into(),
    };
    Api::namespaced_with(hub.clone(), KUBEFED_NAMESPACE, &resource)
}

/// Creates RolloutStrategy `name` with `spec` in the control plane's namespace.
pub async fn create_rollout_strategy(hub: &Client, name: &str, spec: Value) -> anyhow::Result<()> {
    let strategy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.hubfed.io/v1alpha1",
        "kind": "RolloutStrategy",
        "metadata": {"name": name, "namespace": KUBEFED_NAMESPACE},
        "spec": spec,
    }))?;
    rollout_strategies(hub)
        .create(&PostParams::default(), &strategy)
        .await?;
    Ok(())
}

/// Annotates object `name` of `api` to follow RolloutStrategy `strategy`.
pub async fn follow_strategy(
    api: &Api<DynamicObject>,
    name: &str,
    strategy: &str,
) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {ROLLOUT_STRATEGY_ANNOTATION: strategy}}}),
        ),
    )
    .await?;
    Ok(())
}

/// Where the rollout state of an object is stored: a ConfigMap in the control plane's
/// namespace.
pub struct RolloutState {
    pub maps: Api<ConfigMap>,
    pub name: String,
}

impl RolloutState {
    /// The state of `Federated<Kind>` `name` (`federated_kind` e.g. `FederatedDeployment`) in
    /// `namespace`.
    pub fn of(hub: &Client, federated_kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            maps: Api::namespaced(hub.clone(), KUBEFED_NAMESPACE),
            name: hubfed_core::rollout::state_name(federated_kind, namespace, name),
        }
    }

    /// The ConfigMaps of the control plane's namespace and the state's name.
    pub fn into_parts(self) -> (Api<ConfigMap>, String) {
        (self.maps, self.name)
    }

    /// Waits until the state is stored.
    pub async fn wait_stored(&self) -> anyhow::Result<()> {
        wait_present("the object's rollout state", &self.maps, &self.name).await
    }

    /// The stored state's `state` text (empty when there is none).
    pub async fn text(&self) -> anyhow::Result<String> {
        Ok(self
            .maps
            .get(&self.name)
            .await?
            .data
            .unwrap_or_default()
            .get("state")
            .cloned()
            .unwrap_or_default())
    }
}
