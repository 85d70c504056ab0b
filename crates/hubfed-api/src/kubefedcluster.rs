//! `KubeFedCluster` (`core.kubefed.io/v1beta1`, docs/kubefed-compatibility.md §1.3, §2.6): a member
//! cluster and how to reach it; the health controller owns the status.

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::condition::{ConditionStatus, string_enum};

/// How to reach a member cluster. The token lives in a Secret so that the cluster object can be
/// read without exposing credentials.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "KubeFedCluster",
    namespaced,
    shortname = "kfc",
    status = "KubeFedClusterStatus",
    derive = "PartialEq",
    doc = "A member cluster of the federation and its health.",
    printcolumn = r#"{"name":"age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"kubernetes-version","type":"string","jsonPath":".status.kubernetesVersion"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedClusterSpec {
    /// API endpoint of the member: hostname, hostname:port, IP, IP:port or URL. Required in
    /// `Push` mode; informational in `Pull` mode.
    #[serde(default)]
    pub api_endpoint: String,
    /// PEM CA bundle for the member's serving certificate (base64 on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "byte_string_schema")]
    pub ca_bundle: Option<ByteString>,
    /// Secret in the KubeFed namespace whose `token` key holds the bearer token. Required in
    /// `Push` mode; unused in `Pull` mode (the hub holds no member credentials).
    #[serde(default)]
    pub secret_ref: LocalSecretReference,
    /// TLS checks to skip: `*` (alone), `SubjectName` or `ValidityPeriod`.
    #[serde(
        default,
        rename = "disabledTLSValidations",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub disabled_tls_validations: Vec<TlsValidation>,
    /// Proxy for reaching the member (http, https or socks5). KubeFed always serialises it,
    /// empty meaning none.
    #[serde(default, rename = "proxyURL")]
    pub proxy_url: String,
    /// hubfed, beyond KubeFed: `Push` (absent; KubeFed's only mode: the hub connects to the
    /// member) or `Pull` (an agent in the member pulls its work from the hub and reports back;
    /// the hub never connects to the member).
    #[serde(default, skip_serializing_if = "SyncMode::is_push")]
    pub sync_mode: SyncMode,
}

/// How a member receives its objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SyncMode {
    /// The hub's sync controllers apply to the member (KubeFed's way).
    #[default]
    Push,
    /// The member's agent applies what the hub materialised for it in the hub.
    Pull,
}

impl SyncMode {
    pub fn is_push(&self) -> bool {
        *self == Self::Push
    }
}

/// A Secret in the KubeFed namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalSecretReference {
    pub name: String,
}

/// A TLS check that may be disabled for a member connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TlsValidation {
    /// Every check; must be the only entry.
    #[serde(rename = "*")]
    All,
    SubjectName,
    ValidityPeriod,
}

/// Written by the health controller every probe period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedClusterStatus {
    /// The current set of `Ready`/`Offline`/`ConfigMalformed` conditions.
    pub conditions: Vec<ClusterCondition>,
    /// `gitVersion` of the member, set while it is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Part of KubeFed's API but never filled in by KubeFed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Part of KubeFed's API but never filled in by KubeFed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// One health observation of a member cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    /// `Ready`, `Offline` or `ConfigMalformed`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the cluster was last probed.
    pub last_probe_time: Time,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn byte_string_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "byte" })
}

string_enum! {
    /// `type` of a KubeFedCluster condition.
    pub enum ClusterConditionType {
        Ready => "Ready",
        Offline => "Offline",
        ConfigMalformed => "ConfigMalformed",
    }
}

string_enum! {
    /// `reason` of a KubeFedCluster condition, as KubeFed's health controller writes it.
    pub enum ClusterConditionReason {
        ClusterReady => "ClusterReady",
        ClusterNotReady => "ClusterNotReady",
        ClusterReachable => "ClusterReachable",
        ClusterNotReachable => "ClusterNotReachable",
        ClusterConfigMalformed => "ClusterConfigMalformed",
    }
}

/// Message of `Ready=True`.
pub const MESSAGE_HEALTHZ_OK: &str = "/healthz responded with ok";
/// Message of `Ready=False`.
pub const MESSAGE_HEALTHZ_NOT_OK: &str = "/healthz responded without ok";
/// Message of `Offline=False` (reachable but not ready).
pub const MESSAGE_CLUSTER_REACHABLE: &str = "cluster is reachable";
/// Prefix of the `Offline=True` message; KubeFed appends `": <error>"`.
pub const MESSAGE_CLUSTER_NOT_REACHABLE: &str = "cluster is not reachable";
/// Message of `ConfigMalformed=True`.
pub const MESSAGE_CONFIG_MALFORMED: &str = "cluster's configuration may be malformed";

/// Warning event reason when no client can be built for a cluster.
pub const EVENT_MALFORMED_CLUSTER_CONFIG: &str = "MalformedClusterConfig";
/// Warning event reason when a health probe fails.
pub const EVENT_RETRIEVING_CLUSTER_HEALTH_FAILED: &str = "RetrievingClusterHealthFailed";

impl KubeFedClusterStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: ClusterConditionType) -> Option<&ClusterCondition> {
        self.conditions
            .iter()
            .find(|condition| condition.type_ == type_.as_str())
    }
}

impl KubeFedCluster {
    /// KubeFed's `IsClusterReady`: a `Ready` condition with status `True` exists.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|status| status.condition(ClusterConditionType::Ready))
            .is_some_and(|condition| condition.status == ConditionStatus::True.as_str())
    }
}
