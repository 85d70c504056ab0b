//! `ReplicaSchedulingPreference` (`scheduling.kubefed.io/v1alpha1`,
//! docs/kubefed-compatibility.md §1.8, §2.7): spreads a FederatedDeployment/FederatedReplicaSet of
//! the same namespace/name over clusters.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
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

/// Placement by intent (hubfed, beyond KubeFed): which clusters the federated object of the
/// same namespace and name goes to — at most `maxClusters` of the candidates, spread over a
/// cluster label, by weighted preferences, replaced when one stays unready past a grace
/// period. The controller writes the choice into that object's `spec.placement.clusters`
/// (as an RSP does) and into `status`; with an RSP of the same name, the RSP spreads the
/// replicas over the chosen clusters and writes the placement.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.hubfed.io",
    version = "v1alpha1",
    kind = "PlacementPolicy",
    namespaced,
    status = "PlacementPolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.targetKind"}"#,
    printcolumn = r#"{"name":"Clusters","type":"string","jsonPath":".status.summary"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "Chooses the clusters of the federated object of the same namespace and name by intent: how many, spread over a label, preferred by label, and failover."
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementPolicySpec {
    /// The federated kind of the target, e.g. `FederatedDeployment`.
    pub target_kind: String,
    /// Candidate clusters, by KubeFedCluster labels. Absent: every joined cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Choose at most this many clusters. Absent: every candidate (still subject to `spread`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_clusters: Option<u32>,
    /// Spread over the values of cluster labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadConstraint>,
    /// Clusters matching a preference's selector rank higher by its weight (weights of every
    /// matching preference add up); ties are broken by a hash of the object and cluster names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferences: Vec<WeightedClusterPreference>,
    /// Replace a chosen cluster that stays unready. Absent: a chosen cluster stays chosen
    /// whatever its health (KubeFed's placement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
}

/// At most / at least so many chosen clusters per value of a cluster label.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// A KubeFedCluster label, e.g. `topology.kubernetes.io/region`. Clusters without it are
    /// not candidates.
    pub topology_key: String,
    /// At most this many chosen clusters share a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_per_value: Option<u32>,
    /// At least this many chosen clusters per value, where the value has enough candidates
    /// (chosen before any other cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_per_value: Option<u32>,
}

/// A weighted preference for clusters matching a label selector.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightedClusterPreference {
    /// 1..100.
    #[schemars(range(min = 1, max = 100))]
    pub weight: i32,
    pub cluster_selector: LabelSelector,
}

/// When and how a chosen cluster is replaced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// How long a chosen cluster may be NotReady or Offline before it is replaced; also how
    /// long a cluster must have been Ready again before the object moves back to it. Default
    /// 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<u32>,
    /// Move back to a replaced cluster once it has been Ready for the grace period (and give
    /// up its replacement). Default false: the object stays where it moved.
    #[serde(default, skip_serializing_if = "is_false")]
    pub move_back: bool,
}

/// The default of `failover.gracePeriodSeconds`.
pub const DEFAULT_FAILOVER_GRACE_SECONDS: u32 = 300;

/// What the policy controller chose, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The chosen clusters, sorted by name, each with the reason it was chosen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ChosenCluster>,
    /// Clusters replaced by failover, kept to move back to them (`failover.moveBack`) and to
    /// show what happened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_over: Vec<FailedOver>,
    /// `member1, member2` (the printer column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Every candidate cluster (joined, selected by `clusterSelector`, carrying the spread
    /// keys) when the choice was made, sorted by name: what it was chosen from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<String>,
    /// `Placed`: whether the choice is written and met every constraint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PolicyCondition>,
}

/// One chosen cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChosenCluster {
    pub name: String,
    /// `Selected`, `Kept`, `Preferred`, `Spread`, `Replacement` or `MovedBack`.
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A cluster replaced by failover.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedOver {
    pub cluster: String,
    /// The cluster chosen in its place, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<String>,
    /// When it was replaced (RFC 3339).
    pub time: String,
}

/// A condition of a PlacementPolicy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// A staged rollout (hubfed, beyond KubeFed): the order in which member clusters receive a
/// change of a federated object, gated on health. Objects opt in with the annotation
/// `hubfed.io/rollout-strategy: <name>` (or inherit it from their FederatedTypeConfig's); the
/// strategy lives in the control plane's namespace.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.hubfed.io",
    version = "v1alpha1",
    kind = "RolloutStrategy",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    doc = "Stages in which a change of a federated object reaches the member clusters, each gated on the previous stage being Ready."
)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategySpec {
    /// In order. A cluster belongs to the first stage that names it (`clusters`) or selects it
    /// (`clusterSelector`); a stage with neither takes every cluster left. Clusters no stage
    /// takes form a last stage.
    pub stages: Vec<RolloutStage>,
    /// Cut every stage into batches of at most this many clusters (by name), each gated like a
    /// stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_clusters_per_batch: Option<u32>,
    /// Cut every stage into batches of at most this percentage of its clusters (rounded up,
    /// at least one); with `maxClustersPerBatch` too, the smaller batch wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_percent_per_batch: Option<u32>,
    /// How long a batch must stay Ready on the new revision before the next starts.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub soak_seconds: u32,
    /// How long a batch may take to be Ready on the new revision before the rollout halts.
    /// Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_deadline_seconds: Option<u32>,
}

/// One stage of a [`RolloutStrategySpec`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStage {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}
