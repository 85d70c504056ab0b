//! The ten types KubeFed's chart federates out of the box (docs/kubefed-compatibility.md §1.5):
//! their FederatedTypeConfigs and `Federated<Kind>` CRDs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::Error;
use crate::federatedcrd::{FederatedTypeDescription, federated_crd};
use crate::federatedtypeconfig::{ApiResource, FederatedTypeConfig, ResourceScope};

/// One default target type.
struct DefaultType {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    scope: ResourceScope,
    short_names: &'static [&'static str],
    /// The target has an int32 `spec.replicas`.
    replicas: bool,
}

/// Sorted by FTC name, as in KubeFed's chart.
const DEFAULT_TYPES: &[DefaultType] = &[
    DefaultType {
        group: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        plural: "clusterroles",
        scope: ResourceScope::Cluster,
        short_names: &[],
        replicas: false,
    },
    DefaultType {
        group: "",
        kind: "ConfigMap",
        plural: "configmaps",
        scope: ResourceScope::Namespaced,
        short_names: &["cm"],
        replicas: false,
    },
    DefaultType {
        group: "apps",
        kind: "Deployment",
        plural: "deployments",
        scope: ResourceScope::Namespaced,
        short_names: &["deploy"],
        replicas: true,
    },
    DefaultType {
        group: "networking.k8s.io",
        kind: "Ingress",
        plural: "ingresses",
        scope: ResourceScope::Namespaced,
        short_names: &["ing"],
        replicas: false,
    },
    DefaultType {
        group: "batch",
        kind: "Job",
        plural: "jobs",
        scope: ResourceScope::Namespaced,
        short_names: &[],
        replicas: false,
    },
    DefaultType {
        group: "",
        kind: "Namespace",
        plural: "namespaces",
        scope: ResourceScope::Cluster,
        short_names: &["ns"],
        replicas: false,
    },
    DefaultType {
        group: "apps",
        kind: "ReplicaSet",
        plural: "replicasets",
        scope: ResourceScope::Namespaced,
        short_names: &["rs"],
        replicas: true,
    },
    DefaultType {
        group: "",
        kind: "Secret",
        plural: "secrets",
        scope: ResourceScope::Namespaced,
        short_names: &[],
        replicas: false,
    },
    DefaultType {
        group: "",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        scope: ResourceScope::Namespaced,
        short_names: &["sa"],
        replicas: false,
    },
    DefaultType {
        group: "",
        kind: "Service",
        plural: "services",
        scope: ResourceScope::Namespaced,
        short_names: &["svc"],
        replicas: false,
    },
];

impl DefaultType {
    fn ftc(&self, namespace: &str) -> FederatedTypeConfig {
        FederatedTypeConfig::for_target(
            ApiResource {
                group: self.group.to_owned(),
                version: "v1".to_owned(),
                kind: self.kind.to_owned(),
                plural_name: self.plural.to_owned(),
                scope: self.scope,
            },
            namespace,
        )
    }
}

/// The default FederatedTypeConfigs, all with propagation enabled, in `namespace`.
pub fn default_federated_type_configs(namespace: &str) -> Vec<FederatedTypeConfig> {
    DEFAULT_TYPES.iter().map(|t| t.ftc(namespace)).collect()
}

/// The `Federated<Kind>` CRDs of the default types, as KubeFed's chart ships them (template
/// without target schema) plus hubfed's category and columns.
pub fn default_federated_crds() -> Result<Vec<CustomResourceDefinition>, Error> {
    DEFAULT_TYPES
        .iter()
        .map(|t| {
            let description =
                FederatedTypeDescription::for_ftc(&t.ftc(""), t.short_names, t.replicas);
            federated_crd(&description, None)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ftcs_match_the_kubefed_chart() {
        let ftcs = default_federated_type_configs("kube-federation-system");
        let names: Vec<&str> = ftcs
            .iter()
            .filter_map(|ftc| ftc.metadata.name.as_deref())
            .collect();
        assert_eq!(
            names,
            [
                "clusterroles.rbac.authorization.k8s.io",
                "configmaps",
                "deployments.apps",
                "ingresses.networking.k8s.io",
                "jobs.batch",
                "namespaces",
                "replicasets.apps",
                "secrets",
                "serviceaccounts",
                "services",
            ]
        );
        for ftc in &ftcs {
            assert_eq!(
                ftc.metadata.namespace.as_deref(),
                Some("kube-federation-system")
            );
            assert!(ftc.propagation_enabled());
            assert_eq!(ftc.spec.federated_type.group, "types.kubefed.io");
            assert_eq!(ftc.spec.federated_type.version, "v1beta1");
            assert!(ftc.spec.status_type.is_none() && ftc.spec.status_collection.is_none());
            // Defaulting an FTC from the chart is a no-op.
            let mut defaulted = ftc.clone();
            defaulted.set_defaults();
            assert_eq!(&defaulted, ftc);
        }
        let namespaces = &ftcs[5];
        assert_eq!(namespaces.spec.target_type.scope, ResourceScope::Cluster);
        assert_eq!(
            namespaces.spec.federated_type.scope,
            ResourceScope::Namespaced
        );
        assert_eq!(ftcs[0].spec.federated_type.scope, ResourceScope::Cluster);
        assert_eq!(
            ftcs[3].spec.federated_type.plural_name,
            "federatedingresses"
        );
    }

    #[test]
    fn default_crds_have_kubefed_names_scopes_and_short_names() {
        let crds = default_federated_crds().unwrap();
        let summary: Vec<(&str, &str, Vec<String>, bool)> = crds
            .iter()
            .map(|crd| {
                let spec_props = &crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| s.properties.as_ref())
                    .and_then(|p| p.get("spec"))
                    .and_then(|s| s.properties.as_ref())
                    .unwrap();
                (
                    crd.metadata.name.as_deref().unwrap(),
                    crd.spec.scope.as_str(),
                    crd.spec.names.short_names.clone().unwrap_or_default(),
                    spec_props.contains_key("retainReplicas"),
                )
            })
            .collect();
        let expected: Vec<(&str, &str, Vec<String>, bool)> = vec![
            (
                "federatedclusterroles.types.kubefed.io",
                "Cluster",
                vec![],
                false,
            ),
            (
                "federatedconfigmaps.types.kubefed.io",
                "Namespaced",
                vec!["fcm".into()],
                false,
            ),
            (
                "federateddeployments.types.kubefed.io",
                "Namespaced",
                vec!["fdeploy".into()],
                true,
            ),
            (
                "federatedingresses.types.kubefed.io",
                "Namespaced",
                vec!["fing".into()],
                false,
            ),
            (
                "federatedjobs.types.kubefed.io",
                "Namespaced",
                vec![],
                false,
            ),
            (
                "federatednamespaces.types.kubefed.io",
                "Namespaced",
                vec!["fns".into()],
                false,
            ),
            (
                "federatedreplicasets.types.kubefed.io",
                "Namespaced",
                vec!["frs".into()],
                true,
            ),
            (
                "federatedsecrets.types.kubefed.io",
                "Namespaced",
                vec![],
                false,
            ),
            (
                "federatedserviceaccounts.types.kubefed.io",
                "Namespaced",
                vec!["fsa".into()],
                false,
            ),
            (
                "federatedservices.types.kubefed.io",
                "Namespaced",
                vec!["fsvc".into()],
                false,
            ),
        ];
        assert_eq!(summary, expected);
    }
}
