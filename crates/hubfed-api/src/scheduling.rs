//! `ReplicaSchedulingPreference` (`scheduling.kubefed.io/v1alpha1`,
//! docs/kubefed-compatibility.md §1.8, §2.7): spreads a FederatedDeployment/FederatedReplicaSet of
//! the same namespace/name over clusters.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How to spread the replicas of the federated object with the same namespace and name.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.kubefed.io",
    version = "v1alpha1",
    kind = "ReplicaSchedulingPreference",
    namespaced,
    shortname = "rsp",
    derive = "PartialEq",
    doc = "Spreads the replicas of the FederatedDeployment or FederatedReplicaSet of the same namespace and name over clusters; the scheduler owns that object's placement and replica overrides."
)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSchedulingPreferenceSpec {
    /// `FederatedDeployment` or `FederatedReplicaSet`.
    pub target_kind: String,
    /// Replicas to spread over all clusters; the template's `spec.replicas` is ignored.
    pub total_replicas: i32,
    /// Whether running replicas may move to match the preferences.
    #[serde(default, skip_serializing_if = "is_false")]
    pub rebalance: bool,
    /// Only consider clusters selected by the federated object's `clusterSelector`.
    /// KubeFed always serialises it.
    #[serde(default)]
    pub intersect_with_cluster_selector: bool,
    /// Preferences per cluster name; `*` applies to clusters not listed. Empty means
    /// `{"*": {weight: 1}}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clusters: BTreeMap<String, ClusterPreferences>,
}

/// Replica bounds and weight for one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPreferences {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_replicas: i64,
    /// Unbounded when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i64>,
    /// Relative share of the replicas left after minimums.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub weight: i64,
}

// serde's skip_serializing_if passes a reference.
fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}
