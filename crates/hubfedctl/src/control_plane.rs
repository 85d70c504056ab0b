//! What the hub says of the control plane: whether the KubeFed CRDs are installed, its scope
//! and identity, its FederatedTypeConfigs. Read by join (push and pull), unjoin and the type
//! commands alike.

use hubfed_api::federatedtypeconfig::{ApiResource, FederatedTypeConfig, ResourceScope};
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::kubefedconfig::KubeFedConfig;
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

use crate::error::{Error, Result};
use crate::kubeconfig::Target;

/// Fails with a clear message when the KubeFed CRDs are not installed in the hub.
pub async fn ensure_kubefed_installed(hub: &Target, namespace: &str) -> Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), namespace);
    match clusters
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(Error::Refused(format!(
            "{}: the KubeFed CRDs are not installed (kubefedclusters.core.kubefed.io is not served); apply crds/core.yaml first",
            hub.subject
        ))),
        Err(e) => Err(hub.err(e)),
    }
}

/// The control plane's scope from the KubeFedConfig; `Cluster` (the default the controller
/// creates) when there is none yet.
pub async fn control_plane_scope(hub: &Target, namespace: &str) -> Result<ResourceScope> {
    let configs: Api<KubeFedConfig> = Api::namespaced(hub.client.clone(), namespace);
    Ok(configs
        .get_opt(KUBEFED_CONFIG_NAME)
        .await
        .map_err(|e| hub.err(e))?
        .map_or(ResourceScope::Cluster, |c| c.spec.scope))
}

/// The control plane's identity: the UID of its namespace in the hub (what its copies'
/// `hubfed.io/owner` carries).
pub async fn control_plane_id(hub: &Target, namespace: &str) -> Result<String> {
    let namespaces: Api<Namespace> = Api::all(hub.client.clone());
    Ok(namespaces
        .get_metadata(namespace)
        .await
        .map_err(|e| hub.err(e))?
        .metadata
        .uid
        .unwrap_or_default())
}

/// The target types of every FederatedTypeConfig in the hub, defaulted.
pub async fn federated_targets(hub: &Target, namespace: &str) -> Result<Vec<ApiResource>> {
    Ok(defaulted_ftcs(hub, namespace)
        .await?
        .into_iter()
        .map(|ftc| ftc.spec.target_type)
        .collect())
}

/// The FTCs of the hub, defaulted, once the KubeFed CRDs are known to be installed.
pub async fn list_ftcs(hub: &Target, namespace: &str) -> Result<Vec<FederatedTypeConfig>> {
    ensure_kubefed_installed(hub, namespace).await?;
    defaulted_ftcs(hub, namespace).await
}

/// The FTCs of the hub, defaulted.
pub async fn defaulted_ftcs(hub: &Target, namespace: &str) -> Result<Vec<FederatedTypeConfig>> {
    let api: Api<FederatedTypeConfig> = Api::namespaced(hub.client.clone(), namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| hub.err(e))?;
    Ok(list
        .items
        .into_iter()
        .map(|mut ftc| {
            ftc.set_defaults();
            ftc
        })
        .collect())
}
