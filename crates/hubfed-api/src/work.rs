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

/// One member object for one pull-mode cluster: what its agent applies (or removes) and the
/// result it reports back.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pull.hubfed.io",
    version = "v1alpha1",
    kind = "Work",
    namespaced,
    status = "WorkStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.target.kind"}"#,
    printcolumn = r#"{"name":"Intent","type":"string","jsonPath":".spec.intent"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "One member object of a pull-mode cluster: the object its agent applies, and the result it reports."
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The member object's type.
    pub target: WorkTarget,
    /// The federated object this work comes from (for people and the hub; the agent needs
    /// nothing from it).
    pub source: WorkSource,
    /// `Present`: apply `object`; `Absent`: delete the member copy (when it carries this
    /// control plane's proof of ownership, otherwise remove the managed label); `Orphaned`:
    /// remove the managed label and leave the copy.
    pub intent: String,
    /// The object to apply: template, identity, retention and overrides already applied,
    /// managed label set. Absent unless `intent` is `Present`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub object: Option<Value>,
    /// KubeFed's version of the desired object (template and override hashes): the agent
    /// compares it with what it last applied to decide whether the copy needs an apply.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// KubeFedConfig `syncController.adoptResources`: whether an existing object without the
    /// managed label may be taken over.
    #[serde(default)]
    pub adopt_resources: bool,
    /// `hubfed.io/recreate-on-immutable-change` of the federated object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recreate_on_immutable_change: bool,
    /// The federated object's `kubefed.io/deleteoption` (a DeleteOptions as JSON), for
    /// `Absent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub delete_options: Option<Value>,
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

/// What the agent achieved for the work's current generation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// The generation of the work this status is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The cluster's propagation status as in a federated object's `status.clusters[]`
    /// (`Ok`, `CreationFailed`, `AlreadyExists`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The member copy's `resourceVersion` (or `generation`, as KubeFed records it) after
    /// the agent's last write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_version: Option<String>,
}

string_enum! {
    /// `spec.intent` of a [`Work`].
    pub enum WorkIntent {
        Present => "Present",
        Absent => "Absent",
        Orphaned => "Orphaned",
    }
}

fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}
