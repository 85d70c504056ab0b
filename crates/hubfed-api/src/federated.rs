//! The parts every generated `Federated<Kind>` object shares: `spec.template`,
//! `spec.placement`, `spec.overrides`, `spec.retainReplicas` and the status
//! (docs/kubefed-compatibility.md §1.6).
//!
//! Federated objects are handled as dynamic objects (their kinds are data, configured by
//! FederatedTypeConfigs), so these types are deserialised from the object's `spec`/`status`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `spec` of a `Federated<Kind>` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedSpec {
    /// The target object, without `apiVersion`/`kind` requirements; copied to each cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Vec<ClusterOverrides>>,
    /// Keep `spec.replicas` as each member has it (only for types with integer replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain_replicas: Option<bool>,
}

/// Where an object goes: `clusters` when present (even empty) wins; otherwise
/// `clusterSelector` over KubeFedCluster labels (`{}` = all clusters, absent = none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<ClusterReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterReference {
    pub name: String,
}

/// The overrides for one cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOverrides {
    pub cluster_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_overrides: Vec<Override>,
}

/// One RFC 6902 operation; an empty `op` means `replace`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Override {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub op: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// `status` of a `Federated<Kind>` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<FederatedCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterPropagationStatus>,
    /// hubfed extension: placed clusters whose copy is ready, of all placed clusters ("2/3"),
    /// for `kubectl get`; the `Ready` condition says which are not and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
}

/// A condition of a federated object; KubeFed uses only the `Propagation` type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// hubfed extension: a human-readable explanation (KubeFed had none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// Propagation status of one placed cluster. `status` is omitted when propagation is OK.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPropagationStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// hubfed extension: the member API's message when something failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_status: Option<Value>,
    /// hubfed extension: whether the copy in this placed cluster is ready (`Ready` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// hubfed extension: why it is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_message: Option<String>,
    /// hubfed extension: the last change made to the copy behind hubfed's back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift: Option<DriftRecord>,
}

/// A change made to a member copy behind hubfed's back (`status.clusters[].lastDrift`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftRecord {
    /// RFC 3339 time hubfed saw it.
    pub time: String,
    /// `Reverted` (taken back) or `Reported` (left in place: the object asks for `report`).
    pub action: String,
    /// The field managers that made the change (`kubectl-edit`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managers: Vec<String>,
    /// The fields changed, as the API server names them (`.data.k`); at most ten listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// The only condition type KubeFed sets on federated objects.
pub const PROPAGATION_CONDITION_TYPE: &str = "Propagation";
/// hubfed's condition: every placed cluster's copy is ready (`kubectl wait --for=condition=Ready`).
pub const READY_CONDITION_TYPE: &str = "Ready";

crate::condition::string_enum! {
    /// Per-cluster `status.clusters[].status` (KubeFed `PropagationStatus`,
    /// docs/kubefed-compatibility.md §2.4).
    pub enum PropagationStatus {
        /// Propagated; KubeFed omits the field (empty string).
        Ok => "",
        WaitingForRemoval => "WaitingForRemoval",
        ClusterNotReady => "ClusterNotReady",
        CachedRetrievalFailed => "CachedRetrievalFailed",
        ComputeResourceFailed => "ComputeResourceFailed",
        ApplyOverridesFailed => "ApplyOverridesFailed",
        CreationFailed => "CreationFailed",
        UpdateFailed => "UpdateFailed",
        DeletionFailed => "DeletionFailed",
        LabelRemovalFailed => "LabelRemovalFailed",
        RetrievalFailed => "RetrievalFailed",
        AlreadyExists => "AlreadyExists",
        FieldRetentionFailed => "FieldRetentionFailed",
        VersionRetrievalFailed => "VersionRetrievalFailed",
        ClientRetrievalFailed => "ClientRetrievalFailed",
        ManagedLabelFalse => "ManagedLabelFalse",
        CreationTimedOut => "CreationTimedOut",
        UpdateTimedOut => "UpdateTimedOut",
        DeletionTimedOut => "DeletionTimedOut",
        LabelRemovalTimedOut => "LabelRemovalTimedOut",
        /// hubfed extension: a namespace was neither deleted nor unlabelled because whether
        /// the cluster is the hub itself could not be established (the hub's own namespace
        /// holds the federated objects and is never deleted).
        ClusterIdentityUnknown => "ClusterIdentityUnknown",
        /// hubfed extension: the member object is the control plane's own (its RBAC in the
        /// member, or an object in its namespace on the hub joined as a member) and is never
        /// written or deleted by propagation.
        Protected => "Protected",
        /// hubfed extension: another joined cluster reaches the same API server (the same
        /// `kube-system` UID); nothing is written or deleted through either name until one is
        /// unjoined (they would undo each other's work).
        DuplicateCluster => "DuplicateCluster",
        /// hubfed extension: a staged rollout (docs/user-guide.md "Rollouts") has not given this
        /// cluster the object's current revision yet — its stage has not started, or the
        /// rollout is paused or halted; the copy is left as it is until then.
        RolloutPending => "RolloutPending",
    }
}

impl PropagationStatus {
    /// Whether KubeFed retries the reconcile with backoff for this status
    /// (docs/kubefed-compatibility.md §2.4 step 7); the others wait for an external change.
    pub const fn is_recoverable(self) -> bool {
        matches!(
            self,
            Self::CreationFailed
                | Self::UpdateFailed
                | Self::DeletionFailed
                | Self::LabelRemovalFailed
                | Self::RetrievalFailed
                | Self::ClientRetrievalFailed
                | Self::CreationTimedOut
                | Self::UpdateTimedOut
                | Self::DeletionTimedOut
                | Self::LabelRemovalTimedOut
                | Self::ClusterIdentityUnknown
        )
    }

    /// The value for `status.clusters[].status`: `None` for `Ok`, as KubeFed omits it.
    pub fn to_wire(self) -> Option<String> {
        match self {
            Self::Ok => None,
            other => Some(other.as_str().to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagation_statuses_round_trip_through_the_wire() {
        assert_eq!(PropagationStatus::ALL.len(), 24);
        for status in PropagationStatus::ALL {
            assert_eq!(PropagationStatus::parse(status.as_str()), Some(*status));
            let wire = status.to_wire();
            assert_eq!(wire.is_none(), *status == PropagationStatus::Ok);
        }
        assert_eq!(PropagationStatus::parse("Bogus"), None);
    }

    #[test]
    fn recoverable_statuses_are_failures_and_timeouts() {
        let recoverable: Vec<&str> = PropagationStatus::ALL
            .iter()
            .filter(|s| s.is_recoverable())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(
            recoverable,
            [
                "CreationFailed",
                "UpdateFailed",
                "DeletionFailed",
                "LabelRemovalFailed",
                "RetrievalFailed",
                "ClientRetrievalFailed",
                "CreationTimedOut",
                "UpdateTimedOut",
                "DeletionTimedOut",
                "LabelRemovalTimedOut",
                "ClusterIdentityUnknown",
            ]
        );
    }
}
