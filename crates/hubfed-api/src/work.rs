//! Pull mode (hubfed, beyond KubeFed): what the hub hands to the agent of a pull-mode member.
//!
//! A pull-mode member's work lives in the hub in a namespace of its own,
//! `hubfed-cluster-<cluster>` (`hubfed_core::pull::cluster_namespace`): one [`Work`] per
//! member object, holding the object exactly as it is to be applied (template, identity,
//! overrides and managed label already applied), and the agent's heartbeat, a `Lease` named
//! [`AGENT_LEASE_NAME`]. The agent's hub credentials are bound to that namespace alone, so
//! the API server — not the agent — keeps one cluster's work (e.g. a Secret placed only
//! there) from every other cluster's agent. See docs/user-guide.md "Push or pull".

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::condition::string_enum;

/// The API group of hubfed's pull-mode objects.
pub const PULL_GROUP: &str = "pull.hubfed.io";
/// The name of the agent's heartbeat `Lease` in its cluster's work namespace.
pub const AGENT_LEASE_NAME: &str = "hubfed-agent";
/// The annotation on the heartbeat Lease carrying the member's Kubernetes `gitVersion`.
pub const AGENT_KUBERNETES_VERSION_ANNOTATION: &str = "hubfed.io/kubernetes-version";
/// The label on a work namespace naming the cluster it belongs to.
pub const WORK_CLUSTER_LABEL: &str = "hubfed.io/cluster";
/// The name of the agent's ServiceAccount, in its work namespace in the hub and in the
/// KubeFed namespace of its member.
pub const AGENT_SERVICE_ACCOUNT: &str = "hubfed-agent";

/// One member object for one pull-mode cluster: the action the hub's plan chose for it there
/// (the same plan as for a push member, made from the observation the agent reports) and the
/// agent's report of carrying it out.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pull.hubfed.io",
    version = "v1alpha1",
    kind = "Work",
    namespaced,
    status = "WorkStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.target.kind"}"#,
    printcolumn = r#"{"name":"Action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.result"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "One member object of a pull-mode cluster: the action its agent carries out, and the result it reports."
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The member object's type.
    pub target: WorkTarget,
    /// The federated object this work comes from (for people and the hub; the agent needs
    /// nothing from it).
    pub source: WorkSource,
    /// `Apply`: server-side apply `object`; `Delete`: delete the copy; `RemoveManagedLabel`:
    /// remove the managed label and leave the copy (orphaning).
    pub action: String,
    /// The member copy's name and namespace.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `Apply`: the object to apply — template, identity, retention and overrides applied,
    /// managed label and proof of ownership set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub object: Option<Value>,
    /// `Apply`: the desired hash of `object`, recorded with the result.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub desired_hash: String,
    /// `Apply`: the copy was not observed, so this creates it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub creates: bool,
    /// `Apply`: create only (adoption disabled): an existing object is not taken over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_only: bool,
    /// `Apply`: an existing unmanaged object is taken over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopts: bool,
    /// `Apply`: fields left to the member (JSON pointers, e.g. `/spec/replicas`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released_fields: Vec<String>,
    /// The member copy's version the hub's plan saw when it chose this action: a drifted
    /// copy (another version) asks for the same apply again, and this makes it a new request.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub basis: String,
    /// `Delete`: the `kubefed.io/deleteoption` options (a DeleteOptions as JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub delete_options: Option<Value>,
    /// `Delete`: the UID of the copy the plan saw, as a delete precondition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The federated object's annotations that shape the apply (`hubfed.io/drift`,
    /// `hubfed.io/recreate-on-immutable-change`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Report the copy's `.status` (raw resource status collection is on for the type).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub collect_status: bool,
}

/// A member object's type, as the agent needs it to reach the object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkTarget {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    pub kind: String,
    /// The resource (plural) name.
    pub plural: String,
    pub namespaced: bool,
}

/// The federated object a work comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkSource {
    /// The federated kind, e.g. `FederatedConfigMap`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// What the agent did with the work's current generation, and what its cluster holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// The generation of the work `result` is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The result as a federated object's `status.clusters[].status` (`Ok`, `CreationFailed`,
    /// `AlreadyExists`, ...); `Done` when the copy was deleted or unlabelled (no status
    /// entry follows).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The failure was no refusal by the member (no answer, a server error, a conflict).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transient: bool,
    /// The copy's version after the agent's last successful apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_version: Option<String>,
    /// The desired hash of that apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_hash: Option<String>,
    /// The Event a successful write makes (`CreateInCluster`, `UpdateInCluster`,
    /// `DeleteInCluster`, `RemoveManagedLabelFromInCluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
    /// The other Events carrying out the action made, for the hub to record on the
    /// federated object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<WorkEvent>,
    /// Drift found and handled by the last apply (`status.clusters[].lastDrift`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::federated::DriftRecord>,
    /// The member copy as the agent's cache shows it now; absent until the agent has
    /// listed the type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<WorkCopy>,
}

/// An Event for the hub to record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
}

/// What the agent's cache shows of the member copy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkCopy {
    /// The copy exists; the other fields are empty when it does not.
    pub exists: bool,
    /// The value of its `kubefed.io/managed` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_label: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminating: bool,
    /// Its version as the hub records it (`gen:<generation>` or `rv:<resourceVersion>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Its labels and annotations (what the plan compares with the desired object).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Whether its workload is up: `Ready`, `NotReady` (with `readinessMessage`) or unset
    /// (nothing to wait for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_message: Option<String>,
    /// Its `.status`, when `spec.collectStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub remote_status: Option<Value>,
}

string_enum! {
    /// `spec.action` of a [`Work`].
    pub enum WorkAction {
        Apply => "Apply",
        Delete => "Delete",
        RemoveManagedLabel => "RemoveManagedLabel",
    }
}

/// `status.result` of a work whose copy was deleted or unlabelled.
pub const WORK_RESULT_DONE: &str = "Done";
/// `status.result` of a successful apply (a federated object's `Ok`, which KubeFed writes as
/// an empty status).
pub const WORK_RESULT_OK: &str = "Ok";
/// The label on a work naming its federated kind, lowercased: each sync controller watches
/// its own kind's works.
pub const WORK_KIND_LABEL: &str = "hubfed.io/federated-kind";

fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}
