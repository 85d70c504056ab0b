//! `PropagatedVersion` / `ClusterPropagatedVersion` (`core.kubefed.io/v1alpha1`, reference
//! §1.7): what was last propagated for one federated object, so unchanged members are not
//! rewritten. They have no spec; everything lives in the status.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// No spec: everything is in the status.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1alpha1",
    kind = "PropagatedVersion",
    namespaced,
    no_spec,
    status = "PropagatedVersionStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "What was last propagated for a namespaced federated object, named `<lowercase target kind>-<name>` in its namespace."
)]
pub struct PropagatedVersionSpec {}

/// No spec: everything is in the status.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1alpha1",
    kind = "ClusterPropagatedVersion",
    no_spec,
    status = "PropagatedVersionStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "What was last propagated for a cluster-scoped federated object, named `<lowercase target kind>-<name>`."
)]
pub struct ClusterPropagatedVersionSpec {}

/// Hashes of what was propagated and the member object versions it produced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PropagatedVersionStatus {
    /// md5 of the template as KubeFed encodes it.
    pub template_version: String,
    /// md5 of the overrides as KubeFed encodes them (KubeFed's json tag is plural).
    #[serde(rename = "overridesVersion")]
    pub override_version: String,
    /// Sorted by cluster name; entries with an empty version are dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_versions: Vec<ClusterObjectVersion>,
}

/// The version of the member object last written in one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterObjectVersion {
    pub cluster_name: String,
    /// `gen:<metadata.generation>`, or `rv:<metadata.resourceVersion>` when generation is 0.
    pub version: String,
}

/// Name of the (Cluster)PropagatedVersion of a federated object: `<lowercase target
/// kind>-<federated name>`, e.g. `deployment-foo`.
pub fn propagated_version_name(target_kind: &str, federated_name: &str) -> String {
    format!("{}-{federated_name}", target_kind.to_lowercase())
}
