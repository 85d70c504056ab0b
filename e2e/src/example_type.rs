//! A custom type of the tests' own, `example.hubfed.io/v1`, namespaced, with a free-form spec:
//! its CRD installed in chosen clusters and the type enabled in the hub (federated CRD, FTC).

use hubfed_api::federatedcrd::{FederatedTypeDescription, federated_crd};
use hubfed_api::federatedtypeconfig::{
    ApiResource as TypeResource, FederatedTypeConfig, ResourceScope,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::{Federation, KUBEFED_NAMESPACE, install_crds};

const GROUP: &str = "example.hubfed.io";

/// The type `example.hubfed.io/v1` `kind` and its CRD.
pub struct ExampleType {
    pub target: TypeResource,
    pub crd: CustomResourceDefinition,
}

impl ExampleType {
    /// `kind` (e.g. `Widget`), served as `plural`.
    pub fn new(kind: &str, plural: &str) -> anyhow::Result<Self> {
        let singular = kind.to_lowercase();
        let crd = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": format!("{plural}.{GROUP}") },
            "spec": {
                "group": GROUP,
                "scope": "Namespaced",
                "names": {
                    "kind": kind, "plural": plural, "singular": singular,
                    "listKind": format!("{kind}List"),
                },
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": { "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                        },
                    } },
                }],
            },
        }))?;
        let target = TypeResource {
            group: GROUP.to_owned(),
            version: "v1".to_owned(),
            kind: kind.to_owned(),
            plural_name: plural.to_owned(),
            scope: ResourceScope::Namespaced,
        };
        Ok(Self { target, crd })
    }

    /// Installs the CRD in `clusters` (`hub`, `member1`, ...), then enables the type in the hub:
    /// its federated CRD and its FTC, which is returned.
    pub async fn enable(
        &self,
        fed: &Federation,
        clusters: &[&str],
    ) -> anyhow::Result<FederatedTypeConfig> {
        for cluster in clusters {
            install_crds(&fed.client(cluster).await?, std::slice::from_ref(&self.crd)).await?;
        }
        let ftc = FederatedTypeConfig::for_target(self.target.clone(), KUBEFED_NAMESPACE);
        let hub = fed.hub().await?;
        let federated_type = FederatedTypeDescription::for_ftc(&ftc, &[], false);
        install_crds(&hub, &[federated_crd(&federated_type, None)?]).await?;
        Api::<FederatedTypeConfig>::namespaced(hub, KUBEFED_NAMESPACE)
            .create(&PostParams::default(), &ftc)
            .await?;
        Ok(ftc)
    }
}
